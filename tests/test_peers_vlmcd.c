/*
 * vlmcd as a child process, in front of a real filed (data across object
 * boundaries, object names on disk, volume ends, unknown volumes, a small
 * request pool, a pool the client holds whole) and in front of a fake blocker played by the test
 * itself (exact splits, FLUSH fan-out and ordering, failed parts, failed
 * FLUSHes leaving their objects dirty, routing).
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/peer_test_util.h"

#define BLOCKER 1u
#define VLMCD 2u
#define CACHE 5u
#define CLIENT 10u
#define TIMEOUT 10000u
#define OBJ (64u << 10)
#define VOL_SIZE (1u << 20)

static struct xseg *seg;
static char segname[64], dir[256], objdir[300], volfile[320];
static pid_t filed, vlmcd;

/* retry_limit: vlmcd's --retry-limit (NULL: its default, 10 s); big: one
 * more --volume (NULL: none) */
static void start_vlmcd_with(const char *retry_limit, const char *big)
{
	FILE *f = fopen(volfile, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "# test volumes\n\nfilevol 256K\n");
	fclose(f);
	vlmcd = pt_start("vlmcd", (const char *const[]){ "--segment", segname, "--port", "2",
			 "--blocker-port", "1", "--volume", "vol:1M", "--volume", "small:100K",
			 "--volumes-file", volfile, "--object-size", "64K", "--threads", "2",
			 "--log-level", "error", big ? "--volume" : "--log-level", big ? big : "error",
			 retry_limit ? "--retry-limit" : NULL, retry_limit, NULL }, NULL);
	ck_assert_msg(pt_wait_bound(seg, VLMCD, vlmcd, TIMEOUT) == 0, "vlmcd did not bind");
}

static void start_vlmcd_retrying(const char *retry_limit)
{
	start_vlmcd_with(retry_limit, NULL);
}

static void start_vlmcd(void)
{
	start_vlmcd_retrying(NULL);
}

static void make_segment(uint32_t requests)
{
	seg = pt_segment(segname, sizeof(segname), 16, requests, 32u << 20);
	pt_tmpdir(dir, sizeof(dir));
	snprintf(objdir, sizeof(objdir), "%s/objects", dir);
	snprintf(volfile, sizeof(volfile), "%s/volumes", dir);
	ck_assert_int_eq(xseg_bind_port(seg, CLIENT), 0);
}

/* filed behind vlmcd */
static void setup_real(void)
{
	make_segment(256);
	filed = pt_start("filed", (const char *const[]){ "--segment", segname, "--port", "1",
			 "--dir", objdir, "--threads", "2", "--log-level", "error", NULL }, NULL);
	ck_assert_msg(pt_wait_bound(seg, BLOCKER, filed, TIMEOUT) == 0, "filed did not bind");
	start_vlmcd();
}

/* The test plays the blocker. */
static void setup_fake(void)
{
	make_segment(256);
	ck_assert_int_eq(xseg_bind_port(seg, BLOCKER), 0);
	start_vlmcd();
}

/* ---- client side ----------------------------------------------------------------- */

static struct pt_req vreq(uint32_t op, const char *volume, uint64_t offset, uint64_t size,
			  const void *data, void *out)
{
	struct pt_req r = { .op = op, .target = volume, .offset = offset, .size = size,
			    .data = data, .data_len = data ? size : 0, .out = out,
			    .out_len = out ? size : 0 };
	int rc = pt_do(seg, CLIENT, VLMCD, &r, TIMEOUT);
	ck_assert_msg(rc == 0, "%s on %s: no reply (%d)", xseg_op_name(op), volume, rc);
	return r;
}

static void expect_result(struct pt_req r, uint32_t result, int err, const char *what)
{
	ck_assert_msg(r.result == result && r.error == err,
		      "%s: result %u error %d (%s), expected %u/%d", what, r.result, r.error,
		      strerror(r.error), result, err);
}

/* The volume as the test wrote it. */
static unsigned char model[VOL_SIZE];

static void vwrite(uint64_t off, uint64_t size, uint64_t seed)
{
	unsigned char *buf = malloc(size);
	pt_pattern(buf, size, seed, off);
	struct pt_req r = vreq(X_WRITE, "vol", off, size, buf, NULL);
	expect_result(r, XR_SERVED, 0, "volume write");
	ck_assert_uint_eq(r.serviced, size);
	memcpy(model + off, buf, size);
	free(buf);
}

static void vcheck(uint64_t off, uint64_t size)
{
	unsigned char *buf = malloc(size);
	struct pt_req r = vreq(X_READ, "vol", off, size, NULL, buf);
	expect_result(r, XR_SERVED, 0, "volume read");
	ck_assert_uint_eq(r.serviced, size);
	for (uint64_t i = 0; i < size; i++)
		if (buf[i] != model[off + i])
			ck_abort_msg("byte %" PRIu64 " of the volume reads %u, expected %u", off + i,
				     buf[i], model[off + i]);
	free(buf);
}

static uint64_t vinfo(const char *volume, int *err)
{
	struct xseg_reply_info info = { 0 };
	struct pt_req r = { .op = X_INFO, .target = volume, .datalen = sizeof(info), .out = &info,
			    .out_len = sizeof(info) };
	ck_assert_int_eq(pt_do(seg, CLIENT, VLMCD, &r, TIMEOUT), 0);
	*err = r.result == XR_SERVED ? 0 : r.error;
	return info.size;
}

/* ---- with filed -------------------------------------------------------------------- */

START_TEST(across_object_boundaries)
{
	memset(model, 0, sizeof(model));
	vwrite(60 << 10, 100 << 10, 1);            /* objects 0, 1, 2 */
	vcheck(60 << 10, 100 << 10);
	vcheck(0, 256 << 10);                      /* with zeros around it */
	vwrite(OBJ - 1, 2, 2);                     /* two bytes, two objects */
	vwrite(3 * OBJ - 7, 3 * OBJ + 13, 3);      /* five objects, unaligned */
	vwrite(VOL_SIZE - 5000, 5000, 4);          /* up to the very end */
	vcheck(0, VOL_SIZE);
	/* random writes, each checked against the model at the end */
	uint64_t x = 12345;
	for (int i = 0; i < 60; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		uint64_t size = 1 + (x >> 20) % (150 << 10);
		uint64_t off = (x >> 40) % (VOL_SIZE - size + 1);
		vwrite(off, size, 10 + (uint64_t)i);
	}
	vcheck(0, VOL_SIZE);
	vcheck(OBJ - 100, 200);
}
END_TEST

static void expect_object(uint64_t index, uint64_t want_size)
{
	char path[600];
	uint64_t len;
	snprintf(path, sizeof(path), "%s/vol_%016" PRIx64, objdir, index);
	unsigned char *file = pt_read_file(path, &len);
	ck_assert_msg(file != NULL, "object file %s missing", path);
	ck_assert_msg(len == want_size, "%s holds %" PRIu64 " bytes, expected %" PRIu64, path, len,
		      want_size);
	ck_assert_msg(!memcmp(file, model + index * OBJ, len), "%s holds the wrong bytes", path);
	free(file);
}

START_TEST(objects_on_disk)
{
	memset(model, 0, sizeof(model));
	vwrite(60 << 10, 100 << 10, 5);   /* 0: 60K..64K, 1: all, 2: 0..32K */
	vwrite(10 * OBJ + 100, 50, 6);    /* object 10: 'a' in hex */
	vwrite(15 * OBJ, OBJ, 7);         /* object 15, exactly */
	expect_object(0, OBJ);
	expect_object(1, OBJ);
	expect_object(2, 32 << 10);
	expect_object(10, 150);
	expect_object(15, OBJ);
	char path[600];
	struct stat st;
	snprintf(path, sizeof(path), "%s/vol_000000000000000a", objdir);
	ck_assert_msg(stat(path, &st) == 0, "object 10 not named in lowercase hex");
	snprintf(path, sizeof(path), "%s/vol_0000000000000003", objdir);
	ck_assert_msg(stat(path, &st) < 0, "an unwritten object exists");
	/* the last object of a volume whose size is not a multiple */
	unsigned char buf[36 << 10];
	pt_pattern(buf, sizeof(buf), 8, 0);
	expect_result(vreq(X_WRITE, "small", OBJ, sizeof(buf), buf, NULL), XR_SERVED, 0,
		      "write to the end of small");
	snprintf(path, sizeof(path), "%s/small_0000000000000001", objdir);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_int_eq(st.st_size, 36 << 10);
	/* FLUSH through to filed */
	expect_result(vreq(X_FLUSH, "vol", 0, 0, NULL, NULL), XR_SERVED, 0, "FLUSH");
	expect_result(vreq(X_FLUSH, "vol", 0, 0, NULL, NULL), XR_SERVED, 0, "FLUSH, nothing dirty");
}
END_TEST

START_TEST(concurrent_splits)
{
	enum { N = 28, SZ = 32 << 10 };
	struct xseg_request *reqs[N];
	unsigned char *buf = malloc(SZ);
	memset(model, 0, sizeof(model));
	/* non-overlapping 32K blocks at 16K + i*36K: many cross a boundary */
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < N; i++) {
			uint64_t off = (16 << 10) + (uint64_t)i * (36 << 10);
			pt_pattern(buf, SZ, 20, off);
			if (!round)
				memcpy(model + off, buf, SZ);
			struct pt_req r = { .op = round ? X_READ : X_WRITE, .target = "vol",
					    .offset = off, .size = SZ, .data = round ? NULL : buf,
					    .data_len = round ? 0 : SZ };
			reqs[i] = pt_submit(seg, CLIENT, VLMCD, &r);
			ck_assert_ptr_nonnull(reqs[i]);
		}
		for (int k = 0; k < N; k++) {
			struct xseg_request *rep = pt_receive(seg, CLIENT, TIMEOUT);
			ck_assert_ptr_nonnull(rep);
			ck_assert_uint_eq(rep->result, XR_SERVED);
			ck_assert_uint_eq(rep->serviced, SZ);
			if (round)
				ck_assert_msg(!memcmp(xseg_get_data(seg, rep), model + rep->offset, SZ),
					      "read at %" PRIu64 " differs", rep->offset);
			xseg_put_request(seg, rep);
		}
	}
	free(buf);
	vcheck(0, VOL_SIZE);
}
END_TEST

START_TEST(volume_ends_and_names)
{
	unsigned char buf[8192] = { 0 };
	expect_result(vreq(X_WRITE, "vol", VOL_SIZE - 4096, 8192, buf, NULL), XR_FAILED, EINVAL,
		      "write across the end");
	expect_result(vreq(X_READ, "vol", VOL_SIZE, 1, NULL, buf), XR_FAILED, EINVAL,
		      "read at the end");
	expect_result(vreq(X_READ, "vol", UINT64_MAX - 10, 100, NULL, buf), XR_FAILED, EINVAL,
		      "read at an overflowing offset");
	expect_result(vreq(X_READ, "small", 100 << 10, 1, NULL, buf), XR_FAILED, EINVAL,
		      "read past small");
	struct pt_req r = vreq(X_READ, "vol", VOL_SIZE, 0, NULL, NULL);
	expect_result(r, XR_SERVED, 0, "empty read at the end");
	/* size beyond the data area */
	r = (struct pt_req){ .op = X_WRITE, .target = "vol", .size = 8192, .datalen = 4096 };
	ck_assert_int_eq(pt_do(seg, CLIENT, VLMCD, &r, TIMEOUT), 0);
	expect_result(r, XR_FAILED, EINVAL, "size beyond the buffer");

	expect_result(vreq(X_READ, "nosuch", 0, 4096, NULL, buf), XR_FAILED, ENOENT, "unknown volume");
	expect_result(vreq(X_WRITE, "vo", 0, 4096, buf, NULL), XR_FAILED, ENOENT, "prefix of a volume");
	expect_result(vreq(X_WRITE, "vol_0000000000000000", 0, 4096, buf, NULL), XR_FAILED, ENOENT,
		      "an object name");
	expect_result(vreq(X_FLUSH, "nosuch", 0, 0, NULL, NULL), XR_FAILED, ENOENT, "FLUSH unknown");
	int err;
	vinfo("nosuch", &err);
	ck_assert_int_eq(err, ENOENT);
	ck_assert_uint_eq(vinfo("vol", &err), VOL_SIZE);
	ck_assert_int_eq(err, 0);
	ck_assert_uint_eq(vinfo("small", &err), 100 << 10);
	ck_assert_uint_eq(vinfo("filevol", &err), 256 << 10);
	ck_assert_int_eq(err, 0);
	/* INFO without a data area */
	r = (struct pt_req){ .op = X_INFO, .target = "vol" };
	struct xseg_request *req = pt_submit(seg, CLIENT, VLMCD, &r);
	ck_assert_ptr_nonnull(req);
	ck_assert_ptr_eq(pt_receive(seg, CLIENT, TIMEOUT), req);
	ck_assert_uint_eq(req->result, XR_SERVED);
	ck_assert_uint_eq(((struct xseg_reply_info *)xseg_get_data(seg, req))->size, VOL_SIZE);
	xseg_put_request(seg, req);
	/* INFO with no target: the volume list, in the order given (what nbdd
	 * serves), whether the data area holds it (4K) or not (8 bytes) */
	static const char list[] = "vol 1048576\nsmall 102400\nfilevol 262144\n";
	for (uint64_t datalen = 8; datalen <= 4096; datalen += 4088) {
		char got[4096] = { 0 };
		r = (struct pt_req){ .op = X_INFO, .datalen = datalen, .out = got,
				     .out_len = sizeof(got) - 1 };
		ck_assert_int_eq(pt_do(seg, CLIENT, VLMCD, &r, TIMEOUT), 0);
		expect_result(r, XR_SERVED, 0, "INFO with no target");
		ck_assert_uint_eq(r.serviced, strlen(list));
		got[r.serviced] = '\0';
		ck_assert_str_eq(got, list);
	}

	expect_result(vreq(X_DELETE, "vol", 0, 0, NULL, NULL), XR_FAILED, EOPNOTSUPP, "DELETE");
	expect_result(vreq(X_PING, NULL, 0, 0, NULL, NULL), XR_SERVED, 0, "PING");
	/* still serving */
	memset(model, 0, sizeof(model));
	vwrite(0, 4096, 9);
	vcheck(0, 8192);
}
END_TEST

START_TEST(sigterm_both)
{
	memset(model, 0, sizeof(model));
	vwrite(OBJ - 10, 20, 10);
	int status = pt_stop(vlmcd, SIGTERM, TIMEOUT);
	ck_assert_msg(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "vlmcd status %#x", status);
	status = pt_stop(filed, SIGTERM, TIMEOUT);
	ck_assert_msg(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "filed status %#x", status);
	struct xseg_port_info info;
	ck_assert_int_eq(xseg_port_info(seg, VLMCD, &info), 0);
	ck_assert_int_eq(info.owner, 0);
	ck_assert_int_eq(xseg_port_info(seg, BLOCKER, &info), 0);
	ck_assert_int_eq(info.owner, 0);
}
END_TEST

START_TEST(options)
{
	char log[320];
	snprintf(log, sizeof(log), "%s/opt.log", dir);
	/* names: what the one line on stderr must name (NULL: not checked) */
	struct { int want; const char *const *args; const char *names; } cases[] = {
		{ 0, (const char *const[]){ "--help", NULL }, NULL },
		{ 2, (const char *const[]){ "--segment", segname, "--port", "3", "--blocker-port", "1",
					    NULL }, NULL },
		{ 2, (const char *const[]){ "--segment", segname, "--port", "3", "--volume", "v:1M",
					    NULL }, NULL },
		{ 2, (const char *const[]){ "--segment", segname, "--port", "3", "--blocker-port", "1",
					    "--volume", "novalue", NULL }, NULL },
		{ 2, (const char *const[]){ "--segment", segname, "--port", "3", "--blocker-port", "1",
					    "--volume", "v:1M", "--volume", "v:2M", NULL }, NULL },
		{ 2, (const char *const[]){ "--segment", segname, "--port", "3", "--blocker-port", "1",
					    "--volume", "a/b:1M", NULL }, NULL },
		{ 2, (const char *const[]){ "--segment", segname, "--port", "3", "--blocker-port", "1",
					    "--volume", "v:huge", NULL }, NULL },
		{ 2, (const char *const[]){ "--segment", segname, "--port", "3", "--blocker-port", "1",
					    "--volume", "v:1M", "--object-size", "0", NULL }, NULL },
		{ 2, (const char *const[]){ "--segment", segname, "--port", "3", "--blocker-port", "1",
					    "--volumes-file", "/no/such/file", NULL }, NULL },
		/* its own port as the next hop: every request would loop back */
		{ 2, (const char *const[]){ "--segment", segname, "--port", "3", "--blocker-port", "3",
					    "--volume", "v:1M", NULL }, "--blocker-port 3" },
		{ 2, (const char *const[]){ "--segment", segname, "--port", "2-4", "--blocker-port",
					    "3", "--volume", "v:1M", NULL }, "--blocker-port 3" },
		/* parts must start and end on a sector */
		{ 2, (const char *const[]){ "--segment", segname, "--port", "3", "--blocker-port", "1",
					    "--volume", "v:1M", "--object-size", "3", NULL },
		  "--object-size: '3'" },
		{ 2, (const char *const[]){ "--segment", segname, "--port", "3", "--blocker-port", "1",
					    "--volume", "v:1M", "--object-size", "1000", NULL },
		  "--object-size: '1000'" },
		/* a retry limit of none, or past an hour, or not a number */
		{ 2, (const char *const[]){ "--segment", segname, "--port", "3", "--blocker-port", "1",
					    "--volume", "v:1M", "--retry-limit", "0", NULL },
		  "--retry-limit: '0'" },
		{ 2, (const char *const[]){ "--segment", segname, "--port", "3", "--blocker-port", "1",
					    "--volume", "v:1M", "--retry-limit", "3601", NULL },
		  "--retry-limit: '3601'" },
		{ 2, (const char *const[]){ "--segment", segname, "--port", "3", "--blocker-port", "1",
					    "--volume", "v:1M", "--retry-limit", "2s", NULL },
		  "--retry-limit: '2s'" },
		/* a next hop the segment lacks: every request would fail EINVAL */
		{ 2, (const char *const[]){ "--segment", segname, "--port", "3", "--blocker-port", "40",
					    "--volume", "v:1M", NULL }, "--blocker-port 40" },
		/* more objects than a FLUSH walks: 2^64-1 bytes (their count overflowed
		 * to 0: a 0-byte dirty set, writes past it, FLUSHes that flushed
		 * nothing), 4T of 512-byte objects (a 1G set, seconds a FLUSH) */
		{ 2, (const char *const[]){ "--segment", segname, "--port", "3", "--blocker-port", "1",
					    "--volume", "v:18446744073709551615", NULL },
		  "volume v: 18446744073709551615 bytes" },
		{ 2, (const char *const[]){ "--segment", segname, "--port", "3", "--blocker-port", "1",
					    "--volume", "v:4T", "--object-size", "512", NULL },
		  "8589934592 objects" },
		/* not a text file: /dev/zero read on forever, a directory read as
		 * empty */
		{ 2, (const char *const[]){ "--segment", segname, "--port", "3", "--blocker-port", "1",
					    "--volumes-file", "/dev/zero", NULL }, "NUL" },
		{ 2, (const char *const[]){ "--segment", segname, "--port", "3", "--blocker-port", "1",
					    "--volumes-file", "/", NULL }, "Is a directory" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		unlink(log);
		int status = pt_run_prog("vlmcd", cases[i].args, log, TIMEOUT);
		ck_assert_msg(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == cases[i].want,
			      "case %zu: status %#x, expected exit %d", i, status, cases[i].want);
		if (!cases[i].names)
			continue;
		uint64_t n;
		char *text = pt_read_file(log, &n);
		ck_assert_ptr_nonnull(text);
		text[n] = '\0';
		ck_assert_msg(strstr(text, cases[i].names) && strchr(text, '\n') == text + n - 1,
			      "case %zu: not one line naming '%s': %s", i, cases[i].names, text);
		free(text);
	}
	/* a bad line in the volumes file is named */
	FILE *f = fopen(volfile, "w");
	fprintf(f, "good 1M\nbad line here\n");
	fclose(f);
	unlink(log);
	int status = pt_run_prog("vlmcd", (const char *const[]){ "--segment", segname, "--port", "3",
				 "--blocker-port", "1", "--volumes-file", volfile, NULL }, log,
				 TIMEOUT);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 2);
	uint64_t len;
	char *out = pt_read_file(log, &len);
	ck_assert_ptr_nonnull(out);
	out[len] = '\0';
	ck_assert_msg(strstr(out, "line 2"), "bad line not named: %s", out);
	free(out);
}
END_TEST

/* A segment with few requests: a request split in 64 parts still goes
 * through, the rest of the split waiting for requests to come back. */
static void setup_small_pool(void)
{
	make_segment(12);
	filed = pt_start("filed", (const char *const[]){ "--segment", segname, "--port", "1",
			 "--dir", objdir, "--log-level", "error", NULL }, NULL);
	ck_assert(pt_wait_bound(seg, BLOCKER, filed, TIMEOUT) == 0);
	vlmcd = pt_start("vlmcd", (const char *const[]){ "--segment", segname, "--port", "2",
			 "--blocker-port", "1", "--volume", "vol:1M", "--object-size", "4K",
			 "--log-level", "error", NULL }, NULL);
	ck_assert(pt_wait_bound(seg, VLMCD, vlmcd, TIMEOUT) == 0);
}

START_TEST(small_request_pool)
{
	memset(model, 0, sizeof(model));
	vwrite(1000, 256 << 10, 11);
	vcheck(0, 300 << 10);
	ck_assert_int_eq(pt_stop(vlmcd, SIGTERM, TIMEOUT), 0);
}
END_TEST

/* The client takes every free request and sends them all as volume reads:
 * vlmcd needs an object request for each while the pool has none. Its
 * reserve serves them one by one; without it none would come back. */
START_TEST(reads_with_the_pool_taken_by_the_client)
{
	static struct xseg_request *held[256];
	int n = 0;
	while (n < 256 && (held[n] = xseg_get_request(seg, CLIENT)) != NULL)
		n++;
	ck_assert_int_gt(n, 200);
	for (int i = 0; i < n; i++) {
		ck_assert_int_eq(xseg_prep_target(seg, held[i], "vol", 4096), 0);
		held[i]->op = X_READ;
		held[i]->offset = (uint64_t)(i % 256) * 4096;
		held[i]->size = 4096;
		ck_assert_int_ge(xseg_submit(seg, held[i], CLIENT, VLMCD), 0);
	}
	static char zeros[4096];
	for (int k = 0; k < n; k++) {
		struct xseg_request *rep = pt_receive(seg, CLIENT, TIMEOUT);
		ck_assert_msg(rep != NULL, "no reply after %d of %d reads: vlmcd waits for a "
			      "request of its own", k, n);
		ck_assert_msg(rep->result == XR_SERVED, "read failed: %d", rep->error);
		ck_assert_int_eq(memcmp(xseg_get_data(seg, rep), zeros, sizeof(zeros)), 0);
		ck_assert_int_eq(xseg_put_request(seg, rep), 0);
	}
}
END_TEST

/* ---- with the test as the blocker ---------------------------------------------- */

static struct xseg_request *blocker_accept(uint32_t port, unsigned timeout_ms)
{
	struct xseg_request *req;
	uint64_t deadline = xseg_now_ns() + (uint64_t)timeout_ms * 1000000;
	while (xseg_now_ns() < deadline) {
		if (xseg_accept(seg, port, &req, 1) == 1)
			return req;
		xseg_poll(seg, port, 0, 20 * 1000000ull);
	}
	return NULL;
}

static void blocker_answer(struct xseg_request *req, uint32_t port, int err)
{
	req->result = err ? XR_FAILED : XR_SERVED;
	req->error = err;
	req->serviced = err ? 0 : req->size;
	ck_assert_int_ge(xseg_respond(seg, req, port), 0);
}

static bool client_has_reply(unsigned wait_ms)
{
	struct xseg_port_info info;
	usleep(wait_ms * 1000);
	xseg_port_info(seg, CLIENT, &info);
	return info.reply_depth > 0;
}

static int by_target(const void *a, const void *b)
{
	struct xseg_request *const *x = a, *const *y = b;
	return strcmp(xseg_get_target(seg, *x), xseg_get_target(seg, *y));
}

START_TEST(exact_split)
{
	unsigned char *buf = malloc(100 << 10);
	pt_pattern(buf, 100 << 10, 30, 60 << 10);
	struct pt_req r = { .op = X_WRITE, .target = "vol", .offset = 60 << 10, .size = 100 << 10,
			    .data = buf, .data_len = 100 << 10, .flags = XF_FUA };
	struct xseg_request *req = pt_submit(seg, CLIENT, VLMCD, &r);
	ck_assert_ptr_nonnull(req);
	struct xseg_request *parts[3];
	for (int i = 0; i < 3; i++) {
		parts[i] = blocker_accept(BLOCKER, TIMEOUT);
		ck_assert_msg(parts[i] != NULL, "part %d never came", i);
	}
	ck_assert_ptr_null(blocker_accept(BLOCKER, 100));
	qsort(parts, 3, sizeof(parts[0]), by_target);
	static const struct { const char *name; uint64_t off, size, buf_off; } want[3] = {
		{ "vol_0000000000000000", 60 << 10, 4 << 10, 0 },
		{ "vol_0000000000000001", 0, 64 << 10, 4 << 10 },
		{ "vol_0000000000000002", 0, 32 << 10, 68 << 10 },
	};
	for (int i = 0; i < 3; i++) {
		ck_assert_str_eq(xseg_get_target(seg, parts[i]), want[i].name);
		ck_assert_uint_eq(parts[i]->op, X_WRITE);
		ck_assert_uint_eq(parts[i]->offset, want[i].off);
		ck_assert_uint_eq(parts[i]->size, want[i].size);
		ck_assert_uint_eq(parts[i]->flags, XF_FUA);
		ck_assert_uint_ge(parts[i]->datalen, want[i].size);
		ck_assert_msg(!memcmp(xseg_get_data(seg, parts[i]), buf + want[i].buf_off,
				      want[i].size), "part %d carries the wrong bytes", i);
	}
	blocker_answer(parts[0], BLOCKER, 0);
	blocker_answer(parts[2], BLOCKER, 0);
	ck_assert_msg(!client_has_reply(100), "answered before every part was back");
	blocker_answer(parts[1], BLOCKER, 0);
	ck_assert_ptr_eq(pt_receive(seg, CLIENT, TIMEOUT), req);
	ck_assert_uint_eq(req->result, XR_SERVED);
	ck_assert_uint_eq(req->serviced, 100 << 10);
	xseg_put_request(seg, req);

	/* a read: each part's bytes land at their place */
	r = (struct pt_req){ .op = X_READ, .target = "vol", .offset = OBJ - 3, .size = 6 };
	req = pt_submit(seg, CLIENT, VLMCD, &r);
	for (int i = 0; i < 2; i++) {
		struct xseg_request *p = blocker_accept(BLOCKER, TIMEOUT);
		ck_assert_ptr_nonnull(p);
		memset(xseg_get_data(seg, p), p->offset ? 'a' : 'b', p->size);
		blocker_answer(p, BLOCKER, 0);
	}
	ck_assert_ptr_eq(pt_receive(seg, CLIENT, TIMEOUT), req);
	ck_assert_uint_eq(req->result, XR_SERVED);
	ck_assert_int_eq(memcmp(xseg_get_data(seg, req), "aaabbb", 6), 0);
	xseg_put_request(seg, req);
	free(buf);
}
END_TEST

static struct xseg_request *submit_write(uint64_t off, uint64_t size)
{
	static unsigned char zeros[OBJ];
	struct pt_req r = { .op = X_WRITE, .target = "vol", .offset = off, .size = size,
			    .data = zeros, .data_len = size };
	struct xseg_request *req = pt_submit(seg, CLIENT, VLMCD, &r);
	ck_assert_ptr_nonnull(req);
	return req;
}

/* A write served (or failed) by the test's blocker, part by part. */
static void blocker_write(uint64_t off, uint64_t size, int fail_part_err)
{
	struct xseg_request *req = submit_write(off, size);
	uint64_t nparts = (off + size - 1) / OBJ - off / OBJ + 1;
	for (uint64_t i = 0; i < nparts; i++) {
		struct xseg_request *p = blocker_accept(BLOCKER, TIMEOUT);
		ck_assert_ptr_nonnull(p);
		blocker_answer(p, BLOCKER, i == nparts - 1 ? fail_part_err : 0);
	}
	ck_assert_ptr_eq(pt_receive(seg, CLIENT, TIMEOUT), req);
	ck_assert_uint_eq(req->result, fail_part_err ? XR_FAILED : XR_SERVED);
	ck_assert_int_eq(req->error, fail_part_err);
	xseg_put_request(seg, req);
}

/* One of vlmcd's own figures in its answer to "stats". */
static uint64_t vlmcd_figure(const char *name)
{
	char out[16384] = { 0 }, key[64];
	struct pt_req r = { .op = X_CONTROL, .size = 5, .data = "stats", .data_len = 5,
			    .datalen = sizeof(out), .out = out, .out_len = sizeof(out) - 1 };
	ck_assert_int_eq(pt_do(seg, CLIENT, VLMCD, &r, TIMEOUT), 0);
	expect_result(r, XR_SERVED, 0, "stats");
	snprintf(key, sizeof(key), "\"%s\":", name);
	const char *at = strstr(out, key);
	ck_assert_msg(at != NULL, "no %s in %s", name, out);
	return strtoull(at + strlen(key), NULL, 10);
}

/* Collects the FLUSH parts that arrive within wait_ms, sorted by name. */
static int blocker_flushes(struct xseg_request **out, int max, unsigned wait_ms)
{
	int n = 0;
	struct xseg_request *p;
	while (n < max && (p = blocker_accept(BLOCKER, wait_ms)) != NULL) {
		ck_assert_uint_eq(p->op, X_FLUSH);
		out[n++] = p;
	}
	qsort(out, (size_t)n, sizeof(out[0]), by_target);
	return n;
}

/* A FLUSH of "vol" whose one part, a FLUSH with no target (everything the
 * blocker holds), is answered err. */
static void flush_all_part(int err)
{
	struct pt_req r = { .op = X_FLUSH, .target = "vol" };
	struct xseg_request *flush = pt_submit(seg, CLIENT, VLMCD, &r);
	ck_assert_ptr_nonnull(flush);
	struct xseg_request *p = blocker_accept(BLOCKER, TIMEOUT);
	ck_assert_msg(p != NULL, "the FLUSH sent nothing to the blocker");
	ck_assert_uint_eq(p->op, X_FLUSH);
	ck_assert_msg(p->targetlen == 0, "a FLUSH of one object, not of everything");
	ck_assert_msg(blocker_accept(BLOCKER, 100) == NULL, "more than one part");
	blocker_answer(p, BLOCKER, err);
	ck_assert_ptr_eq(pt_receive(seg, CLIENT, TIMEOUT), flush);
	ck_assert_uint_eq(flush->result, err ? XR_FAILED : XR_SERVED);
	ck_assert_int_eq(flush->error, err);
	xseg_put_request(seg, flush);
}

/* The test plays the blocker, past vlmcd's first FLUSH of "vol". */
static void setup_fake_flushed(void)
{
	setup_fake();
	flush_all_part(0);
}

/* vlmcd keeps the objects written since the last FLUSH in memory: a new
 * one cannot know what the one before it acknowledged (still dirty in a
 * cache, maybe), so its first FLUSH of a volume is a FLUSH of everything
 * at the blocker, again after that failed; then object by object. Its
 * empty set answered that FLUSH with nothing flushed. */
START_TEST(first_flush_after_start)
{
	struct xseg_request *parts[16];
	struct pt_req r = { .op = X_FLUSH, .target = "vol" };
	blocker_write(OBJ * 2, 10, 0);
	flush_all_part(EIO);
	flush_all_part(0);      /* object 2 is covered: not flushed again */
	struct xseg_request *flush = pt_submit(seg, CLIENT, VLMCD, &r);
	ck_assert_ptr_eq(pt_receive(seg, CLIENT, TIMEOUT), flush);
	ck_assert_uint_eq(flush->result, XR_SERVED);
	xseg_put_request(seg, flush);
	ck_assert_ptr_null(blocker_accept(BLOCKER, 50));
	blocker_write(OBJ * 3, 10, 0);
	flush = pt_submit(seg, CLIENT, VLMCD, &r);
	ck_assert_int_eq(blocker_flushes(parts, 16, 300), 1);
	ck_assert_str_eq(xseg_get_target(seg, parts[0]), "vol_0000000000000003");
	blocker_answer(parts[0], BLOCKER, 0);
	ck_assert_ptr_eq(pt_receive(seg, CLIENT, TIMEOUT), flush);
	ck_assert_uint_eq(flush->result, XR_SERVED);
	xseg_put_request(seg, flush);
	/* another volume's first FLUSH: of everything too */
	r.target = "small";
	flush = pt_submit(seg, CLIENT, VLMCD, &r);
	struct xseg_request *p = blocker_accept(BLOCKER, TIMEOUT);
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(p->targetlen, 0);
	blocker_answer(p, BLOCKER, 0);
	ck_assert_ptr_eq(pt_receive(seg, CLIENT, TIMEOUT), flush);
	ck_assert_uint_eq(flush->result, XR_SERVED);
	xseg_put_request(seg, flush);
}
END_TEST

START_TEST(flush_fans_out)
{
	struct xseg_request *parts[16];
	blocker_write(100, 10, 0);             /* object 0 */
	blocker_write(3 * OBJ + 5, 10, 0);     /* object 3 */
	blocker_write(OBJ - 1, 2, 0);          /* objects 0 and 1 */
	blocker_write(7 * OBJ, 10, EIO);       /* object 7 failed: not dirty */

	struct pt_req r = { .op = X_FLUSH, .target = "vol" };
	struct xseg_request *flush = pt_submit(seg, CLIENT, VLMCD, &r);
	ck_assert_ptr_nonnull(flush);
	int n = blocker_flushes(parts, 16, 300);
	ck_assert_int_eq(n, 3);
	ck_assert_str_eq(xseg_get_target(seg, parts[0]), "vol_0000000000000000");
	ck_assert_str_eq(xseg_get_target(seg, parts[1]), "vol_0000000000000001");
	ck_assert_str_eq(xseg_get_target(seg, parts[2]), "vol_0000000000000003");
	blocker_answer(parts[0], BLOCKER, 0);
	blocker_answer(parts[2], BLOCKER, 0);
	ck_assert_msg(!client_has_reply(100), "FLUSH answered before every object flushed");
	blocker_answer(parts[1], BLOCKER, 0);
	ck_assert_ptr_eq(pt_receive(seg, CLIENT, TIMEOUT), flush);
	ck_assert_uint_eq(flush->result, XR_SERVED);
	xseg_put_request(seg, flush);

	/* nothing written since: nothing to flush */
	flush = pt_submit(seg, CLIENT, VLMCD, &r);
	ck_assert_ptr_eq(pt_receive(seg, CLIENT, TIMEOUT), flush);
	ck_assert_uint_eq(flush->result, XR_SERVED);
	xseg_put_request(seg, flush);
	ck_assert_ptr_null(blocker_accept(BLOCKER, 50));

	/* a failed object flush fails the FLUSH */
	blocker_write(OBJ * 2, 10, 0);
	flush = pt_submit(seg, CLIENT, VLMCD, &r);
	ck_assert_int_eq(blocker_flushes(parts, 16, 200), 1);
	blocker_answer(parts[0], BLOCKER, EIO);
	ck_assert_ptr_eq(pt_receive(seg, CLIENT, TIMEOUT), flush);
	ck_assert_uint_eq(flush->result, XR_FAILED);
	ck_assert_int_eq(flush->error, EIO);
	xseg_put_request(seg, flush);
}
END_TEST

/* A 0-byte WRITE or READ with XF_FLUSH is a barrier: answered once the
 * written objects are flushed, as a FLUSH is (it was answered at once,
 * nothing flushed). Without the flag, answered at once. */
START_TEST(empty_request_with_flush_flag)
{
	struct xseg_request *parts[16];
	blocker_write(5 * OBJ + 100, 10, 0);   /* object 5 dirty */
	struct pt_req r = { .op = X_WRITE, .target = "vol", .offset = OBJ, .size = 0 };
	struct xseg_request *req = pt_submit(seg, CLIENT, VLMCD, &r);
	ck_assert_ptr_eq(pt_receive(seg, CLIENT, TIMEOUT), req);
	ck_assert_uint_eq(req->result, XR_SERVED);
	xseg_put_request(seg, req);
	ck_assert_ptr_null(blocker_accept(BLOCKER, 50));

	for (int i = 0; i < 2; i++) {
		blocker_write(5 * OBJ + 100, 10, 0);
		r.op = i ? X_READ : X_WRITE;
		r.flags = XF_FLUSH;
		req = pt_submit(seg, CLIENT, VLMCD, &r);
		ck_assert_ptr_nonnull(req);
		ck_assert_int_eq(blocker_flushes(parts, 16, 300), 1);
		ck_assert_str_eq(xseg_get_target(seg, parts[0]), "vol_0000000000000005");
		ck_assert_msg(!client_has_reply(100), "answered before the flush");
		blocker_answer(parts[0], BLOCKER, 0);
		ck_assert_ptr_eq(pt_receive(seg, CLIENT, TIMEOUT), req);
		ck_assert_uint_eq(req->result, XR_SERVED);
		ck_assert_uint_eq(req->serviced, 0);
		xseg_put_request(seg, req);
	}
}
END_TEST

/* A FLUSH is answered only after every earlier FLUSH of the volume; the
 * later one covers what was written while the earlier one was out. */
START_TEST(flushes_in_order)
{
	struct xseg_request *parts[16];
	struct pt_req r = { .op = X_FLUSH, .target = "vol" };
	blocker_write(0, 10, 0);
	struct xseg_request *f1 = pt_submit(seg, CLIENT, VLMCD, &r);
	ck_assert_int_eq(blocker_flushes(parts, 16, 200), 1);   /* held */
	blocker_write(OBJ, 10, 0);
	struct xseg_request *f2 = pt_submit(seg, CLIENT, VLMCD, &r);
	ck_assert_ptr_nonnull(f2);
	ck_assert_msg(blocker_accept(BLOCKER, 200) == NULL, "the second FLUSH did not wait");
	ck_assert(!client_has_reply(0));
	blocker_answer(parts[0], BLOCKER, 0);
	ck_assert_ptr_eq(pt_receive(seg, CLIENT, TIMEOUT), f1);
	ck_assert_uint_eq(f1->result, XR_SERVED);
	xseg_put_request(seg, f1);
	ck_assert_int_eq(blocker_flushes(parts, 16, 200), 1);
	ck_assert_str_eq(xseg_get_target(seg, parts[0]), "vol_0000000000000001");
	blocker_answer(parts[0], BLOCKER, 0);
	ck_assert_ptr_eq(pt_receive(seg, CLIENT, TIMEOUT), f2);
	ck_assert_uint_eq(f2->result, XR_SERVED);
	xseg_put_request(seg, f2);
}
END_TEST

/* A FLUSH that failed must not forget what it was to flush: the write to
 * object 2 was acknowledged, its object's flush failed (FLUSH answered
 * EIO), so a later FLUSH must reach object 2 again before it may answer
 * SERVED. */
START_TEST(failed_flush_keeps_objects_dirty)
{
	struct xseg_request *parts[16];
	struct pt_req r = { .op = X_FLUSH, .target = "vol" };
	blocker_write(OBJ * 2, 10, 0);          /* acknowledged: object 2 dirty */
	struct xseg_request *flush = pt_submit(seg, CLIENT, VLMCD, &r);
	ck_assert_ptr_nonnull(flush);
	ck_assert_int_eq(blocker_flushes(parts, 16, 200), 1);
	blocker_answer(parts[0], BLOCKER, EIO);   /* the object's flush fails */
	ck_assert_ptr_eq(pt_receive(seg, CLIENT, TIMEOUT), flush);
	ck_assert_uint_eq(flush->result, XR_FAILED);
	xseg_put_request(seg, flush);

	/* the client retries the FLUSH: object 2 is still not durable */
	flush = pt_submit(seg, CLIENT, VLMCD, &r);
	ck_assert_ptr_nonnull(flush);
	int n = blocker_flushes(parts, 16, 300);
	if (n == 0) {
		struct xseg_request *back = pt_receive(seg, CLIENT, TIMEOUT);
		ck_assert_msg(0, "second FLUSH sent no object flush and was answered %s "
			      "(object 2's data was never flushed)",
			      back && back->result == XR_SERVED ? "SERVED" : "otherwise");
	}
	ck_assert_int_eq(n, 1);
	ck_assert_str_eq(xseg_get_target(seg, parts[0]), "vol_0000000000000002");
	blocker_answer(parts[0], BLOCKER, 0);
	ck_assert_ptr_eq(pt_receive(seg, CLIENT, TIMEOUT), flush);
	ck_assert_uint_eq(flush->result, XR_SERVED);
	xseg_put_request(seg, flush);
	ck_assert_uint_eq(vlmcd_figure("flushes_failed"), 1);

	/* served: nothing is left to flush */
	flush = pt_submit(seg, CLIENT, VLMCD, &r);
	ck_assert_ptr_eq(pt_receive(seg, CLIENT, TIMEOUT), flush);
	ck_assert_uint_eq(flush->result, XR_SERVED);
	xseg_put_request(seg, flush);
	ck_assert_ptr_null(blocker_accept(BLOCKER, 50));
}
END_TEST

/* A FLUSH that stopped before sending its object flushes (the blocker port
 * unbound: EHOSTUNREACH) keeps them too, and so do objects written while a
 * FLUSH that then fails is out: the retry flushes both. */
START_TEST(unsent_flush_keeps_objects_dirty)
{
	struct xseg_request *parts[16];
	struct pt_req r = { .op = X_FLUSH, .target = "vol" };
	blocker_write(OBJ * 4, 10, 0);
	blocker_write(OBJ * 5 - 5, 10, 0);      /* objects 4 and 5 */
	ck_assert_int_eq(xseg_leave_port(seg, BLOCKER), 0);
	struct xseg_request *flush = pt_submit(seg, CLIENT, VLMCD, &r);
	ck_assert_ptr_eq(pt_receive(seg, CLIENT, TIMEOUT), flush);
	ck_assert_uint_eq(flush->result, XR_FAILED);
	ck_assert_int_eq(flush->error, EHOSTUNREACH);
	xseg_put_request(seg, flush);

	/* the blocker is back; a FLUSH fails with a write acknowledged meanwhile */
	ck_assert_int_eq(xseg_bind_port(seg, BLOCKER), 0);
	flush = pt_submit(seg, CLIENT, VLMCD, &r);
	ck_assert_int_eq(blocker_flushes(parts, 16, 300), 2);
	ck_assert_str_eq(xseg_get_target(seg, parts[0]), "vol_0000000000000004");
	ck_assert_str_eq(xseg_get_target(seg, parts[1]), "vol_0000000000000005");
	blocker_write(OBJ * 6, 10, 0);
	blocker_answer(parts[0], BLOCKER, 0);
	blocker_answer(parts[1], BLOCKER, EIO);
	ck_assert_ptr_eq(pt_receive(seg, CLIENT, TIMEOUT), flush);
	ck_assert_uint_eq(flush->result, XR_FAILED);
	xseg_put_request(seg, flush);
	ck_assert_uint_eq(vlmcd_figure("flushes_failed"), 2);

	flush = pt_submit(seg, CLIENT, VLMCD, &r);
	ck_assert_int_eq(blocker_flushes(parts, 16, 300), 3);
	ck_assert_str_eq(xseg_get_target(seg, parts[0]), "vol_0000000000000004");
	ck_assert_str_eq(xseg_get_target(seg, parts[1]), "vol_0000000000000005");
	ck_assert_str_eq(xseg_get_target(seg, parts[2]), "vol_0000000000000006");
	for (int i = 0; i < 3; i++)
		blocker_answer(parts[i], BLOCKER, 0);
	ck_assert_ptr_eq(pt_receive(seg, CLIENT, TIMEOUT), flush);
	ck_assert_uint_eq(flush->result, XR_SERVED);
	xseg_put_request(seg, flush);
}
END_TEST

/* vlmcd's --retry-limit in slow_flush_fan_out: short, so the test need not
 * outlast the default 10 s; an object flush comes back every
 * SLOW_FLUSH_MS, well within it even on a loaded machine. */
#define RETRY_LIMIT_S 3u
#define SLOW_FLUSH_MS 800u

/* The test plays the blocker, with a pool of 12 requests. */
static void setup_fake_small_pool(void)
{
	make_segment(12);
	ck_assert_int_eq(xseg_bind_port(seg, BLOCKER), 0);
	char limit[16];
	snprintf(limit, sizeof(limit), "%u", RETRY_LIMIT_S);
	start_vlmcd_retrying(limit);
	flush_all_part(0);
}

/* A FLUSH of more objects than the pool holds, through a blocker slow to
 * flush each (a cache writing back): the rest of the fan-out waits for
 * requests, part after part comes back, a new one goes out each time. It
 * makes progress all along, so it must not fail for waiting longer than
 * the retry limit in all; it failed ENOBUFS once the limit had passed
 * since the FLUSH came, whatever came back meanwhile, and a client's
 * retry redid every object. */
START_TEST(slow_flush_fan_out)
{
	struct pt_req r = { .op = X_FLUSH, .target = "vol" };
	for (uint64_t o = 0; o < 16; o++)
		blocker_write(o * OBJ, 10, 0);
	struct xseg_request *flush = pt_submit(seg, CLIENT, VLMCD, &r);
	ck_assert_ptr_nonnull(flush);
	struct xseg_request *p;
	int got = 0, answered = 0;
	uint64_t start = xseg_now_ns();
	while (answered < 16 && !client_has_reply(0)) {
		if ((p = blocker_accept(BLOCKER, 200)) != NULL) {
			ck_assert_uint_eq(p->op, X_FLUSH);
			got++;
			/* one object flush every SLOW_FLUSH_MS while some are yet to come */
			struct xseg_port_info pi;
			ck_assert_int_eq(xseg_port_info(seg, BLOCKER, &pi), 0);
			if (got + (int)pi.request_depth < 16)
				usleep(SLOW_FLUSH_MS * 1000);
			blocker_answer(p, BLOCKER, 0);
			answered++;
		}
	}
	ck_assert_ptr_eq(pt_receive(seg, CLIENT, TIMEOUT), flush);
	ck_assert_msg(flush->result == XR_SERVED, "FLUSH failed (%s) after %d of 16 object "
		      "flushes, each answered", strerror(flush->error), answered);
	ck_assert_int_eq(answered, 16);
	/* else this proved nothing */
	ck_assert_msg(xseg_now_ns() - start > (RETRY_LIMIT_S * 1000ull + 500) * 1000000,
		      "the fan-out took less than the retry limit (%u s)", RETRY_LIMIT_S);
	xseg_put_request(seg, flush);
}
END_TEST

/* vlmcd's PARTS_OUT_MAX, and a volume of more objects than that */
#define PARTS_OUT 32
#define BIG_OBJECTS 48

static void setup_fake_big(void)
{
	make_segment(256);
	ck_assert_int_eq(xseg_bind_port(seg, BLOCKER), 0);
	start_vlmcd_with(NULL, "big:3M");   /* 48 objects of 64K */
}

/* A FLUSH of a volume with more objects written than PARTS_OUT sends at
 * most PARTS_OUT object flushes at once, the next as one comes back: it
 * took the whole request pool (every other client of the segment
 * starved) until every part was out. */
START_TEST(flush_fan_out_is_capped)
{
	struct xseg_request *parts[BIG_OBJECTS + 1];
	struct pt_req r = { .op = X_FLUSH, .target = "big" };
	/* the first FLUSH after a start: one part, everything */
	struct xseg_request *flush = pt_submit(seg, CLIENT, VLMCD, &r);
	struct xseg_request *p = blocker_accept(BLOCKER, TIMEOUT);
	ck_assert_ptr_nonnull(p);
	blocker_answer(p, BLOCKER, 0);
	ck_assert_ptr_eq(pt_receive(seg, CLIENT, TIMEOUT), flush);
	xseg_put_request(seg, flush);
	static unsigned char zeros[10];
	for (uint64_t o = 0; o < BIG_OBJECTS; o++) {
		struct pt_req w = { .op = X_WRITE, .target = "big", .offset = o * OBJ,
				    .size = sizeof(zeros), .data = zeros, .data_len = sizeof(zeros) };
		struct xseg_request *req = pt_submit(seg, CLIENT, VLMCD, &w);
		ck_assert_ptr_nonnull(req);
		p = blocker_accept(BLOCKER, TIMEOUT);
		ck_assert_ptr_nonnull(p);
		blocker_answer(p, BLOCKER, 0);
		ck_assert_ptr_eq(pt_receive(seg, CLIENT, TIMEOUT), req);
		ck_assert_uint_eq(req->result, XR_SERVED);
		xseg_put_request(seg, req);
	}
	flush = pt_submit(seg, CLIENT, VLMCD, &r);
	ck_assert_ptr_nonnull(flush);
	int n = blocker_flushes(parts, BIG_OBJECTS + 1, 300);
	ck_assert_msg(n == PARTS_OUT, "%d object flushes out at once, not %d", n, PARTS_OUT);
	/* each one back lets one more out, until all went */
	int seen = n, answered = 0;
	while (answered < seen) {
		blocker_answer(parts[answered++], BLOCKER, 0);
		if (seen < BIG_OBJECTS) {
			p = blocker_accept(BLOCKER, TIMEOUT);
			ck_assert_msg(p != NULL, "no object flush after one came back (%d of %d out)",
				      seen, BIG_OBJECTS);
			parts[seen++] = p;
		}
		ck_assert_msg(answered == seen || !client_has_reply(0),
			      "FLUSH answered with object flushes still out");
	}
	ck_assert_int_eq(seen, BIG_OBJECTS);
	ck_assert_ptr_null(blocker_accept(BLOCKER, 50));
	ck_assert_ptr_eq(pt_receive(seg, CLIENT, TIMEOUT), flush);
	ck_assert_uint_eq(flush->result, XR_SERVED);
	xseg_put_request(seg, flush);
}
END_TEST

/* Requests for --blocker-port follow its route: a cache plugged in front. */
START_TEST(follows_routes)
{
	ck_assert_int_eq(xseg_bind_port(seg, CACHE), 0);
	ck_assert_int_eq(xseg_set_next_hop(seg, BLOCKER, CACHE), 0);
	struct xseg_request *req = submit_write(10, 10);
	struct xseg_request *p = blocker_accept(CACHE, TIMEOUT);
	ck_assert_msg(p != NULL, "the part did not reach the port in front");
	ck_assert_str_eq(xseg_get_target(seg, p), "vol_0000000000000000");
	ck_assert_uint_eq(p->offset, 10);
	/* the "cache" passes it on to the blocker behind it */
	ck_assert_int_eq(xseg_forward(seg, p, CACHE, BLOCKER), (int)BLOCKER);
	struct xseg_request *q = blocker_accept(BLOCKER, TIMEOUT);
	ck_assert_ptr_eq(q, p);
	blocker_answer(q, BLOCKER, 0);
	struct xseg_request *back;
	uint64_t deadline = xseg_now_ns() + TIMEOUT * 1000000ull;
	while (xseg_receive(seg, CACHE, &back, 1) != 1)
		ck_assert(xseg_now_ns() < deadline);
	ck_assert_ptr_eq(back, p);
	ck_assert_int_ge(xseg_respond(seg, back, CACHE), 0);
	ck_assert_ptr_eq(pt_receive(seg, CLIENT, TIMEOUT), req);
	ck_assert_uint_eq(req->result, XR_SERVED);
	/* Within one object the client's own request went on, renamed (the
	 * blocker saw the object's offset); it comes back under its name. */
	ck_assert_ptr_eq(p, req);
	ck_assert_str_eq(xseg_get_target(seg, req), "vol");
	ck_assert_uint_eq(req->targetlen, 3);
	ck_assert_uint_eq(req->offset, 10);
	xseg_put_request(seg, req);
	ck_assert_int_eq(xseg_clear_next_hop(seg, BLOCKER), 0);
}
END_TEST

/* The blocker goes away: vlmcd answers with an error, it does not hang. */
START_TEST(blocker_gone)
{
	ck_assert_int_eq(xseg_leave_port(seg, BLOCKER), 0);
	struct xseg_request *req = submit_write(0, 10);
	ck_assert_ptr_eq(pt_receive(seg, CLIENT, TIMEOUT), req);
	ck_assert_uint_eq(req->result, XR_FAILED);
	ck_assert_int_eq(req->error, EHOSTUNREACH);
	xseg_put_request(seg, req);
	/* and stops cleanly */
	int status = pt_stop(vlmcd, SIGTERM, TIMEOUT);
	ck_assert_msg(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "vlmcd status %#x", status);
}
END_TEST

/* SIGTERM while a split is out: vlmcd waits for its parts, answers, exits 0. */
START_TEST(sigterm_waits_for_parts)
{
	struct xseg_request *req = submit_write(OBJ - 5, 10);
	struct xseg_request *a = blocker_accept(BLOCKER, TIMEOUT);
	ck_assert_ptr_nonnull(a);
	kill(vlmcd, SIGTERM);
	usleep(200 * 1000);
	int status;
	ck_assert_msg(waitpid(vlmcd, &status, WNOHANG) == 0, "vlmcd left with a part out");
	blocker_answer(a, BLOCKER, 0);
	struct xseg_request *b = blocker_accept(BLOCKER, TIMEOUT);
	ck_assert_ptr_nonnull(b);
	blocker_answer(b, BLOCKER, 0);
	ck_assert_ptr_eq(pt_receive(seg, CLIENT, TIMEOUT), req);
	ck_assert_uint_eq(req->result, XR_SERVED);
	xseg_put_request(seg, req);
	status = pt_stop(vlmcd, 0, TIMEOUT);
	ck_assert_msg(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "vlmcd status %#x", status);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("peers_vlmcd");
	TCase *real = pt_tcase(s, "with_filed", setup_real, 45);
	tcase_add_test(real, across_object_boundaries);
	tcase_add_test(real, objects_on_disk);
	tcase_add_test(real, concurrent_splits);
	tcase_add_test(real, volume_ends_and_names);
	tcase_add_test(real, sigterm_both);
	tcase_add_test(real, options);
	tcase_add_test(real, reads_with_the_pool_taken_by_the_client);
	tcase_add_test(pt_tcase(s, "small_pool", setup_small_pool, 45), small_request_pool);
	tcase_add_test(pt_tcase(s, "fake_blocker_fresh", setup_fake, 45), first_flush_after_start);
	tcase_add_test(pt_tcase(s, "fake_blocker_small_pool", setup_fake_small_pool, 60),
		       slow_flush_fan_out);
	tcase_add_test(pt_tcase(s, "fake_blocker_big", setup_fake_big, 45), flush_fan_out_is_capped);
	TCase *fake = pt_tcase(s, "fake_blocker", setup_fake_flushed, 45);
	tcase_add_test(fake, exact_split);
	tcase_add_test(fake, flush_fans_out);
	tcase_add_test(fake, flushes_in_order);
	tcase_add_test(fake, empty_request_with_flush_flag);
	tcase_add_test(fake, failed_flush_keeps_objects_dirty);
	tcase_add_test(fake, unsent_flush_keeps_objects_dirty);
	tcase_add_test(fake, follows_routes);
	tcase_add_test(fake, blocker_gone);
	tcase_add_test(fake, sigterm_waits_for_parts);
	return pt_run(s);
}
