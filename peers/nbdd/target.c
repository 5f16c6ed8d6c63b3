/*
 * Asking the target port (vlmcd) for its volumes at start: an INFO request
 * with no target, answered with lines "NAME SIZE\n" (docs/interfaces.md).
 * It runs in init, before the workers start, so it drives its one request
 * with libxseg itself on nbdd's own port: nothing else receives there yet.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "target.h"

#define ASK_DATALEN 4096   /* vlmcd grows the buffer for a longer list */
#define NS_PER_S 1000000000ull

/* TERM or INT came while we wait (peer_main has them blocked until it
 * waits for them itself): give up the start at once. */
static bool stop_pending(void)
{
	sigset_t set;
	return sigpending(&set) == 0 && (sigismember(&set, SIGTERM) || sigismember(&set, SIGINT));
}

static void nap_100ms(void)
{
	struct timespec ts = { 0, 100 * 1000 * 1000 };
	nanosleep(&ts, NULL);
}

/* Each line of the reply to add(), as if given as --volume NAME:SIZE: the
 * names and sizes pass vlmcd's own checks again. */
static int parse_list(const char *text, uint64_t len, uint32_t port,
		      peer_volume_fn add, void *ctx)
{
	char opt[48], arg[512];
	snprintf(opt, sizeof(opt), "target port %" PRIu32 "'s volume", port);
	uint64_t i = 0;
	unsigned n = 0;
	while (i < len) {
		const char *line = text + i;
		const char *nl = memchr(line, '\n', len - i);
		uint64_t ll = nl ? (uint64_t)(nl - line) : len - i;
		const char *sp = memchr(line, ' ', ll);
		if (!sp || ll >= sizeof(arg) || memchr(line, '\0', ll)) {
			peer_error("target port %" PRIu32 ": line %u of its volume list is not "
				   "'NAME SIZE': '%.*s'", port, n + 1, (int)(ll > 64 ? 64 : ll), line);
			return -1;
		}
		memcpy(arg, line, ll);
		arg[ll] = '\0';
		arg[sp - line] = ':';
		if (peer_volume_arg(opt, arg, add, ctx) < 0)
			return -1;
		n++;
		i += ll + 1;
	}
	if (!n) {
		peer_error("target port %" PRIu32 " has no volumes", port);
		return -1;
	}
	return 0;
}

/* Errors vlmcd may get over soon: try again until the deadline. */
static bool transient(int err)
{
	return err == ENOMEM || err == ENOBUFS || err == EHOSTDOWN || err == EPIPE ||
	       err == EHOSTUNREACH;
}

int target_volumes(struct peer *p, uint32_t port, unsigned timeout_s,
		   peer_volume_fn add, void *ctx)
{
	struct xseg *seg = peer_segment(p);
	uint32_t me = peer_port(p);
	uint64_t start = xseg_now_ns(), deadline = start + timeout_s * NS_PER_S;
	char said[160] = "";   /* what we last said we wait for */

	for (;;) {
		const char *why = NULL;
		char reason[160];
		struct xseg_request *req = xseg_get_request(seg, me);
		if (!req) {
			why = "no free request in the segment's pool";
		} else if (xseg_prep_target(seg, req, "", ASK_DATALEN) < 0) {
			why = "no room in the segment's heap";
			xseg_put_request(seg, req);
		} else {
			req->op = X_INFO;
			req->size = 0;
			int rc = xseg_submit(seg, req, me, port);
			if (rc < 0) {
				xseg_put_request(seg, req);
				why = rc == -ENOENT ? "nobody serves it yet" : xseg_last_error();
			}
		}
		struct xseg_request *back = NULL;
		while (!why && xseg_receive(seg, me, &back, 1) == 0) {
			if (xseg_now_ns() > deadline) {
				/* The request stays with the target; leaving our
				 * port at exit settles it. */
				peer_error("--target-port %" PRIu32 " did not answer INFO (its volume "
					   "list) within %u s (--target-timeout)", port, timeout_s);
				return -1;
			}
			if (stop_pending()) {
				peer_error("stopped while waiting for --target-port %" PRIu32, port);
				return -1;
			}
			xseg_poll(seg, me, 0, 100 * 1000 * 1000);   /* reaps a dead target too */
		}
		if (back) {
			int rc = 0;
			if (back->result == XR_SERVED) {
				uint64_t n = back->serviced < back->datalen ? back->serviced
									   : back->datalen;
				rc = parse_list(xseg_get_data(seg, back), n, port, add, ctx);
				xseg_put_request(seg, back);
				return rc;
			}
			int err = back->result == XR_FAILED ? back->error : EIO;
			xseg_put_request(seg, back);
			if (!transient(err)) {
				peer_error("--target-port %" PRIu32 " does not list its volumes: INFO "
					   "with no target failed: %s (is it vlmcd?)", port,
					   strerror(err));
				return -1;
			}
			snprintf(reason, sizeof(reason), "it answered %s", strerror(err));
			why = reason;
		}
		if (xseg_now_ns() > deadline) {
			peer_error("--target-port %" PRIu32 ": no volume list within %u s "
				   "(--target-timeout): %s", port, timeout_s, why);
			return -1;
		}
		if (stop_pending()) {
			peer_error("stopped while waiting for --target-port %" PRIu32, port);
			return -1;
		}
		if (strcmp(said, why)) {   /* one line per new reason, not per try */
			peer_warn("waiting up to %u s for --target-port %" PRIu32 " (vlmcd) to list "
				  "its volumes: %s", timeout_s, port, why);
			snprintf(said, sizeof(said), "%s", why);
		}
		nap_100ms();
	}
}
