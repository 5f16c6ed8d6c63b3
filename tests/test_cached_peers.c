/*
 * cached and filed as real processes, the test as the client:
 *  - FLUSH: the moment its reply arrives, filed's files hold every byte
 *    written through the cache before it (global and per-object FLUSH).
 *  - Many threads on one object: writers whose ranges interleave inside
 *    buckets (unaligned stripes), each reading its own bytes back after
 *    every write, on a cache big enough and on one small enough to evict
 *    the object's buckets; then the whole object and filed's file.
 *  - The client holds the whole request pool: every miss still reaches
 *    filed through cached's reserve of requests, none waits forever.
 *  - The blocker contract (include/peer/blocker.h) holds through cached:
 *    the names a blocker refuses are refused (none reaches the cache), a
 *    COPY payload that ends after the name works, INFO makes room for its
 *    reply and keeps the target.
 */
#define _GNU_SOURCE
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "peer/blocker.h"
#include "support/blocker_cases.h"
#include "support/peer_test_util.h"
#include "support/xseg_test_util.h"

#define FILED   1u
#define CACHED  3u
#define CLIENT  8u            /* writer threads use CLIENT + i */
#define TIMEOUT 30000u
#define OBJ     (256u << 10)

static struct xseg *seg;
static char segname[64], dir[256], objdir[300];
static pid_t filed, cached;

static void start_peers(const char *cache_size)
{
	seg = pt_segment(segname, sizeof(segname), 32, 512, 64u << 20);
	pt_tmpdir(dir, sizeof(dir));
	snprintf(objdir, sizeof(objdir), "%s/objects", dir);
	filed = pt_start("filed", (const char *const[]){ "--segment", segname, "--port", "1",
			 "--dir", objdir, "--log-level", "error", NULL }, NULL);
	ck_assert_msg(pt_wait_bound(seg, FILED, filed, TIMEOUT) == 0, "filed did not bind");
	cached = pt_start("cached", (const char *const[]){ "--segment", segname, "--port", "3",
			  "--blocker-port", "1", "--cache-size", cache_size, "--object-size",
			  "256K", "--bucket-size", "4K", "--write-policy", "writeback",
			  "--threads", "2", "--log-level", "error", NULL }, NULL);
	ck_assert_msg(pt_wait_bound(seg, CACHED, cached, TIMEOUT) == 0, "cached did not bind");
	ck_assert_int_eq(xseg_bind_port(seg, CLIENT), 0);
}

static void setup_big(void) { start_peers("8M"); }
static void setup_small(void) { start_peers("64K"); }

static struct pt_req request(uint32_t port, uint32_t op, const char *name, uint64_t off,
			     uint64_t size, const void *data, void *out)
{
	struct pt_req r = { .op = op, .target = name, .offset = off, .size = size,
			    .data = data, .data_len = data ? size : 0,
			    .out = out, .out_len = out ? size : 0 };
	int rc = pt_do(seg, port, CACHED, &r, TIMEOUT);
	ck_assert_msg(rc == 0, "%s %s: no reply (%d)", xseg_op_name(op), name ? name : "-", rc);
	ck_assert_msg(r.result == XR_SERVED, "%s %s %llu+%llu: failed %d (%s)", xseg_op_name(op),
		      name ? name : "-", (unsigned long long)off, (unsigned long long)size,
		      r.error, strerror(r.error));
	return r;
}

/* What filed holds for `name` right now, padded with zeros to OBJ bytes. */
static char *filed_bytes(const char *name)
{
	char path[400];
	uint64_t len = 0;
	snprintf(path, sizeof(path), "%s/%s", objdir, name);
	char *file = pt_read_file(path, &len);
	char *obj = calloc(1, OBJ);
	ck_assert_ptr_nonnull(obj);
	ck_assert_uint_le(len, OBJ);
	if (file)
		memcpy(obj, file, len);
	free(file);
	return obj;
}

static void expect_same(const char *what, const char *got, const char *want, uint64_t len)
{
	/* memcmp first: a ck_assert per byte wrote a record to Check's file
	 * each (fork mode), millions a test, most of this suite's time */
	if (!memcmp(got, want, len))
		return;
	for (uint64_t i = 0; i < len; i++)
		ck_assert_msg(got[i] == want[i], "%s: byte %llu is %02x, expected %02x", what,
			      (unsigned long long)i, (unsigned char)got[i],
			      (unsigned char)want[i]);
}

/* ---- FLUSH ------------------------------------------------------------------ */

/* Writes pattern `seed` at [off, off+len) of `name` and of its model. */
static void write_model(char *model, const char *name, uint64_t off, uint64_t len,
			uint64_t seed)
{
	pt_pattern(model + off, len, seed, off);
	request(CLIENT, X_WRITE, name, off, len, model + off, NULL);
}

START_TEST(flush_reply_means_bytes_in_filed)
{
	static const char *names[] = { "fa", "fb", "fc" };
	char *model[3];
	for (int i = 0; i < 3; i++) {
		model[i] = calloc(1, OBJ);
		/* aligned, partial buckets, across buckets, at the object's end */
		write_model(model[i], names[i], 0, 4096, 10 + i);
		write_model(model[i], names[i], 5000, 300, 20 + i);
		write_model(model[i], names[i], 8190, 9000, 30 + i);
		write_model(model[i], names[i], OBJ - 777, 777, 40 + i);
	}
	/* Write-back: the cache holds it, filed does not have it yet (else
	 * this test would test nothing). */
	int differ = 0;
	for (int i = 0; i < 3; i++) {
		char *f = filed_bytes(names[i]);
		differ += memcmp(f, model[i], OBJ) != 0;
		free(f);
	}
	ck_assert_msg(differ > 0, "filed had every byte before the FLUSH: not write-back?");
	request(CLIENT, X_FLUSH, NULL, 0, 0, NULL, NULL);
	for (int i = 0; i < 3; i++) {
		char *f = filed_bytes(names[i]);
		expect_same(names[i], f, model[i], OBJ);
		free(f);
	}
	/* A FLUSH of one object: that object's bytes are there on its reply. */
	for (int round = 0; round < 20; round++) {
		write_model(model[1], "fb", (uint64_t)round * 10007 % (OBJ - 5000), 4321,
			    100 + (uint64_t)round);
		request(CLIENT, X_FLUSH, "fb", 0, 0, NULL, NULL);
		char *f = filed_bytes("fb");
		expect_same("fb after its FLUSH", f, model[1], OBJ);
		free(f);
	}
	for (int i = 0; i < 3; i++)
		free(model[i]);
	ck_assert_int_eq(pt_stop(cached, SIGTERM, TIMEOUT), 0);
	ck_assert_int_eq(pt_stop(filed, SIGTERM, TIMEOUT), 0);
}
END_TEST

/* ---- many threads on one object ------------------------------------------------- */

#define WRITERS 6
#define STRIPE  1500u         /* not a divisor of the bucket: stripes share buckets */

struct writer {
	unsigned index;
	unsigned rounds;
	uint64_t last_seed;       /* the pattern its stripes hold now */
};

/* Writer i owns stripes i, i + WRITERS, ... of the object. */
static void *writer_main(void *arg)
{
	struct writer *w = arg;
	uint32_t port = CLIENT + 1 + w->index;
	char buf[STRIPE * 3], got[STRIPE * 3];

	for (unsigned r = 0; r < w->rounds; r++) {
		uint64_t seed = 1000 * (w->index + 1) + r;
		for (uint64_t s = w->index; s * STRIPE < OBJ; s += WRITERS) {
			uint64_t off = s * STRIPE, len = off + STRIPE <= OBJ ? STRIPE : OBJ - off;
			pt_pattern(buf, len, seed, off);
			request(port, X_WRITE, "shared", off, len, buf, NULL);
			request(port, X_READ, "shared", off, len, NULL, got);
			expect_same("read back own stripe", got, buf, len);
		}
		w->last_seed = seed;
	}
	return NULL;
}

static void many_writers_one_object(unsigned rounds)
{
	pthread_t tid[WRITERS];
	struct writer w[WRITERS];
	for (unsigned i = 0; i < WRITERS; i++) {
		ck_assert_int_eq(xseg_bind_port(seg, CLIENT + 1 + i), 0);
		w[i] = (struct writer){ .index = i, .rounds = rounds };
		ck_assert_int_eq(pthread_create(&tid[i], NULL, writer_main, &w[i]), 0);
	}
	for (unsigned i = 0; i < WRITERS; i++)
		pthread_join(tid[i], NULL);

	char *model = calloc(1, OBJ), *got = malloc(OBJ);
	for (uint64_t s = 0; s * STRIPE < OBJ; s++) {
		uint64_t off = s * STRIPE, len = off + STRIPE <= OBJ ? STRIPE : OBJ - off;
		pt_pattern(model + off, len, w[s % WRITERS].last_seed, off);
	}
	request(CLIENT, X_READ, "shared", 0, OBJ, NULL, got);
	expect_same("the whole object through cached", got, model, OBJ);
	request(CLIENT, X_FLUSH, NULL, 0, 0, NULL, NULL);
	char *f = filed_bytes("shared");
	expect_same("the whole object in filed's file", f, model, OBJ);
	free(f);
	free(model);
	free(got);
	ck_assert_int_eq(pt_stop(cached, SIGTERM, TIMEOUT), 0);
	ck_assert_int_eq(pt_stop(filed, SIGTERM, TIMEOUT), 0);
}

START_TEST(many_threads_one_object_cache_holds_it)
{
	many_writers_one_object((unsigned)xt_scaled(6, 1));
}
END_TEST

START_TEST(many_threads_one_object_cache_evicts)
{
	many_writers_one_object((unsigned)xt_scaled(4, 1));
}
END_TEST

/* The client takes every free request of the pool and sends them all as
 * read misses: cached needs a request of its own for each, and the pool
 * has none left. Its reserve (xseg_reserve) serves them one by one;
 * without it they would wait for a request that never comes back. */
START_TEST(misses_with_the_pool_taken_by_clients)
{
	struct xseg_request *held[512];
	int nheld = 0, sent = 0;
	while (nheld < 512 && (held[nheld] = xseg_get_request(seg, CLIENT)) != NULL)
		nheld++;
	ck_assert_int_gt(nheld, 400);
	char name[32];
	/* Submitted without ever going back to the pool: cached can get
	 * none from it while they are out. */
	for (int i = 0; i < nheld; i++) {
		snprintf(name, sizeof(name), "miss-%d", i % 7);
		ck_assert_int_eq(xseg_prep_target(seg, held[i], name, 4096), 0);
		held[i]->op = X_READ;
		held[i]->offset = (uint64_t)(i / 7 % 64) * 4096;
		held[i]->size = 4096;
		ck_assert_int_ge(xseg_submit(seg, held[i], CLIENT, CACHED), 0);
		sent++;
	}
	ck_assert_int_gt(sent, 400);
	static char zeros[4096];
	for (int k = 0; k < sent; k++) {
		struct xseg_request *rep = pt_receive(seg, CLIENT, TIMEOUT);
		ck_assert_msg(rep != NULL, "no reply after %d of %d misses: cached waits for a "
			      "request of its own", k, sent);
		ck_assert_msg(rep->result == XR_SERVED, "miss failed: %d", rep->error);
		ck_assert_int_eq(memcmp(xseg_get_data(seg, rep), zeros, sizeof(zeros)), 0);
		ck_assert_int_eq(xseg_put_request(seg, rep), 0);
	}
}
END_TEST

/* A name is the target's targetlen bytes: the buffer may hold more before
 * a NUL (room to rename in place). A WRITE to "abc" whose buffer reads
 * "abcdef" was cached (and written back) as "abcdef". */
START_TEST(name_is_targetlen_bytes_through_cached)
{
	char buf[4096], back[4096];
	pt_pattern(buf, sizeof(buf), 45, 0);
	struct xseg_request *req = xseg_get_request(seg, CLIENT);
	ck_assert_ptr_nonnull(req);
	ck_assert_int_eq(xseg_prep_request(seg, req, 3, sizeof(buf)), 0);
	memcpy(xseg_get_target(seg, req), "abcdef", 7);   /* past targetlen, over its NUL */
	memcpy(xseg_get_data(seg, req), buf, sizeof(buf));
	req->op = X_WRITE;
	req->flags = 0;
	req->offset = 0;
	req->size = sizeof(buf);
	ck_assert_int_ge(xseg_submit(seg, req, CLIENT, CACHED), 0);
	struct xseg_request *rep = pt_receive(seg, CLIENT, TIMEOUT);
	ck_assert_ptr_eq(rep, req);
	struct pt_req w = { .op = X_WRITE };
	pt_finish(seg, rep, &w);
	ck_assert_uint_eq(w.result, XR_SERVED);
	request(CLIENT, X_READ, "abc", 0, sizeof(back), NULL, back);   /* a hit, under "abc" */
	ck_assert_msg(!memcmp(back, buf, sizeof(buf)), "a read of 'abc' did not find the write "
		      "to 'abc' (targetlen 3, 'def' after it)");
	request(CLIENT, X_FLUSH, NULL, 0, 0, NULL, NULL);
	char *abc = filed_bytes("abc"), *abcdef = filed_bytes("abcdef");
	ck_assert_msg(!memcmp(abc, buf, sizeof(buf)), "filed has no 'abc' after the FLUSH");
	free(abc);
	free(abcdef);
	char path[400];
	snprintf(path, sizeof(path), "%s/abcdef", objdir);
	ck_assert_msg(access(path, F_OK) != 0, "cached wrote 'abcdef' back for a write to 'abc'");
}
END_TEST

/* What a blocker refuses, cached refuses the same way (write-back: the
 * cache would otherwise take a WRITE that can never land, or read "a\0b"
 * as object "a"); the rest of the contract works through it. */
START_TEST(blocker_contract_through_cached)
{
	static const uint32_t ops[] = { X_READ, X_WRITE, X_INFO, X_DELETE, X_COPY, X_FLUSH };
	char data[sizeof(struct xseg_request_copy)] = { 0 };
	size_t copy_len = blocker_copy_payload(data, sizeof(data), "x", 1);
	for (size_t b = 0; b < blocker_bad_names_count; b++) {
		const struct blocker_bad_name *bad = &blocker_bad_names[b];
		size_t len = bad->len ? bad->len : strlen(bad->name);
		for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
			if (ops[i] == X_FLUSH && !len)
				continue;                  /* a FLUSH of everything */
			struct pt_req r = { .op = ops[i], .size = 16, .datalen = sizeof(data),
					    .data = data, .data_len = copy_len };
			if (len) {
				r.target = bad->name;
				r.targetlen = bad->len;
			}
			ck_assert_int_eq(pt_do(seg, CLIENT, CACHED, &r, TIMEOUT), 0);
			ck_assert_msg(r.result == XR_FAILED && r.error == bad->error,
				      "%s of bad name #%zu (%s) through cached: result %u error %d, "
				      "expected %d", xseg_op_name(ops[i]), b, bad->what, r.result,
				      r.error, bad->error);
		}
		char cp[sizeof(struct xseg_request_copy)];
		size_t n = blocker_copy_payload(cp, sizeof(cp), bad->name, (uint32_t)len);
		struct pt_req r = { .op = X_COPY, .target = "copy-from-bad", .data = cp,
				    .data_len = n, .datalen = n };
		ck_assert_int_eq(pt_do(seg, CLIENT, CACHED, &r, TIMEOUT), 0);
		ck_assert_msg(r.result == XR_FAILED && r.error == bad->error,
			      "COPY from bad name #%zu (%s) through cached: result %u error %d",
			      b, bad->what, r.result, r.error);
	}

	/* a COPY payload that ends after the name */
	char buf[4096];
	pt_pattern(buf, sizeof(buf), 40, 0);
	request(CLIENT, X_WRITE, "contract-src", 0, sizeof(buf), buf, NULL);
	char cp[sizeof(struct xseg_request_copy)];
	size_t n = blocker_copy_payload(cp, sizeof(cp), "contract-src", 12);
	struct pt_req r = { .op = X_COPY, .target = "contract-dst", .data = cp, .data_len = n,
			    .datalen = n };
	ck_assert_int_eq(pt_do(seg, CLIENT, CACHED, &r, TIMEOUT), 0);
	ck_assert_msg(r.result == XR_SERVED, "short COPY payload through cached: error %d",
		      r.error);
	char got[4096];
	request(CLIENT, X_READ, "contract-dst", 0, sizeof(got), NULL, got);
	ck_assert(!memcmp(got, buf, sizeof(buf)));

	/* INFO without room for the reply */
	char name[251];
	memset(name, 'i', 250);
	memcpy(name, "contract-info-", 14);
	name[250] = '\0';
	request(CLIENT, X_WRITE, name, 0, 777, buf, NULL);
	struct pt_req q = { .op = X_INFO, .target = name };
	struct xseg_request *req = pt_submit(seg, CLIENT, CACHED, &q);
	ck_assert_ptr_nonnull(req);
	struct xseg_request *rep = pt_receive(seg, CLIENT, TIMEOUT);
	ck_assert_ptr_eq(rep, req);
	ck_assert_msg(rep->result == XR_SERVED, "INFO failed: %d", rep->error);
	ck_assert_uint_eq(rep->serviced, sizeof(struct xseg_reply_info));
	ck_assert_uint_eq(((struct xseg_reply_info *)xseg_get_data(seg, rep))->size, 777);
	ck_assert_uint_eq(rep->targetlen, 250);
	ck_assert_msg(!memcmp(xseg_get_target(seg, rep), name, 250),
		      "the INFO reply lost its target");
	xseg_put_request(seg, rep);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cached_peers");
	TCase *tc = pt_tcase(s, "big", setup_big, 240);
	tcase_add_test(tc, flush_reply_means_bytes_in_filed);
	tcase_add_test(tc, many_threads_one_object_cache_holds_it);
	tcase_add_test(tc, misses_with_the_pool_taken_by_clients);
	tcase_add_test(tc, blocker_contract_through_cached);
	tcase_add_test(tc, name_is_targetlen_bytes_through_cached);
	tc = pt_tcase(s, "small", setup_small, 240);
	tcase_add_test(tc, many_threads_one_object_cache_evicts);
	return pt_run(s);
}
