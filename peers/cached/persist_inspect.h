/*
 * `cached --persist-inspect PATH [--json]`: what a persist file holds, read
 * by another process without changing a byte or taking its lock, so it is
 * safe while a cached runs on the file. What recovery would find (dirty
 * buckets, torn and superseded versions) and what the page cache has not
 * yet written to the device (cachestat(2), Linux 6.5+): after a FLUSH
 * answered with --persist-sync flush, no page of the file is dirty.
 */
#ifndef CACHED_PERSIST_INSPECT_H
#define CACHED_PERSIST_INSPECT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "persist.h"

struct persist_report {
	uint32_t version;
	bool clean;                 /* the last close was clean */
	bool kept;                  /* ... or kept its dirty data at a stop, synced */
	int owner_pid;              /* the last process that opened it */
	int lock_pid;               /* the live cached holding it, or 0 */
	struct persist_geometry geo;
	uint64_t file_size;
	/* the segment stamp: where it was last used (persist_geometry.segment) */
	uint64_t seg_instance, seg_given_up;
	uint32_t seg_port;
	char marker[PERSIST_MARKER_MAX + 1];   /* a replica's primary's marker, "" none */
	uint32_t role;                         /* whose dirty data: PERSIST_ROLE_* */
	/* the file's id (0: a file of a build before ids), the run that last
	 * opened it, the run whose word on the blocker governs its dirty data */
	uint64_t file_id, run, check_run;
	/* what recovery would hand back */
	uint64_t dirty_buckets, dirty_bytes, objects, max_seq;
	/* what recovery would drop */
	uint64_t older_versions, torn_headers, torn_data, orphans, bad_objects;
	/* the page cache (have_page_cache false where cachestat is missing) */
	bool have_page_cache;
	uint64_t cached_pages, dirty_pages, writeback_pages;
};

/* Fills *r from PATH. 0, or -errno with one line in `why` (not a persist
 * file, truncated, unreadable). */
int persist_inspect(const char *path, struct persist_report *r, char *why, size_t why_len);

void persist_report_print(FILE *f, const char *path, const struct persist_report *r, bool json);

/* The whole mode: argv is cached's (argv[1] is --persist-inspect).
 * Exit status: 0 a persist file, 1 not one or unreadable, 2 bad arguments. */
int persist_inspect_main(int argc, char **argv);

#endif
