/*
 * The order in which a run visits its blocks.
 *
 * seq visits 0, 1, ..., n-1. rand visits every block exactly once in an
 * order fixed by the seed: a keyed Feistel permutation over the next even
 * power of two >= n, cycle-walked back into [0, n). O(1) memory, so a run
 * of millions of blocks needs no shuffled array, and the same seed gives
 * the same order on every run.
 */
#ifndef BENCH_BLOCK_ORDER_H
#define BENCH_BLOCK_ORDER_H

#include <stdbool.h>
#include <stdint.h>

struct block_order {
	uint64_t n;           /* blocks in the run */
	bool random;
	uint64_t seed;
	unsigned half_bits;   /* each Feistel half */
	uint64_t half_mask;
};

void block_order_init(struct block_order *o, uint64_t n, bool random, uint64_t seed);
/* The block visited at step i (0 <= i < n). */
uint64_t block_order_at(const struct block_order *o, uint64_t i);

#endif
