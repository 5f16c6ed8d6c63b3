/*
 * Volume lists as operators write them, for every peer that is told the
 * volumes (vlmcd composes them; nbdd, which asks vlmcd for them, may be
 * told a subset to check): `--volume NAME:SIZE` and `--volumes-file F`
 * (lines "NAME SIZE", '#' comments). Part of libpeer; the peer keeps the
 * list in its own structures.
 */
#ifndef PEER_VOLUMES_H
#define PEER_VOLUMES_H

#include <stdint.h>

#include "xseg/xseg.h"

/* Longest volume name: an object name "<volume>_<16 hex digits>" must fit
 * in a target. */
#define PEER_VOLUME_NAME_MAX (XSEG_MAX_TARGETLEN - 17u)

/* Called for each volume, name checked (1..PEER_VOLUME_NAME_MAX bytes, no
 * '/' or blanks, not starting with '.') and size parsed (> 0). Returns 0,
 * or -1 after printing one line (peer_arg_error with `opt`). */
typedef int (*peer_volume_fn)(void *ctx, const char *opt, const char *name, uint64_t size);

/* One `--volume NAME:SIZE` argument. 0, or -1 after one line on stderr. */
int peer_volume_arg(const char *opt, const char *arg, peer_volume_fn add, void *ctx);
/* Every line of a volumes file; a bad line is named by its number. */
int peer_volumes_file(const char *opt, const char *path, peer_volume_fn add, void *ctx);

#endif /* PEER_VOLUMES_H */
