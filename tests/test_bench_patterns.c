/*
 * bench-xseg's block order and data patterns: rand visits every block once
 * and reproducibly; verification catches every kind of damage and accepts
 * any block size over the same data.
 */
#include <check.h>

#include "support/xseg_test_util.h"
#include <stdlib.h>
#include <string.h>

/* The modules are bench-private; compile them into this test. */
#include "../bench/bench-xseg/block_data.c"
#include "../bench/bench-xseg/block_order.c"

static void check_permutation(uint64_t n, uint64_t seed)
{
	struct block_order o;
	unsigned char *seen = calloc(n ? n : 1, 1);
	block_order_init(&o, n, true, seed);
	for (uint64_t i = 0; i < n; i++) {
		uint64_t b = block_order_at(&o, i);
		ck_assert_uint_lt(b, n);
		ck_assert_msg(!seen[b], "block %llu visited twice (n=%llu)",
			      (unsigned long long)b, (unsigned long long)n);
		seen[b] = 1;
	}
	free(seen);
}

START_TEST(rand_visits_each_block_once)
{
	uint64_t sizes[] = { 1, 2, 3, 4, 5, 7, 16, 17, 1000, 4096, 65537, 300000 };
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		check_permutation(sizes[i], 42 + i);
}
END_TEST

START_TEST(rand_order_depends_on_seed_only)
{
	struct block_order a, b, c;
	block_order_init(&a, 1000, true, 7);
	block_order_init(&b, 1000, true, 7);
	block_order_init(&c, 1000, true, 8);
	int same_as_c = 0, in_place = 0;
	for (uint64_t i = 0; i < 1000; i++) {
		ck_assert_uint_eq(block_order_at(&a, i), block_order_at(&b, i));
		same_as_c += block_order_at(&a, i) == block_order_at(&c, i);
		in_place += block_order_at(&a, i) == i;
	}
	ck_assert_int_lt(same_as_c, 50);   /* another seed, another order */
	ck_assert_int_lt(in_place, 50);    /* and not the identity */
}
END_TEST

START_TEST(seq_is_identity)
{
	struct block_order o;
	block_order_init(&o, 100, false, 3);
	for (uint64_t i = 0; i < 100; i++)
		ck_assert_uint_eq(block_order_at(&o, i), i);
}
END_TEST

START_TEST(full_verify_accepts_written_data_at_any_block_size)
{
	unsigned char buf[65536];
	block_data_fill(VERIFY_FULL, buf, sizeof(buf), 5, 9, 4096);
	ck_assert_uint_eq(block_data_check(VERIFY_FULL, buf, sizeof(buf), 5, 9, 4096), 0);
	/* A read of a sub-range, even unaligned, checks against the same data. */
	ck_assert_uint_eq(block_data_check(VERIFY_FULL, buf + 13, 1000, 5, 9, 4096 + 13), 0);
	ck_assert_uint_eq(block_data_check(VERIFY_FULL, buf + 4096, 4096, 5, 9, 8192), 0);
}
END_TEST

START_TEST(full_verify_catches_damage)
{
	unsigned char buf[4096];
	block_data_fill(VERIFY_FULL, buf, sizeof(buf), 5, 9, 0);
	buf[4095] ^= 1;
	ck_assert_uint_eq(block_data_check(VERIFY_FULL, buf, sizeof(buf), 5, 9, 0), 1);
	buf[4095] ^= 1;
	/* Another seed, object or offset is another pattern. */
	ck_assert_uint_gt(block_data_check(VERIFY_FULL, buf, sizeof(buf), 6, 9, 0), 4000);
	ck_assert_uint_gt(block_data_check(VERIFY_FULL, buf, sizeof(buf), 5, 10, 0), 4000);
	ck_assert_uint_gt(block_data_check(VERIFY_FULL, buf, sizeof(buf), 5, 9, 4096), 4000);
	memset(buf, 0, sizeof(buf));
	ck_assert_uint_gt(block_data_check(VERIFY_FULL, buf, sizeof(buf), 5, 9, 0), 4000);
}
END_TEST

START_TEST(meta_verify_checks_both_signatures)
{
	unsigned char buf[4096];
	memset(buf, 0xaa, sizeof(buf));
	block_data_fill(VERIFY_META, buf, sizeof(buf), 1, 2, 3);
	ck_assert_uint_eq(block_data_check(VERIFY_META, buf, sizeof(buf), 1, 2, 3), 0);
	buf[sizeof(buf) - 1] ^= 0xff;
	ck_assert_uint_gt(block_data_check(VERIFY_META, buf, sizeof(buf), 1, 2, 3), 0);
	ck_assert_uint_gt(block_data_check(VERIFY_META, buf, 4096, 1, 2, 4), 0);
	unsigned char small[16];
	block_data_fill(VERIFY_META, small, sizeof(small), 1, 2, 3);
	ck_assert_uint_eq(block_data_check(VERIFY_META, small, sizeof(small), 1, 2, 3), 0);
}
END_TEST

/* A block shorter than the 24-byte signature held only its first bytes
 * (the seed's): another object's or another offset's block of the same
 * run checked out. Such blocks get the full pattern instead. */
START_TEST(meta_verify_of_a_short_block_checks_object_and_offset)
{
	for (size_t len = 1; len < 48; len++) {
		unsigned char buf[48];
		block_data_fill(VERIFY_META, buf, len, 1, 2, 64);
		ck_assert_uint_eq(block_data_check(VERIFY_META, buf, len, 1, 2, 64), 0);
		ck_assert_msg(block_data_check(VERIFY_META, buf, len, 1, 3, 64) > 0,
			      "a %zu-byte block of object 2 checks out as object 3's", len);
		ck_assert_msg(block_data_check(VERIFY_META, buf, len, 1, 2, 64 + len) > 0,
			      "a %zu-byte block checks out at the next offset", len);
		memset(buf, 0, len);
		ck_assert_uint_gt(block_data_check(VERIFY_META, buf, len, 1, 2, 64), 0);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("bench_patterns");
	TCase *tc = tcase_create("patterns");
	tcase_set_timeout(tc, 60);   /* 300000-block permutations: slow under TSan on a busy machine */
	tcase_add_test(tc, rand_visits_each_block_once);
	tcase_add_test(tc, rand_order_depends_on_seed_only);
	tcase_add_test(tc, seq_is_identity);
	tcase_add_test(tc, full_verify_accepts_written_data_at_any_block_size);
	tcase_add_test(tc, full_verify_catches_damage);
	tcase_add_test(tc, meta_verify_checks_both_signatures);
	tcase_add_test(tc, meta_verify_of_a_short_block_checks_object_and_offset);
	suite_add_tcase(s, tc);
	return xt_run(s);
}
