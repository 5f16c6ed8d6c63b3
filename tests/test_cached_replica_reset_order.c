/*
 * A replica (cached --replica, 2 workers) as a real process, the test as
 * its primary: writes sent before a "mirror-reset" on the replica's port
 * must not outlive the reset. A worker takes a batch of requests from the
 * port and hands them to cached one after another; a reset taken by the
 * other worker meanwhile listed the dirty objects before the writes left
 * in that batch reached the engine, and those writes stayed in the
 * replica after the reset's answer (a promote would write their older
 * bytes back over what the primary wrote since). Each round sends 48
 * writes and then the reset without waiting, and reads the replica's
 * dirty bytes once all are answered: nothing may be left.
 */
#define _GNU_SOURCE
#include <check.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/peer_test_util.h"
#include "support/xseg_test_util.h"

#define FILED   1u
#define REPLICA 3u
#define CLIENT  8u
#define TIMEOUT 30000u
#define WRITES  48
#define WSIZE   (256u << 10)

static struct xseg *seg;
static char segname[64], dir[256], objdir[300];

/* The replica's dirty bytes, from its "stats" answer. */
static uint64_t replica_dirty(void)
{
	static const char cmd[] = "stats";
	char out[8192] = "";
	struct pt_req r = { .op = X_CONTROL, .size = sizeof(cmd), .data = cmd,
			    .data_len = sizeof(cmd), .datalen = sizeof(out), .out = out,
			    .out_len = sizeof(out) - 1 };
	ck_assert_int_eq(pt_do(seg, CLIENT, REPLICA, &r, TIMEOUT), 0);
	pt_expect_served(&r, "stats");
	const char *d = strstr(out, "\"dirty_bytes\":");
	ck_assert_msg(d, "no dirty_bytes in the stats: %.200s", out);
	return strtoull(d + 14, NULL, 10);
}

START_TEST(reset_drops_every_write_sent_before_it)
{
	seg = pt_segment(segname, sizeof(segname), 16, 512, 128u << 20);
	pt_tmpdir(dir, sizeof(dir));
	snprintf(objdir, sizeof(objdir), "%s/objects", dir);
	pid_t filed = pt_start("filed", (const char *const[]){ "--segment", segname, "--port",
			       "1", "--dir", objdir, "--log-level", "error", NULL }, NULL);
	ck_assert_int_eq(pt_wait_bound(seg, FILED, filed, TIMEOUT), 0);
	pid_t replica = pt_start("cached", (const char *const[]){ "--segment", segname,
				 "--port", "3", "--blocker-port", "1", "--cache-size", "64M",
				 "--object-size", "256K", "--replica", "--threads", "2",
				 "--log-level", "error", NULL }, NULL);
	ck_assert_int_eq(pt_wait_bound(seg, REPLICA, replica, TIMEOUT), 0);
	ck_assert_int_eq(xseg_bind_port(seg, CLIENT), 0);

	static char data[WSIZE];
	static const char reset[] = "mirror-reset";
	char names[WRITES][16];
	unsigned rounds = 30, left_rounds = 0;
	uint64_t left_bytes = 0;
	/* started without --persist it takes no write until a reset */
	struct pt_req first = { .op = X_CONTROL, .size = sizeof(reset), .data = reset,
				.data_len = sizeof(reset) };
	ck_assert_int_eq(pt_do(seg, CLIENT, REPLICA, &first, TIMEOUT), 0);
	for (unsigned round = 0; round < rounds; round++) {
		pt_pattern(data, sizeof(data), round, 0);
		for (int i = 0; i < WRITES; i++) {
			snprintf(names[i], sizeof(names[i]), "o%u-%d", round % 3, i);
			struct pt_req w = { .op = X_WRITE, .target = names[i], .size = WSIZE,
					    .data = data, .data_len = WSIZE };
			ck_assert_ptr_nonnull(pt_submit(seg, CLIENT, REPLICA, &w));
		}
		struct pt_req r = { .op = X_CONTROL, .size = sizeof(reset), .data = reset,
				    .data_len = sizeof(reset) };
		ck_assert_ptr_nonnull(pt_submit(seg, CLIENT, REPLICA, &r));
		for (int i = 0; i < WRITES + 1; i++) {
			struct xseg_request *x = pt_receive(seg, CLIENT, TIMEOUT);
			ck_assert_msg(x, "round %u: a reply did not come", round);
			struct pt_req got = { 0 };
			bool is_reset = x->op == X_CONTROL;
			pt_finish(seg, x, &got);
			if (is_reset)
				pt_expect_served(&got, "mirror-reset");
		}
		uint64_t left = replica_dirty();
		if (left) {
			left_rounds++;
			left_bytes += left;
			struct pt_req again = { .op = X_CONTROL, .size = sizeof(reset),
						.data = reset, .data_len = sizeof(reset) };
			ck_assert_int_eq(pt_do(seg, CLIENT, REPLICA, &again, TIMEOUT), 0);
		}
	}
	ck_assert_msg(left_rounds == 0, "%u of %u mirror-resets answered while writes sent "
		      "before them stayed on the replica (%" PRIu64 " bytes in all)", left_rounds,
		      rounds, left_bytes);
	ck_assert_int_eq(pt_stop(replica, SIGTERM, TIMEOUT), 0);
	ck_assert_int_eq(pt_stop(filed, SIGTERM, TIMEOUT), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cached_replica_reset_order");
	TCase *tc = tcase_create("order");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, reset_drops_every_write_sent_before_it);
	suite_add_tcase(s, tc);
	return pt_run(s);
}
