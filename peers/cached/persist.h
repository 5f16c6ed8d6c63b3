/*
 * cached's persist file (--persist PATH, issue 22): the bucket data and the
 * metadata that names it, in a file mapped shared, so that acknowledged
 * write-back data outlives the process (SIGKILL, a crash, an OOM kill) and,
 * once synced, the host.
 *
 * Layout (every part 4 KiB aligned):
 *
 *   superblock A | superblock B | object table | slot headers | slot data
 *
 * - Two superblock copies, each with a checksum and a generation; the valid
 *   one with the higher generation counts, and an update overwrites the
 *   other, so a torn superblock write leaves the previous one.
 * - The object table: one record per object that has a slot, {generation,
 *   name}, checksummed. A slot names its object by record index and
 *   generation, so a record reused for another object orphans no slot by
 *   mistake.
 * - One 64-byte header per data slot: {seq, object, object generation,
 *   bucket, data checksum, header checksum}; seq 0 = free. seq is one
 *   counter for the whole file: the newest version of a bucket has the
 *   highest seq.
 *
 * Never mixing old and new acknowledged bytes: a write to a bucket that
 * already has a slot goes to a fresh slot (the caller copies the old bytes
 * it keeps); persist_publish() then writes its header, and only after that
 * does the caller persist_clear() the old slot. A process killed anywhere
 * leaves the old version, the new one, or both (the higher seq wins): a
 * header whose checksum does not match (killed while writing it) or whose
 * data does not match its data checksum (killed while copying) is never
 * taken as data.
 *
 * Only dirty data is published: once a bucket is on the blocker its slot
 * is cleared, so recovery never replays data the blocker may since have
 * moved past.
 *
 * Threads: publish/clear of different slots may run at once; object
 * records are handed out under a mutex. Open, recover and close run alone.
 */
#ifndef CACHED_PERSIST_H
#define CACHED_PERSIST_H

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PERSIST_NAME_MAX 255u
#define PERSIST_MARKER_MAX 200u   /* a replica's primary's marker name */

/* Whose dirty data a file holds: a replica's copies of its primary's
 * writes (a reset drops them), or a cache's own (a plain cache's, a
 * promoted replica's: the only copy of what it acknowledged). Unknown: a
 * file of a build before it. */
enum { PERSIST_ROLE_UNKNOWN = 0, PERSIST_ROLE_REPLICA = 1, PERSIST_ROLE_OWN = 2 };
#define PERSIST_NO_OBJECT UINT32_MAX

/* What the file was made for: all of it must match on reopen. */
struct persist_geometry {
	uint32_t bucket_size;
	uint64_t object_size;
	uint32_t nr_slots;       /* data slots (the cache's buckets) */
	uint32_t nr_objects;     /* object records (objects with dirty data at once) */
	uint32_t blocker_port;
	/* Not geometry: where the file is used now, stamped into it. A file
	 * stamped by this segment instance and port that still holds dirty
	 * data the port has given up since (`xseg unplug --force`) is refused:
	 * the path may have written newer data to the blocker. 0: unknown. */
	uint64_t segment;
	uint32_t cache_port;
	uint64_t given_up;
	/* Not geometry: the dirty bytes a dead cache left marked on
	 * cache_port. The file that cache used was stamped with this segment
	 * and port; a file stamped by another port of this segment is refused
	 * (EPERM): it holds another cache's data, and the dead one's would go
	 * unserved while reads reach the blocker's older bytes. */
	uint64_t left_dirty;
	/* Not geometry: opened by a replica (--replica). A file holding a
	 * cache's own dirty data (PERSIST_ROLE_OWN: a promoted replica's) is
	 * refused then (EPERM): a replica would drop it at a reset; and a
	 * replica's (PERSIST_ROLE_REPLICA) is refused to a cache that is not
	 * one: it would write its primary's copies back unchecked. */
	bool replica;
};

struct persist_recovery {
	uint64_t slots;          /* newest versions handed back */
	uint64_t bytes;
	uint64_t objects;
	uint64_t older_versions; /* superseded by a higher seq (killed mid-overwrite) */
	uint64_t torn_headers;   /* header checksum wrong, or a seq past PERSIST_SEQ_LIMIT */
	uint64_t torn_data;      /* data checksum wrong */
	uint64_t orphans;        /* slot naming a missing, reused or superseded object record */
	uint64_t bad_objects;    /* object record checksum wrong */
	uint64_t rewritten_bytes; /* after a crash: written again for the sync */
	bool was_clean;          /* the last close was clean */
	bool was_kept;           /* ... or kept its dirty data, all synced first */
	/* Left in use (its process died with it open) by this port of this
	 * segment instance: the file of the cache that died on the port,
	 * which held every write that cache acknowledged, even when it holds
	 * nothing now (a write-through write under way, or written back
	 * since the port's mark was last published). */
	bool left_here;
};

struct persist {
	int fd;
	const char *path;
	struct persist_geometry geo;
	unsigned char *map;
	uint64_t map_bytes;
	struct persist_super *super;       /* copies A and B */
	struct persist_object *objects;
	struct persist_slot *slots;
	unsigned char *data;
	uint64_t super_gen;
	_Atomic uint64_t next_seq;
	pthread_mutex_t objects_lock;      /* guards obj_refs, obj_free */
	uint32_t *obj_refs;                /* slots naming each record */
	uint32_t *obj_free;                /* stack of free record indexes */
	uint32_t nr_free_objects;
	_Atomic int sync_error;            /* the first fdatasync failure, for good */
	char marker[PERSIST_MARKER_MAX + 1];   /* kept in the superblock ("": none) */
	uint32_t role;                     /* PERSIST_ROLE_*: as found, then as set */
	/* A random name the file keeps for life, and which opening of it this
	 * is: run is last_run + 1, stored (msync) by persist_recover or at a
	 * format. What a run says about the file elsewhere (cached's persist
	 * marker on the blocker) names both, so that a later run never takes
	 * it for its own; the marker's check moves run past a number it
	 * finds already used (a superblock that never reached the disk). */
	uint64_t file_id;
	uint64_t last_run;                 /* the run that opened it before */
	uint64_t run;
	/* The run whose word governs the dirty data the file holds: this one
	 * once the caller said so (persist_set_check_run), else an earlier
	 * one's, kept across opens until then. */
	uint64_t check_run;
	uint64_t ino;                      /* the file's st_ino, in the superblock */
	/* a clean copy of another file: given an id of its own at this open;
	 * one holding dirty data (or restored from a copy): the id kept */
	bool copy_forked, copy_dirty;
	bool left_here;                    /* persist_recovery.left_here, from the open */
};

/*
 * Opens PATH, creating it (preallocated, zeroed, synced) if it does not
 * exist, and locks it against a second cached. Refuses, with one line in
 * `why` and without writing to the file: a file in use by a live process,
 * a file that is not a persist file, one made with another geometry or
 * blocker port (EINVAL), one holding dirty data its port gave up (ESTALE:
 * see persist_geometry.segment), one last used by another cache while
 * this port was left dirty (EPERM: persist_geometry.left_dirty). With `discard` an existing file of any geometry is started
 * afresh; *discarded_bytes says how much dirty data that dropped. 0 or
 * -errno. A file that existed must go through persist_recover() before
 * anything is published (it rebuilds the free object records).
 */
int persist_open(struct persist *p, const char *path, const struct persist_geometry *g,
		 bool discard, uint64_t *discarded_bytes, char *why, size_t why_len);

/*
 * Scans every header: calls fn for the newest valid version of each
 * (object, bucket), oldest seq first, after dropping (and clearing) torn,
 * orphaned and superseded ones. Marks the file in use (not clean). Each
 * object record handed to fn is held for the caller, as persist_object_get
 * holds it: persist_object_put it when the object leaves the cache. 0, or
 * the first non-zero return of fn; -ENOMEM.
 */
typedef int (*persist_recover_fn)(void *arg, const char *name, uint32_t name_len,
				  uint32_t object, uint32_t bucket, uint32_t slot);
int persist_recover(struct persist *p, persist_recover_fn fn, void *arg,
		    struct persist_recovery *out);

/* Slot data: nr_slots * bucket_size bytes, page aligned, in the mapping. */
static inline unsigned char *persist_slot_data(struct persist *p, uint32_t slot)
{
	return p->data + (uint64_t)slot * p->geo.bucket_size;
}

/* A record for an object about to get its first slot, held for the
 * caller; PERSIST_NO_OBJECT when the table is full (or the name too
 * long). The record is freed once the caller put it and no slot names it. */
uint32_t persist_object_get(struct persist *p, const char *name, uint32_t name_len);
/* Gives a record back once no slot names it (recovery counts them). */
void persist_object_put(struct persist *p, uint32_t object);

/* After the slot's data is complete: the slot now holds `bucket` of
 * `object`, newer than any other slot for it. Takes a reference on the
 * object record. */
void persist_publish(struct persist *p, uint32_t slot, uint32_t object, uint32_t bucket);
/* The slot no longer holds acknowledged dirty data (superseded, written
 * back, deleted). Drops its reference on the object record. */
void persist_clear(struct persist *p, uint32_t slot);

/* The slot has a header (holds published dirty data): for tests and
 * statistics. */
bool persist_slot_published(const struct persist *p, uint32_t slot);
/* The seq of the version slot holds (0: free). */
uint64_t persist_slot_seq(const struct persist *p, uint32_t slot);

/* Makes everything published so far durable on the device (fdatasync).
 * 0 or -errno; the first failure is final (the kernel may have dropped the
 * pages: a retry could wrongly succeed). */
int persist_sync(struct persist *p);

/* A replica's: its primary's stale-replica marker name (at most
 * PERSIST_MARKER_MAX bytes, "" none), in the superblock and synced before
 * it returns; p->marker holds it (read back by persist_open). 0 or
 * -errno. One caller at a time. */
int persist_set_marker(struct persist *p, const char *name);

/* Whose dirty data the file holds from now on (PERSIST_ROLE_*), in the
 * superblock and synced before it returns (a crash after must not leave
 * a promoted replica's own writes marked as its primary's). 0 or -errno
 * (then the file's sync error, as persist_set_check_run's). One caller at
 * a time, as persist_set_marker. */
int persist_set_role(struct persist *p, uint32_t role);

/* The name of the object on the blocker where cached says what became of
 * a file whose sync failed (persist_marker.c), from its file_id. */
#define PERSIST_MARKER_OBJECT "cached-persist-%016" PRIx64

/* The dirty data in the file is this run's to answer for from now on
 * (p->check_run = p->run), in the superblock (msync) before it returns.
 * -errno when the msync failed: the file failed a sync (sync_error). */
int persist_set_check_run(struct persist *p);

/* Syncs, marks the file clean when `clean` (nothing dirty is in it) and
 * unmaps and unlocks it. */
void persist_close(struct persist *p, bool clean);
/* persist_close of a file that keeps dirty data on purpose (a stop):
 * everything synced, then marked KEPT, so that the next start knows no
 * crash left it (persist_recovery.was_kept). */
void persist_close_kept(struct persist *p);

#endif
