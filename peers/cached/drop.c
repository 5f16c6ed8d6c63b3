/*
 * DELETE, and COPY onto an object: once nothing of the object is in
 * flight and its dirty bytes are written back, every cached byte of it is
 * dropped and the request goes to the blocker; no load starts on the
 * object meanwhile (o->deleting), and requests for it park until then.
 * Written back first because the blocker may fail the request: dropped
 * dirty bytes could not come back, and the object would read as it was
 * before writes that were acknowledged (a flush that fails fails the
 * request, the dirty bytes kept). Mirrored, the replica is told to drop
 * its copy too, and the request goes on only once it did.
 */
#include "engine_private.h"

void drop_buckets(struct cache_object *o)
{
	struct cache_engine *e = o->e;
	for (uint32_t i = 0; i < o->b.n; i++)
		if (o->b.state[i] == BUCKET_DIRTY || o->b.state[i] == BUCKET_VALID) {
			if (o->b.state[i] == BUCKET_DIRTY)
				unpublish(o, i);
			bucket_set(&o->b, &e->totals, i, BUCKET_INVALID);
		}
	release_clean(o);
	mark_clean(o);
}

static void drop_all(struct cache_object *o)
{
	drop_buckets(o);
	if (!o->drop_told) {
		mirror_dropped(o);   /* the replica drops it too */
		o->drop_told = true;
	}
}

static void drop_done_job(struct xwork *w, void *arg);

/* DELETE, or COPY onto this object: drop what is cached, then forward. */
void drop_step(struct cache_object *o, struct cache_req *req)
{
	struct cache_engine *e = o->e;
	o->deleting = true;            /* no loads start meanwhile */
	if (o->loads || o->flushes || o->throughs) {
		park(o, req, REQ_PARKED);
		return;
	}
	if (!object_clean(o)) {
		if (o->drop_flushed && o->last_flush_error) {   /* the write-back failed */
			int error = o->last_flush_error;
			o->drop_flushed = false;
			o->deleting = false;
			finish(e, req, false, error, 0);
			run_parked(o);
			return;
		}
		o->drop_flushed = true;   /* flush_cycle_done runs us again */
		/* A flush waiting for a free blocker request runs when one
		 * comes back; another queued now would find none, end its
		 * cycle at once and run us again: a spin on this queue. */
		if (!atomic_load(&o->flush_io_wait))
			queue_flush(o);
		park(o, req, REQ_PARKED);
		return;
	}
	o->drop_flushed = false;
	drop_all(o);
	/* Mirrored: answered only once the replica dropped its copy, or a
	 * replica promoted later would write the dropped bytes back. */
	if (o->mirror_head) {
		park(o, req, REQ_PARKED);
		return;
	}
	struct cache_bio *bio = bio_alloc(e, req->op, req->name, req->offset, 0, req->copy_src);
	if (!bio) {
		o->deleting = false;
		wait_for_io(o, req);
		return;
	}
	bio->flags = req->flags;
	bio->size = req->size;
	bio->req = req;
	o->drop_told = false;
	req_set(req, REQ_DROPPING);
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
