/*
 * xwork.h - a job (function + argument) that a queue runs later.
 *
 * Intrusive, in the style of liburcu's cds_wfcq_node: the caller embeds a
 * struct xwork in its own object, so enqueueing allocates nothing.
 *
 * Ownership: from the moment a queue accepts the work (xworkq_enqueue,
 * xwaitq_enqueue) until its function starts, the queue owns it and the
 * caller must not touch, free or enqueue it again (doing so aborts).  When
 * the function runs, ownership is back with the caller: the function may
 * free the containing object or enqueue the same xwork again.
 *
 * Everything the enqueuing thread wrote before the enqueue is visible to
 * the function, whichever thread runs it.
 */
#ifndef XTYPES_XWORK_H
#define XTYPES_XWORK_H

#include <stdatomic.h>
#include <urcu/wfcqueue.h>

struct xwork;
typedef void (*xwork_fn)(struct xwork *work, void *arg);

struct xwork {
	struct cds_wfcq_node link;	/* private to the queue */
	xwork_fn fn;
	void *arg;
	atomic_int queued;		/* 1 while a queue owns the work */
};

/* Sets the function and argument; the work is not queued. */
void xwork_init(struct xwork *work, xwork_fn fn, void *arg);

/*
 * For queue implementations.  xwork_claim: a queue takes ownership (aborts
 * if the work is already queued) and publishes fn/arg.  xwork_run: hands
 * ownership back and calls fn(work, arg) on the calling thread.
 */
void xwork_claim(struct xwork *work);
void xwork_run(struct xwork *work);

#endif /* XTYPES_XWORK_H */
