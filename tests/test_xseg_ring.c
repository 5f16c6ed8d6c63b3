/*
 * The lock-free ring (src/ring.c) on its own: FIFO order, full and empty,
 * and the two moments a stalled peer leaves a cell half-done: a consumer
 * that claimed a cell and has not released it yet, and a producer that
 * claimed one and has not published it yet. Neither may make a push fail
 * (that lost requests) or a pop report empty (that gave false ENOBUFS).
 * The stalled peer is simulated by doing its first step by hand.
 */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "../src/xseg_internal.h"
#include "support/xseg_test_util.h"

static struct xseg_ring *new_ring(uint32_t cap)
{
	struct xseg_ring *r = aligned_alloc(XSEG_CACHELINE, xseg_ring_bytes(cap));
	ck_assert_ptr_nonnull(r);
	xseg_ring_init(r, cap);
	return r;
}

START_TEST(fifo_full_empty)
{
	struct xseg_ring *r = new_ring(8);
	uint32_t v;
	ck_assert(!xseg_ring_pop(r, &v));
	ck_assert(!xseg_ring_nonempty(r));
	for (uint32_t lap = 0; lap < 5; lap++) {
		for (uint32_t i = 0; i < 8; i++)
			ck_assert(xseg_ring_push(r, lap * 100 + i));
		ck_assert_uint_eq(xseg_ring_count(r), 8);
		ck_assert(!xseg_ring_push(r, 999));      /* really full: at once */
		for (uint32_t i = 0; i < 8; i++) {
			ck_assert(xseg_ring_pop(r, &v));
			ck_assert_uint_eq(v, lap * 100 + i);
		}
		ck_assert(!xseg_ring_pop(r, &v));
		ck_assert_uint_eq(xseg_ring_count(r), 0);
	}
	free(r);
}
END_TEST

struct finisher {
	struct xseg_ring *r;
	uint64_t pos;
	uint64_t seq;          /* what the stalled peer would store */
	uint32_t value;
	bool write_value;
	unsigned delay_us;
};

static void *finish_later(void *arg)
{
	struct finisher *f = arg;
	usleep(f->delay_us);
	struct xseg_ring_cell *c = &f->r->cells[f->pos & f->r->mask];
	if (f->write_value)
		c->value = f->value;
	atomic_store_explicit(&c->seq, f->seq, memory_order_release);
	return NULL;
}

/* A consumer claimed position 0 and stalls; the others go a whole lap. */
static struct xseg_ring *lap_past_stalled_consumer(uint32_t cap, uint32_t *taken)
{
	struct xseg_ring *r = new_ring(cap);
	uint32_t v;
	ck_assert(xseg_ring_push(r, 7));
	uint64_t h = 0;
	ck_assert(atomic_compare_exchange_strong(&r->head, &h, 1));   /* its CAS */
	*taken = r->cells[0].value;
	for (uint32_t i = 1; i < cap; i++) {
		ck_assert(xseg_ring_push(r, i));
		ck_assert(xseg_ring_pop(r, &v));
		ck_assert_uint_eq(v, i);
	}
	ck_assert_uint_eq(xseg_ring_count(r), 0);
	return r;
}

START_TEST(push_waits_for_stalled_consumer)
{
	uint32_t taken, v;
	struct xseg_ring *r = lap_past_stalled_consumer(4, &taken);
	ck_assert_uint_eq(taken, 7);
	/* The consumer finishes 50 ms later; the push must not fail before. */
	struct finisher f = { .r = r, .pos = 0, .seq = 4, .delay_us = 50000 };
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, finish_later, &f), 0);
	ck_assert_msg(xseg_ring_push(r, 42), "push failed behind a stalled consumer");
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	ck_assert(xseg_ring_pop(r, &v));
	ck_assert_uint_eq(v, 42);
	free(r);
}
END_TEST

START_TEST(push_gives_up_on_dead_consumer)
{
	uint32_t taken;
	struct xseg_ring *r = lap_past_stalled_consumer(4, &taken);
	uint64_t t0 = xseg_now_ns();
	ck_assert(!xseg_ring_push(r, 42));       /* never released: bounded */
	uint64_t dt = xseg_now_ns() - t0;
	ck_assert_uint_ge(dt, 500000000ull);
	ck_assert_uint_lt(dt, 5000000000ull);
	free(r);
}
END_TEST

START_TEST(pop_waits_for_stalled_producer)
{
	struct xseg_ring *r = new_ring(4);
	uint32_t v;
	uint64_t t = 0;
	ck_assert(atomic_compare_exchange_strong(&r->tail, &t, 1));   /* its CAS */
	ck_assert(xseg_ring_push(r, 2));
	ck_assert(xseg_ring_nonempty(r));
	struct finisher f = { .r = r, .pos = 0, .seq = 1, .value = 1, .write_value = true,
			      .delay_us = 50000 };
	pthread_t th;
	ck_assert_int_eq(pthread_create(&th, NULL, finish_later, &f), 0);
	ck_assert_msg(xseg_ring_pop(r, &v), "pop said empty with two values claimed");
	ck_assert_uint_eq(v, 1);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert(xseg_ring_pop(r, &v));
	ck_assert_uint_eq(v, 2);
	ck_assert(!xseg_ring_pop(r, &v));
	free(r);
}
END_TEST

/* Many threads pass a fixed set of tokens around two rings whose capacity
 * equals the number of tokens: no push ever fails, nothing is lost. */
#define TOKENS 64
static struct xseg_ring *ring_a, *ring_b;
static _Atomic int push_failures;
static _Atomic uint64_t moves;

static void *mover(void *arg)
{
	uint64_t n = *(uint64_t *)arg;
	uint32_t v;
	for (uint64_t i = 0; i < n; i++) {
		struct xseg_ring *from = (i & 1) ? ring_a : ring_b;
		struct xseg_ring *to = (i & 1) ? ring_b : ring_a;
		if (!xseg_ring_pop(from, &v))
			continue;
		if (!xseg_ring_push(to, v))
			atomic_fetch_add(&push_failures, 1);
		atomic_fetch_add_explicit(&moves, 1, memory_order_relaxed);
	}
	return NULL;
}

START_TEST(tokens_survive_contention)
{
	enum { THREADS = 6 };
	pthread_t t[THREADS];
	uint64_t n = xt_scaled(400000, 20000);
	uint32_t v, seen[TOKENS] = { 0 };

	ring_a = new_ring(TOKENS);
	ring_b = new_ring(TOKENS);
	for (uint32_t i = 0; i < TOKENS; i++)
		ck_assert(xseg_ring_push(i % 2 ? ring_a : ring_b, i));
	for (int i = 0; i < THREADS; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, mover, &n), 0);
	for (int i = 0; i < THREADS; i++)
		ck_assert_int_eq(pthread_join(t[i], NULL), 0);
	ck_assert_int_eq(atomic_load(&push_failures), 0);
	ck_assert_uint_gt(atomic_load(&moves), n);
	uint32_t total = 0;
	while (xseg_ring_pop(ring_a, &v)) {
		ck_assert_uint_lt(v, TOKENS);
		seen[v]++;
		total++;
	}
	while (xseg_ring_pop(ring_b, &v)) {
		ck_assert_uint_lt(v, TOKENS);
		seen[v]++;
		total++;
	}
	ck_assert_uint_eq(total, TOKENS);
	for (uint32_t i = 0; i < TOKENS; i++)
		ck_assert_uint_eq(seen[i], 1);
	free(ring_a);
	free(ring_b);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xseg_ring");
	TCase *tc = tcase_create("ring");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, fifo_full_empty);
	tcase_add_test(tc, push_waits_for_stalled_consumer);
	tcase_add_test(tc, push_gives_up_on_dead_consumer);
	tcase_add_test(tc, pop_waits_for_stalled_producer);
	tcase_add_test(tc, tokens_survive_contention);
	suite_add_tcase(s, tc);
	return xt_run(s);
}
