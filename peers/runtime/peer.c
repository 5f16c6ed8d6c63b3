/*
 * The peer runtime: peer_main, the worker threads (requests.c answers and
 * sends, work.c runs deferred and posted work), parking and helpers, the
 * maintenance thread and the graceful stop. See include/peer/peer.h for
 * the contract.
 */
#define _GNU_SOURCE   /* RUSAGE_THREAD */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "counters.h"
#include "runtime.h"
#include "stats_json.h"

/* How long an idle worker sleeps before it looks at the stop flag again. */
#define IDLE_WAIT_NS   (100ull * 1000 * 1000)
/* With deferred work pending, it looks again this soon. */
#define RETRY_WAIT_NS  (1ull * 1000 * 1000)

/* ---- accessors ------------------------------------------------------------ */

void *peer_priv(struct peer *p) { return p->priv; }
struct xseg *peer_segment(struct peer *p) { return p->seg; }
const char *peer_segment_name(struct peer *p) { return p->cfg.segment; }
uint32_t peer_port(struct peer *p) { return p->cfg.port_first; }
uint32_t peer_port_last(struct peer *p) { return p->cfg.port_last; }
unsigned peer_lanes(struct peer *p) { return p->cfg.lanes > 1 ? p->cfg.lanes : 1; }
unsigned peer_nr_threads(struct peer *p) { return p->cfg.threads; }
const char *peer_name(struct peer *p) { return p->ops->name; }
bool peer_stopping(struct peer *p) { return atomic_load(&p->stop) != 0; }
struct peer *peer_of(struct peer_thread *t) { return t->peer; }
unsigned peer_thread_index(struct peer_thread *t) { return t->index; }
void *peer_thread_priv(struct peer_thread *t) { return t->priv; }
void peer_thread_set_priv(struct peer_thread *t, void *priv) { t->priv = priv; }

void peer_stop(struct peer *p)
{
	atomic_store(&p->stop, 1);
	peer_unpark_workers(p);
	peer_bench_call(p, true);
	/* and the watchers asleep on the port (each would sleep out its
	 * IDLE_WAIT_NS: up to 100 ms more per stop; xseg_signal wakes one) */
	if (p->seg)
		xseg_signal_all(p->seg, p->cfg.port_first);
}

/* ---- workers ---------------------------------------------------------------------- */

/* A watcher's spin ends on work posted or on the stop: a --spin-us
 * longer than --stop-timeout made an idle peer's stop give up (exit 1,
 * fini skipped: filed's final sync). */
static bool watch_ready(void *arg)
{
	struct peer *p = arg;
	return peer_posted_ready(p) || atomic_load_explicit(&p->stop, memory_order_relaxed);
}

static void control_passed_back(struct peer_thread *t, struct xseg_request *req, void *arg)
{
	(void)arg;
	peer_respond(t, req);
}

/* A control command (X_CONTROL) sent to a port we are plugged in front of
 * goes on to that port (our own sends reach it): it is that port's peer's
 * ("policy", "unplug", "flush" for a cache behind us in a chain reached us
 * instead, and changed our own policy). "stats" is the runtime's, for
 * every peer (stats_json.c), answered here for our own ports: each port's
 * figures stay reachable, and every answer names the peer and port that
 * gave it. A command for a port nobody serves now fails (EHOSTDOWN): run
 * here, it changed us instead (`xseg unplug --via C` with C dead unplugged
 * the cache in front of C). False: a command of ours, not "stats". */
static bool answered_control(struct peer_thread *t, struct xseg_request *req)
{
	struct peer *p = t->peer;
	uint32_t dst = req->dst_port;
	bool elsewhere = (dst < p->cfg.port_first || dst > p->cfg.port_last) && dst < p->nr_ports;
	if (elsewhere && peer_forward(t, req, dst, control_passed_back, NULL) == 0)
		return true;
	bool stats = peer_stats_command(req, xseg_get_data(p->seg, req));
	if (elsewhere && !stats) {
		peer_fail(t, req, EHOSTDOWN);
		return true;
	}
	if (!stats)
		return false;
	size_t len = 0;
	char *json = peer_stats_json(p, req->dst_port, &len);
	char *data = json ? peer_reply_data(t, req, len + 1) : NULL;
	if (!data) {
		free(json);
		peer_fail(t, req, ENOMEM);
		return true;
	}
	memcpy(data, json, len + 1);
	free(json);
	req->serviced = len + 1;
	peer_complete(t, req);
	return true;
}

/* Answers a request whose op the peer does not take, and "stats"; false
 * if the peer's. */
static bool answered_by_runtime(struct peer_thread *t, struct xseg_request *req)
{
	const struct peer_ops *ops = t->peer->ops;
	uint32_t op = req->op;

	if (op == X_CONTROL && answered_control(t, req))
		return true;
	if (!ops->supported_ops || (op < 32 && (ops->supported_ops & PEER_OP(op))))
		return false;
	if (op == X_PING) {
		req->serviced = 0;
		peer_complete(t, req);
		return true;
	}
	peer_info("request %u: op %u (%s) is not supported here", req->index, op,
		  xseg_op_name(op));
	peer_fail(t, req, EOPNOTSUPP);
	return true;
}

/* One tick read per batch: when these were accepted (their latency
 * ends when answered), and how many are in flight. */
static void accepted_now(struct peer_thread *t, struct xseg_request **batch, int n)
{
	struct peer *p = t->peer;
	uint64_t now = peer_stats_ticks();
	t->round_accept_tick = now;
	for (int i = 0; i < n; i++)
		if (batch[i]->index < p->nr_requests)
			atomic_store_explicit(&p->accept_tick[batch[i]->index], now,
					      memory_order_relaxed);
	struct peer_stats_block *b = peer_stats_block();
	if (b)
		peer_stats_add(&b->begun, (uint64_t)n);
}

/* Accepts up to `max` requests on `port` into t->batch and hands them to
 * the peer; returns how many were accepted. */
static int accept_batch(struct peer_thread *t, uint32_t port, unsigned max)
{
	struct peer *p = t->peer;
	const struct peer_ops *ops = p->ops;
	int n;

	if (!ops->on_accept_in_order) {
		n = xseg_accept(p->seg, port, t->batch, max);
		if (n <= 0)
			return n;
		atomic_fetch_add(&p->accepted, (uint64_t)n);
		accepted_now(t, t->batch, n);
		if (!ops->supported_ops) {   /* every op is the peer's (nulld, cached) */
			for (int i = 0; i < n; i++)
				if (t->batch[i]->op != X_CONTROL || !answered_control(t, t->batch[i]))
					ops->on_request(t, t->batch[i]);
			return n;
		}
		for (int i = 0; i < n; i++)
			if (!answered_by_runtime(t, t->batch[i]))
				ops->on_request(t, t->batch[i]);
		return n;
	}
	/* The queue's order is only known while the accept is under way: the
	 * peer places every request before another worker may accept. */
	pthread_mutex_lock(&p->accept_order);
	n = xseg_accept(p->seg, port, t->batch, max);
	if (n > 0) {
		atomic_fetch_add(&p->accepted, (uint64_t)n);
		accepted_now(t, t->batch, n);
	}
	for (int i = 0; i < n; i++) {
		if (answered_by_runtime(t, t->batch[i]))
			t->batch[i] = NULL;
		else
			ops->on_accept_in_order(t, t->batch[i]);
	}
	pthread_mutex_unlock(&p->accept_order);
	for (int i = 0; i < n; i++)
		if (t->batch[i])
			ops->on_request(t, t->batch[i]);
	return n;
}

static bool drained(struct peer *p)
{
	return !atomic_load(&p->accepted) && !atomic_load(&p->outstanding) &&
	       !atomic_load(&p->deferred);
}

/* When serve_ports looks for replies (see worker()): */
enum look_for_replies {
	REPLIES_ALWAYS,
	REPLIES_IF_IDLE,   /* when a send is out, or the accept found nothing */
	REPLIES_IF_SENT,   /* when a send is out */
};

/* Accepts (unless stopping) and takes replies on one port; returns how
 * many of both. */
static int serve_port(struct peer_thread *t, uint32_t port, bool stopping,
		      enum look_for_replies look, unsigned batch)
{
	struct peer *p = t->peer;
	int work = 0, n = 0;

	if (!stopping) {
		n = accept_batch(t, port, batch);
		if (n > 0)
			work += n;
		/* More may be queued: a sleeping sibling can take it.
		 * (A burst wakes one thread; each passes it on.) */
		if (n == (int)batch && p->cfg.threads > 1)
			xseg_signal(p->seg, port);
	}
	if (look != REPLIES_ALWAYS && (look == REPLIES_IF_SENT || n > 0) &&
	    !atomic_load_explicit(&p->outstanding, memory_order_relaxed))
		return work;
	n = xseg_receive(p->seg, port, t->batch, PEER_BATCH);
	for (int i = 0; i < n; i++)
		peer_on_reply(t, t->batch[i]);
	if (n > 0)
		work += n;
	return work;
}

/*
 * One pass over the bound ports: accepts (unless stopping) and takes
 * replies; returns how many of both. A worker first serves its own ports
 * of the range (the i-th port is worker i % threads's; with more workers
 * than ports, worker w's is port w % ports), and the others only in a
 * round where its own gave nothing. So with lanes each lane has a worker
 * that serves it first, and busy workers do not meet on each other's
 * rings; every port still has a worker that always looks at it.
 */
static int serve_ports(struct peer_thread *t, bool stopping, enum look_for_replies look)
{
	struct peer *p = t->peer;
	unsigned batch = p->ops->accept_batch && p->ops->accept_batch < PEER_BATCH ?
			 p->ops->accept_batch : PEER_BATCH;
	uint32_t first = p->cfg.port_first, nports = p->cfg.port_last - first + 1;
	unsigned threads = p->cfg.threads ? p->cfg.threads : 1;
	uint32_t home = t->index % (nports < threads ? nports : threads);
	int work = 0;

	if (nports == 1)
		return serve_port(t, first, stopping, look, batch);
	for (uint32_t i = home; i < nports; i += threads)
		work += serve_port(t, first + i, stopping, look, batch);
	if (work)
		return work;
	for (uint32_t i = 0; i < nports; i++)
		if (!(nports >= threads ? i % threads == home : i == home))
			work += serve_port(t, first + i, stopping, look, batch);
	return work;
}

/* ---- parking: idle workers off the ports while a helper watches them ------------------ */

uint64_t peer_in_flight(struct peer *p)
{
	return atomic_load(&p->accepted) + atomic_load(&p->outstanding);
}

void peer_park_workers(struct peer *p)
{
	atomic_store(&p->parked, 1);
}

void peer_unpark_workers(struct peer *p)
{
	if (!atomic_exchange(&p->parked, 0))
		return;
	pthread_mutex_lock(&p->park_lock);
	pthread_cond_broadcast(&p->park_cond);
	pthread_mutex_unlock(&p->park_lock);
}

/* An idle worker while parked: sleeps until unparked or work is posted
 * (or a while has passed: it then looks at the ports once). */
static void park(struct peer *p)
{
	struct timespec until;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += 1;
	pthread_mutex_lock(&p->park_lock);
	while (atomic_load(&p->parked) && !peer_posted_ready(p)) {
		if (pthread_cond_timedwait(&p->park_cond, &p->park_lock, &until) == ETIMEDOUT)
			break;
	}
	pthread_mutex_unlock(&p->park_lock);
}

/*
 * After a round of work, a peer that waits on another (a request of its
 * own is out) gives its CPU up while that CPU is shared: the peer it just
 * fed, the client it answered or the server it passed requests to, may be
 * waiting for this very CPU, and until it runs, this thread's next rounds
 * find a request or two each. On two vCPUs this took a bare hop (nulld
 * --forward) in front of filed from 0.34 to 0.61 of filed alone, and
 * cached write-through with it (docs/benchmarks.md). A peer with nothing
 * of its own out (filed, nulld) never yields: yielding after every round
 * cost filed alone a fifth. On a core of its own the thread keeps it: "shared" is
 * read every YIELD_LOOK_ROUNDS rounds from the thread's involuntary
 * context switches (it was preempted, or a yield of its ran another).
 */
#define YIELD_LOOK_ROUNDS 256

static void yield_if_cpu_shared(struct peer_thread *t)
{
	struct peer *p = t->peer;
	if (p->cfg.never_yield || !atomic_load_explicit(&p->outstanding, memory_order_relaxed))
		return;
	if (t->rounds_of_work++ % YIELD_LOOK_ROUNDS == 0) {   /* the first, then every 256th */
		struct rusage ru;
		if (getrusage(RUSAGE_THREAD, &ru) == 0) {
			t->cpu_shared = ru.ru_nivcsw != t->switches_seen;
			t->switches_seen = ru.ru_nivcsw;
		}
	}
	if (!t->cpu_shared)
		return;
	sched_yield();
	struct peer_stats_block *b = peer_stats_block();
	if (b)
		peer_stats_add(&b->cpu_yields, 1);
}

__thread struct peer_thread *peer_current_worker;

/* One write of the shared count per round, not one per answer: with many
 * workers, that line was taken in turn by each of them per request. */
static void take_off_answered(struct peer_thread *t)
{
	if (t->answered) {
		atomic_fetch_sub(&t->peer->accepted, t->answered);
		t->answered = 0;
	}
}

static void *worker(void *arg)
{
	struct peer_thread *t = arg;
	struct peer *p = t->peer;
	const struct peer_ops *ops = p->ops;

	if (ops->thread_init && ops->thread_init(t) != 0) {
		peer_error("worker %u could not start", t->index);
		atomic_store(&p->failed, 1);
		peer_stop(p);
		atomic_fetch_sub(&p->running, 1);
		return NULL;
	}
	peer_current_worker = t;
	/*
	 * A peer with no send out has no reply coming, so it skips the receive
	 * (nulld's figure: an empty receive per request was a good part of
	 * what the runtime added). A reply can still be queued (a previous
	 * owner's, which libxseg settles when it is received, or one whose
	 * send we do not see counted yet): the poll then wakes us, the accept
	 * finds nothing, and such a round after a poll receives (and one
	 * round in 64 always, under a load that never lets us poll).
	 */
	bool polled = true;
	unsigned round = 0;
	for (;;) {
		bool stopping = atomic_load(&p->stop);

		t->round_accept_tick = 0;
		if (stopping && ops->on_stop && !atomic_exchange(&p->on_stop_done, 1))
			ops->on_stop(t);
		int work = serve_ports(t, stopping,
				       stopping || !(++round & 63) ? REPLIES_ALWAYS :
				       polled ? REPLIES_IF_IDLE : REPLIES_IF_SENT);
		polled = false;
		if (t->deferred)
			peer_run_deferred(t);
		if (peer_run_posted(t))
			work++;
		take_off_answered(t);
		/* maint_running first: once it reads 0, what the maintenance
		 * thread's last calls posted or sent shows in drained() (read
		 * the other way round, it could end between the two reads and
		 * its last post never run) */
		if (stopping && !t->deferred && !atomic_load(&p->maint_running) && drained(p))
			break;
		if (work) {
			peer_bench_call_if_busy(t, work);
			yield_if_cpu_shared(t);
			continue;
		}
		if (stopping) {
			/* Queued requests stay for the port's next owner, so the
			 * port always "has work": sleep briefly instead. */
			struct timespec ts = { 0, 200 * 1000 };
			nanosleep(&ts, NULL);
		} else if (t->deferred) {
			xseg_poll_until(p->seg, p->cfg.port_first, 0, RETRY_WAIT_NS,
					peer_posted_ready, p);
		} else if (atomic_load(&p->parked)) {
			park(p);
		} else if (peer_watch_begin(p)) {
			xseg_poll_until(p->seg, p->cfg.port_first, p->cfg.spin_ns,
					IDLE_WAIT_NS, watch_ready, p);
			peer_watch_end(p);
		} else {
			peer_bench_wait(p, IDLE_WAIT_NS);
		}
		polled = true;
	}
	if (ops->thread_fini)
		ops->thread_fini(t);
	take_off_answered(t);
	peer_current_worker = NULL;
	atomic_fetch_sub(&p->running, 1);
	return NULL;
}

/* ---- helpers: a worker's round on another thread of the peer ------------------------ */

struct peer_thread *peer_helper_new(struct peer *p)
{
	struct peer_thread *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->peer = p;
	t->index = p->cfg.threads;
	t->tid = pthread_self();
	return t;
}

int peer_helper_poll(struct peer_thread *t)
{
	int work = serve_ports(t, atomic_load(&t->peer->stop), REPLIES_ALWAYS);
	/* This thread may not come back for a while: what was put off goes
	 * to the workers, which retry it after their next round. */
	while (t->deferred) {
		struct peer_work *w = t->deferred;
		t->deferred = w->next;
		w->next = NULL;
		peer_post(t->peer, w, w->fn);
		atomic_fetch_sub(&t->peer->deferred, 1);   /* peer_post counted it again */
	}
	return work;
}

void peer_helper_free(struct peer_thread *t)
{
	free(t);
}

/* ---- the maintenance thread ------------------------------------------------------------ */

static void *maintainer(void *arg)
{
	struct peer_thread *t = arg;
	struct peer *p = t->peer;
	const struct peer_ops *ops = p->ops;

	bool ok = !ops->thread_init || ops->thread_init(t) == 0;
	pthread_mutex_lock(&p->maint_lock);
	p->maint_state = ok ? 1 : -1;
	pthread_cond_broadcast(&p->maint_cond);   /* start_maintainer waits */
	if (!ok) {
		pthread_mutex_unlock(&p->maint_lock);
		return NULL;
	}
	while (!atomic_load(&p->maint_end)) {
		pthread_mutex_unlock(&p->maint_lock);
		uint64_t ns = ops->maintain(p);
		if (ns > IDLE_WAIT_NS)
			ns = IDLE_WAIT_NS;
		struct timespec until;
		clock_gettime(CLOCK_MONOTONIC, &until);
		ns += (uint64_t)until.tv_nsec;
		until.tv_sec += (time_t)(ns / 1000000000ull);
		until.tv_nsec = (long)(ns % 1000000000ull);
		pthread_mutex_lock(&p->maint_lock);
		if (!atomic_load(&p->maint_end))
			pthread_cond_timedwait(&p->maint_cond, &p->maint_lock, &until);
	}
	pthread_mutex_unlock(&p->maint_lock);
	if (ops->thread_fini)
		ops->thread_fini(t);
	return NULL;
}

void peer_name_thread(pthread_t tid, const char *fmt, ...)
{
	char name[16];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(name, sizeof(name), fmt, ap);
	va_end(ap);
	pthread_setname_np(tid, name);   /* a name is a help, never needed */
}

static void start_maintainer(struct peer *p)
{
	if (!p->ops->maintain)
		return;
	p->maint.peer = p;
	p->maint.index = p->cfg.threads;
	int rc = pthread_create(&p->maint.tid, NULL, maintainer, &p->maint);
	if (rc) {
		peer_error("cannot start the maintenance thread: %s", strerror(rc));
		atomic_store(&p->failed, 1);
		peer_stop(p);
		return;
	}
	p->maint_started = true;
	atomic_store(&p->maint_running, 1);
	peer_name_thread(p->maint.tid, "%s-maint", p->ops->name);
	/* Its thread_init before the first request. */
	pthread_mutex_lock(&p->maint_lock);
	while (!p->maint_state)
		pthread_cond_wait(&p->maint_cond, &p->maint_lock);
	pthread_mutex_unlock(&p->maint_lock);
	if (p->maint_state < 0) {
		peer_error("the maintenance thread could not start");
		atomic_store(&p->failed, 1);
		peer_stop(p);
	}
}

static void end_maintainer(struct peer *p)
{
	if (!p->maint_started)
		return;
	pthread_mutex_lock(&p->maint_lock);
	atomic_store(&p->maint_end, 1);
	pthread_cond_signal(&p->maint_cond);
	pthread_mutex_unlock(&p->maint_lock);
	pthread_join(p->maint.tid, NULL);
	p->maint_started = false;
	atomic_store(&p->maint_running, 0);
}

/* ---- main ---------------------------------------------------------------------------- */

/* After a signal: the peer's drain, while the workers still serve. */
static void drain(struct peer *p)
{
	if (!p->ops->drain || atomic_load(&p->stop))
		return;
	uint64_t deadline = xseg_now_ns() + (uint64_t)p->cfg.stop_timeout_s * 1000000000ull;
	if (p->ops->drain(p, deadline) != 0)
		atomic_store(&p->drain_failed, 1);
}

/*
 * Waits for a stop: a signal, or peer_stop() from a worker. A signal to a
 * whole path at once (Ctrl-C in a terminal) reaches the blocker with the
 * caches in front of it: while one of them is still plugged in front of
 * us it is writing back, so we keep serving until it has unplugged (or
 * died), up to --stop-timeout, and only then drain (ops->drain) and stop.
 */
static void wait_for_stop(struct peer *p, const sigset_t *set)
{
	struct timespec ts = { 0, 100 * 1000 * 1000 };
	uint64_t stop_by = 0;   /* a signal came; when we stop serving at last */
	uint32_t cache = XSEG_NO_PORT, lingering = XSEG_NO_PORT;

	while (!atomic_load(&p->stop) && atomic_load(&p->running)) {
		if (stop_by) {
			uint32_t behind = peer_port_behind_a_cache(p, &cache);
			if (behind == XSEG_NO_PORT || xseg_now_ns() >= stop_by) {
				if (behind != XSEG_NO_PORT)
					peer_warn("stop: port %u still has cache port %u in front "
						  "after %us: stopping anyway", behind, cache,
						  p->cfg.stop_timeout_s);
				drain(p);
				peer_stop(p);
				break;
			}
			if (behind != lingering)
				peer_info("stop: serving on while cache port %u in front of port "
					  "%u writes back", cache, behind);
			lingering = behind;
			ts.tv_nsec = 10 * 1000 * 1000;
		}
		int sig = sigtimedwait(set, NULL, &ts);
		if ((sig == SIGTERM || sig == SIGINT) && !stop_by) {
			peer_info("signal %d: stopping", sig);
			peer_notify_stopping();
			stop_by = xseg_now_ns() +
				  (uint64_t)p->cfg.stop_timeout_s * 1000000000ull;
		}
		peer_reap_dead_peers(p);
	}
}

/* Waits for the workers to drain; false after --stop-timeout. */
static bool wait_for_workers(struct peer *p, const sigset_t *set)
{
	uint64_t deadline = xseg_now_ns() + (uint64_t)p->cfg.stop_timeout_s * 1000000000ull;
	struct timespec ts = { 0, 10 * 1000 * 1000 };
	while (atomic_load(&p->running)) {
		if (xseg_now_ns() >= deadline)
			return false;
		/* The workers are done but for the maintenance thread: it ends
		 * first, so that work it posts or sends (the contract lets it)
		 * still has workers to run it; they end after it. */
		if (atomic_load(&p->maint_running) && drained(p))
			end_maintainer(p);
		sigtimedwait(set, NULL, &ts);   /* swallow repeated TERM/INT */
		peer_reap_dead_peers(p);
	}
	return true;
}

int peer_main(int argc, char **argv, const struct peer_ops *ops, void *priv)
{
	static struct peer peer;   /* one per process */
	struct peer *p = &peer;
	int ready_fd = -1, status = 1;
	bool pidfile_made = false;
	sigset_t set;

	memset(p, 0, sizeof(*p));
	__cds_wfcq_init(&p->post_head, &p->post_tail);
	pthread_mutex_init(&p->post_drain, NULL);
	pthread_mutex_init(&p->accept_order, NULL);
	pthread_mutex_init(&p->park_lock, NULL);
	pthread_condattr_t ca;   /* park's timeout must not follow the wall clock */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->park_cond, &ca);
	pthread_mutex_init(&p->maint_lock, NULL);
	pthread_cond_init(&p->maint_cond, &ca);
	pthread_condattr_destroy(&ca);
	p->ops = ops;
	p->priv = priv;
	peer_log_setup(ops->name, PEER_LOG_WARN);
	int rc = peer_parse_args(p, argc, argv);
	if (rc < 0)
		return 0;   /* --help or --version */
	if (rc > 0)
		return rc;
	peer_log_setup(ops->name, p->cfg.log_level);

	/* TERM and INT are taken by sigtimedwait in this thread; the workers
	 * inherit the mask and never see them. */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	if (p->cfg.daemon && peer_daemonize(&ready_fd) < 0)
		return 1;
	if (p->cfg.pidfile) {
		if (peer_pidfile_create(p->cfg.pidfile) < 0)
			goto out;
		pidfile_made = true;
	}
	p->cookie_salt = peer_make_salt();
	p->start_ns = xseg_now_ns();
	if (ops->prepare && ops->prepare(p) != 0)
		goto out;   /* the peer said why */
	if ((rc = peer_join_and_bind(p)) < 0) {
		status = rc == -2 ? 2 : 1;
		goto out;
	}
	if (ops->init && (rc = ops->init(p)) != 0) {
		if (rc == 2) {
			status = 2;   /* the peer named the argument */
		} else {
			peer_error("initialization failed");
		}
		goto out;
	}
	p->threads = calloc(p->cfg.threads, sizeof(*p->threads));
	if (!p->threads) {
		peer_error("out of memory for %u threads", p->cfg.threads);
		goto out;
	}
	p->main_tid = pthread_self();
	p->max_watchers = p->cfg.watchers ? p->cfg.watchers : peer_default_watchers(p);
	peer_bench_setup(p);
	start_maintainer(p);
	unsigned started = 0;
	for (; started < p->cfg.threads; started++) {
		struct peer_thread *t = &p->threads[started];
		t->peer = p;
		t->index = started;
		atomic_fetch_add(&p->running, 1);
		if ((rc = pthread_create(&t->tid, NULL, worker, t)) != 0) {
			atomic_fetch_sub(&p->running, 1);
			peer_error("cannot start worker %u: %s", started, strerror(rc));
			atomic_store(&p->failed, 1);
			peer_stop(p);
			break;
		}
		peer_name_thread(t->tid, "%s-w%u", p->ops->name, started);
	}
	peer_info("serving on segment '%s', port %u-%u, %u threads", p->cfg.segment,
		  p->cfg.port_first, p->cfg.port_last, p->cfg.threads);
	if (!atomic_load(&p->failed)) {
		peer_notify_ready(p);   /* before the caller of --daemon exits */
		peer_daemon_ready(ready_fd, 0);
		ready_fd = -1;
	}
	wait_for_stop(p, &set);
	peer_notify_stopping();   /* also a stop without a signal */
	if (!wait_for_workers(p, &set)) {
		peer_error("stop: gave up after %us with %" PRIu64 " accepted requests unanswered, "
			   "%" PRIu64 " sends outstanding, %" PRIu64 " deferred",
			   p->cfg.stop_timeout_s, atomic_load(&p->accepted),
			   atomic_load(&p->outstanding), atomic_load(&p->deferred));
		if (pidfile_made)
			peer_pidfile_remove(p->cfg.pidfile);
		_exit(1);   /* workers still hold the segment: do not unmap it */
	}
	for (unsigned i = 0; i < started; i++)
		pthread_join(p->threads[i].tid, NULL);
	end_maintainer(p);
	if (ops->fini)
		ops->fini(p);
	status = atomic_load(&p->failed) || atomic_load(&p->drain_failed) ? 1 : 0;
	/* A daemon's status reaches nobody's waitpid: say it. */
	peer_log(status ? PEER_LOG_ERROR : PEER_LOG_INFO, "stopped, exit status %d", status);
out:
	if (ready_fd >= 0 && pidfile_made) {
		/* never served: gone before the caller of --daemon hears so */
		peer_pidfile_remove(p->cfg.pidfile);
		pidfile_made = false;
	}
	peer_daemon_ready(ready_fd, status ? status : 1);
	xseg_reserve_destroy(p->reserve);
	p->reserve = NULL;
	if (p->seg)
		xseg_leave(p->seg);
	p->seg = NULL;
	free(p->threads);
	free(p->slots);
	free(p->accept_tick);
	p->threads = NULL;
	p->slots = NULL;
	p->accept_tick = NULL;
	if (pidfile_made)
		peer_pidfile_remove(p->cfg.pidfile);
	return status;
}
