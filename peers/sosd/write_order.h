/*
 * The order of sosd's mutations, for FLUSH barriers.
 *
 * RADOS acknowledges a write only once it is durable, so a FLUSH has nothing
 * to sync: it only has to wait until every mutation (WRITE, COPY, DELETE)
 * accepted before it has completed. Each mutation gets a sequence number when
 * it is accepted and stays in a list, oldest first, until it completes; a
 * barrier covering sequence numbers up to N is released once the oldest
 * mutation still in flight is newer than N. Thread-safe (one mutex); O(1)
 * per mutation plus the barriers released.
 */
#ifndef SOSD_WRITE_ORDER_H
#define SOSD_WRITE_ORDER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct order_entry {            /* embedded in a mutation in flight */
	struct order_entry *prev, *next;
	uint64_t seq;
};

struct order_waiter {           /* embedded in a request behind a barrier */
	struct order_waiter *next;
	uint64_t upto;          /* waits for every mutation with seq <= upto */
};

struct write_order {
	pthread_mutex_t lock;
	uint64_t last_seq;                     /* of the newest mutation begun */
	struct order_entry *oldest, *newest;   /* mutations in flight */
	struct order_waiter *first, *last;     /* barriers, upto non-decreasing */
};

void write_order_init(struct write_order *o);
void write_order_destroy(struct write_order *o);

/* A mutation was accepted: it gets the next sequence number. */
void write_order_begin(struct write_order *o, struct order_entry *e);

/*
 * The mutation completed. Returns the barriers this released (linked by
 * next, oldest first) for the caller to continue.
 */
struct order_waiter *write_order_end(struct write_order *o, struct order_entry *e);

/*
 * A barrier behind every mutation begun so far. With `self` (a mutation
 * carrying XF_FLUSH), self begins too, in the same step, and the barrier
 * covers the mutations begun before it: done apart, a FLUSH slipping in
 * between would wait for self while self waited behind that FLUSH.
 * True when nothing it waits for is in flight: go on now. False: w was
 * queued and comes back from a later write_order_end.
 */
bool write_order_barrier(struct write_order *o, struct order_waiter *w,
			 struct order_entry *self);

#endif /* SOSD_WRITE_ORDER_H */
