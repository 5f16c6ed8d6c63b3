/*
 * Owners come and go: binding a port (taking over a dead owner's and
 * settling what it left), leaving one (settling what it still has),
 * reaping the ports of owners that died, and the pool's sweep of them when
 * it runs dry. Above port.c (ownership) and request.c (settling).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "xseg_internal.h"

/* What a dead owner held at `port`, which this process now owns, what it
 * was pushing elsewhere, and what it had popped and not yet marked.
 * Returns how many of the last were failed back (xseg_settle_limbo). */
static uint32_t settle_dead_owner(struct xseg *s, uint32_t port)
{
	xseg_reclaim_port_requests(s, port);
	xseg_resume_pushes(s, port);
	xseg_settle_pool(s, port);
	uint32_t limbo = xseg_settle_limbo(s, port);
	atomic_store(&s->ports[port].reserved, 0);   /* reclaimed just now */
	return limbo;
}

static void settle_pushed_elsewhere(struct xseg *s, uint32_t port);

static int bind_group(struct xseg *s, uint32_t first, uint32_t last, bool lanes)
{
	int rc = 0;

	if (!s)
		return xseg_fail(EINVAL, "bind: no segment");
	if (first > last || last >= s->nr_ports)
		return xseg_fail(EINVAL, "bind: port range %u..%u outside 0..%u", first, last,
				 s->nr_ports - 1);
	pthread_mutex_lock(&s->bind_lock);
	uint32_t p;
	bool took_over = false;
	for (p = first; p <= last; p++) {
		if ((rc = xseg_port_take(s, p, false)) < 0)
			break;
		if (rc == 1) {
			settle_dead_owner(s, p);
			took_over = true;
		}
		rc = 0;
		s->bound[p] = 1;
	}
	if (rc < 0) {
		while (p-- > first) {
			xseg_port_release(s, p);
			s->bound[p] = 0;
		}
	} else {
		xseg_port_set_group(s, first, last);
		if (lanes)
			xseg_port_set_lanes(s, first, last);
	}
	pthread_mutex_unlock(&s->bind_lock);
	if (took_over) {
		xseg_full_fence();
		for (p = first; p <= last; p++)
			settle_pushed_elsewhere(s, p);
	}
	return rc;
}

int xseg_bind_range(struct xseg *s, uint32_t first, uint32_t last)
{
	return bind_group(s, first, last, false);
}

int xseg_bind_lanes(struct xseg *s, uint32_t first, uint32_t last)
{
	return bind_group(s, first, last, true);
}

int xseg_bind_port(struct xseg *s, uint32_t port)
{
	return xseg_bind_range(s, port, port);
}

/* The owner died; or the port is unbound and a request or a reply slipped
 * into its queues in the instant its owner left or was reaped. */
static bool needs_reap(struct xseg *s, uint32_t port, uint64_t owner)
{
	if (owner)
		return !xseg_owner_is_self(owner) && !xseg_owner_alive(owner);
	return xseg_ring_nonempty(xseg_req_ring(s, port)) ||
	       xseg_ring_nonempty(xseg_rep_ring(s, port));
}

/* Reaps `port` again when it is unbound (the reap itself looks whether
 * anything is queued there). See settle_if_released below. */
static void reap_if_unbound(struct xseg *s, uint32_t port)
{
	if (!atomic_load(&s->ports[port].owner))
		xseg_reap_port(s, port, EHOSTDOWN);
}

/*
 * What was pushed in the name of `port` onto another port's queues, by
 * its owner now dead or by our reap or leave of it, may have landed after
 * that port's owner left and looked at its queues for the last time. A
 * live pusher looks at the owner after its push (settle_if_released); one
 * killed in between never did (the request stayed on a queue nobody
 * takes from, its client waiting for ever), nor did a reap's or a leave's
 * own pushes: we look in their stead. (After a full fence.)
 */
static void settle_pushed_elsewhere(struct xseg *s, uint32_t port)
{
	uint8_t *to = calloc(s->nr_ports, 1);
	if (!to)
		return;
	xseg_mark_pushed_to(s, port, to);
	for (uint32_t q = 0; q < s->nr_ports; q++)
		if (to[q] && q != port)
			reap_if_unbound(s, q);
	free(to);
}

/* Our release of `port` is done: what a pusher that saw it owned put on
 * its queues since is settled now (see settle_if_released). */
static void settle_slipped(struct xseg *s, uint32_t port)
{
	xseg_full_fence();
	reap_if_unbound(s, port);
}

/* Before a leave or a reap releases `port` (the caller holds the bind
 * lock, dropped meanwhile: the reaps below take it): killed after the
 * release, the port left to nobody, nobody would look again. */
static void settle_pushed_before_release(struct xseg *s, uint32_t port)
{
	pthread_mutex_unlock(&s->bind_lock);
	xseg_full_fence();
	settle_pushed_elsewhere(s, port);
	pthread_mutex_lock(&s->bind_lock);
}

int xseg_leave_port(struct xseg *s, uint32_t port)
{
	if (!xseg_port_valid(s, port))
		return xseg_fail(EINVAL, "leave: port %u out of range", port);
	if (!xseg_port_owned_here(s, port))
		return xseg_fail(EPERM, "leave: port %u is not bound by this process", port);
	pthread_mutex_lock(&s->bind_lock);
	/* Nothing of this port may stay behind held by nobody: what is
	 * queued for it (on along the route when it was only a hop, as a
	 * cache unplugged at its stop), what it holds, what came back. */
	xseg_pass_on_queued_requests(s, port);
	xseg_reclaim_port_requests(s, port);
	atomic_store(&s->ports[port].reserved, 0);
	settle_pushed_before_release(s, port);
	xseg_port_ungroup(s, port);
	xseg_port_release(s, port);
	s->bound[port] = 0;
	pthread_mutex_unlock(&s->bind_lock);
	settle_slipped(s, port);
	return 0;
}

int xseg_reap_port(struct xseg *s, uint32_t port, int err)
{
	if (!xseg_port_valid(s, port))
		return xseg_fail(EINVAL, "reap: port %u out of range", port);
	if (err <= 0)
		return xseg_fail(EINVAL, "reap: error %d is not an errno", err);
	struct xseg_port_shm *p = &s->ports[port];
	uint64_t owner = atomic_load(&p->owner);
	if (!needs_reap(s, port, owner))
		return 0;
	pthread_mutex_lock(&s->bind_lock);
	/* Announced before the takeover: a binder that finds us owning the
	 * port waits for the reap instead of failing. A count: two clients
	 * may reap at once (one of them finds nothing to do). */
	atomic_fetch_add(&p->reaping, 1);
	/* A new owner may have bound it since: decide again. */
	if (!needs_reap(s, port, atomic_load(&p->owner)) || xseg_port_take(s, port, true) < 0) {
		atomic_fetch_sub(&p->reaping, 1);
		pthread_mutex_unlock(&s->bind_lock);
		return 0;
	}
	s->bound[port] = 1;
	uint32_t limbo = settle_dead_owner(s, port);
	/* A dead owner's queue goes on past it, unless it says it held data
	 * the route past it lacks (a dirty cache: fail closed): the dead
	 * never saw those requests, and routing sends every later one past
	 * it too. So does what slipped into the queue of a port left or
	 * reaped (owner 0 here), as a submit would now that nobody serves
	 * it: failed because the route still named the port, a request
	 * racing the reap of a crashed clean cache failed EHOSTDOWN. */
	uint32_t failed = limbo + xseg_pass_on_dead_queue(s, port, err);
	settle_pushed_before_release(s, port);
	xseg_port_ungroup(s, port);
	xseg_port_release(s, port);
	atomic_fetch_sub(&p->reaping, 1);
	s->bound[port] = 0;
	pthread_mutex_unlock(&s->bind_lock);
	settle_slipped(s, port);
	return 1 + (int)failed;
}

/*
 * A push that saw the port owned (by its old owner, or by us reaping it)
 * can land after the queue was emptied and the port released: on an
 * unbound port, where nobody takes it. Both sides look after their own
 * step (Dekker's order, a full fence each): the one that released looks
 * at the queues (settle_slipped, above), the pusher at the owner (here),
 * so at least one of them sees the request and reaps the port again,
 * which passes it on where the route leads or fails it back.
 */
static int settle_if_released(struct xseg *s, int to)
{
	if (to >= 0)
		reap_if_unbound(s, (uint32_t)to);   /* after deliver's fence */
	return to;
}

int xseg_submit(struct xseg *s, struct xseg_request *req, uint32_t from, uint32_t dst)
{
	return settle_if_released(s, xseg_push_request(s, req, from, dst));
}

int xseg_forward(struct xseg *s, struct xseg_request *req, uint32_t from, uint32_t dst)
{
	return xseg_submit(s, req, from, dst);
}

int xseg_respond(struct xseg *s, struct xseg_request *req, uint32_t from)
{
	return settle_if_released(s, xseg_push_reply(s, req, from));
}

int xseg_reap_dead_peers(struct xseg *s)
{
	int reaped = 0;

	if (!s)
		return xseg_fail(EINVAL, "reap: no segment");
	for (uint32_t w = 0; w < (s->nr_ports + 63) / 64; w++) {
		uint64_t bits = atomic_load_explicit(&s->contacts[w], memory_order_relaxed);
		while (bits) {
			uint32_t port = w * 64 + (uint32_t)__builtin_ctzll(bits);
			bits &= bits - 1;
			if (xseg_reap_port(s, port, EHOSTDOWN) > 0)
				reaped++;
		}
	}
	return reaped;
}

/* One caller per interval: the reap reads /proc for every contact. */
static bool take_turn(_Atomic uint64_t *next_ns, uint64_t interval_ns)
{
	uint64_t now = xseg_now_ns(), next = atomic_load_explicit(next_ns, memory_order_relaxed);
	return now >= next &&
	       atomic_compare_exchange_strong(next_ns, &next, now + interval_ns);
}

void xseg_reap_dead_peers_rate_limited(struct xseg *s)
{
	if (take_turn(&s->next_peer_reap_ns, 100000000ull))
		xseg_reap_dead_peers(s);
}

int xseg_reap_all_dead(struct xseg *s)
{
	int reaped = 0;

	if (!take_turn(&s->next_pool_sweep_ns, 100000000ull))
		return 0;
	for (uint32_t port = 0; port < s->nr_ports; port++) {
		uint64_t owner = atomic_load_explicit(&s->ports[port].owner, memory_order_relaxed);
		if (owner && !xseg_owner_is_self(owner) &&
		    xseg_reap_port(s, port, EHOSTDOWN) > 0)
			reaped++;
	}
	return reaped;
}

struct xseg_request *xseg_get_request(struct xseg *s, uint32_t src)
{
	if (!xseg_port_valid(s, src)) {
		errno = -xseg_fail(EINVAL, "get request: port %u out of range", src);
		return NULL;
	}
	if (!xseg_port_owned_here(s, src)) {
		errno = -xseg_fail(EPERM, "get request: port %u is not bound by this process", src);
		return NULL;
	}
	struct xseg_request *r = xseg_pool_take(s, src);
	if (!r && xseg_reap_all_dead(s))
		r = xseg_pool_take(s, src);
	if (!r)
		errno = -xseg_pool_explain_empty(s, src);
	return r;
}
