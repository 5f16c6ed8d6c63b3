/* Frames waiting to be written and the per-connection queues; see synapsed.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "synapsed.h"

struct frame *frame_alloc(size_t len)
{
	struct frame *f = malloc(sizeof(*f) + len);
	if (!f)
		return NULL;
	f->next = NULL;
	f->slot_id = 0;
	f->len = len;
	f->done = 0;
	f->charge = 0;
	f->owed = false;
	return f;
}

void frame_free_locked(struct frame *f)
{
	if (!f)
		return;
	if (f->owed) {
		struct conn *c = &S.conns[f->conn];
		if (c->gen == f->conn_gen && c->incoming) {
			c->incoming_bytes -= f->charge;
			if (c->incoming-- == MAX_INCOMING)
				net_wake();   /* the connection was not read: it may be again */
		}
	}
	budget_release(f->charge);
	free(f);
}

void frame_free(struct frame *f)
{
	if (f && f->owed) {
		pthread_mutex_lock(&S.lock);
		frame_free_locked(f);
		pthread_mutex_unlock(&S.lock);
	} else if (f) {
		budget_release(f->charge);
		free(f);
	}
}

void frame_owe(struct frame *f, uint32_t ci, uint32_t gen, uint64_t charge)
{
	f->charge = charge;
	f->conn = ci;
	f->conn_gen = gen;
	f->owed = true;
}

struct frame *frame_new(size_t body_len)
{
	return frame_alloc(WIRE_HEADER_LEN + body_len);
}

void frame_queue_init(struct frame_queue *q)
{
	q->head = NULL;
	q->tail = &q->head;
}

void frame_queue_push(struct frame_queue *q, struct frame *f)
{
	f->next = NULL;
	*q->tail = f;
	q->tail = &f->next;
}

struct frame *frame_queue_pop(struct frame_queue *q)
{
	struct frame *f = q->head;
	if (f) {
		q->head = f->next;
		if (!q->head)
			q->tail = &q->head;
		f->next = NULL;
	}
	return f;
}

void frame_queue_free(struct frame_queue *q)
{
	struct frame *f;
	while ((f = frame_queue_pop(q)))
		frame_free_locked(f);
}

bool conn_queue_locked(struct conn *c, uint32_t gen, struct frame *f)
{
	if (c->gen != gen || !c->up) {
		frame_free_locked(f);
		return false;
	}
	frame_queue_push(f->len <= SMALL_FRAME ? &c->small : &c->large, f);
	return true;
}

struct frame *conn_next_frame_locked(struct conn *c)
{
	struct frame_queue *first = c->large_turn ? &c->large : &c->small;
	struct frame_queue *second = c->large_turn ? &c->small : &c->large;
	struct frame *f = frame_queue_pop(first);
	if (!f)
		f = frame_queue_pop(second);
	else if (second->head)
		c->large_turn = !c->large_turn;   /* both waiting: take turns */
	return f;
}

struct frame *frame_failed_reply(const struct wire_header *req, int err)
{
	struct frame *f = frame_new(0);
	if (!f)
		return NULL;
	struct wire_header h = {
		.kind = WIRE_REPLY, .result = XR_FAILED, .op = req->op, .flags = req->flags,
		.id = req->id, .offset = req->offset, .size = req->size,
		.error = err > 0 && err <= WIRE_MAX_ERRNO ? err : EIO,
	};
	wire_encode_header(&h, f->bytes);
	return f;
}
