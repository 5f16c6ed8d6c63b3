/*
 * cached: the caching peer. It binds its port, serves every request that
 * reaches it (addressed to it, or routed to it by `xseg plug` in front of a
 * blocker) through the cache engine, and talks to the blocker at
 * --blocker-port with requests of its own.
 *
 * This file is the glue between the peer runtime and the engine: the
 * runtime's workers hand it client requests (on_request) and blocker
 * replies (the callbacks of peer_send_any / peer_forward_any, checked
 * cookies), its maintenance thread runs the flusher and reclaimer
 * (maintain), and on SIGTERM/SIGINT its drain hook writes every dirty byte
 * back while the workers still serve. X_CONTROL requests carry the
 * operator's commands (policy, flush, unplug; the runtime answers "stats" with
 * our figures added: stats_fields).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <urcu.h>

#include "xseg/xseg.h"
#include "peer/blocker.h"
#include "peer/peer.h"
#include "dirty_mark.h"
#include "engine.h"
#include "options.h"
#include "persist_inspect.h"
#include "stats_json.h"

struct cached {
	struct peer *peer;
	struct xseg *seg;
	uint32_t port, blocker_port;
	uint32_t mirror_port;              /* --mirror-port: the replica's way */
	struct cache_config cfg;           /* from the options (options.c) */
	struct cache_engine *engine;
	union glue_slot *slots;            /* one per request of the pool, by index */
	bool clean;                        /* the drain wrote every dirty byte back */
	/* Set when the drain begins: from then on no control turns write-back
	 * on again (the stop would drop what it made dirty). Under
	 * policy_lock with such a control's switch. */
	bool stopping;
	/* Under policy_lock too: write-back turned on (policy writeback,
	 * plug) this many times; a switch to write-through that saw it change
	 * must not say "nothing dirty" (xseg unplug would then clear the
	 * route). `unplugged`: an unplug answered; write-back waits for plug. */
	uint64_t write_back_gen;
	bool unplugged;
	pthread_mutex_t policy_lock;
	/* A plug under way (plug.c: "plug B" ... "plugged"): requests that
	 * reached port B before the route moved may still be in B's hands,
	 * and a load of ours could read B's data from before them and keep
	 * it clean for good. So every request but a control is parked here,
	 * in the order taken, until the tool saw B idle and says "plugged".
	 * hold_err: the hold gave up (no "plugged" in HOLD_TIMEOUT_S, or an
	 * unplug came first): requests fail with it until the next plug.
	 * Under hold_lock; parked through glue_req.parked_next. */
	pthread_mutex_t hold_lock;
	_Atomic bool holding;   /* read without the lock on every request */
	uint64_t hold_gen;      /* bumped by every plug: a release ends its own hold only */
	int hold_err;
	uint32_t hold_port;
	uint64_t hold_since;
	struct glue_req *parked_head, *parked_tail;
	uint64_t parked;
};

static struct cached C = { .policy_lock = PTHREAD_MUTEX_INITIALIZER,
			   .hold_lock = PTHREAD_MUTEX_INITIALIZER };
static struct peer_ops *cached_ops;   /* main's; init adds on_accept for a replica */


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
	char control[64 + MARKER_NAME_MAX];   /* "mirror-reset @RUN.COUNT NAME" the longest */
	uint64_t replica_tag;      /* --replica: set as accepted (on_accept) */
	uint64_t write_back_gen;   /* a switch to write-through: C's when it began */
	char copy_src[XSEG_MAX_TARGETLEN + 1];
	/* The target's targetlen bytes, NUL-terminated: the buffer may hold
	 * more before a NUL (room to rename in place), and the engine would
	 * cache "abcdef" while the blocker, given targetlen 3, writes "abc". */
	char name[XSEG_MAX_TARGETLEN + 1];
	struct glue_req *parked_next;   /* C.parked_head's list */
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
	uint64_t datalen = op == X_COPY ? sizeof(struct xseg_request_copy)
		: op == X_INFO ? sizeof(struct xseg_reply_info) : size;
	/* from the runtime's reserve when clients hold the whole pool */
	struct xseg_request *xreq = peer_get_request_any(C.peer, name, datalen);
	if (!xreq)
		return NULL;
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

/* The client's request goes to the blocker itself (peer_forward_any): the
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

static void on_blocker_reply(struct peer_thread *t, struct xseg_request *x, void *arg);

static void backend_submit(void *ctx, struct cache_bio *bio)
{
	(void)ctx;
	struct glue_bio *g = (struct glue_bio *)bio;
	struct xseg_request *x = g->xreq;
	x->op = bio->op;
	x->flags = bio->flags;
	x->offset = bio->offset;
	x->size = bio->size;
	uint32_t to = bio->mirror ? C.mirror_port : C.blocker_port;
	int rc = g->lent ? peer_forward_any(C.peer, x, to, on_blocker_reply, g)
			 : peer_send_any(C.peer, x, to, on_blocker_reply, g);
	if (rc < 0) {
		static _Atomic int64_t last;
		static _Atomic uint64_t skipped;
		uint64_t quiet;
		if (peer_log_once_a_second(&last, &skipped, &quiet))
			peer_log(PEER_LOG_WARN, "cannot reach %s port %u: %s (%" PRIu64 " more "
				 "such since the last word)", bio->mirror ? "mirror" : "blocker", to,
				 xseg_last_error(), quiet);
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
		peer_put_request_any(C.peer, g->xreq);   /* the slot is free from here */
}

/* A blocker reply came back to our port (its cookie checked by the runtime). */
static void on_blocker_reply(struct peer_thread *t, struct xseg_request *x, void *arg)
{
	(void)t;
	struct glue_bio *g = arg;
	struct cache_bio *bio = &g->bio;
	bio->served = x->result == XR_SERVED;
	bio->error = x->result == XR_FAILED ? x->error : 0;
	bio->serviced = x->serviced;
	if (bio->op == X_INFO && bio->served && x->datalen >= sizeof(struct xseg_reply_info))
		bio->info_size = ((struct xseg_reply_info *)xseg_get_data(C.seg, x))->size;
	bio->done(bio);
}

/* ---- client requests ----------------------------------------------------------- */

/* On any thread: engine completions come on workers and on the
 * maintenance thread. */
static void respond(struct xseg_request *x, bool served, int error, uint64_t serviced)
{
	x->serviced = serviced;
	peer_answer(C.peer, x, served ? 0 : error > 0 ? error : EIO);
}

static void client_done(struct cache_req *r)
{
	struct glue_req *g = (struct glue_req *)r;
	struct xseg_request *x = g->xreq;
	if (r->op == X_WRITE)
		dirty_mark_write_end();
	/* A FLUSH that wrote everything back leaves nothing dirty: the mark
	 * cleared before its answer, not at the next maintenance tick. A
	 * cache killed in between left its port marked over data its blocker
	 * had (a review: the restart refused, every read EIO, 50 ms after an
	 * answered FLUSH). */
	if (r->op == X_FLUSH && r->served)
		dirty_mark_update();
	if (r->op == X_INFO && r->served) {
		int err = blocker_reply_info(C.seg, x, r->info_size);
		respond(x, !err, err, err ? 0 : x->serviced);
		return;
	}
	respond(x, r->served, r->error, r->serviced);
}

/* The cache's figures, after the runtime's (peer_ops.stats: the runtime
 * answers "stats" and names the peer and port itself): stats_json.c. */
static int stats_fields(struct peer *p, char *buf, size_t len)
{
	(void)p;
	int n = cached_stats_json(C.engine, C.blocker_port, C.cfg.mirror ? (int)C.mirror_port : -1,
				  buf, len);
	if (n < 0)
		return n;
	size_t used = (size_t)n < len ? (size_t)n : len ? len - 1 : 0;
	pthread_mutex_lock(&C.hold_lock);
	bool holding = atomic_load(&C.holding);
	uint64_t parked = C.parked;
	int err = C.hold_err;
	pthread_mutex_unlock(&C.hold_lock);
	int m = snprintf(len ? buf + used : NULL, len - used, ",\"plug_holding\":%s,\"plug_parked\":%" PRIu64
			 ",\"plug_failing\":%s", holding && !err ? "true" : "false", parked,
			 holding && err ? "true" : "false");
	return m < 0 ? m : n + m;
}

static bool name_allowed(struct xseg_request *x, const char *name);

/* From a primary (--replica): "mirror-clean OFF LEN" (target: the object),
 * "mirror-reset". False: not one of these. */
static bool replica_control(struct glue_req *g)
{
	struct xseg_request *x = g->xreq;
	struct cache_req *r = &g->req;
	unsigned long long off, len;
	char end;
	if (!strcmp(g->control, "mirror-reset") || !strncmp(g->control, "mirror-reset ", 13)) {
		const char *marker;
		struct cache_replica_epoch epoch;
		if (!cache_replica_reset_args(g->control[12] ? g->control + 13 : "", &epoch, &marker) ||
		    (*marker && !cached_marker_name_ok(marker))) {
			peer_warn("bad mirror-reset '%s': not a marker name", g->control);
			respond(x, false, EINVAL, 0);
			return true;
		}
		peer_log(PEER_LOG_INFO, "the primary resets the replica: dropping what it holds "
			 "(its marker: %s)", *marker ? marker : "none");
		char last[MARKER_NAME_MAX + 1];
		cache_engine_replica_marker(C.engine, last);
		if (*last && *marker && strcmp(last, marker))
			peer_warn("mirror-reset from a primary whose marker is '%s'; the last reset "
				  "named '%s': a new primary, or two primaries share this replica "
				  "(each one's reset drops what the other mirrored here; "
				  "replica_primary_changes counts these)", marker, last);
		cache_engine_replica_reset(C.engine, r, marker, epoch);
		return true;
	}
	if (strncmp(g->control, "mirror-clean ", 13))
		return false;
	if (sscanf(g->control + 13, "%llu %llu%c", &off, &len, &end) != 2) {
		peer_warn("bad mirror-clean '%s'", g->control);
		respond(x, false, EINVAL, 0);
		return true;
	}
	if (!name_allowed(x, xseg_get_target(C.seg, x)))
		return true;
	r->op = CACHE_OP_MIRROR_CLEAN;
	r->offset = off;
	r->size = len;
	cache_engine_submit(C.engine, r);
	return true;
}

/* A control that would turn write-back on (policy writeback, plug): false,
 * and refused, once the stop began. */
static bool write_back_on(struct cache_req *r, struct xseg_request *x, const char *what,
			  enum cache_policy p)
{
	bool plug = !strcmp(what, "plug");
	struct cache_stats st;
	cache_engine_stats(C.engine, &st);
	pthread_mutex_lock(&C.policy_lock);
	int err = C.stopping ? ESHUTDOWN : st.persist_sync_error ? EIO :
		  C.unplugged && !plug ? EBUSY : 0;
	if (!err) {
		C.write_back_gen++;
		C.unplugged = false;
		cache_engine_set_policy(C.engine, p, r);   /* write-back: answered at once */
	}
	pthread_mutex_unlock(&C.policy_lock);
	if (err == ESHUTDOWN)
		peer_warn("refused '%s': stopping (every dirty byte written back, write-through "
			  "until it exits)", what);
	else if (err == EIO)
		peer_warn("refused '%s': the persist file failed a sync (%s): write-through until "
			  "cached restarts on a working file", what, strerror(st.persist_sync_error));
	else if (err)
		peer_warn("refused '%s': unplugged (its route may be gone: a write-back write "
			  "would be hidden from the path); xseg plug puts it back first", what);
	if (err)
		respond(x, false, err, 0);
	return !err;
}

/* A switch to write-through (policy writethrough, unplug) written back:
 * failed if write-back was turned on again meanwhile, since writes after
 * that may be dirty and not listed by the switch. */
static void write_through_done(struct cache_req *r)
{
	struct glue_req *g = (struct glue_req *)r;
	pthread_mutex_lock(&C.policy_lock);
	bool turned = C.write_back_gen != g->write_back_gen;
	if (r->served && !turned && !strcmp(g->control, "unplug"))
		C.unplugged = true;
	pthread_mutex_unlock(&C.policy_lock);
	if (r->served && turned) {
		peer_warn("'%s' failed: write-back was turned on again while it wrote back",
			  g->control);
		respond(g->xreq, false, EBUSY, 0);
		return;
	}
	client_done(r);
}

static void begin_hold(uint32_t port);
static uint64_t release_parked(void);
static uint32_t hop_behind_us(void);
static void give_up_hold(int err, const char *why);

/* "plug B" (xseg plug --port B): in front of port B, the requests for B
 * come here and go on to our blocker port, so B must be that port or a
 * hop of the chain in front of it (a cache plugged in front of another);
 * else B's reads and writes would be served by another port's blocker.
 * False: refused (EXDEV), answered. */
static bool plug_port_ok(const char *arg, struct xseg_request *x, uint32_t *port)
{
	uint64_t b;
	if (xseg_parse_uint(arg, UINT32_MAX, &b) < 0) {
		peer_warn("bad plug '%s': not a port", arg);
		respond(x, false, EINVAL, 0);
		return false;
	}
	uint32_t hop = C.blocker_port;
	for (uint32_t steps = 0; hop != XSEG_NO_PORT && steps <= XSEG_MAX_PATH; steps++) {
		if (hop == b) {
			*port = (uint32_t)b;
			return true;
		}
		hop = xseg_get_next_hop(C.seg, hop);
	}
	peer_warn("refused 'plug %" PRIu64 "': requests for port %" PRIu64 " would go on to "
		  "this cache's blocker port %u, which port %" PRIu64 " is not, nor in front of",
		  b, b, C.blocker_port, b);
	respond(x, false, EXDEV, 0);
	return false;
}

/* X_CONTROL: "policy writeback|writethrough", "flush", "plug", "unplug",
 * "promote", a primary's "mirror-*" ("stats" is the runtime's:
 * stats_fields). */
static void handle_control(struct glue_req *g)
{
	struct xseg_request *x = g->xreq;
	size_t len = x->datalen < sizeof(g->control) - 1 ? x->datalen : sizeof(g->control) - 1;
	memcpy(g->control, xseg_get_data(C.seg, x), len);
	g->control[len] = '\0';
	g->control[strcspn(g->control, "\n")] = '\0';
	bool mirror = !strncmp(g->control, "mirror-", 7);   /* many: said at debug level */
	peer_log(mirror ? PEER_LOG_DEBUG : PEER_LOG_INFO, "control: %s", g->control);

	if (mirror && replica_control(g)) {
		return;
	} else if (cache_engine_is_replica(C.engine) && strcmp(g->control, "promote") &&
		   strcmp(g->control, "promote force")) {
		/* each would write the primary's data back: promote says so */
		peer_warn("refused '%s': a replica writes back only when promoted (xseg promote)",
			  g->control);
		respond(x, false, EPERM, 0);
	} else if ((!strcmp(g->control, "promote") || !strcmp(g->control, "promote force")) &&
		   !C.cfg.replica) {
		/* a wrong port: "promoted" would have the operator believe the
		 * replica writes back, while it still holds its data */
		peer_warn("refused '%s': not a replica (started without --replica)", g->control);
		respond(x, false, EINVAL, 0);
	} else if (!strcmp(g->control, "promote") || !strcmp(g->control, "promote force")) {
		bool force = g->control[7] != '\0';
		peer_log(PEER_LOG_WARN, "promote%s: writing back everything the replica holds to "
			 "port %u%s; an ordinary cache from then on", force ? " (forced)" : "",
			 C.blocker_port, force ? "" : " where the primary's marker on it says "
			 "mirrored (else refused: it stays a replica)");
		cache_engine_promote(C.engine, &g->req, force);
	} else if (!strcmp(g->control, "policy writeback")) {
		write_back_on(&g->req, x, g->control, CACHE_WRITEBACK);
	} else if (!strcmp(g->control, "plug") || !strncmp(g->control, "plug ", 5)) {
		uint32_t port = C.blocker_port;
		if (g->control[4] && !plug_port_ok(g->control + 5, x, &port))
			return;
		/* Before the answer: once it is out, the tool moves the route
		 * and port B's requests come here (parked until "plugged"). */
		begin_hold(port);
		/* Back in a path, with the policy it was started with. The path
		 * may have gone around it (unplugged): what it holds clean may
		 * be older than the blocker, and is dropped before it serves. */
		cache_engine_forget_clean(C.engine);
		if (C.cfg.policy == CACHE_WRITEBACK) {
			if (!write_back_on(&g->req, x, "plug", CACHE_WRITEBACK))
				give_up_hold(ESHUTDOWN, "refused: stopping, or the persist file "
					     "failed");
		} else {
			/* Stopping: the route the tool would move next would
			 * lead to a cache that exits (write_back_on says so
			 * for a write-back one). */
			pthread_mutex_lock(&C.policy_lock);
			bool stopping = C.stopping;
			if (!stopping)
				C.unplugged = false;
			pthread_mutex_unlock(&C.policy_lock);
			if (stopping) {
				peer_warn("refused 'plug': stopping");
				give_up_hold(ESHUTDOWN, "refused: stopping");
				respond(x, false, ESHUTDOWN, 0);
				return;
			}
			cache_engine_set_policy(C.engine, C.cfg.policy, &g->req);
		}
	} else if (!strcmp(g->control, "plugged")) {
		/* The stop began after the plug was answered: the tool puts
		 * the route back (the stop's own unroute may have run before
		 * the route moved). */
		pthread_mutex_lock(&C.policy_lock);
		bool stopping = C.stopping;
		pthread_mutex_unlock(&C.policy_lock);
		if (stopping) {
			peer_warn("refused 'plugged': stopping (the plug's route must go back)");
			respond(x, false, ESHUTDOWN, 0);
			return;
		}
		/* The port we were plugged in front of left the blocker's
		 * chain between "plug" and the route's move (an unplug of it
		 * at once): the route the tool set leads here from outside any
		 * path, and it would say plugged while requests for the
		 * blocker never come here. The tool puts the route back. */
		if (hop_behind_us() == XSEG_NO_PORT) {
			peer_warn("refused 'plugged': no hop of port %u's chain routes here (the "
				  "port plugged in front of left it meanwhile)", C.blocker_port);
			give_up_hold(ENOLINK, "the port it was plugged in front of left the path");
			respond(x, false, ENOLINK, 0);
			return;
		}
		/* xseg plug saw port B idle since the route moved: a load
		 * could not have begun meanwhile (all parked), but one begun
		 * before the plug may have landed since. */
		cache_engine_forget_clean(C.engine);
		uint64_t n = release_parked();
		peer_log(PEER_LOG_INFO, "plugged: %" PRIu64 " parked requests go on", n);
		respond(x, true, 0, 0);
	} else if (!strcmp(g->control, "policy writethrough") || !strcmp(g->control, "unplug")) {
		/* An unplug while a plug is under way: the parked requests
		 * cannot go to the cache (port B was not seen drained), and
		 * the unplug takes the cache out of B's path: they fail with
		 * EAGAIN, which a retry after the unplug gets past. */
		if (!strcmp(g->control, "unplug"))
			give_up_hold(EAGAIN, "unplugged first");
		/* Unplugging: no new dirty data, every dirty byte on the blocker,
		 * and only then the answer (xseg unplug then clears the route). */
		pthread_mutex_lock(&C.policy_lock);
		g->write_back_gen = C.write_back_gen;
		pthread_mutex_unlock(&C.policy_lock);
		g->req.done = write_through_done;
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
static __attribute__((noinline, cold)) void refuse_name(struct xseg_request *x, const char *name,
							 size_t len, int err, const char *why)
{
	char shown[BLOCKER_PRINTABLE_SIZE];   /* here, not on every request's stack */
	peer_warn("refused object name '%s' (%zu bytes) in a %s request: %s",
		  blocker_printable(name, len, shown, sizeof(shown)), len, xseg_op_name(x->op), why);
	respond(x, false, err, 0);
}

static bool name_allowed(struct xseg_request *x, const char *name)
{
	const char *why;
	size_t len = name ? x->targetlen : 0;
	int err = blocker_check_name(name, len, BLOCKER_NAME_MAX, &why);
	if (!err)
		return true;
	refuse_name(x, name, len, err, why);
	return false;
}

static void take_request(struct xseg_request *x)
{
	struct glue_req *g = &C.slots[x->index].req;
	memset(&g->req, 0, sizeof(g->req));
	g->xreq = x;
	struct cache_req *r = &g->req;
	if (C.cfg.replica)
		r->replica_tag = g->replica_tag;
	r->op = x->op;
	r->flags = x->flags;
	const char *target = xseg_get_target(C.seg, x);
	size_t tlen = target ? x->targetlen : 0;
	if (tlen > XSEG_MAX_TARGETLEN)   /* refused below (name_allowed) */
		tlen = XSEG_MAX_TARGETLEN;
	memcpy(g->name, target ? target : "", tlen);
	g->name[tlen] = '\0';
	r->name = g->name;
	r->offset = x->offset;
	r->size = x->size;
	r->data = xseg_get_data(C.seg, x);
	r->done = client_done;
	if (names_object(x) && !name_allowed(x, target))
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
	if (x->op == X_WRITE)
		dirty_mark_write_begin();   /* before it can be acknowledged */
	cache_engine_submit(C.engine, r);
}

/* --replica (the runtime's on_accept_in_order): a write is tagged before
 * another worker may take what follows it on the port, so a mirror-reset
 * that follows it refuses it if it reaches the engine after the reset,
 * however late its worker hands it on. */
static void on_accept(struct peer_thread *t, struct xseg_request *x)
{
	(void)t;
	C.slots[x->index].req.replica_tag =
		x->op == X_WRITE ? cache_engine_replica_tag(C.engine) : 0;
}

static void take_now(struct xseg_request *x)
{
	/* Taken: a policy switch, mirror-reset or promote that comes after
	 * it on the port waits until it is in the engine. */
	void *w = x->op == X_WRITE ? cache_engine_write_begin(C.engine) : NULL;
	take_request(x);
	if (w)
		cache_engine_write_end(w);
}

/* ---- a plug under way: requests parked until "plugged" ------------------------------- */

/* A plug whose tool never says "plugged" (killed) must not hang the
 * clients for ever: then its requests fail (watch_hold). */
#define HOLD_TIMEOUT_S 60
#define STR_(x) #x
#define STR(x) STR_(x)

/* True when x was parked, or failed since the hold gave up. Controls
 * are served: "stats", and "plugged" itself. */
static bool hold_request(struct xseg_request *x)
{
	if (x->op == X_CONTROL || !atomic_load_explicit(&C.holding, memory_order_acquire))
		return false;
	pthread_mutex_lock(&C.hold_lock);
	if (!atomic_load(&C.holding)) {   /* released meanwhile */
		pthread_mutex_unlock(&C.hold_lock);
		return false;
	}
	int err = C.hold_err;
	if (!err) {
		struct glue_req *g = &C.slots[x->index].req;
		g->xreq = x;
		g->parked_next = NULL;
		if (C.parked_tail)
			C.parked_tail->parked_next = g;
		else
			C.parked_head = g;
		C.parked_tail = g;
		C.parked++;
	}
	pthread_mutex_unlock(&C.hold_lock);
	if (err)
		respond(x, false, err, 0);
	return true;
}

/* "plug B" taken: from now on requests park (a plug again while one is
 * under way starts its hold anew; what is parked stays parked). */
static void begin_hold(uint32_t port)
{
	pthread_mutex_lock(&C.hold_lock);
	C.hold_gen++;
	C.hold_err = 0;
	C.hold_port = port;
	C.hold_since = xseg_now_ns();
	atomic_store(&C.holding, true);
	pthread_mutex_unlock(&C.hold_lock);
}

/* The parked requests answered with err; returns how many. */
static uint64_t fail_parked(int err)
{
	pthread_mutex_lock(&C.hold_lock);
	struct glue_req *g = C.parked_head;
	uint64_t n = C.parked;
	C.parked_head = C.parked_tail = NULL;
	C.parked = 0;
	pthread_mutex_unlock(&C.hold_lock);
	while (g) {
		struct glue_req *next = g->parked_next;   /* the slot is reused once answered */
		respond(g->xreq, false, err, 0);
		g = next;
	}
	return n;
}

/*
 * "plugged": port B was seen idle after the route moved, so nothing from
 * before the switch is left there. The parked requests go to the engine
 * oldest first, as on_request would have taken them, and so do those
 * parked while this runs (a later request does not overtake them); the
 * hold ends when none is left, unless a new plug began one of its own.
 * Returns how many were released.
 */
static uint64_t release_parked(void)
{
	uint64_t n = 0;
	pthread_mutex_lock(&C.hold_lock);
	uint64_t gen = C.hold_gen;
	C.hold_err = 0;   /* a hold that gave up ends too: B is drained now */
	for (;;) {
		if (C.hold_gen != gen)
			break;   /* a new plug: the rest waits for its "plugged" */
		struct glue_req *g = C.parked_head;
		if (!g) {
			atomic_store(&C.holding, false);
			break;
		}
		C.parked_head = g->parked_next;
		if (!C.parked_head)
			C.parked_tail = NULL;
		C.parked--;
		pthread_mutex_unlock(&C.hold_lock);
		take_now(g->xreq);
		n++;
		pthread_mutex_lock(&C.hold_lock);
	}
	pthread_mutex_unlock(&C.hold_lock);
	return n;
}

/*
 * The hold ends without "plugged" (the plug timed out, an unplug or the
 * stop came first): the drain at port B was never confirmed, so what is
 * parked must not enter the cache (a load could keep B's data from
 * before a write still under way there). It fails with err, and so does
 * every new request until a plug begins a hold anew.
 */
static void give_up_hold(int err, const char *why)
{
	pthread_mutex_lock(&C.hold_lock);
	bool was = atomic_load(&C.holding) && !C.hold_err;
	if (was)
		C.hold_err = err;
	uint32_t port = C.hold_port;
	pthread_mutex_unlock(&C.hold_lock);
	if (!was)
		return;
	uint64_t n = fail_parked(err);
	peer_log(PEER_LOG_ERROR, "the plug in front of port %u did not finish (%s): failed %"
		 PRIu64 " parked requests with %s, and every new one fails so until "
		 "`xseg plug --port %u --via %u` is run again", port, why, n, strerror(err),
		 port, C.port);
}

/* The maintenance thread: a hold past HOLD_TIMEOUT_S gives up. */
static void watch_hold(uint64_t now)
{
	if (!atomic_load(&C.holding))
		return;
	pthread_mutex_lock(&C.hold_lock);
	bool late = !C.hold_err && now - C.hold_since > HOLD_TIMEOUT_S * 1000000000ull;
	pthread_mutex_unlock(&C.hold_lock);
	if (late)
		give_up_hold(ETIMEDOUT, "no 'plugged' from xseg plug in " STR(HOLD_TIMEOUT_S)
			     " s: killed, or the port never went idle");
}

static void on_request(struct peer_thread *t, struct xseg_request *x)
{
	(void)t;
	if (hold_request(x))
		return;
	take_now(x);
}


/* ---- threads: the runtime's workers and maintenance thread ----------------------------- */

/* The engine's callbacks run on RCU-registered threads: every worker, the
 * maintenance thread, and the main thread while it drains. */
static int thread_init(struct peer_thread *t)
{
	(void)t;
	rcu_register_thread();
	return 0;
}

static void thread_fini(struct peer_thread *t)
{
	(void)t;
	rcu_unregister_thread();
}

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

/*
 * A blocker that died (SIGKILL, a crash) never answers: reaping its port
 * fails what it held and what is queued for it back to us (the engine
 * keeps dirty data and retries), and new requests fail at once until a
 * blocker binds the port again. (The runtime's main thread reaps dead
 * peers too; whichever comes first, the other finds nothing.)
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
 * The engine meanwhile retries with a growing pause (flush.c).
 */
#define FLUSH_WARN_INTERVAL_S 10
static void warn_flush_failures(const struct cache_stats *s, uint64_t now)
{
	static uint64_t failures_seen, next_warn;
	static bool warned;
	if (s->flush_error && s->flush_failures > failures_seen && now >= next_warn) {
		peer_log(PEER_LOG_WARN, "cannot write back to blocker port %u: %s; %" PRIu64 " dirty "
		       "bytes wait, %" PRIu64 " failed writes since the last word; retrying "
		       "every %" PRIu64 " ms", C.blocker_port, strerror(s->flush_error),
		       s->dirty_bytes, s->flush_failures - failures_seen,
		       s->flush_backoff_ns / 1000000);
		failures_seen = s->flush_failures;
		next_warn = now + FLUSH_WARN_INTERVAL_S * 1000000000ull;
		warned = true;
	} else if (warned && !s->flush_error) {
		peer_log(PEER_LOG_WARN, "blocker port %u takes writes again; %" PRIu64 " dirty bytes left",
		       C.blocker_port, s->dirty_bytes);
		failures_seen = s->flush_failures;
		warned = false;   /* next_warn stays: a flapping blocker, 2 lines per interval */
	}
}

/*
 * The mirror port's owner (a synapsed) died or was replaced: what it had
 * taken of ours is failed back by the reap, except a request it had taken
 * off its queue and not yet marked its own when it died, which is in no
 * queue; the engine fails every mirror request still out, or such a write
 * would wait for ever.
 */
static void watch_mirror_port(void)
{
	static uint32_t epoch;
	static pid_t owner;
	static bool seen;
	struct xseg_port_info pi;
	if (xseg_port_info(C.seg, C.mirror_port, &pi) < 0)
		return;
	bool gone = seen && (pi.epoch != epoch || pi.owner != owner || !pi.owner_alive);
	epoch = pi.epoch;
	owner = pi.owner;
	seen = pi.owner && pi.owner_alive;
	if (gone)
		cache_engine_mirror_lost(C.engine, EHOSTDOWN);
}

/* A primary's state with its replica, said when it changes. */
static void say_mirror_state(void)
{
	int state = cache_engine_mirror_changed(C.engine);
	struct cache_stats st;
	if (state < 0)
		return;
	cache_engine_stats(C.engine, &st);
	if (state == MIRROR_CONNECTING)
		peer_log(PEER_LOG_INFO, "mirror port %u: waiting for the replica; writing through "
			 "until it answers", C.mirror_port);
	else if (state == MIRROR_MIRRORED)
		peer_log(PEER_LOG_WARN, "mirror port %u: the replica answers; every write-back write "
			 "is on it before its answer (%" PRIu64 " degradations, %" PRIu64 " ms in all)",
			 C.mirror_port, st.degradations, st.degraded_ns_total / 1000000);
	else if (state == MIRROR_DEGRADED)
		peer_log(PEER_LOG_WARN, "mirror port %u failed (%s): %s; %" PRIu64 " dirty bytes "
			 "are here alone until written back; asking the replica again every second",
			 C.mirror_port, strerror(st.mirror_error ? st.mirror_error : EIO),
			 C.cfg.mirror_fail_stop ? "write-back writes fail (--mirror-fail stop)"
						: "writing through", st.exposure_bytes);
}

/* Once: the replica was promoted while this primary was down (its
 * marker says so): what it recovered is older than the store's. */
static void say_fenced(const struct cache_stats *s)
{
	static bool said;
	if (said || !C.cfg.mirror)
		return;
	if (s->fence != CACHE_FENCE_PROMOTED)
		return;
	said = true;
	peer_error("the replica was promoted while this cache was down (marker '%s' says "
		   "promoted): the %" PRIu64 " dirty bytes recovered from '%s' are older than "
		   "the store's and are NOT written back; every request fails ESTALE. Restart "
		   "with --persist-discard (copy the file first to keep them)", C.cfg.mirror_marker,
		   s->dirty_bytes, C.cfg.persist_path ? C.cfg.persist_path : "");
}

/* Once per episode: requests that find no free index node fail (every
 * node a dirty object's, their write-backs failing: engine.c). */
static void say_node_refusal(const struct cache_stats *s)
{
	static int said;
	if (s->node_refusal && !said)
		peer_warn("no index node is free (--max-objects %u; a dirty object keeps its "
			  "node until written back) and write-backs fail (%s): requests for "
			  "objects not in the cache fail until a write-back succeeds (stats "
			  "node_refusals)", C.cfg.max_objects, strerror(s->node_refusal));
	else if (!s->node_refusal && said)
		peer_info("a write-back succeeded: requests for other objects are served again");
	said = s->node_refusal;
}

/* Once: the persist file failed a sync (the engine writes through from
 * then on and writes every dirty byte back). */
static void say_persist_failure(const struct cache_stats *s)
{
	static bool said;
	if (said || !C.cfg.persist_path)
		return;
	if (!s->persist_sync_error)
		return;
	said = true;
	peer_error("persist: a sync of '%s' failed (%s): its disk may not hold what the kernel "
		   "could not write. Writing through from now on, every dirty byte (%" PRIu64
		   ") being written back to port %u; object '%s' there says so (a restart on "
		   "this file reads it). FLUSH fails until every byte is back; restart on a "
		   "working file to write back again", C.cfg.persist_path,
		   strerror(s->persist_sync_error), s->dirty_bytes, C.blocker_port,
		   s->persist_marker_name);
}

/* Once each: the persist marker's word at the start, and once a failed
 * file's data is all back. */
static void say_persist_marker(const struct cache_stats *s)
{
	static bool said_found, said_back;
	if (!said_found && s->persist_marker_found == 2) {
		said_found = true;
		peer_warn("persist: the last run (%" PRIu64 ") on '%s' failed a sync and then wrote "
			  "every dirty byte back (object '%s' on port %u says written-back): the %"
			  PRIu64 " bytes recovered are older than the blocker's and were dropped",
			  s->persist_last_run, C.cfg.persist_path, s->persist_marker_name,
			  C.blocker_port, s->persist_marker_dropped_bytes);
	}
	if (!said_found && s->fence == CACHE_FENCE_PERSIST_FAILED) {
		said_found = true;
		peer_error("persist: the last run (%" PRIu64 ") on '%s' failed a sync before it "
			   "wrote every dirty byte back (object '%s' on port %u says failed): of the %"
			   PRIu64 " bytes recovered some may be on no other disk and some older than "
			   "writes answered since. Replaying and dropping them can both lose data: "
			   "every request fails EIO. To drop them: stop cached, `xseg unplug --force "
			   "--via %u`, start it with --persist-discard (copy the file first: cached "
			   "--persist-inspect reads it); to replay them: delete that object",
			   s->persist_last_run, C.cfg.persist_path, s->persist_marker_name,
			   C.blocker_port, s->recovered_bytes, C.port);
	}
	if (!said_back && s->persist_sync_error && s->persist_marker == 2) {
		said_back = true;
		peer_info("persist: every dirty byte is back on port %u, and object '%s' there "
			  "says so: FLUSH is served again (by the blocker), still writing through",
			  C.blocker_port, s->persist_marker_name);
	}
}

/* The start's persist check waits for the marker (a blocker down, failing
 * or slow): a warning after a second and every 10 s, naming the object
 * and the error; a line when it was read at last. */
static void say_persist_check(const struct cache_stats *s, uint64_t now)
{
	static uint64_t next;
	static bool waited;
	if (s->fence != CACHE_FENCE_PERSIST_CHECKING) {
		if (waited)   /* at the level of the warnings it ends */
			peer_warn("persist: object '%s' on port %u read: the start's check "
				  "goes on", s->persist_marker_name, C.blocker_port);
		waited = false;
		return;
	}
	if (s->persist_check_ms < 1000 || now < next)
		return;
	waited = true;
	next = now + 10000000000ull;
	peer_warn("persist: %" PRIu64 " dirty bytes recovered from '%s' wait %" PRIu64 " s for "
		  "object '%s' on blocker port %u, the last run's word on them (replay, drop or "
		  "refuse): %s, %" PRIu64 " reads failed, trying again (at most every second). "
		  "No request is served until it is read; SIGTERM stops, keeping them in the "
		  "file", s->recovered_bytes, C.cfg.persist_path ? C.cfg.persist_path : "",
		  s->persist_check_ms / 1000, s->persist_marker_name, C.blocker_port,
		  s->persist_marker_read_error ? strerror(s->persist_marker_read_error) :
		  "no answer yet", s->persist_marker_read_failures);
}

/* A client's WRITE, DELETE or COPY onto the persist marker's name,
 * refused (engine.c): at most one warning in 10 s, counting the rest. */
static void say_marker_name_refused(const struct cache_stats *s, uint64_t now)
{
	static uint64_t said, next;
	if (s->persist_marker_refused == said || now < next)
		return;
	peer_warn("refused %" PRIu64 " client WRITE, DELETE or COPY onto '%s' (EPERM): the "
		  "persist marker of '%s', which a restart on that file reads; stats "
		  "persist_marker_refused", s->persist_marker_refused - said,
		  s->persist_marker_name, C.cfg.persist_path ? C.cfg.persist_path : "");
	said = s->persist_marker_refused;
	next = now + 10000000000ull;
}

/* What `systemctl status` says (STATUS=): a state the operator must act
 * on or wait for, or "serving" (NULL). The log says more, once. */
static void show_status(const struct cache_stats *s)
{
	const char *file = C.cfg.persist_path ? C.cfg.persist_path : "";
	switch (s->fence) {
	case CACHE_FENCE_PROMOTED:
		peer_status("FENCED: the replica was promoted; the recovered data is older than "
			    "the store's and every request fails ESTALE (see the log)");
		return;
	case CACHE_FENCE_PERSIST_FAILED:
		peer_status("FAILED: the last run on '%s' failed a sync; every request fails EIO "
			    "until an operator chooses (see the log)", file);
		return;
	case CACHE_FENCE_PERSIST_CHECKING:
		peer_status("waiting for object '%s' on port %u before serving the %" PRIu64
			    " bytes recovered from '%s' (%s)", s->persist_marker_name,
			    C.blocker_port, s->recovered_bytes, file,
			    s->persist_marker_read_error ? strerror(s->persist_marker_read_error) :
			    "reading");
		return;
	case CACHE_FENCE_CHECKING:
		peer_status("waiting for the replica marker '%s' on port %u before serving",
			    C.cfg.mirror_marker ? C.cfg.mirror_marker : "", C.blocker_port);
		return;
	}
	if (s->persist_sync_error)
		peer_status("DEGRADED: '%s' failed a sync (%s): writing through, %" PRIu64
			    " dirty bytes to write back to port %u", file,
			    strerror(s->persist_sync_error), s->dirty_bytes, C.blocker_port);
	else if (s->flush_error && s->dirty_bytes)
		peer_status("DEGRADED: write-backs to port %u fail (%s): %" PRIu64 " bytes dirty "
			    "here alone", C.blocker_port, strerror(s->flush_error), s->dirty_bytes);
	else
		peer_status(NULL);
}

/* The runtime's maintenance thread: the flusher and reclaimer, and ten
 * times a second the dead-blocker reap and the write-back warnings. */
static uint64_t maintain(struct peer *p)
{
	(void)p;
	static uint64_t next_reap;
	uint64_t now = xseg_now_ns();
	if (now >= next_reap) {
		reap_dead_blocker();
		/* one reading of the figures for the lines below */
		struct cache_stats st;
		cache_engine_stats(C.engine, &st);
		warn_flush_failures(&st, now);
		if (C.cfg.mirror) {
			watch_mirror_port();
			say_mirror_state();
		}
		dirty_mark_update();
		watch_hold(now);
		say_persist_failure(&st);
		say_persist_marker(&st);
		say_marker_name_refused(&st, now);
		say_persist_check(&st, now);
		say_fenced(&st);
		say_node_refusal(&st);
		show_status(&st);
		next_reap = now + 100000000ull;
	}
	return cache_engine_maintain(C.engine);
}

/* ---- the stop: drain, then the runtime's stop -------------------------------------------- */

/* Shutdown: flush everything while still serving replies. */
struct drain_req {
	struct cache_req req;
	_Atomic bool done;
};

static void drain_done(struct cache_req *r)
{
	atomic_store(&((struct drain_req *)r)->done, true);
}

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

/*
 * Writes every dirty byte back (switching to write-through, so nothing new
 * gets dirty) while the workers keep serving. A blocker that cannot take
 * the data is retried until the deadline (--stop-timeout); then cached
 * gives up and says how much was not written, rather than hang or exit 0.
 */
/* A stop's write-back can take minutes (gigabytes to a slow blocker):
 * one line every STOP_PROGRESS_S says how far it is. */
#define STOP_PROGRESS_S 5u

static void stop_progress(uint64_t start, uint64_t blocker_bytes_at_start)
{
	struct cache_stats st;
	cache_engine_stats(C.engine, &st);
	peer_log(PEER_LOG_INFO, "stopping: %" PRIu64 " dirty bytes left to write back to port %u, "
		 "%" PRIu64 " bytes written to it in %" PRIu64 " s", st.dirty_bytes, C.blocker_port,
		 st.blocker_write_bytes - blocker_bytes_at_start,
		 (xseg_now_ns() - start) / 1000000000);
}

static bool write_back_all(uint64_t deadline)
{
	static struct drain_req d;   /* may be answered after we gave up */
	uint64_t start = xseg_now_ns(), next_progress = start + STOP_PROGRESS_S * 1000000000ull;
	struct cache_stats st0;
	cache_engine_stats(C.engine, &st0);
	unsigned tries = 0;
	for (;;) {
		d = (struct drain_req){ .req = { .op = X_CONTROL, .name = "", .done = drain_done } };
		cache_engine_set_policy(C.engine, CACHE_WRITETHROUGH, &d.req);
		/* a blocker that stopped may never answer at all */
		while (!atomic_load(&d.done) && xseg_now_ns() < deadline) {
			usleep(1000);
			if (xseg_now_ns() >= next_progress) {
				stop_progress(start, st0.blocker_write_bytes);
				next_progress += STOP_PROGRESS_S * 1000000000ull;
			}
		}
		if (!atomic_load(&d.done)) {
			d.req.served = false;
			d.req.error = ETIMEDOUT;
			break;
		}
		/* A write-back write that was under way at the switch can land
		 * after the barrier took its list: flush again until none is. */
		if (d.req.served && !cache_engine_clean(C.engine) && xseg_now_ns() < deadline)
			continue;
		if (d.req.served || xseg_now_ns() >= deadline)
			break;
		/* said once; the maintenance thread repeats it every FLUSH_WARN_INTERVAL_S */
		if (!tries++)
			peer_log(PEER_LOG_WARN, "write-back failed (%s); retrying for up to %" PRIu64
				 " s", strerror(d.req.error), (deadline - start + 999999999) / 1000000000);
		sleep(1);
	}
	if (d.req.served) {
		struct cache_stats st;
		cache_engine_stats(C.engine, &st);
		peer_log(PEER_LOG_INFO, "stopping: every dirty byte written back (%" PRIu64 " bytes "
			 "written to port %u in %.1f s)", st.blocker_write_bytes - st0.blocker_write_bytes,
			 C.blocker_port, (double)(xseg_now_ns() - start) / 1e9);
	} else {
		struct cache_stats st;
		cache_engine_stats(C.engine, &st);
		peer_log(PEER_LOG_ERROR, "giving up after %" PRIu64 " s: %" PRIu64 " dirty bytes not "
			 "written to port %u, %" PRIu64 " requests to it unanswered (%s)",
			 (xseg_now_ns() - start) / 1000000000, st.dirty_bytes, C.blocker_port,
			 st.blocker_in_flight, strerror(d.req.error));
		if (C.cfg.mirror && !st.dirty_bytes)   /* marker.c held the switch */
			peer_log(PEER_LOG_ERROR, "the replica (port %u, %s) may still hold copies "
				 "older than the blocker's: its marker '%s' on the blocker says %s",
				 C.mirror_port, cache_mirror_state_name(st.mirror_state),
				 st.marker_name, marker_state_name(st.marker_state));
	}
	return d.req.served;
}

/* The hop of the blocker's chain that routes to us: the blocker port, or
 * a cache in front of it that we were plugged in front of (xseg plug
 * --port B, B a hop of the chain); XSEG_NO_PORT if we are not in it. */
static uint32_t hop_behind_us(void)
{
	uint32_t hop = C.blocker_port;
	for (uint32_t steps = 0; hop != XSEG_NO_PORT && steps <= XSEG_MAX_PATH; steps++) {
		uint32_t next = xseg_get_next_hop(C.seg, hop);
		if (next == C.port)
			return hop;
		hop = next;
	}
	return XSEG_NO_PORT;
}

/* Takes us out of the blocker's route (spliced): false if we were not in
 * it. Any stop does it: a route left to our port hands the blocker's
 * requests to whatever peer binds the port next, and what queued here
 * when we leave the port would fail back (EHOSTDOWN) instead of going on
 * to where the route leads. At the front of a chain of caches the hop
 * behind us is a cache, not the blocker port. */
static bool unroute(void)
{
	uint32_t behind = hop_behind_us();
	if (behind == XSEG_NO_PORT)
		return false;
	/* A cache plugged in front of us (stopping anyway, after the stop
	 * timeout) stays in the path: its dirty data must not be bypassed. */
	uint32_t front = xseg_get_next_hop(C.seg, C.port);
	/* As one change: an xseg unplug of a hop next to us at once must
	 * not undo our splice, nor we its. */
	int routed = xseg_splice_out(C.seg, C.port);
	if (routed <= 0) {
		if (routed < 0)
			peer_log(PEER_LOG_WARN, "cannot restore the route of port %u: %s", behind,
				 xseg_last_error());
		return false;
	}
	if (front != XSEG_NO_PORT) {
		peer_log(PEER_LOG_INFO, "port %u routes to cache port %u, in front of us, again",
			 behind, front);
	} else {
		peer_log(PEER_LOG_INFO, "port %u routes straight to %s again", behind,
			 behind == C.blocker_port ? "its blocker" : "the cache there");
	}
	return true;
}

/*
 * After a clean drain, does what `xseg unplug` would: if the blocker's
 * port routes to us, requests for it go straight to it again and what
 * already queued here is served (write-through, nothing dirty) before the
 * workers stop accepting. The queue must stay empty for QUIET_MS: a client
 * that resolved the old route just before may still be pushing. Clients
 * that address our port directly keep it busy; they get QUIET_MAX_MS at
 * most (then the runtime's stop: what we accepted is answered, what is
 * still queued is settled when we leave the port).
 */
#define QUIET_MS 20
#define QUIET_MAX_MS 2000
static void restore_route(void)
{
	if (!unroute())
		return;
	unsigned quiet = 0;
	for (unsigned ms = 0; quiet < QUIET_MS && ms < QUIET_MAX_MS; ms++) {
		struct xseg_port_info pi;
		bool busy = xseg_port_info(C.seg, C.port, &pi) < 0 || pi.request_depth ||
			    peer_in_flight(C.peer);
		quiet = busy ? 0 : quiet + 1;
		usleep(1000);
	}
}

/* The runtime's drain hook (SIGTERM/SIGINT): every dirty byte written
 * back and the route restored, while the workers serve; then the
 * runtime's stop answers what was accepted. Non-zero: data was left. */
static int drain(struct peer *p, uint64_t deadline)
{
	(void)p;
	pthread_mutex_lock(&C.policy_lock);
	C.stopping = true;   /* write_back_on refuses from now on */
	pthread_mutex_unlock(&C.policy_lock);
	/* the runtime's stop waits for every request taken, parked ones too */
	give_up_hold(ESHUTDOWN, "stopping");
	struct cache_stats st;
	cache_engine_stats(C.engine, &st);
	if (st.fence != CACHE_FENCE_NONE) {
		/* Not to be written back, or not yet known (say_fenced,
		 * say_persist_marker): kept. */
		cache_engine_fail_waiting(C.engine, ESHUTDOWN);
		peer_log(PEER_LOG_WARN, "fenced (%s): %" PRIu64 " dirty bytes stay in the persist "
			 "file, not written back", st.fence == CACHE_FENCE_PROMOTED ?
			 "its replica was promoted" : cache_fence_name(st.fence), st.dirty_bytes);
		C.clean = false;
		return 1;
	}
	if (st.replica) {
		/* A replica's data is its primary's to write back, or promote's. */
		peer_log(st.dirty_bytes ? PEER_LOG_WARN : PEER_LOG_INFO, "replica stopping: %" PRIu64
			 " bytes held %s", st.dirty_bytes, !st.dirty_bytes ? "" :
			 C.cfg.persist_path ? "stay in the persist file" : "are dropped (no --persist)");
		C.clean = st.dirty_bytes == 0;
		return 0;
	}
	/* Write-through before looking: a write taken after the look goes to
	 * the blocker (and fails while it is down) instead of being
	 * acknowledged from a cache that stops at once and drops it. */
	cache_engine_stop_write_back(C.engine);
	if (clean_and_blocker_down()) {
		peer_log(PEER_LOG_INFO, "nothing dirty and blocker port %u is down: stopping at once",
		       C.blocker_port);
		unroute();   /* nothing to serve for a blocker that is down */
		C.clean = true;
		return 0;
	}
	peer_log(PEER_LOG_INFO, "stopping: writing back every dirty byte");
	rcu_register_thread();
	C.clean = write_back_all(deadline);
	rcu_unregister_thread();
	if (C.clean)
		restore_route();
	return C.clean ? 0 : 1;
}

/* After the workers and the maintenance thread ended: no blocker request
 * is out any more. An engine that still holds dirty data is left alone. */
static void fini(struct peer *p)
{
	(void)p;
	if (C.clean) {
		/* A plug answered just before the stop may have moved the
		 * route after the drain restored it: no route is left to a
		 * port that the next peer to bind it would get. */
		if (unroute())
			peer_log(PEER_LOG_WARN, "a plug moved a route of port %u's chain here "
				 "during the stop: put back", C.blocker_port);
		dirty_mark_update();   /* nothing dirty, nothing under way: clear */
		cache_engine_destroy(C.engine);
	} else if (C.engine) {
		cache_engine_keep(C.engine);   /* synced, and says it was not a crash */
	}
	free(C.slots);
	C.slots = NULL;
}

/* ---- start ------------------------------------------------------------------------------- */

/* The cache's memory, made by prepare() before the port is bound; the
 * engine's pool takes it over. */
static struct bucket_map premapped;

/* The engine, made with its persist file recovered (on this thread, which
 * the index wants registered with RCU). 0, or the exit status: 2 for a
 * value that is wrong (a file of another geometry or blocker port, not a
 * persist file, a path that names none), 1 for the rest (a file in use, a
 * full disk, no permission, out of memory). */
static int make_engine(const struct cache_backend *be)
{
	const char *why = NULL;
	char line[1024];
	C.cfg.blocker_port = C.blocker_port;
	struct xseg_segment_info si;
	struct xseg_port_info pi;
	if (xseg_segment_info(C.seg, &si) == 0 && xseg_port_info(C.seg, C.port, &pi) == 0) {
		C.cfg.segment_instance = si.instance;
		C.cfg.cache_port = C.port;
		C.cfg.port_given_up = pi.given_up;
		C.cfg.port_left_dirty = pi.dirty_bytes;
	}
	if (premapped.map)
		C.cfg.premapped = &premapped;   /* the engine's pool takes it */
	rcu_register_thread();
	C.engine = cache_engine_create(&C.cfg, be, &why);
	int err = errno;
	rcu_unregister_thread();
	bucket_map_destroy(&premapped);   /* left only when create failed */
	if (!C.engine) {
		fprintf(stderr, "cached: %s\n", why ? why : strerror(err));
		/* 2 for a value that is wrong (the file, its geometry, its
		 * path); a full disk, no permission or an I/O error is not */
		return err == EINVAL || err == ENOENT || err == ENOTDIR || err == EISDIR ||
		       err == ENAMETOOLONG ? 2 : 1;
	}
	struct cache_stats s;
	cache_engine_stats(C.engine, &s);
	if (C.cfg.persist_path) {
		cache_engine_persist_report(C.engine, line, sizeof(line));
		peer_log(s.recoveries || s.persist_dropped || s.persist_discarded_bytes ?
			 PEER_LOG_WARN : PEER_LOG_INFO, "%s", line);
	}
	/* At a first start the primary's reset comes before any write: said
	 * louder only where recovered data is set aside. */
	if (s.replica_unsure)
		peer_log(s.recovered_bytes ? PEER_LOG_WARN : PEER_LOG_INFO,
			 "a replica %s: not trusted until the primary resets it (the primary "
			 "may hold acknowledged writes it lacks); mirrored writes and cleans are "
			 "refused (the primary degrades, writes back and resets it) and so is "
			 "promote", !C.cfg.persist_path ? "without --persist" :
			 s.recovered_bytes ? "recovered from a file not closed clean (a host "
			 "crash may have lost its primary's cleans)" :
			 "on a new, discarded or not closed clean persist file");
	return 0;
}

/* The port was left marked dirty (`left` bytes) by a cache that died or
 * gave up: we may serve only if we recovered its dirty data from
 * --persist (then the mark is ours, kept by dirty_mark_init). */
static bool persist_took_over(uint64_t left)
{
	struct cache_stats s;
	cache_engine_stats(C.engine, &s);
	/* Recovered data, or none from the file the dead cache itself had
	 * open here: it answered no write-back write before the write was in
	 * the file, so an empty file means it held nothing acknowledged (it
	 * died in a write-through write, or after writing everything back
	 * but before clearing the mark). */
	if (!s.recoveries && !s.persist_left_here)
		return false;
	peer_log(PEER_LOG_WARN, "port %u was left marked dirty (%" PRIu64 " bytes) by the cache "
		 "before; serving the %" PRIu64 " bytes recovered from %s", C.port, left,
		 s.recovered_bytes, C.cfg.persist_path);
	return true;
}

/* Before the port is bound: the cache's memory, faulted in (a 4G cache
 * took 4.8 s, and requests queued on the bound port waited for it). */
static int prepare(struct peer *p)
{
	(void)p;
	const struct cache_config *cfg = &cached_opts.cfg;
	if (cfg->persist_path)
		return 0;   /* the pool is the persist file's */
	uint64_t bytes = cache_pool_bytes(cfg->cache_size, cfg->bucket_size);
	uint64_t t0 = xseg_now_ns();
	peer_log(PEER_LOG_INFO, "faulting in %" PRIu64 " bytes of cache memory", bytes);
	int rc = bucket_map_create(&premapped, bytes);
	if (rc < 0) {
		peer_error("--cache-size %" PRIu64 ": cannot map and fault in %" PRIu64 " bytes: %s",
			   cfg->cache_size, bytes, strerror(-rc));
		return 1;
	}
	peer_log(PEER_LOG_INFO, "cache memory faulted in: %" PRIu64 " bytes in %.1f s", bytes,
		 (double)(xseg_now_ns() - t0) / 1e9);
	return 0;
}

/* Joined and bound: the blocker port must be the segment's, and the
 * engine is made (2: a value only the segment or the engine shows wrong). */
static int init(struct peer *p)
{
	struct xseg_segment_info si;
	C.peer = p;
	C.seg = peer_segment(p);
	C.port = cached_opts.port;
	C.blocker_port = cached_opts.blocker_port;
	C.cfg = cached_opts.cfg;
	if (xseg_segment_info(C.seg, &si) < 0) {
		peer_error("%s", xseg_last_error());
		return 1;
	}
	if (C.blocker_port >= si.nr_ports) {
		fprintf(stderr, "cached: --blocker-port %u: the segment has ports 0..%u\n",
			C.blocker_port, si.nr_ports - 1);
		return 2;
	}
	C.mirror_port = cached_opts.mirror_port;
	if (C.cfg.mirror && C.mirror_port >= si.nr_ports) {
		fprintf(stderr, "cached: --mirror-port %u: the segment has ports 0..%u\n",
			C.mirror_port, si.nr_ports - 1);
		return 2;
	}
	if (!(C.slots = calloc(si.nr_requests, sizeof(*C.slots)))) {
		peer_error("no memory for the glue of %u requests", si.nr_requests);
		return 1;
	}
	struct cache_backend be = { .alloc = backend_alloc, .submit = backend_submit,
				    .release = backend_release, .lend = backend_lend };
	int rc = make_engine(&be);
	if (rc)
		return rc;
	uint64_t left = dirty_mark_left(C.seg, C.port);
	if (left && !persist_took_over(left)) {
		/* Serving would let reads reach the blocker's older data. */
		peer_error("port %u was left by a cache holding %" PRIu64 " dirty bytes never written to "
			   "port %u; start the cache on its persist file, or give them up with "
			   "xseg unplug --force --via %u", C.port, left, C.blocker_port, C.port);
		cache_engine_destroy(C.engine);
		C.engine = NULL;
		return 1;
	}
	if (C.cfg.replica)
		cached_ops->on_accept_in_order = on_accept;   /* before the workers start */
	dirty_mark_init(C.seg, C.port, C.engine);
	dirty_mark_update();   /* dirty data recovered from --persist: marked before serving */
	peer_log(PEER_LOG_INFO, "serving port %u in front of %u: %" PRIu64 " bytes of cache, %s%s",
	       C.port, C.blocker_port, C.cfg.cache_size,
	       C.cfg.replica ? "a replica (no reads, written back only when promoted)" :
	       C.cfg.policy == CACHE_WRITEBACK ? "write-back" : "write-through",
	       C.cfg.mirror ? ", mirrored" : "");
	return 0;
}

int main(int argc, char **argv)
{
	/* A mode of its own: no segment, no port, the file only. */
	if (argc >= 2 && !strcmp(argv[1], "--persist-inspect"))
		return persist_inspect_main(argc, argv);
	static struct peer_ops ops = {
		.name = "cached",
		.summary = "Caches objects in front of a blocker. Put it in a running path with\n"
			   "`xseg plug --port BLOCKER --via PORT`; take it out with "
			   "`xseg unplug --via PORT`.\n"
			   "SIGTERM or SIGINT: writes every dirty byte back, restores the route,\n"
			   "answers what it accepted, exits 0 (1 if data could not be written).",
		.options = cached_options,
		.options_usage = cached_options_usage,
		.parse_option = cached_parse_option,
		.check_options = cached_check_options,
		/* blocker requests from a reserve when clients hold the pool */
		.reserve_requests = true,
		.keeps_dirty_mark = true,
		.enters_by_plug = true,
		.prepare = prepare,
		.init = init,
		.thread_init = thread_init,
		.thread_fini = thread_fini,
		.on_request = on_request,
		.maintain = maintain,
		.drain = drain,
		.fini = fini,
		.stats = stats_fields,
	};
	ops.default_threads = default_threads();
	cached_ops = &ops;
	return peer_main(argc, argv, &ops, &C);
}
