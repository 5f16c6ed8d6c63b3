/* Seeded permutation of block indexes; see block_order.h. */
#include "block_order.h"
#include "mix64.h"

#define FEISTEL_ROUNDS 4

void block_order_init(struct block_order *o, uint64_t n, bool random, uint64_t seed)
{
	unsigned bits = 2;
	while (bits < 64 && (1ull << bits) < n)
		bits += 2;   /* even, so the two halves have equal width */
	o->n = n;
	o->random = random;
	o->seed = seed;
	o->half_bits = bits / 2;
	o->half_mask = (1ull << o->half_bits) - 1;
}

static uint64_t feistel(const struct block_order *o, uint64_t x)
{
	uint64_t left = x >> o->half_bits, right = x & o->half_mask;
	for (unsigned r = 0; r < FEISTEL_ROUNDS; r++) {
		uint64_t f = mix64(right ^ mix64(o->seed + r)) & o->half_mask;
		uint64_t next = left ^ f;
		left = right;
		right = next;
	}
	return (left << o->half_bits) | right;
}

uint64_t block_order_at(const struct block_order *o, uint64_t i)
{
	if (!o->random || o->n <= 1)
		return i;
	/* A permutation of [0, 4^k) maps [0, n) back into [0, n) by walking
	 * the cycle until it lands there; fewer than 4 steps on average. */
	uint64_t x = feistel(o, i);
	while (x >= o->n)
		x = feistel(o, x);
	return x;
}
