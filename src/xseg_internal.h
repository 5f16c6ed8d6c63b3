/*
 * libxseg internals: the segment's shared layout and the process-local
 * handle. Nothing outside src/ includes this file.
 *
 * Layout of a segment (every offset is from the segment base and recorded
 * in the header, so no process depends on where another mapped it):
 *
 *   header | ports[nr_ports] | requests[nr_requests] | free ring |
 *   per port: request ring, reply ring | heap metadata | heap
 */
#ifndef XSEG_INTERNAL_H
#define XSEG_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "xseg/version.h"
#include "xseg/xseg.h"

#define XSEG_MAGIC           "XSEGSHM"
#define XSEG_LAYOUT_VERSION  ((uint32_t)XSEG_VERSION_LAYOUT)   /* include/xseg/version.h */
#define XSEG_CACHELINE       64u

/* A full barrier. ThreadSanitizer does not model fences (gcc refuses them
 * under -fsanitize=thread); there a seq_cst RMW of one word (wait.c)
 * stands in for it. */
extern _Atomic uint32_t xseg_fence_word;
static inline void xseg_full_fence(void)
{
#ifdef __SANITIZE_THREAD__
	atomic_fetch_add(&xseg_fence_word, 0);
#else
	atomic_thread_fence(memory_order_seq_cst);
#endif
}

/* ---- lock-free bounded MPMC ring of request indexes (ring.c) -------------
 * Each cell is one word, a sequence number that says whose turn it is and
 * the value: a producer fills and a consumer empties a cell with one CAS,
 * then moves tail or head on (or whoever comes next does), so a peer killed
 * anywhere leaves the ring usable and nobody ever holds a lock. Values are
 * below 2^24 (request indexes: XSEG_MAX_REQUESTS). Capacity is a power of
 * two >= nr_requests, and every request is in at most one ring at a time,
 * so a push never finds a ring full.
 */
struct xseg_ring_cell {
	_Atomic uint64_t word;   /* sequence << 24 | value */
};

struct xseg_ring {
	_Alignas(XSEG_CACHELINE) _Atomic uint64_t head;   /* next to pop */
	_Alignas(XSEG_CACHELINE) _Atomic uint64_t tail;   /* next to push */
	_Alignas(XSEG_CACHELINE) uint32_t capacity;
	uint32_t mask;
	struct xseg_ring_cell cells[];
};

size_t xseg_ring_bytes(uint32_t capacity);
void xseg_ring_init(struct xseg_ring *r, uint32_t capacity);
bool xseg_ring_push(struct xseg_ring *r, uint32_t value);
bool xseg_ring_pop(struct xseg_ring *r, uint32_t *value);
/* Positions as the cells count them (40 bits): a value pushed at position
 * p is popped at p. push_tagged stores tag_base | p in *tag before it
 * fills the cell at p (request.c: a push's tag says where it went). */
#define XSEG_RING_POS_MASK ((1ull << 40) - 1)
bool xseg_ring_push_tagged(struct xseg_ring *r, uint32_t value, uint64_t *tag,
			   uint64_t tag_base, uint64_t *at);
bool xseg_ring_pop_at(struct xseg_ring *r, uint32_t *value, uint64_t *at);
/* Whether the cell of position pos (40 bits) holds value pushed at pos,
 * not yet popped. */
bool xseg_ring_filled_at(struct xseg_ring *r, uint64_t pos, uint32_t value);
/* Whether a cell holds value (exact only while nobody pushes or pops it). */
bool xseg_ring_holds(struct xseg_ring *r, uint32_t value);
uint32_t xseg_ring_count(struct xseg_ring *r);
/* Sets queued[v] for every value v that fills a cell of the ring (v below
 * n), whatever head and tail say. Exact only while nobody pops; a value
 * pushed meanwhile may or may not be seen. */
void xseg_ring_mark_queued(struct xseg_ring *r, uint8_t *queued, uint32_t n);
/* Also true for a value whose producer died before it moved tail on. */
bool xseg_ring_nonempty(struct xseg_ring *r);

/* ---- buddy heap (heap.c) -------------------------------------------------
 * Request buffers come from a buddy allocator: freed blocks merge with
 * their buddies, so external fragmentation is bounded and a freed heap
 * returns to one block. It is guarded by a robust process-shared mutex: a
 * holder that dies is detected by the next locker (EOWNERDEAD).
 */
#define XSEG_HEAP_MIN_SHIFT  8u        /* smallest block: 256 bytes */
#define XSEG_HEAP_MAX_ORDERS 40u

struct xseg_heap_meta {
	pthread_mutex_t lock;
	uint64_t size;                    /* power of two */
	uint32_t orders;                  /* size = 1 << (MIN_SHIFT + orders-1) */
	uint32_t pad;
	uint64_t used;                    /* bytes in allocated blocks */
	uint64_t allocs;                  /* blocks allocated */
	uint64_t recovered;               /* times a dead holder was detected */
	/* The block an allocation or a free under the lock is handing over
	 * (~0: none) and, as an offset from this struct, the word that says
	 * whether a request has it (its bufferlen): a holder killed in
	 * between leaves the block to the rebuild when that word is 0, to
	 * the request's reaper when not. */
	uint64_t pending_off;
	int64_t pending_ref;
	uint64_t free_head[XSEG_HEAP_MAX_ORDERS]; /* heap offsets; ~0 = empty */
	/* then: uint8_t block_state[size >> MIN_SHIFT] */
};

size_t xseg_heap_meta_bytes(uint64_t heap_size);
int xseg_heap_init(struct xseg_heap_meta *m, void *heap, uint64_t heap_size);
/* Allocates a block of at least `bytes` and, under the heap's lock, stores
 * its heap offset in *buffer, then its size in *bufferlen (0 before): a
 * caller killed at any instruction leaves the block either recorded there
 * or free. Returns 0 or -ENOMEM. Both words live in the segment. */
int xseg_heap_alloc(struct xseg_heap_meta *m, void *heap, uint64_t bytes,
		    uint64_t *buffer, uint64_t *bufferlen);
/* Frees the block at off that *bufferlen records, zeroing *bufferlen
 * under the lock (the same: the block is either still recorded or free). */
int xseg_heap_free(struct xseg_heap_meta *m, void *heap, uint64_t off, uint64_t *bufferlen);
void xseg_heap_usage(struct xseg_heap_meta *m, void *heap, uint64_t *used,
		     uint64_t *allocs, uint64_t *largest_free);

/* ---- shared structures ---------------------------------------------------- */

struct xseg_header {
	char magic[8];
	uint32_t layout_version;
	uint32_t header_size;
	uint64_t segment_size;
	uint32_t nr_ports;
	uint32_t nr_requests;
	uint32_t ring_capacity;
	uint32_t request_size;           /* sizeof(struct xseg_request) */
	uint32_t port_size;              /* sizeof(struct xseg_port_shm) */
	uint32_t pad;
	uint64_t ports_off;
	uint64_t requests_off;
	uint64_t free_ring_off;
	uint64_t port_rings_off;         /* 2 rings per port */
	uint64_t ring_bytes;             /* size of one ring */
	uint64_t heap_meta_off;
	uint64_t heap_off;
	uint64_t heap_size;
	/* Random at create: tells this segment from one made again under the
	 * same name (after a reboot, `xseg down`/`up`). */
	uint64_t instance;
	uint64_t checksum;               /* of every field above */
	_Atomic uint32_t ready;          /* set last by the creator */
	uint32_t creator_pid;
	/* Robust, process-shared: held by xseg_set_next_hop from its cycle
	 * and length check to its store, so that two route changes at once
	 * cannot each pass its check and together close a cycle. */
	pthread_mutex_t route_lock;
};

struct xseg_port_shm {
	/* Ownership and routing: written rarely. */
	/* Owner: pid in the low 32 bits, the low 32 bits of its start time
	 * (clock ticks since boot) in the high ones, so that one CAS binds and
	 * a recycled pid is not mistaken for the owner. 0 = unbound. */
	_Atomic uint64_t owner;
	_Atomic uint32_t next_hop;       /* XSEG_NO_PORT = none */
	_Atomic uint32_t group_leader;   /* port whose futex wakes this one */
	_Atomic uint32_t group_first;    /* set on the leader: its group */
	_Atomic uint32_t group_count;
	/* Non-zero while a client reaps the port of a dead owner (it owns the
	 * port for that instant): a binder waits instead of failing EBUSY. */
	_Atomic uint32_t reaping;
	/* Bumped by every bind and every release: a return-path hop records
	 * it, so a reply outlives no owner (request.c). */
	_Atomic uint32_t epoch;
	/* Set on a group's leader bound as lanes (xseg_bind_lanes): the
	 * group's size; a submit to the leader goes to the submitter's lane.
	 * 0: a group of ports that are not lanes of one service. */
	_Atomic uint32_t lanes;
	/* Bytes of acknowledged data the port's cache holds that the port
	 * behind it lacks (its owner publishes it; xseg.h: fail closed). Kept
	 * across leave and reap: an unbound port that still says so is never
	 * bypassed. Written when the figure changes, read by routing only
	 * where the port has no owner. */
	_Atomic uint64_t dirty_bytes;
	/* What xseg_port_give_up_dirty gave up (times, bytes): a cache's
	 * persist file that still holds that data must not be replayed over
	 * what the path wrote to the blocker since. */
	_Atomic uint64_t given_up;
	_Atomic uint64_t given_up_bytes;
	/* Wake-up: one line, touched by every waiter and signaller. */
	_Alignas(XSEG_CACHELINE) _Atomic uint32_t wake_seq;
	_Atomic uint32_t waiters;
	/* 1 from a wake-up until a woken thread runs: further signals skip the
	 * futex call (see wait.c). */
	_Atomic uint32_t wake_pending;
	/* Counters: relaxed, for xseg info. */
	_Alignas(XSEG_CACHELINE) _Atomic uint64_t submitted;
	_Atomic uint64_t replied;
	/* Requests the owner keeps in an xseg_reserve, out of the pool, so
	 * that xseg info can account for every request. */
	_Atomic uint32_t reserved;
	/* Replies that came back after the owner they were for had gone. */
	_Atomic uint64_t dropped_replies;
	/* Unused (layout 12 kept it): one note per port of where its taker
	 * popped could not tell several threads' pops apart; the pool's
	 * reaper finds what was popped and not claimed by its tag. */
	_Atomic uint64_t pool_taking;
};

/* ---- process-local handle ------------------------------------------------- */

struct xseg {
	void *base;
	size_t size;
	struct xseg_header *hdr;
	struct xseg_port_shm *ports;
	struct xseg_request *requests;
	struct xseg_ring *free_ring;
	char *port_rings;
	uint64_t ring_bytes;
	struct xseg_heap_meta *heap_meta;
	char *heap;
	uint32_t nr_ports;
	uint32_t nr_requests;
	uint8_t *bound;                  /* ports this handle bound */
	pthread_mutex_t bind_lock;       /* guards `bound` */
	/* Ports this handle submitted or replied to: xseg_reap_dead_peers
	 * looks at them. A bit per port, set once. */
	_Atomic uint64_t *contacts;
	_Atomic uint64_t next_peer_reap_ns;   /* rate limit of the reap in poll */
	_Atomic uint64_t next_pool_sweep_ns;  /* rate limit of get_request's sweep */
	char name[XSEG_NAME_MAX + 2];
};

static inline struct xseg_ring *xseg_req_ring(struct xseg *s, uint32_t port)
{
	return (struct xseg_ring *)(s->port_rings + (uint64_t)port * 2 * s->ring_bytes);
}

static inline struct xseg_ring *xseg_rep_ring(struct xseg *s, uint32_t port)
{
	return (struct xseg_ring *)(s->port_rings +
				    ((uint64_t)port * 2 + 1) * s->ring_bytes);
}

/* ---- helpers shared by the modules ---------------------------------------- */

/* error.c: records the thread's last error (printf format), returns -err. */
int xseg_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* owner.c: who this process is, and whether a recorded owner lives. */
pid_t xseg_self_pid(void);
uint64_t xseg_owner_word(pid_t pid);       /* 0: gone (errno ESRCH), or could not look */
uint64_t xseg_self_owner_word(void);
bool xseg_owner_is_self(uint64_t owner);   /* pid and start time both ours */
bool xseg_owner_alive(uint64_t owner);
static inline pid_t xseg_owner_pid(uint64_t owner)
{
	return (pid_t)(owner & 0xffffffffu);
}

/* wait.c: the futex wake-up. */
void xseg_signal_port(struct xseg *s, uint32_t port);
/* Wakes every thread asleep on port's word, to look again. */
void xseg_wake_all(struct xseg *s, uint32_t port);
/* Work queued on port's group, or what `ready` sees. */
bool xseg_work_ready(struct xseg *s, uint32_t port, bool (*ready)(void *), void *arg);
/* One sleep on port's group word until work, a wake-up or the timeout. */
int xseg_wait_on(struct xseg *s, uint32_t port, uint64_t timeout_ns,
		 bool (*ready)(void *), void *arg);

/* port.c: ownership primitives. take: from nobody (0) or from a dead owner
 * (1: the caller settles what it held), or -errno. */
bool xseg_port_owned_here(struct xseg *s, uint32_t port);
int xseg_port_take(struct xseg *s, uint32_t port, bool reaper);
void xseg_port_release(struct xseg *s, uint32_t port);
/* Also ends lanes on `first` (xseg_port_set_lanes marks them again). */
void xseg_port_set_group(struct xseg *s, uint32_t first, uint32_t last);
void xseg_port_set_lanes(struct xseg *s, uint32_t first, uint32_t last);
/* Where a push to `to` from `from` goes: `to`, or, when `to` leads lanes,
 * the lane of `from` (to + from % lanes) while its owner is the leader's. */
uint32_t xseg_lane_for(struct xseg *s, uint32_t to, uint32_t from);
/* The service port that `port` is a lane of, or `port` itself. */
uint32_t xseg_lane_leader(struct xseg *s, uint32_t port);
/* Takes `port` out of its group (the rest stay groups of their own). */
void xseg_port_ungroup(struct xseg *s, uint32_t port);
/* Whether a next hop of dst's chain is `port` (or the service it is a lane
 * of), bound or not. */
bool xseg_route_reaches(struct xseg *s, uint32_t dst, uint32_t port);
/* xseg_resolve_route with port `gone` taken for unbound (a reap), for a
 * request on its way: never back to a hop of its return path (`path`). */
uint32_t xseg_resolve_route_past(struct xseg *s, uint32_t from, uint32_t dst, uint32_t gone,
				 const struct xseg_path_hop *path, uint32_t path_len);
/* A dead owner's queue (the reap): a request that reached `port` as a hop
 * goes on where the route leads past it, unless the port says it holds
 * dirty data (fail closed); everything else fails back with `err`. */
uint32_t xseg_pass_on_dead_queue(struct xseg *s, uint32_t port, int err);

/* request.c: the pool, and settling what a port leaves behind. */
/* xseg_submit and xseg_respond without owners.c's look at a destination
 * released meanwhile (for the settling below, which runs under the
 * bind lock). Return the port the request went to, or -errno. */
int xseg_push_request(struct xseg *s, struct xseg_request *req, uint32_t from, uint32_t dst);
int xseg_push_reply(struct xseg *s, struct xseg_request *req, uint32_t from);
struct xseg_request *xseg_pool_take(struct xseg *s, uint32_t src);  /* NULL: empty */
int xseg_pool_explain_empty(struct xseg *s, uint32_t src);         /* -ENOBUFS */
uint32_t xseg_fail_queued_requests(struct xseg *s, uint32_t port, int err);
/* A port being left: a request that reached it as a hop for another port
 * (a cache) goes on where the route now leads, when that is elsewhere (the
 * cache was unplugged); the rest fail back EHOSTDOWN. Returns how many
 * failed. */
uint32_t xseg_pass_on_queued_requests(struct xseg *s, uint32_t port);
/* What the dead owner of `port` popped off its queues and died before
 * marking its own (take: pop, then mark): settled as if it had (a request
 * failed back EPIPE, a reply as received). Only while nobody takes from
 * the port's queues (a reap or a takeover, before the new owner serves).
 * Returns how many requests failed back. */
uint32_t xseg_settle_limbo(struct xseg *s, uint32_t port);
/* A push's tag, req->pushing (request.c says how it is used):
 * pusher port + 1 (16 bits) | REPLY | DONE | SAVED | a reply's return path
 * length before the responder shortened it (5 bits) | ring position (40). */
#define XSEG_PUSH_PUSHER_SHIFT 48
#define XSEG_PUSH_REPLY        (1ull << 47)
#define XSEG_PUSH_DONE         (1ull << 46)
#define XSEG_PUSH_SAVED        (1ull << 45)
#define XSEG_PUSH_PATH_SHIFT   40
#define XSEG_PUSH_PATH_MASK    0x1full
/* On a free request's tag: taken off the free ring by the port in the
 * pusher bits, which had not yet marked it its own (request.c). */
#define XSEG_PUSH_TAKEN        (1ull << 44)
static inline uint64_t xseg_push_tag_base(uint32_t pusher, bool reply)
{
	return (uint64_t)(pusher + 1) << XSEG_PUSH_PUSHER_SHIFT | (reply ? XSEG_PUSH_REPLY : 0);
}
/* What the dead owner of `port` was pushing onto a queue when it died and
 * no queue has: pushed again (request.c). Returns how many. */
uint32_t xseg_resume_pushes(struct xseg *s, uint32_t port);
/* Marks to[q] for each port q that a request pushed by `port` is queued
 * for now (to: nr_ports bytes). */
void xseg_mark_pushed_to(struct xseg *s, uint32_t port, uint8_t *to);
/* Requests held by a dead port's owner: fail them back or free them. */
void xseg_reclaim_port_requests(struct xseg *s, uint32_t port);
/* What the dead owner of `port` was putting in or taking out of the pool
 * when it died (a request in no ring and held by nobody), and whatever
 * else was popped off the pool and never claimed: back to the pool.
 * Returns how many. */
uint32_t xseg_settle_pool(struct xseg *s, uint32_t port);
/* Remembers that this handle sent or replied to `port` (for reaping). */
static inline void xseg_note_contact(struct xseg *s, uint32_t port)
{
	_Atomic uint64_t *word = &s->contacts[port / 64];
	uint64_t bit = 1ull << (port % 64);
	if (!(atomic_load_explicit(word, memory_order_relaxed) & bit))
		atomic_fetch_or_explicit(word, bit, memory_order_relaxed);
}

/* owners.c: reaps the ports of every dead owner in the segment (the
 * pool's sweep when it is empty; ten times a second at most). Returns
 * how many. */
int xseg_reap_all_dead(struct xseg *s);
/* xseg_reap_dead_peers at most once per 100 ms of this handle. */
void xseg_reap_dead_peers_rate_limited(struct xseg *s);

static inline bool xseg_port_valid(struct xseg *s, uint32_t port)
{
	return s && port < s->nr_ports;
}

/* TSan's model of hand-offs between processes (requests, buffers, heap
 * blocks): released before something goes to another process, acquired
 * after something comes from one. The heap releases and acquires it under
 * its lock, since its free links live in blocks that pass between
 * processes. Only an address; see xtypes/xannotate.h. */
extern char xseg_tsan_handoff;

#endif /* XSEG_INTERNAL_H */
