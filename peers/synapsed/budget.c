/*
 * The --max-inflight-bytes budget: what a request reserves when its header
 * arrives and what a frame gives back when freed (see limits.c for the
 * rules). Below frame.c and net.c: any thread releases, and a release a
 * header waits for wakes the network thread (wake.c).
 */
#include "synapsed.h"

uint64_t request_charge(const struct wire_header *h)
{
	uint64_t reply;
	switch (h->op) {
	case X_READ:
		reply = h->size < WIRE_MAX_DATA ? h->size : WIRE_MAX_DATA;
		break;
	case X_WRITE:
		reply = 0;
		break;
	default:   /* a reply carries at most the request's buffer */
		reply = h->data_len;
		break;
	}
	return h->target_len + h->data_len + reply;
}

int budget_reserve_locked(struct conn *c, uint64_t charge)
{
	if (charge > S.conn_inflight)
		return -1;
	/* The connection's own share is given back under the lock we hold:
	 * any release after this one sees the flag. */
	if (c->incoming_bytes + charge > S.conn_inflight) {
		atomic_store(&S.budget_wanted, 1);
		return 0;
	}
	if (atomic_load(&S.inflight_bytes) + charge > S.max_inflight) {
		/* Flag, then look again: a release after the flag wakes us,
		 * one before it shows in the second look. */
		atomic_store(&S.budget_wanted, 1);
		if (atomic_load(&S.inflight_bytes) + charge > S.max_inflight)
			return 0;
	}
	c->incoming_bytes += charge;
	atomic_fetch_add(&S.inflight_bytes, charge);
	return 1;
}

void budget_release(uint64_t charge)
{
	if (!charge)
		return;
	atomic_fetch_sub(&S.inflight_bytes, charge);
	if (atomic_load(&S.budget_wanted) && atomic_exchange(&S.budget_wanted, 0))
		net_wake();   /* a header waits for room */
}
