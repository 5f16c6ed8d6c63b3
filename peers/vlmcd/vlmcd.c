/*
 * vlmcd: the volume composer. A request on (volume, offset, size) becomes
 * requests on the objects that hold that range, named
 * <volume>_<16 lowercase hex digits of the object index>, each object
 * --object-size bytes; a request that crosses object boundaries is split into
 * one request per object (each sized exactly, data copied in for WRITE and
 * out for READ) and answered when all parts are back: SERVED only if every
 * part was, serviced = the sum. Requests beyond a volume's end are EINVAL,
 * unknown volumes ENOENT.
 *
 * FLUSH fans out to every object of the volume written since the previous
 * FLUSH (a bitmap per volume, set when a written part is acknowledged) and
 * is answered when all those object flushes are. FLUSHes of one volume run
 * one after the other, so a FLUSH is answered only after every earlier one.
 * A FLUSH that fails puts all its objects back into the bitmap: the next
 * FLUSH (a client's retry) flushes them again, never SERVED without them.
 * The bitmap is in memory only: a volume's first FLUSH after start is one
 * FLUSH with no target (everything the blocker holds), as what a vlmcd
 * before this one acknowledged may still be dirty in a cache.
 * INFO answers the volume's configured size; INFO with no target, the
 * list of volumes and their sizes (what nbdd exports).
 *
 * A READ or WRITE within one object whose buffer has room for the object's
 * name before its data (libxseg leaves XSEG_TARGET_ROOM) is not copied: the
 * client's own request is renamed in place, its offset made the object's,
 * and forwarded (peer_forward); its reply gets the volume's name and offset
 * back before it is answered. Each request in flight here keeps what it
 * needs for that in a slot of its own (by pool index).
 *
 * Everything goes to --blocker-port through the runtime's peer_send, so a
 * cache can be routed in between (xseg plug) without vlmcd knowing. When
 * the request pool or the heap is empty, the rest of a split is retried
 * (peer_defer) for up to --retry-limit seconds (10) since its last part
 * went out, then the request fails.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peer/peer.h"
#include "peer/volumes.h"

#define VOLUME_NAME_MAX PEER_VOLUME_NAME_MAX
#define NS_PER_S 1000000000ull
/* Parts of one request out at once: a FLUSH of a volume with thousands of
 * objects written since the last one took the whole segment's request
 * pool until every part was out, starving every other client. */
#define PARTS_OUT_MAX 32u
/* A FLUSH part with no target: everything the blocker holds. */
#define ALL_OBJECTS UINT64_MAX

struct job;

struct volume {
	char name[VOLUME_NAME_MAX + 1];
	uint32_t len;
	uint64_t size;
	uint64_t nr_objects;
	pthread_mutex_t lock;       /* guards dirty, flushing, flush_queue */
	uint64_t *dirty;            /* bitmap: objects written since the last served FLUSH */
	bool unsure;                /* what was written before this vlmcd began is unknown */
	bool flushing;              /* a FLUSH of this volume is out */
	struct job *flush_queue, **flush_tail;   /* FLUSHes waiting for it */
};

/* One part of a job: a request to the blocker for one object. */
struct part {
	struct job *job;
	uint64_t object;            /* object index */
	uint64_t obj_off, size;     /* range within the object */
	uint64_t buf_off;           /* where its bytes sit in the client's buffer */
};

/* A client request being served in parts. */
struct job {
	struct xseg_request *req;
	struct volume *vol;
	uint32_t op;
	uint64_t nr_parts;
	_Atomic uint64_t issued;    /* parts sent (the issuer writes it) */
	_Atomic uint64_t out;       /* parts sent, not back yet */
	_Atomic bool issuing;       /* a thread holds the issuer's role */
	uint64_t deadline_ns;       /* the issuer's */
	_Atomic uint64_t pending;   /* parts out + 1 while issuing */
	_Atomic int error;          /* the first failure */
	_Atomic uint64_t serviced;
	struct peer_work retry;
	struct job *next_flush;
	struct part parts[];
};

/* A client's request forwarded under its object's name (by pool index). */
struct renamed {
	struct volume *vol;
	uint64_t offset;            /* the client's, in the volume (names the object) */
};

/* Figures per worker (a line each: no line shared between workers). */
struct figures {
	_Alignas(64) _Atomic uint64_t renamed;   /* forwarded under the object's name */
	_Atomic uint64_t split;                   /* served in parts, copied */
	_Atomic uint64_t flushes_failed;          /* FLUSHes answered FAILED */
};

static struct {
	struct figures *figures;    /* one per worker */
	unsigned nr_figures;
	struct renamed *renamed;    /* one per request of the pool */
	uint32_t nr_requests;
	struct volume **volumes;
	unsigned nr_volumes;
	uint64_t object_size;
	uint64_t blocker_port;
	bool have_blocker;
	uint64_t retry_limit_ns;    /* --retry-limit */
} V = { .object_size = 4u << 20, .retry_limit_ns = 10 * NS_PER_S };

/* ---- options ----------------------------------------------------------------- */

enum { OPT_VOLUME = 1, OPT_VOLUMES_FILE, OPT_OBJECT_SIZE, OPT_BLOCKER_PORT, OPT_RETRY_LIMIT };

static const struct option vlmcd_options[] = {
	{ "volume", required_argument, NULL, OPT_VOLUME },
	{ "volumes-file", required_argument, NULL, OPT_VOLUMES_FILE },
	{ "object-size", required_argument, NULL, OPT_OBJECT_SIZE },
	{ "blocker-port", required_argument, NULL, OPT_BLOCKER_PORT },
	{ "retry-limit", required_argument, NULL, OPT_RETRY_LIMIT },
	{ NULL, 0, NULL, 0 },
};

static const char vlmcd_usage[] =
"  --volume NAME:SIZE     a volume (repeatable; SIZE takes K, M, G suffixes)\n"
"  --volumes-file F       volumes, one 'NAME SIZE' per line ('#' comments)\n"
"  --object-size SIZE     bytes per object, a multiple of 512 (default 4M)\n"
"  --blocker-port N       where object requests go: the next hop (required)\n"
"  --retry-limit S        with the request pool or the heap empty, a request\n"
"                         fails after S seconds (1..3600) without a part\n"
"                         going out (default 10)\n"
"Objects are named <volume>_<16 hex digits of the object index>.\n";

static struct volume *find_volume(const char *name, size_t len)
{
	for (unsigned i = 0; i < V.nr_volumes; i++)
		if (V.volumes[i]->len == len && !memcmp(V.volumes[i]->name, name, len))
			return V.volumes[i];
	return NULL;
}

/* A volume from --volume or --volumes-file, its name and size checked. */
static int add_volume(void *ctx, const char *opt, const char *name, uint64_t bytes)
{
	(void)ctx;
	size_t len = strlen(name);
	if (find_volume(name, len))
		return peer_arg_error(opt, name, "is given twice");
	struct volume **grown = realloc(V.volumes, (V.nr_volumes + 1) * sizeof(*grown));
	struct volume *v = calloc(1, sizeof(*v));
	if (grown)
		V.volumes = grown;
	if (!grown || !v) {
		free(v);
		return peer_arg_error(opt, name, "does not fit in memory");
	}
	memcpy(v->name, name, len + 1);
	v->len = (uint32_t)len;
	v->size = bytes;
	pthread_mutex_init(&v->lock, NULL);
	v->flush_tail = &v->flush_queue;
	V.volumes[V.nr_volumes++] = v;
	return 0;
}

static int parse_option(struct peer *p, int val, const char *arg)
{
	(void)p;
	switch (val) {
	case OPT_VOLUME:
		return peer_volume_arg("--volume", arg, add_volume, NULL);
	case OPT_VOLUMES_FILE:
		return peer_volumes_file("--volumes-file", arg, add_volume, NULL);
	case OPT_OBJECT_SIZE:
		if (peer_arg_size("--object-size", arg, 1, 1ull << 30, &V.object_size) < 0)
			return -1;
		/* Parts are split at object ends: a part must start and end on
		 * a sector, as every request does. */
		if (V.object_size % 512)
			return peer_arg_error("--object-size", arg, "is not a multiple of 512 (a sector)");
		return 0;
	case OPT_BLOCKER_PORT:
		V.have_blocker = true;
		return peer_arg_uint("--blocker-port", arg, 0, XSEG_MAX_PORTS - 1, &V.blocker_port);
	case OPT_RETRY_LIMIT: {
		uint64_t s;
		if (peer_arg_uint("--retry-limit", arg, 1, 3600, &s) < 0)
			return -1;
		V.retry_limit_ns = s * NS_PER_S;
		return 0;
	}
	}
	return -1;
}

static int check_options(struct peer *p)
{
	if (!V.have_blocker) {
		fprintf(stderr, "vlmcd: --blocker-port is required (see --help)\n");
		return -1;
	}
	/* Sending to our own port would loop every request back to us. */
	uint32_t first = peer_port(p), last = peer_port_last(p);
	if (V.blocker_port >= first && V.blocker_port <= last) {
		if (first == last)
			fprintf(stderr, "vlmcd: --blocker-port %" PRIu64 " is its own --port\n",
				V.blocker_port);
		else
			fprintf(stderr, "vlmcd: --blocker-port %" PRIu64 " is one of its own "
				"--port %u-%u\n", V.blocker_port, first, last);
		return -1;
	}
	if (!V.nr_volumes) {
		fprintf(stderr, "vlmcd: at least one --volume or --volumes-file is required\n");
		return -1;
	}
	return 0;
}

/* ---- jobs ------------------------------------------------------------------------ */

/* Objects a volume may span (its dirty bits: 2M; 64T of 4M objects). */
#define VLMCD_MAX_OBJECTS (1ull << 24)

/* An object's name: the volume's, '_' and 16 hex digits of its index. */
#define OBJECT_SUFFIX_LEN 17u

static uint32_t object_name_len(const struct volume *v)
{
	return v->len + OBJECT_SUFFIX_LEN;
}

/* Every request renamed takes one: by hand, not snprintf, whose format
 * parsing was a fifth of vlmcd's own work per request (perf). The name
 * fits: v->len <= PEER_VOLUME_NAME_MAX = XSEG_MAX_TARGETLEN - 17. */
static void object_name(char *out, const struct volume *v, uint64_t index)
{
	static const char hex[16] = "0123456789abcdef";
	memcpy(out, v->name, v->len);
	char *digits = out + v->len + 1;
	out[v->len] = '_';
	for (int i = 15; i >= 0; i--, index >>= 4)
		digits[i] = hex[index & 15];
	digits[16] = '\0';
}

/*
 * 0 when the blocker served all of what was asked of an object, else the
 * error to answer with (a short reply is logged, naming the object).
 */
static int reply_error(const struct xseg_request *r, const struct volume *v, uint64_t object,
		       uint32_t op, uint64_t size)
{
	if (r->result != XR_SERVED)
		return r->result == XR_FAILED ? r->error : EIO;
	if (op != X_FLUSH && r->serviced != size) {
		peer_warn("object %s_%016" PRIx64 ": %s served %" PRIu64 " of %" PRIu64 " bytes",
			  v->name, object, xseg_op_name(op), r->serviced, size);
		return EIO;
	}
	return 0;
}

static void set_error(struct job *job, int err)
{
	int none = 0;
	atomic_compare_exchange_strong(&job->error, &none, err > 0 ? err : EIO);
}

static void start_flush(struct peer_thread *t, struct job *job);

/* The worker's own line of figures (a helper thread shares the last one). */
static struct figures *figures_of(struct peer_thread *t)
{
	unsigned i = peer_thread_index(t);
	return &V.figures[i < V.nr_figures ? i : V.nr_figures - 1];
}

/* A failed FLUSH's objects are dirty again (called with v->lock held): some
 * may not be durable, and a later FLUSH must not be SERVED without them.
 * OR, not store: writes acknowledged meanwhile set bits of their own. */
static void redirty(struct job *job)
{
	struct volume *v = job->vol;
	for (uint64_t i = 0; i < job->nr_parts; i++) {
		uint64_t object = job->parts[i].object;
		if (object == ALL_OBJECTS)
			v->unsure = true;
		else
			v->dirty[object / 64] |= 1ull << (object % 64);
	}
}

/* Drops one reference; the last one answers the client. */
static void job_put(struct peer_thread *t, struct job *job)
{
	if (atomic_fetch_sub(&job->pending, 1) != 1)
		return;
	struct xseg_request *req = job->req;
	struct volume *v = job->vol;
	int err = atomic_load(&job->error);
	/* Counted before the answer: a client that saw the FLUSH fail finds
	 * it in the figures (test_peers_vlmcd asked at once and, on a busy
	 * machine, read the count from before). */
	if (job->op == X_FLUSH && err)
		atomic_fetch_add_explicit(&figures_of(t)->flushes_failed, 1, memory_order_relaxed);
	if (err) {
		peer_fail(t, req, err);
	} else {
		req->serviced = job->op == X_FLUSH ? 0 : atomic_load(&job->serviced);
		peer_complete(t, req);
	}
	struct job *next = NULL;
	if (job->op == X_FLUSH) {
		pthread_mutex_lock(&v->lock);
		/* Before the next FLUSH's turn, so that it takes them. */
		if (err)
			redirty(job);
		next = v->flush_queue;
		if (next) {
			v->flush_queue = next->next_flush;
			if (!v->flush_queue)
				v->flush_tail = &v->flush_queue;
		} else {
			v->flushing = false;
		}
		pthread_mutex_unlock(&v->lock);
	}
	free(job);
	if (next)
		start_flush(t, next);
}

/* An acknowledged write: the next FLUSH must reach this object. */
static void mark_written(struct volume *v, uint64_t object)
{
	pthread_mutex_lock(&v->lock);
	v->dirty[object / 64] |= 1ull << (object % 64);
	pthread_mutex_unlock(&v->lock);
}

/* Parts left to send and room for one more out. */
static bool can_send(struct job *job)
{
	return atomic_load(&job->issued) < job->nr_parts && !atomic_load(&job->error) &&
	       atomic_load(&job->out) < PARTS_OUT_MAX;
}

static bool take_issuer(struct job *job)
{
	bool free_role = false;
	return atomic_compare_exchange_strong(&job->issuing, &free_role, true);
}

static void issue(struct peer_thread *t, struct job *job);

static void part_done(struct peer_thread *t, struct xseg_request *r, void *arg)
{
	struct part *part = arg;
	struct job *job = part->job;
	struct xseg *seg = peer_segment(peer_of(t));

	int err = reply_error(r, job->vol, part->object, job->op, part->size);
	if (err) {
		set_error(job, err);
	} else if (job->op == X_READ || job->op == X_WRITE) {
		if (job->op == X_READ)
			memcpy((char *)xseg_get_data(seg, job->req) + part->buf_off,
			       xseg_get_data(seg, r), part->size);
		else
			mark_written(job->vol, part->object);
		atomic_fetch_add(&job->serviced, part->size);
	}
	peer_put_request(t, r);
	atomic_fetch_sub(&job->out, 1);
	if (can_send(job) && take_issuer(job)) {
		atomic_fetch_add(&job->pending, 1);   /* the issuer's reference */
		/* a part back is progress: the retry limit counts from here */
		job->deadline_ns = xseg_now_ns() + V.retry_limit_ns;
		issue(t, job);
	}
	job_put(t, job);
}

static void retry_issue(struct peer_thread *t, struct peer_work *w);

static bool send_parts(struct peer_thread *t, struct job *job);

/*
 * Sends parts until PARTS_OUT_MAX are out or none is left; on an empty pool
 * or heap, tries again later. The caller holds the issuer's role and its
 * reference (pending's + 1); both end here, or pass to the deferred retry.
 * A part back while parts are left takes the role over (part_done).
 */
static void issue(struct peer_thread *t, struct job *job)
{
	for (;;) {
		if (!send_parts(t, job))
			return;   /* deferred: the retry keeps the role */
		atomic_store(&job->issuing, false);
		/* a part back meanwhile found the role taken: look again */
		if (!can_send(job) || !take_issuer(job))
			break;
	}
	job_put(t, job);   /* the issuer's reference */
}

/* issue's sending: false when it deferred a retry (pool or heap empty). */
static bool send_parts(struct peer_thread *t, struct job *job)
{
	struct xseg *seg = peer_segment(peer_of(t));
	char name[XSEG_MAX_TARGETLEN + 1];

	while (can_send(job)) {
		struct part *part = &job->parts[atomic_load(&job->issued)];
		bool all = part->object == ALL_OBJECTS;
		if (all)
			snprintf(name, sizeof(name), "(all)");
		else
			object_name(name, job->vol, part->object);
		struct xseg_request *r = peer_get_request(t, all ? NULL : name, part->size);
		if (!r) {
			int err = errno;
			if ((err == ENOBUFS || err == ENOMEM) && xseg_now_ns() < job->deadline_ns) {
				peer_defer(t, &job->retry, retry_issue);
				return false;
			}
			static _Atomic int64_t last;
			static _Atomic uint64_t skipped;
			uint64_t quiet;
			if (peer_log_once_a_second(&last, &skipped, &quiet))
				peer_warn("volume %s: no request for object %s: %s (%" PRIu64 " more "
					  "such since the last word)", job->vol->name, name,
					  strerror(err), quiet);
			set_error(job, err);
			break;
		}
		r->op = job->op;
		r->flags = job->req->flags;
		r->offset = part->obj_off;
		r->size = part->size;
		if (job->op == X_WRITE)
			memcpy(xseg_get_data(seg, r),
			       (char *)xseg_get_data(seg, job->req) + part->buf_off, part->size);
		atomic_fetch_add(&job->pending, 1);
		atomic_fetch_add(&job->out, 1);
		int rc = peer_send(t, r, (uint32_t)V.blocker_port, part_done, part);
		if (rc < 0) {
			atomic_fetch_sub(&job->out, 1);
			atomic_fetch_sub(&job->pending, 1);
			peer_put_request(t, r);
			static _Atomic int64_t last;
			static _Atomic uint64_t skipped;
			uint64_t quiet;
			if (peer_log_once_a_second(&last, &skipped, &quiet))
				peer_warn("volume %s: cannot send to blocker port %" PRIu64 ": %s "
					  "(%" PRIu64 " more such since the last word)", job->vol->name,
					  V.blocker_port, xseg_last_error(), quiet);
			set_error(job, rc == -ENOENT ? EHOSTUNREACH : -rc);
			break;
		}
		atomic_fetch_add(&job->issued, 1);
		/* Progress: the retry limit counts from the last part out, or a
		 * FLUSH of many objects through a slow cache failed midway. */
		job->deadline_ns = xseg_now_ns() + V.retry_limit_ns;
	}
	return true;
}

static void retry_issue(struct peer_thread *t, struct peer_work *w)
{
	struct job *job = (struct job *)((char *)w - offsetof(struct job, retry));
	issue(t, job);
}

static struct job *new_job(struct xseg_request *req, struct volume *v, uint32_t op,
			   uint64_t nr_parts)
{
	struct job *job = calloc(1, sizeof(*job) + nr_parts * sizeof(struct part));
	if (!job)
		return NULL;
	job->req = req;
	job->vol = v;
	job->op = op;
	job->nr_parts = nr_parts;
	job->deadline_ns = xseg_now_ns() + V.retry_limit_ns;
	atomic_init(&job->pending, 1);   /* the issuer's: the caller issues */
	atomic_init(&job->issuing, true);
	for (uint64_t i = 0; i < nr_parts; i++)
		job->parts[i].job = job;
	return job;
}

/* Counts on the worker's own line (relaxed: only it writes there). */
static void count(struct peer_thread *t, bool renamed)
{
	struct figures *f = figures_of(t);
	atomic_fetch_add_explicit(renamed ? &f->renamed : &f->split, 1, memory_order_relaxed);
}

/* Gives a renamed request its volume's name and offset back. */
static void restore_name(struct xseg *seg, struct xseg_request *req, const struct renamed *rn)
{
	char *target = xseg_get_target(seg, req);
	memcpy(target, rn->vol->name, rn->vol->len);
	target[rn->vol->len] = '\0';
	req->targetlen = rn->vol->len;
	req->offset = rn->offset;
}

/* The reply to a renamed request: answered under the volume's name. */
static void renamed_done(struct peer_thread *t, struct xseg_request *req, void *arg)
{
	struct renamed *rn = arg;
	struct xseg *seg = peer_segment(peer_of(t));
	uint64_t object = rn->offset / V.object_size;

	restore_name(seg, req, rn);
	int err = reply_error(req, rn->vol, object, req->op, req->size);
	if (err) {
		peer_fail(t, req, err);
		return;
	}
	if (req->op == X_WRITE)
		mark_written(rn->vol, object);
	peer_complete(t, req);
}

/*
 * A request within one object whose buffer has room for the object's name
 * before its data: renamed in place and forwarded. False when it does not
 * fit (the caller splits and copies); true once it is the blocker's, or
 * answered (the blocker could not be reached).
 */
static bool forward_renamed(struct peer_thread *t, struct xseg_request *req, struct volume *v,
			    uint64_t object)
{
	if (req->index >= V.nr_requests || object_name_len(v) >= req->data_off)
		return false;
	struct xseg *seg = peer_segment(peer_of(t));
	struct renamed *rn = &V.renamed[req->index];
	rn->vol = v;
	rn->offset = req->offset;
	object_name(xseg_get_target(seg, req), v, object);
	req->targetlen = object_name_len(v);
	req->offset -= object * V.object_size;
	count(t, true);
	int rc = peer_forward(t, req, (uint32_t)V.blocker_port, renamed_done, rn);
	if (rc < 0) {
		restore_name(seg, req, rn);
		static _Atomic int64_t last;
		static _Atomic uint64_t skipped;
		uint64_t quiet;
		if (peer_log_once_a_second(&last, &skipped, &quiet))
			peer_warn("volume %s: cannot forward to blocker port %" PRIu64 ": %s "
				  "(%" PRIu64 " more such since the last word)", v->name,
				  V.blocker_port, xseg_last_error(), quiet);
		peer_fail(t, req, rc == -ENOENT ? EHOSTUNREACH : -rc);
	}
	return true;
}

static void serve_flush(struct peer_thread *t, struct xseg_request *req, struct volume *v);

static void serve_rw(struct peer_thread *t, struct xseg_request *req, struct volume *v)
{
	if (req->size > req->datalen || req->offset > v->size || req->size > v->size - req->offset) {
		peer_info("volume %s: %s of %" PRIu64 " bytes at %" PRIu64 " is beyond its end "
			  "(%" PRIu64 ") or its buffer (%" PRIu64 ")", v->name,
			  xseg_op_name(req->op), req->size, req->offset, v->size, req->datalen);
		peer_fail(t, req, EINVAL);
		return;
	}
	if (req->size == 0) {
		if (req->flags & XF_FLUSH) {   /* the barrier is all it asks for */
			serve_flush(t, req, v);
			return;
		}
		req->serviced = 0;
		peer_complete(t, req);
		return;
	}
	uint64_t first = req->offset / V.object_size;
	uint64_t last = (req->offset + req->size - 1) / V.object_size;
	if (first == last && forward_renamed(t, req, v, first))
		return;
	count(t, false);
	struct job *job = new_job(req, v, req->op, last - first + 1);
	if (!job) {
		peer_fail(t, req, ENOMEM);
		return;
	}
	uint64_t pos = req->offset, end = req->offset + req->size;
	for (uint64_t o = first; o <= last; o++) {
		struct part *part = &job->parts[o - first];
		uint64_t obj_start = o * V.object_size;
		uint64_t part_end = end - obj_start < V.object_size ? end : obj_start + V.object_size;
		part->object = o;
		part->obj_off = pos - obj_start;
		part->size = part_end - pos;
		part->buf_off = pos - req->offset;
		pos = part_end;
	}
	issue(t, job);
}

/*
 * Takes the volume's dirty set into the job (called with v->lock held).
 * While unsure (a vlmcd before this one may have acknowledged writes that
 * are still only in a cache), one FLUSH with no target instead: the
 * blocker's whole FLUSH covers those and the set.
 */
static struct job *flush_job(struct xseg_request *req, struct volume *v)
{
	uint64_t words = (v->nr_objects + 63) / 64, n = 0;
	for (uint64_t w = 0; w < words && !v->unsure; w++)
		n += (uint64_t)__builtin_popcountll(v->dirty[w]);
	/* X_FLUSH also for a 0-byte READ or WRITE with XF_FLUSH */
	struct job *job = new_job(req, v, X_FLUSH, v->unsure ? 1 : n);
	if (!job)
		return NULL;
	if (v->unsure)
		job->parts[0].object = ALL_OBJECTS;
	n = 0;
	for (uint64_t w = 0; w < words; w++) {
		uint64_t bits = v->unsure ? 0 : v->dirty[w];
		v->dirty[w] = 0;
		while (bits) {
			job->parts[n++].object = w * 64 + (uint64_t)__builtin_ctzll(bits);
			bits &= bits - 1;
		}
	}
	v->unsure = false;
	return job;
}

/* A FLUSH whose turn came: v->flushing is set and it holds the slot. */
static void start_flush(struct peer_thread *t, struct job *job)
{
	struct volume *v = job->vol;
	pthread_mutex_lock(&v->lock);
	struct job *real = flush_job(job->req, v);
	pthread_mutex_unlock(&v->lock);
	if (!real) {
		/* Out of memory: answer this one; the slot passes on via job_put. */
		set_error(job, ENOMEM);
		job_put(t, job);
		return;
	}
	free(job);
	issue(t, real);
}

static void serve_flush(struct peer_thread *t, struct xseg_request *req, struct volume *v)
{
	struct job *job = new_job(req, v, X_FLUSH, 0);   /* a placeholder until its turn */
	if (!job) {
		peer_fail(t, req, ENOMEM);
		return;
	}
	pthread_mutex_lock(&v->lock);
	if (v->flushing) {
		*v->flush_tail = job;
		v->flush_tail = &job->next_flush;
		pthread_mutex_unlock(&v->lock);
		return;
	}
	v->flushing = true;
	pthread_mutex_unlock(&v->lock);
	start_flush(t, job);
}

/*
 * INFO with no target: the volume list, so that nbdd need not be told it
 * again. Text lines "NAME SIZE\n" (SIZE in bytes), in the order given: a
 * --volumes-file's syntax. serviced is its length.
 */
static void serve_list(struct peer_thread *t, struct xseg_request *req)
{
	uint64_t len = 0;
	for (unsigned i = 0; i < V.nr_volumes; i++)
		len += V.volumes[i]->len + 22u;   /* ' ', up to 20 digits, '\n' */
	char *out = peer_reply_data(t, req, len + 1);
	if (!out) {
		peer_fail(t, req, ENOMEM);
		return;
	}
	uint64_t n = 0;
	for (unsigned i = 0; i < V.nr_volumes; i++)
		n += (uint64_t)snprintf(out + n, len + 1 - n, "%s %" PRIu64 "\n",
					V.volumes[i]->name, V.volumes[i]->size);
	req->serviced = n;
	peer_complete(t, req);
}

static void on_request(struct peer_thread *t, struct xseg_request *req)
{
	const char *name = xseg_get_target(peer_segment(peer_of(t)), req);

	if (req->op == X_INFO && req->targetlen == 0) {
		serve_list(t, req);
		return;
	}
	struct volume *v = name ? find_volume(name, req->targetlen) : NULL;

	if (!v) {
		peer_info("%s request for unknown volume '%.64s'", xseg_op_name(req->op),
			  name ? name : "");
		peer_fail(t, req, ENOENT);
		return;
	}
	switch (req->op) {
	case X_READ:
	case X_WRITE:
		serve_rw(t, req, v);
		return;
	case X_FLUSH:
		serve_flush(t, req, v);
		return;
	case X_INFO: {
		struct xseg_reply_info *info = peer_reply_data(t, req, sizeof(*info));
		if (!info) {
			peer_fail(t, req, ENOMEM);
			return;
		}
		info->size = v->size;
		req->serviced = sizeof(*info);
		peer_complete(t, req);
		return;
	}
	}
	peer_fail(t, req, EOPNOTSUPP);
}

static int init(struct peer *p)
{
	struct xseg_segment_info si;
	if (xseg_segment_info(peer_segment(p), &si) < 0) {
		peer_error("segment info: %s", xseg_last_error());
		return -1;
	}
	V.renamed = calloc(si.nr_requests, sizeof(*V.renamed));
	if (!V.renamed) {
		peer_error("out of memory for %u request slots", si.nr_requests);
		return -1;
	}
	V.nr_requests = si.nr_requests;
	V.nr_figures = peer_nr_threads(p) + 1;   /* the workers, and one for other threads */
	V.figures = aligned_alloc(64, V.nr_figures * sizeof(*V.figures));
	if (!V.figures) {
		peer_error("out of memory for %u threads' figures", V.nr_figures);
		return -1;
	}
	memset(V.figures, 0, V.nr_figures * sizeof(*V.figures));
	if (V.blocker_port >= si.nr_ports) {
		fprintf(stderr, "vlmcd: --blocker-port %" PRIu64 ": the segment has ports 0..%u\n",
			V.blocker_port, si.nr_ports - 1);
		return 2;
	}
	for (unsigned i = 0; i < V.nr_volumes; i++) {
		struct volume *v = V.volumes[i];
		/* A FLUSH walks the volume's dirty bits under its lock: bounded,
		 * so that a FLUSH stays short and the bits small (2M). */
		v->nr_objects = v->size / V.object_size + (v->size % V.object_size != 0);
		if (v->nr_objects > VLMCD_MAX_OBJECTS) {
			fprintf(stderr, "vlmcd: volume %s: %" PRIu64 " bytes are %" PRIu64 " objects of "
				"--object-size %" PRIu64 ", more than %llu: a larger --object-size\n",
				v->name, v->size, v->nr_objects, V.object_size, VLMCD_MAX_OBJECTS);
			return 2;
		}
		v->dirty = calloc((v->nr_objects + 63) / 64, sizeof(uint64_t));
		if (!v->dirty) {
			peer_error("out of memory for volume %s", v->name);
			return -1;
		}
		v->unsure = true;
		peer_info("volume %s: %" PRIu64 " bytes in %" PRIu64 " objects of %" PRIu64,
			  v->name, v->size, v->nr_objects, V.object_size);
	}
	return 0;
}

static void fini(struct peer *p)
{
	(void)p;
	for (unsigned i = 0; i < V.nr_volumes; i++) {
		pthread_mutex_destroy(&V.volumes[i]->lock);
		free(V.volumes[i]->dirty);
		free(V.volumes[i]);
	}
	free(V.volumes);
	V.volumes = NULL;
	free(V.renamed);
	V.renamed = NULL;
	free(V.figures);
	V.figures = NULL;
	V.nr_volumes = 0;
}

/* vlmcd's own figures in `xseg stats`: requests forwarded under their
 * object's name (no copy), requests served in parts (copied), and FLUSHes
 * answered FAILED (their objects left dirty for the next). */
static int stats_fields(struct peer *p, char *buf, size_t len)
{
	(void)p;
	uint64_t renamed = 0, split = 0, flushes_failed = 0;
	for (unsigned i = 0; i < V.nr_figures; i++) {
		renamed += atomic_load_explicit(&V.figures[i].renamed, memory_order_relaxed);
		split += atomic_load_explicit(&V.figures[i].split, memory_order_relaxed);
		flushes_failed += atomic_load_explicit(&V.figures[i].flushes_failed,
						       memory_order_relaxed);
	}
	return snprintf(buf, len, ",\"renamed\":%" PRIu64 ",\"split\":%" PRIu64
			",\"flushes_failed\":%" PRIu64, renamed, split, flushes_failed);
}

static const struct peer_ops vlmcd_ops = {
	.name = "vlmcd",
	.summary = "Volume composer: volume requests become requests on the objects\n"
		   "<volume>_<16 hex digits>, sent to --blocker-port.",
	.options = vlmcd_options,
	.options_usage = vlmcd_usage,
	.parse_option = parse_option,
	.check_options = check_options,
	.default_threads = 2,
	.supported_ops = PEER_OP(X_READ) | PEER_OP(X_WRITE) | PEER_OP(X_FLUSH) |
			 PEER_OP(X_INFO),
	.reserve_requests = true,   /* object requests while clients hold the pool */
	.init = init,
	.on_request = on_request,
	.stats = stats_fields,
	.fini = fini,
};

int main(int argc, char **argv)
{
	return peer_main(argc, argv, &vlmcd_ops, &V);
}
