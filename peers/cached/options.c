/*
 * cached's own options (the runtime parses the common ones): the table,
 * the --help text, each value checked as it comes and the relations
 * between them once all are in. The result is cached_opts, which cached.c
 * reads at init.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "xseg/xseg.h"
#include "options.h"

struct cached_opts cached_opts = {
	.osize_arg = "4M", .bsize_arg = "4K", .mrs_arg = "512K",
	.cfg = { .max_objects = 1024, .object_size = 4u << 20, .bucket_size = 4096,
		 .max_request_size = 512u << 10, .policy = CACHE_WRITEBACK,
		 .dirty_high_pct = 75, .dirty_low_pct = 50 },
};
#define O cached_opts

enum { O_BPORT = 1, O_CSIZE, O_MAXOBJ, O_OSIZE, O_BSIZE, O_MRS, O_POLICY, O_HIGH, O_LOW,
       O_PERSIST, O_PSYNC, O_PDISCARD, O_MPORT, O_MFAIL, O_REPLICA, O_MARKER };

const struct option cached_options[] = {
	{ "blocker-port", required_argument, NULL, O_BPORT },
	{ "cache-size", required_argument, NULL, O_CSIZE },
	{ "max-objects", required_argument, NULL, O_MAXOBJ },
	{ "object-size", required_argument, NULL, O_OSIZE },
	{ "bucket-size", required_argument, NULL, O_BSIZE },
	{ "max-request-size", required_argument, NULL, O_MRS },
	{ "write-policy", required_argument, NULL, O_POLICY },
	{ "dirty-high", required_argument, NULL, O_HIGH },
	{ "dirty-low", required_argument, NULL, O_LOW },
	{ "persist", required_argument, NULL, O_PERSIST },
	{ "persist-sync", required_argument, NULL, O_PSYNC },
	{ "persist-discard", no_argument, NULL, O_PDISCARD },
	{ "mirror-port", required_argument, NULL, O_MPORT },
	{ "mirror-fail", required_argument, NULL, O_MFAIL },
	{ "replica", no_argument, NULL, O_REPLICA },
	{ "mirror-marker", required_argument, NULL, O_MARKER },
	{ NULL, 0, NULL, 0 },
};

const char cached_options_usage[] =
"  --blocker-port N        the blocker behind the cache (required)\n"
"  --cache-size SIZE       bytes of cached data (K, M, G suffixes), a multiple\n"
"                          of the bucket size (required)\n"
"  --max-objects N         objects indexed at once (default 1024)\n"
"  --object-size SIZE      object size, a multiple of the bucket size (default 4M)\n"
"  --bucket-size SIZE      unit of caching, a power of two >= 512 (default 4K)\n"
"  --max-request-size SIZE largest request to the blocker (default 512K)\n"
"  --write-policy writeback|writethrough   (default writeback)\n"
"  --dirty-high PCT        flusher starts above this share dirty (default 75)\n"
"  --dirty-low PCT         ... and stops below this (default 50)\n"
"  --persist PATH          keep the cache (dirty data and what it is) in the file\n"
"                          PATH, so write-back data survives a crash of cached;\n"
"                          a restart on PATH recovers it before serving\n"
"  --persist-sync flush|always|none   when PATH is synced (default flush): on\n"
"                          FLUSH and FUA, on every write-back write, or never\n"
"                          for a write (then only a crash of cached, not of the\n"
"                          host, keeps dirty data; a FLUSH or FUA write still\n"
"                          syncs what write-back cleared, so a host crash never\n"
"                          brings back bytes older than it)\n"
"  --persist-discard       start PATH afresh, dropping the dirty data it holds\n"
"  (cached --persist-inspect PATH [--json], alone: what PATH holds, read only)\n"
"  --mirror-port M         answer a write-back write only once a replica cached\n"
"                          (reached through port M, a synapsed) holds it too\n"
"  --mirror-fail degrade|stop   the replica unreachable: write through until it\n"
"                          answers again (default degrade), or fail the writes\n"
"  --mirror-marker NAME    the blocker object in which the primary says whether\n"
"                          its replica holds every write it answered; a promote\n"
"                          of the replica reads it (default\n"
"                          cached-mirror-marker.HOSTNAME.SEGMENT.PORT)\n"
"  --replica               hold a primary's mirrored writes: no reads, never\n"
"                          written back until `xseg promote --port PORT`\n"
"  (--threads: default half the online CPUs, 1 to 8; --stop-timeout: how long\n"
"  SIGTERM writes back before it gives up and exits 1)\n";

static int size_arg(const char *opt, const char *val, uint64_t *out, const char **as_given)
{
	if (xseg_parse_size(val, out) < 0 || !*out)
		return peer_arg_error(opt, val, "is not a size (e.g. 4K, 64M, 1G)");
	if (as_given)
		*as_given = val;
	return 0;
}

/* --persist, --persist-sync, --persist-discard (issue 22). */
static int persist_option(int val, const char *arg)
{
	if (val == O_PERSIST) {
		if (!*arg)
			return peer_arg_error("--persist", arg, "is not a path");
		O.cfg.persist_path = arg;
	} else if (val == O_PDISCARD) {
		O.cfg.persist_discard = true;
	} else if (!strcmp(arg, "flush")) {
		O.cfg.persist_sync = PERSIST_SYNC_FLUSH;
	} else if (!strcmp(arg, "always")) {
		O.cfg.persist_sync = PERSIST_SYNC_ALWAYS;
	} else if (!strcmp(arg, "none")) {
		O.cfg.persist_sync = PERSIST_SYNC_NONE;
	} else {
		return peer_arg_error("--persist-sync", arg, "is not flush, always or none");
	}
	return 0;
}

int cached_parse_option(struct peer *p, int val, const char *arg)
{
	(void)p;
	uint64_t v;
	switch (val) {
	case O_BPORT:
		if (peer_arg_uint("--blocker-port", arg, 0, XSEG_MAX_PORTS - 1, &v) < 0)
			return -1;
		O.blocker_port = (uint32_t)v;
		O.have_blocker_port = true;
		return 0;
	case O_CSIZE:
		return size_arg("--cache-size", arg, &O.cfg.cache_size, &O.csize_arg);
	case O_MAXOBJ:
		if (peer_arg_uint("--max-objects", arg, 1, 1u << 24, &v) < 0)
			return -1;
		O.cfg.max_objects = (uint32_t)v;
		return 0;
	case O_OSIZE:
		return size_arg("--object-size", arg, &O.cfg.object_size, &O.osize_arg);
	case O_BSIZE:
		if (size_arg("--bucket-size", arg, &v, &O.bsize_arg) < 0)
			return -1;
		if (v > 1u << 30)
			return peer_arg_error("--bucket-size", arg, "is over 1G");
		O.cfg.bucket_size = (uint32_t)v;
		return 0;
	case O_MRS:
		return size_arg("--max-request-size", arg, &O.cfg.max_request_size, &O.mrs_arg);
	case O_POLICY:
		if (!strcmp(arg, "writeback"))
			O.cfg.policy = CACHE_WRITEBACK;
		else if (!strcmp(arg, "writethrough"))
			O.cfg.policy = CACHE_WRITETHROUGH;
		else
			return peer_arg_error("--write-policy", arg, "is not writeback or writethrough");
		return 0;
	case O_HIGH:
	case O_LOW:
		if (peer_arg_uint(val == O_HIGH ? "--dirty-high" : "--dirty-low", arg, 0, 100, &v) < 0)
			return -1;
		*(val == O_HIGH ? &O.cfg.dirty_high_pct : &O.cfg.dirty_low_pct) = (unsigned)v;
		return 0;
	case O_PERSIST:
	case O_PSYNC:
	case O_PDISCARD:
		return persist_option(val, arg);
	case O_MPORT:
		if (peer_arg_uint("--mirror-port", arg, 0, XSEG_MAX_PORTS - 1, &v) < 0)
			return -1;
		O.mirror_port = (uint32_t)v;
		O.cfg.mirror = true;
		return 0;
	case O_MFAIL:
		if (strcmp(arg, "degrade") && strcmp(arg, "stop"))
			return peer_arg_error("--mirror-fail", arg, "is not degrade or stop");
		O.cfg.mirror_fail_stop = !strcmp(arg, "stop");
		return 0;
	case O_REPLICA:
		O.cfg.replica = true;
		return 0;
	case O_MARKER:
		if (!cached_marker_name_ok(arg))
			return peer_arg_error("--mirror-marker", arg, "is not a name of 1 to 200 of "
					      "A-Z a-z 0-9 . _ -");
		O.cfg.mirror_marker = arg;
		return 0;
	}
	return -1;
}

/* What a marker's name may hold: a blocker object name any store takes. */
#define MARKER_NAME_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-"

bool cached_marker_name_ok(const char *name)
{
	size_t n = strlen(name);
	return n && n <= MARKER_NAME_MAX && strspn(name, MARKER_NAME_CHARS) == n;
}

static void marker_chars(char *s)
{
	for (char *c = s; *c; c++)   /* a hostname is already of these, nearly */
		if (!strchr(MARKER_NAME_CHARS, *c))
			*c = '_';
}

/* A primary's marker, unless named: this host's, this segment's and this
 * port's, the same at every start (its replica must find what it said
 * last). The segment too: two primaries on one port of two segments of a
 * host shared one marker, and one's `mirrored` let the other's stale
 * replica be promoted (a review: 8M of older data over acknowledged
 * writes). A segment name too long for it is given by its hash. */
static const char *default_marker(const char *segment, uint32_t port)
{
	static char name[MARKER_NAME_MAX + 1];
	char host[65] = "", seg[XSEG_NAME_MAX + 1];
	if (gethostname(host, sizeof(host) - 1) < 0 || !host[0])
		snprintf(host, sizeof(host), "localhost");
	marker_chars(host);
	snprintf(seg, sizeof(seg), "%s", segment ? segment : "");
	marker_chars(seg);
	int n = snprintf(name, sizeof(name), "cached-mirror-marker.%s.%s.%u", host, seg, port);
	if (n < 0 || (size_t)n >= sizeof(name))
		snprintf(name, sizeof(name), "cached-mirror-marker.%s.%016llx.%u", host,
			 (unsigned long long)XXH3_64bits(segment, strlen(segment)), port);
	return name;
}

/* The relations between the options; the engine would refuse most of
 * these too, without naming the value. */
int cached_check_options(struct peer *p)
{
	uint32_t bs = O.cfg.bucket_size;
	O.port = peer_port(p);
	if (!O.have_blocker_port || !O.cfg.cache_size) {
		fprintf(stderr, "cached: --blocker-port and --cache-size are required (see --help)\n");
		return -1;
	}
	if (peer_port_last(p) != O.port && peer_lanes(p) == 1) {
		fprintf(stderr, "cached: --port %u-%u: cached serves one port (--lanes splits "
			"its queue)\n", O.port, peer_port_last(p));
		return -1;
	}
	uint32_t last = peer_port_last(p);
	if (O.blocker_port >= O.port && O.blocker_port <= last) {
		if (O.blocker_port == O.port)
			fprintf(stderr, "cached: --port and --blocker-port are both %u\n", O.port);
		else
			fprintf(stderr, "cached: --blocker-port %u is one of --port %u's lanes "
				"(%u-%u)\n", O.blocker_port, O.port, O.port, last);
		return -1;
	}
	bool mirror_own = O.mirror_port >= O.port && O.mirror_port <= last;
	if (O.cfg.mirror && (mirror_own || O.mirror_port == O.blocker_port)) {
		fprintf(stderr, "cached: --mirror-port %u is the cache's %s port\n", O.mirror_port,
			mirror_own ? "own" : "blocker");
		return -1;
	}
	if (O.cfg.mirror && O.cfg.replica) {
		fprintf(stderr, "cached: --mirror-port and --replica: a cache is a primary or a "
			"replica, not both\n");
		return -1;
	}
	if (O.cfg.mirror_marker && !O.cfg.mirror) {
		fprintf(stderr, "cached: --mirror-marker goes with --mirror-port (a replica "
			"learns its primary's from the primary)\n");
		return -1;
	}
	if (O.cfg.mirror && !O.cfg.mirror_marker)
		O.cfg.mirror_marker = default_marker(peer_segment_name(p), O.port);
	if (bs < 512 || (bs & (bs - 1)))
		return peer_arg_error("--bucket-size", O.bsize_arg,
				      "is not a power of two of at least 512");
	if (O.cfg.object_size % bs) {
		fprintf(stderr, "cached: --object-size: '%s' is not a multiple of --bucket-size %u\n",
			O.osize_arg, bs);
		return -1;
	}
	if (O.cfg.cache_size % bs) {
		fprintf(stderr, "cached: --cache-size: '%s' is not a multiple of --bucket-size %u\n",
			O.csize_arg, bs);
		return -1;
	}
	if (O.cfg.max_request_size < bs) {
		fprintf(stderr, "cached: --max-request-size: '%s' is less than --bucket-size %u\n",
			O.mrs_arg, bs);
		return -1;
	}
	if (O.cfg.dirty_low_pct > O.cfg.dirty_high_pct) {
		fprintf(stderr, "cached: --dirty-low %u is above --dirty-high %u\n",
			O.cfg.dirty_low_pct, O.cfg.dirty_high_pct);
		return -1;
	}
	return 0;
}
