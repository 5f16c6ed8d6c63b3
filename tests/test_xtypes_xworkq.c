/*
 * xworkq: jobs run on the enqueuing thread when the queue is idle, a busy
 * queue's enqueuer returns at once, order is kept, and under N threads x M
 * jobs on K queues every job runs exactly once, never overlapping another
 * job of its queue, in enqueue order per enqueuer; readers beside the queue
 * go in only while it is idle and never see a job half done.  Iterations
 * scale by XSEG_STRESS_SCALE.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xtypes/xworkq.h>

struct job {
	struct xwork work;
	int id;
	pthread_t ran_on;
};

static char order[64];
static struct xworkq queue;

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
	xworkq_init(&queue);
}

START_TEST(idle_queue_runs_the_job_on_the_caller)
{
	struct job j = { .id = 1 };

	xwork_init(&j.work, record, NULL);
	ck_assert(xworkq_enqueue(&queue, &j.work));
	ck_assert_str_eq(order, "1");
	ck_assert(pthread_equal(j.ran_on, pthread_self()));
	ck_assert(xworkq_enqueue(&queue, &j.work));	/* reusable after it ran */
	ck_assert_str_eq(order, "11");
	ck_assert_int_eq(xworkq_destroy(&queue), 0);
}
END_TEST

static struct job chain[3];

/* Enqueues the next job of the chain on the same queue from inside a job. */
static void enqueue_next(struct xwork *w, void *arg)
{
	(void)arg;
	record(w, NULL);
	struct job *j = caa_container_of(w, struct job, work);
	if (j->id < 3) {
		ck_assert(!xworkq_enqueue(&queue, &chain[j->id].work));	/* we are the runner */
		strcat(order, "-");
	}
}

START_TEST(job_enqueued_by_a_job_runs_after_it)
{
	for (int i = 0; i < 3; i++) {
		chain[i].id = i + 1;
		xwork_init(&chain[i].work, enqueue_next, NULL);
	}
	ck_assert(xworkq_enqueue(&queue, &chain[0].work));
	ck_assert_str_eq(order, "1-2-3");
}
END_TEST

static atomic_int release_blocker, blocker_started;

static void block_until_released(struct xwork *w, void *arg)
{
	(void)arg;
	record(w, NULL);
	atomic_store(&blocker_started, 1);
	while (!atomic_load(&release_blocker))
		sched_yield();
}

static void *enqueue_blocker(void *arg)
{
	xworkq_enqueue(&queue, arg);
	return NULL;
}

START_TEST(enqueue_on_a_busy_queue_returns_and_the_runner_runs_the_job)
{
	struct job blocker = { .id = 1 }, later = { .id = 2 };
	pthread_t runner;

	atomic_store(&release_blocker, 0);
	atomic_store(&blocker_started, 0);
	xwork_init(&blocker.work, block_until_released, NULL);
	xwork_init(&later.work, record, NULL);
	pthread_create(&runner, NULL, enqueue_blocker, &blocker.work);
	while (!atomic_load(&blocker_started))
		sched_yield();
	ck_assert(!xworkq_enqueue(&queue, &later.work));
	ck_assert_int_eq(xworkq_destroy(&queue), -EBUSY);
	atomic_store(&release_blocker, 1);
	pthread_join(runner, NULL);
	ck_assert_str_eq(order, "12");
	ck_assert(pthread_equal(later.ran_on, runner));
	ck_assert_int_eq(xworkq_destroy(&queue), 0);
}
END_TEST

static void blocker_never_released(struct xwork *w, void *arg)
{
	(void)w;
	(void)arg;
	atomic_store(&blocker_started, 1);
	for (;;)
		pause();
}

START_TEST(enqueue_of_a_queued_job_aborts)
{
	struct job blocker, j;
	pthread_t runner;

	atomic_store(&blocker_started, 0);
	xwork_init(&blocker.work, blocker_never_released, NULL);
	xwork_init(&j.work, record, NULL);
	pthread_create(&runner, NULL, enqueue_blocker, &blocker.work);
	while (!atomic_load(&blocker_started))
		sched_yield();
	xworkq_enqueue(&queue, &j.work);
	xworkq_enqueue(&queue, &j.work);
}
END_TEST

/* ---- readers beside the queue ------------------------------------------- */

static atomic_int gate_open, gate_job_started;

static void job_waits_for_the_gate(struct xwork *w, void *arg)
{
	(void)w; (void)arg;
	atomic_store(&gate_job_started, 1);
	while (!atomic_load(&gate_open))
		sched_yield();
}

static void *enqueue_gated(void *arg)
{
	xworkq_enqueue(&queue, arg);
	return NULL;
}

START_TEST(a_reader_is_let_in_only_while_the_queue_is_idle)
{
	struct job j;
	pthread_t runner;

	ck_assert(xworkq_read_begin(&queue));
	ck_assert(xworkq_read_begin(&queue));	/* readers go together */
	xworkq_read_end(&queue);
	xworkq_read_end(&queue);

	atomic_store(&gate_open, 0);
	atomic_store(&gate_job_started, 0);
	xwork_init(&j.work, job_waits_for_the_gate, NULL);
	pthread_create(&runner, NULL, enqueue_gated, &j.work);
	while (!atomic_load(&gate_job_started))
		sched_yield();
	ck_assert(!xworkq_read_begin(&queue));	/* a job runs */
	atomic_store(&gate_open, 1);
	pthread_join(runner, NULL);
	ck_assert(xworkq_read_begin(&queue));
	xworkq_read_end(&queue);
	ck_assert_int_eq(xworkq_destroy(&queue), 0);
}
END_TEST

/* A job linked but not yet counted (its enqueuer between its two stores;
 * a runner may have run another's job with the count meant for it, so
 * pending reads 0) is still queued: a reader of its thread after it must
 * not be let in before it runs (a review's stress test saw readers miss
 * their own thread's job so). Made by hand: the link without the count. */
START_TEST(a_reader_waits_for_a_job_linked_but_not_counted)
{
	struct job j;
	xwork_init(&j.work, record, NULL);
	j.id = 1;
	cds_wfcq_enqueue(&queue.head, &queue.tail, &j.work.link);
	ck_assert_uint_eq(atomic_load(&queue.pending), 0);
	ck_assert_msg(!xworkq_read_begin(&queue),
		      "a reader was let in beside a linked job that has not run");
	/* the enqueuer's count: it runs the linked job */
	atomic_fetch_add(&queue.pending, 1);
	ck_assert_ptr_nonnull(__cds_wfcq_dequeue_blocking(&queue.head, &queue.tail));
	atomic_fetch_sub(&queue.pending, 1);
	ck_assert(xworkq_read_begin(&queue));
	xworkq_read_end(&queue);
}
END_TEST

/* A new runner waits for the reader inside before its first job. */
static atomic_int job_ran;

static void note_ran(struct xwork *w, void *arg)
{
	(void)w; (void)arg;
	atomic_store(&job_ran, 1);
}

START_TEST(a_job_waits_for_the_reader_inside)
{
	struct job j;
	pthread_t runner;

	atomic_store(&job_ran, 0);
	xwork_init(&j.work, note_ran, NULL);
	ck_assert(xworkq_read_begin(&queue));
	pthread_create(&runner, NULL, enqueue_gated, &j.work);
	usleep(50 * 1000);
	ck_assert_int_eq(atomic_load(&job_ran), 0);
	xworkq_read_end(&queue);
	pthread_join(runner, NULL);
	ck_assert_int_eq(atomic_load(&job_ran), 1);
}
END_TEST

/* Jobs rewrite a plain (non-atomic) block; readers beside the queue must
 * never see it half-written. Under TSan an overlap is also a data race. */
#define BLOCK_WORDS 64

static long block[BLOCK_WORDS];
static atomic_int in_job, stop_readers;
static atomic_long torn, reads_beside, reads_refused, writes_done;

static void rewrite_block(struct xwork *w, void *arg)
{
	(void)w; (void)arg;
	atomic_store(&in_job, 1);
	long v = block[0] + 1;
	for (int i = 0; i < BLOCK_WORDS; i++)
		block[i] = v;
	atomic_store(&in_job, 0);
	atomic_fetch_add(&writes_done, 1);
}

static void *block_writer(void *arg)
{
	long n = (long)(uintptr_t)arg;
	struct job *jobs = calloc((size_t)n, sizeof(*jobs));
	for (long i = 0; i < n; i++) {
		xwork_init(&jobs[i].work, rewrite_block, NULL);
		xworkq_enqueue(&queue, &jobs[i].work);
	}
	return jobs;   /* freed once both writers returned: the queue is dry */
}

static void *block_reader(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop_readers)) {
		if (!xworkq_read_begin(&queue)) {
			atomic_fetch_add(&reads_refused, 1);
			continue;
		}
		if (atomic_load(&in_job))
			atomic_fetch_add(&torn, 1);
		long first = block[0];
		for (int i = 1; i < BLOCK_WORDS; i++)
			if (block[i] != first)
				atomic_fetch_add(&torn, 1);
		xworkq_read_end(&queue);
		atomic_fetch_add(&reads_beside, 1);
	}
	return NULL;
}

START_TEST(readers_never_see_a_job_half_done)
{
	const char *scale = getenv("XSEG_STRESS_SCALE");
	long n = (long)(200000 * (scale ? atof(scale) : 1.0));
	pthread_t w[2], r[2];
	void *jobs[2];

	for (int i = 0; i < 2; i++)
		pthread_create(&r[i], NULL, block_reader, NULL);
	for (int i = 0; i < 2; i++)
		pthread_create(&w[i], NULL, block_writer, (void *)(uintptr_t)n);
	for (int i = 0; i < 2; i++)
		pthread_join(w[i], &jobs[i]);
	atomic_store(&stop_readers, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(r[i], NULL);
	for (int i = 0; i < 2; i++)
		free(jobs[i]);

	ck_assert_int_eq(atomic_load(&torn), 0);
	ck_assert_int_eq(atomic_load(&writes_done), 2 * n);
	ck_assert_int_eq(block[0], 2 * n);
	ck_assert_int_gt(atomic_load(&reads_beside), 0);
	printf("readers: %ld beside the queue, %ld refused (a job ran)\n",
	       atomic_load(&reads_beside), atomic_load(&reads_refused));
}
END_TEST

/* ---- stress ------------------------------------------------------------- */

#define THREADS	4
#define QUEUES	8

struct stress_job {
	struct xwork work;
	int queue, thread;
	long seq;		/* per (thread, queue), from 1 */
	int runs;
};

struct stress_queue {
	struct xworkq q;
	atomic_int running;
	long last_seq[THREADS];	/* guarded by the queue's serialisation */
	long jobs_run;
};

static struct stress_queue squeues[QUEUES];
static atomic_long overlaps, out_of_order;
static long jobs_per_thread;

static void stress_job_run(struct xwork *w, void *arg)
{
	struct stress_job *j = caa_container_of(w, struct stress_job, work);
	struct stress_queue *sq = arg;

	if (atomic_exchange(&sq->running, 1))
		atomic_fetch_add(&overlaps, 1);
	if (sq->last_seq[j->thread] != j->seq - 1)
		atomic_fetch_add(&out_of_order, 1);
	sq->last_seq[j->thread] = j->seq;
	sq->jobs_run++;
	j->runs++;
	atomic_store(&sq->running, 0);
}

static void *stress_enqueuer(void *arg)
{
	int me = (int)(uintptr_t)arg;
	struct stress_job *jobs = calloc((size_t)jobs_per_thread, sizeof(*jobs));
	long next_seq[QUEUES] = { 0 };
	unsigned seed = (unsigned)me + 1;

	for (long i = 0; i < jobs_per_thread; i++) {
		struct stress_job *j = &jobs[i];
		j->queue = rand_r(&seed) % QUEUES;
		j->thread = me;
		j->seq = ++next_seq[j->queue];
		xwork_init(&j->work, stress_job_run, &squeues[j->queue]);
		xworkq_enqueue(&squeues[j->queue].q, &j->work);
	}
	return jobs;
}

START_TEST(threads_enqueue_on_shared_queues_and_every_job_runs_once_in_order)
{
	const char *scale = getenv("XSEG_STRESS_SCALE");
	pthread_t t[THREADS];
	struct stress_job *jobs[THREADS];

	jobs_per_thread = (long)(1000000 * (scale ? atof(scale) : 1.0));
	for (int i = 0; i < QUEUES; i++)
		xworkq_init(&squeues[i].q);
	for (int i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, stress_enqueuer, (void *)(uintptr_t)i);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], (void **)&jobs[i]);

	ck_assert_int_eq(atomic_load(&overlaps), 0);
	ck_assert_int_eq(atomic_load(&out_of_order), 0);
	long total = 0;
	for (int i = 0; i < QUEUES; i++) {
		ck_assert_int_eq(xworkq_destroy(&squeues[i].q), 0);
		total += squeues[i].jobs_run;
	}
	ck_assert_int_eq(total, THREADS * jobs_per_thread);
	long not_once = 0;	/* counted, not asserted per job: Check logs every assert */
	for (int i = 0; i < THREADS; i++) {
		for (long k = 0; k < jobs_per_thread; k++)
			not_once += jobs[i][k].runs != 1;
		free(jobs[i]);
	}
	ck_assert_int_eq(not_once, 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xtypes_xworkq");
	TCase *tc = tcase_create("xworkq");

	tcase_set_timeout(tc, 120);
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, idle_queue_runs_the_job_on_the_caller);
	tcase_add_test(tc, job_enqueued_by_a_job_runs_after_it);
	tcase_add_test(tc, enqueue_on_a_busy_queue_returns_and_the_runner_runs_the_job);
	tcase_add_test_raise_signal(tc, enqueue_of_a_queued_job_aborts, SIGABRT);
	tcase_add_test(tc, threads_enqueue_on_shared_queues_and_every_job_runs_once_in_order);
	tcase_add_test(tc, a_reader_is_let_in_only_while_the_queue_is_idle);
	tcase_add_test(tc, a_reader_waits_for_a_job_linked_but_not_counted);
	tcase_add_test(tc, a_job_waits_for_the_reader_inside);
	tcase_add_test(tc, readers_never_see_a_job_half_done);
	suite_add_tcase(s, tc);

	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
