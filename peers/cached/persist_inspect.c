/*
 * A read-only look at a persist file (see persist_inspect.h): the same
 * checks recovery makes, without clearing anything, plus the file's state
 * in the page cache.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "persist_format.h"
#include "persist_inspect.h"

#ifndef __NR_cachestat
#define __NR_cachestat 451   /* the same number on every architecture */
#endif

/* cachestat(2)'s structures (linux/mman.h of 6.5+; Debian 12's headers
 * are older). */
struct cachestat_range { uint64_t off, len; };
struct cachestat_out { uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recent; };

static int say(char *why, size_t len, int err, const char *fmt, const char *path, const char *what)
{
	snprintf(why, len, fmt, path, what);
	return -err;
}

/* The pid holding an flock on the file, from /proc/locks (trying the lock
 * ourselves could make a cached starting at that moment refuse). */
static int lock_holder(const struct stat *st)
{
	FILE *f = fopen("/proc/locks", "r");
	char line[256];
	int pid = 0;
	if (!f)
		return 0;
	while (!pid && fgets(line, sizeof(line), f)) {
		char kind[16];
		unsigned maj, min;
		unsigned long long ino;
		int p;
		/* "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF" */
		const char *c = strchr(line, ':');
		if (c && sscanf(c + 1, " %15s %*s %*s %d %x:%x:%llu", kind, &p, &maj, &min, &ino) == 5 &&
		    !strcmp(kind, "FLOCK") && maj == major(st->st_dev) && min == minor(st->st_dev) &&
		    ino == (unsigned long long)st->st_ino)
			pid = p;
	}
	fclose(f);
	return pid;
}

static void page_cache(int fd, struct persist_report *r)
{
	struct cachestat_range range = { 0, 0 };   /* len 0: to the end */
	struct cachestat_out cs;
	if (syscall(__NR_cachestat, fd, &range, &cs, 0) < 0)
		return;
	r->have_page_cache = true;
	r->cached_pages = cs.nr_cache;
	r->dirty_pages = cs.nr_dirty;
	r->writeback_pages = cs.nr_writeback;
}

static int by_key(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Every header, checked as recovery checks it; keys of the good ones. */
static int scan(const unsigned char *map, const struct persist_super *s, struct persist_report *r)
{
	const struct persist_object *obj = (const void *)(map + s->objects_off);
	const struct persist_slot *h = (const void *)(map + s->slots_off);
	const unsigned char *data = map + s->data_off;
	uint64_t per_object = s->object_size / s->bucket_size;
	uint64_t *keys = malloc((size_t)s->nr_slots * sizeof(*keys) + 1);
	bool *named = calloc(s->nr_objects, sizeof(*named));
	uint64_t n = 0;
	if (!keys || !named) {
		free(keys); free(named);
		return -ENOMEM;
	}
	bool *valid = calloc(s->nr_objects, sizeof(*valid));
	if (!valid) {
		free(keys); free(named);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < s->nr_objects; i++) {
		if (!obj[i].gen)
			continue;
		if (obj[i].sum != object_sum(&obj[i]) || !obj[i].name_len ||
		    obj[i].name_len > PERSIST_NAME_MAX)
			r->bad_objects++;
		else
			valid[i] = true;
	}
	if (drop_superseded_records(obj, s->nr_objects, valid)) {
		free(keys); free(named); free(valid);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < s->nr_slots; i++) {
		if (!h[i].seq)
			continue;
		if (h[i].sum != slot_sum(&h[i]) || h[i].seq >= PERSIST_SEQ_LIMIT) {
			r->torn_headers++;
		} else if (h[i].object >= s->nr_objects || !valid[h[i].object] ||
			   obj[h[i].object].gen != h[i].object_gen || h[i].bucket >= per_object) {
			r->orphans++;
		} else if (XXH3_64bits(data + (uint64_t)i * s->bucket_size, s->bucket_size) !=
			   h[i].data_sum) {
			r->torn_data++;
		} else {
			keys[n++] = h[i].object * per_object + h[i].bucket;
			named[h[i].object] = true;
			if (h[i].seq > r->max_seq)
				r->max_seq = h[i].seq;
		}
	}
	qsort(keys, n, sizeof(*keys), by_key);
	for (uint64_t k = 0; k < n; k++) {
		if (k && keys[k] == keys[k - 1])
			r->older_versions++;
		else
			r->dirty_buckets++;
	}
	r->dirty_bytes = r->dirty_buckets * s->bucket_size;
	for (uint32_t i = 0; i < s->nr_objects; i++)
		r->objects += named[i];
	free(keys); free(named); free(valid);
	return 0;
}

/* The superblock's own layout must fit the file before anything is read
 * through it. */
static int check_super(const struct persist_super *s, uint64_t size, const char *path,
		       char *why, size_t len)
{
	struct persist_super want;
	if (!s)
		return say(why, len, EINVAL, "'%s' is not a cached persist file%s", path,
			   " (no valid superblock)");
	if (s->version != PERSIST_VERSION)
		return say(why, len, EINVAL, "'%s' is another format version of %s", path,
			   "the persist file");
	layout(&want, &(struct persist_geometry){ .bucket_size = s->bucket_size,
		.object_size = s->object_size, .nr_slots = s->nr_slots,
		.nr_objects = s->nr_objects, .blocker_port = s->blocker_port });
	if (!s->bucket_size || s->object_size % s->bucket_size || want.data_off != s->data_off ||
	    want.slots_off != s->slots_off || want.file_size != s->file_size || size < s->file_size)
		return say(why, len, EINVAL, "'%s' %s", path,
			   "is shorter than, or laid out unlike, what its superblock says");
	return 0;
}

int persist_inspect(const char *path, struct persist_report *r, char *why, size_t len)
{
	struct stat st;
	memset(r, 0, sizeof(*r));
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return say(why, len, errno, "cannot open '%s': %s", path, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size < 2 * PAGE) {
		close(fd);
		return say(why, len, EINVAL, "'%s' is not a cached persist file%s", path,
			   " (not a regular file of two pages or more)");
	}
	void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		int err = errno;
		close(fd);
		return say(why, len, err, "cannot map '%s': %s", path, strerror(err));
	}
	const struct persist_super *s = newest_super(map);
	int rc = check_super(s, (uint64_t)st.st_size, path, why, len);
	if (!rc) {
		r->version = s->version;
		r->clean = s->state == SUPER_CLEAN;
		r->kept = s->state == SUPER_KEPT;
		r->owner_pid = s->owner_pid;
		r->geo = (struct persist_geometry){ .bucket_size = s->bucket_size,
			.object_size = s->object_size, .nr_slots = s->nr_slots,
			.nr_objects = s->nr_objects, .blocker_port = s->blocker_port };
		r->file_size = (uint64_t)st.st_size;
		r->seg_instance = s->seg_instance;
		r->seg_port = s->seg_port;
		r->seg_given_up = s->seg_given_up;
		super_marker(s, r->marker);
		r->role = super_role(s);
		if (s->run_sum == run_sum(s)) {
			r->file_id = s->file_id;
			r->run = s->run;
			r->check_run = s->check_run;
		}
		r->lock_pid = lock_holder(&st);
		rc = scan(map, s, r);
		if (rc)
			say(why, len, -rc, "'%s': %s", path, "out of memory");
		page_cache(fd, r);
	}
	munmap(map, (size_t)st.st_size);
	close(fd);
	return rc;
}

static const char *role_name(uint32_t role)
{
	return role == PERSIST_ROLE_REPLICA ? "replica" : role == PERSIST_ROLE_OWN ? "own" : "";
}

static void json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(f, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", (unsigned char)*s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

void persist_report_print(FILE *f, const char *path, const struct persist_report *r, bool json)
{
	if (json) {
		fprintf(f, "{\"path\":");
		json_string(f, path);
		fprintf(f, ",\"clean\":%s,\"owner_pid\":%d,\"lock_pid\":%d,"
			"\"bucket_size\":%u,\"object_size\":%" PRIu64 ",\"slots\":%u,"
			"\"objects_max\":%u,\"blocker_port\":%u,\"file_size\":%" PRIu64 ","
			"\"dirty_buckets\":%" PRIu64 ",\"dirty_bytes\":%" PRIu64 ",\"objects\":%" PRIu64
			",\"max_seq\":%" PRIu64 ",\"older_versions\":%" PRIu64 ",\"torn_headers\":%" PRIu64
			",\"torn_data\":%" PRIu64 ",\"orphans\":%" PRIu64 ",\"bad_objects\":%" PRIu64,
			r->clean ? "true" : "false", r->owner_pid, r->lock_pid, r->geo.bucket_size,
			r->geo.object_size, r->geo.nr_slots, r->geo.nr_objects, r->geo.blocker_port,
			r->file_size, r->dirty_buckets, r->dirty_bytes, r->objects, r->max_seq,
			r->older_versions, r->torn_headers, r->torn_data, r->orphans, r->bad_objects);
		fprintf(f, ",\"segment_instance\":\"%016" PRIx64 "\",\"cache_port\":%u,"
			"\"given_up_seen\":%" PRIu64 ",\"kept\":%s,\"mirror_marker\":", r->seg_instance,
			r->seg_port, r->seg_given_up, r->kept ? "true" : "false");
		json_string(f, r->marker);
		fprintf(f, ",\"role\":\"%s\"", role_name(r->role));
		char name[40] = "";
		if (r->file_id)
			snprintf(name, sizeof(name), PERSIST_MARKER_OBJECT, r->file_id);
		fprintf(f, ",\"run\":%" PRIu64 ",\"check_run\":%" PRIu64 ",\"persist_marker\":",
			r->run, r->check_run);
		json_string(f, name);
		if (r->have_page_cache)
			fprintf(f, ",\"cached_pages\":%" PRIu64 ",\"dirty_pages\":%" PRIu64
				",\"writeback_pages\":%" PRIu64, r->cached_pages, r->dirty_pages,
				r->writeback_pages);
		fprintf(f, "}\n");
		return;
	}
	fprintf(f, "%s: %s, last opened by pid %d, ", path, r->clean ? "clean" :
		r->kept ? "dirty data kept at a stop (synced)" : "not closed cleanly", r->owner_pid);
	if (r->lock_pid)
		fprintf(f, "in use by cached pid %d\n", r->lock_pid);
	else
		fprintf(f, "in use by nobody\n");
	fprintf(f, "  made for: bucket size %u, object size %" PRIu64 ", %u buckets, %u objects, "
		"blocker port %u\n", r->geo.bucket_size, r->geo.object_size, r->geo.nr_slots,
		r->geo.nr_objects, r->geo.blocker_port);
	fprintf(f, "  last used: cache port %u of segment instance %016" PRIx64 " (0: unknown), "
		"which had given dirty data up %" PRIu64 " times\n", r->seg_port, r->seg_instance,
		r->seg_given_up);
	if (r->file_id)
		fprintf(f, "  run %" PRIu64 " opened it last; a failed sync's word on the blocker: object "
			"'" PERSIST_MARKER_OBJECT "' (a start reads run %" PRIu64 "'s there)\n", r->run,
			r->file_id, r->check_run);
	fprintf(f, "  its dirty data: %s\n", r->role == PERSIST_ROLE_REPLICA ?
		"a replica's copies of its primary's writes (a start with --replica only)" :
		r->role == PERSIST_ROLE_OWN ? "the cache's own (a start without --replica only, "
		"while it holds any)" : "unknown (a file of an older build)");
	if (r->marker[0])
		fprintf(f, "  a replica's: its primary's marker is '%s' (a promote reads it)\n",
			r->marker);
	fprintf(f, "  dirty: %" PRIu64 " bytes in %" PRIu64 " buckets of %" PRIu64 " objects\n",
		r->dirty_bytes, r->dirty_buckets, r->objects);
	fprintf(f, "  recovery would drop: %" PRIu64 " older versions, %" PRIu64 " torn headers, %"
		PRIu64 " torn data, %" PRIu64 " orphans, %" PRIu64 " bad object records\n",
		r->older_versions, r->torn_headers, r->torn_data, r->orphans, r->bad_objects);
	if (r->have_page_cache)
		fprintf(f, "  page cache: %" PRIu64 " pages, %" PRIu64 " dirty, %" PRIu64
			" under writeback: %s\n", r->cached_pages, r->dirty_pages, r->writeback_pages,
			r->dirty_pages + r->writeback_pages ? "not all on the device yet"
							    : "all on the device");
	else
		fprintf(f, "  page cache: unknown (no cachestat(2) before Linux 6.5)\n");
}

static const char usage[] =
	"Usage: cached --persist-inspect PATH [--json]\n"
	"Says what the persist file PATH holds: what it was made for, the dirty data a\n"
	"restart would recover, what recovery would drop, and how much of the file the\n"
	"page cache has not yet written to the device. Reads only; safe while a cached\n"
	"runs on PATH. Exit 0: a persist file; 1: not one, or unreadable; 2: bad usage.\n";

int persist_inspect_main(int argc, char **argv)
{
	const char *path = NULL;
	bool json = false;
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			fputs(usage, stdout);
			return 0;
		} else if (!strcmp(argv[i], "--json")) {
			json = true;
		} else if (!path && argv[i][0] && argv[i][0] != '-') {
			path = argv[i];
		} else {
			fprintf(stderr, "cached: --persist-inspect: unexpected argument '%s' (see "
				"cached --persist-inspect --help)\n", argv[i]);
			return 2;
		}
	}
	if (!path) {
		fprintf(stderr, "cached: --persist-inspect: no PATH given\n");
		return 2;
	}
	struct persist_report r;
	char why[512];
	if (persist_inspect(path, &r, why, sizeof(why)) < 0) {
		fprintf(stderr, "cached: --persist-inspect: %s\n", why);
		return 1;
	}
	persist_report_print(stdout, path, &r, json);
	return 0;
}
