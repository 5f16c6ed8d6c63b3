/* cached's bucket pool; see bucket_pool.h. */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bucket_pool.h"

#define HUGE_PAGE (2ull << 20)
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23   /* Linux 5.14 */
#endif

/* Faulted in at once; the rest on a thread of its own while the cache
 * serves (a 4G pool took 4.8 s, a first request waited for all of it). */
#define POPULATE_FIRST (64ull << 20)
#define POPULATE_CHUNK (64ull << 20)

/* The rest of the pool, a chunk at a time from the top down (the low
 * slots go out first: workers fault those in themselves, and the two meet
 * once). MADV_POPULATE_WRITE faults pages in without writing them, so
 * buckets already in use keep their bytes. */
static void *populate_rest(void *arg)
{
	struct bucket_pool *p = arg;
	uint64_t bottom = atomic_load(&p->populated), top = p->map_bytes - HUGE_PAGE;
	while (top > bottom && !atomic_load(&p->populate_stop)) {
		uint64_t n = top - bottom < POPULATE_CHUNK ? top - bottom : POPULATE_CHUNK;
		if (madvise(p->data + top - n, n, MADV_POPULATE_WRITE) < 0)
			break;   /* no memory now: pages fault in when first used */
		top -= n;
		atomic_fetch_add(&p->populated, n);
	}
	return NULL;
}

/*
 * Maps the pool 2 MiB aligned, asks for huge pages and pre-faults it for
 * writing, so that a cold cache is as fast as a warm one: the first
 * POPULATE_FIRST bytes before it returns (the low slots go out first),
 * the rest on a thread (populate_rest). MAP_POPULATE would fault the pages in before the
 * madvise could ask for huge ones.
 */
static int map_pool(struct bucket_pool *p)
{
	uint64_t len = (p->bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
	p->map_bytes = len + HUGE_PAGE;   /* room to align the start */
	p->map = mmap(NULL, p->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		      -1, 0);
	if (p->map == MAP_FAILED) {
		p->map = NULL;
		return -1;
	}
	uintptr_t start = ((uintptr_t)p->map + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
	p->data = (unsigned char *)start;
	(void)madvise(p->data, len, MADV_HUGEPAGE);   /* a hint: 4K pages still work */
	uint64_t first = len < POPULATE_FIRST ? len : POPULATE_FIRST;
	if (madvise(p->data, first, MADV_POPULATE_WRITE) < 0) {
		/* An older kernel: write each page once ourselves, all of them
		 * now (a write beside a worker's would lose its bytes). */
		for (uint64_t off = 0; off < len; off += 4096)
			((volatile unsigned char *)p->data)[off] = 0;
		atomic_store(&p->populated, len);
		return 0;
	}
	atomic_store(&p->populated, first);
	if (first < len && pthread_create(&p->populator, NULL, populate_rest, p) == 0)
		p->populating = true;
	return 0;
}

uint64_t bucket_pool_populated(struct bucket_pool *p)
{
	uint64_t n = p->map ? atomic_load(&p->populated) : p->bytes;
	return n < p->bytes ? n : p->bytes;   /* the mapping is whole huge pages */
}

int bucket_pool_init(struct bucket_pool *p, uint32_t count, uint32_t bucket_size)
{
	memset(p, 0, sizeof(*p));
	if (count == 0 || count == UINT32_MAX || bucket_size == 0)
		return -EINVAL;
	p->bytes = (uint64_t)count * bucket_size;
	if (map_pool(p) < 0)
		return -ENOMEM;
	p->free_stack = malloc((size_t)count * sizeof(*p->free_stack));
	if (!p->free_stack) {
		munmap(p->map, p->map_bytes);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < count; i++)
		p->free_stack[i] = count - 1 - i;   /* slot 0 on top */
	p->nfree = count;
	p->count = count;
	p->bucket_size = bucket_size;
	pthread_mutex_init(&p->lock, NULL);
	return 0;
}

int bucket_pool_init_on(struct bucket_pool *p, unsigned char *data, uint32_t count,
			uint32_t bucket_size, const uint8_t *used)
{
	memset(p, 0, sizeof(*p));
	if (!data || count == 0 || count == UINT32_MAX || bucket_size == 0)
		return -EINVAL;
	p->bytes = (uint64_t)count * bucket_size;
	p->data = data;               /* p->map stays NULL: not ours to unmap */
	p->free_stack = malloc((size_t)count * sizeof(*p->free_stack));
	if (!p->free_stack)
		return -ENOMEM;
	for (uint32_t i = count; i-- > 0;)
		if (!used || !used[i])
			p->free_stack[p->nfree++] = i;   /* lowest free slot on top */
	p->count = count;
	p->bucket_size = bucket_size;
	atomic_store(&p->in_use, count - p->nfree);
	pthread_mutex_init(&p->lock, NULL);
	return 0;
}

void bucket_pool_set_reserve(struct bucket_pool *p, uint32_t n)
{
	pthread_mutex_lock(&p->lock);
	p->reserve = n < p->nfree ? n : p->nfree;
	pthread_mutex_unlock(&p->lock);
}

uint32_t bucket_pool_get_spare(struct bucket_pool *p)
{
	for (;;) {
		pthread_mutex_lock(&p->lock);
		if (p->nfree) {
			uint32_t slot = p->free_stack[--p->nfree];
			pthread_mutex_unlock(&p->lock);
			atomic_fetch_add_explicit(&p->in_use, 1, memory_order_relaxed);
			return slot;
		}
		pthread_mutex_unlock(&p->lock);
		sched_yield();
	}
}

void bucket_pool_put_spare(struct bucket_pool *p, uint32_t slot)
{
	pthread_mutex_lock(&p->lock);
	p->free_stack[p->nfree++] = slot;
	pthread_mutex_unlock(&p->lock);
	atomic_fetch_sub_explicit(&p->in_use, 1, memory_order_relaxed);
}

void bucket_pool_destroy(struct bucket_pool *p)
{
	if (p->populating) {
		atomic_store(&p->populate_stop, true);
		pthread_join(p->populator, NULL);
	}
	if (p->map)
		munmap(p->map, p->map_bytes);
	free(p->free_stack);
	pthread_mutex_destroy(&p->lock);
	memset(p, 0, sizeof(*p));
}

/* Moves up to half a magazine from the shared stack into m. */
static void refill(struct bucket_pool *p, struct bucket_magazine *m)
{
	pthread_mutex_lock(&p->lock);
	while (m->n < BUCKET_MAGAZINE / 2 && p->nfree > p->reserve)
		m->slots[m->n++] = p->free_stack[--p->nfree];
	pthread_mutex_unlock(&p->lock);
}

uint32_t bucket_pool_get(struct bucket_pool *p, struct bucket_magazine *m)
{
	if (!m->n)
		refill(p, m);
	if (!m->n)
		return UINT32_MAX;
	atomic_fetch_add_explicit(&p->in_use, 1, memory_order_relaxed);
	return m->slots[--m->n];
}

/* Moves half of a full magazine back to the shared stack. */
static void spill(struct bucket_pool *p, struct bucket_magazine *m, uint32_t keep)
{
	pthread_mutex_lock(&p->lock);
	while (m->n > keep)
		p->free_stack[p->nfree++] = m->slots[--m->n];
	pthread_mutex_unlock(&p->lock);
}

void bucket_pool_put(struct bucket_pool *p, struct bucket_magazine *m, uint32_t slot)
{
	if (m->n == BUCKET_MAGAZINE)
		spill(p, m, BUCKET_MAGAZINE / 2);
	m->slots[m->n++] = slot;
	atomic_fetch_sub_explicit(&p->in_use, 1, memory_order_relaxed);
}

void bucket_pool_drain(struct bucket_pool *p, struct bucket_magazine *m)
{
	spill(p, m, 0);
}
