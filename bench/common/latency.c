/* Log-linear latency histogram; see latency.h. */
#include <math.h>
#include <string.h>

#include "latency.h"

void latency_init(struct latency_hist *h)
{
	memset(h, 0, sizeof(*h));
}

static unsigned bucket_of(uint64_t v)
{
	if (v < (1u << LATENCY_SUB_BITS))
		return (unsigned)v;
	unsigned msb = 63u - (unsigned)__builtin_clzll(v);
	unsigned shift = msb - LATENCY_SUB_BITS;
	return ((shift + 1) << LATENCY_SUB_BITS) +
	       (unsigned)((v >> shift) & ((1u << LATENCY_SUB_BITS) - 1));
}

/* The middle of a bucket's value range. */
static double bucket_value(unsigned b)
{
	if (b < (1u << LATENCY_SUB_BITS))
		return b;
	unsigned shift = (b >> LATENCY_SUB_BITS) - 1;
	uint64_t low = ((uint64_t)(1u << LATENCY_SUB_BITS) + (b & ((1u << LATENCY_SUB_BITS) - 1))) << shift;
	return (double)low + (double)(1ull << shift) / 2.0;
}

void latency_record(struct latency_hist *h, uint64_t ns)
{
	h->buckets[bucket_of(ns)]++;
	h->count++;
	if (ns > h->max)
		h->max = ns;
}

void latency_merge(struct latency_hist *dst, const struct latency_hist *src)
{
	for (unsigned b = 0; b < LATENCY_BUCKETS; b++)
		dst->buckets[b] += src->buckets[b];
	dst->count += src->count;
	if (src->max > dst->max)
		dst->max = src->max;
}

double latency_percentile(const struct latency_hist *h, double pct)
{
	if (!h->count)
		return 0;
	/* Nearest rank: the smallest record with pct % at or below it, so
	 * rounded up (less a hair, for 99.9 % of 1000 computed as 999.0000x). */
	uint64_t rank = (uint64_t)ceil(pct * (double)h->count / 100.0 - 1e-6);
	if (rank < 1)
		rank = 1;
	uint64_t seen = 0;
	for (unsigned b = 0; b < LATENCY_BUCKETS; b++) {
		seen += h->buckets[b];
		if (seen >= rank) {
			double v = bucket_value(b);
			return v > (double)h->max ? (double)h->max : v;
		}
	}
	return (double)h->max;
}

uint64_t latency_max(const struct latency_hist *h)
{
	return h->max;
}
