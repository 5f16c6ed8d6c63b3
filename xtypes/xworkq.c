/* xworkq: serialised jobs per object; protocol in xtypes/xworkq.h. */
#include <xtypes/xworkq.h>

#include <errno.h>
#include <sched.h>
#include <urcu/arch.h>
#include <urcu/compiler.h>

void xworkq_init(struct xworkq *q)
{
	__cds_wfcq_init(&q->head, &q->tail);
	atomic_init(&q->pending, 0);
	atomic_init(&q->readers, 0);
}

int xworkq_destroy(struct xworkq *q)
{
	return atomic_load_explicit(&q->pending, memory_order_acquire) ? -EBUSY : 0;
}

/* The new runner lets the readers that came in before it finish. */
static void wait_for_readers(struct xworkq *q)
{
	for (unsigned spins = 0; atomic_load_explicit(&q->readers, memory_order_seq_cst); spins++) {
		if (spins < 256)
			caa_cpu_relax();
		else
			sched_yield();   /* a reader lost its CPU mid-copy */
	}
}

bool xworkq_read_begin(struct xworkq *q)
{
	atomic_fetch_add_explicit(&q->readers, 1, memory_order_seq_cst);
	/* Nothing linked either: pending can be 0 while a job is linked and
	 * not yet counted (counts and links are fungible, see enqueue), and
	 * a reader of that job's thread must come after it. */
	if (!atomic_load_explicit(&q->pending, memory_order_seq_cst) &&
	    cds_wfcq_empty(&q->head, &q->tail))
		return true;
	atomic_fetch_sub_explicit(&q->readers, 1, memory_order_release);
	return false;
}

void xworkq_read_end(struct xworkq *q)
{
	atomic_fetch_sub_explicit(&q->readers, 1, memory_order_release);
}

bool xworkq_enqueue(struct xworkq *q, struct xwork *work)
{
	xwork_claim(work);
	/* Idle queue, nothing linked: become the runner first and run this
	 * job without linking it (the common case: one pass per request on
	 * its object; the link and the dequeue were a fifth of the pass).
	 * "Nothing linked" matters: counts and links are fungible (a runner
	 * may run a job linked but not yet counted with another's count), so
	 * pending can be 0 while this thread's earlier job is still linked;
	 * running this one first would break its order. */
	unsigned long idle = 0;
	struct xwork *next = work;   /* the runner's first job, if not linked */
	if (!cds_wfcq_empty(&q->head, &q->tail) ||
	    !atomic_compare_exchange_strong_explicit(&q->pending, &idle, 1, memory_order_seq_cst,
						     memory_order_relaxed)) {
		cds_wfcq_enqueue(&q->head, &q->tail, &work->link);
		if (atomic_fetch_add_explicit(&q->pending, 1, memory_order_seq_cst) != 0)
			return false;
		next = NULL;
	}
	wait_for_readers(q);
	/* Runner: pending > 0 guarantees a linked job for each dequeue (but
	 * the unlinked first one); the blocking dequeue only waits out an
	 * enqueuer between its two stores. */
	do {
		if (!next)
			next = caa_container_of(__cds_wfcq_dequeue_blocking(&q->head, &q->tail),
						struct xwork, link);
		xwork_run(next);
		next = NULL;
	} while (atomic_fetch_sub_explicit(&q->pending, 1, memory_order_acq_rel) != 1);
	return true;
}
