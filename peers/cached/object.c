/*
 * A cached object (struct cache_object): its work queue, on which every
 * step of a request that reads or changes its buckets runs, one at a
 * time; the requests parked on it until its I/O in flight ends; the
 * blocker requests it sends, whose replies come back to its queue; the
 * pool slots of its buckets (claimed, released, and shed by cold objects
 * when the pool runs short); and its place on the dirty list.
 */
#include "engine_private.h"

/* ---- parked requests -------------------------------------------------------- */

/* Parks req (-> `why`: PARKED, or PARKED_WRITE for a write-through write
 * counted in writes_waiting) until the object's I/O in flight ends. */
void park(struct cache_object *o, struct cache_req *req, enum cache_req_state why)
{
	req_set(req, why);
	if (why == REQ_PARKED_WRITE)
		o->writes_waiting++;
	req->next_parked = NULL;
	struct cache_req **p = &o->parked;   /* FIFO: keep arrival order */
	while (*p)
		p = &(*p)->next_parked;
	*p = req;
	STAT_ADD(o->e, waits, 1);
}

/* Takes req off the object's parked list. */
void unpark(struct cache_object *o, struct cache_req *req)
{
	for (struct cache_req **p = &o->parked; *p; p = &(*p)->next_parked)
		if (*p == req) {
			*p = req->next_parked;
			req->next_parked = NULL;
			return;
		}
}

/* Resumes every parked request (e->resume: object_step), in arrival order;
 * each moves on, or parks again. */
void run_parked(struct cache_object *o)
{
	struct cache_req *list = o->parked;
	o->parked = NULL;
	while (list) {
		struct cache_req *req = list;
		list = req->next_parked;
		o->e->resume(o, req);
	}
}
/* ---- blocker requests of an object ---------------------------------------------- */

static void retry_on_object(struct xwork *w, void *arg);

/* Waits for a blocker request (-> WAIT_IO), then runs `req` on its object
 * again. */
void wait_for_io(struct cache_object *o, struct cache_req *req)
{
	STAT_ADD(o->e, waits, 1);
	req_set(req, REQ_WAIT_IO);
	xwork_init(&req->work, retry_on_object, req);
	xwaitq_enqueue(&o->e->io_waitq, &req->work);
}

static void resume_job(struct xwork *w, void *arg)
{
	(void)w;
	struct cache_req *req = arg;
	req->obj->e->resume(req->obj, req);
}

static void retry_on_object(struct xwork *w, void *arg)
{
	(void)w;
	struct cache_req *req = arg;
	req_set(req, REQ_QUEUED);
	obj_enqueue(req->obj, &req->work, resume_job, req);
}

/* Sends bio; its completion runs `job` on the object's queue. */
static void bio_done_to_object(struct cache_bio *bio);
void bio_send(struct cache_object *o, struct cache_bio *bio, xwork_fn job)
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

/* ---- pool slots of an object's buckets --------------------------------------------- */

static _Thread_local struct bucket_magazine tl_magazine;

/* Claims pool slots for every unclaimed bucket in [first, last]. */
bool claim_range(struct cache_object *o, uint32_t first, uint32_t last)
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

/* Gives back clean bucket i's slot (-> INVALID), if it has one. */
void release_bucket(struct cache_object *o, uint32_t i)
{
	int64_t slot = bucket_release(&o->b, &o->e->totals, i);
	if (slot >= 0)
		bucket_pool_put(&o->e->pool, &tl_magazine, (uint32_t)slot);
}

/* Gives back the slots of clean buckets (INVALID or VALID). */
void release_clean(struct cache_object *o)
{
	for (uint32_t i = 0; i < o->b.n && o->b.claimed; i++) {
		if (o->b.slot[i] == BUCKET_NO_SLOT)
			continue;
		release_bucket(o, i);
	}
}

/* The calling thread's magazine goes back to the pool (destroy). */
void drain_magazine(struct cache_engine *e)
{
	bucket_pool_drain(&e->pool, &tl_magazine);
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

/*
 * The pool runs short (the maintenance tick): room for an eighth of it,
 * taken from cold objects' data read once by a miss (probation); from
 * other clean data too only while that holds more than PROTECTED_PCT of
 * the pool, so that a scan read once does not push out what was written
 * or read twice.
 */
void shed_cold_objects(struct cache_engine *e, uint64_t total, uint64_t claimed)
{
	uint64_t probation = atomic_load(&e->totals.probation);
	uint64_t loading = atomic_load(&e->totals.count[BUCKET_LOADING]);
	uint64_t protected_ = claimed > probation + loading ? claimed - probation - loading : 0;
	atomic_store(&e->shed_protected, protected_ * 100 > total * PROTECTED_PCT);
	atomic_store(&e->shed_budget, (int64_t)(total / 8 + 1) - (int64_t)(total - claimed));
	unsigned n = xcache_sweep_cold(e->index, RECLAIM_OBJECTS_PER_TICK, shed_cold, e);
	if (n < RECLAIM_OBJECTS_PER_TICK)   /* the first sweep may only clear bits */
		xcache_sweep_cold(e->index, RECLAIM_OBJECTS_PER_TICK - n, shed_cold, e);
}

/* ---- the dirty list ------------------------------------------------------------ */

/* The list holds a reference on each object on it. */
void mark_dirty(struct cache_object *o, uint64_t end)
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

struct cache_object *object_find(struct cache_engine *e, const char *name)
{
	struct xcache_entry *ent = xcache_lookup(e->index, name, strlen(name));
	if (ent)
		return xcache_entry_priv(ent);   /* the lookup's reference */
	struct cache_object *o, *found = NULL;
	pthread_mutex_lock(&e->dirty_lock);
	cds_list_for_each_entry(o, &e->dirty, dirty_link)
		if (!strcmp(o->name, name)) {
			obj_get(o);   /* the list's reference holds it meanwhile */
			found = o;
			break;
		}
	pthread_mutex_unlock(&e->dirty_lock);
	return found;
}

void mark_clean(struct cache_object *o)
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

/* ---- the persist file (--persist) --------------------------------------------- */

bool persist_hold(struct cache_object *o)
{
	struct cache_engine *e = o->e;
	if (!e->persisting || o->pobj != PERSIST_NO_OBJECT)
		return true;
	o->pobj = persist_object_get(&e->persist, o->name, (uint32_t)strlen(o->name));
	return o->pobj != PERSIST_NO_OBJECT;
}

/*
 * A host crash (--persist-sync flush or always) writes the file's dirty
 * pages back in any order, so two rules hold between syncs:
 * - the clear of an overwritten version must not reach the disk before the
 *   new version (header and data) has: it is done only after a sync, and
 *   until then the old slot is kept (retired);
 * - the clear of a version written back (unpublish) must not reach the
 *   disk before the clears of the older versions of its bucket: recovery
 *   would replay an older version over what the blocker holds. So an
 *   unpublish first makes every pending clear durable.
 * Recovery takes the newest of the versions it finds, so a kept old one
 * never wins over its successor.
 */
static _Atomic uint16_t *old_count(struct cache_engine *e, uint32_t pobj, uint32_t bucket)
{
	uint64_t key = ((uint64_t)pobj << 32 | bucket) * 0x9E3779B97F4A7C15ull;
	return &e->old_counts[key >> 48];   /* 2^16 counters: the top 16 bits */
}

/* The old versions in `v` are no longer pending: their clears are durable
 * (or, past the cap, given up). */
static void forget(struct cache_engine *e, const struct old_version *v, uint32_t k)
{
	for (uint32_t j = 0; j < k; j++)
		atomic_fetch_sub(old_count(e, v[j].pobj, v[j].bucket), 1);
}

static void put_back(struct cache_engine *e, struct old_version *list, uint32_t *n,
		     const struct old_version *from, uint32_t k)
{
	/* Never past the cap (see RETIRE_CAP): one that did not fit would keep
	 * its slot for good (recovery clears a loser's header). */
	uint32_t fit = k < RETIRE_CAP - *n ? k : RETIRE_CAP - *n;
	for (uint32_t j = 0; j < fit; j++)
		list[(*n)++] = from[j];
	forget(e, from + fit, k - fit);
}

/* Syncs the file; then the versions retired before it may be cleared, and
 * the clears made before it are durable (their slots free again). With
 * clears_durable, a second sync makes this round's clears durable too. */
static int sync_and_retire(struct cache_engine *e, bool clears_durable)
{
	pthread_mutex_lock(&e->settle_lock);
	struct old_version *r = e->settling_retired, *c = e->settling_cleared;
	pthread_mutex_lock(&e->retire_lock);
	uint32_t nr = e->nr_retired, nc = e->nr_cleared;
	memcpy(r, e->retired, nr * sizeof(*r));
	memcpy(c, e->cleared, nc * sizeof(*c));
	e->nr_retired = e->nr_cleared = 0;
	pthread_mutex_unlock(&e->retire_lock);

	/* Published before the sync: raised before it starts, as the FLUSH it
	 * answers promises them from then on (an overwrite during the sync
	 * retires them; see store_bucket). */
	uint64_t upto = atomic_load(&e->persist.next_seq);
	uint64_t was = atomic_load(&e->synced_below);
	while (upto > was && !atomic_compare_exchange_weak(&e->synced_below, &was, upto))
		;
	uint64_t clears = atomic_load(&e->written_back_clears);   /* made before the sync */
	int rc = persist_sync(&e->persist);   /* the new versions, earlier clears */
	if (rc == 0) {
		was = atomic_load(&e->clears_synced);
		while (clears > was && !atomic_compare_exchange_weak(&e->clears_synced, &was, clears))
			;
		for (uint32_t k = 0; k < nc; k++)
			bucket_pool_put_spare(&e->pool, c[k].slot);
		forget(e, c, nc);
		for (uint32_t k = 0; k < nr; k++)
			persist_clear(&e->persist, r[k].slot);
		memcpy(c, r, nr * sizeof(*r));   /* cleared: durable at the next sync */
		nc = nr;
		nr = 0;
		if (nc && clears_durable && (rc = persist_sync(&e->persist)) == 0) {
			for (uint32_t k = 0; k < nc; k++)
				bucket_pool_put_spare(&e->pool, c[k].slot);
			forget(e, c, nc);
			nc = 0;
		}
	}
	if (rc) {
		/* Failed for good (persist_sync): nothing will be durable, so
		 * nothing waits for a sync; kept, their slots never came back
		 * and overwrites waited for a spare for ever. */
		for (uint32_t k = 0; k < nr; k++)
			persist_clear(&e->persist, r[k].slot);
		for (uint32_t k = 0; k < nr; k++)
			bucket_pool_put_spare(&e->pool, r[k].slot);
		for (uint32_t k = 0; k < nc; k++)
			bucket_pool_put_spare(&e->pool, c[k].slot);
		forget(e, r, nr);
		forget(e, c, nc);
		nr = nc = 0;
	}
	pthread_mutex_lock(&e->retire_lock);   /* what is left goes back */
	put_back(e, e->retired, &e->nr_retired, r, nr);
	put_back(e, e->cleared, &e->nr_cleared, c, nc);
	pthread_mutex_unlock(&e->retire_lock);
	pthread_mutex_unlock(&e->settle_lock);
	return rc;
}

/* Keeps an overwritten version's slot until its clear may be durable. A
 * sync is forced before the list fills, and while the pool's shared stack
 * runs short of spares (a full cache: every overwrite takes one). Once a
 * sync failed (for good: the promise is broken already), or with the list
 * full anyway, the old version is cleared at once. */
static void retire(struct cache_object *o, uint32_t i, uint32_t slot)
{
	struct cache_engine *e = o->e;
	pthread_mutex_lock(&e->retire_lock);
	bool kept = e->nr_retired + e->nr_cleared < RETIRE_CAP &&
		    !atomic_load(&e->persist.sync_error);   /* no sync will come */
	if (kept) {
		e->retired[e->nr_retired++] = (struct old_version){ slot, o->pobj, i };
		atomic_fetch_add(old_count(e, o->pobj, i), 1);
	}
	/* the cleared ones go at any sync: a forced one is for the retired */
	uint32_t n = e->nr_retired;
	pthread_mutex_unlock(&e->retire_lock);
	if (!kept) {
		persist_clear(&e->persist, slot);
		bucket_pool_put_spare(&e->pool, slot);
	} else if (bucket_pool_shared_free(&e->pool) < PERSIST_SPARE_SLOTS / 2) {
		atomic_fetch_add(&e->forced_spares, 1);
		(void)sync_and_retire(e, true);   /* the slots back now (a failed sync keeps them) */
	} else if (n >= RETIRE_SYNC_AT) {
		atomic_fetch_add(&e->forced_full, 1);
		(void)sync_and_retire(e, false);   /* cleared; durable, and free, at the next */
	}
}

/* An older version of bucket i of o is retired or its clear not durable.
 * Its counter is 0 for nearly every bucket: no lock. Else the version may
 * be in a sync under way, whose copies no one else reads: wait for that
 * sync (it puts back what it did not finish), then look in the lists. */
static bool has_old_version(struct cache_object *o, uint32_t i)
{
	struct cache_engine *e = o->e;
	if (!atomic_load(old_count(e, o->pobj, i)))
		return false;
	bool found = false;
	pthread_mutex_lock(&e->settle_lock);
	pthread_mutex_lock(&e->retire_lock);
	for (uint32_t k = 0; k < e->nr_retired && !found; k++)
		found = e->retired[k].pobj == o->pobj && e->retired[k].bucket == i;
	for (uint32_t k = 0; k < e->nr_cleared && !found; k++)
		found = e->cleared[k].pobj == o->pobj && e->cleared[k].bucket == i;
	pthread_mutex_unlock(&e->retire_lock);
	pthread_mutex_unlock(&e->settle_lock);
	return found;
}

void store_bucket(struct cache_object *o, uint32_t i, uint64_t offset, uint64_t size,
		  const void *buf)
{
	struct cache_engine *e = o->e;
	if (!e->persisting) {
		bucket_copy(o, i, offset, size, (void *)buf, true);
		return;
	}
	enum bucket_state s = o->b.state[i];
	if (s != BUCKET_DIRTY && s != BUCKET_WRITING) {
		/* Nothing published names this slot: a crash mid-copy loses
		 * only this unacknowledged write. */
		bucket_copy(o, i, offset, size, (void *)buf, true);
		persist_publish(&e->persist, o->b.slot[i], o->pobj, i);
		atomic_fetch_add(&e->published, 1);
		return;
	}
	/* Published: the acknowledged bytes stay whole until the new version
	 * is, so a crash leaves one or the other (the higher seq wins). */
	uint32_t old = o->b.slot[i], fresh = bucket_pool_get_spare(&e->pool);
	uint64_t start = (uint64_t)i * e->geo.bucket_size;
	if (offset > start || offset + size < start + e->geo.bucket_size)   /* the bytes it keeps */
		memcpy(bucket_pool_data(&e->pool, fresh), bucket_pool_data(&e->pool, old),
		       e->geo.bucket_size);
	o->b.slot[i] = fresh;
	bucket_copy(o, i, offset, size, (void *)buf, true);
	persist_publish(&e->persist, fresh, o->pobj, i);
	/* A process crash only (sync none), or a version no sync began after
	 * (no promise for it past a process crash): cleared at once. The fence:
	 * a sync that begins after synced_below is read here finds the new
	 * version whole in the page cache, so the clear never goes alone. */
	atomic_thread_fence(memory_order_seq_cst);
	if (e->cfg.persist_sync == PERSIST_SYNC_NONE ||
	    persist_slot_seq(&e->persist, old) >= atomic_load(&e->synced_below)) {
		persist_clear(&e->persist, old);
		bucket_pool_put_spare(&e->pool, old);
		return;
	}
	retire(o, i, old);
}

void store_dirty(struct cache_object *o, uint32_t first, uint32_t last, uint64_t offset,
		 uint64_t size, const void *buf)
{
	for (uint32_t i = first; i <= last; i++) {
		store_bucket(o, i, offset, size, buf);
		bucket_set(&o->b, &o->e->totals, i, BUCKET_DIRTY);
	}
	mark_dirty(o, offset + size);
	STAT_ADD(o->e, write_bytes, size);
}

void unpublish(struct cache_object *o, uint32_t i)
{
	struct cache_engine *e = o->e;
	if (!e->persisting)
		return;
	if (has_old_version(o, i)) {
		atomic_fetch_add(&e->forced_writeback, 1);
		(void)sync_and_retire(e, true);
	}   /* its older versions' clears durable first */
	persist_clear(&e->persist, o->b.slot[i]);
	atomic_fetch_add(&e->written_back_clears, 1);   /* after the clear: see sync_and_retire */
	atomic_fetch_sub(&e->published, 1);
}

int engine_sync(struct cache_engine *e)
{
	uint64_t t0 = now_ns();
	int rc = sync_and_retire(e, false);
	atomic_fetch_add(&e->sync_ns_total, now_ns() - t0);
	atomic_fetch_add(&e->syncs, 1);
	/* The persist file failed a sync (for good, persist_sync): its
	 * pages whose write-back failed are clean to the kernel, which may
	 * drop them and read the device's older bytes back in. No new dirty
	 * data, then (write-through, refused back on: set_policy), and what
	 * is dirty goes to the blocker at once (cache_engine_maintain). A
	 * replica's data is its primary's to write back. */
	if (rc && !is_replica(e))
		atomic_store(&e->policy, (int)CACHE_WRITETHROUGH);
	return rc;
}
