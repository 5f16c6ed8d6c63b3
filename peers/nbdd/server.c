/*
 * The socket threads (--socket-threads): the first accepts connections on
 * TCP and Unix listeners and gives each to the thread with the fewest
 * (itself included); that thread runs the connection's handshake (the
 * options: handshake.c) and reads its requests for good, with an epoll
 * loop over its non-blocking sockets. One thread read every connection's
 * requests at 150K commands a second, however many clients came (fio with
 * 4 and 8 jobs on 16 cores), where nbdkit served 440-480K. A complete
 * request becomes a struct cmd handed to cmd.c (cmd_post: sent from here,
 * or posted to the workers); replies come back through conn.c's
 * conn_send(), which any thread may call, or conn_send_batched() on a
 * worker.
 *
 * A connection is freed when its last reference goes: the socket thread
 * holds one while the socket is open, every command one until its reply is
 * queued. So a client that disappears mid-request leaves its commands to
 * finish on the path; their replies are dropped and nothing is left behind.
 *
 * Flow control: a connection with --max-inflight commands whose replies
 * are not yet written stops being read until half of them are. So does one
 * whose buffers (reply data, payloads: cmd_buffer_bytes) reach
 * --max-client-buffer, and every connection with a READ or WRITE to start
 * while all of them together hold --max-buffer-total. The command that
 * crosses a limit is taken, so a command larger than a limit still runs
 * and each limit is passed by one command at most. (With the defaults, a
 * 32M READ fills its connection's buffer alone: nothing more is read from
 * that connection until it is written.) In the handshake the same holds
 * for the option replies, at HANDSHAKE_OUT_MAX bytes unsent.
 *
 * Memory: a connection stopped for memory whose socket took no reply byte
 * for BUFFER_STALL_NS is closed: its client is not reading, and what it
 * holds is memory the others wait for (two such clients held 285 MB). Real
 * clients (qemu, libnbd) read every reply as it comes; a slow one takes
 * some bytes every second and is only paced.
 *
 * Timeouts: a connection in the handshake, or one that has sent part of
 * a request (header or payload) and is being read, is closed after
 * --io-timeout seconds without a byte from it while nbdd reads it (one
 * paced for its unsent replies owes nothing); so is one whose socket takes
 * none of its replies for that long (a client that stopped reading would
 * otherwise hold its connection and its replies for ever). An idle
 * connection between requests has no limit.
 *
 * Stop: server_drain (SIGTERM/SIGINT, the runtime's drain) answers every
 * new command NBD_ESHUTDOWN and closes each connection once what it had
 * in flight is answered: a WRITE done by the path, its reply dropped, left
 * the client unsure whether it is on the disk. Only what is still open
 * after --stop-timeout is closed with replies to come (server_stop).
 */
#define _GNU_SOURCE   /* accept4 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>
#include <linux/sockios.h>

#include "conn.h"
#include "handshake.h"
#include "nbdd.h"

/* A connection stopped for memory whose socket takes no byte for this
 * long is closed (--max-client-buffer). */
#define BUFFER_STALL_NS (1000ull * 1000 * 1000)
/* Waiting for --max-buffer-total is logged at most this often. */
#define TOTAL_LOG_NS (10ull * 1000 * 1000 * 1000)
/* Unsent handshake replies before the connection is not read: a client
 * pipelining options sends a few; one that never reads gets no more. */
#define HANDSHAKE_OUT_MAX (64ull << 10)
#define MAX_LISTENERS 5
/* A listener whose accept fails for want of a file (EMFILE...) is not
 * watched for this long; its error is logged at most once a second. */
#define ACCEPT_PAUSE_NS (100ull * 1000 * 1000)
#define ACCEPT_LOG_NS (1000ull * 1000 * 1000)
/* How often connections are checked against --io-timeout. */
#define TIMEOUT_SCAN_NS (250ull * 1000 * 1000)
/* WRITE payload left to read from which it is read into its buffer
 * directly, not through the input buffer. */
#define DIRECT_READ_MIN (16u * 1024)

struct listener {
	enum source_kind kind;
	int fd;
	char name[128];
	uint64_t resume_ns;         /* resting until then after an accept error; 0: not */
	bool watched;               /* in the epoll set with EPOLLIN */
};

static struct {
	struct peer *peer;
	/* The layers above (cmd.c, nbdd.c), given to server_open: this file
	 * calls up only through them, never by name. */
	const struct server_ops *up;
	atomic_int stop;
	atomic_uint nr_conns;           /* open, on every socket thread */
	_Atomic uint64_t total_log_ns;  /* no --max-buffer-total line before then */
	/* Figures: connections closed holding replies their client does not
	 * read; times a connection waited for the total. */
	_Atomic uint64_t buffer_closes, total_waits;
	/* commands refused before reaching the path (flags, range, size, and
	 * NBD_ESHUTDOWN in the stop: those also in `shutdowns`) */
	_Atomic uint64_t refused, shutdowns;
	_Atomic uint64_t stop_deadline_ns;   /* server_drain's: lingers end then */
	atomic_uint nr_lingering;           /* of nr_conns: drained, lingering */
	/* The first socket thread's. */
	struct listener listeners[MAX_LISTENERS];
	unsigned nr_listeners;
	bool full;                      /* --max-connections open: not accepting */
	uint64_t accept_log_ns;         /* no accept error logged before then */
	unsigned accept_errors;         /* failed accepts not logged yet */
} S;


/* Watches l unless it rests after an error or nbdd has all the
 * connections it may. */
static void update_listener(struct listener *l)
{
	bool on = !l->resume_ns && !S.full;
	if (on == l->watched || l->fd < 0)   /* fd < 0: closed on stop */
		return;
	struct epoll_event ev = { .events = on ? EPOLLIN : 0, .data.ptr = l };
	if (epoll_ctl(loops_first()->epfd, EPOLL_CTL_MOD, l->fd, &ev) < 0)
		peer_warn("%s: epoll: %s", l->name, strerror(errno));
	else
		l->watched = on;
}

/*
 * The first socket thread, after each round and each accept: at
 * --max-connections the listeners are not watched (new clients wait in
 * the backlog), below it again they are.
 */
static void update_full(void)
{
	unsigned n = atomic_load(&S.nr_conns);
	bool full = n >= nbdd_cfg.max_connections;
	if (full == S.full)
		return;
	S.full = full;
	if (full)
		peer_warn("%u connections open (--max-connections): not accepting until one closes",
			  n);
	for (unsigned i = 0; i < S.nr_listeners; i++)
		update_listener(&S.listeners[i]);
}

/* A connection given to L (+1) or closed there (-1). A close that makes
 * room under --max-connections wakes the first socket thread to accept. */
static void count_conn(struct loop *L, int delta)
{
	atomic_fetch_add(&L->nr_conns, (unsigned)delta);
	unsigned was = atomic_fetch_add(&S.nr_conns, (unsigned)delta);
	if (delta < 0 && was == nbdd_cfg.max_connections && L != loops_first())
		loop_wake(loops_first());
}

/* ---- connections -------------------------------------------------------------------- */

static void conn_close(struct conn *c, const char *why)
{
	struct loop *L = c->loop;
	peer_info("%s: closed: %s", c->peer_name, why);
	if (c->lingering)
		atomic_fetch_sub(&S.nr_lingering, 1);
	epoll_ctl(L->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	shutdown(c->fd, SHUT_RDWR);
	pthread_mutex_lock(&c->lock);
	c->dead = true;
	if (!c->writing)   /* else its writer drops them when sendmsg returns */
		conn_drop_output_locked(c);
	if (c->filling) {
		conn_unowe_locked(c, c->filling->reply->charge);
		conn_unhold_locked(c, c->filling->reply->charge_bytes);
	}
	if (c->waits_total) {
		c->waits_total = false;
		atomic_fetch_sub(&H.total_waiters, 1);
	}
	pthread_mutex_unlock(&c->lock);
	if (c->filling) {
		S.up->cmd_free(c->filling);
		c->filling = NULL;
		conn_put(c);   /* the command's reference */
	}
	if (c->prev)
		c->prev->next = c->next;
	else
		L->conns = c->next;
	count_conn(L, -1);
	if (c->next)
		c->next->prev = c->prev;
	/* Events of this round may still name it: its reference goes after. */
	c->closed = true;
	c->prev = NULL;
	c->next = L->zombies;
	L->zombies = c;
}

static void free_zombies(struct loop *L)
{
	while (L->zombies) {
		struct conn *c = L->zombies;
		L->zombies = c->next;
		conn_put(c);   /* the socket thread's reference */
	}
}

/*
 * accept failed with err. EMFILE, ENFILE, ENOBUFS, ENOMEM leave the
 * connection queued and the listener readable: watched, it would wake the
 * socket thread at once, again and again (a core, and a log line each
 * time). So the listener rests ACCEPT_PAUSE_NS, after any error but those
 * that consumed the connection, and the error is logged once a second.
 */
static void accept_failed(struct listener *l, int err)
{
	if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR || err == ECONNABORTED)
		return;
	uint64_t now = xseg_now_ns();
	l->resume_ns = now + ACCEPT_PAUSE_NS;
	update_listener(l);
	S.accept_errors++;
	if (now < S.accept_log_ns)
		return;
	S.accept_log_ns = now + ACCEPT_LOG_NS;
	struct rlimit rl;
	char limit[32] = "unknown";
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		snprintf(limit, sizeof(limit), rl.rlim_cur == RLIM_INFINITY ? "unlimited" : "%llu",
			 (unsigned long long)rl.rlim_cur);
	peer_warn("accept on %s: %s (open files limit %s): not accepting for %llu ms "
		  "(failed accepts since the last such line: %u)",
		  l->name, strerror(err), limit, ACCEPT_PAUSE_NS / 1000000, S.accept_errors);
	S.accept_errors = 0;
}

/* Watches the listeners whose rest is over; returns the milliseconds until
 * the next one is due, at most `wait_ms`. */
static int resume_listeners(int wait_ms)
{
	uint64_t now = xseg_now_ns();
	for (unsigned i = 0; i < S.nr_listeners; i++) {
		struct listener *l = &S.listeners[i];
		if (!l->resume_ns)
			continue;
		if (l->resume_ns <= now) {
			l->resume_ns = 0;
			update_listener(l);
		} else if ((l->resume_ns - now) / 1000000 + 1 < (uint64_t)wait_ms) {
			wait_ms = (int)((l->resume_ns - now) / 1000000 + 1);
		}
	}
	return wait_ms;
}

/* L takes c for good: reads it, and greets the client. */
static void adopt(struct loop *L, struct conn *c)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
	if (epoll_ctl(L->epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0) {
		peer_warn("%s: epoll: %s", c->peer_name, strerror(errno));
		count_conn(L, -1);
		conn_put(c);
		return;
	}
	c->prev = NULL;
	c->next = L->conns;
	if (L->conns)
		L->conns->prev = c;
	L->conns = c;
	if (loops_count() > 1)
		peer_info("%s: connected (socket thread %u)", c->peer_name, L->index);
	else
		peer_info("%s: connected", c->peer_name);
	uint8_t hello[NBD_HELLO_LEN];
	nbd_encode_hello(hello);
	conn_send_bytes(c, hello, sizeof(hello), 0);
}

static void accept_one(struct listener *l)
{
	if (S.full)   /* an event of this round, from before the last accept */
		return;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int fd = accept4(l->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0) {
		accept_failed(l, errno);
		return;
	}
	struct conn *c = calloc(1, sizeof(*c));
	if (!c) {
		peer_warn("accept on %s: out of memory", l->name);
		close(fd);
		return;
	}
	c->kind = SRC_CONN;
	c->fd = fd;
	atomic_init(&c->refs, 1);
	c->out_tail = &c->out_head;
	c->bytes_limit = HANDSHAKE_OUT_MAX;
	c->last_rx_ns = xseg_now_ns();
	pthread_mutex_init(&c->lock, NULL);
	if (ss.ss_family == AF_INET || ss.ss_family == AF_INET6) {
		char host[INET6_ADDRSTRLEN], serv[16];
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), serv, sizeof(serv),
				NI_NUMERICHOST | NI_NUMERICSERV) == 0)
			snprintf(c->peer_name, sizeof(c->peer_name), "%s:%s", host, serv);
	}
	if (!c->peer_name[0])
		snprintf(c->peer_name, sizeof(c->peer_name), "unix client fd %d", fd);
	struct loop *to = loops_least_loaded();
	c->loop = to;
	count_conn(to, 1);
	update_full();
	if (to == loops_first()) {
		adopt(to, c);
		return;
	}
	pthread_mutex_lock(&to->kick_lock);   /* handed over: run_kicks there takes it */
	c->next = to->given;
	to->given = c;
	pthread_mutex_unlock(&to->kick_lock);
	loop_wake(to);
}

/* ---- transmission ------------------------------------------------------------------------ */

static void reply_now(struct conn *c, uint64_t cookie, uint32_t error)
{
	uint8_t buf[NBD_SIMPLE_REPLY_LEN];
	nbd_encode_simple_reply(buf, error, cookie);
	conn_send_bytes(c, buf, sizeof(buf), 1);
}

/* A new command: accounted, then filled (WRITE) or posted. False: close. */
static bool start_cmd(struct conn *c, const struct nbd_request *req)
{
	conn_get(c);
	struct cmd *cmd = S.up->cmd_new(c, c->exp, req);
	if (!cmd) {
		conn_put(c);
		reply_now(c, req->cookie, NBD_ENOMEM);
		c->discard = nbd_request_payload(req);
		return true;
	}
	pthread_mutex_lock(&c->lock);
	conn_owe_locked(c, cmd->reply->charge);
	conn_hold_locked(c, cmd->reply->charge_bytes);
	pthread_mutex_unlock(&c->lock);
	if (cmd->payload) {
		c->filling = cmd;
		c->filled = 0;
	} else {
		S.up->cmd_post(S.peer, cmd);
	}
	return true;
}

static bool handle_request(struct conn *c, const struct nbd_request *req)
{
	if (req->type == NBD_CMD_DISC) {
		/* No reply to a DISC, whatever its flags (the spec): the
		 * connection closes once what came before is answered. */
		pthread_mutex_lock(&c->lock);
		conn_set_disc_locked(c);
		pthread_mutex_unlock(&c->lock);
		return true;
	}
	if (atomic_load(&H.stopping)) {
		/* The spec: once the server is shutting down, commands it has
		 * not started get NBD_ESHUTDOWN (the client then disconnects);
		 * those in flight are answered first (server_drain). */
		atomic_fetch_add(&S.refused, 1);
		atomic_fetch_add(&S.shutdowns, 1);
		reply_now(c, req->cookie, NBD_ESHUTDOWN);
		c->discard = nbd_request_payload(req);
		return true;
	}
	uint32_t err = nbd_check_request(req, c->exp->size, (uint32_t)nbdd_cfg.max_request);
	if (err) {
		peer_info("%s: %s (flags %#x) of %" PRIu32 " bytes at %" PRIu64 " refused: %s",
			  c->peer_name, nbd_cmd_name(req->type), req->flags, req->length,
			  req->offset, strerror((int)err));
		atomic_fetch_add(&S.refused, 1);
		reply_now(c, req->cookie, err);
		c->discard = nbd_request_payload(req);
		return true;
	}
	if (req->type != NBD_CMD_FLUSH && !req->length) {
		reply_now(c, req->cookie, 0);
		return true;
	}
	return start_cmd(c, req);
}

static void note_total_wait(uint64_t total, bool pool)
{
	uint64_t waits = atomic_fetch_add(&S.total_waits, 1) + 1;
	uint64_t now = xseg_now_ns();
	uint64_t due = atomic_load(&S.total_log_ns);
	if (now < due || !atomic_compare_exchange_strong(&S.total_log_ns, &due, now + TOTAL_LOG_NS))
		return;   /* not yet, or another socket thread says it */
	if (pool)
		peer_warn("%" PRIu64 " requests out on the path: half the segment's pool, clients "
			  "wait for replies (waits so far: %" PRIu64 ")", nbdd_cfg.max_path_requests,
			  waits);
	else
		peer_warn("%" PRIu64 " bytes held for clients: past --max-buffer-total %" PRIu64
			  ", clients wait for replies to drain (waits so far: %" PRIu64 ")",
			  total, nbdd_cfg.max_buffer_total, waits);
}

/* nbdd has its share of the segment's request pool out on the path. */
static bool path_full(void)
{
	return peer_in_flight(S.peer) >= nbdd_cfg.max_path_requests;
}

/*
 * Whether c may start a command that holds `bytes` of buffer, as far as
 * --max-buffer-total goes (its own limit is checked before each request),
 * and, when it goes to the target (uses_path), while nbdd has less than
 * half the segment's request pool out there (max_path_requests).
 * If not, c is not read (the request stays in its input buffer) until
 * everyone's replies drain (resume_total_waiters) or its own do.
 */
static bool admit(struct conn *c, uint64_t bytes, bool uses_path)
{
	uint64_t total = atomic_load(&H.held_total);
	bool pool = uses_path && path_full();
	if (!pool && (!bytes || total < nbdd_cfg.max_buffer_total))
		return true;
	pthread_mutex_lock(&c->lock);
	c->paused = c->paused_memory = c->waits_total = true;
	atomic_fetch_add(&H.total_waiters, 1);
	conn_update_events_locked(c);
	pthread_mutex_unlock(&c->lock);
	note_total_wait(total, pool);
	return false;
}

/* Whether a request is answered with an error at once (never held, never
 * on the path): a bad one, or any once nbdd stops. */
static bool refused_at_once(const struct conn *c, const struct nbd_request *req)
{
	return atomic_load(&H.stopping) ||
	       nbd_check_request(req, c->exp->size, (uint32_t)nbdd_cfg.max_request);
}

/* What a request would hold: nothing when it is to be refused. */
static uint64_t request_buffer_bytes(const struct conn *c, const struct nbd_request *req)
{
	if (refused_at_once(c, req))
		return 0;
	return S.up->cmd_buffer_bytes(req);
}

/* Whether a request goes to the target (not refused, not answered here). */
static bool request_uses_path(const struct conn *c, const struct nbd_request *req)
{
	if (refused_at_once(c, req) || req->type == NBD_CMD_DISC)
		return false;
	return req->type == NBD_CMD_FLUSH || req->length;
}

/* Consumes what the input buffer holds; false when the connection must close
 * (why in *why). */
static bool parse_input(struct conn *c, const char **why)
{
	size_t pos = 0;
	for (;;) {
		pthread_mutex_lock(&c->lock);
		bool stop = c->paused || c->disc || c->broken;
		/* In every phase: handshake replies count too. */
		if (!stop && !c->filling && !c->discard &&
		    (c->inflight >= nbdd_cfg.max_inflight || c->inflight_bytes >= c->bytes_limit)) {
			c->paused = stop = true;
			c->paused_memory = c->phase == PH_TRANSMISSION &&
					   c->inflight_bytes >= c->bytes_limit;
			conn_update_events_locked(c);
			peer_debug("%s: not reading: %" PRIu64 " commands, %" PRIu64 " bytes unanswered",
				   c->peer_name, c->inflight, c->inflight_bytes);
		}
		pthread_mutex_unlock(&c->lock);
		if (stop)
			break;
		const uint8_t *b = c->in + pos;
		size_t avail = c->in_len - pos;
		if (c->discard) {
			size_t n = avail < c->discard ? avail : (size_t)c->discard;
			c->discard -= n;
			pos += n;
			if (c->discard)
				break;
			continue;
		}
		if (c->filling) {
			struct cmd *cmd = c->filling;
			size_t want = cmd->req.length - c->filled;
			size_t n = avail < want ? avail : want;
			memcpy(cmd->payload + c->filled, b, n);
			c->filled += (uint32_t)n;
			pos += n;
			if (c->filled < cmd->req.length)
				break;
			c->filling = NULL;
			S.up->cmd_post(S.peer, cmd);
			continue;
		}
		int n;
		if (c->phase == PH_CLIENT_FLAGS) {
			n = nbd_decode_client_flags(b, avail, &c->client_flags);
			if (n > 0)
				c->phase = PH_OPTIONS;
		} else if (c->phase == PH_OPTIONS) {
			struct nbd_option opt;
			n = nbd_decode_option(b, avail, &opt);
			if (n > 0) {
				if (avail - (size_t)n < opt.length) {
					n = 0;   /* its data is not all here yet */
				} else {
					if (!handshake_option(c, S.up, &opt, b + n)) {
						*why = "unknown export in NBD_OPT_EXPORT_NAME";
						return false;
					}
					n += (int)opt.length;
				}
			}
		} else {
			struct nbd_request req;
			n = nbd_decode_request(b, avail, &req);
			if (n > 0 && !admit(c, request_buffer_bytes(c, &req),
					    request_uses_path(c, &req)))
				break;   /* not taken: read again when memory is back */
			if (n > 0 && !handle_request(c, &req)) {
				*why = "out of memory";
				return false;
			}
		}
		if (n < 0) {
			*why = nbd_proto_error_name(n);
			return false;
		}
		if (n == 0)
			break;
		pos += (size_t)n;
	}
	memmove(c->in, c->in + pos, c->in_len - pos);
	c->in_len -= pos;
	return true;
}

/* Reads and parses until the socket is empty or the connection pauses. */
static void conn_readable(struct conn *c)
{
	const char *why = NULL;
	bool emptied = false;
	for (;;) {
		if (!parse_input(c, &why))
			break;
		pthread_mutex_lock(&c->lock);
		bool stop = c->paused || c->disc || c->broken;
		pthread_mutex_unlock(&c->lock);
		/* A short read emptied the socket: another would only say
		 * EAGAIN, a syscall per wake-up. epoll is level-triggered: it
		 * reports what comes later. */
		if (stop || emptied)
			return;
		/* A large WRITE payload goes straight into its buffer. The rest
		 * of a small one is read with what follows it: a read of just
		 * its bytes cost a recv per command at 4K. */
		uint8_t *dst = c->in + c->in_len;
		size_t room = sizeof(c->in) - c->in_len;
		bool direct = c->filling && !c->in_len &&
			      c->filling->req.length - c->filled >= DIRECT_READ_MIN;
		if (direct) {
			dst = c->filling->payload + c->filled;
			room = c->filling->req.length - c->filled;
		}
		if (!room) {
			why = "request does not fit in the input buffer";
			break;
		}
		ssize_t r = recv(c->fd, dst, room, MSG_DONTWAIT);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (r <= 0) {
			why = r == 0 ? (c->filling || c->in_len ? "client left mid-message" :
					"client left") : strerror(errno);
			break;
		}
		c->last_rx_ns = xseg_now_ns();
		emptied = (size_t)r < room;
		if (direct) {
			c->filled += (uint32_t)r;
			if (c->filled == c->filling->req.length) {
				struct cmd *cmd = c->filling;
				c->filling = NULL;
				S.up->cmd_post(S.peer, cmd);
			}
		} else {
			c->in_len += (size_t)r;
		}
	}
	conn_close(c, why);
}

/* In the stop, whether c owes its client nothing: no command in flight
 * or reply unsent, and none read but not yet started (paused: waiting for
 * memory or its own limit; in the input buffer; a payload being read). */
static bool stop_done(struct conn *c)
{
	pthread_mutex_lock(&c->lock);
	bool done = conn_drained_locked(c) && !c->paused && !c->in_len && !c->filling &&
		    !c->discard;
	pthread_mutex_unlock(&c->lock);
	return done;
}

/*
 * In the stop, a drained TCP connection lingers before it is closed: its
 * replies are in the socket's send queue, and a close with the client's
 * later bytes unread resets the connection, which drops what the client
 * has not yet received (a slow reader lost the end of a READ's reply while
 * the log said every command was answered). So its side is shut down
 * after the replies, what comes in is dropped, and it is closed once the
 * client has acknowledged every byte, reset or left, or the stop's
 * deadline passed. The socket thread looks at it each round (its epoll
 * wait is short in the stop) and serves its other connections meanwhile.
 * A Unix socket keeps what it delivered: closed at once.
 */
static bool linger_begin(struct conn *c)
{
	int domain = 0;
	socklen_t len = sizeof(domain);
	if (getsockopt(c->fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 ||
	    (domain != AF_INET && domain != AF_INET6))
		return false;
	shutdown(c->fd, SHUT_WR);
	pthread_mutex_lock(&c->lock);
	c->lingering = true;
	pthread_mutex_unlock(&c->lock);
	atomic_fetch_add(&S.nr_lingering, 1);
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };   /* input only */
	epoll_ctl(c->loop->epfd, EPOLL_CTL_MOD, c->fd, &ev);
	c->linger_ns = xseg_now_ns();
	return true;
}

/* One look at a lingering connection: true once it may close. */
static bool linger_done(struct conn *c)
{
	char sink[4096];
	ssize_t r = 0;
	for (int i = 0; i < 64 && (r = recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT)) > 0; i++)
		;   /* commands sent after the stop's last read: dropped */
	if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
		return true;   /* reset: nothing left to deliver */
	if (r == 0) {      /* the client's end of the stream: stop watching input */
		struct epoll_event ev = { .events = 0, .data.ptr = c };
		epoll_ctl(c->loop->epfd, EPOLL_CTL_MOD, c->fd, &ev);
	}
	int queued = 0;
	if (ioctl(c->fd, SIOCOUTQ, &queued) < 0 || queued == 0)
		return true;
	if (xseg_now_ns() >= atomic_load(&S.stop_deadline_ns)) {
		peer_warn("%s: %d bytes of replies not yet received by the client at "
			  "--stop-timeout: closing", c->peer_name, queued);
		return true;
	}
	return false;
}

/* Closes a lingering connection once it may. True: closed. */
static bool linger_close_if_done(struct conn *c)
{
	if (!linger_done(c))
		return false;
	uint64_t ms = (xseg_now_ns() - c->linger_ns) / 1000000;
	if (ms)
		peer_info("%s: waited %" PRIu64 " ms for the client to receive its replies",
			  c->peer_name, ms);
	conn_close(c, "nbdd stops, every command answered");
	return true;
}

/*
 * In the stop: closes c once every command it sent is answered. What its
 * socket still holds is read first (each command NBD_ESHUTDOWN): a
 * command read but not started, or sent just before, would otherwise be
 * dropped unanswered with the connection. True: c is closed.
 */
static bool stop_close_if_done(struct conn *c)
{
	if (c->phase != PH_TRANSMISSION) {
		conn_close(c, "nbdd stops (in the handshake)");
		return true;
	}
	if (c->lingering)   /* written by this thread only (under the lock, for the others) */
		return linger_close_if_done(c);
	if (!stop_done(c))
		return false;
	conn_readable(c);
	if (c->closed)
		return true;
	if (!stop_done(c))
		return false;
	if (linger_begin(c))
		return linger_close_if_done(c);
	conn_close(c, "nbdd stops, every command answered");
	return true;
}

/* A kick: resume reading, or close after DISC, in the stop or after a
 * failed write. */
static void conn_kicked(struct conn *c)
{
	if (c->closed)
		return;
	if (c->lingering) {
		linger_close_if_done(c);
		return;
	}
	pthread_mutex_lock(&c->lock);
	bool dead = c->dead, broken = c->broken, disc = c->disc;
	bool done = disc && conn_drained_locked(c);
	if (!dead && !broken && !done)
		conn_update_events_locked(c);
	pthread_mutex_unlock(&c->lock);
	if (dead)
		return;
	if (broken)
		conn_close(c, "write failed");
	else if (done)
		conn_close(c, "disconnected");
	else if (!atomic_load(&H.stopping) || !stop_close_if_done(c))
		conn_readable(c);
}

/* The connections the first socket thread gave L, and those kicked. */
static void run_kicks(struct loop *L)
{
	uint64_t count;
	if (read(L->wakefd, &count, sizeof(count)) < 0 && errno != EAGAIN)
		peer_warn("wake-up read: %s", strerror(errno));
	pthread_mutex_lock(&L->kick_lock);
	struct conn *given = L->given;
	L->given = NULL;
	struct conn *list = L->kicks;
	L->kicks = NULL;
	pthread_mutex_unlock(&L->kick_lock);
	while (given) {
		struct conn *c = given;
		given = c->next;
		adopt(L, c);
	}
	while (list) {
		/* One at a time, its successor read and its flag cleared under
		 * the lock: a kick of c from here on puts c on the new list
		 * (rewriting c->next_kick), one of a connection still ahead
		 * finds it kicked and is served by this walk. Clearing them all
		 * at first let a second kick of one still ahead rewrite its
		 * next_kick mid-walk: the rest of this list lost (a reference
		 * leaked, a paused client never resumed) and the new one walked
		 * twice (one reference put twice). */
		struct conn *c = list;
		pthread_mutex_lock(&L->kick_lock);
		list = c->next_kick;
		c->kicked = false;
		pthread_mutex_unlock(&L->kick_lock);
		conn_kicked(c);
		conn_put(c);
	}
}

/*
 * Reads again the connections that waited for --max-buffer-total, now that
 * everyone holds less. Called after memory was released, and at every
 * timeout scan while some wait (a release between admit's look and its
 * count may have gone unseen).
 */
static void resume_total_waiters(struct loop *L)
{
	for (struct conn *c = L->conns, *next; c && atomic_load(&H.total_waiters); c = next) {
		next = c->next;   /* conn_readable may close c */
		pthread_mutex_lock(&c->lock);
		bool go = c->waits_total && !c->dead &&
			  atomic_load(&H.held_total) < nbdd_cfg.max_buffer_total && !path_full();
		if (go) {
			conn_unpause_locked(c);
			conn_update_events_locked(c);
		}
		pthread_mutex_unlock(&c->lock);
		if (go)
			conn_readable(c);
	}
}

/* Time from `then` to `now`, never negative: a worker thread may have
 * stamped `then` (tx_wait_ns, in flush_locked) after `now` was read. The
 * plain difference wrapped to ~2^64 there and closed a healthy client as
 * "took no reply bytes for 30 s" seconds after it connected. */
static uint64_t elapsed_ns(uint64_t now, uint64_t then)
{
	return now > then ? now - then : 0;
}

/* Whether the client is reading what we wrote it: fewer bytes in the
 * socket's send queue (SIOCOUTQ; for TCP also those not yet acked) than at
 * the last look. One that reads none, the queue unchanged, is not. */
static bool client_reading(struct conn *c)
{
	int queued = 0, seen = c->outq_seen;
	if (ioctl(c->fd, SIOCOUTQ, &queued) < 0)
		return false;
	c->outq_seen = queued;
	return queued > 0 && queued < seen;
}

/*
 * Closes the connections that waited --io-timeout seconds for bytes they
 * owe: in the handshake, or in the middle of a request while being read;
 * and those whose socket took none of their replies for as long. Their
 * commands in flight finish on the path as when a client leaves.
 */
static void expire_stalled(struct loop *L)
{
	uint64_t now = xseg_now_ns();
	if (now < L->next_timeout_scan_ns)
		return;
	L->next_timeout_scan_ns = now + TIMEOUT_SCAN_NS;
	resume_total_waiters(L);
	uint64_t limit = nbdd_cfg.io_timeout * 1000000000ull;
	for (struct conn *c = L->conns, *next; c; c = next) {
		next = c->next;   /* conn_close moves c to the zombies */
		bool handshake = c->phase != PH_TRANSMISSION;
		pthread_mutex_lock(&c->lock);
		bool not_read = c->paused || c->disc;
		uint64_t tx_idle = c->want_out ? elapsed_ns(now, c->tx_wait_ns) : 0;
		bool mem_stalled = c->paused_memory && tx_idle >= BUFFER_STALL_NS;
		uint64_t held = c->inflight_bytes;
		pthread_mutex_unlock(&c->lock);
		if (limit && tx_idle >= limit) {
			peer_warn("%s: closed: took no reply bytes for %" PRIu64 " s (--io-timeout)",
				  c->peer_name, nbdd_cfg.io_timeout);
			conn_close(c, "timed out");
			continue;
		}
		if (mem_stalled) {
			uint64_t closes = atomic_fetch_add(&S.buffer_closes, 1) + 1;
			peer_warn("%s: closed: holds %" PRIu64 " bytes of replies it does not read "
				  "(--max-client-buffer %" PRIu64 ", --max-buffer-total %" PRIu64
				  "; closed so far: %" PRIu64 ")", c->peer_name, held,
				  nbdd_cfg.max_client_buffer, nbdd_cfg.max_buffer_total, closes);
			conn_close(c, "not reading its replies");
			continue;
		}
		if (!limit)
			continue;
		/* Not read by us (paused, in the handshake too: its unsent
		 * option replies), or idle between requests: it owes nothing
		 * now, the clock starts later. One that takes no reply is
		 * closed above. */
		if (not_read || (!handshake && !c->in_len && !c->filling && !c->discard)) {
			c->last_rx_ns = now;
			continue;
		}
		/* Still reading what we sent (the kernel's buffer holds a few
		 * hundred K: seconds of a slow reader's LIST replies): it owes
		 * nothing until it has them. Closed "in the handshake" just
		 * before the last replies were read, it was. */
		if (client_reading(c)) {
			c->last_rx_ns = now;
			continue;
		}
		if (elapsed_ns(now, c->last_rx_ns) < limit)
			continue;
		peer_warn("%s: closed: no byte for %" PRIu64 " s %s (--io-timeout)", c->peer_name,
			  nbdd_cfg.io_timeout, handshake ? "in the handshake" :
			  "in the middle of a request");
		conn_close(c, "timed out");
	}
}

/*
 * A round of the stop (server_drain), on each socket thread: the first
 * closes the listeners; connections still in the handshake close (they
 * have no command), those drained close now, the others once their last
 * reply is written (conn_kicked). The rest keep being read: what they
 * send gets NBD_ESHUTDOWN.
 */
static void stop_round(struct loop *L, bool first)
{
	if (first)
		for (unsigned i = 0; i < S.nr_listeners; i++)
			if (S.listeners[i].fd >= 0) {
				epoll_ctl(L->epfd, EPOLL_CTL_DEL, S.listeners[i].fd, NULL);
				close(S.listeners[i].fd);
				S.listeners[i].fd = -1;
			}
	for (struct conn *c = L->conns, *next; c; c = next) {
		next = c->next;   /* conn_close moves c to the zombies */
		/* One waiting for memory is read again: its commands now get
		 * NBD_ESHUTDOWN, which needs none. */
		pthread_mutex_lock(&c->lock);
		bool resume = c->waits_total && !c->dead;
		if (resume) {
			conn_unpause_locked(c);
			conn_update_events_locked(c);
		}
		pthread_mutex_unlock(&c->lock);
		if (!stop_close_if_done(c) && resume && !c->closed)
			conn_readable(c);
	}
}

/* Closes c at the end of the stop, naming what it leaves unanswered. */
static void close_stopped(struct conn *c)
{
	pthread_mutex_lock(&c->lock);
	uint64_t left = c->inflight;
	pthread_mutex_unlock(&c->lock);
	char why[96];
	if (left) {
		snprintf(why, sizeof(why), "nbdd stops, %" PRIu64 " commands unanswered", left);
		peer_warn("%s: closed: %s", c->peer_name, why);
	}
	conn_close(c, left ? why : "nbdd stops");
}

/*
 * --socket-poll-us: after a round with events, looks again without
 * sleeping for that long. A client at depth sends its next commands within
 * microseconds of a reply, and each sleep in epoll_wait that they end is a
 * context switch (issue 24 counts them per command). 0 when none came.
 */
static int poll_events(struct loop *L, struct epoll_event *events, int max)
{
	uint64_t until = xseg_now_ns() + nbdd_cfg.socket_poll_us * 1000;
	do {
		int n = epoll_wait(L->epfd, events, max, 0);
		if (n != 0)
			return n;
	} while (xseg_now_ns() < until && !atomic_load(&S.stop));
	return 0;
}

static void *server_loop(void *arg)
{
	struct loop *L = arg;
	bool first = L == loops_first();
	struct epoll_event events[64];
	bool busy = false;   /* the last round had events: poll before sleeping */
	while (!atomic_load(&S.stop)) {
		int n = busy && nbdd_cfg.socket_poll_us ? poll_events(L, events, 64) : 0;
		if (n == 0) {
			/* in the stop, lingering connections are looked at each round */
			int wait_ms = atomic_load(&H.stopping) ? 5 : 200;
			n = epoll_wait(L->epfd, events, 64, first ? resume_listeners(wait_ms) : wait_ms);
			if (n > 0)
				atomic_fetch_add_explicit(&L->waits, 1, memory_order_relaxed);
		}
		busy = n > 0;
		if (n < 0 && errno != EINTR) {
			peer_error("epoll_wait: %s", strerror(errno));
			break;
		}
		for (int i = 0; i < n; i++) {
			enum source_kind *kind = events[i].data.ptr;
			if (*kind == SRC_WAKE) {
				run_kicks(L);
			} else if (*kind == SRC_LISTENER) {
				accept_one((struct listener *)kind);
			} else {
				struct conn *c = (struct conn *)kind;
				if (c->closed)
					continue;
				if (c->lingering) {   /* input to drop, or the client gone */
					linger_close_if_done(c);
					continue;
				}
				uint32_t e = events[i].events;
				if (e & EPOLLOUT) {
					pthread_mutex_lock(&c->lock);
					conn_flush_locked(c);
					pthread_mutex_unlock(&c->lock);
				}
				/* Input first: a Unix client that writes and closes
				 * reports both. HUP alone (not reading): it is gone. */
				if (e & EPOLLIN)
					conn_readable(c);
				else if (e & (EPOLLHUP | EPOLLERR))
					conn_close(c, "connection reset");
			}
		}
		if (atomic_exchange(&L->total_released, false))
			resume_total_waiters(L);
		expire_stalled(L);
		if (atomic_load(&H.stopping))
			stop_round(L, first);
		free_zombies(L);
		if (first)
			update_full();
	}
	/* The end: no new connections or requests. After server_drain only
	 * what its bound left is here; commands still in flight finish on the
	 * workers and their replies are dropped. */
	if (first)
		for (unsigned i = 0; i < S.nr_listeners; i++) {
			if (S.listeners[i].fd >= 0)
				close(S.listeners[i].fd);
			S.listeners[i].fd = -1;
		}
	run_kicks(L);
	while (L->conns)
		close_stopped(L->conns);
	free_zombies(L);
	return NULL;
}

/* ---- listeners -------------------------------------------------------------------------- */

static int add_listener(int fd, const char *name)
{
	struct listener *l = &S.listeners[S.nr_listeners++];
	l->kind = SRC_LISTENER;
	l->fd = fd;
	snprintf(l->name, sizeof(l->name), "%s", name);
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = l };
	if (listen(fd, 64) < 0 || epoll_ctl(loops_first()->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		peer_error("cannot listen on %s: %s", name, strerror(errno));
		return -1;
	}
	l->watched = true;
	return 0;
}

/* The i-th --listen, checked and parsed with the options (nbdd.c). */
static int open_tcp(unsigned i)
{
	const char *spec = nbdd_cfg.listen[i];
	const struct sockaddr_storage *ss = &nbdd_cfg.listen_addr[i];
	int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, (const struct sockaddr *)ss, nbdd_cfg.listen_addr_len[i]) < 0) {
		peer_error("cannot bind --listen '%s': %s", spec, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return add_listener(fd, spec);
}

static int open_unix(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path)) {
		peer_error("--unix '%s': path too long", path);
		return -1;
	}
	strcpy(sa.sun_path, path);
	struct stat st;
	if (lstat(path, &st) == 0) {
		/* A socket nobody answers on is a previous run's: replace it. */
		int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		bool live = probe >= 0 && S_ISSOCK(st.st_mode) &&
			    connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0;
		if (probe >= 0)
			close(probe);
		if (!S_ISSOCK(st.st_mode) || live) {
			peer_error("--unix '%s': %s", path,
				   live ? "another server listens there" : "exists and is not a socket");
			return -1;
		}
		unlink(path);
	}
	/*
	 * bind creates the file with 0777 less the umask: at umask 000 anyone
	 * could connect and read or write every export. So it is created under
	 * umask 0177 (0600: nbdd's user only; the umask is the process's, but
	 * no other thread runs yet), then set to --socket-mode before listen:
	 * no client connects to it before that, and it is never wider.
	 */
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		peer_error("cannot bind --unix '%s': %s", path, strerror(errno));
		return -1;
	}
	mode_t old_umask = umask(0177);
	int rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	int err = errno;
	umask(old_umask);
	if (rc < 0) {
		peer_error("cannot bind --unix '%s': %s", path, strerror(err));
		close(fd);
		return -1;
	}
	if (chmod(path, nbdd_cfg.socket_mode) < 0) {
		peer_error("--unix '%s': cannot set --socket-mode %04o: %s", path,
			   nbdd_cfg.socket_mode, strerror(errno));
		close(fd);
		unlink(path);
		return -1;
	}
	return add_listener(fd, path);
}

int server_stats(char *buf, size_t len)
{
	uint64_t waits = 0;
	for (unsigned i = 0; i < loops_count(); i++)
		waits += atomic_load_explicit(&loop_at(i)->waits, memory_order_relaxed);
	return snprintf(buf, len, ",\"connections\":%u,\"refused\":%" PRIu64
			",\"buffer_closes\":%" PRIu64 ",\"buffer_waits\":%" PRIu64
			",\"socket_waits\":%" PRIu64,
			atomic_load(&S.nr_conns), atomic_load(&S.refused),
			atomic_load(&S.buffer_closes), atomic_load(&S.total_waits), waits);
}

int server_open(struct peer *p, const struct server_ops *ops)
{
	S.peer = p;
	S.up = ops;
	if (loops_open((unsigned)nbdd_cfg.socket_threads) < 0)
		return -1;
	for (unsigned i = 0; i < nbdd_cfg.nr_listen; i++)
		if (open_tcp(i) < 0)
			return -1;
	if (nbdd_cfg.unix_path && open_unix(nbdd_cfg.unix_path) < 0)
		return -1;
	return 0;
}

int server_start(void)
{
	if (loops_start(server_loop) < 0) {
		server_stop();
		return -1;
	}
	return 0;
}

/*
 * The stop's first part (the runtime's drain: the workers still take
 * replies). Commands in flight were sent on, maybe done by the path: each
 * is answered to its client before its connection closes (a WRITE
 * dropped unanswered leaves the client unsure it is on the disk), and new
 * ones get NBD_ESHUTDOWN (the protocol's way to say "shutting down").
 * Waits until every connection has closed so, or until the deadline
 * (--stop-timeout); then server_stop closes what is left, naming the
 * commands left unanswered, and nbdd exits 1.
 */
int server_drain(uint64_t deadline_ns)
{
	uint64_t start = xseg_now_ns();
	uint64_t bound_s = deadline_ns > start ? (deadline_ns - start + 500000000) / 1000000000 : 0;
	unsigned conns = atomic_load(&S.nr_conns);
	peer_info("stop: answering the %" PRIu64 " commands in flight on %u connections before "
		  "closing them (at most --stop-timeout %" PRIu64 " s); new commands get "
		  "NBD_ESHUTDOWN", (uint64_t)atomic_load(&H.unanswered), conns, bound_s);
	atomic_store(&S.stop_deadline_ns, deadline_ns);
	atomic_store(&H.stopping, true);
	for (unsigned i = 0; i < loops_count(); i++)
		loop_wake(loop_at(i));
	while (atomic_load(&S.nr_conns) && xseg_now_ns() < deadline_ns)
		usleep(10 * 1000);
	uint64_t ms = (xseg_now_ns() - start) / 1000000;
	uint64_t shutdowns = atomic_load(&S.shutdowns);
	/* a connection still lingering at the deadline owes nothing: it is
	 * closed with the rest (its bytes left were said). Read first: one
	 * closed between the two reads is then not taken for owing. */
	unsigned lingering = atomic_load(&S.nr_lingering);
	conns = atomic_load(&S.nr_conns);
	if (conns > lingering) {
		peer_warn("stop: %" PRIu64 " commands unanswered on %u connections after "
			  "--stop-timeout %" PRIu64 " s: closing them (%" PRIu64 " new commands "
			  "refused with ESHUTDOWN)", (uint64_t)atomic_load(&H.unanswered), conns,
			  bound_s, shutdowns);
		return 1;
	}
	peer_info("stop: every command answered, connections closed in %" PRIu64 ".%03" PRIu64
		  " s (%" PRIu64 " new commands refused with ESHUTDOWN)", ms / 1000, ms % 1000,
		  shutdowns);
	return 0;
}

void server_stop(void)
{
	atomic_store(&S.stop, 1);
	loops_join();
}

void server_close(void)
{
	server_stop();
	for (unsigned i = 0; i < loops_count(); i++) {
		struct loop *L = loop_at(i);
		/* Kicks queued by the last replies hold references; a connection
		 * given to a thread that had ended was never read. */
		while (L->kicks) {
			struct conn *c = L->kicks;
			L->kicks = c->next_kick;
			conn_put(c);
		}
		while (L->given) {
			struct conn *c = L->given;
			L->given = c->next;
			count_conn(L, -1);
			conn_put(c);
		}
	}
	for (unsigned i = 0; i < S.nr_listeners; i++)
		if (S.listeners[i].fd >= 0)
			close(S.listeners[i].fd);
	S.nr_listeners = 0;
	if (nbdd_cfg.unix_path)
		unlink(nbdd_cfg.unix_path);
	uint64_t closes = atomic_load(&S.buffer_closes), waits = atomic_load(&S.total_waits);
	if (closes || waits)
		peer_warn("connections closed holding replies they did not read "
			  "(--max-client-buffer): %" PRIu64 "; waits for --max-buffer-total or the "
			  "request pool: %" PRIu64,
			  closes, waits);
	loops_close();
}
