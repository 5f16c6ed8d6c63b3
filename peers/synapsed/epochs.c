/*
 * Connection epochs on the listening side: a requester's older connection
 * runs nothing once a newer one said hello. A requester (the --remote link
 * of another synapsed) that timed out on a connection, closed it and
 * connected again has failed every request it wrote there; but those
 * bytes may still sit unread in our socket (we were stopped, or not
 * reading it for back-pressure), and run after what it wrote, and had
 * acknowledged, on the new one: an old write over a newer one. So a hello
 * of a newer epoch closes the requester's older connections here (their
 * unread requests dropped), a hello of an older epoch is refused while
 * anything of the requester is open or out here, and a request of the new
 * connection waits while one of the older ones' that it overlaps (the same
 * target and bytes, a write in either; any op but READ, WRITE and PING
 * overlaps everything) is still at the target (--retry-limit at most,
 * then ETIMEDOUT). Those that overlap nothing go at once: a request the
 * target never answers holds back only what it could be reordered with.
 * Within one connection, a READ, WRITE, DELETE or COPY waits the same way
 * behind an earlier one of the same object's bytes (a change in either:
 * a WRITE, or a DELETE or COPY onto the object) still at the target: its
 * requester may have timed that one out and written again.
 *
 * Connections without a hello (a client other than synapsed) are not
 * ordered against each other. The table is under S.lock; the hello and
 * the closes it causes are the network thread's.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "synapsed.h"

struct requester {
	uint64_t id;            /* 0: a free entry */
	uint64_t epoch;         /* the newest connection's */
	/* its requests at the target: of that epoch, and of older ones (which
	 * the newest's wait for where they overlap); circular lists */
	struct epoch_ticket current, older;
	uint64_t seen_ns;       /* last hello: the oldest free entry goes first */
};

static struct requester *table;
static uint32_t nr_requesters;

static void list_init(struct epoch_ticket *head)
{
	head->prev = head->next = head;
}

/* None of its requests is at the target. */
static bool nothing_out(const struct requester *q)
{
	return q->current.next == &q->current && q->older.next == &q->older;
}

static void reset(struct requester *q, uint64_t id)
{
	*q = (struct requester){ .id = id };
	list_init(&q->current);
	list_init(&q->older);
}

int epochs_init(void)
{
	nr_requesters = 2 * S.max_conns;
	table = calloc(nr_requesters, sizeof(*table));
	if (!table)
		return -1;
	for (uint32_t r = 0; r < nr_requesters; r++)
		reset(&table[r], 0);
	return 0;
}

/* An open connection names entry r (network thread). */
static bool entry_in_use(uint32_t r)
{
	for (uint32_t ci = REMOTE_CONN + 1; ci < S.nr_conns; ci++)
		if (S.conns[ci].fd >= 0 && S.conns[ci].requester == r + 1)
			return true;
	return false;
}

/* Requester id's entry, or a new one: a free entry, else the one heard
 * from least recently that no connection names and nothing is out for
 * (forgetting it forgets its epoch: only when the table is full). Lock
 * held; UINT32_MAX when there is none. */
static uint32_t find_locked(uint64_t id)
{
	uint32_t oldest = UINT32_MAX;
	for (uint32_t r = 0; r < nr_requesters; r++) {
		if (table[r].id == id)
			return r;
		if (!table[r].id) {
			if (oldest == UINT32_MAX || table[oldest].id)
				oldest = r;
		} else if ((oldest == UINT32_MAX || (table[oldest].id &&
			    table[r].seen_ns < table[oldest].seen_ns)) &&
			   nothing_out(&table[r]) && !entry_in_use(r)) {
			oldest = r;
		}
	}
	if (oldest != UINT32_MAX && table[oldest].id != id)
		reset(&table[oldest], id);
	return oldest;
}

/* "ADDR:PORT" texts with the same ADDR. */
static bool same_host(const char *a, const char *b)
{
	const char *ca = strrchr(a, ':'), *cb = strrchr(b, ':');
	size_t la = ca ? (size_t)(ca - a) : strlen(a), lb = cb ? (size_t)(cb - b) : strlen(b);
	return la == lb && memcmp(a, b, la) == 0;
}

int epochs_hello(struct conn *c, uint32_t ci, const struct wire_header *h, const char **why)
{
	static char text[192];   /* network thread only */
	if (c->frames_done || c->requester) {
		*why = "a hello after its first frame";
		return -1;
	}
	pthread_mutex_lock(&S.lock);
	uint32_t r = find_locked(h->id);
	if (r == UINT32_MAX) {
		pthread_mutex_unlock(&S.lock);
		*why = "no room to remember its requester (every one has requests out)";
		return -1;
	}
	struct requester *q = &table[r];
	/* Older than the newest seen: refused while anything of the requester
	 * is open or out here (it is a connection that was superseded before
	 * we read its hello). With nothing, it is the requester restarted
	 * with its clock stepped back: refusing it would keep it out until
	 * its clock passed ours. */
	bool older = q->epoch && h->offset <= q->epoch;
	if (older && nothing_out(q) && !entry_in_use(r)) {
		peer_warn("connection %s: its requester's epoch %" PRIu64 " is older than the "
			  "last seen (%" PRIu64 ") with nothing of it left here: taken (its clock "
			  "went back?)", c->peer, h->offset, q->epoch);
		older = false;
	}
	if (older) {
		pthread_mutex_unlock(&S.lock);
		atomic_fetch_add(&S.superseded, 1);
		snprintf(text, sizeof(text), "an older connection of its requester (epoch %" PRIu64
			 ", the newest seen %" PRIu64 "): none of its requests is run", h->offset,
			 q->epoch);
		*why = text;
		return -1;
	}
	if (q->current.next != &q->current) {   /* current's requests join older's */
		q->current.prev->next = q->older.next;
		q->older.next->prev = q->current.prev;
		q->older.next = q->current.next;
		q->current.next->prev = &q->older;
		list_init(&q->current);
	}
	q->epoch = h->offset;
	q->seen_ns = xseg_now_ns();
	pthread_mutex_unlock(&S.lock);
	c->requester = r + 1;
	c->epoch = h->offset;
	atomic_fetch_add(&S.requesters, 1);
	peer_info("connection %s: requester %#" PRIx64 ", epoch %" PRIu64, c->peer, h->id,
		  h->offset);
	/* Its requester closed them (it reconnects only then) and failed what
	 * it wrote there: what we have not read of them must not run. */
	for (uint32_t other = REMOTE_CONN + 1; other < S.nr_conns; other++) {
		struct conn *o = &S.conns[other];
		if (other == ci || o->fd < 0 || o->requester != r + 1)
			continue;
		atomic_fetch_add(&S.superseded, 1);
		/* the same requester from another host: two synapsed that hash
		 * alike would take turns closing each other's link */
		if (!same_host(o->peer, c->peer))
			peer_warn("requester %#" PRIx64 " connects from %s and from %s: if these are "
				  "two synapsed (a cloned machine: the same machine id, host name, "
				  "segment and port), each new connection closes the other's",
				  h->id, o->peer, c->peer);
		snprintf(text, sizeof(text), "superseded by a newer connection of its requester "
			 "(%s); what it sent and we did not run is dropped", c->peer);
		conn_close(other, text, ECONNRESET);
	}
	return 0;
}

/* Whether t and o could be reordered to a different outcome. */
static bool overlaps(const struct epoch_ticket *t, const struct epoch_ticket *o)
{
	if (t->op == X_PING || o->op == X_PING)
		return false;
	if ((t->op != X_READ && t->op != X_WRITE) || (o->op != X_READ && o->op != X_WRITE))
		return true;   /* FLUSH, DELETE, COPY, INFO, CONTROL: the whole target or more */
	if (t->op == X_READ && o->op == X_READ)
		return false;
	return t->target_len == o->target_len &&
	       memcmp(t->target, o->target, t->target_len) == 0 &&
	       t->offset < o->offset + o->size && o->offset < t->offset + t->size;
}

/* Two requests on one object's data, one of them a change (a WRITE, or a
 * DELETE or COPY onto it: the whole object), could land in either order at
 * a target that runs requests at once. (A COPY's source is not counted: a
 * write to it timed out may land before or after the copy, as it may.) */
static bool on_data(uint32_t op)
{
	return op == X_READ || op == X_WRITE || op == X_DELETE || op == X_COPY;
}

static bool data_overlaps(const struct epoch_ticket *t, const struct epoch_ticket *o)
{
	if (!on_data(t->op) || !on_data(o->op) || (t->op == X_READ && o->op == X_READ))
		return false;
	if (t->target_len != o->target_len || memcmp(t->target, o->target, t->target_len))
		return false;
	bool whole = t->op == X_DELETE || t->op == X_COPY || o->op == X_DELETE || o->op == X_COPY;
	return whole || (t->offset < o->offset + o->size && o->offset < t->offset + t->size);
}

int epochs_claim(struct epoch_ticket *t)
{
	if (!t->requester)
		return 1;
	pthread_mutex_lock(&S.lock);
	struct requester *q = &table[t->requester - 1];
	int rc = 1;
	if (q->epoch != t->epoch) {
		rc = -1;
	} else {
		for (struct epoch_ticket *o = q->older.next; o != &q->older; o = o->next)
			if (overlaps(t, o)) {
				rc = 0;
				break;
			}
		/* Its own connection's too, where the data overlaps: an earlier
		 * request still at the target may be one its requester timed out
		 * and followed with this one (a slow or stalled target outlasts
		 * --timeout; the link stays up). Submitted in arrival order is not
		 * enough: the target runs both at once, and the old WRITE could land
		 * last, over the newer one its requester was told was done. */
		for (struct epoch_ticket *o = q->current.next; rc > 0 && o != &q->current;
		     o = o->next)
			if (data_overlaps(t, o))
				rc = 0;
	}
	if (rc > 0) {
		t->next = &q->current;
		t->prev = q->current.prev;
		q->current.prev->next = t;
		q->current.prev = t;
	}
	pthread_mutex_unlock(&S.lock);
	return rc;
}

void epochs_release(struct epoch_ticket *t)
{
	if (!t->requester)
		return;
	pthread_mutex_lock(&S.lock);
	if (!t->next) {
		pthread_mutex_unlock(&S.lock);
		return;
	}
	t->prev->next = t->next;
	t->next->prev = t->prev;
	t->next = t->prev = NULL;
	pthread_mutex_unlock(&S.lock);
}
