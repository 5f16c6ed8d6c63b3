/*
 * nulld: answers every request at once as served. It measures the IPC
 * limit: a client's round trips per second against nulld are the most any
 * peer on this segment can see.
 *
 * With --forward PORT it passes every request on to PORT untouched and its
 * reply back: one more hop and nothing else, the least any peer placed in
 * front of another (a cache) can add to a path.
 *
 * Self-contained on purpose (no peer runtime): the fewer layers between the
 * rings and the answer, the closer the figure is to what libxseg costs.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "xseg/version.h"
#include "xseg/xseg.h"
#include "peer/peer.h"

#define BATCH 32u
#define MAX_THREADS 64u
/* Sleep in slices this long so that a stop request is noticed. */
#define WAIT_SLICE_NS (100ull * 1000000ull)
/* On a stop, how long forwarded requests are waited for. */
#define DRAIN_NS (10ull * 1000000000ull)

static const char *const level_names[] = { "error", "warn", "info", "debug" };

static struct {
	const char *segment;
	uint32_t port;
	uint32_t forward;   /* XSEG_NO_PORT: answer instead */
	unsigned threads;
	uint64_t spin_ns;
	enum peer_log_level log_level;
	bool daemon;
	const char *pidfile;
	struct xseg *seg;
} N = { .forward = XSEG_NO_PORT, .threads = 1, .spin_ns = 50000, .log_level = PEER_LOG_INFO };

/* Lock-free atomics are async-signal-safe and visible to every thread. */
static _Atomic int stop;
static _Atomic uint64_t answered;
static _Atomic uint64_t forwarded_out;   /* forwarded, reply not yet passed back */
static bool pidfile_written;

static void on_signal(int sig)
{
	(void)sig;
	atomic_store(&stop, 1);
}


static void answer(struct xseg_request **batch, int n)
{
	for (int i = 0; i < n; i++) {
		batch[i]->result = XR_SERVED;
		batch[i]->serviced = batch[i]->size;
		if (xseg_respond(N.seg, batch[i], N.port) < 0)
			peer_log(PEER_LOG_ERROR, "%s", xseg_last_error());
	}
	atomic_fetch_add_explicit(&answered, (uint64_t)n, memory_order_relaxed);
}

static void fail_back(struct xseg_request *req, int err)
{
	req->result = XR_FAILED;
	req->error = err;
	req->serviced = 0;
	if (xseg_respond(N.seg, req, N.port) < 0)
		peer_log(PEER_LOG_ERROR, "%s", xseg_last_error());
}

/* --forward: the requests go on to the next port as they are (their return
 * path remembers us); one that cannot go is failed back at once. Control
 * messages are ours (xseg plug/unplug ask the port they name): a forwarder
 * holds no data, so it has nothing to write back and answers them. */
static void forward(struct xseg_request **batch, int n)
{
	for (int i = 0; i < n; i++) {
		if (batch[i]->op == X_CONTROL) {
			answer(&batch[i], 1);
			continue;
		}
		atomic_fetch_add_explicit(&forwarded_out, 1, memory_order_relaxed);
		if (xseg_forward(N.seg, batch[i], N.port, N.forward) < 0) {
			peer_log(PEER_LOG_WARN, "cannot forward request %u to port %u: %s",
			       batch[i]->index, N.forward, xseg_last_error());
			atomic_fetch_sub_explicit(&forwarded_out, 1, memory_order_relaxed);
			fail_back(batch[i], EHOSTUNREACH);
		}
	}
}

/* Replies to what we forwarded go back, in turn, to whoever sent them. */
static int pass_replies_back(void)
{
	struct xseg_request *batch[BATCH];
	int n = xseg_receive(N.seg, N.port, batch, BATCH);
	for (int i = 0; i < n; i++) {
		if (xseg_respond(N.seg, batch[i], N.port) < 0)
			peer_log(PEER_LOG_ERROR, "%s", xseg_last_error());
		atomic_fetch_sub_explicit(&forwarded_out, 1, memory_order_relaxed);
	}
	if (n > 0)
		atomic_fetch_add_explicit(&answered, (uint64_t)n, memory_order_relaxed);
	return n > 0 ? n : 0;
}

/* What nulld does with accepted requests: answers them, or with --forward
 * passes them on. */
static void take(struct xseg_request **batch, int n)
{
	if (N.forward == XSEG_NO_PORT)
		answer(batch, n);
	else
		forward(batch, n);
}

static void *serve(void *arg)
{
	(void)arg;
	struct xseg_request *batch[BATCH];
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		int n = xseg_accept(N.seg, N.port, batch, BATCH);
		if (n > 0)
			take(batch, n);
		int replies = N.forward == XSEG_NO_PORT ? 0 : pass_replies_back();
		if (n <= 0 && !replies)
			xseg_poll(N.seg, N.port, N.spin_ns, WAIT_SLICE_NS);
	}
	return NULL;
}

static void usage(FILE *out)
{
	fprintf(out,
"usage: nulld --segment NAME --port N [options]\n"
"Answers every request at once as served: the IPC limit.\n"
"\n"
"  --segment NAME     segment to join (made by xseg create)\n"
"  --port N           port to serve\n"
"  --threads N        serving threads, 1..%u (default 1)\n"
"  --forward PORT     pass every request on to PORT and its reply back instead\n"
"                     of answering: the cost of one more hop in a path\n"
"  --spin-us N        busy-poll this long before sleeping (default 50)\n"
"  --log-level L      error, warn, info (default) or debug; logs go to stderr\n"
"  --daemon           detach once serving (stderr kept only if it is a file);\n"
"                     needs --pidfile\n"
"  --pidfile F        write the serving process's pid to F\n"
"  -h, --help\n"
"  --version\n"
"SIGTERM or SIGINT: answer what is queued, leave the port, exit 0.\n",
		MAX_THREADS);
}

static _Noreturn void bad_arg(const char *opt, const char *val, const char *why)
{
	fprintf(stderr, "nulld: %s: '%s' %s\n", opt, val, why);
	exit(2);
}

static uint64_t uint_arg(const char *opt, const char *val, uint64_t min, uint64_t max)
{
	uint64_t v;
	int rc = xseg_parse_uint(val, UINT64_MAX, &v);
	if (rc == -EINVAL)
		bad_arg(opt, val, "is not a number");
	if (rc < 0 || v < min || v > max) {
		char why[64];
		snprintf(why, sizeof(why), "is out of range %llu..%llu",
			 (unsigned long long)min, (unsigned long long)max);
		bad_arg(opt, val, why);
	}
	return v;
}

static void parse_options(int argc, char **argv)
{
	enum { O_SEG = 256, O_PORT, O_FORWARD, O_THREADS, O_SPIN, O_LOG, O_DAEMON, O_PIDFILE, O_HELP, O_VERSION };
	static const struct option opts[] = {
		{ "segment", required_argument, NULL, O_SEG },
		{ "port", required_argument, NULL, O_PORT },
		{ "forward", required_argument, NULL, O_FORWARD },
		{ "threads", required_argument, NULL, O_THREADS },
		{ "spin-us", required_argument, NULL, O_SPIN },
		{ "log-level", required_argument, NULL, O_LOG },
		{ "daemon", no_argument, NULL, O_DAEMON },
		{ "pidfile", required_argument, NULL, O_PIDFILE },
		{ "help", no_argument, NULL, O_HELP },
		{ "version", no_argument, NULL, O_VERSION },
		{ NULL, 0, NULL, 0 },
	};
	bool have_port = false;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case O_SEG:
			if (!*optarg || strlen(optarg) > XSEG_NAME_MAX || strchr(optarg, '/'))
				bad_arg("--segment", optarg, "is not a segment name");
			N.segment = optarg;
			break;
		case O_PORT:
			N.port = (uint32_t)uint_arg("--port", optarg, 0, XSEG_MAX_PORTS - 1);
			have_port = true;
			break;
		case O_FORWARD:
			N.forward = (uint32_t)uint_arg("--forward", optarg, 0, XSEG_MAX_PORTS - 1);
			break;
		case O_THREADS:
			N.threads = (unsigned)uint_arg("--threads", optarg, 1, MAX_THREADS);
			break;
		case O_SPIN: N.spin_ns = uint_arg("--spin-us", optarg, 0, 1000000) * 1000; break;
		case O_LOG: {
			unsigned l = 0;
			while (l <= PEER_LOG_DEBUG && strcmp(optarg, level_names[l]))
				l++;
			if (l > PEER_LOG_DEBUG)
				bad_arg("--log-level", optarg, "is not error, warn, info or debug");
			N.log_level = (enum peer_log_level)l;
			break;
		}
		case O_DAEMON: N.daemon = true; break;
		case O_PIDFILE:
			if (!*optarg)
				bad_arg("--pidfile", optarg, "is not a file name");
			N.pidfile = optarg;
			break;
		case 'h':
		case O_HELP: usage(stdout); exit(0);
		case O_VERSION: xseg_print_version("nulld"); exit(0);
		default:
			fprintf(stderr, "nulld: unknown or incomplete option '%s' (see --help)\n",
				argv[optind - 1]);
			exit(2);
		}
	}
	if (optind < argc) {
		fprintf(stderr, "nulld: unexpected argument '%s' (see --help)\n", argv[optind]);
		exit(2);
	}
	if (!N.segment || !have_port) {
		fprintf(stderr, "nulld: --segment and --port are required (see --help)\n");
		exit(2);
	}
	if (N.forward == N.port) {
		fprintf(stderr, "nulld: --forward %u is the port it serves\n", N.forward);
		exit(2);
	}
	if (N.daemon && !N.pidfile) {
		fprintf(stderr, "nulld: --daemon needs --pidfile F\n");
		exit(2);
	}
}

/* Joins, binds and starts the threads; says why and returns the exit
 * status on failure: 2 for a segment or port that the arguments got wrong. */
static int start(pthread_t *t, unsigned *started)
{
	int rc = xseg_join(N.segment, &N.seg);
	if (rc == -ENOENT) {
		N.seg = NULL;
		fprintf(stderr, "nulld: --segment: '%s' does not exist (xseg create)\n", N.segment);
		return 2;
	}
	if (rc < 0) {
		N.seg = NULL;
		peer_log(PEER_LOG_ERROR, "%s", xseg_last_error());
		return 1;
	}
	struct xseg_segment_info si;
	if (xseg_segment_info(N.seg, &si) < 0) {
		peer_log(PEER_LOG_ERROR, "%s", xseg_last_error());
		return 1;
	}
	uint32_t bad = N.port >= si.nr_ports ? N.port : N.forward;
	if (bad != XSEG_NO_PORT && bad >= si.nr_ports) {
		fprintf(stderr, "nulld: %s %u: segment '%s' has ports 0..%u\n",
			bad == N.port ? "--port" : "--forward", bad, N.segment, si.nr_ports - 1);
		return 2;
	}
	if (xseg_bind_port(N.seg, N.port) < 0) {
		peer_log(PEER_LOG_ERROR, "%s", xseg_last_error());
		return 1;
	}
	if (N.pidfile && peer_pidfile_create(N.pidfile) < 0)
		return 1;
	pidfile_written = N.pidfile != NULL;
	for (*started = 0; *started < N.threads; (*started)++) {
		int rc = pthread_create(&t[*started], NULL, serve, NULL);
		if (rc) {
			peer_log(PEER_LOG_ERROR, "cannot start thread %u: %s", *started, strerror(rc));
			return 1;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	parse_options(argc, argv);
	peer_log_setup("nulld", N.log_level);
	int ready_fd = -1;
	if (N.daemon && peer_daemonize(&ready_fd) < 0)
		return 1;

	/* Handlers before the port is bound: a stop that comes early counts. */
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	pthread_t t[MAX_THREADS];
	unsigned started = 0;
	int rc = start(t, &started);
	if (rc)
		atomic_store(&stop, 1);
	else
		peer_log(PEER_LOG_INFO, "serving port %u of segment %s with %u thread%s, spin %llu us%s",
		       N.port, N.segment, N.threads, N.threads == 1 ? "" : "s",
		       (unsigned long long)(N.spin_ns / 1000),
		       N.forward == XSEG_NO_PORT ? "" : ", forwarding");
	peer_daemon_ready(ready_fd, rc);
	for (unsigned i = 0; i < started; i++)
		pthread_join(t[i], NULL);

	/* The threads answered every batch they took; answer what is still
	 * queued, so no client waits on a port nobody serves. */
	if (N.seg && rc == 0) {
		struct xseg_request *batch[BATCH];
		struct xseg_segment_info si;
		xseg_segment_info(N.seg, &si);
		/* Bounded: a client that keeps resubmitting must not hold us. */
		uint64_t left = si.nr_requests;
		int n;
		while (left && (n = xseg_accept(N.seg, N.port, batch,
						left < BATCH ? (unsigned)left : BATCH)) > 0) {
			take(batch, n);
			left -= (uint64_t)n;
		}
		/* What went on is owed back: wait for it a while (the next port
		 * may be stopping too). */
		uint64_t until = xseg_now_ns() + DRAIN_NS;
		while (atomic_load(&forwarded_out) && xseg_now_ns() < until)
			if (!pass_replies_back())
				xseg_poll(N.seg, N.port, 0, WAIT_SLICE_NS);
		if (atomic_load(&forwarded_out))
			peer_log(PEER_LOG_WARN, "stopped with %llu forwarded requests unanswered by port %u",
			       (unsigned long long)atomic_load(&forwarded_out), N.forward);
		peer_log(PEER_LOG_INFO, "stopped after %llu requests",
		       (unsigned long long)atomic_load(&answered));
	}
	if (N.seg)
		xseg_leave(N.seg);
	if (pidfile_written)
		peer_pidfile_remove(N.pidfile);
	return rc;
}
