/*
 * Helpers shared by the libxseg Check tests: unique segment names, the
 * create+join fixture, helper processes that cannot outlive the test, the
 * stress scale and a bitmap for loss/duplicate checks.
 */
#include "xseg_test_util.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct xseg *xt_seg;
char xt_name[64];
struct xseg_config xt_cfg;

static pid_t run_pid;            /* the Check runner, set by xt_run() */
static _Atomic unsigned name_counter;

static pid_t runner_pid(void)
{
	return run_pid ? run_pid : getpid();
}

void xt_make_name(char *buf, size_t len)
{
	snprintf(buf, len, "xt-%d-%d-%u", (int)runner_pid(), (int)getpid(),
		 atomic_fetch_add(&name_counter, 1));
}

/* Runs xt_teardown at exit in the process that made the segment: Check's
 * own teardown does not run when the test process leaves early. */
static pid_t teardown_owner;
static void teardown_at_exit(void)
{
	if (getpid() == teardown_owner)
		xt_teardown();
}

void xt_setup_with(uint32_t ports, uint32_t requests, uint64_t heap)
{
	int rc;

	if (teardown_owner != getpid()) {
		teardown_owner = getpid();
		atexit(teardown_at_exit);
		/* With Check's runner gone (killed by the harness's timeout), a
		 * report to it would raise SIGPIPE and skip the atexit above. */
		signal(SIGPIPE, SIG_IGN);
	}

	xseg_config_default(&xt_cfg);
	xt_cfg.nr_ports = ports;
	xt_cfg.nr_requests = requests;
	xt_cfg.heap_size = heap;
	xt_make_name(xt_name, sizeof(xt_name));
	rc = xseg_create(xt_name, &xt_cfg);
	ck_assert_msg(rc == 0, "create %s: %d (%s)", xt_name, rc, xseg_last_error());
	rc = xseg_join(xt_name, &xt_seg);
	ck_assert_msg(rc == 0, "join %s: %d (%s)", xt_name, rc, xseg_last_error());
}

void xt_setup(void)
{
	xt_setup_with(16, 64, 64 << 10);
}

void xt_teardown(void)
{
	if (xt_seg) {
		xseg_leave(xt_seg);
		xt_seg = NULL;
	}
	if (xt_name[0]) {
		xseg_destroy(xt_name);
		xt_name[0] = '\0';
	}
}

double xt_stress_scale(void)
{
	const char *s = getenv("XSEG_STRESS_SCALE");
	char *end;
	double v;

	if (!s || !*s)
		return 1.0;
	v = strtod(s, &end);
	if (*end || !(v > 0))
		return 1.0;
	return v;
}

uint64_t xt_scaled(uint64_t n, uint64_t min)
{
	uint64_t v = (uint64_t)((double)n * xt_stress_scale());
	return v < min ? min : v;
}

pid_t xt_fork(unsigned alarm_s)
{
	pid_t parent = getpid();
	fflush(NULL);
	pid_t pid = fork();
	ck_assert_msg(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)        /* the parent died before prctl */
			_exit(99);
		alarm(alarm_s);
	}
	return pid;
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int xt_wait_child(pid_t pid, unsigned timeout_ms)
{
	uint64_t deadline = now_ms() + timeout_ms;
	int status;

	for (;;) {
		pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid)
			return status;
		if (r < 0 && errno != EINTR)
			return -1;
		if (now_ms() >= deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			return -1;
		}
		usleep(1000);
	}
}

void xt_expect_child_ok(pid_t pid, unsigned timeout_ms, const char *what)
{
	int st = xt_wait_child(pid, timeout_ms);
	ck_assert_msg(st != -1, "%s (pid %d) did not finish in %u ms", what, (int)pid,
		      timeout_ms);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "%s (pid %d) failed: %s %d", what, (int)pid,
		      WIFEXITED(st) ? "exit" : "signal",
		      WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
}

uint32_t xt_free_requests(struct xseg *seg)
{
	struct xseg_segment_info info;
	ck_assert_int_eq(xseg_segment_info(seg, &info), 0);
	return info.free_requests;
}

void xt_bitmap_init(struct xt_bitmap *b, uint64_t nbits)
{
	b->nbits = nbits;
	b->words = calloc((nbits + 63) / 64 + 1, sizeof(uint64_t));
	if (!b->words)
		abort();
}

void xt_bitmap_free(struct xt_bitmap *b)
{
	free(b->words);
	b->words = NULL;
}

int xt_bitmap_set(struct xt_bitmap *b, uint64_t i)
{
	uint64_t bit = 1ull << (i % 64);
	int old = (b->words[i / 64] & bit) != 0;
	b->words[i / 64] |= bit;
	return old;
}

uint64_t xt_bitmap_count(const struct xt_bitmap *b)
{
	uint64_t n = 0;
	for (uint64_t w = 0; w < (b->nbits + 63) / 64; w++)
		n += (uint64_t)__builtin_popcountll(b->words[w]);
	return n;
}

uint64_t xt_bitmap_first_clear(const struct xt_bitmap *b)
{
	for (uint64_t i = 0; i < b->nbits; i++)
		if (!(b->words[i / 64] & (1ull << (i % 64))))
			return i;
	return b->nbits;
}

/* Removes /dev/shm/xt-RUNPID-*; returns how many there were. */
static int sweep_segments(void)
{
	char prefix[32];
	struct dirent *d;
	int n = 0;
	DIR *dir = opendir("/dev/shm");

	if (!dir)
		return 0;
	snprintf(prefix, sizeof(prefix), "xt-%d-", (int)runner_pid());
	while ((d = readdir(dir))) {
		if (strncmp(d->d_name, prefix, strlen(prefix)) != 0)
			continue;
		fprintf(stderr, "leftover segment %s removed\n", d->d_name);
		xseg_destroy(d->d_name);
		n++;
	}
	closedir(dir);
	return n;
}

int xt_run(Suite *s)
{
	run_pid = getpid();
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	int left = sweep_segments();
	if (left && !failed) {
		fprintf(stderr, "%d segment(s) left behind by passing tests\n", left);
		return EXIT_FAILURE;
	}
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
