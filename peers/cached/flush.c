/*
 * Write-back: an object's dirty buckets go to the blocker in runs of at
 * most max_run buckets (a flush), never two flushes of one object at once
 * nor a flush beside an uncached write of it; at most MAX_FLUSH_BIOS flush
 * writes in flight; a blocker that fails writes gets a growing pause.
 * When an object's flushes all came back and it is clean, or they were a
 * whole pass (every bucket dirty when it began) begun after a waiter came,
 * the barriers waiting for it (its waiters: a FLUSH, a policy switch,
 * COPY's source) are told; barrier.c builds those barriers.
 */
#include "engine_private.h"

static void flush_job(struct xwork *w, void *arg);

/* Asks for a flush of `o` (from any thread; the caller holds a reference). */
void queue_flush(struct cache_object *o)
{
	bool expected = false;
	if (!atomic_compare_exchange_strong(&o->flush_queued, &expected, true))
		return;
	obj_get(o);
	obj_enqueue(o, &o->flush_work, flush_job, o);
}

/* Tells the waiters that came before pass `before` began (all: UINT64_MAX). */
static void notify_waiters(struct cache_object *o, int error, uint64_t before)
{
	struct flush_waiter *w = o->waiters, **keep = &o->waiters;
	o->waiters = NULL;
	while (w) {
		struct flush_waiter *next = w->next;
		if (w->after >= before) {
			w->next = NULL;
			*keep = w;
			keep = &w->next;
			w = next;
			continue;
		}
		atomic_fetch_sub(&o->e->barrier_waiters, 1);
		barrier_arrive(w->b, error);
		obj_put(w->obj);
		free(w);
		w = next;
	}
}

/* The object's flushes all came back. */
static void flush_cycle_done(struct cache_object *o)
{
	int error = o->flush_error;
	o->flush_error = 0;
	o->last_flush_error = error;
	if (object_clean(o)) {
		o->flush_deferred = false;
		notify_waiters(o, 0, UINT64_MAX);
		mark_clean(o);
	} else if (error) {
		notify_waiters(o, error, UINT64_MAX);   /* dirty data stays for a later try */
	} else {
		if (o->pass_whole)   /* dirty again since it began: newer bytes */
			notify_waiters(o, 0, o->passes);
		if ((o->flush_again || o->waiters || o->flush_deferred) &&
		    !atomic_load(&o->flush_io_wait))
			queue_flush(o);
	}
	o->pass_whole = false;
	o->flush_again = false;
	run_parked(o);
}

bool flush_budget_cond(void *arg)
{
	struct cache_engine *e = arg;
	return atomic_load(&e->flush_bios) < MAX_FLUSH_BIOS;
}

/* A flush write failed: the pause grows once per round, the writes sent
 * before it last grew being the same round failing. */
static void backoff_failed(struct cache_engine *e, const struct cache_bio *bio, int error)
{
	uint64_t now = now_ns();
	pthread_mutex_lock(&e->backoff_lock);
	if (!atomic_load(&e->flush_error))
		e->failing_since_ns = now;
	atomic_store(&e->flush_error, error);
	if (bio->started_ns >= e->backoff_step_ns) {
		uint64_t b = atomic_load(&e->backoff_ns) * 2;
		b = b < FLUSH_BACKOFF_MIN_NS ? FLUSH_BACKOFF_MIN_NS
		  : b > FLUSH_BACKOFF_MAX_NS ? FLUSH_BACKOFF_MAX_NS : b;
		e->backoff_step_ns = now;
		atomic_store(&e->backoff_ns, b);
		atomic_store(&e->retry_at_ns, now + b);
	}
	pthread_mutex_unlock(&e->backoff_lock);
}

static void backoff_succeeded(struct cache_engine *e)
{
	if (!atomic_load(&e->backoff_ns) && !atomic_load(&e->flush_error))
		return;
	pthread_mutex_lock(&e->backoff_lock);
	atomic_store(&e->flush_error, 0);
	atomic_store(&e->backoff_ns, 0);
	atomic_store(&e->retry_at_ns, 0);
	atomic_store(&e->node_refusal, 0);
	pthread_mutex_unlock(&e->backoff_lock);
}

static void flush_write_done_job(struct xwork *w, void *arg)
{
	(void)w;
	struct cache_bio *bio = arg;
	struct cache_object *o = bio->owner;
	struct cache_engine *e = o->e;
	bool ok = bio->served && bio->serviced == bio->size;

	atomic_fetch_sub(&e->flush_bios, 1);
	if (!xwaitq_empty(&e->flush_waitq))
		xwaitq_signal(&e->flush_waitq);

	uint32_t run = 0;   /* buckets just before i that went VALID */
	for (uint32_t i = bio->first; i < bio->first + bio->count; i++) {
		if (o->b.state[i] != BUCKET_WRITING) {
			/* rewritten meanwhile: DIRTY, flushed next time */
			if (run && e->written_back)
				e->written_back(o, i - run, run);
			run = 0;
			continue;
		}
		if (ok)
			unpublish(o, i);   /* on the blocker: clean cache, no longer dirty */
		bucket_set(&o->b, &e->totals, i, ok ? BUCKET_VALID : BUCKET_DIRTY);
		run += ok;
	}
	if (run && e->written_back)   /* the replica may drop them (mirror.c) */
		e->written_back(o, bio->first + bio->count - run, run);
	if (ok) {
		STAT_ADD(e, blocker_write_bytes, bio->size);
		backoff_succeeded(e);
	} else {
		STAT_ADD(e, flush_failures, 1);
		o->flush_error = bio->error ? bio->error : EIO;
		backoff_failed(e, bio, o->flush_error);
	}
	STAT_ADD(e, flush_ns_total, now_ns() - bio->started_ns);
	bio_release(e, bio);
	if (--o->flushes == 0)
		flush_cycle_done(o);
	obj_put(o);
}

static void flush_after_io_wait(struct xwork *w, void *arg)
{
	(void)w;
	struct cache_object *o = arg;
	atomic_store(&o->flush_io_wait, false);
	queue_flush(o);
	obj_put(o);
}

/*
 * Every blocker request is out (io_waitq), or the flush budget is spent
 * (flush_waitq): flush again once one comes back. Re-queueing at once would
 * spin on this object's queue, on the very threads that should receive the
 * replies.
 */
static void flush_when_freed(struct cache_object *o, struct xwaitq *wq)
{
	bool expected = false;
	if (!atomic_compare_exchange_strong(&o->flush_io_wait, &expected, true))
		return;
	obj_get(o);
	STAT_ADD(o->e, waits, 1);
	xwork_init(&o->flush_io_work, flush_after_io_wait, o);
	xwaitq_enqueue(wq, &o->flush_io_work);
}

static void flush_job(struct xwork *w, void *arg)
{
	(void)w;
	struct cache_object *o = arg;
	struct cache_engine *e = o->e;
	atomic_store(&o->flush_queued, false);
	bool was_deferred = o->flush_deferred;
	o->flush_deferred = false;

	if (o->flushes || o->through_writes) {
		/* Never two flushes of one object, nor a flush beside an uncached
		 * write: either could land on the blocker after newer data. */
		o->flush_again = true;
		o->flush_deferred = o->through_writes > 0;
	} else if (!o->waiters && !o->deleting && backing_off(e, now_ns())) {
		/* The flusher's own try, while the blocker fails writes: the
		 * maintainer asks again after the pause. A FLUSH or an unplug
		 * waiting (o->waiters), or a DELETE (drop.c), tries at once: the
		 * disk may have room. */
		if (was_deferred)
			run_parked(o);
	} else {
		uint32_t i = 0, len;
		o->passes++;
		o->pass_whole = true;
		while ((i = bucket_find_run(&o->b, i, o->b.n - 1, BUCKET_DIRTY, e->max_run, &len)) < o->b.n) {
			uint64_t off = (uint64_t)i * e->geo.bucket_size;
			uint64_t size = (uint64_t)len * e->geo.bucket_size;
			bool budget = atomic_load(&e->flush_bios) < MAX_FLUSH_BIOS;
			struct cache_bio *bio = budget ? bio_alloc(e, X_WRITE, o->name, off, size,
								   NULL) : NULL;
			if (!bio) {
				o->pass_whole = false;
				if (o->flushes)
					o->flush_again = true;   /* when those come back */
				else
					flush_when_freed(o, budget ? &e->io_waitq : &e->flush_waitq);
				break;
			}
			atomic_fetch_add(&e->flush_bios, 1);
			/* --persist with syncs: the bucket's header is cleared when
			 * this write is answered, so by then the blocker must have it
			 * durable (FUA), or a host crash that takes the blocker's
			 * volatile cache too loses bytes a FLUSH said were safe. */
			if (e->persisting && e->cfg.persist_sync != PERSIST_SYNC_NONE)
				bio->flags |= XF_FUA;
			for (uint32_t k = 0; k < len; k++) {
				bucket_copy(o, i + k, off, size, bio->data, false);
				bucket_set(&o->b, &e->totals, i + k, BUCKET_WRITING);
			}
			bio->first = i;
			bio->count = len;
			bio->started_ns = now_ns();
			o->flushes++;
			STAT_ADD(e, flushes, 1);
			bio_send(o, bio, flush_write_done_job);
			i += len;
		}
		if (o->flushes == 0)
			flush_cycle_done(o);
	}
	obj_put(o);
}
/* ---- an object's waiters for "clean" ---------------------------------------- */

/* One object of barrier b is clean (or failed to be): the last runs b->then. */
void barrier_arrive(struct barrier *b, int error)
{
	if (error)
		atomic_store(&b->error, error);
	if (atomic_fetch_sub(&b->pending, 1) == 1) {
		atomic_fetch_sub(&b->e->barriers_open, 1);
		b->then(b);
	}
}

/* On the object's queue: arrive now if clean, else when its flush ends. */
void waiter_job(struct xwork *work, void *arg)
{
	(void)work;
	struct flush_waiter *w = arg;
	struct cache_object *o = w->obj;
	if (object_clean(o)) {
		barrier_arrive(w->b, 0);
		obj_put(o);
		free(w);
		return;
	}
	w->after = o->passes;   /* a pass out now began before it */
	w->next = o->waiters;
	o->waiters = w;
	atomic_fetch_add(&o->e->barrier_waiters, 1);
	if (o->flushes)
		o->flush_again = true;
	else
		queue_flush(o);
}

/* ---- the flusher's tick ---------------------------------------------------------- */

/* Asks the oldest-dirtied objects (at most FLUSH_OBJECTS_PER_TICK) to
 * flush; they go to the back of the dirty list. */
void flush_oldest(struct cache_engine *e)
{
	struct cache_object *batch[FLUSH_OBJECTS_PER_TICK];
	unsigned n = 0;
	pthread_mutex_lock(&e->dirty_lock);
	while (n < FLUSH_OBJECTS_PER_TICK && !cds_list_empty(&e->dirty)) {
		struct cache_object *o = cds_list_first_entry(&e->dirty, struct cache_object,
							      dirty_link);
		if (n && o == batch[0])
			break;
		cds_list_del(&o->dirty_link);
		cds_list_add_tail(&o->dirty_link, &e->dirty);
		obj_get(o);
		batch[n++] = o;
	}
	pthread_mutex_unlock(&e->dirty_lock);
	for (unsigned i = 0; i < n; i++) {
		queue_flush(batch[i]);
		obj_put(batch[i]);
	}
}
