/*
 * Several threads of one peer take from the pool on one port at once, and
 * the peer is SIGKILLed: what one of them had popped off the pool's ring
 * and not yet claimed must go back to the pool at the reap. The port had
 * one note of where its taker popped (pool_taking): a second taker's
 * announce, or its end of a get (note back to 0), wiped out the first's,
 * and the reap did not find the request it had popped: in no ring, held
 * by nobody, lost for good.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/xseg_test_util.h"
#include "../src/xseg_internal.h"   /* the pool's ring and its notes */

enum { CLIENT = 1, VICTIM = 5, THREADS = 4 };

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
	ck_assert_msg(si.free_requests == si.nr_requests && distinct == si.nr_requests,
		      "%s: the pool has %u of %u requests (%u distinct; request %u is in no "
		      "ring, state %u, holder %u)", what, si.free_requests, si.nr_requests,
		      distinct, lost,
		      lost < si.nr_requests ? xseg_request_at(xt_seg, lost)->state : 0,
		      lost < si.nr_requests ? xseg_request_at(xt_seg, lost)->holder : 0);
}

/* Kills pid delay_us after it wrote a byte on fd, and reaps VICTIM. */
static void kill_and_reap(pid_t pid, int fd, unsigned delay_us)
{
	char ch;
	ck_assert_int_eq(read(fd, &ch, 1), 1);
	close(fd);
	if (delay_us)
		usleep(delay_us);
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
		      "the child ended by itself (status %#x)", st);
	ck_assert_int_ge(xseg_reap_port(xt_seg, VICTIM, EHOSTDOWN), 0);
	/* The pool serves at once (a taker killed after its pop left the
	 * ring's head behind). */
	struct xseg_request *r = xseg_get_request(xt_seg, CLIENT);
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(xseg_put_request(xt_seg, r), 0);
}

/*
 * The exact state two threads leave: thread A popped a request off the
 * pool's ring (popped, not yet claimed: xseg_pool_take's first step),
 * then thread B got one whole (pop, claim and mark), or only popped too.
 * Then the process dies. (The port's note of where it popped said B's
 * position, or 0 after B's whole get: A's request was lost.)
 */
static void two_takers_then_die(int ready_fd, bool b_whole)
{
	struct xseg *seg;
	XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
	XT_CHILD_CHECK(xseg_bind_port(seg, VICTIM) == 0, 3, "%s", xseg_last_error());
	uint32_t idx;
	uint64_t at;
	XT_CHILD_CHECK(xseg_ring_pop_at(seg->free_ring, &idx, &at), 4, "pop A");
	if (b_whole)
		XT_CHILD_CHECK(xseg_get_request(seg, VICTIM), 5, "%s", xseg_last_error());
	else
		XT_CHILD_CHECK(xseg_ring_pop_at(seg->free_ring, &idx, &at), 6, "pop B");
	XT_CHILD_CHECK(write(ready_fd, "r", 1) == 1, 7, "write");
	for (;;)
		pause();
}

static void run_two_takers(bool b_whole)
{
	int ready[2];
	ck_assert_int_eq(pipe(ready), 0);
	pid_t pid = xt_fork(20);
	if (pid == 0) {
		close(ready[0]);
		two_takers_then_die(ready[1], b_whole);
	}
	close(ready[1]);
	kill_and_reap(pid, ready[0], 0);
	expect_pool_whole(b_whole ? "a taker popped, another got one, killed"
				  : "two takers popped, killed");
}

START_TEST(a_pop_beside_a_whole_get_is_not_lost)
{
	run_two_takers(true);
}
END_TEST

START_TEST(two_pops_are_not_lost)
{
	run_two_takers(false);
}
END_TEST

/* The same with real threads: THREADS threads get, prep and put on one
 * port until the process is killed at a random moment. */
static struct xseg *churn_seg;

static void *churn_thread(void *arg)
{
	(void)arg;
	for (;;) {
		struct xseg_request *r = xseg_get_request(churn_seg, VICTIM);
		XT_CHILD_CHECK(r, 5, "%s", xseg_last_error());
		XT_CHILD_CHECK(xseg_prep_target(churn_seg, r, "churn", 512) == 0, 6, "%s",
			       xseg_last_error());
		XT_CHILD_CHECK(xseg_put_request(churn_seg, r) == 0, 7, "%s", xseg_last_error());
	}
	return NULL;
}

static void churn(int ready_fd)
{
	XT_CHILD_CHECK(xseg_join(xt_name, &churn_seg) == 0, 2, "%s", xseg_last_error());
	XT_CHILD_CHECK(xseg_bind_port(churn_seg, VICTIM) == 0, 3, "%s", xseg_last_error());
	pthread_t t[THREADS];
	for (int i = 0; i < THREADS; i++)
		XT_CHILD_CHECK(pthread_create(&t[i], NULL, churn_thread, NULL) == 0, 4, "thread");
	XT_CHILD_CHECK(write(ready_fd, "r", 1) == 1, 8, "write");
	for (;;)
		pause();
}

START_TEST(threads_of_a_killed_taker_lose_no_request)
{
	unsigned seed = (unsigned)getpid();
	uint64_t t0 = xseg_now_ns();
	uint64_t rounds_max = xt_scaled(1500, 50);
	int rounds = 0;

	while (xseg_now_ns() - t0 < 3000000000ull && (uint64_t)rounds < rounds_max) {
		int ready[2];
		ck_assert_int_eq(pipe(ready), 0);
		pid_t pid = xt_fork(20);
		if (pid == 0) {
			close(ready[0]);
			churn(ready[1]);
		}
		close(ready[1]);
		seed = seed * 1103515245u + 12345u;
		kill_and_reap(pid, ready[0], 20 + (seed >> 8) % 200);
		rounds++;
	}
	char what[80];
	snprintf(what, sizeof(what), "after %d kills of %d takers on one port", rounds, THREADS);
	expect_pool_whole(what);
	/* Nor a heap block: each thread's buffer went back once. */
	struct xseg_segment_info si;
	ck_assert_int_eq(xseg_segment_info(xt_seg, &si), 0);
	ck_assert_msg(si.heap_used == 0 && si.heap_free_largest == si.heap_size,
		      "%s: %llu heap bytes in %llu blocks are lost", what,
		      (unsigned long long)si.heap_used, (unsigned long long)si.heap_allocs);
	fprintf(stderr, "pool takers: %d kills of %d threads on one port, no request lost\n",
		rounds, THREADS);
}
END_TEST

static void setup(void)
{
	xt_setup_with(8, 1024, 4 << 20);
	ck_assert_int_eq(xseg_bind_port(xt_seg, CLIENT), 0);
}

int main(void)
{
	Suite *s = suite_create("xseg_pool_takers");
	TCase *tc = tcase_create("pool_takers");
	tcase_set_timeout(tc, 30);
	tcase_add_checked_fixture(tc, setup, xt_teardown);
	tcase_add_test(tc, a_pop_beside_a_whole_get_is_not_lost);
	tcase_add_test(tc, two_pops_are_not_lost);
	tcase_add_test(tc, threads_of_a_killed_taker_lose_no_request);
	suite_add_tcase(s, tc);
	return xt_run(s);
}
