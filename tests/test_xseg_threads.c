/*
 * Many threads, one process: client threads (each with its own port)
 * submit concurrently to one server port, where a pool of server threads
 * accepts in batches, sleeping in xseg_poll on the same port, and responds.
 * Nothing lost, nothing duplicated, and the pool and heap whole at the end.
 * Meant for ThreadSanitizer too: every hand-over between threads goes
 * through libxseg's rings.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "support/xseg_test_util.h"

enum { SERVER = 0, NCLIENTS = 4, NSERVERS = 3, DEPTH = 8, BATCH = 8 };
#define DATA_LEN 200u

static uint64_t per_client;
/* How threads wait when idle: spin, then sleep up to the timeout. With no
 * spin and long timeouts (the sleepers test) every hand-over needs a
 * wake-up, and a client that sleeps out its timeout with requests in
 * flight is a lost one. */
static uint64_t server_spin_ns = 20000, server_wait_ns = 20000000ull;
static uint64_t client_spin_ns = 20000, client_wait_ns = 50000000ull;
static bool timeout_is_lost_wakeup;
static _Atomic uint64_t *served_bits;      /* one bit per request id */
static _Atomic uint64_t served_total;
static _Atomic bool stop_servers;
static _Atomic int failures;
static char failure_text[256];
static pthread_mutex_t failure_lock = PTHREAD_MUTEX_INITIALIZER;

/* Threads do not ck_assert: they record the first failure for main. */
#define T_CHECK(cond, ...)                                                   \
	do {                                                                 \
		if (!(cond)) {                                               \
			pthread_mutex_lock(&failure_lock);                   \
			if (atomic_fetch_add(&failures, 1) == 0)             \
				snprintf(failure_text, sizeof(failure_text), __VA_ARGS__); \
			pthread_mutex_unlock(&failure_lock);                 \
			return NULL;                                         \
		}                                                            \
	} while (0)

static bool carries_data(uint64_t id)
{
	return id % 16 == 3;
}

/* What each server does, for the failure message: since when it sleeps
 * (0: awake). */
static _Atomic uint64_t server_asleep_since[NSERVERS];

static void *server_thread(void *arg)
{
	struct xseg_request *reqs[BATCH];
	_Atomic uint64_t *asleep = arg;

	while (!atomic_load(&stop_servers) && !atomic_load(&failures)) {
		int n = xseg_accept(xt_seg, SERVER, reqs, BATCH);
		T_CHECK(n >= 0, "accept: %s", xseg_last_error());
		if (n == 0) {
			atomic_store(asleep, xseg_now_ns());
			int rc = xseg_poll(xt_seg, SERVER, server_spin_ns, server_wait_ns);
			atomic_store(asleep, 0);
			T_CHECK(rc >= 0, "poll: %s", xseg_last_error());
			continue;
		}
		for (int i = 0; i < n; i++) {
			struct xseg_request *r = reqs[i];
			uint64_t id = r->offset;
			T_CHECK(id < per_client * NCLIENTS, "id %" PRIu64 " out of range", id);
			uint64_t bit = 1ull << (id % 64);
			uint64_t old = atomic_fetch_or(&served_bits[id / 64], bit);
			T_CHECK(!(old & bit), "request %" PRIu64 " served twice", id);
			T_CHECK(r->state == XS_ACCEPTED && r->holder == SERVER,
				"state %u holder %u", r->state, r->holder);
			if (carries_data(id)) {
				unsigned char *d = xseg_get_data(xt_seg, r);
				T_CHECK(d && r->datalen == DATA_LEN, "no data on %" PRIu64, id);
				for (unsigned k = 0; k < DATA_LEN; k++) {
					T_CHECK(d[k] == (unsigned char)(id + k), "data of %" PRIu64, id);
					d[k] = (unsigned char)(d[k] ^ 0xff);
				}
			}
			/* Once responded, r is no longer ours: read it before. */
			uint32_t src = r->src_port;
			r->priv = 0x5e5e;
			r->serviced = r->size;
			r->result = XR_SERVED;
			int to = xseg_respond(xt_seg, r, SERVER);
			T_CHECK(to == (int)src, "respond went to %d, not %u: %s", to, src,
				xseg_last_error());
			atomic_fetch_add(&served_total, 1);
		}
	}
	return NULL;
}

struct client {
	pthread_t thread;
	uint32_t port;
	uint64_t first_id;
	uint64_t answered;
};

/* Fails the run, saying where the requests of a lost wake-up were. */
static void *report_lost_wakeup(const struct client *c, uint64_t inflight)
{
	struct xseg_port_info si = { 0 }, ci = { 0 };
	uint64_t now = xseg_now_ns(), slept[NSERVERS];
	for (int k = 0; k < NSERVERS; k++) {
		uint64_t since = atomic_load(&server_asleep_since[k]);
		slept[k] = since ? (now - since) / 1000000 : 0;
	}
	xseg_port_info(xt_seg, SERVER, &si);
	xseg_port_info(xt_seg, c->port, &ci);
	T_CHECK(false,
		"client %u: asleep %" PRIu64 " ms with %" PRIu64 " requests out, "
		"%" PRIu64 " answered: a lost wake-up (server port: work %d, "
		"%u waiters, %" PRIu64 " submitted, %" PRIu64 " served; client port: "
		"work %d, %u replies queued, %" PRIu64 " replied; servers asleep for "
		"%" PRIu64 "/%" PRIu64 "/%" PRIu64 " ms)", c->port,
		client_wait_ns / 1000000, inflight, c->answered,
		xseg_has_work(xt_seg, SERVER), si.waiters, si.submitted,
		atomic_load(&served_total), xseg_has_work(xt_seg, c->port),
		ci.reply_depth, ci.replied, slept[0], slept[1], slept[2]);
	return NULL;
}

static void *client_thread(void *arg)
{
	struct client *c = arg;
	struct xseg_request *reqs[DEPTH];
	struct xt_bitmap done;
	uint64_t next = 0, inflight = 0, last = xseg_now_ns();

	xt_bitmap_init(&done, per_client);
	while (c->answered < per_client && !atomic_load(&failures)) {
		while (inflight < DEPTH && next < per_client) {
			struct xseg_request *r = xseg_get_request(xt_seg, c->port);
			T_CHECK(r, "get_request on %u: %s", c->port, xseg_last_error());
			uint64_t id = c->first_id + next;
			r->op = X_READ;
			r->offset = id;
			r->size = 4096;
			r->priv = xt_cookie(id, c->port);
			if (carries_data(id)) {
				T_CHECK(xseg_prep_target(xt_seg, r, "threaded", DATA_LEN) == 0,
					"prep: %s", xseg_last_error());
				unsigned char *d = xseg_get_data(xt_seg, r);
				for (unsigned k = 0; k < DATA_LEN; k++)
					d[k] = (unsigned char)(id + k);
			}
			int to = xseg_submit(xt_seg, r, c->port, SERVER);
			T_CHECK(to == SERVER, "submit: %d %s", to, xseg_last_error());
			next++;
			inflight++;
		}
		int n = xseg_receive(xt_seg, c->port, reqs, DEPTH);
		T_CHECK(n >= 0, "receive: %s", xseg_last_error());
		if (n == 0) {
			uint64_t t0 = xseg_now_ns();
			int rc = xseg_poll(xt_seg, c->port, client_spin_ns, client_wait_ns);
			/* 0 is also an early return (a wake-up meant for an earlier
			 * wait): only a sleep of the whole timeout is a lost one. */
			if (timeout_is_lost_wakeup && rc == 0 &&
			    xseg_now_ns() - t0 >= client_wait_ns)
				return report_lost_wakeup(c, inflight);
			T_CHECK(xseg_now_ns() - last < 20000000000ull,
				"client %u: no reply for 20 s, %" PRIu64 " answered", c->port,
				c->answered);
			continue;
		}
		last = xseg_now_ns();
		for (int i = 0; i < n; i++) {
			struct xseg_request *r = reqs[i];
			uint64_t id = r->offset;
			T_CHECK(id >= c->first_id && id < c->first_id + per_client,
				"client %u got %" PRIu64, c->port, id);
			T_CHECK(!xt_bitmap_set(&done, id - c->first_id), "%" PRIu64 " twice", id);
			T_CHECK(r->result == XR_SERVED && r->serviced == 4096, "result %u",
				r->result);
			T_CHECK(r->priv == xt_cookie(id, c->port), "cookie of %" PRIu64, id);
			if (carries_data(id)) {
				unsigned char *d = xseg_get_data(xt_seg, r);
				for (unsigned k = 0; k < DATA_LEN; k++)
					T_CHECK(d[k] == (unsigned char)((id + k) ^ 0xff),
						"reply data of %" PRIu64, id);
				T_CHECK(strcmp(xseg_get_target(xt_seg, r), "threaded") == 0,
					"target of %" PRIu64, id);
			}
			T_CHECK(xseg_put_request(xt_seg, r) == 0, "put: %s", xseg_last_error());
			c->answered++;
			inflight--;
		}
	}
	T_CHECK(xt_bitmap_count(&done) == per_client, "client %u: %" PRIu64 " answered",
		c->port, xt_bitmap_count(&done));
	xt_bitmap_free(&done);
	return NULL;
}

static void run_clients_and_servers(void)
{
	pthread_t servers[NSERVERS];
	struct client clients[NCLIENTS];
	uint64_t total;

	total = per_client * NCLIENTS;
	served_bits = calloc((total + 63) / 64, sizeof(*served_bits));
	ck_assert_ptr_nonnull(served_bits);
	ck_assert_int_eq(xseg_bind_port(xt_seg, SERVER), 0);
	for (int i = 0; i < NCLIENTS; i++)
		ck_assert_int_eq(xseg_bind_port(xt_seg, (uint32_t)i + 1), 0);

	uint64_t t0 = xseg_now_ns();
	for (int i = 0; i < NSERVERS; i++)
		ck_assert_int_eq(pthread_create(&servers[i], NULL, server_thread,
						&server_asleep_since[i]), 0);
	for (int i = 0; i < NCLIENTS; i++) {
		memset(&clients[i], 0, sizeof(clients[i]));
		clients[i].port = (uint32_t)i + 1;
		clients[i].first_id = (uint64_t)i * per_client;
		ck_assert_int_eq(pthread_create(&clients[i].thread, NULL, client_thread,
						&clients[i]), 0);
	}
	for (int i = 0; i < NCLIENTS; i++)
		ck_assert_int_eq(pthread_join(clients[i].thread, NULL), 0);
	atomic_store(&stop_servers, true);
	for (int i = 0; i < NSERVERS; i++)
		ck_assert_int_eq(pthread_join(servers[i], NULL), 0);
	double secs = (double)(xseg_now_ns() - t0) / 1e9;
	fprintf(stderr, "threads: %d clients x %" PRIu64 " requests, %d servers: %.2f s\n",
		NCLIENTS, per_client, NSERVERS, secs);

	ck_assert_msg(atomic_load(&failures) == 0, "%s", failure_text);
	for (int i = 0; i < NCLIENTS; i++)
		ck_assert_uint_eq(clients[i].answered, per_client);
	ck_assert_uint_eq(atomic_load(&served_total), total);
	for (uint64_t id = 0; id < total; id++)
		XT_ASSERT(atomic_load(&served_bits[id / 64]) & (1ull << (id % 64)),
			  "request %" PRIu64 " never served", id);
	struct xseg_segment_info info;
	ck_assert_int_eq(xseg_segment_info(xt_seg, &info), 0);
	ck_assert_uint_eq(info.free_requests, info.nr_requests);
	ck_assert_uint_eq(info.heap_used, 0);
	ck_assert_uint_eq(info.heap_free_largest, info.heap_size);
	struct xseg_port_info pi;
	ck_assert_int_eq(xseg_port_info(xt_seg, SERVER, &pi), 0);
	ck_assert_uint_eq(pi.submitted, total);
	ck_assert_uint_eq(pi.waiters, 0);
	free(served_bits);
}

START_TEST(threads_share_one_server_port)
{
	per_client = xt_scaled(100000, 5000);
	run_clients_and_servers();
}
END_TEST

/*
 * Everyone sleeps whenever idle (no spin), three servers on one port and
 * clients submitting bursts of DEPTH: every request and every reply needs a
 * wake-up, often while another wake-up of the same port is still on its way
 * (the case xseg's wake_pending flag skips a futex call for). A client asleep
 * for 3 s with requests out means one was lost.
 */
START_TEST(sleepers_never_miss_a_wakeup)
{
	per_client = xt_scaled(20000, 2000);
	server_spin_ns = client_spin_ns = 0;
	server_wait_ns = client_wait_ns = 3000000000ull;
	timeout_is_lost_wakeup = true;
	run_clients_and_servers();
}
END_TEST

static void setup(void)
{
	xt_setup_with(8, 256, 1 << 20);
}

int main(void)
{
	Suite *s = suite_create("xseg_threads");
	TCase *tc = tcase_create("threads");
	tcase_set_timeout(tc, 58);
	tcase_add_checked_fixture(tc, setup, xt_teardown);
	tcase_add_test(tc, threads_share_one_server_port);
	tcase_add_test(tc, sleepers_never_miss_a_wakeup);
	suite_add_tcase(s, tc);
	return xt_run(s);
}
