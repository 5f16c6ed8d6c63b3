/*
 * The stale-replica marker (--mirror-port): a small object on the blocker
 * in which a primary says whether its replica holds every write it
 * acknowledged. A promote reads it there (replica.c), so a replica whose
 * primary went on without it, and was then lost, is not promoted on its
 * word alone: its older buckets would be written over newer bytes. This
 * is DRBD's "outdate-peer", kept where both hosts can read it.
 *
 * The primary wants the marker to say DEGRADED from its start and from
 * each degradation, and MIRRORED once a mirror-reset was answered (the
 * replica then holds nothing older than the blocker). One marker write is
 * out at a time (FUA); while one is out, what the blocker holds is not
 * known. The rule it keeps: while the mirror is down, no write, DELETE or
 * COPY that the replica did not acknowledge is answered before the
 * blocker's marker says DEGRADED. Such answers wait here (the engine's
 * answer_gate, called by finish()) and go when that write lands, or when
 * the primary is MIRRORED again: after a reset the replica holds nothing
 * those requests changed.
 *
 * A switch to write-through (an unplug, the stop's drain) waits too: once
 * it is answered the path may write to the blocker past us, where no
 * answer can be held. It goes when the replica holds nothing older than
 * the blocker: MIRRORED with every clean of what it wrote back answered,
 * or, the mirror down, once the blocker's marker says DEGRADED.
 */
#include "engine_private.h"

/* The marker's bytes: "cached-mirror-marker STATE UNIX-SECONDS", then
 * newlines up to MARKER_SIZE. */
#define MARKER_PREFIX "cached-mirror-marker "

static const char *const marker_names[] = {
	[MARKER_UNKNOWN] = "unknown", [MARKER_DEGRADED] = "degraded",
	[MARKER_MIRRORED] = "mirrored", [MARKER_PROMOTED] = "promoted",
};

const char *marker_state_name(int state)
{
	return state >= MARKER_UNKNOWN && state <= MARKER_PROMOTED ? marker_names[state] : "?";
}

/* ---- the primary's marker writes ---------------------------------------------- */

static void marker_send(struct cache_engine *e);

/* Under marker_lock: a switch to write-through may be answered. The count
 * first: a failed request degrades before it leaves the count. */
static bool switch_may_go(struct cache_engine *e)
{
	uint64_t ops = atomic_load(&e->mst.ops);
	if (atomic_load(&e->policy) != CACHE_WRITETHROUGH)
		return true;   /* write-back again: the switch's caller fails it */
	if (mirror_down(e))
		return e->marker_written == MARKER_DEGRADED;
	return ops == 0;   /* the replica dropped all that went back */
}

/* Answers held while the marker could still say MIRRORED: all of them. */
static void release_held(struct cache_engine *e, struct cache_req *held)
{
	while (held) {
		struct cache_req *next = held->next_held;
		held->next_held = NULL;
		answer(e, held, true, 0, held->serviced);
		held = next;
	}
}

void marker_switches(struct cache_engine *e)
{
	if (!e->answer_gate)
		return;
	struct cache_req *held = NULL;
	pthread_mutex_lock(&e->marker_lock);
	if (e->switch_held && switch_may_go(e)) {
		held = e->switch_held;
		e->switch_held = NULL;
	}
	pthread_mutex_unlock(&e->marker_lock);
	release_held(e, held);
}

/* What the blocker's marker says (marker_lock held), and whether that is
 * `mirrored`, for writes to read without the lock (engine.c's
 * write_step: write-back, whose answers rest on the replica, only once
 * the marker says so; else a host lost meanwhile left acknowledged data
 * on a replica the promote refuses, the marker still `degraded`). */
static void set_written(struct cache_engine *e, int state)
{
	e->marker_written = state;
	atomic_store_explicit(&e->marker_says_mirrored, state == MARKER_MIRRORED,
			      memory_order_release);
}

static void marker_written(struct cache_bio *bio)
{
	struct cache_engine *e = bio->engine;
	bool ok = bio->served && bio->serviced == MARKER_SIZE;
	int said = (int)bio->first;
	struct cache_req *held = NULL;
	bio_release(e, bio);
	pthread_mutex_lock(&e->marker_lock);
	e->marker_out = false;
	set_written(e, ok ? said : MARKER_UNKNOWN);
	if (ok && said == MARKER_DEGRADED) {
		held = e->marker_held;
		e->marker_held = NULL;
	}
	bool again = ok && e->marker_want != e->marker_written;
	pthread_mutex_unlock(&e->marker_lock);
	if (ok)
		COUNT_ADD(e, marker_writes, 1);
	else
		COUNT_ADD(e, marker_failures, 1);   /* the tick tries again */
	release_held(e, held);
	marker_switches(e);
	if (again)
		marker_send(e);
}

/* Writes the wanted state unless a write is out or the blocker holds it. */
static void marker_send(struct cache_engine *e)
{
	if (atomic_load(&e->fence) != FENCE_NONE)
		return;   /* not over a promote's `promoted` unread, nor after it */
	pthread_mutex_lock(&e->marker_lock);
	int want = e->marker_want;
	bool go = !e->marker_out && e->marker_written != want;
	if (go) {
		e->marker_out = true;
		set_written(e, MARKER_UNKNOWN);   /* until this one lands */
	}
	pthread_mutex_unlock(&e->marker_lock);
	if (!go)
		return;
	struct cache_bio *bio = bio_alloc(e, X_WRITE, e->cfg.mirror_marker, 0, MARKER_SIZE, NULL);
	if (!bio) {
		pthread_mutex_lock(&e->marker_lock);
		e->marker_out = false;   /* the tick tries again */
		pthread_mutex_unlock(&e->marker_lock);
		return;
	}
	marker_text(bio->data, want);
	bio->flags = XF_FUA;   /* durable when answered */
	bio->first = (uint32_t)want;
	bio->engine = e;
	bio->done = marker_written;
	e->be.submit(e->be.ctx, bio);
}

void marker_want(struct cache_engine *e, int state)
{
	if (!e->cfg.mirror_marker)
		return;
	pthread_mutex_lock(&e->marker_lock);
	e->marker_want = state;
	pthread_mutex_unlock(&e->marker_lock);
	marker_send(e);
}

void marker_mirrored(struct cache_engine *e)
{
	if (!e->cfg.mirror_marker)
		return;
	pthread_mutex_lock(&e->marker_lock);
	if (mirror_down(e)) {
		/* Degraded again since the reset's answer set MIRRORED: what is
		 * held now may be younger than the reset, and the marker must
		 * say degraded (the degradation wanted it). */
		pthread_mutex_unlock(&e->marker_lock);
		return;
	}
	struct cache_req *held = e->marker_held;   /* the reset emptied the replica */
	e->marker_held = NULL;
	e->marker_want = MARKER_MIRRORED;
	pthread_mutex_unlock(&e->marker_lock);
	release_held(e, held);
	marker_switches(e);
	marker_send(e);
}

void marker_tick(struct cache_engine *e)
{
	if (e->cfg.mirror_marker)
		marker_send(e);
	marker_switches(e);
}

/* Under marker_lock: whether req's answer must wait, on which list. */
static struct cache_req **held_list(struct cache_engine *e, const struct cache_req *req)
{
	if (req->switching)
		return switch_may_go(e) ? NULL : &e->switch_held;
	return mirror_down(e) && e->marker_written != MARKER_DEGRADED ? &e->marker_held : NULL;
}

/* The engine's answer_gate: true when req's answer waits here. The state
 * is read again under the lock, as marker_mirrored and marker_written
 * take the list under it: an answer is never left behind. */
static bool hold_answer(struct cache_engine *e, struct cache_req *req, uint64_t serviced)
{
	if (!req->switching &&
	    (req->on_replica || (req->op != X_WRITE && req->op != X_DELETE && req->op != X_COPY) ||
	     !mirror_down(e)))
		return false;   /* the common case, without the lock */
	pthread_mutex_lock(&e->marker_lock);
	struct cache_req **list = held_list(e, req);
	if (list) {
		req->serviced = serviced;
		req->next_held = *list;
		*list = req;
	}
	pthread_mutex_unlock(&e->marker_lock);
	if (list) {
		COUNT_ADD(e, marker_held_total, 1);
		marker_send(e);
	}
	return list != NULL;
}

void marker_init(struct cache_engine *e)
{
	pthread_mutex_init(&e->marker_lock, NULL);
	e->marker_want = MARKER_DEGRADED;   /* CONNECTING: not mirrored yet */
	set_written(e, MARKER_UNKNOWN);
	if (e->cfg.mirror && e->cfg.mirror_marker)
		e->answer_gate = hold_answer;
}

/* ---- what a promote reads ---------------------------------------------------------- */

int marker_says(const char *d, uint64_t len)
{
	static const char mirrored[] = MARKER_PREFIX "mirrored ";
	static const char degraded[] = MARKER_PREFIX "degraded ";
	static const char promoted[] = MARKER_PREFIX "promoted ";
	if (len >= sizeof(mirrored) - 1 && !memcmp(d, mirrored, sizeof(mirrored) - 1))
		return MARKER_MIRRORED;
	if (len >= sizeof(degraded) - 1 && !memcmp(d, degraded, sizeof(degraded) - 1))
		return MARKER_DEGRADED;
	if (len >= sizeof(promoted) - 1 && !memcmp(d, promoted, sizeof(promoted) - 1))
		return MARKER_PROMOTED;
	return MARKER_UNKNOWN;
}

/* The marker's text for `state`, at d (MARKER_SIZE bytes, no NUL). */
void marker_text(char *d, int state)
{
	memset(d, '\n', MARKER_SIZE);
	int n = snprintf(d, MARKER_SIZE, MARKER_PREFIX "%s %lld", marker_state_name(state),
			 (long long)time(NULL));
	d[n >= 0 && (size_t)n < MARKER_SIZE ? (size_t)n : MARKER_SIZE - 1] = '\n';   /* not NUL */
}

/* ---- the fence: a primary back on its persist file after a promote ------------------ */

static void fence_read_done(struct cache_bio *bio)
{
	struct cache_engine *e = bio->engine;
	int said = bio->served ? marker_says(bio->data, bio->serviced) : -1;
	bio_release(e, bio);
	atomic_store(&e->fence_read_out, false);
	if (said < 0)
		return;   /* the blocker failed it: the tick asks again */
	atomic_store(&e->fence_marker_said, said);
	atomic_store(&e->fence, said == MARKER_PROMOTED ? FENCE_PROMOTED : FENCE_NONE);
}

/*
 * A primary that recovered dirty data reads its marker before it writes
 * anything to the blocker or serves: if its replica was promoted while it
 * was down, the store holds newer data than what it recovered, and its
 * write-back would go over it (a review: 8M of a VM's writes on B lost
 * when host A came back). Fenced for good then: every request fails
 * ESTALE. The maintenance tick calls it while the check is pending.
 */
void fence_tick(struct cache_engine *e)
{
	if (atomic_load(&e->fence) != FENCE_CHECKING || atomic_exchange(&e->fence_read_out, true))
		return;
	struct cache_bio *bio = bio_alloc(e, X_READ, e->cfg.mirror_marker, 0, MARKER_SIZE, NULL);
	if (!bio) {
		atomic_store(&e->fence_read_out, false);
		return;
	}
	bio->engine = e;
	bio->done = fence_read_done;
	e->be.submit(e->be.ctx, bio);
}
