/*
 * A reaper is a process too, and may die at any instruction of its reap:
 * the port it reaped is then its own and dead, and the next reap must
 * finish what it left. The reaper takes a request back from a push or a
 * pool pop of the dead by a CAS of the request's tag, then pushes it
 * again. Its CAS wrote RESUMED, a tag that no later reap takes for one
 * it must finish: a reaper killed right after it left the request in no
 * queue for good (a submit never answered), or out of the pool for good.
 *
 * A process is killed at an exact instruction by a hardware breakpoint
 * on the request's tag (perf_event_open, a SIGTRAP right after the nth
 * write to it, whose handler SIGKILLs the process). Where the kernel
 * cannot do that, the tests say SKIP and pass.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <linux/hw_breakpoint.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/xseg_test_util.h"
#include "../src/xseg_internal.h"   /* the pool's ring, the push tags */

enum { CLIENT = 1, SERVER = 2, VICTIM = 5, NO_BREAKPOINT = 77 };

static volatile sig_atomic_t writes_left;

static void on_write(int sig)
{
	(void)sig;
	if (--writes_left == 0)
		kill(getpid(), SIGKILL);
}

/* A SIGTRAP to the calling thread right after each write to the len
 * bytes at addr (perf's sigtrap: Linux 5.13 and its headers). */
static bool watch_writes_len(const void *addr, unsigned len)
{
#ifdef PERF_ATTR_SIZE_VER7
	struct perf_event_attr a = {
		.type = PERF_TYPE_BREAKPOINT, .size = sizeof(a),
		.bp_type = HW_BREAKPOINT_W, .bp_addr = (uintptr_t)addr, .bp_len = len,
		.sample_period = 1, .sigtrap = 1, .remove_on_exec = 1,
		.exclude_kernel = 1, .exclude_hv = 1 };
	return syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC) >= 0;
#else
	(void)addr;
	(void)len;
	return false;
#endif
}

static bool watch_writes(const void *addr)
{
	return watch_writes_len(addr, HW_BREAKPOINT_LEN_8);
}

static bool on_trap(int nth)
{
	struct sigaction sa = { .sa_handler = on_write };
	sigemptyset(&sa.sa_mask);
	writes_left = nth;
	return sigaction(SIGTRAP, &sa, NULL) == 0;
}

/* The calling thread dies right after its nth write to *addr; false
 * where no hardware breakpoint can be had. */
static bool die_after_write(const void *addr, int nth)
{
	return on_trap(nth) && watch_writes(addr);
}

/* The same, after its nth write to any of a request's words that say where
 * it is (state and ports, holder, tag, return path's length). */
static bool die_after_request_write(const struct xseg_request *r, int nth)
{
	return on_trap(nth) && watch_writes(&r->state) && watch_writes(&r->dst_port) &&
	       watch_writes(&r->pushing) && watch_writes(&r->path_len);
}

/* Waits for pid: true when it was killed (at its breakpoint), false when
 * it said there was none (the test then skips). */
static bool killed(pid_t pid, const char *what)
{
	int st = xt_wait_child(pid, 10000);
	ck_assert_msg(st != -1, "%s did not finish", what);
	if (WIFEXITED(st) && WEXITSTATUS(st) == NO_BREAKPOINT) {
		fprintf(stderr, "SKIP: no hardware breakpoint (perf_event_open) here\n");
		return false;
	}
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
		      "%s was not killed at its breakpoint (status %#x)", what, st);
	return true;
}

/* A reaper of VICTIM killed right after its first write to request idx's
 * tag. */
static bool reaper_killed_at(uint32_t idx)
{
	pid_t pid = xt_fork(20);
	if (pid == 0) {
		struct xseg *seg;
		XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
		if (!die_after_write(&xseg_request_at(seg, idx)->pushing, 1))
			_exit(NO_BREAKPOINT);
		XT_CHILD_CHECK(xseg_reap_port(seg, VICTIM, EHOSTDOWN) > 0, 3, "%s",
			       xseg_last_error());
		_exit(4);   /* it never wrote the tag */
	}
	return killed(pid, "the reaper");
}

/* Each request of the pool in its ring exactly once, nothing held. */
static void expect_pool_whole(const char *what)
{
	struct xseg_segment_info si;
	ck_assert_int_eq(xseg_segment_info(xt_seg, &si), 0);
	uint8_t *queued = calloc(si.nr_requests, 1);
	ck_assert_ptr_nonnull(queued);
	xseg_ring_mark_queued(xt_seg->free_ring, queued, si.nr_requests);
	uint32_t distinct = 0, lost = UINT32_MAX;
	for (uint32_t i = 0; i < si.nr_requests; i++) {
		distinct += queued[i];
		if (!queued[i] && lost == UINT32_MAX)
			lost = i;
	}
	free(queued);
	struct xseg_request *l = lost < si.nr_requests ? xseg_request_at(xt_seg, lost) : NULL;
	ck_assert_msg(si.free_requests == si.nr_requests && distinct == si.nr_requests,
		      "%s: the pool has %u of %u requests (%u distinct; request %u is in no "
		      "ring, state %u, holder %u, tag %#llx)", what, si.free_requests,
		      si.nr_requests, distinct, lost, l ? l->state : 0, l ? l->holder : 0,
		      l ? (unsigned long long)l->pushing : 0);
}

/*
 * VICTIM's owner dies inside its submit to SERVER, before the ring took
 * the request (right after the push's tag named its ring position); the
 * reaper that pushes it again for the dead is killed right after its CAS
 * of the tag. The next reap must still deliver it to SERVER.
 */
START_TEST(a_reaper_killed_inside_a_resumed_push_loses_no_request)
{
	ck_assert_int_eq(xseg_bind_port(xt_seg, SERVER), 0);
	int idx_pipe[2];
	ck_assert_int_eq(pipe(idx_pipe), 0);
	pid_t pid = xt_fork(20);
	if (pid == 0) {
		struct xseg *seg;
		XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
		XT_CHILD_CHECK(xseg_bind_port(seg, VICTIM) == 0, 3, "%s", xseg_last_error());
		struct xseg_request *r = xseg_get_request(seg, VICTIM);
		XT_CHILD_CHECK(r, 4, "%s", xseg_last_error());
		XT_CHILD_CHECK(xseg_prep_target(seg, r, "lost", 512) == 0, 5, "%s",
			       xseg_last_error());
		r->op = X_READ;
		r->size = 512;
		XT_CHILD_CHECK(write(idx_pipe[1], &r->index, sizeof(r->index)) ==
			       sizeof(r->index), 6, "write");
		/* deliver's writes: its tag, then the ring's position */
		if (!die_after_write(&r->pushing, 2))
			_exit(NO_BREAKPOINT);
		xseg_submit(seg, r, VICTIM, SERVER);
		_exit(7);
	}
	close(idx_pipe[1]);
	uint32_t idx;
	ck_assert_int_eq(read(idx_pipe[0], &idx, sizeof(idx)), sizeof(idx));
	close(idx_pipe[0]);
	if (!killed(pid, "the submitter"))
		return;
	struct xseg_request *w = xseg_request_at(xt_seg, idx);
	ck_assert_uint_eq(w->state, XS_QUEUED);
	ck_assert(!(w->pushing & XSEG_PUSH_DONE));

	if (!reaper_killed_at(idx))
		return;
	ck_assert_int_ge(xseg_reap_port(xt_seg, VICTIM, EHOSTDOWN), 1);

	struct xseg_request *got = NULL;
	int n = xseg_accept(xt_seg, SERVER, &got, 1);
	ck_assert_msg(n == 1, "the request whose push a killed reaper resumed never reached "
		      "its server (request %u: state %u, holder %u, tag %#llx)", idx, w->state,
		      w->holder, (unsigned long long)w->pushing);
	ck_assert_uint_eq(got->index, idx);
	/* Its issuer is gone: the answer puts it back in the pool. */
	got->result = XR_SERVED;
	ck_assert_int_ge(xseg_respond(xt_seg, got, SERVER), 0);
	expect_pool_whole("a reaper killed inside a resumed push");
}
END_TEST

/*
 * VICTIM's owner popped a request off the pool's ring and died before it
 * claimed it; the reaper that puts it back is killed right after its CAS
 * of the tag. The next reap must still put it back.
 */
START_TEST(a_reaper_killed_inside_a_pool_settle_loses_no_request)
{
	int idx_pipe[2];
	ck_assert_int_eq(pipe(idx_pipe), 0);
	pid_t pid = xt_fork(20);
	if (pid == 0) {
		struct xseg *seg;
		XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
		XT_CHILD_CHECK(xseg_bind_port(seg, VICTIM) == 0, 3, "%s", xseg_last_error());
		uint32_t idx;
		uint64_t at;
		XT_CHILD_CHECK(xseg_ring_pop_at(seg->free_ring, &idx, &at), 4, "pop");
		XT_CHILD_CHECK(write(idx_pipe[1], &idx, sizeof(idx)) == sizeof(idx), 5, "write");
		for (;;)
			pause();
	}
	close(idx_pipe[1]);
	uint32_t idx;
	ck_assert_int_eq(read(idx_pipe[0], &idx, sizeof(idx)), sizeof(idx));
	close(idx_pipe[0]);
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert(killed(pid, "the taker"));

	if (!reaper_killed_at(idx))
		return;
	ck_assert_int_ge(xseg_reap_port(xt_seg, VICTIM, EHOSTDOWN), 1);
	expect_pool_whole("a reaper killed inside its pool settle");
}
END_TEST

/*
 * What a dead VICTIM leaves of a request W from CLIENT: queued on its
 * ring, accepted, popped and not yet claimed (limbo), forwarded to SERVER
 * and answered back onto its reply ring. Its reaper is killed right after
 * its 1st, 2nd, ... write to W's words, until one finishes; after each,
 * a reap by the test must answer W to CLIENT once, and the pool be whole
 * once CLIENT puts it.
 */
enum left { QUEUED, ACCEPTED, LIMBO, REPLIED, LEFT_KINDS };
static const char *const left_name[] = { "queued", "accepted", "limbo", "replied" };

/* VICTIM and VICTIM + 1 bound as lanes: the request queued on either. */
static bool lanes_mode;

static void dead_victim_leaves(enum left how, int go_fd, int done_fd)
{
	struct xseg *seg;
	XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
	XT_CHILD_CHECK((lanes_mode ? xseg_bind_lanes(seg, VICTIM, VICTIM + 1)
				   : xseg_bind_port(seg, VICTIM)) == 0, 3, "%s", xseg_last_error());
	uint32_t lane = VICTIM;
	XT_CHILD_CHECK(write(done_fd, "b", 1) == 1, 4, "write");
	char ch;
	XT_CHILD_CHECK(read(go_fd, &ch, 1) == 1, 5, "read");
	struct xseg_request *r = NULL;
	uint32_t idx;
	uint64_t at;
	switch (how) {
	case QUEUED:
		break;
	case ACCEPTED:
	case REPLIED:
		if (xseg_accept(seg, lane, &r, 1) != 1)
			lane++;
		XT_CHILD_CHECK(r || xseg_accept(seg, lane, &r, 1) == 1, 6, "accept");
		if (how == REPLIED)
			XT_CHILD_CHECK(xseg_forward(seg, r, lane, SERVER) == SERVER, 7, "%s",
				       xseg_last_error());
		break;
	case LIMBO:
		XT_CHILD_CHECK(xseg_ring_pop_at(xseg_req_ring(seg, VICTIM), &idx, &at) ||
			       xseg_ring_pop_at(xseg_req_ring(seg, VICTIM + 1), &idx, &at), 8,
			       "pop");
		break;
	default:
		break;
	}
	XT_CHILD_CHECK(write(done_fd, "d", 1) == 1, 9, "write");
	for (;;)
		pause();
}

/* Returns whether the reaper finished (was never killed). */
static bool one_killed_reap(enum left how, const int *nth, int depth, bool *skip)
{
	int go[2], done[2];
	ck_assert_int_eq(pipe(go), 0);
	ck_assert_int_eq(pipe(done), 0);
	pid_t pid = xt_fork(20);
	if (pid == 0) {
		close(go[1]);
		close(done[0]);
		dead_victim_leaves(how, go[0], done[1]);
	}
	close(go[0]);
	close(done[1]);
	char ch;
	ck_assert_int_eq(read(done[0], &ch, 1), 1);
	struct xseg_request *w = xseg_get_request(xt_seg, CLIENT);
	ck_assert_ptr_nonnull(w);
	w->op = X_READ;
	w->size = 512;
	w->priv = 0xc0ffee;
	uint32_t idx = w->index;
	int lane = xseg_submit(xt_seg, w, CLIENT, VICTIM);
	ck_assert(lane == VICTIM || (lanes_mode && lane == VICTIM + 1));
	ck_assert_int_eq(write(go[1], "g", 1), 1);
	ck_assert_int_eq(read(done[0], &ch, 1), 1);
	close(go[1]);
	close(done[0]);
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert(killed(pid, "the victim"));
	if (how == REPLIED) {
		struct xseg_request *f = NULL;
		ck_assert_int_eq(xseg_accept(xt_seg, SERVER, &f, 1), 1);
		ck_assert_uint_eq(f->index, idx);
		f->result = XR_SERVED;
		f->serviced = f->size;
		int back = xseg_respond(xt_seg, f, SERVER);
		ck_assert(back == VICTIM || (lanes_mode && back == VICTIM + 1));
	}

	/* Reapers killed one after another, at their nth[k] writes. */
	bool finished = false;
	for (int k = 0; k < depth && !finished; k++) {
		pid = xt_fork(20);
		if (pid == 0) {
			struct xseg *seg;
			XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
			if (!die_after_request_write(xseg_request_at(seg, idx), nth[k]))
				_exit(NO_BREAKPOINT);
			XT_CHILD_CHECK(xseg_reap_port(seg, VICTIM, EHOSTDOWN) >= 0, 3, "%s",
				       xseg_last_error());
			XT_CHILD_CHECK(!lanes_mode || xseg_reap_port(seg, VICTIM + 1, EHOSTDOWN) >= 0,
				       3, "%s", xseg_last_error());
			_exit(0);
		}
		int st = xt_wait_child(pid, 10000);
		ck_assert_msg(st != -1, "the reaper did not finish");
		if (WIFEXITED(st) && WEXITSTATUS(st) == NO_BREAKPOINT) {
			*skip = true;
			return true;
		}
		ck_assert_msg((WIFEXITED(st) && WEXITSTATUS(st) == 0) ||
			      (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL),
			      "the reaper failed (status %#x)", st);
		finished = WIFEXITED(st);
	}
	ck_assert_int_ge(xseg_reap_port(xt_seg, VICTIM, EHOSTDOWN), 0);
	ck_assert_int_ge(xseg_reap_port(xt_seg, VICTIM + 1, EHOSTDOWN), 0);

	struct xseg_request *got = NULL;
	int n = 0;
	for (int tries = 0; tries < 500 && n == 0; tries++) {
		n = xseg_receive(xt_seg, CLIENT, &got, 1);
		if (n == 0)
			usleep(1000);
	}
	struct xseg_request *l = xseg_request_at(xt_seg, idx);
	char what[100];
	snprintf(what, sizeof(what), "%s%s, reapers killed after their writes %d, %d to it",
		 left_name[how], lanes_mode ? " on lanes" : "", nth[0], depth > 1 ? nth[1] : 0);
	ck_assert_msg(n == 1, "%s: request %u never "
		      "answered (state %u, holder %u, tag %#llx, path_len %u)", what, idx, l->state, l->holder, (unsigned long long)l->pushing, l->path_len);
	ck_assert_uint_eq(got->index, idx);
	ck_assert_uint_eq(got->priv, 0xc0ffee);
	ck_assert_int_eq(xseg_put_request(xt_seg, got), 0);
	ck_assert_int_eq(xseg_receive(xt_seg, CLIENT, &got, 1), 0);
	expect_pool_whole(what);
	return finished;
}

static void reapers_killed_at_any_write(void)
{
	ck_assert_int_eq(xseg_bind_port(xt_seg, SERVER), 0);
	for (int how = 0; how < LEFT_KINDS; how++) {
		bool skip = false;
		int nth[2] = { 1, 1 }, runs = 0;
		/* The first reaper killed at each of its writes, and then the
		 * second one at each of its own. */
		for (;; nth[0]++) {
			bool first_finished = one_killed_reap((enum left)how, nth, 1, &skip);
			if (skip) {
				fprintf(stderr, "SKIP: no hardware breakpoint (perf_event_open) here\n");
				return;
			}
			if (first_finished)
				break;
			for (nth[1] = 1; !one_killed_reap((enum left)how, nth, 2, &skip); nth[1]++)
				runs++;
		}
		fprintf(stderr, "%s%s: a reaper killed after each of its %d writes, then %d more "
			"reapers killed\n", left_name[how], lanes_mode ? " on lanes" : "",
			nth[0] - 1, runs);
	}
}

START_TEST(a_reaper_killed_at_any_write_of_a_request_loses_it_not)
{
	reapers_killed_at_any_write();
}
END_TEST

START_TEST(a_lanes_reaper_killed_at_any_write_of_a_request_loses_it_not)
{
	lanes_mode = true;
	reapers_killed_at_any_write();
}
END_TEST

/*
 * VICTIM serves W (accept, respond) and is killed after its vn-th write
 * to W's words; then the one that takes its port over, a reaper or a new
 * owner binding it, is killed after its rn-th; then the test reaps. W
 * must be answered to CLIENT once.
 */
static int serve_sweep_once(int vn, int rn, bool binder, bool *skip)
{
	int go[2], done[2];
	ck_assert_int_eq(pipe(go), 0);
	ck_assert_int_eq(pipe(done), 0);
	pid_t pid = xt_fork(20);
	if (pid == 0) {
		close(go[1]);
		close(done[0]);
		struct xseg *seg;
		XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
		XT_CHILD_CHECK(xseg_bind_port(seg, VICTIM) == 0, 3, "%s", xseg_last_error());
		XT_CHILD_CHECK(write(done[1], "b", 1) == 1, 4, "write");
		uint32_t idx;
		XT_CHILD_CHECK(read(go[0], &idx, sizeof(idx)) == sizeof(idx), 5, "read");
		if (!die_after_request_write(xseg_request_at(seg, idx), vn))
			_exit(NO_BREAKPOINT);
		struct xseg_request *r = NULL;
		XT_CHILD_CHECK(xseg_accept(seg, VICTIM, &r, 1) == 1, 6, "accept");
		r->result = XR_SERVED;
		r->serviced = r->size;
		XT_CHILD_CHECK(xseg_respond(seg, r, VICTIM) == CLIENT, 7, "%s", xseg_last_error());
		_exit(0);
	}
	close(go[0]);
	close(done[1]);
	char ch;
	ck_assert_int_eq(read(done[0], &ch, 1), 1);
	close(done[0]);
	struct xseg_request *w = xseg_get_request(xt_seg, CLIENT);
	ck_assert_ptr_nonnull(w);
	w->op = X_READ;
	w->size = 512;
	w->priv = 0xc0ffee;
	uint32_t idx = w->index;
	ck_assert_int_eq(xseg_submit(xt_seg, w, CLIENT, VICTIM), VICTIM);
	ck_assert_int_eq(write(go[1], &idx, sizeof(idx)), sizeof(idx));
	close(go[1]);
	int st = xt_wait_child(pid, 10000);
	ck_assert_msg(st != -1, "the victim did not finish");
	if (WIFEXITED(st) && WEXITSTATUS(st) == NO_BREAKPOINT) {
		*skip = true;
		return 3;
	}
	ck_assert_msg((WIFEXITED(st) && WEXITSTATUS(st) == 0) ||
		      (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL),
		      "the victim failed (status %#x)", st);
	int finished = WIFEXITED(st) ? 1 : 0;

	pid = xt_fork(20);
	if (pid == 0) {
		struct xseg *seg;
		XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
		if (!die_after_request_write(xseg_request_at(seg, idx), rn))
			_exit(NO_BREAKPOINT);
		if (binder)
			XT_CHILD_CHECK(xseg_bind_port(seg, VICTIM) == 0, 3, "%s",
				       xseg_last_error());
		else
			XT_CHILD_CHECK(xseg_reap_port(seg, VICTIM, EHOSTDOWN) >= 0, 3, "%s",
				       xseg_last_error());
		_exit(0);   /* a binder dies owning it */
	}
	st = xt_wait_child(pid, 10000);
	ck_assert_msg(st != -1, "the reaper did not finish");
	ck_assert_msg((WIFEXITED(st) && WEXITSTATUS(st) == 0) ||
		      (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL),
		      "the reaper failed (status %#x)", st);
	if (WIFEXITED(st))
		finished |= 2;
	ck_assert_int_ge(xseg_reap_port(xt_seg, VICTIM, EHOSTDOWN), 0);

	struct xseg_request *got = NULL;
	int n = 0;
	for (int tries = 0; tries < 500 && n == 0; tries++) {
		n = xseg_receive(xt_seg, CLIENT, &got, 1);
		if (n == 0)
			usleep(1000);
	}
	struct xseg_request *l = xseg_request_at(xt_seg, idx);
	char what[120];
	snprintf(what, sizeof(what), "served, victim killed after its write %d, %s after its %d",
		 vn, binder ? "binder" : "reaper", rn);
	ck_assert_msg(n == 1, "%s: request %u never answered (state %u, holder %u, tag %#llx, "
		      "path_len %u)", what, idx, l->state, l->holder,
		      (unsigned long long)l->pushing, l->path_len);
	ck_assert_uint_eq(got->index, idx);
	ck_assert_uint_eq(got->priv, 0xc0ffee);
	ck_assert_int_eq(xseg_put_request(xt_seg, got), 0);
	ck_assert_int_eq(xseg_receive(xt_seg, CLIENT, &got, 1), 0);
	expect_pool_whole(what);
	return finished;
}

START_TEST(a_server_and_its_heir_killed_at_any_write_lose_no_answer)
{
	int runs = 0;
	for (int binder = 0; binder < 2; binder++)
		for (int vn = 1;; vn++) {
			bool skip = false;
			int rn = 1, f;
			while (!((f = serve_sweep_once(vn, rn, binder, &skip)) & 2))
				rn++, runs++;
			if (skip) {
				fprintf(stderr, "SKIP: no hardware breakpoint (perf_event_open) here\n");
				return;
			}
			if (f & 1)
				break;
		}
	fprintf(stderr, "served: %d kills of a server and its heir\n", runs);
}
END_TEST

/*
 * A push that saw its port owned can land after the owner left and looked
 * at its queue for the last time: the pusher then looks at the owner and
 * reaps the port (settle_if_released). A pusher killed between its push
 * and that look leaves the request on the queue of a port nobody owns,
 * which nobody takes from: its reaper must look in its stead. VICTIM
 * forwards CLIENT's request to SERVER; stalled in its push (after its
 * first write to the tag, past its look at SERVER's owner), SERVER's owner
 * leaves; VICTIM then pushes and is killed right after its push is DONE.
 * The client's reap of the dead VICTIM must get the request answered.
 */
static volatile sig_atomic_t traps;
static int stall_at, kill_at, stall_note_fd, stall_go_fd;

static void stall_or_die(int sig)
{
	(void)sig;
	int n = ++traps;
	char ch = 's';
	if (n == stall_at && write(stall_note_fd, &ch, 1) == 1 && read(stall_go_fd, &ch, 1))
		return;
	if (n == kill_at)
		kill(getpid(), SIGKILL);
}

enum heir { REAP, BIND, REAPER_KILLED_AFTER_RELEASE };

static void pusher_killed_after_push_onto_left_port(enum heir heir)
{
	bool bind_heir = heir == BIND;
	ck_assert_int_eq(xseg_bind_port(xt_seg, SERVER), 0);
	int go[2], note[2];
	ck_assert_int_eq(pipe(go), 0);
	ck_assert_int_eq(pipe(note), 0);
	pid_t pid = xt_fork(20);
	if (pid == 0) {
		close(go[1]);
		close(note[0]);
		struct xseg *seg;
		XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
		XT_CHILD_CHECK(xseg_bind_port(seg, VICTIM) == 0, 3, "%s", xseg_last_error());
		XT_CHILD_CHECK(write(note[1], "b", 1) == 1, 4, "write");
		uint32_t idx;
		XT_CHILD_CHECK(read(go[0], &idx, sizeof(idx)) == sizeof(idx), 5, "read");
		struct xseg_request *r = NULL;
		XT_CHILD_CHECK(xseg_accept(seg, VICTIM, &r, 1) == 1, 6, "accept");
		/* deliver's writes to the tag: its own, the ring's, DONE */
		struct sigaction sa = { .sa_handler = stall_or_die };
		sigemptyset(&sa.sa_mask);
		stall_at = 1;
		kill_at = 3;
		stall_note_fd = note[1];
		stall_go_fd = go[0];
		if (sigaction(SIGTRAP, &sa, NULL) < 0 || !watch_writes(&r->pushing))
			_exit(NO_BREAKPOINT);
		xseg_forward(seg, r, VICTIM, SERVER);
		_exit(7);
	}
	close(go[0]);
	close(note[1]);
	char ch;
	ck_assert_int_eq(read(note[0], &ch, 1), 1);
	struct xseg_request *w = xseg_get_request(xt_seg, CLIENT);
	ck_assert_ptr_nonnull(w);
	w->op = X_READ;
	w->size = 512;
	w->priv = 0xc0ffee;
	uint32_t idx = w->index;
	ck_assert_int_eq(xseg_submit(xt_seg, w, CLIENT, VICTIM), VICTIM);
	ck_assert_int_eq(write(go[1], &idx, sizeof(idx)), sizeof(idx));
	if (read(note[0], &ch, 1) != 1) {   /* no stall: it said why */
		ck_assert(!killed(pid, "the forwarder"));
		return;
	}
	ck_assert_int_eq(xseg_leave_port(xt_seg, SERVER), 0);
	ck_assert_int_eq(write(go[1], "g", 1), 1);
	close(go[1]);
	close(note[0]);
	ck_assert(killed(pid, "the forwarder"));
	w = xseg_request_at(xt_seg, idx);
	ck_assert_uint_eq(w->state, XS_QUEUED);
	ck_assert_uint_eq(w->holder, SERVER);

	/* As the client's wait does; or a new owner of the port. */
	if (heir == REAPER_KILLED_AFTER_RELEASE) {
		/* Its reaper killed right after it released the port: its
		 * writes of the owner word, taken, then released. */
		pid = xt_fork(20);
		if (pid == 0) {
			struct xseg *seg;
			XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
			if (!on_trap(2) || !watch_writes(&seg->ports[VICTIM].owner))
				_exit(NO_BREAKPOINT);
			xseg_reap_port(seg, VICTIM, EHOSTDOWN);
			_exit(4);
		}
		ck_assert(killed(pid, "the reaper"));
		ck_assert_uint_eq(atomic_load(&xt_seg->ports[VICTIM].owner), 0);
		xseg_reap_dead_peers(xt_seg);
	} else if (bind_heir)
		ck_assert_int_eq(xseg_bind_port(xt_seg, VICTIM), 0);
	else
		ck_assert_int_ge(xseg_reap_dead_peers(xt_seg), 1);
	struct xseg_request *got = NULL;
	int n = 0;
	for (int tries = 0; tries < 200 && n == 0; tries++) {
		n = xseg_receive(xt_seg, CLIENT, &got, 1);
		if (n == 0)
			usleep(1000);
	}
	ck_assert_msg(n == 1, "the request a killed forwarder pushed onto a left port was never "
		      "answered after %s (request %u: state %u, holder %u, tag %#llx)",
		      bind_heir ? "a new owner bound its port" :
		      heir == REAP ? "its reap" : "a reap killed right after it released the port",
		      idx, w->state,
		      w->holder, (unsigned long long)w->pushing);
	ck_assert_uint_eq(got->index, idx);
	ck_assert_uint_eq(got->result, XR_FAILED);
	ck_assert_int_eq(xseg_put_request(xt_seg, got), 0);
	expect_pool_whole("a forwarder killed after its push onto a left port");
	if (bind_heir)
		ck_assert_int_eq(xseg_leave_port(xt_seg, VICTIM), 0);
}

START_TEST(a_pusher_killed_after_its_push_onto_a_left_port_leaves_no_request_there)
{
	pusher_killed_after_push_onto_left_port(REAP);
}
END_TEST

START_TEST(a_pusher_killed_after_its_push_onto_a_left_port_outlives_a_reaper_killed_after_its_release)
{
	pusher_killed_after_push_onto_left_port(REAPER_KILLED_AFTER_RELEASE);
}
END_TEST

START_TEST(a_pusher_killed_after_its_push_onto_a_left_port_leaves_its_heir_nothing)
{
	pusher_killed_after_push_onto_left_port(BIND);
}
END_TEST

/*
 * VICTIM submits a request it got to SERVER, killed after its pn-th
 * write to the request's words; its reaper after its rn-th; then the test
 * reaps. The request is then either on SERVER's queue, once, or back in
 * the pool.
 */
static int submit_sweep_once(int pn, int rn, bool *skip)
{
	int done[2];
	ck_assert_int_eq(pipe(done), 0);
	pid_t pid = xt_fork(20);
	if (pid == 0) {
		close(done[0]);
		struct xseg *seg;
		XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
		XT_CHILD_CHECK(xseg_bind_port(seg, VICTIM) == 0, 3, "%s", xseg_last_error());
		struct xseg_request *r = xseg_get_request(seg, VICTIM);
		XT_CHILD_CHECK(r, 5, "%s", xseg_last_error());
		uint32_t idx = r->index;
		XT_CHILD_CHECK(write(done[1], &idx, sizeof(idx)) == sizeof(idx), 4, "write");
		if (!die_after_request_write(r, pn))
			_exit(NO_BREAKPOINT);
		r->op = X_READ;
		r->size = 512;
		XT_CHILD_CHECK(xseg_submit(seg, r, VICTIM, SERVER) == SERVER, 6, "%s",
			       xseg_last_error());
		_exit(0);
	}
	close(done[1]);
	uint32_t idx;
	ck_assert_int_eq(read(done[0], &idx, sizeof(idx)), sizeof(idx));
	close(done[0]);
	int st = xt_wait_child(pid, 10000);
	ck_assert_msg(st != -1, "the submitter did not finish");
	if (WIFEXITED(st) && WEXITSTATUS(st) == NO_BREAKPOINT) {
		*skip = true;
		return 3;
	}
	ck_assert_msg((WIFEXITED(st) && WEXITSTATUS(st) == 0) ||
		      (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL),
		      "the submitter failed (status %#x)", st);
	int finished = WIFEXITED(st) ? 1 : 0;

	pid = xt_fork(20);
	if (pid == 0) {
		struct xseg *seg;
		XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
		if (!die_after_request_write(xseg_request_at(seg, idx), rn))
			_exit(NO_BREAKPOINT);
		XT_CHILD_CHECK(xseg_reap_port(seg, VICTIM, EHOSTDOWN) >= 0, 3, "%s",
			       xseg_last_error());
		_exit(0);
	}
	st = xt_wait_child(pid, 10000);
	ck_assert_msg(st != -1, "the reaper did not finish");
	ck_assert_msg((WIFEXITED(st) && WEXITSTATUS(st) == 0) ||
		      (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL),
		      "the reaper failed (status %#x)", st);
	if (WIFEXITED(st))
		finished |= 2;
	ck_assert_int_ge(xseg_reap_port(xt_seg, VICTIM, EHOSTDOWN), 0);

	char what[120];
	snprintf(what, sizeof(what), "submitted, submitter killed after its write %d, reaper "
		 "after its %d", pn, rn);
	struct xseg_request *got[2] = { NULL, NULL };
	int n = xseg_accept(xt_seg, SERVER, got, 2);
	struct xseg_request *l = xseg_request_at(xt_seg, idx);
	ck_assert_msg(n == 0 || (n == 1 && got[0]->index == idx),
		      "%s: SERVER got %d requests", what, n);
	if (n == 1) {
		got[0]->result = XR_SERVED;
		ck_assert_int_ge(xseg_respond(xt_seg, got[0], SERVER), 0);
	}
	(void)l;
	expect_pool_whole(what);
	return finished;
}

START_TEST(a_submitter_and_its_reaper_killed_at_any_write_lose_no_request)
{
	ck_assert_int_eq(xseg_bind_port(xt_seg, SERVER), 0);
	int runs = 0;
	for (int pn = 1;; pn++) {
		bool skip = false;
		int rn = 1, f;
		while (!((f = submit_sweep_once(pn, rn, &skip)) & 2))
			rn++, runs++;
		if (skip) {
			fprintf(stderr, "SKIP: no hardware breakpoint (perf_event_open) here\n");
			return;
		}
		if (f & 1)
			break;
	}
	fprintf(stderr, "submitted: %d kills of a submitter and its reaper\n", runs);
}
END_TEST

/*
 * The reap's own pushes: VICTIM forwards CLIENT's request to SERVER and is
 * killed inside its push, before the ring took it; SERVER's owner then
 * leaves (nothing on its queue yet); the reap of VICTIM resumes the push,
 * onto the queue of a port nobody owns now. It must look there.
 */
START_TEST(a_push_a_reap_resumes_onto_a_left_port_is_answered)
{
	ck_assert_int_eq(xseg_bind_port(xt_seg, SERVER), 0);
	int go[2], note[2];
	ck_assert_int_eq(pipe(go), 0);
	ck_assert_int_eq(pipe(note), 0);
	pid_t pid = xt_fork(20);
	if (pid == 0) {
		close(go[1]);
		close(note[0]);
		struct xseg *seg;
		XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
		XT_CHILD_CHECK(xseg_bind_port(seg, VICTIM) == 0, 3, "%s", xseg_last_error());
		XT_CHILD_CHECK(write(note[1], "b", 1) == 1, 4, "write");
		uint32_t idx;
		XT_CHILD_CHECK(read(go[0], &idx, sizeof(idx)) == sizeof(idx), 5, "read");
		struct xseg_request *r = NULL;
		XT_CHILD_CHECK(xseg_accept(seg, VICTIM, &r, 1) == 1, 6, "accept");
		/* deliver's writes to the tag: its own, then the ring's */
		if (!die_after_write(&r->pushing, 2))
			_exit(NO_BREAKPOINT);
		xseg_forward(seg, r, VICTIM, SERVER);
		_exit(7);
	}
	close(go[0]);
	close(note[1]);
	char ch;
	ck_assert_int_eq(read(note[0], &ch, 1), 1);
	close(note[0]);
	struct xseg_request *w = xseg_get_request(xt_seg, CLIENT);
	ck_assert_ptr_nonnull(w);
	w->op = X_READ;
	w->size = 512;
	uint32_t idx = w->index;
	ck_assert_int_eq(xseg_submit(xt_seg, w, CLIENT, VICTIM), VICTIM);
	ck_assert_int_eq(write(go[1], &idx, sizeof(idx)), sizeof(idx));
	close(go[1]);
	if (!killed(pid, "the forwarder"))
		return;
	ck_assert_int_eq(xseg_leave_port(xt_seg, SERVER), 0);
	ck_assert_int_ge(xseg_reap_dead_peers(xt_seg), 1);
	struct xseg_request *got = NULL;
	int n = 0;
	for (int tries = 0; tries < 200 && n == 0; tries++) {
		n = xseg_receive(xt_seg, CLIENT, &got, 1);
		if (n == 0)
			usleep(1000);
	}
	ck_assert_msg(n == 1, "the request whose push the reap resumed onto a left port was never "
		      "answered (request %u: state %u, holder %u, tag %#llx)", idx, w->state,
		      w->holder, (unsigned long long)w->pushing);
	ck_assert_uint_eq(got->index, idx);
	ck_assert_uint_eq(got->result, XR_FAILED);
	ck_assert_int_eq(xseg_put_request(xt_seg, got), 0);
	expect_pool_whole("a push the reap resumed onto a left port");
}
END_TEST

/*
 * A live peer's submit to a port whose owner died (not yet reaped) marks
 * the request held by that port before it marks it queued. The reap of
 * the port in between found it held by the dead owner, not queued, and
 * settled it as the dead owner's own: back to the pool, its buffer freed,
 * while the submit went on and queued it. The submitter is stalled right
 * after its write of the holder (a breakpoint), the port reaped, then the
 * submit goes on; its answer must come back with the request's buffer.
 */
enum { SUBMITTER = 3, KEPT_LEN = 4096 };

static int submitting_peer(int note_fd, int go_fd)
{
	struct xseg *seg;
	if (xseg_join(xt_name, &seg) < 0 || xseg_bind_port(seg, SUBMITTER) < 0)
		return 2;
	struct xseg_request *r = xseg_get_request(seg, SUBMITTER);
	if (!r || xseg_prep_target(seg, r, "kept", KEPT_LEN) < 0)
		return 3;
	memset(xseg_get_data(seg, r), 0x5a, KEPT_LEN);
	r->op = X_WRITE;
	r->size = KEPT_LEN;
	struct sigaction sa = { .sa_handler = stall_or_die };
	sigemptyset(&sa.sa_mask);
	stall_at = 1;   /* deliver's holder, before its state */
	kill_at = 0;
	stall_note_fd = note_fd;
	stall_go_fd = go_fd;
	if (sigaction(SIGTRAP, &sa, NULL) < 0 || !watch_writes_len(&r->holder, HW_BREAKPOINT_LEN_4))
		return NO_BREAKPOINT;
	uint32_t idx = r->index;
	if (write(note_fd, &idx, sizeof(idx)) != sizeof(idx))
		return 2;
	if (xseg_submit(seg, r, SUBMITTER, VICTIM) != VICTIM)
		return 4;
	struct xseg_request *got = NULL;
	for (int tries = 0; tries < 2000; tries++) {
		if (xseg_receive(seg, SUBMITTER, &got, 1) == 1)
			break;
		usleep(1000);
	}
	if (!got)
		return 5;   /* never answered */
	if (got->index != idx)
		return 6;
	const char *t = xseg_get_target(seg, got);
	const unsigned char *d = xseg_get_data(seg, got);
	if (!t || strcmp(t, "kept") || !d || got->bufferlen < KEPT_LEN)
		return 7;   /* its buffer was taken away */
	for (int i = 0; i < KEPT_LEN; i++)
		if (d[i] != 0x5a)
			return 8;
	if (xseg_put_request(seg, got) < 0 || xseg_leave_port(seg, SUBMITTER) < 0)
		return 9;
	return 0;
}

START_TEST(a_reap_beside_a_live_submit_to_the_dead_port_leaves_the_request_to_it)
{
	/* VICTIM's owner dies; nobody has reaped it yet. */
	int ready[2];
	ck_assert_int_eq(pipe(ready), 0);
	pid_t dead = xt_fork(20);
	if (dead == 0) {
		struct xseg *seg;
		XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
		XT_CHILD_CHECK(xseg_bind_port(seg, VICTIM) == 0, 3, "%s", xseg_last_error());
		XT_CHILD_CHECK(write(ready[1], "r", 1) == 1, 4, "write");
		for (;;)
			pause();
	}
	char ch;
	ck_assert_int_eq(read(ready[0], &ch, 1), 1);
	ck_assert_int_eq(kill(dead, SIGKILL), 0);
	ck_assert(killed(dead, "VICTIM's owner"));

	int go[2], note[2];
	ck_assert_int_eq(pipe(go), 0);
	ck_assert_int_eq(pipe(note), 0);
	pid_t pid = xt_fork(20);
	if (pid == 0) {
		close(go[1]);
		close(note[0]);
		_exit(submitting_peer(note[1], go[0]));
	}
	close(go[0]);
	close(note[1]);
	uint32_t idx = 0, state = 0;
	bool stalled = read(note[0], &idx, sizeof(idx)) == sizeof(idx) &&
		       read(note[0], &ch, 1) == 1;
	if (stalled) {
		ck_assert_int_ge(xseg_reap_port(xt_seg, VICTIM, EHOSTDOWN), 1);
		state = xseg_request_at(xt_seg, idx)->state;
		ck_assert_int_eq(write(go[1], "g", 1), 1);
	}
	close(go[1]);
	close(note[0]);
	int st = xt_wait_child(pid, 10000);
	ck_assert_msg(st != -1, "the submitter did not finish");
	if (WIFEXITED(st) && WEXITSTATUS(st) == NO_BREAKPOINT) {
		fprintf(stderr, "SKIP: no hardware breakpoint (perf_event_open) here\n");
		return;
	}
	ck_assert_msg(stalled, "the submitter never stalled (status %#x)", st);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "the submit beside the reap of the dead port it went to: %s (status %#x; "
		      "the reap left request %u in state %u)",
		      WIFEXITED(st) && WEXITSTATUS(st) == 5 ? "never answered" :
		      WIFEXITED(st) && WEXITSTATUS(st) >= 7 ? "its buffer was taken away" :
		      "failed", st, idx, state);
	expect_pool_whole("a reap beside a live submit to the dead port");
}
END_TEST

/*
 * VICTIM preps and puts back a request it got, killed after its pn-th
 * write to the request's words (its buffer's too); its reaper after its
 * rn-th; then the test reaps. The pool must be whole and the heap hold no
 * block of it.
 */
static int put_sweep_once(int pn, int rn, bool *skip)
{
	int done[2];
	ck_assert_int_eq(pipe(done), 0);
	pid_t pid = xt_fork(20);
	if (pid == 0) {
		close(done[0]);
		struct xseg *seg;
		XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
		XT_CHILD_CHECK(xseg_bind_port(seg, VICTIM) == 0, 3, "%s", xseg_last_error());
		struct xseg_request *r = xseg_get_request(seg, VICTIM);
		XT_CHILD_CHECK(r, 5, "%s", xseg_last_error());
		XT_CHILD_CHECK(xseg_prep_target(seg, r, "put", 4096) == 0, 6, "%s",
			       xseg_last_error());
		uint32_t idx = r->index;
		XT_CHILD_CHECK(write(done[1], &idx, sizeof(idx)) == sizeof(idx), 4, "write");
		if (!on_trap(pn) || !watch_writes(&r->state) || !watch_writes(&r->dst_port) ||
		    !watch_writes(&r->pushing) || !watch_writes(&r->bufferlen))
			_exit(NO_BREAKPOINT);
		XT_CHILD_CHECK(xseg_put_request(seg, r) == 0, 7, "%s", xseg_last_error());
		_exit(0);
	}
	close(done[1]);
	uint32_t idx;
	ck_assert_int_eq(read(done[0], &idx, sizeof(idx)), sizeof(idx));
	close(done[0]);
	int st = xt_wait_child(pid, 10000);
	ck_assert_msg(st != -1, "the putter did not finish");
	if (WIFEXITED(st) && WEXITSTATUS(st) == NO_BREAKPOINT) {
		*skip = true;
		return 3;
	}
	ck_assert_msg((WIFEXITED(st) && WEXITSTATUS(st) == 0) ||
		      (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL),
		      "the putter failed (status %#x)", st);
	int finished = WIFEXITED(st) ? 1 : 0;

	pid = xt_fork(20);
	if (pid == 0) {
		struct xseg *seg;
		XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
		if (!die_after_request_write(xseg_request_at(seg, idx), rn))
			_exit(NO_BREAKPOINT);
		XT_CHILD_CHECK(xseg_reap_port(seg, VICTIM, EHOSTDOWN) >= 0, 3, "%s",
			       xseg_last_error());
		_exit(0);
	}
	st = xt_wait_child(pid, 10000);
	ck_assert_msg(st != -1, "the reaper did not finish");
	ck_assert_msg((WIFEXITED(st) && WEXITSTATUS(st) == 0) ||
		      (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL),
		      "the reaper failed (status %#x)", st);
	if (WIFEXITED(st))
		finished |= 2;
	ck_assert_int_ge(xseg_reap_port(xt_seg, VICTIM, EHOSTDOWN), 0);
	char what[120];
	snprintf(what, sizeof(what), "put, putter killed after its write %d, reaper after its %d",
		 pn, rn);
	expect_pool_whole(what);
	struct xseg_segment_info si;
	ck_assert_int_eq(xseg_segment_info(xt_seg, &si), 0);
	ck_assert_msg(si.heap_used == 0 && si.heap_allocs == 0 &&
		      si.heap_free_largest == si.heap_size,
		      "%s: the heap has %llu bytes in %llu buffers out (largest free %llu of %llu)",
		      what, (unsigned long long)si.heap_used, (unsigned long long)si.heap_allocs,
		      (unsigned long long)si.heap_free_largest, (unsigned long long)si.heap_size);
	return finished;
}

START_TEST(a_putter_and_its_reaper_killed_at_any_write_lose_no_request)
{
	int runs = 0;
	for (int pn = 1;; pn++) {
		bool skip = false;
		int rn = 1, f;
		while (!((f = put_sweep_once(pn, rn, &skip)) & 2))
			rn++, runs++;
		if (skip) {
			fprintf(stderr, "SKIP: no hardware breakpoint (perf_event_open) here\n");
			return;
		}
		if (f & 1)
			break;
	}
	fprintf(stderr, "put: %d kills of a putter and its reaper\n", runs);
}
END_TEST

static void setup(void)
{
	xt_setup_with(8, 64, 1 << 20);
	ck_assert_int_eq(xseg_bind_port(xt_seg, CLIENT), 0);
}

int main(void)
{
	Suite *s = suite_create("xseg_killed_reaper");
	TCase *tc = tcase_create("killed_reaper");
	tcase_set_timeout(tc, 30);
	tcase_add_checked_fixture(tc, setup, xt_teardown);
	tcase_add_test(tc, a_reaper_killed_inside_a_resumed_push_loses_no_request);
	tcase_add_test(tc, a_reaper_killed_inside_a_pool_settle_loses_no_request);
	tcase_add_test(tc, a_reaper_killed_at_any_write_of_a_request_loses_it_not);
	tcase_add_test(tc, a_lanes_reaper_killed_at_any_write_of_a_request_loses_it_not);
	tcase_add_test(tc, a_server_and_its_heir_killed_at_any_write_lose_no_answer);
	tcase_add_test(tc, a_submitter_and_its_reaper_killed_at_any_write_lose_no_request);
	tcase_add_test(tc, a_putter_and_its_reaper_killed_at_any_write_lose_no_request);
	tcase_add_test(tc, a_pusher_killed_after_its_push_onto_a_left_port_leaves_no_request_there);
	tcase_add_test(tc, a_pusher_killed_after_its_push_onto_a_left_port_leaves_its_heir_nothing);
	tcase_add_test(tc,
		a_pusher_killed_after_its_push_onto_a_left_port_outlives_a_reaper_killed_after_its_release);
	tcase_add_test(tc, a_push_a_reap_resumes_onto_a_left_port_is_answered);
	tcase_add_test(tc, a_reap_beside_a_live_submit_to_the_dead_port_leaves_the_request_to_it);
	suite_add_tcase(s, tc);
	return xt_run(s);
}
