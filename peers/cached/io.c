/*
 * Blocker requests (struct cache_bio): taking one from the glue, or the
 * client's own request lent to the blocker, and giving it back; at most
 * MAX_BIOS_IN_FLIGHT out at once, and whoever finds none free waits on
 * io_waitq. Also forwarding a whole request (INFO, a FLUSH after its
 * barrier) that needs no object: the one step of a request that talks to
 * the blocker without a cached object's queue.
 */
#include "engine_private.h"

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

struct cache_bio *bio_alloc(struct cache_engine *e, uint32_t op, const char *name,
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
struct cache_bio *bio_for_req(struct cache_engine *e, struct cache_req *req,
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

void bio_release(struct cache_engine *e, struct cache_bio *bio)
{
	e->be.release(e->be.ctx, bio);
	atomic_fetch_sub(&e->bios_in_flight, 1);
	cache_engine_bio_freed(e);
}

bool io_cond(void *arg)
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

/* ---- forwarding whole requests to the blocker ------------------------------------ */

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

void forward(struct cache_engine *e, struct cache_req *req, uint32_t op)
{
	struct cache_bio *bio = bio_alloc(e, op, req->name, req->offset, 0, req->copy_src);
	if (!bio) {
		STAT_ADD(e, waits, 1);
		req->fwd_op = op;
		req_set(req, REQ_WAIT_IO);
		xwork_init(&req->work, forward_retry, req);
		xwaitq_enqueue(&e->io_waitq, &req->work);
		return;
	}
	bio->flags = req->flags;
	bio->size = op == X_FLUSH ? 0 : req->size;
	bio->req = req;
	bio->done = forward_done;
	req_set(req, REQ_FORWARDED);
	e->be.submit(e->be.ctx, bio);
}
