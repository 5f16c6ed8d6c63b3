/* cached's bucket pool; see bucket_pool.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bucket_pool.h"

int bucket_pool_init(struct bucket_pool *p, uint32_t count, uint32_t bucket_size)
{
	memset(p, 0, sizeof(*p));
	if (count == 0 || count == UINT32_MAX || bucket_size == 0)
		return -EINVAL;
	p->bytes = (uint64_t)count * bucket_size;
	/* MAP_POPULATE pre-faults: a cold cache is as fast as a warm one. */
	p->data = mmap(NULL, p->bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (p->data == MAP_FAILED) {
		p->data = NULL;
		return -ENOMEM;
	}
	p->free_stack = malloc((size_t)count * sizeof(*p->free_stack));
	if (!p->free_stack) {
		munmap(p->data, p->bytes);
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

void bucket_pool_destroy(struct bucket_pool *p)
{
	if (p->data)
		munmap(p->data, p->bytes);
	free(p->free_stack);
	pthread_mutex_destroy(&p->lock);
	memset(p, 0, sizeof(*p));
}

/* Moves up to half a magazine from the shared stack into m. */
static void refill(struct bucket_pool *p, struct bucket_magazine *m)
{
	pthread_mutex_lock(&p->lock);
	while (m->n < BUCKET_MAGAZINE / 2 && p->nfree)
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
