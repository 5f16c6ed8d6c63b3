/*
 * Replicated write-back, the primary's side (--mirror-port, issue 23).
 *
 * A write-back write, once in its buckets, is copied (its whole buckets)
 * into an X_WRITE to the mirror port, a synapsed that reaches the replica
 * cached on another host, and answered only when the replica has it.
 * Once the flusher has written buckets back, the replica is told to drop
 * them ("mirror-clean OFF LEN", target: the object). Both go out in the
 * order they were made, per object: a request waits while an earlier one
 * of its object that overlaps it is out, so the replica never applies an
 * older copy after a newer one or a clean before the write it cleans;
 * requests of other objects, and of other buckets, go out at once
 * (pipelined: a mirrored write costs one round trip).
 *
 * A mirror request that fails makes the primary DEGRADED: the write it
 * carried is answered only once its object is clean on the blocker, new
 * write-back writes go through (or fail, --mirror-fail stop), and the
 * maintenance tick writes every dirty byte back. Once nothing is dirty
 * and nothing is out, it tells the replica to drop everything
 * ("mirror-reset", at most once a second): the replica's answer makes it
 * MIRRORED again. A new primary starts CONNECTING, the same way.
 */
#include "engine_private.h"

#define RESET_EVERY_NS 1000000000ull

static const char *const state_names[] = {
	[MIRROR_OFF] = "off", [MIRROR_CONNECTING] = "connecting",
	[MIRROR_MIRRORED] = "mirrored", [MIRROR_DEGRADED] = "degraded",
};

const char *cache_mirror_state_name(int state)
{
	return state >= MIRROR_OFF && state <= MIRROR_DEGRADED ? state_names[state] : "?";
}

static uint64_t dirty_bytes_now(struct cache_engine *e)
{
	return (atomic_load(&e->totals.count[BUCKET_DIRTY]) +
		atomic_load(&e->totals.count[BUCKET_WRITING])) * e->geo.bucket_size;
}

/* The replica failed us: from now on the dirty data is ours alone. */
static void degrade(struct cache_engine *e, int error)
{
	int expected = MIRROR_MIRRORED;
	atomic_store(&e->mirror_error, error ? error : EIO);
	if (!atomic_compare_exchange_strong(&e->mirror_state, &expected, MIRROR_DEGRADED))
		return;
	atomic_store(&e->degraded_since_ns, now_ns());
	atomic_store(&e->mst.exposure_bytes, dirty_bytes_now(e));
	atomic_store(&e->mst.exposure_ns, 0);
	COUNT_ADD(e, mst.degradations, 1);
	marker_want(e, MARKER_DEGRADED);   /* before any answer the replica lacks */
}

/* ---- an object's mirror requests, in issue order -------------------------------- */

static bool overlaps(const struct mirror_op *a, const struct mirror_op *b)
{
	return a->first < b->first + b->count && b->first < a->first + a->count;
}

/* No earlier request of its object overlaps op. */
static bool may_send(const struct cache_object *o, const struct mirror_op *op)
{
	for (const struct mirror_op *p = o->mirror_head; p != op; p = p->next)
		if (overlaps(p, op))
			return false;
	return true;
}

static void append(struct cache_object *o, struct mirror_op *op)
{
	op->next = NULL;
	if (o->mirror_tail)
		o->mirror_tail->next = op;
	else
		o->mirror_head = op;
	o->mirror_tail = op;
	atomic_fetch_add(&o->e->mst.ops, 1);
}

static void unlink_op(struct cache_object *o, struct mirror_op *op)
{
	struct mirror_op **pp = &o->mirror_head, *prev = NULL;
	while (*pp != op) {
		prev = *pp;
		pp = &(*pp)->next;
	}
	*pp = op->next;
	if (o->mirror_tail == op)
		o->mirror_tail = prev;
	atomic_fetch_sub(&o->e->mst.ops, 1);   /* after a failure's degrade() */
}

/* ---- a write the replica could not take ------------------------------------------ */

static void answer_when_clean(struct barrier *b)
{
	struct cache_engine *e = b->e;
	struct cache_req *req = b->req;
	int error = atomic_load(&b->error);
	free(b);
	finish(e, req, !error, error, error ? 0 : req->size);
}

/* req (MIRROR): its bytes are in DIRTY buckets but not on the replica.
 * They are acknowledged once on the blocker (the degraded flush writes
 * them back), or, with --mirror-fail stop, the write fails. */
static void unreplicated(struct cache_object *o, struct cache_req *req)
{
	struct cache_engine *e = o->e;
	if (e->cfg.mirror_fail_stop) {
		finish(e, req, false, atomic_load(&e->mirror_error), 0);
		return;
	}
	barrier_one(e, req, o->name, answer_when_clean);
}

/* ---- sending and completing ---------------------------------------------------------- */

static void mirror_done_job(struct xwork *w, void *arg);

/* op's request to the replica, if one is free: a write's bytes (copied
 * when it was made), a clean's text. */
static bool take_bio(struct cache_object *o, struct mirror_op *op)
{
	struct cache_engine *e = o->e;
	uint64_t bs = e->geo.bucket_size, off = op->first * bs, size = op->count * bs;
	if (op->bio)
		return true;
	if (op->req) {
		op->bio = bio_alloc(e, X_WRITE, o->name, off, size, NULL);
		if (!op->bio)
			return false;
		memcpy(op->bio->data, op->buf, size);
		free(op->buf);
		op->buf = NULL;
	} else {
		char text[64];
		int n = snprintf(text, sizeof(text), "mirror-clean %" PRIu64 " %" PRIu64, off, size);
		op->bio = bio_alloc(e, X_CONTROL, o->name, 0, (uint64_t)n, NULL);
		if (!op->bio)
			return false;
		memcpy(op->bio->data, text, (size_t)n);
	}
	op->bio->flags = op->flags;
	op->bio->mirror = true;
	return true;
}

static void drop_op(struct cache_object *o, struct mirror_op *op)
{
	unlink_op(o, op);
	if (op->bio)
		bio_release(o->e, op->bio);
	free(op->buf);
	free(op);
}

static void after_settled(struct cache_object *o);

static void retry_job(struct xwork *w, void *arg)
{
	(void)w;
	struct cache_object *o = arg;
	atomic_store(&o->mirror_io_wait, false);
	/* the mirror down meanwhile, send_ready drops what was not sent and
	 * may empty the list with nothing out: no reply would resume what is
	 * parked on it (write.c, drop.c), so this does as a reply's job */
	after_settled(o);
	obj_put(o);
}

static void after_io_wait(struct xwork *w, void *arg)
{
	(void)w;
	struct cache_object *o = arg;
	obj_enqueue(o, &o->mirror_retry_work, retry_job, o);
}

/* No request was free: send_ready again once one is (never both works of
 * o queued twice: the flag stays set until retry_job runs). */
static void send_when_freed(struct cache_object *o)
{
	bool expected = false;
	if (!atomic_compare_exchange_strong(&o->mirror_io_wait, &expected, true))
		return;
	obj_get(o);
	COUNT_ADD(o->e, mst.waits, 1);
	xwork_init(&o->mirror_io_work, after_io_wait, o);
	xwaitq_enqueue(&o->e->io_waitq, &o->mirror_io_work);
}

/* Sends every request of o that may go, in order; while the mirror is
 * down, writes not sent are unreplicated and cleans not sent are dropped
 * (the reset empties the replica before it is used again). */
static void send_ready(struct cache_object *o)
{
	struct cache_engine *e = o->e;
	struct mirror_op *op = o->mirror_head, *next;
	for (; op; op = next) {
		next = op->next;
		if (op->sent)
			continue;
		if (mirror_down(e)) {
			struct cache_req *req = op->req;
			drop_op(o, op);
			if (req)
				unreplicated(o, req);
			continue;
		}
		if (!may_send(o, op))
			continue;
		if (!take_bio(o, op)) {
			send_when_freed(o);
			break;
		}
		op->sent = true;
		op->bio->started_ns = now_ns();
		op->bio->priv = op;
		COUNT_ADD(e, mst.in_flight, 1);
		pthread_mutex_lock(&e->mirror_lock);
		cds_list_add_tail(&op->out_link, &e->mirror_out);
		pthread_mutex_unlock(&e->mirror_lock);
		bio_send(o, op->bio, mirror_done_job);
	}
}

/* Whoever settles op first, its reply or mirror_lost, answers for it. */
static bool settle(struct cache_engine *e, struct mirror_op *op)
{
	if (atomic_exchange(&op->settled, true))
		return false;
	pthread_mutex_lock(&e->mirror_lock);
	cds_list_del(&op->out_link);
	pthread_mutex_unlock(&e->mirror_lock);
	atomic_fetch_sub(&e->mst.in_flight, 1);
	return true;
}

/* The rest of o's list goes on once op is settled. */
static void after_settled(struct cache_object *o)
{
	send_ready(o);
	/* Some request is out whenever the list is not empty (the first one
	 * always may go, or waits for a free request: retry_job comes here
	 * too), so this comes for the last one: write-throughs and DELETEs
	 * parked for an empty list (write.c, drop.c) go on. */
	if (!o->mirror_head)
		run_parked(o);
	marker_switches(o->e);
}

static void mirror_done_job(struct xwork *w, void *arg)
{
	(void)w;
	struct cache_bio *bio = arg;
	struct cache_object *o = bio->owner;
	struct cache_engine *e = o->e;
	struct mirror_op *op = bio->priv;
	if (!settle(e, op)) {
		/* settled as lost: lost_job answers for it */
		bio_release(e, bio);
		if (atomic_fetch_sub(&op->refs, 1) == 1)
			free(op);
		obj_put(o);
		return;
	}
	struct cache_req *req = op->req;
	bool ok = bio->served && (bio->op != X_WRITE || bio->serviced == bio->size);

	COUNT_ADD(e, mst.rtt_ns_total, now_ns() - bio->started_ns);
	if (!ok) {
		COUNT_ADD(e, mst.failures, 1);
		degrade(e, bio->error ? bio->error : EIO);
	} else if (req) {
		COUNT_ADD(e, mst.writes, 1);
		COUNT_ADD(e, mst.bytes, bio->size);
	} else {
		COUNT_ADD(e, mst.cleans, 1);
	}
	drop_op(o, op);
	if (req) {
		req->on_replica = ok;   /* the marker holds no such answer */
		if (ok)
			finish(e, req, true, 0, req->size);
		else
			unreplicated(o, req);
	}
	after_settled(o);
	obj_put(o);
}

/* op was lost (on its object's queue): failed as if its reply said so,
 * off the object's list; op and its request stay for a reply that may
 * still come (mirror_done_job then frees them). */
static void lost_job(struct xwork *w, void *arg)
{
	(void)w;
	struct mirror_op *op = arg;
	struct cache_object *o = op->o;
	struct cache_req *req = op->req;
	unlink_op(o, op);
	if (atomic_fetch_sub(&op->refs, 1) == 1)
		free(op);
	if (req)
		unreplicated(o, req);
	after_settled(o);
	obj_put(o);
}

void cache_engine_mirror_lost(struct cache_engine *e, int error)
{
	struct mirror_op *op, *tmp;
	struct cds_list_head lost;
	CDS_INIT_LIST_HEAD(&lost);
	pthread_mutex_lock(&e->mirror_lock);
	cds_list_for_each_entry_safe(op, tmp, &e->mirror_out, out_link) {
		atomic_store(&op->refs, 2);   /* before a reply's job can look */
		if (!atomic_exchange(&op->settled, true)) {
			cds_list_del(&op->out_link);
			cds_list_add_tail(&op->out_link, &lost);
		}
	}
	pthread_mutex_unlock(&e->mirror_lock);
	degrade(e, error);   /* also idle: the stats say so at once */
	cds_list_for_each_entry_safe(op, tmp, &lost, out_link) {
		cds_list_del(&op->out_link);
		atomic_fetch_sub(&e->mst.in_flight, 1);
		COUNT_ADD(e, mst.failures, 1);
		COUNT_ADD(e, mst.lost, 1);
		obj_get(op->o);
		obj_enqueue(op->o, &op->lost_work, lost_job, op);
	}
}

/* A request of o to the replica, after those made before it. */
static bool enqueue(struct cache_object *o, struct cache_req *req, uint32_t first,
		    uint32_t count)
{
	struct cache_engine *e = o->e;
	uint64_t bs = e->geo.bucket_size, off = first * bs, size = count * bs;
	struct mirror_op *op = calloc(1, sizeof(*op));
	if (!op)
		return false;
	op->o = o;
	op->req = req;
	op->first = first;
	op->count = count;
	/* the epoch it was made in: sent after a later reset (held before,
	 * or on the way) it is refused, not taken as newer */
	op->flags = XF_MIRROR | (atomic_load(&e->mirror_tag) & 0xffff) << XF_TAG_SHIFT;
	if (req) {
		/* the bytes now: a later write may change the buckets first */
		op->bio = bio_alloc(e, X_WRITE, o->name, off, size, NULL);
		op->buf = op->bio ? NULL : malloc(size);
		if (!op->bio && !op->buf) {
			free(op);
			return false;
		}
		for (uint32_t i = first; i < first + count; i++)
			bucket_copy(o, i, off, size, op->bio ? op->bio->data : op->buf, false);
		if (op->bio) {
			op->bio->mirror = true;
			op->bio->flags = op->flags;   /* a promoted replica refuses it */
		}
	}
	append(o, op);
	send_ready(o);
	return true;
}

void mirror_write(struct cache_object *o, struct cache_req *req, uint32_t first, uint32_t last)
{
	struct cache_engine *e = o->e;
	req_set(req, REQ_MIRROR);
	if (!mirror_down(e) && enqueue(o, req, first, last - first + 1))
		return;   /* answered when the replica has it */
	if (!mirror_down(e))
		degrade(e, ENOMEM);
	unreplicated(o, req);
}

/* Tells the replica to drop buckets [first, first+count) of o. */
static void send_clean(struct cache_object *o, uint32_t first, uint32_t count)
{
	if (!enqueue(o, NULL, first, count))
		degrade(o->e, ENOMEM);   /* the reset drops what it holds */
}

void mirror_written_back(struct cache_object *o, uint32_t first, uint32_t count)
{
	if (!mirror_down(o->e))
		send_clean(o, first, count);
}

void mirror_dropped(struct cache_object *o)
{
	if (o->e->cfg.mirror && !mirror_down(o->e))
		send_clean(o, 0, o->b.n);
}

/* ---- back to mirrored: the reset --------------------------------------------------- */

static void reset_done(struct cache_bio *bio)
{
	struct cache_engine *e = bio->engine;
	uint64_t now = now_ns();
	if (bio->served) {
		int was = atomic_load(&e->mirror_state);
		if (was == MIRROR_DEGRADED)
			COUNT_ADD(e, mst.degraded_ns_total, now - atomic_load(&e->degraded_since_ns));
		atomic_store_explicit(&e->mirror_state, MIRROR_MIRRORED, memory_order_release);
		marker_mirrored(e);   /* after the state: see marker.c's hold_answer */
	} else {
		atomic_store(&e->mirror_error, bio->error ? bio->error : EIO);
	}
	bio_release(e, bio);
	atomic_store(&e->reset_out, false);
}

void mirror_tick(struct cache_engine *e)
{
	if (!e->cfg.mirror)
		return;
	marker_tick(e);
	if (!mirror_down(e))
		return;
	uint64_t now = now_ns();
	bool clean = atomic_load(&e->totals.count[BUCKET_DIRTY]) == 0 &&
		     atomic_load(&e->totals.count[BUCKET_WRITING]) == 0;
	/* How long dirty data existed here alone after the replica failed. */
	if (clean && atomic_load(&e->mirror_state) == MIRROR_DEGRADED && !atomic_load(&e->mst.exposure_ns))
		atomic_store(&e->mst.exposure_ns, now - atomic_load(&e->degraded_since_ns) + 1);
	e->flushing = !clean;   /* every dirty byte back at once */
	if (!clean || atomic_load(&e->mst.in_flight) || atomic_load(&e->reset_out) ||
	    now < atomic_load(&e->next_reset_ns))
		return;
	/* a new epoch: what was made before it is refused from now on, an
	 * earlier reset too (it may come after this one). The marker's name
	 * rides along: a promote of the replica reads it. */
	uint32_t count = atomic_load(&e->mirror_tag) + 1;
	char cmd[sizeof("mirror-reset @1234567812345678.12345678 ") + MARKER_NAME_MAX];
	int n = snprintf(cmd, sizeof(cmd), "mirror-reset @%" PRIx64 ".%x%s%s", e->mirror_run, count,
			 e->cfg.mirror_marker ? " " : "",
			 e->cfg.mirror_marker ? e->cfg.mirror_marker : "");
	struct cache_bio *bio = bio_alloc(e, X_CONTROL, "", 0, (uint64_t)n, NULL);
	if (!bio)
		return;
	memcpy(bio->data, cmd, (size_t)n);
	atomic_store(&e->mirror_tag, count);
	bio->flags = XF_MIRROR | (count & 0xffff) << XF_TAG_SHIFT;
	bio->mirror = true;
	bio->engine = e;
	bio->done = reset_done;
	bio->started_ns = now;
	atomic_store(&e->reset_out, true);
	atomic_store(&e->next_reset_ns, now + RESET_EVERY_NS);
	e->be.submit(e->be.ctx, bio);
}
