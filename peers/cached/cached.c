/*
 * cached: the caching peer. It binds its port, serves every request that
 * reaches it (addressed to it, or routed to it by `xseg plug` in front of a
 * blocker) through the cache engine, and talks to the blocker at
 * --blocker-port with requests of its own.
 *
 * This file is the glue between xseg and the engine: worker threads accept
 * requests and receive blocker replies in batches, a maintenance thread
 * runs the flusher and reclaimer, and X_CONTROL requests carry the
 * operator's commands (stats, policy, flush, unplug).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <urcu.h>

#include "xseg/version.h"
#include "xseg/xseg.h"
#include "peer/blocker.h"
#include "peer/peer.h"
#include "engine.h"

#define BATCH 32u


struct cached {
	struct xseg *seg;
	const char *segment;
	uint32_t port, blocker_port;
	unsigned threads;
	uint64_t spin_ns;
	enum peer_log_level log_level;
	const char *pidfile;
	bool daemonize;
	struct cache_config cfg;
	struct cache_engine *engine;
	_Atomic uint64_t in_flight;        /* client requests accepted, not answered */
	union glue_slot *slots;            /* one per request of the pool, by index */
	struct xseg_reserve *reserve;      /* blocker requests when the pool is empty */
};

static struct cached C;
/* Lock-free atomics are async-signal-safe and visible to every thread. */
static _Atomic int stop_requested;

/* ---- blocker requests (the engine's backend) ------------------------------ */

struct glue_bio {
	struct cache_bio bio;
	struct xseg_request *xreq;
	bool lent;                 /* a client's request, passed on to the blocker */
};

struct glue_req {
	struct cache_req req;
	struct xseg_request *xreq;
	struct glue_bio lent;      /* xreq itself as a blocker request */
	char control[128];
	char copy_src[XSEG_MAX_TARGETLEN + 1];
};

/* A pool request is a client's (accepted here, and maybe lent to the
 * blocker: glue_req.lent) or ours (sent to the blocker), and is ours until
 * answered or put back: its glue lives in the slot of its index, so no
 * request costs a malloc. */
union glue_slot {
	struct glue_bio bio;
	struct glue_req req;
};

static struct cache_bio *backend_alloc(void *ctx, uint32_t op, const char *name,
				       uint64_t offset, uint64_t size, const char *copy_src)
{
	(void)ctx; (void)offset;
	struct xseg_request *xreq = xseg_reserve_get(C.reserve);
	if (!xreq)
		return NULL;
	uint64_t datalen = op == X_COPY ? sizeof(struct xseg_request_copy)
		: op == X_INFO ? sizeof(struct xseg_reply_info) : size;
	if (xseg_prep_target(C.seg, xreq, name, datalen) < 0) {
		xseg_reserve_put(C.reserve, xreq);
		return NULL;
	}
	struct glue_bio *g = &C.slots[xreq->index].bio;
	memset(g, 0, sizeof(*g));
	g->xreq = xreq;
	g->bio.data = xseg_get_data(C.seg, xreq);
	if (op == X_COPY) {
		struct xseg_request_copy *cp = g->bio.data;
		memset(cp, 0, sizeof(*cp));
		cp->src_len = (uint32_t)strlen(copy_src);
		memcpy(cp->src, copy_src, cp->src_len);
	}
	return &g->bio;
}

/* The client's request goes to the blocker itself (xseg_forward): the
 * reply comes back to our port with our cookie, and we answer in turn. */
static struct cache_bio *backend_lend(void *ctx, struct cache_req *r)
{
	(void)ctx;
	struct glue_req *g = (struct glue_req *)r;
	struct glue_bio *b = &g->lent;
	memset(b, 0, sizeof(*b));
	b->xreq = g->xreq;
	b->lent = true;
	b->bio.data = r->data;
	return &b->bio;
}

static void backend_submit(void *ctx, struct cache_bio *bio)
{
	(void)ctx;
	struct glue_bio *g = (struct glue_bio *)bio;
	struct xseg_request *x = g->xreq;
	x->op = bio->op;
	x->flags = bio->flags;
	x->offset = bio->offset;
	x->size = bio->size;
	x->priv = (uint64_t)(uintptr_t)g;
	if (xseg_submit(C.seg, x, C.port, C.blocker_port) < 0) {
		static _Atomic time_t last_warned;
		time_t now = time(NULL);
		if (atomic_exchange(&last_warned, now) != now)   /* once a second */
			peer_log(PEER_LOG_WARN, "cannot reach blocker port %u: %s", C.blocker_port,
			       xseg_last_error());
		bio->served = false;
		bio->error = EHOSTUNREACH;
		bio->done(bio);
	}
}

static void backend_release(void *ctx, struct cache_bio *bio)
{
	(void)ctx;
	struct glue_bio *g = (struct glue_bio *)bio;
	if (!g->lent)
		xseg_reserve_put(C.reserve, g->xreq);   /* the slot is free from here */
}

/* A blocker reply came back to our port. */
static void on_blocker_reply(struct xseg_request *x)
{
	struct glue_bio *g = (struct glue_bio *)(uintptr_t)x->priv;
	struct cache_bio *bio = &g->bio;
	bio->served = x->result == XR_SERVED;
	bio->error = x->result == XR_FAILED ? x->error : 0;
	bio->serviced = x->serviced;
	if (bio->op == X_INFO && bio->served && x->datalen >= sizeof(struct xseg_reply_info))
		bio->info_size = ((struct xseg_reply_info *)xseg_get_data(C.seg, x))->size;
	bio->done(bio);
}

/* ---- client requests ----------------------------------------------------------- */

static void respond(struct xseg_request *x, bool served, int error, uint64_t serviced)
{
	x->result = served ? XR_SERVED : XR_FAILED;
	x->error = served ? 0 : error;
	x->serviced = serviced;
	if (xseg_respond(C.seg, x, C.port) < 0)
		peer_log(PEER_LOG_ERROR, "cannot answer request %u: %s", x->index, xseg_last_error());
	atomic_fetch_sub(&C.in_flight, 1);
}

static void client_done(struct cache_req *r)
{
	struct glue_req *g = (struct glue_req *)r;
	struct xseg_request *x = g->xreq;
	if (r->op == X_INFO && r->served) {
		int err = blocker_reply_info(C.seg, x, r->info_size);
		respond(x, !err, err, err ? 0 : x->serviced);
		return;
	}
	respond(x, r->served, r->error, r->serviced);
}

/* Writes the statistics as JSON into the request's reply data. */
static void reply_stats(struct xseg_request *x)
{
	struct cache_stats s;
	char buf[1536];
	cache_engine_stats(C.engine, &s);
	int n = snprintf(buf, sizeof(buf),
		"{\"port\":%u,\"blocker_port\":%u,\"policy\":\"%s\",\"hits\":%" PRIu64
		",\"misses\":%" PRIu64 ",\"partial_hits\":%" PRIu64 ",\"read_bytes\":%" PRIu64
		",\"write_bytes\":%" PRIu64 ",\"blocker_read_bytes\":%" PRIu64
		",\"blocker_write_bytes\":%" PRIu64 ",\"dirty_bytes\":%" PRIu64
		",\"cached_bytes\":%" PRIu64 ",\"free_bytes\":%" PRIu64 ",\"objects\":%" PRIu64
		",\"evictions\":%" PRIu64 ",\"clean_released_bytes\":%" PRIu64
		",\"flushes\":%" PRIu64 ",\"flush_failures\":%" PRIu64
		",\"flush_backoff_ms\":%" PRIu64 ",\"flush_error\":\"%s\""
		",\"flush_avg_us\":%.1f,\"waits\":%" PRIu64 ",\"uncached\":%" PRIu64
		",\"lent\":%" PRIu64
		",\"failed\":%" PRIu64 ",\"blocker_in_flight\":%" PRIu64
		",\"barriers_open\":%" PRIu64 ",\"barrier_waiters\":%" PRIu64 "}",
		C.port, C.blocker_port, s.policy == CACHE_WRITEBACK ? "writeback" : "writethrough",
		s.hits, s.misses, s.partial_hits, s.read_bytes, s.write_bytes,
		s.blocker_read_bytes, s.blocker_write_bytes, s.dirty_bytes, s.cached_bytes,
		s.free_bytes, s.objects, s.evictions, s.clean_released_bytes, s.flushes, s.flush_failures,
		s.flush_backoff_ns / 1000000, s.flush_error ? strerror(s.flush_error) : "",
		s.flushes ? (double)s.flush_ns_total / (double)s.flushes / 1e3 : 0.0,
		s.waits, s.uncached, s.lent, s.failed, s.blocker_in_flight, s.barriers_open,
		s.barrier_waiters);
	if (n < 0 || (size_t)n >= sizeof(buf)) {   /* cannot happen: 28 fields fit */
		respond(x, false, EOVERFLOW, 0);
		return;
	}
	if (xseg_prep_request(C.seg, x, x->targetlen, (uint64_t)n + 1) < 0) {
		respond(x, false, ENOMEM, 0);
		return;
	}
	memcpy(xseg_get_data(C.seg, x), buf, (size_t)n + 1);
	respond(x, true, 0, (uint64_t)n + 1);
}

/* X_CONTROL: "stats", "policy writeback|writethrough", "flush", "plug", "unplug". */
static void handle_control(struct glue_req *g)
{
	struct xseg_request *x = g->xreq;
	size_t len = x->datalen < sizeof(g->control) - 1 ? x->datalen : sizeof(g->control) - 1;
	memcpy(g->control, xseg_get_data(C.seg, x), len);
	g->control[len] = '\0';
	g->control[strcspn(g->control, "\n")] = '\0';
	peer_log(PEER_LOG_INFO, "control: %s", g->control);

	if (!strcmp(g->control, "stats")) {
		reply_stats(x);
	} else if (!strcmp(g->control, "policy writeback")) {
		cache_engine_set_policy(C.engine, CACHE_WRITEBACK, &g->req);
	} else if (!strcmp(g->control, "plug")) {
		/* back in a path: the policy it was started with */
		cache_engine_set_policy(C.engine, C.cfg.policy, &g->req);
	} else if (!strcmp(g->control, "policy writethrough") || !strcmp(g->control, "unplug")) {
		/* Unplugging: no new dirty data, every dirty byte on the blocker,
		 * and only then the answer (xseg unplug then clears the route). */
		cache_engine_set_policy(C.engine, CACHE_WRITETHROUGH, &g->req);
	} else if (!strcmp(g->control, "flush")) {
		cache_engine_flush_all(C.engine, &g->req);
	} else {
		respond(x, false, EINVAL, 0);
	}
}

/* The ops whose target names an object (a FLUSH only when it names one). */
static bool names_object(const struct xseg_request *x)
{
	return x->op == X_READ || x->op == X_WRITE || x->op == X_INFO || x->op == X_DELETE ||
	       x->op == X_COPY || (x->op == X_FLUSH && x->targetlen);
}

/* The blocker's name rules, checked here too: a name the blocker would
 * refuse must not reach the cache (a NUL inside would make it another
 * object's name, a write-back could never land). Refuses and answers x. */
static bool name_allowed(struct xseg_request *x)
{
	const char *name = xseg_get_target(C.seg, x), *why;
	size_t len = name ? x->targetlen : 0;
	char shown[BLOCKER_PRINTABLE_SIZE];
	int err = blocker_check_name(name, len, BLOCKER_NAME_MAX, &why);
	if (!err)
		return true;
	peer_warn("refused object name '%s' (%zu bytes) in a %s request: %s",
		  blocker_printable(name, len, shown, sizeof(shown)), len, xseg_op_name(x->op), why);
	respond(x, false, err, 0);
	return false;
}

static void on_client_request(struct xseg_request *x)
{
	struct glue_req *g = &C.slots[x->index].req;
	atomic_fetch_add(&C.in_flight, 1);
	memset(&g->req, 0, sizeof(g->req));
	g->xreq = x;
	struct cache_req *r = &g->req;
	r->op = x->op;
	r->flags = x->flags;
	r->name = xseg_get_target(C.seg, x);
	r->offset = x->offset;
	r->size = x->size;
	r->data = xseg_get_data(C.seg, x);
	r->done = client_done;
	if (!r->name)
		r->name = "";
	if (names_object(x) && !name_allowed(x))
		return;
	if ((x->op == X_READ || x->op == X_WRITE) && x->datalen < x->size) {
		peer_log(PEER_LOG_WARN, "%s %s: size %" PRIu64 " over the buffer's %" PRIu64 " bytes",
		       xseg_op_name(x->op), r->name, x->size, x->datalen);
		respond(x, false, EINVAL, 0);
		return;
	}
	if (x->op == X_CONTROL) {
		handle_control(g);
		return;
	}
	if (x->op == X_COPY) {
		const char *src, *why;
		uint32_t src_len;
		char shown[BLOCKER_PRINTABLE_SIZE];
		int err = blocker_copy_source(r->data, x->datalen, BLOCKER_NAME_MAX, &src, &src_len,
					      &why);
		if (err) {
			if (src)
				peer_warn("refused COPY source name '%s' (%u bytes): %s",
					  blocker_printable(src, src_len, shown, sizeof(shown)),
					  src_len, why);
			else
				peer_warn("refused COPY to '%s': %s (%" PRIu64 " bytes of data)",
					  r->name, why, x->datalen);
			respond(x, false, err, 0);
			return;
		}
		memcpy(g->copy_src, src, src_len);
		g->copy_src[src_len] = '\0';
		r->copy_src = g->copy_src;
	}
	cache_engine_submit(C.engine, r);
}

/* ---- threads --------------------------------------------------------------------- */

static _Atomic bool workers_stop, maintainer_stop;

/*
 * The cache shares the machine with its client and its blocker, and its
 * workers poll: more of them than half the cores take CPU from the peers
 * they wait for. On two CPUs one worker served write-back hits at
 * 0.84-0.90x of nulld against 0.65-0.76x with two, and write-through and
 * misses faster too (docs/benchmarks.md).
 */
static unsigned default_threads(void)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	long n = cpus / 2;
	return n < 1 ? 1 : n > 8 ? 8 : (unsigned)n;
}

static void *worker(void *arg)
{
	(void)arg;
	struct xseg_request *batch[BATCH];
	rcu_register_thread();
	while (!atomic_load(&workers_stop)) {
		/* Requests keep being served while stopping: the drain writes
		 * back in write-through mode, so nothing new stays dirty. */
		int n = xseg_accept(C.seg, C.port, batch, BATCH);
		for (int i = 0; i < n; i++)
			on_client_request(batch[i]);
		int m = xseg_receive(C.seg, C.port, batch, BATCH);
		for (int i = 0; i < m; i++)
			on_blocker_reply(batch[i]);
		if (n <= 0 && m <= 0)
			xseg_poll(C.seg, C.port, C.spin_ns, 100000000ull);
	}
	rcu_unregister_thread();
	return NULL;
}

/*
 * A blocker that died (SIGKILL, a crash) never answers: reaping its port
 * fails what it held and what is queued for it back to us (the engine
 * keeps dirty data and retries), and new requests fail at once until a
 * blocker binds the port again.
 */
static void reap_dead_blocker(void)
{
	uint32_t to = xseg_resolve_route(C.seg, C.port, C.blocker_port);
	if (to == XSEG_NO_PORT)
		return;
	int n = xseg_reap_port(C.seg, to, EHOSTDOWN);
	if (n > 0)
		peer_log(PEER_LOG_WARN, "blocker port %u: its owner died; failed %d queued requests "
		       "back, dirty data stays until a blocker binds the port", to, n - 1);
}

/*
 * A blocker that keeps failing write-back (a full disk) is said once per
 * FLUSH_WARN_INTERVAL_S at the default level: the error, the dirty bytes
 * waiting, how often it failed; and once more when it takes writes again.
 * The engine meanwhile retries with a growing pause (engine.c).
 */
#define FLUSH_WARN_INTERVAL_S 10
static void warn_flush_failures(uint64_t now)
{
	static uint64_t failures_seen, next_warn;
	static bool warned;
	struct cache_stats st;
	cache_engine_stats(C.engine, &st);
	if (st.flush_error && st.flush_failures > failures_seen && now >= next_warn) {
		peer_log(PEER_LOG_WARN, "cannot write back to blocker port %u: %s; %" PRIu64 " dirty "
		       "bytes wait, %" PRIu64 " failed writes since the last word; retrying "
		       "every %" PRIu64 " ms", C.blocker_port, strerror(st.flush_error),
		       st.dirty_bytes, st.flush_failures - failures_seen,
		       st.flush_backoff_ns / 1000000);
		failures_seen = st.flush_failures;
		next_warn = now + FLUSH_WARN_INTERVAL_S * 1000000000ull;
		warned = true;
	} else if (warned && !st.flush_error) {
		peer_log(PEER_LOG_WARN, "blocker port %u takes writes again; %" PRIu64 " dirty bytes left",
		       C.blocker_port, st.dirty_bytes);
		failures_seen = st.flush_failures;
		warned = false;   /* next_warn stays: a flapping blocker, 2 lines per interval */
	}
}

static void *maintainer(void *arg)
{
	(void)arg;
	rcu_register_thread();
	uint64_t next_reap = 0;
	while (!atomic_load(&maintainer_stop)) {
		uint64_t now = xseg_now_ns();
		if (now >= next_reap) {
			reap_dead_blocker();
			warn_flush_failures(now);
			next_reap = now + 100000000ull;
		}
		uint64_t ns = cache_engine_maintain(C.engine);
		struct timespec ts = { .tv_sec = 0, .tv_nsec = (long)ns };
		nanosleep(&ts, NULL);
	}
	rcu_unregister_thread();
	return NULL;
}

/* Shutdown: flush everything while still serving replies. */
struct drain_req {
	struct cache_req req;
	_Atomic bool done;
};

static void drain_done(struct cache_req *r)
{
	atomic_store(&((struct drain_req *)r)->done, true);
}

/*
 * Writes every dirty byte back (switching to write-through, so nothing new
 * gets dirty) while the workers keep serving. A blocker that cannot take
 * the data is retried for STOP_RETRY_S seconds; then cached gives up and
 * says how much was not written, rather than hang or exit 0.
 */
#define STOP_RETRY_S 30
/* Nothing dirty and nobody serves the blocker port: nothing to wait for. */
static bool clean_and_blocker_down(void)
{
	struct cache_stats st;
	struct xseg_port_info pi;
	cache_engine_stats(C.engine, &st);
	uint32_t to = xseg_resolve_route(C.seg, C.port, C.blocker_port);
	return st.dirty_bytes == 0 && st.blocker_in_flight == 0 &&
	       (to == XSEG_NO_PORT || xseg_port_info(C.seg, to, &pi) < 0 || !pi.owner ||
		!pi.owner_alive);
}

static bool drain(void)
{
	static struct drain_req d;   /* may be answered after we gave up */
	if (clean_and_blocker_down()) {
		peer_log(PEER_LOG_INFO, "nothing dirty and blocker port %u is down: stopping at once",
		       C.blocker_port);
		return true;
	}
	rcu_register_thread();
	uint64_t deadline = (uint64_t)time(NULL) + STOP_RETRY_S;
	unsigned tries = 0;
	for (;;) {
		d = (struct drain_req){ .req = { .op = X_CONTROL, .name = "", .done = drain_done } };
		cache_engine_set_policy(C.engine, CACHE_WRITETHROUGH, &d.req);
		/* a blocker that stopped may never answer at all */
		while (!atomic_load(&d.done) && (uint64_t)time(NULL) < deadline)
			usleep(1000);
		if (!atomic_load(&d.done)) {
			d.req.served = false;
			d.req.error = ETIMEDOUT;
			break;
		}
		/* A write-back write that was under way at the switch can land
		 * after the barrier took its list: flush again until none is. */
		if (d.req.served && !cache_engine_clean(C.engine) &&
		    (uint64_t)time(NULL) < deadline)
			continue;
		if (d.req.served || (uint64_t)time(NULL) >= deadline)
			break;
		/* said once; the maintainer repeats it every FLUSH_WARN_INTERVAL_S */
		if (!tries++)
			peer_log(PEER_LOG_WARN, "write-back failed (%s); retrying for up to %d s",
			       strerror(d.req.error), STOP_RETRY_S);
		sleep(1);
	}
	rcu_unregister_thread();
	if (!d.req.served) {
		struct cache_stats st;
		cache_engine_stats(C.engine, &st);
		peer_log(PEER_LOG_ERROR, "giving up after %d s: %" PRIu64 " dirty bytes not written to "
		       "port %u, %" PRIu64 " requests to it unanswered (%s)", STOP_RETRY_S,
		       st.dirty_bytes, C.blocker_port, st.blocker_in_flight,
		       strerror(d.req.error));
	}
	return d.req.served;
}

/*
 * Requests accepted are answered before the workers stop. Waiting for the
 * engine to be idle instead never ended under load: the drain switched to
 * write-through, but client writes went on being lent to the blocker. With
 * the route restored nothing new arrives; clients that address our port
 * directly get IN_FLIGHT_MAX_S at most (then ESHUTDOWN, or EPIPE for what
 * is still out at the blocker).
 */
#define IN_FLIGHT_MAX_S 10
static void answer_in_flight(void)
{
	for (unsigned ms = 0; atomic_load(&C.in_flight) && ms < IN_FLIGHT_MAX_S * 1000; ms++)
		usleep(1000);
	if (atomic_load(&C.in_flight))
		peer_log(PEER_LOG_WARN, "stopping with %" PRIu64 " client requests still in "
			 "progress after %d s", (uint64_t)atomic_load(&C.in_flight), IN_FLIGHT_MAX_S);
}

/*
 * After a clean drain on SIGTERM, does what `xseg unplug` would: if the
 * blocker's port routes to us, requests for it go straight to it again and
 * what already queued here is served (write-through, nothing dirty) before
 * the workers stop. The queue must stay empty for QUIET_MS: a client that
 * resolved the old route just before may still be pushing. Clients that
 * address our port directly keep it busy; they get QUIET_MAX_MS at most.
 */
#define QUIET_MS 20
#define QUIET_MAX_MS 2000
static void restore_route(void)
{
	if (xseg_get_next_hop(C.seg, C.blocker_port) != C.port)
		return;
	if (xseg_clear_next_hop(C.seg, C.blocker_port) < 0) {
		peer_log(PEER_LOG_WARN, "cannot restore the route of port %u: %s", C.blocker_port,
		       xseg_last_error());
		return;
	}
	peer_log(PEER_LOG_INFO, "port %u routes straight to its blocker again", C.blocker_port);
	unsigned quiet = 0;
	for (unsigned ms = 0; quiet < QUIET_MS && ms < QUIET_MAX_MS; ms++) {
		struct xseg_port_info pi;
		bool busy = xseg_port_info(C.seg, C.port, &pi) < 0 || pi.request_depth ||
			    atomic_load(&C.in_flight);
		quiet = busy ? 0 : quiet + 1;
		usleep(1000);
	}
}

/* ---- options ------------------------------------------------------------------------ */

static void usage(FILE *out)
{
	fprintf(out,
"usage: cached --segment NAME --port N --blocker-port N --cache-size SIZE [options]\n"
"\n"
"Caches objects in front of a blocker. Put it in a running path with\n"
"`xseg plug --port BLOCKER --via PORT`; take it out with `xseg unplug --via PORT`.\n"
"\n"
"  --segment NAME          segment to join\n"
"  --port N                cached's port\n"
"  --blocker-port N        the blocker behind the cache\n"
"  --cache-size SIZE       bytes of cached data (K, M, G suffixes), a multiple\n"
"                          of the bucket size\n"
"  --max-objects N         objects indexed at once (default 1024)\n"
"  --object-size SIZE      object size, a multiple of the bucket size (default 4M)\n"
"  --bucket-size SIZE      unit of caching, a power of two >= 512 (default 4K)\n"
"  --max-request-size SIZE largest request to the blocker (default 512K)\n"
"  --write-policy writeback|writethrough   (default writeback)\n"
"  --dirty-high PCT        flusher starts above this share dirty (default 75)\n"
"  --dirty-low PCT         ... and stops below this (default 50)\n"
"  --threads N             worker threads (default: half the online CPUs, 1 to 8)\n"
"  --spin-us N             busy-poll before sleeping (default 20)\n"
"  --log-level error|warn|info|debug   (default warn)\n"
"  --daemon                run in the background: returns once serving, then\n"
"                          keeps stderr (the log) only if it is a file\n"
"  --pidfile F             the daemon's pid (with --daemon)\n"
"  -h, --help\n"
"  --version\n");
}

static void die_arg(const char *opt, const char *val, const char *why)
{
	fprintf(stderr, "cached: %s: '%s' %s\n", opt, val, why);
	exit(2);
}

static uint64_t size_arg(const char *opt, const char *val)
{
	uint64_t v;
	if (xseg_parse_size(val, &v) < 0 || !v)
		die_arg(opt, val, "is not a size (e.g. 4K, 64M, 1G)");
	return v;
}

static uint64_t uint_arg(const char *opt, const char *val, uint64_t max)
{
	uint64_t v;
	if (xseg_parse_uint(val, max, &v) < 0)
		die_arg(opt, val, "is not a number in range");
	return v;
}

static void parse_options(int argc, char **argv)
{
	enum { O_SEG = 256, O_PORT, O_BPORT, O_CSIZE, O_MAXOBJ, O_OSIZE, O_BSIZE, O_MRS,
	       O_POLICY, O_HIGH, O_LOW, O_THREADS, O_SPIN, O_LOG, O_DAEMON, O_PIDFILE, O_HELP, O_VERSION };
	static const struct option opts[] = {
		{ "segment", required_argument, NULL, O_SEG },
		{ "port", required_argument, NULL, O_PORT },
		{ "blocker-port", required_argument, NULL, O_BPORT },
		{ "cache-size", required_argument, NULL, O_CSIZE },
		{ "max-objects", required_argument, NULL, O_MAXOBJ },
		{ "object-size", required_argument, NULL, O_OSIZE },
		{ "bucket-size", required_argument, NULL, O_BSIZE },
		{ "max-request-size", required_argument, NULL, O_MRS },
		{ "write-policy", required_argument, NULL, O_POLICY },
		{ "dirty-high", required_argument, NULL, O_HIGH },
		{ "dirty-low", required_argument, NULL, O_LOW },
		{ "threads", required_argument, NULL, O_THREADS },
		{ "spin-us", required_argument, NULL, O_SPIN },
		{ "log-level", required_argument, NULL, O_LOG },
		{ "daemon", no_argument, NULL, O_DAEMON },
		{ "pidfile", required_argument, NULL, O_PIDFILE },
		{ "help", no_argument, NULL, O_HELP },
		{ "version", no_argument, NULL, O_VERSION },
		{ NULL, 0, NULL, 0 },
	};
	bool have_port = false, have_bport = false;
	/* as given, for the messages of the checks after the loop */
	uint64_t bsize;
	const char *csize_arg = NULL, *osize_arg = "4M", *bsize_arg = "4K", *mrs_arg = "512K";
	int c;

	C.threads = default_threads();
	C.spin_ns = 20000;
	C.log_level = PEER_LOG_WARN;
	C.cfg = (struct cache_config){ .max_objects = 1024, .object_size = 4u << 20,
				       .bucket_size = 4096, .max_request_size = 512u << 10,
				       .policy = CACHE_WRITEBACK, .dirty_high_pct = 75,
				       .dirty_low_pct = 50 };
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case O_SEG:
			if (!*optarg || strlen(optarg) > XSEG_NAME_MAX || strchr(optarg, '/'))
				die_arg("--segment", optarg, "is not a segment name");
			C.segment = optarg;
			break;
		case O_PORT: C.port = (uint32_t)uint_arg("--port", optarg, XSEG_MAX_PORTS); have_port = true; break;
		case O_BPORT: C.blocker_port = (uint32_t)uint_arg("--blocker-port", optarg, XSEG_MAX_PORTS); have_bport = true; break;
		case O_CSIZE: C.cfg.cache_size = size_arg("--cache-size", optarg); csize_arg = optarg; break;
		case O_MAXOBJ: C.cfg.max_objects = (uint32_t)uint_arg("--max-objects", optarg, 1u << 24);
			if (!C.cfg.max_objects) die_arg("--max-objects", optarg, "must be at least 1");
			break;
		case O_OSIZE: C.cfg.object_size = size_arg("--object-size", optarg); osize_arg = optarg; break;
		case O_BSIZE:
			if ((bsize = size_arg("--bucket-size", optarg)) > 1u << 30)
				die_arg("--bucket-size", optarg, "is over 1G");
			C.cfg.bucket_size = (uint32_t)bsize;
			bsize_arg = optarg;
			break;
		case O_MRS: C.cfg.max_request_size = size_arg("--max-request-size", optarg); mrs_arg = optarg; break;
		case O_POLICY:
			if (!strcmp(optarg, "writeback")) C.cfg.policy = CACHE_WRITEBACK;
			else if (!strcmp(optarg, "writethrough")) C.cfg.policy = CACHE_WRITETHROUGH;
			else die_arg("--write-policy", optarg, "is not writeback or writethrough");
			break;
		case O_HIGH: C.cfg.dirty_high_pct = (unsigned)uint_arg("--dirty-high", optarg, 100); break;
		case O_LOW: C.cfg.dirty_low_pct = (unsigned)uint_arg("--dirty-low", optarg, 100); break;
		case O_THREADS: C.threads = (unsigned)uint_arg("--threads", optarg, 64);
			if (!C.threads) die_arg("--threads", optarg, "must be at least 1");
			break;
		case O_SPIN: C.spin_ns = uint_arg("--spin-us", optarg, 1000000) * 1000; break;
		case O_LOG:
			if (!strcmp(optarg, "error")) C.log_level = PEER_LOG_ERROR;
			else if (!strcmp(optarg, "warn")) C.log_level = PEER_LOG_WARN;
			else if (!strcmp(optarg, "info")) C.log_level = PEER_LOG_INFO;
			else if (!strcmp(optarg, "debug")) C.log_level = PEER_LOG_DEBUG;
			else die_arg("--log-level", optarg, "is not error, warn, info or debug");
			break;
		case O_DAEMON: C.daemonize = true; break;
		case O_PIDFILE: C.pidfile = optarg; break;
		case 'h':
		case O_HELP: usage(stdout); exit(0);
		case O_VERSION: xseg_print_version("cached"); exit(0);
		default:
			fprintf(stderr, "cached: unknown or incomplete option '%s' (see --help)\n",
				argv[optind - 1]);
			exit(2);
		}
	}
	if (optind < argc)
		die_arg("argument", argv[optind], "is not an option (see --help)");
	if (!C.segment || !have_port || !have_bport || !C.cfg.cache_size) {
		fprintf(stderr, "cached: --segment, --port, --blocker-port and --cache-size are required\n");
		exit(2);
	}
	if (C.port == C.blocker_port) {
		fprintf(stderr, "cached: --port and --blocker-port are both %u\n", C.port);
		exit(2);
	}
	/* The engine would refuse these too, without naming the value. */
	uint32_t bs = C.cfg.bucket_size;
	if (bs < 512 || (bs & (bs - 1)))
		die_arg("--bucket-size", bsize_arg, "is not a power of two of at least 512");
	if (C.cfg.object_size % bs) {
		fprintf(stderr, "cached: --object-size: '%s' is not a multiple of --bucket-size %u\n",
			osize_arg, bs);
		exit(2);
	}
	if (C.cfg.cache_size % bs) {
		fprintf(stderr, "cached: --cache-size: '%s' is not a multiple of --bucket-size %u\n",
			csize_arg, bs);
		exit(2);
	}
	if (C.cfg.max_request_size < bs) {
		fprintf(stderr, "cached: --max-request-size: '%s' is less than --bucket-size %u\n",
			mrs_arg, bs);
		exit(2);
	}
	if (C.cfg.dirty_low_pct > C.cfg.dirty_high_pct) {
		fprintf(stderr, "cached: --dirty-low %u is above --dirty-high %u\n",
			C.cfg.dirty_low_pct, C.cfg.dirty_high_pct);
		exit(2);
	}
	if (C.pidfile && !C.daemonize) {
		fprintf(stderr, "cached: --pidfile goes with --daemon\n");
		exit(2);
	}
}

static void on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

/* --daemon: the caller's process waits for this word (peer_daemonize). */
static int ready_fd = -1;

static int started(int status)
{
	peer_daemon_ready(ready_fd, status);
	ready_fd = -1;
	return status;
}

/* Joins the segment and binds the port; returns the exit status on failure. */
static int join_and_bind(void)
{
	int rc = xseg_join(C.segment, &C.seg);
	if (rc == -ENOENT) {
		fprintf(stderr, "cached: --segment: '%s' does not exist (xseg create)\n", C.segment);
		return 2;
	}
	if (rc < 0) {
		fprintf(stderr, "cached: %s\n", xseg_last_error());
		return 1;
	}
	struct xseg_segment_info si;
	if (xseg_segment_info(C.seg, &si) < 0) {
		fprintf(stderr, "cached: %s\n", xseg_last_error());
		return 1;
	}
	uint32_t bad = C.port >= si.nr_ports ? C.port : C.blocker_port;
	if (bad >= si.nr_ports) {
		fprintf(stderr, "cached: %s %u: segment '%s' has ports 0..%u\n",
			bad == C.port ? "--port" : "--blocker-port", bad, C.segment, si.nr_ports - 1);
		return 2;
	}
	if (xseg_bind_port(C.seg, C.port) < 0) {
		fprintf(stderr, "cached: %s\n", xseg_last_error());
		return 1;
	}
	if (!(C.slots = calloc(si.nr_requests, sizeof(*C.slots)))) {
		fprintf(stderr, "cached: no memory for the glue of %u requests\n", si.nr_requests);
		return 1;
	}
	/* Clients may hold the whole pool; a miss or a flush then still gets a
	 * blocker request of ours and they are served, one by one. */
	if (!(C.reserve = xseg_reserve_create(C.seg, C.port, 0))) {
		fprintf(stderr, "cached: %s\n", xseg_last_error());
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	pthread_t *workers, maint;
	const char *why = NULL;

	parse_options(argc, argv);
	peer_log_setup("cached", C.log_level);
	if (C.daemonize && peer_daemonize(&ready_fd) < 0)
		return 1;
	struct cache_backend be = { .alloc = backend_alloc, .submit = backend_submit,
				    .release = backend_release, .lend = backend_lend };
	C.engine = cache_engine_create(&C.cfg, &be, &why);
	if (!C.engine) {
		fprintf(stderr, "cached: %s\n", why);
		return started(2);
	}
	int rc = join_and_bind();
	if (rc)
		return started(rc);
	if (C.pidfile && peer_pidfile_create(C.pidfile) < 0)
		return started(1);
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	peer_log(PEER_LOG_INFO, "serving port %u in front of %u: %" PRIu64 " bytes of cache, %s",
	       C.port, C.blocker_port, C.cfg.cache_size,
	       C.cfg.policy == CACHE_WRITEBACK ? "write-back" : "write-through");
	workers = calloc(C.threads, sizeof(*workers));
	for (unsigned i = 0; i < C.threads; i++)
		pthread_create(&workers[i], NULL, worker, NULL);
	pthread_create(&maint, NULL, maintainer, NULL);
	started(0);

	while (!stop_requested)
		pause();
	peer_log(PEER_LOG_INFO, "stopping: writing back every dirty byte");
	bool clean = drain();
	if (clean)
		restore_route();
	answer_in_flight();
	atomic_store(&maintainer_stop, true);
	pthread_join(maint, NULL);
	atomic_store(&workers_stop, true);
	for (unsigned i = 0; i < C.threads; i++)
		pthread_join(workers[i], NULL);
	free(workers);
	/* Whatever still arrived is answered, never left behind. */
	struct xseg_request *late[BATCH];
	int n;
	while ((n = xseg_accept(C.seg, C.port, late, BATCH)) > 0)
		for (int i = 0; i < n; i++) {
			atomic_fetch_add(&C.in_flight, 1);
			respond(late[i], false, ESHUTDOWN, 0);
		}
	xseg_reserve_destroy(C.reserve);   /* no thread is left to put one back */
	xseg_leave_port(C.seg, C.port);
	if (clean)
		cache_engine_destroy(C.engine);
	xseg_leave(C.seg);
	free(C.slots);
	if (C.pidfile)
		peer_pidfile_remove(C.pidfile);
	peer_log(PEER_LOG_INFO, "stopped");
	return clean ? 0 : 1;
}
