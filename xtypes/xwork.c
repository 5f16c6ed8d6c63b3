/* xwork: the job type shared by xworkq and xwaitq (see xtypes/xwork.h). */
#include <xtypes/xwork.h>

#include <stdio.h>
#include <stdlib.h>

void xwork_init(struct xwork *work, xwork_fn fn, void *arg)
{
	cds_wfcq_node_init(&work->link);
	work->fn = fn;
	work->arg = arg;
	atomic_init(&work->queued, 0);
}

void xwork_claim(struct xwork *work)
{
	/* release: fn, arg and the caller's object travel with the work */
	if (atomic_exchange_explicit(&work->queued, 1, memory_order_acq_rel) != 0) {
		fprintf(stderr, "xwork: work %p enqueued while still queued\n", (void *)work);
		abort();
	}
}

void xwork_run(struct xwork *work)
{
	(void)atomic_load_explicit(&work->queued, memory_order_acquire);
	xwork_fn fn = work->fn;
	void *arg = work->arg;

	cds_wfcq_node_init(&work->link);
	atomic_store_explicit(&work->queued, 0, memory_order_relaxed);	/* fn may requeue it */
	fn(work, arg);
}
