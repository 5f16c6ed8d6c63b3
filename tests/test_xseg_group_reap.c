/*
 * A peer's range taken over in part by a live peer with a range of its
 * own: the reap of the dead peer's other ports must leave the live
 * peer's group and lanes alone. Its ungroup regrouped every port of the
 * dead peer's old range after the reaped one, the live peer's among them:
 * a wait on the live peer's first port then slept on the dead peer's
 * word, through a submit to one of its own lanes, and its lanes ended.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/xseg_test_util.h"

enum { CLIENT = 1, OTHER_CLIENT = 3, DEAD_FIRST = 4, DEAD_LAST = 7, LIVE_FIRST = 6,
       LIVE_LAST = 9 };

struct waiter {
	int rc;
	uint64_t ns;
};

static void *wait_first_port(void *arg)
{
	struct waiter *w = arg;
	uint64_t t0 = xseg_now_ns();
	w->rc = xseg_wait(xt_seg, LIVE_FIRST, 2000000000ull);
	w->ns = xseg_now_ns() - t0;
	return NULL;
}

/* A request from `from` to dst, answered by whoever holds it on `lane`. */
static void submit_and_answer(uint32_t from, uint32_t dst, uint32_t lane)
{
	struct xseg_request *r = xseg_get_request(xt_seg, from), *got;
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(xseg_submit(xt_seg, r, from, dst), (int)lane);
	ck_assert_int_eq(xseg_accept(xt_seg, lane, &got, 1), 1);
	got->result = XR_SERVED;
	ck_assert_int_eq(xseg_respond(xt_seg, got, lane), (int)from);
	ck_assert_int_eq(xseg_receive(xt_seg, from, &got, 1), 1);
	ck_assert_int_eq(xseg_put_request(xt_seg, got), 0);
}

START_TEST(reap_of_a_dead_range_leaves_a_live_group_alone)
{
	int ready[2];
	char ch;
	ck_assert_int_eq(pipe(ready), 0);
	pid_t pid = xt_fork(20);
	if (pid == 0) {
		struct xseg *seg;
		XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
		XT_CHILD_CHECK(xseg_bind_lanes(seg, DEAD_FIRST, DEAD_LAST) == 0, 3, "%s",
			       xseg_last_error());
		XT_CHILD_CHECK(write(ready[1], "r", 1) == 1, 4, "write");
		for (;;)
			pause();
	}
	ck_assert_int_eq(read(ready[0], &ch, 1), 1);
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);

	/* The live peer takes the dead one's last two ports over. */
	ck_assert_int_eq(xseg_bind_lanes(xt_seg, LIVE_FIRST, LIVE_LAST), 0);
	ck_assert_int_eq(xseg_bind_port(xt_seg, CLIENT), 0);
	ck_assert_int_eq(xseg_bind_port(xt_seg, OTHER_CLIENT), 0);
	ck_assert_uint_eq(xseg_port_lanes(xt_seg, LIVE_FIRST), 4);

	/* The dead one's first port is reaped (a sweep, a client's poll). */
	ck_assert_int_ge(xseg_reap_port(xt_seg, DEAD_FIRST, EHOSTDOWN), 1);
	struct waiter w;
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, wait_first_port, &w), 0);
	usleep(100000);   /* asleep by now */
	struct xseg_request *r = xseg_get_request(xt_seg, CLIENT), *got;
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(xseg_submit(xt_seg, r, CLIENT, LIVE_LAST), LIVE_LAST);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	ck_assert_msg(w.rc == 1 && w.ns < 1000000000ull, "a wait on port %u (its group %u..%u) "
		      "said %d after %llu ms, with a request queued on port %u", LIVE_FIRST,
		      LIVE_FIRST, LIVE_LAST, w.rc, (unsigned long long)(w.ns / 1000000), LIVE_LAST);
	ck_assert_int_eq(xseg_accept(xt_seg, LIVE_LAST, &got, 1), 1);
	got->result = XR_SERVED;
	ck_assert_int_eq(xseg_respond(xt_seg, got, LIVE_LAST), CLIENT);
	ck_assert_int_eq(xseg_receive(xt_seg, CLIENT, &got, 1), 1);
	ck_assert_int_eq(xseg_put_request(xt_seg, got), 0);

	/* And its second: the live peer keeps its lanes and its group. */
	ck_assert_int_ge(xseg_reap_port(xt_seg, DEAD_FIRST + 1, EHOSTDOWN), 1);
	ck_assert_uint_eq(xseg_port_lanes(xt_seg, LIVE_FIRST), 4);
	submit_and_answer(OTHER_CLIENT, LIVE_FIRST, LIVE_FIRST + OTHER_CLIENT % 4);
	r = xseg_get_request(xt_seg, CLIENT);
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(xseg_submit(xt_seg, r, CLIENT, LIVE_LAST), LIVE_LAST);
	ck_assert_msg(xseg_has_work(xt_seg, LIVE_FIRST) == 1, "port %u's group %u..%u does not "
		      "see the request queued on port %u", LIVE_FIRST, LIVE_FIRST, LIVE_LAST,
		      LIVE_LAST);
	ck_assert_int_eq(xseg_accept(xt_seg, LIVE_LAST, &got, 1), 1);
	got->result = XR_SERVED;
	ck_assert_int_eq(xseg_respond(xt_seg, got, LIVE_LAST), CLIENT);
	ck_assert_int_eq(xseg_receive(xt_seg, CLIENT, &got, 1), 1);
	ck_assert_int_eq(xseg_put_request(xt_seg, got), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xseg_group_reap");
	TCase *tc = tcase_create("group_reap");
	tcase_set_timeout(tc, 20);
	tcase_add_checked_fixture(tc, xt_setup, xt_teardown);
	tcase_add_test(tc, reap_of_a_dead_range_leaves_a_live_group_alone);
	suite_add_tcase(s, tc);
	return xt_run(s);
}
