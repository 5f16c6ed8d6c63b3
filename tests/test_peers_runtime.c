/*
 * The peer runtime's hand-over from a thread of the peer's own to its
 * workers (peer_post): a forked child runs peer_main with a "relay" peer
 * whose on_request gives each request to a completer thread; that thread
 * posts it back and a worker answers it. The parent is the client.
 *
 * And on_accept_in_order: an "orderer" peer with four workers checks that
 * it sees requests in the order the client queued them.
 *
 * And parking: a "helped" peer's own thread takes turns watching the port
 * in place of its workers (peer_helper_poll with the workers parked) and
 * going away (unparked); no request may wait for a worker that sleeps
 * apart from the port, nor posted work for a parked worker.
 *
 * And the maintenance and drain hooks: a "kept" peer's maintain hook runs
 * on its own thread (with thread_init/thread_fini) until after the
 * workers, also during the drain; its drain hook runs on SIGTERM while the
 * workers still accept and serve; a drain that gives up makes the exit
 * status 1.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "peer/peer.h"
#include "support/peer_test_util.h"
#include "support/xseg_test_util.h"

#define CLIENT 0
#define RELAY  1
#define TIMEOUT 20000

/* ---- the relay peer (runs in the child) ---------------------------------------- */

struct relayed {
	struct peer_work work;
	struct xseg_request *req;
	struct relayed *next;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct relayed *head, **tail;
	unsigned delay_us;     /* the completer waits this long per batch */
	struct peer *peer;
	bool quit;
	pthread_t tid;
} relay = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, 0, NULL,
	    false, 0 };

static void answer(struct peer_thread *t, struct peer_work *w)
{
	struct relayed *r = (struct relayed *)w;
	r->req->serviced = r->req->size;
	peer_complete(t, r->req);
	free(r);
}

/* Not a worker: may not touch requests, only post them back. */
static void *completer(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&relay.lock);
	for (;;) {
		while (!relay.head && !relay.quit)
			pthread_cond_wait(&relay.cond, &relay.lock);
		if (!relay.head && relay.quit)
			break;
		struct relayed *list = relay.head;
		relay.head = NULL;
		relay.tail = &relay.head;
		pthread_mutex_unlock(&relay.lock);
		if (relay.delay_us)
			usleep(relay.delay_us);
		while (list) {
			struct relayed *next = list->next;
			peer_post(relay.peer, &list->work, answer);
			list = next;
		}
		pthread_mutex_lock(&relay.lock);
	}
	pthread_mutex_unlock(&relay.lock);
	return NULL;
}

static void relay_request(struct peer_thread *t, struct xseg_request *req)
{
	struct relayed *r = calloc(1, sizeof(*r));
	if (!r) {
		peer_fail(t, req, ENOMEM);
		return;
	}
	r->req = req;
	pthread_mutex_lock(&relay.lock);
	*relay.tail = r;
	relay.tail = &r->next;
	pthread_cond_signal(&relay.cond);
	pthread_mutex_unlock(&relay.lock);
}

static int relay_init(struct peer *p)
{
	relay.peer = p;
	relay.tail = &relay.head;
	return pthread_create(&relay.tid, NULL, completer, NULL) ? -1 : 0;
}

static void relay_fini(struct peer *p)
{
	(void)p;
	pthread_mutex_lock(&relay.lock);
	relay.quit = true;
	pthread_cond_signal(&relay.cond);
	pthread_mutex_unlock(&relay.lock);
	pthread_join(relay.tid, NULL);
}

static const struct peer_ops relay_ops = {
	.name = "relay",
	.summary = "test peer: answers every request from another thread",
	.init = relay_init,
	.fini = relay_fini,
	.on_request = relay_request,
	.default_threads = 2,
};

/* ---- the orderer peer (runs in the child) -------------------------------------- */

/* The client numbers its READs 0, 1, 2, ... in req->offset. Under the
 * accept lock the next one seen must be the next number; a request seen out
 * of turn is failed with EILSEQ by on_request. Atomics only so that a
 * runtime calling the hook without its lock is caught here, not by TSan. */
static _Atomic uint64_t order_next;
static _Atomic uint64_t order_wrong;   /* offset + 1 of a request out of turn */

static void orderer_place(struct peer_thread *t, struct xseg_request *req)
{
	(void)t;
	uint64_t expected = atomic_exchange(&order_next, req->offset + 1);
	if (req->offset != expected)
		atomic_store(&order_wrong, req->offset + 1);
}

static void orderer_request(struct peer_thread *t, struct xseg_request *req)
{
	uint64_t wrong = atomic_load(&order_wrong);
	if (wrong && wrong - 1 == req->offset) {
		peer_fail(t, req, EILSEQ);
		return;
	}
	req->serviced = req->size;
	peer_complete(t, req);
}

static const struct peer_ops orderer_ops = {
	.name = "orderer",
	.summary = "test peer: checks that requests are placed in queue order",
	.supported_ops = PEER_OP(X_READ),
	.on_accept_in_order = orderer_place,
	.on_request = orderer_request,
	.default_threads = 4,
};

/* ---- the helped peer (runs in the child) --------------------------------------- */

enum help_mode {
	HELP_ALWAYS,   /* parks the workers once and serves the port till the end;
			* every request comes back as posted work */
	HELP_TURNS,    /* serves the port for 2 ms, goes away for 30 ms, ... */
};

static struct {
	enum help_mode mode;   /* set by the test before the fork */
	struct peer *peer;
	pthread_t tid;
	_Atomic bool quit;
} helped;

static void serve_for(struct peer_thread *t, uint64_t ns)
{
	uint64_t until = xseg_now_ns() + ns;
	while (xseg_now_ns() < until && !atomic_load(&helped.quit))
		if (peer_helper_poll(t) == 0)
			sched_yield();
}

static void *helper_loop(void *arg)
{
	(void)arg;
	struct peer_thread *t = peer_helper_new(helped.peer);
	if (!t)
		return NULL;
	while (!atomic_load(&helped.quit)) {
		if (!peer_stopping(helped.peer))
			peer_park_workers(helped.peer);
		if (helped.mode == HELP_ALWAYS) {
			serve_for(t, UINT64_MAX / 2);
		} else {
			serve_for(t, 2000000);
			peer_unpark_workers(helped.peer);
			usleep(30000);
		}
	}
	peer_unpark_workers(helped.peer);
	peer_helper_free(t);
	return NULL;
}

/* Requests the helper serves go round the completer and come back as
 * posted work (which only a worker runs) in HELP_ALWAYS; otherwise they
 * are answered where they are taken, by a worker or by the helper. */
static void helped_request(struct peer_thread *t, struct xseg_request *req)
{
	if (helped.mode == HELP_ALWAYS) {
		relay_request(t, req);
		return;
	}
	req->serviced = req->size;
	peer_complete(t, req);
}

static int helped_init(struct peer *p)
{
	if (relay_init(p) != 0)
		return -1;
	helped.peer = p;
	return pthread_create(&helped.tid, NULL, helper_loop, NULL) ? -1 : 0;
}

/* on_stop: the helper must stop before the workers are gone. */
static void helped_stop(struct peer_thread *t)
{
	(void)t;
	atomic_store(&helped.quit, true);
	pthread_join(helped.tid, NULL);
}

static const struct peer_ops helped_ops = {
	.name = "helped",
	.summary = "test peer: a thread of its own serves the port with the workers parked",
	.init = helped_init,
	.on_stop = helped_stop,
	.fini = relay_fini,
	.on_request = helped_request,
	.default_threads = 2,
};

/* ---- the kept peer: maintain and drain hooks (runs in the child) ----------------- */

enum kept_mode {
	KEPT_PLAIN,      /* no drain hook's waiting: it returns 0 at once */
	KEPT_SERVE,      /* the drain waits until KEPT_N requests were served in it */
	KEPT_GIVE_UP,    /* the drain waits for the deadline and gives up */
};
#define KEPT_N 100u

static struct {
	enum kept_mode mode;          /* set by the test before the fork */
	_Atomic uint64_t rounds;      /* maintain calls */
	_Atomic unsigned maint_init, maint_fini, workers_ended;
	_Atomic bool draining;
	_Atomic unsigned served_draining;
	_Atomic int bad;              /* what fini found wrong: the exit status */
} kept;

static int kept_thread_init(struct peer_thread *t)
{
	if (peer_thread_index(t) == peer_nr_threads(peer_of(t)))
		atomic_fetch_add(&kept.maint_init, 1);
	return 0;
}

static void kept_thread_fini(struct peer_thread *t)
{
	if (peer_thread_index(t) == peer_nr_threads(peer_of(t))) {
		atomic_fetch_add(&kept.maint_fini, 1);
		return;
	}
	/* Every worker outlives the maintenance thread: what it posted or
	 * sent last still has workers to run or take it. */
	if (!atomic_load(&kept.maint_fini))
		atomic_store(&kept.bad, 4);
	atomic_fetch_add(&kept.workers_ended, 1);
}

static uint64_t kept_maintain(struct peer *p)
{
	(void)p;
	atomic_fetch_add(&kept.rounds, 1);
	return 1000000;   /* again in 1 ms */
}

/* Answers (a PING with serviced = maintain calls so far; EPROTO when the
 * maintenance thread had no thread_init). */
static void kept_request(struct peer_thread *t, struct xseg_request *req)
{
	if (!atomic_load(&kept.maint_init)) {
		peer_fail(t, req, EPROTO);
		return;
	}
	if (atomic_load(&kept.draining))
		atomic_fetch_add(&kept.served_draining, 1);
	req->serviced = req->op == X_PING ? atomic_load(&kept.rounds) : req->size;
	peer_complete(t, req);
}

static int kept_drain(struct peer *p, uint64_t deadline)
{
	uint64_t rounds = atomic_load(&kept.rounds);
	atomic_store(&kept.draining, true);
	if (kept.mode == KEPT_PLAIN)
		return 0;
	while (xseg_now_ns() < deadline &&
	       (kept.mode == KEPT_GIVE_UP || atomic_load(&kept.served_draining) < KEPT_N))
		usleep(1000);
	/* the maintenance thread ran meanwhile */
	if (atomic_load(&kept.rounds) < rounds + 5)
		atomic_store(&kept.bad, 5);
	(void)p;
	return kept.mode == KEPT_GIVE_UP || atomic_load(&kept.served_draining) < KEPT_N;
}

/* After the workers and the maintenance thread ended. */
static void kept_fini(struct peer *p)
{
	if (atomic_load(&kept.maint_init) != 1 || atomic_load(&kept.maint_fini) != 1)
		_exit(3);
	if (atomic_load(&kept.workers_ended) != peer_nr_threads(p))
		_exit(6);
	if (atomic_load(&kept.bad))
		_exit(atomic_load(&kept.bad));
}

static const struct peer_ops kept_ops = {
	.name = "kept",
	.summary = "test peer: maintain and drain hooks",
	.thread_init = kept_thread_init,
	.thread_fini = kept_thread_fini,
	.maintain = kept_maintain,
	.drain = kept_drain,
	.fini = kept_fini,
	.on_request = kept_request,
	.default_threads = 2,
};

/* ---- the late peer: work its maintain hook posts up to the stop's end ---------- */

/* maintain "may send with the _any calls"; posted work "keeps a stopping
 * peer alive until it has run". The late peer's maintain posts a piece of
 * work at every call where the last one has run, from start to its very
 * last call: fini checks that the last one ran too. Before, the workers
 * ended as soon as they were drained and the maintenance thread went on
 * until the main thread had joined them: what it posted then never ran. */
static struct {
	_Atomic int posted, ran;
	struct peer_work work;
} late;

static void late_work(struct peer_thread *t, struct peer_work *w)
{
	(void)t;
	(void)w;
	atomic_fetch_add(&late.ran, 1);
}

static uint64_t late_maintain(struct peer *p)
{
	if (atomic_load(&late.ran) == atomic_load(&late.posted)) {
		atomic_fetch_add(&late.posted, 1);
		peer_post(p, &late.work, late_work);
	}
	return 100000;   /* again in 0.1 ms */
}

static void late_request(struct peer_thread *t, struct xseg_request *req)
{
	req->serviced = req->size;
	peer_complete(t, req);
}

static void late_fini(struct peer *p)
{
	(void)p;
	if (!atomic_load(&late.posted) || atomic_load(&late.ran) != atomic_load(&late.posted))
		_exit(8);   /* the last one posted never ran (or none was posted) */
}

static const struct peer_ops late_ops = {
	.name = "late",
	.summary = "test peer: maintain posts work during the stop",
	.maintain = late_maintain,
	.fini = late_fini,
	.on_request = late_request,
	.default_threads = 2,
};

/* ---- the client (the test) ----------------------------------------------------- */

static struct xseg *seg;
static char segname[64];
static pid_t child;

/* stop_timeout: "" for the default. */
static void start_peer_stop(const struct peer_ops *ops, unsigned delay_us, const char *spin_us,
			    const char *stop_timeout)
{
	seg = pt_segment(segname, sizeof(segname), 4, 512, 8u << 20);
	ck_assert_int_eq(xseg_bind_port(seg, CLIENT), 0);
	child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		char *argv[] = { (char *)ops->name, "--segment", segname, "--port", "1",
				 "--spin-us", (char *)spin_us, "--stop-timeout",
				 (char *)stop_timeout, NULL };
		relay.delay_us = delay_us;
		/* not the parent's atexit */
		_exit(peer_main(*stop_timeout ? 9 : 7, argv, ops, NULL));
	}
	pt_track_pid(child);
	ck_assert_int_eq(pt_wait_bound(seg, RELAY, child, TIMEOUT), 0);
}

static void start_peer(const struct peer_ops *ops, unsigned delay_us, const char *spin_us)
{
	start_peer_stop(ops, delay_us, spin_us, "");
}

static void start_relay(unsigned delay_us, const char *spin_us)
{
	start_peer(&relay_ops, delay_us, spin_us);
}

/* Keeps `depth` requests in flight until `total` were answered. */
static void run_load(unsigned total, unsigned depth)
{
	unsigned sent = 0, answered = 0;
	while (answered < total) {
		while (sent < total && sent - answered < depth) {
			struct pt_req r = { .op = X_READ, .target = "obj", .size = 64 + sent % 7 };
			ck_assert_msg(pt_submit(seg, CLIENT, RELAY, &r), "submit: %s",
				      xseg_last_error());
			sent++;
		}
		struct xseg_request *req = pt_receive(seg, CLIENT, TIMEOUT);
		ck_assert_msg(req, "no reply after %u of %u", answered, total);
		ck_assert_uint_eq(req->result, XR_SERVED);
		ck_assert_uint_eq(req->serviced, req->size);
		struct pt_req done = { 0 };
		pt_finish(seg, req, &done);
		answered++;
	}
}

START_TEST(posted_work_answers_every_request)
{
	start_relay(0, "20");
	run_load(xt_scaled(20000, 500), 64);
	ck_assert_int_eq(pt_stop(child, SIGTERM, TIMEOUT), 0);
}
END_TEST

/* With no spinning, each request finds the workers asleep: a post that did
 * not wake one would cost the 100 ms idle timeout per request, so 100 of
 * them taking over 5 s means a lost wake-up (not a speed check). */
START_TEST(post_wakes_a_sleeping_worker)
{
	start_relay(0, "0");
	uint64_t start = xseg_now_ns();
	run_load(100, 1);
	uint64_t ms = (xseg_now_ns() - start) / 1000000;
	ck_assert_msg(ms < 5000, "100 sequential requests took %llu ms: lost wake-ups",
		      (unsigned long long)ms);
	ck_assert_int_eq(pt_stop(child, SIGTERM, TIMEOUT), 0);
}
END_TEST

/* SIGTERM while every request sits in the completer thread: the stop waits
 * for the posts, all are answered, exit 0. */
START_TEST(stop_waits_for_posted_work)
{
	enum { N = 32 };
	start_relay(300 * 1000, "20");
	for (int i = 0; i < N; i++) {
		struct pt_req r = { .op = X_READ, .target = "obj", .size = 512 };
		ck_assert(pt_submit(seg, CLIENT, RELAY, &r));
	}
	/* let the relay accept them (they are in the completer's sleep) */
	usleep(100 * 1000);
	kill(child, SIGTERM);
	int answered = 0;
	while (answered < N) {
		struct xseg_request *req = pt_receive(seg, CLIENT, TIMEOUT);
		ck_assert_msg(req, "no reply after %d of %d", answered, N);
		ck_assert_uint_eq(req->result, XR_SERVED);
		struct pt_req done = { 0 };
		pt_finish(seg, req, &done);
		answered++;
	}
	int status = pt_stop(child, SIGTERM, TIMEOUT);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
}
END_TEST

/* Four workers race to accept bursts of READs, with a WRITE (answered by
 * the runtime, never placed) every so often: every READ must be placed in
 * the order it was queued. */
START_TEST(accept_in_order_sees_queue_order)
{
	unsigned total = xt_scaled(20000, 1000), sent = 0, placed = 0, answered = 0;
	start_peer(&orderer_ops, 0, "20");
	while (answered < sent || sent < total) {
		while (sent < total && sent - answered < 64) {
			bool write = sent % 13 == 5;
			struct pt_req r = { .op = write ? X_WRITE : X_READ, .target = "obj",
					    .offset = write ? 0 : placed, .size = 64 };
			ck_assert_msg(pt_submit(seg, CLIENT, RELAY, &r), "submit: %s",
				      xseg_last_error());
			placed += !write;
			sent++;
		}
		struct xseg_request *req = pt_receive(seg, CLIENT, TIMEOUT);
		ck_assert_msg(req, "no reply after %u of %u", answered, sent);
		if (req->op == X_WRITE) {
			ck_assert_int_eq(req->error, EOPNOTSUPP);
		} else {
			ck_assert_msg(req->result == XR_SERVED, "READ number %llu was placed out "
				      "of turn (error %d)", (unsigned long long)req->offset,
				      req->error);
		}
		struct pt_req done = { 0 };
		pt_finish(seg, req, &done);
		answered++;
	}
	ck_assert_int_eq(pt_stop(child, SIGTERM, TIMEOUT), 0);
}
END_TEST

/* Parked workers, the helper serving the port, every request answered by
 * posted work: a post that does not wake a parked worker costs the 1 s
 * park timeout, so 100 sequential requests taking over 5 s means lost
 * wake-ups (not a speed check). Workers do not spin here. */
START_TEST(post_wakes_a_parked_worker)
{
	helped.mode = HELP_ALWAYS;
	start_peer(&helped_ops, 0, "0");
	uint64_t start = xseg_now_ns();
	run_load(100, 1);
	uint64_t ms = (xseg_now_ns() - start) / 1000000;
	ck_assert_msg(ms < 5000, "100 sequential requests took %llu ms: lost wake-ups",
		      (unsigned long long)ms);
	run_load(xt_scaled(5000, 500), 64);
	int status = pt_stop(child, SIGTERM, TIMEOUT);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
}
END_TEST

/* The helper serves 2 ms, then unparks the workers and is away 30 ms. A
 * request that arrives while it is away must be taken by a worker at once;
 * if unparking left them asleep apart from the port it would wait for the
 * helper's return (up to 30 ms), in about every turn. Requests at depth 1
 * for ~60 turns: the bug makes about one per turn slow; more than 30 (half
 * the turns) over 10 ms is that bug. A correct run has next to none on a
 * quiet machine, but a loaded one under TSan had 17 (worst 42 ms), and
 * the old limit of 15 failed CI once; so did 30, once, under ASan. */
START_TEST(unparked_workers_watch_the_port)
{
	helped.mode = HELP_TURNS;
	start_peer(&helped_ops, 0, "0");
	/* Up to three 2 s looks: the bug is slow in every turn of each, a
	 * loaded machine in bursts (CI under ASan beside a Ceph test: 79 of
	 * 14314 in one look, the next runs none). */
	unsigned slow = 0, done = 0;
	uint64_t worst = 0;
	for (int look = 0; look < 3 && (look == 0 || slow > 30); look++) {
		slow = done = 0;
		worst = 0;
		uint64_t start = xseg_now_ns();
		while (xseg_now_ns() - start < 2000000000ull) {
			struct pt_req r = { .op = X_READ, .target = "obj", .size = 64 };
			uint64_t t0 = xseg_now_ns();
			ck_assert_msg(pt_submit(seg, CLIENT, RELAY, &r), "submit: %s",
				      xseg_last_error());
			struct xseg_request *req = pt_receive(seg, CLIENT, TIMEOUT);
			ck_assert_msg(req, "no reply after %u requests", done);
			ck_assert_uint_eq(req->result, XR_SERVED);
			struct pt_req answer = { 0 };
			pt_finish(seg, req, &answer);
			uint64_t ns = xseg_now_ns() - t0;
			slow += ns > 10000000;
			worst = ns > worst ? ns : worst;
			done++;
		}
	}
	ck_assert_msg(slow <= 30, "%u of %u requests took over 10 ms (worst %llu ms), in each of "
		      "3 looks: unparked workers did not watch the port", slow, done,
		      (unsigned long long)(worst / 1000000));
	run_load(xt_scaled(20000, 1000), 64);
	int status = pt_stop(child, SIGTERM, TIMEOUT);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
}
END_TEST

/* One request: its reply's serviced (kept: the maintain calls so far). */
static uint64_t kept_round_trip(void)
{
	struct pt_req r = { .op = X_PING };
	ck_assert_msg(pt_submit(seg, CLIENT, RELAY, &r), "submit: %s", xseg_last_error());
	struct xseg_request *req = pt_receive(seg, CLIENT, TIMEOUT);
	ck_assert_msg(req, "no reply");
	struct pt_req done = { 0 };
	pt_finish(seg, req, &done);
	ck_assert_msg(done.result == XR_SERVED, "failed: error %d (EPROTO: the maintenance "
		      "thread had no thread_init)", done.error);
	return done.serviced;
}

/* maintain runs over and over on a thread of its own (thread_init/fini on
 * it, fini checks), through the drain, and ends before the workers. */
START_TEST(maintain_runs_and_stops)
{
	kept.mode = KEPT_PLAIN;
	start_peer(&kept_ops, 0, "20");
	uint64_t first = kept_round_trip();
	usleep(100 * 1000);
	uint64_t second = kept_round_trip();
	ck_assert_msg(second >= first + 10, "maintain ran %llu times in 100 ms",
		      (unsigned long long)(second - first));
	int status = pt_stop(child, SIGTERM, TIMEOUT);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d (3: the "
		      "maintenance thread's thread_init/fini, 4: a worker ended before it, "
		      "5: it did not run during the drain, 6: workers)", status);
}
END_TEST

/* SIGTERM: the drain hook runs while the workers still accept and serve
 * (it waits for KEPT_N requests sent after the signal); then exit 0. */
START_TEST(drain_runs_while_serving)
{
	kept.mode = KEPT_SERVE;
	start_peer(&kept_ops, 0, "20");
	kept_round_trip();
	kill(child, SIGTERM);
	usleep(50 * 1000);   /* the drain has begun */
	run_load(KEPT_N, 8);
	int status = pt_stop(child, SIGTERM, TIMEOUT);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
}
END_TEST

/* A drain that gives up (at the --stop-timeout deadline): the stop goes
 * on, exit status 1. */
START_TEST(drain_giving_up_exits_1)
{
	kept.mode = KEPT_GIVE_UP;
	start_peer_stop(&kept_ops, 0, "20", "1");
	kept_round_trip();
	uint64_t t0 = xseg_now_ns();
	int status = pt_stop(child, SIGTERM, TIMEOUT);
	uint64_t ms = (xseg_now_ns() - t0) / 1000000;
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 1, "status %d", status);
	ck_assert_msg(ms >= 900 && ms < 10000, "stopped after %llu ms with --stop-timeout 1",
		      (unsigned long long)ms);
}
END_TEST

/* Work the maintenance thread posts while the peer stops, to its last
 * call, must still run before fini: posted work keeps a stopping peer
 * alive until it has run (the maintenance thread ends before the workers). */
START_TEST(stop_runs_work_maintain_posts)
{
	start_peer(&late_ops, 0, "20");
	run_load(100, 8);
	int status = pt_stop(child, SIGTERM, TIMEOUT);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "status %d (exit 8: work posted by maintain during the stop never ran; "
		      "fini came first)", status);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("peers_runtime");
	TCase *tc = pt_tcase(s, "post", NULL, 120);
	tcase_add_test(tc, posted_work_answers_every_request);
	tcase_add_test(tc, post_wakes_a_sleeping_worker);
	tcase_add_test(tc, stop_waits_for_posted_work);
	tcase_add_test(tc, accept_in_order_sees_queue_order);
	tcase_add_test(tc, post_wakes_a_parked_worker);
	tcase_add_test(tc, unparked_workers_watch_the_port);
	tcase_add_test(tc, maintain_runs_and_stops);
	tcase_add_test(tc, drain_runs_while_serving);
	tcase_add_test(tc, drain_giving_up_exits_1);
	tcase_add_test(tc, stop_runs_work_maintain_posts);
	return pt_run(s);
}
