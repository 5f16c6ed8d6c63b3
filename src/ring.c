/*
 * Bounded lock-free MPMC ring of u32 values in shared memory.
 *
 * Cell i's sequence number is i when empty for the producer of position i,
 * i + 1 when full for the consumer of position i, and i + capacity when it
 * is empty again for the next lap. A position is claimed with a CAS on
 * tail (push) or head (pop); the value is published with a release store of
 * the sequence. No thread ever waits on another holding a lock.
 */
#include <sched.h>

#include "xseg_internal.h"

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
	for (uint32_t i = 0; i < capacity; i++) {
		atomic_init(&r->cells[i].seq, i);
		r->cells[i].value = 0;
	}
}

bool xseg_ring_push(struct xseg_ring *r, uint32_t value)
{
	uint64_t pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
	uint64_t deadline = 0;
	for (;;) {
		struct xseg_ring_cell *c = &r->cells[pos & r->mask];
		uint64_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
		int64_t dif = (int64_t)(seq - pos);
		if (dif == 0) {
			if (atomic_compare_exchange_weak_explicit(&r->tail, &pos, pos + 1,
					memory_order_relaxed, memory_order_relaxed)) {
				c->value = value;
				atomic_store_explicit(&c->seq, pos + 1, memory_order_release);
				return true;
			}
		} else if (dif < 0) {
			/*
			 * The cell still holds the value of one lap ago. Unless
			 * the ring is really full, a consumer has claimed that
			 * value and not yet released the cell (preempted between
			 * its CAS and its store) while the others went a whole
			 * lap: wait for it. Failing here lost the request, since
			 * callers rely on a push never failing. A consumer killed
			 * in that window never releases the cell: give up then.
			 */
			uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
			if ((int64_t)(pos - head) >= (int64_t)r->capacity)
				return false;   /* full */
			if (!deadline)
				deadline = xseg_now_ns() + 1000000000ull;
			else if (xseg_now_ns() > deadline)
				return false;
			sched_yield();
			pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
		} else {
			pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
		}
	}
}

bool xseg_ring_pop(struct xseg_ring *r, uint32_t *value)
{
	uint64_t pos = atomic_load_explicit(&r->head, memory_order_relaxed);
	uint64_t deadline = 0;
	for (;;) {
		struct xseg_ring_cell *c = &r->cells[pos & r->mask];
		uint64_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
		int64_t dif = (int64_t)(seq - (pos + 1));
		if (dif == 0) {
			if (atomic_compare_exchange_weak_explicit(&r->head, &pos, pos + 1,
					memory_order_relaxed, memory_order_relaxed)) {
				*value = c->value;
				atomic_store_explicit(&c->seq, pos + r->mask + 1,
						      memory_order_release);
				return true;
			}
		} else if (dif < 0) {
			/*
			 * Not published yet. If a producer has claimed the cell
			 * (tail is past it) it is between its CAS and its store:
			 * wait for it, or the pool looks empty with requests
			 * free (a false ENOBUFS). A producer killed there never
			 * publishes: give up then.
			 */
			uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
			if ((int64_t)(tail - pos) <= 0)
				return false;   /* empty */
			if (!deadline)
				deadline = xseg_now_ns() + 1000000000ull;
			else if (xseg_now_ns() > deadline)
				return false;
			sched_yield();
			pos = atomic_load_explicit(&r->head, memory_order_relaxed);
		} else {
			pos = atomic_load_explicit(&r->head, memory_order_relaxed);
		}
	}
}

uint32_t xseg_ring_count(struct xseg_ring *r)
{
	uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
	return tail > head ? (uint32_t)(tail - head) : 0;
}
