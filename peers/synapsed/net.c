/*
 * synapsed's network thread: one epoll loop over the listening socket, the
 * --remote link, the accepted connections and an eventfd the workers write
 * when they queue frames. Sockets are non-blocking; a socket that cannot
 * take more is watched for EPOLLOUT, never retried in a loop.
 *
 * Here: accepting (--allow, --max-connections), connecting to --remote
 * with backoff, the loop (spinning while traffic flows, the periodic
 * expiry and sweep), start and stop. A connection's reading and writing
 * are conn.c's:
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
 * This is the socket layer: it calls the files below it (conn.c, frame.c,
 * rx.c, slots.c, wire.c, wake.c) by name and the ones above it (inbound.c,
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

#include "conn.h"
#include "synapsed.h"

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

static int listen_fd = -1;

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

/* ---- connections ------------------------------------------------------------ */

static int add_fd(int fd, uint64_t tag, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.u64 = tag };
	return epoll_ctl(conn_epfd, EPOLL_CTL_ADD, fd, &ev);
}

static void conn_up(struct conn *c)
{
	pthread_mutex_lock(&S.lock);
	c->up = true;
	c->asked = false;
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
		if (ci == S.nr_conns && !(ci = conn_up_ops->evict())) {
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
		c->requester = 0;   /* until its hello (epochs.c) */
		c->epoch = 0;
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

/*
 * What a request is failed with when a connect failed. A connect's errno
 * may say something else about a request: a blackhole route fails it
 * EINVAL, a prohibit route EACCES, a firewall EPERM, no ephemeral port
 * EADDRNOTAVAIL; a client would take those for a fault of its request
 * (vlmcd passes them on). Those are ENETUNREACH (the log has the connect's
 * own); the errors of an unreachable remote stay as they are.
 */
static int link_error(int err)
{
	switch (err) {
	case ECONNREFUSED: case ECONNRESET: case ETIMEDOUT: case ENETUNREACH:
	case EHOSTUNREACH: case ENETDOWN: case EHOSTDOWN:
		return err;
	default:
		return ENETUNREACH;
	}
}

/* A connect failed: until one succeeds, requests fail at once. */
static void remote_unreachable(int err)
{
	atomic_store(&S.remote_down, link_error(err));
	conn_up_ops->fail_queued(link_error(err));
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
		/* the outage at warn once, each further try at info */
		peer_log(c->warned_down ? PEER_LOG_INFO : PEER_LOG_WARN, "%s: %s", c->peer, why);
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
		peer_log(c->warned_down ? PEER_LOG_INFO : PEER_LOG_WARN,
			 "%s: cannot connect: %s; retrying with backoff", c->peer, strerror(err));
		c->warned_down = true;
		conn_close(REMOTE_CONN, strerror(err), ECONNRESET);
		remote_unreachable(err);
		return;
	}
	/* Before any request: who we are and this connection's epoch, so
	 * that the remote runs nothing more of our older connections. */
	struct frame *hello = hello_frame();
	if (!hello) {
		conn_close(REMOTE_CONN, "out of memory for its hello", ECONNRESET);
		return;
	}
	c->connecting = false;
	/* Requests go out on it, but the backoff and the outage's log stay
	 * until it proves itself (conn_close): a TCP connect alone does not
	 * (a remote that refuses us accepts, then closes). Its silence, for
	 * the stall check (outbound_expire), counts from now. */
	c->connected_ns = c->idle_since_ns = xseg_now_ns();
	c->frames_done = 0;
	atomic_store(&S.remote_down, 0);
	conn_up(c);
	peer_info("connected to %s", c->peer);
	pthread_mutex_lock(&c->wlock);
	c->writing = hello;   /* first: a worker writes only when nothing is */
	c->writable = true;
	conn_set_events(c, REMOTE_CONN, EPOLLIN);
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
		    (conn_has_queued(&S.conns[ci]) || S.conns[ci].writing))
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
			n = epoll_wait(conn_epfd, evs, max, 0);
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
		n = epoll_wait(conn_epfd, evs, max, (int)(SWEEP_NS / 1000000));
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
			conn_up_ops->expire(now);
			/* Frames stopped half way (a reply read into its request is
			 * out of the requests' timeouts' reach) and idle clients. */
			conn_up_ops->sweep(now);
			next_sweep = now + SWEEP_NS;
		}
		if (S.have_remote && !atomic_load(&S.quit)) {
			if (remote->fd < 0 && now >= remote->retry_at_ns)
				remote_connect(now);
			else if (remote->connecting && now >= remote->retry_at_ns) {
				if (remote->warned_down)   /* else conn_close warns */
					peer_info("%s: connect timed out; retrying with backoff",
						  remote->peer);
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
	conn_up_ops = ops;
	conn_epfd = epoll_create1(EPOLL_CLOEXEC);
	S.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (conn_epfd < 0 || S.wake_fd < 0 || add_fd(S.wake_fd, TAG_WAKE, EPOLLIN) < 0) {
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
	peer_name_thread(S.net_thread, "synapsed-net");
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
		pthread_mutex_lock(&S.lock);
		frame_queue_free(&c->small);
		frame_queue_free(&c->large);
		pthread_mutex_unlock(&S.lock);
		free(c->rx.buf);
		c->rx.buf = NULL;
		pthread_mutex_destroy(&c->wlock);
	}
	if (S.conns)
		conn_up_ops->report();
	free(S.conns);
	S.conns = NULL;
	S.nr_conns = 0;
	if (listen_fd >= 0)
		close(listen_fd);
	if (conn_epfd >= 0)
		close(conn_epfd);
	if (S.wake_fd >= 0)
		close(S.wake_fd);
	listen_fd = conn_epfd = S.wake_fd = -1;
}
