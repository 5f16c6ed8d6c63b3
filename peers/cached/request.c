/*
 * A client request's life in the engine: its states and the one table of
 * legal transitions between them (engine_private.h draws the states), and
 * answering it. Every change of req->state goes through req_set(), which
 * looks the transition up here, so a request's path can be read forward
 * from this table, and a step that would move it where it cannot be
 * (answered twice, parked after it was answered) stops the program with
 * the request and both states named instead of corrupting another.
 *
 * The check is on in every build, not only debug and sanitizer ones: it
 * is a byte load, a compare and a table bit test, three or four times per
 * request (about 18 instructions per hit, valgrind's count), no atomics
 * and no memory beyond the request's own line and this 52-byte table.
 */
#include "engine_private.h"

#define TO(s) (1u << (s))

static const char *const state_names[REQ_STATES] = {
	[REQ_NEW] = "NEW", [REQ_WAIT_NODE] = "WAIT_NODE", [REQ_QUEUED] = "QUEUED",
	[REQ_RUNNING] = "RUNNING", [REQ_PARKED] = "PARKED", [REQ_PARKED_WRITE] = "PARKED_WRITE",
	[REQ_WAIT_IO] = "WAIT_IO", [REQ_THROUGH] = "THROUGH", [REQ_DROPPING] = "DROPPING",
	[REQ_BARRIER] = "BARRIER", [REQ_FORWARDED] = "FORWARDED", [REQ_MIRROR] = "MIRROR",
	[REQ_DONE] = "DONE",
};

/* req_next[from]: the states a request may go to from `from`. */
const uint32_t req_next[REQ_STATES] = {
	/* answered at once (PING, a bad request, a hit beside the queue), or on its way */
	[REQ_NEW]          = TO(REQ_WAIT_NODE) | TO(REQ_QUEUED) | TO(REQ_BARRIER) |
			     TO(REQ_FORWARDED) | TO(REQ_WAIT_IO) | TO(REQ_DONE),
	/* again when no node is free yet; DONE: the index failed otherwise */
	[REQ_WAIT_NODE]    = TO(REQ_WAIT_NODE) | TO(REQ_QUEUED) | TO(REQ_DONE),
	[REQ_QUEUED]       = TO(REQ_RUNNING),
	[REQ_RUNNING]      = TO(REQ_PARKED) | TO(REQ_PARKED_WRITE) | TO(REQ_WAIT_IO) |
			     TO(REQ_THROUGH) | TO(REQ_DROPPING) | TO(REQ_MIRROR) | TO(REQ_DONE),
	/* DONE: a read answered by its own (lent) load */
	[REQ_PARKED]       = TO(REQ_RUNNING) | TO(REQ_DONE),
	[REQ_PARKED_WRITE] = TO(REQ_RUNNING),
	/* QUEUED on its object, or FORWARDED; WAIT_IO again: none free yet */
	[REQ_WAIT_IO]      = TO(REQ_QUEUED) | TO(REQ_FORWARDED) | TO(REQ_WAIT_IO),
	/* RUNNING: an uncached read read again (a newer cached copy went) */
	[REQ_THROUGH]      = TO(REQ_DONE) | TO(REQ_RUNNING),
	[REQ_DROPPING]     = TO(REQ_DONE),
	/* FLUSH forwards; COPY goes to its target object; DONE: failed */
	[REQ_BARRIER]      = TO(REQ_FORWARDED) | TO(REQ_WAIT_IO) | TO(REQ_QUEUED) |
			     TO(REQ_WAIT_NODE) | TO(REQ_DONE),
	[REQ_FORWARDED]    = TO(REQ_DONE),
	/* DONE: the replica has it; BARRIER: it failed, the blocker must */
	[REQ_MIRROR]       = TO(REQ_DONE) | TO(REQ_BARRIER),
	[REQ_DONE]         = 0,
};

const char *req_state_name(enum cache_req_state s)
{
	return (unsigned)s < REQ_STATES ? state_names[s] : "?";
}

bool req_transition_ok(enum cache_req_state from, enum cache_req_state to)
{
	return (unsigned)from < REQ_STATES && (unsigned)to < REQ_STATES &&
	       (req_next[from] & TO(to));
}

_Noreturn void req_bad_transition(const struct cache_req *req, enum cache_req_state to)
{
	fprintf(stderr, "cached: engine bug: request op %u '%s' %" PRIu64 "+%" PRIu64
		": state %s -> %s is not a legal transition\n", req->op,
		req->name ? req->name : "", req->offset, req->size,
		req_state_name((enum cache_req_state)req->state), req_state_name(to));
	abort();
}

void req_init(struct cache_engine *e, struct cache_req *req)
{
	req->engine = e;
	req->obj = NULL;
	req->state = REQ_NEW;      /* a new life: the glue may reuse a request */
	req->next_parked = NULL;
	req->load_error = 0;
	req->counted = false;
	req->counted_uncached = false;
	req->info_size = 0;
	req->on_replica = false;
	req->switching = false;
}

/*
 * A start that recovered dirty data reads the persist marker first
 * (persist_marker.c): milliseconds, unless the blocker is slow to answer.
 * Requests (and a plug's policy switch, a FLUSH) that come meanwhile wait
 * for it, in order, instead of failing EAGAIN; the maintenance tick puts
 * them in again where they came in (engine.c).
 */
bool check_wait(struct cache_engine *e, struct cache_req *req, int entry, int policy,
		int *fence_now)
{
	pthread_mutex_lock(&e->pmark_lock);
	int fence = atomic_load(&e->fence);
	*fence_now = fence;
	bool wait = !e->check_waiters_failed &&
		    (fence == FENCE_PERSIST_CHECKING || fence == FENCE_PERSIST_DROPPING);
	if (wait) {
		req->check_entry = (uint8_t)entry;
		req->check_policy = (uint8_t)policy;
		req->next_held = NULL;
		*e->check_waiters_tail = req;
		e->check_waiters_tail = &req->next_held;
	}
	pthread_mutex_unlock(&e->pmark_lock);
	return wait;
}

struct cache_req *check_waiters_take(struct cache_engine *e)
{
	pthread_mutex_lock(&e->pmark_lock);
	struct cache_req *list = e->check_waiters;
	e->check_waiters = NULL;
	e->check_waiters_tail = &e->check_waiters;
	pthread_mutex_unlock(&e->pmark_lock);
	return list;
}

void finish(struct cache_engine *e, struct cache_req *req, bool served, int error,
	    uint64_t serviced)
{
	if (served && e->answer_gate && e->answer_gate(e, req, serviced))
		return;   /* answered once the marker allows it */
	answer(e, req, served, error, serviced);
}

void answer(struct cache_engine *e, struct cache_req *req, bool served, int error,
	    uint64_t serviced)
{
	req->served = served;
	req->error = served ? 0 : error;
	req->serviced = serviced;
	if (!served)
		STAT_ADD(e, failed, 1);
	struct cache_object *o = req->obj;
	req->obj = NULL;
	req_set(req, REQ_DONE);
	req->done(req);
	if (o)
		obj_put(o);
	if (!xwaitq_empty(&e->entry_waitq))
		xwaitq_signal(&e->entry_waitq);
}
