/*
 * A connection as its socket thread (server.c) and its output (conn.c)
 * share it: the struct, and what both touch (its socket thread's epoll set,
 * wake-up and kick list; the buffers held for all connections). Private to
 * the two.
 */
#ifndef NBDD_CONN_H
#define NBDD_CONN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "loop.h"
#include "nbdd.h"

#define IN_BUF_SIZE (64u * 1024)

enum phase { PH_CLIENT_FLAGS, PH_OPTIONS, PH_TRANSMISSION };

struct conn {
	enum source_kind kind;      /* first: epoll's data.ptr names a source */
	int fd;
	atomic_uint refs;
	struct loop *loop;          /* the socket thread that reads it, for good */
	char peer_name[64];         /* for log lines */

	/* The socket thread's own. */
	struct conn *prev, *next;   /* open connections, then closed ones */
	bool closed;
	enum phase phase;
	uint32_t client_flags;
	const struct nbd_export *exp;
	uint8_t in[IN_BUF_SIZE];
	size_t in_len;
	struct cmd *filling;        /* WRITE whose payload is being read */
	uint32_t filled;
	uint64_t discard;           /* payload bytes of a refused WRITE to skip */
	uint64_t last_rx_ns;        /* last bytes read, or when waiting began */
	int outq_seen;              /* its socket's unread bytes at the last look */
	uint64_t linger_ns;         /* when its linger began (the stop) */

	/* Shared: under lock. */
	pthread_mutex_t lock;
	struct out_buf *out_head, **out_tail;
	uint32_t out_off;           /* bytes of out_head already written */
	bool dead;                  /* closed: output is dropped */
	bool broken;                /* a write failed: the socket thread closes it */
	bool want_out;              /* waiting for EPOLLOUT */
	bool writing;               /* a thread is in sendmsg: the queue's head is its */
	bool paused;                /* too much in flight: not reading */
	bool paused_memory;         /* ... for --max-client-buffer or --max-buffer-total */
	bool waits_total;           /* ... for --max-buffer-total: S.total_waiters counts it */
	bool disc;                  /* DISC (or ABORT): close once drained */
	bool lingering;             /* the stop: drained, its side shut down, closed
				     * once the client has every byte (server.c) */
	bool kicked;                /* on the socket thread's kick list */
	uint64_t tx_wait_ns;        /* want_out: the socket last took bytes then */
	uint64_t inflight, inflight_bytes;   /* inflight_bytes: also in S.held_total */
	uint64_t bytes_limit;       /* inflight_bytes that pause reading: per phase */
	bool flush_pending;         /* flush_work is deferred on a worker */
	struct conn *next_kick;
	struct peer_work flush_work;   /* conn_send_batched's write */
};

/* What every socket thread and the connections' output share (conn.c). */
struct conn_hub {
	/* Buffers held for every connection (their inflight_bytes). */
	atomic_uint_fast64_t held_total;
	atomic_uint total_waiters;      /* connections with waits_total */
	/* Replies not yet written, every connection's (their inflight): what
	 * the stop waits for and names. */
	atomic_uint_fast64_t unanswered;
	/* nbdd stops (server_drain): new commands get NBD_ESHUTDOWN, and a
	 * connection is closed once drained. */
	atomic_bool stopping;
};
extern struct conn_hub H;

/* "_locked": the connection's lock held. */
bool conn_drained_locked(const struct conn *c);      /* nothing in flight, nothing unsent */
void conn_kick(struct conn *c);                      /* the socket thread looks at c */
void conn_update_events_locked(struct conn *c);      /* epoll: read unless paused, write if waiting */
void conn_set_disc_locked(struct conn *c);           /* DISC or ABORT: stop reading, close once drained */
/* Replies owed (c->inflight), counted in H.unanswered too. */
void conn_owe_locked(struct conn *c, uint64_t replies);
void conn_unowe_locked(struct conn *c, uint64_t replies);
/* Whether c is to close once drained: after DISC or ABORT, or nbdd stops. */
bool conn_closing_locked(const struct conn *c);
void conn_hold_locked(struct conn *c, uint64_t bytes);
void conn_unhold_locked(struct conn *c, uint64_t bytes);
void conn_unpause_locked(struct conn *c);
void conn_release_locked(struct conn *c, struct out_buf *ob);
void conn_flush_locked(struct conn *c);            /* drops the lock around sendmsg */
void conn_drop_output_locked(struct conn *c);       /* closed: unsent replies let go */
/* Bytes the socket thread makes (handshake replies, early errors). */
void conn_send_bytes(struct conn *c, const void *data, uint32_t len, uint32_t charge);

#endif
