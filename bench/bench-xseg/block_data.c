/* Data patterns for writes and their verification; see block_data.h. */
#include <string.h>

#include "block_data.h"
#include "mix64.h"

struct signature {
	uint64_t seed, object, offset;
};

uint64_t block_data_name_key(const char *name)
{
	uint64_t h = 0xcbf29ce484222325ull;   /* FNV-1a, then mixed */
	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 0x100000001b3ull;
	return mix64(h);
}

static inline uint64_t word_at(uint64_t key, uint64_t word_offset)
{
	return mix64(key ^ (word_offset * 0x9e3779b97f4a7c15ull));
}

static uint64_t object_key(uint64_t seed, uint64_t object)
{
	return mix64(seed * 0x632be59bd9b4e019ull) ^ mix64(object + 0x2545f4914f6cdd1dull);
}

/* Byte i of the stream starting at `offset` (which may be unaligned). */
static void fill_full(unsigned char *p, size_t len, uint64_t key, uint64_t offset)
{
	size_t i = 0;
	while (i < len && ((offset + i) & 7)) {       /* leading partial word */
		uint64_t w = word_at(key, (offset + i) & ~7ull);
		p[i] = (unsigned char)(w >> (8 * ((offset + i) & 7)));
		i++;
	}
	for (; i + 8 <= len; i += 8) {
		uint64_t w = word_at(key, offset + i);
		memcpy(p + i, &w, 8);
	}
	for (; i < len; i++) {                         /* trailing partial word */
		uint64_t w = word_at(key, (offset + i) & ~7ull);
		p[i] = (unsigned char)(w >> (8 * ((offset + i) & 7)));
	}
}

/* XORed into the signature: {seed 0, object 0, offset 0} would be all
 * zeros, and zeros (a hole, lost data) must never check out. The seed's
 * mask has high bits no 32-bit seed has, nor the 0xa5 poison. */
#define SIG_SEED_MASK   0x6d6574615f736967ull   /* "meta_sig" */
#define SIG_OBJECT_MASK 0x2545f4914f6cdd1dull
#define SIG_OFFSET_MASK 0x9e3779b97f4a7c15ull

static void stamp(unsigned char *p, size_t len, uint64_t seed, uint64_t object,
		  uint64_t offset)
{
	struct signature sig = { seed ^ SIG_SEED_MASK, object ^ SIG_OBJECT_MASK,
				 offset ^ SIG_OFFSET_MASK };
	memcpy(p, &sig, len < sizeof(sig) ? len : sizeof(sig));
	if (len >= 2 * sizeof(sig))
		memcpy(p + len - sizeof(sig), &sig, sizeof(sig));
	else if (len > sizeof(sig))   /* no room for the second: the check wants zeros */
		memset(p + sizeof(sig), 0, len - sizeof(sig));
}

/* A block shorter than the signature would hold only its seed's bytes
 * (another object's or offset's block would check out): it gets the full
 * pattern, which costs nothing at that size. */
static enum verify_mode mode_for(enum verify_mode mode, size_t len)
{
	return mode == VERIFY_META && len < sizeof(struct signature) ? VERIFY_FULL : mode;
}

void block_data_fill(enum verify_mode mode, void *buf, size_t len, uint64_t seed,
		     uint64_t object, uint64_t offset)
{
	mode = mode_for(mode, len);
	if (mode == VERIFY_FULL)
		fill_full(buf, len, object_key(seed, object), offset);
	else if (mode == VERIFY_META)
		stamp(buf, len, seed, object, offset);
}

/* 0xa5 words: no signature (its seed is 32 bits) and, but for a 2^-64
 * chance per word, no full pattern word. meta checks only the first 48
 * and the last 24 bytes. */
void block_data_poison(enum verify_mode mode, void *buf, size_t len)
{
	unsigned char *p = buf;
	size_t sig2 = 2 * sizeof(struct signature);
	mode = mode_for(mode, len);
	if (mode == VERIFY_FULL || (mode == VERIFY_META && len <= sig2)) {
		memset(p, 0xa5, len);
	} else if (mode == VERIFY_META) {
		memset(p, 0xa5, sig2);
		memset(p + len - sizeof(struct signature), 0xa5, sizeof(struct signature));
	}
}

static size_t count_diff(const unsigned char *a, const unsigned char *b, size_t len)
{
	size_t bad = 0;
	for (size_t i = 0; i < len; i++)
		bad += a[i] != b[i];
	return bad;
}

size_t block_data_check(enum verify_mode mode, const void *buf, size_t len,
			uint64_t seed, uint64_t object, uint64_t offset)
{
	const unsigned char *p = buf;
	mode = mode_for(mode, len);
	if (mode == VERIFY_FULL) {
		uint64_t key = object_key(seed, object);
		unsigned char want[4096];
		size_t bad = 0;
		for (size_t done = 0; done < len; done += sizeof(want)) {
			size_t n = len - done < sizeof(want) ? len - done : sizeof(want);
			fill_full(want, n, key, offset + done);
			if (memcmp(want, p + done, n))
				bad += count_diff(want, p + done, n);
		}
		return bad;
	}
	if (mode == VERIFY_META) {
		unsigned char want[64] = { 0 }, got[64] = { 0 };
		size_t n = len < 2 * sizeof(struct signature) ? len : 2 * sizeof(struct signature);
		stamp(want, n, seed, object, offset);
		memcpy(got, p, n < sizeof(struct signature) ? n : sizeof(struct signature));
		if (len >= 2 * sizeof(struct signature))
			memcpy(got + sizeof(struct signature), p + len - sizeof(struct signature),
			       sizeof(struct signature));
		else
			memcpy(got, p, n);
		return count_diff(want, got, n);
	}
	return 0;
}
