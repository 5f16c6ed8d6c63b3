/*
 * The figures of replicated write-back, as JSON members of cached's
 * "stats" answer. A primary: where it stands with its replica, what it
 * mirrored, how long a mirror request takes there and back, how often
 * and how long it was degraded, and the exposure of the last
 * degradation (the dirty bytes that existed on the primary alone, and
 * how long until they were on the blocker). A replica: what it took,
 * dropped, refused.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "stats_mirror.h"

int cached_mirror_stats_json(char *buf, size_t len, const struct cache_stats *s, bool mirror,
			     uint32_t mirror_port)
{
	char port[16] = "null";
	if (mirror)
		snprintf(port, sizeof(port), "%u", mirror_port);
	return snprintf(buf, len,
		",\"mirror_state\":\"%s\",\"mirror_port\":%s,\"mirror_writes\":%" PRIu64
		",\"mirrored_bytes\":%" PRIu64 ",\"mirror_cleans\":%" PRIu64
		",\"mirror_failures\":%" PRIu64 ",\"mirror_in_flight\":%" PRIu64
		",\"mirror_rtt_avg_us\":%" PRIu64 ",\"mirror_unsent\":%" PRIu64
		",\"mirror_error\":\"%s\",\"degradations\":%" PRIu64 ",\"degraded_ms_total\":%" PRIu64
		",\"exposure_bytes\":%" PRIu64 ",\"exposure_ms\":%" PRIu64
		",\"replica\":%s,\"replica_writes\":%" PRIu64 ",\"replica_cleans\":%" PRIu64
		",\"replica_resets\":%" PRIu64 ",\"replica_refused\":%" PRIu64,
		cache_mirror_state_name(s->mirror_state), port, s->mirror_writes, s->mirrored_bytes,
		s->mirror_cleans, s->mirror_failures, s->mirror_in_flight, s->mirror_rtt_avg_us,
		s->mirror_waits, s->mirror_error ? strerror(s->mirror_error) : "",
		s->degradations, s->degraded_ns_total / 1000000, s->exposure_bytes,
		s->exposure_ns / 1000000, s->replica ? "true" : "false", s->replica_writes,
		s->replica_cleans, s->replica_resets, s->replica_refused);
}
