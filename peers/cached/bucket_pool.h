/*
 * cached's bucket pool: `count` slots of `bucket_size` bytes in one
 * pre-faulted mapping, handed out by slot number. The mapping asks for
 * transparent huge pages: a cache hit lands on a random bucket of a large
 * pool, and with 4K pages each one costs a TLB miss (and on a guest with
 * shadow paging a trap to the hypervisor the first time a page is written).
 *
 * Free slots sit on a shared stack under a mutex, but a thread takes and
 * returns them through its own magazine of up to BUCKET_MAGAZINE slots, so
 * the mutex is taken once per half-magazine, not per bucket, and threads
 * claiming buckets for different objects do not serialise on it. A thread's
 * magazine can hold slots another thread is short of; the pool reports
 * empty only when the shared stack is empty, and cached reclaims then.
 */
#ifndef CACHED_BUCKET_POOL_H
#define CACHED_BUCKET_POOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define BUCKET_MAGAZINE 64u

struct bucket_magazine {
	uint32_t n;
	uint32_t slots[BUCKET_MAGAZINE];
};

struct bucket_pool {
	unsigned char *data;       /* 2 MiB aligned, inside the mapping */
	uint64_t bytes;
	void *map;                 /* the mapping itself, for munmap */
	uint64_t map_bytes;
	uint32_t bucket_size;
	uint32_t count;
	pthread_mutex_t lock;      /* guards free_stack and nfree */
	uint32_t *free_stack;
	uint32_t nfree;
	_Atomic uint64_t in_use;   /* slots handed out (magazines excluded) */
	/* The bottom `reserve` slots of the shared stack are for spares only
	 * (bucket_pool_get_spare): the normal path sees the pool as empty
	 * before them, so a spare never fails for want of a slot. */
	uint32_t reserve;
};

/* Memory for a pool, mapped and faulted in (slow for a large pool: made
 * apart from the pool, a peer makes it before it serves). */
struct bucket_map {
	void *map;
	uint64_t map_bytes;
	unsigned char *data;       /* 2 MiB aligned, inside the mapping */
	uint64_t bytes;
};
/* Maps and pre-faults `bytes`. -ENOMEM / -EINVAL. */
int bucket_map_create(struct bucket_map *m, uint64_t bytes);
void bucket_map_destroy(struct bucket_map *m);

/* Maps and pre-faults count * bucket_size bytes. -ENOMEM / -EINVAL. */
int bucket_pool_init(struct bucket_pool *p, uint32_t count, uint32_t bucket_size);
/* The same on `m` (NULL: mapped here), which must hold count * bucket_size
 * bytes; on success the pool owns its mapping (*m is emptied), on failure
 * the caller still does. */
int bucket_pool_init_mapped(struct bucket_pool *p, struct bucket_map *m, uint32_t count,
			    uint32_t bucket_size);
/* The same on memory of the caller's (a persist file's data slots: it is
 * not unmapped at destroy), leaving out the slots with used[slot] set (in
 * use already: recovered). -EINVAL / -ENOMEM. */
int bucket_pool_init_on(struct bucket_pool *p, unsigned char *data, uint32_t count,
			uint32_t bucket_size, const uint8_t *used);
/* Keeps up to n free slots back for spares (at most the free ones). */
void bucket_pool_set_reserve(struct bucket_pool *p, uint32_t n);
void bucket_pool_destroy(struct bucket_pool *p);

/* A free slot, or UINT32_MAX when the pool is exhausted. */
uint32_t bucket_pool_get(struct bucket_pool *p, struct bucket_magazine *m);
void bucket_pool_put(struct bucket_pool *p, struct bucket_magazine *m, uint32_t slot);
/* A spare slot for a short while (a shadow copy of one bucket), taken
 * from the shared stack, reserve included; waits (yields) while every
 * one is out, as the holders give theirs back within a bucket copy. */
uint32_t bucket_pool_get_spare(struct bucket_pool *p);
/* Slots on the shared stack now, reserve included (what spares can take). */
uint32_t bucket_pool_shared_free(struct bucket_pool *p);

/* Gives a slot straight back to the shared stack (the reserve first). */
void bucket_pool_put_spare(struct bucket_pool *p, uint32_t slot);
/* Returns a magazine's slots to the shared stack (a thread leaving). */
void bucket_pool_drain(struct bucket_pool *p, struct bucket_magazine *m);

static inline unsigned char *bucket_pool_data(struct bucket_pool *p, uint32_t slot)
{
	return p->data + (uint64_t)slot * p->bucket_size;
}

#endif
