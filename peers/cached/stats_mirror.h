/*
 * The figures of replicated write-back in cached's "stats" answer
 * (issue 23): a primary's (--mirror-port) and a replica's (--replica).
 */
#ifndef CACHED_STATS_MIRROR_H
#define CACHED_STATS_MIRROR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"

/* Appends ,"mirror_state":...,"replica":... to buf (JSON members); returns
 * what snprintf would (the length wanted). */
int cached_mirror_stats_json(char *buf, size_t len, const struct cache_stats *s, bool mirror,
			     uint32_t mirror_port);

#endif
