/*
 * nbdd's socket threads as a set (--socket-threads): each an epoll loop
 * over the connections it was given for good, the first also over the
 * listeners (server.c runs them, and hands connections over through
 * `given`). Here: their epoll sets and wake-ups, which one takes a new
 * connection, starting and joining them. Private to server.c, conn.c and
 * handshake.c.
 */
#ifndef NBDD_LOOP_H
#define NBDD_LOOP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

enum source_kind { SRC_LISTENER, SRC_CONN, SRC_WAKE };

struct conn;

struct loop {
	enum source_kind wake_kind;     /* SRC_WAKE: wakefd's epoll data.ptr */
	unsigned index;
	int epfd, wakefd;
	pthread_mutex_t kick_lock;
	struct conn *kicks;             /* connections it must look at (conn.c) */
	struct conn *given;             /* handed to it, not yet taken: under kick_lock */
	atomic_bool total_released;     /* held_total fell with waiters: look at them */
	atomic_uint nr_conns;           /* given to it and not closed */
	/* The thread's own. */
	struct conn *conns;             /* open connections */
	struct conn *zombies;           /* closed in this round of events: freed after it */
	uint64_t next_timeout_scan_ns;
	_Atomic uint64_t waits;         /* epoll_waits with a timeout that got events */
	pthread_t thread;
	bool started;
};

/* Makes n socket threads' epoll sets and eventfds: 0, or -1 logged (what
 * was made is for loops_close). */
int loops_open(unsigned n);
/* Starts a thread running body(L) for each; -1 logged when one cannot
 * start (those started are the caller's to stop: loops_join). */
int loops_start(void *(*body)(void *));
/* Wakes each started thread and waits for it to end (the caller asked
 * them to stop first). */
void loops_join(void);
/* Closes their files and frees them (after the connections left are let go). */
void loops_close(void);

unsigned loops_count(void);
struct loop *loop_at(unsigned i);
/* The first: the one that accepts. */
struct loop *loops_first(void);
/* The one with the fewest connections. */
struct loop *loops_least_loaded(void);

/* Wakes socket thread L (its eventfd). Any thread. */
void loop_wake(struct loop *L);
/* Memory came back under --max-buffer-total: every thread looks at its
 * waiting connections. Any thread. */
void loops_wake_waiters(void);

#endif
