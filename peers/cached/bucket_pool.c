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

/*
 * Maps `bytes` 2 MiB aligned, asks for huge pages and pre-faults them for
 * writing, so that a cold cache is as fast as a warm one. MAP_POPULATE
 * would fault the pages in before the madvise could ask for huge ones.
 */
int bucket_map_create(struct bucket_map *m, uint64_t bytes)
{
	memset(m, 0, sizeof(*m));
	if (!bytes)
		return -EINVAL;
	uint64_t len = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
	m->map_bytes = len + HUGE_PAGE;   /* room to align the start */
	m->map = mmap(NULL, m->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		      -1, 0);
	if (m->map == MAP_FAILED) {
		m->map = NULL;
		return -ENOMEM;
	}
	uintptr_t start = ((uintptr_t)m->map + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
	m->data = (unsigned char *)start;
	m->bytes = bytes;
	(void)madvise(m->data, len, MADV_HUGEPAGE);   /* a hint: 4K pages still work */
	if (madvise(m->data, len, MADV_POPULATE_WRITE) < 0) {
		if (errno != EINVAL) {   /* no memory for it: say so, not OOM later */
			int err = errno;
			bucket_map_destroy(m);
			return -err;
		}
		/* An older kernel: write each page once ourselves. */
		for (uint64_t off = 0; off < len; off += 4096)
			((volatile unsigned char *)m->data)[off] = 0;
	}
	return 0;
}

void bucket_map_destroy(struct bucket_map *m)
{
	if (m->map)
		munmap(m->map, m->map_bytes);
	memset(m, 0, sizeof(*m));
}

int bucket_pool_init(struct bucket_pool *p, uint32_t count, uint32_t bucket_size)
{
	return bucket_pool_init_mapped(p, NULL, count, bucket_size);
}

int bucket_pool_init_mapped(struct bucket_pool *p, struct bucket_map *m, uint32_t count,
			    uint32_t bucket_size)
{
	memset(p, 0, sizeof(*p));
	if (count == 0 || count == UINT32_MAX || bucket_size == 0)
		return -EINVAL;
	p->bytes = (uint64_t)count * bucket_size;
	struct bucket_map made;
	if (m && m->bytes != p->bytes)
		return -EINVAL;
	if (!m) {
		if (bucket_map_create(&made, p->bytes) < 0)
			return -ENOMEM;
		m = &made;
	}
	p->map = m->map;             /* the pool's now: unmapped at destroy */
	p->map_bytes = m->map_bytes;
	p->data = m->data;
	memset(m, 0, sizeof(*m));
	p->free_stack = malloc((size_t)count * sizeof(*p->free_stack));
	if (!p->free_stack) {
		munmap(p->map, p->map_bytes);
		p->map = NULL;
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

uint32_t bucket_pool_shared_free(struct bucket_pool *p)
{
	pthread_mutex_lock(&p->lock);
	uint32_t n = p->nfree;
	pthread_mutex_unlock(&p->lock);
	return n;
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
