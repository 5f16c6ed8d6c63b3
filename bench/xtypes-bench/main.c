/*
 * xtypes-bench: xcache lookup+put and insert-with-eviction cost at 128K,
 * 512K and 2M entries on 1 and 2 threads, and xworkq throughput.
 * Speed is reported here, never asserted.  See --help.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <urcu.h>

#include <xseg/version.h>
#include <xtypes/xcache.h>
#include <xtypes/xworkq.h>

#define NAME_MAX_LEN	32	/* buffer; names are 25 bytes */
#define MAX_THREADS	2

static const uint32_t cache_sizes[] = { 128 * 1024, 512 * 1024, 2 * 1024 * 1024 };
static const int thread_counts[] = { 1, 2 };
static const int queue_counts[] = { 1, 1024 };

static char (*names)[NAME_MAX_LEN];
static size_t *name_lens;
static long lookups_per_thread = 4000000;
static long jobs_per_thread = 2000000;

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* ---- xcache ------------------------------------------------------------- */

#define WARM_KEYS 1024u

struct cache_run {
	struct xcache *cache;
	uint32_t entries;
	int threads;
	pthread_barrier_t start;
	atomic_long hits;
	double insert_ns, lookup_ns;	/* wall time of each phase */
	double warm_ns;			/* lookups of a small hot set */
};

struct cache_thread {
	struct cache_run *run;
	int id;
};

static void insert_range(struct xcache *c, uint32_t first, uint32_t end, uint32_t step)
{
	for (uint32_t k = first; k < end; k += step) {
		struct xcache_entry *e = xcache_alloc(c, names[k], name_lens[k]);

		if (!e) {
			perror("xcache_alloc");
			exit(1);
		}
		xcache_put(c, xcache_insert(c, e));
	}
}

static void *cache_worker(void *arg)
{
	struct cache_thread *t = arg;
	struct cache_run *run = t->run;
	uint32_t n = run->entries;
	uint64_t seed = 0x9e3779b97f4a7c15ULL * (uint64_t)(t->id + 1);
	long hits = 0;
	double t0;

	rcu_register_thread();
	/* Phase 1: insert keys n..2n-1 into a full cache, each one evicting. */
	pthread_barrier_wait(&run->start);
	t0 = now_ns();
	insert_range(run->cache, n + (uint32_t)t->id, 2 * n, (uint32_t)run->threads);
	pthread_barrier_wait(&run->start);
	if (t->id == 0)
		run->insert_ns = now_ns() - t0;

	/* Phase 2: random lookups over the keys just inserted. */
	pthread_barrier_wait(&run->start);
	t0 = now_ns();
	for (long i = 0; i < lookups_per_thread; i++) {
		uint32_t k = n + (uint32_t)(xorshift(&seed) % n);
		struct xcache_entry *e = xcache_lookup(run->cache, names[k], name_lens[k]);

		if (e) {
			hits++;
			xcache_put(run->cache, e);
		}
	}
	pthread_barrier_wait(&run->start);
	if (t->id == 0)
		run->lookup_ns = now_ns() - t0;

	/* Phase 3: a warm index: lookups of the same WARM_KEYS keys, whose
	 * buckets and nodes stay in the CPU caches. Phase 2 was cold: nearly
	 * every lookup there misses them at these sizes. */
	pthread_barrier_wait(&run->start);
	t0 = now_ns();
	for (long i = 0; i < lookups_per_thread; i++) {
		uint32_t k = n + (uint32_t)(xorshift(&seed) % WARM_KEYS);
		struct xcache_entry *e = xcache_lookup(run->cache, names[k], name_lens[k]);

		if (e)
			xcache_put(run->cache, e);
	}
	pthread_barrier_wait(&run->start);
	if (t->id == 0)
		run->warm_ns = now_ns() - t0;
	atomic_fetch_add(&run->hits, hits);
	rcu_unregister_thread();
	return NULL;
}

static void bench_cache(struct cache_run *run)
{
	pthread_t tid[MAX_THREADS];
	struct cache_thread t[MAX_THREADS];

	/* Room for the entries being evicted and the nodes waiting out a grace period. */
	run->cache = xcache_create(run->entries, run->entries + run->entries / 2, NAME_MAX_LEN - 1,
				   NULL, NULL);
	if (!run->cache) {
		perror("xcache_create");
		exit(1);
	}
	insert_range(run->cache, 0, run->entries, 1);	/* fill, untimed */
	pthread_barrier_init(&run->start, NULL, (unsigned)run->threads);
	atomic_init(&run->hits, 0);
	for (int i = 0; i < run->threads; i++) {
		t[i] = (struct cache_thread){ run, i };
		pthread_create(&tid[i], NULL, cache_worker, &t[i]);
	}
	for (int i = 0; i < run->threads; i++)
		pthread_join(tid[i], NULL);
	pthread_barrier_destroy(&run->start);
	if (xcache_destroy(run->cache) != 0) {
		fprintf(stderr, "xcache_destroy: entries still referenced\n");
		exit(1);
	}
}

/* ---- xworkq ------------------------------------------------------------- */

struct counted_queue {
	struct xworkq q;
	long jobs_run;		/* serialised by the queue */
} __attribute__((aligned(64)));

struct workq_run {
	struct counted_queue *queues;
	int nr_queues, threads;
	pthread_barrier_t start;
	double ns;
};

struct workq_thread {
	struct workq_run *run;
	int id;
	struct xwork *jobs;
};

static void count_job(struct xwork *w, void *arg)
{
	(void)w;
	((struct counted_queue *)arg)->jobs_run++;
}

static void *workq_worker(void *arg)
{
	struct workq_thread *t = arg;
	struct workq_run *run = t->run;
	uint64_t seed = 0x2545f4914f6cdd1dULL * (uint64_t)(t->id + 1);
	double t0;

	for (long i = 0; i < jobs_per_thread; i++) {
		struct counted_queue *cq = &run->queues[xorshift(&seed) % (uint64_t)run->nr_queues];
		xwork_init(&t->jobs[i], count_job, cq);
	}
	pthread_barrier_wait(&run->start);
	t0 = now_ns();
	for (long i = 0; i < jobs_per_thread; i++)
		xworkq_enqueue(&((struct counted_queue *)t->jobs[i].arg)->q, &t->jobs[i]);
	pthread_barrier_wait(&run->start);
	if (t->id == 0)
		run->ns = now_ns() - t0;
	return NULL;
}

static void bench_workq(struct workq_run *run)
{
	pthread_t tid[MAX_THREADS];
	struct workq_thread t[MAX_THREADS];

	run->queues = aligned_alloc(64, sizeof(*run->queues) * (size_t)run->nr_queues);
	for (int i = 0; i < run->nr_queues; i++) {
		xworkq_init(&run->queues[i].q);
		run->queues[i].jobs_run = 0;
	}
	pthread_barrier_init(&run->start, NULL, (unsigned)run->threads);
	for (int i = 0; i < run->threads; i++) {
		t[i] = (struct workq_thread){ run, i, malloc(sizeof(struct xwork) * (size_t)jobs_per_thread) };
		pthread_create(&tid[i], NULL, workq_worker, &t[i]);
	}
	long total = 0;
	for (int i = 0; i < run->threads; i++) {
		pthread_join(tid[i], NULL);
		free(t[i].jobs);
	}
	for (int i = 0; i < run->nr_queues; i++)
		total += run->queues[i].jobs_run;
	if (total != jobs_per_thread * run->threads) {
		fprintf(stderr, "xworkq: %ld jobs ran, %ld enqueued\n", total,
			jobs_per_thread * run->threads);
		exit(1);
	}
	pthread_barrier_destroy(&run->start);
	free(run->queues);
}

/* ---- main --------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: xtypes-bench [--json] [--quick] [--lookups N] [--jobs N]\n"
		"  xcache: ns per lookup+put (random hits) and per insert into a full\n"
		"  cache (each insert evicts), at 128K, 512K and 2M entries, 1 and 2\n"
		"  threads; ns are per operation per thread (wall time x threads / ops).\n"
		"  xworkq: jobs per second, 1 and 2 threads, on 1 and 1024 queues.\n"
		"  --json       one JSON object instead of tables\n"
		"  --quick      128K entries only, fewer operations (a smoke run)\n"
		"  --lookups N  lookups per thread (default %ld)\n"
		"  --jobs N     xworkq jobs per thread (default %ld)\n"
		"  -h, --help   this text\n"
		"  --version    the version and segment layout\n",
		lookups_per_thread, jobs_per_thread);
}

/* A positive count for --lookups or --jobs; a bad one exits 2 naming it. */
static long count_arg(const char *opt, const char *val)
{
	char *end;
	errno = 0;
	long v = strtol(val, &end, 10);
	if (!*val || *end || errno || v <= 0) {
		fprintf(stderr, "xtypes-bench: %s: '%s' is not a positive whole number\n", opt, val);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' }, { "quick", no_argument, NULL, 'q' },
		{ "lookups", required_argument, NULL, 'l' }, { "jobs", required_argument, NULL, 'w' },
		{ "help", no_argument, NULL, 'h' }, { "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	bool json = false;
	size_t nr_sizes = sizeof(cache_sizes) / sizeof(cache_sizes[0]);
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'j': json = true; break;
		case 'q': nr_sizes = 1; lookups_per_thread = 500000; jobs_per_thread = 200000; break;
		case 'l': lookups_per_thread = count_arg("--lookups", optarg); break;
		case 'w': jobs_per_thread = count_arg("--jobs", optarg); break;
		case 'h': usage(stdout); return 0;
		case 'V': xseg_print_version("xtypes-bench"); return 0;
		default:
			fprintf(stderr, "xtypes-bench: unknown or incomplete option '%s' (see --help)\n",
				argv[optind - 1]);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "xtypes-bench: unexpected argument '%s' (see --help)\n", argv[optind]);
		return 2;
	}

	uint32_t max_keys = 2 * cache_sizes[nr_sizes - 1];
	/* The keys are read at random like the cache nodes: huge pages for both,
	 * so that the numbers measure the cache and not page walks. */
	size_t names_size = ((size_t)max_keys * NAME_MAX_LEN + (2UL << 20) - 1) & ~((2UL << 20) - 1);
	names = aligned_alloc(2UL << 20, names_size);
	madvise(names, names_size, MADV_HUGEPAGE);
	name_lens = malloc((size_t)max_keys * sizeof(*name_lens));
	for (uint32_t k = 0; k < max_keys; k++)
		name_lens[k] = (size_t)snprintf(names[k], NAME_MAX_LEN, "vol-%08x-obj-%08x",
						k * 2654435761u, k);

	rcu_register_thread();
	if (json)
		printf("{\"xcache\": [");
	else
		printf("xcache, ns per operation per thread\n"
		       "%9s %7s %12s %12s %15s %6s\n", "entries", "threads", "lookup+put",
		       "warm lookup", "insert(evicts)", "hit%");
	for (size_t s = 0; s < nr_sizes; s++) {
		for (size_t ti = 0; ti < sizeof(thread_counts) / sizeof(thread_counts[0]); ti++) {
			struct cache_run run = { .entries = cache_sizes[s], .threads = thread_counts[ti] };

			bench_cache(&run);
			long lookups = lookups_per_thread * run.threads;
			double insert_ns = run.insert_ns * run.threads / run.entries;
			double lookup_ns = run.lookup_ns * run.threads / lookups;
			double warm_ns = run.warm_ns * run.threads / lookups;
			double hit = 100.0 * (double)atomic_load(&run.hits) / lookups;

			if (json)
				printf("%s{\"entries\": %u, \"threads\": %d, \"lookup_put_ns\": %.1f, "
				       "\"warm_lookup_put_ns\": %.1f, "
				       "\"insert_ns\": %.1f, \"hit_percent\": %.1f}",
				       s || ti ? ", " : "", run.entries, run.threads, lookup_ns,
				       warm_ns, insert_ns, hit);
			else
				printf("%9u %7d %12.1f %12.1f %15.1f %6.1f\n", run.entries,
				       run.threads, lookup_ns, warm_ns, insert_ns, hit);
			fflush(stdout);
		}
	}
	if (json)
		printf("], \"xworkq\": [");
	else
		printf("\nxworkq, %ld jobs per thread\n%7s %7s %14s\n", jobs_per_thread,
		       "threads", "queues", "jobs/s");
	for (size_t ti = 0; ti < sizeof(thread_counts) / sizeof(thread_counts[0]); ti++) {
		for (size_t qi = 0; qi < sizeof(queue_counts) / sizeof(queue_counts[0]); qi++) {
			struct workq_run run = { .nr_queues = queue_counts[qi], .threads = thread_counts[ti] };

			bench_workq(&run);
			double rate = jobs_per_thread * run.threads / (run.ns / 1e9);

			if (json)
				printf("%s{\"threads\": %d, \"queues\": %d, \"jobs_per_sec\": %.0f}",
				       ti || qi ? ", " : "", run.threads, run.nr_queues, rate);
			else
				printf("%7d %7d %14.0f\n", run.threads, run.nr_queues, rate);
			fflush(stdout);
		}
	}
	if (json)
		printf("]}\n");
	rcu_unregister_thread();
	free(names);
	free(name_lens);
	return 0;
}
