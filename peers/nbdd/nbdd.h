/*
 * nbdd's modules and what they share:
 *   nbdd.c    options, exports, the peer_ops, main
 *   target.c  asking the target port for its volumes at start (init)
 *   server.c  the socket thread: listeners, connections, the handshake's
 *             phases, reading requests (epoll, non-blocking)
 *   handshake.c  the handshake's options
 *   conn.c    a connection's output (replies written from any thread),
 *             its buffers against the limits, its references
 *   cmd.c     one NBD command on the worker threads: requests to the
 *             target port in chunks, the reply handed back to its connection
 *   proto.c   the wire format (pure functions)
 *
 * Layers, top down: nbdd.c -> cmd.c -> server.c -> handshake.c -> conn.c
 * -> proto.c, and nbdd.c -> target.c. Each calls the ones below by name;
 * server.c and handshake.c call up only through the struct server_ops
 * nbdd.c gives server_open.
 *
 * Threads: one socket thread owns every connection's input side; it sends
 * a small command's request to the target itself, a larger one goes to the
 * runtime's workers with peer_post; the worker that takes the reply queues
 * it on its connection, and after that round of replies writes all it
 * queued there in one go, as much as the socket takes (under the
 * connection's lock); the socket thread writes the rest when the socket is
 * writable again.
 */
#ifndef NBDD_NBDD_H
#define NBDD_NBDD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "peer/peer.h"
#include "proto.h"

struct nbd_export {
	char *name;
	uint32_t name_len;
	uint64_t size;
	const char *given_by;   /* --volume or --volumes-file; NULL: vlmcd's list */
};

struct nbdd_config {
	struct nbd_export *exports;
	unsigned nr_exports;
	uint64_t target_port;
	bool have_target;
	uint64_t target_timeout;      /* seconds to wait at start for its volume list */
	char *listen[4];              /* ADDR:PORT, as given (for log lines) */
	struct sockaddr_storage listen_addr[4];   /* ... checked and parsed */
	socklen_t listen_addr_len[4];
	unsigned nr_listen;
	char *unix_path;
	unsigned socket_mode;         /* the Unix socket file's mode (0600) */
	uint64_t max_request;         /* largest READ/WRITE; announced as block size max */
	uint64_t chunk_size;          /* largest request sent to the target */
	uint64_t max_inflight;        /* commands per connection before it stops reading */
	uint64_t io_timeout;          /* seconds a partial message may wait; 0: forever */
	uint64_t max_connections;     /* open at once; then the listeners rest */
	uint64_t max_client_buffer;   /* READ/WRITE buffers held for one connection */
	uint64_t max_buffer_total;    /* ... for all of them together */
	uint64_t max_path_requests;   /* chunks out on the path at once: half the request pool */
	uint64_t socket_threads;      /* threads reading the connections (0 until chosen) */
	uint64_t socket_poll_us;      /* after events, look again this long before sleeping */
	uint64_t retry_limit_ns;      /* --retry-limit: a command waiting for the pool */
};

extern struct nbdd_config nbdd_cfg;

const struct nbd_export *nbdd_find_export(const uint8_t *name, uint32_t len);
uint16_t nbdd_transmission_flags(void);

/* ---- output: what a connection sends ---------------------------------------------- */

/* ---- a connection's output (conn.c) ------------------------------------------------ */

/* A block of bytes queued on a connection. `charge` is what it counts
 * against the connection's in-flight limit (a command's reply: 1). */
struct out_buf {
	struct out_buf *next;
	uint32_t len;
	uint32_t charge;
	uint64_t charge_bytes;
	uint8_t data[];
};
struct out_buf *out_buf_new(uint32_t len);

struct conn;
/* Queues `ob` (or frees it when the connection is gone) and writes what the
 * socket takes now. Any thread. */
void conn_send(struct conn *c, struct out_buf *ob);
/* Queues `ob` and writes it after worker t's round of replies (peer_defer),
 * with whatever else that round queued on c: one write for them all. */
void conn_send_batched(struct conn *c, struct out_buf *ob, struct peer_thread *t);
/* The index of c's socket thread: its commands leave from that lane
 * (peer_get_request_lane), one queue per socket thread behind nbdd. */
unsigned conn_lane(const struct conn *c);
void conn_get(struct conn *c);
void conn_put(struct conn *c);

/* ---- commands ------------------------------------------------------------------------ */

struct cmd {
	struct peer_work work;          /* posted start, deferred retries */
	struct conn *conn;              /* holds a reference */
	const struct nbd_export *exp;
	struct nbd_request req;
	uint8_t *payload;               /* WRITE data (req.length bytes) */
	struct out_buf *reply;          /* simple reply; READ: data follows it */
	uint64_t stats_ns;              /* peer_stats_begin: the figures' latency */

	pthread_mutex_t lock;           /* guards what follows */
	uint64_t deadline_ns;           /* give up retrying an empty pool then */
	uint64_t issued;                /* bytes (FLUSH: 1) handed out to chunks */
	unsigned holds;                 /* chunks out + threads issuing */
	bool finished;
	int error;                      /* first errno from the path */
};

/* Bytes of buffer a command holds until its reply is written: a READ's
 * reply data or a WRITE's payload; a TRIM's or WRITE_ZEROES' chunks in
 * the heap, at most 8 of --chunk-size (what --max-client-buffer counts). */
uint64_t cmd_buffer_bytes(const struct nbd_request *req);
/* A command for `c` (the caller's reference is taken over); NULL when out
 * of memory. READ commands get their reply buffer now. */
struct cmd *cmd_new(struct conn *c, const struct nbd_export *exp,
		    const struct nbd_request *req);
void cmd_free(struct cmd *cmd);
/* Hands a complete command to the workers. */
void cmd_post(struct peer *p, struct cmd *cmd);

/* ---- the socket thread -------------------------------------------------------------- */

/* What the socket thread calls up into: nbdd.c's exports and cmd.c's
 * commands. server.c never names a function of the files above it; they
 * call it (server_*) and conn.c (conn_send, conn_put, out_buf_new) by name. */
struct server_ops {
	/* The export called `name` (len bytes, not empty); NULL: none. */
	const struct nbd_export *(*find_export)(const uint8_t *name, uint32_t len);
	uint16_t (*transmission_flags)(void);
	/* See cmd_buffer_bytes, cmd_new, cmd_free, cmd_post above. */
	uint64_t (*cmd_buffer_bytes)(const struct nbd_request *req);
	struct cmd *(*cmd_new)(struct conn *c, const struct nbd_export *exp,
			       const struct nbd_request *req);
	void (*cmd_free)(struct cmd *cmd);
	void (*cmd_post)(struct peer *p, struct cmd *cmd);
};

/* Opens the listeners: 0, or -1 after logging which address failed. `ops`
 * must outlive the socket thread. */
int server_open(struct peer *p, const struct server_ops *ops);
/* Starts the socket threads. */
int server_start(void);
/* The stop's drain (peer_ops.drain, before server_stop): no new connection,
 * new commands answered NBD_ESHUTDOWN, each connection closed once every
 * command in flight on it is answered. Returns 0 once all have closed so;
 * 1 (logged, with the commands left) at deadline_ns, xseg_now_ns() time. */
int server_drain(uint64_t deadline_ns);
/* Stops them: no more connections or requests; returns once they have
 * ended, so nothing is posted afterwards. */
void server_stop(void);
/* Frees what is left (after the workers ended). */
void server_close(void);
/* nbdd's own figures for `xseg stats`: `,"key":value` fields into buf (at
 * most len bytes with the NUL); returns what snprintf would. */
int server_stats(char *buf, size_t len);

#endif /* NBDD_NBDD_H */
