/*
 * What the network thread (net.c) and a connection's input and output
 * (conn.c) share. Private to the two; the rest of synapsed uses
 * synapsed.h's conn_close, conn_kick, conn_write_now, conn_owes_nothing
 * and conn_idle.
 */
#ifndef SYNAPSED_CONN_H
#define SYNAPSED_CONN_H

#include <stdbool.h>
#include <stdint.h>

#include "synapsed.h"

/* The remote link's reconnect backoff. */
#define BACKOFF_MIN_NS   (100ull * 1000 * 1000)
#define BACKOFF_MAX_NS   (2ull * 1000 * 1000 * 1000)

extern int conn_epfd;                   /* the network thread's epoll set */
/* The layers above (epochs.c for the hello, inbound.c, outbound.c, limits.c), given to net_start:
 * net.c and conn.c call up only through them, never by name. */
extern const struct net_ops *conn_up_ops;

/* The epoll events c is watched for (wlock held). */
void conn_set_events(struct conn *c, uint32_t ci, uint32_t events);
/* Frames wait in c's queues. */
bool conn_has_queued(struct conn *c);
/* Reads and dispatches frames; 0, or -1 when the connection closed. */
int conn_read(struct conn *c, uint32_t ci);
/* The socket can take more (EPOLLOUT). */
void conn_writable(struct conn *c, uint32_t ci);

#endif
