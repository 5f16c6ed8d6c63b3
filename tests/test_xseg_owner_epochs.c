/*
 * A reply belongs to the owner of a port that sent the request, not to the
 * port number: a reply that comes back after its owner left or died never
 * reaches the port's next owner; it is failed on to the hops before it, or
 * goes back to the pool with its buffer. Nothing a gone owner held stays
 * held by nobody: its requests come back when it leaves, when a peer that
 * answered it reaps it, or when the pool runs dry.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/xseg_test_util.h"
#include "../src/xseg_internal.h"   /* a ring popped by hand: a taker killed mid-take */

#define NREQS 16

/* Client 1, forwarder 3, server 2 unless a test says otherwise. */
static struct xseg_request *issue(uint32_t from, uint32_t to)
{
	struct xseg_request *r = xseg_get_request(xt_seg, from);
	ck_assert_msg(r != NULL, "get_request: %s", xseg_last_error());
	r->op = X_WRITE;
	ck_assert_int_eq(xseg_prep_target(xt_seg, r, "object", 4096), 0);
	ck_assert_int_ge(xseg_submit(xt_seg, r, from, to), 0);
	return r;
}

static struct xseg_request *accept_one(uint32_t port)
{
	struct xseg_request *r = NULL;
	ck_assert_int_eq(xseg_accept(xt_seg, port, &r, 1), 1);
	return r;
}

static void assert_pool_whole(void)
{
	struct xseg_segment_info si;
	ck_assert_int_eq(xseg_segment_info(xt_seg, &si), 0);
	ck_assert_uint_eq(si.free_requests, NREQS);
	ck_assert_uint_eq(si.heap_allocs, 0);
}

static uint64_t dropped(uint32_t port)
{
	struct xseg_port_info pi;
	ck_assert_int_eq(xseg_port_info(xt_seg, port, &pi), 0);
	return pi.dropped_replies;
}

/* The issue's first case, in one process: the client leaves with a
 * request out and a new client binds the same port number. */
START_TEST(reply_for_a_left_owner_never_reaches_the_next)
{
	ck_assert_int_eq(xseg_bind_port(xt_seg, 1), 0);
	ck_assert_int_eq(xseg_bind_port(xt_seg, 2), 0);
	struct xseg_request *r = issue(1, 2);
	ck_assert_ptr_eq(accept_one(2), r);
	ck_assert_int_eq(xseg_leave_port(xt_seg, 1), 0);
	ck_assert_int_eq(xseg_bind_port(xt_seg, 1), 0);   /* the next owner */

	r->result = XR_SERVED;
	ck_assert_int_ge(xseg_respond(xt_seg, r, 2), 0);
	struct xseg_request *got = NULL;
	ck_assert_int_eq(xseg_receive(xt_seg, 1, &got, 1), 0);
	ck_assert_uint_eq(dropped(1), 1);
	assert_pool_whole();    /* the request and its buffer are back */
}
END_TEST

/* A forwarder that left mid-request: the client before it is told. */
START_TEST(reply_through_a_left_forwarder_fails_to_the_client)
{
	ck_assert_int_eq(xseg_bind_port(xt_seg, 1), 0);
	ck_assert_int_eq(xseg_bind_port(xt_seg, 2), 0);
	ck_assert_int_eq(xseg_bind_port(xt_seg, 3), 0);
	struct xseg_request *r = issue(1, 3);
	ck_assert_ptr_eq(accept_one(3), r);
	ck_assert_int_ge(xseg_forward(xt_seg, r, 3, 2), 0);
	ck_assert_ptr_eq(accept_one(2), r);
	ck_assert_int_eq(xseg_leave_port(xt_seg, 3), 0);

	r->result = XR_SERVED;
	r->serviced = 4096;
	ck_assert_int_eq(xseg_respond(xt_seg, r, 2), 1);
	struct xseg_request *got = NULL;
	ck_assert_int_eq(xseg_receive(xt_seg, 1, &got, 1), 1);
	ck_assert_ptr_eq(got, r);
	ck_assert_uint_eq(got->result, XR_FAILED);
	ck_assert_int_eq(got->error, EPIPE);
	ck_assert_uint_eq(got->serviced, 0);
	ck_assert_int_eq(xseg_put_request(xt_seg, got), 0);
	ck_assert_uint_eq(dropped(3), 1);
	assert_pool_whole();
}
END_TEST

/* Leaving settles what the port holds: a request it got and never sent,
 * a reply that came back and was never received. */
START_TEST(leave_returns_what_the_port_held)
{
	ck_assert_int_eq(xseg_bind_port(xt_seg, 1), 0);
	ck_assert_int_eq(xseg_bind_port(xt_seg, 2), 0);
	struct xseg_request *kept = xseg_get_request(xt_seg, 1);
	ck_assert_ptr_nonnull(kept);
	ck_assert_int_eq(xseg_prep_target(xt_seg, kept, "kept", 512), 0);
	struct xseg_request *r = issue(1, 2);
	ck_assert_ptr_eq(accept_one(2), r);
	r->result = XR_SERVED;
	ck_assert_int_eq(xseg_respond(xt_seg, r, 2), 1);   /* queued for 1 */
	ck_assert_int_eq(xseg_leave_port(xt_seg, 1), 0);
	assert_pool_whole();
}
END_TEST

/* The issue's second case: a client that took the whole pool and exited
 * without leaving. The next get_request reclaims it instead of saying the
 * pool is in use. */
START_TEST(dead_holder_of_the_pool_is_reclaimed_on_demand)
{
	ck_assert_int_eq(xseg_bind_port(xt_seg, 1), 0);
	pid_t pid = xt_fork(20);
	if (pid == 0) {
		struct xseg *seg;
		XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
		XT_CHILD_CHECK(xseg_bind_port(seg, 5) == 0, 3, "%s", xseg_last_error());
		unsigned n = 0;
		struct xseg_request *r;
		while ((r = xseg_get_request(seg, 5)) != NULL) {
			XT_CHILD_CHECK(xseg_prep_target(seg, r, "held", 256) == 0, 4, "%s",
				       xseg_last_error());
			n++;
		}
		XT_CHILD_CHECK(n == NREQS, 5, "took %u of %u", n, NREQS);
		_exit(0);   /* holding all of them, without leaving */
	}
	xt_expect_child_ok(pid, 10000, "pool holder");
	ck_assert_uint_eq(xt_free_requests(xt_seg), 0);
	struct xseg_request *r = xseg_get_request(xt_seg, 1);
	ck_assert_msg(r != NULL, "the dead holder's requests were not reclaimed: %s",
		      xseg_last_error());
	ck_assert_int_eq(xseg_put_request(xt_seg, r), 0);
	assert_pool_whole();
}
END_TEST

/* "All N in use" says who holds them. */
START_TEST(empty_pool_error_says_who_holds_it)
{
	struct xseg_request *reqs[NREQS];
	ck_assert_int_eq(xseg_bind_port(xt_seg, 1), 0);
	for (int i = 0; i < NREQS; i++)
		ck_assert_ptr_nonnull(reqs[i] = xseg_get_request(xt_seg, 1));
	ck_assert_ptr_null(xseg_get_request(xt_seg, 1));
	ck_assert_int_eq(errno, ENOBUFS);
	ck_assert_msg(strstr(xseg_last_error(), "16 held by port 1 itself") != NULL,
		      "error: %s", xseg_last_error());
	for (int i = 0; i < NREQS; i++)
		ck_assert_int_eq(xseg_put_request(xt_seg, reqs[i]), 0);
}
END_TEST

/* A client killed with a request out: the server's answer lands in the
 * dead client's queue; the server, which remembers whom it answered,
 * reaps the port and the request goes back to the pool. A later request
 * for the dead port's number fails at once. */
START_TEST(server_reaps_the_dead_client_it_answered)
{
	ck_assert_int_eq(xseg_bind_port(xt_seg, 2), 0);
	int up[2];
	ck_assert_int_eq(pipe(up), 0);
	pid_t pid = xt_fork(20);
	if (pid == 0) {
		struct xseg *seg;
		XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
		XT_CHILD_CHECK(xseg_bind_port(seg, 6) == 0, 3, "%s", xseg_last_error());
		struct xseg_request *r = xseg_get_request(seg, 6);
		XT_CHILD_CHECK(r != NULL, 4, "%s", xseg_last_error());
		XT_CHILD_CHECK(xseg_prep_target(seg, r, "x", 1024) == 0, 5, "%s",
			       xseg_last_error());
		XT_CHILD_CHECK(xseg_submit(seg, r, 6, 2) == 2, 6, "%s", xseg_last_error());
		XT_CHILD_CHECK(write(up[1], "s", 1) == 1, 7, "write");
		_exit(0);
	}
	char c;
	ck_assert_int_eq(read(up[0], &c, 1), 1);
	xt_expect_child_ok(pid, 10000, "client");
	struct xseg_request *r = accept_one(2);
	r->result = XR_SERVED;
	ck_assert_int_eq(xseg_respond(xt_seg, r, 2), 6);
	ck_assert_uint_eq(xt_free_requests(xt_seg), NREQS - 1);
	ck_assert_int_eq(xseg_reap_dead_peers(xt_seg), 1);
	assert_pool_whole();
	ck_assert_uint_eq(dropped(6), 1);
	close(up[0]);
	close(up[1]);
}
END_TEST

/* A cache (3) in front of a blocker (2) leaves with a request queued:
 * unplugged first, the request goes on to the blocker; still plugged (it
 * could not write back), the request fails back. */
START_TEST(left_hop_passes_on_only_when_unplugged)
{
	ck_assert_int_eq(xseg_bind_port(xt_seg, 1), 0);
	ck_assert_int_eq(xseg_bind_port(xt_seg, 2), 0);
	ck_assert_int_eq(xseg_bind_port(xt_seg, 3), 0);
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, 2, 3), 0);
	struct xseg_request *r = issue(1, 2);
	ck_assert_int_eq(xseg_clear_next_hop(xt_seg, 2), 0);
	ck_assert_int_eq(xseg_leave_port(xt_seg, 3), 0);
	ck_assert_ptr_eq(accept_one(2), r);
	r->result = XR_SERVED;
	ck_assert_int_eq(xseg_respond(xt_seg, r, 2), 1);
	struct xseg_request *got = NULL;
	ck_assert_int_eq(xseg_receive(xt_seg, 1, &got, 1), 1);
	ck_assert_uint_eq(got->result, XR_SERVED);
	ck_assert_int_eq(xseg_put_request(xt_seg, got), 0);

	ck_assert_int_eq(xseg_bind_port(xt_seg, 3), 0);
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, 2, 3), 0);
	r = issue(1, 2);
	ck_assert_int_eq(xseg_leave_port(xt_seg, 3), 0);
	ck_assert_int_eq(xseg_accept(xt_seg, 2, &got, 1), 0);
	ck_assert_int_eq(xseg_receive(xt_seg, 1, &got, 1), 1);
	ck_assert_uint_eq(got->result, XR_FAILED);
	ck_assert_int_eq(got->error, EHOSTDOWN);
	ck_assert_int_eq(xseg_put_request(xt_seg, got), 0);
	assert_pool_whole();
}
END_TEST

/*
 * A child binds `port`, tells the parent, waits for its go, pops `pops`
 * entries off its request ring (reply ring: `replies`) by hand, as take()
 * does before it marks them, and exits: killed between the two.
 */
struct limbo_child { int up[2], go[2]; pid_t pid; };

static void limbo_child_start(struct limbo_child *c, uint32_t port, int pops, bool replies,
			      uint32_t issue_to)
{
	ck_assert_int_eq(pipe(c->up), 0);
	ck_assert_int_eq(pipe(c->go), 0);
	c->pid = xt_fork(20);
	if (c->pid == 0) {
		struct xseg *seg;
		uint32_t idx;
		char ch;
		XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
		XT_CHILD_CHECK(xseg_bind_port(seg, port) == 0, 3, "%s", xseg_last_error());
		if (issue_to != XSEG_NO_PORT) {
			struct xseg_request *r = xseg_get_request(seg, port);
			XT_CHILD_CHECK(r && xseg_prep_target(seg, r, "object", 4096) == 0, 7, "get");
			XT_CHILD_CHECK(xseg_submit(seg, r, port, issue_to) >= 0, 8, "submit");
		}
		XT_CHILD_CHECK(write(c->up[1], "b", 1) == 1, 4, "write");
		XT_CHILD_CHECK(read(c->go[0], &ch, 1) == 1, 5, "read");
		struct xseg_ring *ring = replies ? xseg_rep_ring(seg, port) : xseg_req_ring(seg, port);
		for (int i = 0; i < pops; i++)
			XT_CHILD_CHECK(xseg_ring_pop(ring, &idx), 6, "nothing queued");
		_exit(0);
	}
	char ch;
	ck_assert_int_eq(read(c->up[0], &ch, 1), 1);
}

static void limbo_child_die(struct limbo_child *c)
{
	ck_assert_int_eq(write(c->go[1], "g", 1), 1);
	xt_expect_child_ok(c->pid, 10000, "taker");
	for (int i = 0; i < 2; i++) {
		close(c->up[i]);
		close(c->go[i]);
	}
}

static void expect_served(uint32_t port, struct xseg_request *r)
{
	struct xseg_request *back = NULL;
	ck_assert_int_eq(xseg_receive(xt_seg, port, &back, 1), 1);
	ck_assert_ptr_eq(back, r);
	ck_assert_int_eq(back->result, XR_SERVED);
	ck_assert_int_eq(xseg_receive(xt_seg, port, &back, 1), 0);   /* once */
	ck_assert_int_eq(xseg_put_request(xt_seg, r), 0);
}

/* The heir of port 6 finds `queued` on its queue and serves it: port 1
 * gets it back served, once. */
static void heir_serves(struct xseg_request *queued)
{
	ck_assert_ptr_eq(accept_one(6), queued);
	queued->result = XR_SERVED;
	ck_assert_int_ge(xseg_respond(xt_seg, queued, 6), 0);
	expect_served(1, queued);
}

static void expect_failed_back(uint32_t port, struct xseg_request *r, int err)
{
	struct xseg_request *back = NULL;
	ck_assert_int_eq(xseg_receive(xt_seg, port, &back, 1), 1);
	ck_assert_ptr_eq(back, r);
	ck_assert_int_eq(back->result, XR_FAILED);
	ck_assert_int_eq(back->error, err);
	ck_assert_int_eq(xseg_put_request(xt_seg, back), 0);
}

/* A server (6) killed after it popped a request off its queue and before
 * it marked it its own (libxseg's take: pop, then mark): the request is in
 * no queue and held by nobody. The reap finds it and fails it back, and
 * the one still queued behind it too; before, the client waited for ever
 * (a synapsed SIGKILLed under load left cached's mirrored writes so, 1
 * link cut in ~15). */
START_TEST(request_popped_by_a_dying_owner_fails_back_at_the_reap)
{
	ck_assert_int_eq(xseg_bind_port(xt_seg, 1), 0);
	struct limbo_child c;
	limbo_child_start(&c, 6, 1, false, XSEG_NO_PORT);
	struct xseg_request *popped = issue(1, 6), *queued = issue(1, 6);
	limbo_child_die(&c);
	ck_assert_int_eq(xseg_reap_port(xt_seg, 6, EHOSTDOWN), 3);   /* reaped, 2 failed */
	expect_failed_back(1, popped, EPIPE);
	expect_failed_back(1, queued, EHOSTDOWN);
	assert_pool_whole();
}
END_TEST

/* The same owner death found by a new owner binding the port: the popped
 * request fails back, the one still queued stays for the new owner. */
START_TEST(request_popped_by_a_dying_owner_fails_back_at_a_takeover)
{
	ck_assert_int_eq(xseg_bind_port(xt_seg, 1), 0);
	struct limbo_child c;
	limbo_child_start(&c, 6, 1, false, XSEG_NO_PORT);
	struct xseg_request *popped = issue(1, 6), *queued = issue(1, 6);
	limbo_child_die(&c);
	ck_assert_int_eq(xseg_bind_port(xt_seg, 6), 0);   /* takes the dead owner's port over */
	expect_failed_back(1, popped, EPIPE);
	heir_serves(queued);
	assert_pool_whole();
}
END_TEST

/* A client (6) killed after it popped the reply to its own request and
 * before it marked it: the request goes back to the pool at the reap. */
START_TEST(reply_popped_by_a_dying_owner_goes_back_to_the_pool)
{
	ck_assert_int_eq(xseg_bind_port(xt_seg, 2), 0);
	struct limbo_child c;
	limbo_child_start(&c, 6, 1, true, 2);
	struct xseg_request *r = accept_one(2);
	r->result = XR_SERVED;
	ck_assert_int_ge(xseg_respond(xt_seg, r, 2), 0);   /* on 6's reply queue */
	limbo_child_die(&c);
	ck_assert_int_ge(xseg_reap_port(xt_seg, 6, EHOSTDOWN), 1);
	assert_pool_whole();
}
END_TEST

/* Submitted from `from` to `to`, then popped off to's queue by hand: a
 * taker between its pop and its mark, or a pusher before its ring. */
static struct xseg_request *issue_and_pop_by_hand(uint32_t from, uint32_t to)
{
	struct xseg_request *r = issue(from, to);
	uint32_t idx;
	ck_assert(xseg_ring_pop(xseg_req_ring(xt_seg, to), &idx));
	ck_assert_uint_eq(idx, r->index);
	return r;
}

/* A request marked QUEUED for the dead port but not on its queue because
 * its push is still under way (its tag not DONE: the pusher stores the
 * state before the ring takes it) is its pusher's, not the dead owner's:
 * the reap leaves it (after waiting a little for the push to end). Made by
 * hand: a request submitted, popped, re-marked as a pusher has it between
 * the two steps. */
START_TEST(request_whose_push_is_under_way_is_left_to_its_pusher)
{
	ck_assert_int_eq(xseg_bind_port(xt_seg, 1), 0);
	struct limbo_child c;
	limbo_child_start(&c, 6, 0, false, XSEG_NO_PORT);
	struct xseg_request *r = issue_and_pop_by_hand(1, 6);
	uint64_t base = xseg_push_tag_base(1, false), at;
	__atomic_store_n(&r->pushing, base, __ATOMIC_RELEASE);
	limbo_child_die(&c);
	ck_assert_int_eq(xseg_reap_port(xt_seg, 6, EHOSTDOWN), 1);   /* reaped, none failed */
	struct xseg_request *back = NULL;
	ck_assert_int_eq(xseg_receive(xt_seg, 1, &back, 1), 0);
	ck_assert_uint_eq(r->state, XS_QUEUED);
	/* the push ends: on the (now unbound) port's queue, passed back by a reap */
	ck_assert(xseg_ring_push_tagged(xseg_req_ring(xt_seg, 6), r->index, &r->pushing, base, &at));
	__atomic_or_fetch(&r->pushing, XSEG_PUSH_DONE, __ATOMIC_RELEASE);
	ck_assert_int_eq(xseg_reap_port(xt_seg, 6, EHOSTDOWN), 2);
	expect_failed_back(1, r, EHOSTDOWN);
	assert_pool_whole();
}
END_TEST

/* The pusher (port 1, alive) preempted between its ring push and its DONE,
 * and the dead owner of 6 popped the request in between: the reap waits
 * for the live pusher's DONE (here 200 ms later, from another thread) and
 * then fails the request back. A 20 ms wait gave up and left it held by
 * nobody, its issuer waiting for ever. */
static void *mark_done_later(void *arg)
{
	struct xseg_request *r = arg;
	usleep(200 * 1000);
	__atomic_or_fetch(&r->pushing, XSEG_PUSH_DONE, __ATOMIC_RELEASE);
	return NULL;
}

START_TEST(request_popped_before_its_live_pusher_said_done_fails_back)
{
	ck_assert_int_eq(xseg_bind_port(xt_seg, 1), 0);
	struct limbo_child c;
	limbo_child_start(&c, 6, 1, false, XSEG_NO_PORT);
	struct xseg_request *r = issue(1, 6);
	__atomic_and_fetch(&r->pushing, ~XSEG_PUSH_DONE, __ATOMIC_RELEASE);
	limbo_child_die(&c);   /* it popped r: on no ring, its push not DONE */
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, mark_done_later, r), 0);
	ck_assert_int_eq(xseg_reap_port(xt_seg, 6, EHOSTDOWN), 2);   /* reaped, r failed */
	pthread_join(t, NULL);
	expect_failed_back(1, r, EPIPE);
	assert_pool_whole();
}
END_TEST

/*
 * A server (6) that accepts one request and answers it, then waits to be
 * told to exit. Between the two the test makes by hand what a server
 * killed inside its reply's push leaves (deliver: tag, state, ring, DONE).
 */
static void answering_child_start(struct limbo_child *c, uint32_t port)
{
	ck_assert_int_eq(pipe(c->up), 0);
	ck_assert_int_eq(pipe(c->go), 0);
	c->pid = xt_fork(20);
	if (c->pid == 0) {
		struct xseg *seg;
		struct xseg_request *r = NULL;
		char ch;
		XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
		XT_CHILD_CHECK(xseg_bind_port(seg, port) == 0, 3, "%s", xseg_last_error());
		XT_CHILD_CHECK(write(c->up[1], "b", 1) == 1, 4, "write");
		XT_CHILD_CHECK(read(c->go[0], &ch, 1) == 1, 5, "read");
		XT_CHILD_CHECK(xseg_accept(seg, port, &r, 1) == 1, 6, "nothing queued");
		r->result = XR_SERVED;
		r->serviced = r->size;
		XT_CHILD_CHECK(xseg_respond(seg, r, port) >= 0, 7, "%s", xseg_last_error());
		XT_CHILD_CHECK(write(c->up[1], "r", 1) == 1, 8, "write");
		XT_CHILD_CHECK(read(c->go[0], &ch, 1) == 1, 9, "read");
		_exit(0);
	}
	char ch;
	ck_assert_int_eq(read(c->up[0], &ch, 1), 1);
}

static void answering_child_answer(struct limbo_child *c)
{
	char ch;
	ck_assert_int_eq(write(c->go[1], "g", 1), 1);
	ck_assert_int_eq(read(c->up[0], &ch, 1), 1);
}

/* Port 1 issues a request to a child on 6, which answers it (its push
 * done): the three cases below then undo a step of that push by hand. */
static struct xseg_request *answered_by_a_child(struct limbo_child *c)
{
	ck_assert_int_eq(xseg_bind_port(xt_seg, 1), 0);
	answering_child_start(c, 6);
	struct xseg_request *r = issue(1, 6);
	answering_child_answer(c);
	return r;
}

/* The child dies; its reap leaves the reply with port 1, once. */
static void child_dies_and_the_reply_arrives(struct limbo_child *c, struct xseg_request *r)
{
	limbo_child_die(c);
	ck_assert_int_eq(xseg_reap_port(xt_seg, 6, EHOSTDOWN), 1);
	expect_served(1, r);
	assert_pool_whole();
}

/* A server killed inside its reply's push, after it marked the reply for
 * the client and before the client's queue took it: the reply was in no
 * queue and the client waited for ever (a cached SIGKILLed under load,
 * its writer hung; CI, test_cached_persist_kill). The reap pushes it on. */
START_TEST(reply_whose_responder_died_before_the_queue_took_it_arrives_at_the_reap)
{
	struct limbo_child c;
	struct xseg_request *r = answered_by_a_child(&c);
	uint32_t idx;
	ck_assert(xseg_ring_pop(xseg_rep_ring(xt_seg, 1), &idx));   /* never reached it */
	ck_assert_uint_eq(idx, r->index);
	ck_assert_uint_eq(r->state, XS_REPLIED);
	__atomic_store_n(&r->pushing, xseg_push_tag_base(6, true), __ATOMIC_RELEASE);
	child_dies_and_the_reply_arrives(&c, r);
}
END_TEST

/* Killed after the client's queue took the reply and before the push said
 * DONE: the reply is there, and the reap must not push it a second time. */
START_TEST(reply_whose_responder_died_after_the_queue_took_it_arrives_once)
{
	struct limbo_child c;
	struct xseg_request *r = answered_by_a_child(&c);
	__atomic_and_fetch(&r->pushing, ~XSEG_PUSH_DONE, __ATOMIC_RELEASE);
	child_dies_and_the_reply_arrives(&c, r);
}
END_TEST

/* The client popped that reply and had not yet claimed it (take: pop,
 * claim, mark) when the reaper found it on no queue: the reaper wins and
 * pushes it again, and the copy the client popped is not handed over. */
START_TEST(reply_resumed_by_the_reaper_is_taken_once)
{
	struct limbo_child c;
	struct xseg_request *r = answered_by_a_child(&c);
	__atomic_and_fetch(&r->pushing, ~XSEG_PUSH_DONE, __ATOMIC_RELEASE);
	uint64_t first = r->pushing & XSEG_RING_POS_MASK, at;
	uint32_t idx;
	ck_assert(xseg_ring_pop_at(xseg_rep_ring(xt_seg, 1), &idx, &at));   /* the client, mid-take */
	ck_assert_uint_eq(at, first);
	limbo_child_die(&c);
	ck_assert_int_eq(xseg_reap_port(xt_seg, 6, EHOSTDOWN), 1);
	ck_assert_uint_ne(r->pushing & XSEG_RING_POS_MASK, first);   /* pushed again elsewhere */
	ck_assert_uint_eq(r->pushing >> XSEG_PUSH_PUSHER_SHIFT, 6 + 1);
	expect_served(1, r);
	assert_pool_whole();
}
END_TEST

/* A server killed inside its answer after it shortened the request's
 * return path and before it marked it for the client: the reap puts the
 * path back and fails the request back (before, the reaper's answer found
 * no return path and the request went to the pool: the client waited for
 * ever). Made by hand: accepted, then the answer's first steps. */
START_TEST(request_whose_server_died_inside_its_answer_fails_back)
{
	ck_assert_int_eq(xseg_bind_port(xt_seg, 1), 0);
	struct limbo_child c;
	limbo_child_start(&c, 6, 0, false, XSEG_NO_PORT);
	struct xseg_request *r = issue_and_pop_by_hand(1, 6);
	__atomic_store_n(&r->state, XS_ACCEPTED, __ATOMIC_RELEASE);   /* the server's take */
	ck_assert_uint_eq(r->path_len, 1);
	__atomic_store_n(&r->pushing, xseg_push_tag_base(6, true) | XSEG_PUSH_SAVED |
			 1ull << XSEG_PUSH_PATH_SHIFT, __ATOMIC_RELEASE);
	r->path_len = 0;
	limbo_child_die(&c);
	ck_assert_int_eq(xseg_reap_port(xt_seg, 6, EHOSTDOWN), 1);
	expect_failed_back(1, r, EPIPE);
	assert_pool_whole();
}
END_TEST

/* The same with a pool of one request (nr_requests 1 is allowed: rings of
 * capacity 1). ring.c's cell_filled() tells a full cell from an empty one
 * by (seq - 1) & mask == i, which with mask 0 holds for every cell, empty
 * ones included (value 0): the reap believes request 0 still queued and
 * never fails it back; the client waits for ever and the pool stays empty. */
START_TEST(request_popped_by_a_dying_owner_fails_back_with_a_pool_of_one)
{
	xt_teardown();
	xt_setup_with(8, 1, 256 << 10);
	ck_assert_int_eq(xseg_bind_port(xt_seg, 1), 0);
	struct limbo_child c;
	limbo_child_start(&c, 6, 1, false, XSEG_NO_PORT);
	struct xseg_request *popped = issue(1, 6);
	limbo_child_die(&c);
	ck_assert_int_eq(xseg_reap_port(xt_seg, 6, EHOSTDOWN), 2);   /* reaped, 1 failed */
	expect_failed_back(1, popped, EPIPE);
	ck_assert_uint_eq(xt_free_requests(xt_seg), 1);
}
END_TEST

/* A reaper killed between announcing its reap and ending it leaves the
 * port's reaping count up for good: a bind taking over a dead owner's port
 * must not wait on it (it waited 1 s, every bind, for ever). */
START_TEST(bind_after_a_reaper_died_mid_reap_does_not_wait)
{
	ck_assert_int_eq(xseg_bind_port(xt_seg, 1), 0);
	struct limbo_child c;
	limbo_child_start(&c, 6, 0, false, XSEG_NO_PORT);
	struct xseg_request *queued = issue(1, 6);
	limbo_child_die(&c);
	atomic_fetch_add(&xt_seg->ports[6].reaping, 1);   /* the dead reaper's count */
	uint64_t t0 = xseg_now_ns();
	ck_assert_int_eq(xseg_bind_port(xt_seg, 6), 0);   /* takes the dead owner's port over */
	uint64_t took = xseg_now_ns() - t0;
	ck_assert_msg(took < 500000000ull, "the bind waited %llu ms", (unsigned long long)(took / 1000000));
	heir_serves(queued);   /* the queue is the heir's */
	atomic_fetch_sub(&xt_seg->ports[6].reaping, 1);
	assert_pool_whole();
}
END_TEST

/* Submits to port 6 until a submit fails (the reap unbound it), never
 * emptying the pool (an empty pool would reap 6 itself). */
static _Atomic int submitted_to_6;

static void *submit_to_6(void *arg)
{
	(void)arg;
	while (atomic_load(&submitted_to_6) < NREQS - 2) {
		struct xseg_request *r = xseg_get_request(xt_seg, 1);
		if (!r)
			return NULL;   /* the pool is out on 6's queue, or back unread */
		if (xseg_prep_target(xt_seg, r, "object", 512) != 0 ||
		    xseg_submit(xt_seg, r, 1, 6) < 0) {
			xseg_put_request(xt_seg, r);
			return NULL;
		}
		atomic_fetch_add(&submitted_to_6, 1);
	}
	return NULL;
}

/* A reap (and its limbo scan) beside a thread that keeps submitting to the
 * dead port: every request comes back once, none while its push is under
 * way (an earlier try failed back a request pushed during its scan that
 * then stayed queued: answered twice). */
START_TEST(reap_beside_submits_answers_each_request_once)
{
	ck_assert_int_eq(xseg_bind_port(xt_seg, 1), 0);
	for (int round = 0; round < 40; round++) {
		struct limbo_child c;
		limbo_child_start(&c, 6, 0, false, XSEG_NO_PORT);
		limbo_child_die(&c);
		atomic_store(&submitted_to_6, 0);
		pthread_t t;
		pthread_create(&t, NULL, submit_to_6, NULL);
		while (atomic_load(&submitted_to_6) < round % 8)
			sched_yield();
		ck_assert_int_ge(xseg_reap_port(xt_seg, 6, EHOSTDOWN), 1);
		pthread_join(t, NULL);
		/* (A submit that found the port still owned, by the reaper, and
		 * landed after the reaper emptied its queue, is settled by
		 * whichever of the two looked last: no further reap here.) */
		int n = atomic_load(&submitted_to_6), got = 0;
		struct xseg_request *back[NREQS];
		int k;
		while ((k = xseg_receive(xt_seg, 1, back, NREQS)) > 0) {
			for (int i = 0; i < k; i++) {
				ck_assert_int_eq(back[i]->result, XR_FAILED);
				ck_assert_int_eq(xseg_put_request(xt_seg, back[i]), 0);
			}
			got += k;
		}
		ck_assert_int_eq(got, n);
		assert_pool_whole();
	}
}
END_TEST

static void setup(void)
{
	xt_setup_with(8, NREQS, 256 << 10);
}

int main(void)
{
	Suite *s = suite_create("xseg_owner_epochs");
	TCase *tc = tcase_create("epochs");
	tcase_set_timeout(tc, 30);
	tcase_add_checked_fixture(tc, setup, xt_teardown);
	tcase_add_test(tc, reply_for_a_left_owner_never_reaches_the_next);
	tcase_add_test(tc, reply_through_a_left_forwarder_fails_to_the_client);
	tcase_add_test(tc, leave_returns_what_the_port_held);
	tcase_add_test(tc, dead_holder_of_the_pool_is_reclaimed_on_demand);
	tcase_add_test(tc, empty_pool_error_says_who_holds_it);
	tcase_add_test(tc, server_reaps_the_dead_client_it_answered);
	tcase_add_test(tc, left_hop_passes_on_only_when_unplugged);
	tcase_add_test(tc, request_popped_by_a_dying_owner_fails_back_at_the_reap);
	tcase_add_test(tc, request_popped_by_a_dying_owner_fails_back_at_a_takeover);
	tcase_add_test(tc, reply_popped_by_a_dying_owner_goes_back_to_the_pool);
	tcase_add_test(tc, request_whose_push_is_under_way_is_left_to_its_pusher);
	tcase_add_test(tc, request_popped_before_its_live_pusher_said_done_fails_back);
	tcase_add_test(tc, reply_whose_responder_died_before_the_queue_took_it_arrives_at_the_reap);
	tcase_add_test(tc, reply_whose_responder_died_after_the_queue_took_it_arrives_once);
	tcase_add_test(tc, reply_resumed_by_the_reaper_is_taken_once);
	tcase_add_test(tc, request_whose_server_died_inside_its_answer_fails_back);
	tcase_add_test(tc, reap_beside_submits_answers_each_request_once);
	tcase_add_test(tc, bind_after_a_reaper_died_mid_reap_does_not_wait);
	tcase_add_test(tc, request_popped_by_a_dying_owner_fails_back_with_a_pool_of_one);
	suite_add_tcase(s, tc);
	return xt_run(s);
}
