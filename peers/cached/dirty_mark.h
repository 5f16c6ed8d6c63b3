/*
 * Fail closed (include/xseg/xseg.h, xseg_port_set_dirty): cached says on
 * its port whether it holds acknowledged data its blocker lacks, so that
 * if it dies (or gives up) with such data the path fails instead of
 * serving the blocker's older bytes.
 *
 * The mark is set before any client write is handed to the engine (so
 * before it can be acknowledged) and cleared only when nothing is dirty
 * and no write is under way. The write path costs one atomic add
 * and one subtract per WRITE, and a store only when the mark was clear.
 *
 * One cache per process: the state is this file's.
 */
#ifndef CACHED_DIRTY_MARK_H
#define CACHED_DIRTY_MARK_H

#include <stdint.h>

#include "xseg/xseg.h"
#include "engine.h"

/* What a cache that had the port before us left marked (0: nothing). */
uint64_t dirty_mark_left(struct xseg *seg, uint32_t port);

void dirty_mark_init(struct xseg *seg, uint32_t port, struct cache_engine *e);
/* Around a client WRITE: before the engine sees it, once it is answered. */
void dirty_mark_write_begin(void);
void dirty_mark_write_end(void);
/* From the maintenance thread (and after a clean drain): publishes the
 * dirty bytes, or clears the mark when nothing is dirty or under way. */
void dirty_mark_update(void);

#endif
