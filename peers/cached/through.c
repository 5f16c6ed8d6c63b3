/*
 * Uncached reads and writes: past a full pool (no free bucket), and every
 * write-through write, the request goes to the blocker as it is; its
 * reply is merged with what the object caches (a read takes the cached
 * bytes, newer; a write updates the cached copies, or drops them where
 * uncached writes of the object may land in any order).
 */
#include "engine_private.h"

static bool bucket_fully_covered(struct cache_engine *e, uint32_t i, uint64_t offset,
				 uint64_t size)
{
	uint64_t start = (uint64_t)i * e->geo.bucket_size;
	return offset <= start && offset + size >= start + e->geo.bucket_size;
}

static void through_done_job(struct xwork *w, void *arg);

static bool spans_overlap(const struct bucket_geometry *g, const struct cache_req *a,
			  const struct cache_req *b)
{
	struct bucket_span x = bucket_span_in(g, a->offset, a->size),
			   y = bucket_span_in(g, b->offset, b->size);   /* checked at submit */
	return x.first <= y.last && y.first <= x.last;
}

/*
 * Two uncached writes of one bucket out at once may land on the blocker in
 * one order and be answered in the other, so neither may leave its bytes
 * in the bucket: the one answered last need not be the one the blocker
 * kept. Each marks itself and every write in flight whose buckets it
 * shares as raced, for the whole of both lives.
 */
static void through_write_out(struct cache_object *o, struct cache_req *req)
{
	req->raced = false;
	for (struct cache_req *w = o->through_out; w; w = w->next_through)
		if (spans_overlap(&o->e->geo, w, req)) {
			if (!req->raced)
				STAT_ADD(o->e, raced_writes, 1);
			if (!w->raced)
				STAT_ADD(o->e, raced_writes, 1);
			w->raced = req->raced = true;
		}
	req->next_through = o->through_out;
	o->through_out = req;
	o->through_writes++;
}

static void through_write_back(struct cache_object *o, struct cache_req *req)
{
	struct cache_req **p = &o->through_out;
	while (*p != req)
		p = &(*p)->next_through;
	*p = req->next_through;
	o->through_writes--;
}

/* Sends req to the blocker uncached (-> THROUGH), or waits for a blocker
 * request (-> WAIT_IO). */
void go_through(struct cache_object *o, struct cache_req *req)
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
	if (req->op == X_WRITE)   /* here, not where it may wait for a request */
		STAT_ADD(e, write_bytes, req->size);
	bio->req = req;
	req_set(req, REQ_THROUGH);
	o->throughs++;
	if (req->op == X_WRITE)
		through_write_out(o, req);
	else
		req->released_seen = o->b.valid_released;
	bio_send(o, bio, through_done_job);
}

static void through_done_job(struct xwork *w, void *arg)
{
	(void)w;
	struct cache_bio *bio = arg;
	struct cache_object *o = bio->owner;
	struct cache_engine *e = o->e;
	struct cache_req *req = bio->req;
	bool ok = bio->served && bio->serviced == req->size, stored_dirty = false;
	struct bucket_span sp = bucket_span_in(&e->geo, req->offset, req->size);   /* checked */
	/*
	 * Cached bytes newer than what the blocker read (a DIRTY bucket
	 * flushed after the blocker served the read) are laid over it below,
	 * but a bucket given back meanwhile (shed, or dropped by racing
	 * writes) took its copy along: what is left could be older than a
	 * write answered before this read came. Read again.
	 */
	bool reread = req->op == X_READ && ok && o->b.valid_released != req->released_seen;
	if (req->op == X_READ && ok && !reread) {
		if (bio->data != req->data)
			memcpy(req->data, bio->data, req->size);
		STAT_ADD(e, blocker_read_bytes, req->size);
		STAT_ADD(e, read_bytes, req->size);   /* a client's read, as a hit's */
		for (uint32_t i = sp.first; i <= sp.last; i++)   /* cached is newer */
			if (o->b.slot[i] != BUCKET_NO_SLOT && bucket_readable(o->b.state[i]))
				bucket_copy(o, i, req->offset, req->size, req->data, false);
	} else if (req->op == X_WRITE && ok) {
		STAT_ADD(e, blocker_write_bytes, req->size);
		bool racing = req->raced;   /* see through_write_out */
		for (uint32_t i = sp.first; i <= sp.last; i++) {
			enum bucket_state s = o->b.state[i];
			if (s == BUCKET_DIRTY) {
				/* --persist: out of place, never over its published bytes */
				store_bucket(o, i, req->offset, req->size, req->data);
				stored_dirty = true;
			} else if (s == BUCKET_VALID) {
				if (racing) {
					release_bucket(o, i);
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
	} else if (req->op == X_WRITE) {
		/* Failed or short: the blocker may hold these bytes or not, so
		 * no clean copy of them stays (a DIRTY one is newer than either
		 * and is written back over them). */
		for (uint32_t i = sp.first; i <= sp.last; i++)
			if (o->b.state[i] == BUCKET_VALID)
				release_bucket(o, i);
	}
	int error = bio->error ? bio->error : EIO;
	/* A FUA write's bytes in a DIRTY bucket are a new version in the
	 * persist file, over an older one a FLUSH may have made durable; and
	 * a bucket written back may have its header's clear in the page cache
	 * only. The blocker has the bytes durable: the file must hold nothing
	 * older of them before the answer, or a host crash replays it: with
	 * --persist-sync none too (the kernel writes the file's pages back
	 * on its own, a header perhaps and not its clear). */
	if ((req->flags & XF_FUA) && persist_counts(e) && (stored_dirty || clears_pending(e))) {
		int rc = engine_sync(e);
		if (rc) {
			ok = false;
			error = -rc;
		}
	}
	o->throughs--;
	if (req->op == X_WRITE)
		through_write_back(o, req);
	if (req->op == X_WRITE && o->through_writes == 0 && (o->flush_again || o->flush_deferred)) {
		o->flush_again = false;
		queue_flush(o);
	}
	bio_release(e, bio);
	if (reread) {
		STAT_ADD(e, reread, 1);
		e->resume(o, req);
	} else {
		finish(e, req, ok, error, ok ? req->size : 0);
	}
	run_parked(o);
	obj_put(o);
}
