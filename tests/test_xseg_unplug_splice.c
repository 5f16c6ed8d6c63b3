/*
 * Two `xseg unplug` at once in one chain: B -> C -> D (C plugged in front
 * of blocker B, D in front of C), C and D unplugged together. Each tool
 * splices its cache out (clear_routes_to, tools/xseg/plug.c): the ports
 * routed to it go to its front. Done hop by hop, C's splice read its front
 * (D), D's splice then took D out of C's route, and C's splice routed B
 * to D: both unplugs said done and B was left routed to D, a cache that
 * had just been told it is out of the path (write-through, "unplugged").
 * Two threads are the two tools here (the same shared-memory calls).
 */
#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "plug.h"
#include "support/xseg_test_util.h"

/* Chain k: B = 2T + k -> C = k -> D = T + k. C's splice finds B late in
 * its walk over the ports, D's finds C early: the window that lost. */
enum { T = 170, NPORTS = 3 * T };

static _Atomic uint32_t arrived[2];
static _Atomic bool quit;

/* Both threads start each chain's splice together. */
static void meet(int side, uint32_t k)
{
	atomic_store(&arrived[side], k + 1);
	while (atomic_load(&arrived[!side]) < k + 1 && !atomic_load(&quit))
		sched_yield();
}

static void *unplugger(void *arg)
{
	int side = (int)(intptr_t)arg;
	for (uint32_t k = 0; k < T && !atomic_load(&quit); k++) {
		meet(side, k);
		clear_routes_to(xt_seg, side ? T + k : k);   /* unplug D, or C */
	}
	return NULL;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

START_TEST(two_unplugs_at_once_leave_no_route_to_either)
{
	uint64_t rounds = xt_scaled(400, 40), done = 0;
	double end = now_s() + 5.0;
	for (; done < rounds && now_s() < end; done++) {
		for (uint32_t k = 0; k < T; k++) {
			ck_assert_int_eq(xseg_set_next_hop(xt_seg, 2 * T + k, k), 0);
			ck_assert_int_eq(xseg_set_next_hop(xt_seg, k, T + k), 0);
		}
		atomic_store(&arrived[0], 0);
		atomic_store(&arrived[1], 0);
		pthread_t t[2];
		for (int i = 0; i < 2; i++)
			ck_assert_int_eq(pthread_create(&t[i], NULL, unplugger, (void *)(intptr_t)i), 0);
		for (int i = 0; i < 2; i++)
			pthread_join(t[i], NULL);
		for (uint32_t p = 0; p < NPORTS; p++)
			XT_ASSERT(xseg_get_next_hop(xt_seg, p) == XSEG_NO_PORT,
				  "round %llu: port %u still routes to port %u after its chain's "
				  "caches %u and %u were both unplugged", (unsigned long long)done,
				  p, xseg_get_next_hop(xt_seg, p), p % T, T + p % T);
	}
	ck_assert_uint_gt(done, 0);
}
END_TEST

static void setup(void)
{
	xt_setup_with(NPORTS, 64, 64 << 10);
}

int main(void)
{
	Suite *s = suite_create("xseg_unplug_splice");
	TCase *tc = tcase_create("splice");
	tcase_set_timeout(tc, 30);
	tcase_add_checked_fixture(tc, setup, xt_teardown);
	tcase_add_test(tc, two_unplugs_at_once_leave_no_route_to_either);
	suite_add_tcase(s, tc);
	return xt_run(s);
}
