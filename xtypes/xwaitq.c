/* xwaitq: condition-gated jobs; protocol in xtypes/xwaitq.h. */
#include <xtypes/xwaitq.h>

#include <errno.h>
#include <urcu/compiler.h>

void xwaitq_init(struct xwaitq *wq, xwaitq_cond_fn cond, void *cond_arg)
{
	wq->cond = cond;
	wq->cond_arg = cond_arg;
	__cds_wfcq_init(&wq->head, &wq->tail);
	atomic_init(&wq->signals, 0);
}

bool xwaitq_empty(struct xwaitq *wq)
{
	return cds_wfcq_empty(&wq->head, &wq->tail);
}

int xwaitq_destroy(struct xwaitq *wq)
{
	return xwaitq_empty(wq) ? 0 : -EBUSY;
}

/* Only the thread that took signals from 0 drains, so dequeues never race. */
static void drain(struct xwaitq *wq)
{
	while (!xwaitq_empty(wq) && wq->cond(wq->cond_arg)) {
		struct cds_wfcq_node *n = __cds_wfcq_dequeue_blocking(&wq->head, &wq->tail);

		xwork_run(caa_container_of(n, struct xwork, link));
	}
}

void xwaitq_signal(struct xwaitq *wq)
{
	unsigned long seen;

	if (atomic_fetch_add_explicit(&wq->signals, 1, memory_order_acq_rel) != 0)
		return;		/* the drainer will make another pass */
	do {
		seen = atomic_load_explicit(&wq->signals, memory_order_acquire);
		drain(wq);
	} while (atomic_fetch_sub_explicit(&wq->signals, seen, memory_order_acq_rel) != seen);
}

void xwaitq_enqueue(struct xwaitq *wq, struct xwork *work)
{
	xwork_claim(work);
	if (xwaitq_empty(wq) && wq->cond(wq->cond_arg)) {
		xwork_run(work);
		return;
	}
	cds_wfcq_enqueue(&wq->head, &wq->tail, &work->link);
	xwaitq_signal(wq);
}
