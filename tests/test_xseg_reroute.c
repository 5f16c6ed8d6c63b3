/*
 * Re-routing under load. A client (A) submits to port B while another
 * process toggles B's next hop between C and none as fast as it can. C is
 * a forwarder: what it gets it passes on to B (which, from C, is B itself),
 * and answers A when B's reply comes back. Every request must be answered
 * exactly once, by B, with every hop's cookie intact; some through C and
 * some directly.
 */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/xseg_test_util.h"

enum { A = 0, B = 1, C = 2, DEPTH = 16, BATCH = 16 };
#define SALT      0xab0c0000ull
#define C_SALT    0x0c0c0000ull
#define VIA_C     (1ull << 32)

static int stop_pipe[2];

/* Idle step of a helper: sleep on the port a little; true once the parent
 * closed the stop pipe. */
static bool idle_should_stop(struct xseg *seg, uint32_t port)
{
	char c;
	if (xseg_poll(seg, port, 20000, 10000000ull) > 0)
		return false;
	return read(stop_pipe[0], &c, 1) == 0;
}

static struct xseg *child_join(int ready_fd, uint32_t port)
{
	struct xseg *seg;
	close(stop_pipe[1]);
	fcntl(stop_pipe[0], F_SETFL, O_NONBLOCK);
	XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
	if (port != XSEG_NO_PORT)
		XT_CHILD_CHECK(xseg_bind_port(seg, port) == 0, 3, "%s", xseg_last_error());
	XT_CHILD_CHECK(write(ready_fd, "r", 1) == 1, 4, "write");
	return seg;
}

/* B: serves everything it gets; tells how many came through C. */
static void server_b(int ready_fd, int report_fd)
{
	struct xseg *seg = child_join(ready_fd, B);
	struct xseg_request *reqs[BATCH];
	uint64_t counts[2] = { 0, 0 };     /* direct, via C */

	for (;;) {
		int n = xseg_accept(seg, B, reqs, BATCH);
		XT_CHILD_CHECK(n >= 0, 5, "%s", xseg_last_error());
		if (n == 0) {
			if (idle_should_stop(seg, B))
				break;
			continue;
		}
		for (int i = 0; i < n; i++) {
			struct xseg_request *r = reqs[i];
			XT_CHILD_CHECK(r->dst_port == B, 6, "dst %u", r->dst_port);
			XT_CHILD_CHECK(r->path_len == 1 || r->path_len == 2, 7, "path %u",
				       r->path_len);
			/* Through C, the return path is A, C. */
			int want = r->path_len == 2 ? C : A;
			XT_CHILD_CHECK(r->path[0].port == A, 8, "path[0] %u", r->path[0].port);
			r->priv = 0xbbbb;
			r->serviced = r->size;
			r->result = XR_SERVED;
			int to = xseg_respond(seg, r, B);
			XT_CHILD_CHECK(to == want, 8, "respond went to %d, not %d", to, want);
			counts[to == C]++;
		}
	}
	XT_CHILD_CHECK(write(report_fd, counts, sizeof(counts)) == sizeof(counts), 9, "w");
	xseg_leave(seg);
	_exit(0);
}

/* C: forwards requests to B; answers A when B's reply comes back. */
static void forwarder_c(int ready_fd)
{
	struct xseg *seg = child_join(ready_fd, C);
	struct xseg_request *reqs[BATCH];
	uint64_t in_hand = 0;

	for (;;) {
		int n = xseg_accept(seg, C, reqs, BATCH);
		XT_CHILD_CHECK(n >= 0, 5, "%s", xseg_last_error());
		for (int i = 0; i < n; i++) {
			struct xseg_request *r = reqs[i];
			XT_CHILD_CHECK(r->dst_port == B && r->path_len == 1, 6,
				       "dst %u path %u", r->dst_port, r->path_len);
			r->priv = xt_cookie(r->offset, C_SALT);
			int to = xseg_forward(seg, r, C, B);
			XT_CHILD_CHECK(to == B, 7, "forward went to %d: %s", to,
				       xseg_last_error());
			in_hand++;
		}
		int m = xseg_receive(seg, C, reqs, BATCH);
		XT_CHILD_CHECK(m >= 0, 8, "%s", xseg_last_error());
		for (int i = 0; i < m; i++) {
			struct xseg_request *r = reqs[i];
			XT_CHILD_CHECK(r->priv == xt_cookie(r->offset, C_SALT), 9,
				       "C's cookie lost for %" PRIu64, r->offset);
			XT_CHILD_CHECK(r->result == XR_SERVED, 10, "result %u", r->result);
			r->serviced += VIA_C;
			int to = xseg_respond(seg, r, C);
			XT_CHILD_CHECK(to == A, 11, "respond went to %d: %s", to,
				       xseg_last_error());
			in_hand--;
		}
		if (n == 0 && m == 0 && idle_should_stop(seg, C))
			break;
	}
	XT_CHILD_CHECK(in_hand == 0, 12, "%" PRIu64 " requests still in hand", in_hand);
	xseg_leave(seg);
	_exit(0);
}

/* Up to 5 us, busy: a route lasts anything from no time to a few requests. */
static void pause_a_little(unsigned *seed)
{
	*seed = *seed * 1103515245u + 12345u;
	uint64_t until = xseg_now_ns() + (*seed >> 16) % 5000;
	while (xseg_now_ns() < until)
		;
}

/* Toggles B -> C and back until told to stop; reports the toggles. */
static void toggler(int ready_fd, int report_fd)
{
	struct xseg *seg = child_join(ready_fd, XSEG_NO_PORT);
	uint64_t toggles = 0;
	char c;
	unsigned seed = (unsigned)getpid();

	while (read(stop_pipe[0], &c, 1) != 0) {
		XT_CHILD_CHECK(xseg_set_next_hop(seg, B, C) == 0, 5, "%s", xseg_last_error());
		pause_a_little(&seed);
		XT_CHILD_CHECK(xseg_clear_next_hop(seg, B) == 0, 6, "%s", xseg_last_error());
		pause_a_little(&seed);
		toggles++;
	}
	XT_CHILD_CHECK(write(report_fd, &toggles, sizeof(toggles)) == sizeof(toggles), 7, "w");
	xseg_leave(seg);
	_exit(0);
}

static void issue(uint64_t seq)
{
	struct xseg_request *r = xseg_get_request(xt_seg, A);
	XT_ASSERT(r != NULL, "get_request: %s", xseg_last_error());
	r->op = X_WRITE;
	r->offset = seq;
	r->size = 1000 + seq % 1000;
	r->priv = xt_cookie(seq, SALT);
	int to = xseg_submit(xt_seg, r, A, B);
	XT_ASSERT(to == B || to == C, "submit %" PRIu64 ": %d %s", seq, to, xseg_last_error());
}

START_TEST(reroute_under_load_loses_nothing)
{
	uint64_t total = xt_scaled(300000, 20000);
	uint64_t next = 0, done_n = 0, via[2] = { 0, 0 };
	struct xseg_request *reqs[BATCH];
	struct xt_bitmap done;
	int ready[2], report_b[2], report_t[2];
	pid_t pids[3];
	char c;

	ck_assert_int_eq(pipe(stop_pipe), 0);
	ck_assert_int_eq(pipe(ready), 0);
	ck_assert_int_eq(pipe(report_b), 0);
	ck_assert_int_eq(pipe(report_t), 0);
	ck_assert_int_eq(xseg_bind_port(xt_seg, A), 0);
	if ((pids[0] = xt_fork(55)) == 0)
		server_b(ready[1], report_b[1]);
	if ((pids[1] = xt_fork(55)) == 0)
		forwarder_c(ready[1]);
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(read(ready[0], &c, 1), 1);
	if ((pids[2] = xt_fork(55)) == 0)
		toggler(ready[1], report_t[1]);
	ck_assert_int_eq(read(ready[0], &c, 1), 1);
	close(stop_pipe[0]);
	xt_bitmap_init(&done, total);

	uint64_t t0 = xseg_now_ns(), last = t0;
	while (next < DEPTH)
		issue(next++);
	while (done_n < total) {
		int n = xseg_receive(xt_seg, A, reqs, BATCH);
		XT_ASSERT(n >= 0, "%s", xseg_last_error());
		if (n == 0) {
			xseg_poll(xt_seg, A, 20000, 100000000ull);
			for (int i = 0; i < 3; i++) {
				int st;
				XT_ASSERT(waitpid(pids[i], &st, WNOHANG) == 0,
					  "helper %d ended early: status %#x", i, st);
			}
			XT_ASSERT(xseg_now_ns() - last < 20000000000ull,
				  "no reply for 20 s: %" PRIu64 " of %" PRIu64 ", first missing %"
				  PRIu64, done_n, total, xt_bitmap_first_clear(&done));
			continue;
		}
		for (int i = 0; i < n; i++) {
			struct xseg_request *r = reqs[i];
			uint64_t seq = r->offset;
			XT_ASSERT(seq < next, "reply for unissued %" PRIu64, seq);
			XT_ASSERT(!xt_bitmap_set(&done, seq), "%" PRIu64 " answered twice", seq);
			XT_ASSERT(r->result == XR_SERVED, "result %u", r->result);
			XT_ASSERT(r->priv == xt_cookie(seq, SALT), "cookie of %" PRIu64, seq);
			XT_ASSERT(r->path_len == 0, "path %u", r->path_len);
			uint64_t v = r->serviced / VIA_C;
			XT_ASSERT(v <= 1 && r->serviced % VIA_C == r->size,
				  "serviced %#" PRIx64 " size %" PRIu64, r->serviced, r->size);
			via[v]++;
			XT_ASSERT(xseg_put_request(xt_seg, r) == 0, "%s", xseg_last_error());
			done_n++;
			if (next < total)
				issue(next++);
		}
		last = xseg_now_ns();
	}
	double secs = (double)(xseg_now_ns() - t0) / 1e9;

	close(stop_pipe[1]);
	for (int i = 0; i < 3; i++)
		xt_expect_child_ok(pids[i], 10000, i == 0 ? "B" : i == 1 ? "C" : "toggler");
	uint64_t b_counts[2], toggles;
	ck_assert_int_eq(read(report_b[0], b_counts, sizeof(b_counts)), sizeof(b_counts));
	ck_assert_int_eq(read(report_t[0], &toggles, sizeof(toggles)), sizeof(toggles));
	fprintf(stderr, "reroute: %" PRIu64 " requests in %.2f s, %" PRIu64 " via C, %"
		PRIu64 " direct, %" PRIu64 " route toggles\n", total, secs, via[1], via[0],
		toggles);

	ck_assert_uint_eq(xt_bitmap_count(&done), total);
	ck_assert_uint_eq(via[0] + via[1], total);
	ck_assert_uint_eq(b_counts[0], via[0]);
	ck_assert_uint_eq(b_counts[1], via[1]);
	/* The toggling really changed where requests went. */
	ck_assert_uint_gt(via[0], 0);
	ck_assert_uint_gt(via[1], 0);
	ck_assert_uint_gt(toggles, 10);
	ck_assert_uint_eq(xt_free_requests(xt_seg), xt_cfg.nr_requests);
	xt_bitmap_free(&done);
}
END_TEST

static void setup(void)
{
	xt_setup_with(4, 64, 64 << 10);
}

int main(void)
{
	Suite *s = suite_create("xseg_reroute");
	TCase *tc = tcase_create("reroute");
	tcase_set_timeout(tc, 58);
	tcase_add_checked_fixture(tc, setup, xt_teardown);
	tcase_add_test(tc, reroute_under_load_loses_nothing);
	suite_add_tcase(s, tc);
	return xt_run(s);
}
