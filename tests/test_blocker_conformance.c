/*
 * The blocker conformance suite: what any peer that claims to be a blocker
 * (filed, sosd, ...) must do, the same cases for each. Every op; the edges
 * (offset 0, an object's end, beyond it, zero length, the maximum request
 * size); bad names and sizes (answered FAILED, the blocker keeps serving);
 * many requests in flight on one object. The name rules, the COPY payload
 * and the INFO reply are include/peer/blocker.h's; the bad names sent are
 * tests/support/blocker_cases.c's, each checked against that header first.
 *
 *   test_blocker_conformance                    runs filed itself, a fresh
 *                                               one per case (make check)
 *   test_blocker_conformance --segment S --port N [--max-size SIZE]
 *                                               the blocker already serving
 *                                               port N of segment S (sosd:
 *                                               tests/test_sosd.sh)
 *   --strict-flush  also check that a FLUSH is answered only after every
 *                   write submitted before it (sosd orders them; filed's
 *                   FLUSH covers only writes already answered)
 *
 * Object names carry this run's pid, so runs against a shared pool never see
 * each other's objects. The segment of an external blocker needs a heap of
 * at least 4 x --max-size and 100 + 16 ports for each run of the suite.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "peer/blocker.h"
#include "support/blocker_cases.h"
#include "support/peer_test_util.h"

#define FILED_PORT 1u
#define TIMEOUT 30000u

/* Where the blocker is; set by main for the external case. */
static const char *ext_segment;
static uint32_t blocker = FILED_PORT;
static uint64_t max_size = 16u << 20;
static bool strict_flush;
static pid_t run_pid;

static struct xseg *seg;
static uint32_t client;
static char segname[64], dir[256], objdir[300];

static void setup(void)
{
	if (ext_segment) {
		ck_assert_msg(xseg_join(ext_segment, &seg) == 0, "cannot join segment %s: %s",
			      ext_segment, xseg_last_error());
		/* Each case runs in its own process, on a port no earlier case
		 * used: replies still owed to a failed case must not reach
		 * this one. */
		struct xseg_port_info info;
		for (client = 100; xseg_port_info(seg, client, &info) == 0; client++)
			if (client != blocker && !info.owner && xseg_bind_port(seg, client) == 0)
				return;
		ck_abort_msg("no free client port in %s", ext_segment);
	}
	seg = pt_segment(segname, sizeof(segname), 16, 512, 4 * max_size);
	pt_tmpdir(dir, sizeof(dir));
	snprintf(objdir, sizeof(objdir), "%s/objects", dir);
	client = 10;
	ck_assert_int_eq(xseg_bind_port(seg, client), 0);
	const char *args[] = { "--segment", segname, "--port", "1", "--dir", objdir,
			       "--threads", "3", "--log-level", "error", NULL };
	pid_t filed = pt_start("filed", args, NULL);
	ck_assert_msg(pt_wait_bound(seg, FILED_PORT, filed, TIMEOUT) == 0,
		      "filed did not bind port 1");
}

/* ---- requests --------------------------------------------------------------- */

/* This run's name for object `base`. */
static const char *obj(const char *base)
{
	static char names[8][128];
	static int next;
	char *n = names[next++ % 8];
	snprintf(n, sizeof(names[0]), "cf-%d-%s", (int)run_pid, base);
	return n;
}

static struct pt_req do_req(uint32_t op, const char *target, uint64_t offset, uint64_t size,
			    const void *data, void *out, uint32_t flags)
{
	return pt_call(seg, client, blocker, op, target, offset, size, data, out, flags, TIMEOUT);
}

#define expect_served PT_EXPECT_SERVED
#define expect_failed PT_EXPECT_FAILED

static void write_obj(const char *name, uint64_t off, uint64_t size, uint64_t seed)
{
	char *buf = malloc(size ? size : 1);
	pt_pattern(buf, size, seed, off);
	struct pt_req r = do_req(X_WRITE, name, off, size, size ? buf : NULL, NULL, 0);
	expect_served(r, name);
	ck_assert_uint_eq(r.serviced, size);
	free(buf);
}

static char *read_obj(const char *name, uint64_t off, uint64_t size)
{
	char *buf = malloc(size ? size : 1);
	memset(buf, 0xee, size);
	struct pt_req r = do_req(X_READ, name, off, size, NULL, size ? buf : NULL, 0);
	expect_served(r, name);
	ck_assert_uint_eq(r.serviced, size);
	return buf;
}

/* The bytes [off, off+size) hold what write_obj(seed) wrote there. */
static void expect_data(const char *name, uint64_t off, uint64_t size, uint64_t seed)
{
	char *got = read_obj(name, off, size), *want = malloc(size);
	pt_pattern(want, size, seed, off);
	ck_assert_msg(!memcmp(got, want, size), "%s: wrong data in [%llu, +%llu)", name,
		      (unsigned long long)off, (unsigned long long)size);
	free(got);
	free(want);
}

static void expect_zeros(const char *name, uint64_t off, uint64_t size)
{
	char *got = read_obj(name, off, size);
	uint64_t i = 0;
	while (i < size && !got[i])
		i++;
	ck_assert_msg(i == size, "%s: byte %llu is %#x, not zero", name,
		      (unsigned long long)(off + i), i < size ? (unsigned char)got[i] : 0);
	free(got);
}

static uint64_t info_size(const char *name)
{
	struct xseg_reply_info info = { 12345 };
	struct pt_req r = { .op = X_INFO, .target = name, .datalen = sizeof(info),
			    .out = &info, .out_len = sizeof(info) };
	ck_assert_int_eq(pt_do(seg, client, blocker, &r, TIMEOUT), 0);
	expect_served(r, "INFO");
	ck_assert_uint_eq(r.serviced, sizeof(info));
	return info.size;
}

static struct pt_req copy_req(const char *dst, const char *src)
{
	struct xseg_request_copy cp = { .src_len = (uint32_t)strlen(src) };
	memcpy(cp.src, src, cp.src_len);
	struct pt_req r = { .op = X_COPY, .target = dst, .data = &cp, .data_len = sizeof(cp),
			    .datalen = sizeof(cp) };
	ck_assert_int_eq(pt_do(seg, client, blocker, &r, TIMEOUT), 0);
	return r;
}

static void still_serving(void)
{
	write_obj(obj("alive"), 0, 512, 99);
	expect_data(obj("alive"), 0, 512, 99);
}

/* ---- the cases ------------------------------------------------------------------ */

START_TEST(offset_zero_and_partial_overwrite)
{
	const char *o = obj("zero");
	write_obj(o, 0, 8192, 1);
	expect_data(o, 0, 8192, 1);
	write_obj(o, 1000, 1000, 2);          /* inside: the rest stays */
	expect_data(o, 0, 1000, 1);
	expect_data(o, 1000, 1000, 2);
	expect_data(o, 2000, 6192, 1);
	ck_assert_uint_eq(info_size(o), 8192);
}
END_TEST

START_TEST(missing_object_reads_zeros)
{
	const char *o = obj("never");
	expect_zeros(o, 0, 65536);
	expect_zeros(o, 3u << 20, 4096);
	ck_assert_uint_eq(info_size(o), 0);
}
END_TEST

START_TEST(object_end_and_beyond)
{
	const char *o = obj("end");
	uint64_t end = 4u << 20;
	write_obj(o, end - 4096, 4096, 3);     /* the last block of a 4M object */
	ck_assert_uint_eq(info_size(o), end);
	expect_zeros(o, 0, end - 4096);        /* the hole before it */
	char *buf = read_obj(o, end - 4096, 8192);   /* across the end */
	char *want = malloc(4096);
	pt_pattern(want, 4096, 3, end - 4096);
	ck_assert(!memcmp(buf, want, 4096));
	for (int i = 4096; i < 8192; i++)
		ck_assert_msg(!buf[i], "byte %d past the end is not zero", i - 4096);
	free(buf);
	free(want);
	expect_zeros(o, end, 65536);           /* wholly beyond */
	expect_zeros(o, 1ull << 30, 4096);
	write_obj(o, 100, 10, 4);              /* a small write keeps the size */
	ck_assert_uint_eq(info_size(o), end);
}
END_TEST

START_TEST(zero_length)
{
	const char *o = obj("empty");
	struct pt_req r = do_req(X_WRITE, o, 0, 0, NULL, NULL, 0);
	expect_served(r, "zero-length WRITE");
	ck_assert_uint_eq(r.serviced, 0);
	ck_assert_uint_eq(info_size(o), 0);
	r = do_req(X_READ, o, 0, 0, NULL, NULL, 0);
	expect_served(r, "zero-length READ");
	ck_assert_uint_eq(r.serviced, 0);
	/* the empty write made the object: DELETE finds it */
	expect_served(do_req(X_DELETE, o, 0, 0, NULL, NULL, 0), "DELETE of an empty object");
	/* an empty write beyond the end does not extend */
	write_obj(o, 0, 10, 5);
	expect_served(do_req(X_WRITE, o, 1u << 20, 0, NULL, NULL, 0), "zero-length WRITE far out");
	ck_assert_uint_eq(info_size(o), 10);
	r = do_req(X_READ, obj("never-written"), 0, 0, NULL, NULL, 0);
	expect_served(r, "zero-length READ of a missing object");
}
END_TEST

START_TEST(maximum_size)
{
	const char *o = obj("max");
	write_obj(o, 0, max_size, 6);
	expect_data(o, 0, max_size, 6);
	ck_assert_uint_eq(info_size(o), max_size);
	char *big = calloc(1, max_size + 1);
	struct pt_req r = do_req(X_WRITE, o, 0, max_size + 1, big, NULL, 0);
	expect_failed(r, EINVAL, "WRITE over the maximum size");
	r = do_req(X_READ, o, 0, max_size + 1, NULL, NULL, 0);
	expect_failed(r, EINVAL, "READ over the maximum size");
	free(big);
	expect_data(o, 0, 4096, 6);            /* the refused write changed nothing */
}
END_TEST

START_TEST(bad_sizes)
{
	const char *o = obj("sizes");
	/* size larger than the buffer sent with it */
	struct pt_req r = { .op = X_WRITE, .target = o, .size = 8192, .datalen = 4096 };
	ck_assert_int_eq(pt_do(seg, client, blocker, &r, TIMEOUT), 0);
	expect_failed(r, EINVAL, "WRITE larger than its buffer");
	char buf[16] = { 0 };
	r = do_req(X_WRITE, o, (uint64_t)INT64_MAX, 16, buf, NULL, 0);
	expect_failed(r, EINVAL, "WRITE at an offset that overflows");
	r = do_req(X_READ, o, UINT64_MAX - 8, 16, NULL, NULL, 0);
	expect_failed(r, EINVAL, "READ at an offset that overflows");
	still_serving();
}
END_TEST

START_TEST(info_sizes)
{
	const char *o = obj("info");
	write_obj(o, 0, 100, 7);
	ck_assert_uint_eq(info_size(o), 100);
	write_obj(o, 300000, 5, 7);
	ck_assert_uint_eq(info_size(o), 300005);
	write_obj(o, 0, 50, 7);
	ck_assert_uint_eq(info_size(o), 300005);
}
END_TEST

START_TEST(delete_objects)
{
	const char *o = obj("del");
	write_obj(o, 0, 4096, 8);
	expect_served(do_req(X_DELETE, o, 0, 0, NULL, NULL, 0), "DELETE");
	expect_zeros(o, 0, 4096);
	ck_assert_uint_eq(info_size(o), 0);
	expect_failed(do_req(X_DELETE, o, 0, 0, NULL, NULL, 0), ENOENT, "second DELETE");
	expect_failed(do_req(X_DELETE, obj("never-there"), 0, 0, NULL, NULL, 0), ENOENT,
		      "DELETE of a missing object");
	write_obj(o, 4096, 4096, 9);           /* written again: a new object */
	expect_zeros(o, 0, 4096);
	expect_data(o, 4096, 4096, 9);
}
END_TEST

START_TEST(copy_objects)
{
	const char *src = obj("src"), *dst = obj("dst"), *self = obj("self");
	write_obj(src, 0, 200000, 10);
	write_obj(dst, 0, 500000, 11);         /* larger before: replaced whole */
	struct pt_req r = copy_req(dst, src);
	expect_served(r, "COPY");
	ck_assert_uint_eq(r.serviced, 200000);
	ck_assert_uint_eq(info_size(dst), 200000);
	expect_data(dst, 0, 200000, 10);
	expect_zeros(dst, 200000, 4096);
	write_obj(src, 0, 100, 12);            /* a copy, not a link */
	expect_data(dst, 0, 100, 10);

	write_obj(self, 0, 3000, 13);
	expect_served(copy_req(self, self), "COPY onto itself");
	expect_data(self, 0, 3000, 13);

	expect_failed(copy_req(obj("copy-of-nothing"), obj("nothing")), ENOENT,
		      "COPY of a missing source");
	expect_failed(copy_req(dst, "../escape"), EINVAL, "COPY from a bad name");
	expect_failed(copy_req(dst, ""), EINVAL, "COPY from an empty name");
	expect_data(dst, 0, 100, 10);          /* the failed copies changed nothing */
	write_obj(obj("empty-src"), 0, 0, 0);
	expect_served(copy_req(dst, obj("empty-src")), "COPY of an empty object");
	ck_assert_uint_eq(info_size(dst), 0);
}
END_TEST

/* The COPY payload may end right after the name; a payload shorter than
 * its header or than src_len says, or a src_len over the longest name, is
 * EINVAL and changes nothing. */
START_TEST(copy_payload_forms)
{
	const char *src = obj("cp-src"), *dst = obj("cp-dst");
	write_obj(src, 0, 5000, 30);
	char cp[sizeof(struct xseg_request_copy)];
	size_t n = blocker_copy_payload(cp, sizeof(cp), src, (uint32_t)strlen(src));
	struct pt_req r = { .op = X_COPY, .target = dst, .data = cp, .data_len = n, .datalen = n };
	ck_assert_int_eq(pt_do(seg, client, blocker, &r, TIMEOUT), 0);
	expect_served(r, "COPY with a payload that ends after the name");
	ck_assert_uint_eq(r.serviced, 5000);
	expect_data(dst, 0, 5000, 30);

	const char *untouched = obj("cp-untouched");
	write_obj(untouched, 0, 100, 31);
	static const struct { uint64_t datalen; uint32_t src_len; const char *what; } bad[] = {
		{ 2, 0, "a payload shorter than its header" },
		{ 0, 0, "no payload" },
		{ 4 + 3, 0, "a payload shorter than src_len says" },
		{ sizeof(struct xseg_request_copy), BLOCKER_NAME_MAX + 1, "src_len over the limit" },
		{ sizeof(struct xseg_request_copy), UINT32_MAX, "src_len of 4G" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		n = blocker_copy_payload(cp, sizeof(cp), src, (uint32_t)strlen(src));
		if (bad[i].src_len)
			((struct xseg_request_copy *)cp)->src_len = bad[i].src_len;
		r = (struct pt_req){ .op = X_COPY, .target = untouched, .data = cp,
				     .data_len = bad[i].datalen, .datalen = bad[i].datalen };
		ck_assert_int_eq(pt_do(seg, client, blocker, &r, TIMEOUT), 0);
		expect_failed(r, EINVAL, bad[i].what);
	}
	expect_data(untouched, 0, 100, 31);
	ck_assert_uint_eq(info_size(untouched), 100);
}
END_TEST

/* INFO sent with no room for the reply: the blocker makes room and the
 * reply still names the object. */
START_TEST(info_into_a_small_buffer)
{
	char name[BLOCKER_NAME_MAX + 1];
	int n = snprintf(name, sizeof(name), "%s-", obj("info-room"));
	memset(name + n, 'i', 250 - (size_t)n);
	name[250] = '\0';                 /* its buffer has no room after the name */
	write_obj(name, 0, 777, 32);
	struct pt_req r = { .op = X_INFO, .target = name, .datalen = 0 };
	struct xseg_request *req = pt_submit(seg, client, blocker, &r);
	ck_assert_ptr_nonnull(req);
	struct xseg_request *rep = pt_receive(seg, client, TIMEOUT);
	ck_assert_ptr_eq(rep, req);
	ck_assert_msg(rep->result == XR_SERVED, "INFO failed: %d", rep->error);
	ck_assert_uint_eq(rep->serviced, sizeof(struct xseg_reply_info));
	ck_assert_uint_ge(rep->datalen, sizeof(struct xseg_reply_info));
	ck_assert_uint_eq(((struct xseg_reply_info *)xseg_get_data(seg, rep))->size, 777);
	ck_assert_uint_eq(rep->targetlen, 250);
	ck_assert_msg(!memcmp(xseg_get_target(seg, rep), name, 250),
		      "the INFO reply lost its target");
	xseg_put_request(seg, rep);
	expect_served(do_req(X_DELETE, name, 0, 0, NULL, NULL, 0), "DELETE");
}
END_TEST

START_TEST(flush_and_fua)
{
	const char *o = obj("flush");
	expect_served(do_req(X_FLUSH, NULL, 0, 0, NULL, NULL, 0), "FLUSH of nothing");
	write_obj(o, 0, 4096, 14);
	expect_served(do_req(X_FLUSH, NULL, 0, 0, NULL, NULL, 0), "FLUSH");
	expect_served(do_req(X_FLUSH, o, 0, 0, NULL, NULL, 0), "named FLUSH");
	expect_served(do_req(X_FLUSH, obj("never"), 0, 0, NULL, NULL, 0),
		      "named FLUSH of a missing object");
	char buf[4096];
	pt_pattern(buf, sizeof(buf), 15, 4096);
	expect_served(do_req(X_WRITE, o, 4096, 4096, buf, NULL, XF_FUA), "FUA WRITE");
	pt_pattern(buf, sizeof(buf), 16, 8192);
	expect_served(do_req(X_WRITE, o, 8192, 4096, buf, NULL, XF_FLUSH), "WRITE after a barrier");
	expect_data(o, 0, 4096, 14);
	expect_data(o, 4096, 4096, 15);
	expect_data(o, 8192, 4096, 16);
}
END_TEST

/* FLUSH is a barrier: submitted behind writes still in flight, its reply
 * comes after all of theirs (--strict-flush), even when several workers
 * accepted them (rounds give a racing accept its chances). Otherwise: every
 * write is answered and readable. */
START_TEST(flush_behind_writes)
{
	enum { ROUNDS = 8, N = 48, SZ = 16384 };
	const char *o = obj("barrier");
	char *buf = malloc(SZ);
	struct xseg_request *reqs[N + 1];
	for (int round = 0; round < ROUNDS; round++) {
		for (int i = 0; i < N; i++) {
			uint64_t off = (uint64_t)i * SZ;
			pt_pattern(buf, SZ, 17 + round, off);
			struct pt_req r = { .op = X_WRITE, .target = o, .offset = off,
					    .size = SZ, .data = buf, .data_len = SZ };
			ck_assert_ptr_nonnull(reqs[i] = pt_submit(seg, client, blocker, &r));
		}
		struct pt_req f = { .op = X_FLUSH };
		ck_assert_ptr_nonnull(reqs[N] = pt_submit(seg, client, blocker, &f));
		int writes_seen = 0;
		for (int k = 0; k <= N; k++) {
			struct xseg_request *rep = pt_receive(seg, client, TIMEOUT);
			ck_assert_ptr_nonnull(rep);
			ck_assert_msg(rep->result == XR_SERVED, "%s failed: %d",
				      xseg_op_name(rep->op), rep->error);
			if (rep->op == X_FLUSH) {
				if (strict_flush)
					ck_assert_msg(writes_seen == N, "round %d: FLUSH answered "
						      "after only %d of the %d writes before it",
						      round, writes_seen, N);
			} else {
				writes_seen++;
			}
			xseg_put_request(seg, rep);
		}
		expect_data(o, 0, (uint64_t)N * SZ, 17 + round);
	}
	free(buf);
}
END_TEST

START_TEST(bad_names)
{
	static const uint32_t ops[] = { X_READ, X_WRITE, X_INFO, X_DELETE, X_COPY, X_FLUSH };
	char data[sizeof(struct xseg_request_copy)] = { 0 };
	size_t copy_len = blocker_copy_payload(data, sizeof(data), "x", 1);
	for (size_t b = 0; b < blocker_bad_names_count; b++) {
		const struct blocker_bad_name *bad = &blocker_bad_names[b];
		size_t len = bad->len ? bad->len : strlen(bad->name);
		const char *why;
		/* the table and the header agree (test_peers_blocker checks it too) */
		ck_assert_int_eq(blocker_check_name(bad->name, len, BLOCKER_NAME_MAX, &why),
				 bad->error);
		for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
			if (ops[i] == X_FLUSH && !len)
				continue;                  /* a FLUSH of everything */
			struct pt_req r = { .op = ops[i], .size = 16, .datalen = sizeof(data),
					    .data = data, .data_len = copy_len };
			if (len) {
				r.target = bad->name;
				r.targetlen = bad->len;
			}
			ck_assert_int_eq(pt_do(seg, client, blocker, &r, TIMEOUT), 0);
			ck_assert_msg(r.result == XR_FAILED && r.error == bad->error,
				      "%s of bad name #%zu (%s): result %u error %d, expected %d",
				      xseg_op_name(ops[i]), b, bad->what, r.result, r.error,
				      bad->error);
		}
		/* and as the source of a COPY */
		char cp[sizeof(struct xseg_request_copy)];
		size_t n = blocker_copy_payload(cp, sizeof(cp), bad->name, (uint32_t)len);
		struct pt_req r = { .op = X_COPY, .target = obj("copy-from-bad"), .data = cp,
				    .data_len = n, .datalen = n };
		ck_assert_int_eq(pt_do(seg, client, blocker, &r, TIMEOUT), 0);
		ck_assert_msg(r.result == XR_FAILED && r.error == bad->error,
			      "COPY from bad name #%zu (%s): result %u error %d, expected %d", b,
			      bad->what, r.result, r.error, bad->error);
	}
	/* the longest name is fine */
	char longest[XSEG_MAX_TARGETLEN + 1];
	int n = snprintf(longest, sizeof(longest), "%s-", obj("long"));
	memset(longest + n, 'x', XSEG_MAX_TARGETLEN - (size_t)n);
	longest[XSEG_MAX_TARGETLEN] = '\0';
	write_obj(longest, 0, 100, 18);
	expect_data(longest, 0, 100, 18);
	expect_served(do_req(X_DELETE, longest, 0, 0, NULL, NULL, 0), "DELETE longest name");
	still_serving();
}
END_TEST

START_TEST(ping_and_unsupported)
{
	struct pt_req r = { .op = X_PING };
	ck_assert_int_eq(pt_do(seg, client, blocker, &r, TIMEOUT), 0);
	expect_served(r, "PING");
	r = (struct pt_req){ .op = X_CONTROL, .target = obj("ctl"), .size = 0 };
	ck_assert_int_eq(pt_do(seg, client, blocker, &r, TIMEOUT), 0);
	expect_failed(r, EOPNOTSUPP, "CONTROL");
	still_serving();
}
END_TEST

/* Many requests in flight on one object: disjoint blocks all land; blocks
 * written concurrently by several requests hold one of them whole. */
START_TEST(concurrency_on_one_object)
{
	enum { N = 128, SZ = 4096, SAME = 8 };
	const char *o = obj("busy");
	struct xseg_request *reqs[N];
	char *buf = malloc(SZ);
	for (int i = 0; i < N; i++) {
		/* requests 0..N-SAME-1: block i; the last SAME: all on block 0 */
		uint64_t off = i < N - SAME ? (uint64_t)i * SZ : 0;
		pt_pattern(buf, SZ, 100 + (uint64_t)i, off);
		struct pt_req r = { .op = X_WRITE, .target = o, .offset = off, .size = SZ,
				    .data = buf, .data_len = SZ };
		ck_assert_ptr_nonnull(reqs[i] = pt_submit(seg, client, blocker, &r));
	}
	for (int k = 0; k < N; k++) {
		struct xseg_request *rep = pt_receive(seg, client, TIMEOUT);
		ck_assert_ptr_nonnull(rep);
		ck_assert_msg(rep->result == XR_SERVED, "write failed: %d", rep->error);
		ck_assert_uint_eq(rep->serviced, SZ);
		xseg_put_request(seg, rep);
	}
	ck_assert_uint_eq(info_size(o), (uint64_t)(N - SAME) * SZ);
	for (int i = 1; i < N - SAME; i++)
		expect_data(o, (uint64_t)i * SZ, SZ, 100 + (uint64_t)i);
	char *got = read_obj(o, 0, SZ);
	bool whole = false;
	for (int i = 0; i < N && !whole; i++) {
		if (i != 0 && i < N - SAME)
			continue;
		pt_pattern(buf, SZ, 100 + (uint64_t)i, 0);
		whole = !memcmp(got, buf, SZ);
	}
	ck_assert_msg(whole, "block 0 holds a mix of concurrent writes");
	free(got);

	/* reads in flight together */
	for (int i = 0; i < N; i++) {
		struct pt_req r = { .op = X_READ, .target = o, .offset = (uint64_t)(i % (N - SAME)) * SZ,
				    .size = SZ };
		ck_assert_ptr_nonnull(reqs[i] = pt_submit(seg, client, blocker, &r));
	}
	for (int k = 0; k < N; k++) {
		struct xseg_request *rep = pt_receive(seg, client, TIMEOUT);
		ck_assert_ptr_nonnull(rep);
		ck_assert_uint_eq(rep->result, XR_SERVED);
		uint64_t blk = rep->offset / SZ;
		if (blk) {
			pt_pattern(buf, SZ, 100 + blk, rep->offset);
			ck_assert_msg(!memcmp(xseg_get_data(seg, rep), buf, SZ),
				      "concurrent read of block %llu: wrong data",
				      (unsigned long long)blk);
		}
		xseg_put_request(seg, rep);
	}
	free(buf);
}
END_TEST

static void usage(FILE *f)
{
	fprintf(f, "usage: test_blocker_conformance [--segment S --port N [--max-size SIZE]] "
		   "[--strict-flush]\n"
		   "Without --segment, runs filed itself for each case.\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "segment", required_argument, NULL, 's' },
		{ "port", required_argument, NULL, 'p' },
		{ "max-size", required_argument, NULL, 'm' },
		{ "strict-flush", no_argument, NULL, 'f' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	char *end;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			ext_segment = optarg;
			break;
		case 'p':
			blocker = (uint32_t)strtoul(optarg, &end, 10);
			if (*end || !*optarg || blocker >= XSEG_MAX_PORTS) {
				fprintf(stderr, "test_blocker_conformance: --port: '%s' is not a "
						"port number\n", optarg);
				return 2;
			}
			break;
		case 'm':
			max_size = strtoull(optarg, &end, 10);
			if (*end || !*optarg || max_size < 65536 || max_size > (64u << 20)) {
				fprintf(stderr, "test_blocker_conformance: --max-size: '%s' is not "
						"a byte count in [65536, 64M]\n", optarg);
				return 2;
			}
			break;
		case 'f':
			strict_flush = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "test_blocker_conformance: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	run_pid = getpid();

	Suite *s = suite_create("blocker_conformance");
	TCase *tc = pt_tcase(s, ext_segment ? "external blocker" : "filed", setup, 60);
	tcase_add_test(tc, offset_zero_and_partial_overwrite);
	tcase_add_test(tc, missing_object_reads_zeros);
	tcase_add_test(tc, object_end_and_beyond);
	tcase_add_test(tc, zero_length);
	tcase_add_test(tc, maximum_size);
	tcase_add_test(tc, bad_sizes);
	tcase_add_test(tc, info_sizes);
	tcase_add_test(tc, delete_objects);
	tcase_add_test(tc, copy_objects);
	tcase_add_test(tc, copy_payload_forms);
	tcase_add_test(tc, info_into_a_small_buffer);
	tcase_add_test(tc, flush_and_fua);
	tcase_add_test(tc, flush_behind_writes);
	tcase_add_test(tc, bad_names);
	tcase_add_test(tc, ping_and_unsupported);
	tcase_add_test(tc, concurrency_on_one_object);
	return pt_run(s);
}
