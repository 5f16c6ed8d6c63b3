/*
 * xwaitq: a job runs at once when its condition holds, waits otherwise,
 * runs in FIFO order on the thread that signals, and the lost-wake-up
 * stress: producers add tokens and signal while consumers enqueue jobs that
 * each take one token; after every round, with no extra signal, every job
 * must have run and every token must be taken.  Iterations scale by
 * XSEG_STRESS_SCALE.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xtypes/xwaitq.h>

struct job {
	struct xwork work;
	int id;
	pthread_t ran_on;
};

static char order[64];
static atomic_int open_gate;
static struct xwaitq waitq;

static bool gate_is_open(void *arg)
{
	return atomic_load((atomic_int *)arg) > 0;
}

static void record(struct xwork *w, void *arg)
{
	struct job *j = caa_container_of(w, struct job, work);
	size_t len = strlen(order);

	(void)arg;
	order[len] = (char)('0' + j->id);
	order[len + 1] = '\0';
	j->ran_on = pthread_self();
}

static void setup(void)
{
	order[0] = '\0';
	atomic_store(&open_gate, 0);
	xwaitq_init(&waitq, gate_is_open, &open_gate);
}

START_TEST(job_runs_at_once_when_the_condition_holds)
{
	struct job j = { .id = 1 };

	atomic_store(&open_gate, 1);
	xwork_init(&j.work, record, NULL);
	xwaitq_enqueue(&waitq, &j.work);
	ck_assert_str_eq(order, "1");
	ck_assert(xwaitq_empty(&waitq));
}
END_TEST

static void *signal_from_thread(void *arg)
{
	(void)arg;
	atomic_store(&open_gate, 1);
	xwaitq_signal(&waitq);
	return NULL;
}

START_TEST(jobs_wait_for_the_condition_and_run_in_order_on_the_signaller)
{
	struct job j[3] = { { .id = 1 }, { .id = 2 }, { .id = 3 } };
	pthread_t t;

	for (int i = 0; i < 3; i++) {
		xwork_init(&j[i].work, record, NULL);
		xwaitq_enqueue(&waitq, &j[i].work);
	}
	xwaitq_signal(&waitq);			/* condition still false */
	ck_assert_str_eq(order, "");
	ck_assert_int_eq(xwaitq_destroy(&waitq), -EBUSY);
	pthread_create(&t, NULL, signal_from_thread, NULL);
	pthread_join(t, NULL);
	ck_assert_str_eq(order, "123");
	ck_assert(pthread_equal(j[2].ran_on, t));
	ck_assert_int_eq(xwaitq_destroy(&waitq), 0);
}
END_TEST

/* Each job closes the gate behind it: the condition is tested per job. */
static void take_gate(struct xwork *w, void *arg)
{
	record(w, arg);
	atomic_store(&open_gate, 0);
}

START_TEST(condition_is_tested_again_before_each_job)
{
	struct job j[2] = { { .id = 1 }, { .id = 2 } };

	for (int i = 0; i < 2; i++) {
		xwork_init(&j[i].work, take_gate, NULL);
		xwaitq_enqueue(&waitq, &j[i].work);
	}
	atomic_store(&open_gate, 1);
	xwaitq_signal(&waitq);
	ck_assert_str_eq(order, "1");
	atomic_store(&open_gate, 1);
	xwaitq_signal(&waitq);
	ck_assert_str_eq(order, "12");
}
END_TEST

START_TEST(a_new_job_does_not_overtake_waiting_ones)
{
	struct job first = { .id = 1 }, second = { .id = 2 };

	xwork_init(&first.work, take_gate, NULL);
	xwork_init(&second.work, record, NULL);
	xwaitq_enqueue(&waitq, &first.work);
	atomic_store(&open_gate, 1);		/* no signal yet */
	xwaitq_enqueue(&waitq, &second.work);	/* runs first, closes the gate */
	ck_assert_str_eq(order, "1");
	atomic_store(&open_gate, 1);
	xwaitq_signal(&waitq);
	ck_assert_str_eq(order, "12");
}
END_TEST

/* ---- lost wake-up stress ------------------------------------------------ */

#define PRODUCERS	2
#define CONSUMERS	2
#define PER_THREAD	64	/* tokens per producer = jobs per consumer */

struct token_job {
	struct xwork work;
	int runs;
};

static atomic_int tokens;
static atomic_long taken;
static struct xwaitq token_q;
static struct token_job token_jobs[CONSUMERS][PER_THREAD];
static pthread_barrier_t round_start, round_end;
static long rounds;

static bool tokens_available(void *arg)
{
	(void)arg;
	return atomic_load(&tokens) > 0;
}

static void take_token(struct xwork *w, void *arg)
{
	int n = atomic_load(&tokens);

	(void)arg;
	while (n > 0)
		if (atomic_compare_exchange_weak(&tokens, &n, n - 1)) {
			caa_container_of(w, struct token_job, work)->runs++;
			atomic_fetch_add(&taken, 1);
			return;
		}
	xwaitq_enqueue(&token_q, w);	/* an enqueuer's fast path took it */
}

static void *producer(void *arg)
{
	(void)arg;
	for (long r = 0; r < rounds; r++) {
		pthread_barrier_wait(&round_start);
		for (int i = 0; i < PER_THREAD; i++) {
			atomic_fetch_add(&tokens, 1);
			xwaitq_signal(&token_q);
		}
		pthread_barrier_wait(&round_end);
		pthread_barrier_wait(&round_end);	/* main checks */
	}
	return NULL;
}

static void *consumer(void *arg)
{
	struct token_job *jobs = token_jobs[(uintptr_t)arg];

	for (long r = 0; r < rounds; r++) {
		pthread_barrier_wait(&round_start);
		for (int i = 0; i < PER_THREAD; i++) {
			xwork_init(&jobs[i].work, take_token, NULL);
			xwaitq_enqueue(&token_q, &jobs[i].work);
		}
		pthread_barrier_wait(&round_end);
		pthread_barrier_wait(&round_end);
	}
	return NULL;
}

START_TEST(no_wake_up_is_lost_between_a_false_condition_and_the_enqueue)
{
	const char *scale = getenv("XSEG_STRESS_SCALE");
	pthread_t t[PRODUCERS + CONSUMERS];
	long stuck = 0;

	rounds = (long)(1000 * (scale ? atof(scale) : 1.0));
	xwaitq_init(&token_q, tokens_available, NULL);
	pthread_barrier_init(&round_start, NULL, PRODUCERS + CONSUMERS + 1);
	pthread_barrier_init(&round_end, NULL, PRODUCERS + CONSUMERS + 1);
	for (int i = 0; i < PRODUCERS; i++)
		pthread_create(&t[i], NULL, producer, NULL);
	for (int i = 0; i < CONSUMERS; i++)
		pthread_create(&t[PRODUCERS + i], NULL, consumer, (void *)(uintptr_t)i);
	for (long r = 0; r < rounds; r++) {
		memset(token_jobs, 0, sizeof(token_jobs));
		pthread_barrier_wait(&round_start);
		pthread_barrier_wait(&round_end);
		/* Everyone is done and nobody signals again: all must have run. */
		if (!xwaitq_empty(&token_q) || atomic_load(&tokens) != 0)
			stuck++;
		for (int c = 0; c < CONSUMERS; c++)
			for (int i = 0; i < PER_THREAD; i++)
				stuck += token_jobs[c][i].runs != 1;
		pthread_barrier_wait(&round_end);
	}
	for (int i = 0; i < PRODUCERS + CONSUMERS; i++)
		pthread_join(t[i], NULL);
	ck_assert_int_eq(stuck, 0);
	ck_assert_int_eq(atomic_load(&taken), rounds * PRODUCERS * PER_THREAD);
	ck_assert_int_eq(xwaitq_destroy(&token_q), 0);
}
END_TEST

/*
 * One token, one job, per round, on two threads started together with a
 * random skew, so the producer's signal sweeps across every point of the
 * consumer's "condition false -> enqueue -> signal".  With no further
 * signal the job must have run when both are done.
 */
static atomic_long round_go, consumer_done;
static struct token_job race_job;

static void spin(unsigned n)
{
	for (volatile unsigned i = 0; i < n; i++)
		;
}

static void wait_for(atomic_long *v, long r)
{
	for (unsigned n = 0; atomic_load(v) != r; n++)
		if (n > 1000)
			sched_yield();
}

static void *race_consumer(void *arg)
{
	unsigned seed = 7;

	(void)arg;
	for (long r = 1; r <= rounds; r++) {
		wait_for(&round_go, r);
		spin(rand_r(&seed) % 256);
		xwork_init(&race_job.work, take_token, NULL);
		xwaitq_enqueue(&token_q, &race_job.work);
		atomic_store(&consumer_done, r);
	}
	return NULL;
}

START_TEST(signal_racing_an_enqueue_is_never_lost)
{
	const char *scale = getenv("XSEG_STRESS_SCALE");
	unsigned seed = 3;
	long stuck = 0;
	pthread_t t;

	rounds = (long)(200000 * (scale ? atof(scale) : 1.0));
	xwaitq_init(&token_q, tokens_available, NULL);
	pthread_create(&t, NULL, race_consumer, NULL);
	for (long r = 1; r <= rounds; r++) {
		race_job.runs = 0;
		atomic_store(&round_go, r);
		spin(rand_r(&seed) % 256);
		atomic_fetch_add(&tokens, 1);
		xwaitq_signal(&token_q);
		wait_for(&consumer_done, r);
		if (race_job.runs != 1 || atomic_load(&tokens) != 0) {
			stuck++;
			atomic_store(&tokens, 1);	/* unstick for the next round */
			xwaitq_signal(&token_q);
		}
	}
	pthread_join(t, NULL);
	ck_assert_int_eq(stuck, 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xtypes_xwaitq");
	TCase *tc = tcase_create("xwaitq");

	tcase_set_timeout(tc, 120);
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, job_runs_at_once_when_the_condition_holds);
	tcase_add_test(tc, jobs_wait_for_the_condition_and_run_in_order_on_the_signaller);
	tcase_add_test(tc, condition_is_tested_again_before_each_job);
	tcase_add_test(tc, a_new_job_does_not_overtake_waiting_ones);
	tcase_add_test(tc, no_wake_up_is_lost_between_a_false_condition_and_the_enqueue);
	tcase_add_test(tc, signal_racing_an_enqueue_is_never_lost);
	suite_add_tcase(s, tc);

	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
