/*
 * xseg: the segment's admin tool.
 *
 *   xseg create  --segment NAME [--ports N] [--requests N] [--heap SIZE] [--mode OCTAL] [--reuse]
 *   xseg destroy --segment NAME [--if-unused]
 *   xseg info    --segment NAME [--json] [--all]
 *   xseg route   --segment NAME --port P (--next Q | --clear)
 *   xseg plug    --segment NAME --port B --via C
 *   xseg guard   --segment NAME --port B --via C --persist FILE
 *   xseg unplug  --segment NAME --via C [--force]
 *   xseg stats   --segment NAME [--port N] [--json | --prometheus | --watch S [--count N]]
 *   xseg exporter --segment NAME --listen ADDR:PORT [--port N]
 *   xseg policy  --segment NAME --port N --set writeback|writethrough
 *   xseg promote --segment NAME --port N [--force] [--timeout S]
 *   xseg up      FILE [--run-dir DIR] [--timeout S]
 *   xseg down    FILE [--run-dir DIR] [--timeout S]
 *   xseg status  FILE [--run-dir DIR]
 *
 * Each takes the options its usage line names, --help and --version. A bad
 * argument (another command's option too): one line on stderr naming it,
 * exit 2. A failure of the segment or a peer: the reason on stderr, exit 1.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xseg/version.h"
#include "xseg/xseg.h"
#include "control.h"
#include "exporter.h"
#include "guard.h"
#include "pathfile.h"
#include "plug.h"
#include "stats.h"
#include "up.h"

struct args {
	const char *segment;
	uint64_t ports, requests, heap, mode;
	uint32_t port, next, via;
	bool have_port, have_next, have_via, clear, json, all, force, prometheus, if_unused, reuse;
	uint64_t watch, count;          /* stats */
	const char *listen;             /* exporter */
	const char *set;
	const char *file, *run_dir;   /* up, down, status */
	const char *persist;          /* guard */
	uint64_t timeout;
};

/* Per command: its synopsis and what it does (xseg help COMMAND). */
struct command {
	const char *name;
	int (*fn)(struct args *);
	const char *synopsis;
	const char *help;
	bool takes_file;   /* FILE instead of --segment */
};

static void bad(const char *fmt, const char *a, const char *b)
{
	fprintf(stderr, "xseg: ");
	fprintf(stderr, fmt, a, b);
	fprintf(stderr, "\n");
	exit(2);
}

static uint64_t num(const char *opt, const char *val, uint64_t min, uint64_t max)
{
	uint64_t v;
	int rc = xseg_parse_uint(val, max, &v);
	if (rc == -EINVAL)
		bad("%s: '%s' is not a number", opt, val);
	if (rc < 0 || v < min) {
		char why[64];
		snprintf(why, sizeof(why), "is out of range %llu..%llu", (unsigned long long)min,
			 (unsigned long long)max);
		fprintf(stderr, "xseg: %s: '%s' %s\n", opt, val, why);
		exit(2);
	}
	return v;
}

/* --NAME is in the command's synopsis: its options, and only those, are
 * taken (another command's, silently dropped, would do something else
 * than asked: `up --ports 2` made a 64-port segment). */
static void takes(const struct command *cmd, const char *name)
{
	size_t len = strlen(name);
	for (const char *s = strstr(cmd->synopsis, name); s; s = strstr(s + 1, name))
		if (s - cmd->synopsis >= 2 && !strncmp(s - 2, "--", 2) &&
		    !(s[len] == '-' || (s[len] >= 'a' && s[len] <= 'z')))
			return;
	fprintf(stderr, "xseg: --%s does not go with %s (usage: %s)\n", name, cmd->name,
		cmd->synopsis);
	exit(2);
}

static void parse(int argc, char **argv, const struct command *cmd, struct args *a)
{
	enum { O_SEG = 256, O_PORTS, O_REQS, O_HEAP, O_MODE, O_PORT, O_NEXT, O_VIA, O_CLEAR,
	       O_JSON, O_ALL, O_SET, O_FORCE, O_RUN_DIR, O_TIMEOUT, O_WATCH, O_COUNT,
	       O_PROMETHEUS, O_LISTEN, O_IF_UNUSED, O_REUSE, O_PERSIST, O_HELP, O_VERSION };
	static const struct option opts[] = {
		{ "segment", required_argument, NULL, O_SEG },
		{ "ports", required_argument, NULL, O_PORTS },
		{ "requests", required_argument, NULL, O_REQS },
		{ "heap", required_argument, NULL, O_HEAP },
		{ "mode", required_argument, NULL, O_MODE },
		{ "port", required_argument, NULL, O_PORT },
		{ "next", required_argument, NULL, O_NEXT },
		{ "via", required_argument, NULL, O_VIA },
		{ "clear", no_argument, NULL, O_CLEAR },
		{ "json", no_argument, NULL, O_JSON },
		{ "all", no_argument, NULL, O_ALL },
		{ "set", required_argument, NULL, O_SET },
		{ "force", no_argument, NULL, O_FORCE },
		{ "run-dir", required_argument, NULL, O_RUN_DIR },
		{ "timeout", required_argument, NULL, O_TIMEOUT },
		{ "watch", required_argument, NULL, O_WATCH },
		{ "count", required_argument, NULL, O_COUNT },
		{ "prometheus", no_argument, NULL, O_PROMETHEUS },
		{ "listen", required_argument, NULL, O_LISTEN },
		{ "if-unused", no_argument, NULL, O_IF_UNUSED },
		{ "reuse", no_argument, NULL, O_REUSE },
		{ "persist", required_argument, NULL, O_PERSIST },
		{ "help", no_argument, NULL, O_HELP },
		{ "version", no_argument, NULL, O_VERSION },
		{ NULL, 0, NULL, 0 },
	};
	int c, index = -1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", opts, &index)) != -1) {
		if (index >= 0 && c != O_HELP && c != O_VERSION)
			takes(cmd, opts[index].name);
		index = -1;
		switch (c) {
		case O_SEG: a->segment = optarg; break;
		case O_PORTS: a->ports = num("--ports", optarg, 1, XSEG_MAX_PORTS); break;
		case O_REQS: a->requests = num("--requests", optarg, 1, XSEG_MAX_REQUESTS); break;
		case O_HEAP:
			if (xseg_parse_size(optarg, &a->heap) < 0 || !a->heap)
				bad("--heap: '%s' is not a size (e.g. 64M)%s", optarg, "");
			break;
		case O_MODE: {
			char *end;
			a->mode = strtoul(optarg, &end, 8);
			if (!*optarg || *end || a->mode > 0777)
				bad("--mode: '%s' is not an octal mode like 0600%s", optarg, "");
			/* 0 was taken for "not given" (0600): nobody could open it */
			if (!a->mode)
				bad("--mode: '%s' lets nobody open the segment (e.g. 0600)%s", optarg, "");
			break;
		}
		case O_PORT: a->port = (uint32_t)num("--port", optarg, 0, XSEG_MAX_PORTS - 1); a->have_port = true; break;
		case O_NEXT: a->next = (uint32_t)num("--next", optarg, 0, XSEG_MAX_PORTS - 1); a->have_next = true; break;
		case O_VIA: a->via = (uint32_t)num("--via", optarg, 0, XSEG_MAX_PORTS - 1); a->have_via = true; break;
		case O_CLEAR: a->clear = true; break;
		case O_JSON: a->json = true; break;
		case O_ALL: a->all = true; break;
		case O_SET:
			if (strcmp(optarg, "writeback") && strcmp(optarg, "writethrough"))
				bad("--set: '%s' is not writeback or writethrough%s", optarg, "");
			a->set = optarg;
			break;
		case O_FORCE: a->force = true; break;
		case O_RUN_DIR:
			if (!*optarg)
				bad("--run-dir: '%s' is empty%s", optarg, "");
			a->run_dir = optarg;
			break;
		case O_TIMEOUT:
			a->timeout = num("--timeout", optarg, 1, 86400);
			break;
		case O_WATCH: a->watch = num("--watch", optarg, 1, 86400); break;
		case O_COUNT: a->count = num("--count", optarg, 1, UINT32_MAX); break;
		case O_PROMETHEUS: a->prometheus = true; break;
		case O_IF_UNUSED: a->if_unused = true; break;
		case O_REUSE: a->reuse = true; break;
		case O_PERSIST:
			if (!*optarg)
				bad("--persist: '%s' is empty%s", optarg, "");
			a->persist = optarg;
			break;
		case O_LISTEN: {
			const char *why = "";
			if (exporter_check_listen(optarg, &why) < 0)
				bad("--listen: '%s' %s", optarg, why);
			a->listen = optarg;
			break;
		}
		case 'h':
		case O_HELP: printf("usage: %s\n%s", cmd->synopsis, cmd->help); exit(0);
		case O_VERSION: xseg_print_version("xseg"); exit(0);
		default: bad("unknown or incomplete option '%s'%s", argv[optind - 1], " (see --help)");
		}
	}
	if (cmd->takes_file) {
		if (optind == argc)
			bad("%s: FILE is required%s", cmd->name, " (see --help)");
		a->file = argv[optind++];
	}
	if (optind < argc)
		bad("unexpected argument '%s'%s", argv[optind], " (see --help)");
	if (!a->segment && !cmd->takes_file)
		bad("--segment is required%s%s", "", "");
}

static struct xseg *join(const char *name)
{
	struct xseg *seg;
	if (xseg_join(name, &seg) < 0) {
		fprintf(stderr, "xseg: %s\n", xseg_last_error());
		exit(1);
	}
	return seg;
}

static void check_port(struct xseg *seg, const char *opt, uint32_t port)
{
	struct xseg_segment_info si;
	xseg_segment_info(seg, &si);
	if (port >= si.nr_ports) {
		char v[16], range[32];
		snprintf(v, sizeof(v), "%u", port);
		snprintf(range, sizeof(range), "0..%u", si.nr_ports - 1);
		fprintf(stderr, "xseg: %s: port %s out of range %s\n", opt, v, range);
		xseg_leave(seg);
		exit(2);
	}
}

/*
 * create --reuse of a segment that exists: taken as it is when no live
 * process serves a port of it (its peers gone: a crash, or a stop that
 * kept it for a dirty mark), its marks and routes kept. A cache that left
 * a mark recovers its persist file on it and takes the mark over; until
 * then the path fails closed (EIO). Made again instead, the mark was gone
 * and the path served the blocker's older data. 1 while a port is served.
 */
static int reuse_left(const char *name)
{
	struct xseg *seg = join(name);
	struct xseg_segment_info si;
	struct xseg_port_info pi;
	unsigned marked = 0;
	xseg_segment_info(seg, &si);
	for (uint32_t p = 0; p < si.nr_ports; p++) {
		if (xseg_port_info(seg, p, &pi) < 0)
			continue;
		if (pi.owner && pi.owner_alive) {
			fprintf(stderr, "xseg: create: segment %s exists and port %u is served by pid %d "
				"(it is in use)\n", name, p, (int)pi.owner);
			xseg_leave(seg);
			return 1;
		}
		if (pi.dirty_bytes) {
			fprintf(stderr, "xseg: create: port %u of segment %s is marked as holding %"
				PRIu64 " dirty bytes of a cache that is gone: requests routed there fail "
				"(EIO) until it serves again on its persist file\n", p, name,
				pi.dirty_bytes);
			marked++;
		}
	}
	fprintf(stderr, "xseg: create: segment %s exists, nothing serves it: reused as it is "
		"(%u ports, %u requests, %" PRIu64 " bytes of heap; %u ports marked dirty)\n", name,
		si.nr_ports, si.nr_requests, si.heap_size, marked);
	xseg_leave(seg);
	return 0;
}

static int cmd_create(struct args *a)
{
	struct xseg_config cfg;
	xseg_config_default(&cfg);
	if (a->ports) cfg.nr_ports = (uint32_t)a->ports;
	if (a->requests) cfg.nr_requests = (uint32_t)a->requests;
	if (a->heap) cfg.heap_size = a->heap;
	if (a->mode) cfg.mode = (mode_t)a->mode;
	int rc = xseg_create(a->segment, &cfg);
	if (rc == -EEXIST && a->reuse)
		return reuse_left(a->segment);
	if (rc < 0) {
		fprintf(stderr, "xseg: %s\n", xseg_last_error());
		return 1;
	}
	return 0;
}

/*
 * --if-unused: the segment stays while a port is served by a live process
 * or marked dirty (a cache gone with data its blocker lacks: the mark is
 * what makes the path fail closed, and removing the segment removes it,
 * so a path made again would serve older data). xseg down keeps it alike;
 * xseg-segment@.service stops with it. 1 if kept.
 */
static int kept_in_use(const char *name)
{
	struct xseg *seg = join(name);
	struct xseg_segment_info si;
	struct xseg_port_info pi;
	int kept = 0;
	xseg_segment_info(seg, &si);
	for (uint32_t p = 0; p < si.nr_ports && !kept; p++) {
		if (xseg_port_info(seg, p, &pi) < 0)
			continue;
		if (pi.owner && pi.owner_alive) {
			fprintf(stderr, "xseg: destroy: segment %s kept: port %u is still served by "
				"pid %d%s; stop it first\n", name, p, (int)pi.owner,
				pi.dirty_bytes ? ", marked dirty" : "");
			kept = 1;
		} else if (pi.dirty_bytes) {
			fprintf(stderr, "xseg: destroy: segment %s kept: port %u is marked as holding %"
				PRIu64 " dirty bytes of a cache that is gone (removing the segment would "
				"lose the mark); restart the cache on its persist file, or give them up "
				"with xseg unplug --force --via %u\n", name, p, pi.dirty_bytes, p);
			kept = 1;
		}
	}
	xseg_leave(seg);
	return kept;
}

static int cmd_destroy(struct args *a)
{
	if (a->if_unused && kept_in_use(a->segment))
		return 1;
	if (xseg_destroy(a->segment) < 0) {
		fprintf(stderr, "xseg: %s\n", xseg_last_error());
		return 1;
	}
	return 0;
}

/* A JSON string: quotes, backslashes and control bytes escaped. */
static void print_json_string(const char *str)
{
	putchar('"');
	for (const unsigned char *p = (const unsigned char *)str; *p; p++) {
		if (*p == '"' || *p == '\\')
			printf("\\%c", *p);
		else if (*p < 0x20)
			printf("\\u%04x", *p);
		else
			putchar(*p);
	}
	putchar('"');
}

static bool port_worth_showing(const struct xseg_port_info *p, bool all)
{
	return all || p->owner || p->next_hop != XSEG_NO_PORT || p->request_depth ||
	       p->reply_depth || p->dropped_replies || p->dirty_bytes;
}

static int cmd_info(struct args *a)
{
	struct xseg *seg = join(a->segment);
	struct xseg_segment_info si;
	xseg_segment_info(seg, &si);
	if (a->json) {
		printf("{\"segment\":");
		print_json_string(a->segment);
		printf(",\"layout_version\":%u,\"size\":%" PRIu64
		       ",\"ports\":%u,\"requests\":%u,\"free_requests\":%u,\"reserved_requests\":%u"
		       ",\"heap_size\":%" PRIu64
		       ",\"heap_used\":%" PRIu64 ",\"heap_largest_free\":%" PRIu64
		       ",\"heap_buffers\":%" PRIu64 ",\"instance\":\"%016" PRIx64 "\",\"port_list\":[",
		       si.layout_version, si.segment_size, si.nr_ports, si.nr_requests,
		       si.free_requests, si.reserved_requests, si.heap_size, si.heap_used, si.heap_free_largest,
		       si.heap_allocs, si.instance);
	} else {
		printf("segment %s: %" PRIu64 " bytes, layout %u\n", a->segment, si.segment_size,
		       si.layout_version);
		printf("requests: %u of %u free, %u in peers' reserves\n", si.free_requests,
		       si.nr_requests, si.reserved_requests);
		printf("heap: %" PRIu64 " of %" PRIu64 " bytes used in %" PRIu64
		       " buffers, largest free block %" PRIu64 "\n",
		       si.heap_used, si.heap_size, si.heap_allocs, si.heap_free_largest);
		printf("%6s %8s %6s %6s %8s %8s %8s %12s %12s %8s %12s %6s\n", "port", "owner",
		       "alive", "next", "queued", "replies", "waiters", "submitted", "replied",
		       "dropped", "dirty", "lanes");
	}
	bool first = true;
	for (uint32_t p = 0; p < si.nr_ports; p++) {
		struct xseg_port_info pi;
		if (xseg_port_info(seg, p, &pi) < 0 || !port_worth_showing(&pi, a->all))
			continue;
		if (a->json) {
			printf("%s{\"port\":%u,\"owner\":%d,\"alive\":%s,\"next_hop\":", first ? "" : ",",
			       p, (int)pi.owner, pi.owner_alive ? "true" : "false");
			if (pi.next_hop == XSEG_NO_PORT)
				printf("null");
			else
				printf("%u", pi.next_hop);
			printf(",\"request_depth\":%u,\"reply_depth\":%u,\"waiters\":%u,"
			       "\"submitted\":%" PRIu64 ",\"replied\":%" PRIu64 ",\"reserved\":%u,"
			       "\"epoch\":%u,\"dropped_replies\":%" PRIu64
			       ",\"dirty_bytes\":%" PRIu64 ",\"given_up_bytes\":%" PRIu64
			       ",\"lanes\":%u}",
			       pi.request_depth, pi.reply_depth, pi.waiters, pi.submitted, pi.replied,
			       pi.reserved, pi.epoch, pi.dropped_replies, pi.dirty_bytes,
			       pi.given_up_bytes, xseg_port_lanes(seg, p));
		} else {
			char next[16] = "-", lanes[16] = "-";
			if (pi.next_hop != XSEG_NO_PORT)
				snprintf(next, sizeof(next), "%u", pi.next_hop);
			if (xseg_port_lanes(seg, p))
				snprintf(lanes, sizeof(lanes), "%u", xseg_port_lanes(seg, p));
			printf("%6u %8d %6s %6s %8u %8u %8u %12" PRIu64 " %12" PRIu64 " %8" PRIu64
			       " %12" PRIu64 " %6s\n",
			       p, (int)pi.owner, pi.owner ? (pi.owner_alive ? "yes" : "DEAD") : "-", next,
			       pi.request_depth, pi.reply_depth, pi.waiters, pi.submitted, pi.replied,
			       pi.dropped_replies, pi.dirty_bytes, lanes);
		}
		first = false;
	}
	if (a->json)
		printf("]}\n");
	xseg_leave(seg);
	return 0;
}

/* unplug --force: a cache that is gone leaves the path, its dirty data given up. */
static int unplug_gone(struct xseg *seg, uint32_t via)
{
	uint64_t bytes = 0;
	if (xseg_port_give_up_dirty(seg, via, &bytes) < 0) {
		fprintf(stderr, "xseg: unplug --force: %s\n", xseg_last_error());
		return 1;
	}
	clear_routes_to(seg, via);
	if (bytes)
		fprintf(stderr, "xseg: unplug --force: gave up %" PRIu64 " dirty bytes of the cache "
			"at port %u; its blocker has older data for them\n", bytes, via);
	return 0;
}

static int cmd_route(struct args *a)
{
	if (!a->have_port)
		bad("route: --port is required%s%s", "", "");
	if (a->have_next == a->clear)
		bad("route: give exactly one of --next Q or --clear%s%s", "", "");
	struct xseg *seg = join(a->segment);
	check_port(seg, "--port", a->port);
	int rc;
	if (a->clear && gone_dirty(seg, xseg_get_next_hop(seg, a->port), "route --clear")) {
		xseg_leave(seg);
		return 1;
	}
	if (a->clear) {
		rc = xseg_clear_next_hop(seg, a->port);
	} else {
		check_port(seg, "--next", a->next);
		rc = xseg_set_next_hop(seg, a->port, a->next);
	}
	if (rc < 0)
		fprintf(stderr, "xseg: %s\n", xseg_last_error());
	xseg_leave(seg);
	return rc < 0 ? 1 : 0;
}

static int cmd_plug(struct args *a)
{
	if (!a->have_port || !a->have_via)
		bad("plug: --port B and --via C are required%s%s", "", "");
	struct xseg *seg = join(a->segment);
	check_port(seg, "--port", a->port);
	check_port(seg, "--via", a->via);
	int rc = plug_in(seg, a->port, a->via, "plug");
	xseg_leave(seg);
	return rc;
}

static int cmd_guard(struct args *a)
{
	if (!a->have_port || !a->have_via || !a->persist)
		bad("guard: --port B, --via C and --persist FILE are required%s%s", "", "");
	struct xseg *seg = join(a->segment);
	check_port(seg, "--port", a->port);
	check_port(seg, "--via", a->via);
	xseg_leave(seg);
	return guard_command(a->segment, a->port, a->via, a->persist);
}

static int cmd_unplug(struct args *a)
{
	if (!a->have_via)
		bad("unplug: --via C is required%s%s", "", "");
	struct xseg *seg = join(a->segment);
	check_port(seg, "--via", a->via);
	if (a->force) {
		int rc = unplug_gone(seg, a->via);
		xseg_leave(seg);
		return rc;
	}
	if (gone_dirty(seg, a->via, "unplug")) {
		xseg_leave(seg);
		return 1;
	}
	/* Nobody serves C and it holds nothing: nothing to write back (a
	 * control sent there would fail), its routes just go. */
	struct xseg_port_info pi;
	if (xseg_port_info(seg, a->via, &pi) == 0 && !(pi.owner && pi.owner_alive)) {
		clear_routes_to(seg, a->via);
		printf("port %u: nobody serves it and it held no dirty data: its routes cleared\n",
		       a->via);
		xseg_leave(seg);
		return 0;
	}
	/* While still in the path, the peer writes back every dirty byte;
	 * the route goes only when that is done, so no read can be stale. */
	char reply[256];
	const char *why = "";
	int rc = control_call(seg, a->via, "unplug", reply, sizeof(reply), 600, &why);
	if (rc != 0) {
		fprintf(stderr, "xseg: unplug: port %u could not write back its data: %s; "
			"routes left in place\n", a->via, why);
		xseg_leave(seg);
		return 1;
	}
	clear_routes_to(seg, a->via);
	xseg_leave(seg);
	return 0;
}

static int cmd_stats(struct args *a)
{
	if (a->count && !a->watch)
		bad("--count goes with --watch%s%s", "", "");
	if ((a->watch != 0) + a->json + a->prometheus > 1)
		bad("stats: give at most one of --json, --prometheus and --watch%s%s", "", "");
	struct xseg *seg = join(a->segment);
	if (a->have_port)
		check_port(seg, "--port", a->port);
	struct stats_opts o = { .all = !a->have_port, .port = a->port, .json = a->json,
				.prometheus = a->prometheus, .watch_s = (unsigned)a->watch,
				.count = a->count };
	int rc = stats_command(seg, &o);
	xseg_leave(seg);
	return rc;
}

static int cmd_exporter(struct args *a)
{
	if (!a->listen)
		bad("exporter: --listen ADDR:PORT is required%s%s", "", "");
	struct xseg *seg = join(a->segment);
	if (a->have_port)
		check_port(seg, "--port", a->port);
	int rc = exporter_run(seg, a->listen, !a->have_port, a->port);
	xseg_leave(seg);
	return rc;
}

static int cmd_policy(struct args *a)
{
	if (!a->have_port || !a->set)
		bad("policy: --port N and --set POLICY are required%s%s", "", "");
	struct xseg *seg = join(a->segment);
	check_port(seg, "--port", a->port);
	char command[64], reply[64];
	const char *why = "";
	snprintf(command, sizeof(command), "policy %s", a->set);
	int rc = control_call(seg, a->port, command, reply, sizeof(reply), 600, &why);
	xseg_leave(seg);
	if (rc != 0) {
		fprintf(stderr, "xseg: policy: port %u: %s\n", a->port, why);
		return 1;
	}
	return 0;
}

/* A replica cached (--replica) writes back everything it holds, and is an
 * ordinary cache from then on. */
static int cmd_promote(struct args *a)
{
	if (!a->have_port)
		bad("promote: --port N (the replica's) is required%s%s", "", "");
	struct xseg *seg = join(a->segment);
	check_port(seg, "--port", a->port);
	char reply[64];
	const char *why = "";
	unsigned timeout = a->timeout ? (unsigned)a->timeout : 3600;
	int rc = control_call(seg, a->port, a->force ? "promote force" : "promote", reply,
			      sizeof(reply), timeout, &why);
	xseg_leave(seg);
	if (rc == ESTALE) {
		fprintf(stderr, "xseg: promote: port %u: refused: the replica holds dirty data and "
			"its primary's marker on the blocker does not say mirrored (the primary "
			"went on without it, or the marker is missing or unreadable: `xseg stats` "
			"says which); it stays a replica. --force writes its data back anyway, "
			"over whatever newer data the blocker holds\n", a->port);
		return 1;
	}
	if (rc == ENOKEY) {
		fprintf(stderr, "xseg: promote: port %u: refused: the replica knows no primary's "
			"marker (it started without data it can trust, a new or lost persist file "
			"or none, and no primary has reset it since), so it cannot tell whether "
			"its primary answered writes it never got; it stays a replica. --force "
			"promotes it anyway, writing back what it holds (acknowledged writes it "
			"lacks are lost)\n", a->port);
		return 1;
	}
	if (rc != 0) {
		fprintf(stderr, "xseg: promote: port %u: %s\n", a->port, why);
		return 1;
	}
	printf("port %u: promoted; everything it held is on its blocker\n", a->port);
	return 0;
}

/* up, down, status: the file read (a fault in it: exit 2), then the work. */
static int with_file(struct args *a, int (*fn)(const struct path_file *, const char *, unsigned))
{
	struct path_file pf;
	if (path_file_read(a->file, &pf) < 0)
		exit(2);
	int rc = fn(&pf, a->run_dir, a->timeout ? (unsigned)a->timeout : 120);
	path_file_free(&pf);
	return rc;
}

static int up(const struct path_file *pf, const char *run_dir, unsigned timeout_s)
{
	return path_up(pf, run_dir, timeout_s);
}

static int down(const struct path_file *pf, const char *run_dir, unsigned timeout_s)
{
	return path_down(pf, run_dir, timeout_s);
}

static int status(const struct path_file *pf, const char *run_dir, unsigned timeout_s)
{
	(void)timeout_s;
	return path_status(pf, run_dir);
}

static int cmd_up(struct args *a) { return with_file(a, up); }
static int cmd_down(struct args *a) { return with_file(a, down); }
static int cmd_status(struct args *a) { return with_file(a, status); }

static const struct command commands[] = {
	{ "create", cmd_create,
	  "xseg create --segment NAME [--ports N] [--requests N] [--heap SIZE] [--mode OCTAL] [--reuse]",
	  "Makes a segment (defaults: 64 ports, 4096 requests, 256M heap, mode 0600).\n"
	  "SIZE takes K, M, G suffixes. Fails if the segment exists.\n"
	  "--reuse: a segment that exists is taken as it is (exit 0, its sizes and\n"
	  "ports marked dirty on stderr) when no live process serves a port of it,\n"
	  "its dirty marks and routes kept; exit 1 while one does.\n", false },
	{ "destroy", cmd_destroy, "xseg destroy --segment NAME [--if-unused]",
	  "Removes the segment's name; peers that joined keep running on it.\n"
	  "--if-unused: refuses (exit 1, naming the port) while a port is served by\n"
	  "a live process or marked dirty (a cache gone with data its blocker lacks;\n"
	  "the mark makes the path fail closed), as xseg down does.\n", false },
	{ "info", cmd_info, "xseg info --segment NAME [--json] [--all]",
	  "Sizes, free requests, heap use (used, largest free block, buffers) and,\n"
	  "per port that is bound, routed or has queued requests (--all: every\n"
	  "port): owner pid and whether it is alive, next hop, request and reply\n"
	  "queue depths, sleeping threads, requests and replies delivered.\n"
	  "--json: one JSON object.\n", false },
	{ "route", cmd_route, "xseg route --segment NAME --port P (--next Q | --clear)",
	  "--next Q: requests submitted to P go to Q; what Q sends on to P reaches P,\n"
	  "and replies return the way they came. --clear: remove P's route.\n"
	  "Safe while requests flow; a route that closes a cycle is refused.\n", false },
	{ "plug", cmd_plug, "xseg plug --segment NAME --port B --via C",
	  "Puts the peer serving C (e.g. cached) in front of B, online: requests\n"
	  "for B go to C; what C sends to B reaches B.\n", false },
	{ "guard", cmd_guard, "xseg guard --segment NAME --port B --via C --persist FILE",
	  "Before the cache that will serve C starts: if FILE, its persist file,\n"
	  "holds dirty data (cached --persist-inspect), C is marked as a cache gone\n"
	  "dirty and B routed to C, so requests for B fail (EIO) until the cache\n"
	  "serves that data (it takes the mark over; plug it then). Nothing when\n"
	  "FILE holds none. Refused (exit 1) while C is served or B is routed to\n"
	  "another port. What xseg up does for plug= with persist=.\n", false },
	{ "unplug", cmd_unplug, "xseg unplug --segment NAME --via C [--force]",
	  "C writes back all dirty data while still in the path, then every route\n"
	  "to C is cleared; returns when that is done. A cache that is gone while\n"
	  "holding dirty data keeps its routes failing (EIO) rather than let reads\n"
	  "reach older data: restart it on its persist file, or --force: give its\n"
	  "dirty data up (the count is printed) and clear the routes. --force on a\n"
	  "port a live process serves is refused.\n", false },
	{ "stats", cmd_stats,
	  "xseg stats --segment NAME [--port N] [--json | --prometheus | --watch S [--count N]]",
	  "A peer's figures (every peer answers: requests and bytes by op, errors,\n"
	  "in flight, latency percentiles; cached adds its cache's). --port N: that\n"
	  "port's, one 'name: value' per line (or one JSON object), the first line\n"
	  "naming the peer and port that answered; a cache plugged in front of N\n"
	  "passes the question on to N. Without --port: every port a peer serves\n"
	  "(one per process), a line each (--json: a list). --watch S: every S\n"
	  "seconds, per port, IOPS, MiB/s read and written, p99 latency over the\n"
	  "interval, errors/s, in flight; until interrupted, or --count N times.\n"
	  "--prometheus: Prometheus text (xseg_ names, port and peer labels).\n", false },
	{ "exporter", cmd_exporter, "xseg exporter --segment NAME --listen ADDR:PORT [--port N]",
	  "Serves 'xseg stats --prometheus' over HTTP: GET /metrics asks every\n"
	  "port (or --port N) anew. ADDR is numeric (127.0.0.1, [::1], 0.0.0.0).\n"
	  "One client at a time; SIGTERM or SIGINT: exits 0.\n", false },
	{ "policy", cmd_policy,
	  "xseg policy --segment NAME --port N --set writeback|writethrough",
	  "Switches cached's write policy online; switching to writethrough returns\n"
	  "once all dirty data is written.\n", false },
	{ "promote", cmd_promote, "xseg promote --segment NAME --port N [--force] [--timeout S]",
	  "Makes a replica cached (--replica) write everything it holds back to\n"
	  "its blocker; returns 0 once that is done (waits up to --timeout S,\n"
	  "default 3600). It is an ordinary cache from then on. Fence the primary\n"
	  "first: a primary still running would go on mirroring to it. A replica\n"
	  "holding dirty data is promoted only where its primary's marker on the\n"
	  "blocker says mirrored (the primary never answered a write the replica\n"
	  "lacks); one that knows no marker (no reset since it started without\n"
	  "trusted data) is refused even empty; refused: exit 1. --force: promote\n"
	  "anyway.\n", false },
	{ "up", cmd_up, "xseg up FILE [--run-dir DIR] [--timeout S]",
	  "Creates FILE's segment (refused if it exists) and starts its peers in\n"
	  "order, each serving before the next, plugging where plug=B says; returns\n"
	  "0 once all serve. If one fails: its message and the end of its log, all\n"
	  "it started stopped again, the segment removed, exit 1. FILE:\n"
	  "  # comment\n"
	  "  segment NAME [ports=N] [requests=N] [heap=SIZE] [mode=OCTAL]\n"
	  "  peer filed  port=1 dir=/var/lib/xseg/objects\n"
	  "  peer vlmcd  port=2 blocker-port=1 volume=vol1:1G\n"
	  "  peer cached port=3 blocker-port=1 cache-size=1G plug=1\n"
	  "'peer PROGRAM key=value key2' runs 'PROGRAM --key=value --key2' with\n"
	  "--segment, --daemon and --pidfile added (not to be given); port=N or\n"
	  "A-B is required and unique; plug=B (xseg's own) plugs the peer in\n"
	  "front of port B, served by an earlier line; so must be a port named by\n"
	  "blocker-port=, mirror-port=, forward= or target-port= if a line serves\n"
	  "it. Segment defaults as for create. Programs are looked for next to\n"
	  "xseg, then on PATH. Each peer's\n"
	  "pidfile and log (stdout and stderr, appended) are PORT-PROGRAM.pid and\n"
	  ".log in DIR (default /run/xseg/NAME for root, else\n"
	  "${XDG_RUNTIME_DIR:-/tmp}/xseg-NAME). --timeout: longest wait for one\n"
	  "peer to serve, in seconds (120). A bad line: 'FILE:LINE: ...', exit 2.\n",
	  true },
	{ "down", cmd_down, "xseg down FILE [--run-dir DIR] [--timeout S]",
	  "Stops FILE's peers in reverse order, one at a time: SIGTERM, then waits\n"
	  "(--timeout S each, default 120) for it to exit; a cache writes back\n"
	  "every dirty byte and leaves the path first. Then removes the segment. 0\n"
	  "once nothing of FILE runs (also if nothing did); 1 if a peer does not\n"
	  "stop, its log says its stop failed (exit status not 0: a cache that gave\n"
	  "up its write-back) or a cache is gone holding dirty data: what runs\n"
	  "before it is left running, and the segment too. A peer with a live peer\n"
	  "(a cache plugged by hand, or one left running) or a dirty mark in front\n"
	  "of its port, or that a peer left running sends to (blocker-port= ...),\n"
	  "is not stopped (exit 1: unplug or stop that one first). The segment\n"
	  "stays while any port is served or marked dirty.\n", true },
	{ "status", cmd_status, "xseg status FILE [--run-dir DIR]",
	  "One line per peer of FILE: port, program, pid, and whether it serves\n"
	  "(its pidfile names a live process that owns its port, plugged where\n"
	  "plug= says). Exit 0 only if all serve.\n", true },
};
#define NR_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static const struct command *find_command(const char *name)
{
	for (size_t i = 0; i < NR_COMMANDS; i++)
		if (!strcmp(name, commands[i].name))
			return &commands[i];
	return NULL;
}

static void print_usage(FILE *out)
{
	fputs("usage: xseg COMMAND (--segment NAME | FILE) [options]\n\n", out);
	for (size_t i = 0; i < NR_COMMANDS; i++)
		fprintf(out, "  %s\n", commands[i].synopsis);
	fputs("  xseg --version\n"
	      "\n'xseg help COMMAND' or 'xseg COMMAND --help' (-h) says more.\n"
	      "Exit status: 0 ok, 1 failure, 2 bad arguments.\n", out);
}

static int help(int argc, char **argv)
{
	if (argc < 3) {
		print_usage(stdout);
		return 0;
	}
	const struct command *cmd = find_command(argv[2]);
	if (!cmd)
		bad("help: unknown command '%s'%s", argv[2], " (see xseg --help)");
	printf("usage: %s\n%s", cmd->synopsis, cmd->help);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		print_usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help"))
		return help(argc, argv);
	if (!strcmp(argv[1], "--version")) {
		xseg_print_version("xseg");
		return 0;
	}
	const struct command *cmd = find_command(argv[1]);
	if (!cmd)
		bad("unknown command '%s'%s", argv[1], " (see xseg --help)");
	struct args a = { 0 };
	parse(argc - 1, argv + 1, cmd, &a);
	return cmd->fn(&a);
}
