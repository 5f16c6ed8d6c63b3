/*
 * cached's figures in the answer to "stats" (after the runtime's own
 * fields): the cache's counters, its write-back mirror's or replica's,
 * and the dirty bytes by volume, as JSON members.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "stats_json.h"

/* A primary's figures (--mirror-port): where it stands with its replica,
 * what it mirrored, a mirror request's round trip, how often and how long
 * it was degraded, and the last degradation's exposure (the dirty bytes
 * on the primary alone, and how long until they were on the blocker); a
 * replica's: what it took, dropped, refused. The stale-replica marker:
 * its name (a replica's: from its primary's last reset), what the
 * blocker holds (a primary's writes of it, failed ones, answers held for
 * it), a replica's promotes refused and what the last checked one read. */
static int mirror_json(char *buf, size_t len, const struct cache_stats *s, int mirror_port)
{
	char port[16] = "null";
	if (mirror_port >= 0)
		snprintf(port, sizeof(port), "%d", mirror_port);
	return snprintf(buf, len,
		",\"mirror_state\":\"%s\",\"mirror_port\":%s,\"mirror_writes\":%" PRIu64
		",\"mirrored_bytes\":%" PRIu64 ",\"mirror_cleans\":%" PRIu64
		",\"mirror_failures\":%" PRIu64 ",\"mirror_in_flight\":%" PRIu64
		",\"mirror_rtt_avg_us\":%" PRIu64 ",\"mirror_waits\":%" PRIu64
		",\"mirror_lost\":%" PRIu64
		",\"mirror_error\":\"%s\",\"degradations\":%" PRIu64 ",\"degraded_ms_total\":%" PRIu64
		",\"exposure_bytes\":%" PRIu64 ",\"exposure_ms\":%" PRIu64
		",\"replica\":%s,\"replica_unsure\":%s,\"replica_writes\":%" PRIu64 ",\"replica_cleans\":%" PRIu64
		",\"replica_resets\":%" PRIu64 ",\"replica_refused\":%" PRIu64
		",\"replica_primary_changes\":%" PRIu64
		",\"mirror_marker\":\"%s\",\"marker_state\":\"%s\",\"marker_writes\":%" PRIu64
		",\"marker_failures\":%" PRIu64 ",\"marker_held\":%" PRIu64
		",\"promotes_refused\":%" PRIu64 ",\"promote_marker_said\":\"%s\"",
		cache_mirror_state_name(s->mirror_state), port, s->mirror_writes, s->mirrored_bytes,
		s->mirror_cleans, s->mirror_failures, s->mirror_in_flight, s->mirror_rtt_avg_us,
		s->mirror_waits, s->mirror_lost, s->mirror_error ? strerror(s->mirror_error) : "",
		s->degradations, s->degraded_ns_total / 1000000, s->exposure_bytes,
		s->exposure_ns / 1000000, s->replica ? "true" : "false",
		s->replica_unsure ? "true" : "false", s->replica_writes,
		s->replica_cleans, s->replica_resets, s->replica_refused,
		s->replica_primary_changes, s->marker_name,
		marker_state_name(s->marker_state), s->marker_writes, s->marker_failures,
		s->marker_held, s->promotes_refused, marker_state_name(s->promote_marker_said));
}

#define STATS_VOLUMES 16   /* volumes named in "stats"; the rest summed */

/* ,"dirty_by_volume":{"NAME":BYTES,...},"dirty_other_volumes_bytes":N */
static size_t dirty_by_volume(char *buf, size_t len, const struct cache_volume_dirty *v,
			      unsigned n, uint64_t rest)
{
	size_t k = (size_t)snprintf(buf, len, ",\"dirty_by_volume\":{");
	for (unsigned i = 0; i < n && k < len; i++) {
		k += (size_t)snprintf(buf + k, len - k, "%s\"", i ? "," : "");
		for (const char *c = v[i].name; *c && k < len; c++)   /* JSON-escaped */
			k += (size_t)snprintf(buf + k, len - k,
					      *c == '"' || *c == '\\' ? "\\%c" :
					      (unsigned char)*c < 0x20 ? "\\u%04x" : "%c",
					      (unsigned char)*c);
		if (k < len)
			k += (size_t)snprintf(buf + k, len - k, "\":%" PRIu64, v[i].bytes);
	}
	if (k < len)
		k += (size_t)snprintf(buf + k, len - k, "},\"dirty_other_volumes_bytes\":%" PRIu64,
				      rest);
	return k;
}

int cached_stats_json(struct cache_engine *e, uint32_t blocker_port, int mirror_port,
		      char *buf, size_t len)
{
	struct cache_stats s;
	cache_engine_stats(e, &s);
	int k = snprintf(buf, len,
		",\"blocker_port\":%u,\"policy\":\"%s\",\"hits\":%" PRIu64
		",\"misses\":%" PRIu64 ",\"partial_hits\":%" PRIu64 ",\"parallel_hits\":%" PRIu64
		",\"read_bytes\":%" PRIu64
		",\"write_bytes\":%" PRIu64 ",\"blocker_read_bytes\":%" PRIu64
		",\"blocker_write_bytes\":%" PRIu64 ",\"dirty_bytes\":%" PRIu64
		",\"cached_bytes\":%" PRIu64 ",\"free_bytes\":%" PRIu64 ",\"objects\":%" PRIu64
		",\"object_nodes\":%" PRIu64 ",\"object_nodes_max\":%" PRIu64
		",\"evictions\":%" PRIu64 ",\"clean_released_bytes\":%" PRIu64
		",\"flushes\":%" PRIu64 ",\"flush_failures\":%" PRIu64
		",\"flush_backoff_ms\":%" PRIu64 ",\"flush_error\":\"%s\""
		",\"flush_avg_us\":%.1f,\"waits\":%" PRIu64 ",\"node_refusals\":%" PRIu64
		",\"uncached\":%" PRIu64
		",\"lent\":%" PRIu64 ",\"raced_writes\":%" PRIu64 ",\"rereads\":%" PRIu64
		",\"failed\":%" PRIu64 ",\"blocker_in_flight\":%" PRIu64
		",\"barriers_open\":%" PRIu64 ",\"barrier_waiters\":%" PRIu64
		",\"persist\":%s,\"persist_dirty_bytes\":%" PRIu64 ",\"recoveries\":%" PRIu64
		",\"recovered_bytes\":%" PRIu64 ",\"persist_dropped\":%" PRIu64
		",\"persist_syncs\":%" PRIu64 ",\"persist_sync_avg_us\":%" PRIu64
		",\"persist_forced_full\":%" PRIu64 ",\"persist_forced_spares\":%" PRIu64
		",\"persist_forced_writeback\":%" PRIu64 ",\"persist_sync_error\":\"%s\""
		",\"fence\":\"%s\",\"persist_marker\":\"%s\",\"persist_marker_found\":\"%s\""
		",\"persist_marker_held\":%" PRIu64 ",\"persist_marker_failures\":%" PRIu64
		",\"persist_marker_dropped_bytes\":%" PRIu64 ",\"persist_marker_refused\":%" PRIu64
		",\"persist_marker_read_failures\":%" PRIu64 ",\"persist_marker_read_error\":\"%s\""
		",\"persist_check_ms\":%" PRIu64,
		blocker_port, s.policy == CACHE_WRITEBACK ? "writeback" : "writethrough",
		s.hits, s.misses, s.partial_hits, s.parallel_hits, s.read_bytes, s.write_bytes,
		s.blocker_read_bytes, s.blocker_write_bytes, s.dirty_bytes, s.cached_bytes,
		s.free_bytes, s.objects, s.object_nodes, s.object_nodes_max, s.evictions, s.clean_released_bytes, s.flushes, s.flush_failures,
		s.flush_backoff_ns / 1000000, s.flush_error ? strerror(s.flush_error) : "",
		s.flushes ? (double)s.flush_ns_total / (double)s.flushes / 1e3 : 0.0,
		s.waits, s.node_refusals, s.uncached, s.lent, s.raced_writes, s.rereads, s.failed, s.blocker_in_flight, s.barriers_open,
		s.barrier_waiters, s.persist ? "true" : "false", s.persist_dirty_bytes,
		s.recoveries, s.recovered_bytes, s.persist_dropped, s.persist_syncs,
		s.persist_sync_avg_us, s.persist_forced_full, s.persist_forced_spares,
		s.persist_forced_writeback, s.persist_sync_error ? strerror(s.persist_sync_error) : "",
		cache_fence_name(s.fence), cache_persist_marker_name(s.persist_marker),
		cache_persist_marker_name(s.persist_marker_found), s.persist_marker_held,
		s.persist_marker_failures, s.persist_marker_dropped_bytes, s.persist_marker_refused,
		s.persist_marker_read_failures,
		s.persist_marker_read_error ? strerror(s.persist_marker_read_error) : "",
		s.persist_check_ms);
	if (k >= 0 && (size_t)k < len)
		k += mirror_json(buf + k, len - (size_t)k, &s, mirror_port);
	if (k < 0 || (size_t)k >= len)
		return k;
	/* Fewer volumes named (the rest summed) until they fit the reply. */
	struct cache_volume_dirty v[STATS_VOLUMES];
	uint64_t rest;
	unsigned n = cache_engine_dirty_by_volume(e, v, STATS_VOLUMES, &rest);
	for (;;) {
		size_t more = dirty_by_volume(buf + k, len - (size_t)k, v, n, rest);
		if (more < len - (size_t)k || !n)
			return k + (int)more;
		rest += v[--n].bytes;
	}
}

