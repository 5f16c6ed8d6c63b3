/*
 * The segment side of peer_main (peer.c): joining and binding, the
 * cookie salt, reaping dead peers, and whether a cache in front of us is
 * still writing back.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <unistd.h>

#include "runtime.h"

/*
 * From the main thread, at most ten times a second: a peer we sent to that died
 * (SIGKILL, a crash) never answers, and a client we answered that died
 * leaves its replies and requests behind. Reaping their ports (libxseg
 * remembers whom this process sent and replied to) fails what the dead
 * held and what is queued for them back, so callbacks run and nothing
 * waits for the dead; new sends to them fail ENOENT until a peer binds
 * the port again.
 */
void peer_reap_dead_peers(struct peer *p)
{
	/* The stop loops wake every 10 ms; a reap reads /proc per contact. */
	static uint64_t next_ns;
	uint64_t now = xseg_now_ns();
	if (now < next_ns)
		return;
	next_ns = now + 100000000ull;
	int n = xseg_reap_dead_peers(p->seg);
	if (n > 0)
		peer_warn("reaped %d port(s) whose owner died: requests queued there or "
			  "held failed back (EHOSTDOWN, EPIPE), the rest returned to the pool", n);
}


/* The high half of our cookies: a previous incarnation's replies differ. */
uint64_t peer_make_salt(void)
{
	uint64_t x = xseg_now_ns() ^ ((uint64_t)getpid() << 20) ^ (uint64_t)(uintptr_t)&x;
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x &= 0xffffffffu;
	return x ? x : 1;
}


int peer_join_and_bind(struct peer *p)
{
	struct xseg_segment_info si;
	int rc = xseg_join(p->cfg.segment, &p->seg);
	if (rc < 0) {
		peer_error("--segment: '%s' cannot be joined: %s", p->cfg.segment,
			   xseg_last_error());
		p->seg = NULL;
		/* No such segment, or not a name: the argument is wrong. */
		return rc == -ENOENT || rc == -EINVAL || rc == -ENAMETOOLONG ? -2 : -1;
	}
	if (xseg_segment_info(p->seg, &si) < 0 || p->cfg.port_last >= si.nr_ports) {
		peer_error("--port %u-%u%s: segment '%s' has ports 0..%u", p->cfg.port_first,
			   p->cfg.port_last, p->cfg.lanes > 1 ? " (with its lanes)" : "",
			   p->cfg.segment, si.nr_ports - 1);
		return -2;
	}
	p->nr_requests = si.nr_requests;
	p->nr_ports = si.nr_ports;
	p->slots = calloc(si.nr_requests, sizeof(*p->slots));
	p->accept_tick = calloc(si.nr_requests, sizeof(*p->accept_tick));
	if (!p->slots || !p->accept_tick) {
		peer_error("out of memory for %u request slots", si.nr_requests);
		return -1;
	}
	/* Looked at before the bind: bound, the port would be routed the
	 * blocker's requests at once, and leaving it passes them on to the
	 * blocker, past the data the mark stands for. Only a live owner sets
	 * the mark, and a live owner makes the bind fail anyway. */
	for (uint32_t port = p->cfg.port_first; !p->ops->keeps_dirty_mark &&
	     port <= p->cfg.port_last; port++) {
		struct xseg_port_info pi;
		if (xseg_port_info(p->seg, port, &pi) == 0 && pi.dirty_bytes &&
		    !(pi.owner && pi.owner_alive)) {
			peer_error("port %u was left by a cache holding %" PRIu64 " dirty bytes: "
				   "requests routed there fail until that cache is started again on "
				   "its persist file, or the data is given up with xseg unplug --force "
				   "--via %u; not serving it", port, pi.dirty_bytes, port);
			return -1;
		}
	}
	struct xseg_port_info pi;
	if (p->ops->enters_by_plug && xseg_port_info(p->seg, p->cfg.port_first, &pi) == 0 &&
	    !pi.dirty_bytes && !(pi.owner && pi.owner_alive)) {
		int routed = xseg_splice_out(p->seg, p->cfg.port_first);
		if (routed > 0)
			peer_log(PEER_LOG_WARN, "port %u was still routed to (from %d port(s)), left "
				 "by a cache that died in the path or during a plug: taken out of "
				 "the route before serving; xseg plug puts it back once the blocker "
				 "is drained", p->cfg.port_first, routed);
	}
	if ((p->cfg.lanes > 1 ? xseg_bind_lanes : xseg_bind_range)(p->seg, p->cfg.port_first,
								    p->cfg.port_last) < 0) {
		peer_error("cannot bind --port %u-%u: %s", p->cfg.port_first, p->cfg.port_last,
			   xseg_last_error());
		return -1;
	}
	/* A few requests of our own for when clients hold the whole pool
	 * (xseg.h: xseg_reserve): we then serve them one by one, not never. */
	if (!p->ops->reserve_requests)
		return 0;
	p->reserve = xseg_reserve_create(p->seg, p->cfg.port_first, 0);
	if (!p->reserve) {
		peer_error("cannot set requests aside: %s", xseg_last_error());
		return -1;
	}
	return 0;
}

/*
 * A cache plugged in front of one of our ports (a hop of the chain in
 * front of it, bound by a live process) still writes back to us: the port
 * it is in front of, or XSEG_NO_PORT. The whole chain: past a dead hop (a
 * clean cache killed, which routing skips) a live cache is still in the
 * path, its dirty data bound for us.
 */
uint32_t peer_port_behind_a_cache(struct peer *p, uint32_t *cache)
{
	for (uint32_t port = p->cfg.port_first; port <= p->cfg.port_last; port++) {
		uint32_t hop = xseg_get_next_hop(p->seg, port);
		for (uint32_t steps = 0; hop != XSEG_NO_PORT && steps < XSEG_MAX_PATH; steps++) {
			struct xseg_port_info pi;
			if (xseg_port_info(p->seg, hop, &pi) == 0 && pi.owner && pi.owner_alive &&
			    pi.owner != getpid()) {
				*cache = hop;
				return port;
			}
			hop = xseg_get_next_hop(p->seg, hop);
		}
	}
	return XSEG_NO_PORT;
}
