/*
 * Mutations in flight and the FLUSH barriers waiting for them (see
 * write_order.h).
 */
#include "write_order.h"

#include <stddef.h>

void write_order_init(struct write_order *o)
{
	pthread_mutex_init(&o->lock, NULL);
	o->last_seq = 0;
	o->oldest = o->newest = NULL;
	o->first = o->last = NULL;
}

void write_order_destroy(struct write_order *o)
{
	pthread_mutex_destroy(&o->lock);
}

/* Under the lock. */
static void begin_locked(struct write_order *o, struct order_entry *e)
{
	e->seq = ++o->last_seq;
	e->next = NULL;
	e->prev = o->newest;
	if (o->newest)
		o->newest->next = e;
	else
		o->oldest = e;
	o->newest = e;
}

void write_order_begin(struct write_order *o, struct order_entry *e)
{
	pthread_mutex_lock(&o->lock);
	begin_locked(o, e);
	pthread_mutex_unlock(&o->lock);
}

/* Under the lock: a barrier waiting for mutations up to `upto` may go. */
static bool passed(const struct write_order *o, uint64_t upto)
{
	return !o->oldest || o->oldest->seq > upto;
}

struct order_waiter *write_order_end(struct write_order *o, struct order_entry *e)
{
	struct order_waiter *released = NULL, **tail = &released;

	pthread_mutex_lock(&o->lock);
	if (e->prev)
		e->prev->next = e->next;
	else
		o->oldest = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		o->newest = e->prev;
	e->prev = e->next = NULL;
	/* Barriers are queued in order of upto: release from the front. */
	while (o->first && passed(o, o->first->upto)) {
		struct order_waiter *w = o->first;
		o->first = w->next;
		if (!o->first)
			o->last = NULL;
		w->next = NULL;
		*tail = w;
		tail = &w->next;
	}
	pthread_mutex_unlock(&o->lock);
	return released;
}

bool write_order_barrier(struct write_order *o, struct order_waiter *w,
			 struct order_entry *self)
{
	bool go;

	pthread_mutex_lock(&o->lock);
	w->upto = o->last_seq;
	if (self)
		begin_locked(o, self);
	w->next = NULL;
	/* Behind a queued barrier, wait in line even if already passed: the
	 * queue stays sorted by upto, and nothing overtakes an earlier FLUSH. */
	go = !o->first && passed(o, w->upto);
	if (!go) {
		if (o->last)
			o->last->next = w;
		else
			o->first = w;
		o->last = w;
	}
	pthread_mutex_unlock(&o->lock);
	return go;
}
