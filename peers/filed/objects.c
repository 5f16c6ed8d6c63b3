/*
 * The dirty-name set and the per-thread fd cache of filed.
 */
#include "objects.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

uint64_t obj_hash(const char *name, size_t len)
{
	uint64_t x = 1469598103934665603ull;
	for (size_t i = 0; i < len; i++)
		x = (x ^ (unsigned char)name[i]) * 1099511628211ull;
	return x;
}

/* ---- name set --------------------------------------------------------------- */

void obj_set_init(struct obj_set *s)
{
	s->buckets = NULL;
	s->nr_buckets = 0;
	s->count = 0;
}

void obj_set_destroy(struct obj_set *s)
{
	struct obj_name *n = obj_set_take_all(s);
	while (n) {
		struct obj_name *next = n->next;
		free(n);
		n = next;
	}
	free(s->buckets);
	obj_set_init(s);
}

static int grow(struct obj_set *s)
{
	size_t nb = s->nr_buckets ? s->nr_buckets * 2 : 64;
	struct obj_name **b = calloc(nb, sizeof(*b));
	if (!b)
		return -ENOMEM;
	for (size_t i = 0; i < s->nr_buckets; i++) {
		struct obj_name *n = s->buckets[i];
		while (n) {
			struct obj_name *next = n->next;
			n->next = b[n->hash & (nb - 1)];
			b[n->hash & (nb - 1)] = n;
			n = next;
		}
	}
	free(s->buckets);
	s->buckets = b;
	s->nr_buckets = nb;
	return 0;
}

static struct obj_name **find(struct obj_set *s, const char *name, size_t len, uint64_t h)
{
	struct obj_name **pp = &s->buckets[h & (s->nr_buckets - 1)];
	for (; *pp; pp = &(*pp)->next)
		if ((*pp)->hash == h && (*pp)->len == len && !memcmp((*pp)->name, name, len))
			return pp;
	return pp;
}

int obj_set_add(struct obj_set *s, const char *name, size_t len)
{
	uint64_t h = obj_hash(name, len);
	if ((s->count + 1 > s->nr_buckets * 2) && grow(s) < 0 && !s->nr_buckets)
		return -ENOMEM;
	struct obj_name **pp = find(s, name, len, h);
	if (*pp)
		return 0;
	struct obj_name *n = malloc(sizeof(*n) + len + 1);
	if (!n)
		return -ENOMEM;
	n->next = NULL;
	n->hash = h;
	n->len = (uint32_t)len;
	memcpy(n->name, name, len);
	n->name[len] = '\0';
	*pp = n;
	s->count++;
	return 0;
}

struct obj_name *obj_set_remove(struct obj_set *s, const char *name, size_t len)
{
	if (!s->nr_buckets)
		return NULL;
	struct obj_name **pp = find(s, name, len, obj_hash(name, len));
	struct obj_name *n = *pp;
	if (n) {
		*pp = n->next;
		n->next = NULL;
		s->count--;
	}
	return n;
}

bool obj_set_has(struct obj_set *s, const char *name, size_t len)
{
	return s->nr_buckets && *find(s, name, len, obj_hash(name, len));
}

struct obj_name *obj_set_take_all(struct obj_set *s)
{
	struct obj_name *list = NULL;
	for (size_t i = 0; i < s->nr_buckets; i++) {
		struct obj_name *n = s->buckets[i];
		while (n) {
			struct obj_name *next = n->next;
			n->next = list;
			list = n;
			n = next;
		}
		s->buckets[i] = NULL;
	}
	s->count = 0;
	return list;
}

/* ---- fd cache ------------------------------------------------------------------ */

int fd_cache_init(struct fd_cache *c, unsigned capacity, int dirfd, _Atomic uint64_t *epoch,
		  struct dir_sync *dir)
{
	c->entries = calloc(capacity ? capacity : 1, sizeof(*c->entries));
	if (!c->entries)
		return -ENOMEM;
	c->count = 0;
	c->capacity = capacity ? capacity : 1;
	c->tick = 0;
	c->dirfd = dirfd;
	c->epoch = epoch;
	c->dir = dir;
	return 0;
}

static void drop(struct fd_cache *c, unsigned i)
{
	close(c->entries[i].fd);
	c->entries[i] = c->entries[--c->count];
}

void fd_cache_destroy(struct fd_cache *c)
{
	while (c->count)
		drop(c, c->count - 1);
	free(c->entries);
	c->entries = NULL;
}

/* A create marks the directory at once, not after its write (struct dir_sync). */
static int open_object(struct fd_cache *c, const char *name, bool create)
{
	const int base = O_RDWR | O_NOFOLLOW | O_CLOEXEC;
	int fd = openat(c->dirfd, name, base);
	if (fd >= 0 || errno != ENOENT || !create)
		return fd >= 0 ? fd : -errno;
	pthread_mutex_lock(&c->dir->lock);
	fd = openat(c->dirfd, name, base | O_CREAT | O_EXCL, 0600);
	int err = errno;
	if (fd >= 0)
		atomic_store(&c->dir->dirty, 1);
	pthread_mutex_unlock(&c->dir->lock);
	if (fd >= 0)
		return fd;
	if (err != EEXIST)
		return -err;
	fd = openat(c->dirfd, name, base);   /* another thread created it */
	return fd >= 0 ? fd : -errno;
}

int fd_cache_get(struct fd_cache *c, const char *name, size_t len, bool create)
{
	uint64_t h = obj_hash(name, len);
	uint64_t epoch = atomic_load_explicit(c->epoch, memory_order_acquire);

	if (len >= sizeof(c->entries[0].name))
		return -ENAMETOOLONG;
	for (unsigned i = 0; i < c->count; i++) {
		struct fd_entry *e = &c->entries[i];
		if (e->hash != h || e->len != len || memcmp(e->name, name, len))
			continue;
		if (e->epoch == epoch) {
			e->used = ++c->tick;
			return e->fd;
		}
		drop(c, i);   /* opened before a DELETE: the name may be a new file now */
		break;
	}
	int fd = open_object(c, name, create);
	if (fd < 0)
		return fd;
	if (c->count == c->capacity) {
		unsigned lru = 0;
		for (unsigned i = 1; i < c->count; i++)
			if (c->entries[i].used < c->entries[lru].used)
				lru = i;
		drop(c, lru);
	}
	struct fd_entry *e = &c->entries[c->count++];
	e->hash = h;
	e->epoch = epoch;
	e->used = ++c->tick;
	e->fd = fd;
	e->len = (uint32_t)len;
	memcpy(e->name, name, len);
	e->name[len] = '\0';
	return fd;
}
