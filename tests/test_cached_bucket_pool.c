/*
 * cached's bucket pool: every slot handed out once, exhaustion reported,
 * everything back after a drain, and no slot shared between threads.
 */
#include <check.h>

#include "support/xseg_test_util.h"
#include <pthread.h>
#include <stdlib.h>

#include "../peers/cached/bucket_pool.c"

START_TEST(hands_out_every_slot_once_then_reports_empty)
{
	struct bucket_pool p;
	struct bucket_magazine m = { 0 };
	ck_assert_int_eq(bucket_pool_init(&p, 100, 4096), 0);
	unsigned char seen[100] = { 0 };
	for (int i = 0; i < 100; i++) {
		uint32_t s = bucket_pool_get(&p, &m);
		ck_assert_uint_lt(s, 100);
		ck_assert(!seen[s]);
		seen[s] = 1;
		bucket_pool_data(&p, s)[4095] = (unsigned char)i;   /* writable */
	}
	ck_assert_uint_eq(bucket_pool_get(&p, &m), UINT32_MAX);
	ck_assert_uint_eq(atomic_load(&p.in_use), 100);
	for (uint32_t s = 0; s < 100; s++)
		bucket_pool_put(&p, &m, s);
	bucket_pool_drain(&p, &m);
	ck_assert_uint_eq(p.nfree, 100);
	ck_assert_uint_eq(atomic_load(&p.in_use), 0);
	bucket_pool_destroy(&p);
}
END_TEST

START_TEST(rejects_bad_sizes)
{
	struct bucket_pool p;
	ck_assert_int_eq(bucket_pool_init(&p, 0, 4096), -EINVAL);
	ck_assert_int_eq(bucket_pool_init(&p, 10, 0), -EINVAL);
}
END_TEST

#define POOL_SLOTS 512
static struct bucket_pool shared_pool;
static _Atomic uint32_t owner_of[POOL_SLOTS];
static _Atomic int conflicts;

static void *churn(void *arg)
{
	uint32_t me = (uint32_t)(uintptr_t)arg + 1, held[40], n = 0;
	struct bucket_magazine m = { 0 };
	unsigned seed = me;
	double scale = getenv("XSEG_STRESS_SCALE") ? atof(getenv("XSEG_STRESS_SCALE")) : 1.0;
	long rounds = (long)(300000 * scale);
	for (long i = 0; i < rounds; i++) {
		if (n < 40 && (rand_r(&seed) & 1)) {
			uint32_t s = bucket_pool_get(&shared_pool, &m);
			if (s == UINT32_MAX)
				continue;
			uint32_t none = 0;
			if (!atomic_compare_exchange_strong(&owner_of[s], &none, me))
				atomic_fetch_add(&conflicts, 1);
			held[n++] = s;
		} else if (n) {
			uint32_t s = held[--n];
			atomic_store(&owner_of[s], 0);
			bucket_pool_put(&shared_pool, &m, s);
		}
	}
	while (n) {
		uint32_t s = held[--n];
		atomic_store(&owner_of[s], 0);
		bucket_pool_put(&shared_pool, &m, s);
	}
	bucket_pool_drain(&shared_pool, &m);
	return NULL;
}

START_TEST(threads_never_share_a_slot)
{
	pthread_t t[4];
	ck_assert_int_eq(bucket_pool_init(&shared_pool, POOL_SLOTS, 512), 0);
	for (uintptr_t i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, churn, (void *)i);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	ck_assert_int_eq(atomic_load(&conflicts), 0);
	ck_assert_uint_eq(shared_pool.nfree, POOL_SLOTS);
	ck_assert_uint_eq(atomic_load(&shared_pool.in_use), 0);
	bucket_pool_destroy(&shared_pool);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cached_bucket_pool");
	TCase *tc = tcase_create("pool");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, hands_out_every_slot_once_then_reports_empty);
	tcase_add_test(tc, rejects_bad_sizes);
	tcase_add_test(tc, threads_never_share_a_slot);
	suite_add_tcase(s, tc);
	return xt_run(s);
}
