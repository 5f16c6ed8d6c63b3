/*
 * Inbound: requests that arrive from the network are submitted to
 * --target-port by the network thread, and each reply goes back on the
 * connection the request came from (if it is still the same connection: a
 * reply for a closed one is dropped, its requester has already failed the
 * request).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "peer/stats.h"
#include "synapsed.h"

struct inbound {
	struct peer_work work;
	struct inbound *next;  /* its connection's wait list (S.lock) */
	uint32_t conn, conn_gen;
	struct epoch_ticket ticket;   /* epochs.c: its requester's order */
	uint64_t deadline_ns;
	uint64_t charge;       /* reserved from --max-inflight-bytes */
	uint64_t stats_ns;     /* peer_stats_begin: served for the network */
	struct wire_header h;
	uint8_t body[];        /* target, data: as on the wire */
};

int inbound_request_header(struct conn *c, uint32_t ci, const struct wire_header *h,
			   uint8_t **body, void **owner, const char **why)
{
	static char text[160];   /* network thread only */
	uint64_t charge = request_charge(h);

	pthread_mutex_lock(&S.lock);
	bool too_many = c->incoming >= MAX_INCOMING;
	int rc = too_many ? 0 : budget_reserve_locked(c, charge);
	pthread_mutex_unlock(&S.lock);
	if (rc < 0) {
		S.counts.over_budget++;
		snprintf(text, sizeof(text), "a %s request needs %" PRIu64 " bytes, more than a "
			 "connection may hold (%" PRIu64 " of --max-inflight-bytes %" PRIu64 ")",
			 xseg_op_name(h->op), charge, S.conn_inflight, S.max_inflight);
		*why = text;
		return -1;
	}
	if (rc == 0) {
		if (!c->read_paused && !too_many) {   /* once per wait */
			S.counts.budget_waits++;
			peer_info("connection %s: a request of %" PRIu64 " bytes waits for "
				  "--max-inflight-bytes (%" PRIu64 " of %" PRIu64 " reserved)", c->peer,
				  charge, atomic_load(&S.inflight_bytes), S.max_inflight);
		}
		return 0;
	}
	struct inbound *in = malloc(sizeof(*in) + h->target_len + h->data_len);
	if (!in) {
		peer_error("connection %s: no memory for a request of %" PRIu64 " bytes",
			   c->peer, h->data_len);
		pthread_mutex_lock(&S.lock);
		c->incoming_bytes -= charge;
		pthread_mutex_unlock(&S.lock);
		budget_release(charge);
		*why = "out of memory";
		return -1;
	}
	in->conn = ci;
	in->conn_gen = c->gen;   /* read by the network thread only: no lock */
	in->ticket = (struct epoch_ticket){
		.requester = c->requester, .epoch = c->epoch, .op = h->op, .target = in->body,
		.target_len = h->target_len, .offset = h->offset, .size = h->size,
	};
	in->charge = charge;
	in->h = *h;
	*owner = in;
	*body = in->body;
	return 1;
}

/* Frees `in` and gives back its reservation (lock held). */
static void inbound_free_locked(struct inbound *in)
{
	struct conn *c = &S.conns[in->conn];
	if (c->gen == in->conn_gen)
		c->incoming_bytes -= in->charge;
	budget_release(in->charge);
	free(in);
}

void inbound_abandon(void *owner)
{
	pthread_mutex_lock(&S.lock);
	inbound_free_locked(owner);
	pthread_mutex_unlock(&S.lock);
}

/* Queues reply frame f (none: `how` says it was written, or no memory) on
 * the request's connection and forgets `in`. Until written, the reply
 * holds the request's place on the connection (frame_owe): a client that
 * does not read its replies gets no more than its share. */
static void send_reply(struct inbound *in, struct frame *f, enum write_now how)
{
	bool queued = false, resume = false;
	uint32_t ci = in->conn;
	pthread_mutex_lock(&S.lock);
	struct conn *c = &S.conns[ci];
	if (f) {
		frame_owe(f, ci, in->conn_gen, in->charge);
		in->charge = 0;
		queued = conn_queue_locked(c, in->conn_gen, f);
	} else if (how == WRITE_REST) {
		in->charge = 0;   /* moved to the frame being written */
	} else if (c->gen == in->conn_gen && c->incoming) {
		resume = c->incoming-- == MAX_INCOMING;
	}
	uint64_t id = in->h.id;
	inbound_free_locked(in);
	pthread_mutex_unlock(&S.lock);
	atomic_fetch_sub(&S.inbound_live, 1);
	if (!f && how == WRITE_NOT)
		peer_error("no memory for the reply to request id %#" PRIx64 ": its requester "
			   "will time out", id);
	if (queued)
		conn_kick(ci);
	if (resume)
		net_wake();   /* the connection was not read: it may be again */
}

static void reply_failed(struct inbound *in, int err)
{
	peer_stats_end(in->h.op, 0, err, in->stats_ns);
	send_reply(in, frame_failed_reply(&in->h, err), WRITE_NOT);
}

/* On a worker: the target's reply to our request. */
static void target_replied(struct peer_thread *t, struct xseg_request *r, void *arg)
{
	struct inbound *in = arg;
	struct xseg *seg = peer_segment(peer_of(t));
	bool served = r->result == XR_SERVED;
	uint64_t out = 0;

	if (served && r->op != X_WRITE) {
		out = r->serviced < r->datalen ? r->serviced : r->datalen;
		if (out > WIRE_MAX_DATA)
			out = WIRE_MAX_DATA;
	}
	/* INFO answers more than it was asked for: size grows to serviced so
	 * that the frame keeps serviced <= size. */
	struct wire_header h = {
		.kind = WIRE_REPLY, .result = served ? XR_SERVED : XR_FAILED,
		.op = in->h.op, .flags = in->h.flags, .id = in->h.id, .offset = in->h.offset,
		.size = served && r->serviced > in->h.size ? r->serviced : in->h.size,
		.serviced = served ? r->serviced : 0,
		.error = served ? 0 : r->error > 0 && r->error <= WIRE_MAX_ERRNO ? r->error : EIO,
		.data_len = out,
	};
	uint8_t hdr[WIRE_HEADER_LEN];
	wire_encode_header(&h, hdr);
	struct iovec iov[2] = { { hdr, WIRE_HEADER_LEN }, { xseg_get_data(seg, r), out } };
	enum write_now how = conn_write_now(in->conn, in->conn_gen, iov, out ? 2 : 1, SLOT_NONE,
					    in->charge);
	struct frame *f = NULL;
	if (how == WRITE_NOT && (f = frame_new(out))) {
		memcpy(f->bytes, hdr, WIRE_HEADER_LEN);
		if (out)
			memcpy(f->bytes + WIRE_HEADER_LEN, iov[1].iov_base, out);
	}
	peer_stats_end(in->h.op, r->serviced, served ? 0 : h.error, in->stats_ns);
	peer_put_request(t, r);
	epochs_release(&in->ticket);
	send_reply(in, f, how);
}

/* Submits the request to --target-port, or answers it FAILED: true. False:
 * no xseg request or heap space now (transient), nothing done. Any thread. */
static bool try_submit(struct inbound *in)
{
	const struct wire_header *h = &in->h;
	char target[WIRE_MAX_TARGET + 1];
	uint8_t *data = in->body + h->target_len;

	memcpy(target, in->body, h->target_len);
	target[h->target_len] = '\0';

	if (!S.have_target) {
		reply_failed(in, EHOSTUNREACH);
		return true;
	}
	/* A READ's buffer is sized for its reply: data sent with it would be
	 * copied past the buffer, over the segment's heap. */
	if (memchr(target, '\0', h->target_len) ||
	    (h->op == X_WRITE && h->data_len != h->size) || (h->op == X_READ && h->data_len)) {
		peer_info("request id %#" PRIx64 ": a NUL in its target, or data of %" PRIu64
			  " bytes for a %s of size %" PRIu64 ": EINVAL", h->id, h->data_len,
			  h->op == X_READ ? "READ" : "WRITE", h->size);
		reply_failed(in, EINVAL);
		return true;
	}
	if (h->op == X_READ && h->size > WIRE_MAX_DATA) {
		reply_failed(in, EFBIG);
		return true;
	}
	/* Not before what its requester's older connections put there is
	 * answered: it could land after this one. */
	int may = epochs_claim(&in->ticket);
	if (may < 0) {
		reply_failed(in, ECONNRESET);   /* superseded: its requester failed it */
		return true;
	}
	if (may == 0) {
		if (xseg_now_ns() < in->deadline_ns)
			return false;
		peer_warn("request id %#" PRIx64 ": an earlier request of its requester that "
			  "it overlaps is still at port %" PRIu64 " after --retry-limit: ETIMEDOUT",
			  h->id, S.target_port);
		reply_failed(in, ETIMEDOUT);
		return true;
	}
	uint64_t datalen = h->op == X_READ ? h->size : h->data_len;
	struct xseg_request *r = peer_get_request_any(S.peer, h->target_len ? target : NULL,
						      datalen);
	if (!r) {
		int err = errno;
		epochs_release(&in->ticket);
		if ((err == ENOBUFS || err == ENOMEM) && xseg_now_ns() < in->deadline_ns)
			return false;
		peer_warn("request id %#" PRIx64 ": no xseg request: %s", h->id, strerror(err));
		reply_failed(in, err);
		return true;
	}
	r->op = h->op;
	r->flags = h->flags;
	r->offset = h->offset;
	r->size = h->size;
	if (h->data_len)
		memcpy(xseg_get_data(peer_segment(S.peer), r), data, h->data_len);
	int rc = peer_send_any(S.peer, r, (uint32_t)S.target_port, target_replied, in);
	if (rc < 0) {   /* not sent: still ours */
		epochs_release(&in->ticket);
		peer_put_request_any(S.peer, r);
		peer_warn("request id %#" PRIx64 ": cannot submit to port %" PRIu64 ": %s", h->id,
			  S.target_port, xseg_last_error());
		reply_failed(in, rc == -ENOENT ? EHOSTUNREACH : -rc);
	}
	return true;
}

/* On a worker: c->wait_busy, a request that found the pool or the heap
 * full, retried after each round of replies until its deadline; then
 * those of its connection that arrived meanwhile, in order. One whose
 * connection closed is dropped: its requester has failed it, and it must
 * not land after what the requester did next. */
static void submit_waiting(struct peer_thread *t, struct peer_work *w)
{
	struct inbound *in = (struct inbound *)((char *)w - offsetof(struct inbound, work));
	struct conn *c = &S.conns[in->conn];
	for (;;) {
		pthread_mutex_lock(&S.lock);
		bool gone = c->gen != in->conn_gen;
		pthread_mutex_unlock(&S.lock);
		if (gone) {
			reply_failed(in, ECONNRESET);
		} else if (!try_submit(in)) {
			peer_defer(t, &in->work, submit_waiting);
			return;
		}
		/* in is settled (and maybe freed already): the next one */
		pthread_mutex_lock(&S.lock);
		in = c->wait_first;
		if (in && !(c->wait_first = in->next))
			c->wait_last = NULL;
		c->wait_busy = in;
		pthread_mutex_unlock(&S.lock);
		if (!in)
			return;
	}
}

void inbound_request_done(void *owner)
{
	struct inbound *in = owner;
	in->deadline_ns = xseg_now_ns() + S.retry_limit_ns;
	in->next = NULL;

	/* Not stopping yet: the send (or the post to a worker) below is
	 * counted by the runtime before on_stop returns, so the workers do
	 * not end without its reply (copying 64 MiB takes milliseconds). */
	atomic_fetch_add(&S.submitting, 1);
	bool stopping = atomic_load(&S.stopping);
	pthread_mutex_lock(&S.lock);
	struct conn *c = &S.conns[in->conn];
	bool same = c->gen == in->conn_gen, behind = false;
	if (same) {
		c->incoming++;
		atomic_fetch_add(&S.inbound_live, 1);
		in->stats_ns = peer_stats_begin();   /* the runtime's figures count it */
		/* In arrival order: behind an earlier request of c that waits
		 * for room, this one waits too (else a request its sender gave
		 * up on, and followed with others, could land after them: a
		 * timed-out mirror write over the writes after it). Only this
		 * thread adds. Stopping, it is answered at once instead. */
		behind = !stopping && c->wait_busy;
		if (behind) {
			if (c->wait_last)
				c->wait_last->next = in;
			else
				c->wait_first = in;
			c->wait_last = in;
		}
	} else {
		inbound_free_locked(in);
	}
	pthread_mutex_unlock(&S.lock);
	if (!same || behind) {
		atomic_fetch_sub(&S.submitting, 1);
		return;
	}
	if (stopping) {
		reply_failed(in, ESHUTDOWN);
	} else if (!try_submit(in)) {
		/* Submitted from the network thread itself: a hand-off to a
		 * worker would cost a wake-up per request. Only a full pool or
		 * heap goes to a worker, which retries as replies free them. */
		pthread_mutex_lock(&S.lock);
		c->wait_busy = in;
		pthread_mutex_unlock(&S.lock);
		peer_post(S.peer, &in->work, submit_waiting);
	}
	atomic_fetch_sub(&S.submitting, 1);
}
