/*
 * xcache, one thread: every call and every hook, in order.  The hooks write
 * a log ("init(a) evict(a) ..."); tests compare it with what the header
 * promises.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <urcu.h>

#include <xtypes/xcache.h>

struct tnode {
	struct xcache_entry *entry;
	int dirty;		/* on_finalize takes a reference while set */
	int put_in_hook;	/* ... and drops it before returning */
};

static char hook_log[4096];
static int node_inits, node_finis, fail_init;
static struct xcache_entry *flushing;	/* ref taken by on_finalize */
static struct xcache *cache;

static void log_hook(const char *hook, void *node_priv)
{
	struct tnode *n = node_priv;
	size_t len = strlen(hook_log);

	snprintf(hook_log + len, sizeof(hook_log) - len, "%s%s(%s)", len ? " " : "", hook,
		 xcache_entry_name(n->entry, NULL));
}

static void *on_node_init(void *cp, struct xcache_entry *node)
{
	(void)cp;
	struct tnode *n = calloc(1, sizeof(*n));
	n->entry = node;
	node_inits++;
	return n;
}

static void on_node_fini(void *cp, void *np)
{
	(void)cp;
	node_finis++;
	free(np);
}

static int on_init(void *cp, void *np)
{
	(void)cp;
	if (fail_init)
		return -1;
	log_hook("init", np);
	return 0;
}

static void on_evict(void *cp, void *np) { (void)cp; log_hook("evict", np); }
static void on_reinsert(void *cp, void *np) { (void)cp; log_hook("reinsert", np); }
static void on_put(void *cp, void *np) { (void)cp; log_hook("put", np); }
static void on_free(void *cp, void *np) { (void)cp; log_hook("free", np); }

static void on_finalize(void *cp, void *np)
{
	struct tnode *n = np;

	(void)cp;
	log_hook("finalize", np);
	if (!n->dirty)
		return;
	n->dirty = 0;
	xcache_get(cache, n->entry);
	if (n->put_in_hook)
		xcache_put(cache, n->entry);
	else
		flushing = n->entry;
}

static const struct xcache_ops ops = {
	.on_node_init = on_node_init, .on_node_fini = on_node_fini,
	.on_init = on_init, .on_evict = on_evict, .on_reinsert = on_reinsert,
	.on_finalize = on_finalize, .on_put = on_put, .on_free = on_free,
};

static void setup(void)
{
	rcu_register_thread();
	hook_log[0] = '\0';
	node_inits = node_finis = fail_init = 0;
	flushing = NULL;
	cache = NULL;
}

static void teardown(void)
{
	if (cache)
		ck_assert_int_eq(xcache_destroy(cache), 0);
	ck_assert_int_eq(node_inits, node_finis);
	rcu_unregister_thread();
}

static struct xcache *make(uint32_t capacity, uint32_t nr_nodes)
{
	cache = xcache_create(capacity, nr_nodes, 16, &ops, NULL);
	ck_assert_ptr_nonnull(cache);
	return cache;
}

/* alloc + insert of a new name; returns the entry with the caller's ref. */
static struct xcache_entry *add(const char *name)
{
	struct xcache_entry *e = xcache_alloc(cache, name, strlen(name));

	ck_assert_ptr_nonnull(e);
	return xcache_insert(cache, e);
}

static struct xcache_entry *find(const char *name)
{
	return xcache_lookup(cache, name, strlen(name));
}

static void expect_log(const char *want)
{
	ck_assert_str_eq(hook_log, want);
	hook_log[0] = '\0';
}

START_TEST(create_rejects_bad_arguments)
{
	errno = 0;
	ck_assert_ptr_null(xcache_create(0, 4, 16, &ops, NULL));
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_ptr_null(xcache_create(4, 4, 16, &ops, NULL));
	ck_assert_ptr_null(xcache_create(4, 8, 0, &ops, NULL));
	ck_assert_int_eq(node_inits, 0);
}
END_TEST

START_TEST(nodes_are_initialised_once_and_capacity_is_exact)
{
	make(3, 0);
	ck_assert_int_eq(node_inits, 6);	/* default: two nodes per slot */
	ck_assert_uint_eq(xcache_capacity(cache), 3);
	xcache_put(cache, add("a"));
	xcache_put(cache, add("b"));
	xcache_put(cache, add("c"));
	ck_assert_uint_eq(xcache_nr_active(cache), 3);
	expect_log("init(a) init(b) init(c)");
	xcache_put(cache, add("d"));	/* a fourth evicts one */
	ck_assert_uint_eq(xcache_nr_active(cache), 3);
	ck_assert(strstr(hook_log, "evict(") != NULL);
}
END_TEST

START_TEST(insert_lookup_put_and_destroy)
{
	make(4, 8);
	struct xcache_entry *a = add("a");
	size_t len;

	ck_assert_str_eq(xcache_entry_name(a, &len), "a");
	ck_assert_uint_eq(len, 1);
	ck_assert_ptr_eq(((struct tnode *)xcache_entry_priv(a))->entry, a);
	ck_assert_ptr_eq(find("a"), a);
	ck_assert_ptr_null(find("b"));
	ck_assert_ptr_null(find("aa"));
	xcache_put(cache, a);
	xcache_put(cache, a);
	ck_assert_ptr_eq(find("a"), a);	/* the index's reference keeps it */
	xcache_put(cache, a);
	expect_log("init(a)");
	ck_assert_int_eq(xcache_destroy(cache), 0);
	cache = NULL;
	expect_log("put(a) free(a)");
}
END_TEST

START_TEST(insert_of_a_present_name_returns_the_entry_there)
{
	make(4, 8);
	struct xcache_entry *a = add("a");
	struct xcache_entry *again = add("a");

	ck_assert_ptr_eq(again, a);
	expect_log("init(a) init(a) free(a)");	/* the spare node goes back */
	xcache_put(cache, a);
	xcache_put(cache, a);
}
END_TEST

/* Inserting a name that is already active takes no new slot, so a full
 * cache must not evict anything for it (only a new name evicts). */
START_TEST(insert_of_an_active_name_into_a_full_cache_evicts_nothing)
{
	make(2, 4);
	struct xcache_entry *a = add("a");
	struct xcache_entry *b = add("b");

	xcache_put(cache, a);
	xcache_put(cache, b);
	expect_log("init(a) init(b)");
	ck_assert_uint_eq(xcache_nr_active(cache), 2);	/* full */

	struct xcache_entry *again = add("a");

	expect_log("init(a) free(a)");			/* only the spare node goes back */
	ck_assert_ptr_eq(again, a);
	ck_assert_uint_eq(xcache_nr_active(cache), 2);
	struct xcache_entry *bb = find("b");
	ck_assert_ptr_eq(bb, b);			/* b is still cached */
	xcache_put(cache, bb);
	xcache_put(cache, again);
}
END_TEST

START_TEST(clock_spares_entries_hit_since_the_last_sweep)
{
	make(3, 8);
	struct xcache_entry *e[3] = { add("a"), add("b"), add("c") };

	for (int i = 0; i < 3; i++)
		xcache_put(cache, e[i]);
	expect_log("init(a) init(b) init(c)");
	ck_assert_int_eq(xcache_evict_coldest(cache), 0);	/* all new: one sweep clears */
	expect_log("evict(a) finalize(a) put(a) free(a)");
	xcache_put(cache, find("b"));
	ck_assert_int_eq(xcache_evict_coldest(cache), 0);
	expect_log("evict(c) finalize(c) put(c) free(c)");
	ck_assert_int_eq(xcache_evict_coldest(cache), 0);
	expect_log("evict(b) finalize(b) put(b) free(b)");
	ck_assert_int_eq(xcache_evict_coldest(cache), -ENOENT);
}
END_TEST

/* xcache_sweep_cold's callback: keeps what it is lent, up to `stop_after`. */
static struct xcache_entry *lent[8];
static unsigned nr_lent, stop_after;

static bool take_lent(void *arg, struct xcache_entry *e)
{
	(void)arg;
	lent[nr_lent++] = e;
	return nr_lent != stop_after;
}

static void put_lent(void)
{
	for (unsigned i = 0; i < nr_lent; i++)
		xcache_put(cache, lent[i]);
	nr_lent = 0;
}

START_TEST(sweep_lends_cold_entries_and_evicts_none)
{
	make(3, 8);
	struct xcache_entry *e[3] = { add("a"), add("b"), add("c") };

	nr_lent = stop_after = 0;
	for (int i = 0; i < 3; i++)
		xcache_put(cache, e[i]);
	expect_log("init(a) init(b) init(c)");
	ck_assert_uint_eq(xcache_sweep_cold(cache, 8, take_lent, NULL), 0); /* clears the bits */
	xcache_put(cache, find("b"));
	ck_assert_uint_eq(xcache_sweep_cold(cache, 8, take_lent, NULL), 2);
	ck_assert_ptr_eq(lent[0], e[0]);
	ck_assert_ptr_eq(lent[1], e[2]);
	ck_assert_str_eq(hook_log, "");			/* nothing evicted */
	ck_assert_uint_eq(xcache_nr_active(cache), 3);
	put_lent();
	ck_assert_ptr_eq(find("a"), e[0]);		/* still indexed; a hit again */
	xcache_put(cache, e[0]);

	/* max and a callback that stops both end the sweep */
	ck_assert_uint_eq(xcache_sweep_cold(cache, 1, take_lent, NULL), 1);
	put_lent();
	stop_after = 1;
	ck_assert_uint_eq(xcache_sweep_cold(cache, 8, take_lent, NULL), 1);
	put_lent();
	ck_assert_str_eq(hook_log, "");

	/* a lent reference keeps an entry evicted meanwhile alive */
	stop_after = 1;
	while (xcache_sweep_cold(cache, 8, take_lent, NULL) == 0)
		;
	struct xcache_entry *held = lent[0];
	char want[64];
	nr_lent = 0;
	while (xcache_evict_coldest(cache) == 0)
		;
	snprintf(want, sizeof(want), "put(%s)", xcache_entry_name(held, NULL));
	ck_assert_ptr_null(strstr(hook_log, want));
	hook_log[0] = '\0';
	xcache_put(cache, held);
	snprintf(want, sizeof(want), "finalize(%s) put(%s) free(%s)", xcache_entry_name(held, NULL),
		 xcache_entry_name(held, NULL), xcache_entry_name(held, NULL));
	expect_log(want);
}
END_TEST

START_TEST(evicted_but_referenced_entry_is_reinserted)
{
	make(1, 4);
	struct xcache_entry *a = add("a");

	struct xcache_entry *b = add("b");	/* evicts a, which we still hold */
	expect_log("init(a) init(b) evict(a)");
	ck_assert_ptr_null(find("a"));
	xcache_put(cache, b);

	ck_assert_ptr_eq(add("a"), a);		/* revived, evicting b */
	expect_log("init(a) evict(b) finalize(b) put(b) free(b) free(a) reinsert(a)");
	ck_assert_ptr_eq(find("a"), a);
	xcache_put(cache, a);
	xcache_put(cache, a);
	xcache_put(cache, a);			/* back to the index's ref */
	ck_assert_str_eq(hook_log, "");
}
END_TEST

START_TEST(finalize_may_take_a_reference_and_delay_the_end)
{
	make(1, 4);
	struct xcache_entry *a = add("a");

	((struct tnode *)xcache_entry_priv(a))->dirty = 1;
	xcache_put(cache, a);
	ck_assert_int_eq(xcache_evict_coldest(cache), 0);
	expect_log("init(a) evict(a) finalize(a)");
	ck_assert_ptr_eq(flushing, a);		/* the hook kept it */
	ck_assert_ptr_null(find("a"));
	xcache_put(cache, flushing);		/* flush done */
	expect_log("finalize(a) put(a) free(a)");
}
END_TEST

START_TEST(finalize_that_takes_a_reference_revives_on_insert)
{
	make(1, 4);
	struct xcache_entry *a = add("a");

	((struct tnode *)xcache_entry_priv(a))->dirty = 1;
	xcache_put(cache, a);
	ck_assert_int_eq(xcache_evict_coldest(cache), 0);
	ck_assert_ptr_eq(add("a"), a);		/* still dirty-flushing: revived */
	expect_log("init(a) evict(a) finalize(a) init(a) free(a) reinsert(a)");
	xcache_put(cache, flushing);
	xcache_put(cache, a);
	ck_assert_str_eq(hook_log, "");
}
END_TEST

START_TEST(reference_dropped_inside_finalize_runs_it_again)
{
	make(1, 4);
	struct xcache_entry *a = add("a");
	struct tnode *n = xcache_entry_priv(a);

	n->dirty = 1;
	n->put_in_hook = 1;
	xcache_put(cache, a);
	ck_assert_int_eq(xcache_evict_coldest(cache), 0);
	expect_log("init(a) evict(a) finalize(a) finalize(a) put(a) free(a)");
}
END_TEST

START_TEST(remove_unindexes_for_good)
{
	make(2, 4);
	struct xcache_entry *a = add("a");

	ck_assert_int_eq(xcache_remove(cache, a), 0);
	ck_assert_int_eq(xcache_remove(cache, a), -ENOENT);
	ck_assert_uint_eq(xcache_nr_active(cache), 0);
	ck_assert_ptr_null(find("a"));
	struct xcache_entry *fresh = add("a");	/* a new entry, not a revival */
	ck_assert_ptr_ne(fresh, a);
	expect_log("init(a) init(a)");
	xcache_put(cache, a);
	expect_log("finalize(a) put(a) free(a)");
	xcache_put(cache, fresh);
}
END_TEST

START_TEST(remove_of_an_evicted_entry_stops_its_revival)
{
	make(1, 4);
	struct xcache_entry *a = add("a");

	xcache_put(cache, add("b"));		/* evicts a */
	ck_assert_int_eq(xcache_remove(cache, a), 0);
	struct xcache_entry *fresh = add("a");
	ck_assert_ptr_ne(fresh, a);
	xcache_put(cache, a);
	xcache_put(cache, fresh);
	expect_log("init(a) init(b) evict(a) init(a) evict(b) finalize(b) put(b) free(b) "
		   "finalize(a) put(a) free(a)");
}
END_TEST

START_TEST(alloc_reports_errors_and_reuses_freed_nodes)
{
	make(1, 2);
	struct xcache_entry *x = xcache_alloc(cache, "x", 1);
	struct xcache_entry *y = xcache_alloc(cache, "y", 1);

	ck_assert_ptr_nonnull(x);
	ck_assert_ptr_nonnull(y);
	errno = 0;
	ck_assert_ptr_null(xcache_alloc(cache, "z", 1));
	ck_assert_int_eq(errno, ENOSPC);
	xcache_put(cache, x);			/* never inserted: just freed */
	struct xcache_entry *z = xcache_alloc(cache, "z", 1);	/* after a grace period */
	ck_assert_ptr_nonnull(z);
	ck_assert_ptr_null(xcache_alloc(cache, "0123456789abcdefg", 17));
	ck_assert_int_eq(errno, ENAMETOOLONG);
	expect_log("init(x) init(y) free(x) init(z)");
	ck_assert_int_eq(xcache_destroy(cache), -EBUSY);	/* y and z are out */
	xcache_put(cache, y);
	xcache_put(cache, z);
}
END_TEST

START_TEST(failed_on_init_fails_the_alloc)
{
	make(1, 2);
	fail_init = 1;
	errno = 0;
	ck_assert_ptr_null(xcache_alloc(cache, "x", 1));
	ck_assert_int_eq(errno, ECANCELED);
	fail_init = 0;
	xcache_put(cache, add("x"));
	expect_log("init(x)");
}
END_TEST

START_TEST(destroy_refuses_while_a_reference_is_held)
{
	make(2, 4);
	struct xcache_entry *a = add("a");

	ck_assert_int_eq(xcache_destroy(cache), -EBUSY);
	xcache_put(cache, a);
}
END_TEST

START_TEST(put_below_zero_aborts)
{
	make(2, 4);
	struct xcache_entry *a = add("a");

	xcache_put(cache, a);
	xcache_put(cache, a);	/* drops the index's reference: abort */
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xtypes_xcache");
	TCase *tc = tcase_create("semantics");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, create_rejects_bad_arguments);
	tcase_add_test(tc, nodes_are_initialised_once_and_capacity_is_exact);
	tcase_add_test(tc, insert_lookup_put_and_destroy);
	tcase_add_test(tc, insert_of_a_present_name_returns_the_entry_there);
	tcase_add_test(tc, insert_of_an_active_name_into_a_full_cache_evicts_nothing);
	tcase_add_test(tc, clock_spares_entries_hit_since_the_last_sweep);
	tcase_add_test(tc, sweep_lends_cold_entries_and_evicts_none);
	tcase_add_test(tc, evicted_but_referenced_entry_is_reinserted);
	tcase_add_test(tc, finalize_may_take_a_reference_and_delay_the_end);
	tcase_add_test(tc, finalize_that_takes_a_reference_revives_on_insert);
	tcase_add_test(tc, reference_dropped_inside_finalize_runs_it_again);
	tcase_add_test(tc, remove_unindexes_for_good);
	tcase_add_test(tc, remove_of_an_evicted_entry_stops_its_revival);
	tcase_add_test(tc, alloc_reports_errors_and_reuses_freed_nodes);
	tcase_add_test(tc, failed_on_init_fails_the_alloc);
	tcase_add_test(tc, destroy_refuses_while_a_reference_is_held);
	tcase_add_test_raise_signal(tc, put_below_zero_aborts, SIGABRT);
	suite_add_tcase(s, tc);

	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
