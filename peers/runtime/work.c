/*
 * Work that is not a request: put off by a worker until after its round
 * (peer_defer), or posted from any thread to the workers (peer_post,
 * liburcu's wait-free queue; one worker at a time drains it).
 */
#include <pthread.h>

#include "runtime.h"
#include "xtypes/xannotate.h"

/* ---- deferred work -------------------------------------------------------------- */

void peer_defer(struct peer_thread *t, struct peer_work *w, peer_work_fn fn)
{
	w->fn = fn;
	w->next = t->deferred;
	t->deferred = w;
	atomic_fetch_add(&t->peer->deferred, 1);
}

void peer_run_deferred(struct peer_thread *t)
{
	struct peer_work *list = NULL, *w = t->deferred;
	t->deferred = NULL;
	while (w) {   /* oldest first */
		struct peer_work *next = w->next;
		w->next = list;
		list = w;
		w = next;
	}
	while (list) {
		w = list;
		list = list->next;
		w->next = NULL;
		w->fn(t, w);
		atomic_fetch_sub(&t->peer->deferred, 1);
	}
}

/* ---- work posted from other threads ------------------------------------------------ */

void peer_post(struct peer *p, struct peer_work *w, peer_work_fn fn)
{
	w->fn = fn;
	cds_wfcq_node_init(&w->post_node);
	atomic_fetch_add(&p->deferred, 1);
	/* TSan does not see liburcu's ordering: model the hand-over. */
	xannotate_happens_before(w);
	cds_wfcq_enqueue(&p->post_head, &p->post_tail, &w->post_node);
	xseg_signal(p->seg, p->cfg.port_first);
	/* Parked workers do not watch the port. (The fence orders the enqueue
	 * before the load: a worker that parks after it sees the work.) */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load(&p->parked)) {
		pthread_mutex_lock(&p->park_lock);
		pthread_cond_signal(&p->park_cond);
		pthread_mutex_unlock(&p->park_lock);
	}
}

/* Also the idle workers' spin check: nothing counted (peer_post counts
 * before it queues, and signals after), nothing to look for in the queue. */
bool peer_posted_ready(void *arg)
{
	struct peer *p = arg;
	return atomic_load_explicit(&p->deferred, memory_order_acquire) &&
	       !cds_wfcq_empty(&p->post_head, &p->post_tail);
}

/* Takes everything posted so far (one worker at a time) and runs it here. */
bool peer_run_posted(struct peer_thread *t)
{
	struct peer *p = t->peer;
	struct __cds_wfcq_head head;
	struct cds_wfcq_tail tail;
	struct cds_wfcq_node *node, *next;
	bool ran = false;

	if (!peer_posted_ready(p) || pthread_mutex_trylock(&p->post_drain) != 0)
		return false;
	__cds_wfcq_init(&head, &tail);
	__cds_wfcq_splice_blocking(&head, &tail, &p->post_head, &p->post_tail);
	pthread_mutex_unlock(&p->post_drain);
	__cds_wfcq_for_each_blocking_safe(&head, &tail, node, next) {
		struct peer_work *w = caa_container_of(node, struct peer_work, post_node);
		xannotate_happens_after(w);
		w->fn(t, w);   /* may free or post w again */
		atomic_fetch_sub(&p->deferred, 1);
		ran = true;
	}
	return ran;
}
