/*
 * Wake-up: a sleeping peer waits on a futex word in its port (its group
 * leader's, for a bound range), shared between processes.
 *
 * Waiter:     waiters++ ; pending = 0 ; fence ; seq = wake_seq ;
 *             if no work: futex_wait(seq) ; pending = 0 ; waiters-- ; check work
 * Signaller:  push ; fence ; if waiters and swap(pending, 1) was 0:
 *             wake_seq++ ; futex_wake
 * Either the signaller sees the waiter's increment and bumps the word (so
 * the futex_wait returns at once or is woken), or the waiter's check comes
 * after the push and sees the work: no lost wake-up, and a submit to a port
 * nobody sleeps on costs no system call.
 *
 * `pending` spares the futex call while a wake-up is on its way: a thread
 * woken but not yet run still counts in `waiters`, and on a busy machine it
 * may wait a while for a core, during which every submit to the port would
 * otherwise make a futex call that wakes nobody (three quarters of cached's
 * futex calls in a write-through run on two cores). A signaller that finds
 * pending set skips its call; that is safe because pending is cleared only
 * just before a check of the queue (at the entry of a wait and on the way
 * out of one), so a push whose signal was skipped is seen by the thread
 * whose clear comes after it, and a wake-up that found nobody asleep is
 * cleared by the next wait.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "xseg_internal.h"

_Atomic uint32_t xseg_fence_word;   /* xseg_full_fence under TSan */

static long futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *ts)
{
	return syscall(SYS_futex, (uint32_t *)word, op, val, ts, NULL, 0);
}

static uint32_t leader_of(struct xseg *s, uint32_t port)
{
	uint32_t leader = atomic_load_explicit(&s->ports[port].group_leader,
					       memory_order_relaxed);
	return leader < s->nr_ports ? leader : port;
}

void xseg_signal_port(struct xseg *s, uint32_t port)
{
	/* The leader is read after the fence: read before it, it could
	 * predate a regroup whose new leader's waiter, asleep already, did not
	 * see our push (a wake-up lost until its timeout). */
	xseg_full_fence();
	struct xseg_port_shm *l = &s->ports[leader_of(s, port)];

	if (atomic_load_explicit(&l->waiters, memory_order_relaxed) &&
	    !atomic_exchange(&l->wake_pending, 1)) {
		atomic_fetch_add(&l->wake_seq, 1);
		futex(&l->wake_seq, FUTEX_WAKE, 1, NULL);
	}
}

void xseg_wake_all(struct xseg *s, uint32_t port)
{
	struct xseg_port_shm *l = &s->ports[port];
	atomic_fetch_add(&l->wake_seq, 1);
	futex(&l->wake_seq, FUTEX_WAKE, INT_MAX, NULL);
}

static bool group_has_work(struct xseg *s, uint32_t leader)
{
	uint32_t first = atomic_load_explicit(&s->ports[leader].group_first, memory_order_relaxed);
	uint32_t count = atomic_load_explicit(&s->ports[leader].group_count, memory_order_relaxed);
	if (first >= s->nr_ports || count == 0 || count > s->nr_ports - first) {
		first = leader;
		count = 1;
	}
	for (uint32_t p = first; p < first + count; p++)
		if (xseg_ring_nonempty(xseg_req_ring(s, p)) ||
		    xseg_ring_nonempty(xseg_rep_ring(s, p)))
			return true;
	return false;
}

int xseg_has_work(struct xseg *s, uint32_t port)
{
	if (!xseg_port_valid(s, port))
		return xseg_fail(EINVAL, "has work: port %u out of range", port);
	return group_has_work(s, leader_of(s, port));
}

/* Work is there: queued on the group, or what the caller's `ready` sees. */
static bool has_work(struct xseg *s, uint32_t leader, bool (*ready)(void *), void *arg)
{
	return group_has_work(s, leader) || (ready && ready(arg));
}

bool xseg_work_ready(struct xseg *s, uint32_t port, bool (*ready)(void *), void *arg)
{
	return has_work(s, leader_of(s, port), ready, arg);
}

int xseg_wait_on(struct xseg *s, uint32_t port, uint64_t timeout_ns,
		 bool (*ready)(void *), void *arg)
{
	struct timespec ts, *tsp = NULL;
	uint32_t leader = leader_of(s, port);
	struct xseg_port_shm *l = &s->ports[leader];

	if (timeout_ns) {
		ts.tv_sec = (time_t)(timeout_ns / 1000000000ull);
		ts.tv_nsec = (long)(timeout_ns % 1000000000ull);
		tsp = &ts;
	}
	atomic_fetch_add(&l->waiters, 1);
	atomic_exchange(&l->wake_pending, 0);
	/* Orders the increment before the queue checks below, pairing with the
	 * signaller's fence between its push and its read of waiters. */
	xseg_full_fence();
	uint32_t seq = atomic_load(&l->wake_seq);
	/* A port of the range left since we read the leader (its ungroup
	 * sets the new leaders, then bumps the old one's word, which this
	 * seq may already count): nobody signals that word for this port
	 * any more. The caller looks again instead of sleeping on it. */
	if (leader_of(s, port) == leader && !has_work(s, leader, ready, arg))
		futex(&l->wake_seq, FUTEX_WAIT, seq, tsp);
	/* Woken (or not asleep at all): the next submit may wake another. */
	atomic_exchange(&l->wake_pending, 0);
	/* Saturating: a takeover may have reset the count under us. */
	uint32_t w = atomic_load(&l->waiters);
	while (w && !atomic_compare_exchange_weak(&l->waiters, &w, w - 1))
		;
	xseg_full_fence();
	return has_work(s, leader, ready, arg);
}

int xseg_wait(struct xseg *s, uint32_t port, uint64_t timeout_ns)
{
	if (!xseg_port_valid(s, port))
		return xseg_fail(EINVAL, "wait: port %u out of range", port);
	return xseg_wait_on(s, port, timeout_ns, NULL, NULL);
}

int xseg_signal(struct xseg *s, uint32_t port)
{
	if (!xseg_port_valid(s, port))
		return xseg_fail(EINVAL, "signal: port %u out of range", port);
	xseg_signal_port(s, port);
	return 0;
}

int xseg_signal_all(struct xseg *s, uint32_t port)
{
	if (!xseg_port_valid(s, port))
		return xseg_fail(EINVAL, "signal: port %u out of range", port);
	xseg_full_fence();   /* as xseg_signal_port: the leader read after */
	xseg_wake_all(s, leader_of(s, port));
	return 0;
}

