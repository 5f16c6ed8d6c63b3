/*
 * xcache under 4 threads: random alloc/insert (new and reinsert), lookup,
 * put, remove, evict-coldest and references kept across operations, on a
 * cache smaller than the key space.  Hooks check each entry's life cycle
 * with plain fields (ThreadSanitizer checks that xcache orders them); at
 * the end every hook count must balance and every node must be free.
 * Iterations scale by XSEG_STRESS_SCALE.
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <urcu.h>

#include <xtypes/xcache.h>

#define THREADS		4
#define KEYS		4096
#define CAPACITY	250
#define NODES		512
#define HOT_KEYS	64	/* a quarter of the operations race on these */
#define HELD_MAX	8
#define DEFERRED_MAX	16

enum life { L_FREE, L_LIVE, L_DEAD };

struct tnode {
	struct xcache_entry *entry;
	enum life life;
	int evicted, removed;
	atomic_int dirty;
};

static struct xcache *cache;
static atomic_long n_node_init, n_node_fini, n_init, n_evict, n_reinsert,
	n_finalize, n_put, n_put_evicted, n_free, n_own_inserts, n_removed, errors;

/* References taken by on_finalize ("flushes"), dropped later by the thread
 * that ran the hook. */
static __thread struct xcache_entry *deferred[DEFERRED_MAX];
static __thread int n_deferred;

static void check(int ok, const char *what)
{
	if (!ok && atomic_fetch_add(&errors, 1) < 10)
		fprintf(stderr, "invariant broken: %s\n", what);
}

static void *on_node_init(void *cp, struct xcache_entry *node)
{
	(void)cp;
	struct tnode *n = calloc(1, sizeof(*n));
	n->entry = node;
	atomic_fetch_add(&n_node_init, 1);
	return n;
}

static void on_node_fini(void *cp, void *np)
{
	struct tnode *n = np;

	(void)cp;
	check(n->life == L_FREE, "node not free at destroy");
	atomic_fetch_add(&n_node_fini, 1);
	free(n);
}

static int on_init(void *cp, void *np)
{
	struct tnode *n = np;

	(void)cp;
	check(n->life == L_FREE, "on_init of a node in use");
	n->life = L_LIVE;
	n->evicted = n->removed = 0;
	atomic_store(&n->dirty, 0);
	atomic_fetch_add(&n_init, 1);
	return 0;
}

static void on_evict(void *cp, void *np)
{
	struct tnode *n = np;

	(void)cp;
	check(n->life == L_LIVE && !n->evicted && !n->removed, "on_evict of an inactive entry");
	n->evicted = 1;
	atomic_fetch_add(&n_evict, 1);
}

static void on_reinsert(void *cp, void *np)
{
	struct tnode *n = np;

	(void)cp;
	check(n->life == L_LIVE && n->evicted && !n->removed, "on_reinsert of a non-evicted entry");
	n->evicted = 0;
	atomic_fetch_add(&n_reinsert, 1);
}

static void on_finalize(void *cp, void *np)
{
	struct tnode *n = np;

	(void)cp;
	check(n->life == L_LIVE && (n->evicted || n->removed), "on_finalize of an indexed entry");
	atomic_fetch_add(&n_finalize, 1);
	if (!atomic_exchange(&n->dirty, 0))
		return;
	xcache_get(cache, n->entry);
	if (n_deferred < DEFERRED_MAX)
		deferred[n_deferred++] = n->entry;
	else
		xcache_put(cache, n->entry);	/* flushed at once: runs again */
}

static void on_put(void *cp, void *np)
{
	struct tnode *n = np;

	(void)cp;
	check(n->life == L_LIVE, "on_put of a dead entry");
	check(n->evicted || n->removed, "on_put of an indexed entry");
	n->life = L_DEAD;
	atomic_fetch_add(&n_put, 1);
	if (n->evicted)
		atomic_fetch_add(&n_put_evicted, 1);
}

static void on_free(void *cp, void *np)
{
	struct tnode *n = np;

	(void)cp;
	check(n->life != L_FREE, "node freed twice");
	n->life = L_FREE;
	atomic_fetch_add(&n_free, 1);
}

static const struct xcache_ops ops = {
	.on_node_init = on_node_init, .on_node_fini = on_node_fini,
	.on_init = on_init, .on_evict = on_evict, .on_reinsert = on_reinsert,
	.on_finalize = on_finalize, .on_put = on_put, .on_free = on_free,
};

static char names[KEYS][16];

static double stress_scale(void)
{
	const char *s = getenv("XSEG_STRESS_SCALE");
	return s ? atof(s) : 1.0;
}

static void check_name(struct xcache_entry *e, int key)
{
	size_t len;
	const char *name = xcache_entry_name(e, &len);

	check(len == strlen(names[key]) && memcmp(name, names[key], len) == 0,
	      "entry carries another name");
}

static void drop_deferred(void)
{
	while (n_deferred > 0)
		xcache_put(cache, deferred[--n_deferred]);
}

/* xcache_sweep_cold lends an entry: keep it as a held one when there is room. */
struct held_set {
	struct xcache_entry **e;
	int *n;
};

static _Atomic long n_lent;

static bool take_cold(void *arg, struct xcache_entry *e)
{
	struct held_set *h = arg;

	check(xcache_entry_priv(e) != NULL, "lent entry has no node");
	atomic_fetch_add(&n_lent, 1);
	if (*h->n < HELD_MAX)
		h->e[(*h->n)++] = e;
	else
		xcache_put(cache, e);
	return true;
}

static void *worker(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg * 7919 + 1;
	long ops_count = (long)(1000000 * stress_scale());
	struct xcache_entry *held[HELD_MAX];
	int n_held = 0;

	rcu_register_thread();
	for (long i = 0; i < ops_count; i++) {
		int r = rand_r(&seed) % 100;
		int key = rand_r(&seed) % ((r & 12) ? KEYS : HOT_KEYS);
		struct xcache_entry *e = NULL;

		if (n_deferred && (r & 1))
			xcache_put(cache, deferred[--n_deferred]);
		if (r < 45) {
			e = xcache_lookup(cache, names[key], strlen(names[key]));
		} else if (r < 80) {
			struct xcache_entry *fresh = xcache_alloc(cache, names[key], strlen(names[key]));
			if (!fresh) {
				check(0, "out of nodes");
				continue;
			}
			e = xcache_insert(cache, fresh);
			if (e == fresh)
				atomic_fetch_add(&n_own_inserts, 1);
		} else if (r < 83) {
			xcache_evict_coldest(cache);
		} else if (r < 85) {
			struct held_set h = { held, &n_held };
			xcache_sweep_cold(cache, 2, take_cold, &h);
		} else if (r < 90 && n_held) {
			struct xcache_entry *victim = held[rand_r(&seed) % n_held];
			if (xcache_remove(cache, victim) == 0) {
				((struct tnode *)xcache_entry_priv(victim))->removed = 1;
				atomic_fetch_add(&n_removed, 1);
			}
		} else if (n_held) {
			xcache_put(cache, held[--n_held]);
		}
		if (!e)
			continue;
		check_name(e, key);
		if (r % 7 == 0)
			atomic_store(&((struct tnode *)xcache_entry_priv(e))->dirty, 1);
		if (n_held < HELD_MAX && (r & 2))
			held[n_held++] = e;
		else
			xcache_put(cache, e);
	}
	while (n_held)
		xcache_put(cache, held[--n_held]);
	drop_deferred();
	rcu_unregister_thread();
	return NULL;
}

START_TEST(four_threads_random_operations_keep_every_invariant)
{
	pthread_t t[THREADS];

	for (int k = 0; k < KEYS; k++)
		snprintf(names[k], sizeof(names[k]), "obj-%d", k);
	rcu_register_thread();
	cache = xcache_create(CAPACITY, NODES, 15, &ops, NULL);
	ck_assert_ptr_nonnull(cache);
	for (int i = 0; i < THREADS; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i), 0);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);

	ck_assert_uint_le(xcache_nr_active(cache), CAPACITY);
	while (xcache_evict_coldest(cache) == 0)
		drop_deferred();
	drop_deferred();
	ck_assert_uint_eq(xcache_nr_active(cache), 0);
	ck_assert_int_eq(xcache_destroy(cache), 0);
	rcu_unregister_thread();

	fprintf(stderr, "init %ld evict %ld reinsert %ld finalize %ld put %ld free %ld "
		"own inserts %ld removed %ld\n", n_init, n_evict, n_reinsert, n_finalize,
		n_put, n_free, n_own_inserts, n_removed);
	ck_assert_int_eq(atomic_load(&errors), 0);
	ck_assert_int_eq(n_node_init, NODES);
	ck_assert_int_eq(n_node_fini, NODES);
	ck_assert_int_eq(n_init, n_free);			/* every node freed once */
	ck_assert_int_eq(n_put, n_own_inserts);			/* every entry ends once */
	/* an entry ends evicted (not revived since) or removed while active */
	ck_assert_int_eq(n_put_evicted, n_evict - n_reinsert);
	ck_assert_int_le(n_put - n_put_evicted, n_removed);
	ck_assert_int_ge(n_finalize, n_put);
	ck_assert_int_gt(n_reinsert, 0);
	ck_assert_int_gt(n_removed, 0);
	ck_assert_int_gt(atomic_load(&n_lent), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xtypes_xcache_stress");
	TCase *tc = tcase_create("stress");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, four_threads_random_operations_keep_every_invariant);
	suite_add_tcase(s, tc);

	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
