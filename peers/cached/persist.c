/*
 * cached's persist file: layout, open/create/lock, publish and clear of
 * slots, recovery. See persist.h for the format and the ordering rules.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "persist.h"
#include "persist_format.h"

static int say_why(char *why, size_t len, int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, len, fmt, ap);
	va_end(ap);
	return -err;
}

/* Writes a new superblock over the older copy; the other stays valid.
 * -errno when the msync failed: the kernel reports there a failed
 * write-back of any page of the file, once (at an open and recovery, a
 * dead process's, which recovery's rewrite of what it recovered mends). */
static int write_super(struct persist *p, uint32_t state)
{
	const struct persist_super *cur = newest_super(p->super);
	struct persist_super s;
	layout(&s, &p->geo);
	s.state = state;
	s.generation = ++p->super_gen;
	s.seq_floor = atomic_load(&p->next_seq);
	s.owner_pid = (int32_t)getpid();
	s.seg_port = p->geo.cache_port;
	s.seg_instance = p->geo.segment;
	s.seg_given_up = p->geo.given_up;
	s.sum = super_sum(&s);
	s.marker_len = (uint32_t)strlen(p->marker);
	memcpy(s.marker, p->marker, s.marker_len);
	s.marker_sum = marker_sum(&s);
	s.file_id = p->file_id;
	s.run = p->run;
	s.check_run = p->check_run;
	s.run_sum = run_sum(&s);
	s.ino = p->ino;
	s.ino_sum = ino_sum(&s);
	s.role = p->role;
	s.role_sum = role_sum(&s);
	struct persist_super *dst = cur == &p->super[0] ? &p->super[1] : &p->super[0];
	memcpy(dst, &s, sizeof(s));
	return msync(p->map, 2 * PAGE, MS_SYNC) < 0 ? -errno : 0;
}

int persist_set_check_run(struct persist *p)
{
	if (p->check_run == p->run)
		return 0;
	p->check_run = p->run;
	/* After recovery: a failure reported here is this run's, and no
	 * later fdatasync reports it again: the file's failed sync. */
	int rc = write_super(p, SUPER_IN_USE), none = 0;
	if (rc)
		atomic_compare_exchange_strong(&p->sync_error, &none, -rc);
	return rc;
}

int persist_set_marker(struct persist *p, const char *name)
{
	size_t len = strlen(name);
	if (len > PERSIST_MARKER_MAX)
		return -EINVAL;
	memcpy(p->marker, name, len + 1);
	write_super(p, SUPER_IN_USE);   /* synced (msync) before it returns */
	return 0;
}

int persist_set_role(struct persist *p, uint32_t role)
{
	if (p->role == role)
		return 0;
	p->role = role;
	/* A failure is the file's failed sync, as persist_set_check_run's */
	int rc = write_super(p, SUPER_IN_USE), none = 0;
	if (rc)
		atomic_compare_exchange_strong(&p->sync_error, &none, -rc);
	return rc;
}

/* Checks an existing file's superblock against what we were asked for,
 * without writing. */
static int check_existing(const struct persist_super *s, const struct persist_geometry *g,
			  const char *path, uint64_t file_size, char *why, size_t len)
{
	struct persist_super want;
	layout(&want, g);
	if (!s)
		return say_why(why, len, EINVAL, "--persist: '%s' is not a cached persist file "
			    "(no valid superblock); --persist-discard starts it afresh", path);
	if (s->version != PERSIST_VERSION)
		return say_why(why, len, EINVAL, "--persist: '%s' is format version %u, not %u", path,
			    s->version, PERSIST_VERSION);
	if (s->bucket_size != g->bucket_size || s->object_size != g->object_size ||
	    s->nr_slots != g->nr_slots || s->nr_objects != g->nr_objects)
		return say_why(why, len, EINVAL, "--persist: '%s' was made for bucket size %u, object "
			    "size %llu, %u buckets and %u objects, not %u, %llu, %u and %u", path,
			    s->bucket_size, (unsigned long long)s->object_size, s->nr_slots,
			    s->nr_objects, g->bucket_size, (unsigned long long)g->object_size,
			    g->nr_slots, g->nr_objects);
	if (s->blocker_port != g->blocker_port)
		return say_why(why, len, EINVAL, "--persist: '%s' holds data for blocker port %u, "
			    "not %u", path, s->blocker_port, g->blocker_port);
	if (s->file_size != want.file_size || file_size < want.file_size)
		return say_why(why, len, EINVAL, "--persist: '%s' is %llu bytes, its superblock says "
			    "%llu", path, (unsigned long long)file_size,
			    (unsigned long long)s->file_size);
	return 0;
}

static int map_file(struct persist *p, uint64_t size, char *why, size_t len)
{
	void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, p->fd, 0);
	if (m == MAP_FAILED)
		return say_why(why, len, errno, "--persist: cannot map '%s': %s", p->path,
			    strerror(errno));
	p->map = m;
	p->map_bytes = size;
	struct persist_super s;
	layout(&s, &p->geo);
	p->super = (struct persist_super *)p->map;
	p->objects = (struct persist_object *)(p->map + s.objects_off);
	p->slots = (struct persist_slot *)(p->map + s.slots_off);
	p->data = p->map + s.data_off;
	return 0;
}

/* This opening's run, and the file's id where it has none yet (a new
 * file, or one of a build before ids). */
static void name_run(struct persist *p)
{
	while (!p->file_id && getrandom(&p->file_id, sizeof(p->file_id), 0) != sizeof(p->file_id))
		p->file_id = XXH3_64bits_withSeed(p->path, strlen(p->path),
						  (uint64_t)getpid() ^ (uint64_t)time(NULL));
	p->run = p->last_run + 1;
	if (!p->check_run)
		p->check_run = p->last_run;   /* a file of a build before them */
}

/* A new file (or one discarded): preallocated (a write fault into a hole
 * of a full file system is a SIGBUS), zeroed, synced. */
static int format(struct persist *p, char *why, size_t len)
{
	struct persist_super s;
	layout(&s, &p->geo);
	if (ftruncate(p->fd, 0) < 0 || (errno = posix_fallocate(p->fd, 0, (off_t)s.file_size)))
		return say_why(why, len, errno, "--persist: cannot make '%s' %llu bytes: %s", p->path,
			    (unsigned long long)s.file_size, strerror(errno));
	int rc = map_file(p, s.file_size, why, len);
	if (rc)
		return rc;
	atomic_store(&p->next_seq, 1);
	p->super_gen = 0;
	p->nr_free_objects = 0;
	for (uint32_t i = p->geo.nr_objects; i-- > 0;)
		p->obj_free[p->nr_free_objects++] = i;
	name_run(p);
	p->check_run = p->run;   /* nothing in it */
	write_super(p, SUPER_IN_USE);
	if (fdatasync(p->fd) < 0)
		return say_why(why, len, errno, "--persist: cannot sync '%s': %s", p->path,
			    strerror(errno));
	return 0;
}

/* Counts the dirty bytes an existing file holds (for --persist-discard's word). */
static uint64_t valid_bytes(const struct persist_super *s, const unsigned char *map,
			    uint64_t size)
{
	uint64_t n = 0;
	/* a superblock with a good checksum may still be a crafted one: no overflow */
	if (!s || s->data_off > size || s->slots_off > size || s->nr_slots > (size - s->slots_off) / 64)
		return 0;
	const struct persist_slot *h = (const struct persist_slot *)(map + s->slots_off);
	for (uint32_t i = 0; i < s->nr_slots; i++)
		if (h[i].seq && h[i].sum == slot_sum(&h[i]))
			n += s->bucket_size;
	return n;
}

/* The port this file serves gave dirty data up since the file was last
 * written in this segment (a new segment, after a reboot or `xseg up`,
 * knows nothing of it: the file is then the only copy). */
/* This port was left dirty, and the file was last used by another port
 * of this segment. A file of another segment instance may be this port's
 * (a segment made again after a reboot, which `xseg up` marks dirty
 * itself for the file it names): only the same segment tells. */
static bool stamped_elsewhere(const struct persist_super *s, const struct persist_geometry *g)
{
	return g->left_dirty && g->segment && s->seg_instance == g->segment &&
	       s->seg_port != g->cache_port;
}

static bool given_up_since(const struct persist_super *s, const struct persist_geometry *g)
{
	return g->segment && s->seg_instance == g->segment && s->seg_port == g->cache_port &&
	       g->given_up > s->seg_given_up;
}

static int alloc_tables(struct persist *p, char *why, size_t len)
{
	p->obj_refs = calloc(p->geo.nr_objects, sizeof(*p->obj_refs));
	p->obj_free = calloc(p->geo.nr_objects, sizeof(*p->obj_free));
	if (!p->obj_refs || !p->obj_free)
		return say_why(why, len, ENOMEM, "--persist: no memory for %u object records",
			    p->geo.nr_objects);
	return 0;
}

int persist_open(struct persist *p, const char *path, const struct persist_geometry *g,
		 bool discard, uint64_t *discarded_bytes, char *why, size_t len)
{
	struct stat st;
	memset(p, 0, sizeof(*p));
	p->fd = -1;
	p->path = path;
	p->geo = *g;
	pthread_mutex_init(&p->objects_lock, NULL);
	if (discarded_bytes)
		*discarded_bytes = 0;
	if (!g->nr_slots || !g->nr_objects || !g->bucket_size || g->bucket_size % 512)
		return say_why(why, len, EINVAL, "--persist: bad geometry");
	p->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (p->fd < 0)
		return say_why(why, len, errno, "--persist: cannot open '%s': %s", path,
			    strerror(errno));
	if (fstat(p->fd, &st) < 0 || !S_ISREG(st.st_mode))
		return say_why(why, len, EINVAL, "--persist: '%s' is not a regular file", path);
	p->ino = (uint64_t)st.st_ino;
	if (flock(p->fd, LOCK_EX | LOCK_NB) < 0) {
		int pid = 0;
		struct persist_super two[2];
		if (pread(p->fd, two, sizeof(two), 0) == (ssize_t)sizeof(two) && newest_super(two))
			pid = newest_super(two)->owner_pid;
		if (pid <= 0)   /* locked, its superblock not written yet */
			return say_why(why, len, EBUSY, "--persist: '%s' is in use by another "
				    "cached", path);
		return say_why(why, len, EBUSY, "--persist: '%s' is in use by another cached "
			    "(pid %d)", path, pid);
	}
	int rc = alloc_tables(p, why, len);
	if (rc)
		return rc;
	if (st.st_size == 0)
		return format(p, why, len);

	/* An existing file: look before touching anything. */
	void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, p->fd, 0);
	if (m == MAP_FAILED)
		return say_why(why, len, errno, "--persist: cannot map '%s': %s", path,
			    strerror(errno));
	const struct persist_super *s = st.st_size >= 2 * PAGE ? newest_super(m) : NULL;
	rc = check_existing(s, g, path, (uint64_t)st.st_size, why, len);
	uint64_t held = valid_bytes(s, m, (uint64_t)st.st_size);
	if (discard && discarded_bytes)
		*discarded_bytes = held;
	if (!rc && !discard && held && given_up_since(s, g))
		rc = say_why(why, len, ESTALE, "--persist: '%s' holds %llu dirty bytes that `xseg "
			     "unplug --force` gave up on port %u after the file was last used; the "
			     "blocker may hold newer data: --persist-discard drops them", path,
			     (unsigned long long)held, g->cache_port);
	if (!rc && !discard && held && stamped_elsewhere(s, g))
		rc = say_why(why, len, EPERM, "--persist: port %u was left marked dirty (%llu bytes) "
			     "by the cache before, but '%s' was last used by port %u of this "
			     "segment: not that cache's file", g->cache_port,
			     (unsigned long long)g->left_dirty, path, s->seg_port);
	/* A promoted replica's own writes (or a plain cache's) are the only
	 * copy of what it acknowledged: as a replica's, they would be
	 * refused a write-back and dropped at the next primary's reset (a
	 * review: a promoted cache crashed, its unit started it with
	 * --replica again, a new primary's reset dropped 8M). */
	if (!rc && !discard && held && g->replica && super_role(s) == PERSIST_ROLE_OWN)
		rc = say_why(why, len, EPERM, "--persist: '%s' holds %llu dirty bytes a cache "
			     "acknowledged itself (a promoted replica, or no replica at all), not a "
			     "primary's copies: a replica would drop them at a reset; start it without "
			     "--replica to write them back (--persist-discard drops them)", path,
			     (unsigned long long)held);
	/* And a replica's copies may be older than the store's (its primary
	 * degraded and wrote newer ones through): only a promote, which reads
	 * the primary's marker first, may write them back, not a start
	 * without --replica (a review: seed 2, acknowledged, written over by
	 * the replica's seed 1). */
	if (!rc && !discard && held && !g->replica && super_role(s) == PERSIST_ROLE_REPLICA)
		rc = say_why(why, len, EPERM, "--persist: '%s' holds %llu dirty bytes of a replica, "
			     "its primary's copies, which may be older than the blocker's: start it "
			     "with --replica (`xseg promote` writes them back where the primary's "
			     "marker allows), or --persist-discard drops them", path,
			     (unsigned long long)held);
	if (!rc) {
		p->left_here = s->state == SUPER_IN_USE && g->segment &&
			       s->seg_instance == g->segment && s->seg_port == g->cache_port;
		p->super_gen = s->generation;
		super_marker(s, p->marker);
		p->role = super_role(s);
		if (s->run_sum == run_sum(s)) {
			p->file_id = s->file_id;
			p->last_run = s->run;
			p->check_run = s->check_run;
		}
		/* A copy (cp) of a file holding nothing dirty: an id of its
		 * own, or the copies share the persist marker's name and run
		 * numbers, and one's word governs the other's data later
		 * (test_cached_engine persist_clean_copy_gets_its_own_marker).
		 * A copy holding dirty data keeps the id: the word on that
		 * data is the original's (a file restored from a copy). */
		if (p->file_id && s->ino_sum == ino_sum(s) && s->ino && s->ino != p->ino) {
			p->copy_forked = !held;
			p->copy_dirty = held;
			if (!held)
				p->file_id = 0;   /* name_run draws one */
		}
		bool sane = s->seq_floor && s->seq_floor < PERSIST_SEQ_LIMIT;
		atomic_store(&p->next_seq, sane ? s->seq_floor : 1);
	}
	munmap(m, (size_t)st.st_size);
	/* Discarded: a new id too. A copy kept of what it held (the advice
	 * of a `failed` word) reads the old id's word about that data; this
	 * file's later words are about other data (test_cached_engine
	 * persist_discard_takes_a_new_marker). */
	if (discard) {
		p->file_id = 0;
		return format(p, why, len);
	}
	if (rc)
		return rc;
	name_run(p);   /* stored by persist_recover's superblock */
	rc = map_file(p, (uint64_t)st.st_size, why, len);
	if (rc || !p->copy_forked)
		return rc;
	/* The new id durable before this run can write a word under it: a
	 * restart must read where it wrote. Its state kept (recovery reads it). */
	const struct persist_super *now = newest_super(p->super);
	p->check_run = p->run;   /* nothing in it */
	if ((rc = write_super(p, now ? now->state : SUPER_IN_USE)) < 0 ||
	    (fdatasync(p->fd) < 0 && (rc = -errno)))
		return say_why(why, len, -rc, "--persist: cannot record '%s''s new id (a copy of "
			    "another file): %s", path, strerror(-rc));
	return 0;
}

/* ---- recovery ------------------------------------------------------------ */

struct candidate {
	uint64_t seq;
	uint32_t slot;
};

static int by_seq(const void *a, const void *b)
{
	const struct candidate *x = a, *y = b;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static void clear_header(struct persist_slot *h)
{
	atomic_store_explicit((_Atomic uint64_t *)&h->seq, 0, memory_order_release);
	h->sum = 0;
}

/* Drops what no valid object names; returns whether the object is usable. */
static bool object_ok(struct persist *p, uint32_t i, struct persist_recovery *r)
{
	struct persist_object *o = &p->objects[i];
	if (!o->gen)
		return false;
	if (o->sum != object_sum(o) || o->name_len == 0 || o->name_len > PERSIST_NAME_MAX) {
		r->bad_objects++;
		memset(o, 0, sizeof(*o));
		return false;
	}
	return true;
}

/* A header worth keeping so far, or cleared and counted. */
static bool slot_ok(struct persist *p, uint32_t i, const bool *obj_valid,
		    struct persist_recovery *r)
{
	struct persist_slot *h = &p->slots[i];
	if (!h->seq)
		return false;
	if (h->sum != slot_sum(h) || h->seq >= PERSIST_SEQ_LIMIT) {
		r->torn_headers++;
	} else if (h->object >= p->geo.nr_objects || !obj_valid[h->object] ||
		   p->objects[h->object].gen != h->object_gen ||
		   h->bucket >= p->geo.object_size / p->geo.bucket_size) {
		r->orphans++;
	} else if (XXH3_64bits(persist_slot_data(p, i), p->geo.bucket_size) != h->data_sum) {
		r->torn_data++;
	} else {
		return true;
	}
	clear_header(h);
	return false;
}

/* Of two versions of one bucket the higher seq wins; the other is cleared.
 * `best` is an open-addressing table of `mask + 1` slot numbers. */
static void keep_newest(struct persist *p, uint32_t *best, uint64_t mask, uint32_t i,
			struct persist_recovery *r)
{
	uint64_t key = (uint64_t)p->slots[i].object * (p->geo.object_size / p->geo.bucket_size) +
		       p->slots[i].bucket;
	uint64_t h = XXH3_64bits(&key, sizeof(key)) & mask;
	for (;; h = (h + 1) & mask) {
		uint32_t j = best[h];
		if (j == UINT32_MAX) {
			best[h] = i;
			return;
		}
		struct persist_slot *a = &p->slots[j], *b = &p->slots[i];
		if (a->object != b->object || a->bucket != b->bucket)
			continue;
		r->older_versions++;
		if (b->seq > a->seq) {
			clear_header(a);
			best[h] = i;
		} else {
			clear_header(b);
		}
		return;
	}
}

static uint64_t pow2_at_least(uint64_t n)
{
	uint64_t x = 1;
	while (x < n)
		x <<= 1;
	return x;
}

/* Marks [ptr, ptr + len) dirty in the page cache: a byte of each page
 * written back as it is (a write fault on the shared mapping). */
static void redirty(unsigned char *ptr, uint64_t len)
{
	volatile unsigned char *b = ptr;
	for (uint64_t off = 0; off < len; off += PAGE)
		b[off] = b[off];
}

int persist_recover(struct persist *p, persist_recover_fn fn, void *arg,
		    struct persist_recovery *r)
{
	memset(r, 0, sizeof(*r));
	const struct persist_super *s = newest_super(p->super);
	r->was_clean = s && s->state == SUPER_CLEAN;
	r->was_kept = s && s->state == SUPER_KEPT;
	r->left_here = p->left_here;
	uint64_t table = pow2_at_least((uint64_t)p->geo.nr_slots * 2);
	bool *obj_valid = calloc(p->geo.nr_objects, sizeof(*obj_valid));
	uint32_t *best = malloc(table * sizeof(*best));
	struct candidate *c = malloc((size_t)p->geo.nr_slots * sizeof(*c));
	if (!obj_valid || !best || !c) {
		free(obj_valid); free(best); free(c);
		return -ENOMEM;
	}
	memset(best, 0xff, table * sizeof(*best));
	for (uint32_t i = 0; i < p->geo.nr_objects; i++)
		obj_valid[i] = object_ok(p, i, r);
	if (drop_superseded_records(p->objects, p->geo.nr_objects, obj_valid)) {
		free(obj_valid); free(best); free(c);
		return -ENOMEM;
	}

	uint64_t max_seq = atomic_load(&p->next_seq);
	uint32_t n = 0;
	for (uint32_t i = 0; i < p->geo.nr_slots; i++)
		if (slot_ok(p, i, obj_valid, r))
			keep_newest(p, best, table - 1, i, r);
	for (uint64_t h = 0; h < table; h++) {
		uint32_t i = best[h];
		if (i == UINT32_MAX || !p->slots[i].seq)
			continue;
		c[n++] = (struct candidate){ .seq = p->slots[i].seq, .slot = i };
		if (p->slots[i].seq >= max_seq)
			max_seq = p->slots[i].seq + 1;
	}
	qsort(c, n, sizeof(*c), by_seq);
	atomic_store(&p->next_seq, max_seq);

	/*
	 * After a crash, what recovery keeps is written again before the
	 * caller's sync: a write-back of the dead process's that failed
	 * (Linux reports it to one fsync, the dead one's, and marks the pages
	 * clean) left pages that read back right from the page cache but are
	 * not on the device, and a sync now would find nothing to write and
	 * promise them durable (a host crash later: older bytes). The tables
	 * and the kept slots' data, once each.
	 */
	if (!r->was_clean && !r->was_kept && n) {
		redirty((unsigned char *)p->objects, (uint64_t)(p->data - (unsigned char *)p->objects));
		for (uint32_t k = 0; k < n; k++)
			redirty(persist_slot_data(p, c[k].slot), p->geo.bucket_size);
		r->rewritten_bytes = (uint64_t)(p->data - (unsigned char *)p->objects) +
				     (uint64_t)n * p->geo.bucket_size;
	}

	int rc = 0;
	for (uint32_t k = 0; k < n && !rc; k++) {
		struct persist_slot *h = &p->slots[c[k].slot];
		struct persist_object *o = &p->objects[h->object];
		if (!p->obj_refs[h->object]++) {
			p->obj_refs[h->object]++;   /* the caller's hold, as persist_object_get */
			r->objects++;
		}
		r->slots++;
		r->bytes += p->geo.bucket_size;
		rc = fn(arg, o->name, o->name_len, h->object, h->bucket, c[k].slot);
	}
	/* Records nobody names are free again. */
	p->nr_free_objects = 0;
	for (uint32_t i = p->geo.nr_objects; i-- > 0;) {
		if (p->obj_refs[i])
			continue;
		if (p->objects[i].gen)
			p->objects[i].sum = 0, p->objects[i].gen = 0;
		p->obj_free[p->nr_free_objects++] = i;
	}
	free(obj_valid); free(best); free(c);
	if (!rc)
		write_super(p, SUPER_IN_USE);
	return rc;
}

/* ---- the running cache ----------------------------------------------------- */

uint32_t persist_object_get(struct persist *p, const char *name, uint32_t name_len)
{
	if (!name_len || name_len > PERSIST_NAME_MAX)
		return PERSIST_NO_OBJECT;
	pthread_mutex_lock(&p->objects_lock);
	if (!p->nr_free_objects) {
		pthread_mutex_unlock(&p->objects_lock);
		return PERSIST_NO_OBJECT;
	}
	uint32_t i = p->obj_free[--p->nr_free_objects];
	p->obj_refs[i] = 1;   /* the caller's hold */
	pthread_mutex_unlock(&p->objects_lock);
	struct persist_object *o = &p->objects[i];
	/* A new generation each use: slots of the record's last object that
	 * were not cleared (cannot happen, but) never name this one. */
	uint64_t gen = atomic_fetch_add(&p->next_seq, 1);
	o->sum = 0;
	o->gen = gen;
	o->name_len = name_len;
	memcpy(o->name, name, name_len);
	memset(o->name + name_len, 0, sizeof(o->name) - name_len);
	atomic_thread_fence(memory_order_release);
	o->sum = object_sum(o);
	return i;
}

/* Drops one reference; the last one frees the record (cleared in the file
 * first, so a crash never finds a record nothing names... or finds it and
 * frees it at recovery). */
static void ref_drop(struct persist *p, uint32_t object)
{
	pthread_mutex_lock(&p->objects_lock);
	if (object < p->geo.nr_objects && p->obj_refs[object] && !--p->obj_refs[object]) {
		struct persist_object *o = &p->objects[object];
		o->sum = 0;
		o->gen = 0;
		p->obj_free[p->nr_free_objects++] = object;
	}
	pthread_mutex_unlock(&p->objects_lock);
}

void persist_object_put(struct persist *p, uint32_t object)
{
	ref_drop(p, object);
}

void persist_publish(struct persist *p, uint32_t slot, uint32_t object, uint32_t bucket)
{
	struct persist_slot *h = &p->slots[slot];
	pthread_mutex_lock(&p->objects_lock);
	p->obj_refs[object]++;
	pthread_mutex_unlock(&p->objects_lock);
	h->sum = 0;   /* a header half written never checks out */
	atomic_thread_fence(memory_order_release);
	h->object = object;
	h->bucket = bucket;
	h->object_gen = p->objects[object].gen;
	h->data_sum = XXH3_64bits(persist_slot_data(p, slot), p->geo.bucket_size);
	h->seq = atomic_fetch_add(&p->next_seq, 1);
	atomic_thread_fence(memory_order_release);
	h->sum = slot_sum(h);
}

void persist_clear(struct persist *p, uint32_t slot)
{
	struct persist_slot *h = &p->slots[slot];
	uint32_t object = h->object;
	if (!h->seq)
		return;
	clear_header(h);
	ref_drop(p, object);
}

uint64_t persist_slot_seq(const struct persist *p, uint32_t slot)
{
	return __atomic_load_n(&p->slots[slot].seq, __ATOMIC_RELAXED);
}

bool persist_slot_published(const struct persist *p, uint32_t slot)
{
	return slot < p->geo.nr_slots && p->slots[slot].seq != 0;
}

int persist_sync(struct persist *p)
{
	int err = atomic_load(&p->sync_error);
	if (err)
		return -err;
	if (fdatasync(p->fd) < 0) {
		err = errno;
		atomic_store(&p->sync_error, err);
		return -err;
	}
	return 0;
}

void persist_close_kept(struct persist *p)
{
	/* The data and headers first: KEPT says they are on the device. */
	if (p->map && !atomic_load(&p->sync_error) && msync(p->map, p->map_bytes, MS_SYNC) == 0)
		write_super(p, SUPER_KEPT);
	persist_close(p, false);
}

void persist_close(struct persist *p, bool clean)
{
	if (p->map) {
		if (clean)
			write_super(p, SUPER_CLEAN);
		msync(p->map, p->map_bytes, MS_SYNC);
		munmap(p->map, p->map_bytes);
	}
	if (p->fd >= 0)
		close(p->fd);   /* drops the lock */
	free(p->obj_refs);
	free(p->obj_free);
	pthread_mutex_destroy(&p->objects_lock);
	memset(p, 0, sizeof(*p));
	p->fd = -1;
}
