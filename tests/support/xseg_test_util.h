/*
 * Helpers shared by the libxseg Check tests.
 *
 * Segment names are "xt-RUNPID-PID-N": RUNPID is the test program's own pid
 * (the Check runner), PID the process that made the name (a forked test),
 * N a counter. xt_run() removes whatever a crashed test left under its
 * RUNPID, and counts a segment left by a test that passed as a failure.
 *
 * Processes forked inside a test must not use ck_assert (its failure would
 * be reported through the runner's pipe as if the test itself had failed,
 * from the wrong process): they use XT_CHILD_CHECK and report through their
 * exit status.
 */
#ifndef XSEG_TEST_UTIL_H
#define XSEG_TEST_UTIL_H

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

#include "xseg/xseg.h"

/* The segment of the current test, made by xt_setup*() and removed by
 * xt_teardown(). */
extern struct xseg *xt_seg;
extern char xt_name[64];
extern struct xseg_config xt_cfg;

/* A fresh unique segment name. */
void xt_make_name(char *buf, size_t len);

/* Creates (with ports/requests/heap) and joins a segment named xt_name. */
void xt_setup_with(uint32_t ports, uint32_t requests, uint64_t heap);
/* xt_setup_with(16, 64, 64K): the checked fixture of most tests. */
void xt_setup(void);
/* Leaves and destroys the segment (also fine when none was made). */
void xt_teardown(void);

/* XSEG_STRESS_SCALE (default 1.0) times n, at least `min`. */
double xt_stress_scale(void);
uint64_t xt_scaled(uint64_t n, uint64_t min);

/* fork() for a helper process: it dies with its parent (PR_SET_PDEATHSIG)
 * and after `alarm_s` seconds at most, so a failing test leaves nothing
 * behind. Returns the pid in the parent, 0 in the child. */
pid_t xt_fork(unsigned alarm_s);
/* Waits up to timeout_ms for pid; returns its wait status, or -1 after
 * killing it when it did not finish in time. */
int xt_wait_child(pid_t pid, unsigned timeout_ms);
/* Asserts (ck_assert) that pid exits with status 0 within timeout_ms. */
void xt_expect_child_ok(pid_t pid, unsigned timeout_ms, const char *what);

/* ck_assert_msg for hot loops: every ck_assert that passes writes a
 * checkpoint to the runner's pipe (a system call), this one only fails. */
#define XT_ASSERT(cond, fmt, ...)                                            \
	do {                                                                 \
		if (!(cond))                                                 \
			ck_abort_msg("check '%s' failed: " fmt, #cond, ##__VA_ARGS__); \
	} while (0)

/* In a forked helper: on failure print and _exit(code). */
#define XT_CHILD_CHECK(cond, code, ...)                                     \
	do {                                                                \
		if (!(cond)) {                                              \
			fprintf(stderr, "child %d: %s:%d: check '%s' failed: ", \
				(int)getpid(), __FILE__, __LINE__, #cond);   \
			fprintf(stderr, __VA_ARGS__);                       \
			fprintf(stderr, "\n");                              \
			_exit(code);                                        \
		}                                                           \
	} while (0)

/* Free requests in the segment right now. */
uint32_t xt_free_requests(struct xseg *seg);

/* A tiny bitmap for "nothing lost, nothing duplicated" checks. */
struct xt_bitmap {
	uint64_t nbits;
	uint64_t *words;
};
void xt_bitmap_init(struct xt_bitmap *b, uint64_t nbits);
void xt_bitmap_free(struct xt_bitmap *b);
/* Sets bit i; returns its old value. */
int xt_bitmap_set(struct xt_bitmap *b, uint64_t i);
uint64_t xt_bitmap_count(const struct xt_bitmap *b);
/* First clear bit below nbits, or nbits when all are set. */
uint64_t xt_bitmap_first_clear(const struct xt_bitmap *b);

/* The cookie a test stores in req->priv for sequence number `seq`. */
static inline uint64_t xt_cookie(uint64_t seq, uint64_t salt)
{
	return (seq * 0x9e3779b97f4a7c15ull) ^ salt;
}

/* Runs the suite (fork mode), sweeps leftover segments, returns the exit
 * status for main(). */
int xt_run(Suite *s);

#endif /* XSEG_TEST_UTIL_H */
