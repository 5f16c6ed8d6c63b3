/*
 * The cache engine; see engine.h for the design.
 *
 * Every function named *_job runs on an object's work queue (one at a time
 * per object) and may touch that object's buckets and fields freely.
 * Everything else touches only atomics, the dirty list (under its mutex)
 * and xcache.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <urcu/list.h>
#include <xtypes/xcache.h>
#include <xtypes/xworkq.h>

#include "xseg/xseg.h"
#include "engine.h"

#define MAX_BIOS_IN_FLIGHT  512u
#define FLUSH_OBJECTS_PER_TICK 32u
/* Cold objects asked per maintenance tick to give back their clean buckets. */
#define RECLAIM_OBJECTS_PER_TICK 8u
/* The share of the pool (%) that data written or read twice may keep when
 * data read once wants room (an SLRU's protected segment). */
#define PROTECTED_PCT 80u
/* Flush writes in flight at once. The rest of the blocker requests stay
 * for clients: with a full cache their writes and misses go through, and a
 * flusher that held 485 of 512 (sustained run) made them queue behind it. */
#define MAX_FLUSH_BIOS 64u
/* A blocker that fails write-back (a full disk) gets a pause before the
 * flusher tries again: 1 ms, doubled per round of failures up to 1 s, over
 * at the first success. Without it the flusher retried every tick, tens of
 * thousands of failures a second, a core for us and half one for filed. */
#define FLUSH_BACKOFF_MIN_NS 1000000ull
#define FLUSH_BACKOFF_MAX_NS 1000000000ull

struct cache_object {
	struct xcache_entry *entry;
	struct cache_engine *e;
	const char *name;
	struct object_buckets b;
	struct xworkq wq;
	struct cache_req *parked;          /* re-run when loads/flushes end */
	struct flush_waiter *waiters;      /* barriers waiting for "clean" */
	uint32_t loads, flushes, throughs; /* blocker I/O in flight */
	uint32_t through_writes;           /* of throughs: uncached writes */
	uint32_t writes_waiting;           /* uncached writes parked for loads/flushes */
	bool flush_again, deleting, on_dirty_list;
	/* A flush waits for uncached writes in flight to land: new ones wait
	 * behind it, or a steady stream of them would hold it off for ever. */
	bool flush_deferred;
	int flush_error;                   /* of the current flush cycle */
	_Atomic bool flush_queued;
	_Atomic bool flush_io_wait;        /* a flush waits for a free bio */
	struct xwork flush_io_work;
	_Atomic bool shed_queued;          /* give back its clean buckets */
	struct xwork shed_work;
	_Atomic uint64_t dirty_end;        /* highest byte written back-cached */
	struct xwork flush_work;
	struct cds_list_head dirty_link;   /* on e->dirty while dirty */
};

/* A FLUSH (or COPY's source flush) waiting for objects to become clean. */
struct barrier {
	_Atomic int pending;
	_Atomic int error;
	struct cache_engine *e;
	struct cache_req *req;
	void (*then)(struct barrier *b);   /* runs when pending reaches 0 */
};

struct flush_waiter {
	struct barrier *b;
	struct cache_object *obj;
	struct flush_waiter *next;
	struct xwork work;
};

struct cache_engine {
	struct cache_config cfg;
	struct bucket_geometry geo;
	struct bucket_pool pool;
	struct bucket_totals totals;
	struct cache_backend be;
	struct xcache *index;
	uint32_t nr_nodes;
	_Atomic uint32_t nodes_used;
	_Atomic int policy;
	uint32_t max_run;                  /* buckets per blocker request */

	pthread_mutex_t dirty_lock;        /* guards `dirty` */
	struct cds_list_head dirty;        /* oldest-dirtied first */
	bool flushing;                     /* between the high and low marks */

	struct xwaitq entry_waitq;         /* cond: a cache node is free */
	struct xwaitq io_waitq;            /* cond: a blocker request may be free */
	_Atomic uint32_t bios_in_flight;
	_Atomic bool io_starved;
	struct xwaitq flush_waitq;         /* cond: a flush write may start */
	_Atomic uint32_t flush_bios;       /* flush writes in flight */
	_Atomic int64_t shed_budget;       /* buckets cold objects may give back */
	_Atomic bool shed_protected;       /* ... not only those on probation */

	pthread_mutex_t backoff_lock;      /* guards backoff_step_ns, the stores below */
	uint64_t backoff_step_ns;          /* when the pause last grew */
	_Atomic uint64_t backoff_ns;       /* the pause now; 0: the blocker takes writes */
	_Atomic uint64_t retry_at_ns;      /* no background flush write before this */
	_Atomic int flush_error;           /* of the last failed flush write; 0 after a success */

	struct {
		_Atomic uint64_t hits, misses, partial_hits, read_bytes, write_bytes;
		_Atomic uint64_t blocker_read_bytes, blocker_write_bytes;
		_Atomic uint64_t evictions, clean_released, flushes, flush_failures, flush_ns_total;
		_Atomic uint64_t waits, uncached, failed, lent;
	} st;
	_Atomic uint64_t barriers_open;    /* FLUSH, policy switch, COPY: not answered yet */
	_Atomic uint64_t barrier_waiters;  /* of those, objects still to be clean */
};

static _Thread_local struct bucket_magazine tl_magazine;

#define STAT_ADD(e, field, n) atomic_fetch_add_explicit(&(e)->st.field, (n), memory_order_relaxed)

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void obj_get(struct cache_object *o) { xcache_get(o->e->index, o->entry); }
static void obj_put(struct cache_object *o) { xcache_put(o->e->index, o->entry); }

static void obj_enqueue(struct cache_object *o, struct xwork *w, xwork_fn fn, void *arg)
{
	xwork_init(w, fn, arg);
	xworkq_enqueue(&o->wq, w);
}

/* ---- finishing client requests ------------------------------------------ */

static void finish(struct cache_engine *e, struct cache_req *req, bool served, int error,
		   uint64_t serviced)
{
	req->served = served;
	req->error = served ? 0 : error;
	req->serviced = serviced;
	if (!served)
		STAT_ADD(e, failed, 1);
	struct cache_object *o = req->obj;
	req->obj = NULL;
	req->done(req);
	if (o)
		obj_put(o);
	if (!xwaitq_empty(&e->entry_waitq))
		xwaitq_signal(&e->entry_waitq);
}

/* Resets the engine's fields of a request it is handed. */
static void req_init(struct cache_engine *e, struct cache_req *req)
{
	req->engine = e;
	req->obj = NULL;
	req->next_parked = NULL;
	req->load_error = 0;
	req->counted = false;
	req->write_waiting = false;
	req->info_size = 0;
}

static void park(struct cache_object *o, struct cache_req *req)
{
	req->next_parked = NULL;
	struct cache_req **p = &o->parked;   /* FIFO: keep arrival order */
	while (*p)
		p = &(*p)->next_parked;
	*p = req;
	STAT_ADD(o->e, waits, 1);
}

/* Takes req off the object's parked list. */
static void unpark(struct cache_object *o, struct cache_req *req)
{
	for (struct cache_req **p = &o->parked; *p; p = &(*p)->next_parked)
		if (*p == req) {
			*p = req->next_parked;
			req->next_parked = NULL;
			return;
		}
}

static void object_step(struct cache_object *o, struct cache_req *req);

/* Re-runs every parked request; each may park again. */
static void run_parked(struct cache_object *o)
{
	struct cache_req *list = o->parked;
	o->parked = NULL;
	while (list) {
		struct cache_req *req = list;
		list = req->next_parked;
		object_step(o, req);
	}
}

/* ---- blocker I/O ---------------------------------------------------------- */

static struct cache_bio *bio_init(struct cache_engine *e, struct cache_bio *bio, uint32_t op,
				  uint64_t offset, uint64_t size)
{
	memset(&bio->served, 0, sizeof(*bio) - offsetof(struct cache_bio, served));
	bio->flags = 0;
	bio->op = op;
	bio->offset = offset;
	bio->size = size;
	atomic_fetch_add(&e->bios_in_flight, 1);
	return bio;
}

static struct cache_bio *bio_alloc(struct cache_engine *e, uint32_t op, const char *name,
				   uint64_t offset, uint64_t size, const char *copy_src)
{
	if (atomic_load(&e->bios_in_flight) >= MAX_BIOS_IN_FLIGHT)
		return NULL;
	struct cache_bio *bio = e->be.alloc(e->be.ctx, op, name, offset, size, copy_src);
	if (!bio) {
		atomic_store(&e->io_starved, true);
		return NULL;
	}
	return bio_init(e, bio, op, offset, size);
}

/*
 * A blocker request for exactly req's op and bytes. Where the glue can
 * lend the client's request itself, the blocker reads or fills the
 * client's buffer: one copy and one request fewer per write-through write
 * or miss (about a fifth of cached's CPU on a CPU-bound blocker). Lent,
 * bio->data == req->data and bio->req is set; else bio->req is NULL.
 */
static struct cache_bio *bio_for_req(struct cache_engine *e, struct cache_req *req,
				     const char *name)
{
	if (e->be.lend && atomic_load(&e->bios_in_flight) < MAX_BIOS_IN_FLIGHT) {
		struct cache_bio *bio = e->be.lend(e->be.ctx, req);
		if (bio) {
			bio_init(e, bio, req->op, req->offset, req->size);
			bio->flags = req->flags;
			bio->req = req;
			STAT_ADD(e, lent, 1);
			return bio;
		}
	}
	return bio_alloc(e, req->op, name, req->offset, req->size, NULL);
}

static void bio_release(struct cache_engine *e, struct cache_bio *bio)
{
	e->be.release(e->be.ctx, bio);
	atomic_fetch_sub(&e->bios_in_flight, 1);
	cache_engine_bio_freed(e);
}

static bool io_cond(void *arg)
{
	struct cache_engine *e = arg;
	return !atomic_load(&e->io_starved) &&
	       atomic_load(&e->bios_in_flight) < MAX_BIOS_IN_FLIGHT;
}

void cache_engine_bio_freed(struct cache_engine *e)
{
	atomic_store(&e->io_starved, false);
	if (!xwaitq_empty(&e->io_waitq))
		xwaitq_signal(&e->io_waitq);
}

/* Waits for a blocker request, then re-runs `req` on its object. */
static void retry_on_object(struct xwork *w, void *arg);
static void wait_for_io(struct cache_object *o, struct cache_req *req)
{
	STAT_ADD(o->e, waits, 1);
	xwork_init(&req->work, retry_on_object, req);
	xwaitq_enqueue(&o->e->io_waitq, &req->work);
}

static void rw_job(struct xwork *w, void *arg);
static void retry_on_object(struct xwork *w, void *arg)
{
	(void)w;
	struct cache_req *req = arg;
	obj_enqueue(req->obj, &req->work, rw_job, req);
}

/* Sends bio; its completion runs `job` on the object's queue. */
static void bio_done_to_object(struct cache_bio *bio);
static void bio_send(struct cache_object *o, struct cache_bio *bio, xwork_fn job)
{
	obj_get(o);
	bio->owner = o;
	xwork_init(&bio->work, job, bio);
	bio->done = bio_done_to_object;
	o->e->be.submit(o->e->be.ctx, bio);
}

static void bio_done_to_object(struct cache_bio *bio)
{
	struct cache_object *o = bio->owner;
	xworkq_enqueue(&o->wq, &bio->work);
}

/* ---- copying between buckets and buffers ------------------------------------ */

/* Copies the bytes of [offset, offset+size) that bucket i holds between the
 * bucket and buf (which starts at `offset`). */
static void bucket_copy(struct cache_object *o, uint32_t i, uint64_t offset, uint64_t size,
			void *buf, bool to_bucket)
{
	uint64_t bs = o->e->geo.bucket_size, start = (uint64_t)i * bs;
	uint64_t from = offset > start ? offset : start;
	uint64_t end = offset + size < start + bs ? offset + size : start + bs;
	unsigned char *b = bucket_pool_data(&o->e->pool, o->b.slot[i]) + (from - start);
	unsigned char *p = (unsigned char *)buf + (from - offset);
	if (to_bucket)
		memcpy(b, p, end - from);
	else
		memcpy(p, b, end - from);
}

static bool bucket_fully_covered(struct cache_engine *e, uint32_t i, uint64_t offset,
				 uint64_t size)
{
	uint64_t start = (uint64_t)i * e->geo.bucket_size;
	return offset <= start && offset + size >= start + e->geo.bucket_size;
}

/* Claims pool slots for every unclaimed bucket in [first, last]. */
static bool claim_range(struct cache_object *o, uint32_t first, uint32_t last)
{
	struct cache_engine *e = o->e;
	for (uint32_t i = first; i <= last; i++) {
		if (o->b.slot[i] != BUCKET_NO_SLOT)
			continue;
		uint32_t slot = bucket_pool_get(&e->pool, &tl_magazine);
		if (slot == UINT32_MAX)
			return false;
		bucket_claim(&o->b, &e->totals, i, slot);
	}
	return true;
}

/* Gives back the slots of clean buckets (INVALID or VALID). */
static void release_clean(struct cache_object *o)
{
	for (uint32_t i = 0; i < o->b.n && o->b.claimed; i++) {
		if (o->b.slot[i] == BUCKET_NO_SLOT)
			continue;
		int64_t slot = bucket_release(&o->b, &o->e->totals, i);
		if (slot >= 0)
			bucket_pool_put(&o->e->pool, &tl_magazine, (uint32_t)slot);
	}
}

/* Takes one bucket from the maintenance thread's shed budget. */
static bool take_from_budget(struct cache_engine *e)
{
	int64_t left = atomic_load(&e->shed_budget);
	while (left > 0 && !atomic_compare_exchange_weak(&e->shed_budget, &left, left - 1))
		;
	return left > 0;
}

/* Gives back, within the budget, the buckets of `o` that hold nothing
 * (claimed INVALID) or data on probation, and with `protected_too` any
 * other clean ones; returns how many. */
static uint32_t shed_buckets(struct cache_object *o, bool protected_too)
{
	struct cache_engine *e = o->e;
	uint32_t given = 0;
	for (uint32_t i = 0; i < o->b.n && o->b.claimed; i++) {
		enum bucket_state s = o->b.state[i];
		if (o->b.slot[i] == BUCKET_NO_SLOT || (s != BUCKET_INVALID && s != BUCKET_VALID))
			continue;
		if (s == BUCKET_VALID && !o->b.probation[i] && !protected_too)
			continue;
		if (!take_from_budget(e))
			break;
		int64_t slot = bucket_release(&o->b, &e->totals, i);
		if (slot >= 0) {
			bucket_pool_put(&e->pool, &tl_magazine, (uint32_t)slot);
			given++;
		}
	}
	return given;
}

/* A cold object gives back clean buckets (their bytes are on the blocker),
 * those on probation first, and keeps its dirty ones for the flusher; it
 * stays indexed. */
static void shed_job(struct xwork *w, void *arg)
{
	(void)w;
	struct cache_object *o = arg;
	struct cache_engine *e = o->e;
	atomic_store(&o->shed_queued, false);
	uint32_t given = shed_buckets(o, false);
	if (atomic_load(&e->shed_protected))
		given += shed_buckets(o, true);
	STAT_ADD(e, clean_released, (uint64_t)given * e->geo.bucket_size);
	obj_put(o);
}

/* xcache_sweep_cold's callback: the lent reference goes to the job. */
static bool shed_cold(void *arg, struct xcache_entry *entry)
{
	(void)arg;
	struct cache_object *o = xcache_entry_priv(entry);
	bool expected = false;
	if (atomic_compare_exchange_strong(&o->shed_queued, &expected, true))
		obj_enqueue(o, &o->shed_work, shed_job, o);
	else
		obj_put(o);
	return true;
}

/* ---- the dirty list ------------------------------------------------------------ */

/* The list holds a reference on each object on it. */
static void mark_dirty(struct cache_object *o, uint64_t end)
{
	uint64_t cur = atomic_load(&o->dirty_end);
	while (end > cur && !atomic_compare_exchange_weak(&o->dirty_end, &cur, end))
		;
	if (o->on_dirty_list)
		return;
	obj_get(o);
	pthread_mutex_lock(&o->e->dirty_lock);
	cds_list_add_tail(&o->dirty_link, &o->e->dirty);
	o->on_dirty_list = true;
	pthread_mutex_unlock(&o->e->dirty_lock);
}

static void mark_clean(struct cache_object *o)
{
	if (!o->on_dirty_list)
		return;
	pthread_mutex_lock(&o->e->dirty_lock);
	cds_list_del(&o->dirty_link);
	o->on_dirty_list = false;
	pthread_mutex_unlock(&o->e->dirty_lock);
	atomic_store(&o->dirty_end, 0);
	obj_put(o);
}

static bool object_clean(const struct cache_object *o)
{
	return o->b.count[BUCKET_DIRTY] == 0 && o->b.count[BUCKET_WRITING] == 0;
}

/* ---- flushing ----------------------------------------------------------------- */

static void flush_job(struct xwork *w, void *arg);

/* Asks for a flush of `o` (from any thread; the caller holds a reference). */
static void queue_flush(struct cache_object *o)
{
	bool expected = false;
	if (!atomic_compare_exchange_strong(&o->flush_queued, &expected, true))
		return;
	obj_get(o);
	obj_enqueue(o, &o->flush_work, flush_job, o);
}

static void barrier_arrive(struct barrier *b, int error);

static void notify_waiters(struct cache_object *o, int error)
{
	struct flush_waiter *w = o->waiters;
	o->waiters = NULL;
	while (w) {
		struct flush_waiter *next = w->next;
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
	if (object_clean(o)) {
		o->flush_deferred = false;
		notify_waiters(o, 0);
		mark_clean(o);
	} else if (error) {
		notify_waiters(o, error);   /* dirty data stays for a later try */
	} else if ((o->flush_again || o->waiters || o->flush_deferred) &&
		   !atomic_load(&o->flush_io_wait)) {
		queue_flush(o);
	}
	o->flush_again = false;
	run_parked(o);
}

static bool flush_budget_cond(void *arg)
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
	pthread_mutex_unlock(&e->backoff_lock);
}

static bool backing_off(struct cache_engine *e, uint64_t now)
{
	return atomic_load(&e->retry_at_ns) > now;
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

	for (uint32_t i = bio->first; i < bio->first + bio->count; i++) {
		if (o->b.state[i] != BUCKET_WRITING)
			continue;   /* rewritten meanwhile: DIRTY, flushed next time */
		bucket_set(&o->b, &e->totals, i, ok ? BUCKET_VALID : BUCKET_DIRTY);
	}
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
	} else if (o->deleting) {
		/* the data is being dropped */
		if (was_deferred)
			run_parked(o);
	} else if (!o->waiters && backing_off(e, now_ns())) {
		/* The flusher's own try, while the blocker fails writes: the
		 * maintainer asks again after the pause. A FLUSH or an unplug
		 * waiting (o->waiters) tries at once: the disk may have room. */
		if (was_deferred)
			run_parked(o);
	} else {
		uint32_t i = 0, len;
		while ((i = bucket_find_run(&o->b, i, o->b.n - 1, BUCKET_DIRTY, e->max_run, &len)) < o->b.n) {
			uint64_t off = (uint64_t)i * e->geo.bucket_size;
			uint64_t size = (uint64_t)len * e->geo.bucket_size;
			bool budget = atomic_load(&e->flush_bios) < MAX_FLUSH_BIOS;
			struct cache_bio *bio = budget ? bio_alloc(e, X_WRITE, o->name, off, size,
								   NULL) : NULL;
			if (!bio) {
				if (o->flushes)
					o->flush_again = true;   /* when those come back */
				else
					flush_when_freed(o, budget ? &e->io_waitq : &e->flush_waitq);
				break;
			}
			atomic_fetch_add(&e->flush_bios, 1);
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

/* ---- barriers: FLUSH, policy switch, COPY's source --------------------------- */

static void barrier_arrive(struct barrier *b, int error)
{
	if (error)
		atomic_store(&b->error, error);
	if (atomic_fetch_sub(&b->pending, 1) == 1) {
		atomic_fetch_sub(&b->e->barriers_open, 1);
		b->then(b);
	}
}

/* On the object's queue: arrive now if clean, else when its flush ends. */
static void waiter_job(struct xwork *work, void *arg)
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
	w->next = o->waiters;
	o->waiters = w;
	atomic_fetch_add(&o->e->barrier_waiters, 1);
	if (o->flushes)
		o->flush_again = true;
	else
		queue_flush(o);
}

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

/* Every object dirty right now joins the barrier. */
static void barrier_add_all_dirty(struct barrier *b)
{
	struct cache_engine *e = b->e;
	struct cache_object *o;
	size_t n = 0, i = 0;

	pthread_mutex_lock(&e->dirty_lock);
	cds_list_for_each_entry(o, &e->dirty, dirty_link)
		n++;
	struct cache_object **snap = calloc(n ? n : 1, sizeof(*snap));
	if (snap) {
		cds_list_for_each_entry(o, &e->dirty, dirty_link) {
			obj_get(o);     /* the list's reference keeps it alive here */
			snap[i++] = o;
		}
	}
	pthread_mutex_unlock(&e->dirty_lock);
	if (!snap) {
		atomic_store(&b->error, ENOMEM);
		return;
	}
	for (i = 0; i < n; i++) {
		barrier_add(b, snap[i]);
		obj_put(snap[i]);
	}
	free(snap);
}

static struct barrier *barrier_new(struct cache_engine *e, struct cache_req *req,
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
	return b;
}

/* ---- forwarding whole requests to the blocker ------------------------------------ */

static void forward(struct cache_engine *e, struct cache_req *req, uint32_t op);

static void forward_retry(struct xwork *w, void *arg)
{
	(void)w;
	struct cache_req *req = arg;
	forward(req->engine, req, req->fwd_op);
}

static void forward_done(struct cache_bio *bio)
{
	struct cache_req *req = bio->req;
	struct cache_engine *e = req->engine;
	req->info_size = bio->info_size;
	if (bio->op == X_INFO && req->obj) {
		/* the size the blocker would report after a flush */
		uint64_t end = atomic_load(&req->obj->dirty_end);
		if (end > req->info_size)
			req->info_size = end;
	}
	bool served = bio->served;
	int error = bio->error ? bio->error : EIO;
	uint64_t serviced = bio->serviced;
	bio_release(e, bio);
	finish(e, req, served, error, serviced);
}

/* Sends `op` for req's target to the blocker; done when it answers. */
static void forward(struct cache_engine *e, struct cache_req *req, uint32_t op)
{
	struct cache_bio *bio = bio_alloc(e, op, req->name, req->offset, 0, req->copy_src);
	if (!bio) {
		STAT_ADD(e, waits, 1);
		req->fwd_op = op;
		xwork_init(&req->work, forward_retry, req);
		xwaitq_enqueue(&e->io_waitq, &req->work);
		return;
	}
	bio->flags = req->flags;
	bio->size = op == X_FLUSH ? 0 : req->size;
	bio->req = req;
	bio->done = forward_done;
	e->be.submit(e->be.ctx, bio);
}

static void flush_barrier_then(struct barrier *b)
{
	struct cache_engine *e = b->e;
	struct cache_req *req = b->req;
	int error = atomic_load(&b->error);
	free(b);
	if (error) {
		finish(e, req, false, error, 0);
		return;
	}
	forward(e, req, X_FLUSH);   /* the blocker's own FLUSH, then answer */
}

void cache_engine_flush_all(struct cache_engine *e, struct cache_req *req)
{
	req_init(e, req);
	struct barrier *b = barrier_new(e, req, flush_barrier_then);
	if (!b) {
		finish(e, req, false, ENOMEM, 0);
		return;
	}
	barrier_add_all_dirty(b);
	barrier_arrive(b, 0);
}

/* FLUSH of one object: its dirty data, then the blocker's FLUSH of it. */
static void flush_one(struct cache_engine *e, struct cache_req *req)
{
	struct barrier *b = barrier_new(e, req, flush_barrier_then);
	if (!b) {
		finish(e, req, false, ENOMEM, 0);
		return;
	}
	struct xcache_entry *ent = xcache_lookup(e->index, req->name, strlen(req->name));
	if (ent) {
		barrier_add(b, xcache_entry_priv(ent));
		xcache_put(e->index, ent);
	}
	barrier_arrive(b, 0);
}

void cache_engine_set_policy(struct cache_engine *e, enum cache_policy p,
			     struct cache_req *req)
{
	req_init(e, req);
	atomic_store(&e->policy, (int)p);
	if (p == CACHE_WRITETHROUGH)
		cache_engine_flush_all(e, req);   /* no dirty byte stays behind */
	else
		finish(e, req, true, 0, 0);
}

/* ---- reads ------------------------------------------------------------------------- */

static void load_done_job(struct xwork *w, void *arg)
{
	(void)w;
	struct cache_bio *bio = arg;
	struct cache_object *o = bio->owner;
	struct cache_engine *e = o->e;
	uint64_t bs = e->geo.bucket_size;
	int error = 0;

	for (uint32_t i = bio->first; i < bio->first + bio->count; i++) {
		if (o->b.state[i] != BUCKET_LOADING)
			continue;
		uint64_t rel = (uint64_t)(i - bio->first) * bs;
		if (bio->served && bio->serviced >= rel + bs) {
			memcpy(bucket_pool_data(&e->pool, o->b.slot[i]),
			       (unsigned char *)bio->data + rel, bs);
			bucket_set(&o->b, &e->totals, i, BUCKET_VALID);
			bucket_on_probation(&o->b, &e->totals, i);
		} else {
			bucket_set(&o->b, &e->totals, i, BUCKET_INVALID);
			error = bio->error ? bio->error : EIO;
		}
	}
	if (bio->served)
		STAT_ADD(e, blocker_read_bytes, bio->serviced);
	if (error) {
		/* requests waiting for these buckets fail rather than retry */
		uint64_t lo = (uint64_t)bio->first * bs, hi = lo + (uint64_t)bio->count * bs;
		for (struct cache_req *r = o->parked; r; r = r->next_parked)
			if (r->offset < hi && r->offset + r->size > lo)
				r->load_error = error;
	}
	o->loads--;
	struct cache_req *lent_by = bio->req;
	bio_release(e, bio);
	if (lent_by && !error) {
		/* Its buffer holds what the buckets now hold: answer it here,
		 * before anything parked can change them. */
		unpark(o, lent_by);
		STAT_ADD(e, read_bytes, lent_by->size);
		finish(e, lent_by, true, 0, lent_by->size);
	}
	run_parked(o);
	obj_put(o);
}

/*
 * Sends a load for every INVALID run in [first, last]. False: pool full.
 * A run that is exactly the bytes of `reader` (a read, or NULL) may be the
 * reader's own request (bio_for_req).
 */
static bool load_runs(struct cache_object *o, uint32_t first, uint32_t last, bool *no_io,
		      struct cache_req *reader)
{
	struct cache_engine *e = o->e;
	uint32_t i = first, len;
	*no_io = false;
	while ((i = bucket_find_run(&o->b, i, last, BUCKET_INVALID, e->max_run, &len)) <= last) {
		if (!claim_range(o, i, i + len - 1))
			return false;
		uint64_t off = (uint64_t)i * e->geo.bucket_size;
		uint64_t size = (uint64_t)len * e->geo.bucket_size;
		struct cache_bio *bio = reader && reader->offset == off && reader->size == size
			? bio_for_req(e, reader, o->name)
			: bio_alloc(e, X_READ, o->name, off, size, NULL);
		if (!bio) {
			*no_io = true;
			return true;
		}
		for (uint32_t k = 0; k < len; k++)
			bucket_set(&o->b, &e->totals, i + k, BUCKET_LOADING);
		bio->first = i;
		bio->count = len;
		o->loads++;
		bio_send(o, bio, load_done_job);
		i += len;
	}
	return true;
}

/* Uncached read or write past a full pool; merges with cached buckets. */
static void through_done_job(struct xwork *w, void *arg);
static void go_through(struct cache_object *o, struct cache_req *req)
{
	struct cache_engine *e = o->e;
	struct cache_bio *bio = bio_for_req(e, req, o->name);
	if (!bio) {
		wait_for_io(o, req);
		return;
	}
	bio->flags = req->flags;
	if (req->op == X_WRITE && bio->data != req->data)
		memcpy(bio->data, req->data, req->size);
	bio->req = req;
	o->throughs++;
	if (req->op == X_WRITE)
		o->through_writes++;
	bio_send(o, bio, through_done_job);
}

static void through_done_job(struct xwork *w, void *arg)
{
	(void)w;
	struct cache_bio *bio = arg;
	struct cache_object *o = bio->owner;
	struct cache_engine *e = o->e;
	struct cache_req *req = bio->req;
	bool ok = bio->served && bio->serviced == req->size;
	struct bucket_span sp;

	bucket_span_of(&e->geo, req->offset, req->size, &sp);
	if (req->op == X_READ && ok) {
		if (bio->data != req->data)
			memcpy(req->data, bio->data, req->size);
		STAT_ADD(e, blocker_read_bytes, req->size);
		for (uint32_t i = sp.first; i <= sp.last; i++)   /* cached is newer */
			if (o->b.slot[i] != BUCKET_NO_SLOT && bucket_readable(o->b.state[i]))
				bucket_copy(o, i, req->offset, req->size, req->data, false);
	} else if (req->op == X_WRITE && ok) {
		STAT_ADD(e, blocker_write_bytes, req->size);
		bool racing = o->through_writes > 1;   /* overlapping writes land in any order */
		for (uint32_t i = sp.first; i <= sp.last; i++) {
			enum bucket_state s = o->b.state[i];
			if (s == BUCKET_DIRTY) {
				bucket_copy(o, i, req->offset, req->size, req->data, true);
			} else if (s == BUCKET_VALID) {
				if (racing) {
					int64_t slot = bucket_release(&o->b, &e->totals, i);
					if (slot >= 0)
						bucket_pool_put(&e->pool, &tl_magazine, (uint32_t)slot);
				} else {
					bucket_copy(o, i, req->offset, req->size, req->data, true);
				}
			} else if (s == BUCKET_INVALID && !racing &&
				   atomic_load(&e->policy) == CACHE_WRITETHROUGH &&
				   bucket_fully_covered(e, i, req->offset, req->size) &&
				   claim_range(o, i, i)) {
				bucket_copy(o, i, req->offset, req->size, req->data, true);
				bucket_set(&o->b, &e->totals, i, BUCKET_VALID);
			}
		}
	}
	int error = bio->error ? bio->error : EIO;
	o->throughs--;
	if (req->op == X_WRITE && --o->through_writes == 0 && (o->flush_again || o->flush_deferred)) {
		o->flush_again = false;
		queue_flush(o);
	}
	bio_release(e, bio);
	finish(e, req, ok, error, ok ? req->size : 0);
	run_parked(o);
	obj_put(o);
}

static void read_step(struct cache_object *o, struct cache_req *req,
		      const struct bucket_span *sp)
{
	struct cache_engine *e = o->e;
	uint32_t missing = 0, loading = 0;

	if (req->load_error) {
		finish(e, req, false, req->load_error, 0);
		return;
	}
	for (uint32_t i = sp->first; i <= sp->last; i++) {
		enum bucket_state s = o->b.state[i];
		if (s == BUCKET_LOADING)
			loading++;
		else if (!bucket_readable(s))
			missing++;
	}
	if (!missing && !loading) {
		for (uint32_t i = sp->first; i <= sp->last; i++) {
			bucket_copy(o, i, req->offset, req->size, req->data, false);
			if (!req->counted)   /* a hit, not the read that loaded it */
				bucket_used(&o->b, &e->totals, i);
		}
		if (!req->counted)
			STAT_ADD(e, hits, 1);
		STAT_ADD(e, read_bytes, req->size);
		finish(e, req, true, 0, req->size);
		return;
	}
	if (!req->counted) {   /* first look: count it once */
		req->counted = true;
		if (missing == sp->last - sp->first + 1)
			STAT_ADD(e, misses, 1);
		else
			STAT_ADD(e, partial_hits, 1);
	}
	if (missing) {
		bool no_io;
		if (o->through_writes || o->writes_waiting) {
			/* The blocker may serve a load before or after that write;
			 * and new loads would keep a waiting write waiting. */
			park(o, req);
			return;
		}
		if (!load_runs(o, sp->first, sp->last, &no_io, req)) {
			STAT_ADD(e, uncached, 1);
			go_through(o, req);
			return;
		}
		if (no_io && !o->loads) {
			wait_for_io(o, req);
			return;
		}
	}
	park(o, req);
}

/* ---- writes ----------------------------------------------------------------------- */

static void write_through(struct cache_object *o, struct cache_req *req,
			  const struct bucket_span *sp);

static void write_back(struct cache_object *o, struct cache_req *req,
		       const struct bucket_span *sp)
{
	struct cache_engine *e = o->e;
	/* An uncached write in flight copies its bytes into DIRTY buckets when
	 * it lands, as newer than theirs: so no newer DIRTY bytes meanwhile. */
	if (o->through_writes) {
		park(o, req);
		return;
	}
	for (uint32_t i = sp->first; i <= sp->last; i++)
		if (o->b.state[i] == BUCKET_LOADING) {
			park(o, req);
			return;
		}
	if (req->load_error) {
		finish(e, req, false, req->load_error, 0);
		return;
	}
	/* A partly covered bucket must hold the rest of its bytes first. */
	bool head = bucket_span_head_partial(&e->geo, sp) && o->b.state[sp->first] == BUCKET_INVALID;
	bool tail = bucket_span_tail_partial(&e->geo, sp) && o->b.state[sp->last] == BUCKET_INVALID;
	if (head || tail) {
		bool no_io = false, ok = true;
		if (head)
			ok = load_runs(o, sp->first, sp->first, &no_io, NULL);
		if (ok && tail && !no_io)
			ok = load_runs(o, sp->last, sp->last, &no_io, NULL);
		if (!ok) {
			STAT_ADD(e, uncached, 1);
			write_through(o, req, sp);
		} else if (no_io && !o->loads) {
			wait_for_io(o, req);
		} else {
			park(o, req);
		}
		return;
	}
	if (!claim_range(o, sp->first, sp->last)) {
		STAT_ADD(e, uncached, 1);
		write_through(o, req, sp);
		return;
	}
	for (uint32_t i = sp->first; i <= sp->last; i++) {
		bucket_copy(o, i, req->offset, req->size, req->data, true);
		bucket_set(&o->b, &e->totals, i, BUCKET_DIRTY);
	}
	mark_dirty(o, req->offset + req->size);
	STAT_ADD(e, write_bytes, req->size);
	finish(e, req, true, 0, req->size);
}

static void write_through(struct cache_object *o, struct cache_req *req,
			  const struct bucket_span *sp)
{
	(void)sp;
	/* A flush may carry older copies of these bytes: wait for it, or they
	 * could land on the blocker after this write. A load may read the
	 * blocker before this write lands and mark old bytes VALID after it.
	 * A flush deferred until the uncached writes in flight land goes
	 * first too: a stream of them would starve it (a stop or an unplug
	 * under write load waited for ever). */
	if (o->flushes || o->loads || o->flush_deferred) {
		req->write_waiting = true;   /* until object_step runs it again */
		o->writes_waiting++;
		park(o, req);
		return;
	}
	STAT_ADD(o->e, write_bytes, req->size);
	go_through(o, req);
}

/* ---- delete and copy: drop the object's data ------------------------------------- */

static void drop_all(struct cache_object *o)
{
	struct cache_engine *e = o->e;
	for (uint32_t i = 0; i < o->b.n; i++)
		if (o->b.state[i] == BUCKET_DIRTY || o->b.state[i] == BUCKET_VALID)
			bucket_set(&o->b, &e->totals, i, BUCKET_INVALID);
	release_clean(o);
	mark_clean(o);
}

static void drop_done_job(struct xwork *w, void *arg);

/* DELETE, or COPY onto this object: drop what is cached, then forward. */
static void drop_step(struct cache_object *o, struct cache_req *req)
{
	struct cache_engine *e = o->e;
	o->deleting = true;            /* no loads start meanwhile */
	if (o->loads || o->flushes || o->throughs) {
		park(o, req);
		return;
	}
	drop_all(o);
	struct cache_bio *bio = bio_alloc(e, req->op, req->name, req->offset, 0, req->copy_src);
	if (!bio) {
		o->deleting = false;
		wait_for_io(o, req);
		return;
	}
	bio->flags = req->flags;
	bio->size = req->size;
	bio->req = req;
	o->throughs++;
	bio_send(o, bio, drop_done_job);
}

static void drop_done_job(struct xwork *w, void *arg)
{
	(void)w;
	struct cache_bio *bio = arg;
	struct cache_req *req = bio->req;
	struct cache_object *o = bio->owner;
	struct cache_engine *e = o->e;
	bool served = bio->served;
	int error = bio->error ? bio->error : EIO;
	o->throughs--;
	o->deleting = false;
	bio_release(e, bio);
	finish(e, req, served, error, served ? req->size : 0);
	run_parked(o);
	obj_put(o);   /* the bio's reference */
}

/* ---- dispatch on the object's queue ------------------------------------------------ */

static void object_step(struct cache_object *o, struct cache_req *req)
{
	struct bucket_span sp;

	if (req->write_waiting) {
		req->write_waiting = false;
		o->writes_waiting--;
	}
	if (req->op == X_DELETE || req->op == X_COPY) {
		drop_step(o, req);
		return;
	}
	if (o->deleting) {
		park(o, req);
		return;
	}
	bucket_span_of(&o->e->geo, req->offset, req->size, &sp);   /* checked at submit */
	if (req->op == X_READ)
		read_step(o, req, &sp);
	else if (atomic_load(&o->e->policy) == CACHE_WRITETHROUGH || (req->flags & XF_FUA))
		write_through(o, req, &sp);
	else
		write_back(o, req, &sp);
}

static void rw_job(struct xwork *w, void *arg)
{
	(void)w;
	struct cache_req *req = arg;
	object_step(req->obj, req);
}

/* ---- the index ------------------------------------------------------------------------ */

static void index_retry(struct xwork *w, void *arg);

static bool entry_cond(void *arg)
{
	struct cache_engine *e = arg;
	return atomic_load(&e->nodes_used) < e->nr_nodes;
}

/* Finds or inserts the object and runs req on it; waits for a free node. */
static void dispatch_object(struct cache_engine *e, struct cache_req *req)
{
	size_t len = strlen(req->name);
	struct xcache_entry *ent = xcache_lookup(e->index, req->name, len);
	if (!ent) {
		struct xcache_entry *fresh = xcache_alloc(e->index, req->name, len);
		if (!fresh) {
			if (errno == ENOSPC) {
				STAT_ADD(e, waits, 1);
				xwork_init(&req->work, index_retry, req);
				xwaitq_enqueue(&e->entry_waitq, &req->work);
				return;
			}
			finish(e, req, false, errno, 0);
			return;
		}
		ent = xcache_insert(e->index, fresh);
	}
	req->obj = xcache_entry_priv(ent);
	obj_enqueue(req->obj, &req->work, rw_job, req);
}

/* The deferred form of dispatch_object, once a node may be free. */
static void index_retry(struct xwork *w, void *arg)
{
	(void)w;
	struct cache_req *req = arg;
	dispatch_object(req->engine, req);
}

static bool name_ok(const struct cache_req *req)
{
	return req->name && *req->name && strlen(req->name) <= XSEG_MAX_TARGETLEN;
}

/* COPY: flush the source's dirty data, then drop and copy onto the target. */
static void copy_then(struct barrier *b)
{
	struct cache_engine *e = b->e;
	struct cache_req *req = b->req;
	int error = atomic_load(&b->error);
	free(b);
	if (error)
		finish(e, req, false, error, 0);
	else
		dispatch_object(e, req);
}

void cache_engine_submit(struct cache_engine *e, struct cache_req *req)
{
	req_init(e, req);
	if (!xwaitq_empty(&e->entry_waitq))
		xwaitq_signal(&e->entry_waitq);

	switch (req->op) {
	case X_PING:
		finish(e, req, true, 0, 0);
		return;
	case X_FLUSH:
		if (req->name && *req->name)
			flush_one(e, req);     /* vlmcd flushes object by object */
		else
			cache_engine_flush_all(e, req);
		return;
	case X_READ:
	case X_WRITE: {
		struct bucket_span sp;
		if (!name_ok(req)) {
			finish(e, req, false, EINVAL, 0);
			return;
		}
		if (req->size == 0) {
			finish(e, req, true, 0, 0);
			return;
		}
		if (bucket_span_of(&e->geo, req->offset, req->size, &sp) < 0) {
			finish(e, req, false, EINVAL, 0);   /* past the object's end */
			return;
		}
		dispatch_object(e, req);
		return;
	}
	case X_INFO: {
		if (!name_ok(req)) {
			finish(e, req, false, EINVAL, 0);
			return;
		}
		struct xcache_entry *ent = xcache_lookup(e->index, req->name, strlen(req->name));
		req->obj = ent ? xcache_entry_priv(ent) : NULL;
		forward(e, req, X_INFO);
		return;
	}
	case X_DELETE:
		if (!name_ok(req)) {
			finish(e, req, false, EINVAL, 0);
			return;
		}
		dispatch_object(e, req);
		return;
	case X_COPY: {
		if (!name_ok(req) || !req->copy_src || !*req->copy_src) {
			finish(e, req, false, EINVAL, 0);
			return;
		}
		struct barrier *b = barrier_new(e, req, copy_then);
		if (!b) {
			finish(e, req, false, ENOMEM, 0);
			return;
		}
		struct xcache_entry *src = xcache_lookup(e->index, req->copy_src,
							 strlen(req->copy_src));
		if (src) {
			barrier_add(b, xcache_entry_priv(src));
			xcache_put(e->index, src);
		}
		barrier_arrive(b, 0);
		return;
	}
	default:
		finish(e, req, false, EOPNOTSUPP, 0);
	}
}

/* ---- xcache hooks -------------------------------------------------------------------------- */

static void *on_node_init(void *priv, struct xcache_entry *node)
{
	struct cache_object *o = calloc(1, sizeof(*o));
	if (!o)
		abort();   /* at start-up only */
	o->e = priv;
	o->entry = node;
	xworkq_init(&o->wq);
	CDS_INIT_LIST_HEAD(&o->dirty_link);
	return o;
}

static void on_node_fini(void *priv, void *node_priv)
{
	(void)priv;
	struct cache_object *o = node_priv;
	xworkq_destroy(&o->wq);
	object_buckets_free(&o->b);
	free(o);
}

static int on_init(void *priv, void *node_priv)
{
	struct cache_engine *e = priv;
	struct cache_object *o = node_priv;
	/* Bucket metadata only for objects in use, not for every node. */
	if (object_buckets_init(&o->b, e->geo.buckets_per_object) < 0)
		return -1;
	o->name = xcache_entry_name(o->entry, NULL);
	o->parked = NULL;
	o->waiters = NULL;
	o->loads = o->flushes = o->throughs = o->through_writes = 0;
	o->flush_again = o->deleting = o->on_dirty_list = o->flush_deferred = false;
	o->flush_error = 0;
	atomic_store(&o->flush_queued, false);
	atomic_store(&o->flush_io_wait, false);
	atomic_store(&o->shed_queued, false);
	atomic_store(&o->dirty_end, 0);
	atomic_fetch_add(&e->nodes_used, 1);
	return 0;
}

/* A dirty victim is flushed now, so that its node and buckets come back. */
static void on_evict(void *priv, void *node_priv)
{
	struct cache_engine *e = priv;
	STAT_ADD(e, evictions, 1);
	queue_flush(node_priv);
}

/* Gone for good: nothing refers to it, so nothing is dirty or in flight
 * (the dirty list and every I/O hold references). */
static void on_put(void *priv, void *node_priv)
{
	(void)priv;
	release_clean(node_priv);
}

static void on_free(void *priv, void *node_priv)
{
	struct cache_engine *e = priv;
	struct cache_object *o = node_priv;
	object_buckets_free(&o->b);
	atomic_fetch_sub(&e->nodes_used, 1);
}

/* ---- life cycle -------------------------------------------------------------------------- */

struct cache_engine *cache_engine_create(const struct cache_config *cfg,
					 const struct cache_backend *backend,
					 const char **why)
{
	struct cache_engine *e = calloc(1, sizeof(*e));
	if (!e) {
		*why = "out of memory";
		errno = ENOMEM;
		return NULL;
	}
	e->cfg = *cfg;
	e->be = *backend;
	if (bucket_geometry_init(&e->geo, cfg->object_size, cfg->bucket_size) < 0) {
		*why = "bucket size must be a power of two >= 512 that divides the object size";
		goto bad;
	}
	if (cfg->cache_size < cfg->bucket_size || cfg->cache_size / cfg->bucket_size >= UINT32_MAX) {
		*why = "cache size must hold at least one bucket";
		goto bad;
	}
	if (cfg->max_objects < 1) {
		*why = "max objects must be at least 1";
		goto bad;
	}
	if (cfg->max_request_size < cfg->bucket_size) {
		*why = "max request size must be at least one bucket";
		goto bad;
	}
	if (cfg->dirty_low_pct > cfg->dirty_high_pct || cfg->dirty_high_pct > 100) {
		*why = "dirty marks must satisfy low <= high <= 100";
		goto bad;
	}
	e->max_run = (uint32_t)(cfg->max_request_size / cfg->bucket_size);
	atomic_init(&e->policy, (int)cfg->policy);
	if (bucket_pool_init(&e->pool, (uint32_t)(cfg->cache_size / cfg->bucket_size),
			     cfg->bucket_size) < 0) {
		*why = "cannot allocate the bucket pool";
		free(e);
		errno = ENOMEM;
		return NULL;
	}
	static const struct xcache_ops ops = {
		.on_node_init = on_node_init, .on_node_fini = on_node_fini,
		.on_init = on_init, .on_evict = on_evict, .on_put = on_put, .on_free = on_free,
	};
	e->nr_nodes = cfg->max_objects * 2;
	e->index = xcache_create(cfg->max_objects, e->nr_nodes, XSEG_MAX_TARGETLEN, &ops, e);
	if (!e->index) {
		*why = "cannot create the object index";
		bucket_pool_destroy(&e->pool);
		free(e);
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&e->dirty_lock, NULL);
	CDS_INIT_LIST_HEAD(&e->dirty);
	xwaitq_init(&e->entry_waitq, entry_cond, e);
	xwaitq_init(&e->io_waitq, io_cond, e);
	xwaitq_init(&e->flush_waitq, flush_budget_cond, e);
	pthread_mutex_init(&e->backoff_lock, NULL);
	return e;
bad:
	free(e);
	errno = EINVAL;
	return NULL;
}

void cache_engine_destroy(struct cache_engine *e)
{
	while (xcache_evict_coldest(e->index) == 0)
		;
	bucket_pool_drain(&e->pool, &tl_magazine);
	xcache_destroy(e->index);
	xwaitq_destroy(&e->entry_waitq);
	xwaitq_destroy(&e->io_waitq);
	xwaitq_destroy(&e->flush_waitq);
	bucket_pool_destroy(&e->pool);
	pthread_mutex_destroy(&e->dirty_lock);
	pthread_mutex_destroy(&e->backoff_lock);
	free(e);
}

uint64_t cache_engine_maintain(struct cache_engine *e)
{
	uint64_t total = e->pool.count;
	uint64_t dirty = atomic_load(&e->totals.count[BUCKET_DIRTY]);
	uint64_t claimed = atomic_load(&e->totals.claimed);
	bool short_of_buckets = total - claimed < total / 16 + 1;

	if (dirty * 100 > (uint64_t)e->cfg.dirty_high_pct * total)
		e->flushing = true;
	else if (dirty * 100 <= (uint64_t)e->cfg.dirty_low_pct * total)
		e->flushing = false;

	/* Short of buckets, clean buckets of cold objects go first: nothing to
	 * write, and the dirty ones stay to absorb rewrites. Dirty data is
	 * flushed for room only when few clean ones are left. */
	uint64_t busy = dirty + atomic_load(&e->totals.count[BUCKET_WRITING]) +
			atomic_load(&e->totals.count[BUCKET_LOADING]);
	bool clean_to_spare = claimed > busy && claimed - busy > total / 16;
	bool short_of_nodes = !xwaitq_empty(&e->entry_waitq);
	bool need_room = (short_of_buckets && !clean_to_spare) || short_of_nodes;
	bool paused = backing_off(e, now_ns());
	if (!paused && (e->flushing || (need_room && dirty))) {
		/* Oldest dirtied first; flushed ones go to the back. */
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
	if (short_of_buckets) {
		/* Room for an eighth of the pool, taken from data read once by a
		 * miss (probation); from other clean data too only while that
		 * holds more than PROTECTED_PCT of the pool, so that a scan read
		 * once does not push out what was written or read twice. Dirty
		 * data becomes clean through the flush above first. Objects are
		 * not evicted whole for room: one can be a good part of the cache. */
		uint64_t probation = atomic_load(&e->totals.probation);
		uint64_t loading = atomic_load(&e->totals.count[BUCKET_LOADING]);
		uint64_t protected_ = claimed > probation + loading ? claimed - probation - loading : 0;
		atomic_store(&e->shed_protected, protected_ * 100 > total * PROTECTED_PCT);
		atomic_store(&e->shed_budget, (int64_t)(total / 8 + 1) - (int64_t)(total - claimed));
		unsigned n = xcache_sweep_cold(e->index, RECLAIM_OBJECTS_PER_TICK, shed_cold, e);
		if (n < RECLAIM_OBJECTS_PER_TICK)   /* the first sweep may only clear bits */
			xcache_sweep_cold(e->index, RECLAIM_OBJECTS_PER_TICK - n, shed_cold, e);
	}
	atomic_store(&e->io_starved, false);
	xwaitq_signal(&e->io_waitq);
	xwaitq_signal(&e->flush_waitq);
	xwaitq_signal(&e->entry_waitq);
	/* A 1 ms tick only while it helps: not while the flusher pauses. */
	return (e->flushing && !paused) || short_of_buckets ? 1000000ull : 10000000ull;
}

bool cache_engine_clean(struct cache_engine *e)
{
	return atomic_load(&e->totals.count[BUCKET_DIRTY]) == 0 &&
	       atomic_load(&e->totals.count[BUCKET_WRITING]) == 0;
}

bool cache_engine_idle(struct cache_engine *e)
{
	return atomic_load(&e->totals.count[BUCKET_DIRTY]) == 0 &&
	       atomic_load(&e->totals.count[BUCKET_LOADING]) == 0 &&
	       atomic_load(&e->totals.count[BUCKET_WRITING]) == 0 &&
	       atomic_load(&e->bios_in_flight) == 0;
}

void cache_engine_stats(struct cache_engine *e, struct cache_stats *s)
{
	uint64_t bs = e->geo.bucket_size;
	memset(s, 0, sizeof(*s));
	s->hits = atomic_load(&e->st.hits);
	s->misses = atomic_load(&e->st.misses);
	s->partial_hits = atomic_load(&e->st.partial_hits);
	s->read_bytes = atomic_load(&e->st.read_bytes);
	s->write_bytes = atomic_load(&e->st.write_bytes);
	s->blocker_read_bytes = atomic_load(&e->st.blocker_read_bytes);
	s->blocker_write_bytes = atomic_load(&e->st.blocker_write_bytes);
	s->dirty_bytes = (atomic_load(&e->totals.count[BUCKET_DIRTY]) +
			  atomic_load(&e->totals.count[BUCKET_WRITING])) * bs;
	s->cached_bytes = atomic_load(&e->totals.claimed) * bs;
	s->free_bytes = (e->pool.count - atomic_load(&e->totals.claimed)) * bs;
	s->objects = xcache_nr_active(e->index);
	s->evictions = atomic_load(&e->st.evictions);
	s->clean_released_bytes = atomic_load(&e->st.clean_released);
	s->flushes = atomic_load(&e->st.flushes);
	s->flush_failures = atomic_load(&e->st.flush_failures);
	s->flush_ns_total = atomic_load(&e->st.flush_ns_total);
	s->flush_backoff_ns = atomic_load(&e->backoff_ns);
	s->flush_error = atomic_load(&e->flush_error);
	s->waits = atomic_load(&e->st.waits);
	s->uncached = atomic_load(&e->st.uncached);
	s->lent = atomic_load(&e->st.lent);
	s->failed = atomic_load(&e->st.failed);
	s->blocker_in_flight = atomic_load(&e->bios_in_flight);
	s->barriers_open = atomic_load(&e->barriers_open);
	s->barrier_waiters = atomic_load(&e->barrier_waiters);
	s->policy = (enum cache_policy)atomic_load(&e->policy);
}
