/*
 * The table of requests this synapsed sent over the network and awaits
 * replies for. A request's wire id is (generation << 32 | slot index): a
 * reply names a slot, never a pointer, and a stale or forged id fails the
 * generation check. Not thread-safe: the caller holds the synapsed lock.
 *
 * A slot's life: FREE -> QUEUED (frame waiting to be written) -> SENT
 * (first byte written) -> ANSWERING (a worker answers the xseg request) ->
 * FREE. A request that timed out after it was sent becomes a LATE slot once
 * answered: its id stays reserved so that the remote's late reply is
 * recognised and dropped quietly, until that reply comes or the connection
 * closes.
 */
#ifndef SYNAPSED_SLOTS_H
#define SYNAPSED_SLOTS_H

#include <stdbool.h>
#include <stdint.h>

#include "peer/peer.h"

#define SLOT_NONE UINT32_MAX

/* RECEIVING: its reply's body is being read into the request (out of the
 * in-flight list: no timeout may answer the request under that read). */
enum slot_state { SLOT_FREE, SLOT_QUEUED, SLOT_SENT, SLOT_RECEIVING, SLOT_ANSWERING,
		  SLOT_LATE };

struct slot {
	struct peer_work work;        /* answering on a worker */
	struct xseg_request *req;     /* the accepted request it carries */
	uint32_t gen;                 /* bumped when freed; part of the id */
	uint8_t state;                /* enum slot_state */
	bool await_late;              /* timed out after SENT: keep the id */
	/* A worker's writev is reading the request's buffer: no reply is read
	 * into it and no answer given until that call returns (answer_held). */
	bool writing;
	bool answer_held;
	uint32_t conn;                /* connection it was sent on */
	uint32_t conn_gen;
	uint64_t deadline_ns;
	uint64_t reply_limit;         /* most reply data bytes accepted */
	uint32_t prev, next;          /* in-flight list (QUEUED, SENT), oldest first */
	/* the outcome, filled before a worker answers */
	uint8_t result;
	int32_t error;
	uint64_t serviced;
	uint8_t *reply_data;          /* malloc'd, reply_len bytes */
	uint64_t reply_len;
};

struct slot_table {
	struct slot *slots;
	uint32_t nr;
	uint32_t free_head;           /* free list through `next` */
	uint32_t head, tail;          /* in-flight list */
	uint32_t used;
};

int slots_init(struct slot_table *st, uint32_t nr);
void slots_destroy(struct slot_table *st);

/* A free slot, QUEUED but not yet in the in-flight list (invisible to
 * timeouts and connection losses until slots_link); SLOT_NONE when full. */
uint32_t slots_alloc(struct slot_table *st, uint64_t deadline_ns);
/* Puts a slot at the in-flight tail: its frame is queued or sent. */
void slots_link(struct slot_table *st, uint32_t idx);
/* Back to FREE (generation bumped); must not be in the in-flight list. */
void slots_free(struct slot_table *st, uint32_t idx);
/* Takes a QUEUED or SENT slot out of the in-flight list. */
void slots_unlink(struct slot_table *st, uint32_t idx);

static inline uint64_t slots_id(const struct slot_table *st, uint32_t idx)
{
	return (uint64_t)st->slots[idx].gen << 32 | idx;
}

/* The slot an id names, or NULL (out of range, free, or another generation). */
struct slot *slots_lookup(struct slot_table *st, uint64_t id);

#endif
