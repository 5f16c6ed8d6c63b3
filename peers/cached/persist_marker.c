/*
 * The persist marker: what a cache whose persist file failed a sync says
 * on the blocker, and what a start that recovered dirty data reads there.
 *
 * After a failed sync the file's clears of written-back slots may never
 * reach its disk. A host crash then, and a restart on the same file,
 * would replay those older slots over what was written through since (a
 * RADOS write is durable when answered). So, once a sync failed, the
 * engine wants a small object on the blocker, named after the file
 * (`cached-persist-ID`), to say:
 *
 *   failed RUN        from the failure; until it lands, no WRITE, DELETE
 *                     or COPY is answered (answers wait here, the engine's
 *                     answer_gate), so none can be lost to a replay;
 *   written-back RUN  once nothing is dirty or published any more: every
 *                     byte the file holds is older than the blocker's. Sent
 *                     with XF_FLUSH, so what was written back is durable
 *                     on the blocker before the marker says so. A FLUSH is
 *                     served again from then on (by the blocker, not by a
 *                     sync of the file: the file no longer matters).
 *
 * RUN is the file's run (persist.h): a later run never takes an older
 * run's word for its own. A start that recovered dirty data reads the
 * marker before it serves or writes anything (the fence's
 * FENCE_PERSIST_CHECKING; requests wait meanwhile, request.c's
 * check_wait). "The last run" below is the file's check_run or a later
 * one (pmark_read_done):
 *
 *   written-back, the last run's: the recovered data is dropped, the
 *                     drop synced, and the cache serves;
 *   failed, the last run's: both a replay and a drop could lose data; the
 *                     cache serves nothing (FENCE_PERSIST_FAILED: EIO)
 *                     until an operator chooses (cached.c says how);
 *   anything else (a missing object reads as zeros): the data replays.
 *
 * One marker write is out at a time (FUA). A replica's file is its
 * primary's business (it never writes back): none of this applies there
 * until it is promoted (then it writes back, and its marker counts).
 */
#include <inttypes.h>

#include "engine_private.h"

#define PMARK_PREFIX "cached-persist-marker "

static const char *const pmark_names[] = {
	[PMARK_NONE] = "", [PMARK_FAILED] = "failed", [PMARK_WRITTEN_BACK] = "written-back",
};

const char *pmark_state_name(int state)
{
	return state >= PMARK_NONE && state <= PMARK_WRITTEN_BACK ? pmark_names[state] : "?";
}

/* What the marker's bytes say, and of which run; PMARK_NONE for anything
 * else (zeros: no marker). */
static int pmark_parse(const char *d, uint64_t len, uint64_t *run)
{
	char text[MARKER_SIZE + 1];
	size_t n = len < MARKER_SIZE ? (size_t)len : MARKER_SIZE;
	memcpy(text, d, n);
	text[n] = '\0';
	size_t plen = sizeof(PMARK_PREFIX) - 1;
	if (strncmp(text, PMARK_PREFIX, plen))
		return PMARK_NONE;
	for (int s = PMARK_FAILED; s <= PMARK_WRITTEN_BACK; s++) {
		size_t slen = strlen(pmark_names[s]);
		const char *rest = text + plen + slen;
		unsigned long long r;
		int used = 0;
		if (!strncmp(text + plen, pmark_names[s], slen) &&
		    sscanf(rest, " run %llu%n", &r, &used) == 1 && used > 0) {
			*run = r;
			return s;
		}
	}
	return PMARK_NONE;
}

static void pmark_text(char *d, int state, uint64_t run)
{
	memset(d, '\n', MARKER_SIZE);
	int n = snprintf(d, MARKER_SIZE, PMARK_PREFIX "%s run %" PRIu64 " %lld",
			 pmark_state_name(state), run, (long long)time(NULL));
	d[n >= 0 && (size_t)n < MARKER_SIZE ? (size_t)n : MARKER_SIZE - 1] = '\n';
}

/* ---- the writes, and the answers that wait for them ---------------------------- */

/* Held answers go on: through the next gate (the mirror's marker), if any. */
static void pmark_release(struct cache_engine *e, struct cache_req *held)
{
	while (held) {
		struct cache_req *next = held->next_held;
		held->next_held = NULL;
		if (!(e->pmark_next_gate && e->pmark_next_gate(e, held, held->serviced)))
			answer(e, held, true, 0, held->serviced);
		held = next;
	}
}

static void pmark_send(struct cache_engine *e);

static void pmark_written(struct cache_bio *bio)
{
	struct cache_engine *e = bio->engine;
	bool ok = bio->served && bio->serviced == MARKER_SIZE;
	int said = (int)bio->first;
	struct cache_req *held = NULL;
	bio_release(e, bio);
	pthread_mutex_lock(&e->pmark_lock);
	e->pmark_out = false;
	if (ok) {
		atomic_store(&e->pmark_landed, said);
		held = e->pmark_held;
		e->pmark_held = NULL;
	}
	bool again = ok && e->pmark_want != said;
	pthread_mutex_unlock(&e->pmark_lock);
	COUNT_ADD(e, pmark_writes_total, ok);
	COUNT_ADD(e, pmark_failures, !ok);   /* the tick tries again */
	pmark_release(e, held);
	if (again)
		pmark_send(e);
}

static void pmark_send(struct cache_engine *e)
{
	pthread_mutex_lock(&e->pmark_lock);
	int want = e->pmark_want;
	bool go = !e->pmark_out && want != PMARK_NONE && atomic_load(&e->pmark_landed) != want;
	e->pmark_out = e->pmark_out || go;
	pthread_mutex_unlock(&e->pmark_lock);
	if (!go)
		return;
	struct cache_bio *bio = bio_alloc(e, X_WRITE, e->pmark_name, 0, MARKER_SIZE, NULL);
	if (!bio) {
		pthread_mutex_lock(&e->pmark_lock);
		e->pmark_out = false;   /* the tick tries again */
		pthread_mutex_unlock(&e->pmark_lock);
		return;
	}
	pmark_text(bio->data, want, e->persist.run);
	/* durable when answered, and what went back before it too */
	bio->flags = XF_FUA | XF_FLUSH;
	bio->first = (uint32_t)want;
	bio->engine = e;
	bio->done = pmark_written;
	e->be.submit(e->be.ctx, bio);
}

static bool pmark_applies(struct cache_engine *e)
{
	return persist_failed(e) && !is_replica(e);
}

/* The answer_gate: a WRITE, DELETE or COPY answered after the failure
 * waits until the blocker holds `failed`. Read again under the lock, as
 * pmark_written takes the list under it. */
static bool pmark_hold(struct cache_engine *e, struct cache_req *req, uint64_t serviced)
{
	bool changes = req->op == X_WRITE || req->op == X_DELETE || req->op == X_COPY;
	bool hold = false;
	if (changes && pmark_applies(e) && atomic_load(&e->pmark_landed) == PMARK_NONE) {
		pthread_mutex_lock(&e->pmark_lock);
		hold = atomic_load(&e->pmark_landed) == PMARK_NONE;
		if (hold) {
			if (e->pmark_want == PMARK_NONE)
				e->pmark_want = PMARK_FAILED;   /* before the tick's word */
			req->serviced = serviced;
			req->next_held = e->pmark_held;
			e->pmark_held = req;
		}
		pthread_mutex_unlock(&e->pmark_lock);
	}
	if (hold) {
		COUNT_ADD(e, pmark_held_total, 1);
		pmark_send(e);
		return true;
	}
	return e->pmark_next_gate && e->pmark_next_gate(e, req, serviced);
}

/* Whether nothing dirty is left of the file: what it holds is older than
 * the blocker's. The writes that read write-back before the failure are
 * dirty once they have left (engine_wait_writes, once). */
static bool all_written_back(struct cache_engine *e)
{
	if (!e->pmark_writes_waited) {
		engine_wait_writes(e);
		e->pmark_writes_waited = true;
	}
	return !atomic_load(&e->totals.count[BUCKET_DIRTY]) &&
	       !atomic_load(&e->totals.count[BUCKET_WRITING]) && !atomic_load(&e->published);
}

/* ---- the start's check ----------------------------------------------------------- */

/* check_run into the superblock. Its msync failing is the file's failed
 * sync (persist.c's write_super): engine_sync, which finds it, turns the
 * cache to write-through as for any other. */
static void set_check_run(struct cache_engine *e)
{
	if (persist_set_check_run(&e->persist))
		(void)engine_sync(e);
}

/* Reads of the marker that fail (a blocker down or failing) are tried
 * again after a pause, 10 ms doubling to 1 s: the check waits for the
 * word as long as it takes (neither a replay nor a drop is safe without
 * it), and says so (stats persist_marker_read_failures, _read_error,
 * persist_check_ms; cached.c warns naming the object). */
#define PMARK_READ_BACKOFF_MIN_NS (10ull * 1000 * 1000)
#define PMARK_READ_BACKOFF_MAX_NS (1000ull * 1000 * 1000)

static void pmark_read_failed(struct cache_engine *e, int error)
{
	atomic_fetch_add(&e->pmark_read_failures, 1);
	atomic_store(&e->pmark_read_error, error ? error : EIO);
	uint64_t b = e->pmark_read_backoff_ns;
	b = b < PMARK_READ_BACKOFF_MIN_NS ? PMARK_READ_BACKOFF_MIN_NS :
	    b >= PMARK_READ_BACKOFF_MAX_NS / 2 ? PMARK_READ_BACKOFF_MAX_NS : 2 * b;
	e->pmark_read_backoff_ns = b;
	e->pmark_next_read_ns = now_ns() + b;
}

static void pmark_read_done(struct cache_bio *bio)
{
	struct cache_engine *e = bio->engine;
	uint64_t run = 0;
	int said = bio->served ? pmark_parse(bio->data, bio->serviced, &run) : -1;
	int error = bio->error;
	bio_release(e, bio);
	if (said < 0)
		pmark_read_failed(e, error);   /* before read_out clears below */
	if (said >= 0) {
		atomic_store(&e->pmark_read_error, 0);
		atomic_store(&e->pmark_check_since_ns, 0);
		/* An earlier run's word is not about this data. A later one's
		 * is: a run whose check_run never reached the file (a drop
		 * whose sync failed, a lost superblock write) held this data
		 * and wrote the marker after; so did the original of a file
		 * restored from a copy. */
		if (run < e->persist.check_run)
			said = PMARK_NONE;
		/* A word of this very number: an earlier process had it (its
		 * superblock never reached the disk). This run's own words, and
		 * its check_run, take a later one, or a crash after it took
		 * writes would read that old word as its own. */
		if (said != PMARK_NONE && run >= e->persist.run && run < UINT64_MAX)
			e->persist.run = run + 1;
		atomic_store(&e->pmark_found_run, said == PMARK_NONE ? e->persist.check_run : run);
		atomic_store(&e->pmark_found, said);
		if (said == PMARK_NONE)
			set_check_run(e);   /* replayed: this run's from now on */
		/* Failed: the file keeps check_run, so a restart refuses too. */
		int checking = FENCE_PERSIST_CHECKING;
		atomic_compare_exchange_strong(&e->fence, &checking,
					       said == PMARK_WRITTEN_BACK ? FENCE_PERSIST_DROPPING :
					       said == PMARK_FAILED ? FENCE_PERSIST_FAILED :
					       e->fence_after_persist);
	}   /* else the blocker failed it: the tick asks again */
	/* Only now: a tick that found the fence still CHECKING and no read
	 * out would send another, whose answer could come after the cache
	 * began to serve. */
	atomic_store(&e->pmark_read_out, false);
}

static void pmark_read(struct cache_engine *e)
{
	if (atomic_exchange(&e->pmark_read_out, true))
		return;
	if (atomic_load(&e->fence) != FENCE_PERSIST_CHECKING ||   /* read meanwhile */
	    now_ns() < e->pmark_next_read_ns) {                   /* failing: a pause */
		atomic_store(&e->pmark_read_out, false);
		return;
	}
	struct cache_bio *bio = bio_alloc(e, X_READ, e->pmark_name, 0, MARKER_SIZE, NULL);
	if (!bio) {
		atomic_store(&e->pmark_read_out, false);
		return;
	}
	bio->engine = e;
	bio->done = pmark_read_done;
	e->be.submit(e->be.ctx, bio);
}

/* The last run wrote every byte back: what was recovered is older than
 * the blocker's. Nothing else runs meanwhile (the fence refuses every
 * request, the tick flushes nothing), so the objects are the tick's. */
static void pmark_drop_recovered(struct cache_engine *e)
{
	for (;;) {
		pthread_mutex_lock(&e->dirty_lock);
		struct cache_object *o = cds_list_empty(&e->dirty) ? NULL :
			cds_list_first_entry(&e->dirty, struct cache_object, dirty_link);
		if (o)
			obj_get(o);
		pthread_mutex_unlock(&e->dirty_lock);
		if (!o)
			break;
		uint64_t dirty = 0;
		for (uint32_t i = 0; i < o->b.n; i++)
			dirty += o->b.state[i] == BUCKET_DIRTY;
		atomic_fetch_add(&e->pmark_dropped_bytes, dirty * e->cfg.bucket_size);
		drop_buckets(o);   /* off the dirty list */
		obj_put(o);
	}
	/* The clears on the disk before anything newer is served: else a
	 * crash now replays them under this run's name, which no marker has. A
	 * sync that fails is the engine's failure as any other: the file
	 * keeps the old check_run, so the old `written-back` still drops after
	 * a crash, and this run's own word, once written, governs (a later
	 * run's word counts: pmark_read_done). */
	if (!engine_sync(e))
		set_check_run(e);
	atomic_store(&e->fence, e->fence_after_persist);
}

/* ---- the engine's calls ------------------------------------------------------------- */

/* The marker's name is this cache's alone: a client's WRITE, DELETE or
 * COPY onto it would forge or erase the word a restart reads (a forged
 * `written-back` drops acknowledged data, an erased `failed` replays
 * older bytes over newer). Refused, counted (cached.c warns); a READ, or
 * a COPY from it, passes. Another cache's marker (a chain: the cache in
 * front writes its own through this one) is another name. */
bool pmark_refuses(struct cache_engine *e, const struct cache_req *req)
{
	if (!e->pmark_on || !req->name ||
	    (req->op != X_WRITE && req->op != X_DELETE && req->op != X_COPY) ||
	    strcmp(req->name, e->pmark_name))
		return false;
	atomic_fetch_add(&e->pmark_refused, 1);
	return true;
}

void pmark_init(struct cache_engine *e, int fence_after)
{
	atomic_store(&e->pmark_found, -1);
	e->fence_after_persist = fence_after;
	atomic_store(&e->fence, fence_after);
	if (!e->persisting)
		return;
	snprintf(e->pmark_name, sizeof(e->pmark_name), PERSIST_MARKER_OBJECT, e->persist.file_id);
	/* A replica too: promoted, it writes back from its file as any
	 * cache (pmark_applies waits for that). Its start reads nothing: what
	 * its file holds is its primary's. */
	e->pmark_on = true;
	e->pmark_next_gate = e->answer_gate;
	e->answer_gate = pmark_hold;
	if (e->cfg.replica)
		return;
	if (e->recovery.slots) {
		atomic_store(&e->pmark_check_since_ns, now_ns());
		atomic_store(&e->fence, FENCE_PERSIST_CHECKING);
	}
	else
		set_check_run(e);   /* nothing of an earlier run */
}

bool pmark_tick(struct cache_engine *e)
{
	switch (atomic_load(&e->fence)) {
	case FENCE_PERSIST_CHECKING:
		pmark_read(e);
		return true;
	case FENCE_PERSIST_DROPPING:
		pmark_drop_recovered(e);
		return true;
	case FENCE_PERSIST_FAILED:
		return true;
	}
	if (!e->pmark_on || !pmark_applies(e))
		return false;
	int want = all_written_back(e) ? PMARK_WRITTEN_BACK : PMARK_FAILED;
	pthread_mutex_lock(&e->pmark_lock);
	if (e->pmark_want != PMARK_WRITTEN_BACK)   /* nothing dirty comes back */
		e->pmark_want = want;
	pthread_mutex_unlock(&e->pmark_lock);
	pmark_send(e);
	return false;
}
