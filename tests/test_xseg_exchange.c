/*
 * Two processes forked over one segment exchange a million requests
 * (times XSEG_STRESS_SCALE) at depth 16, sleeping in xseg_poll when idle:
 * every request is answered exactly once, with its sequence number
 * (req->offset), the issuer's cookie, and the data of those that carry a
 * buffer intact; afterwards the pool and the heap are whole again.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/xseg_test_util.h"

enum { CLIENT = 0, SERVER = 1, DEPTH = 16, BATCH = 16 };
#define SALT      0x5eed0001ull
#define SPIN_NS   20000ull
#define STALL_NS  20000000000ull      /* no progress for this long: lost */
#define DATA_LEN  256u

/* Every 64th request carries a target and data. */
static bool has_buffer(uint64_t seq)
{
	return seq % 64 == 7;
}

static void target_name(uint64_t seq, char *buf, size_t len)
{
	snprintf(buf, len, "obj-%" PRIu64, seq);
}

static unsigned char pattern(uint64_t seq, unsigned i)
{
	return (unsigned char)(seq * 31 + i);
}

/* The server: accepts in batches, checks, answers. Exit 0 when it served
 * exactly `total` distinct requests. */
static void server_main(const char *name, uint64_t total, int ready_fd)
{
	struct xseg *seg;
	struct xseg_request *reqs[BATCH];
	struct xt_bitmap seen;
	uint64_t served = 0, last_progress = xseg_now_ns();
	char want[64];

	XT_CHILD_CHECK(xseg_join(name, &seg) == 0, 2, "join: %s", xseg_last_error());
	XT_CHILD_CHECK(xseg_bind_port(seg, SERVER) == 0, 3, "bind: %s", xseg_last_error());
	xt_bitmap_init(&seen, total);
	XT_CHILD_CHECK(write(ready_fd, "r", 1) == 1, 4, "write");
	while (served < total) {
		int n = xseg_accept(seg, SERVER, reqs, BATCH);
		XT_CHILD_CHECK(n >= 0, 5, "accept: %s", xseg_last_error());
		if (n == 0) {
			int rc = xseg_poll(seg, SERVER, SPIN_NS, 1000000000ull);
			XT_CHILD_CHECK(rc >= 0, 6, "poll: %s", xseg_last_error());
			XT_CHILD_CHECK(xseg_now_ns() - last_progress < STALL_NS, 7,
				       "stalled after %" PRIu64 " requests", served);
			continue;
		}
		for (int i = 0; i < n; i++) {
			struct xseg_request *r = reqs[i];
			uint64_t seq = r->offset;
			XT_CHILD_CHECK(r->state == XS_ACCEPTED && r->holder == SERVER, 8,
				       "state %u holder %u", r->state, r->holder);
			XT_CHILD_CHECK(seq < total, 9, "offset %" PRIu64 " out of range", seq);
			XT_CHILD_CHECK(!xt_bitmap_set(&seen, seq), 10,
				       "request %" PRIu64 " delivered twice", seq);
			XT_CHILD_CHECK(r->src_port == CLIENT && r->path_len == 1, 11,
				       "src %u path %u", r->src_port, r->path_len);
			XT_CHILD_CHECK(r->op == (seq % 2 ? X_WRITE : X_READ), 12, "op %u", r->op);
			if (has_buffer(seq)) {
				unsigned char *d = xseg_get_data(seg, r);
				target_name(seq, want, sizeof(want));
				XT_CHILD_CHECK(xseg_get_target(seg, r) &&
					       strcmp(xseg_get_target(seg, r), want) == 0, 13,
					       "target of %" PRIu64, seq);
				XT_CHILD_CHECK(d && r->datalen == DATA_LEN, 14, "datalen");
				for (unsigned k = 0; k < DATA_LEN; k++) {
					XT_CHILD_CHECK(d[k] == pattern(seq, k), 15,
						       "data of %" PRIu64 " byte %u", seq, k);
					d[k] = (unsigned char)~d[k];
				}
			}
			r->priv = ~seq;             /* the reply must restore the issuer's */
			r->serviced = r->size;
			r->result = XR_SERVED;
			XT_CHILD_CHECK(xseg_respond(seg, r, SERVER) == CLIENT, 16,
				       "respond: %s", xseg_last_error());
		}
		served += (uint64_t)n;
		last_progress = xseg_now_ns();
	}
	XT_CHILD_CHECK(xt_bitmap_count(&seen) == total, 17, "served %" PRIu64 " distinct",
		       xt_bitmap_count(&seen));
	xt_bitmap_free(&seen);
	xseg_leave(seg);
	_exit(0);
}

static void issue(uint64_t seq)
{
	struct xseg_request *r = xseg_get_request(xt_seg, CLIENT);
	XT_ASSERT(r != NULL, "get_request at %" PRIu64 ": %s", seq, xseg_last_error());
	r->op = seq % 2 ? X_WRITE : X_READ;
	r->offset = seq;
	r->size = 4096;
	r->priv = xt_cookie(seq, SALT);
	if (has_buffer(seq)) {
		char name[64];
		target_name(seq, name, sizeof(name));
		XT_ASSERT(xseg_prep_target(xt_seg, r, name, DATA_LEN) == 0, "%s", xseg_last_error());
		unsigned char *d = xseg_get_data(xt_seg, r);
		for (unsigned k = 0; k < DATA_LEN; k++)
			d[k] = pattern(seq, k);
	}
	int rc = xseg_submit(xt_seg, r, CLIENT, SERVER);
	XT_ASSERT(rc == SERVER, "submit %" PRIu64 ": %d %s", seq, rc, xseg_last_error());
}

START_TEST(two_processes_exchange_a_million)
{
	uint64_t total = xt_scaled(1000000, 10000);
	struct xseg_request *reqs[BATCH];
	struct xt_bitmap done;
	uint64_t next = 0, completed = 0, sleeps = 0;
	int ready[2];
	char c;

	XT_ASSERT(pipe(ready) == 0, "%s", xseg_last_error());
	pid_t pid = xt_fork(55);
	if (pid == 0)
		server_main(xt_name, total, ready[1]);
	ck_assert_int_eq(read(ready[0], &c, 1), 1);
	XT_ASSERT(xseg_bind_port(xt_seg, CLIENT) == 0, "%s", xseg_last_error());
	xt_bitmap_init(&done, total);

	uint64_t t0 = xseg_now_ns(), last_progress = t0;
	while (next < total && next < DEPTH)
		issue(next++);
	while (completed < total) {
		int n = xseg_receive(xt_seg, CLIENT, reqs, BATCH);
		XT_ASSERT(n >= 0, "%s", xseg_last_error());
		if (n == 0) {
			XT_ASSERT(xseg_poll(xt_seg, CLIENT, SPIN_NS, 1000000000ull) >= 0,
				  "%s", xseg_last_error());
			sleeps++;
			XT_ASSERT(xseg_now_ns() - last_progress < STALL_NS,
				      "no reply for 20 s: %" PRIu64 " of %" PRIu64 " answered, "
				      "first missing %" PRIu64, completed, total,
				      xt_bitmap_first_clear(&done));
			continue;
		}
		for (int i = 0; i < n; i++) {
			struct xseg_request *r = reqs[i];
			uint64_t seq = r->offset;
			XT_ASSERT(seq < total, "seq %" PRIu64, seq);
			XT_ASSERT(!xt_bitmap_set(&done, seq), "reply %" PRIu64 " twice", seq);
			XT_ASSERT(r->state == XS_RECEIVED, "state %u", r->state);
			XT_ASSERT(r->result == XR_SERVED, "result %u", r->result);
			XT_ASSERT(r->serviced == 4096, "serviced %" PRIu64, r->serviced);
			XT_ASSERT(r->priv == xt_cookie(seq, SALT), "cookie of %" PRIu64, seq);
			XT_ASSERT(r->path_len == 0, "path %u", r->path_len);
			if (has_buffer(seq)) {
				unsigned char *d = xseg_get_data(xt_seg, r);
				for (unsigned k = 0; k < DATA_LEN; k++)
					XT_ASSERT(d[k] == (unsigned char)~pattern(seq, k), "data of %" PRIu64, seq);
			}
			XT_ASSERT(xseg_put_request(xt_seg, r) == 0, "%s", xseg_last_error());
			completed++;
			if (next < total)
				issue(next++);
		}
		last_progress = xseg_now_ns();
	}
	double secs = (double)(xseg_now_ns() - t0) / 1e9;
	fprintf(stderr, "exchange: %" PRIu64 " round trips in %.2f s (%.0f/s), %" PRIu64
		" polls that found nothing at once\n", total, secs, (double)total / secs, sleeps);

	ck_assert_uint_eq(xt_bitmap_count(&done), total);
	xt_expect_child_ok(pid, 20000, "server");
	ck_assert_uint_eq(xt_free_requests(xt_seg), xt_cfg.nr_requests);
	struct xseg_segment_info info;
	ck_assert_int_eq(xseg_segment_info(xt_seg, &info), 0);
	ck_assert_uint_eq(info.heap_used, 0);
	ck_assert_uint_eq(info.heap_allocs, 0);
	ck_assert_uint_eq(info.heap_free_largest, info.heap_size);
	struct xseg_port_info pi;
	ck_assert_int_eq(xseg_port_info(xt_seg, SERVER, &pi), 0);
	ck_assert_uint_eq(pi.submitted, total);
	ck_assert_uint_eq(pi.request_depth, 0);
	ck_assert_int_eq(pi.owner, 0);                /* the server left */
	ck_assert_int_eq(xseg_port_info(xt_seg, CLIENT, &pi), 0);
	ck_assert_uint_eq(pi.replied, total);
	ck_assert_uint_eq(pi.reply_depth, 0);
	xt_bitmap_free(&done);
}
END_TEST

static void setup(void)
{
	xt_setup_with(4, 64, 1 << 20);
}

int main(void)
{
	Suite *s = suite_create("xseg_exchange");
	TCase *tc = tcase_create("exchange");
	tcase_set_timeout(tc, 58);
	tcase_add_checked_fixture(tc, setup, xt_teardown);
	tcase_add_test(tc, two_processes_exchange_a_million);
	suite_add_tcase(s, tc);
	return xt_run(s);
}
