/*
 * The peer runtime (libpeer.a): what every peer program shares.
 *
 * A peer describes itself in a struct peer_ops (name, its own options,
 * callbacks) and hands control to peer_main(). The runtime parses the common
 * options together with the peer's, joins the segment, binds the port(s),
 * runs worker threads and stops gracefully on SIGTERM/SIGINT.
 *
 *     static const struct peer_ops ops = {
 *             .name = "filed", .on_request = serve, ...
 *     };
 *     int main(int argc, char **argv) { return peer_main(argc, argv, &ops, &state); }
 *
 * Ownership. Every request a peer touches has exactly one owner:
 *   - on_request(t, req): the peer owns an accepted request until it answers
 *     it (peer_complete, peer_fail, peer_respond) or passes it on with
 *     peer_forward. An accepted request must be answered exactly once; it is
 *     never put back into the pool.
 *   - peer_get_request(): the peer owns a new request until peer_send()
 *     succeeds or it calls peer_put_request().
 *   - peer_send()/peer_forward() succeeded: the runtime owns the request until
 *     the reply arrives; then the callback owns it again. A sent request's
 *     callback must peer_put_request() it (or send it again); a forwarded
 *     request's callback must answer it (or forward it again).
 *   - A call that fails (negative return) leaves the request with the caller.
 *
 * Threads. Worker threads accept requests in batches on every bound port
 * (each its own ports of the range first, the others when its own are idle)
 * and receive replies in batches; callbacks run on any worker thread (a reply
 * may arrive on another thread than the one that sent the request), so state
 * shared between requests needs the peer's own locking. A callback must not
 * block for long except for the peer's own I/O (filed does pread/pwrite on
 * the worker thread).
 *
 * Return-path cookie. The runtime keeps the context of a send or forward in
 * a per-process table indexed by the request's pool index and stores a
 * cookie naming that slot in req->priv before submitting; libxseg restores
 * each hop's cookie on the way back, so a reply finds its context again even
 * when the request passed through other forwarders. A reply whose cookie is
 * not ours (a previous incarnation's) is logged and settled, never trusted.
 *
 * Maintenance. A peer with ops->maintain gets one more thread of the
 * runtime's that calls it over and over, sleeping as long as it asks (at
 * most 100 ms, so that the end is noticed); thread_init/thread_fini run on
 * it too (its index is nr_threads; its thread_init is done before the
 * workers start). It runs through the drain and the stop (a cache's
 * flusher and reaper live there) until the workers have nothing left to
 * do; then it is ended, and the workers end after it, so that what its
 * last calls posted or sent is still run or answered.
 *
 * Stop. On SIGTERM or SIGINT the main thread first keeps serving while a
 * live cache is plugged in front of one of our ports (it is writing back
 * through us; at most --stop-timeout). Then, if the peer has ops->drain,
 * it calls drain(p, deadline) with deadline --stop-timeout from then,
 * while the workers still accept and serve as usual: a cache writes every
 * dirty byte back there. A drain that returns non-zero gave up: the stop
 * goes on, but peer_main returns 1. Then a flag is set (peer_stop() sets
 * it at once, without the drain): the workers stop accepting (requests
 * still queued stay for whoever binds the port next; leaving it settles
 * them), call ops->on_stop once, and keep receiving replies and running
 * deferred work until every accepted request is answered, every send has
 * come back and nothing is deferred. Then the maintenance thread ends,
 * ops->fini runs, the ports are unbound, the pidfile is removed and
 * peer_main returns 0. If that takes longer than --stop-timeout, peer_main
 * logs what is still outstanding and exits 1.
 */
#ifndef PEER_PEER_H
#define PEER_PEER_H

#include <getopt.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <urcu/wfcqueue.h>

#include "xseg/xseg.h"

#ifdef __cplusplus
extern "C" {
#endif

struct peer;          /* the process: segment, ports, threads, options */
struct peer_thread;   /* one worker thread */

/* ---- callbacks -------------------------------------------------------- */

/* A reply to peer_send() or peer_forward() arrived: `req` is the caller's
 * again (see Ownership). `arg` is what was given when sending. */
typedef void (*peer_reply_fn)(struct peer_thread *t, struct xseg_request *req, void *arg);

/* Work put off with peer_defer(). */
struct peer_work;
typedef void (*peer_work_fn)(struct peer_thread *t, struct peer_work *w);

/* Embed one in the object that needs a retry or a hand-over; the runtime
 * links it (the fields are the runtime's). */
struct peer_work {
	peer_work_fn fn;
	struct peer_work *next;           /* peer_defer's list */
	struct cds_wfcq_node post_node;   /* peer_post's queue */
};

/* Bit for an op in peer_ops.supported_ops. */
#define PEER_OP(op) (1u << (op))

#define PEER_WATCHERS_ALL (~0u)   /* peer_ops.default_watchers: every worker */

struct peer_ops {
	const char *name;      /* program name: log lines, error messages */
	const char *summary;   /* one line for --help */
	/* The peer's own options: a getopt_long table ended by a zero entry.
	 * `val` must be below PEER_OPT_RESERVED and not '?', ':' or 'h'.
	 * NULL when the peer has none. */
	const struct option *options;
	/* --help text for those options, lines "  --opt ARG   what (default)\n". */
	const char *options_usage;
	/* Called for each of the peer's options in command-line order. Returns
	 * 0, or non-zero after printing one line naming the bad value (see
	 * peer_arg_error): peer_main then exits 2. */
	int (*parse_option)(struct peer *p, int val, const char *arg);
	/* After every option was parsed: checks that required ones are there.
	 * Non-zero (after printing one line): exit 2. Optional. */
	int (*check_options)(struct peer *p);
	/* Default for --threads (1 when 0) and --spin-us (20 when 0). A peer
	 * may set them before peer_main (cached: from the online CPUs). */
	unsigned default_threads;
	unsigned default_spin_us;
	/* Ops handed to on_request: PEER_OP(X_READ) | ... . Any other op is
	 * answered FAILED with EOPNOTSUPP by the runtime; a PING that is not in
	 * the set is answered SERVED. 0 = every op goes to on_request. */
	uint32_t supported_ops;
	/* Requests a worker accepts at once (1..16, 0 = 16). A peer that serves
	 * each request synchronously (filed) takes fewer, so that the other
	 * workers get some. Replies are always received 16 at a time. */
	unsigned accept_batch;
	/* Default for --watchers, the idle workers that watch the ports (0:
	 * the bound ports, at least 2, at most --threads). A peer whose
	 * workers block in system calls while serving (filed) sets
	 * PEER_WATCHERS_ALL: a worker waiting on a disk ends no round, so it
	 * would call no other worker off the bench for a while. */
	unsigned default_watchers;
	/* A peer that serves a request with requests of its own (vlmcd's
	 * object requests) sets this: it keeps a few pool requests aside
	 * (xseg_reserve) so that clients holding the whole pool are served one
	 * by one instead of waiting forever. A client-only peer leaves it. */
	bool reserve_requests;
	/* A cache that publishes whether it holds data its blocker lacks
	 * (xseg_port_set_dirty) sets this: it checks a mark left on its port
	 * itself (cached serves it only with the data recovered). Any other
	 * peer refuses to start on a port left marked dirty: routing ends
	 * there to fail closed, and the peer would be sent the blocker's
	 * requests and answer them with data that is not the cache's. */
	bool keeps_dirty_mark;
	/* A cache that enters a path only through `xseg plug`, whose hold
	 * waits until the blocker has answered what was sent to it straight,
	 * sets this: a route to its port that its last owner left (it died
	 * plugged, clean, or during a plug) is taken out before the bind.
	 * Bound at once, it was routed the blocker's requests without that
	 * wait: its loads could read data older than a write under way at
	 * the blocker and keep it clean after the write was answered. With
	 * a dirty mark on the port the route stays (fail closed). */
	bool enters_by_plug;

	/* After the options (and after --daemon has forked), before the
	 * segment is joined and the ports bound: slow set-up that must not
	 * keep requests waiting on a bound port (cached faults its cache's
	 * memory in). No segment yet. Non-zero: exit 1 (the peer logs why).
	 * Optional. */
	int (*prepare)(struct peer *p);
	/* After the segment is joined and the ports bound (and after --daemon
	 * has forked), before the workers start. Non-zero: exit 1; 2 after one
	 * line on stderr naming an argument only the segment shows wrong (a
	 * port it does not have): exit 2. Optional. */
	int (*init)(struct peer *p);
	/* On each worker thread, before it serves anything / after its last
	 * callback. Optional; a non-zero thread_init stops the peer (exit 1). */
	int (*thread_init)(struct peer_thread *t);
	void (*thread_fini)(struct peer_thread *t);
	/* Optional. Each accepted request, in the order its port queued it,
	 * before on_request sees it: workers then accept under one lock and
	 * call this for the whole batch before releasing it. A peer whose
	 * FLUSH is a barrier over the requests queued before it (sosd) records
	 * each request's place here; without it two workers can accept a
	 * write and the FLUSH behind it and register them in either order.
	 * Must be quick, must not block, must not answer the request. Ops the
	 * runtime answers itself (not in supported_ops) never reach it. */
	void (*on_accept_in_order)(struct peer_thread *t, struct xseg_request *req);
	/* An accepted request (see Ownership). Required. */
	void (*on_request)(struct peer_thread *t, struct xseg_request *req);
	/* Once, on the first worker thread that sees a stop begin: the peer may start
	 * sends (a cache writing back) or defer work; the stop waits for them.
	 * Optional. */
	void (*on_stop)(struct peer_thread *t);
	/* On the maintenance thread (see Maintenance), from after init until
	 * the stop has drained the workers (they end after it): periodic work
	 * of the peer's own. Returns
	 * the ns until it wants to run again (capped at 100 ms). It may send
	 * with the _any calls and answer with peer_answer; it has no worker's
	 * context (no peer_defer). Optional: no thread without it. */
	uint64_t (*maintain)(struct peer *p);
	/* On SIGTERM/SIGINT, on the main thread, before the workers stop
	 * accepting (see Stop): whatever must be done while the peer still
	 * serves. Returns 0, or non-zero when it gave up by `deadline_ns`
	 * (xseg_now_ns() time; after saying why): the stop goes on and
	 * peer_main returns 1. Dead peers are not reaped meanwhile. Optional. */
	int (*drain)(struct peer *p, uint64_t deadline_ns);
	/* After the workers have ended, before the ports are unbound: the last
	 * chance to flush local state (filed syncs written objects). Optional. */
	void (*fini)(struct peer *p);
	/* The X_CONTROL command "stats" is the runtime's (it never reaches
	 * on_request): it answers with its figures for the peer (requests
	 * and bytes by op, errors, in flight, latency; docs/interfaces.md)
	 * as one JSON object. A peer with figures of its own (cached) adds
	 * them here: fields such as `,"hits":3` written into buf (at most
	 * len bytes with the NUL), on any worker thread; returns what
	 * snprintf would. Optional. */
	int (*stats)(struct peer *p, char *buf, size_t len);
};

/* Option values from here on belong to the runtime. */
#define PEER_OPT_RESERVED 0x7f00

/*
 * Runs the peer: options, segment, threads, stop. Returns the process exit
 * status: 0 after a graceful stop or --help, 2 for a bad argument (one line
 * on stderr naming it), 1 for any other failure. `priv` is the peer's own
 * state, returned by peer_priv().
 *
 * Common options: --segment NAME, --port N or A-B (required), --threads N,
 * --log-level error|warn|info|debug, --daemon, --pidfile F, --spin-us N,
 * --stop-timeout SECONDS, --help.
 */
int peer_main(int argc, char **argv, const struct peer_ops *ops, void *priv);

/* ---- option helpers (for parse_option / check_options) ------------------ */

/* Prints "NAME: OPT: 'VALUE' WHY" on stderr; returns -1. */
int peer_arg_error(const char *opt, const char *value, const char *why);
/* Parses an integer in [min, max] / a size with K, M, G suffixes in
 * [min, max]; on failure prints one line (peer_arg_error) and returns -1. */
int peer_arg_uint(const char *opt, const char *value, uint64_t min, uint64_t max,
		  uint64_t *out);
int peer_arg_size(const char *opt, const char *value, uint64_t min, uint64_t max,
		  uint64_t *out);

/* ---- the peer and its threads ------------------------------------------- */

void *peer_priv(struct peer *p);
struct xseg *peer_segment(struct peer *p);
/* --segment's name (known from the options on). */
const char *peer_segment_name(struct peer *p);
/* The first bound port: the source of the peer's own requests. */
uint32_t peer_port(struct peer *p);
/* The bound range [first, last]. */
uint32_t peer_port_last(struct peer *p);
/* With --lanes, how many: ports first..last are lanes of the first port
 * (one service, queues split by client); else 1. */
unsigned peer_lanes(struct peer *p);
unsigned peer_nr_threads(struct peer *p);
const char *peer_name(struct peer *p);
/* True once a stop began. */
bool peer_stopping(struct peer *p);
/* Begins a graceful stop, as SIGTERM does. Safe from any thread. */
void peer_stop(struct peer *p);

struct peer *peer_of(struct peer_thread *t);
/* 0 .. nr_threads-1 for a worker; nr_threads for a helper (below). */
unsigned peer_thread_index(struct peer_thread *t);

/* Names a thread of the process for top -H, perf and bench/thread-cpu:
 * printf-style, cut to the 15 bytes the kernel keeps (the runtime's are
 * "PEER-wN" for worker N and "PEER-maint"). */
void peer_name_thread(pthread_t tid, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void *peer_thread_priv(struct peer_thread *t);
void peer_thread_set_priv(struct peer_thread *t, void *priv);

/* ---- answering accepted requests ---------------------------------------- */

/* result = SERVED, error = 0, then respond. The peer sets serviced. */
void peer_complete(struct peer_thread *t, struct xseg_request *req);
/* result = FAILED, error = err (a positive errno), serviced = 0, respond. */
void peer_fail(struct peer_thread *t, struct xseg_request *req, int err);
/* Responds with result/error/serviced as the peer set them. */
void peer_respond(struct peer_thread *t, struct xseg_request *req);
/* peer_complete (err 0) or peer_fail (err > 0) without a worker's context:
 * for a thread of the peer's own that does a worker's round in passing
 * (synapsed's network thread, see peer_helper_poll). A library's callback
 * thread hands its completions to a worker with peer_post instead (sosd). */
void peer_answer(struct peer *p, struct xseg_request *req, int err);

/*
 * Makes an accepted request's data area at least `len` bytes (for a reply
 * payload such as struct xseg_reply_info), keeping the target name, and
 * returns it; NULL when the heap has no room (errno ENOMEM).
 */
void *peer_reply_data(struct peer_thread *t, struct xseg_request *req, uint64_t len);

/* ---- the peer's own requests -------------------------------------------- */

/*
 * A request from the pool for peer_port() (with --lanes, for the calling
 * worker's own lane; from the peer's reserve when the pool is empty, see
 * peer_ops.reserve_requests), with a buffer for
 * `target` and `datalen` bytes of data. NULL with errno: ENOBUFS (pool
 * empty) or ENOMEM
 * (heap full) are transient, retry later (peer_defer); ENAMETOOLONG/EINVAL
 * are not.
 */
struct xseg_request *peer_get_request(struct peer_thread *t, const char *target,
				      uint64_t datalen);
/* Returns a request the peer owns (a new one, or a sent one back) to the pool. */
void peer_put_request(struct peer_thread *t, struct xseg_request *req);

/*
 * Submits the peer's own request to `dst` (routes apply). When the reply
 * comes back, cb(t, req, arg) runs on a worker thread. 0, or -errno with the
 * request still the caller's (-ENOENT: nobody bound dst).
 */
int peer_send(struct peer_thread *t, struct xseg_request *req, uint32_t dst,
	      peer_reply_fn cb, void *arg);

/*
 * Passes an accepted request on to `dst`; when its reply comes back,
 * cb(t, req, arg) runs and must answer it (peer_respond keeps the reply's
 * result). 0, or -errno with the request still the caller's to answer.
 */
int peer_forward(struct peer_thread *t, struct xseg_request *req, uint32_t dst,
		 peer_reply_fn cb, void *arg);

/* peer_get_request, peer_put_request, peer_send and peer_forward from any
 * thread of the process (a network thread that would otherwise hand each request to a
 * worker, a wake-up per request). The reply's callback still runs on a
 * worker. */
struct xseg_request *peer_get_request_any(struct peer *p, const char *target,
					  uint64_t datalen);
void peer_put_request_any(struct peer *p, struct xseg_request *req);
int peer_send_any(struct peer *p, struct xseg_request *req, uint32_t dst,
		  peer_reply_fn cb, void *arg);
int peer_forward_any(struct peer *p, struct xseg_request *req, uint32_t dst,
		     peer_reply_fn cb, void *arg);
/* peer_get_request_any for a thread that keeps a lane of its own (nbdd's
 * socket threads): with --lanes the request leaves from lane
 * `lane % peer_lanes(p)` (0: peer_port()), so the peer behind sees each
 * such thread as a client of its own and queues it apart; else as _any. */
struct xseg_request *peer_get_request_lane(struct peer *p, unsigned lane,
					   const char *target, uint64_t datalen);

/*
 * Runs fn(t, w) later on this thread, after the next round of accepts and
 * replies (so requests freed by replies are there again), at the latest
 * after about a millisecond. For work that found the pool or the heap empty.
 * Deferred work keeps a stopping peer alive until it has run.
 */
void peer_defer(struct peer_thread *t, struct peer_work *w, peer_work_fn fn);

/*
 * Runs fn(t, w) soon on one of the peer's worker threads, waking one that
 * sleeps. Safe from any thread of the process: this is how a thread of the
 * peer's own (a socket loop, a library's completion callback) hands work to
 * the workers, which alone may touch requests. Everything the caller wrote
 * before peer_post is visible to fn. Posted work keeps a stopping peer
 * alive until it has run; `w` must stay valid until fn starts.
 */
void peer_post(struct peer *p, struct peer_work *w, peer_work_fn fn);

/*
 * A thread of the peer's own that would otherwise spin idle (synapsed's
 * network thread) can do a worker's round in passing: each request or reply
 * it takes is a worker it did not have to wake. peer_helper_new gives such
 * a thread its context (NULL: no memory); one thread per context.
 * peer_helper_poll accepts requests (none once stopping) and takes replies
 * once over the bound ports, as a worker's loop does, running on_request
 * and the reply callbacks on the calling thread; it never sleeps and returns
 * how many it handled. The context has no thread_init state (its priv is
 * NULL, its index nr_threads): only a peer whose callbacks need neither may
 * use one. Work they put off with peer_defer is posted to the workers
 * before the call returns.
 */
struct peer_thread *peer_helper_new(struct peer *p);
int peer_helper_poll(struct peer_thread *t);
void peer_helper_free(struct peer_thread *t);

/*
 * While a helper watches the ports without a break (it spins), the workers
 * need not: peer_park_workers makes idle workers sleep apart from the ports,
 * so a client's submit wakes nobody. They still run posted work. The helper
 * must call peer_unpark_workers before it stops watching (they then look at
 * the ports before they sleep on them); peer_stop unparks too.
 */
void peer_park_workers(struct peer *p);
void peer_unpark_workers(struct peer *p);
/* Requests accepted and not yet answered plus sends not yet back: how
 * much the peer has under way (a helper parks the workers only when low). */
uint64_t peer_in_flight(struct peer *p);

/* ---- daemon and pidfile ---------------------------------------------------------- */

/*
 * --daemon, for peer_main and for programs with a main loop of their own
 * (none in the tree today). Call before binding any port (the daemon must own
 * them). Returns 0 in the daemon, with *ready_fd set; the caller's process
 * waits until the daemon calls peer_daemon_ready and exits with its
 * status (0 serving, 1 failed, 2 a bad argument found late). Serving, the
 * daemon lets go of the caller's stdout, and of its stderr unless that is
 * a file (a log). -1 (logged) if it could not fork.
 */
int peer_daemonize(int *ready_fd);
/* Tells the waiting caller `status`; a no-op for ready_fd < 0. */
void peer_daemon_ready(int ready_fd, int status);
/* --pidfile: created with O_EXCL; a stale one (dead pid) is replaced, a
 * live one is an error naming its pid. 0 or -1 (logged). */
int peer_pidfile_create(const char *path);
/* Removes it if it still holds our pid. */
void peer_pidfile_remove(const char *path);

/* ---- logging --------------------------------------------------------------- */

enum peer_log_level {
	PEER_LOG_ERROR = 0,
	PEER_LOG_WARN = 1,
	PEER_LOG_INFO = 2,
	PEER_LOG_DEBUG = 3,
};

/* One line on stderr: "2025-01-31 12:00:00.123 NAME[PID] LEVEL: message".
 * Lines from different threads never interleave. */
void peer_log(enum peer_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void peer_vlog(enum peer_log_level level, const char *fmt, va_list ap);
bool peer_log_enabled(enum peer_log_level level);
/* Set by --log-level; for programs that log before or without peer_main. */
void peer_log_setup(const char *name, enum peer_log_level level);

/* For a message a fault could repeat per request (a blocker gone): true
 * at most once a second per `last` (a static the caller keeps), from any
 * thread; *suppressed then says how many were not said since. */
bool peer_log_once_a_second(_Atomic int64_t *last, _Atomic uint64_t *skipped,
			    uint64_t *suppressed);

/* What `systemctl status` shows under a Type=notify unit (STATUS=): a
 * state the operator must act on ("FAILED: ..."), said when it begins;
 * peer_status(NULL) goes back to "serving on segment ..., port ...". Only
 * a change is sent; nothing once a stop began, or without systemd
 * ($NOTIFY_SOCKET unset). Any thread. */
void peer_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define peer_error(...) peer_log(PEER_LOG_ERROR, __VA_ARGS__)
#define peer_warn(...)  peer_log(PEER_LOG_WARN, __VA_ARGS__)
#define peer_info(...)  peer_log(PEER_LOG_INFO, __VA_ARGS__)
#define peer_debug(...) \
	do { if (peer_log_enabled(PEER_LOG_DEBUG)) peer_log(PEER_LOG_DEBUG, __VA_ARGS__); } while (0)

#ifdef __cplusplus
}
#endif
#endif /* PEER_PEER_H */
