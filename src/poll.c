/*
 * Polling: spin (yielding) for a while, then sleep on the port's futex
 * word (wait.c). Before sleeping it reaps dead peers (owners.c): a client
 * waiting on a server that died gets its requests back. Above wait.c and
 * owners.c.
 */
#include <errno.h>
#include <sched.h>

#include "xseg_internal.h"

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/*
 * Spinning pays only while the peer we wait for is running on another core.
 * When more peers than cores are busy, a pure spin steals the core from the
 * very peer that would produce our work, so we yield between short bursts:
 * sched_yield lets any runnable peer on this core go first and costs little
 * when none is waiting.
 */
int xseg_poll_until(struct xseg *s, uint32_t port, uint64_t spin_ns, uint64_t timeout_ns,
		    bool (*ready)(void *), void *arg)
{
	if (!xseg_port_valid(s, port))
		return xseg_fail(EINVAL, "poll: port %u out of range", port);
	if (spin_ns) {
		uint64_t start = xseg_now_ns();
		for (;;) {
			for (int i = 0; i < 64; i++) {
				if (xseg_work_ready(s, port, ready, arg))
					return 1;
				cpu_relax();
			}
			if (xseg_now_ns() - start >= spin_ns)
				break;
			sched_yield();
		}
	}
	/* About to sleep: a peer we wait on may be dead (xseg.h). */
	xseg_reap_dead_peers_rate_limited(s);
	return xseg_wait_on(s, port, timeout_ns, ready, arg);
}

int xseg_poll(struct xseg *s, uint32_t port, uint64_t spin_ns, uint64_t timeout_ns)
{
	return xseg_poll_until(s, port, spin_ns, timeout_ns, NULL, NULL);
}
