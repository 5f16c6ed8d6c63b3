/*
 * Several threads of one peer take from the pool on one port at once, and
 * the peer is SIGKILLed: what one of them had popped off the pool's ring
 * and not yet claimed must go back to the pool at the reap. The port had
 * one note of where its taker popped (pool_taking): a second taker's
 * announce, or its end of a get (note back to 0), wiped out the first's,
 * and the reap did not find the request it had popped: in no ring, held
 * by nobody, lost for good.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/xseg_test_util.h"
#include "../src/xseg_internal.h"   /* the pool's ring and its notes */

enum { CLIENT = 1, VICTIM = 5, THREADS = 4 };

/* Each request of the pool in its ring exactly once, nothing held. */
static void expect_pool_whole(const char *what)
{
	struct xseg_segment_info si;
	ck_assert_int_eq(xseg_segment_info(xt_seg, &si), 0);
	uint8_t *queued = calloc(si.nr_requests, 1);
	ck_assert_ptr_nonnull(queued);
	xseg_ring_mark_queued(xt_seg->free_ring, queued, si.nr_requests);
	uint32_t distinct = 0, lost = UINT32_MAX;
	for (uint32_t i = 0; i < si.nr_requests; i++) {
		distinct += queued[i];
		if (!queued[i] && lost == UINT32_MAX)
			lost = i;
	}
	free(queued);
	ck_assert_msg(si.free_requests == si.nr_requests && distinct == si.nr_requests,
		      "%s: the pool has %u of %u requests (%u distinct; request %u is in no "
		      "ring, state %u, holder %u)", what, si.free_requests, si.nr_requests,
		      distinct, lost,
		      lost < si.nr_requests ? xseg_request_at(xt_seg, lost)->state : 0,
		      lost < si.nr_requests ? xseg_request_at(xt_seg, lost)->holder : 0);
}

/* Kills pid delay_us after it wrote a byte on fd, and reaps VICTIM. */
static void kill_and_reap(pid_t pid, int fd, unsigned delay_us)
{
	char ch;
	ck_assert_int_eq(read(fd, &ch, 1), 1);
	close(fd);
	if (delay_us)
		usleep(delay_us);
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
		      "the child ended by itself (status %#x)", st);
	ck_assert_int_ge(xseg_reap_port(xt_seg, VICTIM, EHOSTDOWN), 0);
	/* The pool serves at once (a taker killed after its pop left the
	 * ring's head behind). */
	struct xseg_request *r = xseg_get_request(xt_seg, CLIENT);
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(xseg_put_request(xt_seg, r), 0);
}

/*
 * The exact state two threads leave: thread A popped a request off the
 * pool's ring (popped, not yet claimed: xseg_pool_take's first step),
 * then thread B got one whole (pop, claim and mark), or only popped too.
 * Then the process dies. (The port's note of where it popped said B's
 * position, or 0 after B's whole get: A's request was lost.)
 */
static void two_takers_then_die(int ready_fd, bool b_whole)
{
	struct xseg *seg;
	XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
	XT_CHILD_CHECK(xseg_bind_port(seg, VICTIM) == 0, 3, "%s", xseg_last_error());
	uint32_t idx;
	uint64_t at;
	XT_CHILD_CHECK(xseg_ring_pop_at(seg->free_ring, &idx, &at), 4, "pop A");
	if (b_whole)
		XT_CHILD_CHECK(xseg_get_request(seg, VICTIM), 5, "%s", xseg_last_error());
	else
		XT_CHILD_CHECK(xseg_ring_pop_at(seg->free_ring, &idx, &at), 6, "pop B");
	XT_CHILD_CHECK(write(ready_fd, "r", 1) == 1, 7, "write");
	for (;;)
		pause();
}

static void run_two_takers(bool b_whole)
{
	int ready[2];
	ck_assert_int_eq(pipe(ready), 0);
	pid_t pid = xt_fork(20);
	if (pid == 0) {
		close(ready[0]);
		two_takers_then_die(ready[1], b_whole);
	}
	close(ready[1]);
	kill_and_reap(pid, ready[0], 0);
	expect_pool_whole(b_whole ? "a taker popped, another got one, killed"
				  : "two takers popped, killed");
}

START_TEST(a_pop_beside_a_whole_get_is_not_lost)
{
	run_two_takers(true);
}
END_TEST

START_TEST(two_pops_are_not_lost)
{
	run_two_takers(false);
}
END_TEST

/* The same with real threads: THREADS threads get, prep and put on one
 * port until the process is killed at a random moment. */
static struct xseg *churn_seg;

static void *churn_thread(void *arg)
{
	(void)arg;
	for (;;) {
		struct xseg_request *r = xseg_get_request(churn_seg, VICTIM);
		XT_CHILD_CHECK(r, 5, "%s", xseg_last_error());
		XT_CHILD_CHECK(xseg_prep_target(churn_seg, r, "churn", 512) == 0, 6, "%s",
			       xseg_last_error());
		XT_CHILD_CHECK(xseg_put_request(churn_seg, r) == 0, 7, "%s", xseg_last_error());
	}
	return NULL;
}

static void churn(int ready_fd)
{
	XT_CHILD_CHECK(xseg_join(xt_name, &churn_seg) == 0, 2, "%s", xseg_last_error());
	XT_CHILD_CHECK(xseg_bind_port(churn_seg, VICTIM) == 0, 3, "%s", xseg_last_error());
	pthread_t t[THREADS];
	for (int i = 0; i < THREADS; i++)
		XT_CHILD_CHECK(pthread_create(&t[i], NULL, churn_thread, NULL) == 0, 4, "thread");
	XT_CHILD_CHECK(write(ready_fd, "r", 1) == 1, 8, "write");
	for (;;)
		pause();
}

START_TEST(threads_of_a_killed_taker_lose_no_request)
{
	unsigned seed = (unsigned)getpid();
	uint64_t t0 = xseg_now_ns();
	uint64_t rounds_max = xt_scaled(1500, 50);
	int rounds = 0;

	while (xseg_now_ns() - t0 < 3000000000ull && (uint64_t)rounds < rounds_max) {
		int ready[2];
		ck_assert_int_eq(pipe(ready), 0);
		pid_t pid = xt_fork(20);
		if (pid == 0) {
			close(ready[0]);
			churn(ready[1]);
		}
		close(ready[1]);
		seed = seed * 1103515245u + 12345u;
		kill_and_reap(pid, ready[0], 20 + (seed >> 8) % 200);
		rounds++;
	}
	char what[80];
	snprintf(what, sizeof(what), "after %d kills of %d takers on one port", rounds, THREADS);
	expect_pool_whole(what);
	/* Nor a heap block: each thread's buffer went back once. */
	struct xseg_segment_info si;
	ck_assert_int_eq(xseg_segment_info(xt_seg, &si), 0);
	ck_assert_msg(si.heap_used == 0 && si.heap_free_largest == si.heap_size,
		      "%s: %llu heap bytes in %llu blocks are lost", what,
		      (unsigned long long)si.heap_used, (unsigned long long)si.heap_allocs);
	fprintf(stderr, "pool takers: %d kills of %d threads on one port, no request lost\n",
		rounds, THREADS);
}
END_TEST

/*
 * A live taker beside the reap's look at a FREE request. The reap of a
 * dead port (xseg_settle_pool) read a request's state (FREE, on the pool's
 * ring) and then its tag; a live thread that got that request in between
 * and submitted it left the tag of that push, DONE, not TAKEN, and not on
 * the pool's ring at its position: the reap took it for popped off the
 * pool and never claimed, put it back in the pool (CAS to RESUMED) and
 * then dropped it from the queue it was on (its pop no longer matched the
 * tag). The submit had succeeded and nobody ever answered it (CI, TSan:
 * test_xseg_takeover's reaps_racing_submits_answer_every_request, "0 of 1
 * replies after 5 s").
 *
 * The window is two loads; the test holds it open with userfaultfd: the
 * request's tag lies on the page after its state, and that page is made
 * to fault in this mapping once the reap's pool settle has begun (a first
 * fault, on the pool ring's page that only the settle reads). The
 * handler gets the request and submits it to the dead port through a
 * second mapping, as a thread of this process would, then lets the reap
 * go on. The request must come back to its issuer (EHOSTDOWN: the reap
 * fails what is queued on a dead server). Where userfaultfd cannot do
 * that, the test says SKIP and passes.
 */
static int uffd = -1;
static struct xseg *seg2;
static uintptr_t ring_page, tag_page;
static uint32_t watched;        /* the request the reap is looked at on */
static _Atomic int faults;
static char handler_failure[200];

static uintptr_t page_of(const void *p)
{
	return (uintptr_t)p & ~(uintptr_t)(sysconf(_SC_PAGESIZE) - 1);
}

static int open_uffd(void)
{
	int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
	if (fd < 0)
		fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
	if (fd < 0)
		return -1;
	struct uffdio_api api = { .api = UFFD_API, .features = UFFD_FEATURE_MINOR_SHMEM };
	if (ioctl(fd, UFFDIO_API, &api) < 0 || !(api.features & UFFD_FEATURE_MINOR_SHMEM)) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Waits for the next fault; returns its page, or 0 (handler_failure set). */
static uintptr_t next_fault(void)
{
	struct pollfd pfd = { .fd = uffd, .events = POLLIN };
	if (poll(&pfd, 1, 5000) != 1) {
		snprintf(handler_failure, sizeof(handler_failure), "no fault %d in 5 s",
			 atomic_load(&faults) + 1);
		return 0;
	}
	struct uffd_msg msg;
	if (read(uffd, &msg, sizeof(msg)) != sizeof(msg) || msg.event != UFFD_EVENT_PAGEFAULT) {
		snprintf(handler_failure, sizeof(handler_failure), "no page fault event");
		return 0;
	}
	atomic_fetch_add(&faults, 1);
	return page_of((void *)(uintptr_t)msg.arg.pagefault.address);
}

static bool go_on(uintptr_t page)
{
	struct uffdio_continue cont = {
		.range = { .start = page, .len = (uint64_t)sysconf(_SC_PAGESIZE) } };
	if (ioctl(uffd, UFFDIO_CONTINUE, &cont) < 0 && errno != EEXIST) {
		snprintf(handler_failure, sizeof(handler_failure), "continue: %s",
			 strerror(errno));
		return false;
	}
	return true;
}

static void *settle_fault_handler(void *arg)
{
	(void)arg;
	long page = sysconf(_SC_PAGESIZE);
	/* 1: the settle reads the pool's ring (request 0's cell): from now
	 * on, the page of the watched request's tag faults. */
	uintptr_t at = next_fault();
	if (!at)
		return NULL;
	if (at != ring_page) {
		snprintf(handler_failure, sizeof(handler_failure),
			 "first fault at %#lx, not the pool ring's page", (unsigned long)at);
		go_on(at);
		return NULL;
	}
	if (madvise((void *)tag_page, (size_t)page, MADV_DONTNEED) < 0)
		snprintf(handler_failure, sizeof(handler_failure), "madvise: %s",
			 strerror(errno));
	if (!go_on(ring_page) || handler_failure[0])
		return NULL;
	/* 2: the settle looks at the watched request: a live thread of this
	 * process gets it and submits it to the dead port meanwhile. */
	if (!(at = next_fault()))
		return NULL;
	if (at == tag_page) {
		struct xseg_request *r = xseg_get_request(seg2, CLIENT);
		if (!r)
			snprintf(handler_failure, sizeof(handler_failure), "get: %s",
				 xseg_last_error());
		else if (r->index != watched)
			snprintf(handler_failure, sizeof(handler_failure),
				 "got request %u, not %u", r->index, watched);
		else {
			r->op = X_READ;
			r->size = 512;
			r->priv = 0xfeed;
			if (xseg_submit(seg2, r, CLIENT, VICTIM) != VICTIM)
				snprintf(handler_failure, sizeof(handler_failure),
					 "submit: %s", xseg_last_error());
		}
	} else
		snprintf(handler_failure, sizeof(handler_failure),
			 "second fault at %#lx, not the tag's page", (unsigned long)at);
	go_on(at);
	return NULL;
}

START_TEST(a_get_and_submit_inside_the_reaps_look_is_answered)
{
	if ((uffd = open_uffd()) < 0) {
		fprintf(stderr, "SKIP: no userfaultfd minor faults on shared memory here\n");
		return;
	}
	long page = sysconf(_SC_PAGESIZE);
	uint32_t n = xt_seg->nr_requests;
	struct xseg_ring *fr = xt_seg->free_ring;
	/* A request whose tag lies on the page after its state. */
	watched = 1;
	while (watched < n / 2 &&
	       page_of(&xt_seg->requests[watched].state) ==
	       page_of(&xt_seg->requests[watched].pushing))
		watched++;
	ck_assert_msg(watched < n / 2, "no request across a page boundary");
	tag_page = page_of(&xt_seg->requests[watched].pushing);
	/* A page of the pool ring's cells, wholly: request 0's cell is put
	 * there (the settle reads it before it comes to the watched one). */
	ring_page = page_of((char *)&fr->cells[0] + page - 1);
	ck_assert((char *)ring_page + page <= (char *)&fr->cells[fr->capacity]);
	uint32_t cell = (uint32_t)((ring_page - (uintptr_t)&fr->cells[0]) /
				   sizeof(fr->cells[0])) + 1;

	/* The pool: the watched request at its head, request 0 next, in
	 * `cell`; nothing else of this mapping reads that page until the
	 * settle does. */
	struct xseg_request **all = calloc(n, sizeof(*all));
	ck_assert_ptr_nonnull(all);
	for (uint32_t k = 0; k < n; k++) {
		struct xseg_request *r = xseg_get_request(xt_seg, CLIENT);
		ck_assert_ptr_nonnull(r);
		all[r->index] = r;
	}
	struct xseg_request *spin = all[n - 1];
	while ((atomic_load(&fr->tail) & fr->mask) != ((cell - 1) & fr->mask)) {
		ck_assert_int_eq(xseg_put_request(xt_seg, spin), 0);
		ck_assert_ptr_eq(xseg_get_request(xt_seg, CLIENT), spin);
	}
	ck_assert_int_eq(xseg_put_request(xt_seg, all[watched]), 0);
	ck_assert_int_eq(xseg_put_request(xt_seg, all[0]), 0);
	for (uint32_t k = 1; k < n; k++)
		if (k != watched)
			ck_assert_int_eq(xseg_put_request(xt_seg, all[k]), 0);
	free(all);
	ck_assert_uint_eq(xseg_request_at(xt_seg, 0)->pushing & fr->mask, cell);

	/* A server that binds the port and is killed: the reap settles it. */
	int ready[2];
	ck_assert_int_eq(pipe(ready), 0);
	pid_t pid = xt_fork(20);
	if (pid == 0) {
		struct xseg *seg;
		XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
		XT_CHILD_CHECK(xseg_bind_port(seg, VICTIM) == 0, 3, "%s", xseg_last_error());
		XT_CHILD_CHECK(write(ready[1], "r", 1) == 1, 4, "write");
		for (;;)
			pause();
	}
	char ch;
	ck_assert_int_eq(read(ready[0], &ch, 1), 1);
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);

	ck_assert_int_eq(xseg_join(xt_name, &seg2), 0);
	struct uffdio_register reg = {
		.range = { .start = ring_page, .len = (uint64_t)page },
		.mode = UFFDIO_REGISTER_MODE_MINOR };
	struct uffdio_register reg2 = reg;
	reg2.range.start = tag_page;
	if (ioctl(uffd, UFFDIO_REGISTER, &reg) < 0 || ioctl(uffd, UFFDIO_REGISTER, &reg2) < 0) {
		fprintf(stderr, "SKIP: userfaultfd cannot register the segment: %s\n",
			strerror(errno));
		xseg_leave(seg2);
		close(uffd);
		return;
	}
	ck_assert_int_eq(madvise((void *)ring_page, (size_t)page, MADV_DONTNEED), 0);
	pthread_t h;
	ck_assert_int_eq(pthread_create(&h, NULL, settle_fault_handler, NULL), 0);
	int reaped = xseg_reap_port(xt_seg, VICTIM, EHOSTDOWN);
	ck_assert_int_eq(pthread_join(h, NULL), 0);
	ck_assert_msg(!handler_failure[0], "fault handler: %s", handler_failure);
	ck_assert_int_eq(atomic_load(&faults), 2);
	ck_assert_int_ge(reaped, 1);

	/* The request submitted while the reap looked at it: failed back. */
	struct xseg_request *got = NULL;
	int k = xseg_receive(xt_seg, CLIENT, &got, 1);
	struct xseg_request *w = xseg_request_at(xt_seg, watched);
	ck_assert_msg(k == 1, "the request submitted to the dead port while its reap looked "
		      "at it was never answered (request %u: state %u, holder %u, tag %#llx; "
		      "the reap said %d)", watched, w->state, w->holder,
		      (unsigned long long)w->pushing, reaped);
	ck_assert_uint_eq(got->index, watched);
	ck_assert_uint_eq(got->result, XR_FAILED);
	ck_assert_int_eq(got->error, EHOSTDOWN);
	ck_assert_uint_eq(got->priv, 0xfeed);
	ck_assert_int_eq(xseg_put_request(xt_seg, got), 0);
	expect_pool_whole("a get and submit inside the reap's look");
	xseg_leave(seg2);
	close(uffd);
}
END_TEST

static void setup(void)
{
	xt_setup_with(8, 1024, 4 << 20);
	ck_assert_int_eq(xseg_bind_port(xt_seg, CLIENT), 0);
}

int main(void)
{
	Suite *s = suite_create("xseg_pool_takers");
	TCase *tc = tcase_create("pool_takers");
	tcase_set_timeout(tc, 30);
	tcase_add_checked_fixture(tc, setup, xt_teardown);
	tcase_add_test(tc, a_pop_beside_a_whole_get_is_not_lost);
	tcase_add_test(tc, two_pops_are_not_lost);
	tcase_add_test(tc, threads_of_a_killed_taker_lose_no_request);
	tcase_add_test(tc, a_get_and_submit_inside_the_reaps_look_is_answered);
	suite_add_tcase(s, tc);
	return xt_run(s);
}
