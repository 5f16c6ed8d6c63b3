/*
 * Bounded lock-free MPMC ring of request indexes in shared memory.
 *
 * Each cell is one 64-bit word: a sequence number (40 bits) and a value
 * (24 bits). Cell i's sequence is i when empty for the producer of
 * position i, i + 1 when full for the consumer of position i, and
 * i + capacity when empty again for the next lap (the classic bounded MPMC
 * design). Filling or emptying a cell is one CAS of its word, and only
 * then does the producer move tail (the consumer head) on, with a second
 * CAS that anyone who finds the cell already done makes for it.
 *
 * So a peer killed at any instruction leaves no half-done cell: before its
 * cell CAS nothing happened, after it the position is done and the next
 * peer moves tail or head past it. (The older design claimed the position
 * first and published after: a producer killed between the two wedged the
 * ring for good, every later reply or free request behind the cell.)
 * Nobody ever waits for another peer.
 */
#include "xseg_internal.h"

#define VALUE_BITS 24
#define VALUE_MASK ((1u << VALUE_BITS) - 1)

static inline uint64_t cell_word(uint64_t seq, uint32_t value)
{
	return seq << VALUE_BITS | value;
}

/* seq - pos in the 40 bits a cell keeps, as a signed number. */
static inline int64_t seq_dif(uint64_t word, uint64_t pos)
{
	return (int64_t)(((word >> VALUE_BITS) - pos) << VALUE_BITS) >> VALUE_BITS;
}

size_t xseg_ring_bytes(uint32_t capacity)
{
	size_t bytes = sizeof(struct xseg_ring) +
		       (size_t)capacity * sizeof(struct xseg_ring_cell);
	return (bytes + XSEG_CACHELINE - 1) & ~(size_t)(XSEG_CACHELINE - 1);
}

void xseg_ring_init(struct xseg_ring *r, uint32_t capacity)
{
	atomic_init(&r->head, 0);
	atomic_init(&r->tail, 0);
	r->capacity = capacity;
	r->mask = capacity - 1;
	for (uint32_t i = 0; i < capacity; i++)
		atomic_init(&r->cells[i].word, cell_word(i, 0));
}

/* Moves *counter from pos to pos + 1 unless someone already did. */
static inline void step_past(_Atomic uint64_t *counter, uint64_t pos)
{
	atomic_compare_exchange_strong_explicit(counter, &pos, pos + 1, memory_order_release,
						memory_order_relaxed);
}

/* Fills the cell at tail. Before each try at a position, stores tag_base |
 * position in *tag (when tag is not NULL): the cell's CAS publishes it, so
 * whoever pops the value sees the position it was pushed at. */
static inline bool push(struct xseg_ring *r, uint32_t value, uint64_t *tag, uint64_t tag_base,
			uint64_t *at)
{
	if (value > VALUE_MASK)
		return false;
	for (;;) {
		uint64_t pos = atomic_load_explicit(&r->tail, memory_order_acquire);
		_Atomic uint64_t *c = &r->cells[pos & r->mask].word;
		uint64_t w = atomic_load_explicit(c, memory_order_acquire);
		int64_t dif = seq_dif(w, pos);
		if (dif == 0) {
			if (tag)
				__atomic_store_n(tag, tag_base | (pos & XSEG_RING_POS_MASK),
						 __ATOMIC_RELAXED);
			if (atomic_compare_exchange_strong_explicit(c, &w, cell_word(pos + 1, value),
					memory_order_release, memory_order_relaxed)) {
				step_past(&r->tail, pos);
				*at = pos & XSEG_RING_POS_MASK;
				return true;
			}
		} else if (dif == 1 || dif == (int64_t)r->capacity) {
			/* filled (and maybe popped already); its producer did not
			 * move on */
			step_past(&r->tail, pos);
		} else if (dif < 0) {
			return false;   /* the value of one lap ago is still there: full */
		}
		/* else tail moved on meanwhile: look again */
	}
}

bool xseg_ring_push(struct xseg_ring *r, uint32_t value)
{
	uint64_t at;
	return push(r, value, NULL, 0, &at);
}

bool xseg_ring_push_tagged(struct xseg_ring *r, uint32_t value, uint64_t *tag,
			   uint64_t tag_base, uint64_t *at)
{
	return push(r, value, tag, tag_base, at);
}

/* Empties the cell at head. */
static inline bool pop(struct xseg_ring *r, uint32_t *value, uint64_t *at)
{
	for (;;) {
		uint64_t pos = atomic_load_explicit(&r->head, memory_order_acquire);
		_Atomic uint64_t *c = &r->cells[pos & r->mask].word;
		uint64_t w = atomic_load_explicit(c, memory_order_acquire);
		int64_t dif = seq_dif(w, pos + 1);
		if (dif == 0) {
			if (atomic_compare_exchange_strong_explicit(c, &w,
					cell_word(pos + r->capacity, 0),
					memory_order_acq_rel, memory_order_relaxed)) {
				step_past(&r->head, pos);
				*value = (uint32_t)(w & VALUE_MASK);
				*at = pos & XSEG_RING_POS_MASK;
				return true;
			}
		} else if (dif == -1) {
			return false;   /* empty for this lap: cells fill in order */
		} else if (seq_dif(w, pos + r->capacity) == 0 ||
			   seq_dif(w, pos + r->capacity + 1) == 0) {
			/* emptied (and maybe filled again for the next lap: the
			 * ring full since); its consumer did not move on */
			step_past(&r->head, pos);
		}
		/* else head moved on meanwhile: look again */
	}
}

bool xseg_ring_pop_at(struct xseg_ring *r, uint32_t *value, uint64_t *at)
{
	return pop(r, value, at);
}

bool xseg_ring_filled_at(struct xseg_ring *r, uint64_t pos, uint32_t value)
{
	uint64_t w = atomic_load_explicit(&r->cells[pos & r->mask].word, memory_order_acquire);
	return seq_dif(w, pos + 1) == 0 && (w & VALUE_MASK) == value;
}

bool xseg_ring_pop(struct xseg_ring *r, uint32_t *value)
{
	uint64_t at;
	return xseg_ring_pop_at(r, value, &at);
}

bool xseg_ring_nonempty(struct xseg_ring *r)
{
	uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
	/* (head passes tail when a producer died before it moved tail and its
	 * value was popped: empty then, until the next push moves tail on) */
	if (atomic_load_explicit(&r->tail, memory_order_acquire) > head)
		return true;
	uint64_t w = atomic_load_explicit(&r->cells[head & r->mask].word, memory_order_acquire);
	return seq_dif(w, head + 1) == 0;
}

/* A cell filled for position pos holds seq pos + 1, and cell i serves the
 * positions i, i + capacity, ...: filled when (seq - 1) & mask is i
 * (emptied, it holds pos + capacity: seq & mask is i). */
static inline bool cell_filled(const struct xseg_ring *r, uint32_t i, uint64_t w)
{
	return (((w >> VALUE_BITS) - 1) & r->mask) == i;
}

void xseg_ring_mark_queued(struct xseg_ring *r, uint8_t *queued, uint32_t n)
{
	for (uint32_t i = 0; i < r->capacity; i++) {
		uint64_t w = atomic_load_explicit(&r->cells[i].word, memory_order_acquire);
		uint32_t value = (uint32_t)(w & VALUE_MASK);
		if (cell_filled(r, i, w) && value < n)
			queued[value] = 1;
	}
}

bool xseg_ring_holds(struct xseg_ring *r, uint32_t value)
{
	for (uint32_t i = 0; i < r->capacity; i++) {
		uint64_t w = atomic_load_explicit(&r->cells[i].word, memory_order_acquire);
		if (cell_filled(r, i, w) && (w & VALUE_MASK) == value)
			return true;
	}
	return false;
}

/* As the next pop and push see it: past a cell at head already emptied
 * (its consumer killed before it moved head on; maybe filled again since)
 * and one at tail already filled (its producer killed likewise). */
uint32_t xseg_ring_count(struct xseg_ring *r)
{
	uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
	uint64_t w = atomic_load_explicit(&r->cells[head & r->mask].word, memory_order_acquire);
	if (seq_dif(w, head + r->capacity) == 0 || seq_dif(w, head + r->capacity + 1) == 0)
		head++;
	w = atomic_load_explicit(&r->cells[tail & r->mask].word, memory_order_acquire);
	if (seq_dif(w, tail + 1) == 0)
		tail++;
	return tail > head ? (uint32_t)(tail - head) : 0;
}
