/*
 * A process SIGKILLed at a random instruction of its get/prep/put loop:
 * what it held is reaped, and nothing it had already given back is given
 * back a second time. Killed inside its put after the heap took the
 * buffer back and before the request forgot it (free_buffer), the reaper
 * freed the block again, by then maybe another request's: two live
 * requests then shared one heap block (wrong data for both). Killed
 * inside the heap's own steps, or between them and the request's record
 * of the block, it lost the block for good; killed inside the pool's own
 * get or put, the request.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/xseg_test_util.h"
#include "../src/xseg_internal.h"   /* the heap's block marks */

enum { CLIENT = 1, TAKER = 2, VICTIM = 6, BUF = 4096 };

/* Binds VICTIM, says so on ready_fd, then gets, preps and puts for ever. */
static void churn(int ready_fd)
{
	struct xseg *seg;
	XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
	XT_CHILD_CHECK(xseg_bind_port(seg, VICTIM) == 0, 3, "%s", xseg_last_error());
	XT_CHILD_CHECK(write(ready_fd, "r", 1) == 1, 4, "write");
	for (;;) {
		struct xseg_request *r = xseg_get_request(seg, VICTIM);
		XT_CHILD_CHECK(r, 5, "%s", xseg_last_error());
		XT_CHILD_CHECK(xseg_prep_target(seg, r, "churn", BUF) == 0, 6, "%s",
			       xseg_last_error());
		XT_CHILD_CHECK(xseg_put_request(seg, r) == 0, 7, "%s", xseg_last_error());
	}
}

/* The heap's mark of the block at heap offset off (heap.c: FREE 0x80,
 * USED 0x40 | order, 0 inside a block). */
static uint8_t block_mark(uint64_t off)
{
	return ((uint8_t *)(xt_seg->heap_meta + 1))[off >> XSEG_HEAP_MIN_SHIFT];
}

/* A live thread beside the kills and reaps, taking from the pool and
 * putting back (on the reaper's races with a live taker): a request it
 * holds must stay its own (a copy handed out again is re-initialised). */
static _Atomic bool stop_taker;
static char taker_failure[200];

static void *live_taker(void *arg)
{
	(void)arg;
	for (uint64_t n = 1; !atomic_load(&stop_taker); n++) {
		struct xseg_request *r = xseg_get_request(xt_seg, TAKER);
		if (!r) {
			snprintf(taker_failure, sizeof(taker_failure), "get: %s", xseg_last_error());
			return NULL;
		}
		r->priv = n;
		sched_yield();
		if (r->priv != n || r->holder != TAKER || r->state != XS_ALLOCATED) {
			snprintf(taker_failure, sizeof(taker_failure), "request %u was handed out "
				 "again while held (priv %llu, holder %u, state %u)", r->index,
				 (unsigned long long)r->priv, r->holder, r->state);
			return NULL;
		}
		if (xseg_put_request(xt_seg, r) < 0) {
			snprintf(taker_failure, sizeof(taker_failure), "put: %s", xseg_last_error());
			return NULL;
		}
	}
	return NULL;
}

START_TEST(what_a_killed_holder_had_is_never_given_back_twice_nor_lost)
{
	unsigned seed = (unsigned)getpid();
	uint64_t t0 = xseg_now_ns();
	int rounds = 0;
	pthread_t taker;

	ck_assert_int_eq(xseg_bind_port(xt_seg, CLIENT), 0);
	ck_assert_int_eq(xseg_bind_port(xt_seg, TAKER), 0);
	atomic_store(&stop_taker, false);
	ck_assert_int_eq(pthread_create(&taker, NULL, live_taker, NULL), 0);
	/* Kills land in those windows often (most on a page fault: a new
	 * process faults the pool in piece by piece): up to 8 s of kills. */
	while (xseg_now_ns() - t0 < 8000000000ull && rounds < 3000) {
		int ready[2];
		char ch;
		ck_assert_int_eq(pipe(ready), 0);
		pid_t pid = xt_fork(20);
		if (pid == 0) {
			close(ready[0]);
			churn(ready[1]);
		}
		close(ready[1]);
		ck_assert_int_eq(read(ready[0], &ch, 1), 1);
		close(ready[0]);
		seed = seed * 1103515245u + 12345u;
		usleep(50 + (seed >> 8) % 300);
		ck_assert_int_eq(kill(pid, SIGKILL), 0);
		int st;
		ck_assert_int_eq(waitpid(pid, &st, 0), pid);
		ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
			      "the churning child ended by itself (status %#x)", st);
		/* The block the child last freed goes to a live request before
		 * anyone reaps the child (the heap hands the lowest out first). */
		struct xseg_request *a = xseg_get_request(xt_seg, CLIENT);
		ck_assert_msg(a != NULL, "round %d: %s", rounds, xseg_last_error());
		ck_assert_msg(xseg_prep_target(xt_seg, a, "mine", BUF) == 0, "round %d: %s",
			      rounds, xseg_last_error());
		ck_assert_int_ge(xseg_reap_port(xt_seg, VICTIM, EHOSTDOWN), 0);
		ck_assert_msg(block_mark(a->buffer) & 0x40,
			      "round %d: the reap of a killed holder freed heap block %llu, "
			      "held by a live request (mark %#x)", rounds,
			      (unsigned long long)a->buffer, block_mark(a->buffer));
		struct xseg_request *b = xseg_get_request(xt_seg, CLIENT);
		ck_assert_ptr_nonnull(b);
		ck_assert_int_eq(xseg_prep_target(xt_seg, b, "yours", BUF), 0);
		ck_assert_msg(a->buffer != b->buffer, "round %d: two live requests share heap "
			      "block %llu", rounds, (unsigned long long)a->buffer);
		ck_assert_int_eq(xseg_put_request(xt_seg, a), 0);
		ck_assert_int_eq(xseg_put_request(xt_seg, b), 0);
		rounds++;
	}
	atomic_store(&stop_taker, true);
	ck_assert_int_eq(pthread_join(taker, NULL), 0);
	ck_assert_msg(!taker_failure[0], "live taker: %s", taker_failure);
	/* Nothing is held now: a block the heap neither has free nor hands
	 * to a request is lost (a kill inside the heap's own steps, or
	 * between them and the request's record of the block). */
	ck_assert_int_eq(xseg_reap_port(xt_seg, VICTIM, EHOSTDOWN), 0);
	struct xseg_segment_info si;
	ck_assert_int_eq(xseg_segment_info(xt_seg, &si), 0);
	ck_assert_msg(si.heap_used == 0 && si.heap_free_largest == si.heap_size,
		      "after %d kills %llu heap bytes in %llu blocks are lost", rounds,
		      (unsigned long long)si.heap_used, (unsigned long long)si.heap_allocs);
	/* Nor a request: killed between its pop off the pool's ring and its
	 * mark (get), or between its mark FREE and its push (put), one was
	 * in no ring and held by nobody, for good. Each in the pool once. */
	uint8_t *queued = calloc(si.nr_requests, 1);
	ck_assert_ptr_nonnull(queued);
	xseg_ring_mark_queued(xt_seg->free_ring, queued, si.nr_requests);
	uint32_t distinct = 0, lost_first = UINT32_MAX;
	for (uint32_t i = 0; i < si.nr_requests; i++) {
		distinct += queued[i];
		if (!queued[i] && lost_first == UINT32_MAX)
			lost_first = i;
	}
	free(queued);
	ck_assert_msg(si.free_requests == si.nr_requests && distinct == si.nr_requests,
		      "after %d kills the pool has %u of %u requests (%u distinct; request %u "
		      "is in no ring, state %u, holder %u)", rounds, si.free_requests,
		      si.nr_requests, distinct, lost_first,
		      lost_first < si.nr_requests ? xseg_request_at(xt_seg, lost_first)->state : 0,
		      lost_first < si.nr_requests ? xseg_request_at(xt_seg, lost_first)->holder : 0);
	fprintf(stderr, "killed holder: %d kills, no buffer freed twice or lost, no request "
		"lost\n", rounds);
}
END_TEST

static void setup(void)
{
	/* Room for what a leaky pool or heap loses: the check at the end says. */
	xt_setup_with(8, 4096, 8 << 20);
}

int main(void)
{
	Suite *s = suite_create("xseg_killed_holder");
	TCase *tc = tcase_create("killed_holder");
	tcase_set_timeout(tc, 30);
	tcase_add_checked_fixture(tc, setup, xt_teardown);
	tcase_add_test(tc, what_a_killed_holder_had_is_never_given_back_twice_nor_lost);
	suite_add_tcase(s, tc);
	return xt_run(s);
}
