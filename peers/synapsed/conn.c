/*
 * A connection's input and output, for the network thread (net.c) and for
 * any thread that writes a frame: closing it (its frames, its half-read
 * body, the remote link's backoff), writing queued frames (taken in
 * batches, small and large in turn, with writev; a worker may write a
 * frame at once when nothing is queued before it), reading and
 * dispatching frames (rx.c) to the layers above through the net_ops.
 * Calls nothing of net.c: what the two share is in conn.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/uio.h>
#include <unistd.h>

#include "conn.h"
#include "synapsed.h"

#define READ_BUDGET      (1u << 20)     /* bytes per connection per turn */
#define WRITE_BATCH      (1u << 20)     /* bytes taken from the queues at once */
#define WRITE_IOV        64

int conn_epfd = -1;
const struct net_ops *conn_up_ops;

/* wlock held. */
void conn_set_events(struct conn *c, uint32_t ci, uint32_t events)
{
	if (c->events == events)
		return;
	struct epoll_event ev = { .events = events, .data.u64 = ci };
	if (epoll_ctl(conn_epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0)
		peer_error("epoll_ctl on connection %s: %s", c->peer, strerror(errno));
	c->events = events;
}

/* ---- closing ------------------------------------------------------------ */

/* Lock held. */
static void free_list(struct frame *f)
{
	while (f) {
		struct frame *next = f->next;
		frame_free_locked(f);
		f = next;
	}
}

/* Keeps the request frames of q (the remote link's, sent on the next
 * connection) and frees the replies (their requester lost them). */
static void keep_requests(struct frame_queue *q)
{
	struct frame *f, *all = q->head;
	frame_queue_init(q);
	while ((f = all)) {
		all = f->next;
		if (f->slot_id)
			frame_queue_push(q, f);
		else
			frame_free_locked(f);
	}
}

/* Puts the frames of `front` before those of q. */
static void queue_prepend(struct frame_queue *q, struct frame_queue *front)
{
	if (!front->head)
		return;
	*front->tail = q->head;
	if (!q->head)
		q->tail = front->tail;
	q->head = front->head;
}

/* The remote link's frames taken for writing (list) of which not one byte
 * was written: their requests never left, so they go back to QUEUED and
 * their frames to the front of the queues, sent on the next connection
 * (the others fail with the connection). Lock held. */
static void requeue_unwritten(struct conn *c, uint32_t ci, uint32_t gen, struct frame *list)
{
	struct frame_queue small, large;
	struct frame *f;
	frame_queue_init(&small);
	frame_queue_init(&large);
	while ((f = list)) {
		list = f->next;
		struct slot *s = f->slot_id && !f->done ? slots_lookup(&S.slots, f->slot_id) : NULL;
		if (s && s->state == SLOT_SENT && s->conn == ci && s->conn_gen == gen) {
			s->state = SLOT_QUEUED;
			s->conn = UINT32_MAX;
			frame_queue_push(f->len <= SMALL_FRAME ? &small : &large, f);
		} else {
			frame_free_locked(f);
		}
	}
	queue_prepend(&c->small, &small);
	queue_prepend(&c->large, &large);
}

/*
 * The --remote link, up and now closing, proved itself: a reply came on
 * it, or it stayed up BACKOFF_MAX_NS with nothing asked of it (an idle
 * link). Only then does its close begin a new outage (logged, the backoff
 * back to its minimum). A remote that takes the connection and drops it
 * at once (we are not in its --allow, its table is full) or answers
 * nothing on it (stalled) is tried again with growing backoff, logged
 * once. Network thread.
 */
static bool remote_proven(const struct conn *c, uint64_t now)
{
	pthread_mutex_lock(&S.lock);
	bool asked = c->asked;
	pthread_mutex_unlock(&S.lock);
	return c->frames_done || (now - c->connected_ns >= BACKOFF_MAX_NS && !asked);
}

void conn_close(uint32_t ci, const char *why, int err)
{
	struct conn *c = &S.conns[ci];
	uint64_t now = xseg_now_ns();
	bool remote_up = ci == REMOTE_CONN && c->fd >= 0 && !c->connecting;
	bool proven = remote_up && remote_proven(c, now);

	if (c->fd >= 0 && (ci != REMOTE_CONN || !c->connecting || !c->warned_down))
		peer_log(err == ESHUTDOWN || (remote_up && !proven && c->warned_down)
			 ? PEER_LOG_INFO : PEER_LOG_WARN, "connection %s closed: %s", c->peer, why);
	pthread_mutex_lock(&c->wlock);
	if (c->fd >= 0) {
		epoll_ctl(conn_epfd, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
	}
	c->fd = -1;
	c->events = 0;
	c->writable = false;
	c->write_err = 0;
	c->read_paused = false;
	struct frame *taken = c->writing;
	c->writing = NULL;
	pthread_mutex_unlock(&c->wlock);
	if (c->rx.in_body && !c->body_direct) {   /* a request's data area stays with it */
		if (c->body_owner)
			conn_up_ops->request_abandon(c->body_owner);
		else
			free(c->rx.body);
	}
	rx_init(&c->rx, c->rx.buf);
	c->body_direct = false;
	c->body_owner = NULL;
	c->frame_since_ns = 0;

	pthread_mutex_lock(&S.lock);
	uint32_t old_gen = c->gen;
	c->gen++;
	c->up = false;
	c->incoming = 0;
	c->incoming_bytes = 0;
	if (ci == REMOTE_CONN) {
		keep_requests(&c->small);
		keep_requests(&c->large);
		requeue_unwritten(c, ci, old_gen, taken);
	} else {
		free_list(taken);
		frame_queue_free(&c->small);
		frame_queue_free(&c->large);
	}
	pthread_mutex_unlock(&S.lock);
	conn_up_ops->conn_closed(ci, old_gen, err);

	if (ci == REMOTE_CONN) {
		c->connecting = false;
		c->warned_down = true;
		if (proven)
			c->backoff_ns = BACKOFF_MIN_NS;
		else if (remote_up && err != ESHUTDOWN)
			/* as a failed connect: new requests fail at once until the
			 * next connection (those never written wait for it) */
			atomic_store(&S.remote_down, err);
		c->retry_at_ns = now + c->backoff_ns;
		c->backoff_ns = c->backoff_ns * 2 < BACKOFF_MAX_NS ? c->backoff_ns * 2 : BACKOFF_MAX_NS;
	} else {
		free(c->rx.buf);
		c->rx.buf = NULL;
		c->used = false;
		if (c->requester) {   /* said hello: a requester no longer connected */
			c->requester = 0;
			atomic_fetch_sub(&S.requesters, 1);
		}
	}
}

/* ---- writing ------------------------------------------------------------- */

/* Takes queued frames into c->writing; request frames of slots that are
 * no longer QUEUED (timed out) are dropped, the others become SENT. */
static void take_frames(struct conn *c, uint32_t ci)
{
	struct frame **tail = &c->writing;
	size_t bytes = 0;
	unsigned n = 0;

	while (*tail) {
		bytes += (*tail)->len - (*tail)->done;
		tail = &(*tail)->next;
		n++;
	}
	pthread_mutex_lock(&S.lock);
	while (n < WRITE_IOV && bytes < WRITE_BATCH) {
		struct frame *f = conn_next_frame_locked(c);
		if (!f)
			break;
		if (f->slot_id) {
			struct slot *s = slots_lookup(&S.slots, f->slot_id);
			if (!s || s->state != SLOT_QUEUED) {
				frame_free_locked(f);
				continue;
			}
			s->state = SLOT_SENT;
			s->conn = ci;
			s->conn_gen = c->gen;
			c->asked = true;
		}
		*tail = f;
		tail = &f->next;
		bytes += f->len;
		n++;
	}
	pthread_mutex_unlock(&S.lock);
}

/* Writes what it can (wlock held); on a failure the connection is left
 * for the network thread to close. */
static void conn_write_locked(struct conn *c, uint32_t ci)
{
	while (c->writable) {
		take_frames(c, ci);
		if (!c->writing)
			break;
		struct iovec iov[WRITE_IOV];
		int n = 0;
		for (struct frame *f = c->writing; f && n < WRITE_IOV; f = f->next, n++) {
			iov[n].iov_base = f->bytes + f->done;
			iov[n].iov_len = f->len - f->done;
		}
		ssize_t w = writev(c->fd, iov, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				conn_set_events(c, ci, (c->read_paused ? 0 : EPOLLIN) | EPOLLOUT);
				return;
			}
			c->writable = false;
			c->write_err = errno;
			net_wake();
			return;
		}
		size_t left = (size_t)w;
		while (c->writing && left >= c->writing->len - c->writing->done) {
			struct frame *f = c->writing;
			left -= f->len - f->done;
			c->writing = f->next;
			frame_free(f);
		}
		if (c->writing)
			c->writing->done += left;
	}
	conn_set_events(c, ci, c->read_paused ? 0 : EPOLLIN);
}

bool conn_has_queued(struct conn *c)
{
	pthread_mutex_lock(&S.lock);
	bool any = c->small.head || c->large.head;
	pthread_mutex_unlock(&S.lock);
	return any;
}

void conn_kick(uint32_t ci)
{
	struct conn *c = &S.conns[ci];
	for (;;) {
		/* Busy: the holder looks at the queues again after unlocking. */
		if (pthread_mutex_trylock(&c->wlock) != 0)
			return;
		bool can = c->writable && !(c->events & EPOLLOUT);
		if (can)
			conn_write_locked(c, ci);
		pthread_mutex_unlock(&c->wlock);
		if (!can || !conn_has_queued(c))
			return;
	}
}

enum write_now conn_write_now(uint32_t ci, uint32_t gen, const struct iovec *iov, int n,
			      uint32_t idx, uint64_t charge)
{
	struct conn *c = &S.conns[ci];
	if (pthread_mutex_trylock(&c->wlock) != 0)
		return WRITE_NOT;
	bool ok = c->writable && !(c->events & EPOLLOUT) && !c->writing;
	uint64_t id = 0;
	if (ok) {
		pthread_mutex_lock(&S.lock);
		ok = c->gen == gen && c->up && !c->small.head && !c->large.head;
		if (ok && idx != SLOT_NONE) {
			/* before the first byte: the reply may come at once */
			struct slot *s = &S.slots.slots[idx];
			s->state = SLOT_SENT;
			s->writing = true;   /* the caller clears it once we return */
			s->conn = ci;
			s->conn_gen = gen;
			c->asked = true;
			slots_link(&S.slots, idx);
			id = slots_id(&S.slots, idx);
		}
		pthread_mutex_unlock(&S.lock);
	}
	if (!ok) {
		pthread_mutex_unlock(&c->wlock);
		return WRITE_NOT;
	}
	size_t total = 0, done;
	for (int i = 0; i < n; i++)
		total += iov[i].iov_len;
	enum write_now how = WRITE_WHOLE;
	ssize_t w;
	do
		w = writev(c->fd, iov, n);
	while (w < 0 && errno == EINTR);
	int err = w < 0 && errno != EAGAIN && errno != EWOULDBLOCK ? errno : 0;
	/* What the socket did not take is copied: for the network thread to
	 * finish, or, for a request of which nothing was written, for the
	 * close to send on the next connection (a reply is lost with it). */
	if ((done = w < 0 ? 0 : (size_t)w) < total && (!err || idx != SLOT_NONE)) {
		struct frame *f = frame_alloc(total - done);
		if (!f) {
			err = err ? err : ENOMEM;
		} else {
			size_t at = 0;
			if (idx == SLOT_NONE) {   /* a reply: its place held until written */
				frame_owe(f, ci, gen, charge);
				how = WRITE_REST;
			} else if (done == 0)
				f->slot_id = id;   /* whole: may go again on the next connection */
			for (int i = 0; i < n; i++) {
				size_t skip = done > iov[i].iov_len ? iov[i].iov_len : done;
				memcpy(f->bytes + at, (const char *)iov[i].iov_base + skip,
				       iov[i].iov_len - skip);
				at += iov[i].iov_len - skip;
				done -= skip;
			}
			c->writing = f;
			if (!err)
				conn_set_events(c, ci, (c->read_paused ? 0 : EPOLLIN) | EPOLLOUT);
		}
	}
	if (err) {
		/* the close fails the request if a byte of it was written */
		c->writable = false;
		c->write_err = err;
		net_wake();
	}
	pthread_mutex_unlock(&c->wlock);
	/* a frame queued while we wrote found the lock taken: ours to write */
	conn_kick(ci);
	return how;
}

/* The socket can take more (EPOLLOUT). */
void conn_writable(struct conn *c, uint32_t ci)
{
	pthread_mutex_lock(&c->wlock);
	conn_write_locked(c, ci);
	pthread_mutex_unlock(&c->wlock);
	conn_kick(ci);
}

/* ---- reading --------------------------------------------------------------- */

static uint32_t conn_index(const struct conn *c)
{
	return (uint32_t)(c - S.conns);
}

/* rx: a header arrived; where its body goes (see rx.h). */
static int on_header(void *ctx, const struct wire_header *h, uint8_t **body)
{
	struct conn *c = ctx;
	uint32_t ci = conn_index(c);
	const char *why = "out of memory";

	c->body_owner = NULL;
	c->body_direct = false;
	if (h->kind == WIRE_HELLO) {   /* who sends: the listener's side only */
		if (ci == REMOTE_CONN || conn_up_ops->hello(c, ci, h, &why) < 0) {
			conn_close(ci, ci == REMOTE_CONN ? "a hello from the remote" : why,
				   ECONNRESET);
			return RX_DROP;
		}
		*body = (uint8_t *)c;   /* no body: any pointer */
		return RX_TAKE;
	}
	if (h->kind == WIRE_REQUEST) {
		int rc = conn_up_ops->request_header(c, ci, h, body, &c->body_owner, &why);
		if (rc < 0) {
			conn_close(ci, why, ECONNRESET);
			return RX_DROP;
		}
		return rc ? RX_TAKE : RX_WAIT;
	}
	uint8_t *direct = NULL;
	if (conn_up_ops->reply_header(c, ci, h, &direct) < 0) {
		conn_close(ci, "reply to a request not in flight (logged above)", ECONNRESET);
		return RX_DROP;
	}
	size_t len = h->target_len + h->data_len;
	c->body_direct = direct != NULL;
	*body = direct ? direct : malloc(len ? len : 1);
	if (!*body) {
		conn_close(ci, "out of memory", ECONNRESET);
		return RX_DROP;
	}
	return RX_TAKE;
}

/* rx: the body is in. */
static void on_body(void *ctx, const struct wire_header *h, uint8_t *body)
{
	struct conn *c = ctx;
	c->frame_since_ns = 0;   /* the next frame's clock starts at its first byte */
	c->frames_done++;
	if (h->kind == WIRE_HELLO) {
		/* said: nothing more to do */
	} else if (h->kind == WIRE_REQUEST) {
		conn_up_ops->request_done(c->body_owner);
	} else if (c->body_direct) {
		conn_up_ops->reply_received(h);
	} else {
		if (h->target_len)   /* replies need no target: skip it */
			memmove(body, body + h->target_len, h->data_len);
		conn_up_ops->reply_done(c, conn_index(c), h, body, h->data_len);
	}
	c->body_direct = false;
	c->body_owner = NULL;
}

static const struct rx_ops conn_rx_ops = { .header = on_header, .body_done = on_body };

/* Stops or resumes reading c while a header waits for room. */
static void set_paused(struct conn *c, uint32_t ci, bool paused)
{
	if (c->read_paused == paused)
		return;
	pthread_mutex_lock(&c->wlock);
	c->read_paused = paused;
	conn_set_events(c, ci, paused ? c->events & ~(uint32_t)EPOLLIN : c->events | EPOLLIN);
	pthread_mutex_unlock(&c->wlock);
}

/* Reads and dispatches frames; 0, or -1 when the connection closed. */
int conn_read(struct conn *c, uint32_t ci)
{
	size_t budget = READ_BUDGET;
	bool got = false;
	int64_t bad = 0;

	for (;;) {
		int st = rx_dispatch(&c->rx, &conn_rx_ops, c, &bad);
		if (st == RX_GONE)
			return -1;
		if (st == RX_BAD) {
			char why[96];
			snprintf(why, sizeof(why), "bad frame: %s", wire_error_name(bad));
			conn_close(ci, why, ECONNRESET);
			return -1;
		}
		set_paused(c, ci, st == RX_WAITING);
		if (st == RX_WAITING || !budget)
			break;
		uint8_t *dst;
		size_t room;
		bool direct = rx_space(&c->rx, &dst, &room);
		if (room > budget)
			room = budget;
		ssize_t r = read(c->fd, dst, room);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			conn_close(ci, strerror(errno), errno == ETIMEDOUT ? ETIMEDOUT : ECONNRESET);
			return -1;
		}
		if (r == 0) {
			conn_close(ci, rx_mid_frame(&c->rx) ? "closed by the peer in the middle of "
				   "a frame" : "closed by the peer", ECONNRESET);
			return -1;
		}
		got = true;
		budget -= (size_t)r;
		rx_advance(&c->rx, (size_t)r, direct, &conn_rx_ops, c);
	}
	/* A frame's clock runs from its first byte while we read; time spent
	 * waiting for room is ours, not the sender's. */
	uint64_t now = xseg_now_ns();
	if (got)
		c->idle_since_ns = now;
	if (c->read_paused || !rx_mid_frame(&c->rx))
		c->frame_since_ns = 0;
	else if (!c->frame_since_ns)
		c->frame_since_ns = now;
	return 0;
}

bool conn_owes_nothing(struct conn *c)
{
	pthread_mutex_lock(&c->wlock);
	bool writing = c->writing != NULL;
	pthread_mutex_unlock(&c->wlock);
	pthread_mutex_lock(&S.lock);
	bool busy = writing || c->incoming || c->small.head || c->large.head;
	pthread_mutex_unlock(&S.lock);
	return !busy;
}

bool conn_idle(struct conn *c)
{
	return !rx_mid_frame(&c->rx) && !c->read_paused && conn_owes_nothing(c);
}
