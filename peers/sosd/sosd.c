/*
 * sosd: the RADOS blocker. Each object is a RADOS object of the same name in
 * --pool.
 *
 * Every request becomes one or more asynchronous librados operations
 * (rados_aio_*); nothing blocks a thread per request, so as many requests are
 * in flight as the segment holds. librados completes them on its own
 * thread, which only hands each completion back to a worker with
 * peer_post(): the worker answers the request or starts its next step, so
 * librados's threads never touch a request and never wait on ours. The
 * request's data area (shared memory) is the I/O buffer: librados reads into
 * it and copies out of it, no bounce buffer.
 *
 *   READ    a missing object, or beyond its end: zeros; serviced = size
 *   WRITE   the full size; RADOS answers once the write is durable, so
 *           XF_FUA needs nothing more. A zero-length WRITE creates the object
 *   FLUSH   waits until every WRITE, COPY and DELETE accepted before it has
 *           completed (write_order.c); named or not, it is the same barrier
 *   DELETE  remove; ENOENT when missing
 *   INFO    struct xseg_reply_info with the object's size (0 when missing)
 *   COPY    the target becomes a copy of the source the payload names
 *           (stat, read, write_full; the C API has no copy-from). A
 *           source over COPY_PIECE is written in pieces (write_full, then
 *           writes at offsets): RADOS refuses one write past the OSDs'
 *           osd_max_write_size (90M by default) with EMSGSIZE. A COPY
 *           that fails part way leaves the target undefined. The sources
 *           held in memory at once are bounded by --max-copy-memory: a
 *           COPY whose source does not fit waits (in order) for others
 *           to end
 *   PING    served by the runtime
 * A request with XF_FLUSH set is preceded by a FLUSH barrier.
 *
 * Names, the COPY payload and the INFO reply follow the blocker contract
 * (include/peer/blocker.h), so a volume that works on filed works here.
 *
 * Cluster down or slow: every operation carries --op-timeout, after which it
 * fails with ETIMEDOUT; the peer keeps serving and succeeds again once the
 * cluster answers. A full pool fails a write that grows it ENOSPC at once
 * (FULL_TRY); overwrites and DELETEs go through. A deleted pool fails every
 * request EIO (librados's ENOENT is not a missing object then). Start fails within --connect-timeout with the conf file
 * and the monitor addresses named.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <inttypes.h>
#include <rados/librados.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "peer/blocker.h"
#include "peer/peer.h"
#include "xtypes/xannotate.h"
#include "fence.h"
#include "write_order.h"

#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

/* One warning a second of a kind (warn_now). */
struct warn_limit {
	_Atomic int64_t last_s;
	_Atomic uint64_t unlogged;
};

struct sosd {
	const char *pool, *conf, *id;
	uint64_t op_timeout, connect_timeout;
	uint64_t max_request, max_name, max_copy, max_copy_memory;
	struct peer *peer;
	/* COPY sources in memory (--max-copy-memory), and the COPYs waiting
	 * for room, oldest first */
	pthread_mutex_t copy_lock;
	uint64_t copy_held;
	struct sosd_op *copy_wait_head, *copy_wait_tail;
	_Atomic uint64_t copy_waits;
	rados_t cluster;
	rados_ioctx_t io;
	int64_t pool_id;
	atomic_bool pool_gone;
	struct write_order order;
	struct warn_limit failures, refusals;
	const char *fence_name;       /* --fence (fence.c), or NULL */
	struct sosd_fence fence;
};

static struct sosd S = {
	.id = "admin",
	.op_timeout = 30,
	.connect_timeout = 10,
	.max_request = 16u << 20,
	.max_name = XSEG_MAX_TARGETLEN,
	.max_copy = 128u << 20,
	.max_copy_memory = 512u << 20,
	.copy_lock = PTHREAD_MUTEX_INITIALIZER,
	.failures = { .last_s = -1 },
	.refusals = { .last_s = -1 },
};

/* Where a request stands between librados operations. */
enum stage {
	ST_READ, ST_WRITE, ST_DELETE, ST_INFO,
	ST_COPY_STAT, ST_COPY_READ, ST_COPY_WRITE,
};

/* One accepted request while sosd owns it. */
struct sosd_op {
	struct peer_work work;        /* the completion, posted to a worker */
	struct order_entry order;     /* a mutation in flight */
	struct order_waiter waiter;   /* behind a FLUSH barrier */
	struct xseg_request *req;
	rados_completion_t comp;
	int rc;                       /* librados's return value */
	int refused;                  /* errno of check_request, or 0 */
	enum stage stage;
	bool mutation;
	uint64_t stat_size;
	time_t stat_mtime;
	char *copy_buf;
	uint64_t copy_reserved;       /* of S.copy_held */
	struct sosd_op *copy_next;    /* waiting for --max-copy-memory */
	uint64_t copy_len;
	uint64_t copy_done;           /* bytes of copy_buf written to the target */
	char oid[XSEG_MAX_TARGETLEN + 1];
	char src[XSEG_MAX_TARGETLEN + 1];
};

/* The most one COPY write carries: under RADOS's default osd_max_write_size
 * (90M), with room to spare. */
#define COPY_PIECE (64ull << 20)

/* ---- options ------------------------------------------------------------- */

enum {
	OPT_POOL = 1, OPT_CONF, OPT_ID, OPT_OP_TIMEOUT, OPT_CONNECT_TIMEOUT,
	OPT_MAX_REQUEST, OPT_MAX_NAME, OPT_MAX_COPY, OPT_MAX_COPY_MEMORY, OPT_FENCE,
};

static const struct option sosd_options[] = {
	{ "pool", required_argument, NULL, OPT_POOL },
	{ "conf", required_argument, NULL, OPT_CONF },
	{ "id", required_argument, NULL, OPT_ID },
	{ "op-timeout", required_argument, NULL, OPT_OP_TIMEOUT },
	{ "connect-timeout", required_argument, NULL, OPT_CONNECT_TIMEOUT },
	{ "max-request-size", required_argument, NULL, OPT_MAX_REQUEST },
	{ "max-name-len", required_argument, NULL, OPT_MAX_NAME },
	{ "max-copy-size", required_argument, NULL, OPT_MAX_COPY },
	{ "max-copy-memory", required_argument, NULL, OPT_MAX_COPY_MEMORY },
	{ "fence", required_argument, NULL, OPT_FENCE },
	{ NULL, 0, NULL, 0 },
};

static const char sosd_usage[] =
"  --pool NAME              RADOS pool of the objects (required)\n"
"  --conf FILE              ceph.conf of the cluster (required)\n"
"  --id NAME                client id, without 'client.' (default admin)\n"
"  --op-timeout SECONDS     a RADOS operation not done by then fails with\n"
"                           ETIMEDOUT; 0 waits forever (default 30)\n"
"  --connect-timeout SECONDS  give up connecting at start (default 10)\n"
"  --max-request-size SIZE  largest READ/WRITE accepted (default 16M)\n"
"  --max-name-len N         longest object name accepted (default and at most 255)\n"
"  --max-copy-size SIZE     largest COPY source (read whole; default 128M)\n"
"  --max-copy-memory SIZE   COPY sources held in memory at once; a COPY that\n"
"                           does not fit waits (default 512M, at least\n"
"                           --max-copy-size)\n"
"  --fence NAME             one sosd at a time: take an exclusive lock on object\n"
"                           NAME of the pool before serving, blocklisting an\n"
"                           earlier holder (a killed sosd's writes still on\n"
"                           their way cannot land after ours); a live sosd\n"
"                           fenced so fails every request. Off by default\n";

static int parse_option(struct peer *p, int val, const char *arg)
{
	(void)p;
	switch (val) {
	case OPT_POOL:
		if (!*arg)
			return peer_arg_error("--pool", arg, "is empty");
		S.pool = arg;
		return 0;
	case OPT_CONF:
		if (!*arg)
			return peer_arg_error("--conf", arg, "is empty");
		S.conf = arg;
		return 0;
	case OPT_ID:
		if (!*arg || strncmp(arg, "client.", 7) == 0)
			return peer_arg_error("--id", arg, "must be a name without 'client.'");
		S.id = arg;
		return 0;
	case OPT_OP_TIMEOUT:
		return peer_arg_uint("--op-timeout", arg, 0, 86400, &S.op_timeout);
	case OPT_CONNECT_TIMEOUT:
		return peer_arg_uint("--connect-timeout", arg, 1, 3600, &S.connect_timeout);
	case OPT_MAX_REQUEST:
		return peer_arg_size("--max-request-size", arg, 1, 64u << 20, &S.max_request);
	case OPT_MAX_NAME:
		return peer_arg_uint("--max-name-len", arg, 1, XSEG_MAX_TARGETLEN, &S.max_name);
	case OPT_MAX_COPY:
		return peer_arg_size("--max-copy-size", arg, 1, 1ull << 30, &S.max_copy);
	case OPT_MAX_COPY_MEMORY:
		return peer_arg_size("--max-copy-memory", arg, 1, 1ull << 40, &S.max_copy_memory);
	case OPT_FENCE: {
		const char *why = NULL;
		if (blocker_check_name(arg, strlen(arg), 200, &why))
			return peer_arg_error("--fence", arg, why);
		S.fence_name = arg;
		return 0;
	}
	}
	return -1;
}

static int check_options(struct peer *p)
{
	(void)p;
	if (!S.pool) {
		fprintf(stderr, "sosd: --pool is required (see --help)\n");
		return -1;
	}
	if (!S.conf) {
		fprintf(stderr, "sosd: --conf is required (see --help)\n");
		return -1;
	}
	struct stat st;
	if (access(S.conf, R_OK) < 0)
		return peer_arg_error("--conf", S.conf, strerror(errno));
	/* librados says ENOENT for a directory: "No such file or directory" */
	if (stat(S.conf, &st) == 0 && S_ISDIR(st.st_mode))
		return peer_arg_error("--conf", S.conf, "is a directory");
	if (S.max_copy_memory < S.max_copy) {
		fprintf(stderr, "sosd: --max-copy-memory %" PRIu64 " is less than --max-copy-size "
			"%" PRIu64 ": a COPY that large would wait for ever\n", S.max_copy_memory,
			S.max_copy);
		return -1;
	}
	return 0;
}

/* ---- failures ------------------------------------------------------ */

/*
 * A cluster that is down fails every request, and a broken client can send
 * nothing but requests we refuse: one warning a second of each kind, saying
 * how many went unlogged, instead of one line per request (a client of bad
 * names wrote 10240 lines in 0.1 s). True: warn now, `also` says how many
 * were left out ("" for none).
 */
static bool warn_now(struct warn_limit *l, const char *verb, char *also, size_t len)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	int64_t last = atomic_load(&l->last_s);
	if (last == (int64_t)now.tv_sec ||
	    !atomic_compare_exchange_strong(&l->last_s, &last, (int64_t)now.tv_sec)) {
		atomic_fetch_add(&l->unlogged, 1);
		return false;
	}
	uint64_t more = atomic_exchange(&l->unlogged, 0);
	also[0] = '\0';
	if (more)
		snprintf(also, len, "; %" PRIu64 " more %s since the last warning", more, verb);
	return true;
}

/*
 * What a failure says of the cluster. ESHUTDOWN is librados's EBLOCKLISTED:
 * the cluster fenced this client off ('ceph osd blocklist add'), and every
 * request fails so until it is taken off the list. Said only as "Cannot
 * send after transport endpoint shutdown", nothing named the cause.
 */
static void failure_hint(int err, char *out, size_t len)
{
	out[0] = '\0';
	if (err == ETIMEDOUT) {
		snprintf(out, len, " (cluster down or slow? see --op-timeout)");
	} else if (err == ESHUTDOWN) {
		char *addrs = NULL;
		if (rados_getaddrs(S.cluster, &addrs) < 0)
			addrs = NULL;
		snprintf(out, len, " (the cluster has blocklisted this client, client.%s at %s: "
			 "every request fails until it is taken off 'ceph osd blocklist ls')",
			 S.id, addrs ? addrs : "?");
		if (addrs)
			rados_buffer_free(addrs);
	}
}

static void warn_failure(const struct sosd_op *op, int err)
{
	char also[80], hint[256];
	if (!warn_now(&S.failures, "failed", also, sizeof(also)))
		return;
	failure_hint(err, hint, sizeof(hint));
	peer_warn("%s '%s' in pool '%s' failed: %s%s%s", xseg_op_name(op->req->op), op->oid,
		  S.pool, strerror(err), hint, also);
}

/*
 * librados answers ENOENT for an operation on a pool that no longer exists
 * (deleted, or deleted and made again under its name: the ioctx keeps the
 * old pool's id), just as for a missing object. Taken for a missing object,
 * every READ was served zeros and INFO said size 0: acknowledged data read
 * back as zeros, with no error anywhere. librados's own map, which it
 * consulted before answering ENOENT for a missing pool, says which it was:
 * the pool is gone once its id is missing from the map (maps only move
 * forward and an id is never used again). That lookup waits for the
 * monitors' latest map, so it is made only until the pool is found gone.
 */
static int pool_gone_or(int rc)
{
	char name[256];
	if (rc != -ENOENT)
		return rc;
	if (!atomic_load(&S.pool_gone)) {
		int r = rados_pool_reverse_lookup(S.cluster, S.pool_id, name, sizeof(name));
		if (r >= 0 || r == -ERANGE)   /* there (ERANGE: a name over 255 bytes) */
			return rc;
	}
	if (!atomic_exchange(&S.pool_gone, true))
		peer_error("pool '%s' (id %" PRId64 ") no longer exists: every request fails "
			   "with EIO", S.pool, S.pool_id);
	return -EIO;
}

/* ---- answering --------------------------------------------------------------- */

static void start_op(struct peer_thread *t, struct sosd_op *op);
static void copy_read_source(struct peer_thread *t, struct sosd_op *op);
static struct sosd_op *copy_release(uint64_t bytes);

/* Answers the request (err 0: served), frees op, and starts the requests
 * that were waiting behind a barrier for this mutation. */
static void finish(struct peer_thread *t, struct sosd_op *op, int err)
{
	struct order_waiter *released = NULL;

	/* Answer before ending the mutation, so that a FLUSH it releases is
	 * answered after it (a client sees the write's reply first). */
	if (err && (err != ENOENT || op->req->op != X_DELETE))
		warn_failure(op, err);
	if (err)
		peer_fail(t, op->req, err);
	else
		peer_complete(t, op->req);
	if (op->mutation)
		released = write_order_end(&S.order, &op->order);
	free(op->copy_buf);
	struct sosd_op *copies = op->copy_reserved ? copy_release(op->copy_reserved) : NULL;
	free(op);
	while (released) {
		struct sosd_op *next = container_of(released, struct sosd_op, waiter);
		released = released->next;
		start_op(t, next);
	}
	while (copies) {
		struct sosd_op *next = copies->copy_next;
		copy_read_source(t, copies);
		copies = next;
	}
}

/* ---- --max-copy-memory ------------------------------------------------------ */

/* Reserves op's source size, or queues op behind the COPYs already
 * waiting (in order: a large one is not starved by small ones). True:
 * reserved, go on. */
static bool copy_reserve(struct sosd_op *op)
{
	uint64_t want = op->stat_size ? op->stat_size : 1;
	pthread_mutex_lock(&S.copy_lock);
	bool now = !S.copy_wait_head && S.copy_held + want <= S.max_copy_memory;
	uint64_t held = S.copy_held;
	if (now) {
		S.copy_held += want;
		op->copy_reserved = want;
	} else {
		op->copy_next = NULL;
		if (S.copy_wait_tail)
			S.copy_wait_tail->copy_next = op;
		else
			S.copy_wait_head = op;
		S.copy_wait_tail = op;
	}
	pthread_mutex_unlock(&S.copy_lock);
	if (!now) {
		atomic_fetch_add(&S.copy_waits, 1);
		peer_info("COPY of '%s' (%" PRIu64 " bytes) to '%s' waits for --max-copy-memory "
			  "(%" PRIu64 " of %" PRIu64 " held)", op->src, op->stat_size, op->oid, held,
			  S.max_copy_memory);
	}
	return now;
}

/* Gives `bytes` back; returns the waiting COPYs that fit now, reserved,
 * linked by copy_next, to be started by the caller. */
static struct sosd_op *copy_release(uint64_t bytes)
{
	struct sosd_op *go = NULL, **tail = &go;
	pthread_mutex_lock(&S.copy_lock);
	S.copy_held -= bytes;
	struct sosd_op *op;
	while ((op = S.copy_wait_head)) {
		uint64_t want = op->stat_size ? op->stat_size : 1;
		if (S.copy_held + want > S.max_copy_memory)
			break;
		S.copy_held += want;
		op->copy_reserved = want;
		if (!(S.copy_wait_head = op->copy_next))
			S.copy_wait_tail = NULL;
		op->copy_next = NULL;
		*tail = op;
		tail = &op->copy_next;
	}
	pthread_mutex_unlock(&S.copy_lock);
	return go;
}

/* sosd's figures in "stats", after the runtime's. */
static int stats_fields(struct peer *p, char *buf, size_t len)
{
	(void)p;
	pthread_mutex_lock(&S.copy_lock);
	uint64_t held = S.copy_held, waiting = 0;
	for (struct sosd_op *op = S.copy_wait_head; op; op = op->copy_next)
		waiting++;
	pthread_mutex_unlock(&S.copy_lock);
	return snprintf(buf, len, ",\"copy_memory_bytes\":%" PRIu64 ",\"copy_waiting\":%" PRIu64
			",\"copy_waits\":%" PRIu64 ",\"fence\":\"%s\",\"fenced_holders\":%u",
			held, waiting, atomic_load(&S.copy_waits), S.fence_name ? S.fence_name : "",
			S.fence.fenced_count);
}

/* A one-step operation's result (READ, WRITE, DELETE); 0 or an errno. */
static int settle_one_step(struct sosd_op *op, int rc)
{
	struct xseg_request *req = op->req;

	switch (op->stage) {
	case ST_READ:
		if (rc == -ENOENT)
			rc = 0;   /* a missing object reads as zeros */
		if (rc < 0)
			return -rc;
		if ((uint64_t)rc > req->size)
			rc = (int)req->size;
		memset(xseg_get_data(peer_segment(S.peer), req) + rc, 0,
		       req->size - (uint64_t)rc);
		req->serviced = req->size;
		return 0;
	case ST_WRITE:
		if (rc < 0)
			return -rc;
		req->serviced = req->size;
		return 0;
	default:   /* ST_DELETE */
		return rc < 0 ? -rc : 0;
	}
}

/* librados's thread: hands the completion back to a worker, which alone
 * touches the request. (Answering right here saved a wake-up per request,
 * but ran our code on librados's finisher thread; 4K reads went 5-20 %
 * faster that way on two vCPUs: docs/benchmarks.md.) */
static void op_completed(struct peer_thread *t, struct peer_work *w);

static void on_rados_complete(rados_completion_t c, void *arg)
{
	struct sosd_op *op = arg;
	/* librados is not built with TSan: model its hand-over of op from the
	 * submitting worker to this thread. */
	xannotate_happens_after(op);
	op->rc = rados_aio_get_return_value(c);
	peer_post(S.peer, &op->work, op_completed);
}

/* A fresh completion for the next librados call; 0 or -errno. */
static int new_completion(struct sosd_op *op, enum stage stage)
{
	op->stage = stage;
	return rados_aio_create_completion2(op, on_rados_complete, &op->comp);
}

/* After a failed submission: the completion will never fire. */
static void submit_failed(struct peer_thread *t, struct sosd_op *op, int rc)
{
	rados_aio_release(op->comp);
	op->comp = NULL;
	finish(t, op, -rc);
}

/* ---- the operations ------------------------------------------------------------- */

static char *data_of(struct peer_thread *t, struct xseg_request *req)
{
	return xseg_get_data(peer_segment(peer_of(t)), req);
}

/* The size of the COPY's next write. */
static uint64_t copy_piece(const struct sosd_op *op)
{
	uint64_t left = op->copy_len - op->copy_done;
	return left < COPY_PIECE ? left : COPY_PIECE;
}

static int submit_stage(struct peer_thread *t, struct sosd_op *op, enum stage stage)
{
	struct xseg_request *req = op->req;
	int rc = new_completion(op, stage);
	if (rc < 0)
		return rc;
	/* Everything read from op is read before the hand-over: once submitted,
	 * op belongs to the completion (another thread may run it at once). */
	rados_completion_t comp = op->comp;
	char *copy_buf = op->copy_buf;
	uint64_t copy_done = op->copy_done, stat_size = op->stat_size;
	uint64_t piece = copy_piece(op);
	uint64_t size = req->size, offset = req->offset;
	char *data = data_of(t, req);
	xannotate_happens_before(op);
	switch (stage) {
	case ST_READ:
		rc = rados_aio_read(S.io, op->oid, comp, data, size, offset);
		break;
	case ST_WRITE:
		if (size == 0) {
			/* A zero-length write creates the object, as filed's does;
			 * RADOS skips an empty write extent. */
			rados_write_op_t w = rados_create_write_op();
			rados_write_op_create(w, LIBRADOS_CREATE_IDEMPOTENT, NULL);
			rc = rados_aio_write_op_operate(w, S.io, comp, op->oid, NULL, 0);
			rados_release_write_op(w);
		} else {
			rc = rados_aio_write(S.io, op->oid, comp, data, size, offset);
		}
		break;
	case ST_DELETE:
		rc = rados_aio_remove(S.io, op->oid, comp);
		break;
	case ST_INFO:
		rc = rados_aio_stat(S.io, op->oid, comp, &op->stat_size, &op->stat_mtime);
		break;
	case ST_COPY_STAT:
		rc = rados_aio_stat(S.io, op->src, comp, &op->stat_size, &op->stat_mtime);
		break;
	case ST_COPY_READ:
		rc = rados_aio_read(S.io, op->src, comp, copy_buf, stat_size, 0);
		break;
	case ST_COPY_WRITE:
		/* The first piece replaces the target (and its size), the rest
		 * go after it. */
		if (copy_done == 0)
			rc = rados_aio_write_full(S.io, op->oid, comp, copy_buf, piece);
		else
			rc = rados_aio_write(S.io, op->oid, comp, copy_buf + copy_done, piece,
					     copy_done);
		break;
	}
	if (rc < 0)
		submit_failed(t, op, rc);
	return 0;
}

/* Starts (or, after a barrier, resumes) the request's first operation. */
static void start_op(struct peer_thread *t, struct sosd_op *op)
{
	struct xseg_request *req = op->req;
	enum stage stage;
	int rc;

	switch (req->op) {
	case X_FLUSH:
		finish(t, op, 0);   /* the barrier is passed: nothing to sync */
		return;
	case X_READ:
		if (req->size == 0) {   /* RADOS reads the whole object for length 0 */
			finish(t, op, 0);
			return;
		}
		stage = ST_READ;
		break;
	case X_WRITE:
		stage = ST_WRITE;
		break;
	case X_DELETE:
		stage = ST_DELETE;
		break;
	case X_INFO:
		stage = ST_INFO;
		break;
	case X_COPY:
		stage = ST_COPY_STAT;
		break;
	default:
		finish(t, op, EOPNOTSUPP);
		return;
	}
	if ((rc = submit_stage(t, op, stage)) < 0)
		finish(t, op, -rc);
}

/* The COPY payload names the source: 0 or EINVAL/ENAMETOOLONG. */
static int parse_copy_source(struct peer_thread *t, struct sosd_op *op)
{
	struct xseg_request *req = op->req;
	const char *src, *why;
	uint32_t src_len;
	char shown[BLOCKER_PRINTABLE_SIZE];

	char also[80];
	int err = blocker_copy_source(data_of(t, req), req->datalen, S.max_name, &src, &src_len,
				      &why);
	if (err) {
		if (!warn_now(&S.refusals, "refused", also, sizeof(also)))
			return err;
		if (src)
			peer_warn("refused COPY source name '%s' (%u bytes): %s%s",
				  blocker_printable(src, src_len, shown, sizeof(shown)), src_len,
				  why, also);
		else
			peer_warn("refused COPY to '%s': %s (%" PRIu64 " bytes of data)%s",
				  op->oid, why, req->datalen, also);
		return err;
	}
	memcpy(op->src, src, src_len);
	op->src[src_len] = '\0';
	return 0;
}

/* A worker thread: the librados operation of op is done. */
static void op_completed(struct peer_thread *t, struct peer_work *w)
{
	struct sosd_op *op = container_of(w, struct sosd_op, work);
	struct xseg_request *req = op->req;
	int rc = op->rc, err;

	rados_aio_release(op->comp);
	op->comp = NULL;
	rc = pool_gone_or(rc);
	switch (op->stage) {
	case ST_READ:
	case ST_WRITE:
	case ST_DELETE:
		finish(t, op, settle_one_step(op, rc));
		return;
	case ST_INFO: {
		if (rc == -ENOENT) {
			op->stat_size = 0;   /* like filed: a missing object has size 0 */
			rc = 0;
		}
		if (rc < 0)
			break;
		rc = -blocker_reply_info(peer_segment(peer_of(t)), req, op->stat_size);
		break;
	}
	case ST_COPY_STAT:
		if (rc < 0)
			break;
		if (strcmp(op->src, op->oid) == 0) {   /* onto itself: nothing to do */
			req->serviced = op->stat_size;
			break;
		}
		if (op->stat_size > S.max_copy) {
			char also[80];
			if (warn_now(&S.refusals, "refused", also, sizeof(also)))
				peer_warn("refused COPY of '%s' (%" PRIu64 " bytes) to '%s': larger "
					  "than --max-copy-size %" PRIu64 "%s", op->src, op->stat_size,
					  op->oid, S.max_copy, also);
			rc = -EFBIG;
			break;
		}
		if (copy_reserve(op))
			copy_read_source(t, op);
		return;   /* else started by the finish that makes room */
	case ST_COPY_READ:
		if (rc < 0)
			break;
		op->copy_len = (uint64_t)rc;   /* the source may have shrunk since */
		op->copy_done = 0;
		if ((err = submit_stage(t, op, ST_COPY_WRITE)) != 0)
			finish(t, op, -err);
		return;
	case ST_COPY_WRITE:
		if (rc < 0)
			break;
		op->copy_done += copy_piece(op);
		if (op->copy_done < op->copy_len) {
			if ((err = submit_stage(t, op, ST_COPY_WRITE)) != 0)
				finish(t, op, -err);
			return;
		}
		req->serviced = op->copy_len;
		break;
	}
	finish(t, op, rc < 0 ? -rc : 0);
}

/* A COPY with its source's size reserved: reads the source (into memory). */
static void copy_read_source(struct peer_thread *t, struct sosd_op *op)
{
	int err;
	if (!(op->copy_buf = malloc(op->stat_size ? op->stat_size : 1))) {
		finish(t, op, ENOMEM);
		return;
	}
	if (op->stat_size == 0) {
		op->copy_len = 0;
		err = submit_stage(t, op, ST_COPY_WRITE);
	} else {
		err = submit_stage(t, op, ST_COPY_READ);
	}
	if (err)
		finish(t, op, -err);
}

/* Checks what can be checked without the cluster; 0 or an errno. */
static int check_request(struct peer_thread *t, struct sosd_op *op)
{
	struct xseg_request *req = op->req;
	const char *name = req->targetlen ? xseg_get_target(peer_segment(peer_of(t)), req) : NULL;
	size_t len = name ? req->targetlen : 0;
	const char *why;
	char shown[BLOCKER_PRINTABLE_SIZE], also[80];
	int err;

	if (req->op == X_FLUSH && len == 0)
		return 0;
	if ((err = blocker_check_name(name, len, S.max_name, &why)) != 0) {
		if (warn_now(&S.refusals, "refused", also, sizeof(also)))
			peer_warn("refused object name '%s' (%zu bytes) in a %s request: %s%s",
				  blocker_printable(name, len, shown, sizeof(shown)), len,
				  xseg_op_name(req->op), why, also);
		return err;
	}
	memcpy(op->oid, name, len);
	op->oid[len] = '\0';
	switch (req->op) {
	case X_READ:
	case X_WRITE:
		if (req->size > req->datalen || req->size > S.max_request ||
		    req->offset > (uint64_t)INT64_MAX - req->size) {
			if (warn_now(&S.refusals, "refused", also, sizeof(also)))
				peer_warn("refused %s of %" PRIu64 " bytes at %" PRIu64 " on '%s': the "
					  "buffer holds %" PRIu64 ", the limit is %" PRIu64 "%s",
					  xseg_op_name(req->op), req->size, req->offset, op->oid,
					  req->datalen, S.max_request, also);
			return EINVAL;
		}
		return 0;
	case X_COPY:
		return parse_copy_source(t, op);
	}
	return 0;
}

/* What on_place left for on_request. */
static struct sosd_op OP_NO_MEMORY, OP_HELD;

/*
 * on_place -> on_request on the accepting worker, in the same order (the
 * runtime calls on_request for the batch it placed, on the same thread).
 * Kept per thread, not by pool index: a held FLUSH can be started and
 * answered by another worker before this one reaches its on_request, and
 * its request re-sent and placed by a third under the same index (the
 * entry was then another's op, or NULL: a crash with two workers).
 */
#define PLACED_MAX 1024u   /* more than any accept batch */
static _Thread_local struct placed {
	struct xseg_request *req;
	struct sosd_op *op;
} placed[PLACED_MAX];
static _Thread_local unsigned placed_head, placed_n;

static void place(struct xseg_request *req, struct sosd_op *op)
{
	if (placed_n == PLACED_MAX)
		abort();   /* the runtime places at most a batch before serving it */
	placed[(placed_head + placed_n++) % PLACED_MAX] = (struct placed){ req, op };
}

static void replace_placed(struct xseg_request *req, struct sosd_op *op)
{
	placed[(placed_head + placed_n - 1) % PLACED_MAX] = (struct placed){ req, op };
}

static struct sosd_op *take_placed(struct xseg_request *req)
{
	struct placed p = placed[placed_head];
	if (!placed_n || p.req != req)
		abort();   /* on_request out of the order on_place saw */
	placed_head = (placed_head + 1) % PLACED_MAX;
	placed_n--;
	return p.op;
}

/* Under the runtime's accept lock, in queue order: a mutation takes its
 * sequence number and a FLUSH its barrier here, so that a FLUSH waits for
 * every write queued before it even when another worker accepted that
 * write. */
static void on_place(struct peer_thread *t, struct xseg_request *req)
{
	struct sosd_op *op = calloc(1, sizeof(*op));

	if (!op) {
		place(req, &OP_NO_MEMORY);
		return;
	}
	op->req = req;
	req->serviced = 0;
	place(req, op);
	if ((op->refused = check_request(t, op)) != 0)
		return;
	op->mutation = req->op == X_WRITE || req->op == X_COPY || req->op == X_DELETE;
	if (req->op == X_FLUSH || (req->flags & XF_FLUSH)) {
		/* A held op belongs to the barrier from here on: a completing
		 * mutation may start it before on_request runs. */
		if (!write_order_barrier(&S.order, &op->waiter, op->mutation ? &op->order : NULL))
			replace_placed(req, &OP_HELD);
	} else if (op->mutation) {
		write_order_begin(&S.order, &op->order);
	}
}

static void on_request(struct peer_thread *t, struct xseg_request *req)
{
	struct sosd_op *op = take_placed(req);

	if (op == &OP_HELD)
		return;   /* a completing mutation starts it (finish) */
	if (op == &OP_NO_MEMORY) {
		peer_fail(t, req, ENOMEM);
		return;
	}
	if (op->refused) {
		peer_fail(t, req, op->refused);
		free(op);
		return;
	}
	start_op(t, op);
}

/* ---- the cluster ------------------------------------------------------------------- */

static int set_conf_text(const char *key, const char *text)
{
	int rc = rados_conf_set(S.cluster, key, text);
	if (rc < 0)
		peer_error("cannot set %s = %s: %s", key, text, strerror(-rc));
	return rc;
}

static int set_conf(const char *key, uint64_t value)
{
	char text[32];
	snprintf(text, sizeof(text), "%" PRIu64, value);
	return set_conf_text(key, text);
}

/*
 * The objecter asks the monitors for a newer OSD map only when something
 * tells it its map is old: a connection reset, or an operation older than
 * objecter_timeout (10 s; checked every objecter_tick_interval, 5 s). An
 * operation that --op-timeout ends first never gets that old: with the
 * monitor away while the OSD restarted (a host reboot), the client missed
 * the map that moved the OSD and sent every operation to its old address,
 * each failing ETIMEDOUT, for ever, with the cluster healthy again
 * (test_sosd_stale_map). A quarter of --op-timeout each: an operation
 * counts as lagging, and the newer map is asked for, well within its time.
 */
static int set_lag_check(void)
{
	if (!S.op_timeout)
		return 0;   /* waits for ever: the defaults come in time */
	double quarter = (double)S.op_timeout / 4;
	char laggy[32], tick[32];
	snprintf(laggy, sizeof(laggy), "%.3f", quarter < 10 ? quarter : 10);
	snprintf(tick, sizeof(tick), "%.3f", quarter < 5 ? quarter : 5);
	if (set_conf_text("objecter_timeout", laggy) < 0 ||
	    set_conf_text("objecter_tick_interval", tick) < 0)
		return -1;
	return 0;
}

static int init(struct peer *p)
{
	char mons[256] = "?";
	int rc;

	S.peer = p;
	write_order_init(&S.order);
	if ((rc = rados_create(&S.cluster, S.id)) < 0) {
		peer_error("cannot create a RADOS client 'client.%s': %s", S.id, strerror(-rc));
		return -1;
	}
	if ((rc = rados_conf_read_file(S.cluster, S.conf)) < 0) {
		peer_error("cannot read the Ceph configuration '%s': %s", S.conf, strerror(-rc));
		goto fail;
	}
	rados_conf_get(S.cluster, "mon_host", mons, sizeof(mons));
	/* Bounded waits: at start, and for every operation afterwards. */
	if (set_conf("client_mount_timeout", S.connect_timeout) < 0 ||
	    set_conf("rados_mon_op_timeout", S.op_timeout) < 0 ||
	    set_conf("rados_osd_op_timeout", S.op_timeout) < 0 || set_lag_check() < 0)
		goto fail;
	/* The objecter throttles operations in flight (1024 and 100M by
	 * default) by blocking the thread that submits: a worker, which then
	 * answers nothing, not even a PING, and the operation's timeout only
	 * starts once it is through (a cluster down failed requests after
	 * several --op-timeouts). The segment's pool bounds what is in
	 * flight already. */
	if (set_conf("objecter_inflight_ops", UINT32_MAX) < 0 ||
	    set_conf("objecter_inflight_op_bytes", 1ull << 50) < 0)
		goto fail;
	peer_info("connecting to the cluster of %s (monitors %s) as client.%s", S.conf, mons,
		  S.id);
	if ((rc = rados_connect(S.cluster)) < 0) {
		/* ETIMEDOUT: nobody answered. Else it failed at once, most often
		 * for want of the client's key: name where it was looked for. */
		char keyring[512] = "?", within[64] = "", key[640] = "";
		if (rc == -ETIMEDOUT) {
			snprintf(within, sizeof(within), " within %" PRIu64 " s", S.connect_timeout);
		} else if (rc == -ENOENT || rc == -EACCES || rc == -EPERM) {
			rados_conf_get(S.cluster, "keyring", keyring, sizeof(keyring));
			snprintf(key, sizeof(key), " (the key of client.%s, keyring '%s')", S.id,
				 keyring);
		}
		peer_error("cannot connect to the Ceph cluster of %s (monitors %s) as client.%s%s: "
			   "%s%s", S.conf, mons, S.id, within, strerror(-rc), key);
		goto fail;
	}
	if ((rc = rados_ioctx_create(S.cluster, S.pool, &S.io)) < 0) {
		peer_error("cannot open pool '%s' of the cluster of %s (monitors %s): %s", S.pool,
			   S.conf, mons, rc == -ENOENT ? "no such pool" : strerror(-rc));
		goto fail;
	}
	/* A full pool (or one over its quota): without FULL_TRY the objecter
	 * holds every write, and every DELETE, until space is freed, so they
	 * failed ETIMEDOUT after --op-timeout (never answered with 0) and no
	 * DELETE could free space. With it the OSD answers a write that
	 * grows the pool ENOSPC (EDQUOT over a quota) at once, and
	 * overwrites and DELETEs go through. */
	rados_set_pool_full_try(S.io);
	S.pool_id = rados_ioctx_get_id(S.io);
	if (S.fence_name) {
		char why[512];
		if (sosd_fence_start(&S.fence, S.cluster, S.io, S.fence_name, why, sizeof(why)) < 0) {
			peer_error("%s", why);
			goto fail;
		}
	}
	/* The address is what fencing names: 'ceph osd blocklist add ADDR'. */
	char *addrs = NULL;
	if (rados_getaddrs(S.cluster, &addrs) < 0)
		addrs = NULL;
	peer_info("serving pool '%s' of the cluster of %s as client.%s at %s", S.pool, S.conf,
		  S.id, addrs ? addrs : "?");
	if (addrs)
		rados_buffer_free(addrs);
	return 0;
fail:
	if (S.io)
		rados_ioctx_destroy(S.io);
	S.io = NULL;
	rados_shutdown(S.cluster);
	S.cluster = NULL;
	write_order_destroy(&S.order);
	return -1;
}

/* Every request was answered, so no librados operation is left. */
static void fini(struct peer *p)
{
	(void)p;
	sosd_fence_stop(&S.fence);
	if (S.io)
		rados_ioctx_destroy(S.io);
	if (S.cluster)
		rados_shutdown(S.cluster);
	S.io = NULL;
	S.cluster = NULL;
	write_order_destroy(&S.order);
}

static const struct peer_ops sosd_ops = {
	.name = "sosd",
	.summary = "Blocker: stores each object as a RADOS object in --pool.",
	.options = sosd_options,
	.options_usage = sosd_usage,
	.parse_option = parse_option,
	.check_options = check_options,
	.default_threads = 1,   /* a worker only starts and answers: one keeps up
				 * with librados; more only add wake-ups */
	.supported_ops = PEER_OP(X_READ) | PEER_OP(X_WRITE) | PEER_OP(X_FLUSH) |
			 PEER_OP(X_DELETE) | PEER_OP(X_INFO) | PEER_OP(X_COPY),
	.init = init,
	.on_accept_in_order = on_place,
	.on_request = on_request,
	.fini = fini,
	.stats = stats_fields,
};

int main(int argc, char **argv)
{
	return peer_main(argc, argv, &sosd_ops, &S);
}
