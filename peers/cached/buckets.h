/*
 * An object's buckets, for the cached peer.
 *
 * A cached object of object_size bytes is split into buckets of bucket_size
 * bytes. Each bucket has a data state and, while claimed, a slot in the
 * global bucket pool holding its bytes. Every state change goes through
 * bucket_set(), which refuses an illegal transition and keeps the object's
 * counters and the cache-wide totals in step, so "does this object (or the
 * cache) have a DIRTY bucket" is always one read.
 *
 * Data states and the legal transitions (anything else is a bug):
 *
 *   INVALID  -> LOADING  a read miss sent to the blocker
 *   INVALID  -> VALID    filled from a blocker reply or a write-through write
 *   INVALID  -> DIRTY    a write-back write of the whole bucket
 *   LOADING  -> VALID    the read came back
 *   LOADING  -> INVALID  the read failed
 *   VALID    -> DIRTY    a write-back write
 *   VALID    -> INVALID  dropped (eviction, DELETE)
 *   DIRTY    -> WRITING  a flush sent to the blocker
 *   DIRTY    -> INVALID  DELETE: the data is gone on purpose
 *   WRITING  -> VALID    the flush came back and nobody wrote meanwhile
 *   WRITING  -> DIRTY    rewritten during the flush, or the flush failed
 *
 * An object's bucket metadata is changed only by the thread running that
 * object's work queue; the totals are atomics shared by every object.
 *
 * Probation: a VALID bucket filled by a read miss and not used since is on
 * probation, the first kind of data to give back when buckets run short (a
 * scan read once does not push out data that was written or read twice).
 * A hit takes it off (bucket_used); so does leaving VALID.
 */
#ifndef CACHED_BUCKETS_H
#define CACHED_BUCKETS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <errno.h>
#include <stdint.h>

enum bucket_state {
	BUCKET_INVALID,
	BUCKET_LOADING,
	BUCKET_VALID,
	BUCKET_DIRTY,
	BUCKET_WRITING,
	BUCKET_STATES
};

#define BUCKET_NO_SLOT UINT32_MAX

const char *bucket_state_name(enum bucket_state s);
bool bucket_transition_ok(enum bucket_state from, enum bucket_state to);
/* VALID, DIRTY and WRITING buckets hold the newest data. */
static inline bool bucket_readable(enum bucket_state s)
{
	return s == BUCKET_VALID || s == BUCKET_DIRTY || s == BUCKET_WRITING;
}

/* ---- geometry and byte ranges --------------------------------------------- */

struct bucket_geometry {
	uint64_t object_size;
	uint32_t bucket_size;
	uint32_t buckets_per_object;
	unsigned bucket_shift;   /* log2(bucket_size): spans without a division */
};

/* -EINVAL unless bucket_size is a power of two >= 512 dividing object_size. */
int bucket_geometry_init(struct bucket_geometry *g, uint64_t object_size,
			 uint32_t bucket_size);

/* The buckets a byte range [offset, offset + size) touches. */
struct bucket_span {
	uint32_t first, last;     /* inclusive bucket indexes */
	uint32_t head_skip;       /* bytes of `first` before the range */
	uint32_t tail_len;        /* bytes of `last` inside the range */
};

/* The span of a range bucket_span_of accepted (a request checked at
 * submit). bucket_span_of: -EINVAL for size 0 or a range past the
 * object's end. Inline: they run several times per request (submit, a
 * write-through's reply, each check against the object's other
 * write-through writes). Shifts, not divisions: a 64-bit divide costs
 * tens of cycles. */
static inline struct bucket_span bucket_span_in(const struct bucket_geometry *g,
						uint64_t offset, uint64_t size)
{
	uint64_t end = offset + size;             /* exclusive */
	struct bucket_span s;
	s.first = (uint32_t)(offset >> g->bucket_shift);
	s.last = (uint32_t)((end - 1) >> g->bucket_shift);
	s.head_skip = (uint32_t)(offset & (g->bucket_size - 1));
	s.tail_len = (uint32_t)(end - ((uint64_t)s.last << g->bucket_shift));
	return s;
}

static inline int bucket_span_of(const struct bucket_geometry *g, uint64_t offset,
				 uint64_t size, struct bucket_span *span)
{
	if (size == 0 || offset >= g->object_size || size > g->object_size - offset)
		return -EINVAL;
	*span = bucket_span_in(g, offset, size);
	return 0;
}
/* The range starts inside `first` / ends inside `last` (for a one-bucket
 * span, either means that bucket is covered only in part). */
bool bucket_span_head_partial(const struct bucket_geometry *g, const struct bucket_span *s);
bool bucket_span_tail_partial(const struct bucket_geometry *g, const struct bucket_span *s);

/* ---- an object's buckets ----------------------------------------------------- */

/* Cache-wide: claimed buckets by state (an unclaimed bucket is INVALID and
 * counted nowhere), so count[DIRTY] is the dirty bytes / bucket_size. */
struct bucket_totals {
	_Atomic uint64_t count[BUCKET_STATES];
	_Atomic uint64_t claimed;
	_Atomic uint64_t probation;   /* VALID buckets on probation */
};

struct object_buckets {
	uint32_t n;
	uint8_t *state;               /* enum bucket_state per bucket */
	uint32_t *slot;               /* pool slot, BUCKET_NO_SLOT when unclaimed */
	uint8_t *probation;           /* 1: VALID from a read miss, unused since */
	uint32_t count[BUCKET_STATES];
	uint32_t claimed;
	uint32_t on_probation;
	/* VALID buckets given back so far (bucket_release): an uncached read
	 * that saw it change while out may have lost a newer cached copy. */
	uint32_t valid_released;
	/* count[DIRTY] + count[WRITING], stored (relaxed: a plain store on
	 * x86) for readers on other threads: statistics per volume. */
	_Atomic uint32_t unwritten;
};

int object_buckets_init(struct object_buckets *ob, uint32_t n);
void object_buckets_free(struct object_buckets *ob);

/* Changes bucket i's state; -EINVAL (and no change) if illegal. Leaving
 * VALID ends probation. */
int bucket_set(struct object_buckets *ob, struct bucket_totals *t, uint32_t i,
	       enum bucket_state to);

/* Puts VALID bucket i on probation (it was just read in by a miss);
 * -EINVAL for a bucket that is not VALID. */
int bucket_on_probation(struct object_buckets *ob, struct bucket_totals *t, uint32_t i);
/* Bucket i served a hit: off probation. */
void bucket_used(struct object_buckets *ob, struct bucket_totals *t, uint32_t i);

/* Attaches pool slot `slot` to unclaimed bucket i. -EBUSY if claimed. */
int bucket_claim(struct object_buckets *ob, struct bucket_totals *t, uint32_t i,
		 uint32_t slot);
/* Detaches bucket i's slot and returns it; the bucket becomes INVALID.
 * Only clean buckets (INVALID or VALID) may go: -EBUSY otherwise. Claimed
 * INVALID buckets count as on probation for "which go first". */
int64_t bucket_release(struct object_buckets *ob, struct bucket_totals *t, uint32_t i);

/*
 * Finds the first bucket in [from, last] in state `s` and the length of the
 * run of consecutive buckets in that state starting there, at most max_run.
 * Returns the index, or last + 1 when there is none.
 */
uint32_t bucket_find_run(const struct object_buckets *ob, uint32_t from, uint32_t last,
			 enum bucket_state s, uint32_t max_run, uint32_t *run_len);

#endif
