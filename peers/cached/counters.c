/*
 * The engine's growing figures, a block per counting thread (see struct
 * engine_counts in engine_private.h). A thread keeps the block of the
 * engine it counted for last in tl_counts, keyed by the engine's id, not
 * its address: an engine destroyed and another made at the same address
 * never reaches the old one's (freed) block. A thread that counts for an
 * engine again after another one finds its block on the engine's list,
 * so the list holds one block per thread at most.
 */
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine_private.h"

bool engine_asym_fence;
_Atomic uint32_t engine_fence_word;
static pthread_once_t fence_once = PTHREAD_ONCE_INIT;

static void fence_register(void)
{
	long cmds = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0);
	engine_asym_fence = cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
			    syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0) == 0;
}

void engine_fence_init(void)
{
	pthread_once(&fence_once, fence_register);
}

_Thread_local struct count_cache tl_counts;
static _Thread_local int tl_thread_mark;   /* its address names the thread */

static _Atomic uint64_t next_engine_id = 1;

uint64_t engine_new_id(void)
{
	return atomic_fetch_add(&next_engine_id, 1);
}

struct engine_counts *engine_counts_slow(struct cache_engine *e)
{
	struct count_block *head = atomic_load(&e->count_blocks);
	for (struct count_block *b = head; b; b = b->next)
		if (b->thread == &tl_thread_mark) {
			tl_counts = (struct count_cache){ e->id, &b->c };
			return &b->c;
		}
	struct count_block *nb = calloc(1, sizeof(*nb));
	if (!nb) {
		/* Counting must not fail a request: count nowhere. */
		static _Thread_local struct engine_counts lost;
		return &lost;
	}
	nb->thread = &tl_thread_mark;
	nb->next = head;
	while (!atomic_compare_exchange_weak(&e->count_blocks, &nb->next, nb))
		;
	tl_counts = (struct count_cache){ e->id, &nb->c };
	return &nb->c;
}

uint64_t engine_count_sum(struct cache_engine *e, size_t field)
{
	uint64_t sum = 0;
	for (struct count_block *b = atomic_load(&e->count_blocks); b; b = b->next)
		sum += atomic_load_explicit((_Atomic uint64_t *)((char *)&b->c + field),
					    memory_order_relaxed);
	return sum;
}

void engine_wait_writes(struct cache_engine *e)
{
	/* every thread's count stored before our caller's store is seen now,
	 * or that thread reads what our caller stored (write_enter); the
	 * writers rely on it: one that fails (it cannot, registered) must not
	 * pass for done */
	if (!engine_asym_fence)
		engine_full_fence();
	else if (syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0) < 0)
		abort();
	for (struct count_block *b = atomic_load(&e->count_blocks); b; b = b->next) {
		/* none under way now, or the one under way left since. A write
		 * that leaves bumps writes_left before its depth drops: seen
		 * between the two, the count we read moves only with that
		 * thread's next write, which may never come; its depth at 0
		 * says it left too (and no write is under way there). */
		uint64_t left = atomic_load(&b->c.writes_left);
		while (atomic_load(&b->c.writes_depth) && atomic_load(&b->c.writes_left) == left)
			sched_yield();
	}
}

void engine_counts_free(struct cache_engine *e)
{
	struct count_block *b = atomic_exchange(&e->count_blocks, NULL);
	while (b) {
		struct count_block *next = b->next;
		free(b);
		b = next;
	}
}
