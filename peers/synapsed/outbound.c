/*
 * Outbound: requests accepted on this synapsed's port travel to the
 * --remote synapsed, and their replies come back to the requester.
 *
 * A worker builds the request frame (the data the op sends is copied, so
 * the network thread never reads a request that may be answered under it),
 * takes a slot and queues the frame on the remote link, connected or not.
 * The network thread validates each reply against the slot its id names.
 * A reply whose data fits the request's own buffer is read straight into
 * it (RECEIVING: no timeout may answer the request under that read), and a
 * reply without data or read that way is answered right there on the
 * network thread (peer_answer); any other is copied and answered by a
 * worker. Exactly one of reply, timeout and connection loss moves a slot
 * out of QUEUED/SENT/RECEIVING, under S.lock, so no request is answered
 * twice. While the worker that sent a request from its own buffer is still
 * in writev, its reply is copied, not read into the buffer, and its answer
 * waits for that worker (write_returned).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "synapsed.h"

/* Bytes of the request's data that travel with it. */
static uint64_t data_to_send(const struct xseg_request *req)
{
	switch (req->op) {
	case X_READ:
		return 0;
	case X_WRITE:
		return req->size;
	default:
		return req->datalen;   /* COPY source, CONTROL text, ... */
	}
}

/* The most reply data a request may get back. */
static uint64_t reply_limit(const struct xseg_request *req)
{
	if (req->op == X_READ)
		return req->size;
	uint64_t lim = req->datalen > req->size ? req->datalen : req->size;
	return lim > 4096 ? lim : 4096;
}

static void answer(struct peer_thread *t, struct peer_work *w);

/*
 * The writev that sent a request straight from its buffer returned. The
 * reply may have come before that (the remote can answer once the kernel
 * has the bytes); its answer was held (answer_held), so the requester never
 * gets its buffer back, nor a reply is read into it, while a syscall still
 * reads it. Answered here, on this worker, if held.
 */
static void write_returned(struct peer_thread *t, uint32_t idx)
{
	struct slot *s = &S.slots.slots[idx];
	pthread_mutex_lock(&S.lock);
	s->writing = false;
	bool held = s->answer_held;
	s->answer_held = false;
	pthread_mutex_unlock(&S.lock);
	if (held)
		answer(t, &s->work);
}

void outbound_on_request(struct peer_thread *t, struct xseg_request *req)
{
	struct xseg *seg = peer_segment(peer_of(t));
	uint64_t out = data_to_send(req);
	const char *target = xseg_get_target(seg, req);
	uint32_t tl = target ? req->targetlen : 0;

	int down = S.have_remote ? atomic_load(&S.remote_down) : ENOTCONN;
	if (down) {
		/* the remote is known unreachable: no waiting for the timeout */
		peer_fail(t, req, down);
		return;
	}
	if (out > req->datalen) {
		peer_info("%s of %" PRIu64 " bytes with a %" PRIu64 "-byte buffer: refused",
			  xseg_op_name(req->op), req->size, req->datalen);
		peer_fail(t, req, EINVAL);
		return;
	}
	if (out > WIRE_MAX_DATA || (req->op == X_READ && req->size > WIRE_MAX_DATA) ||
	    tl > WIRE_MAX_TARGET) {
		peer_info("%s of %" PRIu64 " bytes is over the wire limit (%u bytes)",
			  xseg_op_name(req->op), req->size, WIRE_MAX_DATA);
		peer_fail(t, req, EFBIG);
		return;
	}
	/* a mirror request's tag crosses: the replica compares it (XF_TAG) */
	uint32_t flags = req->flags & (req->flags & XF_MIRROR ? XF_WIRE : XF_ALL);
	struct wire_header h = {
		.kind = WIRE_REQUEST, .op = req->op, .flags = flags,
		.offset = req->offset, .size = req->size, .target_len = tl, .data_len = out,
	};
	pthread_mutex_lock(&S.lock);
	uint32_t idx = slots_alloc(&S.slots, xseg_now_ns() + S.timeout_ns);
	uint32_t gen = S.conns[REMOTE_CONN].gen;
	struct slot *s = idx == SLOT_NONE ? NULL : &S.slots.slots[idx];
	if (s) {
		s->req = req;
		s->conn = UINT32_MAX;   /* set when it is sent */
		s->reply_limit = reply_limit(req);
		h.id = slots_id(&S.slots, idx);
	}
	pthread_mutex_unlock(&S.lock);
	if (!s) {
		/* a fault that repeats per request: said once a second, counted */
		static _Atomic int64_t last;
		static _Atomic uint64_t skipped;
		uint64_t quiet, n = atomic_fetch_add(&S.slot_refusals, 1) + 1;
		if (peer_log_once_a_second(&last, &skipped, &quiet))
			peer_warn("no free request slot (%u in use): %s refused ENOBUFS (%" PRIu64
				  " more such since the last word, %" PRIu64 " in all)", S.slots.nr,
				  xseg_op_name(req->op), quiet, n);
		peer_fail(t, req, ENOBUFS);
		return;
	}
	/* Straight from the request's buffer when the link is idle. */
	uint8_t hdr[WIRE_HEADER_LEN];
	wire_encode_header(&h, hdr);
	struct iovec iov[3] = { { hdr, WIRE_HEADER_LEN } };
	int n = 1;
	if (tl)
		iov[n++] = (struct iovec){ (void *)target, tl };
	if (out)
		iov[n++] = (struct iovec){ xseg_get_data(seg, req), out };
	if (conn_write_now(REMOTE_CONN, gen, iov, n, idx, 0) != WRITE_NOT) {
		write_returned(t, idx);
		return;
	}

	/* Busy or down: a copy waits in the queue, sent once the link is
	 * free or back, or failed ETIMEDOUT at the deadline. */
	struct frame *f = frame_new(tl + out);
	if (!f) {
		pthread_mutex_lock(&S.lock);
		slots_free(&S.slots, idx);
		pthread_mutex_unlock(&S.lock);
		peer_fail(t, req, ENOMEM);
		return;
	}
	memcpy(f->bytes, hdr, WIRE_HEADER_LEN);
	if (tl)
		memcpy(f->bytes + WIRE_HEADER_LEN, target, tl);
	if (out)
		memcpy(f->bytes + WIRE_HEADER_LEN + tl, iov[n - 1].iov_base, out);
	f->slot_id = h.id;
	pthread_mutex_lock(&S.lock);
	slots_link(&S.slots, idx);
	struct conn *c = &S.conns[REMOTE_CONN];
	frame_queue_push(f->len <= SMALL_FRAME ? &c->small : &c->large, f);
	pthread_mutex_unlock(&S.lock);
	conn_kick(REMOTE_CONN);
}

/* On a worker: answer the xseg request with the slot's outcome. */
static void answer(struct peer_thread *t, struct peer_work *w)
{
	struct slot *s = (struct slot *)((char *)w - offsetof(struct slot, work));
	struct xseg_request *req = s->req;

	if (s->result == XR_SERVED) {
		void *dst = NULL;
		if (s->reply_len)
			dst = s->reply_len <= req->datalen
				? xseg_get_data(peer_segment(peer_of(t)), req)
				: peer_reply_data(t, req, s->reply_len);
		if (s->reply_len && !dst) {
			peer_fail(t, req, ENOMEM);
		} else {
			if (s->reply_len)
				memcpy(dst, s->reply_data, s->reply_len);
			req->serviced = s->serviced;
			peer_complete(t, req);
		}
	} else {
		peer_fail(t, req, s->error);
	}
	free(s->reply_data);
	s->reply_data = NULL;
	pthread_mutex_lock(&S.lock);
	uint32_t idx = (uint32_t)(s - S.slots.slots);
	if (s->await_late) {
		s->state = SLOT_LATE;   /* the id stays reserved for the late reply */
		s->req = NULL;
	} else {
		slots_free(&S.slots, idx);
	}
	pthread_mutex_unlock(&S.lock);
}

/* The network thread, lock not held: answers a slot whose reply needs no
 * copy (no data, or read into the request already). The slot is ANSWERING
 * and out of the in-flight list, so nothing else touches it; its id is
 * freed only after the answer. */
static void answer_here(uint32_t idx)
{
	struct slot *s = &S.slots.slots[idx];
	struct xseg_request *req = s->req;

	if (s->result == XR_SERVED)
		req->serviced = s->serviced;
	peer_answer(S.peer, req, s->result == XR_SERVED ? 0 : s->error ? s->error : EIO);
	pthread_mutex_lock(&S.lock);
	slots_free(&S.slots, idx);
	pthread_mutex_unlock(&S.lock);
}

/* Lock held: s leaves the in-flight list with this outcome; posted. */
static void finish_locked(struct slot *s, uint8_t result, int err)
{
	if (s->state != SLOT_RECEIVING)   /* RECEIVING left the list already */
		slots_unlink(&S.slots, (uint32_t)(s - S.slots.slots));
	s->state = SLOT_ANSWERING;
	s->result = result;
	s->error = err;
	if (s->writing) {
		s->answer_held = true;   /* answered by write_returned */
		S.answers_held++;
	} else
		peer_post(S.peer, &s->work, answer);
}

int outbound_reply_header(struct conn *c, uint32_t ci, const struct wire_header *h,
			  uint8_t **direct)
{
	int rc = 0;
	*direct = NULL;
	pthread_mutex_lock(&S.lock);
	struct slot *s = slots_lookup(&S.slots, h->id);
	bool late = s && s->conn == ci && s->conn_gen == c->gen &&
		    (s->state == SLOT_LATE || (s->state == SLOT_ANSWERING && s->await_late));
	if (!s || (!late && (s->state != SLOT_SENT || s->conn != ci || s->conn_gen != c->gen))) {
		peer_warn("connection %s: reply to request id %#" PRIx64 " that is not in flight "
			  "here: protocol error", c->peer, h->id);
		rc = -1;
	} else if (h->data_len > s->reply_limit) {
		peer_warn("connection %s: reply to id %#" PRIx64 " carries %" PRIu64 " bytes, "
			  "at most %" PRIu64 " expected: protocol error", c->peer, h->id,
			  h->data_len, s->reply_limit);
		rc = -1;
	} else if (!late && s->req->op == X_READ && h->serviced > s->req->size) {
		peer_warn("connection %s: reply to id %#" PRIx64 " says %" PRIu64 " bytes read of "
			  "%" PRIu64 " asked: protocol error", c->peer, h->id, h->serviced,
			  s->req->size);
		rc = -1;
	} else if (!late && h->result == XR_SERVED && h->op != X_WRITE &&
		   h->data_len < (h->serviced < s->req->datalen ? h->serviced : s->req->datalen)) {
		/* A served reply carries min(serviced, datalen) bytes: fewer, and
		 * the request's buffer past them (another client's old data, the
		 * heap does not clear it) would be answered as read. */
		peer_warn("connection %s: reply to id %#" PRIx64 " says %" PRIu64 " bytes served "
			  "but carries %" PRIu64 ": protocol error", c->peer, h->id, h->serviced,
			  h->data_len);
		rc = -1;
	} else if (!late && s->req->op != h->op) {
		peer_warn("connection %s: reply to id %#" PRIx64 " is for op %s, the request was "
			  "%s: protocol error", c->peer, h->id, xseg_op_name(h->op),
			  xseg_op_name(s->req->op));
		rc = -1;
	} else if (!late && h->target_len == 0 && h->result == XR_SERVED && h->data_len &&
		   h->data_len <= s->req->datalen && !s->writing) {
		slots_unlink(&S.slots, (uint32_t)(s - S.slots.slots));
		s->state = SLOT_RECEIVING;
		*direct = (uint8_t *)xseg_get_data(peer_segment(S.peer), s->req);
	}
	pthread_mutex_unlock(&S.lock);
	return rc;
}

void outbound_reply_received(const struct wire_header *h)
{
	pthread_mutex_lock(&S.lock);
	struct slot *s = slots_lookup(&S.slots, h->id);
	uint32_t idx = s ? (uint32_t)(s - S.slots.slots) : SLOT_NONE;
	bool mine = s && s->state == SLOT_RECEIVING;
	if (mine) {
		s->state = SLOT_ANSWERING;
		s->result = XR_SERVED;
		s->error = 0;
		s->serviced = h->serviced;
	}
	pthread_mutex_unlock(&S.lock);
	if (mine)
		answer_here(idx);
}

void outbound_reply_done(struct conn *c, uint32_t ci, const struct wire_header *h,
			 uint8_t *data, uint64_t data_len)
{
	pthread_mutex_lock(&S.lock);
	struct slot *s = slots_lookup(&S.slots, h->id);
	bool sent = s && s->state == SLOT_SENT && s->conn == ci && s->conn_gen == c->gen;
	int err = h->result == XR_SERVED ? 0 : h->error;
	bool now = false;
	if (sent && data_len == 0 && !s->writing) {   /* nothing to copy: answered here */
		slots_unlink(&S.slots, (uint32_t)(s - S.slots.slots));
		s->state = SLOT_ANSWERING;
		s->result = h->result;
		s->error = err;
		s->serviced = h->serviced;
		now = true;
	} else if (sent) {
		s->reply_data = data;
		s->reply_len = data_len;
		s->serviced = h->serviced;
		finish_locked(s, h->result, err);
		data = NULL;
	} else if (s && s->state == SLOT_LATE) {
		peer_info("connection %s: late reply to id %#" PRIx64 " dropped", c->peer, h->id);
		slots_free(&S.slots, (uint32_t)(s - S.slots.slots));
	} else if (s && s->state == SLOT_ANSWERING && s->await_late) {
		peer_info("connection %s: late reply to id %#" PRIx64 " dropped", c->peer, h->id);
		s->await_late = false;
	}
	pthread_mutex_unlock(&S.lock);
	free(data);
	if (now)
		answer_here((uint32_t)(s - S.slots.slots));
}

/* A request accepted by `before` is still owed a reply on connection
 * generation gen (sent, or timed out and LATE). Lock held. */
static bool owed_since(uint32_t gen, uint64_t before)
{
	for (uint32_t i = 0; i < S.slots.nr; i++) {
		const struct slot *s = &S.slots.slots[i];
		bool owed = s->state == SLOT_SENT || s->state == SLOT_LATE ||
			    (s->state == SLOT_ANSWERING && s->await_late);
		if (owed && s->conn == REMOTE_CONN && s->conn_gen == gen &&
		    s->deadline_ns - S.timeout_ns <= before)
			return true;
	}
	return false;
}

/*
 * Fails what timed out. A request that times out after it was sent keeps
 * its slot (LATE) until its late reply or the connection's close: a slow
 * remote keeps its link. One that sent not a byte for STALL_TIMEOUTS x
 * --timeout while it owed a request accepted before that is stalled
 * (stopped, hung: its kernel still ACKs, so TCP sees nothing wrong): the
 * link is closed, which settles the LATE slots, and connected again. Not
 * sooner: a remote busy with one request (its heap full, retrying for its
 * --retry-limit) is slow, and holds the ones behind it. Not later: the
 * table (synapsed.c) has room for that many --timeouts of LATE requests
 * beside a full pool, and past it every request would fail ENOBUFS.
 */
void outbound_expire(uint64_t now_ns)
{
	struct conn *remote = &S.conns[REMOTE_CONN];
	uint64_t silence = STALL_TIMEOUTS * S.timeout_ns;
	pthread_mutex_lock(&S.lock);
	uint32_t idx;
	while ((idx = S.slots.head) != SLOT_NONE) {
		struct slot *s = &S.slots.slots[idx];
		bool shutdown = atomic_load(&S.stopping) && s->state == SLOT_QUEUED &&
				!S.conns[REMOTE_CONN].up;
		if (s->deadline_ns > now_ns && !shutdown)
			break;
		if (s->state == SLOT_SENT)
			s->await_late = true;
		peer_info("%s request id %#" PRIx64 " %s", xseg_op_name(s->req->op),
			  slots_id(&S.slots, idx), shutdown ? "failed: stopping while the remote "
			  "is unreachable" : "timed out");
		finish_locked(s, XR_FAILED, shutdown ? ESHUTDOWN : ETIMEDOUT);
	}
	/* the scan only once the link has been silent that long */
	bool stalled = remote->up && now_ns - remote->idle_since_ns >= silence &&
		       !atomic_load(&S.stopping) && owed_since(remote->gen, now_ns - silence);
	pthread_mutex_unlock(&S.lock);
	if (stalled) {
		char why[160];
		uint64_t n = atomic_fetch_add(&S.remote_stalls, 1) + 1;
		snprintf(why, sizeof(why), "stalled: nothing from it for %" PRIu64 " s (%u x --timeout) "
			 "with requests out; they fail ETIMEDOUT (stalls so far: %" PRIu64 ")",
			 silence / 1000000000u, STALL_TIMEOUTS, n);
		conn_close(REMOTE_CONN, why, ETIMEDOUT);
	}
}

void outbound_fail_queued(int err)
{
	pthread_mutex_lock(&S.lock);
	uint32_t idx = S.slots.head;
	while (idx != SLOT_NONE) {
		struct slot *s = &S.slots.slots[idx];
		idx = s->next;
		if (s->state == SLOT_QUEUED)
			finish_locked(s, XR_FAILED, err);
	}
	frame_queue_free(&S.conns[REMOTE_CONN].small);
	frame_queue_free(&S.conns[REMOTE_CONN].large);
	pthread_mutex_unlock(&S.lock);
}

void outbound_conn_closed(uint32_t ci, uint32_t old_gen, int err)
{
	pthread_mutex_lock(&S.lock);
	for (uint32_t i = 0; i < S.slots.nr; i++) {
		struct slot *s = &S.slots.slots[i];
		if (s->conn != ci || s->conn_gen != old_gen)
			continue;
		if (s->state == SLOT_SENT || s->state == SLOT_RECEIVING)
			finish_locked(s, XR_FAILED, err);
		else if (s->state == SLOT_LATE)
			slots_free(&S.slots, i);
		else if (s->state == SLOT_ANSWERING)
			s->await_late = false;
	}
	pthread_mutex_unlock(&S.lock);
}

void outbound_report(void)
{
	pthread_mutex_lock(&S.lock);
	uint64_t held = S.answers_held;
	pthread_mutex_unlock(&S.lock);
	if (S.have_remote)
		peer_log(PEER_LOG_INFO, "outbound: %" PRIu64 " answers came before the writev that "
			 "sent their request returned (held until it did)", held);
}
