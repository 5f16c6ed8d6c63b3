/* An object's buckets and their state machine; see buckets.h. */
#include <errno.h>
#include <stdlib.h>

#include "buckets.h"

static const char *const state_names[BUCKET_STATES] = {
	[BUCKET_INVALID] = "INVALID", [BUCKET_LOADING] = "LOADING",
	[BUCKET_VALID] = "VALID", [BUCKET_DIRTY] = "DIRTY", [BUCKET_WRITING] = "WRITING",
};

/* legal[from][to]: the whole state machine in one table. */
static const bool legal[BUCKET_STATES][BUCKET_STATES] = {
	[BUCKET_INVALID] = { [BUCKET_LOADING] = true, [BUCKET_VALID] = true, [BUCKET_DIRTY] = true },
	[BUCKET_LOADING] = { [BUCKET_VALID] = true, [BUCKET_INVALID] = true },
	[BUCKET_VALID]   = { [BUCKET_DIRTY] = true, [BUCKET_INVALID] = true },
	[BUCKET_DIRTY]   = { [BUCKET_WRITING] = true, [BUCKET_INVALID] = true },
	[BUCKET_WRITING] = { [BUCKET_VALID] = true, [BUCKET_DIRTY] = true },
};

const char *bucket_state_name(enum bucket_state s)
{
	return (unsigned)s < BUCKET_STATES ? state_names[s] : "?";
}

bool bucket_transition_ok(enum bucket_state from, enum bucket_state to)
{
	return (unsigned)from < BUCKET_STATES && (unsigned)to < BUCKET_STATES && legal[from][to];
}

int bucket_geometry_init(struct bucket_geometry *g, uint64_t object_size,
			 uint32_t bucket_size)
{
	if (bucket_size < 512 || (bucket_size & (bucket_size - 1)) || object_size == 0 ||
	    object_size % bucket_size || object_size / bucket_size > UINT32_MAX)
		return -EINVAL;
	g->object_size = object_size;
	g->bucket_size = bucket_size;
	g->buckets_per_object = (uint32_t)(object_size / bucket_size);
	g->bucket_shift = (unsigned)__builtin_ctz(bucket_size);
	return 0;
}

bool bucket_span_head_partial(const struct bucket_geometry *g, const struct bucket_span *s)
{
	(void)g;
	return s->head_skip != 0;
}

bool bucket_span_tail_partial(const struct bucket_geometry *g, const struct bucket_span *s)
{
	return s->tail_len != g->bucket_size;
}

int object_buckets_init(struct object_buckets *ob, uint32_t n)
{
	ob->n = n;
	ob->state = calloc(n, sizeof(*ob->state));
	ob->probation = calloc(n, sizeof(*ob->probation));
	ob->slot = malloc((size_t)n * sizeof(*ob->slot));
	if (!ob->state || !ob->probation || !ob->slot) {
		object_buckets_free(ob);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++)
		ob->slot[i] = BUCKET_NO_SLOT;
	for (int s = 0; s < BUCKET_STATES; s++)
		ob->count[s] = 0;
	ob->count[BUCKET_INVALID] = n;
	ob->claimed = 0;
	ob->on_probation = 0;
	atomic_init(&ob->unwritten, 0);
	return 0;
}

void object_buckets_free(struct object_buckets *ob)
{
	free(ob->state);
	free(ob->probation);
	free(ob->slot);
	ob->state = NULL;
	ob->probation = NULL;
	ob->slot = NULL;
	ob->n = 0;
}

int bucket_set(struct object_buckets *ob, struct bucket_totals *t, uint32_t i,
	       enum bucket_state to)
{
	if (i >= ob->n)
		return -EINVAL;
	enum bucket_state from = ob->state[i];
	if (from == to)
		return 0;
	/* Data lives in a pool slot: only INVALID may be unclaimed. */
	if (!bucket_transition_ok(from, to) ||
	    (to != BUCKET_INVALID && ob->slot[i] == BUCKET_NO_SLOT))
		return -EINVAL;
	if (from == BUCKET_VALID)
		bucket_used(ob, t, i);
	ob->state[i] = (uint8_t)to;
	ob->count[from]--;
	ob->count[to]++;
	atomic_fetch_sub_explicit(&t->count[from], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&t->count[to], 1, memory_order_relaxed);
	if (from >= BUCKET_DIRTY || to >= BUCKET_DIRTY)
		atomic_store_explicit(&ob->unwritten,
				      ob->count[BUCKET_DIRTY] + ob->count[BUCKET_WRITING],
				      memory_order_relaxed);
	return 0;
}

int bucket_on_probation(struct object_buckets *ob, struct bucket_totals *t, uint32_t i)
{
	if (i >= ob->n || ob->state[i] != BUCKET_VALID)
		return -EINVAL;
	if (!ob->probation[i]) {
		ob->probation[i] = 1;
		ob->on_probation++;
		atomic_fetch_add_explicit(&t->probation, 1, memory_order_relaxed);
	}
	return 0;
}

void bucket_used(struct object_buckets *ob, struct bucket_totals *t, uint32_t i)
{
	if (i < ob->n && ob->probation[i]) {
		ob->probation[i] = 0;
		ob->on_probation--;
		atomic_fetch_sub_explicit(&t->probation, 1, memory_order_relaxed);
	}
}

int bucket_claim(struct object_buckets *ob, struct bucket_totals *t, uint32_t i,
		 uint32_t slot)
{
	if (i >= ob->n || slot == BUCKET_NO_SLOT)
		return -EINVAL;
	if (ob->slot[i] != BUCKET_NO_SLOT)
		return -EBUSY;
	ob->slot[i] = slot;
	ob->claimed++;
	atomic_fetch_add_explicit(&t->claimed, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&t->count[ob->state[i]], 1, memory_order_relaxed);
	return 0;
}

int64_t bucket_release(struct object_buckets *ob, struct bucket_totals *t, uint32_t i)
{
	if (i >= ob->n || ob->slot[i] == BUCKET_NO_SLOT)
		return -EINVAL;
	enum bucket_state s = ob->state[i];
	if (s != BUCKET_INVALID && s != BUCKET_VALID)
		return -EBUSY;
	if (s == BUCKET_VALID) {
		bucket_set(ob, t, i, BUCKET_INVALID);
		ob->valid_released++;
	}
	uint32_t slot = ob->slot[i];
	ob->slot[i] = BUCKET_NO_SLOT;
	ob->claimed--;
	atomic_fetch_sub_explicit(&t->claimed, 1, memory_order_relaxed);
	atomic_fetch_sub_explicit(&t->count[BUCKET_INVALID], 1, memory_order_relaxed);
	return slot;
}

uint32_t bucket_find_run(const struct object_buckets *ob, uint32_t from, uint32_t last,
			 enum bucket_state s, uint32_t max_run, uint32_t *run_len)
{
	if (last >= ob->n)
		last = ob->n - 1;
	uint32_t i = from;
	while (i <= last && ob->state[i] != s)
		i++;
	uint32_t len = 0;
	while (i + len <= last && len < max_run && ob->state[i + len] == s)
		len++;
	*run_len = len;
	return i;
}
