/*
 * xcache.h - a bounded cache of named entries with reference counts.
 *
 * Capacity and nodes.  `capacity` is the most entries that are indexed
 * (ACTIVE) at once, exactly as given.  `nr_nodes` >= capacity + 1 nodes are
 * preallocated (0 means 2 * capacity): the spare ones carry entries that
 * were evicted while still referenced, entries being built, and freed nodes
 * waiting out an RCU grace period.  Each node gets private data once, from
 * on_node_init.  Nothing is allocated after xcache_create.
 *
 * Index.  A liburcu lock-free hash table (cds_lfht, fixed size, no resize)
 * keyed by XXH3_64bits of the name and compared on the full name.  Lookups
 * take no lock: an RCU read-side section and one CAS on the entry.
 *
 * RCU.  The memb flavour of liburcu, the default of <urcu.h>.  Every thread
 * that calls xcache_* must be a registered RCU reader: call
 * rcu_register_thread() (from <urcu.h>) once at thread start and
 * rcu_unregister_thread() before it exits.  xcache takes its read-side
 * locks itself.  xcache_alloc may wait for a grace period (synchronize_rcu),
 * so it must not be called from inside rcu_read_lock() or from a hook.
 *
 * References.  An inserted entry holds one reference for the index and one
 * for the caller; xcache_lookup and xcache_get add one, xcache_put drops
 * one.  A put that would go below zero aborts.
 *
 * Eviction: CLOCK.  Inserting a new name into a full cache evicts the
 * coldest entry.  A hit only sets the entry's `referenced` bit (a plain
 * store, skipped when already set), so hits never write shared state; an
 * evicting thread advances a shared clock hand over a bitmap of the active
 * nodes (one atomic add per 64 nodes), clears set bits and evicts the first
 * ACTIVE entry whose bit is clear.  The bitmap keeps a sweep cheap when the
 * cache holds far fewer entries than nodes.  An LRU list would need a lock or a
 * contended splice on every hit, which is what stopped the original from
 * scaling past four threads.
 *
 * Evicted set and reinsert.  An evicted entry that is still referenced stays
 * in the index, marked EVICTED: lookups miss it, but xcache_insert of the
 * same name revives it (on_reinsert) instead of building a new one.  When
 * the last reference to an evicted (or removed) entry goes, on_finalize
 * runs; the hook may take a new reference with xcache_get (e.g. to flush
 * dirty data first), and the entry is destroyed only if no reference was
 * taken by the time the hook returns.
 *
 * State machine.  Each entry has one 64-bit atomic word: state, two flags
 * and the reference count, changed only by CAS (or fetch_add for get), so a
 * state change and a reference change are one atomic step:
 *
 *   FREE -alloc-> NEW -insert-> INSERTING -indexed-> ACTIVE
 *   ACTIVE -evict-> EVICTING -on_evict done-> EVICTED
 *   EVICTED -insert-> INSERTING -on_reinsert done-> ACTIVE
 *   EVICTED, ref 1 -put-> FINALIZING (ref 0) -on_finalize, no ref taken->
 *   DYING -> unindexed, on_put, on_free -> FREE (after a grace period)
 *   FINALIZING -on_finalize took a ref-> EVICTED
 *
 * The original's finalize/reinsert race (a reinsert while on_finalize ran,
 * after which the finalizer freed a live entry) cannot happen: a reinsert
 * is the CAS EVICTED -> ACTIVE and the destruction is the CAS FINALIZING,
 * ref 0 -> DYING; only one of them can succeed, and an insert that meets
 * FINALIZING, EVICTING or INSERTING waits for the hook to finish, and
 * the clock hand takes only ACTIVE entries.  A reference
 * dropped to 0 again while on_finalize still runs sets REFINALIZE, and the
 * hook runs once more instead of the entry dying under it.  Remove sets
 * UNLINKED: the entry leaves the index at once and can never be revived.
 *
 * Hook order per entry (hooks of one entry never overlap, and each sees
 * what the previous one wrote): on_init, then any number of
 * (on_evict, [on_finalize...], on_reinsert), then on_evict or a remove,
 * one or more on_finalize, on_put, on_free.  An entry that is never inserted
 * (its put comes straight after alloc, or insert found the name present)
 * gets on_init and on_free only.  Hooks receive the cache's `priv` and the
 * node's private pointer; they run on the thread that caused them, without
 * any xcache lock, and must not call xcache_insert or xcache_alloc, nor
 * xcache_remove on their own entry from on_evict or on_reinsert (remove
 * waits for those hooks).  xcache_get, xcache_put and xcache_lookup are
 * fine anywhere.  Any hook may be NULL.
 */
#ifndef XTYPES_XCACHE_H
#define XTYPES_XCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct xcache;
struct xcache_entry;

struct xcache_ops {
	/* Once per node at create; returns the node's private pointer.  The
	 * entry handle stays valid until destroy (hooks get only the
	 * private pointer, so keep the handle there if a hook needs it). */
	void *(*on_node_init)(void *cache_priv, struct xcache_entry *node);
	/* Once per node at destroy. */
	void (*on_node_fini)(void *cache_priv, void *node_priv);
	/* A node was taken for a name (xcache_alloc); < 0 fails the alloc
	 * and the node goes back without on_free. */
	int (*on_init)(void *cache_priv, void *node_priv);
	/* The entry left the active set to make room (or evict_coldest). */
	void (*on_evict)(void *cache_priv, void *node_priv);
	/* An evicted entry was made active again by xcache_insert. */
	void (*on_reinsert)(void *cache_priv, void *node_priv);
	/* The last reference to an evicted or removed entry was dropped. */
	void (*on_finalize)(void *cache_priv, void *node_priv);
	/* The entry is gone from the cache for good. */
	void (*on_put)(void *cache_priv, void *node_priv);
	/* The node is back in the pool (last hook of an entry). */
	void (*on_free)(void *cache_priv, void *node_priv);
};

/*
 * Returns a cache holding at most `capacity` active entries with names of
 * at most `name_max` bytes, or NULL with errno EINVAL (capacity 0, nr_nodes
 * <= capacity, name_max 0) or ENOMEM.  `ops` is copied; it may be NULL.
 */
struct xcache *xcache_create(uint32_t capacity, uint32_t nr_nodes,
			     uint32_t name_max, const struct xcache_ops *ops,
			     void *priv);

/*
 * Frees the cache.  No other thread may use it.  Entries still indexed with
 * no reference but the index's get on_put and on_free, then every node gets
 * on_node_fini.  Returns -EBUSY, and frees nothing, if any entry is still
 * referenced by a caller or being built.  To run on_evict/on_finalize for
 * the remaining entries first, call xcache_evict_coldest until -ENOENT.
 */
int xcache_destroy(struct xcache *cache);

/*
 * Takes a free node for `name` (len bytes, not necessarily NUL-terminated)
 * and runs on_init.  The new entry holds one reference, the caller's; it is
 * not indexed yet.  NULL with errno ENAMETOOLONG, ENOSPC (every node in
 * use), or ECANCELED (on_init failed).
 */
struct xcache_entry *xcache_alloc(struct xcache *cache, const char *name,
				  size_t len);

/*
 * Indexes a new entry from xcache_alloc and returns the entry now active
 * under its name, with a reference for the caller:
 *   - `entry` itself (refs: index + caller), evicting the coldest entry
 *     first if the cache is full;
 *   - an active entry of that name (ref + 1); or
 *   - an evicted entry of that name, revived (on_reinsert; ref + 2).
 * In the last two cases `entry` is released (on_free) and must not be used.
 * Never fails.
 */
struct xcache_entry *xcache_insert(struct xcache *cache,
				   struct xcache_entry *entry);

/* The active entry named `name`, with a reference for the caller, or NULL. */
struct xcache_entry *xcache_lookup(struct xcache *cache, const char *name,
				   size_t len);

/* Adds a reference; the caller must hold one or be in on_finalize. */
void xcache_get(struct xcache *cache, struct xcache_entry *entry);

/* Drops a reference (see the state machine for what the last one does). */
void xcache_put(struct xcache *cache, struct xcache_entry *entry);

/*
 * Takes an active or evicted entry out of the index for good: lookups and
 * inserts stop finding it at once, no on_evict runs, and when the last
 * reference goes it is finalized and freed as usual.  The caller must hold
 * a reference (it keeps it).  0, or -ENOENT if it was already removed.
 */
int xcache_remove(struct xcache *cache, struct xcache_entry *entry);

/* Evicts the coldest active entry now (on_evict, ...): 0 or -ENOENT. */
int xcache_evict_coldest(struct xcache *cache);

/*
 * Moves the clock hand as an eviction does (a set `referenced` bit is
 * cleared and that entry passed over) but, instead of evicting, lends each
 * cold active entry to `cold` with a reference that is now the callee's
 * (drop it with xcache_put, now or later).  Stops after `max` entries, when
 * `cold` returns false, or after one sweep of the active set; returns how
 * many entries were lent.  For a user that can give back part of an entry
 * (a cache's clean pages) before it evicts whole ones.  `cold` runs on the
 * caller's thread with no xcache lock held.
 */
unsigned xcache_sweep_cold(struct xcache *cache, unsigned max,
			   bool (*cold)(void *arg, struct xcache_entry *entry), void *arg);

void *xcache_entry_priv(const struct xcache_entry *entry);
/* The entry's name, NUL-terminated; its length in *len if len != NULL. */
const char *xcache_entry_name(const struct xcache_entry *entry, size_t *len);

uint32_t xcache_capacity(const struct xcache *cache);
/* Active entries, counting inserts in progress (a snapshot). */
uint32_t xcache_nr_active(const struct xcache *cache);

#endif /* XTYPES_XCACHE_H */
