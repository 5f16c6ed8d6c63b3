/*
 * cached's persist file (peers/cached/persist.c) on its own: create, reopen,
 * refusals that leave the file as it was, recovery of the newest version of
 * each bucket, and the damage recovery must drop (torn headers, torn data,
 * a broken object record, a version superseded mid-overwrite).
 */
#include <check.h>

#include "support/xseg_test_util.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sys/mman.h>
#include <sys/syscall.h>

static int msync_fails;   /* while set, msync fails (EIO) */

/* persist.c's msync, failing on demand: a device that took no write. */
int msync(void *addr, size_t len, int flags)
{
	if (msync_fails) {
		errno = EIO;
		return -1;
	}
	return (int)syscall(SYS_msync, addr, len, flags);
}

#include "../peers/cached/persist.c"
#include "../peers/cached/persist_inspect.c"

#define BS 4096u
static char dir[64], path[96];
static const struct persist_geometry geo = {
	.bucket_size = BS, .object_size = 16 * BS, .nr_slots = 64, .nr_objects = 8,
	.blocker_port = 1,
};

static void setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/pt-%d-persist-XXXXXX", (int)getpid());
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/cache", dir);
}

static void teardown(void)
{
	unlink(path);
	rmdir(dir);
}

/* Every byte of the file, to prove a refusal wrote nothing. */
static uint64_t file_sum(void)
{
	int fd = open(path, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	struct stat st;
	fstat(fd, &st);
	unsigned char *b = malloc((size_t)st.st_size + 1);
	ck_assert_int_eq(pread(fd, b, (size_t)st.st_size, 0), st.st_size);
	uint64_t h = XXH3_64bits(b, (size_t)st.st_size);
	free(b);
	close(fd);
	return h;
}

static void open_ok(struct persist *p)
{
	char why[256] = "";
	int rc = persist_open(p, path, &geo, false, NULL, why, sizeof(why));
	ck_assert_msg(rc == 0, "%s", why);
}

/* Writes `fill` into a fresh slot and publishes it as bucket `b` of `obj`. */
static void put_bucket(struct persist *p, uint32_t slot, uint32_t obj, uint32_t b, int fill)
{
	memset(persist_slot_data(p, slot), fill, BS);
	persist_publish(p, slot, obj, b);
}

struct seen {
	unsigned n;
	char name[8][32];
	uint32_t bucket[8], slot[8];
	int fill[8];
};

static int collect(void *arg, const char *name, uint32_t len, uint32_t object, uint32_t bucket,
		   uint32_t slot)
{
	struct seen *s = arg;
	(void)object;
	ck_assert_uint_lt(s->n, 8);
	memcpy(s->name[s->n], name, len);
	s->name[s->n][len] = '\0';
	s->bucket[s->n] = bucket;
	s->slot[s->n] = slot;
	s->n++;
	return 0;
}

static void recover(struct persist *p, struct seen *s, struct persist_recovery *r)
{
	memset(s, 0, sizeof(*s));
	ck_assert_int_eq(persist_recover(p, collect, s, r), 0);
	for (unsigned i = 0; i < s->n; i++)
		s->fill[i] = persist_slot_data(p, s->slot[i])[BS / 2];
}

START_TEST(create_reopen_and_refusals)
{
	struct persist p, q;
	char why[256];
	open_ok(&p);
	/* a second cached on the same file */
	ck_assert_int_eq(persist_open(&q, path, &geo, false, NULL, why, sizeof(why)), -EBUSY);
	ck_assert_ptr_nonnull(strstr(why, "in use"));
	ck_assert_ptr_nonnull(strstr(why, "pid"));
	persist_close(&q, false);
	persist_close(&p, true);
	uint64_t before = file_sum();

	struct persist_geometry other = geo;
	other.bucket_size = 8192;
	other.object_size = 16 * 8192;
	ck_assert_int_eq(persist_open(&q, path, &other, false, NULL, why, sizeof(why)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "bucket size 4096"));
	persist_close(&q, false);
	other = geo;
	other.blocker_port = 7;
	ck_assert_int_eq(persist_open(&q, path, &other, false, NULL, why, sizeof(why)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "blocker port 1"));
	persist_close(&q, false);
	ck_assert_uint_eq(file_sum(), before);

	/* not a persist file at all */
	FILE *f = fopen(path, "w");
	fputs("not a cache\n", f);
	fclose(f);
	before = file_sum();
	ck_assert_int_eq(persist_open(&q, path, &geo, false, NULL, why, sizeof(why)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "not a cached persist file"));
	persist_close(&q, false);
	ck_assert_uint_eq(file_sum(), before);
	/* --persist-discard starts it afresh */
	uint64_t dropped = 1;
	ck_assert_int_eq(persist_open(&q, path, &geo, true, &dropped, why, sizeof(why)), 0);
	ck_assert_uint_eq(dropped, 0);
	persist_close(&q, true);
	open_ok(&q);
	persist_close(&q, true);
}
END_TEST

START_TEST(recovers_the_newest_version_of_each_bucket)
{
	struct persist p;
	struct seen s;
	struct persist_recovery r;
	open_ok(&p);
	uint32_t a = persist_object_get(&p, "vol-a", 5), b = persist_object_get(&p, "vol-b", 5);
	ck_assert_uint_ne(a, PERSIST_NO_OBJECT);
	ck_assert_uint_ne(b, PERSIST_NO_OBJECT);
	put_bucket(&p, 3, a, 0, 'x');
	put_bucket(&p, 9, b, 15, 'y');
	put_bucket(&p, 4, a, 1, 'z');
	/* an overwrite of a/0 goes to a fresh slot; the old one is cleared after */
	put_bucket(&p, 10, a, 0, 'X');
	persist_clear(&p, 3);
	/* an overwrite of b/15 killed before its old slot was cleared */
	put_bucket(&p, 11, b, 15, 'Y');
	persist_close(&p, false);   /* as a SIGKILL leaves it, plus a sync */

	open_ok(&p);
	recover(&p, &s, &r);
	ck_assert(!r.was_clean);
	ck_assert_uint_eq(s.n, 3);
	ck_assert_uint_eq(r.slots, 3);
	ck_assert_uint_eq(r.bytes, 3 * BS);
	ck_assert_uint_eq(r.objects, 2);
	ck_assert_uint_eq(r.older_versions, 1);
	/* oldest first: a/1 (z), then a/0 (X), then b/15 (Y) */
	ck_assert_str_eq(s.name[0], "vol-a");
	ck_assert_uint_eq(s.bucket[0], 1);
	ck_assert_int_eq(s.fill[0], 'z');
	ck_assert_str_eq(s.name[1], "vol-a");
	ck_assert_uint_eq(s.bucket[1], 0);
	ck_assert_int_eq(s.fill[1], 'X');
	ck_assert_str_eq(s.name[2], "vol-b");
	ck_assert_uint_eq(s.bucket[2], 15);
	ck_assert_int_eq(s.fill[2], 'Y');
	/* the superseded slot was cleared: a second recovery agrees */
	persist_close(&p, false);
	open_ok(&p);
	recover(&p, &s, &r);
	ck_assert_uint_eq(s.n, 3);
	ck_assert_uint_eq(r.older_versions, 0);
	/* new seqs continue above the recovered ones */
	uint32_t c = persist_object_get(&p, "vol-c", 5);
	put_bucket(&p, 20, c, 2, 'c');
	ck_assert_uint_gt(p.slots[20].seq, p.slots[11].seq);
	/* written back: cleared; a clean close says so */
	for (unsigned i = 0; i < s.n; i++)
		persist_clear(&p, s.slot[i]);
	persist_clear(&p, 20);
	persist_close(&p, true);
	open_ok(&p);
	recover(&p, &s, &r);
	ck_assert(r.was_clean);
	ck_assert_uint_eq(s.n, 0);
	persist_close(&p, true);
}
END_TEST

START_TEST(damage_is_dropped_never_served)
{
	struct persist p;
	struct seen s;
	struct persist_recovery r;
	open_ok(&p);
	uint32_t a = persist_object_get(&p, "good", 4), b = persist_object_get(&p, "broken", 6);
	put_bucket(&p, 0, a, 0, 'g');
	put_bucket(&p, 1, a, 1, 'h');   /* header torn below */
	put_bucket(&p, 2, a, 2, 'i');   /* data torn below */
	put_bucket(&p, 3, b, 0, 'b');   /* its object record broken below */
	put_bucket(&p, 4, a, 3, 'j');
	p.slots[1].bucket ^= 1;                          /* killed while writing the header */
	persist_slot_data(&p, 2)[100] ^= 0xff;           /* killed while copying the data */
	p.objects[b].name[0] ^= 0x20;                    /* a record that does not check out */
	persist_close(&p, false);

	open_ok(&p);
	recover(&p, &s, &r);
	ck_assert_uint_eq(r.torn_headers, 1);
	ck_assert_uint_eq(r.torn_data, 1);
	ck_assert_uint_eq(r.bad_objects, 1);
	ck_assert_uint_eq(r.orphans, 1);
	ck_assert_uint_eq(s.n, 2);                       /* nothing else was dropped */
	ck_assert_str_eq(s.name[0], "good");
	ck_assert_uint_eq(s.bucket[0], 0);
	ck_assert_int_eq(s.fill[0], 'g');
	ck_assert_uint_eq(s.bucket[1], 3);
	ck_assert_int_eq(s.fill[1], 'j');
	persist_close(&p, false);

	/* --persist-discard says how much it drops */
	char why[256];
	uint64_t dropped = 0;
	ck_assert_int_eq(persist_open(&p, path, &geo, true, &dropped, why, sizeof(why)), 0);
	ck_assert_uint_eq(dropped, 2 * BS);
	recover(&p, &s, &r);
	ck_assert_uint_eq(s.n, 0);
	persist_close(&p, true);
}
END_TEST

START_TEST(object_records_are_reused_only_when_free)
{
	struct persist p;
	open_ok(&p);
	uint32_t got[8];
	for (int i = 0; i < 8; i++) {
		char name[8];
		snprintf(name, sizeof(name), "o%d", i);
		got[i] = persist_object_get(&p, name, (uint32_t)strlen(name));
		ck_assert_uint_ne(got[i], PERSIST_NO_OBJECT);
	}
	ck_assert_uint_eq(persist_object_get(&p, "full", 4), PERSIST_NO_OBJECT);
	ck_assert_uint_eq(persist_object_get(&p, "", 0), PERSIST_NO_OBJECT);
	put_bucket(&p, 5, got[0], 0, 'a');
	persist_object_put(&p, got[0]);                 /* a slot still names it */
	ck_assert_uint_eq(persist_object_get(&p, "full", 4), PERSIST_NO_OBJECT);
	persist_clear(&p, 5);                           /* now it is free */
	uint32_t again = persist_object_get(&p, "again", 5);
	ck_assert_uint_eq(again, got[0]);
	persist_close(&p, false);
}
END_TEST

/* Data given up on the port (`xseg unplug --force`) after the file was
 * last written in this segment is never replayed; a new segment (a
 * reboot, `xseg up`) knows nothing of it and recovers; a refusal writes
 * nothing. */
START_TEST(data_given_up_on_the_port_is_refused)
{
	struct persist p, q;
	char why[256] = "";
	struct persist_geometry g = geo;
	g.segment = 0x1234;
	g.cache_port = 3;
	ck_assert_int_eq(persist_open(&p, path, &g, false, NULL, why, sizeof(why)), 0);
	uint32_t o = persist_object_get(&p, "obj", 3);
	put_bucket(&p, 0, o, 0, 'a');
	persist_close(&p, false);                        /* killed with dirty data */

	uint64_t before = file_sum();
	g.given_up = 1;                                  /* the port gave it up since */
	ck_assert_int_eq(persist_open(&q, path, &g, false, NULL, why, sizeof(why)), -ESTALE);
	ck_assert_ptr_nonnull(strstr(why, "unplug --force"));
	ck_assert_ptr_nonnull(strstr(why, "4096 dirty bytes"));
	persist_close(&q, false);
	ck_assert_uint_eq(file_sum(), before);

	struct persist_geometry other = g;
	other.cache_port = 4;                            /* another port's count says nothing */
	ck_assert_int_eq(persist_open(&q, path, &other, false, NULL, why, sizeof(why)), 0);
	persist_close(&q, false);
	other = g;
	other.segment = 0x5678;                          /* a new segment: the file is the only copy */
	other.given_up = 0;
	ck_assert_int_eq(persist_open(&q, path, &other, false, NULL, why, sizeof(why)), 0);
	struct seen s;
	struct persist_recovery r;
	recover(&q, &s, &r);
	ck_assert_uint_eq(s.n, 1);
	persist_close(&q, false);                        /* stamped with 0x5678 now */

	other.given_up = 1;                              /* gave up in the new segment */
	ck_assert_int_eq(persist_open(&q, path, &other, false, NULL, why, sizeof(why)), -ESTALE);
	persist_close(&q, false);
	uint64_t dropped = 0;
	ck_assert_int_eq(persist_open(&q, path, &other, true, &dropped, why, sizeof(why)), 0);
	ck_assert_uint_eq(dropped, BS);
	persist_close(&q, true);
	ck_assert_int_eq(persist_open(&q, path, &other, false, NULL, why, sizeof(why)), 0);
	persist_close(&q, true);                         /* stamped with the count now */
}
END_TEST

/* seq is a uint64_t counter and 0 means "free": a header whose seq says
 * UINT64_MAX (damage, or a file made by hand) once set next_seq to its
 * wrap, 0, and the next acknowledged bucket was published free: lost at
 * the next recovery. Such a seq is damage now, dropped and counted. */
START_TEST(a_seq_near_its_end_is_damage_not_a_wrap)
{
	struct persist p;
	struct seen s;
	struct persist_recovery r;
	open_ok(&p);
	uint32_t a = persist_object_get(&p, "vol-a", 5);
	put_bucket(&p, 3, a, 0, 'x');
	struct persist_slot *h = &p.slots[3];
	h->seq = UINT64_MAX;
	h->sum = slot_sum(h);
	persist_close(&p, false);                   /* killed */

	open_ok(&p);
	recover(&p, &s, &r);
	ck_assert_uint_eq(s.n, 0);
	ck_assert_uint_eq(r.torn_headers, 1);
	a = persist_object_get(&p, "vol-a", 5);
	put_bucket(&p, 4, a, 1, 'y');               /* acknowledged */
	ck_assert_uint_ne(p.slots[4].seq, 0);
	persist_close(&p, false);                   /* killed */

	open_ok(&p);
	recover(&p, &s, &r);
	ck_assert_msg(s.n == 1, "%u of 1 acknowledged bucket recovered", s.n);
	ck_assert_int_eq(s.fill[0], 'y');
	persist_close(&p, false);
}
END_TEST

/* A replica's marker name lives in the superblock: kept across reopens
 * (and across later superblock writes), refused when too long, read as
 * none where its own sum does not check out (a file of an older build
 * has zeros there). */
START_TEST(the_marker_name_is_kept_in_the_superblock)
{
	struct persist p;
	open_ok(&p);
	ck_assert_str_eq(p.marker, "");
	ck_assert_int_eq(persist_set_marker(&p, "cached-mirror-marker.a.3"), 0);
	char longer[PERSIST_MARKER_MAX + 2];
	memset(longer, 'x', sizeof(longer) - 1);
	longer[sizeof(longer) - 1] = '\0';
	ck_assert_int_eq(persist_set_marker(&p, longer), -EINVAL);
	ck_assert_str_eq(p.marker, "cached-mirror-marker.a.3");
	persist_close(&p, false);                        /* killed */
	open_ok(&p);
	ck_assert_str_eq(p.marker, "cached-mirror-marker.a.3");
	struct seen s;
	struct persist_recovery r;
	recover(&p, &s, &r);                             /* writes the superblock again */
	persist_close(&p, true);
	open_ok(&p);
	ck_assert_str_eq(p.marker, "cached-mirror-marker.a.3");
	persist_close(&p, true);

	/* one byte of the name in both copies changed: no name, the rest read */
	int fd = open(path, O_RDWR);
	ck_assert_int_ge(fd, 0);
	for (int copy = 0; copy < 2; copy++) {
		off_t at = (off_t)copy * 4096 + (off_t)offsetof(struct persist_super, marker);
		ck_assert_int_eq(pwrite(fd, "y", 1, at), 1);
	}
	close(fd);
	open_ok(&p);
	ck_assert_str_eq(p.marker, "");
	persist_close(&p, true);
}
END_TEST

/* Whose dirty data the file holds (a review: a promoted cache crashed,
 * its unit started it with --replica again, and a new primary's reset
 * dropped its own acknowledged writes): a replica's open of a file
 * holding a cache's own dirty data is refused without a write, and so is
 * a plain cache's open of a replica's (its copies may be older than the
 * store's: a promote reads the marker first); an empty one is taken; a
 * file of an older build (no role) is taken as before. */
START_TEST(a_replica_refuses_a_cache_s_own_data)
{
	struct persist p;
	char why[512] = "";
	struct persist_geometry rg = geo;
	rg.replica = true;
	open_ok(&p);
	ck_assert_uint_eq(p.role, PERSIST_ROLE_UNKNOWN);   /* new */
	ck_assert_int_eq(persist_set_role(&p, PERSIST_ROLE_OWN), 0);
	uint32_t o = persist_object_get(&p, "obj", 3);
	put_bucket(&p, 0, o, 0, 'a');
	persist_close(&p, false);                        /* killed with dirty data */

	uint64_t before = file_sum();
	ck_assert_int_eq(persist_open(&p, path, &rg, false, NULL, why, sizeof(why)), -EPERM);
	ck_assert_ptr_nonnull(strstr(why, "4096 dirty bytes"));
	ck_assert_ptr_nonnull(strstr(why, "without --replica"));
	persist_close(&p, false);
	ck_assert_uint_eq(file_sum(), before);
	struct persist_report rep;
	ck_assert_int_eq(persist_inspect(path, &rep, why, sizeof(why)), 0);
	ck_assert_uint_eq(rep.role, PERSIST_ROLE_OWN);

	open_ok(&p);                                     /* a plain start takes it */
	ck_assert_uint_eq(p.role, PERSIST_ROLE_OWN);
	struct seen s;
	struct persist_recovery r;
	recover(&p, &s, &r);
	ck_assert_uint_eq(s.n, 1);
	persist_clear(&p, s.slot[0]);                    /* written back */
	persist_close(&p, true);
	/* nothing held: a replica takes it, and it is a replica's then */
	ck_assert_int_eq(persist_open(&p, path, &rg, false, NULL, why, sizeof(why)), 0);
	recover(&p, &s, &r);
	ck_assert_uint_eq(s.n, 0);
	ck_assert_int_eq(persist_set_role(&p, PERSIST_ROLE_REPLICA), 0);
	o = persist_object_get(&p, "obj", 3);
	put_bucket(&p, 1, o, 0, 'b');
	persist_close(&p, false);
	ck_assert_int_eq(persist_open(&p, path, &rg, false, NULL, why, sizeof(why)), 0);
	ck_assert_uint_eq(p.role, PERSIST_ROLE_REPLICA);
	persist_close(&p, false);
	/* a replica's copies, to a cache that is not one: refused unwritten */
	before = file_sum();
	ck_assert_int_eq(persist_open(&p, path, &geo, false, NULL, why, sizeof(why)), -EPERM);
	ck_assert_ptr_nonnull(strstr(why, "of a replica"));
	persist_close(&p, false);
	ck_assert_uint_eq(file_sum(), before);

	/* the role's bytes zeroed in both copies (an older build's file):
	 * taken by either */
	int fd = open(path, O_RDWR);
	ck_assert_int_ge(fd, 0);
	uint64_t zero[2] = { 0, 0 };
	for (int copy = 0; copy < 2; copy++) {
		off_t at = (off_t)copy * 4096 + (off_t)offsetof(struct persist_super, role);
		ck_assert_int_eq(pwrite(fd, zero, sizeof(zero), at), (ssize_t)sizeof(zero));
	}
	close(fd);
	ck_assert_int_eq(persist_open(&p, path, &rg, false, NULL, why, sizeof(why)), 0);
	ck_assert_uint_eq(p.role, PERSIST_ROLE_UNKNOWN);
	persist_close(&p, false);
	open_ok(&p);
	persist_close(&p, false);
}
END_TEST

/* Two valid records naming one object (a host crash: the object was
 * written back under the first, left the cache, came back under the
 * second; the kernel wrote the second's pages, not the first's clears):
 * every version under the older record is older than the blocker's, so
 * recovery hands back only the newer record's, and --persist-inspect
 * says what recovery would do. */
START_TEST(two_records_of_one_object_keep_the_newer)
{
	struct persist p;
	struct seen s;
	struct persist_recovery r;
	open_ok(&p);
	uint32_t a = persist_object_get(&p, "X", 1);
	put_bucket(&p, 3, a, 0, 'o');
	put_bucket(&p, 5, a, 1, 'p');
	uint32_t b = persist_object_get(&p, "X", 1);
	ck_assert_uint_ne(a, b);
	put_bucket(&p, 7, b, 0, 'n');
	persist_close(&p, false);

	struct persist_report rep;
	char why[256] = "";
	ck_assert_msg(persist_inspect(path, &rep, why, sizeof(why)) == 0, "%s", why);
	ck_assert_uint_eq(rep.dirty_buckets, 1);
	ck_assert_uint_eq(rep.orphans, 2);

	open_ok(&p);
	recover(&p, &s, &r);
	ck_assert_msg(s.n == 1, "%u versions handed back", s.n);
	ck_assert_str_eq(s.name[0], "X");
	ck_assert_uint_eq(s.bucket[0], 0);
	ck_assert_int_eq(s.fill[0], 'n');
	ck_assert_uint_eq(r.orphans, 2);
	ck_assert_uint_eq(r.objects, 1);
	persist_close(&p, false);
}
END_TEST

/* A stop that keeps dirty data on purpose marks the file KEPT after
 * syncing it; the next start sees it (was_kept), and once it runs on the
 * file, a crash leaves it IN_USE again (neither clean nor kept). */
START_TEST(a_stop_that_keeps_data_says_so)
{
	struct persist p;
	struct seen s;
	struct persist_recovery r;
	open_ok(&p);
	uint32_t o = persist_object_get(&p, "k", 1);
	put_bucket(&p, 0, o, 0, 'k');
	persist_close_kept(&p);
	open_ok(&p);
	recover(&p, &s, &r);
	ck_assert(r.was_kept);
	ck_assert(!r.was_clean);
	ck_assert_uint_eq(s.n, 1);
	persist_close(&p, false);                        /* killed while running */
	open_ok(&p);
	recover(&p, &s, &r);
	ck_assert(!r.was_kept);
	ck_assert(!r.was_clean);
	persist_close(&p, false);
}
END_TEST

/* A KEPT superblock says the data under it is on the device: a stop
 * whose sync of the data failed must not write it (the next start would
 * trust what may not be there). */
START_TEST(a_failed_sync_is_not_kept)
{
	struct persist p;
	struct seen s;
	struct persist_recovery r;
	open_ok(&p);
	uint32_t o = persist_object_get(&p, "k", 1);
	put_bucket(&p, 0, o, 0, 'k');
	msync_fails = 1;
	persist_close_kept(&p);
	msync_fails = 0;
	open_ok(&p);
	recover(&p, &s, &r);
	ck_assert_msg(!r.was_kept, "marked KEPT though the data's sync failed");
	ck_assert(!r.was_clean);
	persist_close(&p, false);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cached_persist");
	TCase *tc = tcase_create("persist");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, create_reopen_and_refusals);
	tcase_add_test(tc, recovers_the_newest_version_of_each_bucket);
	tcase_add_test(tc, damage_is_dropped_never_served);
	tcase_add_test(tc, object_records_are_reused_only_when_free);
	tcase_add_test(tc, data_given_up_on_the_port_is_refused);
	tcase_add_test(tc, a_seq_near_its_end_is_damage_not_a_wrap);
	tcase_add_test(tc, the_marker_name_is_kept_in_the_superblock);
	tcase_add_test(tc, two_records_of_one_object_keep_the_newer);
	tcase_add_test(tc, a_stop_that_keeps_data_says_so);
	tcase_add_test(tc, a_failed_sync_is_not_kept);
	tcase_add_test(tc, a_replica_refuses_a_cache_s_own_data);
	suite_add_tcase(s, tc);
	return xt_run(s);
}
