/*
 * Ports: binding with owner liveness, takeover of a dead owner's port,
 * routing (next hops) and per-port information.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "xseg_internal.h"

static pid_t cached_pid;
static pthread_once_t pid_once = PTHREAD_ONCE_INIT;

static void refresh_pid(void)
{
	cached_pid = getpid();
}

static void init_pid(void)
{
	refresh_pid();
	pthread_atfork(NULL, NULL, refresh_pid);
}

pid_t xseg_self_pid(void)
{
	pthread_once(&pid_once, init_pid);
	return cached_pid;
}

/* Field 22 of /proc/PID/stat: start time in clock ticks since boot. 0
 * with errno ESRCH when the process is gone, with another errno (EMFILE,
 * ENFILE, ENOMEM...) when this process could not look. */
static uint64_t pid_start_time(pid_t pid)
{
	char path[64], buf[1024];
	FILE *f;
	size_t n;
	unsigned long long start = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (!(f = fopen(path, "r"))) {
		if (errno == ENOENT)
			errno = ESRCH;
		return 0;
	}
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	char *p = strrchr(buf, ')');  /* the command name may hold spaces */
	/* after ") " come fields 3..; start time is field 22 */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d "
			 "%*d %*d %*d %*d %llu", &start) != 1) {
		errno = ESRCH;   /* gone while we read */
		return 0;
	}
	return start;
}

uint64_t xseg_owner_word(pid_t pid)
{
	uint64_t start = pid_start_time(pid);
	if (!start)
		return 0;
	return ((start & 0xffffffffu) << 32) | (uint32_t)pid;
}

bool xseg_owner_alive(uint64_t owner)
{
	pid_t pid = xseg_owner_pid(owner);
	if (pid <= 0)
		return false;
	if (kill(pid, 0) < 0 && errno == ESRCH)
		return false;
	/* pid exists: is it the same process, not a recycled pid? */
	uint64_t word = xseg_owner_word(pid);
	if (!word && errno != ESRCH)
		return true;   /* could not look (out of files...): never take a live peer's port */
	return word == owner;
}

static uint64_t self_owner_word(void)
{
	static _Thread_local uint64_t word;
	static _Thread_local pid_t word_pid;
	pid_t me = xseg_self_pid();
	if (word_pid != me || !word) {   /* a failed look (EMFILE) is not kept */
		word = xseg_owner_word(me);
		word_pid = me;
	}
	return word;
}

bool xseg_port_owned_here(struct xseg *s, uint32_t port)
{
	uint64_t owner = atomic_load_explicit(&s->ports[port].owner, memory_order_relaxed);
	return xseg_owner_pid(owner) == xseg_self_pid();
}

static void set_group(struct xseg *s, uint32_t first, uint32_t last)
{
	for (uint32_t p = first; p <= last; p++)
		atomic_store(&s->ports[p].group_leader, first);
	atomic_store(&s->ports[first].group_first, first);
	atomic_store(&s->ports[first].group_count, last - first + 1);
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
static int take_port(struct xseg *s, uint32_t port, bool reaper)
{
	struct xseg_port_shm *p = &s->ports[port];
	uint64_t me = self_owner_word();
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
		if (xseg_owner_pid(cur) == xseg_self_pid())
			return xseg_fail(EBUSY, "port %u is already bound by this process", port);
		if (!reaper && atomic_load(&p->reaping) && reap_waits++ < 10000) {
			usleep(100);   /* a reap lasts microseconds */
			cur = atomic_load(&p->owner);
			continue;
		}
		if (xseg_owner_alive(cur))
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

/* What a dead owner held at `port`, which this process now owns. */
static void settle_dead_owner(struct xseg *s, uint32_t port)
{
	xseg_reclaim_port_requests(s, port);
	atomic_store(&s->ports[port].reserved, 0);   /* reclaimed just now */
}

/*
 * Takes `port` out of the group it was bound in: the ports before and after
 * it stay groups of their own, so that a wait on any of them still sees its
 * own queues (they kept pointing at a leader whose group no longer covered
 * them). Sleepers on the old leader's word are woken to look again.
 */
static void ungroup(struct xseg *s, uint32_t port)
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
		set_group(s, first, port - 1);
	if (port < last)
		set_group(s, port + 1, last);
	set_group(s, port, port);
	xseg_wake_all(s, leader);
}

static void release_port(struct xseg *s, uint32_t port)
{
	uint64_t cur = atomic_load(&s->ports[port].owner);
	if (xseg_owner_pid(cur) == xseg_self_pid() &&
	    atomic_compare_exchange_strong(&s->ports[port].owner, &cur, 0))
		next_epoch(&s->ports[port]);
	set_group(s, port, port);
}

int xseg_bind_range(struct xseg *s, uint32_t first, uint32_t last)
{
	int rc = 0;

	if (!s)
		return xseg_fail(EINVAL, "bind: no segment");
	if (first > last || last >= s->nr_ports)
		return xseg_fail(EINVAL, "bind: port range %u..%u outside 0..%u", first, last,
				 s->nr_ports - 1);
	pthread_mutex_lock(&s->bind_lock);
	uint32_t p;
	for (p = first; p <= last; p++) {
		if ((rc = take_port(s, p, false)) < 0)
			break;
		if (rc == 1)
			settle_dead_owner(s, p);
		rc = 0;
		s->bound[p] = 1;
	}
	if (rc < 0) {
		while (p-- > first) {
			release_port(s, p);
			s->bound[p] = 0;
		}
	} else {
		set_group(s, first, last);
	}
	pthread_mutex_unlock(&s->bind_lock);
	return rc;
}

int xseg_bind_port(struct xseg *s, uint32_t port)
{
	return xseg_bind_range(s, port, port);
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
	ungroup(s, port);
	release_port(s, port);
	s->bound[port] = 0;
	pthread_mutex_unlock(&s->bind_lock);
	return 0;
}

/* The owner died; or the port is unbound and a request or a reply slipped
 * into its queues in the instant its owner left or was reaped. */
static bool needs_reap(struct xseg *s, uint32_t port, uint64_t owner)
{
	if (owner)
		return xseg_owner_pid(owner) != xseg_self_pid() && !xseg_owner_alive(owner);
	return xseg_ring_nonempty(xseg_req_ring(s, port)) ||
	       xseg_ring_nonempty(xseg_rep_ring(s, port));
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
	if (!needs_reap(s, port, atomic_load(&p->owner)) || take_port(s, port, true) < 0) {
		atomic_fetch_sub(&p->reaping, 1);
		pthread_mutex_unlock(&s->bind_lock);
		return 0;
	}
	s->bound[port] = 1;
	settle_dead_owner(s, port);
	/* A dead owner's queue fails (it may have held data the route past
	 * it lacks: a cache); what slipped into a cleanly left port's queue
	 * goes on where the route leads now. */
	uint32_t failed = owner ? xseg_fail_queued_requests(s, port, err)
				: xseg_pass_on_queued_requests(s, port);
	ungroup(s, port);
	release_port(s, port);
	atomic_fetch_sub(&p->reaping, 1);
	s->bound[port] = 0;
	pthread_mutex_unlock(&s->bind_lock);
	return 1 + (int)failed;
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
		if (owner && xseg_owner_pid(owner) != xseg_self_pid() &&
		    xseg_reap_port(s, port, EHOSTDOWN) > 0)
			reaped++;
	}
	return reaped;
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
	return 0;
}

/* ---- routing ------------------------------------------------------------ */

int xseg_set_next_hop(struct xseg *s, uint32_t port, uint32_t next)
{
	if (!xseg_port_valid(s, port))
		return xseg_fail(EINVAL, "route: port %u out of range", port);
	if (!xseg_port_valid(s, next))
		return xseg_fail(EINVAL, "route: next hop %u out of range", next);
	if (next == port)
		return xseg_fail(ELOOP, "route: port %u cannot be its own next hop", port);
	/* Refuse a cycle: walking on from `next` must not come back to `port`. */
	uint32_t cur = next;
	for (uint32_t steps = 0; steps < XSEG_MAX_PATH; steps++) {
		cur = atomic_load(&s->ports[cur].next_hop);
		if (cur == XSEG_NO_PORT)
			break;
		if (cur == port)
			return xseg_fail(ELOOP, "route: %u -> %u would close a cycle", port, next);
	}
	if (cur != XSEG_NO_PORT)
		return xseg_fail(ELOOP, "route: chain from %u is longer than %u hops", next,
				 XSEG_MAX_PATH);
	atomic_store(&s->ports[port].next_hop, next);
	return 0;
}

int xseg_clear_next_hop(struct xseg *s, uint32_t port)
{
	if (!xseg_port_valid(s, port))
		return xseg_fail(EINVAL, "route: port %u out of range", port);
	atomic_store(&s->ports[port].next_hop, XSEG_NO_PORT);
	return 0;
}

uint32_t xseg_get_next_hop(struct xseg *s, uint32_t port)
{
	if (!xseg_port_valid(s, port))
		return XSEG_NO_PORT;
	return atomic_load(&s->ports[port].next_hop);
}

bool xseg_route_reaches(struct xseg *s, uint32_t dst, uint32_t port)
{
	uint32_t cur = dst;
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
 * unbound hop ends the chain: a peer that left does not swallow requests.
 */
uint32_t xseg_resolve_route(struct xseg *s, uint32_t from, uint32_t dst)
{
	uint32_t chain[XSEG_MAX_PATH + 1];
	uint32_t n = 0, cur = dst;

	if (!xseg_port_valid(s, dst))
		return XSEG_NO_PORT;
	chain[n++] = dst;
	while (n <= XSEG_MAX_PATH) {
		uint32_t next = atomic_load_explicit(&s->ports[cur].next_hop, memory_order_acquire);
		if (next >= s->nr_ports ||
		    !atomic_load_explicit(&s->ports[next].owner, memory_order_relaxed))
			break;
		chain[n++] = next;
		cur = next;
	}
	for (uint32_t k = 0; k < n; k++)
		if (chain[k] == from)
			return k == 0 ? dst : chain[k - 1];
	return chain[n - 1];
}
