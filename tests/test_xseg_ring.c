/*
 * The lock-free ring (src/ring.c) on its own: FIFO order, full and empty,
 * and the one moment a peer killed mid-push or mid-pop can leave behind:
 * its cell done, tail or head not moved on. The next peer must move it on
 * and the ring must keep working at full capacity. The killed peer is
 * simulated by doing its first step by hand.
 */
#define _GNU_SOURCE   /* pthread_timedjoin_np */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

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

/* A cell's word as ring.c writes it: sequence << 24 | value. */
static uint64_t word(uint64_t seq, uint32_t value)
{
	return seq << 24 | value;
}

/*
 * A producer killed after it filled its cell and before it moved tail: the
 * value is there for a pop at once, and the next push moves tail past it
 * and lands behind it. (Before, a producer killed between its claim and
 * its publish wedged the ring for good.)
 */
START_TEST(producer_killed_after_its_cell)
{
	struct xseg_ring *r = new_ring(4);
	uint32_t v;
	uint64_t empty = word(0, 0);
	ck_assert(atomic_compare_exchange_strong(&r->cells[0].word, &empty, word(1, 5)));
	ck_assert(xseg_ring_nonempty(r));              /* tail has not moved */
	ck_assert(xseg_ring_push(r, 6));
	ck_assert_uint_eq(atomic_load(&r->tail), 2);
	ck_assert(xseg_ring_pop(r, &v));
	ck_assert_uint_eq(v, 5);
	ck_assert(xseg_ring_pop(r, &v));
	ck_assert_uint_eq(v, 6);
	ck_assert(!xseg_ring_pop(r, &v));
	/* a pop alone finds it too */
	uint64_t e2 = word(2, 0);
	ck_assert(atomic_compare_exchange_strong(&r->cells[2].word, &e2, word(3, 9)));
	ck_assert(xseg_ring_pop(r, &v));
	ck_assert_uint_eq(v, 9);
	/* ... and then the next push moves tail past the popped cell (it
	 * looked again for ever: a server SIGKILLed in its reply's push hung
	 * the next reply to that client) */
	ck_assert(!xseg_ring_nonempty(r));
	ck_assert(xseg_ring_push(r, 10));
	ck_assert_uint_eq(atomic_load(&r->tail), 4);
	ck_assert(xseg_ring_pop(r, &v));
	ck_assert_uint_eq(v, 10);
	ck_assert(!xseg_ring_pop(r, &v));
	free(r);
}
END_TEST

/*
 * A consumer killed after it emptied its cell and before it moved head:
 * the next pop moves head past it, and the ring keeps its whole capacity
 * (before, a push behind such a cell waited a second and then failed).
 */
START_TEST(consumer_killed_after_its_cell)
{
	struct xseg_ring *r = new_ring(4);
	uint32_t v;
	ck_assert(xseg_ring_push(r, 7));
	uint64_t full = word(1, 7);
	ck_assert(atomic_compare_exchange_strong(&r->cells[0].word, &full, word(4, 0)));
	ck_assert(!xseg_ring_pop(r, &v));              /* empty; head moved on */
	ck_assert_uint_eq(atomic_load(&r->head), 1);
	for (uint32_t lap = 0; lap < 3; lap++) {
		for (uint32_t i = 0; i < 4; i++)
			ck_assert_msg(xseg_ring_push(r, 10 * lap + i), "lap %u push %u", lap, i);
		ck_assert(!xseg_ring_push(r, 99));     /* really full */
		for (uint32_t i = 0; i < 4; i++) {
			ck_assert(xseg_ring_pop(r, &v));
			ck_assert_uint_eq(v, 10 * lap + i);
		}
	}
	free(r);
}
END_TEST

/* A pop in a thread of its own, given up after a second (it spun). */
struct timed_pop {
	struct xseg_ring *r;
	uint32_t v;
	bool ok;
};

static void *timed_pop_fn(void *arg)
{
	struct timed_pop *tp = arg;
	tp->ok = xseg_ring_pop(tp->r, &tp->v);
	return NULL;
}

static bool pop_within_a_second(struct xseg_ring *r, uint32_t *v, bool *ok)
{
	static struct timed_pop tp;   /* outlives a pop that spins */
	pthread_t t;
	struct timespec until;
	tp.r = r;
	ck_assert_int_eq(pthread_create(&t, NULL, timed_pop_fn, &tp), 0);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 1;
	if (pthread_timedjoin_np(t, NULL, &until) == ETIMEDOUT)
		return false;
	*v = tp.v;
	*ok = tp.ok;
	return true;
}

/*
 * The same, and the ring filled to its capacity before anyone popped: the
 * cell head points at is emptied and already filled again for the next
 * lap. A pool whose taker was killed so, and whose request the reap put
 * back (every request free again), has exactly that: the next pop looked
 * again for ever (every xseg_get_request of the segment spun at 100% CPU).
 */
START_TEST(consumer_killed_after_its_cell_then_ring_filled)
{
	struct xseg_ring *r = new_ring(4);
	uint32_t v;
	bool ok;
	for (uint32_t i = 0; i < 4; i++)
		ck_assert(xseg_ring_push(r, i));
	uint64_t full = word(1, 0);
	ck_assert(atomic_compare_exchange_strong(&r->cells[0].word, &full, word(4, 0)));
	ck_assert(xseg_ring_push(r, 0));                /* put back: 4 values again */
	ck_assert(!xseg_ring_push(r, 99));              /* really full */
	for (uint32_t i = 1; i <= 4; i++) {
		ck_assert_msg(pop_within_a_second(r, &v, &ok),
			      "pop %u behind the emptied and refilled cell spins", i);
		ck_assert_msg(ok, "pop %u: empty", i);
		ck_assert_uint_eq(v, i % 4);
	}
	ck_assert(!xseg_ring_pop(r, &v));
	ck_assert_uint_eq(xseg_ring_count(r), 0);
	free(r);
}
END_TEST

/*
 * The count (xseg info's free requests, a port's queue depths) as the next
 * pop and push see the ring: a producer killed after its cell left tail
 * before a value that is there, a consumer killed after its cell left head
 * on one that is gone. Before, the pool of an idle segment said '4095 of
 * 4096 free' (a request looked lost) or '4097 of 4096' until the next push
 * or pop.
 */
START_TEST(count_past_killed_producer_and_consumer)
{
	struct xseg_ring *r = new_ring(4);
	uint32_t v;
	uint64_t empty = word(0, 0);
	ck_assert(atomic_compare_exchange_strong(&r->cells[0].word, &empty, word(1, 5)));
	ck_assert_uint_eq(xseg_ring_count(r), 1);            /* tail not moved */
	ck_assert(xseg_ring_push(r, 6));
	ck_assert(xseg_ring_push(r, 7));
	ck_assert_uint_eq(xseg_ring_count(r), 3);
	uint64_t full = word(1, 5);
	ck_assert(atomic_compare_exchange_strong(&r->cells[0].word, &full, word(4, 0)));
	ck_assert_uint_eq(xseg_ring_count(r), 2);            /* head not moved */
	ck_assert(xseg_ring_push(r, 8));
	ck_assert(xseg_ring_push(r, 9));                     /* full: cell 0 again */
	ck_assert_uint_eq(xseg_ring_count(r), 4);
	ck_assert(xseg_ring_pop(r, &v));
	ck_assert_uint_eq(v, 6);
	ck_assert_uint_eq(xseg_ring_count(r), 3);
	free(r);
}
END_TEST

START_TEST(values_fit_24_bits)
{
	struct xseg_ring *r = new_ring(4);
	uint32_t v;
	ck_assert(xseg_ring_push(r, (1u << 24) - 1));
	ck_assert(!xseg_ring_push(r, 1u << 24));
	ck_assert(xseg_ring_pop(r, &v));
	ck_assert_uint_eq(v, (1u << 24) - 1);
	ck_assert_uint_ge((1u << 24), XSEG_MAX_REQUESTS);
	free(r);
}
END_TEST

/* A tagged push tells its position before it fills the cell, and the pop
 * of that value says the same position, lap after lap; holds() sees a
 * value only while a cell has it. */
START_TEST(tagged_push_and_pop_agree_on_the_position)
{
	struct xseg_ring *r = new_ring(4);
	uint64_t tag = 0, at_push, at_pop;
	uint32_t v;
	for (uint32_t i = 0; i < 11; i++) {
		ck_assert(xseg_ring_push_tagged(r, 5 + i, &tag, 7ull << 48, &at_push));
		ck_assert_uint_eq(tag, 7ull << 48 | at_push);
		ck_assert_uint_eq(at_push, i);
		ck_assert(xseg_ring_holds(r, 5 + i));
		ck_assert(xseg_ring_pop_at(r, &v, &at_pop));
		ck_assert_uint_eq(v, 5 + i);
		ck_assert_uint_eq(at_pop, at_push);
		ck_assert(!xseg_ring_holds(r, 5 + i));
	}
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
	tcase_add_test(tc, producer_killed_after_its_cell);
	tcase_add_test(tc, consumer_killed_after_its_cell);
	tcase_add_test(tc, consumer_killed_after_its_cell_then_ring_filled);
	tcase_add_test(tc, count_past_killed_producer_and_consumer);
	tcase_add_test(tc, values_fit_24_bits);
	tcase_add_test(tc, tagged_push_and_pop_agree_on_the_position);
	tcase_add_test(tc, tokens_survive_contention);
	suite_add_tcase(s, tc);
	return xt_run(s);
}
