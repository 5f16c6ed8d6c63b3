/*
 * Writes. Write-back: the bytes land in DIRTY buckets and the write is
 * answered (the flusher writes them back later); a bucket the write covers
 * only in part is loaded first. With --persist the bytes are published in
 * the persist file before the answer (object.c's store_bucket: out of
 * place over acknowledged dirty bytes). Write-through (and FUA): the write goes to
 * the blocker uncached (through.c) once no flush or load of the object is
 * out, and is answered when the blocker has it.
 */
#include "engine_private.h"

/* A write-back write (RUNNING): into DIRTY buckets and answered, once the
 * partly covered buckets hold the rest of their bytes. */
void write_back(struct cache_object *o, struct cache_req *req, const struct bucket_span *sp)
{
	struct cache_engine *e = o->e;
	/* An uncached write in flight copies its bytes into DIRTY buckets when
	 * it lands, as newer than theirs: so no newer DIRTY bytes meanwhile. */
	if (o->through_writes) {
		park(o, req, REQ_PARKED);
		return;
	}
	for (uint32_t i = sp->first; i <= sp->last; i++)
		if (o->b.state[i] == BUCKET_LOADING) {
			park(o, req, REQ_PARKED);
			return;
		}
	if (req->load_error) {
		finish(e, req, false, req->load_error, 0);
		return;
	}
	/* A partly covered bucket must hold the rest of its bytes first. */
	bool head = bucket_span_head_partial(&e->geo, sp) && o->b.state[sp->first] == BUCKET_INVALID;
	bool tail = bucket_span_tail_partial(&e->geo, sp) && o->b.state[sp->last] == BUCKET_INVALID;
	if (head || tail) {
		bool no_io = false, ok = true;
		if (head)
			ok = load_runs(o, sp->first, sp->first, &no_io, NULL);
		if (ok && tail && !no_io)
			ok = load_runs(o, sp->last, sp->last, &no_io, NULL);
		if (!ok) {
			count_uncached(e, req);
			write_through(o, req, sp);
		} else if (no_io && !o->loads) {
			wait_for_io(o, req);
		} else {
			park(o, req, REQ_PARKED);
		}
		return;
	}
	/* No bucket, or (--persist) no object record: uncached. */
	if (!persist_hold(o) || !claim_range(o, sp->first, sp->last)) {
		count_uncached(e, req);
		write_through(o, req, sp);
		return;
	}
	store_dirty(o, sp->first, sp->last, req->offset, req->size, req->data);
	/* --persist: published (a process crash keeps it); for a host crash
	 * too, synced first with --persist-sync always, and for a FUA write
	 * unless --persist-sync none. */
	if (e->persisting && (e->cfg.persist_sync == PERSIST_SYNC_ALWAYS ||
			      (e->cfg.persist_sync == PERSIST_SYNC_FLUSH && (req->flags & XF_FUA)))) {
		int rc = engine_sync(e);
		if (rc) {
			finish(e, req, false, -rc, 0);
			return;
		}
	}
	if (e->cfg.mirror)
		mirror_write(o, req, sp->first, sp->last);   /* answered when the replica has it */
	else
		finish(e, req, true, 0, req->size);
}

/* Mirrored: the replica may hold older bytes of this object than a write
 * that goes through would put on the blocker, until the cleans of what
 * was written back have reached it. An uncached write waits for that (the
 * object clean, its mirror requests all back), or a promoted replica
 * could write the older bytes over it. */
static bool replica_may_hold_older(struct cache_object *o)
{
	if (!o->e->cfg.mirror || mirror_down(o->e))
		return false;   /* down: the replica is reset before it is used again */
	if (!object_clean(o) && !o->flushes)
		queue_flush(o);
	return o->mirror_head || !object_clean(o);
}

/* A write-through (or FUA) write: to the blocker, answered when it has it. */
void write_through(struct cache_object *o, struct cache_req *req, const struct bucket_span *sp)
{
	(void)sp;
	/* A flush may carry older copies of these bytes: wait for it, or they
	 * could land on the blocker after this write. A load may read the
	 * blocker before this write lands and mark old bytes VALID after it.
	 * A flush deferred until the uncached writes in flight land goes
	 * first too: a stream of them would starve it (a stop or an unplug
	 * under write load waited for ever). */
	if (o->flushes || o->loads || o->flush_deferred || replica_may_hold_older(o)) {
		park(o, req, REQ_PARKED_WRITE);   /* counted in writes_waiting */
		return;
	}
	go_through(o, req);   /* counts its bytes once they go */
}
