/*
 * cached's dirty mark on its port; see dirty_mark.h.
 *
 * Why a write can never be acknowledged while the port says clean (all
 * seq_cst): a writer counts itself in `writes`, then looks at `clearing`;
 * the clearer raises `clearing`, then looks at `writes`. One of them sees
 * the other: either the clearer sees the write and keeps the mark, or the
 * writer sees the clear under way and waits for it on the lock, then sets
 * the mark again before its write goes to the engine. A writer that finds
 * the mark set and no clear under way goes on without a lock.
 *
 * Every write marks, whatever the policy: the engine reads the policy when
 * it runs the write, so a write accepted under write-through can still
 * land dirty after a switch. A write-through cache is marked only while
 * writes are under way (the last one to end clears it), and so dies
 * clean unless it dies mid-write.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "peer/peer.h"
#include "dirty_mark.h"

static struct {
	struct xseg *seg;
	uint32_t port;
	struct cache_engine *engine;
	_Atomic uint64_t writes;       /* client WRITEs handed to the engine, not answered */
	_Atomic bool marked;
	_Atomic bool clearing;
	pthread_mutex_t lock;          /* setting, clearing: one at a time */
} M = { .lock = PTHREAD_MUTEX_INITIALIZER };

uint64_t dirty_mark_left(struct xseg *seg, uint32_t port)
{
	struct xseg_port_info pi;
	return xseg_port_info(seg, port, &pi) < 0 ? 0 : pi.dirty_bytes;
}

void dirty_mark_init(struct xseg *seg, uint32_t port, struct cache_engine *e)
{
	M.seg = seg;
	M.port = port;
	M.engine = e;
	/* A mark the dead cache left is ours now (we took its data over):
	 * the first update clears it if nothing is dirty. */
	atomic_store(&M.marked, dirty_mark_left(seg, port) != 0);
}

static uint64_t dirty_bytes(void)
{
	struct cache_stats st;
	cache_engine_stats(M.engine, &st);
	return st.dirty_bytes;
}

static void publish(uint64_t bytes)
{
	if (xseg_port_set_dirty(M.seg, M.port, bytes) < 0)
		peer_error("cannot mark port %u dirty: %s", M.port, xseg_last_error());
}

/* Under the lock. The figure may not be known yet: at least 1. */
static void set_locked(void)
{
	if (atomic_load(&M.marked))
		return;
	uint64_t d = cache_engine_clean(M.engine) ? 0 : dirty_bytes();
	publish(d ? d : 1);
	atomic_store(&M.marked, true);
}

void dirty_mark_write_begin(void)
{
	atomic_fetch_add(&M.writes, 1);
	if (!atomic_load(&M.clearing) && atomic_load(&M.marked))
		return;
	pthread_mutex_lock(&M.lock);
	set_locked();
	pthread_mutex_unlock(&M.lock);
}

void dirty_mark_write_end(void)
{
	/* The last write under way, nothing dirty (write-through): cleared
	 * now, before its answer, not at the next maintenance tick. Killed
	 * in between, the cache died marked and its blocker's path failed
	 * EIO for good, over data the blocker already had. */
	if (atomic_fetch_sub(&M.writes, 1) == 1 && atomic_load(&M.marked) &&
	    cache_engine_clean(M.engine))
		dirty_mark_update();
}

void dirty_mark_update(void)
{
	pthread_mutex_lock(&M.lock);
	/* cache_engine_clean first: cheap, for the writes' calls */
	uint64_t d = cache_engine_clean(M.engine) ? 0 : dirty_bytes();
	if (d) {
		publish(d);
		atomic_store(&M.marked, true);
	} else if (atomic_load(&M.marked)) {
		atomic_store(&M.clearing, true);
		if (!atomic_load(&M.writes) && cache_engine_clean(M.engine)) {
			publish(0);
			atomic_store(&M.marked, false);
		}
		atomic_store(&M.clearing, false);
	}
	pthread_mutex_unlock(&M.lock);
}
