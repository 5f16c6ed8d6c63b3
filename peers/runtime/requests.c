/*
 * What a worker does with a request beyond taking it: answers it (counted:
 * its latency from the accept), and the peer's own requests, sent or
 * forwarded with a callback that the reply's cookie finds again
 * (peer_on_reply, from the worker loop in peer.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "counters.h"
#include "runtime.h"

/* ---- answering ---------------------------------------------------------------- */

/* Inlined into the answering calls: nulld's figure is this path. */
static inline __attribute__((always_inline)) void respond(struct peer *p,
							  struct xseg_request *req)
{
	/* Counted first: once answered, the request is no longer ours. */
	struct peer_stats_block *b = peer_stats_block();
	if (b && req->index < p->nr_requests) {
		uint64_t lat = peer_stats_ticks() -
			atomic_load_explicit(&p->accept_tick[req->index], memory_order_relaxed);
		peer_stats_done(b, req->op, req->result == XR_SERVED, req->serviced,
				(int64_t)lat > 0 ? lat : 0);
	}
	int rc = xseg_respond(p->seg, req, req->holder);
	if (rc < 0) {
		peer_error("cannot answer request %u (%s): %s", req->index,
			   xseg_op_name(req->op), xseg_last_error());
		/* A request we never accepted is the caller's bug, not an
		 * answer; a wedged reply queue (EIO) loses it for good. */
		if (rc != -EIO)
			return;
	}
	struct peer_thread *w = peer_current_worker;
	if (w && w->peer == p)
		w->answered++;   /* taken off at the end of its round (peer.c) */
	else
		atomic_fetch_sub(&p->accepted, 1);
}

void peer_respond(struct peer_thread *t, struct xseg_request *req)
{
	respond(t->peer, req);
}

void peer_answer(struct peer *p, struct xseg_request *req, int err)
{
	if (err) {
		req->result = XR_FAILED;
		req->error = err > 0 ? err : EIO;
		req->serviced = 0;
	} else {
		req->result = XR_SERVED;
		req->error = 0;
	}
	respond(p, req);
}

void peer_complete(struct peer_thread *t, struct xseg_request *req)
{
	req->result = XR_SERVED;
	req->error = 0;
	respond(t->peer, req);
}

void peer_fail(struct peer_thread *t, struct xseg_request *req, int err)
{
	peer_answer(t->peer, req, err > 0 ? err : EIO);
}

void *peer_reply_data(struct peer_thread *t, struct xseg_request *req, uint64_t len)
{
	struct xseg *seg = t->peer->seg;
	char name[XSEG_MAX_TARGETLEN + 1];
	uint32_t tl = req->targetlen;
	char *target = xseg_get_target(seg, req);

	if (target && req->datalen >= len)
		return xseg_get_data(seg, req);
	if (!target || tl > XSEG_MAX_TARGETLEN)
		tl = 0;
	if (tl)
		memcpy(name, target, tl);
	if (xseg_prep_request(seg, req, tl, len) < 0) {
		errno = ENOMEM;
		return NULL;
	}
	if (tl)
		memcpy(xseg_get_target(seg, req), name, tl);
	return xseg_get_data(seg, req);
}

/* ---- the peer's own requests ---------------------------------------------------- */

/* Takes a request for `src` from the pool (when it is empty, from the
 * reserve of the first port, when the peer keeps one) and preps it. */
static struct xseg_request *get_request_from(struct peer *p, uint32_t src, const char *target,
					     uint64_t datalen)
{
	struct xseg_request *req = xseg_get_request(p->seg, src);
	if (!req && errno == ENOBUFS && p->reserve)
		req = xseg_reserve_get(p->reserve);
	if (!req)
		return NULL;   /* errno set: ENOBUFS when the pool is empty */
	int rc = target ? xseg_prep_target(p->seg, req, target, datalen)
			: xseg_prep_request(p->seg, req, 0, datalen);
	if (rc < 0) {
		peer_put_request_any(p, req);
		errno = -rc;
		return NULL;
	}
	return req;
}

struct xseg_request *peer_get_request_lane(struct peer *p, unsigned lane,
					   const char *target, uint64_t datalen)
{
	uint32_t src = p->cfg.port_first;
	if (p->cfg.lanes > 1)
		src += lane % p->cfg.lanes;
	return get_request_from(p, src, target, datalen);
}

/* With lanes, a worker's own requests leave from its own lane: the peer
 * behind (itself with lanes) then sees each worker as a client of its own,
 * and the replies come back to the lane that worker serves first. */
struct xseg_request *peer_get_request(struct peer_thread *t, const char *target,
				      uint64_t datalen)
{
	struct peer *p = t->peer;
	return peer_get_request_lane(p, t->index < p->cfg.threads ? t->index : 0, target, datalen);
}

struct xseg_request *peer_get_request_any(struct peer *p, const char *target,
					  uint64_t datalen)
{
	return peer_get_request_lane(p, 0, target, datalen);
}

void peer_put_request(struct peer_thread *t, struct xseg_request *req)
{
	peer_put_request_any(t->peer, req);
}

void peer_put_request_any(struct peer *p, struct xseg_request *req)
{
	int rc = p->reserve ? xseg_reserve_put(p->reserve, req) : xseg_put_request(p->seg, req);
	if (rc < 0)
		peer_error("cannot put request %u back: %s", req->index, xseg_last_error());
}

static uint64_t cookie_of(struct peer *p, uint32_t index)
{
	return p->cookie_salt << 32 | index;
}

static int submit_with(struct peer *p, struct xseg_request *req, uint32_t dst,
		       peer_reply_fn cb, void *arg, bool forward)
{
	if (!req || !cb || req->index >= p->nr_requests)
		return -EINVAL;
	struct peer_slot *slot = &p->slots[req->index];
	if (atomic_load(&slot->armed)) {
		peer_error("request %u is sent twice", req->index);
		return -EBUSY;
	}
	uint64_t old_priv = req->priv;
	slot->cb = cb;
	slot->arg = arg;
	slot->forward = forward;
	req->priv = cookie_of(p, req->index);
	atomic_fetch_add(&p->outstanding, 1);
	atomic_store_explicit(&slot->armed, 1, memory_order_release);
	int rc = xseg_submit(p->seg, req, req->holder, dst);
	if (rc < 0) {
		atomic_store(&slot->armed, 0);
		atomic_fetch_sub(&p->outstanding, 1);
		req->priv = old_priv;
		peer_debug("%s of request %u to port %u failed: %s",
			   forward ? "forward" : "send", req->index, dst, xseg_last_error());
		return rc;
	}
	struct peer_stats_block *b = peer_stats_block();
	if (b)
		peer_stats_add(&b->sent, 1);
	return 0;
}

int peer_send(struct peer_thread *t, struct xseg_request *req, uint32_t dst,
	      peer_reply_fn cb, void *arg)
{
	return submit_with(t->peer, req, dst, cb, arg, false);
}

int peer_send_any(struct peer *p, struct xseg_request *req, uint32_t dst,
		  peer_reply_fn cb, void *arg)
{
	return submit_with(p, req, dst, cb, arg, false);
}

int peer_forward(struct peer_thread *t, struct xseg_request *req, uint32_t dst,
		 peer_reply_fn cb, void *arg)
{
	return submit_with(t->peer, req, dst, cb, arg, true);
}

int peer_forward_any(struct peer *p, struct xseg_request *req, uint32_t dst,
		     peer_reply_fn cb, void *arg)
{
	return submit_with(p, req, dst, cb, arg, true);
}

/*
 * A reply came back. Its cookie names the slot of its send; one that does
 * not (a reply to a previous incarnation of this peer, or a corrupted one)
 * is settled: answered FAILED if someone upstream waits, otherwise put.
 */
void peer_on_reply(struct peer_thread *t, struct xseg_request *req)
{
	struct peer *p = t->peer;
	uint64_t c = req->priv;
	uint32_t idx = (uint32_t)c;

	if ((c >> 32) == p->cookie_salt && idx == req->index && idx < p->nr_requests) {
		struct peer_slot *slot = &p->slots[idx];
		uint32_t one = 1;
		if (atomic_compare_exchange_strong_explicit(&slot->armed, &one, 0,
							    memory_order_acq_rel,
							    memory_order_acquire)) {
			if (req->result != XR_SERVED) {
				struct peer_stats_block *b = peer_stats_block();
				if (b)
					peer_stats_add(&b->sent_failed, 1);
			}
			slot->cb(t, req, slot->arg);
			atomic_fetch_sub(&p->outstanding, 1);
			return;
		}
	}
	peer_warn("reply for request %u (%s) that is not ours (cookie %#" PRIx64 "): settled",
		  req->index, xseg_op_name(req->op), c);
	if (req->path_len > 0) {
		req->result = XR_FAILED;
		req->error = EPIPE;
		req->serviced = 0;
		if (xseg_respond(p->seg, req, req->holder) < 0)
			peer_error("cannot settle request %u: %s", req->index, xseg_last_error());
	} else if (xseg_put_request(p->seg, req) < 0) {
		peer_error("cannot settle request %u: %s", req->index, xseg_last_error());
	}
}
