/*
 * nbdd: serves volumes to NBD clients (qemu, fio, nbdcopy, the kernel's
 * nbd-client) over TCP and a Unix socket. At start it asks --target-port
 * (vlmcd) for its volumes and sizes (target.c): each is an export of the
 * same name, or only those --volume names, which must match vlmcd's. NBD
 * commands become requests on that volume sent to --target-port, so a
 * cache plugged in behind vlmcd serves them too. See nbdd.h for the
 * modules and threads.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nbdd.h"
#include "peer/addr.h"
#include "peer/volumes.h"
#include "target.h"

struct nbdd_config nbdd_cfg = {
	.max_request = 32u << 20,
	.chunk_size = 1u << 20,
	.max_inflight = 128,
	.io_timeout = 30,
	.max_connections = 64,
	.socket_mode = 0600,
	.max_client_buffer = 32u << 20,
	.max_buffer_total = 256u << 20,
	.target_timeout = 30,
	.retry_limit_ns = 10ull * 1000 * 1000 * 1000,
	.max_path_requests = UINT64_MAX,   /* until the segment's pool is known */
};

/* A list of exports being built: the operator's (--volume), vlmcd's. */
struct export_list {
	struct nbd_export *v;
	unsigned n;
};

/* What --volume and --volumes-file gave: checked against vlmcd's list in
 * init, then served; none: vlmcd's list is served whole. */
static struct export_list given;

/* --max-buffer-total and --max-client-buffer as given: checked against
 * each other once both are known; a default one follows the heap (init). */
static const char *max_buffer_total_arg, *max_client_buffer_arg;

/* ---- exports ------------------------------------------------------------------------ */

static struct nbd_export *find_in(const struct export_list *l, const char *name, uint32_t len)
{
	for (unsigned i = 0; i < l->n; i++)
		if (l->v[i].name_len == len && !memcmp(l->v[i].name, name, len))
			return &l->v[i];
	return NULL;
}

const struct nbd_export *nbdd_find_export(const uint8_t *name, uint32_t len)
{
	struct export_list served = { nbdd_cfg.exports, nbdd_cfg.nr_exports };
	return find_in(&served, (const char *)name, len);
}

uint16_t nbdd_transmission_flags(void)
{
	/* vlmcd's FLUSH covers every write it acknowledged, whichever
	 * connection sent it: that is what CAN_MULTI_CONN promises. */
	return NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_FLUSH | NBD_FLAG_SEND_FUA |
	       NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES | NBD_FLAG_CAN_MULTI_CONN;
}

/* An export per volume, in vlmcd's syntax: the target name is the volume.
 * ctx is the export_list; opt outlives it (an option's name, or NULL). */
static int add_export(void *ctx, const char *opt, const char *name, uint64_t bytes)
{
	struct export_list *l = ctx;
	size_t len = strlen(name);
	if (find_in(l, name, (uint32_t)len))
		return peer_arg_error(opt, name, "is given twice");
	struct nbd_export *grown = realloc(l->v, (l->n + 1) * sizeof(*grown));
	char *copy = strdup(name);
	if (grown)
		l->v = grown;
	if (!grown || !copy) {
		free(copy);
		return peer_arg_error(opt, name, "does not fit in memory");
	}
	l->v[l->n++] = (struct nbd_export){ .name = copy, .name_len = (uint32_t)len,
					    .size = bytes, .given_by = l == &given ? opt : NULL };
	return 0;
}

static void free_exports(struct export_list *l)
{
	for (unsigned i = 0; i < l->n; i++)
		free(l->v[i].name);
	free(l->v);
	l->v = NULL;
	l->n = 0;
}

/*
 * The exports served: vlmcd's volumes (asked at start, waiting up to
 * --target-timeout for it), or those given, each of which vlmcd must have
 * at the same size (2 when not: a wrong argument). A given list guards
 * against serving the wrong volume set; vlmcd's sizes always win.
 */
static int choose_exports(struct peer *p)
{
	struct export_list target = { 0 };
	if (target_volumes(p, (uint32_t)nbdd_cfg.target_port, (unsigned)nbdd_cfg.target_timeout,
			   add_export, &target) < 0) {
		free_exports(&target);
		return 1;
	}
	int rc = 0;
	for (unsigned i = 0; i < given.n && !rc; i++) {
		const struct nbd_export *g = &given.v[i];
		const struct nbd_export *t = find_in(&target, g->name, g->name_len);
		char why[200];
		if (!t) {
			int n = snprintf(why, sizeof(why), "is not a volume of --target-port %" PRIu64
					 " (it has", nbdd_cfg.target_port);
			for (unsigned j = 0; j < target.n && n < 150; j++)
				n += snprintf(why + n, sizeof(why) - (size_t)n, "%s %.40s",
					      j ? "," : "", target.v[j].name);
			snprintf(why + n, sizeof(why) - (size_t)n, "%s)", n >= 150 ? ", ..." : "");
		} else if (t->size != g->size)
			snprintf(why, sizeof(why), "is %" PRIu64 " bytes here but %" PRIu64
				 " bytes on --target-port %" PRIu64, g->size, t->size,
				 nbdd_cfg.target_port);
		if (!t || t->size != g->size) {
			peer_arg_error(g->given_by, g->name, why);
			rc = 2;
		}
	}
	if (rc || given.n) {
		free_exports(&target);
		if (rc)
			return rc;
		target = given;
		given = (struct export_list){ 0 };
	}
	nbdd_cfg.exports = target.v;
	nbdd_cfg.nr_exports = target.n;
	return 0;
}

/* ---- options ------------------------------------------------------------------------- */

/*
 * --listen ADDR:PORT, checked here so that a bad value exits 2 before
 * anything starts (getaddrinfo alone took port 99999 as 34463). Host names
 * are not resolved: a name with several addresses would serve on one only.
 */
static int add_listen(const char *arg)
{
	struct net_addr a;
	const char *why;
	if (nbdd_cfg.nr_listen == 4)
		return peer_arg_error("--listen", arg, "is one too many (at most 4)");
	if (addr_parse_endpoint(arg, false, &a, &why) < 0)
		return peer_arg_error("--listen", arg, why);
	nbdd_cfg.listen_addr[nbdd_cfg.nr_listen] = a.ss;
	nbdd_cfg.listen_addr_len[nbdd_cfg.nr_listen] = a.len;
	nbdd_cfg.listen[nbdd_cfg.nr_listen++] = (char *)arg;
	return 0;
}

enum {
	OPT_TARGET_PORT = 1, OPT_LISTEN, OPT_UNIX, OPT_VOLUME, OPT_VOLUMES_FILE,
	OPT_MAX_REQUEST, OPT_CHUNK_SIZE, OPT_MAX_INFLIGHT, OPT_IO_TIMEOUT, OPT_MAX_CONNECTIONS,
	OPT_SOCKET_MODE, OPT_MAX_CLIENT_BUFFER, OPT_MAX_BUFFER_TOTAL, OPT_TARGET_TIMEOUT,
	OPT_SOCKET_THREADS, OPT_SOCKET_POLL_US, OPT_RETRY_LIMIT,
};

static const struct option nbdd_options[] = {
	{ "target-port", required_argument, NULL, OPT_TARGET_PORT },
	{ "listen", required_argument, NULL, OPT_LISTEN },
	{ "unix", required_argument, NULL, OPT_UNIX },
	{ "volume", required_argument, NULL, OPT_VOLUME },
	{ "volumes-file", required_argument, NULL, OPT_VOLUMES_FILE },
	{ "max-request-size", required_argument, NULL, OPT_MAX_REQUEST },
	{ "chunk-size", required_argument, NULL, OPT_CHUNK_SIZE },
	{ "max-inflight", required_argument, NULL, OPT_MAX_INFLIGHT },
	{ "io-timeout", required_argument, NULL, OPT_IO_TIMEOUT },
	{ "max-connections", required_argument, NULL, OPT_MAX_CONNECTIONS },
	{ "socket-mode", required_argument, NULL, OPT_SOCKET_MODE },
	{ "max-client-buffer", required_argument, NULL, OPT_MAX_CLIENT_BUFFER },
	{ "max-buffer-total", required_argument, NULL, OPT_MAX_BUFFER_TOTAL },
	{ "target-timeout", required_argument, NULL, OPT_TARGET_TIMEOUT },
	{ "socket-threads", required_argument, NULL, OPT_SOCKET_THREADS },
	{ "socket-poll-us", required_argument, NULL, OPT_SOCKET_POLL_US },
	{ "retry-limit", required_argument, NULL, OPT_RETRY_LIMIT },
	{ NULL, 0, NULL, 0 },
};

static const char nbdd_usage[] =
"  --target-port N        where volume requests go: vlmcd's port (required);\n"
"                         its volumes are the exports, asked for at start\n"
"  --target-timeout S     seconds to wait at start for it to list them (30)\n"
"  --listen ADDR:PORT     TCP address to serve (repeatable, up to 4): a numeric\n"
"                         address, [::1]:N for IPv6, 0.0.0.0:N for all IPv4\n"
"  --unix PATH            Unix socket to serve (at least one of --listen, --unix)\n"
"  --socket-mode OCTAL    the --unix socket file's mode, whatever the umask\n"
"                         (default 0600: only nbdd's user; 0660 adds its group)\n"
"  --volume NAME:SIZE     serve only these of vlmcd's volumes (repeatable);\n"
"                         a NAME vlmcd lacks or a SIZE not its own: exit 2\n"
"  --volumes-file F       the same, one 'NAME SIZE' per line ('#' comments)\n"
"  --max-request-size S   largest READ/WRITE, announced as the maximum block\n"
"                         size (default 32M)\n"
"  --chunk-size S         largest request sent to the target (default 1M)\n"
"  --retry-limit S        with the segment's request pool or heap empty, a\n"
"                         command fails after S seconds without a chunk\n"
"                         going out (1..3600; default 10)\n"
"  --max-inflight N       commands per connection before it is not read (128)\n"
"  --io-timeout S         seconds a client in the handshake or in the middle of\n"
"                         a request may send nothing, or take none of its\n"
"                         replies, before it is closed (default 30; 0: no limit)\n"
"  --max-connections N    clients served at once; more wait to be accepted\n"
"                         (default 64)\n"
"  --max-client-buffer S  READ/WRITE buffers held for one client: past it\n"
"                         its requests are not read until half is written; a\n"
"                         client holding it that takes no reply byte for 1 s\n"
"                         is closed (default 32M, at most the total's default)\n"
"  --max-buffer-total S   the same for all clients together: past it every\n"
"                         client waits (default 256M or a quarter of the\n"
"                         segment's heap if less: in the heap they take up\n"
"                         to twice their bytes; at least the above)\n"
"  --socket-threads N     threads that read the clients' requests, each its\n"
"                         own clients for good (1..64; default a quarter of\n"
"                         the CPUs, 1 to 4): one serves a client as fast\n"
"                         as many; more let many clients go faster\n"
"  --socket-poll-us N     after a round of client bytes, a socket thread looks\n"
"                         for more this many microseconds before it sleeps\n"
"                         (0..1000; default 0): fewer context switches per\n"
"                         command where it has a core to itself; where the\n"
"                         clients and peers share few cores it takes theirs\n"
"Clients: qemu-io -f raw nbd://HOST:PORT/NAME, nbd+unix:///NAME?socket=PATH.\n";

/* --socket-mode: octal digits only (no sign, no 0o), at most 0777. */
static int parse_socket_mode(const char *arg)
{
	unsigned mode = 0;
	const char *d = arg;
	for (; *d >= '0' && *d <= '7' && mode <= 0777; d++)
		mode = mode * 8 + (unsigned)(*d - '0');
	if (!*arg || *d || mode > 0777)
		return peer_arg_error("--socket-mode", arg, "is not an octal mode of at most 0777");
	nbdd_cfg.socket_mode = mode;
	return 0;
}

static int parse_option(struct peer *p, int val, const char *arg)
{
	(void)p;
	switch (val) {
	case OPT_TARGET_PORT:
		nbdd_cfg.have_target = true;
		return peer_arg_uint("--target-port", arg, 0, XSEG_MAX_PORTS - 1,
				     &nbdd_cfg.target_port);
	case OPT_LISTEN:
		return add_listen(arg);
	case OPT_UNIX:
		if (!*arg || strlen(arg) >= 108)
			return peer_arg_error("--unix", arg, "is not a socket path (1..107 bytes)");
		nbdd_cfg.unix_path = (char *)arg;
		return 0;
	case OPT_VOLUME:
		return peer_volume_arg("--volume", arg, add_export, &given);
	case OPT_VOLUMES_FILE:
		return peer_volumes_file("--volumes-file", arg, add_export, &given);
	case OPT_MAX_REQUEST:
		return peer_arg_size("--max-request-size", arg, 4096, 1u << 30, &nbdd_cfg.max_request);
	case OPT_CHUNK_SIZE:
		return peer_arg_size("--chunk-size", arg, 4096, 64u << 20, &nbdd_cfg.chunk_size);
	case OPT_MAX_INFLIGHT:
		return peer_arg_uint("--max-inflight", arg, 1, 65536, &nbdd_cfg.max_inflight);
	case OPT_IO_TIMEOUT:
		return peer_arg_uint("--io-timeout", arg, 0, 86400, &nbdd_cfg.io_timeout);
	case OPT_MAX_CONNECTIONS:
		return peer_arg_uint("--max-connections", arg, 1, 1u << 20, &nbdd_cfg.max_connections);
	case OPT_SOCKET_MODE:
		return parse_socket_mode(arg);
	case OPT_MAX_CLIENT_BUFFER:
		max_client_buffer_arg = arg;
		return peer_arg_size("--max-client-buffer", arg, 64u << 10, 1ull << 40,
				     &nbdd_cfg.max_client_buffer);
	case OPT_TARGET_TIMEOUT:
		return peer_arg_uint("--target-timeout", arg, 1, 86400, &nbdd_cfg.target_timeout);
	case OPT_SOCKET_THREADS:
		return peer_arg_uint("--socket-threads", arg, 1, 64, &nbdd_cfg.socket_threads);
	case OPT_SOCKET_POLL_US:
		return peer_arg_uint("--socket-poll-us", arg, 0, 1000, &nbdd_cfg.socket_poll_us);
	case OPT_RETRY_LIMIT: {
		uint64_t s;
		if (peer_arg_uint("--retry-limit", arg, 1, 3600, &s) < 0)
			return -1;
		nbdd_cfg.retry_limit_ns = s * 1000000000ull;
		return 0;
	}
	case OPT_MAX_BUFFER_TOTAL:
		max_buffer_total_arg = arg;
		return peer_arg_size("--max-buffer-total", arg, 64u << 10, 1ull << 40,
				     &nbdd_cfg.max_buffer_total);
	}
	return -1;
}

static int check_options(struct peer *p)
{
	(void)p;
	if (!nbdd_cfg.have_target) {
		fprintf(stderr, "nbdd: --target-port is required (see --help)\n");
		return -1;
	}
	if (!nbdd_cfg.nr_listen && !nbdd_cfg.unix_path) {
		fprintf(stderr, "nbdd: at least one --listen or --unix is required\n");
		return -1;
	}
	if (nbdd_cfg.max_buffer_total < nbdd_cfg.max_client_buffer) {
		if (max_buffer_total_arg)
			return peer_arg_error("--max-buffer-total", max_buffer_total_arg,
					      "is less than --max-client-buffer");
		/* Only the client's was raised: the total follows it. */
		nbdd_cfg.max_buffer_total = nbdd_cfg.max_client_buffer;
	}
	if (!nbdd_cfg.socket_threads) {
		/* Beside them run the workers, vlmcd, cached and the clients. */
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);
		nbdd_cfg.socket_threads = cpus >= 16 ? 4 : cpus >= 4 ? (uint64_t)cpus / 4 : 1;
	}
	return 0;
}

/* ---- the peer ------------------------------------------------------------------------ */

/* The layers above the socket thread, as server.c calls them (it never
 * names them: see struct server_ops). */
static const struct server_ops server_ops = {
	.find_export = nbdd_find_export,
	.transmission_flags = nbdd_transmission_flags,
	.cmd_buffer_bytes = cmd_buffer_bytes,
	.cmd_new = cmd_new,
	.cmd_free = cmd_free,
	.cmd_post = cmd_post,
};

/* A size for the log: 16M, 512K, or bytes. */
static const char *size_text(uint64_t b, char *buf, size_t len)
{
	if (b >= (1u << 20) && !(b & ((1u << 20) - 1)))
		snprintf(buf, len, "%" PRIu64 "M", b >> 20);
	else if (b >= 1024 && !(b & 1023))
		snprintf(buf, len, "%" PRIu64 "K", b >> 10);
	else
		snprintf(buf, len, "%" PRIu64, b);
	return buf;
}

/*
 * The buffers held for clients are also nbdd's chunks in the segment's
 * heap: a command's chunks never exceed its length, which is what it
 * holds, but each is a power-of-two block with room for the target's
 * name, up to twice its bytes (a 1M chunk takes 2M). A target that stops
 * answering lets them grow to --max-buffer-total, and past the heap's
 * size that left vlmcd, cached's flusher and every other client of the
 * segment no buffer (a stalled path, ENOMEM). The defaults therefore hold
 * at most a quarter of the heap's bytes, so that nbdd takes at most half
 * of it; a value given above that is kept, with a warning.
 */
static void fit_buffers_to_heap(struct peer *p)
{
	struct xseg_segment_info info;
	if (xseg_segment_info(peer_segment(p), &info) < 0)
		return;
	uint64_t share = info.heap_size / 4;
	/* The same for the request pool: small commands take few bytes but a
	 * request each, and clients could have the whole pool out at a
	 * target that stops answering. Past half, chunks wait as for an
	 * empty pool (cmd.c). */
	nbdd_cfg.max_path_requests = info.nr_requests / 2 ? info.nr_requests / 2 : 1;
	if (!max_buffer_total_arg && nbdd_cfg.max_buffer_total > share) {
		if (!max_client_buffer_arg && nbdd_cfg.max_client_buffer > share)
			nbdd_cfg.max_client_buffer = share;
		nbdd_cfg.max_buffer_total = nbdd_cfg.max_client_buffer > share
			? nbdd_cfg.max_client_buffer : share;   /* a client's given above it */
	}
	char a[32], b[32], c[32];
	if (nbdd_cfg.max_buffer_total > share)
		peer_warn("client buffers may hold %s, more than a quarter of the segment's %s "
			  "heap (--max-buffer-total, --max-client-buffer; in the heap they take up "
			  "to twice that): a target that stops answering lets them take the "
			  "buffers the rest of the path needs",
			  size_text(nbdd_cfg.max_buffer_total, a, sizeof(a)),
			  size_text(info.heap_size, b, sizeof(b)));
	peer_info("buffers held for clients: at most %s each, %s in all (the segment's heap: %s); "
		  "at most %" PRIu64 " of the pool's %" PRIu32 " requests out on the path",
		  size_text(nbdd_cfg.max_client_buffer, a, sizeof(a)),
		  size_text(nbdd_cfg.max_buffer_total, b, sizeof(b)),
		  size_text(info.heap_size, c, sizeof(c)), nbdd_cfg.max_path_requests,
		  info.nr_requests);
}

static int init(struct peer *p)
{
	int rc = choose_exports(p);
	if (rc)
		return rc;
	fit_buffers_to_heap(p);
	if (server_open(p, &server_ops) < 0)
		return -1;
	for (unsigned i = 0; i < nbdd_cfg.nr_exports; i++)
		peer_info("export %s: %" PRIu64 " bytes", nbdd_cfg.exports[i].name,
			  nbdd_cfg.exports[i].size);
	return server_start();
}

static void on_request(struct peer_thread *t, struct xseg_request *req)
{
	/* Nobody sends nbdd requests; answer whatever arrives. */
	peer_fail(t, req, EOPNOTSUPP);
}

/* SIGTERM/SIGINT, while the workers still take replies: answer what is in
 * flight before closing (server_drain). */
static int drain(struct peer *p, uint64_t deadline_ns)
{
	(void)p;
	return server_drain(deadline_ns);
}

static void on_stop(struct peer_thread *t)
{
	(void)t;
	server_stop();   /* after this, nothing more is posted */
}

static void fini(struct peer *p)
{
	(void)p;
	server_close();
	struct export_list served = { nbdd_cfg.exports, nbdd_cfg.nr_exports };
	free_exports(&served);
	free_exports(&given);
	nbdd_cfg.exports = NULL;
	nbdd_cfg.nr_exports = 0;
}

static int stats_fields(struct peer *p, char *buf, size_t len)
{
	(void)p;
	return server_stats(buf, len);
}

static const struct peer_ops nbdd_ops = {
	.name = "nbdd",
	.summary = "Serves volumes over NBD: each of --target-port's (vlmcd's) volumes\n"
		   "is an export whose commands go there.",
	.options = nbdd_options,
	.options_usage = nbdd_usage,
	.parse_option = parse_option,
	.check_options = check_options,
	.default_threads = 2,
	.supported_ops = PEER_OP(X_PING),
	.init = init,
	.on_request = on_request,
	.on_stop = on_stop,
	.drain = drain,
	.fini = fini,
	.stats = stats_fields,
};

int main(int argc, char **argv)
{
	return peer_main(argc, argv, &nbdd_ops, &nbdd_cfg);
}
