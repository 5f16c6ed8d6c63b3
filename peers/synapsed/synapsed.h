/*
 * synapsed's internals, shared by its files.
 *
 * Threads. One network thread (net.c) owns every socket: it accepts,
 * connects and reconnects, reads and decodes frames, writes queued frames
 * and expires timed-out requests. It also submits request frames to the
 * target itself (peer_send_any) and answers replies read into their
 * requests (peer_answer); what it cannot (pool full, a reply that needs a
 * copy) goes to the workers with peer_post. The workers turn accepted
 * requests into request frames (outbound.c) and the target's replies into
 * reply frames (inbound.c), and write them to the socket themselves when
 * nobody else is writing. At depth 1, while it spins, the network thread
 * does the workers' round too (net_helper) with the workers parked.
 *
 * Locking. S.lock guards the slot table, every connection's `gen`, `up`,
 * queues and `incoming`(_bytes); a connection's wlock guards writing to its socket;
 * the rest of a connection belongs to the network thread. Lock order:
 * wlock, then S.lock. S.inflight_bytes is atomic (released from any thread,
 * reserved by the network thread only).
 *
 * Limits (limits.c, budget.c): an incoming connection must complete each frame within
 * --timeout and is closed after --idle-timeout of silence; request bodies
 * (and the replies they will need) are reserved from --max-inflight-bytes
 * before anything is allocated; a full table (--max-connections) evicts
 * its longest-idle connection.
 */
#ifndef SYNAPSED_H
#define SYNAPSED_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "peer/peer.h"
#include "peer/addr.h"
#include "rx.h"
#include "slots.h"
#include "wire.h"

struct inbound;

#define REMOTE_CONN      0u            /* the --remote link's connection */
/* --timeouts of silence, requests owed, before the remote is taken for
 * stalled and its link closed (outbound_expire) */
#define STALL_TIMEOUTS   3u
#define MAX_ALLOW        32u
/* Requests from one connection handed to the workers and not yet
 * answered; past it the connection is not read (back-pressure). Their
 * bytes are bounded by the per-connection share of --max-inflight-bytes. */
#define MAX_INCOMING     1024u
/* The most one request can reserve: its target and data, and as much
 * again for its reply. */
#define MAX_CHARGE       (WIRE_MAX_TARGET + 2ull * WIRE_MAX_DATA)
/* Frames up to this many bytes go in the "small" queue: a connection
 * alternates between small and large frames, so a small request waits
 * behind at most one large frame. */
#define SMALL_FRAME      (64u * 1024 + WIRE_HEADER_LEN + WIRE_MAX_TARGET)

/* A frame ready to write: header, target, data in one allocation. */
struct frame {
	struct frame *next;
	uint64_t slot_id;      /* request frames: the slot's id; 0 for replies */
	size_t len, done;      /* bytes, bytes written */
	uint64_t charge;       /* bytes of S.inflight_bytes it holds (replies) */
	/* A reply to a client holds its request's place on the connection it
	 * goes to until written or dropped: one of conn's `incoming` and
	 * `charge` of its incoming_bytes (when conn is still generation
	 * conn_gen). So a client that does not read its replies keeps its
	 * share full and is not read either. */
	bool owed;
	uint32_t conn, conn_gen;
	uint8_t bytes[];
};

struct frame_queue {
	struct frame *head, **tail;
};

struct conn {
	/* under S.lock */
	uint32_t gen;          /* bumped when the connection closes */
	bool up;
	struct frame_queue small, large;
	bool large_turn;       /* alternation between the queues */
	bool asked;            /* a request was sent on it (the --remote link) */
	uint32_t incoming;     /* requests from it whose replies are not yet written */
	uint64_t incoming_bytes;   /* bytes reserved for its requests (and the one being read) */
	/* inbound.c: its requests go to the target in arrival order; one that
	 * found no xseg request or heap space (wait_busy, retried by a
	 * worker) holds back those after it (wait_first..wait_last) */
	struct inbound *wait_busy, *wait_first, *wait_last;

	/* under wlock: writing, by whichever thread gets there (a worker that
	 * just queued a frame writes it itself; no hand-off, no wake-up) */
	pthread_mutex_t wlock;
	bool writable;         /* connected, no write error */
	int write_err;         /* a write failed: the network thread closes it */
	bool read_paused;      /* a header waits for room (count or budget) */
	uint32_t events;       /* epoll interest now */
	struct frame *writing; /* frames taken from the queues, being written */

	/* network thread only (fd also under wlock when it changes) */
	int fd;                /* -1 when closed */
	bool used;             /* a slot in S.conns in use (inbound) */
	bool connecting;
	char peer[ADDR_TEXT_MAX];
	struct rx rx;          /* reading frames; rx.buf NULL when closed */
	bool body_direct;      /* rx.body is a request's data area: not ours to free */
	void *body_owner;      /* an inbound request, or NULL for a reply */
	uint64_t frame_since_ns;   /* a frame began arriving (0: none, or paused) */
	uint64_t idle_since_ns;    /* last byte read or last work for it */
	uint64_t frames_done;      /* complete frames read on it */
	/* epochs.c: its requester (1 + its index; 0: no hello) and epoch */
	uint32_t requester;
	uint64_t epoch;
	/* --remote link only */
	uint64_t retry_at_ns, backoff_ns;
	uint64_t connected_ns;     /* when this connection came up */
	bool warned_down;      /* this outage was logged: say no more until the
				* link proves itself again (conn_close) */
};

struct synapsed {
	/* options */
	struct net_addr listen_addr, remote_addr;
	bool have_listen, have_remote;
	struct net_addr allow[MAX_ALLOW];
	unsigned nr_allow;
	uint64_t target_port;
	bool have_target;
	uint64_t timeout_ns;
	uint64_t net_spin_ns;   /* --net-spin-us */
	uint64_t idle_timeout_ns;   /* --idle-timeout; 0: never */
	uint64_t retry_limit_ns;    /* --retry-limit: a request waiting for the pool */
	uint64_t max_inflight;      /* --max-inflight-bytes */
	uint64_t conn_inflight;     /* one connection's share of it */
	uint32_t max_conns;         /* --max-connections: incoming ones */

	struct peer *peer;
	pthread_mutex_t lock;
	struct slot_table slots;
	struct conn *conns;     /* [0] the --remote link, then incoming ones */
	uint32_t nr_conns;      /* max_conns + 1 */
	_Atomic uint64_t inflight_bytes;   /* reserved for requests and replies */
	_Atomic int budget_wanted;  /* a header waits for inflight_bytes */
	/* Answers (a reply, mostly) that came while the worker that sent their
	 * request was still in its writev: held until it returned (S.lock). */
	uint64_t answers_held;
	struct limit_counts {       /* network thread only */
		uint64_t idle_closed, frame_timeouts, evicted, refused_full,
			 over_budget, budget_waits;
	} counts;
	/* xseg stats (synapsed.c): the --remote link closed as stalled
	 * (outbound_expire), requests refused for want of a slot */
	_Atomic uint64_t remote_stalls, slot_refusals;
	/* connections closed or refused as older than another of their
	 * requester (epochs.c) */
	_Atomic uint64_t superseded;
	/* incoming connections whose requester said hello (epochs.c; conn.c
	 * on their close): in xseg stats as "requesters", which xseg down
	 * waits on before it stops a listener that a remote path sends to */
	_Atomic uint64_t requesters;
	int wake_fd;            /* eventfd: workers -> network thread */
	_Atomic int wake_pending;
	_Atomic int remote_down;  /* errno of the last failed connect, 0 when up or
				   * trying: requests then fail at once */
	_Atomic int stopping;   /* the peer is stopping: serve no new requests */
	_Atomic int submitting; /* the network thread, between its look at
				 * `stopping` and its submit: on_stop waits */
	_Atomic uint64_t inbound_live;   /* requests from the network not yet replied to */
	_Atomic int quit;       /* the network thread ends */
	pthread_t net_thread;
	bool net_started;
	struct peer_thread *net_helper;  /* the network thread's worker rounds */
};

extern struct synapsed S;

/* wake.c (below every other file) */
/* Wakes the network thread (a connection to close or to read again). */
void net_wake(void);

/* budget.c: --max-inflight-bytes (below frame.c) */
/* Bytes a request reserves: its body, and room for its reply. */
uint64_t request_charge(const struct wire_header *h);
/* Reserves `charge` for connection c (lock held): 1 done, 0 not now, -1
 * never (more than a connection may hold). */
int budget_reserve_locked(struct conn *c, uint64_t charge);
/* Gives `charge` back to the total (any thread, any lock). */
void budget_release(uint64_t charge);

/* frame.c */
struct frame *frame_alloc(size_t len);
/* Frees f and gives back what it holds of S.inflight_bytes and, a reply
 * `owed`, its place on its connection. frame_free takes S.lock for that;
 * frame_free_locked is called with it held. */
void frame_free(struct frame *f);
void frame_free_locked(struct frame *f);
/* f, a reply not yet queued to a request of `charge` bytes from
 * connection ci (generation gen), takes that request's reservation and its
 * place on the connection: the caller gives both up. */
void frame_owe(struct frame *f, uint32_t ci, uint32_t gen, uint64_t charge);
/* A frame of a header and body_len more bytes. */
struct frame *frame_new(size_t body_len);
void frame_queue_init(struct frame_queue *q);
void frame_queue_push(struct frame_queue *q, struct frame *f);
struct frame *frame_queue_pop(struct frame_queue *q);
/* Frees every frame of q (lock held). */
void frame_queue_free(struct frame_queue *q);
/* Queues f on connection c (lock held); frees f if c is not generation
 * `gen` any more. Returns true when queued. */
bool conn_queue_locked(struct conn *c, uint32_t gen, struct frame *f);
/* The next frame to write, alternating small and large (lock held). */
struct frame *conn_next_frame_locked(struct conn *c);
/* A reply frame with no data, for a request that failed here. */
struct frame *frame_failed_reply(const struct wire_header *req, int err);

/* net.c and conn.c: the socket layer. It calls the layers above only
 * through the net_ops synapsed.c gives net_start; they call it by name.
 * Every hook is called on the network thread. */
struct net_ops {
	/* epochs.c: a requester's hello, the first frame of its connection;
	 * -1 to drop the connection for *why. */
	int (*hello)(struct conn *c, uint32_t ci, const struct wire_header *h, const char **why);

	/* inbound.c: request frames from the network */
	/* A request header arrived. 1: *body is the buffer for its body
	 * (target_len + data_len bytes), *owner its owner; 0: no room now (too
	 * many requests out or --max-inflight-bytes reserved), ask again
	 * later; -1: drop the connection for *why. */
	int (*request_header)(struct conn *c, uint32_t ci, const struct wire_header *h,
			      uint8_t **body, void **owner, const char **why);
	/* The body is in: hand it to a worker. */
	void (*request_done)(void *owner);
	/* The connection closed in the middle of owner's body. */
	void (*request_abandon)(void *owner);

	/* outbound.c: replies from the --remote synapsed */
	/* A reply header arrived on c; -1 to drop the connection (reason
	 * logged), else 0 and the body is read into *direct when set (the
	 * request's own data area: finish with reply_received), or into a
	 * malloc'd buffer of target_len + data_len bytes (reply_done). */
	int (*reply_header)(struct conn *c, uint32_t ci, const struct wire_header *h,
			    uint8_t **direct);
	/* The reply's body is in; takes `data` (malloc'd). */
	void (*reply_done)(struct conn *c, uint32_t ci, const struct wire_header *h,
			   uint8_t *data, uint64_t data_len);
	/* The body read into *direct is complete. */
	void (*reply_received)(const struct wire_header *h);
	/* Fails what timed out; drops a connection that stopped answering. */
	void (*expire)(uint64_t now_ns);
	/* The remote is unreachable: fail every request still waiting to be
	 * sent with `err` and drop their frames. */
	void (*fail_queued)(int err);
	/* Connection ci closed; fail its requests with `err`. */
	void (*conn_closed)(uint32_t ci, uint32_t old_gen, int err);

	/* limits.c: what one client may hold */
	/* Close connections past their frame deadline or idle too long. */
	void (*sweep)(uint64_t now);
	/* The table full: close the incoming connection idle the longest (or,
	 * none idle, one whose first header waits for room); its index, or 0
	 * when there is none. */
	uint32_t (*evict)(void);
	/* The counters, in one log line (at stop). */
	void (*report)(void);
};
/* Opens the sockets and starts the network thread; `ops` must outlive it. */
int net_start(const struct net_ops *ops);
void net_stop(void);
/* conn.c: closes connection ci, logging `why` (network thread). */
void conn_close(uint32_t ci, const char *why, int err);
/* No request from c out, no reply to write to it. */
bool conn_owes_nothing(struct conn *c);
/* Nothing under way on c: that, and no partial frame, not waiting for room. */
bool conn_idle(struct conn *c);
/* Writes connection ci's queued frames now if nobody else is writing;
 * any thread. */
void conn_kick(uint32_t ci);
/* Writes the frame in iov[0..n) now, without copying it, when connection
 * ci (generation gen) is idle and nobody else is writing; what the socket
 * does not take is copied for the network thread to finish. For a
 * request, slot `idx` becomes SENT and in flight first; for a reply
 * (idx SLOT_NONE), the copy takes its request's place on the connection
 * and `charge` (frame_owe). WRITE_NOT: nothing done, queue a copy
 * instead; WRITE_WHOLE: written; WRITE_REST: the rest copied (a reply's
 * place moved to it). Any thread. */
struct iovec;
enum write_now { WRITE_NOT, WRITE_WHOLE, WRITE_REST };
enum write_now conn_write_now(uint32_t ci, uint32_t gen, const struct iovec *iov, int n,
			      uint32_t idx, uint64_t charge);

/* outbound.c: requests to the --remote synapsed (above net.c); the
 * network thread reaches the rest through struct net_ops. */
void outbound_on_request(struct peer_thread *t, struct xseg_request *req);
int outbound_reply_header(struct conn *c, uint32_t ci, const struct wire_header *h,
			  uint8_t **direct);
void outbound_reply_done(struct conn *c, uint32_t ci, const struct wire_header *h,
			 uint8_t *data, uint64_t data_len);
void outbound_reply_received(const struct wire_header *h);
void outbound_expire(uint64_t now_ns);
void outbound_fail_queued(int err);
void outbound_conn_closed(uint32_t ci, uint32_t old_gen, int err);
/* Its figures, in one log line (at stop). */
void outbound_report(void);

/* inbound.c: requests from the network to --target-port (above net.c;
 * net_ops hooks) */
int inbound_request_header(struct conn *c, uint32_t ci, const struct wire_header *h,
			   uint8_t **body, void **owner, const char **why);
void inbound_request_done(void *owner);
void inbound_abandon(void *owner);

/* hello.c: the --remote link's hello (below conn.c) */
/* Names this requester: from the host's name, the segment and the port. */
void hello_init(void);
/* A hello frame with this connection's epoch (larger than the last). */
struct frame *hello_frame(void);

/* epochs.c: a requester's older connections run nothing once a newer one
 * said hello (above net.c; the hello is a net_ops hook) */
int epochs_init(void);
int epochs_hello(struct conn *c, uint32_t ci, const struct wire_header *h, const char **why);
/* A request from the network on its way to the target, as epochs.c sees
 * it (in the request's inbound; the lists are epochs.c's, under S.lock). */
struct epoch_ticket {
	struct epoch_ticket *prev, *next;   /* NULL: not at the target */
	uint32_t requester;    /* its connection's: 1 + index; 0: no hello */
	uint64_t epoch;
	uint32_t op;
	const uint8_t *target;
	uint32_t target_len;
	uint64_t offset, size;
};
/* Before request t goes to the target: 1 it may (listed until
 * epochs_release), 0 not yet (a request of an older connection of its
 * requester that it overlaps is at the target), -1 never (a newer
 * connection of its requester said hello). */
int epochs_claim(struct epoch_ticket *t);
/* Its reply came (or its submit failed): off the list, if it was on it. */
void epochs_release(struct epoch_ticket *t);

/* limits.c: deadlines and eviction (above net.c; net_ops hooks) */
void limits_sweep(uint64_t now);
uint32_t limits_evict(void);
void limits_report(void);

#endif
