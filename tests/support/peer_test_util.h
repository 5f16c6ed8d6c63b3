/*
 * Helpers for tests that run real peer programs (filed, vlmcd, ...) as child
 * processes and talk to them through libxseg as a client.
 *
 * Everything a test makes through these helpers (segments, temporary
 * directories, peer processes) is recorded and removed by pt_cleanup(),
 * which runs at exit of the test process, also when a ck_assert failed.
 * Names carry the pid of the Check runner (pt_run), which sweeps whatever a
 * test killed by its timeout left behind.
 */
#ifndef PEER_TEST_UTIL_H
#define PEER_TEST_UTIL_H

#include <check.h>
#include <stdint.h>
#include <sys/types.h>

#include "xseg/xseg.h"

/* A test case of s with a checked fixture (run in the test's process) and
 * a time limit. */
TCase *pt_tcase(Suite *s, const char *name, SFun setup, int timeout_s);

/* Runs the suite in fork mode, sweeps leftovers, returns main's status. */
int pt_run(Suite *s);

/* Creates and joins a fresh uniquely named segment ("pt-RUNPID-PID-N"). */
struct xseg *pt_segment(char *name, size_t len, uint32_t ports, uint32_t requests,
			uint64_t heap);

/* A fresh temporary directory under $TMPDIR (or /tmp), removed at cleanup. */
void pt_tmpdir(char *buf, size_t len);

/* "$BIN/prog" ($BIN from run-tests.sh; build/bin when unset). */
void pt_bin(const char *prog, char *buf, size_t len);

/*
 * Starts $BIN/prog with args (NULL-terminated, without argv[0]). The child
 * dies with the test process. Its stdout and stderr go to `log` when given
 * (appended), else to the test's. Returns the pid.
 */
pid_t pt_start(const char *prog, const char *const args[], const char *log);

/* Runs $BIN/prog to its end (at most timeout_ms); returns the wait status,
 * or -1 if it had to be killed. stdout+stderr go to `log` when given. */
int pt_run_prog(const char *prog, const char *const args[], const char *log,
		unsigned timeout_ms);

/* Waits until `pid` (any pid when 0) has bound `port`. 0, or -1 when the
 * time is up or the process died first. */
int pt_wait_bound(struct xseg *seg, uint32_t port, pid_t pid, unsigned timeout_ms);

/* Sends `sig` and waits for the child to end: its wait status, or -1 after
 * a SIGKILL when it did not end in timeout_ms. */
int pt_stop(pid_t pid, int sig, unsigned timeout_ms);

/* Makes cleanup kill `pid` too (a daemon that is not our child). */
void pt_track_pid(pid_t pid);

/* Kills tracked peers, destroys tracked segments, removes tracked dirs. */
void pt_cleanup(void);

/* ---- requests -------------------------------------------------------------- */

struct pt_req {
	/* in */
	uint32_t op, flags;
	const char *target;     /* NULL: no target */
	uint32_t targetlen;     /* 0: strlen(target); else raw bytes (may hold NULs) */
	uint64_t offset, size;
	uint64_t datalen;       /* data area; 0: size */
	const void *data;       /* copied into the data area (data_len bytes) */
	uint64_t data_len;
	/* out */
	uint32_t result;
	int error;
	uint64_t serviced;
	void *out;              /* the reply's data area is copied here */
	uint64_t out_len;       /* at most this many bytes */
};

/* Gets, fills and submits a request from `src` to `dst`. NULL on failure
 * (errno set, xseg_last_error() says why). */
struct xseg_request *pt_submit(struct xseg *seg, uint32_t src, uint32_t dst,
			       const struct pt_req *r);

/* Waits for a reply on `src`: the request, or NULL after timeout_ms. */
struct xseg_request *pt_receive(struct xseg *seg, uint32_t src, unsigned timeout_ms);

/* Copies a reply's result, error, serviced and data into r and puts it. */
void pt_finish(struct xseg *seg, struct xseg_request *req, struct pt_req *r);

/* Submit + wait + finish. 0, -ETIMEDOUT, or -errno from the submit. */
int pt_do(struct xseg *seg, uint32_t src, uint32_t dst, struct pt_req *r,
	  unsigned timeout_ms);

/* Check assertions on a finished request: SERVED / FAILED with `err`;
 * `what` names it in the failure message. */
void pt_expect_served(const struct pt_req *r, const char *what);
void pt_expect_failed(const struct pt_req *r, int err, const char *what);

/* The call's result may be a function's return value: copied, so that its
 * address can be taken. */
#define PT_EXPECT_SERVED(r, what) \
	do { struct pt_req r_ = (r); pt_expect_served(&r_, (what)); } while (0)
#define PT_EXPECT_FAILED(r, err, what) \
	do { struct pt_req r_ = (r); pt_expect_failed(&r_, (err), (what)); } while (0)

/* One request from `src` to `dst` answered within timeout_ms (a Check failure
 * otherwise): data (size bytes, or none) goes in, the reply's data goes to
 * out (size bytes, or nowhere). */
struct pt_req pt_call(struct xseg *seg, uint32_t src, uint32_t dst, uint32_t op,
		      const char *target, uint64_t offset, uint64_t size, const void *data,
		      void *out, uint32_t flags, unsigned timeout_ms);

/* Fills buf with bytes derived from (seed, position). */
void pt_pattern(void *buf, uint64_t len, uint64_t seed, uint64_t pos);

/* Reads a whole file into a malloc'ed buffer; NULL if missing. */
void *pt_read_file(const char *path, uint64_t *len);

#endif /* PEER_TEST_UTIL_H */
