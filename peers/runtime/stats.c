/*
 * The per-thread counter blocks (counters.h): registering a thread's
 * block, handing a dead thread's block to the next thread that needs one
 * (its counts stay: every figure is a sum), summing them for a reader,
 * percentiles. Also peer/stats.h's begin and end.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "counters.h"
#include "peer/stats.h"

_Thread_local struct peer_stats_block *peer_stats_mine;

static _Atomic(struct peer_stats_block *) blocks;   /* every block ever made */
static pthread_key_t exit_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

/* At a counting thread's exit: its block is free for the next one. */
static void release(void *arg)
{
	struct peer_stats_block *b = arg;
	atomic_store_explicit(&b->owned, 0, memory_order_release);
}

/* Ticks to ns: the ticks and the clock at the first count, and the
 * clock's ns per tick between then and a reader's now. */
static uint64_t tick0, ns0;

static void make_key(void)
{
	pthread_key_create(&exit_key, release);
	ns0 = xseg_now_ns();
	tick0 = peer_stats_ticks();
}

/* Measured once (at the first read, a ms after the first count at the
 * least) and kept: answers then agree on bucket bounds, so that a
 * reader can subtract one from another. */
static double ns_per_tick(void)
{
#if defined(__x86_64__) || defined(__i386__)
	static _Atomic double ratio;
	double r = atomic_load(&ratio);
	if (r > 0)
		return r;
	uint64_t ns = xseg_now_ns(), ticks = peer_stats_ticks();
	while (ns - ns0 < 1000000) {
		ns = xseg_now_ns();
		ticks = peer_stats_ticks();
	}
	r = ticks > tick0 ? (double)(ns - ns0) / (double)(ticks - tick0) : 1.0;
	double none = 0;
	atomic_compare_exchange_strong(&ratio, &none, r);
	return atomic_load(&ratio);
#else
	return 1.0;
#endif
}

static struct peer_stats_block *claim(void)
{
	for (struct peer_stats_block *b = atomic_load(&blocks); b; b = b->next) {
		int free_ = 0;
		if (atomic_compare_exchange_strong(&b->owned, &free_, 1))
			return b;
	}
	size_t size = (sizeof(struct peer_stats_block) + 63) & ~(size_t)63;
	struct peer_stats_block *b = aligned_alloc(64, size);
	if (!b)
		return NULL;
	memset(b, 0, size);
	atomic_store(&b->owned, 1);
	struct peer_stats_block *head = atomic_load(&blocks);
	do
		b->next = head;
	while (!atomic_compare_exchange_weak(&blocks, &head, b));
	return b;
}

struct peer_stats_block *peer_stats_register(void)
{
	pthread_once(&key_once, make_key);
	struct peer_stats_block *b = claim();
	if (!b)
		return NULL;
	peer_stats_mine = b;
	pthread_setspecific(exit_key, b);
	return b;
}

static uint64_t get(const _Atomic uint64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

double peer_stats_ns_per_tick(void)
{
	pthread_once(&key_once, make_key);
	return ns_per_tick();
}

void peer_stats_read(struct peer_stats_sum *s)
{
	pthread_once(&key_once, make_key);
	memset(s, 0, sizeof(*s));
	s->ns_per_tick = ns_per_tick();
	for (struct peer_stats_block *b = atomic_load(&blocks); b; b = b->next) {
		s->begun += get(&b->begun);
		s->sent += get(&b->sent);
		s->sent_failed += get(&b->sent_failed);
		s->cpu_yields += get(&b->cpu_yields);
		s->bench_calls += get(&b->bench_calls);
		s->lat_sum += get(&b->lat_sum);
		uint64_t max = get(&b->lat_max);
		if (max > s->lat_max)
			s->lat_max = max;
		for (unsigned op = 0; op < PEER_STATS_OPS; op++) {
			unsigned c = op == X_READ ? PEER_STATS_READ
				   : op == X_WRITE ? PEER_STATS_WRITE : PEER_STATS_OTHER;
			uint64_t n = get(&b->requests[op]);
			s->requests[c] += n;
			s->done += n;
			/* other ops' serviced (an INFO's reply) is no data moved */
			s->bytes[c] += c == PEER_STATS_OTHER ? 0 : get(&b->bytes[op]);
			s->errors[c] += get(&b->errors[op]);
		}
		for (unsigned i = 0; i < PEER_STATS_BUCKETS; i++)
			s->hist[i] += get(&b->hist[i]);
	}
}

void peer_stats_bucket_range(unsigned i, uint64_t *lo, uint64_t *width)
{
	const unsigned sub = 1u << PEER_STATS_SUB_BITS;
	if (i < sub) {
		*lo = i;
		*width = 1;
		return;
	}
	unsigned e = i >> PEER_STATS_SUB_BITS;
	*width = 1ull << (e - 1);
	*lo = (uint64_t)(sub | (i & (sub - 1))) << (e - 1);
}

double peer_stats_percentile(const struct peer_stats_sum *s, double pct)
{
	uint64_t total = 0, seen = 0;
	for (unsigned i = 0; i < PEER_STATS_BUCKETS; i++)
		total += s->hist[i];
	if (!total)
		return 0;
	/* the rank of the record wanted, 1-based */
	uint64_t rank = (uint64_t)((double)total * pct / 100.0 + 0.999999);
	if (rank < 1)
		rank = 1;
	for (unsigned i = 0; i < PEER_STATS_BUCKETS; i++) {
		seen += s->hist[i];
		if (seen >= rank) {
			uint64_t lo, width;
			peer_stats_bucket_range(i, &lo, &width);
			uint64_t mid = lo + width / 2;
			return (double)(mid < s->lat_max ? mid : s->lat_max) * s->ns_per_tick;
		}
	}
	return (double)s->lat_max * s->ns_per_tick;
}

uint64_t peer_stats_begin(void)
{
	struct peer_stats_block *b = peer_stats_block();
	if (b)
		peer_stats_add(&b->begun, 1);
	return peer_stats_ticks();
}

void peer_stats_end(uint32_t op, uint64_t bytes, int err, uint64_t begin_ns)
{
	struct peer_stats_block *b = peer_stats_block();
	uint64_t now = peer_stats_ticks();
	if (b)
		peer_stats_done(b, op, !err, bytes, now > begin_ns ? now - begin_ns : 0);
}
