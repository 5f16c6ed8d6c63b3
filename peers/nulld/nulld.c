/*
 * nulld: answers every request at once as served. It measures the IPC
 * limit: a client's round trips per second against nulld are the most any
 * peer on this segment can see.
 */
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "xseg/xseg.h"

#define BATCH 32u

static struct {
	struct xseg *seg;
	const char *segment;
	uint32_t port;
	unsigned threads;
	uint64_t spin_ns;
} N = { .threads = 1, .spin_ns = 50000 };

/* Lock-free atomics are async-signal-safe and visible to every thread. */
static _Atomic int stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static void *serve(void *arg)
{
	(void)arg;
	struct xseg_request *batch[BATCH];
	while (!stop) {
		int n = xseg_accept(N.seg, N.port, batch, BATCH);
		for (int i = 0; i < n; i++) {
			batch[i]->result = XR_SERVED;
			batch[i]->serviced = batch[i]->size;
			xseg_respond(N.seg, batch[i], N.port);
		}
		if (n <= 0)
			xseg_poll(N.seg, N.port, N.spin_ns, 100000000ull);
	}
	return NULL;
}

static void usage(FILE *out)
{
	fprintf(out,
"usage: nulld --segment NAME --port N [--threads N] [--spin-us N]\n"
"Answers every request at once as served (the IPC limit).\n"
"  --threads N   serving threads (default 1)\n"
"  --spin-us N   busy-poll this long before sleeping (default 50)\n");
}

static uint64_t uint_arg(const char *opt, const char *val, uint64_t max)
{
	uint64_t v;
	if (xseg_parse_uint(val, max, &v) < 0) {
		fprintf(stderr, "nulld: %s: '%s' is not a number in range\n", opt, val);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "segment", required_argument, NULL, 's' },
		{ "port", required_argument, NULL, 'p' },
		{ "threads", required_argument, NULL, 't' },
		{ "spin-us", required_argument, NULL, 'S' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	bool have_port = false;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 's': N.segment = optarg; break;
		case 'p': N.port = (uint32_t)uint_arg("--port", optarg, XSEG_MAX_PORTS); have_port = true; break;
		case 't': N.threads = (unsigned)uint_arg("--threads", optarg, 64);
			if (!N.threads) { fprintf(stderr, "nulld: --threads: '%s' must be at least 1\n", optarg); exit(2); }
			break;
		case 'S': N.spin_ns = uint_arg("--spin-us", optarg, 1000000) * 1000; break;
		case 'h': usage(stdout); return 0;
		default:
			fprintf(stderr, "nulld: unknown or incomplete option '%s' (see --help)\n", argv[optind - 1]);
			return 2;
		}
	}
	if (!N.segment || !have_port) {
		fprintf(stderr, "nulld: --segment and --port are required\n");
		return 2;
	}
	if (xseg_join(N.segment, &N.seg) < 0 || xseg_bind_port(N.seg, N.port) < 0) {
		fprintf(stderr, "nulld: %s\n", xseg_last_error());
		return 1;
	}
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	pthread_t *t = calloc(N.threads, sizeof(*t));
	for (unsigned i = 0; i < N.threads; i++)
		pthread_create(&t[i], NULL, serve, NULL);
	for (unsigned i = 0; i < N.threads; i++)
		pthread_join(t[i], NULL);
	/* answer what is still queued, then go */
	struct xseg_request *batch[BATCH];
	int n;
	while ((n = xseg_accept(N.seg, N.port, batch, BATCH)) > 0)
		for (int i = 0; i < n; i++) {
			batch[i]->result = XR_SERVED;
			xseg_respond(N.seg, batch[i], N.port);
		}
	free(t);
	xseg_leave(N.seg);
	return 0;
}
