/*
 * Idle workers and the ports: at most `watchers` of a peer's idle workers
 * watch its ports (spin on their rings, then sleep on the port's futex).
 * The others wait on the bench, a futex of this process, until a worker
 * ends a round of work with work queued and no watcher idle (every one
 * busy: peer_bench_call_if_busy) while the peer waits on another or its
 * requests are slow, a stop, or IDLE_WAIT_NS (then they look at the
 * ports once). A worker called off the bench becomes a watcher
 * when it is next idle if a watcher's place is free, else goes back.
 *
 * Why: a spinning worker reads the ring lines the client writes on every
 * push, and each queued request draws every spinner's pop. On 16 cores
 * cached's 8 workers all spinning on one port served 4K read hits at
 * 0.85M/0.80M IOPS where 2 workers served 1.18M/0.96M (docs/benchmarks.md,
 * "Idle workers on a bench"). The bench keeps the workers for
 * bursts and many ports without putting them all on one ring.
 */
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "counters.h"
#include "runtime.h"

unsigned peer_default_watchers(const struct peer *p)
{
	unsigned ports = p->cfg.port_last - p->cfg.port_first + 1;
	unsigned w = p->ops->default_watchers ? p->ops->default_watchers : ports > 2 ? ports : 2;
	return w < p->cfg.threads ? w : p->cfg.threads;
}

bool peer_watch_begin(struct peer *p)
{
	unsigned n = atomic_load_explicit(&p->watching, memory_order_relaxed);
	while (n < p->max_watchers)
		if (atomic_compare_exchange_weak(&p->watching, &n, n + 1))
			return true;
	return false;
}

void peer_watch_end(struct peer *p)
{
	atomic_fetch_sub(&p->watching, 1);
}

static long bench_futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *ts)
{
	return syscall(SYS_futex, (uint32_t *)word, op, val, ts, NULL, 0);
}

/* A call that comes between the sequence's read and the sleep is seen (the
 * futex word changed); one that comes before the read is missed, which
 * costs this worker at most IDLE_WAIT_NS of idleness, never a request: the
 * watchers serve it. */
void peer_bench_wait(struct peer *p, uint64_t timeout_ns)
{
	struct timespec ts = { (time_t)(timeout_ns / 1000000000ull),
			       (long)(timeout_ns % 1000000000ull) };
	atomic_fetch_add(&p->benched, 1);
	uint32_t seq = atomic_load(&p->bench_seq);
	if (!atomic_load(&p->stop) && !atomic_load(&p->parked) &&
	    atomic_load(&p->watching) >= p->max_watchers && !peer_posted_ready(p))
		bench_futex(&p->bench_seq, FUTEX_WAIT_PRIVATE, seq, &ts);
	atomic_fetch_sub(&p->benched, 1);
}

/* A request whose own work takes longer than this is worth another
 * worker: more than a call costs (the caller's futex wake, the callee's
 * start). A 4K hit in cached takes about 1 us, a 64K copy a few. */
#define SLOW_REQUEST_NS 5000

void peer_bench_setup(struct peer *p)
{
	p->slow_request_ticks = (uint64_t)(SLOW_REQUEST_NS / peer_stats_ns_per_tick());
}

/* Whether the round's work is of the kind more workers help with: the peer
 * waits on another (a send of its own is out: more workers keep more of
 * its requests moving; cached's cold misses on 16 cores were 0.61 of the
 * bare hop with 2 workers, 0.81-0.87 with 8), or its requests are slow
 * (a big copy each). Short requests with nothing out are CPU work on one
 * ring: called to it, more workers only contend for its lines, and the
 * caller pays a futex wake every few requests (cached's 4K hits on 16
 * cores: 0.17 context switches a request; read hits 0.76-0.79 of nulld
 * with the calls, 0.80-0.85 without; docs/benchmarks.md). */
static bool more_workers_help(struct peer_thread *t, int work)
{
	struct peer *p = t->peer;
	if (atomic_load_explicit(&p->outstanding, memory_order_relaxed))
		return true;
	if (!t->round_accept_tick || work <= 0)
		return false;
	uint64_t now = peer_stats_ticks();
	return now > t->round_accept_tick && (now - t->round_accept_tick) / (uint64_t)work > p->slow_request_ticks;
}

/* After a round of work: when no idle worker watches the ports (every
 * watcher is busy), work is queued and more workers help, one more is
 * called. Cheap while nobody waits on the bench: one load. */
void peer_bench_call_if_busy(struct peer_thread *t, int work)
{
	struct peer *p = t->peer;
	if (atomic_load_explicit(&p->benched, memory_order_relaxed) &&
	    !atomic_load_explicit(&p->watching, memory_order_relaxed) &&
	    more_workers_help(t, work) &&
	    xseg_has_work(p->seg, p->cfg.port_first) > 0)
		peer_bench_call(p, false);
}

void peer_bench_call(struct peer *p, bool all)
{
	if (!atomic_load(&p->benched))
		return;
	atomic_fetch_add(&p->bench_seq, 1);
	bench_futex(&p->bench_seq, FUTEX_WAKE_PRIVATE, all ? INT_MAX : 1, NULL);
	struct peer_stats_block *b = peer_stats_block();
	if (b && !all)
		peer_stats_add(&b->bench_calls, 1);
}
