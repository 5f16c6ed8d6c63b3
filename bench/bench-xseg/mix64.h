/* A 64-bit mixing function (splitmix64's finalizer): every input bit
 * affects every output bit, so hashes of nearby numbers look unrelated. */
#ifndef BENCH_MIX64_H
#define BENCH_MIX64_H

#include <stdint.h>

static inline uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

#endif
