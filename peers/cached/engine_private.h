/*
 * What the files of the cache engine share, and nothing else includes:
 * the engine, an object, a barrier, a request's states, and the functions
 * one file of the engine offers the ones above it. engine.h is the
 * engine's face to the glue (cached.c); this is its inside.
 *
 * The files form a one-way stack (tools/check-layers), lowest first:
 *   persist.c  the persist file (--persist): slots, headers, recovery;
 *              knows nothing of the engine
 *   counters.c the growing figures, a block per counting thread
 *   request.c  a request's states (the transition table), answering it
 *   io.c       blocker requests: taking, lending, giving back; forwarding
 *              a whole request (INFO, FLUSH) to the blocker
 *   object.c   an object: its work queue, parked requests, its buckets'
 *              pool slots, shedding clean buckets, the dirty list
 *   flush.c    writing dirty buckets back, the flusher's tick, the
 *              back-off of a failing blocker, an object's waiters for
 *              "clean"
 *   barrier.c  FLUSH, policy switch, COPY's source: wait for objects to
 *              be clean
 *   marker.c   the stale-replica marker on the blocker: the primary's
 *              writes of it, answers held until it says degraded
 *   mirror.c   --mirror-port: a write-back write's buckets to the
 *              replica before its answer, cleans after write-back, the
 *              state with the replica (degraded, reset)
 *   replica.c  --replica: mirrored writes held, cleans, reset, promote
 *   through.c  uncached reads and writes: write-through, and past a
 *              full pool
 *   read.c     reads: hits, loads of missing buckets
 *   write.c    writes: write-back into buckets, write-through
 *   drop.c     DELETE and COPY onto an object: drop its data
 *   persist_marker.c  a failed persist file's word on the blocker, and
 *              the start's check of it (drops what it recovered when the
 *              last run wrote it all back: from the maintenance tick, on
 *              no queue, while the fence refuses every request)
 *   engine.c   the index, dispatch on an object's queue, submit, life
 *              cycle, maintenance, statistics
 * A lower file never calls a higher one; where it must go on with a
 * request (a parked one resumes, a blocker request is free again) it
 * calls e->resume, set by engine.c; flush.c tells mirror.c what it wrote
 * back through e->written_back.
 *
 * Every function named *_job (and every step: read_step, write_*,
 * drop_step) runs on an object's work queue (one at a time per object)
 * and may touch that object's buckets and fields freely. The one
 * exception, read_beside_queue, reads an object's buckets and fields as
 * a reader of its queue (xworkq_read_begin): only while no job of it
 * runs, and it changes nothing of the object. Everything else touches
 * only atomics, the dirty list (under its mutex) and xcache.
 */
#ifndef CACHED_ENGINE_PRIVATE_H
#define CACHED_ENGINE_PRIVATE_H

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <urcu/list.h>
#include <xtypes/xcache.h>
#include <xtypes/xworkq.h>

#include "xseg/xseg.h"
#include "engine.h"
#include "persist.h"

#define MAX_BIOS_IN_FLIGHT  512u

/*
 * The engine's growing figures (counters.c). Each thread that counts has
 * a block of its own per engine, written by that thread only: a relaxed
 * load and store, no locked instruction (on a hit, a locked add right
 * after the bucket's memcpy waited for the copy's stores to drain, and
 * threads serving hits bounced one shared line); read by summing the
 * blocks.
 */
struct engine_counts {
	_Atomic uint64_t hits, misses, partial_hits, read_bytes, write_bytes;
	_Atomic uint64_t parallel_hits;   /* of hits: beside the object's queue */
	_Atomic uint64_t blocker_read_bytes, blocker_write_bytes;
	_Atomic uint64_t evictions, clean_released, flushes, flush_failures, flush_ns_total;
	_Atomic uint64_t waits, uncached, failed, lent, node_refusals;
	_Atomic uint64_t raced_writes;   /* uncached writes of one bucket out at once */
	_Atomic uint64_t reread;         /* uncached reads read again: a cached copy went */
	/* Writes under way on this thread (write_enter/leave: a submit, a
	 * step), nested, and how often it had none left: a policy switch,
	 * a reset or a promote waits for those begun before it
	 * (engine_wait_writes). Not figures. */
	_Atomic uint64_t writes_depth, writes_left;
};

struct count_block {
	struct engine_counts c;
	const void *thread;                /* whose: the address of a thread-local */
	struct count_block *next;          /* the engine's list, freed with it */
};

/* The calling thread's block for engine `id` (the last one it used). */
struct count_cache {
	uint64_t id;
	struct engine_counts *c;
};
extern _Thread_local struct count_cache tl_counts;

struct cache_engine;
struct engine_counts *engine_counts_slow(struct cache_engine *e);
/* The sum of counter `field` (offsetof in struct engine_counts) over the blocks. */
uint64_t engine_count_sum(struct cache_engine *e, size_t field);
/* Returns once every write begun (write_enter) on any thread before the
 * call has left (write_leave). */
void engine_wait_writes(struct cache_engine *e);
void engine_counts_free(struct cache_engine *e);
uint64_t engine_new_id(void);

static inline void count_add(_Atomic uint64_t *c, uint64_t n)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
			      memory_order_relaxed);
}
#define FLUSH_OBJECTS_PER_TICK 32u
/* Cold objects asked per maintenance tick to give back their clean buckets. */
#define RECLAIM_OBJECTS_PER_TICK 8u
/* The share of the pool (%) that data written or read twice may keep when
 * data read once wants room (an SLRU's protected segment). */
#define PROTECTED_PCT 80u
/* Flush writes in flight at once. The rest of the blocker requests stay
 * for clients: with a full cache their writes and misses go through, and a
 * flusher that held 485 of 512 (sustained run) made them queue behind it. */
#define MAX_FLUSH_BIOS 64u
/* A blocker that fails write-back (a full disk) gets a pause before the
 * flusher tries again: 1 ms, doubled per round of failures up to 1 s, over
 * at the first success. Without it the flusher retried every tick, tens of
 * thousands of failures a second, a core for us and half one for filed. */
/* --persist: slots beyond the cache size kept for spares (out-of-place
 * overwrites hold one each, briefly); more than the threads that can
 * write at once. The file has cache_size / bucket_size + these slots, and
 * the normal claim path never takes them, so at a crash at least these
 * are not dirty and a recovered cache always has its spares. */
#define PERSIST_SPARE_SLOTS 32u
/* Overwritten versions kept at most, waiting for a sync (object.c's
 * retire). A sync is forced at RETIRE_SYNC_AT (one fdatasync per so many
 * overwrites of dirty buckets: at 224 a rewrite-heavy load ran at a tenth
 * of its rate on a disk); past it each writer adds one and then waits for
 * that sync, and a sync under way may put back what it took: room for
 * twice the mark and the threads. */
#define RETIRE_SYNC_AT 2048u
#define RETIRE_CAP 4352u
/* Counters of pending old versions by (pobj, bucket) hash: far more than
 * RETIRE_CAP, so a write-back seldom meets a count of another bucket's. */
#define OLD_VERSION_COUNTERS 65536u
/* A superseded version of bucket `bucket` of persist object `pobj`. */
struct old_version {
	uint32_t slot, pobj, bucket;
};
#define FLUSH_BACKOFF_MIN_NS 1000000ull
#define FLUSH_BACKOFF_MAX_NS 1000000000ull

struct cache_object {
	struct xcache_entry *entry;
	struct cache_engine *e;
	const char *name;
	struct object_buckets b;
	struct xworkq wq;
	struct cache_req *parked;          /* re-run when loads/flushes end */
	struct flush_waiter *waiters;      /* barriers waiting for "clean" */
	uint32_t loads, flushes, throughs; /* blocker I/O in flight */
	uint32_t through_writes;           /* of throughs: uncached writes */
	struct cache_req *through_out;     /* those writes, newest first */
	uint32_t writes_waiting;           /* uncached writes parked for loads/flushes */
	uint32_t forget_gen;               /* e->forget_gen its clean buckets are of */
	bool flush_again, deleting, on_dirty_list;
	bool drop_told;                    /* a DELETE or COPY's drop sent to the replica */
	/* A flush waits for uncached writes in flight to land: new ones wait
	 * behind it, or a steady stream of them would hold it off for ever. */
	bool flush_deferred;
	int flush_error;                   /* of the current flush cycle */
	/* Write-back passes begun (flush_job, nothing out): the last one is
	 * whole when it sent every bucket DIRTY at its start. Once such a pass
	 * is back without error, what was written before it began is on the
	 * blocker: the waiters that came before it are answered, even if the
	 * object is dirty again (else a steady writer held a FLUSH off). */
	uint64_t passes;
	bool pass_whole;
	int last_flush_error;              /* of the last one that ended */
	bool drop_flushed;                 /* a DELETE or COPY wrote it back first (drop.c) */
	_Atomic bool flush_queued;
	_Atomic bool flush_io_wait;        /* a flush waits for a free bio */
	struct xwork flush_io_work;
	_Atomic bool shed_queued;          /* give back its clean buckets */
	struct xwork shed_work;
	_Atomic uint64_t dirty_end;        /* highest byte written back-cached */
	struct xwork flush_work;
	struct cds_list_head dirty_link;   /* on e->dirty while dirty */
	uint32_t pobj;                     /* its persist object record, or PERSIST_NO_OBJECT */
	/* --mirror-port: mirror requests of this object in issue order; one
	 * is sent only when no earlier one overlaps it (mirror.c) */
	struct mirror_op *mirror_head, *mirror_tail;
	_Atomic bool mirror_io_wait;       /* one waits for a free request */
	struct xwork mirror_io_work, mirror_retry_work;
};

/* A request to the replica: a write-back write's buckets (req: the
 * client's, answered when the replica has them) or a clean (req NULL). */
struct mirror_op {
	struct cache_object *o;
	struct cache_req *req;
	struct cache_bio *bio;             /* NULL until a request is free */
	void *buf;                         /* a write's bytes until then */
	uint32_t first, count;             /* buckets */
	uint32_t flags;                    /* XF_MIRROR and the tag when made */
	bool sent;
	struct mirror_op *next;
	/* sent: on e->mirror_out until settled, by its reply or as lost */
	struct cds_list_head out_link;
	_Atomic bool settled;
	_Atomic int refs;                  /* lost: lost_job and the reply's job */
	struct xwork lost_work;
};

/* A FLUSH (or COPY's source flush) waiting for objects to become clean. */
struct barrier {
	_Atomic int pending;
	_Atomic int error;
	struct cache_engine *e;
	struct cache_req *req;
	void (*then)(struct barrier *b);   /* runs when pending reaches 0 */
};

struct flush_waiter {
	struct barrier *b;
	struct cache_object *obj;
	uint64_t after;                    /* o->passes when it came */
	struct flush_waiter *next;
	struct xwork work;
};

struct cache_engine {
	struct cache_config cfg;
	struct bucket_geometry geo;
	struct bucket_pool pool;
	struct bucket_totals totals;
	struct cache_backend be;
	struct xcache *index;
	uint32_t nr_nodes;
	_Atomic uint32_t nodes_used;
	_Atomic int policy;
	/* Bumped when what the cache holds clean may be older than the
	 * blocker (cache_engine_forget_clean); read on every hit. */
	_Atomic uint32_t forget_gen;
	uint32_t max_run;                  /* buckets per blocker request */
	/* Runs a request on its object again (engine.c's object_step): a
	 * parked one, or one that waited for a blocker request. */
	void (*resume)(struct cache_object *o, struct cache_req *req);
	/* Buckets [first, first+count) of o went from WRITING to VALID: on
	 * the blocker (flush.c -> mirror.c's mirror_written_back, or NULL). */
	void (*written_back)(struct cache_object *o, uint32_t first, uint32_t count);
	/* marker.c's hold on answers (a primary with its marker), or NULL:
	 * true when req's successful answer waits. */
	bool (*answer_gate)(struct cache_engine *e, struct cache_req *req, uint64_t serviced);

	pthread_mutex_t dirty_lock;        /* guards `dirty` */
	struct cds_list_head dirty;        /* oldest-dirtied first */
	bool flushing;                     /* between the high and low marks */

	struct xwaitq entry_waitq;         /* cond: a cache node is free */
	struct xwaitq io_waitq;            /* cond: a blocker request may be free */
	_Atomic uint32_t bios_in_flight;
	_Atomic bool io_starved;
	struct xwaitq flush_waitq;         /* cond: a flush write may start */
	_Atomic uint32_t flush_bios;       /* flush writes in flight */
	_Atomic int64_t shed_budget;       /* buckets cold objects may give back */
	_Atomic bool shed_protected;       /* ... not only those on probation */

	pthread_mutex_t backoff_lock;      /* guards backoff_step_ns, the stores below */
	uint64_t backoff_step_ns;          /* when the pause last grew */
	_Atomic uint64_t backoff_ns;       /* the pause now; 0: the blocker takes writes */
	_Atomic uint64_t retry_at_ns;      /* no background flush write before this */
	_Atomic int flush_error;           /* of the last failed flush write; 0 after a success */
	uint64_t failing_since_ns;         /* when flush_error last became one */
	/* 0, or the error a request gets that finds no free index node while
	 * write-backs fail (every node may be a dirty object's: none frees);
	 * cache_engine_maintain sets it, a write-back that succeeds clears it. */
	_Atomic int node_refusal;

	uint64_t id;                       /* unique in the process: names it in counters.c */
	_Atomic(struct count_block *) count_blocks;   /* STAT_ADD's, one per thread */
	_Atomic uint64_t barriers_open;    /* FLUSH, policy switch, COPY: not answered yet */
	_Atomic uint64_t barrier_waiters;  /* of those, objects still to be clean */

	/* --persist: the bucket pool's slots are the file's data slots; a
	 * DIRTY or WRITING bucket's slot has a published header. */
	bool persisting;
	bool close_clean;                  /* nothing was dirty at destroy */
	bool close_kept;                   /* dirty at destroy, on purpose: marked KEPT */
	struct persist persist;
	struct persist_recovery recovery;
	uint64_t discarded_bytes;
	_Atomic uint64_t published;        /* slots with a header */
	_Atomic uint64_t syncs, sync_ns_total;
	/* fdatasyncs the host-crash rules add (object.c): a list of old
	 * versions full, the pool short of spares, a write-back behind an
	 * old version of its bucket */
	_Atomic uint64_t forced_full, forced_spares, forced_writeback;
	/* With a sync mode (a host crash promised): the slots of overwritten
	 * versions, kept until their clear can be durable (object.c). */
	pthread_mutex_t settle_lock;       /* one sync-and-retire at a time */
	pthread_mutex_t retire_lock;       /* guards the two lists */
	struct old_version retired[RETIRE_CAP];     /* superseded, header not cleared */
	struct old_version cleared[RETIRE_CAP];     /* cleared, the clear not synced */
	uint32_t nr_retired, nr_cleared;
	/* a sync's own copies of the two, under settle_lock */
	struct old_version settling_retired[RETIRE_CAP], settling_cleared[RETIRE_CAP];
	/* Old versions pending (retired, cleared, or a sync's copies) by
	 * bucket hash: taken off only once their clear is durable. */
	_Atomic uint16_t old_counts[OLD_VERSION_COUNTERS];
	/* Versions of a lower seq were published before the last sync that
	 * began: durable once it ends, promised by the FLUSH it answers from
	 * its start. Only those are retired when overwritten; a later one was
	 * never promised a host crash (no FLUSH since) and goes at once, so a
	 * bucket rewritten between syncs keeps reusing its slot. */
	_Atomic uint64_t synced_below;
	/* Headers cleared by write-backs, and of them those a sync that
	 * succeeded made durable: while they differ, an uncached FUA write
	 * syncs before its answer (through.c), and so does a FLUSH that wrote
	 * back with --persist-sync none (barrier.c). */
	_Atomic uint64_t written_back_clears, clears_synced;

	/* --mirror-port (mirror.c) */
	_Atomic int mirror_state;          /* enum mirror_state */
	_Atomic bool reset_out;            /* a mirror-reset is out */
	_Atomic uint64_t next_reset_ns;    /* not before this */
	/* the count of the resets sent (from a random start) and this run's
	 * id: a reset's epoch. Each request carries the count's low 16 bits
	 * of its making (XF_TAG, mirror_op.flags): the replica refuses the
	 * older ones */
	_Atomic uint32_t mirror_tag;
	uint64_t mirror_run;               /* its start time (ns): later runs compare later */
	_Atomic uint64_t degraded_since_ns;
	_Atomic int mirror_error;
	int mirror_state_said;             /* the glue's log: the last state it said */
	pthread_mutex_t mirror_lock;       /* guards mirror_out */
	struct cds_list_head mirror_out;   /* mirror requests sent, not settled */
	struct {
		_Atomic uint64_t writes, bytes, failures, cleans, in_flight, rtt_ns_total, waits, lost;
		_Atomic uint64_t degradations, degraded_ns_total, exposure_bytes, exposure_ns;
		_Atomic uint64_t ops;   /* on objects' lists: queued or out, not settled */
	} mst;
	/* The stale-replica marker (marker.c). A primary's: the state it wants
	 * on the blocker, the one the blocker holds (MARKER_UNKNOWN while a
	 * write is out), answers held until it is DEGRADED. A replica's: the
	 * name its primary's last reset gave (also in its persist file). All
	 * under marker_lock. */
	pthread_mutex_t marker_lock;
	int marker_want, marker_written;
	_Atomic bool marker_says_mirrored;   /* marker_written == MARKER_MIRRORED */
	/* A primary that recovered dirty data: CHECKING until its marker is
	 * read, PROMOTED for good when the marker said its replica was
	 * promoted (marker.c: fence_tick). Nothing written to the blocker,
	 * nothing served meanwhile. */
	_Atomic int fence;
	_Atomic bool fence_read_out;
	_Atomic int fence_marker_said;
	bool marker_out;
	struct cache_req *marker_held;     /* linked by next_held */
	struct cache_req *switch_held;     /* switches to write-through, the same */
	char replica_marker[MARKER_NAME_MAX + 1];
	_Atomic uint64_t marker_writes, marker_failures, marker_held_total;
	_Atomic uint64_t promotes_refused;
	/* The persist marker (persist_marker.c): the state wanted on the
	 * blocker and the one it took (PMARK_*), answers held until it took
	 * one (under pmark_lock); the start's check: what it found (-1: not
	 * read), what it dropped, the fence after it (the mirror's). */
	pthread_mutex_t pmark_lock;
	bool pmark_on, pmark_out, pmark_writes_waited;
	int pmark_want;
	_Atomic int pmark_landed;
	struct cache_req *pmark_held;      /* linked by next_held */
	bool (*pmark_next_gate)(struct cache_engine *e, struct cache_req *req, uint64_t serviced);
	char pmark_name[40];
	_Atomic bool pmark_read_out;
	_Atomic int pmark_found;
	_Atomic uint64_t pmark_found_run;  /* the run it read for */
	int fence_after_persist;
	/* requests that came during the start's check, in order (engine.c) */
	struct cache_req *check_waiters, **check_waiters_tail;
	bool check_waiters_failed;
	_Atomic uint64_t pmark_writes_total, pmark_failures, pmark_held_total, pmark_dropped_bytes;
	_Atomic uint64_t pmark_refused;
	/* the start's check: failed reads, the last one's error, since when
	 * it reads (ns, 0 once ended), the next read's time and back-off */
	_Atomic uint64_t pmark_read_failures;
	_Atomic int pmark_read_error;
	_Atomic uint64_t pmark_check_since_ns;
	uint64_t pmark_next_read_ns, pmark_read_backoff_ns;
	_Atomic int promote_marker_said;   /* what the last checked promote read */
	/* --replica (replica.c) */
	_Atomic bool replica;
	/* nothing trusted recovered (no --persist, a new or discarded file,
	 * one neither clean nor kept): refuses mirrored writes, cleans and
	 * promote until the primary's next reset */
	_Atomic bool replica_unsure;
	_Atomic uint64_t reset_epoch;      /* resets begun: a write's tag is this + 1 */
	/* the primary's XF_TAG in its last reset (0x10000 | tag; 0: no reset
	 * in this run): its mirror requests of another tag are refused */
	_Atomic uint32_t primary_tag;
	struct cache_replica_epoch primary_epoch;   /* of the last reset taken (reset_lock) */
	pthread_mutex_t reset_lock;
	struct {
		_Atomic uint64_t writes, cleans, resets, refused;
		/* resets naming another marker than the last one's */
		_Atomic uint64_t primary_changes;
	} rst;
};

/* ---- a request's states (request.c) ----------------------------------------
 *
 * Where a client request is in its life; req->state, changed only through
 * req_set(), which aborts on a transition the table does not list (a
 * request in an impossible state would be answered twice, or never).
 *
 *   NEW          handed to the engine (submit, flush_all, set_policy)
 *   WAIT_NODE    waits for a free index node (entry_waitq)
 *   QUEUED       on its object's work queue, to be stepped
 *   RUNNING      its step runs on the object's queue (object_step)
 *   PARKED       on its object's parked list until a load, flush, uncached
 *                request or drop of the object ends; then RUNNING again
 *                (or DONE: a read whose own request was the load)
 *   PARKED_WRITE a write-through write parked behind the object's flushes
 *                or loads, counted in o->writes_waiting (no load starts
 *                meanwhile, or a stream of reads would hold it off)
 *   WAIT_IO      waits for a free blocker request (io_waitq); then QUEUED
 *                again, or FORWARDED
 *   THROUGH      its uncached read or write is at the blocker
 *   DROPPING     DELETE or COPY: the object's data dropped, the request
 *                at the blocker
 *   BARRIER      FLUSH, policy switch or COPY waits for objects to be clean
 *   FORWARDED    INFO, or FLUSH after its barrier, at the blocker
 *   MIRROR       a write-back write in its buckets, its copy on the way
 *                to the replica (--mirror-port); DONE when the replica
 *                has it, BARRIER when it failed (answered once the
 *                object is clean on the blocker)
 *   DONE         answered (req->done called); the glue may reuse it
 */
enum cache_req_state {
	REQ_NEW,
	REQ_WAIT_NODE,
	REQ_QUEUED,
	REQ_RUNNING,
	REQ_PARKED,
	REQ_PARKED_WRITE,
	REQ_WAIT_IO,
	REQ_THROUGH,
	REQ_DROPPING,
	REQ_BARRIER,
	REQ_FORWARDED,
	REQ_MIRROR,
	REQ_DONE,
	REQ_STATES
};

/* req_next[from]: bit `to` set where from -> to is legal. */
extern const uint32_t req_next[REQ_STATES];

const char *req_state_name(enum cache_req_state s);
bool req_transition_ok(enum cache_req_state from, enum cache_req_state to);
/* Prints the request and the transition, and aborts. */
_Noreturn void req_bad_transition(const struct cache_req *req, enum cache_req_state to);

/* Moves req to state `to`: one table lookup, no atomics. Called before
 * the request is handed on (to a queue, a blocker request or done()), as
 * from then on another thread may own it. */
static inline void req_set(struct cache_req *req, enum cache_req_state to)
{
	if ((unsigned)req->state >= REQ_STATES || !((req_next[req->state] >> to) & 1u))
		req_bad_transition(req, to);
	/* a store the tests may watch from their own thread */
	__atomic_store_n(&req->state, (uint8_t)to, __ATOMIC_RELEASE);
}

/* Resets the engine's fields of a request it is handed: NEW. */
void req_init(struct cache_engine *e, struct cache_req *req);
/* The start's persist check is under way: req waits for it (true), to go
 * in again at `entry` (CHECK_ENTRY_*; `policy` for a switch). Else
 * *fence_now is the fence read then (the caller's earlier reading may be
 * stale: NONE, the check just ended, means go on). */
enum { CHECK_ENTRY_SUBMIT, CHECK_ENTRY_FLUSH_ALL, CHECK_ENTRY_POLICY };
bool check_wait(struct cache_engine *e, struct cache_req *req, int entry, int policy,
		int *fence_now);
/* The waiters, off the list, in their order (linked by next_held). */
struct cache_req *check_waiters_take(struct cache_engine *e);
/* Answers req (-> DONE) and drops its object reference; a successful
 * answer the engine's answer_gate holds is answered later (answer()). */
void finish(struct cache_engine *e, struct cache_req *req, bool served, int error,
	    uint64_t serviced);
/* finish() past the gate. */
void answer(struct cache_engine *e, struct cache_req *req, bool served, int error,
	    uint64_t serviced);

static inline struct engine_counts *engine_counts(struct cache_engine *e)
{
	if (__builtin_expect(tl_counts.id == e->id, 1))
		return tl_counts.c;
	return engine_counts_slow(e);
}
#define STAT_ADD(e, field, n) count_add(&engine_counts(e)->field, (n))
/* req goes past a full pool: counted once, though its step may run again
 * (after a wait for a blocker request, a reread). */
static inline void count_uncached(struct cache_engine *e, struct cache_req *req)
{
	if (!req->counted_uncached) {
		req->counted_uncached = true;
		STAT_ADD(e, uncached, 1);
	}
}

/*
 * A write reads the policy (or whether the engine is a replica) and marks
 * its object dirty only after copying its bytes: a switch to
 * write-through, a mirror-reset or a promote that lists the dirty objects
 * meanwhile would miss it. Between write_enter (its count stored before
 * what it reads) and write_leave (after the object is marked) such a
 * switch, which stores first and then calls engine_wait_writes, waits for
 * it. Only the calling thread writes its counts: a load and a store, no
 * locked instruction. The store-then-read order on both sides is paid by
 * the rare waiter alone where membarrier(2) serves (engine_asym_fence:
 * the writer's order is then the compiler's only, a write pays nothing);
 * else by a full fence on each write.
 */
extern bool engine_asym_fence;
/* Registers for membarrier once per process (cache_engine_create). */
void engine_fence_init(void);

/* A full barrier; gcc refuses fences under ThreadSanitizer, where a
 * seq_cst RMW of one word stands in (as xseg_full_fence). */
extern _Atomic uint32_t engine_fence_word;
static inline void engine_full_fence(void)
{
#ifdef __SANITIZE_THREAD__
	atomic_fetch_add(&engine_fence_word, 0);
#else
	atomic_thread_fence(memory_order_seq_cst);
#endif
}

static inline struct engine_counts *write_enter(struct cache_engine *e)
{
	struct engine_counts *c = engine_counts(e);
	atomic_store_explicit(&c->writes_depth,
			      atomic_load_explicit(&c->writes_depth, memory_order_relaxed) + 1,
			      memory_order_relaxed);
	if (engine_asym_fence)
		atomic_signal_fence(memory_order_seq_cst);
	else
		engine_full_fence();
	return c;
}

static inline void write_leave(struct engine_counts *c)
{
	uint64_t d = atomic_load_explicit(&c->writes_depth, memory_order_relaxed) - 1;
	if (!d)
		atomic_store_explicit(&c->writes_left,
				      atomic_load_explicit(&c->writes_left, memory_order_relaxed) + 1,
				      memory_order_release);
	atomic_store_explicit(&c->writes_depth, d, memory_order_release);
}
#define STAT_SUM(e, field) engine_count_sum((e), offsetof(struct engine_counts, field))
/* the same, for a counter outside e->st (mst, rst) */
#define COUNT_ADD(e, field, n) atomic_fetch_add_explicit(&(e)->field, (n), memory_order_relaxed)

static inline uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void obj_get(struct cache_object *o) { xcache_get(o->e->index, o->entry); }
static inline void obj_put(struct cache_object *o) { xcache_put(o->e->index, o->entry); }

/* What the fence refuses for (engine.c, barrier.c): CHECKING and
 * PROMOTED are the mirror marker's (marker.c), the others the persist
 * marker's (persist_marker.c). */
enum {
	FENCE_NONE = CACHE_FENCE_NONE, FENCE_CHECKING = CACHE_FENCE_CHECKING,
	FENCE_PROMOTED = CACHE_FENCE_PROMOTED, FENCE_PERSIST_CHECKING = CACHE_FENCE_PERSIST_CHECKING,
	FENCE_PERSIST_DROPPING = CACHE_FENCE_PERSIST_DROPPING,
	FENCE_PERSIST_FAILED = CACHE_FENCE_PERSIST_FAILED,
};

/* The error a request refused by the fence fails with. */
static inline int fence_error(int fence)
{
	return fence == FENCE_PROMOTED ? ESTALE : fence == FENCE_PERSIST_FAILED ? EIO : EAGAIN;
}

/* The persist file failed a sync: write-through from then on (engine_sync). */
static inline bool persist_failed(struct cache_engine *e)
{
	return e->persisting && atomic_load_explicit(&e->persist.sync_error, memory_order_relaxed);
}

static inline void obj_enqueue(struct cache_object *o, struct xwork *w, xwork_fn fn, void *arg)
{
	xwork_init(w, fn, arg);
	xworkq_enqueue(&o->wq, w);
}

/* Copies the bytes of [offset, offset+size) that bucket i holds between the
 * bucket and buf (which starts at `offset`). */
static inline void bucket_copy(struct cache_object *o, uint32_t i, uint64_t offset,
			       uint64_t size, void *buf, bool to_bucket)
{
	uint64_t bs = o->e->geo.bucket_size, start = (uint64_t)i * bs;
	uint64_t from = offset > start ? offset : start;
	uint64_t end = offset + size < start + bs ? offset + size : start + bs;
	unsigned char *b = bucket_pool_data(&o->e->pool, o->b.slot[i]) + (from - start);
	unsigned char *p = (unsigned char *)buf + (from - offset);
	if (to_bucket)
		memcpy(b, p, end - from);
	else
		memcpy(p, b, end - from);
}

static inline bool object_clean(const struct cache_object *o)
{
	return o->b.count[BUCKET_DIRTY] == 0 && o->b.count[BUCKET_WRITING] == 0;
}

/* The flusher pauses: the blocker failed writes (flush.c). */
static inline bool backing_off(struct cache_engine *e, uint64_t now)
{
	return atomic_load(&e->retry_at_ns) > now;
}

/* ---- io.c: blocker requests ----------------------------------------------- */

struct cache_bio *bio_alloc(struct cache_engine *e, uint32_t op, const char *name,
			    uint64_t offset, uint64_t size, const char *copy_src);
struct cache_bio *bio_for_req(struct cache_engine *e, struct cache_req *req,
			      const char *name);
void bio_release(struct cache_engine *e, struct cache_bio *bio);
bool io_cond(void *arg);
/* Sends `op` for req's target to the blocker (-> FORWARDED, or WAIT_IO
 * until a blocker request is free); answers req when the blocker does. */
void forward(struct cache_engine *e, struct cache_req *req, uint32_t op);

/* ---- object.c: an object, its queue and buckets ------------------------------ */

void park(struct cache_object *o, struct cache_req *req, enum cache_req_state why);
void unpark(struct cache_object *o, struct cache_req *req);
void run_parked(struct cache_object *o);
void wait_for_io(struct cache_object *o, struct cache_req *req);
void bio_send(struct cache_object *o, struct cache_bio *bio, xwork_fn job);
bool claim_range(struct cache_object *o, uint32_t first, uint32_t last);
void release_bucket(struct cache_object *o, uint32_t i);
void release_clean(struct cache_object *o);
void drain_magazine(struct cache_engine *e);
void shed_cold_objects(struct cache_engine *e, uint64_t total, uint64_t claimed);
void mark_dirty(struct cache_object *o, uint64_t end);
/* Object `name` where the cache holds anything of it not yet on the
 * blocker: the active one in the index, or one evicted while dirty (index
 * lookups miss it; it stays on the dirty list until clean). With a
 * reference (obj_put), or NULL. A FLUSH of one object, COPY's source, INFO
 * and a replica's clean must find the evicted ones too. */
struct cache_object *object_find(struct cache_engine *e, const char *name);
void mark_clean(struct cache_object *o);
/* --persist: the object has a persist record to publish under (true
 * without --persist); false: the record table is full, go uncached. */
bool persist_hold(struct cache_object *o);
/* Puts the bytes of [offset, offset+size) that bucket i (claimed) holds
 * from buf into it. With --persist: a DIRTY or WRITING bucket (published)
 * gets them out of place (a spare slot with the old bytes and the new,
 * published, then the old slot cleared and given back), any other in
 * place, then published. The caller makes the bucket DIRTY. */
void store_bucket(struct cache_object *o, uint32_t i, uint64_t offset, uint64_t size,
		  const void *buf);
/* A write-back write of [offset, offset+size) from buf into buckets
 * [first, last] (claimed, loaded where partly covered): stored, DIRTY, the
 * object on the dirty list, counted. */
void store_dirty(struct cache_object *o, uint32_t first, uint32_t last, uint64_t offset,
		 uint64_t size, const void *buf);
/* Bucket i's bytes are no longer dirty (written back, dropped): its
 * header is cleared. */
void unpublish(struct cache_object *o, uint32_t i);
/* persist_sync, timed: 0 or -errno. */
int engine_sync(struct cache_engine *e);

/* ---- flush.c: write-back ------------------------------------------------------ */

void queue_flush(struct cache_object *o);
bool flush_budget_cond(void *arg);
void barrier_arrive(struct barrier *b, int error);
void waiter_job(struct xwork *work, void *arg);
void flush_oldest(struct cache_engine *e);

/* ---- barrier.c: FLUSH, policy switch, COPY's source ---------------------------- */

/* req waits (-> BARRIER) until object `name`, if cached, is clean, and
 * then(b) goes on with it (b->req; then frees b). */
void barrier_one(struct cache_engine *e, struct cache_req *req, const char *name,
		 void (*then)(struct barrier *));
void flush_one(struct cache_engine *e, struct cache_req *req);

/* The objects on the dirty list now, each referenced (obj_put each, free
 * the array); *n of them. NULL with *n 0 when none (or no memory: ENOMEM). */
struct cache_object **dirty_snapshot(struct cache_engine *e, size_t *n);
/* A barrier for req (-> BARRIER), answered by then() once every object
 * added is clean and the creator's own arrival (barrier_arrive) is in;
 * NULL without memory. */
struct barrier *barrier_new(struct cache_engine *e, struct cache_req *req,
			    void (*then)(struct barrier *));
/* Every dirty byte to the blocker, then its FLUSH, then req answered. */
void flush_all_to_blocker(struct cache_engine *e, struct cache_req *req);

/* True where a write-back write must go through (or fail) instead: a
 * mirror is configured and not MIRRORED (mirror.c keeps the state). */
static inline bool mirror_down(const struct cache_engine *e)
{
	return e->cfg.mirror &&
	       atomic_load_explicit(&e->mirror_state, memory_order_acquire) != MIRROR_MIRRORED;
}

/* ---- marker.c: the stale-replica marker ------------------------------------------- */

#define MARKER_SIZE 64u   /* the marker object's bytes */
/* The primary wants the marker to say `state` (MARKER_DEGRADED, or
 * MARKER_MIRRORED via marker_mirrored) and writes it when it can. */
void marker_want(struct cache_engine *e, int state);
/* A reset was answered: held answers go, the marker is to say MIRRORED. */
void marker_mirrored(struct cache_engine *e);
/* The maintenance tick: a marker write that failed or found no request. */
void marker_tick(struct cache_engine *e);
/* A mirror request settled: held switches to write-through may go. */
void marker_switches(struct cache_engine *e);
/* At create: the lock, and the gate where the primary has a marker. */
void marker_init(struct cache_engine *e);
/* What a marker's bytes say: MARKER_MIRRORED, _DEGRADED, _PROMOTED or
 * _UNKNOWN. */
int marker_says(const char *data, uint64_t len);
/* The marker's text saying `state`: MARKER_SIZE bytes at d. */
void marker_text(char *d, int state);
/* The maintenance tick while the fence is CHECKING: reads the marker. */
void fence_tick(struct cache_engine *e);

/* ---- persist_marker.c: a failed persist file's word on the blocker ------------------ */

enum { PMARK_NONE, PMARK_FAILED, PMARK_WRITTEN_BACK };
const char *pmark_state_name(int state);
/* At create, after recovery: the marker's name, the answer gate, the
 * start's check where dirty data was recovered (else the fence is
 * fence_after, the mirror marker's). */
void pmark_init(struct cache_engine *e, int fence_after);
/* The maintenance tick: the start's check, the marker's writes. True while
 * the check keeps the engine from everything else. */
bool pmark_tick(struct cache_engine *e);
/* A client request that writes, deletes or copies onto the marker's name:
 * true (counted), to be refused EPERM. */
bool pmark_refuses(struct cache_engine *e, const struct cache_req *req);
/* The file failed a sync and the blocker holds `written-back`: what the
 * file holds is older than the blocker's and no longer counts (no sync of
 * it for a FLUSH or FUA write: the blocker's FLUSH serves them). */
static inline bool persist_behind_blocker(struct cache_engine *e)
{
	return persist_failed(e) && atomic_load(&e->pmark_landed) == PMARK_WRITTEN_BACK;
}
/* --persist, and the file still counts. */
static inline bool persist_counts(struct cache_engine *e)
{
	return e->persisting && !persist_behind_blocker(e);
}

/* ---- mirror.c: --mirror-port ------------------------------------------------------- */


/* A write-back write stored in buckets [first, last] (RUNNING): sent to
 * the replica, answered when it has them (-> MIRROR). */
void mirror_write(struct cache_object *o, struct cache_req *req, uint32_t first, uint32_t last);
/* DELETE or COPY dropped o's data: the replica drops it too. */
void mirror_dropped(struct cache_object *o);
/* The maintenance tick: a degraded primary with nothing dirty resets the
 * replica (at most one a second). */
void mirror_tick(struct cache_engine *e);
void mirror_written_back(struct cache_object *o, uint32_t first, uint32_t count);

/* ---- replica.c: --replica ----------------------------------------------------------- */

/* --persist: a header cleared by a write-back may be in the page cache
 * only, and the header it cleared on the device (a sync, or the kernel's
 * own write-back, put it there): a host crash would replay it. */
static inline bool clears_pending(struct cache_engine *e)
{
	return atomic_load(&e->written_back_clears) != atomic_load(&e->clears_synced);
}

static inline bool is_replica(const struct cache_engine *e)
{
	return atomic_load_explicit(&e->replica, memory_order_relaxed);
}
/* A mirrored write (RUNNING) of whole buckets [first, last]: held DIRTY. */
void replica_write(struct cache_object *o, struct cache_req *req, const struct bucket_span *sp);
/* CACHE_OP_MIRROR_CLEAN (RUNNING): what it names is dropped. */
void replica_clean_step(struct cache_object *o, struct cache_req *req);

/* ---- through.c, read.c, write.c, drop.c: the steps of a request on its object -- */

void go_through(struct cache_object *o, struct cache_req *req);
bool load_runs(struct cache_object *o, uint32_t first, uint32_t last, bool *no_io,
	       struct cache_req *reader);
void read_step(struct cache_object *o, struct cache_req *req, const struct bucket_span *sp);
bool read_beside_queue(struct cache_object *o, struct cache_req *req, const struct bucket_span *sp);
void write_back(struct cache_object *o, struct cache_req *req, const struct bucket_span *sp);
void write_through(struct cache_object *o, struct cache_req *req, const struct bucket_span *sp);
void drop_step(struct cache_object *o, struct cache_req *req);
/* Every cached byte of o dropped, dirty ones too (their slots cleared). */
void drop_buckets(struct cache_object *o);

#endif
