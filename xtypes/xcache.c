/*
 * xcache: bounded named cache.  Design, state machine and rules for users
 * are in include/xtypes/xcache.h; this file follows it.
 */
#include <xtypes/xannotate.h>
#include <xtypes/xcache.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <urcu.h>
#include <urcu/compiler.h>
#include <urcu/lfstack.h>
#include <urcu/rculfhash.h>
#include <xxhash.h>

enum entry_state {
	ST_FREE,
	ST_NEW,
	ST_INSERTING,
	ST_ACTIVE,
	ST_EVICTING,
	ST_EVICTED,
	ST_FINALIZING,
	ST_DYING,
};

/* Entry word: ref in bits 0-31, state in 32-35, flags above. */
#define REF_MASK	0xffffffffULL
#define STATE_SHIFT	32
#define STATE_MASK	(0xfULL << STATE_SHIFT)
#define F_UNLINKED	(1ULL << 36)	/* removed: out of the index for good */
#define F_REFINALIZE	(1ULL << 37)	/* ref hit 0 again during on_finalize */

/* Nodes per word of the active map; the clock hand moves a word at a time. */
#define MAP_BITS	64

#define HUGE_PAGE	(2UL << 20)

/* The name is inline so that a lookup's compare touches the line (or the
 * 128-byte pair) it already loaded for the hash and the state. */
struct xcache_entry {
	struct cds_lfht_node index_node;
	_Atomic uint64_t word;
	void *priv;
	struct cds_lfs_node pool_node;	/* on the free stack or in limbo */
	uint32_t name_len;
	atomic_bool referenced;		/* CLOCK bit, set on every hit */
	char name[];
};

struct xcache {
	uint32_t capacity, nr_nodes, name_max;
	struct xcache_ops ops;
	void *priv;
	struct cds_lfht *index;
	char *nodes;			/* nr_nodes entries of node_size bytes */
	size_t node_size, nodes_size;
	/* A bit per node, set while it may be ACTIVE: the clock hand reads
	 * these words instead of every node (nodes are hundreds of bytes,
	 * and most are free when the cache holds fewer entries than nodes). */
	_Atomic uint64_t *active_map;
	uint32_t map_words;
	pthread_mutex_t reclaim_lock;
	/* Written by inserts and evictions only; kept off each other's line. */
	alignas(64) _Atomic uint32_t nr_active;
	alignas(64) _Atomic uint64_t clock_hand;	/* in map words */
	/* Popped under rcu_read_lock; a node is pushed back only after a grace
	 * period (via limbo), which rules out ABA on pop. */
	alignas(64) struct __cds_lfs_stack free_nodes;
	alignas(64) struct __cds_lfs_stack limbo;
	/* TSan model of a grace period: readers release it on unlock, the
	 * reclaimer acquires it after synchronize_rcu. */
	alignas(64) char grace_period;
};

struct name_key {
	const char *name;
	size_t len;
};

static inline uint32_t w_ref(uint64_t w) { return (uint32_t)(w & REF_MASK); }
static inline unsigned w_state(uint64_t w) { return (unsigned)((w & STATE_MASK) >> STATE_SHIFT); }
static inline uint64_t w_flags(uint64_t w) { return w & (F_UNLINKED | F_REFINALIZE); }

static inline uint64_t w_make(unsigned state, uint64_t flags, uint32_t ref)
{
	return ((uint64_t)state << STATE_SHIFT) | flags | ref;
}

static inline uint64_t w_with_state(uint64_t w, unsigned state)
{
	return (w & ~STATE_MASK) | ((uint64_t)state << STATE_SHIFT);
}

static void die(const char *what)
{
	fprintf(stderr, "xcache: %s\n", what);
	abort();
}

static inline bool cas_word(struct xcache_entry *e, uint64_t *expected, uint64_t desired)
{
	return atomic_compare_exchange_weak_explicit(&e->word, expected, desired,
						     memory_order_acq_rel, memory_order_acquire);
}

static inline void read_lock(void)
{
	rcu_read_lock();
}

static inline void read_unlock(struct xcache *c)
{
	xannotate_happens_before(&c->grace_period);
	rcu_read_unlock();
}

static inline struct xcache_entry *node_at(const struct xcache *c, uint64_t i)
{
	return (struct xcache_entry *)(c->nodes + i * c->node_size);
}

static inline uint64_t node_index(const struct xcache *c, const struct xcache_entry *e)
{
	return (uint64_t)((const char *)e - c->nodes) / c->node_size;
}

/* Set before a node becomes ACTIVE; cleared by the thread that moved it out
 * of ACTIVE, before the node can be freed. So a bit may be set for a node
 * that is not (yet, or any more) ACTIVE, never missing for one that is. */
static inline void map_set(struct xcache *c, const struct xcache_entry *e)
{
	uint64_t i = node_index(c, e);
	atomic_fetch_or_explicit(&c->active_map[i / MAP_BITS], 1ULL << (i % MAP_BITS),
				 memory_order_relaxed);
}

static inline void map_clear(struct xcache *c, const struct xcache_entry *e)
{
	uint64_t i = node_index(c, e);
	atomic_fetch_and_explicit(&c->active_map[i / MAP_BITS], ~(1ULL << (i % MAP_BITS)),
				  memory_order_relaxed);
}

static inline struct xcache_entry *node_entry(struct cds_lfht_node *n)
{
	return caa_container_of(n, struct xcache_entry, index_node);
}

static inline void touch(struct xcache_entry *e)
{
	if (!atomic_load_explicit(&e->referenced, memory_order_relaxed))
		atomic_store_explicit(&e->referenced, true, memory_order_relaxed);
}

/* Matches live (findable or revivable) entries by full name; the state is
 * read first, with acquire, so the name read after it is the published one. */
static int match_name(struct cds_lfht_node *node, const void *key)
{
	const struct name_key *k = key;
	struct xcache_entry *e = node_entry(node);
	uint64_t w = atomic_load_explicit(&e->word, memory_order_acquire);
	unsigned s = w_state(w);

	if (s < ST_INSERTING || s == ST_DYING || (w & F_UNLINKED))
		return 0;
	return e->name_len == k->len && memcmp(e->name, k->name, k->len) == 0;
}

/* ---- node pool ---------------------------------------------------------- */

static struct xcache_entry *pop_free(struct xcache *c)
{
	read_lock();
	struct cds_lfs_node *n = __cds_lfs_pop(&c->free_nodes);
	read_unlock(c);
	return n ? caa_container_of(n, struct xcache_entry, pool_node) : NULL;
}

/* Moves every node in limbo to the free stack once no reader can still see
 * it.  Returns false when there was nothing to move. */
static bool reclaim(struct xcache *c)
{
	bool refilled;

	pthread_mutex_lock(&c->reclaim_lock);
	refilled = !cds_lfs_empty(&c->free_nodes);	/* done while we waited */
	if (!refilled) {
		struct cds_lfs_head *batch = __cds_lfs_pop_all(&c->limbo);
		struct cds_lfs_node *n, *next;

		if (batch) {
			synchronize_rcu();
			xannotate_happens_after(&c->grace_period);
			cds_lfs_for_each_safe(batch, n, next) {
				struct xcache_entry *e = caa_container_of(n, struct xcache_entry, pool_node);
				/* Hands the grace period on to the allocator. */
				atomic_store_explicit(&e->word, w_make(ST_FREE, 0, 0), memory_order_release);
				cds_lfs_push(&c->free_nodes, n);
			}
			refilled = true;
		}
	}
	pthread_mutex_unlock(&c->reclaim_lock);
	return refilled;
}

/* The node goes to limbo; reclaim frees it after a grace period. */
static void release_node(struct xcache *c, struct xcache_entry *e, bool fire_on_free)
{
	if (fire_on_free && c->ops.on_free)
		c->ops.on_free(c->priv, e->priv);
	/* The node's next user must see everything its last one did; the
	 * hand-over goes through liburcu's stacks, which TSan cannot see. */
	xannotate_happens_before(e);
	atomic_store_explicit(&e->word, w_make(ST_FREE, 0, 0), memory_order_release);
	cds_lfs_push(&c->limbo, &e->pool_node);
}

static void unindex(struct xcache *c, struct xcache_entry *e)
{
	read_lock();
	cds_lfht_del(c->index, &e->index_node);
	read_unlock(c);
}

/* The end of an entry: out of the index (unless remove took it out), on_put,
 * on_free, and the node to limbo. */
static void destroy_entry(struct xcache *c, struct xcache_entry *e, bool indexed)
{
	if (indexed)
		unindex(c, e);
	if (c->ops.on_put)
		c->ops.on_put(c->priv, e->priv);
	release_node(c, e, true);
}

/* ---- create / destroy --------------------------------------------------- */

struct xcache *xcache_create(uint32_t capacity, uint32_t nr_nodes, uint32_t name_max,
			     const struct xcache_ops *ops, void *priv)
{
	if (nr_nodes == 0 && capacity <= UINT32_MAX / 2)
		nr_nodes = 2 * capacity;
	if (capacity == 0 || nr_nodes <= capacity || name_max == 0 || name_max >= UINT32_MAX) {
		errno = EINVAL;
		return NULL;
	}
	struct xcache *c = aligned_alloc(64, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	memset(c, 0, sizeof(*c));
	c->capacity = capacity;
	c->nr_nodes = nr_nodes;
	c->name_max = name_max;
	if (ops)
		c->ops = *ops;
	c->priv = priv;

	unsigned long buckets = 1;
	while (buckets < nr_nodes)
		buckets <<= 1;
	c->node_size = (offsetof(struct xcache_entry, name) + name_max + 1 + 63) & ~(size_t)63;
	c->nodes_size = ((size_t)nr_nodes * c->node_size + HUGE_PAGE - 1) & ~(size_t)(HUGE_PAGE - 1);
	c->nodes = aligned_alloc(HUGE_PAGE, c->nodes_size);
	c->map_words = (nr_nodes + MAP_BITS - 1) / MAP_BITS;
	c->active_map = calloc(c->map_words, sizeof(*c->active_map));
	c->index = cds_lfht_new(buckets, buckets, buckets, 0, NULL);
	if (!c->nodes || !c->active_map || !c->index) {
		if (c->index)
			cds_lfht_destroy(c->index, NULL);
		free(c->active_map);
		free(c->nodes);
		free(c);
		errno = ENOMEM;
		return NULL;
	}
	/* Lookups hit random nodes: fewer TLB misses with huge pages (a hint). */
	madvise(c->nodes, c->nodes_size, MADV_HUGEPAGE);
	pthread_mutex_init(&c->reclaim_lock, NULL);
	__cds_lfs_init(&c->free_nodes);
	__cds_lfs_init(&c->limbo);
	/* Pushed in reverse so that allocation starts at node 0. */
	for (uint32_t i = nr_nodes; i-- > 0;) {
		struct xcache_entry *e = node_at(c, i);

		memset(e, 0, c->node_size);
		cds_lfht_node_init(&e->index_node);
		cds_lfs_node_init(&e->pool_node);
		atomic_init(&e->word, w_make(ST_FREE, 0, 0));
		e->priv = c->ops.on_node_init ? c->ops.on_node_init(priv, e) : NULL;
		cds_lfs_push(&c->free_nodes, &e->pool_node);
	}
	return c;
}

int xcache_destroy(struct xcache *c)
{
	for (uint32_t i = 0; i < c->nr_nodes; i++) {
		uint64_t w = atomic_load_explicit(&node_at(c, i)->word, memory_order_acquire);

		if (w_state(w) != ST_FREE && !(w_state(w) == ST_ACTIVE && w_ref(w) == 1))
			return -EBUSY;
	}
	for (uint32_t i = 0; i < c->nr_nodes; i++) {
		struct xcache_entry *e = node_at(c, i);

		if (w_state(atomic_load_explicit(&e->word, memory_order_relaxed)) == ST_ACTIVE)
			destroy_entry(c, e, true);
	}
	for (uint32_t i = 0; i < c->nr_nodes; i++)
		if (c->ops.on_node_fini)
			c->ops.on_node_fini(c->priv, node_at(c, i)->priv);
	cds_lfht_destroy(c->index, NULL);
	pthread_mutex_destroy(&c->reclaim_lock);
	free(c->active_map);
	free(c->nodes);
	free(c);
	return 0;
}

/* ---- references and the finalize path ----------------------------------- */

void xcache_get(struct xcache *c, struct xcache_entry *e)
{
	(void)c;
	uint64_t old = atomic_fetch_add_explicit(&e->word, 1, memory_order_relaxed);
	unsigned s = w_state(old);

	if (s == ST_FREE || s == ST_DYING)
		die("xcache_get on an entry that is not live");
}

/* The last reference to an unindexed entry went: run on_finalize until it
 * takes no reference, then destroy the entry.  Only this thread can move
 * the entry out of FINALIZING. */
static void finalize(struct xcache *c, struct xcache_entry *e)
{
	uint64_t w, nw;

	for (;;) {
		if (c->ops.on_finalize)
			c->ops.on_finalize(c->priv, e->priv);
		w = atomic_load_explicit(&e->word, memory_order_acquire);
		do {
			if (w_ref(w) > 0)	/* the hook kept it: its put finalizes again */
				nw = w_make(ST_EVICTED, w & F_UNLINKED, w_ref(w));
			else if (w & F_REFINALIZE)
				nw = w & ~F_REFINALIZE;
			else
				nw = w_with_state(w, ST_DYING);
		} while (!cas_word(e, &w, nw));
		if (w_state(nw) == ST_EVICTED)
			return;
		if (w_state(nw) == ST_DYING)
			break;
	}
	destroy_entry(c, e, !(nw & F_UNLINKED));
}

void xcache_put(struct xcache *c, struct xcache_entry *e)
{
	uint64_t w = atomic_load_explicit(&e->word, memory_order_relaxed), nw;
	uint32_t ref;
	unsigned s;

	do {
		ref = w_ref(w);
		s = w_state(w);
		if (ref == 0)
			die("xcache_put: reference count would drop below zero");
		nw = w - 1;
		if (ref > 1)
			continue;
		if (s == ST_NEW) {	/* never inserted: only the caller had it */
			release_node(c, e, true);
			return;
		}
		if (s == ST_EVICTED)
			nw = w_make(ST_FINALIZING, w_flags(w), 0);
		else if (s == ST_FINALIZING)
			nw |= F_REFINALIZE;
		else
			die("xcache_put: last reference of an indexed entry dropped");
	} while (!cas_word(e, &w, nw));
	if (ref == 1 && s == ST_EVICTED)
		finalize(c, e);
}

/* ---- eviction ----------------------------------------------------------- */

/* Called by the thread that moved `e` ACTIVE -> EVICTING; the index's
 * reference is now this thread's, dropped at the end. */
static void finish_eviction(struct xcache *c, struct xcache_entry *e)
{
	atomic_fetch_sub_explicit(&c->nr_active, 1, memory_order_release);
	if (c->ops.on_evict)
		c->ops.on_evict(c->priv, e->priv);
	uint64_t w = atomic_load_explicit(&e->word, memory_order_relaxed);
	while (!cas_word(e, &w, w_with_state(w, ST_EVICTED)))
		;
	xcache_put(c, e);
}

/* One CLOCK eviction: two sweeps of the active map at most. */
static int evict_one(struct xcache *c)
{
	uint64_t budget = 2ULL * c->map_words + 1;

	for (uint64_t scanned = 0; scanned < budget; scanned++) {
		uint64_t word = atomic_fetch_add_explicit(&c->clock_hand, 1, memory_order_relaxed) %
				c->map_words;
		uint64_t bits = atomic_load_explicit(&c->active_map[word], memory_order_relaxed);

		for (; bits; bits &= bits - 1) {
			struct xcache_entry *e = node_at(c, word * MAP_BITS +
							    (unsigned)__builtin_ctzll(bits));
			uint64_t w = atomic_load_explicit(&e->word, memory_order_acquire);

			if (w_state(w) != ST_ACTIVE)
				continue;
			if (atomic_load_explicit(&e->referenced, memory_order_relaxed)) {
				atomic_store_explicit(&e->referenced, false, memory_order_relaxed);
				continue;
			}
			if (!cas_word(e, &w, w_with_state(w, ST_EVICTING)))
				continue;
			map_clear(c, e);
			finish_eviction(c, e);
			return 0;
		}
	}
	return -ENOENT;
}

int xcache_evict_coldest(struct xcache *c)
{
	return evict_one(c);
}

/* The same hand as evict_one, one sweep at most; a cold entry is lent to
 * `cold` (with a reference of its own) instead of being evicted. */
unsigned xcache_sweep_cold(struct xcache *c, unsigned max,
			   bool (*cold)(void *arg, struct xcache_entry *entry), void *arg)
{
	unsigned lent = 0;

	for (uint64_t scanned = 0; scanned < c->map_words && lent < max; scanned++) {
		uint64_t word = atomic_fetch_add_explicit(&c->clock_hand, 1, memory_order_relaxed) %
				c->map_words;
		uint64_t bits = atomic_load_explicit(&c->active_map[word], memory_order_relaxed);

		for (; bits && lent < max; bits &= bits - 1) {
			struct xcache_entry *e = node_at(c, word * MAP_BITS +
							    (unsigned)__builtin_ctzll(bits));
			uint64_t w = atomic_load_explicit(&e->word, memory_order_acquire);
			bool got = false;

			if (w_state(w) != ST_ACTIVE)
				continue;
			if (atomic_load_explicit(&e->referenced, memory_order_relaxed)) {
				atomic_store_explicit(&e->referenced, false, memory_order_relaxed);
				continue;
			}
			while (w_state(w) == ST_ACTIVE && !got)
				got = cas_word(e, &w, w + 1);
			if (!got)
				continue;
			lent++;
			if (!cold(arg, e))
				return lent;
		}
	}
	return lent;
}

/* An active slot for one more entry, evicting until there is one.  Slots
 * held by inserts still in flight can make a sweep come back empty; those
 * inserts finish without waiting on us, so yielding and retrying ends. */
static void reserve_active_slot(struct xcache *c)
{
	for (;;) {
		uint32_t n = atomic_load_explicit(&c->nr_active, memory_order_relaxed);

		if (n < c->capacity) {
			if (atomic_compare_exchange_weak_explicit(&c->nr_active, &n, n + 1,
								  memory_order_acq_rel,
								  memory_order_relaxed))
				return;
			continue;
		}
		if (evict_one(c) != 0)
			sched_yield();
	}
}

/* ---- alloc / insert / lookup / remove ----------------------------------- */

struct xcache_entry *xcache_alloc(struct xcache *c, const char *name, size_t len)
{
	if (len > c->name_max) {
		errno = ENAMETOOLONG;
		return NULL;
	}
	struct xcache_entry *e = pop_free(c);
	while (!e && reclaim(c))
		e = pop_free(c);
	if (!e) {
		errno = ENOSPC;
		return NULL;
	}
	xannotate_happens_after(e);
	if (atomic_load_explicit(&e->word, memory_order_acquire) != w_make(ST_FREE, 0, 0))
		die("free node is not free");
	memcpy(e->name, name, len);
	e->name[len] = '\0';
	e->name_len = (uint32_t)len;
	atomic_store_explicit(&e->word, w_make(ST_NEW, 0, 1), memory_order_relaxed);
	if (c->ops.on_init && c->ops.on_init(c->priv, e->priv) < 0) {
		release_node(c, e, false);
		errno = ECANCELED;
		return NULL;
	}
	return e;
}

/* INSERTING -> ACTIVE; holders of older references may get/put meanwhile. */
static void make_active(struct xcache *c, struct xcache_entry *e)
{
	uint64_t w = atomic_load_explicit(&e->word, memory_order_relaxed);

	map_set(c, e);
	while (!cas_word(e, &w, w_with_state(w, ST_ACTIVE)))
		;
}

enum claim { CLAIM_ACTIVE, CLAIM_REINSERTED, CLAIM_BUSY, CLAIM_GONE };

/* Takes a reference on `x`, found under our name by add_unique. */
static enum claim claim_existing(struct xcache_entry *x)
{
	uint64_t w = atomic_load_explicit(&x->word, memory_order_acquire);

	for (;;) {
		unsigned s = w_state(w);

		if (s == ST_ACTIVE) {
			if (cas_word(x, &w, w + 1))
				return CLAIM_ACTIVE;
		} else if (s == ST_EVICTED && !(w & F_UNLINKED)) {
			/* index + caller; INSERTING until on_reinsert has run */
			if (cas_word(x, &w, w_make(ST_INSERTING, w_flags(w), w_ref(w) + 2)))
				return CLAIM_REINSERTED;
		} else if (s == ST_INSERTING || s == ST_EVICTING || s == ST_FINALIZING) {
			return CLAIM_BUSY;
		} else {
			return CLAIM_GONE;	/* dying or removed: match skips it now */
		}
	}
}

struct xcache_entry *xcache_insert(struct xcache *c, struct xcache_entry *e)
{
	if (atomic_load_explicit(&e->word, memory_order_relaxed) != w_make(ST_NEW, 0, 1))
		die("xcache_insert: entry is not fresh from xcache_alloc");
	struct name_key key = { e->name, e->name_len };
	unsigned long hash = XXH3_64bits(e->name, e->name_len);

	/* A name already active takes no slot: look before reserving one, or
	 * a full cache evicts for nothing (the entry itself when it was the
	 * coldest: destroyed, and the caller handed a new one). An insert of
	 * the name racing ours is still settled by add_unique below. */
	struct xcache_entry *there = xcache_lookup(c, e->name, e->name_len);
	if (there) {
		release_node(c, e, true);
		return there;
	}
	reserve_active_slot(c);
	atomic_store_explicit(&e->referenced, true, memory_order_relaxed);
	/* Published before it becomes reachable; INSERTING keeps the clock
	 * hand and other inserts off it until it is indexed. */
	atomic_store_explicit(&e->word, w_make(ST_INSERTING, 0, 2), memory_order_release);
	for (;;) {
		read_lock();
		struct cds_lfht_node *n = cds_lfht_add_unique(c->index, hash, match_name, &key,
							      &e->index_node);
		if (n == &e->index_node) {
			read_unlock(c);
			make_active(c, e);
			return e;
		}
		struct xcache_entry *x = node_entry(n);
		enum claim r = claim_existing(x);
		read_unlock(c);
		switch (r) {
		case CLAIM_ACTIVE:
			atomic_fetch_sub_explicit(&c->nr_active, 1, memory_order_release);
			release_node(c, e, true);
			touch(x);
			return x;
		case CLAIM_REINSERTED:
			release_node(c, e, true);
			touch(x);
			if (c->ops.on_reinsert)
				c->ops.on_reinsert(c->priv, x->priv);
			make_active(c, x);
			return x;
		case CLAIM_BUSY:	/* a hook or another insert of this name runs */
			sched_yield();
			break;
		case CLAIM_GONE:
			break;
		}
	}
}

struct xcache_entry *xcache_lookup(struct xcache *c, const char *name, size_t len)
{
	struct name_key key = { name, len };
	struct xcache_entry *found = NULL;
	struct cds_lfht_iter it;
	unsigned long hash = XXH3_64bits(name, len);

	read_lock();
	cds_lfht_lookup(c->index, hash, match_name, &key, &it);
	/* More than one match only while an entry of this name is dying. */
	for (struct cds_lfht_node *n = cds_lfht_iter_get_node(&it); n;) {
		struct xcache_entry *x = node_entry(n);
		uint64_t w = atomic_load_explicit(&x->word, memory_order_acquire);

		while (w_state(w) == ST_ACTIVE && !found)
			if (cas_word(x, &w, w + 1))
				found = x;
		if (found)
			break;
		cds_lfht_next_duplicate(c->index, match_name, &key, &it);
		n = cds_lfht_iter_get_node(&it);
	}
	read_unlock(c);
	if (found)
		touch(found);
	return found;
}

int xcache_remove(struct xcache *c, struct xcache_entry *e)
{
	uint64_t w = atomic_load_explicit(&e->word, memory_order_acquire), nw;
	unsigned s;

	for (;;) {
		s = w_state(w);
		if ((w & F_UNLINKED) || s < ST_INSERTING || s == ST_DYING)
			return -ENOENT;
		if (s == ST_INSERTING || s == ST_EVICTING) {	/* wait for the hook */
			sched_yield();
			w = atomic_load_explicit(&e->word, memory_order_acquire);
			continue;
		}
		if (s == ST_ACTIVE) {
			if (w_ref(w) < 2)
				die("xcache_remove: caller holds no reference");
			nw = w_make(ST_EVICTED, w_flags(w) | F_UNLINKED, w_ref(w) - 1);
		} else {
			nw = w | F_UNLINKED;
		}
		if (cas_word(e, &w, nw))
			break;
	}
	if (s == ST_ACTIVE) {
		map_clear(c, e);
		atomic_fetch_sub_explicit(&c->nr_active, 1, memory_order_release);
	}
	unindex(c, e);
	return 0;
}

void *xcache_entry_priv(const struct xcache_entry *e)
{
	return e->priv;
}

const char *xcache_entry_name(const struct xcache_entry *e, size_t *len)
{
	if (len)
		*len = e->name_len;
	return e->name;
}

uint32_t xcache_capacity(const struct xcache *c)
{
	return c->capacity;
}

uint32_t xcache_nr_active(const struct xcache *c)
{
	return atomic_load_explicit(&c->nr_active, memory_order_relaxed);
}
