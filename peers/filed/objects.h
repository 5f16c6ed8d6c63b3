/*
 * filed's bookkeeping of objects: a set of names (the objects written since
 * the last FLUSH) and a small per-thread cache of open files. Names are
 * checked before they get here (include/peer/blocker.h).
 */
#ifndef FILED_OBJECTS_H
#define FILED_OBJECTS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

uint64_t obj_hash(const char *name, size_t len);

/* ---- a set of names (not thread-safe: the caller locks) ----------------- */

struct obj_name {
	struct obj_name *next;
	uint64_t hash;
	uint32_t len;
	char name[];        /* NUL-terminated */
};

struct obj_set {
	struct obj_name **buckets;
	size_t nr_buckets;  /* a power of two */
	size_t count;
};

void obj_set_init(struct obj_set *s);
void obj_set_destroy(struct obj_set *s);
/* Adds the name unless present: 0, or -ENOMEM. */
int obj_set_add(struct obj_set *s, const char *name, size_t len);
/* Takes the name out; the caller frees the node. NULL when absent. */
struct obj_name *obj_set_remove(struct obj_set *s, const char *name, size_t len);
bool obj_set_has(struct obj_set *s, const char *name, size_t len);
/* Empties the set; returns its nodes as a list linked by next. */
struct obj_name *obj_set_take_all(struct obj_set *s);

/* ---- open files, per thread ---------------------------------------------- */

/*
 * Entries remember the epoch current when they were opened; a DELETE bumps
 * the shared epoch after unlinking, so no thread writes through a file
 * descriptor of an unlinked file afterwards.
 */
struct fd_entry {
	uint64_t hash, epoch, used;
	int fd;
	uint32_t len;
	char name[256];
};

/*
 * Entries created or removed since the directory's last fsync. A create
 * and its mark happen under the lock a sync takes (one sync at a time), so
 * no sync falls between them: another thread may find the new file and
 * have its write answered, and then a FLUSH, before the creator's own
 * write ends (or even if it fails).
 */
struct dir_sync {
	pthread_mutex_t lock;
	_Atomic int dirty;
};

struct fd_cache {
	struct fd_entry *entries;
	unsigned count, capacity;
	uint64_t tick;
	int dirfd;
	_Atomic uint64_t *epoch;
	struct dir_sync *dir;
};

int fd_cache_init(struct fd_cache *c, unsigned capacity, int dirfd, _Atomic uint64_t *epoch,
		  struct dir_sync *dir);
void fd_cache_destroy(struct fd_cache *c);
/*
 * An fd open for reading and writing on the object, or -errno. With create,
 * a missing object is created (and the directory marked); without, -ENOENT.
 * The fd belongs to the cache: do not close it.
 */
int fd_cache_get(struct fd_cache *c, const char *name, size_t len, bool create);

#endif /* FILED_OBJECTS_H */
