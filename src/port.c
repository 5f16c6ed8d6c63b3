/*
 * Ports: the primitives of ownership (take a port from nobody or from a
 * dead owner, release it, groups, epochs), routing (next hops) and
 * per-port information. Binding, leaving and reaping, which also settle
 * requests, are in owners.c, above this file and request.c.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "xseg_internal.h"

bool xseg_port_owned_here(struct xseg *s, uint32_t port)
{
	uint64_t owner = atomic_load_explicit(&s->ports[port].owner, memory_order_relaxed);
	return xseg_owner_is_self(owner);
}

void xseg_port_set_group(struct xseg *s, uint32_t first, uint32_t last)
{
	for (uint32_t p = first; p <= last; p++)
		atomic_store(&s->ports[p].group_leader, first);
	atomic_store(&s->ports[first].group_first, first);
	atomic_store(&s->ports[first].group_count, last - first + 1);
	atomic_store(&s->ports[first].lanes, 0);
}

void xseg_port_set_lanes(struct xseg *s, uint32_t first, uint32_t last)
{
	atomic_store(&s->ports[first].lanes, last > first ? last - first + 1 : 0);
}

/*
 * Lanes split one service's request queue by submitter, so that clients
 * and workers do not all meet on one ring's head and tail (on 16 cores one
 * ring served about 2.5M requests a second however many threads took from
 * it). A submitter always gets the same lane: its requests stay in order
 * on one ring. A lane whose owner is not the leader's (left, or bound
 * apart after a takeover) is not used: the request goes to the leader.
 */
uint32_t xseg_lane_for(struct xseg *s, uint32_t to, uint32_t from)
{
	uint32_t lanes = atomic_load_explicit(&s->ports[to].lanes, memory_order_relaxed);
	if (lanes < 2 || lanes > s->nr_ports - to)
		return to;
	uint32_t lane = to + from % lanes;
	if (lane == to || atomic_load_explicit(&s->ports[lane].owner, memory_order_relaxed) !=
			  atomic_load_explicit(&s->ports[to].owner, memory_order_relaxed))
		return to;
	return lane;
}

/* A new owner, or none: a new epoch, so that replies for the old one are
 * told apart from the new one's (request.c). */
static void next_epoch(struct xseg_port_shm *p)
{
	atomic_fetch_add_explicit(&p->epoch, 1, memory_order_release);
}

/*
 * Takes `port` for this process, from nobody (returns 0) or from a dead
 * owner (returns 1: the caller settles what the dead owner held).
 */
int xseg_port_take(struct xseg *s, uint32_t port, bool reaper)
{
	struct xseg_port_shm *p = &s->ports[port];
	uint64_t me = xseg_self_owner_word();
	uint64_t cur = atomic_load(&p->owner);
	unsigned reap_waits = 0;

	if (!me) {
		int err = errno;
		return xseg_fail(err, "cannot read this process's start time from /proc: %s",
				 strerror(err));
	}
	for (;;) {
		if (cur == 0) {
			if (atomic_compare_exchange_strong(&p->owner, &cur, me)) {
				next_epoch(p);
				return 0;
			}
			continue;
		}
		if (xseg_owner_is_self(cur))
			return xseg_fail(EBUSY, "port %u is already bound by this process", port);
		bool alive = xseg_owner_alive(cur);
		/* A live owner while a reap is announced is the reaper, for
		 * microseconds. A dead one we take over now: a live reaper then
		 * finds us its owner and does nothing, and a count left by a
		 * reaper killed mid-reap would otherwise cost every bind 1 s. */
		if (!reaper && alive && atomic_load(&p->reaping) && reap_waits++ < 10000) {
			usleep(100);
			cur = atomic_load(&p->owner);
			continue;
		}
		if (alive)
			return xseg_fail(EBUSY, "port %u is bound by live pid %d", port,
					 (int)xseg_owner_pid(cur));
		if (atomic_compare_exchange_strong(&p->owner, &cur, me)) {
			next_epoch(p);
			/* Threads of the dead owner asleep here died with it; a
			 * count they left would cost every submit a futex call. */
			atomic_store(&p->waiters, 0);
			atomic_store(&p->wake_pending, 0);
			return 1;
		}
	}
}

/*
 * The ports from..to that still follow `leader` become groups of their own
 * (each run of them one). A port of a dead owner's range that a live peer
 * took over with a range of its own follows that peer's leader: the reap
 * of the dead owner's other ports must leave it there (it was regrouped
 * under a dead port: its peer's waits slept on the wrong word, its lanes
 * ended).
 */
static void regroup_followers(struct xseg *s, uint32_t leader, uint32_t from, uint32_t to)
{
	for (uint32_t p = from; p <= to; p++) {
		if (atomic_load(&s->ports[p].group_leader) != leader)
			continue;
		uint32_t q = p;
		while (q < to && atomic_load(&s->ports[q + 1].group_leader) == leader)
			q++;
		xseg_port_set_group(s, p, q);
		p = q;
	}
}

/*
 * Takes `port` out of the group it was bound in: the ports before and after
 * it stay groups of their own, so that a wait on any of them still sees its
 * own queues (they kept pointing at a leader whose group no longer covered
 * them). Sleepers on the old leader's word are woken to look again.
 */
void xseg_port_ungroup(struct xseg *s, uint32_t port)
{
	uint32_t leader = atomic_load(&s->ports[port].group_leader);
	if (leader >= s->nr_ports)
		return;
	uint32_t first = atomic_load(&s->ports[leader].group_first);
	uint32_t count = atomic_load(&s->ports[leader].group_count);
	if (first != leader || count < 2 || count > s->nr_ports - first ||
	    port < first || port >= first + count)
		return;
	uint32_t last = first + count - 1;
	if (port > first)
		regroup_followers(s, leader, first, port - 1);
	if (port < last)
		regroup_followers(s, leader, port + 1, last);
	xseg_port_set_group(s, port, port);
	xseg_wake_all(s, leader);
}

void xseg_port_release(struct xseg *s, uint32_t port)
{
	uint64_t cur = atomic_load(&s->ports[port].owner);
	if (xseg_owner_is_self(cur) &&
	    atomic_compare_exchange_strong(&s->ports[port].owner, &cur, 0))
		next_epoch(&s->ports[port]);
	xseg_port_set_group(s, port, port);
}

int xseg_port_info(struct xseg *s, uint32_t port, struct xseg_port_info *info)
{
	if (!xseg_port_valid(s, port) || !info)
		return xseg_fail(EINVAL, "port info: port %u out of range", port);
	struct xseg_port_shm *p = &s->ports[port];
	uint64_t owner = atomic_load(&p->owner);
	memset(info, 0, sizeof(*info));
	info->port = port;
	info->owner = xseg_owner_pid(owner);
	info->owner_alive = owner ? xseg_owner_alive(owner) : 0;
	info->next_hop = atomic_load(&p->next_hop);
	info->request_depth = xseg_ring_count(xseg_req_ring(s, port));
	info->reply_depth = xseg_ring_count(xseg_rep_ring(s, port));
	info->waiters = atomic_load(&s->ports[atomic_load(&p->group_leader)].waiters);
	info->submitted = atomic_load_explicit(&p->submitted, memory_order_relaxed);
	info->replied = atomic_load_explicit(&p->replied, memory_order_relaxed);
	info->reserved = atomic_load_explicit(&p->reserved, memory_order_relaxed);
	info->epoch = atomic_load_explicit(&p->epoch, memory_order_relaxed);
	info->dropped_replies = atomic_load_explicit(&p->dropped_replies, memory_order_relaxed);
	info->dirty_bytes = atomic_load(&p->dirty_bytes);
	info->given_up = atomic_load(&p->given_up);
	info->given_up_bytes = atomic_load(&p->given_up_bytes);
	return 0;
}

/* ---- a cache's dirty data: fail closed ---------------------------------- */

int xseg_port_set_dirty(struct xseg *s, uint32_t port, uint64_t bytes)
{
	if (!xseg_port_valid(s, port))
		return xseg_fail(EINVAL, "dirty: port %u out of range", port);
	if (!xseg_owner_is_self(atomic_load(&s->ports[port].owner)))
		return xseg_fail(EPERM, "dirty: port %u is not bound by this process", port);
	/* seq_cst: ordered against the owner's own bookkeeping around it */
	if (atomic_load(&s->ports[port].dirty_bytes) != bytes)
		atomic_store(&s->ports[port].dirty_bytes, bytes);
	return 0;
}

int xseg_port_give_up_dirty(struct xseg *s, uint32_t port, uint64_t *bytes)
{
	if (!xseg_port_valid(s, port))
		return xseg_fail(EINVAL, "dirty: port %u out of range", port);
	uint64_t owner = atomic_load(&s->ports[port].owner);
	if (owner && xseg_owner_alive(owner))
		return xseg_fail(EBUSY, "port %u is served by live pid %d: it writes back its "
				 "own data (unplug without --force)", port, (int)xseg_owner_pid(owner));
	uint64_t was = atomic_exchange(&s->ports[port].dirty_bytes, 0);
	if (was) {
		atomic_fetch_add(&s->ports[port].given_up_bytes, was);
		atomic_fetch_add(&s->ports[port].given_up, 1);
	}
	if (bytes)
		*bytes = was;
	return 0;
}

/* ---- routing ------------------------------------------------------------ */

/* Routes are single stores, always whole: a holder that died left nothing
 * to repair. */
static void route_lock(struct xseg *s)
{
	if (pthread_mutex_lock(&s->hdr->route_lock) == EOWNERDEAD)
		pthread_mutex_consistent(&s->hdr->route_lock);
}

static void route_unlock(struct xseg *s)
{
	pthread_mutex_unlock(&s->hdr->route_lock);
}

/* The most hops from any port's chain start to `port` (0: none reaches it). */
static uint32_t hops_behind(struct xseg *s, uint32_t port)
{
	uint32_t most = 0;
	for (uint32_t d = 0; d < s->nr_ports; d++) {
		uint32_t cur = d;
		for (uint32_t k = 1; k <= XSEG_MAX_PATH; k++) {
			cur = atomic_load_explicit(&s->ports[cur].next_hop, memory_order_relaxed);
			if (cur >= s->nr_ports)
				break;
			if (cur == port) {
				most = k > most ? k : most;
				break;
			}
		}
	}
	return most;
}

/* Stores port -> next (XSEG_NO_PORT: none) if the checks pass and, when
 * `check_old`, port's hop is still `old`. */
static int change_next_hop(struct xseg *s, uint32_t port, bool check_old, uint32_t old,
			   uint32_t next)
{
	if (!xseg_port_valid(s, port))
		return xseg_fail(EINVAL, "route: port %u out of range", port);
	if (next != XSEG_NO_PORT || !check_old) {
		if (!xseg_port_valid(s, next))
			return xseg_fail(EINVAL, "route: next hop %u out of range", next);
		if (next == port)
			return xseg_fail(ELOOP, "route: port %u cannot be its own next hop", port);
		/* Routes name services: a lane in a chain would route a cache's own
		 * requests back to itself (the chain would not hold its service). */
		uint32_t lead = xseg_lane_leader(s, next);
		if (lead != next)
			return xseg_fail(EINVAL, "route: next hop %u is a lane of port %u: route via %u",
					 next, lead, lead);
		if ((lead = xseg_lane_leader(s, port)) != port)
			return xseg_fail(EINVAL, "route: port %u is a lane of port %u: route port %u",
					 port, lead, lead);
	}
	/* Refuse a cycle: walking on from `next` must not come back to `port`.
	 * Under the route lock: two changes that each pass the check alone
	 * (a -> b beside b -> a) must not both be stored. */
	route_lock(s);
	uint32_t cur = next;
	if (check_old && (cur = atomic_load(&s->ports[port].next_hop)) != old) {
		route_unlock(s);
		return xseg_fail(EAGAIN, "route: port %u was re-routed meanwhile (next hop %u)",
				 port, cur);
	}
	cur = next;
	uint32_t after = 0;
	for (uint32_t steps = 0; next != XSEG_NO_PORT && steps < XSEG_MAX_PATH; steps++) {
		cur = atomic_load(&s->ports[cur].next_hop);
		if (cur == XSEG_NO_PORT)
			break;
		if (cur == port) {
			route_unlock(s);
			return xseg_fail(ELOOP, "route: %u -> %u would close a cycle", port, next);
		}
		after++;
	}
	if (cur != XSEG_NO_PORT) {
		route_unlock(s);
		return xseg_fail(ELOOP, "route: chain from %u is longer than %u hops", next,
				 XSEG_MAX_PATH);
	}
	/* The whole chain counts, hops behind `port` too: resolve_route
	 * walks XSEG_MAX_PATH hops, and a longer chain's front would be cut
	 * out of its path (a cache there bypassed). And a request through it
	 * takes a return-path entry per hop but the last, plus its client's:
	 * XSEG_MAX_PATH - 1 hops at most, or the last forward fails E2BIG. */
	uint32_t before = next == XSEG_NO_PORT ? 0 : hops_behind(s, port);
	if (before + 1 + after > XSEG_MAX_PATH - 1) {
		route_unlock(s);
		return xseg_fail(ELOOP, "route: %u -> %u would make a chain of %u hops, longer "
				 "than %u", port, next, before + 1 + after, XSEG_MAX_PATH - 1);
	}
	atomic_store(&s->ports[port].next_hop, next);
	route_unlock(s);
	return 0;
}

int xseg_set_next_hop(struct xseg *s, uint32_t port, uint32_t next)
{
	return change_next_hop(s, port, false, 0, next);
}

int xseg_replace_next_hop(struct xseg *s, uint32_t port, uint32_t old, uint32_t next)
{
	return change_next_hop(s, port, true, old, next);
}

int xseg_clear_next_hop(struct xseg *s, uint32_t port)
{
	if (!xseg_port_valid(s, port))
		return xseg_fail(EINVAL, "route: port %u out of range", port);
	/* Locked too: a replace checks the old hop and stores under the
	 * lock, and must not store over a clear that came in between. */
	route_lock(s);
	atomic_store(&s->ports[port].next_hop, XSEG_NO_PORT);
	route_unlock(s);
	return 0;
}

int xseg_splice_out(struct xseg *s, uint32_t port)
{
	if (!xseg_port_valid(s, port))
		return xseg_fail(EINVAL, "route: port %u out of range", port);
	/* No checks: routing around a hop closes no cycle and makes no chain
	 * longer. Each store is whole; a request resolved between two of
	 * them reaches `port` or its front, both still in the path. */
	route_lock(s);
	uint32_t front = atomic_load(&s->ports[port].next_hop);
	int routed = 0;
	for (uint32_t p = 0; p < s->nr_ports; p++) {
		if (p != port && atomic_load(&s->ports[p].next_hop) == port) {
			atomic_store(&s->ports[p].next_hop, front);
			routed++;
		}
	}
	atomic_store(&s->ports[port].next_hop, XSEG_NO_PORT);
	route_unlock(s);
	return routed;
}

unsigned xseg_port_lanes(struct xseg *s, uint32_t port)
{
	if (!xseg_port_valid(s, port))
		return 0;
	uint32_t lanes = atomic_load_explicit(&s->ports[port].lanes, memory_order_relaxed);
	return lanes > 1 && lanes <= s->nr_ports - port ? lanes : 0;
}

uint32_t xseg_get_next_hop(struct xseg *s, uint32_t port)
{
	if (!xseg_port_valid(s, port))
		return XSEG_NO_PORT;
	return atomic_load(&s->ports[port].next_hop);
}

uint32_t xseg_lane_leader(struct xseg *s, uint32_t port)
{
	if (port >= s->nr_ports)
		return port;
	uint32_t leader = atomic_load_explicit(&s->ports[port].group_leader, memory_order_relaxed);
	if (leader >= port)
		return port;
	uint32_t lanes = atomic_load_explicit(&s->ports[leader].lanes, memory_order_relaxed);
	return port - leader < lanes ? leader : port;
}

bool xseg_route_reaches(struct xseg *s, uint32_t dst, uint32_t port)
{
	uint32_t cur = dst;
	port = xseg_lane_leader(s, port);
	for (uint32_t steps = 0; steps < XSEG_MAX_PATH && cur < s->nr_ports; steps++) {
		cur = atomic_load_explicit(&s->ports[cur].next_hop, memory_order_acquire);
		if (cur == port)
			return true;
	}
	return false;
}

/*
 * The chain of a port is dst, next_hop(dst), next_hop(next_hop(dst)), ...:
 * each hop sits in front of the one before it. A submit from outside the
 * chain goes to its front; a submit from a hop in the chain goes to the hop
 * behind it, so a cache in front of a blocker reaches the blocker. An
 * unbound hop is left out of the chain (a peer that left does not swallow
 * requests), unless it says it holds dirty data: then the chain ends there.
 */
uint32_t xseg_resolve_route(struct xseg *s, uint32_t from, uint32_t dst)
{
	return xseg_resolve_route_past(s, from, dst, XSEG_NO_PORT, NULL, 0);
}

/* Whether `port` (a service) is `from` or on the return path. */
static bool passed(struct xseg *s, uint32_t port, uint32_t from,
		   const struct xseg_path_hop *path, uint32_t path_len)
{
	if (port == from)
		return true;
	for (uint32_t i = 0; i < path_len && i < XSEG_MAX_PATH; i++)
		if (xseg_lane_leader(s, path[i].port) == port)
			return true;
	return false;
}

/* As xseg_resolve_route, `gone` counted as unbound (its reaper owns it for
 * the reap), and never back to a hop on the request's return path: a hop
 * that passed the request on waits for its reply, and taking it again as
 * new would send it twice. The request goes behind the deepest hop of the
 * chain it has passed: a cache unplugged from the middle of 1 <- 3 <- 4
 * forwards what 4 lent it, and the chain is 1 <- 4 now; the front is 4. */
uint32_t xseg_resolve_route_past(struct xseg *s, uint32_t from, uint32_t dst, uint32_t gone,
				 const struct xseg_path_hop *path, uint32_t path_len)
{
	uint32_t chain[XSEG_MAX_PATH + 1];
	uint32_t n = 0, cur = dst;

	if (!xseg_port_valid(s, dst))
		return XSEG_NO_PORT;
	/* A lane stands where its service does (a cache with lanes forwards
	 * from the lane a request came in on, and must reach what is behind). */
	from = xseg_lane_leader(s, from);
	chain[n++] = dst;
	for (uint32_t steps = 0; steps < XSEG_MAX_PATH && n <= XSEG_MAX_PATH; steps++) {
		uint32_t next = atomic_load_explicit(&s->ports[cur].next_hop, memory_order_acquire);
		if (next >= s->nr_ports)
			break;
		cur = next;
		/* A hop nobody serves is skipped, unless a cache left it
		 * holding dirty data: then the route ends there (submit fails).
		 * Skipped, not the end: the hops in front of it stay in the
		 * path (a live cache there may hold newer data than behind). */
		if ((next == gone || !atomic_load_explicit(&s->ports[next].owner,
							    memory_order_relaxed)) &&
		    !atomic_load(&s->ports[next].dirty_bytes))
			continue;
		chain[n++] = next;
	}
	if (n == 1)   /* no route: whoever sends it, it goes to dst */
		return dst;
	for (uint32_t k = 0; k < n; k++)
		if (passed(s, chain[k], from, path, path_len))
			return k == 0 ? dst : chain[k - 1];
	return chain[n - 1];
}
