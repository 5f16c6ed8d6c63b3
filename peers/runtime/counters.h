/*
 * The runtime's request counters, private to peers/runtime (see stats.c).
 *
 * Why per thread: a counter shared by the workers would bounce its cache
 * line between them on every request. Each thread that counts gets a
 * block of its own (registered on first use, kept after the thread ends,
 * summed when someone asks: peer_stats_read). Only that thread writes
 * it, with relaxed loads and stores (plain moves on x86), so a reader
 * needs no lock and sees each counter whole.
 */
#ifndef PEER_COUNTERS_H
#define PEER_COUNTERS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "xseg/xseg.h"

/*
 * Time is counted in ticks: the TSC on x86 (a clock read through the
 * vDSO costs 20-60 ns, more under a hypervisor's clock; two per request
 * were most of what counting cost nulld), CLOCK_MONOTONIC ns elsewhere.
 * The reader turns ticks into ns (peer_stats_read: ns_per_tick).
 */
static inline uint64_t peer_stats_ticks(void)
{
#if defined(__x86_64__) || defined(__i386__)
	return __builtin_ia32_rdtsc();
#else
	return xseg_now_ns();
#endif
}

/* Latency buckets (of ticks): 8 per power of two (values within 12.5%). */
#define PEER_STATS_SUB_BITS 3
#define PEER_STATS_BUCKETS  (64u << PEER_STATS_SUB_BITS)

/* Shown by class: read, write, every other op. */
enum { PEER_STATS_READ, PEER_STATS_WRITE, PEER_STATS_OTHER, PEER_STATS_CLASSES };
/* Counted by op (no branch per request): X_OP_MAX ops and one for any
 * op beyond them. */
#define PEER_STATS_OPS (X_OP_MAX + 1)

struct peer_stats_block {
	_Atomic uint64_t begun;                     /* requests taken */
	_Atomic uint64_t requests[PEER_STATS_OPS];  /* ... answered, by op */
	_Atomic uint64_t bytes[PEER_STATS_OPS];     /* serviced, when served */
	_Atomic uint64_t errors[PEER_STATS_OPS];
	_Atomic uint64_t sent, sent_failed;         /* the peer's own sends */
	_Atomic uint64_t cpu_yields;                /* peer.c: yield_if_cpu_shared */
	_Atomic uint64_t bench_calls;               /* watch.c: peer_bench_call */
	_Atomic uint64_t lat_sum, lat_max;          /* ticks */
	_Atomic uint64_t hist[PEER_STATS_BUCKETS];
	struct peer_stats_block *next;              /* set once, before publishing */
	_Atomic int owned;                          /* a live thread writes it */
} __attribute__((aligned(64)));

/* The calling thread's block, NULL until it first counts. */
extern _Thread_local struct peer_stats_block *peer_stats_mine;
/* Slow path: gives the thread a block (a dead thread's, or a new one);
 * NULL without memory (the thread then counts nothing). */
struct peer_stats_block *peer_stats_register(void);

static inline struct peer_stats_block *peer_stats_block(void)
{
	struct peer_stats_block *b = peer_stats_mine;
	return b ? b : peer_stats_register();
}

/* Single writer: no read-modify-write instruction needed. */
static inline void peer_stats_add(_Atomic uint64_t *c, uint64_t v)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + v,
			      memory_order_relaxed);
}

static inline unsigned peer_stats_bucket(uint64_t ns)
{
	if (ns < (1u << PEER_STATS_SUB_BITS))
		return (unsigned)ns;
	unsigned msb = 63u - (unsigned)__builtin_clzll(ns);
	return ((msb - PEER_STATS_SUB_BITS + 1) << PEER_STATS_SUB_BITS) |
	       (unsigned)((ns >> (msb - PEER_STATS_SUB_BITS)) & ((1u << PEER_STATS_SUB_BITS) - 1));
}

/* One request done: its op, bytes (when served), error, latency (ticks).
 * On every answer: kept to a few adds (nulld's round trip is ~450
 * instructions), inlined. */
static inline __attribute__((always_inline)) void
peer_stats_done(struct peer_stats_block *b, uint32_t op, bool served, uint64_t bytes,
		uint64_t lat)
{
	unsigned o = op < X_OP_MAX ? op : X_OP_MAX;
	peer_stats_add(&b->requests[o], 1);
	peer_stats_add(&b->bytes[o], served ? bytes : 0);
	peer_stats_add(&b->errors[o], !served);
	peer_stats_add(&b->lat_sum, lat);
	if (lat > atomic_load_explicit(&b->lat_max, memory_order_relaxed))
		atomic_store_explicit(&b->lat_max, lat, memory_order_relaxed);
	peer_stats_add(&b->hist[peer_stats_bucket(lat)], 1);
}

/* Every block summed (stats.c). */
struct peer_stats_sum {
	uint64_t begun, done, sent, sent_failed, cpu_yields, bench_calls, lat_sum, lat_max;   /* ticks */
	double ns_per_tick;
	uint64_t requests[PEER_STATS_CLASSES], bytes[PEER_STATS_CLASSES];
	uint64_t errors[PEER_STATS_CLASSES];
	uint64_t hist[PEER_STATS_BUCKETS];
};
void peer_stats_read(struct peer_stats_sum *s);
/* ns per tick of peer_stats_ticks (the first call measures it: 1 ms). */
double peer_stats_ns_per_tick(void);
/* Bucket i covers [lo, lo + width) ticks. */
void peer_stats_bucket_range(unsigned i, uint64_t *lo, uint64_t *width);
/* The latency (ns) below which `pct` percent of the requests fell: the
 * middle of the bucket it lands in; 0 without requests. */
double peer_stats_percentile(const struct peer_stats_sum *s, double pct);

#endif /* PEER_COUNTERS_H */
