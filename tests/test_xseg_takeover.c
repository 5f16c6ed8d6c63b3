/*
 * A peer killed with SIGKILL while bound does not block the others, and its
 * port can be taken over: requests it had accepted (or forwarded, and whose
 * replies came back to it) are answered FAILED/EPIPE to their issuers,
 * requests it had issued return to the pool, requests queued for it stay
 * for the new owner, and in the end the pool is whole again.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/xseg_test_util.h"

#define NREQS   64
#define SALT    0x7a6b0000ull
#define RESERVED 2   /* requests fork_server keeps in a reserve */

static struct xseg_request *issue(uint32_t from, uint32_t to, uint64_t seq)
{
	struct xseg_request *r = xseg_get_request(xt_seg, from);
	XT_ASSERT(r != NULL, "get_request: %s", xseg_last_error());
	r->op = X_READ;
	r->offset = seq;
	r->size = 512;
	r->priv = xt_cookie(seq, SALT);
	int rc = xseg_submit(xt_seg, r, from, to);
	XT_ASSERT(rc >= 0, "submit %" PRIu64 ": %s", seq, xseg_last_error());
	return r;
}

static void kill_and_reap(pid_t pid)
{
	int st;
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
}

static void wait_byte(int fd, char want)
{
	char c = 0;
	ck_assert_int_eq(read(fd, &c, 1), 1);
	ck_assert_int_eq(c, want);
}

/* Receives `n` replies on `port` within a few seconds. */
static int receive_n(uint32_t port, struct xseg_request **out, int n)
{
	int got = 0;
	uint64_t t0 = xseg_now_ns();
	while (got < n) {
		int k = xseg_receive(xt_seg, port, out + got, (unsigned)(n - got));
		ck_assert_int_ge(k, 0);
		got += k;
		if (k == 0) {
			ck_assert_msg(xseg_now_ns() - t0 < 5000000000ull,
				      "%d of %d replies after 5 s", got, n);
			xseg_poll(xt_seg, port, 10000, 100000000ull);
		}
	}
	return got;
}

static void assert_segment_whole(void)
{
	struct xseg_segment_info info;
	ck_assert_int_eq(xseg_segment_info(xt_seg, &info), 0);
	ck_assert_uint_eq(info.free_requests, info.nr_requests);
	ck_assert_uint_eq(info.reserved_requests, 0);
	ck_assert_uint_eq(info.heap_used, 0);
	ck_assert_uint_eq(info.heap_allocs, 0);
	ck_assert_uint_eq(info.heap_free_largest, info.heap_size);
}

/*
 * A child that binds `port`, issues two requests of its own (one with a
 * buffer), sets RESERVED more aside (xseg_reserve), writes 'r', accepts `held` requests, writes 'a' and waits to be
 * killed.
 */
static pid_t fork_server(uint32_t port, int held, int up)
{
	pid_t pid = xt_fork(30);
	if (pid == 0) {
		struct xseg *seg;
		struct xseg_request *reqs[NREQS];
		int n = 0;
		XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
		XT_CHILD_CHECK(xseg_bind_port(seg, port) == 0, 3, "%s", xseg_last_error());
		/* Requests it issued itself, one with a buffer: back to the pool. */
		struct xseg_request *mine = xseg_get_request(seg, port);
		XT_CHILD_CHECK(mine && xseg_prep_target(seg, mine, "scratch", 3000) == 0, 4,
			       "%s", xseg_last_error());
		XT_CHILD_CHECK(xseg_get_request(seg, port), 4, "%s", xseg_last_error());
		XT_CHILD_CHECK(xseg_reserve_create(seg, port, RESERVED), 4, "%s",
			       xseg_last_error());
		XT_CHILD_CHECK(write(up, "r", 1) == 1, 5, "write");
		while (n < held) {
			int k = xseg_accept(seg, port, reqs + n, (unsigned)(held - n));
			XT_CHILD_CHECK(k >= 0, 6, "%s", xseg_last_error());
			n += k;
			if (!k)
				xseg_poll(seg, port, 0, 100000000ull);
		}
		XT_CHILD_CHECK(write(up, "a", 1) == 1, 7, "write");
		for (;;)
			pause();
	}
	return pid;
}

/*
 * Binds `client`, forks a server on `server` (fork_server) and issues
 * `held` requests it accepts, then `queued` more that stay in its queue
 * (sequence numbers 0..held+queued-1). Returns the server's pid.
 */
static pid_t start_server_holding(uint32_t client, uint32_t server, int held, int queued)
{
	int up[2];
	ck_assert_int_eq(pipe(up), 0);
	ck_assert_int_eq(xseg_bind_port(xt_seg, client), 0);
	pid_t pid = fork_server(server, held, up[1]);
	wait_byte(up[0], 'r');
	for (uint64_t i = 0; i < (uint64_t)held; i++)
		issue(client, server, i);
	wait_byte(up[0], 'a');
	for (uint64_t i = (uint64_t)held; i < (uint64_t)(held + queued); i++)
		issue(client, server, i);
	close(up[0]);
	close(up[1]);
	return pid;
}

/* ---- a live owner looked at by a process out of files ---------------------- */

/* Whether a port's owner lives is read from /proc/PID/stat. A process at its
 * open-files limit cannot open that file: it must not take that for death
 * (it took a live peer's port, and failed back what the peer held). */
START_TEST(out_of_files_never_takes_a_live_port)
{
	enum { CLIENT = 0, SERVER = 1 };
	int up[2];
	ck_assert_int_eq(pipe(up), 0);
	ck_assert_int_eq(xseg_bind_port(xt_seg, CLIENT), 0);
	pid_t pid = fork_server(SERVER, 0, up[1]);
	wait_byte(up[0], 'r');
	wait_byte(up[0], 'a');
	close(up[0]);
	close(up[1]);

	struct rlimit old, low;
	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
	low = old;
	low.rlim_cur = 256;
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
	int fds[256], n = 0;
	while (n < 256 && (fds[n] = dup(0)) >= 0)
		n++;
	ck_assert_int_eq(errno, EMFILE);
	int rc = xseg_bind_port(xt_seg, SERVER);
	int err = errno;
	while (n)
		close(fds[--n]);
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
	ck_assert_msg(rc == -EBUSY, "bind of a live peer's port while out of files: %d (%s)",
		      rc, rc < 0 ? strerror(err) : "taken");

	struct xseg_port_info pi;
	ck_assert_int_eq(xseg_port_info(xt_seg, SERVER, &pi), 0);
	ck_assert_int_eq(pi.owner, pid);
	kill_and_reap(pid);
	ck_assert_int_eq(xseg_bind_port(xt_seg, SERVER), 0);   /* dead now: taken */
}
END_TEST

/* ---- a server killed holding accepted requests --------------------------- */

START_TEST(killed_server_requests_fail_back)
{
	enum { CLIENT = 0, SERVER = 1, HELD = 8, QUEUED = 4 };
	struct xseg_request *got[HELD + QUEUED];
	struct xseg_port_info pi;
	pid_t pid = start_server_holding(CLIENT, SERVER, HELD, QUEUED);
	ck_assert_uint_eq(xt_free_requests(xt_seg), NREQS - HELD - QUEUED - 2 - RESERVED);

	/* Alive: its port cannot be stolen. */
	ck_assert_int_eq(xseg_bind_port(xt_seg, SERVER), -EBUSY);
	ck_assert_int_eq(xseg_port_info(xt_seg, SERVER, &pi), 0);
	ck_assert_int_eq(pi.owner, pid);
	ck_assert_uint_eq(pi.reserved, RESERVED);
	ck_assert_int_eq(pi.owner_alive, 1);

	kill_and_reap(pid);
	ck_assert_int_eq(xseg_port_info(xt_seg, SERVER, &pi), 0);
	ck_assert_int_eq(pi.owner_alive, 0);
	ck_assert_uint_eq(pi.request_depth, QUEUED);
	/* Nothing comes back by itself: the dead do not answer. */
	ck_assert_int_eq(xseg_receive(xt_seg, CLIENT, got, HELD), 0);
	/* Submitting to the dead port still works: it queues for the heir. */
	issue(CLIENT, SERVER, HELD + QUEUED);

	ck_assert_int_eq(xseg_bind_port(xt_seg, SERVER), 0);
	ck_assert_int_eq(xseg_port_info(xt_seg, SERVER, &pi), 0);
	ck_assert_int_eq(pi.owner, getpid());
	ck_assert_uint_eq(pi.request_depth, QUEUED + 1);
	ck_assert_uint_eq(pi.reserved, 0);   /* its reserve went back to the pool */

	/* The accepted ones: failed back with EPIPE, cookies restored. */
	struct xt_bitmap seen;
	xt_bitmap_init(&seen, HELD + QUEUED + 1);
	receive_n(CLIENT, got, HELD);
	for (int i = 0; i < HELD; i++) {
		struct xseg_request *r = got[i];
		ck_assert_uint_lt(r->offset, HELD);
		ck_assert(!xt_bitmap_set(&seen, r->offset));
		ck_assert_uint_eq(r->result, XR_FAILED);
		ck_assert_int_eq(r->error, EPIPE);
		ck_assert_uint_eq(r->priv, xt_cookie(r->offset, SALT));
		ck_assert_int_eq(xseg_put_request(xt_seg, r), 0);
	}
	ck_assert_int_eq(xseg_receive(xt_seg, CLIENT, got, HELD), 0);

	/* The queued ones wait for the new owner, in order. */
	int n = xseg_accept(xt_seg, SERVER, got, HELD + QUEUED);
	ck_assert_int_eq(n, QUEUED + 1);
	for (int i = 0; i < n; i++) {
		ck_assert_uint_eq(got[i]->offset, (uint64_t)HELD + (uint64_t)i);
		got[i]->result = XR_SERVED;
		ck_assert_int_eq(xseg_respond(xt_seg, got[i], SERVER), CLIENT);
	}
	receive_n(CLIENT, got, n);
	for (int i = 0; i < n; i++) {
		ck_assert(!xt_bitmap_set(&seen, got[i]->offset));
		ck_assert_uint_eq(got[i]->result, XR_SERVED);
		ck_assert_int_eq(xseg_put_request(xt_seg, got[i]), 0);
	}
	ck_assert_uint_eq(xt_bitmap_count(&seen), HELD + QUEUED + 1);
	xt_bitmap_free(&seen);
	assert_segment_whole();
}
END_TEST

/* ---- a dead server reaped by its client ------------------------------------ */

START_TEST(reaped_dead_server_fails_everything)
{
	enum { CLIENT = 0, SERVER = 1, HELD = 5, QUEUED = 3 };
	struct xseg_request *got[HELD + QUEUED];
	struct xseg_port_info pi;
	pid_t pid = start_server_holding(CLIENT, SERVER, HELD, QUEUED);

	/* Alive: nothing to reap. */
	ck_assert_int_eq(xseg_reap_port(xt_seg, SERVER, EHOSTDOWN), 0);
	ck_assert_int_eq(xseg_reap_port(xt_seg, SERVER, 0), -EINVAL);
	kill_and_reap(pid);
	ck_assert_int_eq(xseg_reap_port(xt_seg, SERVER, EHOSTDOWN), 1 + QUEUED);
	/* Unbound now: a second reap does nothing, a submit fails at once. */
	ck_assert_int_eq(xseg_reap_port(xt_seg, SERVER, EHOSTDOWN), 0);
	ck_assert_int_eq(xseg_port_info(xt_seg, SERVER, &pi), 0);
	ck_assert_int_eq(pi.owner, 0);
	ck_assert_uint_eq(pi.request_depth, 0);
	struct xseg_request *r = xseg_get_request(xt_seg, CLIENT);
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(xseg_submit(xt_seg, r, CLIENT, SERVER), -ENOENT);
	ck_assert_int_eq(xseg_put_request(xt_seg, r), 0);

	/* Every request is answered once: EPIPE for the accepted ones,
	 * EHOSTDOWN for the queued ones, cookies restored. */
	struct xt_bitmap seen;
	xt_bitmap_init(&seen, HELD + QUEUED);
	receive_n(CLIENT, got, HELD + QUEUED);
	for (int i = 0; i < HELD + QUEUED; i++) {
		r = got[i];
		ck_assert(!xt_bitmap_set(&seen, r->offset));
		ck_assert_uint_eq(r->result, XR_FAILED);
		ck_assert_int_eq(r->error, r->offset < HELD ? EPIPE : EHOSTDOWN);
		ck_assert_uint_eq(r->priv, xt_cookie(r->offset, SALT));
		ck_assert_int_eq(xseg_put_request(xt_seg, r), 0);
	}
	ck_assert_int_eq(xseg_receive(xt_seg, CLIENT, got, 1), 0);
	xt_bitmap_free(&seen);
	/* A new server binds the port as usual. */
	ck_assert_int_eq(xseg_bind_port(xt_seg, SERVER), 0);
	ck_assert_int_eq(xseg_leave_port(xt_seg, SERVER), 0);
	assert_segment_whole();
}
END_TEST

/* Submitters racing the reaps of a dead port: every submit that succeeded
 * gets exactly one reply (a request that slipped in during a reap is
 * failed by the next reap), every other fails ENOENT. */
struct racer {
	uint32_t port, dst;
	_Atomic bool stop;
	uint64_t sent;
};

static void *race_submits(void *arg)
{
	struct racer *r = arg;
	while (!atomic_load(&r->stop)) {
		struct xseg_request *req = xseg_get_request(xt_seg, r->port);
		if (!req)
			continue;
		if (xseg_submit(xt_seg, req, r->port, r->dst) >= 0)
			r->sent++;
		else
			ck_assert_int_eq(xseg_put_request(xt_seg, req), 0);
	}
	return NULL;
}

START_TEST(reaps_racing_submits_answer_every_request)
{
	enum { CLIENT = 0, SERVER = 1, RACER = 2 };
	int up[2];
	ck_assert_int_eq(pipe(up), 0);
	ck_assert_int_eq(xseg_bind_port(xt_seg, CLIENT), 0);
	ck_assert_int_eq(xseg_bind_port(xt_seg, RACER), 0);
	for (int round = 0; round < (int)xt_scaled(20, 4); round++) {
		struct racer r = { .port = RACER, .dst = SERVER };
		pthread_t tid;
		pid_t pid = fork_server(SERVER, 0, up[1]);
		wait_byte(up[0], 'r');
		wait_byte(up[0], 'a');
		/* submits race the kill and the reaps */
		ck_assert_int_eq(pthread_create(&tid, NULL, race_submits, &r), 0);
		kill_and_reap(pid);
		uint64_t got = 0;
		for (int i = 0; i < 200; i++) {
			ck_assert_int_ge(xseg_reap_port(xt_seg, SERVER, EHOSTDOWN), 0);
			struct xseg_request *rep[16];
			int n = xseg_receive(xt_seg, RACER, rep, 16);
			for (int k = 0; k < n; k++) {
				ck_assert_int_eq(rep[k]->error, EHOSTDOWN);
				ck_assert_int_eq(xseg_put_request(xt_seg, rep[k]), 0);
			}
			got += (uint64_t)(n > 0 ? n : 0);
		}
		atomic_store(&r.stop, true);
		pthread_join(tid, NULL);
		xseg_reap_port(xt_seg, SERVER, EHOSTDOWN);
		while (got < r.sent) {
			struct xseg_request *rep[1];
			receive_n(RACER, rep, 1);
			ck_assert_int_eq(rep[0]->error, EHOSTDOWN);
			ck_assert_int_eq(xseg_put_request(xt_seg, rep[0]), 0);
			got++;
		}
		ck_assert_uint_eq(got, r.sent);
	}
	assert_segment_whole();
}
END_TEST

/* ---- a forwarder killed between its client and its server ----------------- */

START_TEST(killed_forwarder_requests_fail_back)
{
	enum { CLIENT = 0, FWD = 1, SERVER = 2, N = 6, RECEIVED = 2 };
	struct xseg_request *got[N];
	int up[2], down[2];

	ck_assert_int_eq(pipe(up), 0);
	ck_assert_int_eq(pipe(down), 0);
	ck_assert_int_eq(xseg_bind_port(xt_seg, CLIENT), 0);
	ck_assert_int_eq(xseg_bind_port(xt_seg, SERVER), 0);
	pid_t pid = xt_fork(30);
	if (pid == 0) {
		struct xseg *seg;
		struct xseg_request *reqs[N];
		int n = 0;
		char c;
		XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
		XT_CHILD_CHECK(xseg_bind_port(seg, FWD) == 0, 3, "%s", xseg_last_error());
		XT_CHILD_CHECK(write(up[1], "r", 1) == 1, 5, "write");
		while (n < N) {
			int k = xseg_accept(seg, FWD, reqs + n, N - (unsigned)n);
			XT_CHILD_CHECK(k >= 0, 6, "%s", xseg_last_error());
			n += k;
			if (!k)
				xseg_poll(seg, FWD, 0, 100000000ull);
		}
		for (int i = 0; i < N; i++) {
			reqs[i]->priv = 0xf00d;
			XT_CHILD_CHECK(xseg_forward(seg, reqs[i], FWD, SERVER) == SERVER, 7,
				       "%s", xseg_last_error());
		}
		XT_CHILD_CHECK(write(up[1], "f", 1) == 1, 8, "write");
		XT_CHILD_CHECK(read(down[0], &c, 1) == 1, 9, "read");
		/* Take some replies, and die before answering the client. */
		n = 0;
		while (n < RECEIVED) {
			int k = xseg_receive(seg, FWD, reqs + n, RECEIVED - (unsigned)n);
			XT_CHILD_CHECK(k >= 0, 10, "%s", xseg_last_error());
			n += k;
		}
		XT_CHILD_CHECK(write(up[1], "g", 1) == 1, 11, "write");
		for (;;)
			pause();
	}
	wait_byte(up[0], 'r');
	for (uint64_t i = 0; i < N; i++)
		issue(CLIENT, FWD, i);
	wait_byte(up[0], 'f');
	int n = 0;
	uint64_t t0 = xseg_now_ns();
	while (n < N) {
		int k = xseg_accept(xt_seg, SERVER, got + n, N - (unsigned)n);
		ck_assert_int_ge(k, 0);
		n += k;
		ck_assert(xseg_now_ns() - t0 < 5000000000ull);
	}
	for (int i = 0; i < N; i++) {
		ck_assert_uint_eq(got[i]->path_len, 2);
		got[i]->result = XR_SERVED;
		ck_assert_int_eq(xseg_respond(xt_seg, got[i], SERVER), FWD);
	}
	ck_assert_int_eq(write(down[1], "c", 1), 1);
	wait_byte(up[0], 'g');
	kill_and_reap(pid);

	ck_assert_int_eq(xseg_bind_port(xt_seg, FWD), 0);
	/* Every one comes back to the client, failed: the forwarder died with
	 * them (RECEIVED of them in its hands, the rest in its reply queue). */
	receive_n(CLIENT, got, N);
	struct xt_bitmap seen;
	xt_bitmap_init(&seen, N);
	for (int i = 0; i < N; i++) {
		ck_assert_uint_lt(got[i]->offset, N);
		ck_assert(!xt_bitmap_set(&seen, got[i]->offset));
		ck_assert_uint_eq(got[i]->result, XR_FAILED);
		ck_assert_int_eq(got[i]->error, EPIPE);
		ck_assert_uint_eq(got[i]->priv, xt_cookie(got[i]->offset, SALT));
		ck_assert_uint_eq(got[i]->path_len, 0);
		ck_assert_int_eq(xseg_put_request(xt_seg, got[i]), 0);
	}
	xt_bitmap_free(&seen);
	ck_assert_int_eq(xseg_receive(xt_seg, FWD, got, N), 0);
	assert_segment_whole();
}
END_TEST

/* ---- killed at a random moment of heavy traffic, several times ----------- */

enum { MT_CLIENT = 0, MT_SERVER = 1, MT_DEPTH = 16 };

/*
 * A busy server that also allocates scratch buffers. It is killed while it
 * serves: with accepted requests in hand, more queued, its scratch request
 * perhaps held, mostly outside libxseg's calls (kills inside them are the
 * next test's).
 * `serving` (shared memory) tells the parent when, and for how long; the
 * parent sets `hold` when it wants to kill, and the server's next batch
 * then lasts until the kill (a second at most): the kill lands inside a
 * batch however the two processes are scheduled (with a window of a few
 * hundred microseconds, a loaded machine could keep the parent off its
 * CPU through every one: "server never busy").
 */
static _Atomic uint64_t *serving;    /* end of the current batch, or 0 */
static _Atomic uint64_t *hold;       /* set: the next batch waits for the kill */

static void busy_server(const char *name, int ready_fd)
{
	struct xseg *seg;
	struct xseg_request *reqs[MT_DEPTH];
	uint64_t n_served = 0;

	XT_CHILD_CHECK(xseg_join(name, &seg) == 0, 2, "%s", xseg_last_error());
	XT_CHILD_CHECK(xseg_bind_port(seg, MT_SERVER) == 0, 3, "%s", xseg_last_error());
	XT_CHILD_CHECK(write(ready_fd, "r", 1) == 1, 4, "write");
	for (;;) {
		int n = xseg_accept(seg, MT_SERVER, reqs, MT_DEPTH);
		XT_CHILD_CHECK(n >= 0, 5, "%s", xseg_last_error());
		if (n == 0) {
			xseg_poll(seg, MT_SERVER, 20000, 100000000ull);
			continue;
		}
		/* Some "work" per batch, with the accepted requests in hand. */
		uint64_t until = xseg_now_ns() + 30000 + (n_served % 8 == 0) * 300000;
		if (atomic_exchange(hold, 0))
			until = xseg_now_ns() + 1000000000ull;
		atomic_store(serving, until);
		while (xseg_now_ns() < until)
			;
		atomic_store(serving, 0);
		for (int i = 0; i < n; i++) {
			if (++n_served % 4 == 0) {
				struct xseg_request *s = xseg_get_request(seg, MT_SERVER);
				if (s) {
					xseg_prep_target(seg, s, "scratch", n_served % 5000);
					xseg_put_request(seg, s);
				}
			}
			reqs[i]->serviced = reqs[i]->size;
			reqs[i]->result = XR_SERVED;
			XT_CHILD_CHECK(xseg_respond(seg, reqs[i], MT_SERVER) == MT_CLIENT, 6,
				       "%s", xseg_last_error());
		}
	}
}

struct mt_state {
	struct xt_bitmap answered;
	uint64_t next, answered_n, served, failed, cancelled, held_by_dead;
	uint32_t inflight;
	uint32_t to;   /* the port requests go to */
};

static void mt_issue(struct mt_state *st)
{
	struct xseg_request *r = issue(MT_CLIENT, st->to ? st->to : MT_SERVER, st->next++);
	(void)r;
	st->inflight++;
}

/* Takes the replies there are; returns how many. */
static int mt_collect(struct mt_state *st)
{
	struct xseg_request *reqs[MT_DEPTH];
	int n = xseg_receive(xt_seg, MT_CLIENT, reqs, MT_DEPTH);
	XT_ASSERT(n >= 0, "%s", xseg_last_error());
	for (int i = 0; i < n; i++) {
		struct xseg_request *r = reqs[i];
		uint64_t seq = r->offset;
		XT_ASSERT(seq < st->next, "reply for %" PRIu64 " never issued", seq);
		XT_ASSERT(!xt_bitmap_set(&st->answered, seq), "%" PRIu64 " answered twice", seq);
		XT_ASSERT(r->priv == xt_cookie(seq, SALT), "cookie of %" PRIu64, seq);
		if (r->result == XR_SERVED)
			st->served++;
		else if (r->result == XR_FAILED && r->error == EPIPE)
			st->failed++;
		else if (r->result == XR_FAILED && (r->error == ECANCELED || r->error == EHOSTDOWN))
			st->cancelled++;   /* by the heir, or by a reap (ours or libxseg's own) */
		else
			ck_abort_msg("%" PRIu64 ": result %u error %d", seq, r->result, r->error);
		XT_ASSERT(xseg_put_request(xt_seg, r) == 0, "%s", xseg_last_error());
		st->answered_n++;
		st->inflight--;
	}
	return n;
}

/* The client's side: port MT_CLIENT bound, requests to `to` (0: the
 * server's port), a pipe for the victim's "ready". */
static void mt_init(struct mt_state *st, uint32_t to, int ready[2])
{
	memset(st, 0, sizeof(*st));
	st->to = to;
	xt_bitmap_init(&st->answered, 64ull << 20);
	ck_assert_int_eq(pipe(ready), 0);
	ck_assert_int_eq(xseg_bind_port(xt_seg, MT_CLIENT), 0);
}

/* Forks a victim and waits until it serves. */
static pid_t mt_start_victim(void (*victim)(const char *, int), int ready[2])
{
	pid_t pid = xt_fork(50);
	if (pid == 0)
		victim(xt_name, ready[1]);
	wait_byte(ready[0], 'r');
	return pid;
}

/* Keeps depth MT_DEPTH going until `until` requests are answered. */
static void mt_traffic_until(struct mt_state *st, uint64_t until, int round)
{
	uint64_t t0 = xseg_now_ns();
	while (st->answered_n < until) {
		while (st->inflight < MT_DEPTH)
			mt_issue(st);
		if (!mt_collect(st))
			xseg_poll(xt_seg, MT_CLIENT, 20000, 100000000ull);
		XT_ASSERT(xseg_now_ns() - t0 < 20000000000ull, "round %d stalled", round);
	}
}

START_TEST(killed_mid_traffic_repeatedly)
{
	const int rounds = (int)xt_scaled(10, 3);
	struct mt_state st;
	unsigned seed = (unsigned)getpid();
	int ready[2];

	serving = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert(serving != MAP_FAILED);
	hold = serving + 1;
	mt_init(&st, 0, ready);

	for (int round = 0; round < rounds; round++) {
		pid_t pid = mt_start_victim(busy_server, ready);

		/* Traffic for a random number of replies, then the kill lands
		 * while requests are in flight. */
		seed = seed * 1103515245u + 12345u;
		mt_traffic_until(&st, st.answered_n + 2000 + (seed >> 8) % 20000, round);
		while (st.inflight < MT_DEPTH)
			mt_issue(&st);
		uint64_t delay = xseg_now_ns() + (seed >> 4) % 100000;
		while (xseg_now_ns() < delay)
			;
		/* Catch it serving: its next batch waits for the kill. */
		atomic_store(hold, 1);
		uint64_t t1 = xseg_now_ns();
		for (;;) {
			/* Well inside a batch: the kill lands long before its end. */
			uint64_t end = atomic_load(serving);
			if (end > xseg_now_ns() + 150000)
				break;
			mt_collect(&st);                 /* keep the traffic going */
			while (st.inflight < MT_DEPTH)
				mt_issue(&st);
			XT_ASSERT(xseg_now_ns() - t1 < 10000000000ull, "server never busy");
		}
		ck_assert_int_eq(kill(pid, SIGKILL), 0);
		atomic_store(hold, 0);   /* (caught in another long batch: not for the next) */

		/* The survivor is not blocked: it goes on issuing to the dead
		 * port and takes whatever replies were already on their way. */
		for (int i = 0; i < 4; i++)
			mt_issue(&st);
		for (int i = 0; i < 20; i++) {
			mt_collect(&st);
			usleep(100);
		}
		int wst;
		ck_assert_int_eq(waitpid(pid, &wst, 0), pid);
		ck_assert(WIFSIGNALED(wst));

		for (uint32_t i = 0; i < NREQS; i++) {
			struct xseg_request *r = xseg_request_at(xt_seg, i);
			st.held_by_dead += r->holder == MT_SERVER && r->state == XS_ACCEPTED;
		}
		/* Take the port over: accepted requests come back failed, queued
		 * ones are ours to answer. */
		ck_assert_int_eq(xseg_bind_port(xt_seg, MT_SERVER), 0);
		/* Its sleeping threads died with it. */
		struct xseg_port_info pi;
		ck_assert_int_eq(xseg_port_info(xt_seg, MT_SERVER, &pi), 0);
		ck_assert_uint_eq(pi.waiters, 0);
		struct xseg_request *reqs[MT_DEPTH + 4];
		int n = xseg_accept(xt_seg, MT_SERVER, reqs, MT_DEPTH + 4);
		ck_assert_int_ge(n, 0);
		for (int i = 0; i < n; i++) {
			reqs[i]->result = XR_FAILED;
			reqs[i]->error = ECANCELED;
			ck_assert_int_eq(xseg_respond(xt_seg, reqs[i], MT_SERVER), MT_CLIENT);
		}
		uint64_t t0 = xseg_now_ns();
		while (st.inflight > 0) {
			mt_collect(&st);
			ck_assert_msg(xseg_now_ns() - t0 < 5000000000ull,
				      "round %d: %u requests never answered (first %" PRIu64 ")",
				      round, st.inflight, xt_bitmap_first_clear(&st.answered));
		}
		ck_assert_uint_eq(xt_free_requests(xt_seg), NREQS);
		ck_assert_int_eq(xseg_leave_port(xt_seg, MT_SERVER), 0);
	}
	ck_assert_uint_eq(st.answered_n, st.next);
	ck_assert_uint_eq(st.failed, st.held_by_dead);
	ck_assert_uint_ge(st.failed, (uint64_t)rounds);   /* each kill caught some */
	munmap((void *)serving, 4096);
	ck_assert_uint_eq(xt_bitmap_first_clear(&st.answered), st.next);
	fprintf(stderr, "mid-traffic kills: %d rounds, %" PRIu64 " requests: %" PRIu64
		" served, %" PRIu64 " failed back (EPIPE), %" PRIu64 " answered by the heir\n",
		rounds, st.next, st.served, st.failed, st.cancelled);
	/* The heap lock survived the kills and no buffer leaked. */
	assert_segment_whole();
	xt_bitmap_free(&st.answered);
}
END_TEST

/* ---- killed at any instruction, inside libxseg's calls too --------------- */

/* A server that does nothing but take and answer: most of its time is in
 * libxseg's accept and respond, where a kill lands. */
/* A child's segment with `port` bound, the parent told so. */
static struct xseg *bound_child(const char *name, uint32_t port, int ready_fd)
{
	struct xseg *seg;
	XT_CHILD_CHECK(xseg_join(name, &seg) == 0, 2, "%s", xseg_last_error());
	XT_CHILD_CHECK(xseg_bind_port(seg, port) == 0, 3, "%s", xseg_last_error());
	XT_CHILD_CHECK(write(ready_fd, "r", 1) == 1, 4, "write");
	return seg;
}

static void bare_server(const char *name, int ready_fd)
{
	struct xseg *seg = bound_child(name, MT_SERVER, ready_fd);
	struct xseg_request *reqs[MT_DEPTH];

	for (;;) {
		int n = xseg_accept(seg, MT_SERVER, reqs, MT_DEPTH);
		XT_CHILD_CHECK(n >= 0, 5, "%s", xseg_last_error());
		if (n == 0)
			xseg_poll(seg, MT_SERVER, 20000, 100000000ull);
		for (int i = 0; i < n; i++) {
			reqs[i]->serviced = reqs[i]->size;
			reqs[i]->result = XR_SERVED;
			XT_CHILD_CHECK(xseg_respond(seg, reqs[i], MT_SERVER) >= 0, 6,
				       "%s", xseg_last_error());
		}
	}
}

enum { MT_FORWARDER = 2 };

/* A forwarder that does nothing but pass requests on to MT_SERVER and the
 * replies back: its time is in accept, forward, receive and respond. */
static void bare_forwarder(const char *name, int ready_fd)
{
	struct xseg *seg = bound_child(name, MT_FORWARDER, ready_fd);
	struct xseg_request *reqs[MT_DEPTH];

	for (;;) {
		int n = xseg_accept(seg, MT_FORWARDER, reqs, MT_DEPTH);
		XT_CHILD_CHECK(n >= 0, 5, "%s", xseg_last_error());
		for (int i = 0; i < n; i++)
			XT_CHILD_CHECK(xseg_forward(seg, reqs[i], MT_FORWARDER, MT_SERVER) >= 0, 6,
				       "%s", xseg_last_error());
		int k = xseg_receive(seg, MT_FORWARDER, reqs, MT_DEPTH);
		XT_CHILD_CHECK(k >= 0, 7, "%s", xseg_last_error());
		for (int i = 0; i < k; i++)
			XT_CHILD_CHECK(xseg_respond(seg, reqs[i], MT_FORWARDER) == MT_CLIENT, 8,
				       "%s", xseg_last_error());
		if (n == 0 && k == 0)
			xseg_poll(seg, MT_FORWARDER, 20000, 100000000ull);
	}
}

/*
 * `victim` (a bare server or forwarder on its port) is SIGKILLed, `rounds`
 * times, at a random moment of full-speed traffic, so mostly inside a push
 * or a take. Every request must come back exactly once (served, failed
 * back, or answered by whoever takes the port over) and the pool must be
 * whole. Even rounds take the port over, odd ones reap it.
 */
static void kill_inside_calls(void (*victim)(const char *, int), uint32_t port, int rounds)
{
	struct mt_state st;
	unsigned seed = (unsigned)getpid();
	int ready[2];

	mt_init(&st, port, ready);
	for (int round = 0; round < rounds; round++) {
		pid_t pid = mt_start_victim(victim, ready);
		seed = seed * 1103515245u + 12345u;
		mt_traffic_until(&st, st.answered_n + 500 + (seed >> 8) % 5000, round);
		/* The kill comes from aside while the traffic goes on at full
		 * speed, so that it finds the victim busy. */
		pid_t killer = fork();
		ck_assert_int_ge(killer, 0);
		if (killer == 0) {
			usleep((seed >> 4) % 2000);
			kill(pid, SIGKILL);
			_exit(0);
		}
		int wst;
		uint64_t t0 = xseg_now_ns();
		while (waitpid(pid, &wst, WNOHANG) == 0) {
			while (st.inflight < MT_DEPTH)
				mt_issue(&st);
			mt_collect(&st);
			XT_ASSERT(xseg_now_ns() - t0 < 10000000000ull, "the victim outlived its kill");
		}
		ck_assert_int_eq(waitpid(killer, &wst, 0), killer);
		if (round % 2 == 0) {
			/* A live reaper holds the port a moment; libxseg waits 1 s
			 * for it, which two copies of this test on two CPUs have
			 * outlasted (EBUSY): the heir tries again. */
			int rc;
			uint64_t t1 = xseg_now_ns();
			while ((rc = xseg_bind_port(xt_seg, port)) == -EBUSY &&
			       xseg_now_ns() - t1 < 10000000000ull)
				usleep(1000);
			ck_assert_int_eq(rc, 0);
			struct xseg_request *reqs[NREQS];
			int n = xseg_accept(xt_seg, port, reqs, NREQS);
			ck_assert_int_ge(n, 0);
			for (int i = 0; i < n; i++) {
				reqs[i]->result = XR_FAILED;
				reqs[i]->error = ECANCELED;
				ck_assert_int_eq(xseg_respond(xt_seg, reqs[i], port), MT_CLIENT);
			}
		} else {
			/* (0 when a peer that sent to it reaped it first) */
			ck_assert_int_ge(xseg_reap_port(xt_seg, port, ECANCELED), 0);
		}
		t0 = xseg_now_ns();
		while (st.inflight > 0) {
			mt_collect(&st);
			/* What reaches the port after the takeover: a reply for the
			 * dead owner is settled when the heir receives (stale), what
			 * slips into an unbound port's queues by a later reap. */
			struct xseg_request *late;
			if (round % 2 == 0)
				ck_assert_int_eq(xseg_receive(xt_seg, port, &late, 1), 0);
			else
				xseg_reap_port(xt_seg, port, ECANCELED);
			ck_assert_msg(xseg_now_ns() - t0 < 5000000000ull,
				      "round %d: %u requests never answered (first %" PRIu64 ")",
				      round, st.inflight, xt_bitmap_first_clear(&st.answered));
		}
		if (round % 2 == 0)
			ck_assert_int_eq(xseg_leave_port(xt_seg, port), 0);
	}
	ck_assert_uint_eq(st.answered_n, st.next);
	ck_assert_uint_eq(xt_bitmap_first_clear(&st.answered), st.next);
	fprintf(stderr, "kills inside libxseg (port %u): %d rounds, %" PRIu64 " requests: %" PRIu64
		" served, %" PRIu64 " failed back (EPIPE), %" PRIu64 " answered by the heir "
		"or the reaper\n", port, rounds, st.next, st.served, st.failed, st.cancelled);
	xt_bitmap_free(&st.answered);
}

START_TEST(server_killed_inside_its_libxseg_calls_repeatedly)
{
	kill_inside_calls(bare_server, MT_SERVER, (int)xt_scaled(60, 12));
	ck_assert_uint_eq(xt_free_requests(xt_seg), NREQS);
	assert_segment_whole();
}
END_TEST

/* The same for a forwarder in front of a server that stays. */
START_TEST(forwarder_killed_inside_its_libxseg_calls_repeatedly)
{
	int ready[2];
	ck_assert_int_eq(pipe(ready), 0);
	pid_t server = xt_fork(50);
	if (server == 0)
		bare_server(xt_name, ready[1]);
	wait_byte(ready[0], 'r');
	kill_inside_calls(bare_forwarder, MT_FORWARDER, (int)xt_scaled(60, 12));
	ck_assert_int_eq(kill(server, SIGKILL), 0);
	int wst;
	ck_assert_int_eq(waitpid(server, &wst, 0), server);
	ck_assert_int_ge(xseg_reap_port(xt_seg, MT_SERVER, ECANCELED), 1);
	ck_assert_uint_eq(xt_free_requests(xt_seg), NREQS);
	assert_segment_whole();
}
END_TEST

static void setup(void)
{
	xt_setup_with(4, NREQS, 256 << 10);
}

int main(void)
{
	Suite *s = suite_create("xseg_takeover");
	TCase *tc = tcase_create("takeover");
	tcase_set_timeout(tc, 55);
	tcase_add_checked_fixture(tc, setup, xt_teardown);
	tcase_add_test(tc, killed_server_requests_fail_back);
	tcase_add_test(tc, out_of_files_never_takes_a_live_port);
	tcase_add_test(tc, reaped_dead_server_fails_everything);
	tcase_add_test(tc, reaps_racing_submits_answer_every_request);
	tcase_add_test(tc, killed_forwarder_requests_fail_back);
	tcase_add_test(tc, killed_mid_traffic_repeatedly);
	tcase_add_test(tc, server_killed_inside_its_libxseg_calls_repeatedly);
	tcase_add_test(tc, forwarder_killed_inside_its_libxseg_calls_repeatedly);
	suite_add_tcase(s, tc);
	return xt_run(s);
}
