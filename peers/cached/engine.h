/*
 * The cache engine: everything cached does with objects, buckets and the
 * blocker, independent of how requests arrive (the peer glue in cached.c
 * turns xseg requests into cache_req and blocker I/O into cache_bio).
 *
 * Objects are xcache entries; each has its buckets (buckets.h) attached
 * lazily from the bucket pool, and its own xworkq: every job that reads or
 * changes an object's buckets runs on that queue, one at a time, so an
 * object needs no lock and objects never wait for each other. There is no
 * global lock on the hit path: lookup is RCU, the queue is wait-free, the
 * pool hands out slots from per-thread magazines.
 *
 * Write-back: writes land in buckets (DIRTY) and are answered; a flusher
 * thread writes dirty objects back when dirty data passes the high mark
 * (until the low mark), coalescing each run of dirty buckets into one
 * blocker write of at most max_request_size. Write-through: writes go to the
 * blocker and are answered when it has them, keeping the data VALID.
 * FLUSH (and a FUA write) is answered only after every write acknowledged
 * before it is on the blocker and the blocker's own FLUSH returned; a
 * request flagged XF_FLUSH waits for such a FLUSH of everything first.
 *
 * Ordering: an object never has two flushes in flight; a write-through
 * write waits while the buckets it covers are being flushed, so the blocker
 * never gets older data after newer. It also waits for the object's loads,
 * and while it is out no load starts and no write-back write lands on the
 * object: a load answered after the write would cache older bytes, and the
 * write copies its bytes into DIRTY buckets when it lands. A request that needs buckets another
 * request is LOADING waits for them (it is parked on the object and re-run
 * when the load ends). When the pool has no free bucket, reads and writes
 * go through to the blocker uncached (merging with cached data), so nothing
 * ever waits for buckets and a full cache runs at the blocker's speed.
 */
#ifndef CACHED_ENGINE_H
#define CACHED_ENGINE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <xtypes/xwork.h>
#include <xtypes/xwaitq.h>

#include "bucket_pool.h"
#include "buckets.h"

enum cache_policy { CACHE_WRITEBACK, CACHE_WRITETHROUGH };

/* --persist-sync: what survives a host crash as well as a process crash.
 * FLUSH: a FLUSH or FUA write is answered once the persist file is synced
 * (fdatasync); ALWAYS: every write-back write is synced before its reply;
 * NONE: the file is never synced on a request's behalf (a process crash
 * loses nothing, a host crash may lose what the kernel had not written). */
enum persist_sync_mode { PERSIST_SYNC_FLUSH, PERSIST_SYNC_ALWAYS, PERSIST_SYNC_NONE };

struct cache_config {
	uint64_t cache_size;        /* bytes in the bucket pool */
	/* The pool's memory, mapped and faulted in beforehand (cache_pool_bytes
	 * of it), taken over by a successful create; NULL: create maps it. Not
	 * with persist_path (the pool is the file's). */
	struct bucket_map *premapped;
	uint32_t max_objects;
	uint64_t object_size;
	uint32_t bucket_size;
	uint64_t max_request_size;  /* one blocker request, at most */
	enum cache_policy policy;
	unsigned dirty_high_pct;    /* flusher starts above this share of the pool */
	unsigned dirty_low_pct;     /* ... and stops below this */
	/* --persist (issue 22): NULL = off. The file holds the bucket pool
	 * (cache_size / bucket_size data slots) and max_objects object
	 * records; it records blocker_port and refuses another. */
	const char *persist_path;
	enum persist_sync_mode persist_sync;
	bool persist_discard;       /* start the file afresh, dropping its data */
	uint32_t blocker_port;
	/* Where the cache runs, stamped into the persist file (see
	 * persist_geometry.segment): its segment's instance, its port, and the
	 * port's given_up count now. */
	uint64_t segment_instance;
	uint32_t cache_port;
	uint64_t port_given_up;
	/* The dirty bytes a dead cache left marked on the port (fail closed):
	 * a persist file last used elsewhere is refused then (persist.h). */
	uint64_t port_left_dirty;
	/* --mirror-port (issue 23): every write-back write is answered only
	 * once a replica holds it too (mirror.c); mirror_fail_stop: fail
	 * writes while it cannot, instead of writing them through. */
	bool mirror;
	bool mirror_fail_stop;
	/* A primary's stale-replica marker (marker.c): the blocker object in
	 * which it says whether its replica holds every write it answered;
	 * its name goes to the replica with each mirror-reset, and a promote
	 * reads it. NULL: none (a primary without one is a replica's
	 * promote's unknown). */
	const char *mirror_marker;
	/* --replica: holds a primary's mirrored writes, never writes them
	 * back on its own, serves no reads, until promoted (replica.c). */
	bool replica;
};

/* The marker's name, at most (it rides in the reset's control text). */
#define MARKER_NAME_MAX 200u
/* What the blocker's marker says (or a promote read there). */
enum marker_state { MARKER_UNKNOWN, MARKER_DEGRADED, MARKER_MIRRORED, MARKER_PROMOTED };
const char *marker_state_name(int state);

/* ---- I/O to the blocker, provided by the glue ------------------------------ */

struct cache_bio;
typedef void (*cache_bio_done_fn)(struct cache_bio *bio);

/* One request to the blocker. The glue embeds it in its own structure. */
struct cache_bio {
	uint32_t op;               /* X_READ, X_WRITE, X_FLUSH, X_DELETE, X_INFO, X_COPY */
	uint32_t flags;
	uint64_t offset, size;
	void *data;                /* size bytes, from the glue */
	/* set by the glue when the blocker answered: */
	bool served;
	int error;
	uint64_t serviced;
	uint64_t info_size;        /* X_INFO */
	/* the engine's: */
	cache_bio_done_fn done;
	struct cache_object *owner;
	struct cache_req *req;     /* the client request it serves, if any */
	uint32_t first, count;     /* buckets it carries */
	uint64_t started_ns;
	bool mirror;               /* to the mirror port, not the blocker */
	struct cache_engine *engine;   /* a request of no object's (mirror.c's reset) */
	void *priv;                /* the sender's own (mirror.c: its mirror_op) */
	struct xwork work;
};

struct cache_backend {
	/* A blocker request for `name` with a buffer of `size` bytes (and, for
	 * X_COPY, the source name), or NULL when none is free: the engine then
	 * waits, and the glue calls cache_engine_bio_freed() when one is. */
	struct cache_bio *(*alloc)(void *ctx, uint32_t op, const char *name,
				   uint64_t offset, uint64_t size, const char *copy_src);
	/* Sends it; bio->done(bio) must then be called exactly once, on a
	 * thread registered with RCU. */
	void (*submit)(void *ctx, struct cache_bio *bio);
	void (*release)(void *ctx, struct cache_bio *bio);
	void *ctx;
	/* Optional: a blocker request that is the client's request itself, for
	 * exactly its op, offset and size, in its own buffer (bio->data ==
	 * req->data): no request of the glue's, no copy. NULL when the glue
	 * cannot; the engine then uses alloc. Submitted and released as any
	 * other, and always released before req->done(req). */
	struct cache_bio *(*lend)(void *ctx, struct cache_req *req);
};

/* ---- client requests ------------------------------------------------------- */

struct cache_object;
struct cache_req;
typedef void (*cache_req_done_fn)(struct cache_req *req);

struct cache_req {
	/* from the glue: */
	uint32_t op, flags;
	const char *name;
	uint64_t offset, size;
	void *data;                /* READ fills it, WRITE reads it */
	const char *copy_src;      /* X_COPY: the source object */
	const char *control;       /* X_CONTROL: the command text */
	cache_req_done_fn done;
	/* A replica's write: cache_engine_replica_tag() when the glue took it
	 * from its port (0: none); one taken before a reset is refused. */
	uint64_t replica_tag;
	/* set by the engine before done(): */
	bool served;
	int error;
	uint64_t serviced;
	uint64_t info_size;        /* X_INFO */
	/* the engine's (engine_private.h): */
	struct cache_engine *engine;
	struct cache_object *obj;
	uint32_t name_len;         /* strlen(name), once it passed name_ok */
	uint8_t state;             /* enum cache_req_state: where it is in its life */
	bool counted;              /* a read's hit or miss is counted (once) */
	bool counted_uncached;     /* its going past a full pool is counted (once) */
	int load_error;            /* a load it waited for failed: answer this */
	struct cache_req *next_parked;  /* its object's parked list */
	/* An uncached write in flight: on its object's list of them, and
	 * whether another one of its buckets was out beside it (through.c). */
	struct cache_req *next_through;
	bool raced;
	uint32_t released_seen;    /* an uncached read: its object's valid_released then */
	uint32_t fwd_op;           /* op of the forward in progress */
	bool on_replica;           /* a write the replica acknowledged */
	struct cache_req *next_held;   /* answers the stale-replica marker holds */
	uint8_t check_entry;       /* where it waits for the start's check (engine.c) */
	uint8_t check_policy;      /* ... a policy switch's policy */
	/* A switch to write-through (set_policy): the path may write past the
	 * cache once it is answered, so a primary's answer waits until its
	 * replica holds nothing older than the blocker (marker.c). */
	bool switching;
	struct xwork work;
};

/* A replica's op (never an xseg op): the bytes [offset, offset+size) of
 * object `name` are on the blocker; the replica drops what it holds of
 * them. The glue makes it of the control command "mirror-clean OFF LEN". */
#define CACHE_OP_MIRROR_CLEAN 0x100u

/* ---- statistics ------------------------------------------------------------- */

struct cache_stats {
	uint64_t hits, misses, partial_hits;
	uint64_t parallel_hits;                 /* of hits: served beside the object's queue */
	uint64_t read_bytes, write_bytes;       /* from clients */
	uint64_t blocker_read_bytes, blocker_write_bytes;
	uint64_t dirty_bytes, cached_bytes, free_bytes;
	uint64_t objects, evictions, flushes, flush_failures, flush_ns_total;
	uint64_t object_nodes, object_nodes_max;   /* index nodes held (also evicted objects'
	                                            * until written back), of how many */
	uint64_t flush_backoff_ns;              /* the flusher's pause now (0: none) */
	int flush_error;                        /* of the last failed flush write; 0 after a success */
	uint64_t clean_released_bytes;          /* given back by cold objects kept cached */
	uint64_t waits, uncached;               /* parked; served past a full pool */
	uint64_t node_refusals;                 /* failed: no index node, write-backs failing */
	int node_refusal;                       /* the error they get now (0: none) */
	uint64_t lent;                          /* client requests sent on to the blocker */
	uint64_t raced_writes;                  /* uncached writes of a bucket another was writing */
	uint64_t rereads;                       /* uncached reads sent again: a cached copy went */
	uint64_t failed;
	uint64_t blocker_in_flight;             /* requests out to the blocker now */
	uint64_t barriers_open;                 /* FLUSH, policy switch, COPY under way */
	uint64_t barrier_waiters;               /* objects those still wait to be clean */
	enum cache_policy policy;
	/* --persist */
	bool persist;
	uint64_t persist_dirty_bytes;           /* published slots x bucket size */
	uint64_t recoveries;                    /* 1: this start recovered dirty data */
	bool persist_left_here;                 /* the file was left in use by this port */
	uint64_t recovered_bytes;
	uint64_t persist_dropped;               /* torn, orphaned, bad records at recovery */
	uint64_t persist_discarded_bytes;       /* dropped by --persist-discard */
	uint64_t persist_syncs;
	int persist_sync_error;                 /* a sync of the file failed: write-through */
	int fence;                              /* 0: none; else cache_fence_name() */
	/* the persist marker on the blocker (a failed file's word): what it
	 * holds (0 none, 1 failed, 2 written-back), answers it held; what the
	 * start read (-1 not read, else the same), the recovered bytes it
	 * dropped (written back by the last run) */
	int persist_marker, persist_marker_found;
	uint64_t persist_marker_held, persist_marker_failures, persist_marker_dropped_bytes;
	const char *persist_marker_name;        /* the object's name ("" none) */
	/* client WRITEs, DELETEs and COPYs onto that name, refused (EPERM) */
	uint64_t persist_marker_refused;
	/* the start's check: reads of the marker that failed (retried), the
	 * last one's error (0: none or since read), how long it has waited */
	uint64_t persist_marker_read_failures;
	int persist_marker_read_error;
	uint64_t persist_check_ms;
	uint64_t persist_last_run;              /* the run whose word the start read */
	uint64_t persist_sync_avg_us;
	/* syncs the host-crash rules forced (--persist-sync flush|always):
	 * old versions piled up, spares short, a write-back's older version */
	uint64_t persist_forced_full, persist_forced_spares, persist_forced_writeback;
	/* --mirror-port */
	int mirror_state;                       /* enum mirror_state */
	uint64_t mirror_writes, mirrored_bytes, mirror_failures, mirror_cleans;
	uint64_t mirror_in_flight, mirror_rtt_avg_us, mirror_waits, mirror_lost;
	uint64_t degradations, degraded_ns_total, exposure_bytes, exposure_ns;
	int mirror_error;                       /* of the last failure */
	/* the stale-replica marker: a primary's (what the blocker holds, its
	 * writes, answers it held), a replica's (its name, promotes refused,
	 * what the last checked one read) */
	int marker_state;
	uint64_t marker_writes, marker_failures, marker_held;
	char marker_name[MARKER_NAME_MAX + 1];
	uint64_t promotes_refused;
	int promote_marker_said;
	/* --replica */
	bool replica;
	bool replica_unsure;   /* started with nothing trusted: waits for the primary's reset */
	uint64_t replica_writes, replica_cleans, replica_resets, replica_refused;
	uint64_t replica_primary_changes;   /* resets naming another marker than the last */
};

/* Where a primary (--mirror-port) stands with its replica. CONNECTING:
 * started, the replica not yet reset; DEGRADED: a mirror request failed.
 * In both, write-back writes go through (or fail, --mirror-fail stop),
 * every dirty byte is written back, and once nothing is dirty the
 * replica is told to drop what it holds ("mirror-reset"); its answer
 * makes the cache MIRRORED again. */
enum mirror_state { MIRROR_OFF, MIRROR_CONNECTING, MIRROR_MIRRORED, MIRROR_DEGRADED };
const char *cache_mirror_state_name(int state);

/* ---- the engine ------------------------------------------------------------------ */

struct cache_engine;

/* NULL with errno and a message in *why on a bad configuration. With
 * persist_path, opens the file and recovers it before returning: every
 * dirty bucket it held is DIRTY again, its object indexed and on the
 * dirty list. A refused file: errno EBUSY (in use by a live cached) or
 * EINVAL (not a persist file, another geometry or blocker port, more
 * objects than max_objects), *why persist's one line. */
struct cache_engine *cache_engine_create(const struct cache_config *cfg,
					 const struct cache_backend *backend,
					 const char **why);
/* Flushes nothing: call cache_engine_drain first. A persist file is
 * closed, marked clean only when nothing is dirty (else it is left for
 * the next start to recover). */
void cache_engine_destroy(struct cache_engine *e);
/* The glue stops, leaving an engine that holds dirty data (a replica's,
 * a stop that gave up), with nothing in flight: its persist file is
 * synced, closed and marked as kept at a stop (the next start knows no
 * crash left it; a replica then trusts it), unless it was not to be
 * trusted itself. The engine must not be used after. */
void cache_engine_keep(struct cache_engine *e);

/* Starts serving `req`; req->done(req) is called exactly once, possibly
 * before this returns. The calling thread must be an RCU reader. */
void cache_engine_submit(struct cache_engine *e, struct cache_req *req);

/* The glue took a write (from its port) and submits it before calling
 * cache_engine_write_end(e, token): a switch to write-through, a
 * mirror-reset or a promote begun meanwhile waits for it, as for a write
 * already in the engine (a replica's reset must drop what the primary
 * sent before it, however late a thread submits it). Calls may nest. */
void *cache_engine_write_begin(struct cache_engine *e);
void cache_engine_write_end(void *token);

/* The bytes of a bucket pool for cache_size (whole buckets). */
static inline uint64_t cache_pool_bytes(uint64_t cache_size, uint32_t bucket_size)
{
	return bucket_size ? cache_size / bucket_size * bucket_size : 0;
}

/* The glue freed a blocker request: wake what waited for one. */
void cache_engine_bio_freed(struct cache_engine *e);

/* Write-through from now on, nothing written back: returns once every
 * write that read write-back is dirty (a stop that then finds nothing
 * dirty may drop the engine: no later write is acknowledged from it). */
void cache_engine_stop_write_back(struct cache_engine *e);

/* The path went around the cache (unplugged, then plugged again): a clean
 * byte it holds may be older than the blocker's. Each object drops its
 * clean buckets before it serves again (its dirty ones are newer than the
 * blocker's and stay); a load out then is waited for and dropped too. */
void cache_engine_forget_clean(struct cache_engine *e);

/* Switches the write policy; to write-through first flushes every dirty
 * byte. done(req) when finished (req->op is ignored). */
void cache_engine_set_policy(struct cache_engine *e, enum cache_policy p,
			     struct cache_req *req);
/* A client's FLUSH of everything: every dirty byte written back and the
 * blocker's FLUSH forwarded; with a persist file synced on FLUSH
 * (PERSIST_SYNC_FLUSH), the file is synced instead (everything acknowledged
 * before is then durable on the persist device). */
void cache_engine_flush_all(struct cache_engine *e, struct cache_req *req);

/* --replica: drops everything it holds ("mirror-reset": the primary has
 * nothing dirty); done(req) when it is gone. `marker`: the primary's
 * stale-replica marker ("" none), kept (and in the persist file) for a
 * promote to read. `epoch` ({0}: none): the primary's run (its start
 * time) and the count of its resets; one older than the reset it took
 * last (an earlier count of the same run, or an earlier run: held on the
 * way, the primary gave it up) is refused (ESTALE): it would drop what
 * the primary mirrored since. */
struct cache_replica_epoch {
	uint64_t run;     /* 0: none */
	uint32_t count;
};
void cache_engine_replica_reset(struct cache_engine *e, struct cache_req *req,
				const char *marker, struct cache_replica_epoch epoch);
/* The marker name the last reset taken gave ("" before the first). */
void cache_engine_replica_marker(struct cache_engine *e, char name[MARKER_NAME_MAX + 1]);
/* "mirror-reset"'s arguments "[@RUN.COUNT] [NAME]" (hex): the epoch ({0}:
 * none) and the marker name ("": none; not checked here). False: malformed. */
bool cache_replica_reset_args(const char *args, struct cache_replica_epoch *epoch,
			      const char **marker);
/* --replica: a write's tag, read in the port's order (as it is taken,
 * before any later request of the port is): a write the primary sent
 * before a reset, still on its way when the reset answered (behind
 * another job of its object, waiting for a node), is refused (ESTALE)
 * when it arrives instead of outliving the reset. */
uint64_t cache_engine_replica_tag(struct cache_engine *e);
/* --replica: an ordinary cache from now on: writes everything it holds
 * back to the blocker (and its FLUSH); done(req) when that is done.
 * Holding dirty data, and unless `force`, only where the primary's
 * marker on the blocker says MIRRORED: else refused with ESTALE (the
 * primary answered writes this replica may not hold; stats say what the
 * marker said) and it stays a replica. */
void cache_engine_promote(struct cache_engine *e, struct cache_req *req, bool force);
/* The mirror port's owner died or changed (the glue watches it): the
 * primary degrades, and every mirror request out fails now with `error`. A request that owner had
 * taken off its queue but not yet marked as its own is in no queue and is
 * never failed back by the reap: without this its write would wait for
 * ever. A reply that still comes later is dropped. */
void cache_engine_mirror_lost(struct cache_engine *e, int error);
/* --replica and not promoted. */
bool cache_engine_is_replica(struct cache_engine *e);
/* The mirror state (enum mirror_state) when it changed since the last
 * call, else -1: for the glue's log (one caller, the maintenance thread). */
int cache_engine_mirror_changed(struct cache_engine *e);

/* Runs the flusher's and reclaimer's work once; the glue calls it from a
 * maintenance thread, and it returns how long to sleep (ns) before the next. */
uint64_t cache_engine_maintain(struct cache_engine *e);

/* True when nothing is dirty, loading, writing or in flight. */
bool cache_engine_idle(struct cache_engine *e);
/* Nothing dirty and nothing being written back: every write acknowledged
 * is on the blocker. */
bool cache_engine_clean(struct cache_engine *e);

void cache_engine_stats(struct cache_engine *e, struct cache_stats *st);

/* Dirty bytes (not yet on the blocker) by volume: an object named
 * VOLUME_<16 hex digits> (vlmcd's names) counts for VOLUME, any other for
 * its own name. At most `max` volumes, the largest first; the rest are
 * summed in *rest. Returns how many were filled. */
struct cache_volume_dirty {
	char name[256];            /* an object name fits (the segment allows 255 bytes) */
	uint64_t bytes;
};
unsigned cache_engine_dirty_by_volume(struct cache_engine *e, struct cache_volume_dirty *out,
				      unsigned max, uint64_t *rest);

/* One line for the log: what this start found in the persist file
 * (recovered, dropped, or discarded), or "persist: off". */
void cache_engine_persist_report(struct cache_engine *e, char *buf, size_t len);

/* The fence (cache_stats.fence): while not NONE, every request fails and
 * nothing is written to the blocker. CHECKING and PROMOTED: the mirror
 * marker's (a primary back with dirty data); PERSIST_*: the persist
 * marker's (a start after a run whose persist file failed a sync). */
enum cache_fence {
	CACHE_FENCE_NONE, CACHE_FENCE_CHECKING, CACHE_FENCE_PROMOTED, CACHE_FENCE_PERSIST_CHECKING,
	CACHE_FENCE_PERSIST_DROPPING, CACHE_FENCE_PERSIST_FAILED
};
/* Requests waiting for the start's persist check fail with `error`, and
 * any that come later too (a stop: cached.c's drain). */
void cache_engine_fail_waiting(struct cache_engine *e, int error);
/* The fence's state in words ("" none): checking, promoted (the mirror
 * marker's); persist-checking, persist-dropping, persist-failed. */
const char *cache_fence_name(int fence);
/* A persist marker state (cache_stats.persist_marker) in words. */
const char *cache_persist_marker_name(int state);

#endif
