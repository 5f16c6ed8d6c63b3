/*
 * xworkq.h - jobs serialised per object.
 *
 * Any thread enqueues (wait-free: liburcu's wfcqueue); exactly one thread at
 * a time runs a queue's jobs, in enqueue order.  The thread whose enqueue
 * finds the queue idle becomes its runner and runs jobs until the queue is
 * empty, its own job included; a thread that enqueues while another runs
 * returns at once, and the runner will run its job.  No job is lost or run
 * twice.
 *
 * How: `pending` counts jobs enqueued and not yet finished.  An enqueuer
 * first links its job, then increments; the one that moves pending from 0
 * to 1 is the runner.  The runner dequeues and runs one job per decrement
 * and stops when its decrement brings pending back to 0, so a job counted
 * by a late increment is always dequeued by the current runner or makes its
 * enqueuer the next one.  The acq_rel counter also orders one runner's jobs
 * before the next runner's.  An enqueuer that finds no job linked and
 * takes pending from 0 to 1 (compare-and-swap) runs its job without
 * linking it; later ones are linked and counted as above.  (Both checks:
 * a runner may run a job linked but not yet counted with another's count,
 * so pending may be 0 while a job is still linked.)
 *
 * Costs to know: a runner may run other threads' jobs for as long as they
 * keep coming; jobs must not block.  A job may enqueue on any queue,
 * including its own (that job runs after it, on the same runner).
 * No RCU registration is needed.
 *
 * Readers: work that only reads what the jobs write may run beside other
 * readers, on any thread, while the queue is idle, and never beside a job.
 * A reader counts itself in `readers`, then looks at `pending`: not 0 means
 * a job is queued or running, so it steps back and queues its work as a
 * job instead (it then runs in order after those jobs).  A runner, once
 * its increment made it the runner, waits until `readers` is 0 before its
 * first job.  Both sides store, then load the other's counter, sequentially
 * consistent, so at least one of them sees the other: a reader never
 * overlaps a job, and everything a finished runner's jobs wrote is visible
 * to a reader that then finds the queue idle.  Readers must be short (a
 * runner spins for them) and must not enqueue on the queue they read.
 */
#ifndef XTYPES_XWORKQ_H
#define XTYPES_XWORKQ_H

#include <stdatomic.h>
#include <stdbool.h>
#include <xtypes/xwork.h>

struct xworkq {
	struct __cds_wfcq_head head;
	struct cds_wfcq_tail tail;
	atomic_ulong pending;
	atomic_uint readers;   /* in xworkq_read_begin..end */
};

void xworkq_init(struct xworkq *q);

/* 0, or -EBUSY if jobs are still queued or running (nothing is freed). */
int xworkq_destroy(struct xworkq *q);

/*
 * Queues `work` (see xwork.h for ownership).  Returns true when the calling
 * thread became the runner and ran the queue dry before returning, false
 * when another thread is running the queue and will run `work`.
 */
bool xworkq_enqueue(struct xworkq *q, struct xwork *work);

/*
 * Begins a reader beside the queue: true when the queue is idle (no job
 * counted, none linked: then no job runs until xworkq_read_end), false
 * when it is busy (nothing to end; queue the work as a job instead). A
 * job the calling thread enqueued before has run when it returns true.
 */
bool xworkq_read_begin(struct xworkq *q);

/* Ends a reader that xworkq_read_begin let in. */
void xworkq_read_end(struct xworkq *q);

#endif /* XTYPES_XWORKQ_H */
