/*
 * Replicated write-back (issue 23) in one process: a primary engine
 * (cache_config.mirror) whose mirror requests are turned into requests to
 * a replica engine (cache_config.replica), as cached's glue and synapsed
 * would, both over one in-memory blocker. The mirror link is a queue the
 * test can hold (to see what is out and what is answered before the
 * replica has it) and fail (to degrade the primary). End-to-end runs with
 * the real peers are in test_cached_*.sh.
 */
#include <check.h>

#include "support/xseg_test_util.h"
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <urcu.h>

/* The engine's objects are linked in (Makefile: CACHED_ENGINE_TESTS). */
#include "../peers/cached/engine_private.h"

#define OBJ_SIZE   (64u * 1024)
#define BKT_SIZE   4096u
#define MAX_OBJS   16
/* the primary's stale-replica marker (as cached's default gives one) */
#define MARKER     "cached-mirror-marker.test.3"

/*
 * Threads. The engine keeps one magazine of free bucket slots per thread
 * (object.c's tl_magazine), not per engine: a thread that ran both
 * engines would hand the replica's slots to the primary. So each engine
 * runs on threads of its own: the primary on the test's thread, its
 * blocker thread and the mirror reply thread; the replica on the replica
 * thread (mirror requests, and the test's requests to it, posted there)
 * and its blocker thread.
 */
enum { PRIMARY, REPLICA };

/* ---- the in-memory blocker (as test_cached_engine's, fewer ops) ------------ */

struct fake_bio {
	struct cache_bio bio;
	char name[XSEG_MAX_TARGETLEN + 1];
	bool lent;                         /* data is the client's buffer */
	struct fake_bio *next;             /* on one queue at a time */
};

struct fake_object {
	char name[XSEG_MAX_TARGETLEN + 1];
	unsigned char data[OBJ_SIZE];
	bool exists;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct fake_bio *queue[2];         /* by engine */
	struct fake_object objs[4 * MAX_OBJS];
	int nobjs;
	_Atomic int hold;                  /* serve nothing while set */
	_Atomic int hold_side[2];          /* serve nothing of that engine while set */
	_Atomic int fail_writes[2];        /* fail that engine's writes with this error */
	_Atomic int fail_marker;           /* fail the primary's marker writes with this */
	_Atomic int starve_cleans;         /* no request free for a mirror-clean */
	_Atomic int writes, flushes;
	bool stop;
	pthread_t threads[2];
} blk;

static struct fake_object *blk_find(const char *name, bool create)
{
	for (int i = 0; i < blk.nobjs; i++)
		if (!strcmp(blk.objs[i].name, name))
			return &blk.objs[i];
	if (!create || blk.nobjs == 4 * MAX_OBJS)
		return NULL;
	struct fake_object *o = &blk.objs[blk.nobjs++];
	snprintf(o->name, sizeof(o->name), "%s", name);
	return o;
}

static void blk_serve(struct fake_bio *fb)
{
	struct cache_bio *b = &fb->bio;
	pthread_mutex_lock(&blk.lock);
	struct fake_object *o = blk_find(fb->name, b->op == X_WRITE);
	b->served = true;
	switch (b->op) {
	case X_READ:
		if (o && o->exists)
			memcpy(b->data, o->data + b->offset, b->size);
		else
			memset(b->data, 0, b->size);
		b->serviced = b->size;
		break;
	case X_WRITE:
		if (strcmp(fb->name, MARKER))   /* the data's writes */
			atomic_fetch_add(&blk.writes, 1);
		memcpy(o->data + b->offset, b->data, b->size);
		o->exists = true;
		b->serviced = b->size;
		break;
	case X_FLUSH:
		atomic_fetch_add(&blk.flushes, 1);
		break;
	case X_DELETE:
		if (o && o->exists) {
			memset(o->data, 0, OBJ_SIZE);
			o->exists = false;
		} else {
			b->served = false;
			b->error = ENOENT;
		}
		break;
	default:
		b->served = false;
		b->error = EOPNOTSUPP;
	}
	pthread_mutex_unlock(&blk.lock);
}

/* Serves one engine's requests. */
static void *blk_thread(void *arg)
{
	int side = (int)(intptr_t)arg;
	rcu_register_thread();
	pthread_mutex_lock(&blk.lock);
	for (;;) {
		while ((!blk.queue[side] || atomic_load(&blk.hold) ||
			atomic_load(&blk.hold_side[side])) && !blk.stop)
			pthread_cond_wait(&blk.cond, &blk.lock);
		if (!blk.queue[side])
			break;
		struct fake_bio *fb = blk.queue[side];
		blk.queue[side] = fb->next;
		pthread_mutex_unlock(&blk.lock);
		int fail = atomic_load(&blk.fail_writes[side]);
		if (!fail && !strcmp(fb->name, MARKER))
			fail = atomic_load(&blk.fail_marker);
		if (fail && fb->bio.op == X_WRITE) {
			fb->bio.served = false;
			fb->bio.error = fail;
		} else {
			blk_serve(fb);
		}
		fb->bio.done(&fb->bio);
		pthread_mutex_lock(&blk.lock);
	}
	pthread_mutex_unlock(&blk.lock);
	rcu_unregister_thread();
	return NULL;
}

static void blk_release_hold(void)
{
	pthread_mutex_lock(&blk.lock);
	atomic_store(&blk.hold, 0);
	atomic_store(&blk.hold_side[PRIMARY], 0);
	atomic_store(&blk.hold_side[REPLICA], 0);
	atomic_store(&blk.fail_writes[PRIMARY], 0);
	atomic_store(&blk.fail_writes[REPLICA], 0);
	atomic_store(&blk.fail_marker, 0);
	pthread_cond_broadcast(&blk.cond);
	pthread_mutex_unlock(&blk.lock);
}

static void blk_submit(struct fake_bio *fb, int side)
{
	pthread_mutex_lock(&blk.lock);
	struct fake_bio **p = &blk.queue[side];   /* FIFO */
	while (*p)
		p = &(*p)->next;
	fb->next = NULL;
	*p = fb;
	pthread_cond_broadcast(&blk.cond);
	pthread_mutex_unlock(&blk.lock);
}

static struct cache_bio *fake_alloc(void *ctx, uint32_t op, const char *name, uint64_t offset,
				    uint64_t size, const char *copy_src)
{
	(void)ctx; (void)offset; (void)copy_src;
	if (atomic_load(&blk.starve_cleans) && op == X_CONTROL && *name)
		return NULL;   /* as the glue when the segment's requests are all out */
	struct fake_bio *fb = calloc(1, sizeof(*fb));
	snprintf(fb->name, sizeof(fb->name), "%s", name);
	fb->bio.data = size ? malloc(size) : NULL;
	fb->bio.op = op;
	return &fb->bio;
}

static struct cache_bio *fake_lend(void *ctx, struct cache_req *req)
{
	(void)ctx;
	struct fake_bio *fb = calloc(1, sizeof(*fb));
	snprintf(fb->name, sizeof(fb->name), "%s", req->name);
	fb->bio.data = req->data;
	fb->lent = true;
	return &fb->bio;
}

static void fake_release(void *ctx, struct cache_bio *bio)
{
	(void)ctx;
	if (!((struct fake_bio *)bio)->lent)
		free(bio->data);
	free(bio);
}

/* ---- the mirror link: the primary's mirror port, reaching the replica ------- */

struct job {
	void (*fn)(void *arg);
	void *arg;
	_Atomic bool done;
	struct job *next;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct fake_bio *queue;            /* sent by the primary, not yet served */
	int queued;
	struct job *jobs;                  /* for the replica thread */
	struct fake_bio *replies;          /* answered, for the reply thread */
	_Atomic int hold;                  /* the test serves them (mir_serve_one) */
	_Atomic int fail;                  /* answer every one with this error */
	_Atomic int resets;                /* mirror-resets seen */
	bool stop;
	pthread_t replica_thread, reply_thread;
} mir;

static struct cache_engine *primary, *replica;

/* The answer goes back to the primary on its own thread. */
static void mir_reply(struct cache_bio *bio)
{
	struct fake_bio *fb = (struct fake_bio *)bio, **p;
	pthread_mutex_lock(&mir.lock);
	for (p = &mir.replies; *p; p = &(*p)->next)
		;
	fb->next = NULL;
	*p = fb;
	pthread_cond_broadcast(&mir.cond);
	pthread_mutex_unlock(&mir.lock);
}

/* A request to the replica made of a mirror bio; its answer is the bio's. */
struct mreq {
	struct cache_req r;
	struct cache_bio *bio;
	char name[XSEG_MAX_TARGETLEN + 1];
};

static void mreq_done(struct cache_req *r)
{
	struct mreq *m = (struct mreq *)r;
	struct cache_bio *bio = m->bio;
	bio->served = r->served;
	bio->error = r->error;
	bio->serviced = r->serviced;
	free(m);
	mir_reply(bio);
}

/* What cached's glue and synapsed do with one mirror request (on the
 * replica thread). */
static void mir_serve(void *arg)
{
	struct fake_bio *fb = arg;
	struct cache_bio *bio = &fb->bio;
	int fail = atomic_load(&mir.fail);
	if (fail) {
		bio->served = false;
		bio->error = fail;
		mir_reply(bio);
		return;
	}
	struct mreq *m = calloc(1, sizeof(*m));
	m->bio = bio;
	snprintf(m->name, sizeof(m->name), "%s", fb->name);
	m->r.name = m->name;
	m->r.done = mreq_done;
	if (bio->op == X_WRITE) {
		m->r.op = X_WRITE;
		m->r.offset = bio->offset;
		m->r.size = bio->size;
		m->r.data = bio->data;
		cache_engine_submit(replica, &m->r);
		return;
	}
	ck_assert_uint_eq(bio->op, X_CONTROL);
	char text[64 + MARKER_NAME_MAX];
	size_t n = bio->size < sizeof(text) - 1 ? bio->size : sizeof(text) - 1;
	memcpy(text, bio->data, n);
	text[n] = '\0';
	unsigned long long off, len;
	if (!strcmp(text, "mirror-reset") || !strncmp(text, "mirror-reset ", 13)) {
		atomic_fetch_add(&mir.resets, 1);
		const char *marker;
		struct cache_replica_epoch epoch;
		ck_assert(cache_replica_reset_args(text[12] ? text + 13 : "", &epoch, &marker));
		cache_engine_replica_reset(replica, &m->r, marker, epoch);
	} else if (sscanf(text, "mirror-clean %llu %llu", &off, &len) == 2) {
		m->r.op = CACHE_OP_MIRROR_CLEAN;
		m->r.offset = off;
		m->r.size = len;
		cache_engine_submit(replica, &m->r);
	} else {
		ck_abort_msg("unexpected mirror control '%s'", text);
	}
}

static struct fake_bio *mir_pop(void)
{
	struct fake_bio *fb = mir.queue;
	if (fb) {
		mir.queue = fb->next;
		mir.queued--;
	}
	return fb;
}

/* Runs the test's jobs and, unless held, the mirror requests. */
static void *replica_thread(void *arg)
{
	(void)arg;
	rcu_register_thread();
	pthread_mutex_lock(&mir.lock);
	for (;;) {
		while (!mir.jobs && (!mir.queue || atomic_load(&mir.hold)) && !mir.stop)
			pthread_cond_wait(&mir.cond, &mir.lock);
		if (mir.jobs) {
			struct job *j = mir.jobs;
			mir.jobs = j->next;
			pthread_mutex_unlock(&mir.lock);
			j->fn(j->arg);
			atomic_store(&j->done, true);
		} else if (mir.stop) {
			break;
		} else {
			struct fake_bio *fb = mir_pop();
			pthread_mutex_unlock(&mir.lock);
			mir_serve(fb);
		}
		pthread_mutex_lock(&mir.lock);
	}
	pthread_mutex_unlock(&mir.lock);
	rcu_unregister_thread();
	return NULL;
}

static void *reply_thread(void *arg)
{
	(void)arg;
	rcu_register_thread();
	pthread_mutex_lock(&mir.lock);
	for (;;) {
		while (!mir.replies && !mir.stop)
			pthread_cond_wait(&mir.cond, &mir.lock);
		if (!mir.replies)
			break;
		struct fake_bio *fb = mir.replies;
		mir.replies = fb->next;
		pthread_mutex_unlock(&mir.lock);
		fb->bio.done(&fb->bio);
		pthread_mutex_lock(&mir.lock);
	}
	pthread_mutex_unlock(&mir.lock);
	rcu_unregister_thread();
	return NULL;
}

/* Runs fn(arg) on the replica thread and waits for it. */
static void on_replica(void (*fn)(void *), void *arg)
{
	struct job *j = calloc(1, sizeof(*j)), **p;
	j->fn = fn;
	j->arg = arg;
	pthread_mutex_lock(&mir.lock);
	for (p = &mir.jobs; *p; p = &(*p)->next)
		;
	*p = j;
	pthread_cond_broadcast(&mir.cond);
	pthread_mutex_unlock(&mir.lock);
	while (!atomic_load(&j->done))
		usleep(500);
	free(j);
}

static int mir_queued(void)
{
	pthread_mutex_lock(&mir.lock);
	int n = mir.queued;
	pthread_mutex_unlock(&mir.lock);
	return n;
}

/* While held: serves the oldest mirror request (on the replica thread). */
static void mir_serve_one(void)
{
	pthread_mutex_lock(&mir.lock);
	struct fake_bio *fb = mir_pop();
	pthread_mutex_unlock(&mir.lock);
	ck_assert_ptr_nonnull(fb);
	on_replica(mir_serve, fb);
}

static void mir_release_hold(void)
{
	pthread_mutex_lock(&mir.lock);
	atomic_store(&mir.hold, 0);
	pthread_cond_broadcast(&mir.cond);
	pthread_mutex_unlock(&mir.lock);
}

static void primary_submit(void *ctx, struct cache_bio *bio)
{
	(void)ctx;
	struct fake_bio *fb = (struct fake_bio *)bio;
	if (!bio->mirror) {
		blk_submit(fb, PRIMARY);
		return;
	}
	pthread_mutex_lock(&mir.lock);
	struct fake_bio **p = &mir.queue;   /* FIFO, as one synapsed link */
	while (*p)
		p = &(*p)->next;
	fb->next = NULL;
	*p = fb;
	mir.queued++;
	pthread_cond_broadcast(&mir.cond);
	pthread_mutex_unlock(&mir.lock);
}

static void replica_submit(void *ctx, struct cache_bio *bio)
{
	(void)ctx;
	ck_assert(!bio->mirror);
	blk_submit((struct fake_bio *)bio, REPLICA);
}

/* ---- set up and tear down ------------------------------------------------------ */

static bool fail_stop;   /* --mirror-fail stop for the next setup */
static uint64_t replica_cache = 1 << 20;   /* the replica's pool, for the next setup */
static const char *primary_persist;        /* the primary's --persist, for the next setup */

static struct cache_engine *make_engine(bool is_primary)
{
	struct cache_config cfg = {
		.cache_size = is_primary ? 1 << 20 : replica_cache, .max_objects = MAX_OBJS, .object_size = OBJ_SIZE,
		.bucket_size = BKT_SIZE, .max_request_size = 16 * 1024, .policy = CACHE_WRITEBACK,
		.dirty_high_pct = 50, .dirty_low_pct = 25, .blocker_port = 1,
		.persist_path = is_primary ? primary_persist : NULL,
		.mirror = is_primary, .mirror_fail_stop = is_primary && fail_stop,
		.replica = !is_primary, .mirror_marker = is_primary ? MARKER : NULL,
	};
	struct cache_backend be = { .alloc = fake_alloc, .release = fake_release, .lend = fake_lend,
				    .submit = is_primary ? primary_submit : replica_submit };
	const char *why = NULL;
	struct cache_engine *e = cache_engine_create(&cfg, &be, &why);
	ck_assert_msg(e, "engine: %s", why ? why : "?");
	return e;
}

static struct cache_stats stats_of(struct cache_engine *e)
{
	struct cache_stats st;
	cache_engine_stats(e, &st);
	return st;
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Runs the primary's maintenance tick until cond holds (5 s at most), as
 * cached's maintenance thread does. */
#define MAINTAIN_UNTIL(cond)                                                           \
	do {                                                                           \
		uint64_t until_ = now_ms() + 5000;                                     \
		while (!(cond) && now_ms() < until_) {                                 \
			cache_engine_maintain(primary);                                \
			usleep(2000);                                                  \
		}                                                                      \
		ck_assert_msg((cond), "timed out waiting for %s", #cond);              \
	} while (0)

/* Mirrored, and the marker on the blocker says so: write-back from then
 * on (before it lands, writes go through). */
static void wait_mirrored(void)
{
	MAINTAIN_UNTIL(stats_of(primary).mirror_state == MIRROR_MIRRORED &&
		       stats_of(primary).marker_state == MARKER_MIRRORED);
}

static void maintain_replica(void *arg)
{
	(void)arg;
	cache_engine_maintain(replica);
}

/* Both engines and their threads; the primary MIRRORED unless connect is
 * false. */
static void setup(bool connect)
{
	memset(&blk, 0, sizeof(blk));
	memset(&mir, 0, sizeof(mir));
	pthread_mutex_init(&blk.lock, NULL);
	pthread_cond_init(&blk.cond, NULL);
	pthread_mutex_init(&mir.lock, NULL);
	pthread_cond_init(&mir.cond, NULL);
	rcu_register_thread();
	primary = make_engine(true);
	replica = make_engine(false);
	for (int i = 0; i < 2; i++)
		pthread_create(&blk.threads[i], NULL, blk_thread, (void *)(intptr_t)i);
	pthread_create(&mir.replica_thread, NULL, replica_thread, NULL);
	pthread_create(&mir.reply_thread, NULL, reply_thread, NULL);
	if (connect)
		wait_mirrored();
}

/* Pseudo-ops of run_on for what is not a cache_req submit. */
#define OP_RESET    (CACHE_OP_MIRROR_CLEAN + 1)
#define OP_PROMOTE  (CACHE_OP_MIRROR_CLEAN + 2)
#define OP_WT       (CACHE_OP_MIRROR_CLEAN + 3)
#define OP_FLUSH    (CACHE_OP_MIRROR_CLEAN + 4)   /* cached's "flush" control */
#define OP_PROMOTE_CHECKED (CACHE_OP_MIRROR_CLEAN + 5)   /* promote, not forced */
static int run_on(struct cache_engine *e, uint32_t op, const char *name, uint64_t off,
		  uint64_t size, void *data);

/* Nothing may be in flight when an engine is destroyed: the primary is
 * written back and its cleans answered, the replica dropped. The primary
 * goes first: it gives back the slots in this thread's magazine, so the
 * replica's destroy can use it. */
static void teardown(void)
{
	atomic_store(&mir.fail, 0);
	mir_release_hold();
	blk_release_hold();
	/* write-through: with --persist a FLUSH would sync instead */
	ck_assert_int_eq(run_on(primary, OP_WT, "", 0, 0, NULL), 0);
	MAINTAIN_UNTIL(cache_engine_idle(primary) && !atomic_load(&primary->mst.in_flight) &&
		       !atomic_load(&primary->reset_out));
	if (is_replica(replica))
		ck_assert_int_eq(run_on(replica, OP_RESET, "", 0, 0, NULL), 0);
	MAINTAIN_UNTIL(cache_engine_idle(replica));
	pthread_mutex_lock(&mir.lock);
	mir.stop = true;
	pthread_cond_broadcast(&mir.cond);
	pthread_mutex_unlock(&mir.lock);
	pthread_join(mir.replica_thread, NULL);
	pthread_join(mir.reply_thread, NULL);
	pthread_mutex_lock(&blk.lock);
	blk.stop = true;
	pthread_cond_broadcast(&blk.cond);
	pthread_mutex_unlock(&blk.lock);
	for (int i = 0; i < 2; i++)
		pthread_join(blk.threads[i], NULL);
	cache_engine_destroy(primary);
	cache_engine_destroy(replica);
	rcu_unregister_thread();
	fail_stop = false;
	replica_cache = 1 << 20;
	primary_persist = NULL;
}

/* ---- client requests ------------------------------------------------------------- */

struct areq {
	struct cache_req r;
	struct cache_engine *e;
	_Atomic bool done;
};

static void areq_done(struct cache_req *r)
{
	atomic_store(&((struct areq *)r)->done, true);
}

static void areq_start(void *arg)
{
	struct areq *a = arg;
	uint32_t op = a->r.op;
	if (op == OP_RESET)   /* the name: the marker the reset gives */
		cache_engine_replica_reset(a->e, &a->r, a->r.name ? a->r.name : "",
					   (struct cache_replica_epoch){ 0 });
	else if (op == OP_PROMOTE)
		cache_engine_promote(a->e, &a->r, true);   /* forced: the marker unread */
	else if (op == OP_PROMOTE_CHECKED)
		cache_engine_promote(a->e, &a->r, false);
	else if (op == OP_WT)
		cache_engine_set_policy(a->e, CACHE_WRITETHROUGH, &a->r);
	else if (op == OP_FLUSH)
		cache_engine_flush_all(a->e, &a->r);
	else
		cache_engine_submit(a->e, &a->r);
}

/* Starts a request on e (on the replica's thread for the replica). */
static void start_on(struct cache_engine *e, struct areq *a, uint32_t op, const char *name,
		     uint64_t off, uint64_t size, void *data)
{
	memset(a, 0, sizeof(*a));
	a->r = (struct cache_req){ .op = op, .name = name, .offset = off, .size = size,
				   .data = data, .done = areq_done };
	a->e = e;
	if (e == replica)
		on_replica(areq_start, a);
	else
		areq_start(a);
}

static bool answered_within(struct areq *a, unsigned ms)
{
	uint64_t until = now_ms() + ms;
	while (!atomic_load(&a->done) && now_ms() < until)
		usleep(1000);
	return atomic_load(&a->done);
}

static int result(struct areq *a)
{
	ck_assert_msg(answered_within(a, 5000), "request not answered");
	return a->r.served ? 0 : (a->r.error ? a->r.error : -1);
}

static int run_on(struct cache_engine *e, uint32_t op, const char *name, uint64_t off,
		  uint64_t size, void *data)
{
	struct areq a;
	start_on(e, &a, op, name, off, size, data);
	return result(&a);
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(seed * 131 + i * 7 + (i >> 8));
}

static bool blk_has(const char *name, uint64_t off, const void *data, uint64_t size)
{
	pthread_mutex_lock(&blk.lock);
	struct fake_object *o = blk_find(name, false);
	bool ok = o && o->exists && !memcmp(o->data + off, data, size);
	pthread_mutex_unlock(&blk.lock);
	return ok;
}

/* Waits until n mirror requests are queued, then a little longer to see
 * that no more come. */
static void expect_queued(int n)
{
	uint64_t until = now_ms() + 5000;
	while (mir_queued() < n && now_ms() < until)
		usleep(1000);
	usleep(50 * 1000);
	ck_assert_int_eq(mir_queued(), n);
}

/* ---- tests -------------------------------------------------------------------------- */

/* 1. Answered only once the replica has it; then held there, not on the
 * blocker. */
START_TEST(write_is_answered_after_the_replica_has_it)
{
	setup(true);
	unsigned char w[2 * BKT_SIZE];
	fill(w, sizeof(w), 1);
	atomic_store(&mir.hold, 1);
	struct areq a;
	start_on(primary, &a, X_WRITE, "a", BKT_SIZE, sizeof(w), w);
	expect_queued(1);
	ck_assert(!answered_within(&a, 50));            /* not before the replica has it */
	ck_assert_uint_eq(stats_of(replica).replica_writes, 0);
	mir_serve_one();
	ck_assert_int_eq(result(&a), 0);
	struct cache_stats rs = stats_of(replica), ps = stats_of(primary);
	ck_assert_uint_eq(rs.replica_writes, 1);
	ck_assert_uint_eq(rs.dirty_bytes, sizeof(w));
	ck_assert_uint_eq(ps.dirty_bytes, sizeof(w));
	ck_assert_uint_eq(ps.mirror_writes, 1);
	ck_assert_uint_eq(ps.mirrored_bytes, sizeof(w));
	ck_assert(!blk_has("a", BKT_SIZE, w, sizeof(w)));
	ck_assert_int_eq(atomic_load(&blk.writes), 0);
	teardown();
}
END_TEST

/* 2. Overlapping writes go out one at a time, in order; others at once.
 * The replica ends with the newer bytes (seen by promoting it: the
 * primary has written nothing back). */
START_TEST(overlapping_writes_are_mirrored_in_order)
{
	setup(true);
	unsigned char old[BKT_SIZE], new[BKT_SIZE], other[BKT_SIZE];
	fill(old, sizeof(old), 2);
	fill(new, sizeof(new), 3);
	fill(other, sizeof(other), 4);
	atomic_store(&mir.hold, 1);
	struct areq a, b, c, d;
	start_on(primary, &a, X_WRITE, "o", 0, BKT_SIZE, old);
	start_on(primary, &b, X_WRITE, "o", 0, BKT_SIZE, new);
	expect_queued(1);                                /* the second waits */
	start_on(primary, &c, X_WRITE, "o", 4 * BKT_SIZE, BKT_SIZE, other);
	start_on(primary, &d, X_WRITE, "p", 0, BKT_SIZE, other);
	expect_queued(3);                                /* other buckets, objects: at once */
	mir_serve_one();                                 /* the first write */
	ck_assert_int_eq(result(&a), 0);
	ck_assert(!answered_within(&b, 20));
	expect_queued(3);                                /* now the second */
	mir_release_hold();
	ck_assert_int_eq(result(&b), 0);
	ck_assert_int_eq(result(&c), 0);
	ck_assert_int_eq(result(&d), 0);
	ck_assert_uint_eq(stats_of(replica).replica_writes, 4);
	ck_assert_uint_eq(stats_of(replica).dirty_bytes, 3 * BKT_SIZE);

	ck_assert_int_eq(run_on(replica, OP_PROMOTE, "", 0, 0, NULL), 0);
	ck_assert(blk_has("o", 0, new, BKT_SIZE));
	ck_assert(blk_has("o", 4 * BKT_SIZE, other, BKT_SIZE));
	ck_assert(blk_has("p", 0, other, BKT_SIZE));
	teardown();
}
END_TEST

/* 3. What the primary wrote back, the replica drops. */
START_TEST(write_back_cleans_the_replica)
{
	setup(true);
	unsigned char w[3 * BKT_SIZE];
	fill(w, sizeof(w), 5);
	ck_assert_int_eq(run_on(primary, X_WRITE, "c", 0, sizeof(w), w), 0);
	ck_assert_uint_eq(stats_of(replica).dirty_bytes, sizeof(w));
	ck_assert_int_eq(run_on(primary, OP_FLUSH, "", 0, 0, NULL), 0);
	ck_assert(blk_has("c", 0, w, sizeof(w)));
	/* the counters move after the buckets are dropped, and the
	 * primary's after the replica's answer */
	MAINTAIN_UNTIL(stats_of(replica).dirty_bytes == 0 && stats_of(replica).replica_cleans == 1 &&
		       stats_of(primary).mirror_cleans == 1);

	/* the same through a policy switch */
	fill(w, sizeof(w), 6);
	ck_assert_int_eq(run_on(primary, X_WRITE, "c", BKT_SIZE, BKT_SIZE, w), 0);
	ck_assert_uint_eq(stats_of(replica).dirty_bytes, BKT_SIZE);
	uint64_t cleans = stats_of(replica).replica_cleans;
	ck_assert_int_eq(run_on(primary, OP_WT, "", 0, 0, NULL), 0);
	ck_assert(blk_has("c", BKT_SIZE, w, BKT_SIZE));
	MAINTAIN_UNTIL(stats_of(replica).dirty_bytes == 0 &&
		       stats_of(replica).replica_cleans > cleans);
	teardown();
}
END_TEST

/* 3b. A DELETE drops the replica's copy too, before it is answered: a
 * replica promoted after the primary was lost must not write the
 * deleted object's bytes back. */
START_TEST(delete_drops_the_replica_copy_before_its_answer)
{
	setup(true);
	unsigned char w[BKT_SIZE];
	fill(w, sizeof(w), 33);
	ck_assert_int_eq(run_on(primary, X_WRITE, "x", 0, BKT_SIZE, w), 0);
	ck_assert_int_eq(run_on(primary, OP_FLUSH, "", 0, 0, NULL), 0);   /* on the blocker */
	MAINTAIN_UNTIL(stats_of(replica).dirty_bytes == 0);
	ck_assert_int_eq(run_on(primary, X_WRITE, "x", 0, BKT_SIZE, w), 0);
	ck_assert_uint_eq(stats_of(replica).dirty_bytes, BKT_SIZE);
	atomic_store(&mir.hold, 1);
	struct areq d;
	start_on(primary, &d, X_DELETE, "x", 0, 0, NULL);
	bool answered = answered_within(&d, 200);
	ck_assert_msg(!answered || stats_of(replica).dirty_bytes == 0,
		      "DELETE answered while the replica still holds the object (%d mirror "
		      "request(s) held)", mir_queued());
	mir_release_hold();
	ck_assert_int_eq(result(&d), 0);
	teardown();
}
END_TEST

/* 3b'. A DELETE waits for the replica's clean (3b); here no request is
 * free for that clean, so it waits in the object's list for one
 * (send_when_freed), nothing of the object out. The mirror goes down
 * meanwhile: the retry drops the clean unsent (the reset will empty the
 * replica), the list is empty, and the DELETE parked on it must go on
 * then; no reply is coming to resume it. */
START_TEST(delete_parked_on_an_unsent_clean_goes_on_when_the_mirror_fails)
{
	setup(true);
	MAINTAIN_UNTIL(stats_of(primary).marker_state == MARKER_MIRRORED);
	unsigned char w[BKT_SIZE];
	fill(w, sizeof(w), 38);
	ck_assert_int_eq(run_on(primary, X_WRITE, "z", 0, BKT_SIZE, w), 0);
	ck_assert_int_eq(run_on(primary, OP_FLUSH, "", 0, 0, NULL), 0);   /* "z" clean */
	MAINTAIN_UNTIL(atomic_load(&primary->mst.ops) == 0);
	atomic_store(&blk.starve_cleans, 1);
	struct areq d;
	start_on(primary, &d, X_DELETE, "z", 0, 0, NULL);
	ck_assert(!answered_within(&d, 50));              /* parked on the unsent clean */
	ck_assert_uint_eq(atomic_load(&primary->mst.ops), 1);
	ck_assert_int_eq(mir_queued(), 0);
	ck_assert_uint_gt(stats_of(primary).mirror_waits, 0);
	atomic_store(&blk.starve_cleans, 0);
	/* the link lost: degraded; the marker write's request, given back,
	 * wakes the clean's wait, which finds the mirror down. No tick: its
	 * reset would make the primary mirrored again and send the clean. */
	cache_engine_mirror_lost(primary, EHOSTDOWN);
	ck_assert_msg(answered_within(&d, 2000), "the DELETE was not answered: parked on a "
		      "mirror list that the retry emptied (%u mirror request(s) listed)",
		      (unsigned)atomic_load(&primary->mst.ops));
	ck_assert_int_eq(result(&d), 0);
	ck_assert_uint_eq(atomic_load(&primary->mst.ops), 0);
	teardown();
}
END_TEST

/* 3c. While mirrored, a write that goes through (here: policy
 * writethrough) waits until the replica dropped its older copy of the
 * object: else a replica promoted after losing the primary could write
 * the older bytes over it. */
START_TEST(write_through_waits_for_the_replica_clean)
{
	setup(true);
	unsigned char old[BKT_SIZE], new[BKT_SIZE];
	fill(old, sizeof(old), 34);
	fill(new, sizeof(new), 35);
	ck_assert_int_eq(run_on(primary, X_WRITE, "t", 0, BKT_SIZE, old), 0);
	atomic_store(&mir.hold, 1);
	struct areq wt;   /* answered once the replica dropped "t" (test 14) */
	start_on(primary, &wt, OP_WT, "", 0, 0, NULL);
	MAINTAIN_UNTIL(blk_has("t", 0, old, BKT_SIZE));
	expect_queued(1);                                    /* the clean, held */
	struct areq a;
	start_on(primary, &a, X_WRITE, "t", 0, BKT_SIZE, new);
	ck_assert(!answered_within(&a, 100));
	ck_assert(blk_has("t", 0, old, BKT_SIZE));
	mir_release_hold();
	ck_assert_int_eq(result(&wt), 0);
	ck_assert_int_eq(result(&a), 0);
	ck_assert(blk_has("t", 0, new, BKT_SIZE));
	ck_assert_uint_eq(stats_of(replica).dirty_bytes, 0);
	teardown();
}
END_TEST

/* 4. A failed mirror write: degraded, the write answered once on the
 * blocker, later writes through, then reset and mirrored again. */
START_TEST(failed_mirror_write_degrades_and_resets)
{
	setup(true);
	unsigned char held[BKT_SIZE], w[BKT_SIZE], later[BKT_SIZE];
	fill(held, sizeof(held), 7);
	fill(w, sizeof(w), 8);
	fill(later, sizeof(later), 9);
	ck_assert_int_eq(run_on(primary, X_WRITE, "h", 0, BKT_SIZE, held), 0);
	ck_assert_uint_eq(stats_of(replica).dirty_bytes, BKT_SIZE);   /* for the reset to drop */

	atomic_store(&mir.fail, EHOSTDOWN);
	atomic_store(&blk.hold, 1);
	struct areq a;
	start_on(primary, &a, X_WRITE, "d", 0, BKT_SIZE, w);
	MAINTAIN_UNTIL(stats_of(primary).mirror_state == MIRROR_DEGRADED);
	ck_assert(!answered_within(&a, 50));              /* not on the blocker yet */
	struct cache_stats ps = stats_of(primary);
	ck_assert_int_eq(ps.mirror_error, EHOSTDOWN);
	ck_assert_uint_eq(ps.degradations, 1);
	ck_assert_uint_ge(ps.mirror_failures, 1);
	ck_assert_uint_eq(ps.exposure_bytes, 2 * BKT_SIZE);   /* "h" and "d": here alone */
	blk_release_hold();
	ck_assert_int_eq(result(&a), 0);
	ck_assert(blk_has("d", 0, w, BKT_SIZE));

	ck_assert_int_eq(run_on(primary, X_WRITE, "d", BKT_SIZE, BKT_SIZE, later), 0);
	ck_assert(blk_has("d", BKT_SIZE, later, BKT_SIZE));   /* through */

	atomic_store(&mir.fail, 0);
	MAINTAIN_UNTIL(stats_of(primary).mirror_state == MIRROR_MIRRORED);
	ck_assert(blk_has("h", 0, held, BKT_SIZE));           /* written back meanwhile */
	ck_assert_int_eq(atomic_load(&mir.resets), 2);        /* the start's and this one */
	struct cache_stats rs = stats_of(replica);
	ck_assert_uint_eq(rs.replica_resets, 2);
	ck_assert_uint_eq(rs.dirty_bytes, 0);
	ps = stats_of(primary);
	ck_assert_uint_eq(ps.dirty_bytes, 0);
	ck_assert_uint_gt(ps.exposure_ns, 0);
	ck_assert_uint_gt(ps.degraded_ns_total, 0);

	/* mirrored again: held by the replica, not written through */
	int writes = atomic_load(&blk.writes);
	ck_assert_int_eq(run_on(primary, X_WRITE, "d", 0, BKT_SIZE, later), 0);
	ck_assert_uint_eq(stats_of(replica).dirty_bytes, BKT_SIZE);
	ck_assert_int_eq(atomic_load(&blk.writes), writes);
	teardown();
}
END_TEST

/* 4b. A write queued behind a failing one of the same bucket is not
 * sent after the failure: it is answered once on the blocker, and the
 * blocker ends with the newer bytes. */
START_TEST(write_queued_behind_a_failed_one_goes_to_the_blocker)
{
	setup(true);
	unsigned char old[BKT_SIZE], new[BKT_SIZE];
	fill(old, sizeof(old), 30);
	fill(new, sizeof(new), 31);
	atomic_store(&mir.hold, 1);
	struct areq a, b;
	start_on(primary, &a, X_WRITE, "q", 0, BKT_SIZE, old);
	start_on(primary, &b, X_WRITE, "q", 0, BKT_SIZE, new);
	expect_queued(1);
	atomic_store(&mir.fail, EHOSTDOWN);
	mir_serve_one();
	ck_assert_int_eq(result(&a), 0);
	ck_assert_int_eq(result(&b), 0);
	ck_assert_int_eq(mir_queued(), 0);                   /* the second never went */
	ck_assert(blk_has("q", 0, new, BKT_SIZE));
	ck_assert_int_eq(stats_of(primary).mirror_state, MIRROR_DEGRADED);
	ck_assert_uint_eq(stats_of(replica).replica_writes, 0);
	teardown();
}
END_TEST

/* 4c. A full replica refuses (ENOSPC): the primary degrades and the write
 * is answered once on the blocker, never acknowledged unreplicated. */
START_TEST(full_replica_degrades_the_primary)
{
	replica_cache = 8 * BKT_SIZE;
	setup(true);
	static unsigned char w[OBJ_SIZE];
	fill(w, sizeof(w), 32);
	ck_assert_int_eq(run_on(primary, X_WRITE, "big", 0, OBJ_SIZE, w), 0);
	struct cache_stats ps = stats_of(primary);
	ck_assert_int_eq(ps.mirror_state, MIRROR_DEGRADED);
	ck_assert_int_eq(ps.mirror_error, ENOSPC);
	ck_assert(blk_has("big", 0, w, OBJ_SIZE));
	ck_assert_uint_eq(stats_of(replica).replica_refused, 1);
	ck_assert_uint_eq(stats_of(replica).dirty_bytes, 0);
	MAINTAIN_UNTIL(stats_of(primary).mirror_state == MIRROR_MIRRORED);
	teardown();
}
END_TEST

/* 5. --mirror-fail stop: no write is acknowledged unreplicated. */
START_TEST(fail_stop_fails_writes_while_degraded)
{
	fail_stop = true;
	setup(true);
	unsigned char w[BKT_SIZE];
	fill(w, sizeof(w), 10);
	atomic_store(&mir.fail, EHOSTDOWN);
	int rc = run_on(primary, X_WRITE, "s", 0, BKT_SIZE, w);
	ck_assert_int_ne(rc, 0);                              /* the one the replica lacks */
	ck_assert_int_eq(stats_of(primary).mirror_state, MIRROR_DEGRADED);
	ck_assert_int_eq(run_on(primary, X_WRITE, "s", BKT_SIZE, BKT_SIZE, w), ENOTCONN);
	ck_assert(!blk_has("s", BKT_SIZE, w, BKT_SIZE));
	atomic_store(&mir.fail, 0);
	MAINTAIN_UNTIL(stats_of(primary).mirror_state == MIRROR_MIRRORED);
	ck_assert_int_eq(run_on(primary, X_WRITE, "s", BKT_SIZE, BKT_SIZE, w), 0);
	teardown();
}
END_TEST

/* 6. The replica serves its primary's whole-bucket writes only, until
 * promoted; then it writes everything back and serves reads. */
START_TEST(replica_refuses_reads_and_partial_writes_until_promoted)
{
	setup(true);
	/* more than the dirty high mark (50% of 256 buckets): a flusher
	 * that ran on a replica would write some back */
	enum { NOBJ = 10 };
	static unsigned char w[NOBJ][OBJ_SIZE];
	unsigned char r[OBJ_SIZE];
	char names[NOBJ][8];
	for (int i = 0; i < NOBJ; i++) {
		snprintf(names[i], sizeof(names[i]), "r%d", i);
		fill(w[i], OBJ_SIZE, 20 + (unsigned)i);
		ck_assert_int_eq(run_on(replica, X_WRITE, names[i], 0, OBJ_SIZE, w[i]), 0);
	}
	ck_assert_int_eq(run_on(replica, X_READ, "r0", 0, BKT_SIZE, r), EPERM);
	ck_assert_int_eq(run_on(replica, X_WRITE, "r0", 100, BKT_SIZE, r), EINVAL);
	ck_assert_int_eq(run_on(replica, X_WRITE, "r0", 0, 100, r), EINVAL);
	ck_assert_int_eq(run_on(replica, X_FLUSH, "", 0, 0, NULL), EPERM);
	ck_assert_uint_eq(stats_of(replica).replica_refused, 4);
	for (int i = 0; i < 20; i++) {
		on_replica(maintain_replica, NULL);     /* never writes back on its own */
		usleep(1000);
	}
	ck_assert_int_eq(atomic_load(&blk.writes), 0);
	ck_assert_uint_eq(stats_of(replica).dirty_bytes, (uint64_t)NOBJ * OBJ_SIZE);

	int flushes = atomic_load(&blk.flushes);
	ck_assert_int_eq(run_on(replica, OP_PROMOTE, "", 0, 0, NULL), 0);
	for (int i = 0; i < NOBJ; i++)
		ck_assert_msg(blk_has(names[i], 0, w[i], OBJ_SIZE), "%s not written back", names[i]);
	ck_assert_int_gt(atomic_load(&blk.flushes), flushes);
	ck_assert(!stats_of(replica).replica);
	ck_assert_uint_eq(stats_of(replica).dirty_bytes, 0);
	memset(r, 0, sizeof(r));
	ck_assert_int_eq(run_on(replica, X_READ, "r3", 0, OBJ_SIZE, r), 0);
	ck_assert_mem_eq(r, w[3], OBJ_SIZE);
	teardown();
}
END_TEST

/* 6b. cached's "flush", "policy writethrough" and "unplug" controls call
 * these on whatever engine it runs: on a replica they must not write
 * back what it holds (only promote may; the primary may be writing
 * newer bytes of the same objects through meanwhile). */
START_TEST(replica_refuses_flush_all_and_policy_switch)
{
	setup(true);
	unsigned char w[BKT_SIZE];
	fill(w, sizeof(w), 40);
	ck_assert_int_eq(run_on(replica, X_WRITE, "f", 0, BKT_SIZE, w), 0);
	ck_assert_int_eq(run_on(replica, OP_FLUSH, "", 0, 0, NULL), EPERM);
	ck_assert_int_eq(run_on(replica, OP_WT, "", 0, 0, NULL), EPERM);
	ck_assert_int_eq(atomic_load(&blk.writes), 0);
	ck_assert(!blk_has("f", 0, w, BKT_SIZE));
	ck_assert_uint_eq(stats_of(replica).dirty_bytes, BKT_SIZE);
	teardown();
}
END_TEST

/* 6c. A reset naming another marker than the last reset's is counted
 * (a new primary, or two sharing this replica, each reset dropping the
 * other's copies): a figure that keeps rising says so. The first marker,
 * the same one again, and a reset naming none do not count. */
START_TEST(reset_from_another_primary_is_counted)
{
	setup(true);
	uint64_t base = stats_of(replica).replica_primary_changes;   /* the primary's own */
	ck_assert_uint_eq(base, 0);
	ck_assert_int_eq(run_on(replica, OP_RESET, MARKER, 0, 0, NULL), 0);
	ck_assert_uint_eq(stats_of(replica).replica_primary_changes, 0);
	ck_assert_int_eq(run_on(replica, OP_RESET, "other-primary", 0, 0, NULL), 0);
	ck_assert_uint_eq(stats_of(replica).replica_primary_changes, 1);
	ck_assert_int_eq(run_on(replica, OP_RESET, MARKER, 0, 0, NULL), 0);
	ck_assert_int_eq(run_on(replica, OP_RESET, "", 0, 0, NULL), 0);
	ck_assert_int_eq(run_on(replica, OP_RESET, MARKER, 0, 0, NULL), 0);
	struct cache_stats rs = stats_of(replica);
	ck_assert_uint_eq(rs.replica_primary_changes, 2);
	ck_assert_str_eq(rs.marker_name, MARKER);
	teardown();
}
END_TEST

/* 6d. A replica started with nothing it can trust (no --persist here)
 * may lack writes its primary answered before: it takes no mirror write
 * or clean (ESTALE: the primary degrades and writes back) and refuses a
 * promote even empty (ENOKEY: it knows no marker), until a reset. A
 * normal start resets it before any write: no degradation. */
START_TEST(fresh_replica_refuses_until_the_primary_resets_it)
{
	setup(false);
	unsigned char w[BKT_SIZE];
	fill(w, sizeof(w), 14);
	ck_assert(stats_of(replica).replica_unsure);
	ck_assert_int_eq(run_on(replica, X_WRITE, "u", 0, BKT_SIZE, w), ESTALE);
	ck_assert_int_eq(run_on(replica, CACHE_OP_MIRROR_CLEAN, "u", 0, BKT_SIZE, NULL), ESTALE);
	ck_assert_int_eq(run_on(replica, OP_PROMOTE_CHECKED, "", 0, 0, NULL), ENOKEY);
	struct cache_stats rs = stats_of(replica);
	ck_assert(rs.replica);
	ck_assert_uint_eq(rs.promotes_refused, 1);
	ck_assert_uint_eq(rs.replica_refused, 2);
	ck_assert_uint_eq(rs.dirty_bytes, 0);

	wait_mirrored();                                   /* the primary's first reset */
	rs = stats_of(replica);
	ck_assert(!rs.replica_unsure);
	ck_assert_str_eq(rs.marker_name, MARKER);
	ck_assert_int_eq(run_on(primary, X_WRITE, "u", 0, BKT_SIZE, w), 0);
	ck_assert_uint_eq(stats_of(replica).replica_writes, 1);
	ck_assert_uint_eq(stats_of(primary).degradations, 0);
	teardown();
}
END_TEST

/* 7. A new primary writes through until its first reset is answered. */
START_TEST(connecting_primary_writes_through)
{
	setup(false);
	unsigned char w[BKT_SIZE];
	fill(w, sizeof(w), 12);
	ck_assert_int_eq(stats_of(primary).mirror_state, MIRROR_CONNECTING);
	atomic_store(&mir.hold, 1);
	cache_engine_maintain(primary);                       /* the reset, held */
	expect_queued(1);
	ck_assert_int_eq(run_on(primary, X_WRITE, "n", 0, BKT_SIZE, w), 0);
	ck_assert(blk_has("n", 0, w, BKT_SIZE));
	ck_assert_uint_eq(stats_of(primary).dirty_bytes, 0);
	ck_assert_int_eq(stats_of(primary).mirror_state, MIRROR_CONNECTING);
	ck_assert_uint_eq(stats_of(replica).replica_writes, 0);
	/* the reset answered, the marker's `mirrored` not yet on the blocker
	 * (its writes fail): a write goes through, nothing rests on the
	 * replica that a promote reading `degraded` would refuse */
	atomic_store(&blk.fail_marker, EIO);
	mir_serve_one();
	MAINTAIN_UNTIL(stats_of(primary).mirror_state == MIRROR_MIRRORED);
	mir_release_hold();
	fill(w, sizeof(w), 14);
	ck_assert_int_eq(run_on(primary, X_WRITE, "n", 0, BKT_SIZE, w), 0);
	ck_assert_msg(blk_has("n", 0, w, BKT_SIZE),
		      "a write was answered from the replica before the marker said mirrored");
	ck_assert_uint_eq(stats_of(replica).replica_writes, 0);
	ck_assert_uint_eq(stats_of(primary).dirty_bytes, 0);
	atomic_store(&blk.fail_marker, 0);
	MAINTAIN_UNTIL(stats_of(primary).marker_state == MARKER_MIRRORED);
	fill(w, sizeof(w), 13);
	ck_assert_int_eq(run_on(primary, X_WRITE, "n", 0, BKT_SIZE, w), 0);
	ck_assert(!blk_has("n", 0, w, BKT_SIZE));
	ck_assert_uint_eq(stats_of(replica).replica_writes, 1);
	ck_assert_uint_eq(stats_of(primary).dirty_bytes, BKT_SIZE);
	teardown();
}
END_TEST

/* 7c. A primary restarted on its persist file after its replica was
 * promoted (the marker says so): what it recovered is older than the
 * store's, so it writes nothing back, serves nothing (ESTALE), and a
 * FLUSH or policy switch fails too (found by review: the old primary's
 * write-back went over 8M a VM wrote through the promoted cache). And a
 * promote writes `promoted` before its write-back. */
static void blk_put(const char *name, uint64_t off, const void *data, uint64_t size);
static void blk_put_marker(const char *text);

START_TEST(primary_back_after_a_promote_is_fenced)
{
	char dir[64], path[96], crashed[96];
	snprintf(dir, sizeof(dir), "/tmp/pt-%d-fence-XXXXXX", (int)getpid());
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/cache.pf", dir);
	snprintf(crashed, sizeof(crashed), "%s/crashed.pf", dir);
	primary_persist = path;
	setup(true);
	unsigned char w[2 * BKT_SIZE], n[BKT_SIZE], got[BKT_SIZE];
	fill(w, sizeof(w), 46);
	fill(n, sizeof(n), 47);
	ck_assert_int_eq(run_on(primary, X_WRITE, "f", 0, sizeof(w), w), 0);
	FILE *in = fopen(path, "rb"), *out = fopen(crashed, "wb");   /* as a SIGKILL leaves it */
	ck_assert(in && out);
	static char buf[1 << 16];
	size_t len;
	while ((len = fread(buf, 1, sizeof(buf), in)) > 0)
		ck_assert_uint_eq(fwrite(buf, 1, len, out), len);
	fclose(in);
	fclose(out);
	/* host A lost: B's replica promoted; then the VM writes on B */
	ck_assert_int_eq(run_on(replica, OP_PROMOTE, "", 0, 0, NULL), 0);
	pthread_mutex_lock(&blk.lock);
	struct fake_object *m = blk_find(MARKER, false);
	bool promoted = m && m->exists && !memcmp(m->data, "cached-mirror-marker promoted ", 30);
	pthread_mutex_unlock(&blk.lock);
	ck_assert_msg(promoted, "the promote did not say `promoted` in the marker");
	teardown();

	primary_persist = crashed;   /* host A back, on its file */
	setup(false);
	/* the store as B left it (setup starts an empty one): the marker the
	 * promote wrote, the VM's write through the promoted cache */
	blk_put_marker("cached-mirror-marker promoted 1700000000");
	blk_put("f", 0, n, BKT_SIZE);
	ck_assert_uint_eq(stats_of(primary).recovered_bytes, sizeof(w));
	MAINTAIN_UNTIL(stats_of(primary).fence == 2);
	ck_assert_int_eq(stats_of(primary).fence, 2);
	ck_assert_int_eq(run_on(primary, X_READ, "f", 0, BKT_SIZE, got), ESTALE);
	ck_assert_int_eq(run_on(primary, X_WRITE, "f", 0, BKT_SIZE, w), ESTALE);
	ck_assert_int_eq(run_on(primary, X_FLUSH, "", 0, 0, NULL), ESTALE);
	for (int i = 0; i < 20; i++) {
		cache_engine_maintain(primary);
		usleep(1000);
	}
	ck_assert_msg(blk_has("f", 0, n, BKT_SIZE), "the old primary wrote its older data back");
	ck_assert_uint_eq(stats_of(primary).dirty_bytes, sizeof(w));   /* kept, not written */
	atomic_store(&primary->fence, FENCE_NONE);   /* teardown writes through */
	teardown();
	unlink(path);
	unlink(crashed);
	rmdir(dir);
}
END_TEST

/* 7b. A primary restarted on its persist file (a crash) writes its
 * recovered data back and only then resets the replica, writing through
 * meanwhile: the replica then holds nothing older than the blocker. */
START_TEST(restarted_primary_writes_back_then_resets)
{
	char dir[64], path[96], crashed[96];
	snprintf(dir, sizeof(dir), "/tmp/pt-%d-mirror-XXXXXX", (int)getpid());
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/cache.pf", dir);
	snprintf(crashed, sizeof(crashed), "%s/crashed.pf", dir);
	primary_persist = path;
	setup(true);
	unsigned char w[2 * BKT_SIZE], n[BKT_SIZE];
	fill(w, sizeof(w), 36);
	fill(n, sizeof(n), 37);
	ck_assert_int_eq(run_on(primary, X_WRITE, "k", 0, sizeof(w), w), 0);
	ck_assert_uint_eq(stats_of(replica).dirty_bytes, sizeof(w));
	/* the file as a SIGKILL would leave it */
	FILE *in = fopen(path, "rb"), *out = fopen(crashed, "wb");
	ck_assert(in && out);
	static char buf[1 << 16];
	size_t got;
	while ((got = fread(buf, 1, sizeof(buf), in)) > 0)
		ck_assert_uint_eq(fwrite(buf, 1, got, out), got);
	fclose(in);
	fclose(out);
	teardown();

	primary_persist = crashed;
	setup(false);
	ck_assert_uint_eq(stats_of(primary).recovered_bytes, sizeof(w));
	ck_assert_int_eq(stats_of(primary).mirror_state, MIRROR_CONNECTING);
	/* what the replica held of the old life (its data kept: trusted, as
	 * the old life's reset left it) */
	ck_assert_int_eq(run_on(replica, OP_RESET, MARKER, 0, 0, NULL), 0);
	ck_assert_int_eq(run_on(replica, X_WRITE, "k", 0, sizeof(w), w), 0);
	atomic_store(&blk.hold, 1);                          /* the write-back, held */
	for (int i = 0; i < 10; i++) {
		cache_engine_maintain(primary);
		usleep(1000);
	}
	ck_assert_int_eq(mir_queued(), 0);                    /* no reset while dirty */
	ck_assert_int_eq(atomic_load(&mir.resets), 0);
	blk_release_hold();
	MAINTAIN_UNTIL(stats_of(primary).fence == 0);        /* its marker read: not promoted */
	ck_assert_int_eq(stats_of(primary).fence, 0);
	ck_assert_int_eq(run_on(primary, X_WRITE, "k", 2 * BKT_SIZE, BKT_SIZE, n), 0);
	ck_assert(blk_has("k", 2 * BKT_SIZE, n, BKT_SIZE));   /* through */
	MAINTAIN_UNTIL(stats_of(primary).mirror_state == MIRROR_MIRRORED);
	ck_assert(blk_has("k", 0, w, sizeof(w)));
	ck_assert_int_eq(atomic_load(&mir.resets), 1);
	ck_assert_uint_eq(stats_of(replica).dirty_bytes, 0);
	ck_assert_uint_eq(stats_of(primary).dirty_bytes, 0);
	teardown();
	unlink(path);
	unlink(crashed);
	rmdir(dir);
}
END_TEST

/* ---- objects evicted from the index while dirty ------------------------------------ */

/* Whether name is an active entry of e's index (an evicted one, still
 * referenced while dirty or in flight, is not). */
static bool indexed(struct cache_engine *e, const char *name)
{
	struct xcache_entry *ent = xcache_lookup(e->index, name, strlen(name));
	if (ent)
		xcache_put(e->index, ent);
	return ent != NULL;
}

/* Writes one bucket to each of n other objects ("e0".."e<n-1>") on the
 * primary, without waiting: the index (MAX_OBJS active entries) evicts
 * the coldest entries to make room. */
static void write_others(struct areq *reqs, int n, unsigned char *w)
{
	static char names[2 * MAX_OBJS][8];
	for (int i = 0; i < n; i++) {
		snprintf(names[i], sizeof(names[i]), "e%d", i);
		start_on(primary, &reqs[i], X_WRITE, names[i], 0, BKT_SIZE, w);
	}
}

/* 8. A write whose mirror write fails is answered only once its bytes are
 * on the blocker (unreplicated: the primary holds them alone). Here its
 * object was evicted from the index (dirty: a flush is under way, held)
 * while the mirror write was out: barrier_one looks the object up by name,
 * finds no active entry and answers the write at once, with its bytes
 * neither on the replica nor on the blocker. */
START_TEST(unreplicated_write_of_an_evicted_object_waits_for_the_blocker)
{
	setup(true);
	unsigned char w[BKT_SIZE], o[BKT_SIZE];
	fill(w, sizeof(w), 50);
	fill(o, sizeof(o), 51);
	atomic_store(&mir.hold, 1);
	atomic_store(&blk.hold, 1);
	struct areq a, others[MAX_OBJS];
	start_on(primary, &a, X_WRITE, "d", 0, BKT_SIZE, w);
	expect_queued(1);                                   /* d's mirror write, held */
	write_others(others, MAX_OBJS, o);                  /* 17 names: one is evicted */
	expect_queued(1 + MAX_OBJS);
	ck_assert_msg(!indexed(primary, "d"), "d was not the object evicted");
	ck_assert(!answered_within(&a, 20));
	atomic_store(&mir.fail, EHOSTDOWN);
	mir_serve_one();                                    /* d's mirror write fails */
	MAINTAIN_UNTIL(stats_of(primary).mirror_state == MIRROR_DEGRADED);
	bool answered = answered_within(&a, 200);
	ck_assert_msg(!answered || blk_has("d", 0, w, BKT_SIZE),
		      "write answered (%s) with its bytes on neither the replica (%" PRIu64
		      " replica writes) nor the blocker",
		      answered ? (a.r.served ? "ok" : "failed") : "-",
		      stats_of(replica).replica_writes);
	blk_release_hold();
	mir_release_hold();                                 /* the others' mirror writes fail too */
	ck_assert_int_eq(result(&a), 0);
	ck_assert(blk_has("d", 0, w, BKT_SIZE));
	for (int i = 0; i < MAX_OBJS; i++)
		ck_assert_int_eq(result(&others[i]), 0);
	teardown();
}
END_TEST

/* 9. A replica never writes back on its own until promoted: here the
 * replica's index is full (the primary mirrored MAX_OBJS + 1 objects) and
 * it evicts a dirty object, whose on_evict hook used to start a flush of
 * the replica's copy. The primary meanwhile writes newer bytes of the
 * object and writes them back; the replica's older copy then landed on
 * the blocker after them. */
START_TEST(replica_evicting_a_dirty_object_never_writes_it_back)
{
	setup(true);
	unsigned char old[BKT_SIZE], new[BKT_SIZE], o[BKT_SIZE];
	fill(old, sizeof(old), 52);
	fill(new, sizeof(new), 53);
	fill(o, sizeof(o), 54);
	ck_assert_int_eq(run_on(primary, X_WRITE, "A", 0, BKT_SIZE, old), 0);
	ck_assert_uint_eq(stats_of(replica).dirty_bytes, BKT_SIZE);
	atomic_store(&blk.hold_side[REPLICA], 1);           /* the replica's blocker, held */
	/* the primary evicts A too and writes it back: held until the replica
	 * evicted A, or A's clean could reach it first */
	atomic_store(&blk.hold_side[PRIMARY], 1);
	struct areq others[MAX_OBJS];
	write_others(others, MAX_OBJS, o);
	for (int i = 0; i < MAX_OBJS; i++)
		ck_assert_int_eq(result(&others[i]), 0);
	ck_assert_msg(!indexed(replica, "A"), "A was not the replica's object evicted");
	for (int i = 0; i < 5; i++) {                       /* a flush of A would start here */
		cache_engine_maintain(replica);
		usleep(2000);
	}
	pthread_mutex_lock(&blk.lock);
	atomic_store(&blk.hold_side[PRIMARY], 0);
	pthread_cond_broadcast(&blk.cond);
	pthread_mutex_unlock(&blk.lock);
	int writes = atomic_load(&blk.writes);
	/* the newer bytes, mirrored, then written back by the primary */
	ck_assert_int_eq(run_on(primary, X_WRITE, "A", 0, BKT_SIZE, new), 0);
	ck_assert_int_eq(run_on(primary, OP_FLUSH, "", 0, 0, NULL), 0);
	ck_assert(blk_has("A", 0, new, BKT_SIZE));
	MAINTAIN_UNTIL(stats_of(primary).mirror_in_flight == 0);
	uint64_t replica_flushes = stats_of(replica).flushes;   /* sent, held */
	atomic_store(&blk.hold_side[REPLICA], 0);
	blk_release_hold();
	usleep(100 * 1000);
	ck_assert_msg(blk_has("A", 0, new, BKT_SIZE),
		      "the blocker lost A's acknowledged and flushed bytes: the (unpromoted) "
		      "replica wrote its older copy over them (%" PRIu64 " replica flush(es), "
		      "%d blocker writes in all since)", replica_flushes,
		      atomic_load(&blk.writes) - writes);
	teardown();
}
END_TEST

/* 10. A clean drops the replica's copy of what the primary wrote back,
 * whatever the replica's index holds: here the replica evicted the dirty
 * object from its index (its flush failed: the data stays dirty), and the
 * clean, looked up by name, finds no active entry and is answered "done"
 * with the older copy kept. The primary then writes newer bytes through;
 * a promote writes the older copy over them. */
START_TEST(clean_of_an_object_the_replica_evicted_drops_its_copy)
{
	setup(true);
	unsigned char old[BKT_SIZE], new[BKT_SIZE], o[BKT_SIZE];
	fill(old, sizeof(old), 55);
	fill(new, sizeof(new), 56);
	fill(o, sizeof(o), 57);
	ck_assert_int_eq(run_on(primary, X_WRITE, "A", 0, BKT_SIZE, old), 0);
	atomic_store(&blk.fail_writes[REPLICA], EIO);       /* were it to write back on evicting */
	/* the primary evicts A too and writes it back: held until the replica
	 * evicted A, or A's clean could reach it first */
	atomic_store(&blk.hold_side[PRIMARY], 1);
	struct areq others[MAX_OBJS];
	write_others(others, MAX_OBJS, o);
	for (int i = 0; i < MAX_OBJS; i++)
		ck_assert_int_eq(result(&others[i]), 0);
	ck_assert_msg(!indexed(replica, "A"), "A was not the replica's object evicted");
	ck_assert_uint_ge(stats_of(replica).dirty_bytes, BKT_SIZE);   /* evicted, still dirty */
	pthread_mutex_lock(&blk.lock);
	atomic_store(&blk.hold_side[PRIMARY], 0);
	pthread_cond_broadcast(&blk.cond);
	pthread_mutex_unlock(&blk.lock);
	/* the primary writes A back (its clean answered), then writes through */
	ck_assert_int_eq(run_on(primary, OP_WT, "", 0, 0, NULL), 0);
	MAINTAIN_UNTIL(stats_of(primary).mirror_in_flight == 0);
	ck_assert_int_eq(run_on(primary, X_WRITE, "A", 0, BKT_SIZE, new), 0);
	ck_assert(blk_has("A", 0, new, BKT_SIZE));
	uint64_t held = stats_of(replica).dirty_bytes;
	/* the primary is lost: the replica is promoted */
	atomic_store(&blk.fail_writes[REPLICA], 0);
	ck_assert_int_eq(run_on(replica, OP_PROMOTE, "", 0, 0, NULL), 0);
	ck_assert_msg(blk_has("A", 0, new, BKT_SIZE),
		      "promote wrote A's older copy over the newer bytes written through "
		      "(the replica still held %" PRIu64 " dirty bytes after every clean)", held);
	teardown();
}
END_TEST

/* ---- the stale-replica marker (marker.c) ------------------------------------------ */

/* The blocker's marker object, set as a primary would have left it. */
static void blk_put_marker(const char *text)
{
	pthread_mutex_lock(&blk.lock);
	struct fake_object *o = blk_find(MARKER, true);
	memset(o->data, '\n', MARKER_SIZE);
	memcpy(o->data, text, strlen(text));
	o->exists = true;
	pthread_mutex_unlock(&blk.lock);
}

static void blk_drop_marker(void)
{
	pthread_mutex_lock(&blk.lock);
	struct fake_object *o = blk_find(MARKER, false);
	if (o)
		o->exists = false;
	pthread_mutex_unlock(&blk.lock);
}

static bool blk_marker_says(const char *state)
{
	char want[64];
	snprintf(want, sizeof(want), "cached-mirror-marker %s ", state);
	pthread_mutex_lock(&blk.lock);
	struct fake_object *o = blk_find(MARKER, false);
	bool ok = o && o->exists && !memcmp(o->data, want, strlen(want));
	pthread_mutex_unlock(&blk.lock);
	return ok;
}

/* 12. Degraded, a write the replica lacks is on the blocker but not
 * answered until the blocker's marker says degraded: were the primary's
 * host lost in between, a promote would find "mirrored" and write the
 * replica's older bytes over an acknowledged write. */
START_TEST(degraded_answers_wait_for_the_marker)
{
	setup(true);
	MAINTAIN_UNTIL(stats_of(primary).marker_state == MARKER_MIRRORED);
	ck_assert(blk_marker_says("mirrored"));
	unsigned char w[BKT_SIZE];
	fill(w, sizeof(w), 50);
	atomic_store(&blk.fail_marker, EIO);
	atomic_store(&mir.fail, EHOSTDOWN);
	struct areq a;
	start_on(primary, &a, X_WRITE, "m", 0, BKT_SIZE, w);
	MAINTAIN_UNTIL(stats_of(primary).mirror_state == MIRROR_DEGRADED &&
		       blk_has("m", 0, w, BKT_SIZE) && stats_of(primary).marker_held == 1);
	ck_assert(!answered_within(&a, 100));      /* on the blocker, not answered */
	struct cache_stats ps = stats_of(primary);
	ck_assert_uint_ge(ps.marker_failures, 1);
	ck_assert_int_ne(ps.marker_state, MARKER_DEGRADED);
	ck_assert(blk_marker_says("mirrored"));
	/* a write through while degraded waits the same way */
	unsigned char w2[BKT_SIZE];
	fill(w2, sizeof(w2), 51);
	struct areq b;
	start_on(primary, &b, X_WRITE, "m2", 0, BKT_SIZE, w2);
	MAINTAIN_UNTIL(blk_has("m2", 0, w2, BKT_SIZE) && stats_of(primary).marker_held == 2);
	ck_assert(!answered_within(&b, 50));

	atomic_store(&blk.fail_marker, 0);         /* the tick writes it again */
	MAINTAIN_UNTIL(atomic_load(&a.done) && atomic_load(&b.done));
	ck_assert_int_eq(result(&a), 0);
	ck_assert_int_eq(result(&b), 0);
	ps = stats_of(primary);
	ck_assert_uint_ge(ps.marker_writes, 2);    /* mirrored, then degraded */
	ck_assert_str_eq(ps.marker_name, MARKER);
	teardown();
}
END_TEST

/* 13. A replica holding dirty data is promoted only where the blocker's
 * marker says mirrored: degraded, or missing, it refuses (ESTALE) and
 * stays a replica with everything it held. */
START_TEST(promote_reads_the_marker)
{
	setup(true);
	MAINTAIN_UNTIL(stats_of(primary).marker_state == MARKER_MIRRORED);
	unsigned char w[BKT_SIZE];
	fill(w, sizeof(w), 60);
	ck_assert_int_eq(run_on(primary, X_WRITE, "p", 0, BKT_SIZE, w), 0);
	ck_assert_uint_eq(stats_of(replica).dirty_bytes, BKT_SIZE);
	ck_assert_str_eq(stats_of(replica).marker_name, MARKER);   /* from the reset */

	blk_put_marker("cached-mirror-marker degraded 1700000000");
	ck_assert_int_eq(run_on(replica, OP_PROMOTE_CHECKED, "", 0, 0, NULL), ESTALE);
	struct cache_stats rs = stats_of(replica);
	ck_assert(rs.replica);
	ck_assert_uint_eq(rs.promotes_refused, 1);
	ck_assert_int_eq(rs.promote_marker_said, MARKER_DEGRADED);
	ck_assert_uint_eq(rs.dirty_bytes, BKT_SIZE);
	ck_assert(!blk_has("p", 0, w, BKT_SIZE));

	blk_drop_marker();
	ck_assert_int_eq(run_on(replica, OP_PROMOTE_CHECKED, "", 0, 0, NULL), ESTALE);
	rs = stats_of(replica);
	ck_assert_uint_eq(rs.promotes_refused, 2);
	ck_assert_int_eq(rs.promote_marker_said, MARKER_UNKNOWN);
	ck_assert(rs.replica);

	blk_put_marker("cached-mirror-marker mirrored 1700000000");
	ck_assert_int_eq(run_on(replica, OP_PROMOTE_CHECKED, "", 0, 0, NULL), 0);
	rs = stats_of(replica);
	ck_assert(!rs.replica);
	ck_assert_int_eq(rs.promote_marker_said, MARKER_MIRRORED);
	ck_assert(blk_has("p", 0, w, BKT_SIZE));
	teardown();
}
END_TEST

/* A write straight to the blocker, as the path past an unplugged primary
 * makes it. */
static void blk_put(const char *name, uint64_t off, const void *data, uint64_t size)
{
	pthread_mutex_lock(&blk.lock);
	struct fake_object *o = blk_find(name, true);
	memcpy(o->data + off, data, size);
	o->exists = true;
	pthread_mutex_unlock(&blk.lock);
}

/* After a switch to write-through was answered, the path may write past
 * the primary (an unplug, the stop's restored route), and the primary may
 * then be lost. Here it is: what the replica still holds goes nowhere,
 * a newer write lands on the blocker, and the replica is promoted. True
 * when the newer write survived. */
static bool past_the_lost_primary_survives(const char *name, const unsigned char *newer)
{
	blk_put(name, 0, newer, BKT_SIZE);
	int rc = run_on(replica, OP_PROMOTE_CHECKED, "", 0, 0, NULL);
	bool ok = blk_has(name, 0, newer, BKT_SIZE);
	if (!ok)
		fprintf(stderr, "promote %s, and wrote the replica's older copy of '%s' over "
			"a write the blocker acknowledged\n", rc ? "refused" : "succeeded", name);
	return ok;
}

/* 14. Mirrored: a switch to write-through is answered only once the
 * replica dropped what the switch wrote back (its cleans answered). */
START_TEST(write_through_switch_waits_for_the_replica_cleans)
{
	setup(true);
	MAINTAIN_UNTIL(stats_of(primary).marker_state == MARKER_MIRRORED);
	unsigned char old[BKT_SIZE], new[BKT_SIZE];
	fill(old, sizeof(old), 70);
	fill(new, sizeof(new), 71);
	ck_assert_int_eq(run_on(primary, X_WRITE, "u", 0, BKT_SIZE, old), 0);
	ck_assert_uint_eq(stats_of(replica).dirty_bytes, BKT_SIZE);
	atomic_store(&mir.hold, 1);                  /* the clean stays out */
	struct areq a;
	start_on(primary, &a, OP_WT, "", 0, 0, NULL);
	MAINTAIN_UNTIL(blk_has("u", 0, old, BKT_SIZE) && mir_queued() == 1);
	if (answered_within(&a, 200))
		ck_assert_msg(past_the_lost_primary_survives("u", new),
			      "write-through switch answered while the replica held an "
			      "older copy");
	ck_assert_uint_eq(stats_of(replica).dirty_bytes, BKT_SIZE);
	mir_release_hold();
	ck_assert_int_eq(result(&a), 0);
	ck_assert_uint_eq(stats_of(replica).dirty_bytes, 0);
	teardown();
}
END_TEST

/* 15. Degraded (the clean failed) with the marker write failing too: the
 * switch is answered only once the marker says degraded. */
START_TEST(write_through_switch_while_degraded_waits_for_the_marker)
{
	setup(true);
	MAINTAIN_UNTIL(stats_of(primary).marker_state == MARKER_MIRRORED);
	unsigned char old[BKT_SIZE], new[BKT_SIZE];
	fill(old, sizeof(old), 72);
	fill(new, sizeof(new), 73);
	ck_assert_int_eq(run_on(primary, X_WRITE, "v", 0, BKT_SIZE, old), 0);
	ck_assert_uint_eq(stats_of(replica).dirty_bytes, BKT_SIZE);
	atomic_store(&blk.fail_marker, EIO);
	atomic_store(&mir.fail, EHOSTDOWN);
	struct areq a;
	start_on(primary, &a, OP_WT, "", 0, 0, NULL);
	MAINTAIN_UNTIL(stats_of(primary).mirror_state == MIRROR_DEGRADED &&
		       blk_has("v", 0, old, BKT_SIZE) && stats_of(primary).marker_failures > 0);
	ck_assert(blk_marker_says("mirrored"));
	ck_assert_uint_eq(stats_of(replica).dirty_bytes, BKT_SIZE);   /* the clean failed */
	if (answered_within(&a, 200))
		ck_assert_msg(past_the_lost_primary_survives("v", new),
			      "write-through switch answered while the marker said mirrored");
	atomic_store(&blk.fail_marker, 0);           /* the tick writes it again */
	MAINTAIN_UNTIL(atomic_load(&a.done));
	ck_assert_int_eq(result(&a), 0);
	ck_assert(blk_marker_says("degraded"));
	teardown();
}
END_TEST

/* 16. A reset's answer landing after a new degradation: reset_done stores
 * MIRRORED, another thread degrades, then reset_done's marker_mirrored
 * runs. The answers held since that degradation are of writes the replica
 * lacks; releasing them (and wanting "mirrored") would let a promote write
 * the replica's older copies over them. Called here directly, the mirror
 * down, as that late half of reset_done. */
START_TEST(late_reset_end_keeps_a_new_degradations_answers)
{
	setup(true);
	MAINTAIN_UNTIL(stats_of(primary).marker_state == MARKER_MIRRORED);
	unsigned char w[BKT_SIZE];
	fill(w, sizeof(w), 90);
	atomic_store(&blk.fail_marker, EIO);
	atomic_store(&mir.fail, EHOSTDOWN);
	struct areq a;
	start_on(primary, &a, X_WRITE, "late", 0, BKT_SIZE, w);
	MAINTAIN_UNTIL(stats_of(primary).mirror_state == MIRROR_DEGRADED &&
		       stats_of(primary).marker_held == 1);
	marker_mirrored(primary);
	ck_assert_msg(!answered_within(&a, 100),
		      "a reset's late end answered a write the replica lacks");
	ck_assert_int_eq(primary->marker_want, MARKER_DEGRADED);
	atomic_store(&blk.fail_marker, 0);           /* the tick writes it again */
	MAINTAIN_UNTIL(atomic_load(&a.done));
	ck_assert_int_eq(result(&a), 0);
	ck_assert(blk_marker_says("degraded"));
	teardown();
}
END_TEST

/* ---- a persist file that failed a sync, and the replica -------------------------- */

static _Atomic int sync_fail;   /* while set, fdatasync fails (EIO) */

int fdatasync(int fd)
{
	if (atomic_load(&sync_fail)) {
		errno = EIO;
		return -1;
	}
	return (int)syscall(SYS_fdatasync, fd);
}

/* A primary's persist file fails a sync while its link to the replica is
 * cut: the primary writes everything back (its clean of the replica
 * fails: degraded), says `written-back` in its persist marker (a restart
 * on the file after a host crash drops what it recovers) and a write is
 * then answered through. The replica still holds the older bytes, which
 * the primary's drop never tells it about: a promote must not write them
 * back over the newer write. It does not: the stale-replica marker says
 * `degraded` before that write is answered, so an unforced promote is
 * refused (and a primary that starts again resets the replica before it
 * says `mirrored`: restarted_primary_writes_back_then_resets). */
START_TEST(persist_written_back_leaves_no_promotable_older_copy)
{
	char dir[64], path[96];
	snprintf(dir, sizeof(dir), "/tmp/pt-%d-pmark-XXXXXX", (int)getpid());
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/cache.pf", dir);
	primary_persist = path;
	setup(true);
	MAINTAIN_UNTIL(stats_of(primary).fence == 0);
	unsigned char w1[2 * BKT_SIZE], w2[2 * BKT_SIZE];
	fill(w1, sizeof(w1), 70);
	fill(w2, sizeof(w2), 71);
	ck_assert_int_eq(run_on(primary, X_WRITE, "j", 0, sizeof(w1), w1), 0);
	ck_assert_uint_eq(stats_of(replica).dirty_bytes, sizeof(w1));
	atomic_store(&mir.fail, EHOSTDOWN);
	atomic_store(&sync_fail, 1);
	ck_assert_int_ne(run_on(primary, X_FLUSH, "", 0, 0, NULL), 0);   /* the sync fails */
	MAINTAIN_UNTIL(stats_of(primary).persist_marker == 2);          /* written-back */
	ck_assert(blk_has("j", 0, w1, sizeof(w1)));
	ck_assert_int_eq(run_on(primary, X_WRITE, "j", 0, sizeof(w2), w2), 0);
	ck_assert(blk_has("j", 0, w2, sizeof(w2)));
	ck_assert_uint_eq(stats_of(replica).dirty_bytes, sizeof(w1));   /* the older bytes */
	ck_assert(blk_marker_says("degraded"));
	/* the primary's host lost now: the replica promoted without --force */
	ck_assert_int_eq(run_on(replica, OP_PROMOTE_CHECKED, "", 0, 0, NULL), ESTALE);
	ck_assert(blk_has("j", 0, w2, sizeof(w2)));
	atomic_store(&sync_fail, 0);
	atomic_store(&primary->persist.sync_error, 0);   /* the teardown's sync */
	teardown();
	unlink(path);
	rmdir(dir);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cached_mirror_engine");
	TCase *tc = tcase_create("mirror");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, write_is_answered_after_the_replica_has_it);
	tcase_add_test(tc, overlapping_writes_are_mirrored_in_order);
	tcase_add_test(tc, write_back_cleans_the_replica);
	tcase_add_test(tc, write_through_waits_for_the_replica_clean);
	tcase_add_test(tc, delete_drops_the_replica_copy_before_its_answer);
	tcase_add_test(tc, delete_parked_on_an_unsent_clean_goes_on_when_the_mirror_fails);
	tcase_add_test(tc, failed_mirror_write_degrades_and_resets);
	tcase_add_test(tc, write_queued_behind_a_failed_one_goes_to_the_blocker);
	tcase_add_test(tc, full_replica_degrades_the_primary);
	tcase_add_test(tc, fail_stop_fails_writes_while_degraded);
	tcase_add_test(tc, replica_refuses_reads_and_partial_writes_until_promoted);
	tcase_add_test(tc, replica_refuses_flush_all_and_policy_switch);
	tcase_add_test(tc, reset_from_another_primary_is_counted);
	tcase_add_test(tc, fresh_replica_refuses_until_the_primary_resets_it);
	tcase_add_test(tc, connecting_primary_writes_through);
	tcase_add_test(tc, restarted_primary_writes_back_then_resets);
	tcase_add_test(tc, primary_back_after_a_promote_is_fenced);
	tcase_add_test(tc, unreplicated_write_of_an_evicted_object_waits_for_the_blocker);
	tcase_add_test(tc, replica_evicting_a_dirty_object_never_writes_it_back);
	tcase_add_test(tc, clean_of_an_object_the_replica_evicted_drops_its_copy);
	tcase_add_test(tc, degraded_answers_wait_for_the_marker);
	tcase_add_test(tc, promote_reads_the_marker);
	tcase_add_test(tc, write_through_switch_waits_for_the_replica_cleans);
	tcase_add_test(tc, write_through_switch_while_degraded_waits_for_the_marker);
	tcase_add_test(tc, late_reset_end_keeps_a_new_degradations_answers);
	tcase_add_test(tc, persist_written_back_leaves_no_promotable_older_copy);
	suite_add_tcase(s, tc);
	return xt_run(s);
}
