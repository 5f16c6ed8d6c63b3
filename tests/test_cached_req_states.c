/*
 * A cache request's state table (peers/cached/request.c): exactly the
 * documented transitions are legal, req_set() follows them, and an illegal
 * one (a request answered twice, parked after its answer, run without
 * being queued) stops the program with a message instead of going on.
 * The engine's objects are linked in (Makefile: CACHED_ENGINE_TESTS).
 */
#include <check.h>
#include <signal.h>

#include "support/xseg_test_util.h"

#include "../peers/cached/engine_private.h"

/* The table as engine_private.h documents it, written out again. */
static const struct { enum cache_req_state from, to; } allowed[] = {
	{ REQ_NEW, REQ_WAIT_NODE },      { REQ_NEW, REQ_QUEUED },
	{ REQ_NEW, REQ_BARRIER },        { REQ_NEW, REQ_FORWARDED },
	{ REQ_NEW, REQ_WAIT_IO },        { REQ_NEW, REQ_DONE },
	{ REQ_WAIT_NODE, REQ_WAIT_NODE }, { REQ_WAIT_NODE, REQ_QUEUED },
	{ REQ_WAIT_NODE, REQ_DONE },
	{ REQ_QUEUED, REQ_RUNNING },
	{ REQ_RUNNING, REQ_PARKED },     { REQ_RUNNING, REQ_PARKED_WRITE },
	{ REQ_RUNNING, REQ_WAIT_IO },    { REQ_RUNNING, REQ_THROUGH },
	{ REQ_RUNNING, REQ_DROPPING },   { REQ_RUNNING, REQ_DONE },
	{ REQ_PARKED, REQ_RUNNING },     { REQ_PARKED, REQ_DONE },
	{ REQ_PARKED_WRITE, REQ_RUNNING },
	{ REQ_WAIT_IO, REQ_QUEUED },     { REQ_WAIT_IO, REQ_FORWARDED },
	{ REQ_WAIT_IO, REQ_WAIT_IO },
	{ REQ_THROUGH, REQ_DONE },       { REQ_THROUGH, REQ_RUNNING },
	{ REQ_DROPPING, REQ_DONE },
	{ REQ_BARRIER, REQ_FORWARDED },  { REQ_BARRIER, REQ_WAIT_IO },
	{ REQ_BARRIER, REQ_QUEUED },     { REQ_BARRIER, REQ_WAIT_NODE },
	{ REQ_BARRIER, REQ_DONE },
	{ REQ_FORWARDED, REQ_DONE },
	{ REQ_RUNNING, REQ_MIRROR },
	{ REQ_MIRROR, REQ_DONE },        { REQ_MIRROR, REQ_BARRIER },
};

START_TEST(table_is_exactly_the_documented_one)
{
	for (int f = 0; f < REQ_STATES; f++)
		for (int t = 0; t < REQ_STATES; t++) {
			bool want = false;
			for (size_t k = 0; k < sizeof(allowed) / sizeof(allowed[0]); k++)
				want |= allowed[k].from == (enum cache_req_state)f &&
					allowed[k].to == (enum cache_req_state)t;
			ck_assert_msg(req_transition_ok(f, t) == want, "%s -> %s",
				      req_state_name(f), req_state_name(t));
		}
	ck_assert(!req_transition_ok(REQ_STATES, REQ_DONE));
	ck_assert(!req_transition_ok(REQ_NEW, REQ_STATES));
	ck_assert_str_eq(req_state_name(REQ_PARKED_WRITE), "PARKED_WRITE");
	ck_assert_str_eq(req_state_name(REQ_STATES), "?");
	for (int s = 0; s < REQ_STATES; s++)   /* every state is named */
		ck_assert_str_ne(req_state_name(s), "?");
	/* An answered request goes nowhere: the glue may reuse it. */
	for (int t = 0; t < REQ_STATES; t++)
		ck_assert(!req_transition_ok(REQ_DONE, t));
}
END_TEST

/* Every state can be reached from NEW and reaches DONE: no dead end. */
START_TEST(every_state_lies_on_a_path_from_new_to_done)
{
	bool from_new[REQ_STATES] = { [REQ_NEW] = true }, to_done[REQ_STATES] = { [REQ_DONE] = true };
	for (int round = 0; round < REQ_STATES; round++)
		for (int f = 0; f < REQ_STATES; f++)
			for (int t = 0; t < REQ_STATES; t++)
				if (req_transition_ok(f, t)) {
					from_new[t] |= from_new[f];
					to_done[f] |= to_done[t];
				}
	for (int s = 0; s < REQ_STATES; s++) {
		ck_assert_msg(from_new[s], "%s cannot be reached", req_state_name(s));
		ck_assert_msg(to_done[s], "%s never ends", req_state_name(s));
	}
}
END_TEST

/* A miss of a read: queued, run, parked for its load, run again, done. */
START_TEST(set_follows_legal_transitions)
{
	struct cache_req r = { .op = X_READ, .name = "o" };
	req_init(NULL, &r);
	ck_assert_int_eq(r.state, REQ_NEW);
	static const enum cache_req_state path[] = {
		REQ_QUEUED, REQ_RUNNING, REQ_PARKED, REQ_RUNNING, REQ_WAIT_IO, REQ_QUEUED,
		REQ_RUNNING, REQ_THROUGH, REQ_DONE,
	};
	for (size_t i = 0; i < sizeof(path) / sizeof(path[0]); i++) {
		req_set(&r, path[i]);
		ck_assert_int_eq(r.state, path[i]);
	}
	req_init(NULL, &r);                    /* reused by the glue: a new life */
	ck_assert_int_eq(r.state, REQ_NEW);
}
END_TEST

/* Illegal transitions abort: each loop index is one of these. */
static const struct { enum cache_req_state from, to; } refused[] = {
	{ REQ_DONE, REQ_DONE },          /* answered twice */
	{ REQ_DONE, REQ_RUNNING },       /* run after its answer */
	{ REQ_NEW, REQ_RUNNING },        /* run without being queued */
	{ REQ_QUEUED, REQ_PARKED },      /* parked without running */
	{ REQ_THROUGH, REQ_PARKED },     /* parked while at the blocker */
	{ REQ_PARKED_WRITE, REQ_DONE },  /* a waiting write left writes_waiting counted */
	{ REQ_FORWARDED, REQ_QUEUED },
};

START_TEST(set_aborts_on_an_illegal_transition)
{
	struct cache_req r = { .op = X_WRITE, .name = "o" };
	req_init(NULL, &r);
	r.state = (uint8_t)refused[_i].from;
	req_set(&r, refused[_i].to);          /* aborts */
	ck_abort_msg("%s -> %s was let through", req_state_name(refused[_i].from),
		     req_state_name(refused[_i].to));
}
END_TEST

START_TEST(set_aborts_on_a_corrupt_state)
{
	struct cache_req r = { .op = X_WRITE, .name = "o" };
	req_init(NULL, &r);
	r.state = 200;
	req_set(&r, REQ_DONE);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cached_req_states");
	TCase *tc = tcase_create("states");
	tcase_add_test(tc, table_is_exactly_the_documented_one);
	tcase_add_test(tc, every_state_lies_on_a_path_from_new_to_done);
	tcase_add_test(tc, set_follows_legal_transitions);
	tcase_add_loop_test_raise_signal(tc, set_aborts_on_an_illegal_transition, SIGABRT, 0,
					 (int)(sizeof(refused) / sizeof(refused[0])));
	tcase_add_test_raise_signal(tc, set_aborts_on_a_corrupt_state, SIGABRT);
	suite_add_tcase(s, tc);
	return xt_run(s);
}
