/*
 * xreq: submits one request of any op and prints its reply on one line.
 * For tests and operators: INFO, DELETE, COPY, FLUSH, CONTROL, PING have no
 * load generator, and this shows what a path answers to each.
 *
 *   xreq --segment S --port N --target-port N --op OP [--target NAME] ...
 *
 * Output: "SERVED serviced=N [size=N] [data='...']" or
 * "FAILED error=N (text)"; exit 0 served, 1 failed, 2 bad argument,
 * 3 no answer within --timeout.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xseg/version.h"
#include "xseg/xseg.h"

struct args {
	const char *segment, *target, *data, *src;
	uint64_t port, target_port, offset, size, timeout_s;
	int op;
	int have_port, have_target_port;
};

static void usage(FILE *out)
{
	fprintf(out,
"usage: xreq --segment NAME --port N --target-port N --op OP [options]\n"
"Submits one request from --port (bound for the call) to --target-port and\n"
"prints the reply: SERVED serviced=N [size=N] [data='...'] or FAILED error=N (text).\n"
"  --op OP            ping|read|write|flush|delete|info|copy|control\n"
"  --target NAME      object (or volume) name (default empty)\n"
"  --offset N         byte offset (default 0)\n"
"  --size N           bytes (READ/WRITE; default: the data's length)\n"
"  --data TEXT        WRITE: repeated to fill --size; CONTROL: the command\n"
"  --src NAME         COPY: the source object (the target is the destination)\n"
"  --timeout S        give up after S seconds (default 10; exit 3)\n"
"  -h, --help         this text\n"
"  --version          the version and segment layout\n"
"Exit: 0 served, 1 failed, 2 bad argument, 3 no answer in time.\n");
}

static void die_arg(const char *opt, const char *val, const char *why)
{
	fprintf(stderr, "xreq: %s: '%s' %s\n", opt, val, why);
	exit(2);
}

static uint64_t arg_size(const char *opt, const char *val)
{
	uint64_t v;
	if (xseg_parse_size(val, &v) < 0)
		die_arg(opt, val, "is not a size (K, M, G suffixes)");
	return v;
}

static void parse(int argc, char **argv, struct args *a)
{
	enum { O_SEG = 1, O_PORT, O_TPORT, O_OP, O_TARGET, O_OFF, O_SIZE, O_DATA, O_SRC, O_TMO, O_VERSION };
	static const struct option opts[] = {
		{ "segment", required_argument, NULL, O_SEG },
		{ "port", required_argument, NULL, O_PORT },
		{ "target-port", required_argument, NULL, O_TPORT },
		{ "op", required_argument, NULL, O_OP },
		{ "target", required_argument, NULL, O_TARGET },
		{ "offset", required_argument, NULL, O_OFF },
		{ "size", required_argument, NULL, O_SIZE },
		{ "data", required_argument, NULL, O_DATA },
		{ "src", required_argument, NULL, O_SRC },
		{ "timeout", required_argument, NULL, O_TMO },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, O_VERSION },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	*a = (struct args){ .target = "", .op = -1, .timeout_s = 10, .size = UINT64_MAX };
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case O_SEG: a->segment = optarg; break;
		case O_PORT:
			if (xseg_parse_uint(optarg, XSEG_MAX_PORTS - 1, &a->port) < 0)
				die_arg("--port", optarg, "is not a port number");
			a->have_port = 1;
			break;
		case O_TPORT:
			if (xseg_parse_uint(optarg, XSEG_MAX_PORTS - 1, &a->target_port) < 0)
				die_arg("--target-port", optarg, "is not a port number");
			a->have_target_port = 1;
			break;
		case O_OP:
			if ((a->op = xseg_op_from_name(optarg)) < 0)
				die_arg("--op", optarg, "is not an op (ping, read, write, ...)");
			break;
		case O_TARGET:
			if (strlen(optarg) > XSEG_MAX_TARGETLEN)
				die_arg("--target", optarg, "is longer than 255 bytes");
			a->target = optarg;
			break;
		case O_OFF: a->offset = arg_size("--offset", optarg); break;
		case O_SIZE: a->size = arg_size("--size", optarg); break;
		case O_DATA: a->data = optarg; break;
		case O_SRC:
			if (strlen(optarg) > XSEG_MAX_TARGETLEN)
				die_arg("--src", optarg, "is longer than 255 bytes");
			a->src = optarg;
			break;
		case O_TMO:
			if (xseg_parse_uint(optarg, 86400, &a->timeout_s) < 0 || !a->timeout_s)
				die_arg("--timeout", optarg, "is not a number of seconds (1..86400)");
			break;
		case 'h': usage(stdout); exit(0);
		case O_VERSION: xseg_print_version("xreq"); exit(0);
		default:
			fprintf(stderr, "xreq: unknown or incomplete option '%s' (see --help)\n",
				argv[optind - 1]);
			exit(2);
		}
	}
	if (optind < argc)
		die_arg("argument", argv[optind], "is not an option (see --help)");
	if (!a->segment || !a->have_port || !a->have_target_port || a->op < 0) {
		fprintf(stderr, "xreq: --segment, --port, --target-port and --op are required\n");
		exit(2);
	}
	if (a->op == X_COPY && !a->src) {
		fprintf(stderr, "xreq: --op copy needs --src\n");
		exit(2);
	}
}

static void print_reply(struct xseg *seg, struct xseg_request *r)
{
	if (r->result != XR_SERVED) {
		printf("FAILED error=%d (%s)\n", r->error, strerror(r->error));
		return;
	}
	printf("SERVED serviced=%" PRIu64, r->serviced);
	const unsigned char *d = xseg_get_data(seg, r);
	/* INFO with no target: vlmcd's volume list, text */
	bool listing = r->op == X_INFO && r->targetlen == 0;
	if (r->op == X_INFO && !listing && r->datalen >= sizeof(struct xseg_reply_info))
		printf(" size=%" PRIu64, ((const struct xseg_reply_info *)d)->size);
	if ((r->op == X_READ || r->op == X_CONTROL || listing) && d) {
		uint64_t n = r->serviced < r->datalen ? r->serviced : r->datalen;
		printf(" data='");
		for (uint64_t i = 0; i < n && i < 64; i++)
			putchar(d[i] >= 32 && d[i] < 127 && d[i] != '\'' ? d[i] : '.');
		putchar('\'');
	}
	putchar('\n');
}

int main(int argc, char **argv)
{
	struct args a;
	struct xseg *seg;
	parse(argc, argv, &a);

	if (xseg_join(a.segment, &seg) < 0) {
		fprintf(stderr, "xreq: cannot join segment '%s': %s\n", a.segment, xseg_last_error());
		return 1;
	}
	if (xseg_bind_port(seg, (uint32_t)a.port) < 0) {
		fprintf(stderr, "xreq: cannot bind --port %" PRIu64 ": %s\n", a.port, xseg_last_error());
		xseg_leave(seg);
		return 1;
	}
	size_t dlen = a.data ? strlen(a.data) : 0;
	uint64_t size = a.size != UINT64_MAX ? a.size : a.op == X_CONTROL ? dlen + 1 : dlen;
	uint64_t datalen = a.op == X_COPY ? sizeof(struct xseg_request_copy)
			 : a.op == X_INFO ? sizeof(struct xseg_reply_info)
			 : a.op == X_CONTROL ? (size > 4096 ? size : 4096) : size;
	struct xseg_request *r = xseg_get_request(seg, (uint32_t)a.port);
	if (!r || xseg_prep_target(seg, r, a.target, datalen) < 0) {
		fprintf(stderr, "xreq: no request of %" PRIu64 " bytes: %s\n", datalen,
			xseg_last_error());
		xseg_leave(seg);
		return 1;
	}
	char *d = xseg_get_data(seg, r);
	if (a.op == X_WRITE)
		for (uint64_t i = 0; i < size; i++)
			d[i] = dlen ? a.data[i % dlen] : 0;
	if (a.op == X_CONTROL && dlen)
		memcpy(d, a.data, dlen + 1);
	if (a.op == X_COPY) {
		struct xseg_request_copy *cp = (struct xseg_request_copy *)d;
		memset(cp, 0, sizeof(*cp));
		cp->src_len = (uint32_t)strlen(a.src);
		memcpy(cp->src, a.src, cp->src_len);
	}
	r->op = (uint32_t)a.op;
	r->offset = a.offset;
	r->size = size;
	if (xseg_submit(seg, r, (uint32_t)a.port, (uint32_t)a.target_port) < 0) {
		fprintf(stderr, "xreq: cannot submit to port %" PRIu64 ": %s\n", a.target_port,
			xseg_last_error());
		xseg_put_request(seg, r);
		xseg_leave(seg);
		return 1;
	}
	uint64_t deadline = xseg_now_ns() + a.timeout_s * 1000000000ull;
	struct xseg_request *back = NULL;
	while (xseg_receive(seg, (uint32_t)a.port, &back, 1) == 0) {
		if (xseg_now_ns() > deadline) {
			fprintf(stderr, "xreq: no answer from port %" PRIu64 " within %" PRIu64 " s\n",
				a.target_port, a.timeout_s);
			xseg_leave(seg);   /* the request stays with whoever holds it */
			return 3;
		}
		xseg_wait(seg, (uint32_t)a.port, 100000000ull);
	}
	print_reply(seg, back);
	int rc = back->result == XR_SERVED ? 0 : 1;
	xseg_put_request(seg, back);
	xseg_leave(seg);
	return rc;
}
