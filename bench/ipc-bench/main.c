/*
 * ipc-bench: round trips through the segment against a responder (nulld),
 * the IPC limit. Each thread binds its own port (--port, --port + 1, ...),
 * takes --iodepth requests once and keeps them in flight: submit, receive,
 * resubmit. Latency is submit to receive (CLOCK_MONOTONIC), per request.
 * No buffers, no data: what is measured is the library and the wake-ups.
 */
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xseg/version.h"
#include "xseg/xseg.h"
#include "../common/bench_args.h"
#include "../common/latency.h"

#define MAX_IODEPTH     1024u
#define MAX_THREADS     64u
#define DEFAULT_REQUESTS 1000000u
/* A responder silent this long is taken for gone. */
#define REPLY_TIMEOUT_NS (10ull * 1000000000ull)
/* Sleep in slices this long, to notice a stop request. */
#define POLL_SLICE_NS   (100ull * 1000000ull)

struct options {
	const char *segment;
	uint32_t port, target;
	unsigned iodepth, threads;
	uint64_t requests;        /* total over all threads; 0 with --seconds */
	double seconds;           /* 0 with --requests */
	uint64_t spin_ns;
	bool json;
};

struct worker {
	pthread_t tid;
	uint32_t port;
	uint64_t quota;           /* round trips this thread makes (--requests) */
	uint64_t done, failed;
	struct latency_hist hist;
	char error[256];          /* set when the thread gave up */
};

static struct options O = { .iodepth = 1, .threads = 1, .spin_ns = 50000 };
static struct xseg *seg;
static pthread_barrier_t start_line;
static _Atomic uint64_t deadline_ns;   /* --seconds: set once all are ready */
static _Atomic int stop;               /* SIGINT/SIGTERM: drain and report */

static void on_signal(int sig)
{
	(void)sig;
	atomic_store(&stop, 1);
}

static void usage(FILE *out)
{
	fprintf(out,
"usage: ipc-bench --segment NAME --port N --target-port N [options]\n"
"Round trips per second and latency against a responder (nulld): the IPC\n"
"limit of the segment. Thread i binds port N+i.\n"
"\n"
"  --segment NAME      segment to join (made by xseg create)\n"
"  --port N            this client's first port\n"
"  --target-port N     the responder's port\n"
"  --iodepth N         requests in flight per thread, 1..%u (default 1)\n"
"  --threads N         client threads, 1..%u (default 1)\n"
"  --requests N        round trips in all (default %u) ...\n"
"  --seconds S         ... or run this long (e.g. 5, 0.5)\n"
"  --spin-us N         busy-poll this long before sleeping (default 50)\n"
"  --json              last stdout line: one JSON object with the results\n"
"  -h, --help\n"
"  --version\n"
"Exit status: 0 every request served, 1 a failure, 2 bad arguments.\n",
		MAX_IODEPTH, MAX_THREADS, DEFAULT_REQUESTS);
}

static void parse_options(int argc, char **argv)
{
	enum { O_SEG = 256, O_PORT, O_TARGET, O_DEPTH, O_THREADS, O_REQS, O_SECS,
	       O_SPIN, O_JSON, O_HELP, O_VERSION };
	static const struct option opts[] = {
		{ "segment", required_argument, NULL, O_SEG },
		{ "port", required_argument, NULL, O_PORT },
		{ "target-port", required_argument, NULL, O_TARGET },
		{ "iodepth", required_argument, NULL, O_DEPTH },
		{ "threads", required_argument, NULL, O_THREADS },
		{ "requests", required_argument, NULL, O_REQS },
		{ "seconds", required_argument, NULL, O_SECS },
		{ "spin-us", required_argument, NULL, O_SPIN },
		{ "json", no_argument, NULL, O_JSON },
		{ "help", no_argument, NULL, O_HELP },
		{ "version", no_argument, NULL, O_VERSION },
		{ NULL, 0, NULL, 0 },
	};
	bool have_port = false, have_target = false;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case O_SEG: O.segment = optarg; break;
		case O_PORT:
			O.port = (uint32_t)bench_arg_uint("--port", optarg, 0, XSEG_MAX_PORTS - 1);
			have_port = true;
			break;
		case O_TARGET:
			O.target = (uint32_t)bench_arg_uint("--target-port", optarg, 0,
							    XSEG_MAX_PORTS - 1);
			have_target = true;
			break;
		case O_DEPTH:
			O.iodepth = (unsigned)bench_arg_uint("--iodepth", optarg, 1, MAX_IODEPTH);
			break;
		case O_THREADS:
			O.threads = (unsigned)bench_arg_uint("--threads", optarg, 1, MAX_THREADS);
			break;
		case O_REQS:
			O.requests = bench_arg_uint("--requests", optarg, 1, UINT64_MAX / 2);
			break;
		case O_SECS: O.seconds = bench_arg_seconds("--seconds", optarg); break;
		case O_SPIN:
			O.spin_ns = bench_arg_uint("--spin-us", optarg, 0, 1000000) * 1000;
			break;
		case O_JSON: O.json = true; break;
		case 'h':
		case O_HELP: usage(stdout); exit(0);
		case O_VERSION: xseg_print_version("ipc-bench"); exit(0);
		default:
			bench_usage_error("unknown or incomplete option '%s' (see --help)",
					  argv[optind - 1]);
		}
	}
	if (optind < argc)
		bench_usage_error("unexpected argument '%s' (see --help)", argv[optind]);
	if (!O.segment)
		bench_usage_error("--segment is required");
	if (!have_port)
		bench_usage_error("--port is required");
	if (!have_target)
		bench_usage_error("--target-port is required");
	if (O.requests && O.seconds)
		bench_usage_error("give --requests or --seconds, not both");
	if (!O.requests && !O.seconds)
		O.requests = DEFAULT_REQUESTS;
	if (O.target >= O.port && O.target < O.port + O.threads)
		bench_usage_error("--target-port: %u is one of this client's ports %u..%u",
				  O.target, O.port, O.port + O.threads - 1);
}

/* Whether thread w may send one more request, at time now. */
static bool may_send(const struct worker *w, uint64_t sent, uint64_t now)
{
	if (atomic_load_explicit(&stop, memory_order_relaxed))
		return false;
	if (O.requests)
		return sent < w->quota;
	return now < atomic_load_explicit(&deadline_ns, memory_order_relaxed);
}

/* The cookie (req->priv) carries the submit time; it comes back with the reply. */
static int send_one(struct worker *w, struct xseg_request *r, uint64_t now)
{
	r->result = XR_NONE;
	r->serviced = 0;
	r->priv = now;
	int rc = xseg_submit(seg, r, w->port, O.target);
	if (rc < 0)
		snprintf(w->error, sizeof(w->error), "%s", xseg_last_error());
	return rc;
}

/* Puts back every request in reqs[0..n) that this thread still holds. */
static void put_all(struct xseg_request **reqs, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		xseg_put_request(seg, reqs[i]);
}

/* Takes the thread's requests; failures are recorded in w->error. */
static unsigned get_requests(struct worker *w, struct xseg_request **reqs)
{
	unsigned n = 0;
	if (xseg_bind_port(seg, w->port) < 0) {
		snprintf(w->error, sizeof(w->error), "%s", xseg_last_error());
		return 0;
	}
	for (; n < O.iodepth; n++) {
		reqs[n] = xseg_get_request(seg, w->port);
		if (!reqs[n]) {
			snprintf(w->error, sizeof(w->error), "%s", xseg_last_error());
			break;
		}
		reqs[n]->op = X_READ;
		reqs[n]->size = 4096;
	}
	if (n < O.iodepth) {
		put_all(reqs, n);
		return 0;
	}
	return n;
}

/* Keeps iodepth requests in flight until the quota or the deadline. */
static void run_loop(struct worker *w, struct xseg_request **reqs)
{
	struct xseg_request *batch[MAX_IODEPTH];
	unsigned inflight = 0;
	uint64_t sent = 0, now = xseg_now_ns(), last_reply = now;

	unsigned i = 0;
	while (i < O.iodepth && may_send(w, sent, now) && send_one(w, reqs[i], now) >= 0) {
		i++;
		sent++;
		inflight++;
	}
	put_all(reqs + i, O.iodepth - i);   /* those not sent: quota smaller than depth */
	while (inflight) {
		int n = xseg_receive(seg, w->port, batch, O.iodepth);
		if (n <= 0) {
			xseg_poll(seg, w->port, O.spin_ns, POLL_SLICE_NS);
			if (xseg_now_ns() - last_reply > REPLY_TIMEOUT_NS) {
				snprintf(w->error, sizeof(w->error),
					 "no reply from port %u for %llu s; %u requests lost",
					 O.target, REPLY_TIMEOUT_NS / 1000000000ull, inflight);
				return;
			}
			continue;
		}
		/* One clock read per batch: receive time of these, submit time
		 * of their successors. */
		now = last_reply = xseg_now_ns();
		for (int i = 0; i < n; i++) {
			struct xseg_request *r = batch[i];
			latency_record(&w->hist, now - r->priv);
			w->done++;
			if (r->result != XR_SERVED)
				w->failed++;
			inflight--;
			if (may_send(w, sent, now) && !w->error[0] && send_one(w, r, now) >= 0) {
				sent++;
				inflight++;
			} else {
				xseg_put_request(seg, r);
			}
		}
	}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct xseg_request *reqs[MAX_IODEPTH];
	latency_init(&w->hist);
	unsigned n = get_requests(w, reqs);
	/* Everyone starts together, ready or not, so nobody waits forever. */
	pthread_barrier_wait(&start_line);
	pthread_barrier_wait(&start_line);   /* main has set the deadline */
	if (n)
		run_loop(w, reqs);
	return NULL;
}

static void print_results(struct worker *ws, double seconds)
{
	struct latency_hist all;
	uint64_t done = 0, failed = 0;
	latency_init(&all);
	for (unsigned i = 0; i < O.threads; i++) {
		latency_merge(&all, &ws[i].hist);
		done += ws[i].done;
		failed += ws[i].failed;
	}
	double rps = seconds > 0 ? (double)done / seconds : 0;
	double p50 = latency_percentile(&all, 50.0) / 1e3;
	double p99 = latency_percentile(&all, 99.0) / 1e3;
	double p999 = latency_percentile(&all, 99.9) / 1e3;
	double max = (double)latency_max(&all) / 1e3;
	printf("ipc-bench: %u thread%s x iodepth %u -> port %u: %" PRIu64
	       " round trips in %.3f s, %" PRIu64 " failed\n",
	       O.threads, O.threads == 1 ? "" : "s", O.iodepth, O.target, done, seconds, failed);
	printf("  %.0f round trips/s; latency us: p50 %.2f  p99 %.2f  p99.9 %.2f  max %.2f\n",
	       rps, p50, p99, p999, max);
	if (O.json)
		printf("{\"threads\":%u,\"iodepth\":%u,\"requests\":%" PRIu64 ",\"failed\":%" PRIu64
		       ",\"seconds\":%.6f,\"rps\":%.1f,\"lat_us_p50\":%.3f,\"lat_us_p99\":%.3f"
		       ",\"lat_us_p999\":%.3f,\"lat_us_max\":%.3f}\n",
		       O.threads, O.iodepth, done, failed, seconds, rps, p50, p99, p999, max);
}

/* Our ports and the target must exist; checked here to exit 2, not 1. */
static void check_ports(void)
{
	struct xseg_segment_info si;
	xseg_segment_info(seg, &si);
	if ((uint64_t)O.port + O.threads > si.nr_ports)
		bench_usage_error("--port: ports %u..%u out of range 0..%u", O.port,
				  O.port + O.threads - 1, si.nr_ports - 1);
	if (O.target >= si.nr_ports)
		bench_usage_error("--target-port: port %u out of range 0..%u", O.target,
				  si.nr_ports - 1);
}

int main(int argc, char **argv)
{
	bench_prog = "ipc-bench";
	parse_options(argc, argv);
	if (xseg_join(O.segment, &seg) < 0) {
		fprintf(stderr, "ipc-bench: %s\n", xseg_last_error());
		return 1;
	}
	check_ports();
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	struct worker *ws = calloc(O.threads, sizeof(*ws));
	if (!ws) {
		fprintf(stderr, "ipc-bench: out of memory\n");
		return 1;
	}
	pthread_barrier_init(&start_line, NULL, O.threads + 1);
	uint64_t base = O.requests / O.threads, extra = O.requests % O.threads;
	for (unsigned i = 0; i < O.threads; i++) {
		ws[i].port = O.port + i;
		ws[i].quota = base + (i < extra);
		int rc = pthread_create(&ws[i].tid, NULL, worker_main, &ws[i]);
		if (rc) {
			fprintf(stderr, "ipc-bench: cannot start thread %u: %s\n", i, strerror(rc));
			exit(1);
		}
	}
	pthread_barrier_wait(&start_line);
	uint64_t start = xseg_now_ns();
	if (O.seconds)
		atomic_store(&deadline_ns, start + (uint64_t)(O.seconds * 1e9));
	pthread_barrier_wait(&start_line);
	for (unsigned i = 0; i < O.threads; i++)
		pthread_join(ws[i].tid, NULL);
	double seconds = (double)(xseg_now_ns() - start) / 1e9;

	int status = 0;
	for (unsigned i = 0; i < O.threads; i++)
		if (ws[i].error[0]) {
			fprintf(stderr, "ipc-bench: thread %u (port %u): %s\n", i, ws[i].port,
				ws[i].error);
			status = 1;
		}
	print_results(ws, seconds);
	for (unsigned i = 0; i < O.threads; i++)
		if (ws[i].failed)
			status = 1;
	pthread_barrier_destroy(&start_line);
	free(ws);
	xseg_leave(seg);
	return status;
}
