/*
 * The persist file's on-disk format, private to persist.c (which writes
 * it) and persist_inspect.c (which only reads it). See persist.h for the
 * layout and the ordering rules.
 */
#ifndef CACHED_PERSIST_FORMAT_H
#define CACHED_PERSIST_FORMAT_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "persist.h"

#define PERSIST_MAGIC   "XSEGPCF"   /* 8 bytes with the NUL */
#define PERSIST_VERSION 2u   /* 2: the segment stamp */
#define PAGE            4096u

/* KEPT: its cached stopped with dirty data in it, everything synced
 * first (a replica's data, a stop that gave up); IN_USE: open, or left by
 * a crash. */
enum { SUPER_CLEAN = 1, SUPER_IN_USE = 2, SUPER_KEPT = 3 };

struct persist_super {
	char magic[8];
	uint32_t version;
	uint32_t state;              /* SUPER_CLEAN, SUPER_IN_USE or SUPER_KEPT */
	uint64_t generation;         /* the higher valid copy counts */
	uint64_t object_size;
	uint32_t bucket_size;
	uint32_t nr_slots;
	uint32_t nr_objects;
	uint32_t blocker_port;
	uint64_t objects_off, slots_off, data_off, file_size;
	uint64_t seq_floor;          /* every seq in the file is below it at a clean close */
	int32_t owner_pid;           /* the last process that opened it */
	uint32_t seg_port;           /* the segment stamp: the cache's port, */
	uint64_t seg_instance;       /* ... its segment (0: unknown) */
	uint64_t seg_given_up;       /* ... and the port's give-ups, when last written */
	uint64_t sum;                /* of everything above */
	/* A replica's: its primary's stale-replica marker (engine.h). Summed
	 * on its own: a file of a build before it has zeros here, no name. */
	uint64_t marker_sum;         /* of marker_len and marker */
	uint32_t marker_len;
	char marker[PERSIST_MARKER_MAX + 1];
	/* The file's name for itself and the count of the processes that
	 * opened it (persist.h: file_id, run), summed on their own: zeros in
	 * a file of a build before them (then a new id). */
	unsigned char pad[3];
	uint64_t file_id;
	uint64_t run;
	uint64_t check_run;
	uint64_t run_sum;            /* of file_id, run and check_run */
	/* The inode the file had when last written, summed on its own (zeros:
	 * a build before it, unknown): a file found under another inode is a
	 * copy (persist.c gives a clean one an id of its own). */
	uint64_t ino;
	uint64_t ino_sum;
	/* Whose dirty data it holds (persist.h: PERSIST_ROLE_*), summed on
	 * its own: zeros in a file of a build before it (unknown). */
	uint64_t role;
	uint64_t role_sum;
	unsigned char unused[PAGE - 120 - 12 - (PERSIST_MARKER_MAX + 1) - 3 - 32 - 16 - 16];
};
_Static_assert(sizeof(struct persist_super) == PAGE, "one page per superblock copy");

struct persist_object {
	uint64_t gen;                /* 0 = free */
	uint32_t name_len;
	uint32_t pad;
	char name[PERSIST_NAME_MAX + 1];
	uint64_t sum;
};

/* No writer gets near it (2^62 publishes: over a century at 10^9 a
 * second); a seq or seq_floor at or past it is damage, so the counter,
 * restarted above the highest seq found, can never wrap to 0 ("free"). */
#define PERSIST_SEQ_LIMIT (UINT64_C(1) << 62)

struct persist_slot {
	uint64_t seq;                /* 0 = free */
	uint64_t object_gen;
	uint32_t object;
	uint32_t bucket;
	uint64_t data_sum;
	uint64_t sum;                /* of the fields above; written last */
	unsigned char pad[24];
};
_Static_assert(sizeof(struct persist_slot) == 64, "a header is one cache line");

static inline uint64_t round_page(uint64_t n) { return (n + PAGE - 1) / PAGE * PAGE; }

static inline uint64_t super_sum(const struct persist_super *s)
{
	return XXH3_64bits(s, offsetof(struct persist_super, sum));
}

static inline uint64_t marker_sum(const struct persist_super *s)
{
	return XXH3_64bits(&s->marker_len, sizeof(s->marker_len) + sizeof(s->marker));
}

static inline uint64_t run_sum(const struct persist_super *s)
{
	return XXH3_64bits(&s->file_id, sizeof(s->file_id) + sizeof(s->run) + sizeof(s->check_run));
}

static inline uint64_t ino_sum(const struct persist_super *s)
{
	return XXH3_64bits_withSeed(&s->ino, sizeof(s->ino), 0x696e6fu);
}

static inline uint64_t role_sum(const struct persist_super *s)
{
	return XXH3_64bits(&s->role, sizeof(s->role));
}

/* The role a superblock holds, PERSIST_ROLE_UNKNOWN where none is valid. */
static inline uint32_t super_role(const struct persist_super *s)
{
	return s && s->role_sum == role_sum(s) && s->role <= PERSIST_ROLE_OWN ?
	       (uint32_t)s->role : PERSIST_ROLE_UNKNOWN;
}

/* The replica's marker name a superblock holds into out (at least
 * PERSIST_MARKER_MAX + 1 bytes), "" where none is valid. */
static inline void super_marker(const struct persist_super *s, char *out)
{
	out[0] = '\0';
	if (s && s->marker_len <= PERSIST_MARKER_MAX && s->marker_sum == marker_sum(s) &&
	    !memchr(s->marker, '\0', s->marker_len)) {
		memcpy(out, s->marker, s->marker_len);
		out[s->marker_len] = '\0';
	}
}

static inline uint64_t object_sum(const struct persist_object *o)
{
	return XXH3_64bits(o, offsetof(struct persist_object, sum));
}

static inline uint64_t slot_sum(const struct persist_slot *h)
{
	return XXH3_64bits(h, offsetof(struct persist_slot, sum));
}

/* The layout a geometry asks for, in a superblock. */
static inline void layout(struct persist_super *s, const struct persist_geometry *g)
{
	memset(s, 0, sizeof(*s));
	memcpy(s->magic, PERSIST_MAGIC, sizeof(s->magic));
	s->version = PERSIST_VERSION;
	s->object_size = g->object_size;
	s->bucket_size = g->bucket_size;
	s->nr_slots = g->nr_slots;
	s->nr_objects = g->nr_objects;
	s->blocker_port = g->blocker_port;
	s->objects_off = 2 * PAGE;
	s->slots_off = s->objects_off +
		       round_page((uint64_t)g->nr_objects * sizeof(struct persist_object));
	s->data_off = s->slots_off + round_page((uint64_t)g->nr_slots * sizeof(struct persist_slot));
	s->file_size = s->data_off + (uint64_t)g->nr_slots * g->bucket_size;
}

/* The valid copy with the higher generation, or NULL. */
static inline const struct persist_super *newest_super(const struct persist_super *two)
{
	const struct persist_super *best = NULL;
	for (int i = 0; i < 2; i++) {
		const struct persist_super *s = &two[i];
		if (memcmp(s->magic, PERSIST_MAGIC, sizeof(s->magic)) || s->sum != super_sum(s))
			continue;
		if (!best || s->generation > best->generation)
			best = s;
	}
	return best;
}

struct persist_named {
	uint64_t hash;
	uint32_t object;
};

static inline int persist_by_hash(const void *a, const void *b)
{
	const struct persist_named *x = a, *y = b;
	return x->hash < y->hash ? -1 : x->hash > y->hash;
}

/* Of two valid records (valid[i]) naming one object, only the newer
 * (higher generation) stands: valid[] of the older is cleared. The object
 * took the newer one after the older was freed, which needs every version
 * under it written back: those headers are there only because a host
 * crash lost their clears (and the record's), and are older than what the
 * blocker has. 0 or -ENOMEM. */
static inline int drop_superseded_records(const struct persist_object *o, uint32_t nr, bool *valid)
{
	struct persist_named *v = malloc((size_t)nr * sizeof(*v) + 1);
	if (!v)
		return -ENOMEM;
	uint32_t n = 0;
	for (uint32_t i = 0; i < nr; i++)
		if (valid[i])
			v[n++] = (struct persist_named){ XXH3_64bits(o[i].name, o[i].name_len), i };
	qsort(v, n, sizeof(*v), persist_by_hash);
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t j = i + 1; j < n && v[j].hash == v[i].hash; j++) {
			const struct persist_object *a = &o[v[i].object], *b = &o[v[j].object];
			if (!valid[v[i].object] || !valid[v[j].object] || a->name_len != b->name_len ||
			    memcmp(a->name, b->name, a->name_len))
				continue;
			valid[a->gen < b->gen ? v[i].object : v[j].object] = false;
		}
	free(v);
	return 0;
}

#endif
