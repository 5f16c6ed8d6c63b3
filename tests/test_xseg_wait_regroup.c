/*
 * A wait on a port of a bound range while another port of the range
 * leaves: the wait read the group's leader, and the leave's ungroup (new
 * leaders, then a wake-up of the old leader's word) came before it read
 * the old leader's word. It then slept on that word, which nobody
 * signals for its port any more: a submit to its port did not wake it
 * (for ever, with no timeout).
 *
 * The window is a few instructions; the test holds it open with
 * userfaultfd: the page of the old leader's wake-up line is made to fault
 * in the waiter's mapping, and the fault's handler leaves the port
 * (through a second mapping of the segment) before it lets the waiter go
 * on. Where userfaultfd cannot do that (no minor faults on shared memory,
 * or not allowed), the test says SKIP and passes.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "support/xseg_test_util.h"
#include "../src/xseg_internal.h"   /* where the ports lie */

enum { CLIENT = 0, NPORTS = 64 };

static int uffd = -1;
static uintptr_t fault_page;
static struct xseg *seg2;
static uint32_t leaving;
static _Atomic int handled;
static char handler_failure[200];

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

/* On the waiter's fault: the port leaves, then the waiter goes on. */
static void *fault_handler(void *arg)
{
	(void)arg;
	struct pollfd pfd = { .fd = uffd, .events = POLLIN };
	if (poll(&pfd, 1, 5000) != 1) {
		snprintf(handler_failure, sizeof(handler_failure), "no fault in 5 s");
		return NULL;
	}
	struct uffd_msg msg;
	if (read(uffd, &msg, sizeof(msg)) != sizeof(msg) || msg.event != UFFD_EVENT_PAGEFAULT) {
		snprintf(handler_failure, sizeof(handler_failure), "no page fault event");
		return NULL;
	}
	if (xseg_leave_port(seg2, leaving) < 0)
		snprintf(handler_failure, sizeof(handler_failure), "leave: %s",
			 xseg_last_error());
	struct uffdio_continue cont = {
		.range = { .start = fault_page, .len = (uint64_t)sysconf(_SC_PAGESIZE) } };
	if (ioctl(uffd, UFFDIO_CONTINUE, &cont) < 0 && errno != EEXIST)
		snprintf(handler_failure, sizeof(handler_failure), "continue: %s",
			 strerror(errno));
	atomic_store(&handled, 1);
	return NULL;
}

struct waiter {
	uint32_t port;
	int rc;
	uint64_t ns;
};

/* Waits up to 2 s for work on w->port, as a caller does (again after an
 * early return without work). */
static void *waiter(void *arg)
{
	struct waiter *w = arg;
	uint64_t t0 = xseg_now_ns();
	do {
		w->rc = xseg_wait(xt_seg, w->port, 2000000000ull - (xseg_now_ns() - t0));
		w->ns = xseg_now_ns() - t0;
	} while (w->rc == 0 && w->ns < 2000000000ull - 1000000);
	return NULL;
}

static uintptr_t page_of(const void *p)
{
	return (uintptr_t)p & ~(uintptr_t)(sysconf(_SC_PAGESIZE) - 1);
}

START_TEST(a_wait_sees_a_port_leave_its_range)
{
	if ((uffd = open_uffd()) < 0) {
		fprintf(stderr, "SKIP: no userfaultfd minor faults on shared memory here\n");
		return;
	}
	/* A range first..first+3 whose leader's wake-up line lies on another
	 * page than the last port's record (the waiter reads that first). */
	uint32_t first = 1;
	while (first + 3 < NPORTS &&
	       page_of(&xt_seg->ports[first].waiters) ==
	       page_of(&xt_seg->ports[first + 3].group_leader))
		first++;
	ck_assert_msg(first + 3 < NPORTS, "no range across a page boundary");
	uint32_t port = first + 3;
	leaving = first + 2;
	ck_assert_int_eq(xseg_bind_port(xt_seg, CLIENT), 0);
	ck_assert_int_eq(xseg_bind_range(xt_seg, first, port), 0);
	ck_assert_int_eq(xseg_join(xt_name, &seg2), 0);

	fault_page = page_of(&xt_seg->ports[first].waiters);
	long page = sysconf(_SC_PAGESIZE);
	struct uffdio_register reg = {
		.range = { .start = fault_page, .len = (uint64_t)page },
		.mode = UFFDIO_REGISTER_MODE_MINOR };
	if (ioctl(uffd, UFFDIO_REGISTER, &reg) < 0) {
		fprintf(stderr, "SKIP: userfaultfd cannot register the segment: %s\n",
			strerror(errno));
		xseg_leave(seg2);
		close(uffd);
		return;
	}
	/* Nothing of this mapping touches that page until the waiter does. */
	ck_assert_int_eq(madvise((void *)fault_page, (size_t)page, MADV_DONTNEED), 0);
	pthread_t h, t;
	struct waiter w = { .port = port };
	ck_assert_int_eq(pthread_create(&h, NULL, fault_handler, NULL), 0);
	ck_assert_int_eq(pthread_create(&t, NULL, waiter, &w), 0);
	ck_assert_int_eq(pthread_join(h, NULL), 0);
	ck_assert_msg(!handler_failure[0], "fault handler: %s", handler_failure);
	ck_assert(atomic_load(&handled));
	usleep(100000);   /* the waiter asleep by now */
	struct xseg_request *r = xseg_get_request(xt_seg, CLIENT), *got;
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(xseg_submit(xt_seg, r, CLIENT, port), (int)port);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	ck_assert_msg(w.rc == 1 && w.ns < 1000000000ull, "a wait on port %u said %d after %llu "
		      "ms, with a request queued on it (port %u of its range %u..%u left while "
		      "it began)", port, w.rc, (unsigned long long)(w.ns / 1000000), leaving, first,
		      port);
	ck_assert_int_eq(xseg_accept(xt_seg, port, &got, 1), 1);
	got->result = XR_SERVED;
	ck_assert_int_eq(xseg_respond(xt_seg, got, port), CLIENT);
	ck_assert_int_eq(xseg_receive(xt_seg, CLIENT, &got, 1), 1);
	ck_assert_int_eq(xseg_put_request(xt_seg, got), 0);
	xseg_leave(seg2);
	close(uffd);
}
END_TEST

static void setup(void)
{
	xt_setup_with(NPORTS, 64, 64 << 10);
}

int main(void)
{
	Suite *s = suite_create("xseg_wait_regroup");
	TCase *tc = tcase_create("wait_regroup");
	tcase_set_timeout(tc, 20);
	tcase_add_checked_fixture(tc, setup, xt_teardown);
	tcase_add_test(tc, a_wait_sees_a_port_leave_its_range);
	suite_add_tcase(s, tc);
	return xt_run(s);
}
