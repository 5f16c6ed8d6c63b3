/*
 * nulld: answers every request at once as served. It measures the IPC
 * limit: a client's round trips per second against nulld are the most any
 * peer on this segment can see.
 *
 * With --forward PORT it passes every request on to PORT untouched and its
 * reply back: one more hop and nothing else, the least any peer placed in
 * front of another (a cache) can add to a path.
 *
 * It runs on the peer runtime like every peer (options, workers, stop), so
 * its figure is also what the runtime's worker loop costs: the runtime's
 * loop is kept cheap rather than nulld given a private one.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "xseg/xseg.h"
#include "peer/peer.h"

static struct {
	uint32_t forward;   /* XSEG_NO_PORT: answer instead */
} N = { .forward = XSEG_NO_PORT };

enum { O_FORWARD = 1 };

static const struct option options[] = {
	{ "forward", required_argument, NULL, O_FORWARD },
	{ NULL, 0, NULL, 0 },
};

static int parse_option(struct peer *p, int val, const char *arg)
{
	(void)p;
	uint64_t v;
	if (val != O_FORWARD || peer_arg_uint("--forward", arg, 0, XSEG_MAX_PORTS - 1, &v) < 0)
		return -1;
	N.forward = (uint32_t)v;
	return 0;
}

static int check_options(struct peer *p)
{
	if (N.forward != XSEG_NO_PORT && N.forward >= peer_port(p) &&
	    N.forward <= peer_port_last(p)) {
		fprintf(stderr, "nulld: --forward %u is a port it serves\n", N.forward);
		return -1;
	}
	return 0;
}

/* --forward names a port of the segment (only known once joined). */
static int init(struct peer *p)
{
	struct xseg_segment_info si;
	if (N.forward == XSEG_NO_PORT)
		return 0;
	if (xseg_segment_info(peer_segment(p), &si) < 0)
		return 1;
	if (N.forward >= si.nr_ports) {
		fprintf(stderr, "nulld: --forward %u: the segment has ports 0..%u\n", N.forward,
			si.nr_ports - 1);
		return 2;
	}
	return 0;
}

/* The reply to a forwarded request goes back, in turn, to whoever sent it. */
static void pass_back(struct peer_thread *t, struct xseg_request *req, void *arg)
{
	(void)arg;
	peer_respond(t, req);
}

/* Answers, or with --forward passes on. Control messages are ours (xseg
 * plug/unplug ask the port they name): a forwarder holds no data, so it
 * has nothing to write back and answers them. A request that cannot go on
 * is failed back at once. */
static void on_request(struct peer_thread *t, struct xseg_request *req)
{
	if (N.forward != XSEG_NO_PORT && req->op != X_CONTROL) {
		int rc = peer_forward(t, req, N.forward, pass_back, NULL);
		if (rc == 0)
			return;
		static _Atomic int64_t last;
		static _Atomic uint64_t skipped;
		uint64_t quiet;
		if (peer_log_once_a_second(&last, &skipped, &quiet))
			peer_warn("cannot forward request %u to port %u: %s (%" PRIu64 " more such "
				  "since the last word)", req->index, N.forward, xseg_last_error(), quiet);
		peer_fail(t, req, EHOSTUNREACH);
		return;
	}
	req->serviced = req->size;
	peer_complete(t, req);
}

int main(int argc, char **argv)
{
	static const struct peer_ops ops = {
		.name = "nulld",
		.summary = "Answers every request at once as served: the IPC limit.\n"
			   "SIGTERM or SIGINT: answers what it accepted, leaves the port, exits 0.",
		.options = options,
		.options_usage =
			"  --forward PORT       pass every request on to PORT and its reply back\n"
			"                       instead of answering: the cost of one more hop\n",
		.parse_option = parse_option,
		.check_options = check_options,
		.default_spin_us = 50,
		.init = init,
		.on_request = on_request,
	};
	return peer_main(argc, argv, &ops, NULL);
}
