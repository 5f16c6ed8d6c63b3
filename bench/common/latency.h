/*
 * Latency histogram: log-linear buckets (32 per power of two, so every
 * recorded value is kept within about 3%), fixed size, no allocation.
 * Shared by every bench program (bench/common).
 */
#ifndef BENCH_LATENCY_H
#define BENCH_LATENCY_H

#include <stdint.h>

#define LATENCY_SUB_BITS 5
#define LATENCY_BUCKETS  (64 << LATENCY_SUB_BITS)

struct latency_hist {
	uint64_t count;
	uint64_t max;
	uint64_t buckets[LATENCY_BUCKETS];
};

void latency_init(struct latency_hist *h);
void latency_record(struct latency_hist *h, uint64_t ns);
/* Adds src's records to dst (per-thread histograms into one). */
void latency_merge(struct latency_hist *dst, const struct latency_hist *src);
/* The value below which `pct` percent of the records fall (ns). */
double latency_percentile(const struct latency_hist *h, double pct);
uint64_t latency_max(const struct latency_hist *h);

#endif
