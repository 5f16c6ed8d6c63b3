/*
 * Replicated write-back, the replica's side (--replica, issue 23).
 *
 * A replica holds what its primary mirrors: whole buckets (the primary
 * sends them so: a replica never loads the rest of a bucket from a
 * blocker that may hold older bytes), kept DIRTY (and, with --persist,
 * published in its file) but never written back on its own: its flusher
 * does not run, a stop keeps them, and no client reads them. The
 * primary's cleans drop what the primary wrote back, and its reset drops
 * everything (the primary then has nothing dirty). A full replica refuses
 * a write (ENOSPC): the primary degrades, writes back and resets it.
 *
 * Started with nothing it can trust (no --persist, a new or discarded
 * file, one neither closed clean nor kept), it refuses writes and cleans
 * (ESTALE) until the primary resets it: its primary may hold acknowledged
 * writes it never got, and must learn so (it degrades and writes back).
 *
 * Promoted (`xseg promote`), it is an ordinary cache from then on: it
 * writes everything it holds to its blocker, and answers once that and
 * the blocker's FLUSH are done. Unless forced, it is promoted only where
 * it knows its primary's stale-replica marker (marker.c; its name came
 * with the primary's last reset) and, holding dirty data, where that
 * marker on the blocker says MIRRORED.
 */
#include "engine_private.h"

/* Buckets [first, last] of o are on the blocker (the primary says): gone. */
static void drop_range(struct cache_object *o, uint32_t first, uint32_t last)
{
	struct cache_engine *e = o->e;
	for (uint32_t i = first; i <= last && i < o->b.n; i++) {
		if (o->b.state[i] == BUCKET_DIRTY) {
			unpublish(o, i);
			/* as a write-back would, without the write */
			bucket_set(&o->b, &e->totals, i, BUCKET_WRITING);
			bucket_set(&o->b, &e->totals, i, BUCKET_VALID);
		}
		if (o->b.state[i] == BUCKET_VALID)
			release_bucket(o, i);
	}
	if (object_clean(o))
		mark_clean(o);
}

/* req was made by the primary before the reset this replica took last:
 * held on the way (synapsed, a connection the primary gave up), it comes
 * after the reset and may be older than what the primary mirrored since.
 * Until a reset in this run says the tag, none is checked. */
static bool made_before_reset(struct cache_engine *e, const struct cache_req *req)
{
	uint32_t known = atomic_load(&e->primary_tag);
	return known && (req->flags & XF_MIRROR) && XF_TAG(req->flags) != (known & 0xffff);
}

void replica_write(struct cache_object *o, struct cache_req *req, const struct bucket_span *sp)
{
	struct cache_engine *e = o->e;
	int refuse = 0;
	if (bucket_span_head_partial(&e->geo, sp) || bucket_span_tail_partial(&e->geo, sp))
		refuse = EINVAL;   /* not from a primary: it sends whole buckets */
	else if (atomic_load(&e->replica_unsure))
		refuse = ESTALE;   /* the primary degrades, writes back and resets it */
	else if (req->replica_tag && req->replica_tag != atomic_load(&e->reset_epoch) + 1)
		refuse = ESTALE;   /* sent before a reset that answered: the primary gave it up */
	else if (made_before_reset(e, req))
		refuse = ESTALE;   /* the same, come after the reset */
	else if (!persist_hold(o) || !claim_range(o, sp->first, sp->last))
		refuse = ENOSPC;   /* never written through: the primary writes back */
	if (refuse) {
		COUNT_ADD(e, rst.refused, 1);
		finish(e, req, false, refuse, 0);
		return;
	}
	store_dirty(o, sp->first, sp->last, req->offset, req->size, req->data);
	COUNT_ADD(e, rst.writes, 1);
	if (e->persisting && e->cfg.persist_sync == PERSIST_SYNC_ALWAYS) {
		int rc = engine_sync(e);
		if (rc) {
			finish(e, req, false, -rc, 0);
			return;
		}
	}
	finish(e, req, true, 0, req->size);
}

void replica_clean_step(struct cache_object *o, struct cache_req *req)
{
	struct cache_engine *e = o->e;
	uint64_t bs = e->geo.bucket_size;
	/* unsure: taken, the primary would go on believing it holds the
	 * rest; refused, it degrades, writes back and resets it */
	if (atomic_load(&e->replica_unsure) ||
	    made_before_reset(e, req)) {   /* it would drop a newer write's copy */
		COUNT_ADD(e, rst.refused, 1);
		finish(e, req, false, ESTALE, 0);
		return;
	}
	/* only the buckets it covers whole */
	uint64_t first = (req->offset + bs - 1) / bs, end = (req->offset + req->size) / bs;
	if (end > first)
		drop_range(o, (uint32_t)first, (uint32_t)(end - 1));
	COUNT_ADD(e, rst.cleans, 1);
	finish(e, req, true, 0, 0);
}

/* ---- reset: drop everything ------------------------------------------------------ */

struct reset_item {
	struct barrier *b;
	struct cache_object *o;
	struct xwork work;
};

static void reset_job(struct xwork *w, void *arg)
{
	(void)w;
	struct reset_item *it = arg;
	drop_range(it->o, 0, it->o->b.n - 1);
	barrier_arrive(it->b, 0);
	obj_put(it->o);
	free(it);
}

static void reset_then(struct barrier *b)
{
	struct cache_engine *e = b->e;
	struct cache_req *req = b->req;
	int error = atomic_load(&b->error);
	free(b);
	finish(e, req, !error, error, 0);
}

/* The primary's marker name, for a promote (in the persist file too: a
 * replica restarted on its data must still find it). */
static int keep_marker(struct cache_engine *e, const char *marker)
{
	size_t len = strlen(marker);
	if (len > MARKER_NAME_MAX)
		return EINVAL;
	pthread_mutex_lock(&e->marker_lock);
	bool same = !strcmp(e->replica_marker, marker);
	/* A primary that names another marker than the last reset did: a
	 * new primary (a host replaced), or two primaries sharing this
	 * replica, each reset dropping the other's copies (a figure that
	 * keeps rising says which). */
	if (!same && e->replica_marker[0] && *marker)
		COUNT_ADD(e, rst.primary_changes, 1);
	memcpy(e->replica_marker, marker, len + 1);
	pthread_mutex_unlock(&e->marker_lock);
	if (!same && e->persisting)
		return -persist_set_marker(&e->persist, marker);
	return 0;
}

void cache_engine_replica_marker(struct cache_engine *e, char name[MARKER_NAME_MAX + 1])
{
	pthread_mutex_lock(&e->marker_lock);
	memcpy(name, e->replica_marker, MARKER_NAME_MAX + 1);
	pthread_mutex_unlock(&e->marker_lock);
}

bool cache_replica_reset_args(const char *args, struct cache_replica_epoch *epoch,
			      const char **marker)
{
	uint64_t run;
	unsigned count;
	int used = 0;
	*epoch = (struct cache_replica_epoch){ 0 };
	if (*args == '@') {
		if (sscanf(args, "@%" SCNx64 ".%x%n", &run, &count, &used) != 2 || !run ||
		    (args[used] && args[used] != ' '))
			return false;
		*epoch = (struct cache_replica_epoch){ .run = run, .count = count };
		args += used + (args[used] == ' ');
	}
	*marker = args;
	return true;
}

/* epoch is older than (or the same as) the reset taken last (reset_lock):
 * in the same run by its count, else by its run, the primary's start
 * time: a reset of an earlier run came late (a later run is the primary
 * restarted: taken). */
static bool stale_reset(struct cache_engine *e, struct cache_replica_epoch epoch)
{
	struct cache_replica_epoch last = e->primary_epoch;
	if (!epoch.run || !last.run)
		return false;
	if (epoch.run != last.run)
		return epoch.run < last.run;
	return (int32_t)(epoch.count - last.count) <= 0;
}

void cache_engine_replica_reset(struct cache_engine *e, struct cache_req *req,
				const char *marker, struct cache_replica_epoch epoch)
{
	req_init(e, req);
	if (!is_replica(e)) {
		finish(e, req, false, EPERM, 0);   /* promoted: its data is the path's */
		return;
	}
	/* one reset at a time, from its check until its drops are queued: a
	 * stale one that passed must not list what a newer one let in */
	pthread_mutex_lock(&e->reset_lock);
	if (stale_reset(e, epoch)) {
		pthread_mutex_unlock(&e->reset_lock);
		COUNT_ADD(e, rst.refused, 1);
		finish(e, req, false, ESTALE, 0);   /* the primary gave it up */
		return;
	}
	int rc = keep_marker(e, marker ? marker : "");
	if (rc) {
		pthread_mutex_unlock(&e->reset_lock);
		finish(e, req, false, rc, 0);   /* the primary stays degraded */
		return;
	}
	if (epoch.run)
		e->primary_epoch = epoch;
	atomic_store(&e->replica_unsure, false);   /* what it held goes below */
	/* the primary's epoch from now: what it made before is refused */
	atomic_store(&e->primary_tag, 0x10000u | XF_TAG(req->flags));
	COUNT_ADD(e, rst.resets, 1);
	/* the writes taken before us are refused from here (write_step reads
	 * it after write_enter: the ones that read the old epoch are waited
	 * for below) */
	atomic_fetch_add(&e->reset_epoch, 1);
	struct barrier *b = barrier_new(e, req, reset_then);
	if (!b) {
		pthread_mutex_unlock(&e->reset_lock);
		finish(e, req, false, ENOMEM, 0);
		return;
	}
	/* what the primary sent before may still be copied in: dirty (and
	 * listed below) once its write leaves */
	engine_wait_writes(e);
	size_t n;
	errno = 0;
	struct cache_object **snap = dirty_snapshot(e, &n);
	if (!snap && errno == ENOMEM)
		atomic_store(&b->error, ENOMEM);
	for (size_t i = 0; i < n; i++) {
		struct reset_item *it = calloc(1, sizeof(*it));
		if (!it) {
			atomic_store(&b->error, ENOMEM);
			obj_put(snap[i]);
			continue;
		}
		atomic_fetch_add(&b->pending, 1);
		it->b = b;
		it->o = snap[i];   /* the snapshot's reference, dropped by reset_job */
		obj_enqueue(snap[i], &it->work, reset_job, it);
	}
	pthread_mutex_unlock(&e->reset_lock);
	free(snap);
	barrier_arrive(b, 0);
}

uint64_t cache_engine_replica_tag(struct cache_engine *e)
{
	return atomic_load(&e->reset_epoch) + 1;
}

/* ---- promote ---------------------------------------------------------------------- */

static void promote_now(struct cache_engine *e, struct cache_req *req)
{
	/* Its file holds the path's own data from here: a restart with
	 * --replica must refuse it, not drop it at a primary's reset. A
	 * failed write is the file's failed sync: engine_sync, once it is no
	 * replica, finds it and turns the cache to write-through (nothing
	 * dirty stays in a file that may not say whose it is). */
	int rc = 0;
	if (e->persisting) {
		pthread_mutex_lock(&e->reset_lock);   /* keep_marker writes it too */
		rc = persist_set_role(&e->persist, PERSIST_ROLE_OWN);
		pthread_mutex_unlock(&e->reset_lock);
	}
	atomic_store(&e->replica, false);   /* flushes, reads, stops as any cache */
	atomic_store(&e->replica_unsure, false);   /* no primary to wait for now */
	if (rc)
		(void)engine_sync(e);
	engine_wait_writes(e);   /* what it took as a replica is dirty: listed */
	flush_all_to_blocker(e, req);
}

static void refuse_promote(struct cache_engine *e, struct cache_req *req, int said, int error);

static void promoted_written(struct cache_bio *bio)
{
	struct cache_engine *e = bio->engine;
	struct cache_req *req = bio->priv;
	bool ok = bio->served && bio->serviced == MARKER_SIZE;
	int error = bio->error ? bio->error : EIO;
	bool force = bio->first;
	bio_release(e, bio);
	if (!ok && !force) {
		refuse_promote(e, req, atomic_load(&e->promote_marker_said), error);
		return;
	}
	promote_now(e, req);
}

/*
 * The marker says `promoted` before anything is written back: the old
 * primary, back on its persist file with data older than what the path
 * writes from here on, reads it and is fenced (marker.c: fence_tick)
 * instead of writing that data over the store's (a review: a VM's 8M on
 * B lost when host A came back). A marker that cannot be written refuses
 * the promote (a forced one goes on).
 */
static void promote_fenced(struct cache_engine *e, struct cache_req *req, bool force)
{
	char name[MARKER_NAME_MAX + 1];
	pthread_mutex_lock(&e->marker_lock);
	memcpy(name, e->replica_marker, sizeof(name));
	pthread_mutex_unlock(&e->marker_lock);
	struct cache_bio *bio = name[0] ? bio_alloc(e, X_WRITE, name, 0, MARKER_SIZE, NULL) : NULL;
	if (!bio) {
		if (name[0] && !force) {
			finish(e, req, false, ENOBUFS, 0);
			return;
		}
		promote_now(e, req);   /* no marker known (forced): nothing to fence */
		return;
	}
	marker_text(bio->data, MARKER_PROMOTED);
	bio->flags = XF_FUA;
	bio->first = force;
	bio->engine = e;
	bio->priv = req;
	bio->done = promoted_written;
	e->be.submit(e->be.ctx, bio);
}

static void refuse_promote(struct cache_engine *e, struct cache_req *req, int said, int error)
{
	atomic_store(&e->promote_marker_said, said);
	COUNT_ADD(e, promotes_refused, 1);
	finish(e, req, false, error, 0);
}

static void marker_read_done(struct cache_bio *bio)
{
	struct cache_engine *e = bio->engine;
	struct cache_req *req = bio->priv;
	int said = bio->served ? marker_says(bio->data, bio->serviced) : MARKER_UNKNOWN;
	bio_release(e, bio);
	if (said != MARKER_MIRRORED) {
		refuse_promote(e, req, said, ESTALE);
		return;
	}
	atomic_store(&e->promote_marker_said, said);
	promote_fenced(e, req, false);
}

void cache_engine_promote(struct cache_engine *e, struct cache_req *req, bool force)
{
	req_init(e, req);
	engine_wait_writes(e);   /* what it took so far counts as held */
	bool holds = atomic_load(&e->totals.count[BUCKET_DIRTY]) ||
		     atomic_load(&e->totals.count[BUCKET_WRITING]);
	if (!is_replica(e)) {
		promote_now(e, req);
		return;
	}
	if (force) {
		promote_fenced(e, req, true);
		return;
	}
	char name[MARKER_NAME_MAX + 1];
	pthread_mutex_lock(&e->marker_lock);
	memcpy(name, e->replica_marker, sizeof(name));
	pthread_mutex_unlock(&e->marker_lock);
	/* No reset told it one (started with nothing trusted): holding
	 * nothing says nothing either, its primary may hold acknowledged
	 * writes it never got. ENOKEY: `xseg promote` says so. */
	if (!name[0]) {
		refuse_promote(e, req, MARKER_UNKNOWN, ENOKEY);
		return;
	}
	if (!holds) {   /* nothing older to write over the blocker's */
		promote_fenced(e, req, false);
		return;
	}
	struct cache_bio *bio = bio_alloc(e, X_READ, name, 0, MARKER_SIZE, NULL);
	if (!bio) {
		finish(e, req, false, ENOBUFS, 0);
		return;
	}
	bio->engine = e;
	bio->priv = req;
	bio->done = marker_read_done;
	e->be.submit(e->be.ctx, bio);
}
