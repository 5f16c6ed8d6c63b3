/*
 * Reads: a hit copies the buckets out; a miss loads the missing buckets
 * (INVALID -> LOADING) in runs, the read's own request lent to the blocker
 * where it is exactly one run, and parks until the loads come back
 * (LOADING -> VALID, on probation). A load never starts beside an
 * uncached write of the object, nor while a write-through write waits.
 */
#include "engine_private.h"

/* Whether parked request r needed the bytes of buckets [first, first+count)
 * that a load failed to bring: a write only those of a bucket it covers in
 * part (the rest of it); one it covers whole it overwrites. */
static bool needed_load(struct cache_engine *e, const struct cache_req *r, uint32_t first,
			uint32_t count)
{
	uint64_t bs = e->geo.bucket_size, lo = (uint64_t)first * bs, hi = lo + (uint64_t)count * bs;
	struct bucket_span sp;
	if (!(r->offset < hi && r->offset + r->size > lo))
		return false;
	if (r->op != X_WRITE || bucket_span_of(&e->geo, r->offset, r->size, &sp) < 0)
		return true;
	return (bucket_span_head_partial(&e->geo, &sp) && sp.first >= first &&
		sp.first < first + count) ||
	       (bucket_span_tail_partial(&e->geo, &sp) && sp.last >= first &&
		sp.last < first + count);
}

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
		/* requests waiting for these buckets' bytes fail rather than retry */
		for (struct cache_req *r = o->parked; r; r = r->next_parked)
			if (needed_load(e, r, bio->first, bio->count))
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
bool load_runs(struct cache_object *o, uint32_t first, uint32_t last, bool *no_io,
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

/*
 * A hit served beside its object's queue (issue 24: a hot object's reads
 * run on every thread at once, not one at a time on its queue). It goes
 * in as a reader of the queue, so only while no job of the object runs,
 * and a job queued after it (a write, a load's end, shedding) waits until
 * it is out; a write answered before it came is in the buckets it reads.
 * It changes nothing of the object, so only a plain hit qualifies: every
 * bucket readable and none on probation (a first hit takes the bucket
 * off, a change of state: that one goes through the queue), the object
 * not being dropped nor its clean buckets to be forgotten. False: the queue is busy or it is not such a hit;
 * the read goes on the queue as before. True: answered.
 */
bool read_beside_queue(struct cache_object *o, struct cache_req *req, const struct bucket_span *sp)
{
	struct cache_engine *e = o->e;
	if (!xworkq_read_begin(&o->wq))
		return false;
	bool hit = !o->deleting && o->forget_gen == atomic_load(&e->forget_gen);
	for (uint32_t i = sp->first; hit && i <= sp->last; i++)
		hit = bucket_readable(o->b.state[i]) && !o->b.probation[i];
	if (hit)
		for (uint32_t i = sp->first; i <= sp->last; i++)
			bucket_copy(o, i, req->offset, req->size, req->data, false);
	xworkq_read_end(&o->wq);
	if (!hit)
		return false;
	STAT_ADD(e, hits, 1);
	STAT_ADD(e, parallel_hits, 1);
	STAT_ADD(e, read_bytes, req->size);
	finish(e, req, true, 0, req->size);
	return true;
}

/* A read on its object (RUNNING): a hit is answered; a miss loads what is
 * missing and parks until the loads end, or goes through past a full pool. */
void read_step(struct cache_object *o, struct cache_req *req, const struct bucket_span *sp)
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
		/* none cached: a miss, whether or not another read loads them */
		if (missing + loading == sp->last - sp->first + 1)
			STAT_ADD(e, misses, 1);
		else
			STAT_ADD(e, partial_hits, 1);
	}
	if (missing) {
		bool no_io;
		if (o->through_writes || o->writes_waiting) {
			/* The blocker may serve a load before or after that write;
			 * and new loads would keep a waiting write waiting. */
			park(o, req, REQ_PARKED);
			return;
		}
		if (!load_runs(o, sp->first, sp->last, &no_io, req)) {
			count_uncached(e, req);
			go_through(o, req);
			return;
		}
		if (no_io && !o->loads) {
			wait_for_io(o, req);
			return;
		}
	}
	park(o, req, REQ_PARKED);
}
