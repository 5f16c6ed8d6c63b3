/* synapsed's table of requests awaiting replies; see slots.h. */
#include <stdlib.h>
#include <string.h>

#include "slots.h"

int slots_init(struct slot_table *st, uint32_t nr)
{
	memset(st, 0, sizeof(*st));
	st->slots = calloc(nr, sizeof(*st->slots));
	if (!st->slots)
		return -1;
	st->nr = nr;
	for (uint32_t i = 0; i < nr; i++) {
		st->slots[i].gen = 1;   /* ids are never 0 */
		st->slots[i].next = i + 1 < nr ? i + 1 : SLOT_NONE;
	}
	st->free_head = nr ? 0 : SLOT_NONE;
	st->head = st->tail = SLOT_NONE;
	return 0;
}

void slots_destroy(struct slot_table *st)
{
	for (uint32_t i = 0; st->slots && i < st->nr; i++)
		free(st->slots[i].reply_data);
	free(st->slots);
	st->slots = NULL;
}

uint32_t slots_alloc(struct slot_table *st, uint64_t deadline_ns)
{
	uint32_t idx = st->free_head;
	if (idx == SLOT_NONE)
		return SLOT_NONE;
	struct slot *s = &st->slots[idx];
	st->free_head = s->next;
	s->state = SLOT_QUEUED;
	s->await_late = false;
	s->writing = false;
	s->answer_held = false;
	s->deadline_ns = deadline_ns;
	s->reply_data = NULL;
	s->reply_len = 0;
	s->next = s->prev = SLOT_NONE;
	st->used++;
	return idx;
}

void slots_link(struct slot_table *st, uint32_t idx)
{
	struct slot *s = &st->slots[idx];
	s->next = SLOT_NONE;
	s->prev = st->tail;
	if (st->tail != SLOT_NONE)
		st->slots[st->tail].next = idx;
	else
		st->head = idx;
	st->tail = idx;
}

void slots_unlink(struct slot_table *st, uint32_t idx)
{
	struct slot *s = &st->slots[idx];
	if (s->prev != SLOT_NONE)
		st->slots[s->prev].next = s->next;
	else
		st->head = s->next;
	if (s->next != SLOT_NONE)
		st->slots[s->next].prev = s->prev;
	else
		st->tail = s->prev;
	s->prev = s->next = SLOT_NONE;
}

void slots_free(struct slot_table *st, uint32_t idx)
{
	struct slot *s = &st->slots[idx];
	s->state = SLOT_FREE;
	s->req = NULL;
	s->await_late = false;
	s->gen = s->gen + 1 ? s->gen + 1 : 1;
	s->next = st->free_head;
	st->free_head = idx;
	st->used--;
}

struct slot *slots_lookup(struct slot_table *st, uint64_t id)
{
	uint32_t idx = (uint32_t)id, gen = (uint32_t)(id >> 32);
	if (idx >= st->nr)
		return NULL;
	struct slot *s = &st->slots[idx];
	if (s->gen != gen || s->state == SLOT_FREE)
		return NULL;
	return s;
}
