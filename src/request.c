/*
 * Requests: the pool, buffers, and their travel between ports.
 *
 * Ownership is explicit: a request is held by exactly one port at a time
 * (req->holder) and only the process that bound that port may touch it. The
 * state says where it is; every call checks the state it expects, so a
 * misuse returns -EINVAL instead of corrupting a queue.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "xseg_internal.h"
#include "xtypes/xannotate.h"

/*
 * For ThreadSanitizer, which sees one process: a request, its buffer and
 * the heap blocks under it pass between this process's threads through
 * other processes (client -> peer -> client, free here, allocated there),
 * so no per-object edge is visible. Every hand-off (ring push, heap free)
 * releases and every take (ring pop, heap allocation) acquires this one
 * object, which models exactly what the rings guarantee: whatever a thread
 * did before it passed something on happens before whoever takes it next.
 * Compiles to nothing outside TSan builds.
 */
char xseg_tsan_handoff;

/* The holder is read without a lock by a takeover's scan of the pool
 * (xseg_reclaim_port_requests) while live threads change it. */
/* (Release: a reader of the holder sees the push's tag stored before.) */
static inline void set_holder(struct xseg_request *r, uint32_t port)
{
	__atomic_store_n(&r->holder, port, __ATOMIC_RELEASE);
}

static inline uint32_t load_state(const struct xseg_request *r)
{
	return __atomic_load_n(&r->state, __ATOMIC_ACQUIRE);
}

static inline void store_state(struct xseg_request *r, uint32_t st)
{
	__atomic_store_n(&r->state, st, __ATOMIC_RELEASE);
}

/* Validates that req points at a request of this segment's pool. */
static bool req_valid(struct xseg *s, const struct xseg_request *req)
{
	if (!s || !req)
		return false;
	/* one division, on every request's way (below the array: a huge i) */
	uintptr_t off = (uintptr_t)req - (uintptr_t)s->requests;
	uintptr_t i = off / sizeof(*req);
	return i < s->nr_requests && i * sizeof(*req) == off;
}

/* Held states: the holder may modify, submit, respond or put. */
static bool held(uint32_t st)
{
	return st == XS_ALLOCATED || st == XS_ACCEPTED || st == XS_RECEIVED;
}

/*
 * A request its holder owes a reply to someone: accepted, or forwarded and
 * back (received with hops left on its return path). It may be responded
 * to, not put.
 */
static bool owes_reply(const struct xseg_request *req, uint32_t st)
{
	return st == XS_ACCEPTED || (st == XS_RECEIVED && req->path_len > 0);
}

static int check_held(struct xseg *s, struct xseg_request *req, const char *what)
{
	if (!req_valid(s, req))
		return xseg_fail(EINVAL, "%s: %p is not a request of this segment", what,
				 (void *)req);
	uint32_t st = load_state(req);
	if (!held(st))
		return xseg_fail(EINVAL, "%s: request %u is in state %u, not held", what,
				 req->index, st);
	if (req->holder >= s->nr_ports || !xseg_port_owned_here(s, req->holder))
		return xseg_fail(EPERM, "%s: request %u is held by port %u, not bound here",
				 what, req->index, req->holder);
	return 0;
}

static void free_buffer(struct xseg *s, struct xseg_request *req)
{
	/* The heap forgets the block for the request (bufferlen 0) under its
	 * lock: a holder killed inside leaves it neither leaked nor freed
	 * again by its reaper, maybe from under the request it went to. */
	if (req->bufferlen) {
		/* TSan: the heap's lock models the hand-over (heap.c) */
		xseg_heap_free(s->heap_meta, s->heap, req->buffer, &req->bufferlen);
	}
	req->buffer = req->bufferlen = req->data_off = req->datalen = 0;
	req->targetlen = 0;
}

static void pool_push(struct xseg *s, struct xseg_request *req, uint32_t pusher);

/* Back to the pool; the caller checked the request is held. */
static void release_request(struct xseg *s, struct xseg_request *req)
{
	free_buffer(s, req);
	pool_push(s, req, req->holder);
}

/* The pool is empty: say who holds it, so that "in use" is never a
 * mystery (a client that asks for more than the pool has holds it all). */
int xseg_pool_explain_empty(struct xseg *s, uint32_t src)
{
	uint32_t mine = 0, reserved = 0;
	for (uint32_t i = 0; i < s->nr_requests; i++) {
		const struct xseg_request *r = &s->requests[i];
		if (__atomic_load_n(&r->holder, __ATOMIC_RELAXED) == src &&
		    held(load_state(r)))
			mine++;
	}
	for (uint32_t p = 0; p < s->nr_ports; p++)
		reserved += atomic_load_explicit(&s->ports[p].reserved, memory_order_relaxed);
	return xseg_fail(ENOBUFS, "get request: all %u requests of the pool are in use "
			 "(%u held by port %u itself, %u in peers' reserves)",
			 s->nr_requests, mine, src, reserved);
}

/* A taker's claim of what it popped off the free ring at `at`: its own,
 * unless a reaper took it back (its tag then names no position) or it is
 * a stale copy. The claim
 * names the taker (TAKEN), for its reaper should it die before it marks
 * the request its own. */
static bool claim_free(struct xseg_request *r, uint64_t at, uint32_t taker)
{
	uint64_t tag = __atomic_load_n(&r->pushing, __ATOMIC_ACQUIRE);
	uint64_t mine = xseg_push_tag_base(taker, false) | XSEG_PUSH_DONE | XSEG_PUSH_TAKEN | at;
	for (;;) {
		if ((tag & XSEG_PUSH_TAKEN) || (tag & XSEG_RING_POS_MASK) != at)
			return false;
		if (__atomic_compare_exchange_n(&r->pushing, &tag, mine, false, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE))
			return true;
	}
}

struct xseg_request *xseg_pool_take(struct xseg *s, uint32_t src)
{
	struct xseg_request *r;
	uint32_t idx;
	uint64_t at;

	do {
		if (!xseg_ring_pop_at(s->free_ring, &idx, &at))
			return NULL;
		r = &s->requests[idx];
	} while (!claim_free(r, at, src));
	xannotate_happens_after(&xseg_tsan_handoff);
	r->generation++;
	r->op = X_PING;
	r->flags = 0;
	r->offset = r->size = r->serviced = 0;
	r->result = XR_NONE;
	r->error = 0;
	r->priv = 0;
	r->submit_ns = 0;
	r->src_port = src;
	r->dst_port = XSEG_NO_PORT;
	set_holder(r, src);
	r->path_len = 0;
	store_state(r, XS_ALLOCATED);
	return r;
}

int xseg_put_request(struct xseg *s, struct xseg_request *req)
{
	int rc = check_held(s, req, "put request");
	if (rc < 0)
		return rc;
	if (owes_reply(req, load_state(req)))
		return xseg_fail(EINVAL, "put request: request %u was accepted; respond to it",
				 req->index);
	release_request(s, req);
	return 0;
}

int xseg_prep_request(struct xseg *s, struct xseg_request *req,
		      uint32_t targetlen, uint64_t datalen)
{
	int rc = check_held(s, req, "prep request");
	if (rc < 0)
		return rc;
	if (targetlen > XSEG_MAX_TARGETLEN)
		return xseg_fail(ENAMETOOLONG, "prep request: target length %u over %u",
				 targetlen, XSEG_MAX_TARGETLEN);
	uint64_t data_off = ((uint64_t)targetlen + 1 + 7) & ~7ull;
	if (data_off < XSEG_TARGET_ROOM)
		data_off = XSEG_TARGET_ROOM;   /* room to rename the target in place */
	if (datalen > s->hdr->heap_size - data_off)
		return xseg_fail(ENOMEM, "prep request: %llu data bytes cannot fit a heap of %llu",
				 (unsigned long long)datalen,
				 (unsigned long long)s->hdr->heap_size);
	uint64_t need = data_off + datalen;
	if (req->bufferlen < need) {
		free_buffer(s, req);
		if (xseg_heap_alloc(s->heap_meta, s->heap, need, &req->buffer,
				    &req->bufferlen) < 0)
			return xseg_fail(ENOMEM, "prep request: heap has no free block of %llu bytes",
					 (unsigned long long)need);
	}
	req->targetlen = targetlen;
	req->data_off = data_off;
	req->datalen = datalen;
	s->heap[req->buffer + targetlen] = '\0';
	return 0;
}

int xseg_prep_target(struct xseg *s, struct xseg_request *req,
		     const char *target, uint64_t datalen)
{
	if (!target)
		return xseg_fail(EINVAL, "prep target: no target name");
	size_t len = strnlen(target, XSEG_MAX_TARGETLEN + 1);
	if (len > XSEG_MAX_TARGETLEN)
		return xseg_fail(ENAMETOOLONG, "prep target: name '%.32s...' longer than %u",
				 target, XSEG_MAX_TARGETLEN);
	int rc = xseg_prep_request(s, req, (uint32_t)len, datalen);
	if (rc < 0)
		return rc;
	memcpy(s->heap + req->buffer, target, len);
	return 0;
}

char *xseg_get_target(struct xseg *s, struct xseg_request *req)
{
	if (!req_valid(s, req) || !req->bufferlen)
		return NULL;
	return s->heap + req->buffer;
}

void *xseg_get_data(struct xseg *s, struct xseg_request *req)
{
	if (!req_valid(s, req) || !req->bufferlen)
		return NULL;
	return s->heap + req->buffer + req->data_off;
}

struct xseg_request *xseg_request_at(struct xseg *s, uint32_t index)
{
	if (!s || index >= s->nr_requests)
		return NULL;
	return &s->requests[index];
}

/*
 * A push's tag (req->pushing), so that a death at any instruction of a
 * push or a take leaves the request to exactly one side:
 *   pusher port + 1 (16 bits) | REPLY (which ring) | DONE | position (40)
 * The pusher stores it before it marks the request queued for the port,
 * with the ring position it tries (xseg_ring_push_tagged), and sets DONE
 * once the ring has it. A taker that pops it at that position sets DONE
 * (CAS) before it marks the request its own. A reaper of a dead pusher
 * finds a tag naming it, not DONE, of a request on no ring: the push
 * never reached the ring, or its taker popped it and has not set DONE;
 * the CAS of the tag to the one the reaper's push again starts with (as
 * the reaper's port's, at no position yet) decides between the two, and
 * the reaper pushes what it wins again at a new position
 * (xseg_resume_pushes). The taker of the first pop then finds another
 * position, and drops what it popped. A reaper killed after its CAS
 * leaves a push of the port it reaped, not DONE, on no ring: the next
 * reap of that port (its owner now the dead reaper) resumes it again.
 * (A tag of its own, RESUMED, no reap took for one to finish: such a
 * request stayed on no queue for good.)
 */
#define PUSH_PUSHER_SHIFT XSEG_PUSH_PUSHER_SHIFT
#define PUSH_REPLY        XSEG_PUSH_REPLY
#define PUSH_DONE         XSEG_PUSH_DONE
#define PUSH_SAVED        XSEG_PUSH_SAVED
#define PUSH_PATH_SHIFT   XSEG_PUSH_PATH_SHIFT
#define PUSH_PATH_MASK    XSEG_PUSH_PATH_MASK

static inline uint64_t push_tag_base(uint32_t pusher, uint32_t state)
{
	return xseg_push_tag_base(pusher, state == XS_REPLIED);
}

/* Whether a tag names `port` as its pusher. */
static inline bool pushed_by(uint64_t tag, uint32_t port)
{
	return tag >> PUSH_PUSHER_SHIFT == port + 1u;
}

/*
 * The pool's ring is tagged as a port's (pusher, position, DONE), so that
 * a death at any instruction of a put or a get leaves the request to one
 * side: a put stores its tag, marks the request FREE, pushes and says
 * DONE; a get pops, claims the request (TAKEN by it) and marks it its
 * own. The reaper of a dead port finds a FREE request on no ring that the
 * port was putting or had claimed, and any that was popped at the
 * position its tag says and not claimed, whoever popped it, and puts it
 * back once (xseg_settle_pool; its CAS to its own put's first tag against
 * a live taker's claim decides who has it, and a live taker that loses
 * pops another; a reaper killed after the CAS leaves a put of the port it
 * reaped that never got there, for the next reap).
 * Not only what the dead port announced it popped: several threads of a
 * peer take from the pool on one port at once, and a note per port kept
 * the last taker's position only (the others' pops were lost).
 */
static void pool_push(struct xseg *s, struct xseg_request *req, uint32_t pusher)
{
	uint64_t base = xseg_push_tag_base(pusher, false), at;
	__atomic_store_n(&req->pushing, base | XSEG_RING_POS_MASK, __ATOMIC_RELAXED);
	store_state(req, XS_FREE);
	set_holder(req, XSEG_NO_PORT);
	xannotate_happens_before(&xseg_tsan_handoff);
	xseg_ring_push_tagged(s->free_ring, req->index, &req->pushing, base, &at);
	uint64_t tag = base | at;
	__atomic_compare_exchange_n(&req->pushing, &tag, tag | PUSH_DONE, false, __ATOMIC_RELEASE,
				    __ATOMIC_RELAXED);
}

#define POOL_WAIT_US    100
#define POOL_WAIT_TRIES 200   /* 20 ms: a live pusher's DONE */

uint32_t xseg_settle_pool(struct xseg *s, uint32_t port)
{
	xannotate_happens_after(&xseg_tsan_handoff);
	uint32_t n = 0;
	for (uint32_t i = 0; i < s->nr_requests; i++) {
		struct xseg_request *r = &s->requests[i];
		for (int tries = 0;; tries++) {
			/* The tag first, then the state: a FREE state read
			 * before the tag may be older than it. A live thread
			 * that got the request meanwhile and submitted it left
			 * its push's tag (DONE, not TAKEN, on no pool cell),
			 * which reads as popped and never claimed: the CAS
			 * below won, and the request went back to the pool
			 * from the queue it was on, never answered. Read
			 * after the tag, FREE is at least as new (a put marks
			 * the request FREE before its tag says DONE), and the
			 * CAS fails if the tag changed since. */
			uint64_t tag = __atomic_load_n(&r->pushing, __ATOMIC_ACQUIRE);
			if (load_state(r) != XS_FREE)
				break;
			uint64_t pos = tag & XSEG_RING_POS_MASK;
			bool ours;
			if (tag & XSEG_PUSH_TAKEN)          /* claimed, not marked */
				ours = pushed_by(tag, port);
			else if (xseg_ring_filled_at(s->free_ring, pos, i))
				ours = false;               /* on the ring: its taker has it */
			else if (pushed_by(tag, port) && !(tag & PUSH_DONE))
				ours = true;                /* a put that never got there, or
							     * popped before its DONE */
			else if (!(tag & PUSH_DONE)) {
				/* another's put: a live one says DONE within
				 * instructions (not yet pushed, it must not be
				 * pushed twice); a dead one's reap has it */
				if (tries < POOL_WAIT_TRIES) {
					usleep(POOL_WAIT_US);
					continue;
				}
				ours = false;
			} else
				ours = true;                /* popped, never claimed */
			if (ours && __atomic_compare_exchange_n(&r->pushing, &tag,
							       xseg_push_tag_base(port, false) |
							       XSEG_RING_POS_MASK, false,
							       __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
				pool_push(s, r, port);
				n++;
			}
			break;
		}
	}
	return n;
}

/* An answer's tag keeps the return path's length from before the answer
 * shortened it (PUSH_SAVED), for a reaper to put back. */
static inline uint64_t saved_path(uint32_t path_len)
{
	return PUSH_SAVED | (uint64_t)path_len << PUSH_PATH_SHIFT;
}

/* The saved-path bits of a tag, to carry into a resumed push. */
static inline uint64_t saved_path_bits(uint64_t tag)
{
	return tag & (PUSH_SAVED | PUSH_PATH_MASK << PUSH_PATH_SHIFT);
}

static inline uint32_t saved_path_len(uint64_t tag)
{
	return (uint32_t)(tag >> PUSH_PATH_SHIFT & PUSH_PATH_MASK);
}

/*
 * `from` puts req on `port`'s ring and wakes the port. A push fails only
 * when the ring is full, which a pool no larger than a ring rules out; the
 * request then stays with its holder, unchanged, and the caller reports
 * the error instead of losing the request.
 */
static int deliver(struct xseg *s, struct xseg_request *req, uint32_t from, uint32_t port,
		   struct xseg_ring *ring, _Atomic uint64_t *counter, uint32_t state,
		   uint64_t saved)
{
	uint32_t prev_holder = req->holder, prev_state = load_state(req);
	uint64_t base = push_tag_base(from, state) | saved, at;
	__atomic_store_n(&req->pushing, base | XSEG_RING_POS_MASK, __ATOMIC_RELAXED);
	set_holder(req, port);
	store_state(req, state);
	xannotate_happens_before(&xseg_tsan_handoff);
	if (!xseg_ring_push_tagged(ring, req->index, &req->pushing, base, &at)) {
		set_holder(req, prev_holder);
		store_state(req, prev_state);
		__atomic_store_n(&req->pushing, 0, __ATOMIC_RELEASE);
		return xseg_fail(EIO, "port %u's queue is full", port);
	}
	/* The taker may have set DONE already, or be done with it and
	 * another push under way: only this push's own tag is marked. */
	uint64_t tag = base | at;
	__atomic_compare_exchange_n(&req->pushing, &tag, tag | PUSH_DONE, false, __ATOMIC_RELEASE,
				    __ATOMIC_RELAXED);
	atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
	xseg_signal_port(s, port);
	xseg_note_contact(s, port);
	return 0;
}

/* A taker's half of the push: the request it popped at `at` is its own,
 * unless a reaper of its dead pusher took it back to push it again. */
static bool claim_pushed(struct xseg_request *r, uint64_t at)
{
	uint64_t tag = __atomic_load_n(&r->pushing, __ATOMIC_ACQUIRE);
	for (;;) {
		if (!(tag >> PUSH_PUSHER_SHIFT) ||
		    (tag & XSEG_RING_POS_MASK) != at)
			return false;
		if (tag & PUSH_DONE)
			return true;
		if (__atomic_compare_exchange_n(&r->pushing, &tag, tag | PUSH_DONE, false,
						__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			return true;
	}
}

/* Pops what `ring` holds for its taker (claim_pushed), skipping copies a
 * reaper pushed again. */
static bool pop_pushed(struct xseg *s, struct xseg_ring *ring, uint32_t *idx)
{
	uint64_t at;
	while (xseg_ring_pop_at(ring, idx, &at))
		if (claim_pushed(&s->requests[*idx], at))
			return true;
	return false;
}

int xseg_push_request(struct xseg *s, struct xseg_request *req, uint32_t from, uint32_t dst)
{
	int rc = check_held(s, req, "submit");
	if (rc < 0)
		return rc;
	if (!xseg_port_valid(s, dst))
		return xseg_fail(EINVAL, "submit: destination port %u out of range 0..%u", dst,
				 s->nr_ports - 1);
	if (from != req->holder)
		return xseg_fail(EINVAL, "submit: request %u is held by port %u, not %u",
				 req->index, req->holder, from);
	if (req->op >= X_OP_MAX)
		return xseg_fail(EINVAL, "submit: unknown op %u", req->op);
	if (req->path_len >= XSEG_MAX_PATH)
		return xseg_fail(E2BIG, "submit: request %u already passed %u ports",
				 req->index, XSEG_MAX_PATH);
	uint32_t to = xseg_resolve_route_past(s, from, dst, XSEG_NO_PORT, req->path, req->path_len);
	if (to == XSEG_NO_PORT || !atomic_load(&s->ports[to].owner)) {
		uint64_t dirty = to == XSEG_NO_PORT ? 0 : atomic_load(&s->ports[to].dirty_bytes);
		if (dirty)
			return xseg_fail(EIO, "submit: the cache at port %u is gone holding %" PRIu64
					 " dirty bytes for port %u: restart it on its persist file, "
					 "or give them up with xseg unplug --force --via %u",
					 to, dirty, dst, to);
		return xseg_fail(ENOENT, "submit: nobody has bound port %u", dst);
	}
	to = xseg_lane_for(s, to, from);
	req->path[req->path_len].port = from;
	req->path[req->path_len].epoch =
		atomic_load_explicit(&s->ports[from].epoch, memory_order_relaxed);
	req->path[req->path_len].cookie = req->priv;
	req->path_len++;
	req->dst_port = dst;
	if (!req->submit_ns)
		req->submit_ns = xseg_now_ns();
	rc = deliver(s, req, from, to, xseg_req_ring(s, to), &s->ports[to].submitted,
		     XS_QUEUED, 0);
	if (rc < 0) {
		req->path_len--;
		return rc;
	}
	return (int)to;
}

/* Is the owner that passed the request on at `hop` still the port's? */
static bool hop_current(struct xseg *s, const struct xseg_path_hop *hop)
{
	return atomic_load_explicit(&s->ports[hop->port].epoch, memory_order_acquire) ==
	       hop->epoch;
}

/* A reply reached a hop whose owner is gone. */
static void count_dropped(struct xseg *s, uint32_t port)
{
	atomic_fetch_add_explicit(&s->ports[port].dropped_replies, 1, memory_order_relaxed);
}

int xseg_push_reply(struct xseg *s, struct xseg_request *req, uint32_t from)
{
	int rc = check_held(s, req, "respond");
	if (rc < 0)
		return rc;
	/* A forwarder responds to the reply it received, in turn. */
	if (!owes_reply(req, load_state(req)))
		return xseg_fail(EINVAL, "respond: request %u was not accepted", req->index);
	if (from != req->holder)
		return xseg_fail(EINVAL, "respond: request %u is held by port %u, not %u",
				 req->index, req->holder, from);
	if (req->path_len == 0 || req->path_len > XSEG_MAX_PATH)
		return xseg_fail(EINVAL, "respond: request %u has no return path", req->index);
	/* Before the path is shortened: a death from here until the request
	 * is marked for the next hop leaves it with us, and the reaper puts
	 * the path back (xseg_reclaim_port_requests). */
	uint64_t saved = saved_path(req->path_len);
	__atomic_store_n(&req->pushing, push_tag_base(from, XS_REPLIED) | saved | XSEG_RING_POS_MASK,
			 __ATOMIC_RELAXED);
	struct xseg_path_hop hop = req->path[--req->path_len];
	if (hop.port >= s->nr_ports) {
		req->path_len++;
		return xseg_fail(EINVAL, "respond: request %u return port %u out of range",
				 req->index, hop.port);
	}
	/* A hop whose owner left or died (and maybe was replaced) gets no
	 * reply: the hops before it are told it failed; when it was the
	 * issuer, nobody waits and the request goes back to the pool. */
	while (!hop_current(s, &hop)) {
		count_dropped(s, hop.port);
		if (req->path_len == 0) {
			release_request(s, req);
			return (int)hop.port;
		}
		req->result = XR_FAILED;
		req->error = EPIPE;
		req->serviced = 0;
		hop = req->path[--req->path_len];
		if (hop.port >= s->nr_ports) {
			req->path_len++;
			return xseg_fail(EINVAL, "respond: request %u return port %u out of range",
					 req->index, hop.port);
		}
	}
	uint64_t own_cookie = req->priv;
	req->priv = hop.cookie;
	rc = deliver(s, req, from, hop.port, xseg_rep_ring(s, hop.port),
		     &s->ports[hop.port].replied, XS_REPLIED, saved);
	if (rc < 0) {
		req->priv = own_cookie;
		req->path_len++;
		return rc;
	}
	return (int)hop.port;
}

/*
 * A request the dead owner of `port` held: if someone upstream waits for it
 * (the dead process accepted it, or forwarded it and its reply came back),
 * it is failed back along its return path with EPIPE; otherwise the dead
 * process had issued it, and it goes back to the pool.
 */
static void settle_dead_holders(struct xseg *s, struct xseg_request *r, uint32_t port)
{
	if (owes_reply(r, load_state(r))) {
		r->result = XR_FAILED;
		r->error = EPIPE;
		if (xseg_push_reply(s, r, port) >= 0)
			return;
	}
	release_request(s, r);
}

/* A reply for a predecessor of this port's owner, now held by `port`. */
static void settle_stale_reply(struct xseg *s, struct xseg_request *r, uint32_t port)
{
	count_dropped(s, port);
	settle_dead_holders(s, r, port);
}

/*
 * A reply popped from `port`'s reply queue was meant for this owner of the
 * port only if the hop it came back through is of this owner's epoch: one
 * for a predecessor (its owner left or died while the request was out,
 * and the responder saw the old epoch) is settled, never handed over.
 */
static bool reply_is_stale(struct xseg *s, const struct xseg_request *r, uint32_t port)
{
	if (r->path_len >= XSEG_MAX_PATH)
		return true;
	const struct xseg_path_hop *hop = &r->path[r->path_len];
	return hop->port != port || !hop_current(s, hop);
}

/* Pops up to max from `ring`, marking each `state`. */
static int take(struct xseg *s, uint32_t port, struct xseg_ring *ring,
		struct xseg_request **reqs, unsigned max, uint32_t state)
{
	unsigned n = 0;
	uint32_t idx;
	while (n < max && pop_pushed(s, ring, &idx)) {
		struct xseg_request *r = &s->requests[idx];
		xannotate_happens_after(&xseg_tsan_handoff);
		set_holder(r, port);
		store_state(r, state);
		if (state == XS_RECEIVED && reply_is_stale(s, r, port)) {
			settle_stale_reply(s, r, port);
			continue;
		}
		reqs[n++] = r;
	}
	return (int)n;
}

static int check_port_here(struct xseg *s, uint32_t port, const char *what,
			   struct xseg_request **reqs)
{
	if (!xseg_port_valid(s, port))
		return xseg_fail(EINVAL, "%s: port %u out of range", what, port);
	if (!reqs)
		return xseg_fail(EINVAL, "%s: no array for the requests", what);
	if (!xseg_port_owned_here(s, port))
		return xseg_fail(EPERM, "%s: port %u is not bound by this process", what, port);
	return 0;
}

int xseg_accept(struct xseg *s, uint32_t port, struct xseg_request **reqs, unsigned max)
{
	int rc = check_port_here(s, port, "accept", reqs);
	if (rc < 0)
		return rc;
	return take(s, port, xseg_req_ring(s, port), reqs, max, XS_ACCEPTED);
}

int xseg_receive(struct xseg *s, uint32_t port, struct xseg_request **reqs, unsigned max)
{
	int rc = check_port_here(s, port, "receive", reqs);
	if (rc < 0)
		return rc;
	return take(s, port, xseg_rep_ring(s, port), reqs, max, XS_RECEIVED);
}

/* What settle_queued does with a request that reached `port` as a hop. */
enum settle { SETTLE_FAIL, SETTLE_PASS_ON, SETTLE_PASS_ON_DEAD };

/*
 * Empties `port`'s request queue (the caller owns the port). Passing on
 * (SETTLE_PASS_ON: the port is left), a request that reached the port as a
 * hop for another port goes on where the route leads now, unless a route
 * still names this port (a cache that could not write back). Its owner
 * dead (SETTLE_PASS_ON_DEAD: the reap), the route may still name it: the
 * request goes on past it unless it says it holds dirty data. Every other
 * request fails back to its issuer with `err`. Returns how many failed.
 */
static uint32_t settle_queued(struct xseg *s, uint32_t port, int err, enum settle how)
{
	uint32_t idx, failed = 0;

	while (pop_pushed(s, xseg_req_ring(s, port), &idx)) {
		struct xseg_request *r = &s->requests[idx];
		xannotate_happens_after(&xseg_tsan_handoff);
		set_holder(r, port);
		store_state(r, XS_ACCEPTED);
		if (how != SETTLE_FAIL) {
			uint32_t issuer = r->path_len ? r->path[r->path_len - 1].port
						      : XSEG_NO_PORT;
			bool dead = how == SETTLE_PASS_ON_DEAD;
			uint32_t to = r->dst_port == port || issuer >= s->nr_ports ||
				      (!dead && xseg_route_reaches(s, r->dst_port, port))
				      ? XSEG_NO_PORT
				      : xseg_resolve_route_past(s, issuer, r->dst_port,
								dead ? port : XSEG_NO_PORT,
								r->path, r->path_len);
			if (to != XSEG_NO_PORT && to != port &&
			    atomic_load(&s->ports[to].owner) &&
			    deliver(s, r, port, to, xseg_req_ring(s, to),
				    &s->ports[to].submitted, XS_QUEUED, 0) == 0)
				continue;
		}
		r->result = XR_FAILED;
		r->error = err;
		r->serviced = 0;
		if (xseg_push_reply(s, r, port) < 0)
			release_request(s, r);
		failed++;
	}
	return failed;
}

uint32_t xseg_fail_queued_requests(struct xseg *s, uint32_t port, int err)
{
	return settle_queued(s, port, err, SETTLE_FAIL);
}

uint32_t xseg_pass_on_queued_requests(struct xseg *s, uint32_t port)
{
	return settle_queued(s, port, EHOSTDOWN, SETTLE_PASS_ON);
}

uint32_t xseg_pass_on_dead_queue(struct xseg *s, uint32_t port, int err)
{
	return settle_queued(s, port, err, SETTLE_PASS_ON_DEAD);
}

/*
 * take() pops a request off a ring and only then marks it the taker's: an
 * owner killed in between leaves it in no ring and held by nobody, still
 * QUEUED (or REPLIED) for `port`, and its issuer waits for ever. Nobody
 * takes from the port now, so a request that says so, whose push is over
 * (DONE: by its pusher after the ring took it, or by the dead taker) and
 * that is not on the port's rings (read after: a done push stays there
 * until taken) was popped by the dead owner. A push not yet DONE is its
 * pusher's: a live one ends it within instructions, so the scan waits for
 * that while the pusher's owner lives (a pusher preempted between its ring
 * push and its DONE, whose request the dead owner popped, would otherwise
 * leave it held by nobody: a 20 ms wait gave up on a loaded machine); a
 * dead one's reaper pushes it again (xseg_resume_pushes). The wait is
 * bounded (a pusher stopped with SIGSTOP must not hang the reaper): past
 * it, such a request is left as before.
 */
#define LIMBO_WAIT_US    100
#define LIMBO_WAIT_NS    1000000000ull   /* 1 s */

/* Whether the port a push's tag names as its pusher has a live owner. */
static bool pusher_lives(struct xseg *s, uint64_t tag)
{
	uint64_t p = tag >> PUSH_PUSHER_SHIFT;
	if (!p || p > s->nr_ports)
		return false;
	uint64_t owner = atomic_load(&s->ports[p - 1].owner);
	return owner && (xseg_owner_is_self(owner) || xseg_owner_alive(owner));
}

static uint32_t find_limbo(struct xseg *s, uint32_t port, uint32_t *found, bool *under_way)
{
	uint32_t n = 0;
	*under_way = false;
	for (uint32_t i = 0; i < s->nr_requests; i++) {
		struct xseg_request *r = &s->requests[i];
		uint32_t st = load_state(r);
		if ((st != XS_QUEUED && st != XS_REPLIED) ||
		    __atomic_load_n(&r->holder, __ATOMIC_ACQUIRE) != port)
			continue;
		uint64_t tag = __atomic_load_n(&r->pushing, __ATOMIC_ACQUIRE);
		if (tag & PUSH_DONE)
			found[n++] = i;
		else if (pusher_lives(s, tag))
			*under_way = true;
	}
	return n;
}

uint32_t xseg_settle_limbo(struct xseg *s, uint32_t port)
{
	xannotate_happens_after(&xseg_tsan_handoff);
	uint32_t n = 0, failed = 0;
	bool under_way;
	uint32_t *found = malloc(s->nr_requests * sizeof(*found));
	uint8_t *queued = NULL;
	if (!found)
		goto out;   /* left as before: lost */
	uint64_t until = xseg_now_ns() + LIMBO_WAIT_NS;
	while ((n = find_limbo(s, port, found, &under_way)), under_way && xseg_now_ns() < until)
		usleep(LIMBO_WAIT_US);
	if (!n || !(queued = calloc(s->nr_requests, 1)))
		goto out;
	xseg_ring_mark_queued(xseg_req_ring(s, port), queued, s->nr_requests);
	xseg_ring_mark_queued(xseg_rep_ring(s, port), queued, s->nr_requests);
	for (uint32_t k = 0; k < n; k++) {
		struct xseg_request *r = &s->requests[found[k]];
		if (queued[found[k]])
			continue;
		if (load_state(r) == XS_QUEUED) {
			store_state(r, XS_ACCEPTED);   /* as the dead owner took it */
			settle_dead_holders(s, r, port);
			failed++;
		} else {
			store_state(r, XS_RECEIVED);
			settle_stale_reply(s, r, port);
		}
	}
out:
	free(found);
	free(queued);
	return failed;
}

/*
 * The dead owner of `port` may have died inside a push (deliver): the tag
 * names the port as pusher and is not DONE. If the ring holds the request,
 * its taker will have it. If not, either the push never reached the ring
 * or a taker popped it and has not claimed it yet; whoever of the reaper
 * and that taker changes the tag first has it (claim_pushed), and the
 * reaper pushes what it won again, as the dead owner meant to.
 */
uint32_t xseg_resume_pushes(struct xseg *s, uint32_t port)
{
	xannotate_happens_after(&xseg_tsan_handoff);
	uint32_t resumed = 0;
	for (uint32_t i = 0; i < s->nr_requests; i++) {
		struct xseg_request *r = &s->requests[i];
		uint64_t tag = __atomic_load_n(&r->pushing, __ATOMIC_ACQUIRE);
		if (!pushed_by(tag, port) || (tag & PUSH_DONE) || load_state(r) == XS_FREE)
			continue;   /* (a put: xseg_settle_pool) */
		uint32_t to = __atomic_load_n(&r->holder, __ATOMIC_ACQUIRE);
		if (to >= s->nr_ports)
			continue;
		bool reply = tag & PUSH_REPLY;
		struct xseg_ring *ring = reply ? xseg_rep_ring(s, to) : xseg_req_ring(s, to);
		/* The tag deliver starts with: killed after the CAS, this
		 * reaper leaves the next one a push to resume, as before. */
		uint64_t again = xseg_push_tag_base(port, reply) | saved_path_bits(tag) |
				 XSEG_RING_POS_MASK;
		if (xseg_ring_holds(ring, i) ||
		    !__atomic_compare_exchange_n(&r->pushing, &tag, again, false,
						 __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			continue;
		if (deliver(s, r, port, to, ring,
			    reply ? &s->ports[to].replied : &s->ports[to].submitted,
			    reply ? XS_REPLIED : XS_QUEUED,
			    saved_path_bits(tag)) == 0)
			resumed++;
	}
	return resumed;
}

void xseg_mark_pushed_to(struct xseg *s, uint32_t port, uint8_t *to)
{
	for (uint32_t i = 0; i < s->nr_requests; i++) {
		struct xseg_request *r = &s->requests[i];
		uint64_t tag = __atomic_load_n(&r->pushing, __ATOMIC_ACQUIRE);
		uint32_t st = load_state(r);
		if (!pushed_by(tag, port) || (st != XS_QUEUED && st != XS_REPLIED))
			continue;
		uint32_t h = __atomic_load_n(&r->holder, __ATOMIC_ACQUIRE);
		if (h < s->nr_ports)
			to[h] = 1;
	}
}

void xseg_reclaim_port_requests(struct xseg *s, uint32_t port)
{
	struct xseg_request *r;
	uint32_t idx;

	/* What the dead process wrote reached us through the segment. */
	xannotate_happens_after(&xseg_tsan_handoff);
	/* A queued reply is settled as if the dead owner had received it: a
	 * forwarded request still owes its issuer an answer. */
	while (pop_pushed(s, xseg_rep_ring(s, port), &idx)) {
		r = &s->requests[idx];
		set_holder(r, port);
		store_state(r, XS_RECEIVED);
		settle_stale_reply(s, r, port);
	}
	for (uint32_t i = 0; i < s->nr_requests; i++) {
		r = &s->requests[i];
		if (__atomic_load_n(&r->holder, __ATOMIC_ACQUIRE) != port)
			continue;
		uint32_t st = load_state(r);
		if (st != XS_ALLOCATED && st != XS_RECEIVED && st != XS_ACCEPTED)
			continue;
		uint64_t tag = __atomic_load_n(&r->pushing, __ATOMIC_ACQUIRE);
		/* Another port's push to this one, under way: it marks the
		 * request ours before it marks it queued. Not the dead owner's
		 * to settle: the push goes on (or its pusher's reaper resumes
		 * it). Settled here, it went back to the pool, its buffer freed,
		 * while the push queued it. */
		if (tag >> PUSH_PUSHER_SHIFT && !pushed_by(tag, port) && !(tag & PUSH_DONE))
			continue;
		/* Died answering it, before it marked it for the next hop: the
		 * return path as it was before the answer began. */
		if (pushed_by(tag, port) && (tag & (PUSH_SAVED | PUSH_DONE)) == PUSH_SAVED)
			r->path_len = saved_path_len(tag);
		settle_dead_holders(s, r, port);
	}
}
