/*
 * Routes changed by two parties at once (two `xseg plug`/`route` runs, a
 * cache unplugging while another is plugged): what each xseg_set_next_hop
 * checks must still hold once both have stored. Two threads are the two
 * processes here (the checks and stores are the same shared-memory ones).
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "support/xseg_test_util.h"

enum { NPORTS = 512, NPAIRS = NPORTS / 2 };

static _Atomic uint32_t round_go, round_done;
static _Atomic bool quit;
static int results[2][NPAIRS];

/* Thread `side` sets, for each pair (a, b), a -> b (side 0) or b -> a
 * (side 1), all in one round, then waits for the next. */
static void *setter(void *arg)
{
	int side = (int)(intptr_t)arg;
	uint32_t seen = 0;

	for (;;) {
		uint32_t go;
		while ((go = atomic_load(&round_go)) == seen && !atomic_load(&quit))
			;
		if (atomic_load(&quit))
			return NULL;
		seen = go;
		/* Opposite orders: the two meet on some pair however late
		 * one of them starts. */
		for (uint32_t k = 0; k < NPAIRS; k++) {
			uint32_t i = side ? NPAIRS - 1 - k : k, a = 2 * i, b = 2 * i + 1;
			results[side][i] = side ? xseg_set_next_hop(xt_seg, b, a)
						: xseg_set_next_hop(xt_seg, a, b);
		}
		atomic_fetch_add(&round_done, 1);
	}
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* a -> b and b -> a at once: one of them must fail -ELOOP, or every
 * request for a or b bounces between them until its path is full. */
START_TEST(concurrent_set_next_hop_closes_no_cycle)
{
	pthread_t t[2];
	uint64_t rounds = xt_scaled(200000, 20000), done = 0;
	double end = now_s() + 6.0;

	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, setter, (void *)(intptr_t)i), 0);
	for (; done < rounds && now_s() < end; done++) {
		for (uint32_t p = 0; p < NPORTS; p++)
			xseg_clear_next_hop(xt_seg, p);
		atomic_store(&round_done, 0);
		atomic_fetch_add(&round_go, 1);
		while (atomic_load(&round_done) < 2)
			sched_yield();
		for (uint32_t i = 0; i < NPAIRS; i++) {
			uint32_t a = 2 * i, b = 2 * i + 1;
			bool cycle = xseg_get_next_hop(xt_seg, a) == b &&
				     xseg_get_next_hop(xt_seg, b) == a;
			if (cycle || (results[0][i] == 0 && results[1][i] == 0)) {
				atomic_store(&quit, true);
				for (int k = 0; k < 2; k++)
					pthread_join(t[k], NULL);
				ck_abort_msg("round %llu: %u -> %u and %u -> %u both set (%d, %d): "
					     "a route cycle", (unsigned long long)done, a, b, b, a,
					     results[0][i], results[1][i]);
			}
			XT_ASSERT(results[0][i] == 0 || results[0][i] == -ELOOP, "rc %d",
				  results[0][i]);
			XT_ASSERT(results[1][i] == 0 || results[1][i] == -ELOOP, "rc %d",
				  results[1][i]);
		}
	}
	atomic_store(&quit, true);
	for (int k = 0; k < 2; k++)
		pthread_join(t[k], NULL);
	ck_assert_uint_gt(done, 0);
}
END_TEST

static void setup(void)
{
	xt_setup_with(NPORTS, 64, 64 << 10);
}

int main(void)
{
	Suite *s = suite_create("xseg_route_races");
	TCase *tc = tcase_create("routes");
	tcase_set_timeout(tc, 30);
	tcase_add_checked_fixture(tc, setup, xt_teardown);
	tcase_add_test(tc, concurrent_set_next_hop_closes_no_cycle);
	suite_add_tcase(s, tc);
	return xt_run(s);
}
