/*
 * The bench programs' latency histogram (bench/common/latency.c): a
 * percentile is the smallest recorded value that at least that share of
 * the records do not exceed (nearest rank), within the bucket's 3 %.
 */
#include <check.h>

#include "support/xseg_test_util.h"

/* bench/common is linked into bench programs only; compile it in. */
#include "../bench/common/latency.c"

/* 79 records of 1 ns and one of 31 ns: 1 ns covers 98.75 %, so p99 is 31
 * ns (values under 32 have exact buckets). */
START_TEST(percentile_is_the_nearest_rank)
{
	struct latency_hist h;
	latency_init(&h);
	for (int i = 0; i < 79; i++)
		latency_record(&h, 1);
	latency_record(&h, 31);
	ck_assert_msg(latency_percentile(&h, 99.0) == 31.0, "p99 of 79 x 1 ns and 1 x 31 ns: %.1f",
		      latency_percentile(&h, 99.0));
	ck_assert(latency_percentile(&h, 98.75) == 1.0);   /* exactly 79 of 80 */
	ck_assert(latency_percentile(&h, 50.0) == 1.0);
	ck_assert(latency_percentile(&h, 100.0) == 31.0);

	/* 1600 records 1..1600 ns: p99.9 is the 1599th (ceil 1598.4) */
	latency_init(&h);
	for (uint64_t v = 1; v <= 1600; v++)
		latency_record(&h, v);
	double p = latency_percentile(&h, 99.9);
	ck_assert_msg(p >= 1599 * 0.97 && p <= 1600, "p99.9 of 1..1600: %.1f", p);
	/* exact ranks stay exact: p50 of 1..1600 is the 800th, p99.9 of
	 * 1..1000 the 999th (no rounding up past them) */
	p = latency_percentile(&h, 50.0);
	ck_assert_msg(p >= 800 * 0.97 && p <= 800 * 1.03, "p50 of 1..1600: %.1f", p);
	latency_init(&h);
	for (int i = 0; i < 999; i++)
		latency_record(&h, 1);
	latency_record(&h, 31);
	ck_assert(latency_percentile(&h, 99.9) == 1.0);
	ck_assert(latency_percentile(&h, 99.91) == 31.0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("bench_latency");
	TCase *tc = tcase_create("latency");
	tcase_add_test(tc, percentile_is_the_nearest_rank);
	suite_add_tcase(s, tc);
	return xt_run(s);
}
