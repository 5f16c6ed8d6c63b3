/*
 * Barriers: a FLUSH (of one object or of all), a switch to write-through
 * and COPY's source each wait until what the objects held dirty when they
 * came is on the blocker (each clean, or a whole write-back pass begun
 * after they came back: flush.c tells a barrier as each one is), and then
 * go on: a FLUSH forwards the blocker's own FLUSH, COPY goes to its
 * target (engine.c), a policy switch answers.
 */
#include "engine_private.h"

/* Adds `o` (referenced by the caller) to barrier b. */
static void barrier_add(struct barrier *b, struct cache_object *o)
{
	struct flush_waiter *w = calloc(1, sizeof(*w));
	if (!w) {
		atomic_store(&b->error, ENOMEM);
		return;
	}
	atomic_fetch_add(&b->pending, 1);
	obj_get(o);
	w->b = b;
	w->obj = o;
	obj_enqueue(o, &w->work, waiter_job, w);
}

struct cache_object **dirty_snapshot(struct cache_engine *e, size_t *n)
{
	struct cache_object *o;
	size_t i = 0;

	*n = 0;
	pthread_mutex_lock(&e->dirty_lock);
	cds_list_for_each_entry(o, &e->dirty, dirty_link)
		i++;
	struct cache_object **snap = i ? calloc(i, sizeof(*snap)) : NULL;
	if (snap) {
		cds_list_for_each_entry(o, &e->dirty, dirty_link) {
			obj_get(o);     /* the list's reference keeps it alive here */
			snap[(*n)++] = o;
		}
	}
	pthread_mutex_unlock(&e->dirty_lock);
	if (i && !snap)
		errno = ENOMEM;
	return snap;
}

/* Every object dirty right now joins the barrier. */
static void barrier_add_all_dirty(struct barrier *b)
{
	size_t n;
	errno = 0;
	struct cache_object **snap = dirty_snapshot(b->e, &n);
	if (!snap && errno == ENOMEM) {
		atomic_store(&b->error, ENOMEM);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		barrier_add(b, snap[i]);
		obj_put(snap[i]);
	}
	free(snap);
}

/* A barrier for req (-> BARRIER), answered by then() once every object
 * added is clean and the creator's own arrival (barrier_arrive) is in. */
struct barrier *barrier_new(struct cache_engine *e, struct cache_req *req,
				   void (*then)(struct barrier *))
{
	struct barrier *b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	atomic_init(&b->pending, 1);   /* the creator's, dropped by barrier_arrive */
	atomic_fetch_add(&e->barriers_open, 1);
	b->e = e;
	b->req = req;
	b->then = then;
	req_set(req, REQ_BARRIER);
	return b;
}

static void flush_barrier_then(struct barrier *b)
{
	struct cache_engine *e = b->e;
	struct cache_req *req = b->req;
	int error = atomic_load(&b->error);
	free(b);
	/* --persist with syncs: the write-backs cleared their headers in the
	 * page cache only. A policy switch (an unplug, the stop's drain, a
	 * promote) is answered and then the path writes to the blocker past
	 * us: a host crash must not bring back those headers, older than
	 * what it writes. With --persist-sync none too, where write-backs
	 * cleared headers the kernel may have written to the device on its
	 * own: after a host crash recovery would replay those older bytes
	 * over what this FLUSH made durable on the blocker. */
	if (!error && persist_counts(e) &&
	    (e->cfg.persist_sync != PERSIST_SYNC_NONE || clears_pending(e)))
		error = -engine_sync(e);
	if (error) {
		finish(e, req, false, error, 0);
		return;
	}
	forward(e, req, X_FLUSH);   /* the blocker's own FLUSH, then answer */
}

/* Every dirty byte to the blocker, then its FLUSH (a policy switch, and a
 * FLUSH without a persist file synced on FLUSH). */
void flush_all_to_blocker(struct cache_engine *e, struct cache_req *req)
{
	struct barrier *b = barrier_new(e, req, flush_barrier_then);
	if (!b) {
		finish(e, req, false, ENOMEM, 0);
		return;
	}
	barrier_add_all_dirty(b);
	barrier_arrive(b, 0);
}

/* --persist-sync flush|always: a FLUSH is answered once the persist file
 * is synced (every write acknowledged before it is published there) and
 * the blocker's own FLUSH returned (for what went to it uncached); the
 * dirty data stays in the cache. True when it took req. */
static bool flush_by_sync(struct cache_engine *e, struct cache_req *req)
{
	if (!persist_counts(e) || e->cfg.persist_sync == PERSIST_SYNC_NONE)
		return false;
	int rc = engine_sync(e);
	if (rc)
		finish(e, req, false, -rc, 0);
	else
		forward(e, req, X_FLUSH);
	return true;
}

/* A replica's data is written back by promote alone: cached's "flush",
 * "policy writethrough" and "unplug" controls must not, or its older
 * copies could land over what the primary wrote since. */
static bool replica_refuses(struct cache_engine *e, struct cache_req *req)
{
	if (!is_replica(e))
		return false;
	COUNT_ADD(e, rst.refused, 1);
	finish(e, req, false, EPERM, 0);
	return true;
}

/* A primary fenced (marker.c: fence_tick) writes nothing to the blocker:
 * what it holds may be older than the store's. */
static bool fence_refuses(struct cache_engine *e, struct cache_req *req, int entry, int policy)
{
	int fence = atomic_load(&e->fence);
	if (fence == FENCE_NONE)
		return false;
	if (check_wait(e, req, entry, policy, &fence))   /* the start's persist check: it waits */
		return true;
	if (fence == FENCE_NONE)
		return false;   /* the check ended meanwhile */
	finish(e, req, false, fence_error(fence), 0);
	return true;
}

void cache_engine_flush_all(struct cache_engine *e, struct cache_req *req)
{
	req_init(e, req);
	if (replica_refuses(e, req) || fence_refuses(e, req, CHECK_ENTRY_FLUSH_ALL, 0))
		return;
	if (!flush_by_sync(e, req))
		flush_all_to_blocker(e, req);
}

/* req waits (-> BARRIER) until object `name`, if cached, is clean, and
 * then(b) goes on with it. */
void barrier_one(struct cache_engine *e, struct cache_req *req, const char *name,
		 void (*then)(struct barrier *))
{
	struct barrier *b = barrier_new(e, req, then);
	if (!b) {
		finish(e, req, false, ENOMEM, 0);
		return;
	}
	struct cache_object *o = object_find(e, name);   /* evicted dirty ones too */
	if (o) {
		barrier_add(b, o);
		obj_put(o);
	}
	barrier_arrive(b, 0);
}

/* FLUSH of one object: its dirty data, then the blocker's FLUSH of it. */
void flush_one(struct cache_engine *e, struct cache_req *req)
{
	if (flush_by_sync(e, req))
		return;
	barrier_one(e, req, req->name, flush_barrier_then);
}

void cache_engine_stop_write_back(struct cache_engine *e)
{
	atomic_store(&e->policy, (int)CACHE_WRITETHROUGH);
	engine_wait_writes(e);
}

void cache_engine_set_policy(struct cache_engine *e, enum cache_policy p,
			     struct cache_req *req)
{
	req_init(e, req);
	if ((p == CACHE_WRITETHROUGH && replica_refuses(e, req)) ||
	    fence_refuses(e, req, CHECK_ENTRY_POLICY, (int)p))
		return;
	if (p == CACHE_WRITEBACK && persist_failed(e) && !is_replica(e)) {
		/* its syncs fail for good: a restart on a working file */
		finish(e, req, false, atomic_load(&e->persist.sync_error), 0);
		return;
	}
	atomic_store(&e->policy, (int)p);
	if (p == CACHE_WRITETHROUGH) {
		req->switching = true;   /* a primary answers once its replica is safe */
		/* the write-back writes that read the old policy are dirty
		 * (listed below) once they leave: microseconds */
		engine_wait_writes(e);
		flush_all_to_blocker(e, req);   /* no dirty byte stays behind */
	}
	else
		finish(e, req, true, 0, 0);
}
