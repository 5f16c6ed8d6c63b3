/*
 * filed as a child process, driven through libxseg as a client: data read
 * back, zeros for holes and missing objects, INFO, DELETE, COPY, FLUSH, FUA,
 * refused names and sizes (the peer keeps serving), unsupported ops, fault
 * injection, the common options, --daemon/--pidfile and a graceful SIGTERM.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "support/peer_test_util.h"

#define FILED 1u
#define CLIENT 10u
#define TIMEOUT 10000u

static struct xseg *seg;
static char segname[64], dir[256], objdir[300], log_path[320];
static pid_t filed;

/* A segment, a directory and filed on port FILED, with extra options. */
static void start_filed(const char *const extra[])
{
	const char *args[32] = { "--segment", segname, "--port", "1", "--dir", objdir,
				 "--threads", "3", "--log-level", "error" };
	int n = 10;
	for (int i = 0; extra && extra[i]; i++)
		args[n++] = extra[i];
	args[n] = NULL;
	filed = pt_start("filed", args, NULL);
	ck_assert_msg(pt_wait_bound(seg, FILED, filed, TIMEOUT) == 0, "filed did not bind port 1");
	/* --dir is made in filed's init, after the bind: a test that makes a
	 * file there itself waits for it (seen missing under TSan on a loaded
	 * machine: mkdir of objects/lost+found failed) */
	struct stat st;
	for (int i = 0; i < 500 && stat(objdir, &st) < 0; i++)
		usleep(10000);
}

static void setup_with(const char *const extra[])
{
	seg = pt_segment(segname, sizeof(segname), 16, 256, 16u << 20);
	pt_tmpdir(dir, sizeof(dir));
	snprintf(objdir, sizeof(objdir), "%s/objects", dir);   /* filed creates it */
	snprintf(log_path, sizeof(log_path), "%s/log", dir);
	ck_assert_int_eq(xseg_bind_port(seg, CLIENT), 0);
	start_filed(extra);
}

static void setup(void)
{
	setup_with(NULL);
}

/* ---- request shorthands ------------------------------------------------------ */

static struct pt_req do_req(uint32_t op, const char *target, uint64_t offset, uint64_t size,
			    const void *data, void *out, uint32_t flags)
{
	return pt_call(seg, CLIENT, FILED, op, target, offset, size, data, out, flags, TIMEOUT);
}

#define expect_served PT_EXPECT_SERVED
#define expect_failed PT_EXPECT_FAILED

static void write_obj(const char *name, uint64_t off, uint64_t size, uint64_t seed)
{
	char *buf = malloc(size);
	pt_pattern(buf, size, seed, off);
	struct pt_req r = do_req(X_WRITE, name, off, size, buf, NULL, 0);
	expect_served(r, name);
	ck_assert_uint_eq(r.serviced, size);
	free(buf);
}

static char *read_obj(const char *name, uint64_t off, uint64_t size)
{
	char *buf = malloc(size);
	memset(buf, 0xee, size);
	struct pt_req r = do_req(X_READ, name, off, size, NULL, buf, 0);
	expect_served(r, name);
	ck_assert_uint_eq(r.serviced, size);
	return buf;
}

static bool is_zero(const char *buf, uint64_t len)
{
	for (uint64_t i = 0; i < len; i++)
		if (buf[i])
			return false;
	return true;
}

static bool file_exists(const char *name)
{
	char path[600];
	struct stat st;
	snprintf(path, sizeof(path), "%s/%s", objdir, name);
	return lstat(path, &st) == 0;
}

static uint64_t info_size(const char *name)
{
	struct xseg_reply_info info = { 12345 };
	struct pt_req r = { .op = X_INFO, .target = name, .datalen = sizeof(info),
			    .out = &info, .out_len = sizeof(info) };
	ck_assert_int_eq(pt_do(seg, CLIENT, FILED, &r, TIMEOUT), 0);
	expect_served(r, "INFO");
	ck_assert_uint_eq(r.serviced, sizeof(info));
	return info.size;
}

/* ---- tests -------------------------------------------------------------------- */

START_TEST(write_read_back)
{
	write_obj("obj1", 4096, 65536, 1);
	char *got = read_obj("obj1", 4096, 65536);
	char *want = malloc(65536);
	pt_pattern(want, 65536, 1, 4096);
	ck_assert_msg(!memcmp(got, want, 65536), "data read back differs");
	free(got);
	/* a part of it, unaligned */
	got = read_obj("obj1", 5000, 777);
	pt_pattern(want, 777, 1, 5000);
	ck_assert(!memcmp(got, want, 777));
	free(got);
	free(want);

	/* the file is there, with the data at its offset */
	char path[600];
	uint64_t len;
	snprintf(path, sizeof(path), "%s/obj1", objdir);
	char *file = pt_read_file(path, &len);
	ck_assert_ptr_nonnull(file);
	ck_assert_uint_eq(len, 4096 + 65536);
	ck_assert(is_zero(file, 4096));
	want = malloc(65536);
	pt_pattern(want, 65536, 1, 4096);
	ck_assert(!memcmp(file + 4096, want, 65536));
	free(want);
	free(file);
}
END_TEST

START_TEST(never_written_reads_zeros)
{
	char *got = read_obj("ghost", 1000, 8192);
	ck_assert_msg(is_zero(got, 8192), "a never-written object did not read as zeros");
	free(got);
	ck_assert_msg(!file_exists("ghost"), "a READ created the object");
	ck_assert_uint_eq(info_size("ghost"), 0);
}
END_TEST

START_TEST(beyond_eof_reads_zeros)
{
	write_obj("short", 0, 100, 2);
	char *got = read_obj("short", 0, 4096);
	char want[100];
	pt_pattern(want, 100, 2, 0);
	ck_assert(!memcmp(got, want, 100));
	ck_assert_msg(is_zero(got + 100, 4096 - 100), "bytes past the end are not zeros");
	free(got);
	got = read_obj("short", 1 << 20, 4096);
	ck_assert(is_zero(got, 4096));
	free(got);
}
END_TEST

START_TEST(info_sizes)
{
	write_obj("sized", 1000, 5000, 3);
	ck_assert_uint_eq(info_size("sized"), 6000);
	/* no data area given: filed makes room for the answer, keeps the name */
	struct xseg_request *req = pt_submit(seg, CLIENT, FILED,
		&(struct pt_req){ .op = X_INFO, .target = "sized" });
	ck_assert_ptr_nonnull(req);
	struct xseg_request *rep = pt_receive(seg, CLIENT, TIMEOUT);
	ck_assert_ptr_eq(rep, req);
	ck_assert_uint_eq(rep->result, XR_SERVED);
	ck_assert_uint_ge(rep->datalen, sizeof(struct xseg_reply_info));
	ck_assert_uint_eq(((struct xseg_reply_info *)xseg_get_data(seg, rep))->size, 6000);
	ck_assert_str_eq(xseg_get_target(seg, rep), "sized");
	xseg_put_request(seg, rep);
}
END_TEST

START_TEST(delete_objects)
{
	write_obj("doomed", 0, 4096, 4);
	ck_assert(file_exists("doomed"));
	expect_served(do_req(X_DELETE, "doomed", 0, 0, NULL, NULL, 0), "DELETE");
	ck_assert_msg(!file_exists("doomed"), "DELETE left the file");
	expect_failed(do_req(X_DELETE, "doomed", 0, 0, NULL, NULL, 0), ENOENT, "DELETE again");
	char *got = read_obj("doomed", 0, 4096);
	ck_assert_msg(is_zero(got, 4096), "a deleted object still reads its old data");
	free(got);

	/* write, delete, write again, over and over: whichever thread serves
	 * the next write must not write through a descriptor of the unlinked
	 * file (the per-thread fd caches) */
	for (int i = 0; i < 30; i++) {
		write_obj("again", 0, 512, 100 + (uint64_t)i);
		expect_served(do_req(X_DELETE, "again", 0, 0, NULL, NULL, 0), "DELETE");
		write_obj("again", 512, 512, 200 + (uint64_t)i);
		ck_assert_uint_eq(info_size("again"), 1024);
		got = read_obj("again", 0, 1024);
		char want[512];
		pt_pattern(want, 512, 200 + (uint64_t)i, 512);
		ck_assert_msg(is_zero(got, 512) && !memcmp(got + 512, want, 512),
			      "round %d: data of a deleted object came back", i);
		free(got);
		expect_served(do_req(X_DELETE, "again", 0, 0, NULL, NULL, 0), "DELETE");
	}
}
END_TEST

static struct pt_req copy_req(const char *target, const char *src, uint32_t src_len)
{
	struct xseg_request_copy cp;
	memset(&cp, 0, sizeof(cp));
	cp.src_len = src_len ? src_len : (uint32_t)strlen(src);
	memcpy(cp.src, src, cp.src_len);
	struct pt_req r = { .op = X_COPY, .target = target, .data = &cp, .data_len = sizeof(cp),
			    .datalen = sizeof(cp) };
	ck_assert_int_eq(pt_do(seg, CLIENT, FILED, &r, TIMEOUT), 0);
	return r;
}

START_TEST(copy_objects)
{
	write_obj("source", 0, 200000, 5);
	write_obj("dest", 0, 500000, 6);   /* longer: must be truncated */
	struct pt_req r = copy_req("dest", "source", 0);
	expect_served(r, "COPY");
	ck_assert_uint_eq(r.serviced, 200000);
	ck_assert_uint_eq(info_size("dest"), 200000);
	char *got = read_obj("dest", 0, 200000);
	char *want = malloc(200000);
	pt_pattern(want, 200000, 5, 0);
	ck_assert_msg(!memcmp(got, want, 200000), "COPY target differs from its source");
	free(got);
	/* onto itself: nothing lost */
	expect_served(copy_req("source", "source", 0), "COPY onto itself");
	got = read_obj("source", 0, 200000);
	ck_assert(!memcmp(got, want, 200000));
	free(got);
	free(want);
	expect_failed(copy_req("dest2", "missing", 0), ENOENT, "COPY from a missing object");
	expect_failed(copy_req("dest2", "../source", 0), EINVAL, "COPY from '../source'");
	expect_failed(copy_req("dest2", "so\0rce", 6), EINVAL, "COPY from a name with a NUL");
	ck_assert(!file_exists("dest2"));
}
END_TEST

START_TEST(flush_and_fua)
{
	for (int i = 0; i < 8; i++) {
		char name[32];
		snprintf(name, sizeof(name), "dirty-%d", i);
		write_obj(name, 0, 8192, 7 + (uint64_t)i);
	}
	/* a FLUSH with no target syncs everything written since the last one */
	struct pt_req r = { .op = X_FLUSH };
	ck_assert_int_eq(pt_do(seg, CLIENT, FILED, &r, TIMEOUT), 0);
	expect_served(r, "FLUSH");
	/* named FLUSH: that object */
	write_obj("dirty-0", 0, 100, 99);
	expect_served(do_req(X_FLUSH, "dirty-0", 0, 0, NULL, NULL, 0), "named FLUSH");
	expect_served(do_req(X_FLUSH, "clean", 0, 0, NULL, NULL, 0), "FLUSH of an unwritten object");
	/* FUA write, and a write behind a flush barrier */
	char buf[4096];
	pt_pattern(buf, sizeof(buf), 8, 0);
	r = do_req(X_WRITE, "fua", 0, sizeof(buf), buf, NULL, XF_FUA);
	expect_served(r, "FUA write");
	ck_assert_uint_eq(r.serviced, sizeof(buf));
	r = do_req(X_WRITE, "barrier", 0, sizeof(buf), buf, NULL, XF_FLUSH);
	expect_served(r, "write with XF_FLUSH");
	char *got = read_obj("fua", 0, sizeof(buf));
	ck_assert(!memcmp(got, buf, sizeof(buf)));
	free(got);
}
END_TEST

static struct pt_req raw_name(uint32_t op, const char *name, uint32_t len)
{
	char buf[64] = { 0 };
	struct pt_req r = { .op = op, .target = name, .targetlen = len, .size = sizeof(buf),
			    .data = op == X_WRITE ? buf : NULL,
			    .data_len = op == X_WRITE ? sizeof(buf) : 0 };
	ck_assert_int_eq(pt_do(seg, CLIENT, FILED, &r, TIMEOUT), 0);
	return r;
}

START_TEST(bad_names_refused)
{
	static const char *const bad[] = { "../x", "a/b", ".", "..", ".hidden", "/abs" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		expect_failed(raw_name(X_WRITE, bad[i], 0), EINVAL, bad[i]);
		expect_failed(raw_name(X_READ, bad[i], 0), EINVAL, bad[i]);
		expect_failed(raw_name(X_DELETE, bad[i], 0), EINVAL, bad[i]);
		expect_failed(raw_name(X_INFO, bad[i], 0), EINVAL, bad[i]);
	}
	/* a NUL inside (targetlen says 5, strlen 2) and an empty name */
	expect_failed(raw_name(X_WRITE, "ab\0cd", 5), EINVAL, "name with a NUL");
	ck_assert(!file_exists("ab"));
	struct pt_req r = { .op = X_WRITE, .size = 16, .datalen = 16 };
	ck_assert_int_eq(pt_do(seg, CLIENT, FILED, &r, TIMEOUT), 0);
	expect_failed(r, EINVAL, "no name");
	/* nothing appeared next to the object directory */
	char path[600];
	struct stat st;
	snprintf(path, sizeof(path), "%s/x", dir);
	ck_assert_msg(lstat(path, &st) < 0, "filed wrote outside --dir");

	/* a symlink planted in the directory is not followed */
	char outside[600], link_path[600];
	snprintf(outside, sizeof(outside), "%s/outside", dir);
	snprintf(link_path, sizeof(link_path), "%s/link", objdir);
	int fd = open(outside, O_WRONLY | O_CREAT, 0600);
	ck_assert_int_ge(fd, 0);
	close(fd);
	ck_assert_int_eq(symlink(outside, link_path), 0);
	expect_failed(raw_name(X_WRITE, "link", 0), ELOOP, "write through a symlink");
	ck_assert_int_eq(stat(outside, &st), 0);
	ck_assert_int_eq(st.st_size, 0);

	/* the longest name xseg carries (255) is fine by default */
	char longname[256];
	memset(longname, 'n', 255);
	longname[255] = '\0';
	write_obj(longname, 0, 10, 9);
	ck_assert(file_exists(longname));
	/* still serving */
	write_obj("after", 0, 4096, 10);
	free(read_obj("after", 0, 4096));
}
END_TEST

/* With a lower --max-name-len, longer names are ENAMETOOLONG. */
static void setup_short_names(void)
{
	static const char *const extra[] = { "--max-name-len", "40", "--max-request-size", "64K",
					     NULL };
	setup_with(extra);
}

START_TEST(long_names_and_sizes_refused)
{
	char name[256];
	memset(name, 'x', 255);
	name[255] = '\0';
	expect_failed(raw_name(X_WRITE, name, 0), ENAMETOOLONG, "255-byte name");
	name[41] = '\0';
	expect_failed(raw_name(X_READ, name, 0), ENAMETOOLONG, "41-byte name");
	name[40] = '\0';
	write_obj(name, 0, 16, 11);   /* 40 is the limit */

	/* size over the buffer, over --max-request-size */
	struct pt_req r = { .op = X_WRITE, .target = "big", .size = 8192, .datalen = 4096 };
	ck_assert_int_eq(pt_do(seg, CLIENT, FILED, &r, TIMEOUT), 0);
	expect_failed(r, EINVAL, "size beyond the data area");
	r = (struct pt_req){ .op = X_READ, .target = "big", .size = 128 << 10 };
	ck_assert_int_eq(pt_do(seg, CLIENT, FILED, &r, TIMEOUT), 0);
	expect_failed(r, EINVAL, "size over --max-request-size");
	r = (struct pt_req){ .op = X_READ, .target = "big", .size = 4096, .offset = UINT64_MAX - 10 };
	ck_assert_int_eq(pt_do(seg, CLIENT, FILED, &r, TIMEOUT), 0);
	expect_failed(r, EINVAL, "offset that overflows");
	write_obj("big", 0, 64 << 10, 12);   /* the limit itself is fine */
}
END_TEST

START_TEST(unsupported_ops)
{
	struct pt_req r = { .op = X_CONTROL, .target = "obj", .size = 4, .data = "stat",
			    .data_len = 4 };
	ck_assert_int_eq(pt_do(seg, CLIENT, FILED, &r, TIMEOUT), 0);
	expect_failed(r, EOPNOTSUPP, "CONTROL");
	r = (struct pt_req){ .op = X_PING };
	ck_assert_int_eq(pt_do(seg, CLIENT, FILED, &r, TIMEOUT), 0);
	expect_served(r, "PING");
	write_obj("still", 0, 100, 13);
}
END_TEST

/* Many requests in flight at once, served by several threads. */
START_TEST(concurrent_requests)
{
	enum { N = 64, SZ = 16384 };
	struct xseg_request *reqs[N];
	char name[32];
	char *buf = malloc(SZ);
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < N; i++) {
			snprintf(name, sizeof(name), "c-%d", i % 8);
			pt_pattern(buf, SZ, (uint64_t)i, (uint64_t)(i / 8) * SZ);
			struct pt_req r = { .op = round ? X_READ : X_WRITE, .target = name,
					    .offset = (uint64_t)(i / 8) * SZ, .size = SZ,
					    .data = round ? NULL : buf, .data_len = round ? 0 : SZ };
			reqs[i] = pt_submit(seg, CLIENT, FILED, &r);
			ck_assert_ptr_nonnull(reqs[i]);
		}
		for (int k = 0; k < N; k++) {
			struct xseg_request *rep = pt_receive(seg, CLIENT, TIMEOUT);
			ck_assert_ptr_nonnull(rep);
			int i = -1;
			for (int j = 0; j < N; j++)
				if (reqs[j] == rep)
					i = j;
			ck_assert_int_ge(i, 0);
			reqs[i] = NULL;
			ck_assert_uint_eq(rep->result, XR_SERVED);
			ck_assert_uint_eq(rep->serviced, SZ);
			if (round) {
				pt_pattern(buf, SZ, (uint64_t)i, (uint64_t)(i / 8) * SZ);
				ck_assert_msg(!memcmp(xseg_get_data(seg, rep), buf, SZ),
					      "request %d read back wrong data", i);
			}
			xseg_put_request(seg, rep);
		}
	}
	free(buf);
	ck_assert_uint_eq(info_size("c-3"), 8 * SZ);
}
END_TEST

static void setup_faulty(void)
{
	static const char *const extra[] = { "--fail-rate", "50", "--fail-seed", "7", NULL };
	setup_with(extra);
}

/* Which of 64 sequential writes fail, as a bit mask. */
static uint64_t failure_pattern(void)
{
	uint64_t mask = 0;
	char buf[512] = { 1 };
	for (int i = 0; i < 64; i++) {
		struct pt_req r = do_req(X_WRITE, "faulty", 0, sizeof(buf), buf, NULL, 0);
		if (r.result == XR_FAILED) {
			ck_assert_int_eq(r.error, EIO);
			mask |= 1ull << i;
		} else {
			expect_served(r, "write");
		}
	}
	return mask;
}

START_TEST(fault_injection)
{
	uint64_t first = failure_pattern();
	int failed = __builtin_popcountll(first);
	ck_assert_msg(failed >= 16 && failed <= 48, "%d of 64 failed at --fail-rate 50", failed);
	/* other ops are not failed */
	expect_served(do_req(X_DELETE, "faulty", 0, 0, NULL, NULL, 0), "DELETE");
	/* the same seed, the same sequence: restart filed and compare */
	ck_assert_int_eq(pt_stop(filed, SIGTERM, TIMEOUT), 0);
	static const char *const extra[] = { "--fail-rate", "50", "--fail-seed", "7", NULL };
	start_filed(extra);
	ck_assert_msg(failure_pattern() == first, "--fail-seed did not repeat the failures");
}
END_TEST

START_TEST(sigterm_exits_cleanly)
{
	write_obj("before", 0, 4096, 14);
	int status = pt_stop(filed, SIGTERM, TIMEOUT);
	ck_assert_msg(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "filed status %#x after SIGTERM", status);
	struct xseg_port_info info;
	ck_assert_int_eq(xseg_port_info(seg, FILED, &info), 0);
	ck_assert_msg(info.owner == 0, "port still bound by %d", (int)info.owner);
	/* a restart serves the data written before */
	start_filed(NULL);
	char *got = read_obj("before", 0, 4096);
	char want[4096];
	pt_pattern(want, sizeof(want), 14, 0);
	ck_assert(!memcmp(got, want, sizeof(want)));
	free(got);
	status = pt_stop(filed, SIGINT, TIMEOUT);
	ck_assert_msg(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "filed status %#x after SIGINT", status);
}
END_TEST

/* SIGTERM while requests are in flight: every accepted one is answered. */
START_TEST(sigterm_under_load)
{
	enum { N = 48, SZ = 65536 };
	char *buf = calloc(1, SZ);
	for (int i = 0; i < N; i++) {
		char name[32];
		snprintf(name, sizeof(name), "load-%d", i);
		struct pt_req r = { .op = X_WRITE, .target = name, .size = SZ, .data = buf,
				    .data_len = SZ };
		ck_assert_ptr_nonnull(pt_submit(seg, CLIENT, FILED, &r));
	}
	/* The stop after filed took some: a SIGTERM before any worker ran
	 * (a loaded machine) would leave nothing accepted to check. */
	struct xseg_port_info info;
	for (int tries = 0; tries < 10000; tries++) {
		ck_assert_int_eq(xseg_port_info(seg, FILED, &info), 0);
		if (info.request_depth < N)
			break;
		usleep(1000);
	}
	kill(filed, SIGTERM);
	int status = pt_stop(filed, 0, TIMEOUT);
	ck_assert_msg(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "filed status %#x after SIGTERM under load", status);
	/* Every request is answered without a next filed: what filed accepted
	 * is served, what was still queued when it left its port fails back
	 * at once (EHOSTDOWN: nobody serves the port now). */
	int served = 0;
	for (int i = 0; i < N; i++) {
		struct xseg_request *rep = pt_receive(seg, CLIENT, TIMEOUT);
		ck_assert_msg(rep != NULL, "request %d of %d never answered", i, N);
		ck_assert_msg(rep->result == XR_SERVED ||
			      (rep->result == XR_FAILED && rep->error == EHOSTDOWN),
			      "request %d: result %u error %d", i, rep->result, rep->error);
		served += rep->result == XR_SERVED;
		xseg_put_request(seg, rep);
	}
	ck_assert_int_gt(served, 0);
	free(buf);
}
END_TEST

/* ---- options, --daemon, --pidfile --------------------------------------------- */

static char *slurp(const char *path)
{
	uint64_t len;
	char *s = pt_read_file(path, &len);
	if (s)
		s[len] = '\0';
	return s ? s : strdup("");
}

static void expect_exit(int want, const char *const args[], const char *must_contain)
{
	unlink(log_path);
	int status = pt_run_prog("filed", args, log_path, TIMEOUT);
	char *out = slurp(log_path);
	ck_assert_msg(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == want,
		      "filed %s...: status %#x, expected exit %d; output: %s", args[0], status,
		      want, out);
	if (must_contain)
		ck_assert_msg(strstr(out, must_contain), "output lacks '%s': %s", must_contain, out);
	if (want == 2) {
		char *nl = strchr(out, '\n');
		ck_assert_msg(nl && nl[1] == '\0', "not exactly one line: %s", out);
	}
	free(out);
}

START_TEST(options)
{
	expect_exit(0, (const char *const[]){ "--help", NULL }, "--dir");
	expect_exit(0, (const char *const[]){ "--help", NULL }, "--log-level");
	expect_exit(2, (const char *const[]){ "--no-such-option", NULL }, "--no-such-option");
	expect_exit(2, (const char *const[]){ "--segment", segname, "--port", "1", NULL }, "--dir");
	expect_exit(2, (const char *const[]){ "--segment", segname, "--port", "x7", "--dir", dir,
					      NULL }, "'x7'");
	expect_exit(2, (const char *const[]){ "--segment", segname, "--port", "1", "--dir", dir,
					      "--threads", "0", NULL }, "'0'");
	expect_exit(2, (const char *const[]){ "--segment", segname, "--port", "1", "--dir", dir,
					      "--log-level", "loud", NULL }, "'loud'");
	expect_exit(2, (const char *const[]){ "--segment", segname, "--port", "1", "--dir", dir,
					      "--fail-rate", "101", NULL }, "'101'");
	expect_exit(2, (const char *const[]){ "--segment", segname, "--port", "1", "--dir", dir,
					      "--max-request-size", "lots", NULL }, "'lots'");
	expect_exit(2, (const char *const[]){ "--segment", segname, "--port", "5-3", "--dir", dir,
					      NULL }, "'5-3'");
	/* the port is taken by a live filed */
	expect_exit(1, (const char *const[]){ "--segment", segname, "--port", "1", "--dir", dir,
					      NULL }, "port 1");
	expect_exit(2, (const char *const[]){ "--segment", "pt-no-such-segment", "--port", "1",
					      "--dir", dir, NULL }, "pt-no-such-segment");
	/* a port range: one filed serves both */
	pid_t two = pt_start("filed", (const char *const[]){ "--segment", segname, "--port", "3-4",
			     "--dir", objdir, "--log-level", "error", NULL }, NULL);
	ck_assert_int_eq(pt_wait_bound(seg, 4, two, TIMEOUT), 0);
	ck_assert_int_eq(pt_wait_bound(seg, 3, two, TIMEOUT), 0);
	struct pt_req r = { .op = X_INFO, .target = "x", .datalen = 8 };
	ck_assert_int_eq(pt_do(seg, CLIENT, 4, &r, TIMEOUT), 0);
	expect_served(r, "INFO on the second port of a range");
	ck_assert_int_eq(pt_stop(two, SIGTERM, TIMEOUT), 0);
}
END_TEST

static pid_t read_pidfile(const char *path)
{
	char *s = slurp(path);
	pid_t pid = (pid_t)atoi(s);
	free(s);
	return pid;
}

START_TEST(daemon_and_pidfile)
{
	char pidfile[320];
	struct stat st;
	snprintf(pidfile, sizeof(pidfile), "%s/filed.pid", dir);
	/* the daemon is reparented to us, so that we can reap it */
	ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
	const char *const args[] = { "--segment", segname, "--port", "2", "--dir", objdir,
				     "--daemon", "--pidfile", pidfile, "--log-level", "error",
				     NULL };
	/* a stale pidfile (a pid that is gone) is replaced */
	pid_t gone = pt_start("filed", (const char *const[]){ "--help", NULL }, "/dev/null");
	ck_assert_int_eq(pt_stop(gone, 0, TIMEOUT), 0);
	FILE *f = fopen(pidfile, "w");
	fprintf(f, "%d\n", (int)gone);
	fclose(f);

	int status = pt_run_prog("filed", args, log_path, TIMEOUT);
	ck_assert_msg(status == 0, "filed --daemon: status %#x: %s", status, slurp(log_path));
	pid_t daemon_pid = read_pidfile(pidfile);
	ck_assert_int_gt(daemon_pid, 0);
	pt_track_pid(daemon_pid);
	ck_assert_int_ne(daemon_pid, gone);
	/* bound by the time the command returned, by the pid in the file */
	struct xseg_port_info info;
	ck_assert_int_eq(xseg_port_info(seg, 2, &info), 0);
	ck_assert_int_eq(info.owner, daemon_pid);
	struct pt_req r = { .op = X_PING };
	ck_assert_int_eq(pt_do(seg, CLIENT, 2, &r, TIMEOUT), 0);
	expect_served(r, "PING to the daemon");

	/* a live pidfile is refused, naming the pid */
	char pidtext[32];
	snprintf(pidtext, sizeof(pidtext), "%d", (int)daemon_pid);
	expect_exit(1, (const char *const[]){ "--segment", segname, "--port", "5", "--dir", objdir,
					      "--pidfile", pidfile, NULL }, pidtext);

	status = pt_stop(daemon_pid, SIGTERM, TIMEOUT);
	ck_assert_msg(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "daemon status %#x after SIGTERM", status);
	ck_assert_msg(stat(pidfile, &st) < 0, "pidfile left behind");
	ck_assert_int_eq(xseg_port_info(seg, 2, &info), 0);
	ck_assert_int_eq(info.owner, 0);
}
END_TEST

/*
 * The contract: a name is targetlen bytes, "not NUL-terminated as far as the
 * rules go". A target buffer whose bytes go on past targetlen (a peer that
 * renamed it in place, a client that shortened it) must name only the
 * targetlen bytes: the checked name, not whatever follows it up to a NUL.
 */
static struct pt_req unterminated(uint32_t op, const char *bytes, uint32_t targetlen,
				  const void *data, uint64_t size)
{
	struct xseg_request *req = xseg_get_request(seg, CLIENT);
	ck_assert_ptr_nonnull(req);
	ck_assert_int_eq(xseg_prep_request(seg, req, targetlen, size), 0);
	memcpy(xseg_get_target(seg, req), bytes, strlen(bytes) + 1);   /* over the NUL */
	if (data)
		memcpy(xseg_get_data(seg, req), data, size);
	req->op = op;
	req->flags = 0;
	req->offset = 0;
	req->size = size;
	ck_assert_int_ge(xseg_submit(seg, req, CLIENT, FILED), 0);
	struct xseg_request *rep = pt_receive(seg, CLIENT, TIMEOUT);
	ck_assert_ptr_eq(rep, req);
	struct pt_req r = { .op = op };
	pt_finish(seg, rep, &r);
	return r;
}

START_TEST(name_is_targetlen_bytes)
{
	char buf[64];
	pt_pattern(buf, sizeof(buf), 77, 0);

	/* "abc" with "def" after it in the buffer: the object is "abc" */
	struct pt_req r = unterminated(X_WRITE, "abcdef", 3, buf, sizeof(buf));
	expect_served(r, "WRITE to 'abc'");
	ck_assert_msg(!file_exists("abcdef"), "a WRITE to 'abc' (targetlen 3) created 'abcdef'");
	ck_assert_msg(file_exists("abc"), "a WRITE to 'abc' (targetlen 3) did not create 'abc'");
}
END_TEST

START_TEST(name_past_targetlen_stays_in_dir)
{
	char buf[64];
	pt_pattern(buf, sizeof(buf), 78, 0);
	/* a name that is a subdirectory (lost+found at the root of a mounted
	 * filesystem), with "/../../escaped" after it: nothing outside --dir */
	char sub[600], outside[600];
	struct stat st;
	snprintf(sub, sizeof(sub), "%s/lost+found", objdir);
	ck_assert_int_eq(mkdir(sub, 0700), 0);
	struct pt_req r = unterminated(X_WRITE, "lost+found/../../escaped", 10, buf, sizeof(buf));
	snprintf(outside, sizeof(outside), "%s/escaped", dir);
	ck_assert_msg(lstat(outside, &st) < 0,
		      "filed wrote %s, outside --dir (the WRITE was %s)", outside,
		      r.result == XR_SERVED ? "SERVED" : "FAILED");
}
END_TEST

/* ---- filed under strace: syscalls seen, and slowed (strace -e inject) ---------- */

static char trace_log[400];

static void setup_bare(void)
{
	seg = pt_segment(segname, sizeof(segname), 16, 256, 16u << 20);
	pt_tmpdir(dir, sizeof(dir));
	snprintf(objdir, sizeof(objdir), "%s/objects", dir);
	snprintf(trace_log, sizeof(trace_log), "%s/strace.log", dir);
	ck_assert_int_eq(xseg_bind_port(seg, CLIENT), 0);
}

/* filed on FILED under strace -f (fsync and fdatasync logged to trace_log,
 * `inject` applied); false when there is no strace. */
static bool start_traced(const char *inject)
{
	if (system("command -v strace > /dev/null 2>&1") != 0) {
		fprintf(stderr, "no strace: skipped\n");
		return false;
	}
	char path[512];
	pt_bin("filed", path, sizeof(path));
	fflush(NULL);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execlp("strace", "strace", "-f", "-y", "-qq", "-o", trace_log, "-e",
		       "trace=fsync,fdatasync", "-e", inject, path, "--segment", segname, "--port",
		       "1", "--dir", objdir, "--threads", "4", "--log-level", "error", (char *)NULL);
		_exit(127);
	}
	pt_track_pid(pid);
	ck_assert_msg(pt_wait_bound(seg, FILED, 0, TIMEOUT) == 0, "filed did not bind port 1");
	struct xseg_port_info info;
	ck_assert_int_eq(xseg_port_info(seg, FILED, &info), 0);
	pt_track_pid(info.owner);
	return true;
}

static uint64_t ms_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/*
 * Object x is created by a WRITE that is answered; then a FUA WRITE creates
 * y, and while y's fsync of the directory runs (slowed to 1.5 s) a FLUSH
 * comes. The FLUSH covers x, whose directory entry is durable only once an
 * fsync of the directory that began after x was created has ended: the
 * FLUSH must not be answered before the one in progress ends.
 */
START_TEST(flush_waits_for_a_dir_sync_in_progress)
{
	if (!start_traced("inject=fsync:delay_exit=1500000"))
		return;
	write_obj("x", 0, 4096, 41);
	char buf[4096];
	pt_pattern(buf, sizeof(buf), 42, 0);
	uint64_t t0 = ms_now();
	struct pt_req fua = { .op = X_WRITE, .flags = XF_FUA, .target = "y", .size = sizeof(buf),
			      .data = buf, .data_len = sizeof(buf) };
	struct xseg_request *freq = pt_submit(seg, CLIENT, FILED, &fua);
	ck_assert_ptr_nonnull(freq);
	usleep(300 * 1000);   /* y's WRITE is in its fsync of the directory */
	struct pt_req flush = { .op = X_FLUSH };
	struct xseg_request *flreq = pt_submit(seg, CLIENT, FILED, &flush);
	ck_assert_ptr_nonnull(flreq);
	uint64_t t1 = 0, t2 = 0;   /* the FLUSH's answer, the FUA WRITE's: either first */
	for (int i = 0; i < 2; i++) {
		struct xseg_request *rep = pt_receive(seg, CLIENT, TIMEOUT);
		ck_assert_ptr_nonnull(rep);
		if (rep == flreq) {
			t1 = ms_now();
			pt_finish(seg, rep, &flush);
		} else {
			ck_assert_ptr_eq(rep, freq);
			t2 = ms_now();
			pt_finish(seg, rep, &fua);
		}
	}
	expect_served(flush, "FLUSH");
	expect_served(fua, "FUA WRITE");
	ck_assert_msg(t1 - t0 >= 1400,
		      "the FLUSH was answered %llu ms in, the FUA WRITE (whose directory fsync "
		      "holds x's entry) %llu ms in: the FLUSH did not wait for that fsync",
		      (unsigned long long)(t1 - t0), (unsigned long long)(t2 - t0));
}
END_TEST

/*
 * x is created by a plain WRITE (answered, not flushed); then a FUA WRITE
 * to x is answered. Its bytes are durable only with x's directory entry:
 * an fsync of the directory must come between the two answers.
 */
START_TEST(fua_write_makes_its_object_durable)
{
	if (!start_traced("inject=fsync:delay_exit=1"))
		return;
	write_obj("x", 0, 4096, 43);
	uint64_t len0 = 0;
	free(pt_read_file(trace_log, &len0));
	char buf[4096];
	pt_pattern(buf, sizeof(buf), 44, 4096);
	expect_served(do_req(X_WRITE, "x", 4096, sizeof(buf), buf, NULL, XF_FUA), "FUA WRITE");
	uint64_t len = 0;
	char *log = pt_read_file(trace_log, &len);
	ck_assert_ptr_nonnull(log);
	char *since = strndup(log + len0, len - len0);
	char want[400];
	snprintf(want, sizeof(want), "<%s>)", objdir);   /* an fsync of the directory */
	ck_assert_msg(strstr(since, "fdatasync("), "no fdatasync for the FUA WRITE:\n%s", since);
	ck_assert_msg(strstr(since, want),
		      "a FUA WRITE to an object created by an unflushed WRITE was answered with "
		      "no fsync of the directory (the object may vanish in a crash, and the FUA "
		      "bytes with it); syscalls for it:\n%s", since);
	free(since);
	free(log);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("peers_filed");
	TCase *tc = pt_tcase(s, "filed", setup, 45);
	tcase_add_test(tc, write_read_back);
	tcase_add_test(tc, never_written_reads_zeros);
	tcase_add_test(tc, beyond_eof_reads_zeros);
	tcase_add_test(tc, info_sizes);
	tcase_add_test(tc, delete_objects);
	tcase_add_test(tc, copy_objects);
	tcase_add_test(tc, flush_and_fua);
	tcase_add_test(tc, bad_names_refused);
	tcase_add_test(tc, name_is_targetlen_bytes);
	tcase_add_test(tc, name_past_targetlen_stays_in_dir);
	tcase_add_test(tc, unsupported_ops);
	tcase_add_test(tc, concurrent_requests);
	tcase_add_test(tc, sigterm_exits_cleanly);
	tcase_add_test(tc, sigterm_under_load);
	tcase_add_test(tc, options);
	tcase_add_test(tc, daemon_and_pidfile);
	tcase_add_test(pt_tcase(s, "limits", setup_short_names, 45), long_names_and_sizes_refused);
	tcase_add_test(pt_tcase(s, "faults", setup_faulty, 45), fault_injection);
	TCase *traced = pt_tcase(s, "traced", setup_bare, 45);
	tcase_add_test(traced, flush_waits_for_a_dir_sync_in_progress);
	tcase_add_test(traced, fua_write_makes_its_object_durable);
	return pt_run(s);
}
