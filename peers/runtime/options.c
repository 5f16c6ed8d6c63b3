/*
 * Command-line options: the runtime's common ones merged with the peer's own
 * into one getopt_long table. A bad value is one line on stderr naming it;
 * the caller then exits 2.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"
#include "xseg/version.h"

enum {
	OPT_SEGMENT = PEER_OPT_RESERVED,
	OPT_PORT,
	OPT_THREADS,
	OPT_LOG_LEVEL,
	OPT_DAEMON,
	OPT_PIDFILE,
	OPT_SPIN_US,
	OPT_STOP_TIMEOUT,
	OPT_YIELD,
	OPT_LANES,
	OPT_WATCHERS,
	OPT_HELP,
	OPT_VERSION,
};

static const struct option common_options[] = {
	{ "segment", required_argument, NULL, OPT_SEGMENT },
	{ "port", required_argument, NULL, OPT_PORT },
	{ "threads", required_argument, NULL, OPT_THREADS },
	{ "log-level", required_argument, NULL, OPT_LOG_LEVEL },
	{ "daemon", no_argument, NULL, OPT_DAEMON },
	{ "pidfile", required_argument, NULL, OPT_PIDFILE },
	{ "spin-us", required_argument, NULL, OPT_SPIN_US },
	{ "stop-timeout", required_argument, NULL, OPT_STOP_TIMEOUT },
	{ "yield", required_argument, NULL, OPT_YIELD },
	{ "lanes", required_argument, NULL, OPT_LANES },
	{ "watchers", required_argument, NULL, OPT_WATCHERS },
	{ "help", no_argument, NULL, OPT_HELP },
	{ "version", no_argument, NULL, OPT_VERSION },
};
#define NR_COMMON (sizeof(common_options) / sizeof(common_options[0]))

#define MAX_THREADS 256u
#define MAX_LANES 64u

int peer_arg_error(const char *opt, const char *value, const char *why)
{
	fprintf(stderr, "%s: %s: '%s' %s\n", peer_log_name(), opt, value ? value : "", why);
	return -1;
}

int peer_arg_uint(const char *opt, const char *value, uint64_t min, uint64_t max,
		  uint64_t *out)
{
	char why[96];
	if (xseg_parse_uint(value, max, out) < 0 || *out < min) {
		snprintf(why, sizeof(why), "is not a whole number in %llu..%llu",
			 (unsigned long long)min, (unsigned long long)max);
		return peer_arg_error(opt, value, why);
	}
	return 0;
}

int peer_arg_size(const char *opt, const char *value, uint64_t min, uint64_t max,
		  uint64_t *out)
{
	char why[96];
	if (xseg_parse_size(value, out) < 0 || *out < min || *out > max) {
		snprintf(why, sizeof(why), "is not a size in %llu..%llu (K, M, G suffixes)",
			 (unsigned long long)min, (unsigned long long)max);
		return peer_arg_error(opt, value, why);
	}
	return 0;
}

static void usage(const struct peer_ops *ops)
{
	printf("usage: %s --segment NAME --port N[-M] [options]\n", ops->name);
	if (ops->summary)
		printf("%s\n", ops->summary);
	if (ops->options_usage)
		printf("\n%s options:\n%s", ops->name, ops->options_usage);
	printf("\ncommon options:\n"
	       "  --segment NAME       segment to join (POSIX shared memory name)\n"
	       "  --port N | A-B       port, or range of ports bound as one group\n"
	       "  --lanes N            bind ports N..N+LANES-1 behind --port N as lanes of\n"
	       "                       it: each client's requests queue on a lane of its\n"
	       "                       own (for many clients and threads; default 1)\n"
	       "  --threads N          worker threads (default %u)\n"
	       "  --watchers N         idle workers that watch the ports (spin, then sleep\n"
	       "                       on them); the others wait until work is queued while\n"
	       "                       every watcher is busy (default: the ports, at least 2,\n"
	       "                       at most --threads; a peer may set its own)\n"
	       "  --log-level LEVEL    error, warn, info or debug (default warn)\n"
	       "  --daemon             run in the background once serving\n"
	       "  --pidfile F          write the pid to F (refused while F names a live pid)\n"
	       "  --spin-us N          busy-poll this long before sleeping (default %u)\n"
	       "  --stop-timeout S     on SIGTERM, wait at most S seconds for each step of\n"
	       "                       the stop: a cache in front, the peer's drain, the\n"
	       "                       requests in flight (default 30)\n"
	       "  --yield auto|never   auto (default): while the peer waits on another (a\n"
	       "                       request of its own is out) and its CPU is shared,\n"
	       "                       give the CPU up after each round of work; never:\n"
	       "                       keep it\n"
	       "  -h, --help           this text\n"
	       "  --version            the version and segment layout\n",
	       ops->default_threads ? ops->default_threads : 1,
	       ops->default_spin_us ? ops->default_spin_us : 20);
}

static int parse_ports(struct peer_config *c, const char *arg)
{
	const char *dash = strchr(arg, '-');
	uint64_t a, b;
	char first[32];

	if (!dash) {
		if (xseg_parse_uint(arg, XSEG_MAX_PORTS - 1, &a) < 0)
			return peer_arg_error("--port", arg, "is not a port number");
		c->port_first = c->port_last = (uint32_t)a;
		return 0;
	}
	if ((size_t)(dash - arg) >= sizeof(first))
		return peer_arg_error("--port", arg, "is not a port or a range A-B");
	memcpy(first, arg, (size_t)(dash - arg));
	first[dash - arg] = '\0';
	if (xseg_parse_uint(first, XSEG_MAX_PORTS - 1, &a) < 0 ||
	    xseg_parse_uint(dash + 1, XSEG_MAX_PORTS - 1, &b) < 0 || a > b)
		return peer_arg_error("--port", arg, "is not a port or a range A-B with A <= B");
	c->port_first = (uint32_t)a;
	c->port_last = (uint32_t)b;
	return 0;
}

static int parse_level(const char *arg, enum peer_log_level *out)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };
	for (int i = 0; i < 4; i++)
		if (!strcmp(arg, names[i])) {
			*out = (enum peer_log_level)i;
			return 0;
		}
	return peer_arg_error("--log-level", arg, "is not error, warn, info or debug");
}

static int common_option(struct peer_config *c, int val, const char *arg)
{
	uint64_t v;

	switch (val) {
	case OPT_SEGMENT:
		if (!*arg || strlen(arg) > XSEG_NAME_MAX || strchr(arg, '/'))
			return peer_arg_error("--segment", arg, "is not a segment name");
		c->segment = arg;
		return 0;
	case OPT_PORT:
		c->have_port = true;
		return parse_ports(c, arg);
	case OPT_THREADS:
		if (peer_arg_uint("--threads", arg, 1, MAX_THREADS, &v) < 0)
			return -1;
		c->threads = (unsigned)v;
		return 0;
	case OPT_LOG_LEVEL:
		return parse_level(arg, &c->log_level);
	case OPT_DAEMON:
		c->daemon = true;
		return 0;
	case OPT_PIDFILE:
		if (!*arg)
			return peer_arg_error("--pidfile", arg, "is empty");
		c->pidfile = arg;
		return 0;
	case OPT_SPIN_US:
		if (peer_arg_uint("--spin-us", arg, 0, 10000000, &v) < 0)
			return -1;
		c->spin_ns = v * 1000;
		return 0;
	case OPT_YIELD:
		if (strcmp(arg, "auto") && strcmp(arg, "never"))
			return peer_arg_error("--yield", arg, "is not auto or never");
		c->never_yield = !strcmp(arg, "never");
		return 0;
	case OPT_LANES:
		if (peer_arg_uint("--lanes", arg, 1, MAX_LANES, &v) < 0)
			return -1;
		c->lanes = (unsigned)v;
		return 0;
	case OPT_WATCHERS:
		if (peer_arg_uint("--watchers", arg, 1, MAX_THREADS, &v) < 0)
			return -1;
		c->watchers = (unsigned)v;
		return 0;
	case OPT_STOP_TIMEOUT:
		if (peer_arg_uint("--stop-timeout", arg, 1, 86400, &v) < 0)
			return -1;
		c->stop_timeout_s = (unsigned)v;
		return 0;
	}
	return -1;
}

/*
 * Returns 0 to go on, otherwise the exit status: 2 for a bad argument, -1
 * (exit 0) after --help or --version (printed), 1 when out of memory.
 */
int peer_parse_args(struct peer *p, int argc, char **argv)
{
	const struct peer_ops *ops = p->ops;
	struct peer_config *c = &p->cfg;
	size_t nr_own = 0;
	int rc = 0, val;

	c->threads = ops->default_threads ? ops->default_threads : 1;
	c->log_level = PEER_LOG_WARN;
	c->spin_ns = (ops->default_spin_us ? ops->default_spin_us : 20) * 1000ull;
	c->stop_timeout_s = 30;
	while (ops->options && ops->options[nr_own].name)
		nr_own++;
	struct option *all = calloc(NR_COMMON + nr_own + 1, sizeof(*all));
	if (!all) {
		fprintf(stderr, "%s: out of memory\n", ops->name);
		return 1;
	}
	memcpy(all, common_options, sizeof(common_options));
	for (size_t i = 0; i < nr_own; i++) {
		all[NR_COMMON + i] = ops->options[i];
		all[NR_COMMON + i].flag = NULL;
	}
	opterr = 0;
	optind = 1;
	while (!rc && (val = getopt_long(argc, argv, ":h", all, NULL)) != -1) {
		if (val == 'h' || val == OPT_HELP) {
			usage(ops);
			free(all);
			return -1;   /* --help: exit 0 */
		}
		if (val == OPT_VERSION) {
			xseg_print_version(ops->name);
			free(all);
			return -1;
		}
		if (val == ':') {
			fprintf(stderr, "%s: option '%s' needs a value\n", ops->name, argv[optind - 1]);
			rc = 2;
		} else if (val == '?') {
			fprintf(stderr, "%s: unknown option '%s' (see --help)\n", ops->name,
				argv[optind - 1]);
			rc = 2;
		} else if (val >= PEER_OPT_RESERVED) {
			if (common_option(c, val, optarg) < 0)
				rc = 2;
		} else if (!ops->parse_option || ops->parse_option(p, val, optarg) != 0) {
			rc = 2;
		}
	}
	free(all);
	if (rc)
		return rc;
	if (optind < argc) {
		fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", ops->name,
			argv[optind]);
		return 2;
	}
	if (!c->segment) {
		fprintf(stderr, "%s: --segment is required (see --help)\n", ops->name);
		return 2;
	}
	if (!c->have_port) {
		fprintf(stderr, "%s: --port is required (see --help)\n", ops->name);
		return 2;
	}
	if (c->lanes > 1) {
		if (c->port_last != c->port_first) {
			fprintf(stderr, "%s: --lanes %u: needs --port N, not the range %u-%u\n",
				ops->name, c->lanes, c->port_first, c->port_last);
			return 2;
		}
		if (c->port_first + c->lanes > XSEG_MAX_PORTS) {
			fprintf(stderr, "%s: --lanes %u: --port %u's lanes would end past port %u\n",
				ops->name, c->lanes, c->port_first, XSEG_MAX_PORTS - 1);
			return 2;
		}
		c->port_last = c->port_first + c->lanes - 1;
	}
	if (ops->check_options && ops->check_options(p) != 0)
		return 2;
	return 0;
}
