/*
 * libxseg: a shared-memory segment through which processes ("peers") pass
 * requests from port to port.
 *
 * A segment is POSIX shared memory holding, at fixed offsets recorded in its
 * header: a port table, a fixed pool of requests and a data heap for request
 * buffers. Nothing inside it is a raw pointer, so every process may map it at
 * a different address.
 *
 * Life of a request (see docs/architecture.md):
 *   client:  xseg_get_request -> xseg_prep_request -> fill -> xseg_submit
 *   server:  xseg_accept -> serve -> xseg_respond
 *   client:  xseg_receive -> read the result -> xseg_put_request
 * A server that passes a request on to another port uses xseg_forward; the
 * reply then comes back to it first, and it responds in turn.
 *
 * Every call validates its arguments and returns a negative errno (or NULL
 * with errno set) instead of touching the segment on bad input. The last
 * error's explanation, naming the failing value, is in xseg_last_error().
 *
 * Thread safety: every call may be made from any thread of any process that
 * joined the segment, except where noted. Queues are lock-free, so a process
 * that dies mid-call never leaves a lock held that the others wait on.
 */
#ifndef XSEG_XSEG_H
#define XSEG_XSEG_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- limits and constants ------------------------------------------- */

#define XSEG_MAX_TARGETLEN   255u        /* bytes, without the NUL */
/* A request's data starts at least this far into its buffer, so that a
 * forwarder can rename the target in place (vlmcd: a volume's name to an
 * object's) with up to XSEG_TARGET_ROOM - 1 bytes. */
#define XSEG_TARGET_ROOM     128u
#define XSEG_MAX_PATH        16u         /* ports a request may pass through */
#define XSEG_MAX_PORTS       65534u
#define XSEG_MAX_REQUESTS    (1u << 20)
#define XSEG_NO_PORT         UINT32_MAX
#define XSEG_NAME_MAX        200u        /* segment name, without leading '/' */

/* Defaults used by xseg create and by peers that create their own segment. */
#define XSEG_DEFAULT_PORTS     64u
#define XSEG_DEFAULT_REQUESTS  4096u
#define XSEG_DEFAULT_HEAP      (256ull << 20)

/* ---- request operations, flags, states -------------------------------- */

enum xseg_op {
	X_PING = 0,
	X_READ = 1,
	X_WRITE = 2,
	X_FLUSH = 3,    /* barrier: every write acknowledged before it is durable */
	X_DELETE = 4,
	X_INFO = 5,     /* reply data: struct xseg_reply_info */
	X_COPY = 6,     /* target = destination; data: struct xseg_request_copy */
	X_CONTROL = 7,  /* peer-specific control message, data: text */
	X_OP_MAX
};

/* Request flags. */
#define XF_FUA    (1u << 0)  /* this write is durable before it is answered */
#define XF_FLUSH  (1u << 1)  /* a flush barrier precedes this request */
/* a primary cache's copy of a write for its replica (cached --mirror-port):
 * a cache that is no replica (one promoted since) refuses it, or it would
 * hold the primary's bytes as its own and write them back later */
#define XF_MIRROR (1u << 2)
#define XF_ALL    (XF_FUA | XF_FLUSH | XF_MIRROR)
/* with XF_MIRROR: the primary's mirror epoch, 16 bits (XF_TAG(f)), set by
 * the primary's last mirror-reset: a replica refuses what a primary made
 * before the reset it took last (held on the way, it may come after) */
#define XF_TAG_SHIFT 16
#define XF_TAG_MASK  (0xffffu << XF_TAG_SHIFT)
#define XF_TAG(f)    (((f) & XF_TAG_MASK) >> XF_TAG_SHIFT)
#define XF_WIRE      (XF_ALL | XF_TAG_MASK)   /* what crosses synapsed */

/* Request states. A request is in exactly one of these. */
enum xseg_state {
	XS_FREE = 0,      /* in the pool */
	XS_ALLOCATED = 1, /* held by the port that got it, not yet submitted */
	XS_QUEUED = 2,    /* in some port's request queue */
	XS_ACCEPTED = 3,  /* held by the port that accepted it */
	XS_REPLIED = 4,   /* in some port's reply queue */
	XS_RECEIVED = 5,  /* back at the port it was replied to */
};

/* Outcome of a served request (req->result). */
enum xseg_result {
	XR_NONE = 0,
	XR_SERVED = 1,
	XR_FAILED = 2,    /* req->error holds a positive errno */
};

/* INFO reply payload. */
struct xseg_reply_info {
	uint64_t size;
};

/* COPY request payload: the source object. */
struct xseg_request_copy {
	uint32_t src_len;
	char src[XSEG_MAX_TARGETLEN + 1];
};

/* A hop on a request's return path: the port to reply to, the epoch of that
 * port's owner when it passed the request on (a reply for an owner that has
 * since left or died is dropped, never handed to the port's next owner) and
 * the cookie (req->priv) it had then; restored on reply. */
struct xseg_path_hop {
	uint32_t port;
	uint32_t epoch;
	uint64_t cookie;
};

/*
 * A request. It lives in the segment; its address is valid only in the
 * process that obtained it from this library. Fields a user may read and
 * write directly are marked (rw); the rest belong to libxseg.
 */
struct xseg_request {
	uint32_t index;           /* position in the pool */
	uint32_t generation;      /* bumped each time it leaves the pool */
	uint32_t op;              /* (rw) enum xseg_op */
	uint32_t flags;           /* (rw) XF_* */
	uint64_t offset;          /* (rw) byte offset within the target */
	uint64_t size;            /* (rw) bytes asked for */
	uint64_t serviced;        /* (rw) bytes done, set by the server */
	uint32_t result;          /* (rw) enum xseg_result, set by the server */
	int32_t  error;           /* (rw) errno when result is XR_FAILED */
	uint64_t priv;            /* (rw) the holder's cookie, opaque to libxseg;
				   * each hop gets its own back with the reply */
	uint64_t submit_ns;       /* CLOCK_MONOTONIC at the first submit */

	uint32_t state;           /* enum xseg_state (atomic) */
	uint32_t src_port;        /* the port that got the request */
	uint32_t dst_port;        /* the port it was last addressed to */
	uint32_t holder;          /* port responsible for it now */
	uint64_t pushing;         /* libxseg's: its last push onto a queue, by
				   * whom, where, done or not (request.c;
				   * beside state and holder: one line) */
	uint32_t path_len;        /* ports the reply must travel back through */
	uint32_t path_pad;
	struct xseg_path_hop path[XSEG_MAX_PATH];

	uint32_t targetlen;       /* target name length, without the NUL */
	uint32_t buf_pad;
	uint64_t buffer;          /* heap offset of [target\0 ... data] */
	uint64_t bufferlen;       /* bytes allocated at buffer, 0 = no buffer */
	uint64_t data_off;        /* offset of data within buffer */
	uint64_t datalen;         /* data bytes available */
};

/* ---- segment ----------------------------------------------------------- */

struct xseg;    /* a process's handle on a joined segment */

struct xseg_config {
	uint32_t nr_ports;      /* 1 .. XSEG_MAX_PORTS */
	uint32_t nr_requests;   /* 1 .. XSEG_MAX_REQUESTS */
	uint64_t heap_size;     /* bytes; rounded up to a power of two */
	mode_t   mode;          /* shm permissions, 0600 if 0 */
};

/* Fills cfg with the defaults above. */
void xseg_config_default(struct xseg_config *cfg);

/* Creates segment `name` (no leading '/'). -EEXIST if it exists. */
int xseg_create(const char *name, const struct xseg_config *cfg);

/* Removes the segment's name. Processes that joined keep their mapping. */
int xseg_destroy(const char *name);

/*
 * Maps segment `name` and checks its header. Fails with -ENOENT (no such
 * segment), -EPROTO (another layout version) or -EBADMSG (corrupt header);
 * xseg_last_error() says which field was wrong.
 */
int xseg_join(const char *name, struct xseg **out);

/* Unbinds every port this handle bound and unmaps. */
void xseg_leave(struct xseg *seg);

/* Thread-local text of the last failure of any call in this thread. */
const char *xseg_last_error(void);

/* pid runs: it exists and is not a zombie (a daemon killed stays one until
 * init reaps it, which some inits do only now and then). A process whose
 * main thread alone has ended runs. Where /proc cannot be read: kill(2)'s
 * word. For pidfiles; a port's owner is checked with its start time too. */
bool xseg_pid_alive(pid_t pid);

/* Segment-wide numbers, for xseg info. */
struct xseg_segment_info {
	uint32_t layout_version;
	uint32_t nr_ports;
	uint32_t nr_requests;
	uint32_t free_requests;
	uint32_t reserved_requests; /* held by peers' reserves (xseg_reserve) */
	uint64_t segment_size;
	uint64_t heap_size;
	uint64_t heap_used;       /* bytes handed out, rounding included */
	uint64_t heap_free_largest; /* the largest block that can be allocated now */
	uint64_t heap_allocs;     /* buffers outstanding */
	uint64_t instance;        /* random at create, never 0: this segment, not another of its name */
};
int xseg_segment_info(struct xseg *seg, struct xseg_segment_info *info);

/* ---- ports ------------------------------------------------------------- */

/*
 * Binds `port` to this process. A port whose owner is alive cannot be taken
 * (-EBUSY, and the owner's pid in xseg_last_error()). A port whose owner has
 * died is taken over: requests the dead owner held are failed back to their
 * issuers (EPIPE) or returned to the pool, and its queued requests stay for
 * the new owner.
 *
 * Every bind and every leave starts a new epoch of the port. A request
 * carries, for each hop of its return path, the epoch in which that hop
 * passed it on; a reply whose hop's epoch is over (the owner left, died or
 * was replaced) is never delivered to whoever owns the port now: it is
 * failed on (EPIPE) to the hops before it, or, at the issuer's hop, put
 * back in the pool with its buffer (counted in the port's dropped_replies).
 */
int xseg_bind_port(struct xseg *seg, uint32_t port);

/* Binds [first, last] as one group: one xseg_wait covers all of them. */
int xseg_bind_range(struct xseg *seg, uint32_t first, uint32_t last);

/*
 * Binds [first, last] as one group of lanes: `first` is the service's
 * port, and a request submitted to it (or routed to it) from port P is
 * queued on lane first + P % (last - first + 1), so that many clients and
 * many worker threads share no one queue. Each submitter keeps one lane
 * (its requests stay in order). Replies go back as always. A lane left
 * or taken over apart from `first` is not used any more.
 */
int xseg_bind_lanes(struct xseg *seg, uint32_t first, uint32_t last);
/* How many lanes `port` leads (its own among them), or 0 when it leads none. */
unsigned xseg_port_lanes(struct xseg *seg, uint32_t port);

/*
 * Gives the port up, settling everything the port still has: requests
 * queued on it are failed back to their issuers with EHOSTDOWN, requests it
 * holds or owes a reply to are failed back (EPIPE) or put back in the pool,
 * replies queued for it are put back in the pool. Call it once no thread of
 * this process uses the port's requests any more. Replies still on their
 * way are dropped when they arrive (see the epochs above).
 */
int xseg_leave_port(struct xseg *seg, uint32_t port);

/*
 * For a peer that waits on another: when `port`'s owner has died and nobody
 * took the port over, settles what the dead owner held (as a takeover does:
 * EPIPE upstream), fails the requests queued on it back to their issuers
 * with `err`, and leaves the port unbound, so that new submits fail at once
 * (ENOENT) instead of waiting for a peer that is gone. Returns 0 when the
 * owner is alive or the port unbound (nothing done), else 1 + the number of
 * queued requests failed. A request submitted in the instant of the reap
 * (its submitter saw the port still owned) can land in the unbound port's
 * queue after the reap emptied it: the reaper, once it has released the
 * port, or the submitter, once its push is done, sees it (whichever looks
 * last) and reaps the port again, which passes it on where the route
 * leads or fails it back. The same holds for xseg_leave_port.
 */
int xseg_reap_port(struct xseg *seg, uint32_t port, int err);

/*
 * Reaps (xseg_reap_port, EHOSTDOWN) every port that this handle has
 * submitted to or replied to and whose owner has died, or that is unbound
 * with requests or replies stranded in its queues. So a client whose
 * server died gets its requests failed back at once, and replies sent to a
 * client that died go back to the pool. xseg_poll calls it before it
 * sleeps, at most ten times a second per handle; a peer's housekeeping
 * thread may call it directly. Returns how many ports were reaped.
 */
int xseg_reap_dead_peers(struct xseg *seg);

struct xseg_port_info {
	uint32_t port;
	pid_t    owner;           /* 0 = unbound */
	int      owner_alive;
	uint32_t next_hop;        /* XSEG_NO_PORT = none */
	uint32_t request_depth;   /* requests waiting to be accepted */
	uint32_t reply_depth;     /* replies waiting to be received */
	uint32_t waiters;         /* threads asleep on the port */
	uint64_t submitted;       /* requests delivered to the port */
	uint64_t replied;         /* replies delivered to the port */
	uint32_t reserved;        /* requests in its owner's reserve */
	uint32_t epoch;           /* bumped by every bind and leave */
	uint64_t dropped_replies; /* replies that came back after their owner left */
	uint64_t dirty_bytes;     /* what its cache published (xseg_port_set_dirty) */
	uint64_t given_up;        /* times xseg_port_give_up_dirty gave data up */
	uint64_t given_up_bytes;  /* ... and how many bytes in all */
};
int xseg_port_info(struct xseg *seg, uint32_t port, struct xseg_port_info *info);

/*
 * Fail closed: a cache never lets the path serve older data. A cache
 * publishes on its port whether it holds acknowledged data that the port
 * behind it lacks (xseg_port_set_dirty: the bytes, or any non-zero value
 * while it may hold some); it must publish before it acknowledges such
 * data and may clear it only once all of it reached the blocker. The
 * figure outlives the owner: while a port nobody serves says it holds
 * dirty data, a route through it ends there and submits fail with EIO
 * naming the port, instead of skipping the dead hop to the blocker's
 * older data. A cache that binds the port again (recovering its data)
 * publishes anew; xseg_port_give_up_dirty, for a port no live process
 * serves (`xseg unplug --force`), clears it and says how many bytes were
 * given up, and counts it on the port (given_up, given_up_bytes in
 * xseg_port_info) for as long as the segment lives: a cache restarting on
 * a persist file that still holds the given-up data refuses to replay it
 * over what the path wrote to the blocker since. A port that never
 * published is skipped when dead, as always.
 *
 *   set:     the caller must have bound `port`; 0 or -errno.
 *   give up: -EBUSY while a live owner serves the port; 0 and *bytes.
 */
int xseg_port_set_dirty(struct xseg *seg, uint32_t port, uint64_t bytes);
int xseg_port_give_up_dirty(struct xseg *seg, uint32_t port, uint64_t *bytes);

/* ---- routing ------------------------------------------------------------ */

/*
 * Requests submitted to `port` are delivered to `next` instead; next's own
 * requests for `port` (and those of anything behind it) reach `port`. Chains
 * are allowed; a route that would close a cycle, or make a chain (counted
 * from its start, behind `port`, to its front) longer than
 * XSEG_MAX_PATH - 1 hops (a client's request through it must fit its
 * return path), fails with -ELOOP, one from
 * or to a lane (not its first port) with -EINVAL.
 */
int xseg_set_next_hop(struct xseg *seg, uint32_t port, uint32_t next);
int xseg_clear_next_hop(struct xseg *seg, uint32_t port);
/*
 * As xseg_set_next_hop (next = XSEG_NO_PORT: as xseg_clear_next_hop), but
 * only while port's next hop is still `old` (XSEG_NO_PORT: none): -EAGAIN
 * when another change came first. For a tool that decided on the route it
 * read: two plugs at once must not both win, the second overwriting the
 * first's cache out of the path.
 */
int xseg_replace_next_hop(struct xseg *seg, uint32_t port, uint32_t old, uint32_t next);
/*
 * Takes `port` out of every chain it is in, spliced: each port routed to
 * it is routed to port's own next hop instead (a cache plugged in front
 * of it stays in the path), and port's next hop is cleared; all under the
 * route lock, as one change. Done hop by hop with xseg_replace_next_hop,
 * two splices at once (B -> C -> D, C and D unplugged together) could
 * route B to D after D had spliced itself out: both said done, B left
 * routed to D. Returns how many ports were routed to it, or -errno.
 */
int xseg_splice_out(struct xseg *seg, uint32_t port);
/* Returns the next hop or XSEG_NO_PORT. */
uint32_t xseg_get_next_hop(struct xseg *seg, uint32_t port);

/* Where a request submitted by `from` for `dst` is delivered right now (a new
 * one; one on its way also skips the hops on its return path). */
uint32_t xseg_resolve_route(struct xseg *seg, uint32_t from, uint32_t dst);

/* ---- requests ------------------------------------------------------------ */

/* Takes a request from the pool for `src_port` (which this process must have
 * bound). NULL with errno = ENOBUFS when the pool is empty; before saying so
 * it reclaims, at most ten times a second, what dead processes' ports held,
 * and xseg_last_error() says who holds the requests. */
struct xseg_request *xseg_get_request(struct xseg *seg, uint32_t src_port);

/* Returns a request (and its buffer) to the pool. Only the holder may. */
int xseg_put_request(struct xseg *seg, struct xseg_request *req);

/*
 * A process's reserve of requests, kept out of the pool. The pool is shared
 * by every peer: when clients hold all of it, a peer that needs a request
 * of its own to serve theirs (a cache's read from its blocker, vlmcd's
 * object request) would wait forever for one to come back, and none would.
 * With a reserve it serves them one at a time instead. Thread-safe.
 *
 *   create:  takes up to `max` requests for `port` (bound here) now; max 0
 *            means XSEG_RESERVE_DEFAULT, at most 1/16 of the pool (at
 *            least 1). NULL with errno on a bad argument or no memory.
 *   get:     the pool first, the reserve when the pool is empty; NULL with
 *            errno ENOBUFS when both are.
 *   put:     back to the pool (buffer freed); a reserve below its size
 *            then takes one from the pool again. 0 or -errno.
 *   destroy: returns the reserve to the pool.
 * A dead process's reserve goes back to the pool with the rest of what its
 * ports held. xseg_segment_info and xseg_port_info count reserved requests.
 */
#define XSEG_RESERVE_DEFAULT 8u
struct xseg_reserve;
struct xseg_reserve *xseg_reserve_create(struct xseg *seg, uint32_t port, unsigned max);
struct xseg_request *xseg_reserve_get(struct xseg_reserve *r);
int xseg_reserve_put(struct xseg_reserve *r, struct xseg_request *req);
/* Requests in the reserve now (a snapshot). */
unsigned xseg_reserve_count(struct xseg_reserve *r);
void xseg_reserve_destroy(struct xseg_reserve *r);

/*
 * Gives the request a buffer for a target of `targetlen` bytes (plus NUL) and
 * `datalen` bytes of data, reusing the current one when it is large enough.
 * The data starts at XSEG_TARGET_ROOM or past the target, whichever is
 * further (data_off).
 * -ENAMETOOLONG, -ENOMEM (heap full) or -EINVAL.
 */
int xseg_prep_request(struct xseg *seg, struct xseg_request *req,
		      uint32_t targetlen, uint64_t datalen);

/* prep_request for strlen(target) plus copying the name in. */
int xseg_prep_target(struct xseg *seg, struct xseg_request *req,
		     const char *target, uint64_t datalen);

/* Local pointers into the request's buffer (NULL without a buffer). */
char *xseg_get_target(struct xseg *seg, struct xseg_request *req);
void *xseg_get_data(struct xseg *seg, struct xseg_request *req);

/*
 * Sends `req`, held by `from` (a port of this process), to `dst`, following
 * routes (xseg_resolve_route). `from` is pushed on the request's return
 * path. Wakes a thread waiting on the receiving port. Returns the port it
 * was delivered to, or -errno (-EINVAL, -ENOENT if nobody bound the port,
 * -E2BIG if the return path is full).
 */
int xseg_submit(struct xseg *seg, struct xseg_request *req,
		uint32_t from, uint32_t dst);

/* Same as xseg_submit: a server passing an accepted request on. */
int xseg_forward(struct xseg *seg, struct xseg_request *req,
		 uint32_t from, uint32_t dst);

/* Takes up to `max` requests from port's request queue. Returns how many. */
int xseg_accept(struct xseg *seg, uint32_t port,
		struct xseg_request **reqs, unsigned max);

/* Sends the reply back along the return path. Returns the port it went to. */
int xseg_respond(struct xseg *seg, struct xseg_request *req, uint32_t from);

/* Takes up to `max` replies from port's reply queue. Returns how many. */
int xseg_receive(struct xseg *seg, uint32_t port,
		 struct xseg_request **reqs, unsigned max);

/* Pool index -> request, for tools; NULL when out of range. */
struct xseg_request *xseg_request_at(struct xseg *seg, uint32_t index);

/* ---- wake-up -------------------------------------------------------------- */

/*
 * Sleeps until a request or reply is queued on `port` (or on any port of its
 * bound group), or `timeout_ns` passes (0 = no timeout). Returns 1 when work
 * is there, 0 on timeout or a signal (or at once when a port of the group
 * left meanwhile: look, and wait, again), -errno on bad arguments. Never
 * misses a submit made before or during the call.
 */
int xseg_wait(struct xseg *seg, uint32_t port, uint64_t timeout_ns);

/* Non-zero when port (or its group) has a request or reply queued. */
int xseg_has_work(struct xseg *seg, uint32_t port);

/*
 * Spins up to `spin_ns` looking for work on `port`, yielding the CPU between
 * looks so that other peers on the same core run, then sleeps in xseg_wait.
 * Before it sleeps it reaps dead peers (xseg_reap_dead_peers, at most ten
 * times a second): a client waiting on a server that died gets its
 * requests back, failed, instead of waiting for its own timeout.
 */
int xseg_poll(struct xseg *seg, uint32_t port, uint64_t spin_ns,
	      uint64_t timeout_ns);

/*
 * For a process that also gets work from outside the segment (its own
 * threads): like xseg_poll, but `ready(arg)` is work too. Checked after the
 * sleeper registered, so work made visible before xseg_signal(seg, port) is
 * never missed. `ready` must be cheap and must not block.
 */
int xseg_poll_until(struct xseg *seg, uint32_t port, uint64_t spin_ns,
		    uint64_t timeout_ns, bool (*ready)(void *), void *arg);

/* Wakes one thread sleeping on port's group (after work was queued for it
 * outside the segment). Costs no system call when nobody sleeps. */
int xseg_signal(struct xseg *seg, uint32_t port);
/* Wakes every thread sleeping on port's group (a peer stopping: each of
 * its watchers must look at the stop flag, not sleep out its timeout). */
int xseg_signal_all(struct xseg *seg, uint32_t port);

/* ---- names ----------------------------------------------------------------- */

const char *xseg_op_name(uint32_t op);      /* "READ", ..., or "?" */
int xseg_op_from_name(const char *name);    /* -1 if unknown, case-insensitive */

/* Parses "123", "4K", "16M", "2G" (1024-based). -EINVAL / -ERANGE. */
int xseg_parse_size(const char *s, uint64_t *out);
/* Parses a non-negative integer that fits in `max`. */
int xseg_parse_uint(const char *s, uint64_t max, uint64_t *out);

uint64_t xseg_now_ns(void);   /* CLOCK_MONOTONIC */

#ifdef __cplusplus
}
#endif
#endif /* XSEG_XSEG_H */
