/*
 * Helpers for tests that run peer programs as child processes: see
 * peer_test_util.h.
 */
#define _GNU_SOURCE   /* nftw flags */
#include "peer_test_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_TRACKED 32

static pid_t runner_pid;
static pid_t pids[MAX_TRACKED];
static char segments[MAX_TRACKED][64];
static char dirs[MAX_TRACKED][256];
static struct xseg *joined[MAX_TRACKED];
static unsigned counter;
static pid_t cleanup_owner;   /* the process whose atexit handler is ours */

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };
	nanosleep(&ts, NULL);
}

static pid_t runner(void)
{
	return runner_pid ? runner_pid : getpid();
}

static void at_exit_cleanup(void)
{
	if (getpid() == cleanup_owner)
		pt_cleanup();
}

static void ensure_cleanup(void)
{
	if (cleanup_owner != getpid()) {
		cleanup_owner = getpid();
		atexit(at_exit_cleanup);
		/* A test child reports to Check's runner through a pipe. When the
		 * runner is gone (the harness's timeout killed it), SIGPIPE would
		 * kill the child without its atexit cleanup, leaving the segment
		 * and the peers' data behind; ignored, Check's failed write ends
		 * in exit() and the cleanup runs. */
		signal(SIGPIPE, SIG_IGN);
	}
}

static const char *tmp_base(void)
{
	const char *t = getenv("TMPDIR");
	return t && *t ? t : "/tmp";
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

static void rm_rf(const char *path)
{
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

void pt_track_pid(pid_t pid)
{
	ensure_cleanup();
	for (int i = 0; i < MAX_TRACKED; i++)
		if (!pids[i]) {
			pids[i] = pid;
			return;
		}
}

static void untrack_pid(pid_t pid)
{
	for (int i = 0; i < MAX_TRACKED; i++)
		if (pids[i] == pid)
			pids[i] = 0;
}

void pt_cleanup(void)
{
	for (int i = 0; i < MAX_TRACKED; i++) {
		if (!pids[i])
			continue;
		kill(pids[i], SIGKILL);
		waitpid(pids[i], NULL, 0);
		pids[i] = 0;
	}
	for (int i = 0; i < MAX_TRACKED; i++) {
		if (joined[i]) {
			xseg_leave(joined[i]);
			joined[i] = NULL;
		}
		if (segments[i][0]) {
			xseg_destroy(segments[i]);
			segments[i][0] = '\0';
		}
		if (dirs[i][0]) {
			rm_rf(dirs[i]);
			dirs[i][0] = '\0';
		}
	}
}

/* The first empty name among MAX_TRACKED of `stride` bytes from base. */
static int free_slot(const char *base, size_t stride, const char *what)
{
	ensure_cleanup();
	for (int i = 0; i < MAX_TRACKED; i++)
		if (!base[(size_t)i * stride])
			return i;
	ck_abort_msg("too many %s in one test", what);
	return -1;
}

struct xseg *pt_segment(char *name, size_t len, uint32_t ports, uint32_t requests,
			uint64_t heap)
{
	struct xseg_config cfg;
	struct xseg *seg = NULL;
	int slot = free_slot(segments[0], sizeof(segments[0]), "segments");

	snprintf(name, len, "pt-%d-%d-%u", (int)runner(), (int)getpid(), counter++);
	snprintf(segments[slot], sizeof(segments[slot]), "%s", name);
	xseg_config_default(&cfg);
	cfg.nr_ports = ports;
	cfg.nr_requests = requests;
	cfg.heap_size = heap;
	int rc = xseg_create(name, &cfg);
	ck_assert_msg(rc == 0, "create %s: %s", name, xseg_last_error());
	rc = xseg_join(name, &seg);
	ck_assert_msg(rc == 0, "join %s: %s", name, xseg_last_error());
	joined[slot] = seg;
	return seg;
}

void pt_tmpdir(char *buf, size_t len)
{
	int slot = free_slot(dirs[0], sizeof(dirs[0]), "directories");
	snprintf(buf, len, "%s/pt-%d-XXXXXX", tmp_base(), (int)runner());
	ck_assert_msg(mkdtemp(buf) != NULL, "mkdtemp %s: %s", buf, strerror(errno));
	snprintf(dirs[slot], sizeof(dirs[slot]), "%s", buf);
}

void pt_bin(const char *prog, char *buf, size_t len)
{
	const char *bin = getenv("BIN");
	snprintf(buf, len, "%s/%s", bin && *bin ? bin : "build/bin", prog);
}

static pid_t spawn(const char *prog, const char *const args[], const char *log, bool die_with_us)
{
	char path[512];
	const char *argv[64];
	int n = 0;
	pid_t parent = getpid();

	pt_bin(prog, path, sizeof(path));
	argv[n++] = path;
	for (int i = 0; args && args[i] && n < 63; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	fflush(NULL);
	pid_t pid = fork();
	ck_assert_msg(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		signal(SIGPIPE, SIG_DFL);   /* an ignored signal stays ignored across exec */
		if (die_with_us) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (getppid() != parent)
				_exit(127);
		}
		if (log) {
			int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
			if (fd >= 0) {
				dup2(fd, STDOUT_FILENO);
				dup2(fd, STDERR_FILENO);
				close(fd);
			}
		}
		execv(path, (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", path, strerror(errno));
		_exit(127);
	}
	return pid;
}

pid_t pt_start(const char *prog, const char *const args[], const char *log)
{
	ensure_cleanup();
	pid_t pid = spawn(prog, args, log, true);
	pt_track_pid(pid);
	return pid;
}

int pt_run_prog(const char *prog, const char *const args[], const char *log,
		unsigned timeout_ms)
{
	pid_t pid = pt_start(prog, args, log);
	return pt_stop(pid, 0, timeout_ms);
}

/* Whether pid has ended (without reaping it). */
static bool ended(pid_t pid)
{
	siginfo_t si;
	memset(&si, 0, sizeof(si));
	if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0)
		return si.si_pid == pid;
	return errno == ECHILD && kill(pid, 0) < 0 && errno == ESRCH;
}

int pt_wait_bound(struct xseg *seg, uint32_t port, pid_t pid, unsigned timeout_ms)
{
	uint64_t deadline = now_ms() + timeout_ms;
	struct xseg_port_info info;

	for (;;) {
		if (xseg_port_info(seg, port, &info) == 0 && info.owner && info.owner_alive &&
		    (!pid || info.owner == pid))
			return 0;
		if ((pid && ended(pid)) || now_ms() >= deadline)
			return -1;
		sleep_ms(5);
	}
}

int pt_stop(pid_t pid, int sig, unsigned timeout_ms)
{
	uint64_t deadline = now_ms() + timeout_ms;
	int status;

	if (sig)
		kill(pid, sig);
	for (;;) {
		pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid) {
			untrack_pid(pid);
			return status;
		}
		if (r < 0 && errno == ECHILD) {   /* not our child: wait for it to go */
			if (kill(pid, 0) < 0 && errno == ESRCH) {
				untrack_pid(pid);
				return 0;
			}
		} else if (r < 0 && errno != EINTR) {
			return -1;
		}
		if (now_ms() >= deadline)
			break;
		sleep_ms(5);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	untrack_pid(pid);
	return -1;
}

/* ---- requests ------------------------------------------------------------------ */

struct xseg_request *pt_submit(struct xseg *seg, uint32_t src, uint32_t dst,
			       const struct pt_req *r)
{
	struct xseg_request *req = xseg_get_request(seg, src);
	if (!req)
		return NULL;
	uint32_t tl = r->target ? (r->targetlen ? r->targetlen : (uint32_t)strlen(r->target)) : 0;
	uint64_t datalen = r->datalen ? r->datalen : r->size;
	if (r->data_len > datalen)
		datalen = r->data_len;
	int rc = xseg_prep_request(seg, req, tl, datalen);
	if (rc < 0) {
		xseg_put_request(seg, req);
		errno = -rc;
		return NULL;
	}
	if (tl)
		memcpy(xseg_get_target(seg, req), r->target, tl);
	if (r->data && r->data_len)
		memcpy(xseg_get_data(seg, req), r->data, r->data_len);
	req->op = r->op;
	req->flags = r->flags;
	req->offset = r->offset;
	req->size = r->size;
	rc = xseg_submit(seg, req, src, dst);
	if (rc < 0) {
		xseg_put_request(seg, req);
		errno = -rc;
		return NULL;
	}
	return req;
}

struct xseg_request *pt_receive(struct xseg *seg, uint32_t src, unsigned timeout_ms)
{
	uint64_t deadline = now_ms() + timeout_ms;
	struct xseg_request *req;

	for (;;) {
		if (xseg_receive(seg, src, &req, 1) == 1)
			return req;
		uint64_t now = now_ms();
		if (now >= deadline)
			return NULL;
		uint64_t wait = deadline - now < 50 ? deadline - now : 50;
		xseg_poll(seg, src, 0, wait * 1000000ull);
	}
}

void pt_finish(struct xseg *seg, struct xseg_request *req, struct pt_req *r)
{
	r->result = req->result;
	r->error = req->error;
	r->serviced = req->serviced;
	if (r->out && r->out_len) {
		void *data = xseg_get_data(seg, req);
		uint64_t n = req->datalen < r->out_len ? req->datalen : r->out_len;
		if (data)
			memcpy(r->out, data, n);
	}
	xseg_put_request(seg, req);
}

int pt_do(struct xseg *seg, uint32_t src, uint32_t dst, struct pt_req *r, unsigned timeout_ms)
{
	struct xseg_request *req = pt_submit(seg, src, dst, r);
	if (!req)
		return -errno;
	struct xseg_request *rep = pt_receive(seg, src, timeout_ms);
	if (!rep)
		return -ETIMEDOUT;
	ck_assert_msg(rep == req, "reply for request %u, expected %u", rep->index, req->index);
	pt_finish(seg, rep, r);
	return 0;
}

struct pt_req pt_call(struct xseg *seg, uint32_t src, uint32_t dst, uint32_t op,
		      const char *target, uint64_t offset, uint64_t size, const void *data,
		      void *out, uint32_t flags, unsigned timeout_ms)
{
	struct pt_req r = { .op = op, .flags = flags, .target = target, .offset = offset,
			    .size = size, .data = data, .data_len = data ? size : 0,
			    .out = out, .out_len = out ? size : 0 };
	int rc = pt_do(seg, src, dst, &r, timeout_ms);
	ck_assert_msg(rc == 0, "%s %s: no reply (%d)", xseg_op_name(op), target ? target : "", rc);
	return r;
}

void pt_pattern(void *buf, uint64_t len, uint64_t seed, uint64_t pos)
{
	unsigned char *b = buf;
	for (uint64_t i = 0; i < len; i++) {
		uint64_t p = pos + i, x = (p / 8) ^ (seed * 0x9e3779b97f4a7c15ull);
		x ^= x >> 31;
		x *= 0xbf58476d1ce4e5b9ull;
		x ^= x >> 27;
		x *= 0x94d049bb133111ebull;
		x ^= x >> 31;
		b[i] = (unsigned char)(x >> ((p % 8) * 8));
	}
}

void *pt_read_file(const char *path, uint64_t *len)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0) {
		close(fd);
		return NULL;
	}
	char *buf = malloc((size_t)st.st_size + 1);
	uint64_t done = 0;
	while (buf && done < (uint64_t)st.st_size) {
		ssize_t n = read(fd, buf + done, (size_t)st.st_size - done);
		if (n <= 0)
			break;
		done += (uint64_t)n;
	}
	close(fd);
	*len = done;
	return buf;
}

/* ---- the runner ------------------------------------------------------------------ */

static void sweep(void)
{
	char prefix[32];
	int plen = snprintf(prefix, sizeof(prefix), "pt-%d-", (int)runner_pid);
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	while (d && (e = readdir(d)))
		if (!strncmp(e->d_name, prefix, (size_t)plen))
			xseg_destroy(e->d_name);
	if (d)
		closedir(d);
	d = opendir(tmp_base());
	while (d && (e = readdir(d)))
		if (!strncmp(e->d_name, prefix, (size_t)plen)) {
			char path[512];
			snprintf(path, sizeof(path), "%s/%s", tmp_base(), e->d_name);
			rm_rf(path);
		}
	if (d)
		closedir(d);
}

TCase *pt_tcase(Suite *s, const char *name, SFun setup, int timeout_s)
{
	TCase *tc = tcase_create(name);
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_set_timeout(tc, timeout_s);
	suite_add_tcase(s, tc);
	return tc;
}

int pt_run(Suite *s)
{
	runner_pid = getpid();
	SRunner *sr = srunner_create(s);
	srunner_set_fork_status(sr, CK_FORK);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	sweep();
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

void pt_expect_served(const struct pt_req *r, const char *what)
{
	ck_assert_msg(r->result == XR_SERVED, "%s: result %u error %d (%s)", what, r->result,
		      r->error, strerror(r->error));
}

void pt_expect_failed(const struct pt_req *r, int err, const char *what)
{
	ck_assert_msg(r->result == XR_FAILED && r->error == err,
		      "%s: result %u error %d (%s), expected FAILED %d (%s)", what, r->result,
		      r->error, strerror(r->error), err, strerror(err));
}
