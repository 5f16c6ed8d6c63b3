/*
 * synapsed's network thread: one epoll loop over the listening socket, the
 * --remote link, the accepted connections and an eventfd the workers write
 * when they queue frames. Sockets are non-blocking; a socket that cannot
 * take more is watched for EPOLLOUT, never retried in a loop.
 *
 * Reading (rx.c): a 64-byte header is decoded (wire.c) before anything is
 * allocated; a request's body is then reserved from --max-inflight-bytes
 * (budget.c) and goes into a buffer of exactly its size. A header that
 * breaks a rule, or a reply that names no request in flight, closes the
 * connection with a log line; the rest of the peer keeps serving. A header
 * that finds no room (MAX_INCOMING requests out, or the budget reserved)
 * stays buffered and the connection is not read until some are answered.
 *
 * Writing: frames are taken from a connection's queues in batches (small
 * and large frames alternate) and written with writev.
 *
 * This is the socket layer: it calls the files below it (frame.c, rx.c,
 * slots.c, wire.c, wake.c) by name and the ones above it (inbound.c,
 * outbound.c, limits.c) only through the net_ops given to net_start.
 */
#define _GNU_SOURCE   /* accept4 */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "synapsed.h"

#define READ_BUDGET      (1u << 20)     /* bytes per connection per turn */
#define WRITE_BATCH      (1u << 20)     /* bytes taken from the queues at once */
#define WRITE_IOV        64
#define BACKOFF_MIN_NS   (100ull * 1000 * 1000)
#define BACKOFF_MAX_NS   (2ull * 1000 * 1000 * 1000)
#define SWEEP_NS         (50ull * 1000 * 1000)
#define QUIT_FLUSH_NS    (2ull * 1000 * 1000 * 1000)
/* While traffic flowed in the last BUSY_NS, look for events --net-spin-us,
 * yielding, before sleeping in epoll_wait: a wake-up costs more than the
 * next frame's wait. */
#define BUSY_NS          (1ull * 1000 * 1000)
/* Spins in a row that must end in an event before the workers are parked. */
#define PARK_STREAK      8u
#define TAG_WAKE         (1ull << 32)   /* epoll tags past every connection index */
#define TAG_LISTEN       ((1ull << 32) + 1)

static int epfd = -1, listen_fd = -1;
/* The layers above (inbound.c, outbound.c, limits.c), given to net_start:
 * this file calls up only through them, never by name. */
static const struct net_ops *up;

/* wlock held. */
static void set_events(struct conn *c, uint32_t ci, uint32_t events)
{
	if (c->events == events)
		return;
	struct epoll_event ev = { .events = events, .data.u64 = ci };
	if (epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0)
		peer_error("epoll_ctl on connection %s: %s", c->peer, strerror(errno));
	c->events = events;
}

static void tune_socket(int fd)
{
	int one = 1, idle = (int)(S.timeout_ns / 3000000000ull) + 1, intvl = 1, cnt = 3;
	unsigned user_timeout = (unsigned)(S.timeout_ns / 1000000);

	/* Small frames go out at once; a cut link is noticed within the
	 * timeout even when idle (keepalive) or with data unacknowledged. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof(user_timeout));
}

/* ---- closing ------------------------------------------------------------ */

static void free_list(struct frame *f)
{
	while (f) {
		struct frame *next = f->next;
		frame_free(f);
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
			frame_free(f);
	}
}

void conn_close(uint32_t ci, const char *why, int err)
{
	struct conn *c = &S.conns[ci];
	uint64_t now = xseg_now_ns();

	if (c->fd >= 0 && (ci != REMOTE_CONN || !c->connecting || !c->warned_down))
		peer_log(err == ESHUTDOWN ? PEER_LOG_INFO : PEER_LOG_WARN,
			 "connection %s closed: %s", c->peer, why);
	pthread_mutex_lock(&c->wlock);
	if (c->fd >= 0) {
		epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
	}
	c->fd = -1;
	c->events = 0;
	c->writable = false;
	c->write_err = 0;
	c->read_paused = false;
	free_list(c->writing);
	c->writing = NULL;
	pthread_mutex_unlock(&c->wlock);
	if (c->rx.in_body && !c->body_direct) {   /* a request's data area stays with it */
		if (c->body_owner)
			up->request_abandon(c->body_owner);
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
	} else {
		frame_queue_free(&c->small);
		frame_queue_free(&c->large);
	}
	pthread_mutex_unlock(&S.lock);
	up->conn_closed(ci, old_gen, err);

	if (ci == REMOTE_CONN) {
		c->connecting = false;
		c->warned_down = true;
		c->retry_at_ns = now + c->backoff_ns;
		c->backoff_ns = c->backoff_ns * 2 < BACKOFF_MAX_NS ? c->backoff_ns * 2 : BACKOFF_MAX_NS;
	} else {
		free(c->rx.buf);
		c->rx.buf = NULL;
		c->used = false;
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
				frame_free(f);
				continue;
			}
			s->state = SLOT_SENT;
			s->conn = ci;
			s->conn_gen = c->gen;
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
				set_events(c, ci, (c->read_paused ? 0 : EPOLLIN) | EPOLLOUT);
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
	set_events(c, ci, c->read_paused ? 0 : EPOLLIN);
}

static bool has_queued(struct conn *c)
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
		if (!can || !has_queued(c))
			return;
	}
}

bool conn_write_now(uint32_t ci, uint32_t gen, const struct iovec *iov, int n, uint32_t idx)
{
	struct conn *c = &S.conns[ci];
	if (pthread_mutex_trylock(&c->wlock) != 0)
		return false;
	bool ok = c->writable && !(c->events & EPOLLOUT) && !c->writing;
	if (ok) {
		pthread_mutex_lock(&S.lock);
		ok = c->gen == gen && c->up && !c->small.head && !c->large.head;
		if (ok && idx != SLOT_NONE) {
			/* before the first byte: the reply may come at once */
			struct slot *s = &S.slots.slots[idx];
			s->state = SLOT_SENT;
			s->conn = ci;
			s->conn_gen = gen;
			slots_link(&S.slots, idx);
		}
		pthread_mutex_unlock(&S.lock);
	}
	if (!ok) {
		pthread_mutex_unlock(&c->wlock);
		return false;
	}
	size_t total = 0, done;
	for (int i = 0; i < n; i++)
		total += iov[i].iov_len;
	ssize_t w;
	do
		w = writev(c->fd, iov, n);
	while (w < 0 && errno == EINTR);
	if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
		/* the close fails the request: it is SENT on this connection */
		c->writable = false;
		c->write_err = errno;
		net_wake();
	} else if ((done = w < 0 ? 0 : (size_t)w) < total) {
		struct frame *f = frame_alloc(total - done);
		if (!f) {
			c->writable = false;
			c->write_err = ENOMEM;
			net_wake();
		} else {
			size_t at = 0;
			if (idx == SLOT_NONE)
				frame_charge(f);   /* a reply: held until written */
			for (int i = 0; i < n; i++) {
				size_t skip = done > iov[i].iov_len ? iov[i].iov_len : done;
				memcpy(f->bytes + at, (const char *)iov[i].iov_base + skip,
				       iov[i].iov_len - skip);
				at += iov[i].iov_len - skip;
				done -= skip;
			}
			c->writing = f;
			set_events(c, ci, (c->read_paused ? 0 : EPOLLIN) | EPOLLOUT);
		}
	}
	pthread_mutex_unlock(&c->wlock);
	/* a frame queued while we wrote found the lock taken: ours to write */
	conn_kick(ci);
	return true;
}

/* The socket can take more (EPOLLOUT). */
static void conn_writable(struct conn *c, uint32_t ci)
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
	if (h->kind == WIRE_REQUEST) {
		int rc = up->request_header(c, ci, h, body, &c->body_owner, &why);
		if (rc < 0) {
			conn_close(ci, why, ECONNRESET);
			return RX_DROP;
		}
		return rc ? RX_TAKE : RX_WAIT;
	}
	uint8_t *direct = NULL;
	if (up->reply_header(c, ci, h, &direct) < 0) {
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
	if (h->kind == WIRE_REQUEST) {
		up->request_done(c->body_owner);
	} else if (c->body_direct) {
		up->reply_received(h);
	} else {
		if (h->target_len)   /* replies need no target: skip it */
			memmove(body, body + h->target_len, h->data_len);
		up->reply_done(c, conn_index(c), h, body, h->data_len);
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
	set_events(c, ci, paused ? c->events & ~(uint32_t)EPOLLIN : c->events | EPOLLIN);
	pthread_mutex_unlock(&c->wlock);
}

/* Reads and dispatches frames; 0, or -1 when the connection closed. */
static int conn_read(struct conn *c, uint32_t ci)
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

/* ---- connections ------------------------------------------------------------ */

static int add_fd(int fd, uint64_t tag, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.u64 = tag };
	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
}

static void conn_up(struct conn *c)
{
	pthread_mutex_lock(&S.lock);
	c->up = true;
	c->incoming = 0;
	c->incoming_bytes = 0;
	pthread_mutex_unlock(&S.lock);
}

static void accept_all(void)
{
	for (;;) {
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		char who[ADDR_TEXT_MAX];
		int fd = accept4(listen_fd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				peer_warn("accept on %s: %s", S.listen_addr.text, strerror(errno));
			return;
		}
		addr_format((struct sockaddr *)&ss, who, sizeof(who));
		bool allowed = S.nr_allow == 0;
		for (unsigned i = 0; i < S.nr_allow && !allowed; i++)
			allowed = addr_host_matches((struct sockaddr *)&ss, &S.allow[i]);
		if (!allowed) {
			peer_warn("connection from %s refused: not in --allow", who);
			close(fd);
			continue;
		}
		uint32_t ci = 1;
		while (ci < S.nr_conns && S.conns[ci].used)
			ci++;
		if (ci == S.nr_conns && !(ci = up->evict())) {
			S.counts.refused_full++;
			peer_warn("connection from %s refused: %u connections open (--max-connections), "
				  "none idle or waiting (refusals so far: %" PRIu64 ")", who, S.max_conns,
				  S.counts.refused_full);
			close(fd);
			continue;
		}
		struct conn *c = &S.conns[ci];
		uint8_t *buf = malloc(RX_BUF_SIZE);
		if (!buf) {
			peer_warn("connection from %s refused: out of memory", who);
			close(fd);
			continue;
		}
		tune_socket(fd);
		c->used = true;
		rx_init(&c->rx, buf);
		c->frames_done = 0;
		c->frame_since_ns = 0;
		c->idle_since_ns = xseg_now_ns();
		snprintf(c->peer, sizeof(c->peer), "%s", who);
		pthread_mutex_lock(&c->wlock);
		c->fd = fd;
		c->events = EPOLLIN;
		c->writable = true;
		pthread_mutex_unlock(&c->wlock);
		if (add_fd(fd, ci, EPOLLIN) < 0) {
			peer_error("epoll_ctl: %s", strerror(errno));
			conn_close(ci, "cannot watch it", ECONNRESET);
			continue;
		}
		conn_up(c);
		peer_info("connection from %s", who);
	}
}

/* A connect failed: until one succeeds, requests fail at once. */
static void remote_unreachable(int err)
{
	atomic_store(&S.remote_down, err > 0 ? err : ECONNREFUSED);
	up->fail_queued(err > 0 ? err : ECONNREFUSED);
}

static void remote_connect(uint64_t now)
{
	struct conn *c = &S.conns[REMOTE_CONN];
	int fd = socket(S.remote_addr.ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		peer_error("socket: %s", strerror(errno));
		c->retry_at_ns = now + BACKOFF_MAX_NS;
		return;
	}
	tune_socket(fd);
	pthread_mutex_lock(&c->wlock);
	c->fd = fd;
	pthread_mutex_unlock(&c->wlock);
	c->connecting = true;
	c->retry_at_ns = now + S.timeout_ns;   /* the connect's deadline */
	int rc = connect(fd, (struct sockaddr *)&S.remote_addr.ss, S.remote_addr.len);
	if (rc < 0 && errno != EINPROGRESS) {
		int errno_saved = errno;
		char why[128];
		snprintf(why, sizeof(why), "cannot connect: %s; retrying", strerror(errno));
		pthread_mutex_lock(&c->wlock);
		c->fd = -1;
		pthread_mutex_unlock(&c->wlock);
		close(fd);
		if (!c->warned_down)
			peer_warn("%s: %s", c->peer, why);
		c->warned_down = true;
		remote_unreachable(errno_saved);
		c->connecting = false;
		c->retry_at_ns = now + c->backoff_ns;
		c->backoff_ns = c->backoff_ns * 2 < BACKOFF_MAX_NS ? c->backoff_ns * 2 : BACKOFF_MAX_NS;
		return;
	}
	pthread_mutex_lock(&c->wlock);
	c->events = EPOLLOUT;
	pthread_mutex_unlock(&c->wlock);
	add_fd(fd, REMOTE_CONN, EPOLLOUT);
}

static void remote_connected(void)
{
	struct conn *c = &S.conns[REMOTE_CONN];
	int err = 0;
	socklen_t len = sizeof(err);
	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err) {
		if (!c->warned_down)
			peer_warn("%s: cannot connect: %s; retrying with backoff", c->peer,
				  strerror(err));
		c->warned_down = true;
		conn_close(REMOTE_CONN, strerror(err), ECONNRESET);
		remote_unreachable(err);
		return;
	}
	c->connecting = false;
	c->warned_down = false;
	c->backoff_ns = BACKOFF_MIN_NS;
	atomic_store(&S.remote_down, 0);
	conn_up(c);
	peer_info("connected to %s", c->peer);
	pthread_mutex_lock(&c->wlock);
	c->writable = true;
	set_events(c, REMOTE_CONN, EPOLLIN);
	pthread_mutex_unlock(&c->wlock);
	conn_kick(REMOTE_CONN);
}

/* Closes connections whose writes failed, offers the headers that wait
 * for room again (cheap: a decode and two sums) and writes what is queued. */
static void service_conns(void)
{
	for (uint32_t ci = 0; ci < S.nr_conns; ci++) {
		struct conn *c = &S.conns[ci];
		if (c->fd < 0 || c->connecting)
			continue;
		pthread_mutex_lock(&c->wlock);
		int err = c->write_err;
		pthread_mutex_unlock(&c->wlock);
		if (err) {
			conn_close(ci, strerror(err), err == ETIMEDOUT ? ETIMEDOUT : ECONNRESET);
			continue;
		}
		if (c->read_paused && conn_read(c, ci) < 0)
			continue;
		conn_kick(ci);
	}
}

static bool anything_queued(void)
{
	for (uint32_t ci = 0; ci < S.nr_conns; ci++)
		if (S.conns[ci].fd >= 0 && !S.conns[ci].connecting &&
		    (has_queued(&S.conns[ci]) || S.conns[ci].writing))
			return true;
	return false;
}

/* Requests this side has under way: accepted from clients (requester side)
 * or read from the network and not yet replied to (serving side). */
static uint64_t under_way(void)
{
	uint64_t mine = peer_in_flight(S.peer), remote = atomic_load(&S.inbound_live);
	return mine > remote ? mine : remote;
}

/*
 * epoll_wait, spinning first while traffic flowed in the last BUSY_NS.
 * At depth 1 the spinning thread also does the workers' round (requests
 * from clients, replies from the target) with the workers parked off the
 * port: a request or reply then wakes no worker, and no client's submit
 * pays a futex call for a worker that will not take it (each costs 15-20
 * us on a paravirtualised guest). With more than one request under way
 * the workers share the work as usual. It parks them only once its spins
 * keep ending in an event, not in sleep (--net-spin-us longer than a round
 * trip): unparking before each sleep would wake them every time.
 */
static int wait_events(struct epoll_event *evs, int max, uint64_t now, uint64_t *last_event)
{
	static unsigned streak;   /* spins in a row that ended in an event */
	int n = 0;

	if (now - *last_event < BUSY_NS) {
		uint64_t spin = S.net_spin_ns, until = now + spin;
		bool help = streak >= PARK_STREAK && S.net_helper &&
			    !atomic_load(&S.stopping);
		if (help)
			peer_park_workers(S.peer);
		else
			peer_unpark_workers(S.peer);
		for (;;) {
			if (help && under_way() > 1) {
				help = false;   /* under load: the workers share it */
				peer_unpark_workers(S.peer);
			}
			int took = help ? peer_helper_poll(S.net_helper) : 0;
			n = epoll_wait(epfd, evs, max, 0);
			if (n != 0)
				break;
			now = xseg_now_ns();
			if (took)
				until = now + spin;
			else if (now >= until)
				break;
			else
				sched_yield();
		}
	}
	streak = n > 0 ? streak + 1 : 0;
	if (n == 0) {
		/* about to sleep: the workers watch the ports again */
		peer_unpark_workers(S.peer);
		n = epoll_wait(epfd, evs, max, (int)(SWEEP_NS / 1000000));
	}
	if (n > 0)
		*last_event = xseg_now_ns();
	return n;
}

static void *net_loop(void *arg)
{
	(void)arg;
	struct epoll_event evs[64];
	uint64_t next_sweep = 0, quit_deadline = 0, last_event = 0;
	struct conn *remote = &S.conns[REMOTE_CONN];

	for (;;) {
		uint64_t now = xseg_now_ns();
		if (atomic_load(&S.quit)) {
			/* the workers are done: flush the last replies, briefly */
			if (!quit_deadline)
				quit_deadline = now + QUIT_FLUSH_NS;
			if (now >= quit_deadline || !anything_queued())
				break;
		}
		if (now >= next_sweep) {
			up->expire(now);
			/* Frames stopped half way (a reply read into its request is
			 * out of the requests' timeouts' reach) and idle clients. */
			up->sweep(now);
			next_sweep = now + SWEEP_NS;
		}
		if (S.have_remote && !atomic_load(&S.quit)) {
			if (remote->fd < 0 && now >= remote->retry_at_ns)
				remote_connect(now);
			else if (remote->connecting && now >= remote->retry_at_ns) {
				conn_close(REMOTE_CONN, "connect timed out", ETIMEDOUT);
				remote_unreachable(ETIMEDOUT);
			}
		}
		int n = wait_events(evs, 64, now, &last_event);
		if (n < 0 && errno != EINTR) {
			peer_error("epoll_wait: %s", strerror(errno));
			break;
		}
		for (int i = 0; i < n; i++) {
			uint64_t tag = evs[i].data.u64;
			uint32_t ev = evs[i].events;
			if (tag == TAG_WAKE) {
				uint64_t v;
				if (read(S.wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
					peer_error("eventfd: %s", strerror(errno));
				atomic_store(&S.wake_pending, 0);
				continue;
			}
			if (tag == TAG_LISTEN) {
				accept_all();
				continue;
			}
			uint32_t ci = (uint32_t)tag;
			struct conn *c = &S.conns[ci];
			if (c->fd < 0)
				continue;
			if (ci == REMOTE_CONN && c->connecting) {
				remote_connected();
				continue;
			}
			/* not read while it waits for room: a hang-up would fire
			 * again and again, and nobody is there to answer */
			if (c->read_paused && (ev & (EPOLLHUP | EPOLLERR))) {
				conn_close(ci, "reset by the peer", ECONNRESET);
				continue;
			}
			if ((ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) && conn_read(c, ci) < 0)
				continue;
			if (ev & EPOLLOUT)
				conn_writable(c, ci);
		}
		service_conns();
	}
	for (uint32_t ci = 0; ci < S.nr_conns; ci++)
		if (S.conns[ci].fd >= 0)
			conn_close(ci, "stopping", ESHUTDOWN);
	return NULL;
}

int net_start(const struct net_ops *ops)
{
	up = ops;
	epfd = epoll_create1(EPOLL_CLOEXEC);
	S.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (epfd < 0 || S.wake_fd < 0 || add_fd(S.wake_fd, TAG_WAKE, EPOLLIN) < 0) {
		peer_error("epoll/eventfd: %s", strerror(errno));
		return -1;
	}
	/* a quarter of the budget, but always room for the largest request */
	uint64_t share = S.max_inflight / 4 > MAX_CHARGE ? S.max_inflight / 4 : MAX_CHARGE;
	S.conn_inflight = share < S.max_inflight ? share : S.max_inflight;
	S.nr_conns = S.max_conns + 1;
	S.conns = calloc(S.nr_conns, sizeof(*S.conns));
	if (!S.conns) {
		peer_error("out of memory for %u connections", S.nr_conns);
		return -1;
	}
	for (uint32_t ci = 0; ci < S.nr_conns; ci++) {
		struct conn *c = &S.conns[ci];
		c->fd = -1;
		c->gen = 1;
		pthread_mutex_init(&c->wlock, NULL);
		frame_queue_init(&c->small);
		frame_queue_init(&c->large);
	}
	if (S.have_remote) {
		struct conn *c = &S.conns[REMOTE_CONN];
		c->used = true;
		rx_init(&c->rx, malloc(RX_BUF_SIZE));
		c->backoff_ns = BACKOFF_MIN_NS;
		snprintf(c->peer, sizeof(c->peer), "%s", S.remote_addr.text);
		if (!c->rx.buf) {
			peer_error("out of memory");
			return -1;
		}
	}
	if (S.have_listen) {
		int one = 1;
		listen_fd = socket(S.listen_addr.ss.ss_family,
				   SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (listen_fd < 0 ||
		    setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
		    bind(listen_fd, (struct sockaddr *)&S.listen_addr.ss, S.listen_addr.len) < 0 ||
		    listen(listen_fd, 64) < 0 || add_fd(listen_fd, TAG_LISTEN, EPOLLIN) < 0) {
			peer_error("cannot listen on %s: %s", S.listen_addr.text, strerror(errno));
			return -1;
		}
		peer_info("listening on %s%s", S.listen_addr.text,
			  S.nr_allow ? "" : " (no --allow: every address is accepted)");
	}
	S.net_helper = peer_helper_new(S.peer);   /* none: the workers do it all */
	int rc = pthread_create(&S.net_thread, NULL, net_loop, NULL);
	if (rc) {
		peer_error("cannot start the network thread: %s", strerror(rc));
		return -1;
	}
	S.net_started = true;
	return 0;
}

void net_stop(void)
{
	if (S.net_started) {
		atomic_store(&S.quit, 1);
		uint64_t one = 1;
		if (write(S.wake_fd, &one, sizeof(one)) < 0)
			peer_error("eventfd: %s", strerror(errno));
		pthread_join(S.net_thread, NULL);
		S.net_started = false;
	}
	peer_helper_free(S.net_helper);
	S.net_helper = NULL;
	for (uint32_t ci = 0; ci < S.nr_conns; ci++) {
		struct conn *c = &S.conns[ci];
		frame_queue_free(&c->small);
		frame_queue_free(&c->large);
		free(c->rx.buf);
		c->rx.buf = NULL;
		pthread_mutex_destroy(&c->wlock);
	}
	if (S.conns)
		up->report();
	free(S.conns);
	S.conns = NULL;
	S.nr_conns = 0;
	if (listen_fd >= 0)
		close(listen_fd);
	if (epfd >= 0)
		close(epfd);
	if (S.wake_fd >= 0)
		close(S.wake_fd);
	listen_fd = epfd = S.wake_fd = -1;
}
