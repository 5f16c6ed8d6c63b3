/*
 * bench-xseg: load generator and verifier.
 *
 * Keeps --iodepth requests in flight from its own port to --target-port,
 * reads or writes --total-size bytes in --block-size blocks, in seq or rand
 * order (rand visits each block once, reproducibly from --seed), verifies
 * what it reads against what a write run with the same seed wrote, and
 * records every request's latency. Targets are objects named
 * <prefix>-<seed>-<index> of --object-size, or with --volume a vlmcd volume.
 *
 * Exit status: 0 when every request was served and nothing was corrupted,
 * 1 when any failed or was corrupted, 2 on bad arguments, 3 when requests
 * were still outstanding at --timeout.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "xseg/version.h"
#include "xseg/xseg.h"
#include "block_data.h"
#include "block_order.h"
#include "../common/latency.h"

#define MAX_IODEPTH     1024u
#define RECEIVE_BATCH   32u
#define ERRORS_SHOWN    5u

struct options {
	const char *segment;
	uint32_t port, target_port;
	bool op_write;
	bool random;
	uint64_t total_size, block_size, object_size;
	uint32_t iodepth;
	uint64_t seed;
	enum verify_mode verify;
	const char *volume;
	const char *prefix;
	bool json, progress;
	uint64_t spin_us;
	uint64_t timeout_s;
	uint64_t runtime_ns;         /* 0: one pass over --total-size */
	uint64_t interval_ns;        /* 0: no per-interval JSON lines */
	const char *unacked;         /* write: list the blocks never acknowledged */
	const char *may_differ;      /* read: such a list, whose blocks may differ */
	const char *differing;       /* read: list the blocks not read back intact */
	uint64_t name_key;           /* hash of --volume or --prefix (locate) */
	/* The --volume, or "PREFIX-SEED-" that each object's index ends:
	 * formatted once, not per request (snprintf was a third of the
	 * client's instructions per request). */
	char name_head[XSEG_MAX_TARGETLEN + 1];
	size_t name_head_len;
};

struct run_stats {
	uint64_t submitted, received, failed, corrupted, bytes;
	uint64_t served;             /* received whole and XR_SERVED: what IOPS count */
	uint64_t differed;           /* --may-differ: blocks that differed there */
	uint64_t errors_seen;
	struct latency_hist hist;
};

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

static void usage(FILE *out)
{
	fprintf(out,
"usage: bench-xseg --segment NAME --port N --target-port N --op read|write\n"
"                  --pattern seq|rand --total-size SIZE --block-size SIZE [options]\n"
"\n"
"Sends requests from --port to --target-port, keeping --iodepth in flight,\n"
"and reports IOPS, bandwidth and latency percentiles.\n"
"\n"
"  --segment NAME        shared-memory segment to join\n"
"  --port N              this client's port (bound for the run)\n"
"  --target-port N       where requests go (a blocker, cached or vlmcd)\n"
"  --op read|write\n"
"  --pattern seq|rand    rand visits each block exactly once, order from --seed\n"
"  --total-size SIZE     bytes in the run (K, M, G suffixes)\n"
"  --block-size SIZE     bytes per request (default 4K)\n"
"  --object-size SIZE    object size (default 4M); a multiple of --block-size\n"
"  --iodepth N           requests in flight (default 1, at most %u)\n"
"  --seed N              names objects and derives the data (default 1)\n"
"  --verify none|meta|full\n"
"                        writes: stamp blocks; reads: check what a write run\n"
"                        with the same seed wrote (full: every byte)\n"
"  --volume NAME         address a vlmcd volume instead of objects\n"
"  --prefix P            object name prefix (default bench)\n"
"  --spin-us N           busy-poll this long before sleeping (default 20)\n"
"  --timeout S           give up on requests outstanding longer (default 30)\n"
"  --progress            a progress line every second (default: on a TTY)\n"
"  --json                last stdout line: one JSON object with the results\n"
"  --runtime S           run S seconds (e.g. 30 or 0.5), pass after pass over\n"
"                        the blocks (--total-size is then the working set)\n"
"  --interval-json S     every S seconds (e.g. 1 or 0.5) a JSON line on stdout:\n"
"                        t, interval, requests, iops, mib_per_s, latency p50/p99\n"
"  --unacked FILE        write: at the end, list in FILE the blocks that no reply\n"
"                        acknowledged (failed, unanswered, not sent)\n"
"  --may-differ FILE     read: blocks FILE lists (a write run's --unacked, same\n"
"                        --block-size, --total-size, --seed and target) may\n"
"                        differ: counted as differed, not corrupted; every\n"
"                        other block must verify\n"
"  --differing FILE      read: at the end, list in FILE the blocks that did not\n"
"                        read back intact (failed, differed, not read): to\n"
"                        compare two reads block by block\n"
"  -h, --help\n"
"  --version\n", MAX_IODEPTH);
}

static void die_arg(const char *opt, const char *val, const char *why)
{
	fprintf(stderr, "bench-xseg: %s: '%s' %s\n", opt, val, why);
	exit(2);
}

static uint64_t arg_size(const char *opt, const char *val)
{
	uint64_t v;
	if (xseg_parse_size(val, &v) < 0 || v == 0)
		die_arg(opt, val, "is not a size (e.g. 4096, 4K, 1M)");
	return v;
}

static uint64_t arg_uint(const char *opt, const char *val, uint64_t max)
{
	uint64_t v;
	if (xseg_parse_uint(val, max, &v) < 0)
		die_arg(opt, val, "is not a number in range");
	return v;
}

/* Seconds, decimals allowed (0.5), from 0.01 to max; returned in ns. */
static uint64_t arg_seconds(const char *opt, const char *val, double max)
{
	char *end;
	errno = 0;
	double v = strtod(val, &end);
	if (errno || end == val || *end || !(v >= 0.01 && v <= max))
		die_arg(opt, val, "is not a number of seconds from 0.01 up");
	return (uint64_t)llround(v * 1e9);
}

static void parse_options(int argc, char **argv, struct options *o)
{
	enum { O_SEG = 256, O_PORT, O_TPORT, O_OP, O_PATTERN, O_TOTAL, O_BS, O_OS,
	       O_DEPTH, O_SEED, O_VERIFY, O_VOLUME, O_PREFIX, O_JSON, O_PROGRESS,
	       O_SPIN, O_TIMEOUT, O_RUNTIME, O_INTERVAL, O_UNACKED, O_MAY_DIFFER, O_DIFFERING,
	       O_HELP, O_VERSION };
	static const struct option longopts[] = {
		{ "segment", required_argument, NULL, O_SEG },
		{ "port", required_argument, NULL, O_PORT },
		{ "target-port", required_argument, NULL, O_TPORT },
		{ "op", required_argument, NULL, O_OP },
		{ "pattern", required_argument, NULL, O_PATTERN },
		{ "total-size", required_argument, NULL, O_TOTAL },
		{ "block-size", required_argument, NULL, O_BS },
		{ "object-size", required_argument, NULL, O_OS },
		{ "iodepth", required_argument, NULL, O_DEPTH },
		{ "seed", required_argument, NULL, O_SEED },
		{ "verify", required_argument, NULL, O_VERIFY },
		{ "volume", required_argument, NULL, O_VOLUME },
		{ "prefix", required_argument, NULL, O_PREFIX },
		{ "json", no_argument, NULL, O_JSON },
		{ "progress", no_argument, NULL, O_PROGRESS },
		{ "spin-us", required_argument, NULL, O_SPIN },
		{ "timeout", required_argument, NULL, O_TIMEOUT },
		{ "runtime", required_argument, NULL, O_RUNTIME },
		{ "interval-json", required_argument, NULL, O_INTERVAL },
		{ "unacked", required_argument, NULL, O_UNACKED },
		{ "may-differ", required_argument, NULL, O_MAY_DIFFER },
		{ "differing", required_argument, NULL, O_DIFFERING },
		{ "help", no_argument, NULL, O_HELP },
		{ "version", no_argument, NULL, O_VERSION },
		{ NULL, 0, NULL, 0 },
	};
	bool have_port = false, have_tport = false, have_op = false, have_pattern = false;
	int c;

	*o = (struct options){ .block_size = 4096, .object_size = 4u << 20, .iodepth = 1,
			       .seed = 1, .prefix = "bench", .spin_us = 20, .timeout_s = 30,
			       .progress = isatty(STDERR_FILENO) };
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case O_SEG: o->segment = optarg; break;
		case O_PORT: o->port = (uint32_t)arg_uint("--port", optarg, XSEG_MAX_PORTS); have_port = true; break;
		case O_TPORT: o->target_port = (uint32_t)arg_uint("--target-port", optarg, XSEG_MAX_PORTS); have_tport = true; break;
		case O_OP:
			if (!strcmp(optarg, "read")) o->op_write = false;
			else if (!strcmp(optarg, "write")) o->op_write = true;
			else die_arg("--op", optarg, "is not read or write");
			have_op = true;
			break;
		case O_PATTERN:
			if (!strcmp(optarg, "seq")) o->random = false;
			else if (!strcmp(optarg, "rand")) o->random = true;
			else die_arg("--pattern", optarg, "is not seq or rand");
			have_pattern = true;
			break;
		case O_TOTAL: o->total_size = arg_size("--total-size", optarg); break;
		case O_BS: o->block_size = arg_size("--block-size", optarg); break;
		case O_OS: o->object_size = arg_size("--object-size", optarg); break;
		case O_DEPTH: o->iodepth = (uint32_t)arg_uint("--iodepth", optarg, MAX_IODEPTH);
			if (!o->iodepth) die_arg("--iodepth", optarg, "must be at least 1");
			break;
		case O_SEED: o->seed = arg_uint("--seed", optarg, UINT32_MAX); break;
		case O_VERIFY:
			if (!strcmp(optarg, "none")) o->verify = VERIFY_NONE;
			else if (!strcmp(optarg, "meta")) o->verify = VERIFY_META;
			else if (!strcmp(optarg, "full")) o->verify = VERIFY_FULL;
			else die_arg("--verify", optarg, "is not none, meta or full");
			break;
		case O_VOLUME: o->volume = optarg; break;
		case O_PREFIX: o->prefix = optarg; break;
		case O_JSON: o->json = true; break;
		case O_PROGRESS: o->progress = true; break;
		case O_SPIN: o->spin_us = arg_uint("--spin-us", optarg, 1000000); break;
		case O_TIMEOUT: o->timeout_s = arg_uint("--timeout", optarg, 86400);
			if (!o->timeout_s) die_arg("--timeout", optarg, "must be at least 1");
			break;
		case O_RUNTIME: o->runtime_ns = arg_seconds("--runtime", optarg, 86400); break;
		case O_INTERVAL: o->interval_ns = arg_seconds("--interval-json", optarg, 3600); break;
		case O_UNACKED: o->unacked = optarg; break;
		case O_MAY_DIFFER: o->may_differ = optarg; break;
		case O_DIFFERING: o->differing = optarg; break;
		case 'h':
		case O_HELP: usage(stdout); exit(0);
		case O_VERSION: xseg_print_version("bench-xseg"); exit(0);
		default:
			fprintf(stderr, "bench-xseg: unknown or incomplete option '%s' (see --help)\n",
				argv[optind - 1]);
			exit(2);
		}
	}
	if (optind < argc)
		die_arg("argument", argv[optind], "is not an option (see --help)");
	if (!o->segment) { fprintf(stderr, "bench-xseg: --segment is required\n"); exit(2); }
	if (!have_port) { fprintf(stderr, "bench-xseg: --port is required\n"); exit(2); }
	if (!have_tport) { fprintf(stderr, "bench-xseg: --target-port is required\n"); exit(2); }
	if (!have_op) { fprintf(stderr, "bench-xseg: --op is required\n"); exit(2); }
	if (!have_pattern) { fprintf(stderr, "bench-xseg: --pattern is required\n"); exit(2); }
	if (!o->total_size) { fprintf(stderr, "bench-xseg: --total-size is required\n"); exit(2); }
	if (o->total_size % o->block_size) {
		fprintf(stderr, "bench-xseg: --total-size %" PRIu64 " is not a multiple of --block-size %" PRIu64 "\n",
			o->total_size, o->block_size);
		exit(2);
	}
	if (!o->volume && o->object_size % o->block_size) {
		fprintf(stderr, "bench-xseg: --object-size %" PRIu64 " is not a multiple of --block-size %" PRIu64 "\n",
			o->object_size, o->block_size);
		exit(2);
	}
	if (o->volume && (!*o->volume || strlen(o->volume) > XSEG_MAX_TARGETLEN))
		die_arg("--volume", o->volume, "is empty or too long");
	if (strlen(o->prefix) > XSEG_MAX_TARGETLEN - 42)
		die_arg("--prefix", o->prefix, "is too long");
	if (o->port == o->target_port) {
		fprintf(stderr, "bench-xseg: --port and --target-port are both %u\n", o->port);
		exit(2);
	}
	if (o->unacked && !o->op_write)
		die_arg("--unacked", o->unacked, "is for --op write");
	if (o->may_differ && (o->op_write || o->verify == VERIFY_NONE))
		die_arg("--may-differ", o->may_differ, "is for --op read with --verify");
	if (o->differing && (o->op_write || o->verify == VERIFY_NONE))
		die_arg("--differing", o->differing, "is for --op read with --verify");
	o->name_key = block_data_name_key(o->volume ? o->volume : o->prefix);
	if (o->volume)
		snprintf(o->name_head, sizeof(o->name_head), "%s", o->volume);
	else
		snprintf(o->name_head, sizeof(o->name_head), "%s-%" PRIu64 "-", o->prefix, o->seed);
	o->name_head_len = strlen(o->name_head);
}

/* Where block `block` lives: target name, offset, and the object number
 * its data derives from: the object's index plus block_data_name_key of
 * the volume's name or the prefix. */
struct block_addr {
	char name[XSEG_MAX_TARGETLEN + 1];
	uint64_t object, offset;
};

/* "PREFIX-SEED-" then INDEX in decimal (--prefix leaves room for both). */
static void object_name(const struct options *o, uint64_t index, char *name)
{
	char digits[20];
	size_t n = 0;
	do
		digits[n++] = (char)('0' + index % 10);
	while ((index /= 10) != 0);
	memcpy(name, o->name_head, o->name_head_len);
	for (size_t i = 0; i < n; i++)
		name[o->name_head_len + i] = digits[n - 1 - i];
	name[o->name_head_len + n] = '\0';
}

static void locate(const struct options *o, uint64_t block, struct block_addr *a)
{
	uint64_t pos = block * o->block_size;
	if (o->volume) {
		memcpy(a->name, o->name_head, o->name_head_len + 1);
		a->object = o->name_key;
		a->offset = pos;
	} else {
		uint64_t index = pos / o->object_size;
		a->object = o->name_key + index;
		a->offset = pos % o->object_size;
		object_name(o, index, a->name);
	}
}

/* Per in-flight slot: which block the request carries. */
struct slot {
	struct xseg_request *req;
	uint64_t block;
	uint64_t started_ns;
};

#define SLICES 20

struct bench {
	struct options opt;
	struct xseg *seg;
	struct block_order order;
	uint64_t blocks;
	uint64_t next_step;          /* next index into the order */
	struct slot *slots;
	uint32_t free_slots[MAX_IODEPTH];
	uint32_t nfree;
	uint32_t in_flight;
	struct run_stats st;
	/* When each twentieth of the blocks was answered, and how many had
	 * been served by then: throughput over the run (a cache filling up,
	 * a flusher falling behind). */
	uint64_t start_ns;
	uint64_t slice_end_ns[SLICES];
	uint64_t slice_served[SLICES];
	unsigned slices_done;
	/* --runtime: submit until then (0: one pass over the blocks). */
	uint64_t deadline_ns;
	bool time_up;
	/* --interval-json: this interval's latencies and where it began. */
	struct latency_hist interval_hist;
	uint64_t interval_start_ns, interval_received, interval_failed, interval_served;
	/* One bit per block: --unacked, acknowledged by a reply (in any
	 * pass: each writes the same data); --may-differ, listed there. */
	uint8_t *acked, *may_differ;
	uint64_t unacked;            /* blocks --unacked listed */
	uint64_t unanswered;         /* blocks no reply answered: counted failed */
	uint8_t *verified;           /* --differing: read back intact */
};

static bool bit_get(const uint8_t *map, uint64_t i)
{
	return map[i / 8] >> (i % 8) & 1;
}

static void bit_set(uint8_t *map, uint64_t i)
{
	map[i / 8] |= (uint8_t)(1u << (i % 8));
}

static void free_maps(struct bench *b)
{
	free(b->acked);
	free(b->may_differ);
	free(b->verified);
}

/* The run a list is of: its geometry, and the seed and target whose data
 * it describes (a list of another seed's run must not excuse this one's
 * blocks). The target (a --volume or "PREFIX-SEED-") ends the line. */
#define BLOCKS_HEADER "bench-xseg blocks block_size %" PRIu64 " blocks %" PRIu64 " seed %" PRIu64 " target "

/*
 * --unacked, --differing: a list of blocks, "FIRST COUNT" lines after a
 * header with the run's geometry: those whose bit in `map` is `set`.
 * Written to FILE.tmp and renamed, so FILE is whole or not there. The
 * number of blocks listed, or -1 (said on stderr).
 */
static int64_t write_blocks(const struct bench *b, const char *opt, const char *path,
			    const uint8_t *map, bool set)
{
	size_t len = strlen(path) + 5;
	char *tmp = malloc(len);
	FILE *f = tmp ? (snprintf(tmp, len, "%s.tmp", path), fopen(tmp, "w")) : NULL;
	if (!f) {
		fprintf(stderr, "bench-xseg: %s %s: %s\n", opt, path, strerror(errno));
		free(tmp);
		return -1;
	}
	fprintf(f, BLOCKS_HEADER "%s\n", b->opt.block_size, b->blocks, b->opt.seed,
		b->opt.name_head);
	uint64_t listed = 0;
	for (uint64_t i = 0; i < b->blocks;) {
		uint64_t first = i;
		while (i < b->blocks && bit_get(map, i) == set)
			i++;
		if (i > first)
			fprintf(f, "%" PRIu64 " %" PRIu64 "\n", first, i - first);
		listed += i - first;
		while (i < b->blocks && bit_get(map, i) != set)
			i++;
	}
	int bad = fflush(f) || fsync(fileno(f)) || ferror(f);
	bad |= fclose(f) != 0;
	if (bad || rename(tmp, path) < 0) {
		fprintf(stderr, "bench-xseg: %s %s: %s\n", opt, path, strerror(errno));
		unlink(tmp);
		free(tmp);
		return -1;
	}
	free(tmp);
	return (int64_t)listed;
}

/* --may-differ: reads a list --unacked wrote for this run's geometry,
 * seed and target; exits 2 when it cannot, or when the list is another
 * run's. */
static void read_may_differ(struct bench *b)
{
	const char *path = b->opt.may_differ;
	FILE *f = fopen(path, "r");
	uint64_t bs, n, seed, first, count;
	char line[128 + XSEG_MAX_TARGETLEN];
	int target_at = -1;
	if (!f)
		die_arg("--may-differ", path, strerror(errno));
	if (!fgets(line, sizeof(line), f) ||
	    sscanf(line, "bench-xseg blocks block_size %" SCNu64 " blocks %" SCNu64 " seed %" SCNu64
		   " target %n", &bs, &n, &seed, &target_at) != 3 || target_at < 0)
		die_arg("--may-differ", path, "is not a list that --unacked wrote (this version's)");
	if (bs != b->opt.block_size || n != b->blocks)
		die_arg("--may-differ", path, "lists blocks of another --block-size or --total-size");
	line[strcspn(line, "\n")] = '\0';
	if (seed != b->opt.seed || strcmp(line + target_at, b->opt.name_head))
		die_arg("--may-differ", path, "lists blocks of another --seed, --volume or --prefix");
	while (fgets(line, sizeof(line), f)) {
		char end;
		if (sscanf(line, "%" SCNu64 " %" SCNu64 "%c", &first, &count, &end) != 3 ||
		    end != '\n' || !count || first >= n || count > n - first)
			die_arg("--may-differ", path, "has a line that is not FIRST COUNT in the run");
		for (uint64_t i = first; i < first + count; i++)
			bit_set(b->may_differ, i);
	}
	if (ferror(f))
		die_arg("--may-differ", path, strerror(errno));
	fclose(f);
}

/* Blocks left to submit: the pass's, or with --runtime until time is up. */
static bool more_to_submit(const struct bench *b)
{
	return b->deadline_ns ? !b->time_up : b->next_step < b->blocks;
}

static int submit_block(struct bench *b, uint32_t slot_no)
{
	struct slot *s = &b->slots[slot_no];
	struct xseg_request *req = s->req;
	struct block_addr a;

	s->block = block_order_at(&b->order, b->next_step % b->blocks);
	locate(&b->opt, s->block, &a);
	if (xseg_prep_target(b->seg, req, a.name, b->opt.block_size) < 0) {
		fprintf(stderr, "bench-xseg: %s\n", xseg_last_error());
		return -1;
	}
	req->op = b->opt.op_write ? X_WRITE : X_READ;
	req->flags = 0;
	req->offset = a.offset;
	req->size = b->opt.block_size;
	req->serviced = 0;
	req->result = XR_NONE;
	req->error = 0;
	req->priv = slot_no;
	if (b->opt.op_write)
		block_data_fill(b->opt.verify, xseg_get_data(b->seg, req), b->opt.block_size,
				b->opt.seed, a.object, a.offset);
	else   /* the buffer may hold this very block already (a write run's) */
		block_data_poison(b->opt.verify, xseg_get_data(b->seg, req), b->opt.block_size);
	s->started_ns = xseg_now_ns();
	int rc = xseg_submit(b->seg, req, b->opt.port, b->opt.target_port);
	if (rc < 0) {
		fprintf(stderr, "bench-xseg: submit to port %u: %s\n", b->opt.target_port,
			xseg_last_error());
		return -1;
	}
	b->next_step++;
	b->st.submitted++;
	b->in_flight++;
	return 0;
}

/* --runtime: closes the twentieths of the time that ended by `now`, each
 * at its own end with what was answered by then. Called before a reply is
 * counted and at the end of the run: a twentieth with no reply in it, the
 * last one included, is still there (and still 0). */
static void close_slices(struct bench *b, uint64_t now)
{
	uint64_t runtime_ns = b->opt.runtime_ns;
	while (b->slices_done < SLICES &&
	       (now - b->start_ns) * SLICES >= (b->slices_done + 1) * runtime_ns) {
		b->slice_served[b->slices_done] = b->st.served;
		b->slices_done++;
		b->slice_end_ns[b->slices_done - 1] =
			b->start_ns + b->slices_done * runtime_ns / SLICES;
	}
}

/* A served read: its data against what the write run wrote there. */
static void check_read(struct bench *b, struct xseg_request *req, uint64_t block)
{
	struct block_addr a;
	locate(&b->opt, block, &a);
	if (!block_data_check(b->opt.verify, xseg_get_data(b->seg, req), b->opt.block_size,
			      b->opt.seed, a.object, a.offset)) {
		if (b->verified)
			bit_set(b->verified, block);
		return;
	}
	if (b->may_differ && bit_get(b->may_differ, block)) {
		b->st.differed++;   /* never acknowledged: may differ */
		return;
	}
	b->st.corrupted++;
	if (b->st.errors_seen++ < ERRORS_SHOWN)
		fprintf(stderr, "bench-xseg: corrupted block: %s offset %" PRIu64 "\n", a.name,
			a.offset);
}

/* `now`: when the batch holding this reply was taken in, not when its
 * turn in the batch came: the checks of the replies before it (a 4M
 * block's --verify full is milliseconds) are the client's time, not the
 * request's. */
static void complete(struct bench *b, struct xseg_request *req, uint64_t now)
{
	uint32_t slot_no = (uint32_t)req->priv;
	struct slot *s = &b->slots[slot_no];
	/* Against what was asked, not the reply's size: the server may write
	 * that one, and a block served in part is not served. */
	uint64_t size = b->opt.block_size;
	bool served = req->result == XR_SERVED && req->serviced == size;

	latency_record(&b->st.hist, now - s->started_ns);
	if (b->opt.interval_ns)
		latency_record(&b->interval_hist, now - s->started_ns);
	if (b->deadline_ns)
		close_slices(b, now);
	b->st.received++;
	b->st.served += served;
	if (!b->deadline_ns) {
		while (b->slices_done < SLICES &&
		       b->st.received * SLICES >= (b->slices_done + 1) * b->blocks) {
			uint64_t upto = (uint64_t)(b->slices_done + 1) * b->blocks / SLICES;
			b->slice_served[b->slices_done] = upto < b->st.served ? upto : b->st.served;
			b->slice_end_ns[b->slices_done++] = now;
		}
	}
	b->in_flight--;
	if (!served) {
		b->st.failed++;
		if (b->st.errors_seen++ < ERRORS_SHOWN) {
			struct block_addr a;
			locate(&b->opt, s->block, &a);
			fprintf(stderr, "bench-xseg: %s %s offset %" PRIu64 " failed: %s (served %" PRIu64 " of %" PRIu64 ")\n",
				xseg_op_name(req->op), a.name, a.offset,
				req->result == XR_FAILED ? strerror(req->error) : "short or unanswered",
				req->serviced, size);
		}
	} else {
		b->st.bytes += size;
		if (b->acked)
			bit_set(b->acked, s->block);
		if (!b->opt.op_write && b->opt.verify != VERIFY_NONE)
			check_read(b, req, s->block);
	}
	b->free_slots[b->nfree++] = slot_no;
}

static void print_progress(struct bench *b, uint64_t start_ns, uint64_t *last_ns,
			   uint64_t *last_served)
{
	uint64_t now = xseg_now_ns();
	if (now - *last_ns < 1000000000ull)
		return;
	double dt = (double)(now - *last_ns) / 1e9;
	double iops = (double)(b->st.served - *last_served) / dt;
	fprintf(stderr, "[%5.1fs] %3.0f%%  %" PRIu64 "/%" PRIu64 " requests  %.0f IOPS  %.1f MiB/s  failed %" PRIu64 "  corrupted %" PRIu64 "\n",
		(double)(now - start_ns) / 1e9, 100.0 * (double)b->st.received / (double)b->blocks,
		b->st.received, b->blocks, iops,
		iops * (double)b->opt.block_size / (1 << 20), b->st.failed, b->st.corrupted);
	*last_ns = now;
	*last_served = b->st.served;
}

/* --interval-json: one JSON line for the requests answered since the last
 * one (at the end of the run also a shorter last interval). */
static void print_interval(struct bench *b, uint64_t now, bool last)
{
	if (!last && now - b->interval_start_ns < b->opt.interval_ns)
		return;
	uint64_t n = b->st.received - b->interval_received;
	if (last && n == 0)
		return;
	double dt = (double)(now - b->interval_start_ns) / 1e9;
	double iops = dt > 0 ? (double)(b->st.served - b->interval_served) / dt : 0;
	printf("{\"interval\":true,\"t\":%.3f,\"dt\":%.3f,\"requests\":%" PRIu64 ","
	       "\"failed\":%" PRIu64 ",\"iops\":%.1f,\"mib_per_s\":%.3f,"
	       "\"lat_us_p50\":%.2f,\"lat_us_p99\":%.2f}\n",
	       (double)(now - b->start_ns) / 1e9, dt, n, b->st.failed - b->interval_failed,
	       iops, iops * (double)b->opt.block_size / (1 << 20),
	       n ? latency_percentile(&b->interval_hist, 50.0) / 1e3 : 0.0,
	       n ? latency_percentile(&b->interval_hist, 99.0) / 1e3 : 0.0);
	fflush(stdout);
	latency_init(&b->interval_hist);
	b->interval_start_ns = now;
	b->interval_received = b->st.received;
	b->interval_failed = b->st.failed;
	b->interval_served = b->st.served;
}

/* Which slots hold a request that is out (not on the free list). */
static void busy_slots(const struct bench *b, bool busy[MAX_IODEPTH])
{
	for (uint32_t i = 0; i < b->opt.iodepth; i++)
		busy[i] = true;
	for (uint32_t i = 0; i < b->nfree; i++)
		busy[b->free_slots[i]] = false;
}

/* Oldest outstanding request's age, for the no-hang guarantee. */
static uint64_t oldest_age_ns(struct bench *b, uint64_t now)
{
	uint64_t oldest = 0;
	bool busy[MAX_IODEPTH];
	busy_slots(b, busy);
	for (uint32_t i = 0; i < b->opt.iodepth; i++)
		if (busy[i] && now - b->slots[i].started_ns > oldest)
			oldest = now - b->slots[i].started_ns;
	return oldest;
}

/* Giving up at --timeout: each request still out took at least its age so
 * far, and the latency figures say so (else a run whose every request hung
 * reported lat_us_max 0, and one stuck request was not in p99 or max). */
static void record_given_up(struct bench *b, uint64_t now)
{
	bool busy[MAX_IODEPTH];
	busy_slots(b, busy);
	for (uint32_t i = 0; i < b->opt.iodepth; i++) {
		if (!busy[i])
			continue;
		latency_record(&b->st.hist, now - b->slots[i].started_ns);
		if (b->opt.interval_ns)
			latency_record(&b->interval_hist, now - b->slots[i].started_ns);
	}
}

/* How long to sleep for replies: 200 ms, less when an interval line or
 * the end of --runtime comes sooner. */
static uint64_t poll_timeout_ns(const struct bench *b)
{
	uint64_t now = xseg_now_ns(), wait = 200000000ull;
	uint64_t soon[2] = {
		b->opt.interval_ns ? b->interval_start_ns + b->opt.interval_ns : 0,
		b->deadline_ns && !b->time_up ? b->deadline_ns : 0,
	};
	for (int i = 0; i < 2; i++)
		if (soon[i] && soon[i] < now + wait)      /* 1 ms at least */
			wait = soon[i] > now + 1000000ull ? soon[i] - now : 1000000ull;
	return wait;
}

static int run(struct bench *b, double *seconds)
{
	struct xseg_request *done[RECEIVE_BATCH];
	uint64_t start = xseg_now_ns(), last = start, last_served = 0;
	b->start_ns = start;
	b->interval_start_ns = start;
	if (b->opt.runtime_ns)
		b->deadline_ns = start + b->opt.runtime_ns;
	uint64_t spin_ns = b->opt.spin_us * 1000, timeout_ns = b->opt.timeout_s * 1000000000ull;
	int rc = 0;

	while (b->st.received < b->st.submitted || (!interrupted && more_to_submit(b))) {
		if (b->deadline_ns || b->opt.interval_ns) {
			uint64_t now = xseg_now_ns();
			if (b->deadline_ns && now >= b->deadline_ns)
				b->time_up = true;
			if (b->opt.interval_ns)
				print_interval(b, now, false);
		}
		while (!interrupted && b->nfree && more_to_submit(b)) {
			uint32_t slot_no = b->free_slots[--b->nfree];
			if (submit_block(b, slot_no) < 0) {
				b->free_slots[b->nfree++] = slot_no;
				interrupted = 1;
				rc = 1;
			}
		}
		int n = xseg_receive(b->seg, b->opt.port, done, RECEIVE_BATCH);
		uint64_t taken = n > 0 ? xseg_now_ns() : 0;
		for (int i = 0; i < n; i++)
			complete(b, done[i], taken);
		if (n > 0)
			continue;
		if (!b->in_flight)   /* --runtime ran out just now: no reply to wait for */
			continue;
		if (b->opt.progress)
			print_progress(b, start, &last, &last_served);
		xseg_poll(b->seg, b->opt.port, spin_ns, poll_timeout_ns(b));
		uint64_t now = xseg_now_ns();
		if (b->in_flight && oldest_age_ns(b, now) > timeout_ns) {
			fprintf(stderr, "bench-xseg: %u requests unanswered after %" PRIu64 " s: giving up\n",
				b->in_flight, b->opt.timeout_s);
			record_given_up(b, now);
			rc = 3;
			break;
		}
	}
	uint64_t end = xseg_now_ns();
	if (b->deadline_ns)
		close_slices(b, end);
	if (b->opt.interval_ns)
		print_interval(b, end, true);
	*seconds = (double)(end - start) / 1e9;
	return rc;
}

/* IOPS (requests served) in each twentieth of the run, as a JSON array. */
static void print_slices(const struct bench *b)
{
	uint64_t prev = b->start_ns;
	printf("[");
	for (unsigned i = 0; i < b->slices_done; i++) {
		uint64_t before = i ? b->slice_served[i - 1] : 0;
		uint64_t upto = b->slice_served[i];
		double dt = (double)(b->slice_end_ns[i] - prev) / 1e9;
		printf("%s%.1f", i ? "," : "", dt > 0 ? (double)(upto - before) / dt : 0.0);
		prev = b->slice_end_ns[i];
	}
	printf("]");
}

static void report(const struct bench *b, double seconds)
{
	const struct options *o = &b->opt;
	double iops = seconds > 0 ? (double)b->st.served / seconds : 0;
	double mib = seconds > 0 ? (double)b->st.bytes / seconds / (1 << 20) : 0;
	double p50 = latency_percentile(&b->st.hist, 50.0) / 1e3;
	double p99 = latency_percentile(&b->st.hist, 99.0) / 1e3;
	double p999 = latency_percentile(&b->st.hist, 99.9) / 1e3;
	double max = (double)latency_max(&b->st.hist) / 1e3;
	const char *op = o->op_write ? "write" : "read", *pat = o->random ? "rand" : "seq";

	printf("bench-xseg: %s %s, block %" PRIu64 ", iodepth %u, %s %s\n", op, pat,
	       o->block_size, o->iodepth, o->volume ? "volume" : "objects",
	       o->volume ? o->volume : o->prefix);
	if (o->runtime_ns)
		printf("  requests   %" PRIu64 " answered in --runtime %g s (%.2f passes over %" PRIu64 " blocks), %" PRIu64 " failed, %" PRIu64 " corrupted\n",
		       b->st.received, (double)o->runtime_ns / 1e9, (double)b->st.received / (double)b->blocks,
		       b->blocks, b->st.failed, b->st.corrupted);
	else
		printf("  requests   %" PRIu64 " of %" PRIu64 " answered, %" PRIu64 " failed (%" PRIu64
		       " of them unanswered or not sent), %" PRIu64 " corrupted%s\n",
		       b->st.received, b->blocks, b->st.failed, b->unanswered, b->st.corrupted,
		       b->st.received < b->blocks ? " (run cut short)" : "");
	printf("  time       %.3f s\n", seconds);
	printf("  throughput %.0f IOPS, %.2f MiB/s\n", iops, mib);
	printf("  latency us p50 %.1f  p99 %.1f  p99.9 %.1f  max %.1f\n", p50, p99, p999, max);
	if (o->unacked)
		printf("  unacked    %" PRIu64 " blocks no reply acknowledged, listed in %s\n",
		       b->unacked, o->unacked);
	if (o->may_differ)
		printf("  differed   %" PRIu64 " blocks, all listed in %s (never acknowledged)\n",
		       b->st.differed, o->may_differ);
	if (o->json) {
		printf("{\"op\":\"%s\",\"pattern\":\"%s\",\"block_size\":%" PRIu64 ",\"iodepth\":%u,"
		       "\"requests\":%" PRIu64 ",\"failed\":%" PRIu64 ",\"corrupted\":%" PRIu64 ","
		       "\"seconds\":%.6f,\"iops\":%.1f,\"mib_per_s\":%.3f,\"lat_us_p50\":%.2f,"
		       "\"lat_us_p99\":%.2f,\"lat_us_p999\":%.2f,\"lat_us_max\":%.2f,\"verify\":\"%s\","
		       "\"unanswered\":%" PRIu64 ",\"slice_iops\":",
		       op, pat, o->block_size, o->iodepth, b->st.received, b->st.failed,
		       b->st.corrupted, seconds, iops, mib, p50, p99, p999, max,
		       o->verify == VERIFY_FULL ? "full" : o->verify == VERIFY_META ? "meta" : "none",
		       b->unanswered);
		print_slices(b);
		if (o->unacked)
			printf(",\"unacked\":%" PRIu64, b->unacked);
		if (o->may_differ)
			printf(",\"differed\":%" PRIu64, b->st.differed);
		printf("}\n");
	}
	fflush(stdout);
}

int main(int argc, char **argv)
{
	struct bench b;
	double seconds = 0;
	int rc;

	memset(&b, 0, sizeof(b));
	parse_options(argc, argv, &b.opt);
	b.blocks = b.opt.total_size / b.opt.block_size;
	block_order_init(&b.order, b.blocks, b.opt.random, b.opt.seed);
	latency_init(&b.st.hist);
	latency_init(&b.interval_hist);
	uint8_t **maps[3] = { b.opt.unacked ? &b.acked : NULL,
			      b.opt.may_differ ? &b.may_differ : NULL,
			      b.opt.differing ? &b.verified : NULL };
	for (int i = 0; i < 3; i++)
		if (maps[i] && !(*maps[i] = calloc(b.blocks / 8 + 1, 1))) {
			fprintf(stderr, "bench-xseg: out of memory\n");
			free_maps(&b);
			return 1;
		}
	if (b.opt.may_differ)
		read_may_differ(&b);

	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	if (xseg_join(b.opt.segment, &b.seg) < 0) {
		fprintf(stderr, "bench-xseg: %s\n", xseg_last_error());
		free_maps(&b);
		return 1;
	}
	if (xseg_bind_port(b.seg, b.opt.port) < 0) {
		fprintf(stderr, "bench-xseg: %s\n", xseg_last_error());
		xseg_leave(b.seg);
		free_maps(&b);
		return 1;
	}
	uint32_t depth = b.opt.iodepth;
	if (depth > b.blocks)
		depth = (uint32_t)b.blocks;
	b.opt.iodepth = depth;
	struct xseg_segment_info si;
	if (xseg_segment_info(b.seg, &si) == 0 && depth > si.nr_requests) {
		fprintf(stderr, "bench-xseg: --iodepth %u needs %u requests; segment '%s' has "
			"%u in all (xseg create --requests)\n", depth, depth, b.opt.segment,
			si.nr_requests);
		xseg_leave(b.seg);
		free_maps(&b);
		return 2;
	}
	b.slots = calloc(depth, sizeof(*b.slots));
	if (!b.slots) {
		fprintf(stderr, "bench-xseg: out of memory\n");
		xseg_leave(b.seg);
		free_maps(&b);
		return 1;
	}
	for (uint32_t i = 0; i < depth; i++) {
		b.slots[i].req = xseg_get_request(b.seg, b.opt.port);
		if (!b.slots[i].req) {
			fprintf(stderr, "bench-xseg: cannot get %u requests: %s\n", depth,
				xseg_last_error());
			xseg_leave(b.seg);   /* puts back the ones it got */
			free(b.slots);
			free_maps(&b);
			return 1;
		}
		b.free_slots[b.nfree++] = depth - 1 - i;
	}

	rc = run(&b, &seconds);
	/* A block no reply answered (given up at --timeout, or never sent after
	 * a failed submit or an interrupt) failed: a run that checked less than
	 * it was asked to must not read "failed 0" (tests read the JSON). */
	if (b.opt.runtime_ns)
		b.unanswered = b.in_flight + (rc == 1);   /* + the one whose submit failed */
	else
		b.unanswered = b.blocks - b.st.received;
	b.st.failed += b.unanswered;
	int64_t listed;
	if (b.opt.unacked) {
		listed = write_blocks(&b, "--unacked", b.opt.unacked, b.acked, false);
		b.unacked = listed < 0 ? 0 : (uint64_t)listed;
		rc = listed < 0 && !rc ? 1 : rc;
	}
	if (b.opt.differing) {
		listed = write_blocks(&b, "--differing", b.opt.differing, b.verified, false);
		rc = listed < 0 && !rc ? 1 : rc;
	}
	report(&b, seconds);
	if (rc != 3)     /* requests still out belong to their holders now */
		for (uint32_t i = 0; i < depth; i++)
			xseg_put_request(b.seg, b.slots[i].req);
	/* Replies still on their way (rc 3) are dropped when they arrive:
	 * the port's next owner never sees them (xseg.h, epochs). */
	xseg_leave(b.seg);
	free(b.slots);
	free_maps(&b);
	if (rc)
		return rc;
	if (interrupted && b.st.received < b.blocks)
		return 1;
	return (b.st.failed || b.st.corrupted) ? 1 : 0;
}
