/*
 * The segment's data heap: a buddy allocator for request buffers.
 *
 * Blocks are powers of two from 256 bytes up to the whole heap. A freed
 * block merges with its buddy whenever the buddy is free too, so memory
 * always returns to larger blocks and fragmentation stays bounded (at worst
 * half of each allocation is rounding). Free lists are doubly linked through
 * the free blocks themselves, by heap offset; block_state[] records, for the
 * first 256-byte unit of each block, whether it is free or allocated and its
 * order, which is all a merge needs.
 *
 * One robust process-shared mutex guards it: allocation happens once per
 * request buffer (peers reuse buffers), so it is not on the per-request
 * path, and a holder that dies is detected by the next locker.
 */
#include <errno.h>
#include <string.h>

#include "xseg_internal.h"
#include "xtypes/xannotate.h"

#define STATE_FREE   0x80u
#define STATE_USED   0x40u
#define ORDER_MASK   0x3fu
#define NIL          UINT64_MAX

struct free_link {
	uint64_t next;
	uint64_t prev;
};

static inline uint8_t *block_state(struct xseg_heap_meta *m)
{
	return (uint8_t *)(m + 1);
}

static inline uint64_t order_bytes(uint32_t order)
{
	return 1ull << (XSEG_HEAP_MIN_SHIFT + order);
}

static inline struct free_link *link_at(void *heap, uint64_t off)
{
	return (struct free_link *)((char *)heap + off);
}

size_t xseg_heap_meta_bytes(uint64_t heap_size)
{
	size_t bytes = sizeof(struct xseg_heap_meta) + (heap_size >> XSEG_HEAP_MIN_SHIFT);
	return (bytes + XSEG_CACHELINE - 1) & ~(size_t)(XSEG_CACHELINE - 1);
}

static void list_push(struct xseg_heap_meta *m, void *heap, uint32_t order, uint64_t off)
{
	struct free_link *l = link_at(heap, off);
	l->prev = NIL;
	l->next = m->free_head[order];
	if (l->next != NIL)
		link_at(heap, l->next)->prev = off;
	m->free_head[order] = off;
	block_state(m)[off >> XSEG_HEAP_MIN_SHIFT] = STATE_FREE | order;
}

static void list_remove(struct xseg_heap_meta *m, void *heap, uint32_t order, uint64_t off)
{
	struct free_link *l = link_at(heap, off);
	if (l->prev != NIL)
		link_at(heap, l->prev)->next = l->next;
	else
		m->free_head[order] = l->next;
	if (l->next != NIL)
		link_at(heap, l->next)->prev = l->prev;
	block_state(m)[off >> XSEG_HEAP_MIN_SHIFT] = 0;
}

/* Gives [off, off + order_bytes(order)) to the lists, merged with its
 * buddy while that is free too. */
static void free_block(struct xseg_heap_meta *m, void *heap, uint64_t off, uint32_t order)
{
	while (order + 1 < m->orders) {
		uint64_t buddy = off ^ order_bytes(order);
		if (block_state(m)[buddy >> XSEG_HEAP_MIN_SHIFT] != (STATE_FREE | order))
			break;
		list_remove(m, heap, order, buddy);
		block_state(m)[off >> XSEG_HEAP_MIN_SHIFT] = 0;
		if (buddy < off)
			off = buddy;
		order++;
	}
	list_push(m, heap, order, off);
}

/* Whether off starts a used block (a sound USED mark); its size then. */
static bool used_block(struct xseg_heap_meta *m, uint64_t off, uint64_t *bytes)
{
	uint8_t st = block_state(m)[off >> XSEG_HEAP_MIN_SHIFT];
	uint32_t order = st & ORDER_MASK;
	if ((st & (STATE_FREE | STATE_USED)) != STATE_USED || order >= m->orders ||
	    (off & (order_bytes(order) - 1)) || order_bytes(order) > m->size - off)
		return false;
	*bytes = order_bytes(order);
	return true;
}

/* Frees [off, end) as the largest aligned blocks that fit. */
static void free_range(struct xseg_heap_meta *m, void *heap, uint64_t off, uint64_t end)
{
	while (off < end) {
		uint32_t order = 0;
		while (order + 1 < m->orders && !(off & (order_bytes(order + 1) - 1)) &&
		       order_bytes(order + 1) <= end - off)
			order++;
		free_block(m, heap, off, order);
		off += order_bytes(order);
	}
}

/*
 * A holder killed mid-update can leave a list half linked (a head whose
 * prev still names the block taken off before it): the next allocation of
 * that order then handed one block out twice. So the lists are rebuilt
 * from block_state, whose USED marks every step keeps true: a block is
 * marked USED under the lock before it is handed out and stays so until
 * it is freed under the lock. Everything else is nobody's now, the block
 * the killed holder was splitting or merging included (before, a region
 * whose marks it had cleared and not yet set was leaked: a kill inside a
 * first allocation's split lost the whole heap). The one block it was
 * handing to or taking from a request (pending_off) is the request's
 * exactly when the request's bufferlen says so.
 */
static void heap_rebuild(struct xseg_heap_meta *m, void *heap)
{
	for (uint32_t i = 0; i < XSEG_HEAP_MAX_ORDERS; i++)
		m->free_head[i] = NIL;
	m->used = m->allocs = 0;
	/* The block the killed holder was handing over is a request's only
	 * when the request records it. */
	if (m->pending_off != NIL) {
		uint64_t bytes, *ref = (uint64_t *)((char *)m + m->pending_ref);
		if (!__atomic_load_n(ref, __ATOMIC_RELAXED) && m->pending_off < m->size &&
		    used_block(m, m->pending_off, &bytes))
			block_state(m)[m->pending_off >> XSEG_HEAP_MIN_SHIFT] = 0;
		m->pending_off = NIL;
	}
	/* Only used blocks keep a mark: free_block merges by the marks. */
	uint64_t bytes;
	for (uint64_t off = 0; off < m->size;) {
		if (used_block(m, off, &bytes)) {
			off += bytes;
		} else {
			block_state(m)[off >> XSEG_HEAP_MIN_SHIFT] = 0;
			off += order_bytes(0);
		}
	}
	uint64_t gap = 0;
	for (uint64_t off = 0; off < m->size;) {
		if (!used_block(m, off, &bytes)) {
			off += order_bytes(0);
			continue;
		}
		free_range(m, heap, gap, off);
		m->used += bytes;
		m->allocs++;
		off += bytes;
		gap = off;
	}
	free_range(m, heap, gap, m->size);
}

static void heap_lock(struct xseg_heap_meta *m, void *heap)
{
	int rc = pthread_mutex_lock(&m->lock);
	if (rc == EOWNERDEAD) {
		m->recovered++;
		heap_rebuild(m, heap);
		pthread_mutex_consistent(&m->lock);
	}
	/* The free lists live in the blocks: what another process wrote there
	 * under this lock is ours now. */
	xannotate_happens_after(&xseg_tsan_handoff);
}

static void heap_unlock(struct xseg_heap_meta *m)
{
	xannotate_happens_before(&xseg_tsan_handoff);
	pthread_mutex_unlock(&m->lock);
}

int xseg_heap_init(struct xseg_heap_meta *m, void *heap, uint64_t heap_size)
{
	pthread_mutexattr_t attr;
	uint32_t orders = 0;

	if (heap_size < order_bytes(0) || (heap_size & (heap_size - 1)))
		return -EINVAL;
	while (order_bytes(orders) < heap_size)
		orders++;
	if (orders + 1 > XSEG_HEAP_MAX_ORDERS)
		return -EINVAL;
	memset(m, 0, xseg_heap_meta_bytes(heap_size));
	pthread_mutexattr_init(&attr);
	pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(&m->lock, &attr);
	pthread_mutexattr_destroy(&attr);
	m->size = heap_size;
	m->orders = orders + 1;
	for (uint32_t i = 0; i < XSEG_HEAP_MAX_ORDERS; i++)
		m->free_head[i] = NIL;
	m->pending_off = NIL;
	list_push(m, heap, orders, 0);
	return 0;
}

/* Under the lock: the block at off changes hands as *ref says. A kill
 * stops the holder at one instruction, so these steps are kept in program
 * order (the release stores and the compiler fence); other processes see
 * them only through the lock. */
static void pending(struct xseg_heap_meta *m, uint64_t off, uint64_t *ref)
{
	m->pending_ref = (int64_t)((char *)ref - (char *)m);
	__atomic_store_n(&m->pending_off, off, __ATOMIC_RELEASE);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
}

static void pending_done(struct xseg_heap_meta *m)
{
	__atomic_store_n(&m->pending_off, NIL, __ATOMIC_RELEASE);
}

int xseg_heap_alloc(struct xseg_heap_meta *m, void *heap, uint64_t bytes,
		    uint64_t *buffer, uint64_t *bufferlen)
{
	uint32_t want = 0, order;

	if (bytes == 0)
		bytes = 1;
	if (bytes > m->size)
		return -ENOMEM;
	while (order_bytes(want) < bytes)
		want++;

	heap_lock(m, heap);
	for (order = want; order < m->orders && m->free_head[order] == NIL; order++)
		;
	if (order >= m->orders) {
		heap_unlock(m);
		return -ENOMEM;
	}
	uint64_t off = m->free_head[order];
	pending(m, off, bufferlen);
	list_remove(m, heap, order, off);
	while (order > want) {          /* split, keeping the lower half */
		order--;
		list_push(m, heap, order, off + order_bytes(order));
	}
	block_state(m)[off >> XSEG_HEAP_MIN_SHIFT] = STATE_USED | want;
	m->used += order_bytes(want);
	m->allocs++;
	__atomic_store_n(buffer, off, __ATOMIC_RELAXED);
	__atomic_store_n(bufferlen, order_bytes(want), __ATOMIC_RELEASE);   /* after the rest */
	pending_done(m);
	heap_unlock(m);
	return 0;
}

int xseg_heap_free(struct xseg_heap_meta *m, void *heap, uint64_t off, uint64_t *bufferlen)
{
	if (off >= m->size || (off & (order_bytes(0) - 1)))
		return -EINVAL;
	heap_lock(m, heap);
	uint8_t st = block_state(m)[off >> XSEG_HEAP_MIN_SHIFT];
	if (!(st & STATE_USED)) {
		heap_unlock(m);
		return -EINVAL;         /* not an allocated block: double free */
	}
	pending(m, off, bufferlen);
	__atomic_store_n(bufferlen, 0, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);   /* forgotten before freed */
	uint32_t order = st & ORDER_MASK;
	m->used -= order_bytes(order);
	m->allocs--;
	free_block(m, heap, off, order);
	pending_done(m);
	heap_unlock(m);
	return 0;
}

void xseg_heap_usage(struct xseg_heap_meta *m, void *heap, uint64_t *used,
		     uint64_t *allocs, uint64_t *largest_free)
{
	heap_lock(m, heap);
	*used = m->used;
	*allocs = m->allocs;
	*largest_free = 0;
	for (uint32_t o = m->orders; o-- > 0;) {
		if (m->free_head[o] != NIL) {
			*largest_free = order_bytes(o);
			break;
		}
	}
	heap_unlock(m);
}
