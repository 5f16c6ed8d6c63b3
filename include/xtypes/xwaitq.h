/*
 * xwaitq.h - jobs that wait for a condition.
 *
 * A queue has one condition, a callback `cond(arg)` that reads state other
 * threads change (free entries, free buckets, free requests...).  A job is
 * run as soon as the condition holds: immediately, on the enqueuing thread,
 * if it holds and nothing is waiting before it; otherwise it is queued, and
 * runs on whichever thread next calls xwaitq_signal (or enqueue) while the
 * condition holds.  Queued jobs run in FIFO order, one at a time, and the
 * condition is tested again before each one (a job usually consumes what
 * the condition tests).  A job that finds the resource taken after all may
 * enqueue itself again.
 *
 * No lost wake-up: after "condition false" an enqueuer links its job and
 * then signals, which tests the condition again.  Signals are counted: a
 * thread that signals while another is draining only increments the count,
 * and the drainer makes one more pass, starting after that increment,
 * before it stops.  So a state change followed by xwaitq_signal is always
 * followed by a pass that sees both the change and every job enqueued
 * before the signal.
 *
 * Whoever changes the state so that the condition may hold must call
 * xwaitq_signal afterwards.  cond must be thread-safe and cheap; it may be
 * called on any thread, concurrently with itself.  No RCU registration is
 * needed.
 */
#ifndef XTYPES_XWAITQ_H
#define XTYPES_XWAITQ_H

#include <stdatomic.h>
#include <stdbool.h>
#include <xtypes/xwork.h>

typedef bool (*xwaitq_cond_fn)(void *arg);

struct xwaitq {
	xwaitq_cond_fn cond;
	void *cond_arg;
	struct __cds_wfcq_head head;
	struct cds_wfcq_tail tail;
	atomic_ulong signals;
};

void xwaitq_init(struct xwaitq *wq, xwaitq_cond_fn cond, void *cond_arg);

/* 0, or -EBUSY if jobs are still waiting. */
int xwaitq_destroy(struct xwaitq *wq);

/* Runs `work` now if the condition holds and no job waits, else queues it. */
void xwaitq_enqueue(struct xwaitq *wq, struct xwork *work);

/* Runs waiting jobs while the condition holds (see above). */
void xwaitq_signal(struct xwaitq *wq);

/* True if no job is waiting (a snapshot). */
bool xwaitq_empty(struct xwaitq *wq);

#endif /* XTYPES_XWAITQ_H */
