/*
 * The cache engine's top: the index of objects (xcache) and its hooks,
 * dispatching a request to its object's queue and its step there by op,
 * submit (requests that need no object are answered or forwarded here),
 * creating and destroying the engine, the maintenance tick (the flusher's
 * marks, shedding clean buckets of cold objects) and the statistics.
 * The design is in engine.h; the files below this one in
 * engine_private.h.
 */
#include <ctype.h>
#include <sched.h>
#include <unistd.h>

#include "engine_private.h"

/* ---- dispatch on the object's queue ------------------------------------------------ */

/* A FUA write goes to the blocker, unless a persist file synced on FLUSH
 * takes it (write.c: published and synced before the answer), or a
 * replica does (mirrored: on two hosts before the answer). */
static bool fua_through(const struct cache_engine *e, const struct cache_req *req)
{
	return (req->flags & XF_FUA) &&
	       !(e->persisting && e->cfg.persist_sync != PERSIST_SYNC_NONE) &&
	       !(e->cfg.mirror && !mirror_down(e));
}

/* Mirrored, with a marker: write-back (answered once the replica has it)
 * only once the blocker's marker says `mirrored`. Between a reset and
 * that marker write's landing a promote would read `degraded` and refuse
 * the replica, stranding what it was answered for: written through. */
static inline bool marker_allows_write_back(struct cache_engine *e)
{
	return !e->cfg.mirror || !e->cfg.mirror_marker ||
	       atomic_load_explicit(&e->marker_says_mirrored, memory_order_acquire);
}

/* A write's step: into buckets (write-back), or through; a replica holds
 * it; a primary whose replica is down writes it through, or fails it
 * (--mirror-fail stop). */
static void write_step(struct cache_object *o, struct cache_req *req, const struct bucket_span *sp)
{
	struct cache_engine *e = o->e;
	struct engine_counts *c = write_enter(e);   /* before the policy is read */
	bool writeback = atomic_load(&e->policy) == CACHE_WRITEBACK && !fua_through(e, req);
	if (is_replica(e))
		replica_write(o, req, sp);
	else if (req->flags & XF_MIRROR)
		finish(e, req, false, EPERM, 0);   /* promoted: the primary degrades */
	else if (writeback && mirror_down(e) && e->cfg.mirror_fail_stop)
		finish(e, req, false, ENOTCONN, 0);
	else if (writeback && !mirror_down(e) && marker_allows_write_back(e))
		write_back(o, req, sp);
	else
		write_through(o, req, sp);
	write_leave(c);
}

/* A request's step on its object (e->resume): from QUEUED, PARKED or
 * PARKED_WRITE to RUNNING, and on by its op. */
static void object_step(struct cache_object *o, struct cache_req *req)
{
	struct bucket_span sp;

	if (req->state == REQ_PARKED_WRITE)
		o->writes_waiting--;
	req_set(req, REQ_RUNNING);
	if (req->op == X_DELETE || req->op == X_COPY) {
		drop_step(o, req);
		return;
	}
	if (req->op == CACHE_OP_MIRROR_CLEAN) {
		replica_clean_step(o, req);
		return;
	}
	if (o->deleting) {
		park(o, req, REQ_PARKED);
		return;
	}
	if (o->forget_gen != atomic_load(&o->e->forget_gen)) {
		if (o->loads) {   /* they may bring older bytes: wait, drop them too */
			park(o, req, REQ_PARKED);
			return;
		}
		release_clean(o);
		o->forget_gen = atomic_load(&o->e->forget_gen);
	}
	sp = bucket_span_in(&o->e->geo, req->offset, req->size);   /* checked at submit */
	if (req->op == X_READ)
		read_step(o, req, &sp);
	else
		write_step(o, req, &sp);
}

static void rw_job(struct xwork *w, void *arg)
{
	(void)w;
	struct cache_req *req = arg;
	object_step(req->obj, req);
}

void cache_engine_forget_clean(struct cache_engine *e)
{
	atomic_fetch_add(&e->forget_gen, 1);
}

/* ---- the index ------------------------------------------------------------------------ */

static void index_retry(struct xwork *w, void *arg);

#define ALLOC_YIELDS 1000

static bool node_free(struct cache_engine *e)
{
	return atomic_load(&e->nodes_used) < e->nr_nodes;
}

/* A waiter for a node runs again when one is free, or to be refused. */
static bool entry_cond(void *arg)
{
	struct cache_engine *e = arg;
	return node_free(e) || atomic_load(&e->node_refusal);
}

/* Finds or inserts the object and runs req on it; waits for a free node. */
static void dispatch_object(struct cache_engine *e, struct cache_req *req)
{
	size_t len = req->name_len;   /* name_ok measured it */
	struct xcache_entry *ent = xcache_lookup(e->index, req->name, len);
	if (!ent) {
		struct xcache_entry *fresh = xcache_alloc(e->index, req->name, len);
		/* The count says a node is free, the pool has none: one is
		 * between its on_free and the pool, or taken and not yet in
		 * on_init, on a thread that may be preempted. The wait queue
		 * would run this again at once (its condition holds), each
		 * time a level deeper on this stack: yield instead. */
		for (unsigned tries = 0; !fresh && errno == ENOSPC && node_free(e) &&
		     tries < ALLOC_YIELDS; tries++) {
			sched_yield();
			fresh = xcache_alloc(e->index, req->name, len);
		}
		if (!fresh) {
			int refusal = errno == ENOSPC ? atomic_load(&e->node_refusal) : 0;
			if (refusal) {
				STAT_ADD(e, node_refusals, 1);
				finish(e, req, false, refusal, 0);
				return;
			}
			if (errno == ENOSPC) {
				STAT_ADD(e, waits, 1);
				req_set(req, REQ_WAIT_NODE);
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
	if (req->op == X_READ) {
		struct bucket_span sp = bucket_span_in(&e->geo, req->offset, req->size);   /* checked */
		if (read_beside_queue(req->obj, req, &sp))
			return;
	}
	req_set(req, REQ_QUEUED);
	obj_enqueue(req->obj, &req->work, rw_job, req);
}

/* The deferred form of dispatch_object, once a node may be free. */
static void index_retry(struct xwork *w, void *arg)
{
	(void)w;
	struct cache_req *req = arg;
	dispatch_object(req->engine, req);
}

/* A name the index takes; its length kept for the lookup. */
static bool name_ok(struct cache_req *req)
{
	size_t n = req->name ? strlen(req->name) : 0;
	req->name_len = n <= XSEG_MAX_TARGETLEN ? (uint32_t)n : 0;
	return req->name_len != 0;
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

/* XF_FLUSH: "a flush barrier precedes this request" (xseg.h; filed and
 * sosd honour it, vlmcd passes its client's flags on). A FLUSH of
 * everything goes first, on a request of the engine's own; the request
 * follows once it is answered, or fails undone with its error, as filed
 * does. Ignored, a write-back write carrying it was answered while the
 * writes acknowledged before it were in the cache only. */
struct preflush {
	struct cache_req flush;
	struct cache_req *req;
};

static void preflush_done(struct cache_req *flush)
{
	struct preflush *p = (struct preflush *)((char *)flush - offsetof(struct preflush, flush));
	struct cache_req *req = p->req;
	bool ok = flush->served;
	int error = flush->error ? flush->error : EIO;
	free(p);
	if (!ok) {
		finish(req->engine, req, false, error, 0);
		return;
	}
	req->flags &= ~XF_FLUSH;
	cache_engine_submit(req->engine, req);
}

static bool preflush(struct cache_engine *e, struct cache_req *req)
{
	if (!(req->flags & XF_FLUSH) || is_replica(e) ||
	    (req->op == X_FLUSH && !(req->name && *req->name)))   /* one already */
		return false;
	struct preflush *p = calloc(1, sizeof(*p));
	if (!p) {
		finish(e, req, false, ENOMEM, 0);
		return true;
	}
	p->req = req;
	p->flush = (struct cache_req){ .op = X_FLUSH, .name = "", .done = preflush_done };
	cache_engine_flush_all(e, &p->flush);
	return true;
}

/* Requests that waited for the start's check (request.c's check_wait)
 * go in again where they came in, in their order. */
static void release_check_waiters(struct cache_engine *e)
{
	for (struct cache_req *req = check_waiters_take(e), *next; req; req = next) {
		next = req->next_held;
		req->next_held = NULL;
		if (req->check_entry == CHECK_ENTRY_FLUSH_ALL)
			cache_engine_flush_all(e, req);
		else if (req->check_entry == CHECK_ENTRY_POLICY)
			cache_engine_set_policy(e, (enum cache_policy)req->check_policy, req);
		else
			cache_engine_submit(e, req);
	}
}

void cache_engine_fail_waiting(struct cache_engine *e, int error)
{
	pthread_mutex_lock(&e->pmark_lock);
	e->check_waiters_failed = true;
	pthread_mutex_unlock(&e->pmark_lock);
	for (struct cache_req *req = check_waiters_take(e), *next; req; req = next) {
		next = req->next_held;
		req->next_held = NULL;
		finish(e, req, false, error, 0);
	}
}

void cache_engine_submit(struct cache_engine *e, struct cache_req *req)
{
	req_init(e, req);
	int fence = atomic_load(&e->fence);
	if (fence != FENCE_NONE) {   /* see fence_tick, pmark_tick */
		if (check_wait(e, req, CHECK_ENTRY_SUBMIT, 0, &fence))
			return;
		if (fence != FENCE_NONE) {   /* else the check ended meanwhile */
			finish(e, req, false, fence_error(fence), 0);
			return;
		}
	}
	if (!xwaitq_empty(&e->entry_waitq))
		xwaitq_signal(&e->entry_waitq);

	/* A replica serves its primary's writes and cleans only. */
	if (is_replica(e) && (req->op == X_READ || req->op == X_FLUSH || req->op == X_DELETE ||
			      req->op == X_COPY)) {
		COUNT_ADD(e, rst.refused, 1);
		finish(e, req, false, EPERM, 0);
		return;
	}
	if (pmark_refuses(e, req)) {   /* the persist marker's name: ours alone */
		finish(e, req, false, EPERM, 0);
		return;
	}
	if (preflush(e, req))
		return;
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
		/* a write on its way to its object's queue is under way too */
		struct engine_counts *c = req->op == X_WRITE ? write_enter(e) : NULL;
		dispatch_object(e, req);
		if (c)
			write_leave(c);
		return;
	}
	case X_INFO: {
		if (!name_ok(req)) {
			finish(e, req, false, EINVAL, 0);
			return;
		}
		req->obj = object_find(e, req->name);   /* an evicted dirty one too */
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
		barrier_one(e, req, req->copy_src, copy_then);   /* the source first */
		return;
	}
	case CACHE_OP_MIRROR_CLEAN: {
		struct bucket_span sp;
		if (!is_replica(e) || !name_ok(req)) {
			finish(e, req, false, is_replica(e) ? EINVAL : EPERM, 0);
			return;
		}
		/* One evicted while dirty still holds mirrored bytes: the
		 * dispatch revives it and the clean drops them. */
		struct cache_object *o = object_find(e, req->name);
		if (!o) {
			finish(e, req, true, 0, 0);   /* nothing held of it */
			return;
		}
		obj_put(o);
		if (!req->size || bucket_span_of(&e->geo, req->offset, req->size, &sp) < 0) {
			finish(e, req, false, EINVAL, 0);
			return;
		}
		dispatch_object(e, req);
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
	o->pobj = PERSIST_NO_OBJECT;
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
	o->forget_gen = atomic_load(&e->forget_gen);   /* holds nothing yet */
	o->parked = NULL;
	o->waiters = NULL;
	o->loads = o->flushes = o->throughs = o->through_writes = 0;
	o->through_out = NULL;
	o->flush_again = o->deleting = o->on_dirty_list = o->flush_deferred = false;
	o->flush_error = o->last_flush_error = 0;
	o->drop_flushed = false;
	atomic_store(&o->flush_queued, false);
	atomic_store(&o->flush_io_wait, false);
	atomic_store(&o->shed_queued, false);
	atomic_store(&o->dirty_end, 0);
	o->pobj = PERSIST_NO_OBJECT;
	atomic_fetch_add(&e->nodes_used, 1);
	return 0;
}

/* A dirty victim is flushed now, so that its node and buckets come back;
 * not a replica's: it writes back only when promoted, or its older copy
 * could land over what the primary wrote since. */
static void on_evict(void *priv, void *node_priv)
{
	struct cache_engine *e = priv;
	STAT_ADD(e, evictions, 1);
	if (!is_replica(e))
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
	if (o->pobj != PERSIST_NO_OBJECT) {
		persist_object_put(&e->persist, o->pobj);   /* freed once no slot names it */
		o->pobj = PERSIST_NO_OBJECT;
	}
	atomic_fetch_sub(&e->nodes_used, 1);
}

/* ---- life cycle -------------------------------------------------------------------------- */

/* What create built, freed; the persist file closed, marked clean only
 * when nothing was dirty at the start of destroy (e->close_clean). */
static void engine_free(struct cache_engine *e)
{
	xcache_destroy(e->index);   /* on_free puts the object records */
	xwaitq_destroy(&e->entry_waitq);
	xwaitq_destroy(&e->io_waitq);
	xwaitq_destroy(&e->flush_waitq);
	bucket_pool_destroy(&e->pool);
	if (e->persist.map && e->close_kept)
		persist_close_kept(&e->persist);
	else if (e->persist.map)
		persist_close(&e->persist, e->close_clean);
	pthread_mutex_destroy(&e->dirty_lock);
	pthread_mutex_destroy(&e->settle_lock);
	pthread_mutex_destroy(&e->retire_lock);
	pthread_mutex_destroy(&e->backoff_lock);
	pthread_mutex_destroy(&e->mirror_lock);
	pthread_mutex_destroy(&e->marker_lock);
	pthread_mutex_destroy(&e->pmark_lock);
	pthread_mutex_destroy(&e->reset_lock);
	engine_counts_free(e);
	free(e);
}

/* ---- the persist file: open and recover (--persist) ---------------------------------- */

struct recovering {
	struct cache_engine *e;
	struct cache_object **objs;   /* by object record: indexed, referenced */
	uint8_t *used;                /* slots recovery keeps */
	uint32_t objects;             /* distinct objects seen */
	bool over;                    /* more than max_objects: refused */
	int error;
};

/* persist_recover's callback, oldest version first: object `object`'s
 * bucket `bucket` is in `slot`, dirty. */
static int recover_one(void *arg, const char *name, uint32_t name_len, uint32_t object,
		       uint32_t bucket, uint32_t slot)
{
	struct recovering *r = arg;
	struct cache_engine *e = r->e;
	struct cache_object *o = r->objs[object];
	if (!o) {
		if (++r->objects > e->cfg.max_objects)
			r->over = true;
		if (r->over)
			return 0;   /* counted, for the refusal's line */
		struct xcache_entry *ent = xcache_alloc(e->index, name, name_len);
		if (!ent) {
			r->error = errno ? errno : ENOMEM;
			return -1;
		}
		ent = xcache_insert(e->index, ent);
		o = r->objs[object] = xcache_entry_priv(ent);
		o->pobj = object;   /* recovery's hold on the record is the object's */
	}
	r->used[slot] = 1;
	bucket_claim(&o->b, &e->totals, bucket, slot);
	bucket_set(&o->b, &e->totals, bucket, BUCKET_DIRTY);
	atomic_fetch_add(&e->published, 1);
	mark_dirty(o, (uint64_t)(bucket + 1) * e->geo.bucket_size);
	return 0;
}

static char persist_why[512];

/* Opens and recovers the persist file; the pool is its data slots less
 * the recovered ones, PERSIST_SPARE_SLOTS of them kept for spares. 0 or
 * -errno (*why). */
static int persist_start(struct cache_engine *e, const char **why)
{
	const struct cache_config *cfg = &e->cfg;
	uint32_t nr_slots = (uint32_t)(cfg->cache_size / cfg->bucket_size) + PERSIST_SPARE_SLOTS;
	/* One record per object the index holds: recovery then always fits
	 * the index; an object past them (evicted ones still dirty hold
	 * theirs until written back) goes uncached. */
	struct persist_geometry g = {
		.bucket_size = cfg->bucket_size, .object_size = cfg->object_size,
		.nr_slots = nr_slots, .nr_objects = cfg->max_objects,
		.blocker_port = cfg->blocker_port, .segment = cfg->segment_instance,
		.cache_port = cfg->cache_port, .given_up = cfg->port_given_up,
		.left_dirty = cfg->port_left_dirty, .replica = cfg->replica,
	};
	*why = persist_why;
	int rc = persist_open(&e->persist, cfg->persist_path, &g, cfg->persist_discard,
			      &e->discarded_bytes, persist_why, sizeof(persist_why));
	if (rc) {
		persist_close(&e->persist, false);
		return rc;
	}
	e->persisting = true;
	memcpy(e->replica_marker, e->persist.marker, sizeof(e->replica_marker));
	struct recovering r = { .e = e };
	r.objs = calloc(cfg->max_objects, sizeof(*r.objs));
	r.used = calloc(nr_slots, 1);
	if (!r.objs || !r.used) {
		free(r.objs); free(r.used);
		snprintf(persist_why, sizeof(persist_why), "--persist: out of memory");
		return -ENOMEM;
	}
	rc = persist_recover(&e->persist, recover_one, &r, &e->recovery);
	for (uint32_t i = 0; i < cfg->max_objects; i++)
		if (r.objs[i])
			obj_put(r.objs[i]);   /* the dirty list holds it */
	if (!rc && !r.over)
		rc = bucket_pool_init_on(&e->pool, e->persist.data, nr_slots, cfg->bucket_size,
					 r.used);
	free(r.objs);
	free(r.used);
	if (r.over) {
		snprintf(persist_why, sizeof(persist_why), "--persist: '%s' holds dirty data of %u "
			 "objects, more than --max-objects %u", cfg->persist_path, r.objects,
			 cfg->max_objects);
		return -EINVAL;
	}
	if (rc) {
		snprintf(persist_why, sizeof(persist_why), "--persist: recovering '%s' failed: %s",
			 cfg->persist_path, strerror(r.error ? r.error : rc < 0 ? -rc : ENOMEM));
		return rc < 0 ? rc : -(r.error ? r.error : ENOMEM);
	}
	/* With a sync mode, synced before a write-back clears any header: the
	 * clears recovery made (older versions, damage) and those the dead
	 * process had not made durable yet are in the page cache only, and a
	 * host crash that kept an older version's header but not its newer
	 * one's clear would replay the older bytes over the blocker's. What
	 * recovery kept is then on the device: as good as synced. */
	if (cfg->persist_sync != PERSIST_SYNC_NONE && (rc = persist_sync(&e->persist))) {
		snprintf(persist_why, sizeof(persist_why), "--persist: syncing '%s' failed: %s",
			 cfg->persist_path, strerror(-rc));
		return rc;
	}
	/* Without a sync mode the same clears are owed by the first FLUSH or
	 * FUA write: this process made none of them, so its own count of
	 * unsynced clears would say nothing is pending. */
	if (cfg->persist_sync == PERSIST_SYNC_NONE)
		atomic_store(&e->written_back_clears, 1);
	bucket_pool_set_reserve(&e->pool, PERSIST_SPARE_SLOTS);
	atomic_store(&e->synced_below, atomic_load(&e->persist.next_seq));
	/* A replica's clears (the primary's cleans) are not synced: after a
	 * host crash its file can hold a version the primary wrote back and
	 * then overwrote, older than the blocker's, or lack a write it took
	 * (an empty file is no proof of an empty replica). Only a file closed
	 * clean or kept says what it held; else it waits for the primary's
	 * reset (replica_unsure, set by the create). */
	if (cfg->replica && !cfg->persist_discard &&
	    (e->recovery.was_clean || e->recovery.was_kept))
		atomic_store(&e->replica_unsure, false);
	/* Whose data it holds from now on (a replica's start on a file of
	 * its own data holding any was refused: persist_open). */
	rc = persist_set_role(&e->persist, cfg->replica ? PERSIST_ROLE_REPLICA : PERSIST_ROLE_OWN);
	if (rc) {
		snprintf(persist_why, sizeof(persist_why), "--persist: syncing '%s' failed: %s",
			 cfg->persist_path, strerror(-rc));
		return rc;
	}
	if (atomic_load(&e->replica_unsure))
		e->replica_marker[0] = '\0';   /* a promote refuses: nothing to go by */
	return 0;
}

/* One line: what the start found in the persist file. */
void cache_engine_persist_report(struct cache_engine *e, char *buf, size_t len)
{
	const struct persist_recovery *r = &e->recovery;
	if (!e->persisting) {
		snprintf(buf, len, "persist: off");
		return;
	}
	if (e->cfg.persist_discard) {
		snprintf(buf, len, "persist: '%s' started afresh (--persist-discard), %" PRIu64
			 " dirty bytes dropped", e->cfg.persist_path, e->discarded_bytes);
		return;
	}
	snprintf(buf, len, "persist: '%s' (%s): recovered %" PRIu64 " dirty bytes of %" PRIu64
		 " objects; dropped %" PRIu64 " torn headers, %" PRIu64 " torn data, %" PRIu64
		 " orphans, %" PRIu64 " bad object records, %" PRIu64 " older versions",
		 e->cfg.persist_path, r->was_clean ? "closed clean" :
		 r->was_kept ? "kept at a stop" : "not closed clean",
		 r->bytes, r->objects, r->torn_headers, r->torn_data, r->orphans, r->bad_objects,
		 r->older_versions);
	size_t used = strlen(buf);
	if (r->rewritten_bytes && used < len)
		snprintf(buf + used, len - used, "; %" PRIu64 " bytes written again before the "
			 "first sync (a write-back the crashed process saw fail is not on the "
			 "device)", r->rewritten_bytes);
	used = strlen(buf);
	char name[40];
	snprintf(name, sizeof(name), PERSIST_MARKER_OBJECT, e->persist.file_id);
	if (e->persist.copy_forked && used < len)
		snprintf(buf + used, len - used, "; a copy of another persist file (its inode "
			 "changed), holding nothing dirty: its own persist marker from now on, "
			 "'%s'", name);
	else if (e->persist.copy_dirty && used < len)
		snprintf(buf + used, len - used, "; last written under another inode (a copy, or "
			 "restored from one): its persist marker stays the original's, '%s'; never "
			 "run caches on the original and this copy at once", name);
}

struct cache_engine *cache_engine_create(const struct cache_config *cfg,
					 const struct cache_backend *backend,
					 const char **why)
{
	engine_fence_init();   /* before any write (write_enter) */
	struct cache_engine *e = calloc(1, sizeof(*e));
	if (!e) {
		*why = "out of memory";
		errno = ENOMEM;
		return NULL;
	}
	e->cfg = *cfg;
	e->be = *backend;
	e->id = engine_new_id();
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
	e->resume = object_step;
	atomic_init(&e->policy, (int)cfg->policy);
	if (cfg->mirror && cfg->replica) {
		*why = "a cache is a primary (mirror) or a replica, not both";
		goto bad;
	}
	/* a primary writes through until its replica answers a reset */
	atomic_init(&e->mirror_state, cfg->mirror ? MIRROR_CONNECTING : MIRROR_OFF);
	/* not where a previous run of this primary began */
	atomic_init(&e->mirror_tag, (uint32_t)now_ns());
	/* The run: its start time, so that a replica refuses a reset of an
	 * earlier run delivered late (a clock set back across a restart makes
	 * the replica refuse the new run's resets: degraded, nothing lost,
	 * until the replica restarts). */
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	e->mirror_run = ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) | 1;
	e->mirror_state_said = MIRROR_OFF;
	e->written_back = cfg->mirror ? mirror_written_back : NULL;
	pthread_mutex_init(&e->mirror_lock, NULL);
	pthread_mutex_init(&e->reset_lock, NULL);
	CDS_INIT_LIST_HEAD(&e->mirror_out);
	marker_init(e);
	atomic_init(&e->replica, cfg->replica);
	/* A replica started with nothing it can trust (persist_start clears
	 * this for a file closed clean or kept) may lack writes its primary
	 * answered before it (re)started: it takes nothing, so the primary
	 * degrades and writes them back, until the primary resets it. */
	atomic_init(&e->replica_unsure, cfg->replica);
	static const struct xcache_ops ops = {
		.on_node_init = on_node_init, .on_node_fini = on_node_fini,
		.on_init = on_init, .on_evict = on_evict, .on_put = on_put, .on_free = on_free,
	};
	e->nr_nodes = cfg->max_objects * 2;
	e->index = xcache_create(cfg->max_objects, e->nr_nodes, XSEG_MAX_TARGETLEN, &ops, e);
	if (!e->index) {
		*why = "cannot create the object index";
		free(e);
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&e->dirty_lock, NULL);
	pthread_mutex_init(&e->settle_lock, NULL);
	pthread_mutex_init(&e->retire_lock, NULL);
	CDS_INIT_LIST_HEAD(&e->dirty);
	xwaitq_init(&e->entry_waitq, entry_cond, e);
	xwaitq_init(&e->io_waitq, io_cond, e);
	xwaitq_init(&e->flush_waitq, flush_budget_cond, e);
	pthread_mutex_init(&e->backoff_lock, NULL);
	pthread_mutex_init(&e->pmark_lock, NULL);
	e->check_waiters_tail = &e->check_waiters;
	int rc = cfg->persist_path ? persist_start(e, why)
		 : bucket_pool_init_mapped(&e->pool, cfg->premapped,
					   (uint32_t)(cfg->cache_size / cfg->bucket_size),
					   cfg->bucket_size) < 0 ? -ENOMEM : 0;
	if (rc) {
		if (!cfg->persist_path)
			*why = "cannot allocate the bucket pool";
		engine_free(e);
		errno = -rc;
		return NULL;
	}
	/* A primary back with dirty data: was its replica promoted meanwhile?
	 * Asked after the persist marker: did the file fail before? */
	pmark_init(e, cfg->mirror && cfg->mirror_marker && e->recovery.slots ? FENCE_CHECKING
									     : FENCE_NONE);
	return e;
bad:
	free(e);
	errno = EINVAL;
	return NULL;
}

void cache_engine_destroy(struct cache_engine *e)
{
	/* A stop that gave up leaves the persist file dirty for the next start. */
	e->close_clean = cache_engine_clean(e);
	/* An unsure replica holding nothing is not a trusted empty one: its
	 * file stays neither clean nor kept, and the next start unsure too. */
	if (atomic_load(&e->replica_unsure))
		e->close_clean = false;
	/* dirty on purpose, and trusted: the next start may trust it too */
	e->close_kept = !e->close_clean && !atomic_load(&e->replica_unsure);
	while (xcache_evict_coldest(e->index) == 0)
		;
	drain_magazine(e);
	engine_free(e);
}

void cache_engine_keep(struct cache_engine *e)
{
	if (e->persist.map && !atomic_load(&e->replica_unsure))
		persist_close_kept(&e->persist);
}

/*
 * A dirty object keeps its index node until its write-back succeeds: with
 * every node so held and the blocker failing writes (full, or gone), no
 * node frees, and a request for any other object (a read the blocker
 * could serve at once among them) waited for ever. After
 * NODE_REFUSAL_AFTER_NS of failing write-backs such requests fail with
 * the write-back's error, as a dead blocker's own do; the first write-back
 * that succeeds ends it (flush.c).
 */
#define NODE_REFUSAL_AFTER_NS (1000ull * 1000 * 1000)

static void refuse_nodes_if_stuck(struct cache_engine *e, bool short_of_nodes)
{
	pthread_mutex_lock(&e->backoff_lock);
	int err = atomic_load(&e->flush_error);
	bool stuck = err && (short_of_nodes || atomic_load(&e->node_refusal)) &&
		     now_ns() - e->failing_since_ns >= NODE_REFUSAL_AFTER_NS;
	atomic_store(&e->node_refusal, stuck ? err : 0);
	pthread_mutex_unlock(&e->backoff_lock);
}

uint64_t cache_engine_maintain(struct cache_engine *e)
{
	if (pmark_tick(e)) {
		/* The check said `failed`: those that waited for it fail EIO. */
		if (atomic_load(&e->fence) == FENCE_PERSIST_FAILED)
			release_check_waiters(e);
		return 10000000ull;   /* the start's check first: nothing else meanwhile */
	}
	release_check_waiters(e);
	if (atomic_load(&e->fence) != FENCE_NONE) {
		fence_tick(e);   /* nothing flushed, reset or evicted meanwhile */
		return 10000000ull;
	}
	uint64_t total = e->pool.count - e->pool.reserve;   /* the reserve is for spares */
	uint64_t dirty = atomic_load(&e->totals.count[BUCKET_DIRTY]);
	uint64_t claimed = atomic_load(&e->totals.claimed);
	bool short_of_buckets = total - claimed < total / 16 + 1;

	if (dirty * 100 > (uint64_t)e->cfg.dirty_high_pct * total)
		e->flushing = true;
	else if (dirty * 100 <= (uint64_t)e->cfg.dirty_low_pct * total)
		e->flushing = false;
	if (persist_failed(e) && !is_replica(e))
		e->flushing = dirty > 0;   /* every dirty byte back at once (engine_sync) */
	/* Write-through with dirty data left (a switch whose write-back failed:
	 * the blocker was down) retries until it is all back, not only above
	 * the high mark: nothing else would write it back before a stop. */
	if (atomic_load(&e->policy) == CACHE_WRITETHROUGH && !is_replica(e) && dirty)
		e->flushing = true;

	/* Short of buckets, clean buckets of cold objects go first: nothing to
	 * write, and the dirty ones stay to absorb rewrites. Dirty data is
	 * flushed for room only when few clean ones are left. */
	uint64_t busy = dirty + atomic_load(&e->totals.count[BUCKET_WRITING]) +
			atomic_load(&e->totals.count[BUCKET_LOADING]);
	bool clean_to_spare = claimed > busy && claimed - busy > total / 16;
	bool short_of_nodes = !xwaitq_empty(&e->entry_waitq);
	refuse_nodes_if_stuck(e, short_of_nodes);
	/* refusing, nobody waits: room is still wanted, and the write-back
	 * that succeeds ends the refusal */
	short_of_nodes = short_of_nodes || atomic_load(&e->node_refusal);
	bool need_room = (short_of_buckets && !clean_to_spare) || short_of_nodes;
	bool paused = backing_off(e, now_ns());
	mirror_tick(e);   /* a degraded primary writes everything back */
	if (is_replica(e))
		e->flushing = need_room = false;   /* the primary writes back, not we */
	if (!paused && (e->flushing || (need_room && dirty)))
		flush_oldest(e);
	if (short_of_buckets) {
		/* Dirty data becomes clean through the flush above first. Objects
		 * are not evicted whole for room: one can be a good part of the
		 * cache. */
		shed_cold_objects(e, total, claimed);
	}
	atomic_store(&e->io_starved, false);
	xwaitq_signal(&e->io_waitq);
	xwaitq_signal(&e->flush_waitq);
	xwaitq_signal(&e->entry_waitq);
	/* A 1 ms tick only while it helps: not while the flusher pauses. */
	return (e->flushing && !paused) || short_of_buckets ? 1000000ull : 10000000ull;
}

void *cache_engine_write_begin(struct cache_engine *e)
{
	return write_enter(e);
}

void cache_engine_write_end(void *token)
{
	write_leave(token);
}

bool cache_engine_is_replica(struct cache_engine *e)
{
	return is_replica(e);
}

int cache_engine_mirror_changed(struct cache_engine *e)
{
	int s = atomic_load(&e->mirror_state);
	if (s == e->mirror_state_said)
		return -1;
	e->mirror_state_said = s;
	return s;
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

static void mirror_stats(struct cache_engine *e, struct cache_stats *s);

void cache_engine_stats(struct cache_engine *e, struct cache_stats *s)
{
	uint64_t bs = e->geo.bucket_size;
	memset(s, 0, sizeof(*s));
	s->hits = STAT_SUM(e, hits);
	s->misses = STAT_SUM(e, misses);
	s->partial_hits = STAT_SUM(e, partial_hits);
	s->parallel_hits = STAT_SUM(e, parallel_hits);
	s->read_bytes = STAT_SUM(e, read_bytes);
	s->write_bytes = STAT_SUM(e, write_bytes);
	s->blocker_read_bytes = STAT_SUM(e, blocker_read_bytes);
	s->blocker_write_bytes = STAT_SUM(e, blocker_write_bytes);
	s->dirty_bytes = (atomic_load(&e->totals.count[BUCKET_DIRTY]) +
			  atomic_load(&e->totals.count[BUCKET_WRITING])) * bs;
	s->cached_bytes = atomic_load(&e->totals.claimed) * bs;
	s->free_bytes = (e->pool.count - e->pool.reserve - atomic_load(&e->totals.claimed)) * bs;
	s->objects = xcache_nr_active(e->index);
	s->object_nodes = atomic_load(&e->nodes_used);
	s->object_nodes_max = e->nr_nodes;
	s->evictions = STAT_SUM(e, evictions);
	s->clean_released_bytes = STAT_SUM(e, clean_released);
	s->flushes = STAT_SUM(e, flushes);
	s->flush_failures = STAT_SUM(e, flush_failures);
	s->flush_ns_total = STAT_SUM(e, flush_ns_total);
	s->flush_backoff_ns = atomic_load(&e->backoff_ns);
	s->flush_error = atomic_load(&e->flush_error);
	s->waits = STAT_SUM(e, waits);
	s->node_refusals = STAT_SUM(e, node_refusals);
	s->node_refusal = atomic_load(&e->node_refusal);
	s->uncached = STAT_SUM(e, uncached);
	s->lent = STAT_SUM(e, lent);
	s->raced_writes = STAT_SUM(e, raced_writes);
	s->rereads = STAT_SUM(e, reread);
	s->failed = STAT_SUM(e, failed);
	s->blocker_in_flight = atomic_load(&e->bios_in_flight);
	s->barriers_open = atomic_load(&e->barriers_open);
	s->barrier_waiters = atomic_load(&e->barrier_waiters);
	s->policy = (enum cache_policy)atomic_load(&e->policy);
	s->persist = e->persisting;
	if (e->persisting) {
		uint64_t syncs = atomic_load(&e->syncs);
		s->persist_dirty_bytes = atomic_load(&e->published) * bs;
		s->recoveries = e->recovery.slots ? 1 : 0;
		s->persist_left_here = !e->cfg.persist_discard && e->recovery.left_here;
		s->recovered_bytes = e->recovery.bytes;
		s->persist_dropped = e->recovery.torn_headers + e->recovery.torn_data +
				     e->recovery.orphans + e->recovery.bad_objects;
		s->persist_discarded_bytes = e->discarded_bytes;
		s->persist_syncs = syncs;
		s->persist_sync_error = atomic_load(&e->persist.sync_error);
		s->fence = atomic_load(&e->fence);
		s->persist_marker = atomic_load(&e->pmark_landed);
		s->persist_marker_found = atomic_load(&e->pmark_found);
		s->persist_marker_held = atomic_load(&e->pmark_held_total);
		s->persist_marker_failures = atomic_load(&e->pmark_failures);
		s->persist_marker_dropped_bytes = atomic_load(&e->pmark_dropped_bytes);
		s->persist_marker_name = e->pmark_name;
		s->persist_marker_refused = atomic_load(&e->pmark_refused);
		s->persist_marker_read_failures = atomic_load(&e->pmark_read_failures);
		s->persist_marker_read_error = atomic_load(&e->pmark_read_error);
		uint64_t since = atomic_load(&e->pmark_check_since_ns);
		s->persist_check_ms = since ? (now_ns() - since) / 1000000 : 0;
		s->persist_last_run = atomic_load(&e->pmark_found_run);
		s->persist_sync_avg_us = syncs ? atomic_load(&e->sync_ns_total) / syncs / 1000 : 0;
		s->persist_forced_full = atomic_load(&e->forced_full);
		s->persist_forced_spares = atomic_load(&e->forced_spares);
		s->persist_forced_writeback = atomic_load(&e->forced_writeback);
	}
	mirror_stats(e, s);
}

/* --mirror-port and --replica figures. */
static void mirror_stats(struct cache_engine *e, struct cache_stats *s)
{
	uint64_t sent = atomic_load(&e->mst.writes) + atomic_load(&e->mst.cleans) +
			atomic_load(&e->mst.failures);
	s->mirror_state = atomic_load(&e->mirror_state);
	s->mirror_writes = atomic_load(&e->mst.writes);
	s->mirrored_bytes = atomic_load(&e->mst.bytes);
	s->mirror_failures = atomic_load(&e->mst.failures);
	s->mirror_cleans = atomic_load(&e->mst.cleans);
	s->mirror_in_flight = atomic_load(&e->mst.in_flight);
	s->mirror_rtt_avg_us = sent ? atomic_load(&e->mst.rtt_ns_total) / sent / 1000 : 0;
	s->mirror_waits = atomic_load(&e->mst.waits);
	s->mirror_lost = atomic_load(&e->mst.lost);
	s->degradations = atomic_load(&e->mst.degradations);
	s->degraded_ns_total = atomic_load(&e->mst.degraded_ns_total);
	if (s->mirror_state == MIRROR_DEGRADED)   /* the degradation under way too */
		s->degraded_ns_total += now_ns() - atomic_load(&e->degraded_since_ns);
	s->exposure_bytes = atomic_load(&e->mst.exposure_bytes);
	s->exposure_ns = atomic_load(&e->mst.exposure_ns);
	s->mirror_error = atomic_load(&e->mirror_error);
	s->replica = is_replica(e);
	s->replica_unsure = atomic_load(&e->replica_unsure);
	s->replica_writes = atomic_load(&e->rst.writes);
	s->replica_cleans = atomic_load(&e->rst.cleans);
	s->replica_resets = atomic_load(&e->rst.resets);
	s->replica_refused = atomic_load(&e->rst.refused);
	s->replica_primary_changes = atomic_load(&e->rst.primary_changes);
	pthread_mutex_lock(&e->marker_lock);
	s->marker_state = e->marker_written;
	snprintf(s->marker_name, sizeof(s->marker_name), "%s", s->replica ? e->replica_marker :
		 e->cfg.mirror_marker ? e->cfg.mirror_marker : "");
	pthread_mutex_unlock(&e->marker_lock);
	s->marker_writes = atomic_load(&e->marker_writes);
	s->marker_failures = atomic_load(&e->marker_failures);
	s->marker_held = atomic_load(&e->marker_held_total);
	s->promotes_refused = atomic_load(&e->promotes_refused);
	s->promote_marker_said = atomic_load(&e->promote_marker_said);
}

/* The volume an object belongs to: vlmcd names its objects
 * VOLUME_<16 hex digits>; any other name is its own. */
static size_t volume_len(const char *name)
{
	size_t n = strlen(name);
	if (n < 18 || name[n - 17] != '_')
		return n;
	for (size_t i = n - 16; i < n; i++)
		if (!isxdigit((unsigned char)name[i]))
			return n;
	return n - 17;
}

static int by_bytes_desc(const void *a, const void *b)
{
	const struct cache_volume_dirty *x = a, *y = b;
	return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : 0;
}

/* Adds an object's bytes to its volume's entry in v (n entries, room for
 * cap); returns the new n, or counts them in *rest when there is no room. */
static unsigned add_to_volume(struct cache_volume_dirty *v, unsigned n, unsigned cap,
			      const char *name, uint64_t bytes, uint64_t *rest)
{
	size_t len = volume_len(name);
	unsigned i = 0;
	while (i < n && (strlen(v[i].name) != len || memcmp(v[i].name, name, len)))
		i++;
	if (i == n) {
		if (n == cap) {
			*rest += bytes;
			return n;
		}
		memcpy(v[i].name, name, len);
		v[i].name[len] = '\0';
		n++;
	}
	v[i].bytes += bytes;
	return n;
}

unsigned cache_engine_dirty_by_volume(struct cache_engine *e, struct cache_volume_dirty *out,
				      unsigned max, uint64_t *rest)
{
	struct cache_object *o;
	unsigned cap = 0, n = 0;
	*rest = 0;
	pthread_mutex_lock(&e->dirty_lock);
	cds_list_for_each_entry(o, &e->dirty, dirty_link)
		cap++;
	pthread_mutex_unlock(&e->dirty_lock);
	/* One entry per dirty object at most; objects dirtied since the count
	 * that need a new entry go to *rest (statistics, not bookkeeping). */
	struct cache_volume_dirty *v = calloc(cap + 1, sizeof(*v));
	if (!v)
		return 0;
	pthread_mutex_lock(&e->dirty_lock);   /* objects stay on the list while dirty */
	cds_list_for_each_entry(o, &e->dirty, dirty_link) {
		uint64_t bytes = (uint64_t)atomic_load_explicit(&o->b.unwritten,
								memory_order_relaxed) * e->geo.bucket_size;
		if (bytes)
			n = add_to_volume(v, n, cap, o->name, bytes, rest);
	}
	pthread_mutex_unlock(&e->dirty_lock);
	qsort(v, n, sizeof(*v), by_bytes_desc);
	for (unsigned i = max; i < n; i++)
		*rest += v[i].bytes;
	n = n < max ? n : max;
	memcpy(out, v, n * sizeof(*v));
	free(v);
	return n;
}

const char *cache_fence_name(int fence)
{
	static const char *const names[] = {
		[FENCE_NONE] = "", [FENCE_CHECKING] = "checking", [FENCE_PROMOTED] = "promoted",
		[FENCE_PERSIST_CHECKING] = "persist-checking",
		[FENCE_PERSIST_DROPPING] = "persist-dropping",
		[FENCE_PERSIST_FAILED] = "persist-failed",
	};
	return fence >= 0 && fence <= FENCE_PERSIST_FAILED ? names[fence] : "?";
}

const char *cache_persist_marker_name(int state)
{
	return state < 0 ? "" : pmark_state_name(state);
}
