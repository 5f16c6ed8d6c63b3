/*
 * cached's own options, parsed by the runtime through peer_ops (see
 * include/peer/peer.h): --blocker-port, sizes, the write policy, the dirty
 * marks and --persist*. A bad value is one line naming it (exit 2).
 */
#ifndef CACHED_OPTIONS_H
#define CACHED_OPTIONS_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

#include "peer/peer.h"
#include "engine.h"

struct cached_opts {
	uint32_t port, blocker_port, mirror_port;
	bool have_blocker_port;
	/* as given, for the messages of cached_check_options */
	const char *csize_arg, *osize_arg, *bsize_arg, *mrs_arg;
	struct cache_config cfg;
};

/* What the command line said, once peer_main has parsed it. */
extern struct cached_opts cached_opts;

extern const struct option cached_options[];
extern const char cached_options_usage[];
int cached_parse_option(struct peer *p, int val, const char *arg);
int cached_check_options(struct peer *p);
/* A stale-replica marker name one may give (--mirror-marker, a reset's):
 * 1 to MARKER_NAME_MAX of A-Z a-z 0-9 . _ - */
bool cached_marker_name_ok(const char *name);

#endif
