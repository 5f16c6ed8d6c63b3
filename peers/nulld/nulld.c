/*
 * nulld: answers every request at once as served. It measures the IPC
 * limit: a client's round trips per second against nulld are the most any
 * peer on this segment can see.
 *
 * With --forward PORT it passes every request on to PORT untouched and its
 * reply back: one more hop and nothing else, the least any peer placed in
 * front of another (a cache) can add to a path.
 *
 * With --copy SIZE it also moves each request's bytes, as a cache's hit
 * must: a write's into, a read's out of a random block of a buffer of
 * SIZE bytes, faulted in before the port is bound. That is the IPC limit
 * plus the one copy no cache can skip: what a hit is measured against.
 *
 * It runs on the peer runtime like every peer (options, workers, stop), so
 * its figure is also what the runtime's worker loop costs: the runtime's
 * loop is kept cheap rather than nulld given a private one.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "xseg/xseg.h"
#include "peer/peer.h"

#define COPY_BLOCK 4096u   /* the copies start on such a boundary */

static struct {
	uint32_t forward;   /* XSEG_NO_PORT: answer instead */
	uint64_t copy_size; /* 0: no copies */
	char *copy_buf;
} N = { .forward = XSEG_NO_PORT };

enum { O_FORWARD = 1, O_COPY };

static const struct option options[] = {
	{ "forward", required_argument, NULL, O_FORWARD },
	{ "copy", required_argument, NULL, O_COPY },
	{ NULL, 0, NULL, 0 },
};

static int parse_option(struct peer *p, int val, const char *arg)
{
	(void)p;
	uint64_t v;
	switch (val) {
	case O_FORWARD:
		if (peer_arg_uint("--forward", arg, 0, XSEG_MAX_PORTS - 1, &v) < 0)
			return -1;
		N.forward = (uint32_t)v;
		return 0;
	case O_COPY:
		if (peer_arg_size("--copy", arg, 1u << 20, UINT64_C(1) << 40, &v) < 0)
			return -1;
		N.copy_size = v;
		return 0;
	}
	return -1;
}

static int check_options(struct peer *p)
{
	if (N.forward != XSEG_NO_PORT && N.forward >= peer_port(p) &&
	    N.forward <= peer_port_last(p)) {
		fprintf(stderr, "nulld: --forward %u is a port it serves\n", N.forward);
		return -1;
	}
	if (N.forward != XSEG_NO_PORT && N.copy_size) {
		fprintf(stderr, "nulld: --copy and --forward: a forwarder holds no bytes to copy\n");
		return -1;
	}
	return 0;
}

/* --copy's buffer, faulted in now: a first touch must not be timed. */
static int prepare(struct peer *p)
{
	(void)p;
	if (!N.copy_size)
		return 0;
	N.copy_buf = mmap(NULL, N.copy_size, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (N.copy_buf == MAP_FAILED) {
		fprintf(stderr, "nulld: --copy %" PRIu64 ": cannot map that much: %s\n",
			N.copy_size, strerror(errno));
		return 1;
	}
	memset(N.copy_buf, 0x5a, N.copy_size);
	return 0;
}

/* Moves req's bytes in or out of a random block of the buffer (a
 * thread's own xorshift: no shared line), as far as the buffer reaches. */
static void copy_bytes(struct peer_thread *t, struct xseg_request *req)
{
	static _Thread_local uint64_t x;
	if (!x)
		x = (uint64_t)(uintptr_t)&x | 1;
	x ^= x << 13, x ^= x >> 7, x ^= x << 17;
	uint64_t blocks = N.copy_size / COPY_BLOCK;
	uint64_t at = (x % blocks) * COPY_BLOCK, len = req->size;
	if (len > N.copy_size - at)
		len = N.copy_size - at;
	char *data = xseg_get_data(peer_segment(peer_of(t)), req);
	if (req->op == X_WRITE)
		memcpy(N.copy_buf + at, data, len);
	else if (req->op == X_READ)
		memcpy(data, N.copy_buf + at, len);
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
	if (N.copy_buf)
		copy_bytes(t, req);
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
			"                       instead of answering: the cost of one more hop\n"
			"  --copy SIZE          move each read's or write's bytes out of or into a\n"
			"                       random block of a SIZE buffer (as a cache hit does)\n",
		.parse_option = parse_option,
		.check_options = check_options,
		.default_spin_us = 50,
		.prepare = prepare,
		.init = init,
		.on_request = on_request,
	};
	return peer_main(argc, argv, &ops, NULL);
}
