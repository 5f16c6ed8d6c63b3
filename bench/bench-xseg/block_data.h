/*
 * What a run writes and how a later read checks it.
 *
 * Every 8-byte word's value is a hash of (seed, object, its absolute offset
 * in the object), so a read with the same seed checks every byte whatever
 * block size either run used. "meta" only stamps and checks a 24-byte
 * signature {seed, object, offset} (masked, so that it is never zeros) at
 * the start and end of each block; a block shorter than that gets the full
 * pattern.
 */
#ifndef BENCH_BLOCK_DATA_H
#define BENCH_BLOCK_DATA_H

#include <stddef.h>
#include <stdint.h>

enum verify_mode { VERIFY_NONE, VERIFY_META, VERIFY_FULL };

/* The `object` of a volume's data, or of object 0 under a prefix (object
 * i is this plus i): a hash of the name, so that two volumes or prefixes
 * written with one seed hold different data (a blocker mixing them up
 * shows). */
uint64_t block_data_name_key(const char *name);

void block_data_fill(enum verify_mode mode, void *buf, size_t len, uint64_t seed,
		     uint64_t object, uint64_t offset);
/* Overwrites what block_data_check will look at with bytes that never
 * check out, before a read: a reply that leaves the buffer alone must not
 * pass on what a write or an earlier read left there. */
void block_data_poison(enum verify_mode mode, void *buf, size_t len);
/* Returns the number of mismatching bytes (0 = intact). */
size_t block_data_check(enum verify_mode mode, const void *buf, size_t len,
			uint64_t seed, uint64_t object, uint64_t offset);

#endif
