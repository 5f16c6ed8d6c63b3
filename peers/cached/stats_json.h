/*
 * cached's figures for the runtime's "stats" answer (peer_ops.stats):
 * JSON members, each starting with a comma.
 */
#ifndef CACHED_STATS_JSON_H
#define CACHED_STATS_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"

/* The engine's figures; mirror_port -1 without --mirror-port. Returns
 * what snprintf would (the length wanted; fewer volumes are named in
 * dirty_by_volume, the rest summed, until the answer fits). */
int cached_stats_json(struct cache_engine *e, uint32_t blocker_port, int mirror_port,
		      char *buf, size_t len);

#endif
