/*
 * cached's bucket state machine and range arithmetic: legal and illegal
 * transitions, counters, claim/release, spans at the edges, runs.
 */
#include <check.h>

#include "support/xseg_test_util.h"
#include <errno.h>

#include "../peers/cached/buckets.c"

static const struct { enum bucket_state from, to; } allowed[] = {
	{ BUCKET_INVALID, BUCKET_LOADING }, { BUCKET_INVALID, BUCKET_VALID },
	{ BUCKET_INVALID, BUCKET_DIRTY },   { BUCKET_LOADING, BUCKET_VALID },
	{ BUCKET_LOADING, BUCKET_INVALID }, { BUCKET_VALID, BUCKET_DIRTY },
	{ BUCKET_VALID, BUCKET_INVALID },   { BUCKET_DIRTY, BUCKET_WRITING },
	{ BUCKET_DIRTY, BUCKET_INVALID },   { BUCKET_WRITING, BUCKET_VALID },
	{ BUCKET_WRITING, BUCKET_DIRTY },
};

START_TEST(transition_table_is_exactly_the_documented_one)
{
	for (int f = 0; f < BUCKET_STATES; f++)
		for (int t = 0; t < BUCKET_STATES; t++) {
			bool want = false;
			for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
				want |= allowed[i].from == (enum bucket_state)f &&
					allowed[i].to == (enum bucket_state)t;
			ck_assert_msg(bucket_transition_ok(f, t) == want, "%s -> %s",
				      bucket_state_name(f), bucket_state_name(t));
		}
	ck_assert(!bucket_transition_ok(BUCKET_STATES, BUCKET_VALID));
	/* never lose dirty data by "validating" it without a flush */
	ck_assert(!bucket_transition_ok(BUCKET_DIRTY, BUCKET_VALID));
	ck_assert(!bucket_transition_ok(BUCKET_LOADING, BUCKET_DIRTY));
}
END_TEST

START_TEST(set_keeps_object_and_total_counters)
{
	struct object_buckets ob;
	struct bucket_totals t = { 0 };
	ck_assert_int_eq(object_buckets_init(&ob, 8), 0);
	ck_assert_uint_eq(ob.count[BUCKET_INVALID], 8);
	/* an unclaimed bucket holds no data and cannot leave INVALID */
	ck_assert_int_eq(bucket_set(&ob, &t, 0, BUCKET_VALID), -EINVAL);
	ck_assert_int_eq(bucket_claim(&ob, &t, 0, 17), 0);
	ck_assert_int_eq(bucket_claim(&ob, &t, 0, 18), -EBUSY);
	ck_assert_uint_eq(atomic_load(&t.count[BUCKET_INVALID]), 1);
	ck_assert_int_eq(bucket_set(&ob, &t, 0, BUCKET_DIRTY), 0);
	ck_assert_int_eq(bucket_set(&ob, &t, 0, BUCKET_VALID), -EINVAL);
	ck_assert_uint_eq(ob.state[0], BUCKET_DIRTY);   /* refused: unchanged */
	ck_assert_int_eq(bucket_set(&ob, &t, 0, BUCKET_WRITING), 0);
	ck_assert_uint_eq(ob.count[BUCKET_WRITING], 1);
	ck_assert_uint_eq(ob.count[BUCKET_INVALID], 7);
	ck_assert_uint_eq(atomic_load(&t.count[BUCKET_WRITING]), 1);
	ck_assert_uint_eq(atomic_load(&t.count[BUCKET_INVALID]), 0);
	/* a bucket being flushed cannot be released */
	ck_assert_int_eq(bucket_release(&ob, &t, 0), -EBUSY);
	ck_assert_int_eq(bucket_set(&ob, &t, 0, BUCKET_VALID), 0);
	ck_assert_int_eq(bucket_release(&ob, &t, 0), 17);
	ck_assert_uint_eq(ob.state[0], BUCKET_INVALID);
	ck_assert_uint_eq(ob.claimed, 0);
	ck_assert_uint_eq(atomic_load(&t.claimed), 0);
	for (int s = 0; s < BUCKET_STATES; s++)
		ck_assert_uint_eq(atomic_load(&t.count[s]), 0);
	ck_assert_int_eq(bucket_release(&ob, &t, 0), -EINVAL);
	ck_assert_int_eq(bucket_set(&ob, &t, 8, BUCKET_VALID), -EINVAL);
	object_buckets_free(&ob);
}
END_TEST

START_TEST(probation_only_while_valid_and_unused)
{
	struct object_buckets ob;
	struct bucket_totals t = { 0 };
	ck_assert_int_eq(object_buckets_init(&ob, 4), 0);
	for (uint32_t i = 0; i < 3; i++)
		ck_assert_int_eq(bucket_claim(&ob, &t, i, i), 0);
	ck_assert_int_eq(bucket_on_probation(&ob, &t, 0), -EINVAL);   /* INVALID */
	for (uint32_t i = 0; i < 3; i++) {
		ck_assert_int_eq(bucket_set(&ob, &t, i, BUCKET_LOADING), 0);
		ck_assert_int_eq(bucket_set(&ob, &t, i, BUCKET_VALID), 0);
		ck_assert_int_eq(bucket_on_probation(&ob, &t, i), 0);
	}
	ck_assert_int_eq(bucket_on_probation(&ob, &t, 0), 0);   /* twice counts once */
	ck_assert_uint_eq(ob.on_probation, 3);
	ck_assert_uint_eq(atomic_load(&t.probation), 3);
	bucket_used(&ob, &t, 0);                                /* a hit */
	bucket_used(&ob, &t, 0);
	ck_assert_int_eq(bucket_set(&ob, &t, 1, BUCKET_DIRTY), 0);   /* written */
	ck_assert(!ob.probation[0] && !ob.probation[1] && ob.probation[2]);
	ck_assert_uint_eq(ob.on_probation, 1);
	ck_assert_uint_eq(atomic_load(&t.probation), 1);
	ck_assert_int_eq(bucket_release(&ob, &t, 2), 2);        /* given back */
	ck_assert_uint_eq(ob.on_probation, 0);
	ck_assert_uint_eq(atomic_load(&t.probation), 0);
	object_buckets_free(&ob);
}
END_TEST

START_TEST(geometry_rejects_bad_sizes)
{
	struct bucket_geometry g;
	ck_assert_int_eq(bucket_geometry_init(&g, 4 << 20, 4096), 0);
	ck_assert_uint_eq(g.buckets_per_object, 1024);
	ck_assert_int_eq(bucket_geometry_init(&g, 4 << 20, 3000), -EINVAL);
	ck_assert_int_eq(bucket_geometry_init(&g, 4 << 20, 256), -EINVAL);
	ck_assert_int_eq(bucket_geometry_init(&g, 10000, 4096), -EINVAL);
	ck_assert_int_eq(bucket_geometry_init(&g, 0, 4096), -EINVAL);
}
END_TEST

START_TEST(spans_at_the_edges)
{
	struct bucket_geometry g;
	struct bucket_span s;
	bucket_geometry_init(&g, 64 * 1024, 4096);     /* 16 buckets */

	ck_assert_int_eq(bucket_span_of(&g, 0, 4096, &s), 0);
	ck_assert_uint_eq(s.first, 0); ck_assert_uint_eq(s.last, 0);
	ck_assert(!bucket_span_head_partial(&g, &s)); ck_assert(!bucket_span_tail_partial(&g, &s));

	ck_assert_int_eq(bucket_span_of(&g, 100, 10, &s), 0);     /* inside one bucket */
	ck_assert_uint_eq(s.first, 0); ck_assert_uint_eq(s.last, 0);
	ck_assert_uint_eq(s.head_skip, 100); ck_assert_uint_eq(s.tail_len, 110);
	ck_assert(bucket_span_head_partial(&g, &s)); ck_assert(bucket_span_tail_partial(&g, &s));

	ck_assert_int_eq(bucket_span_of(&g, 4000, 200, &s), 0);   /* straddles 0|1 */
	ck_assert_uint_eq(s.first, 0); ck_assert_uint_eq(s.last, 1);
	ck_assert_uint_eq(s.tail_len, 4200 - 4096);

	ck_assert_int_eq(bucket_span_of(&g, 4096, 8192, &s), 0);  /* whole buckets */
	ck_assert_uint_eq(s.first, 1); ck_assert_uint_eq(s.last, 2);
	ck_assert(!bucket_span_head_partial(&g, &s)); ck_assert(!bucket_span_tail_partial(&g, &s));

	ck_assert_int_eq(bucket_span_of(&g, 65536 - 1, 1, &s), 0); /* last byte */
	ck_assert_uint_eq(s.first, 15); ck_assert_uint_eq(s.last, 15);
	ck_assert_uint_eq(s.tail_len, 4096);
	ck_assert(bucket_span_head_partial(&g, &s)); ck_assert(!bucket_span_tail_partial(&g, &s));

	ck_assert_int_eq(bucket_span_of(&g, 0, 65536, &s), 0);     /* the whole object */
	ck_assert_uint_eq(s.last, 15);

	ck_assert_int_eq(bucket_span_of(&g, 65536, 1, &s), -EINVAL);  /* at the end */
	ck_assert_int_eq(bucket_span_of(&g, 65000, 1000, &s), -EINVAL); /* past it */
	ck_assert_int_eq(bucket_span_of(&g, 0, 0, &s), -EINVAL);
	ck_assert_int_eq(bucket_span_of(&g, 1, UINT64_MAX, &s), -EINVAL); /* overflow */
}
END_TEST

START_TEST(runs_are_maximal_and_capped)
{
	struct object_buckets ob;
	struct bucket_totals t = { 0 };
	uint32_t len;
	object_buckets_init(&ob, 16);
	for (uint32_t i = 0; i < 16; i++)
		bucket_claim(&ob, &t, i, i);
	for (uint32_t i = 2; i < 9; i++)
		bucket_set(&ob, &t, i, BUCKET_DIRTY);
	bucket_set(&ob, &t, 12, BUCKET_DIRTY);

	ck_assert_uint_eq(bucket_find_run(&ob, 0, 15, BUCKET_DIRTY, 100, &len), 2);
	ck_assert_uint_eq(len, 7);
	ck_assert_uint_eq(bucket_find_run(&ob, 0, 15, BUCKET_DIRTY, 4, &len), 2);
	ck_assert_uint_eq(len, 4);
	ck_assert_uint_eq(bucket_find_run(&ob, 9, 15, BUCKET_DIRTY, 100, &len), 12);
	ck_assert_uint_eq(len, 1);
	ck_assert_uint_eq(bucket_find_run(&ob, 0, 5, BUCKET_DIRTY, 100, &len), 2);
	ck_assert_uint_eq(len, 4);                   /* stops at `last` */
	ck_assert_uint_eq(bucket_find_run(&ob, 13, 15, BUCKET_DIRTY, 100, &len), 16);
	ck_assert_uint_eq(len, 0);
	ck_assert_uint_eq(bucket_find_run(&ob, 0, 99, BUCKET_WRITING, 100, &len), 16);
	object_buckets_free(&ob);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cached_buckets");
	TCase *tc = tcase_create("buckets");
	tcase_add_test(tc, transition_table_is_exactly_the_documented_one);
	tcase_add_test(tc, set_keeps_object_and_total_counters);
	tcase_add_test(tc, probation_only_while_valid_and_unused);
	tcase_add_test(tc, geometry_rejects_bad_sizes);
	tcase_add_test(tc, spans_at_the_edges);
	tcase_add_test(tc, runs_are_maximal_and_capped);
	suite_add_tcase(s, tc);
	return xt_run(s);
}
