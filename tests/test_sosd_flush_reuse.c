/*
 * A client for tests/test_sosd_flush_reuse.sh: keeps READs, WRITEs and
 * FLUSHes in flight on a blocker, each request resubmitted (the same
 * request, so the same pool index) as soon as its reply is back, for
 * --seconds. Checks that every request is answered (none lost, the blocker
 * alive: no reply for 15 s fails) and that a FLUSH is answered only after
 * every WRITE submitted before it.
 *
 *   test_sosd_flush_reuse --segment S --port N --target-port M
 *                         [--seconds T] [--reads R] [--writes W] [--flushes F]
 * Exit 0: all good; 1: a failure (printed). Without arguments (make check
 * runs every tests/test_* program) it does nothing and exits 0.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "xseg/xseg.h"

#define BS 4096u
#define MAX_SLOTS 512

struct slot {
	struct xseg_request *req;
	uint32_t op;
	char target[64];
	uint64_t seq;        /* submit number of what is in flight */
	bool outstanding;
};

static struct xseg *seg;
static uint32_t port, target_port;
static struct slot slots[MAX_SLOTS];
static unsigned nslots;
static uint64_t next_seq = 1;

static void die(const char *what)
{
	printf("FAIL: %s: %s\n", what, xseg_last_error());
	exit(1);
}

static void submit(struct slot *s)
{
	struct xseg_request *r = s->req;
	uint64_t datalen = s->op == X_FLUSH ? 0 : BS;
	if (s->op == X_FLUSH) {
		if (xseg_prep_request(seg, r, 0, 0) < 0)
			die("prep flush");
	} else if (xseg_prep_target(seg, r, s->target, datalen) < 0) {
		die("prep");
	}
	r->op = s->op;
	r->flags = 0;
	r->offset = 0;
	r->size = s->op == X_FLUSH ? 0 : BS;
	r->serviced = 0;
	r->priv = (uint64_t)(s - slots);
	if (s->op == X_WRITE)
		memset(xseg_get_data(seg, r), 'w', BS);
	s->seq = next_seq++;
	s->outstanding = true;
	if (xseg_submit(seg, r, port, target_port) < 0)
		die("submit");
}

int main(int argc, char **argv)
{
	if (argc == 1) {   /* make check runs every tests/test_* program: alone, nothing */
		printf("test_sosd_flush_reuse: the client of tests/test_sosd_flush_reuse.sh; "
		       "nothing to do without its arguments\n");
		return 0;
	}
	const char *segname = NULL;
	unsigned seconds = 20, nr = 48, nw = 4, nf = 4;
	static const struct option opts[] = {
		{ "segment", required_argument, NULL, 's' },
		{ "port", required_argument, NULL, 'p' },
		{ "target-port", required_argument, NULL, 't' },
		{ "seconds", required_argument, NULL, 'T' },
		{ "reads", required_argument, NULL, 'r' },
		{ "writes", required_argument, NULL, 'w' },
		{ "flushes", required_argument, NULL, 'f' },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 's': segname = optarg; break;
		case 'p': port = (uint32_t)atoi(optarg); break;
		case 't': target_port = (uint32_t)atoi(optarg); break;
		case 'T': seconds = (unsigned)atoi(optarg); break;
		case 'r': nr = (unsigned)atoi(optarg); break;
		case 'w': nw = (unsigned)atoi(optarg); break;
		case 'f': nf = (unsigned)atoi(optarg); break;
		default: return 2;
		}
	}
	if (!segname || !port || !target_port || nr + nw + nf > MAX_SLOTS) {
		fprintf(stderr, "usage: see the comment at the top of the source\n");
		return 2;
	}
	if (xseg_join(segname, &seg) < 0)
		die("join");
	if (xseg_bind_port(seg, port) < 0)
		die("bind");
	pid_t pid = getpid();
	for (unsigned i = 0; i < nr + nw + nf; i++) {
		struct slot *s = &slots[nslots++];
		s->op = i < nr ? X_READ : i < nr + nw ? X_WRITE : X_FLUSH;
		snprintf(s->target, sizeof(s->target), "flushreuse-%d-%u",
			 (int)pid, s->op == X_READ ? 0 : i);
		if (!(s->req = xseg_get_request(seg, port)))
			die("get request");
	}
	for (unsigned i = 0; i < nslots; i++)
		submit(&slots[i]);

	uint64_t end = xseg_now_ns() + (uint64_t)seconds * 1000000000ull;
	uint64_t last_reply = xseg_now_ns(), answered = 0, flushes = 0, in_flight = nslots;
	bool stopping = false;
	while (in_flight) {
		struct xseg_request *got[64];
		int n = xseg_receive(seg, port, got, 64);
		uint64_t now = xseg_now_ns();
		if (n <= 0) {
			if (now - last_reply > 15000000000ull) {
				printf("FAIL: no reply for 15 s with %" PRIu64 " requests in flight "
				       "(%" PRIu64 " answered so far): the blocker died or lost them\n",
				       in_flight, answered);
				return 1;
			}
			xseg_wait(seg, port, 100000000ull);
			continue;
		}
		last_reply = now;
		if (!stopping && now > end)
			stopping = true;
		for (int k = 0; k < n; k++) {
			struct xseg_request *r = got[k];
			struct slot *s = &slots[r->priv];
			answered++;
			s->outstanding = false;
			if (r->result != XR_SERVED) {
				printf("FAIL: %s failed: %s\n", xseg_op_name(s->op), strerror(r->error));
				return 1;
			}
			if (s->op == X_FLUSH) {
				flushes++;
				for (unsigned i = 0; i < nslots; i++)
					if (slots[i].op == X_WRITE && slots[i].outstanding &&
					    slots[i].seq < s->seq) {
						printf("FAIL: FLUSH %" PRIu64 " answered before WRITE %"
						       PRIu64 " submitted before it\n", s->seq,
						       slots[i].seq);
						return 1;
					}
			}
			if (stopping)
				in_flight--;
			else
				submit(s);
		}
	}
	printf("ok: %" PRIu64 " requests answered, %" PRIu64 " FLUSHes\n", answered, flushes);
	return 0;
}
