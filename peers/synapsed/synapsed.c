/*
 * synapsed: carries xseg requests between two segments over TCP.
 *
 *   host A: client -> synapsed --port P --remote B:7000
 *   host B: synapsed --port Q --listen 0.0.0.0:7000 --target-port T -> T
 *
 * Requests submitted to A's port travel to B, which submits them to its
 * --target-port and sends each reply back on the connection it came from.
 * One synapsed may do both. Wire format and connection rules:
 * docs/synapsed-protocol.md; threads and locking: synapsed.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "synapsed.h"

struct synapsed S = { .timeout_ns = 30ull * 1000 * 1000 * 1000, .wake_fd = -1,
		      .net_spin_ns = 300ull * 1000,
		      .idle_timeout_ns = 300ull * 1000 * 1000 * 1000,
		      .retry_limit_ns = 10ull * 1000 * 1000 * 1000,
		      .max_inflight = 256ull << 20, .max_conns = 64 };

enum { OPT_LISTEN = 1, OPT_REMOTE, OPT_TARGET_PORT, OPT_ALLOW, OPT_TIMEOUT, OPT_NET_SPIN,
       OPT_IDLE_TIMEOUT, OPT_MAX_INFLIGHT, OPT_MAX_CONNS, OPT_RETRY_LIMIT };

static const struct option synapsed_options[] = {
	{ "listen", required_argument, NULL, OPT_LISTEN },
	{ "remote", required_argument, NULL, OPT_REMOTE },
	{ "target-port", required_argument, NULL, OPT_TARGET_PORT },
	{ "allow", required_argument, NULL, OPT_ALLOW },
	{ "timeout", required_argument, NULL, OPT_TIMEOUT },
	{ "net-spin-us", required_argument, NULL, OPT_NET_SPIN },
	{ "idle-timeout", required_argument, NULL, OPT_IDLE_TIMEOUT },
	{ "max-inflight-bytes", required_argument, NULL, OPT_MAX_INFLIGHT },
	{ "max-connections", required_argument, NULL, OPT_MAX_CONNS },
	{ "retry-limit", required_argument, NULL, OPT_RETRY_LIMIT },
	{ NULL, 0, NULL, 0 },
};

static const char synapsed_usage[] =
"  --listen ADDR:PORT     accept connections there ([IPv6]:PORT for IPv6)\n"
"  --target-port N        where requests from the network go (with --listen)\n"
"  --remote ADDR:PORT     where requests submitted to --port go\n"
"  --allow ADDR           accept connections only from ADDR (repeatable;\n"
"                         without it every address is accepted)\n"
"  --timeout SECONDS      a request without a reply fails ETIMEDOUT after it;\n"
"                         also the connect timeout, and a connection that\n"
"                         does not complete a frame within it is closed\n"
"                         (default 30)\n"
"  --idle-timeout S       close an incoming connection silent this long with\n"
"                         nothing under way (default 300; 0: never)\n"
"  --max-inflight-bytes SIZE  memory for requests from the network, their\n"
"                         bodies and replies, reserved before a body is read;\n"
"                         a connection gets at most a quarter (but always\n"
"                         room for one largest request) and waits for more\n"
"                         unread (K, M, G suffixes; default 256M)\n"
"  --max-connections N    incoming connections at once; when full, a new one\n"
"                         evicts the longest-idle (default 64)\n"
"  --retry-limit S        with the segment's request pool or heap empty, a\n"
"                         request from the network waits for one and fails\n"
"                         after S seconds (1..3600; default 10)\n"
"  --net-spin-us N        the network thread polls this long after traffic\n"
"                         before it sleeps; at depth 1 it then serves --port\n"
"                         itself with the workers parked (default 300; the\n"
"                         workers' own is --spin-us)\n"
"At least one of --listen and --remote.\n";

static int parse_option(struct peer *p, int val, const char *arg)
{
	const char *why = NULL;
	uint64_t secs;
	(void)p;

	switch (val) {
	case OPT_LISTEN:
		if (addr_parse_endpoint(arg, false, &S.listen_addr, &why) < 0)
			return peer_arg_error("--listen", arg, why);
		S.have_listen = true;
		return 0;
	case OPT_REMOTE:
		if (addr_parse_endpoint(arg, true, &S.remote_addr, &why) < 0)
			return peer_arg_error("--remote", arg, why);
		S.have_remote = true;
		return 0;
	case OPT_TARGET_PORT:
		S.have_target = true;
		return peer_arg_uint("--target-port", arg, 0, XSEG_MAX_PORTS - 1, &S.target_port);
	case OPT_ALLOW:
		if (S.nr_allow == MAX_ALLOW)
			return peer_arg_error("--allow", arg, "is one too many (at most 32)");
		if (addr_parse_host(arg, &S.allow[S.nr_allow], &why) < 0)
			return peer_arg_error("--allow", arg, why);
		S.nr_allow++;
		return 0;
	case OPT_TIMEOUT:
		if (peer_arg_uint("--timeout", arg, 1, 86400, &secs) < 0)
			return -1;
		S.timeout_ns = secs * 1000000000ull;
		return 0;
	case OPT_NET_SPIN:
		if (peer_arg_uint("--net-spin-us", arg, 0, 1000000, &secs) < 0)
			return -1;
		S.net_spin_ns = secs * 1000;
		return 0;
	case OPT_IDLE_TIMEOUT:
		if (peer_arg_uint("--idle-timeout", arg, 0, 30 * 86400, &secs) < 0)
			return -1;
		S.idle_timeout_ns = secs * 1000000000ull;
		return 0;
	case OPT_MAX_INFLIGHT:
		return peer_arg_size("--max-inflight-bytes", arg, 1 << 20, 1ull << 40, &S.max_inflight);
	case OPT_MAX_CONNS:
		if (peer_arg_uint("--max-connections", arg, 1, 4096, &secs) < 0)
			return -1;
		S.max_conns = (uint32_t)secs;
		return 0;
	case OPT_RETRY_LIMIT:
		if (peer_arg_uint("--retry-limit", arg, 1, 3600, &secs) < 0)
			return -1;
		S.retry_limit_ns = secs * 1000000000ull;
		return 0;
	}
	return -1;
}

static int check_options(struct peer *p)
{
	(void)p;
	if (!S.have_listen && !S.have_remote) {
		fprintf(stderr, "synapsed: --listen or --remote is required (see --help)\n");
		return -1;
	}
	if (S.have_listen && !S.have_target) {
		fprintf(stderr, "synapsed: --listen needs --target-port (see --help)\n");
		return -1;
	}
	return 0;
}

static void report(void)
{
	limits_report();
	outbound_report();
}

/* The layers above the socket layer, as net.c calls them (it never names
 * them: see struct net_ops). */
static const struct net_ops net_ops = {
	.hello = epochs_hello,
	.request_header = inbound_request_header,
	.request_done = inbound_request_done,
	.request_abandon = inbound_abandon,
	.reply_header = outbound_reply_header,
	.reply_done = outbound_reply_done,
	.reply_received = outbound_reply_received,
	.expire = outbound_expire,
	.fail_queued = outbound_fail_queued,
	.conn_closed = outbound_conn_closed,
	.sweep = limits_sweep,
	.evict = limits_evict,
	.report = report,
};

static int init(struct peer *p)
{
	struct xseg_segment_info si;

	S.peer = p;
	pthread_mutex_init(&S.lock, NULL);
	/* Frames (mostly 4K to 1M) come and go all the time. glibc would
	 * hand freed heap back to the kernel and fault it in again for the
	 * next frame (page faults were a sixth of a worker's time at 64K
	 * depth 16): keep up to 64 MiB of it, and serve frames from the heap. */
	mallopt(M_TRIM_THRESHOLD, 64 << 20);
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	if (xseg_segment_info(peer_segment(p), &si) < 0)
		return -1;
	/* An accepted request holds a slot; one that timed out after it was
	 * sent keeps it (LATE) until its late reply or the link's close,
	 * which a stalled remote gets within STALL_TIMEOUTS x --timeout:
	 * room for that many timeouts of LATE slots beside the pool. */
	uint32_t nr = si.nr_requests * (STALL_TIMEOUTS + 1);
	if (slots_init(&S.slots, nr) < 0) {
		peer_error("out of memory for %u request slots", nr);
		return -1;
	}
	if (epochs_init() < 0) {
		peer_error("out of memory for %u requesters", 2 * S.max_conns);
		return -1;
	}
	hello_init();
	if (net_start(&net_ops) < 0)
		return -1;
	if (S.have_listen)
		peer_info("incoming connections: at most %u, a frame within %" PRIu64 " s, idle "
			  "closed after %" PRIu64 " s, %" PRIu64 " bytes in flight (%" PRIu64
			  " per connection)", S.max_conns, S.timeout_ns / 1000000000u,
			  S.idle_timeout_ns / 1000000000u, S.max_inflight, S.conn_inflight);
	if (S.have_remote)
		peer_info("requests to port %u go to %s (timeout %" PRIu64 " s)", peer_port(p),
			  S.remote_addr.text, (uint64_t)(S.timeout_ns / 1000000000u));
	return 0;
}

/* Its own figures in xseg stats (docs/interfaces.md), after the runtime's. */
static int stats_fields(struct peer *p, char *buf, size_t len)
{
	(void)p;
	return snprintf(buf, len, ",\"remote_stalls\":%" PRIu64 ",\"slot_refusals\":%" PRIu64
			",\"superseded\":%" PRIu64 ",\"requesters\":%" PRIu64,
			atomic_load(&S.remote_stalls), atomic_load(&S.slot_refusals),
			atomic_load(&S.superseded), atomic_load(&S.requesters));
}

static void on_request(struct peer_thread *t, struct xseg_request *req)
{
	outbound_on_request(t, req);
}

static void on_stop(struct peer_thread *t)
{
	(void)t;
	/* Requests from the network are now answered ESHUTDOWN; ours still
	 * get their replies (or time out). */
	atomic_store(&S.stopping, 1);
	/* A request the network thread took before seeing it: sent (or
	 * posted) before the workers look for what is outstanding. */
	while (atomic_load(&S.submitting))
		sched_yield();
	net_wake();
}

static void fini(struct peer *p)
{
	(void)p;
	net_stop();
	slots_destroy(&S.slots);
	pthread_mutex_destroy(&S.lock);
}

static const struct peer_ops synapsed_ops = {
	.name = "synapsed",
	.summary = "Carries requests between two segments over TCP: requests submitted to\n"
		   "--port go to the --remote synapsed; requests from --listen go to\n"
		   "--target-port.",
	.options = synapsed_options,
	.options_usage = synapsed_usage,
	.parse_option = parse_option,
	.check_options = check_options,
	.default_threads = 2,
	.init = init,
	.on_request = on_request,
	.on_stop = on_stop,
	.fini = fini,
	.stats = stats_fields,
};

int main(int argc, char **argv)
{
	return peer_main(argc, argv, &synapsed_ops, &S);
}
