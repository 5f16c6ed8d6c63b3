/*
 * vlmcd: the volume composer. A request on (volume, offset, size) becomes
 * requests on the objects that hold that range, named
 * <volume>_<16 hex digits of the object index>, each at most --object-size;
 * a request that crosses object boundaries is split and its replies joined.
 * FLUSH fans out to every object of the volume written since the last
 * FLUSH. Everything goes to --blocker-port, so a cache can be routed in
 * between (xseg plug) without vlmcd knowing.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xseg/xseg.h"

#define BATCH 16u
#define MAX_VOLUMES 64

struct volume {
	char name[XSEG_MAX_TARGETLEN - 17 + 1];   /* room for "_<16 hex>" */
	uint64_t size;
	uint64_t nr_objects;
	pthread_mutex_t lock;          /* guards written */
	uint8_t *written;              /* objects written since the last FLUSH */
};

/* A client request being served in parts. */
struct parent {
	struct xseg_request *req;
	_Atomic uint32_t pending;
	_Atomic int error;
	_Atomic uint64_t serviced;
};

/* One part: a request to the blocker for one object. */
struct part {
	struct parent *parent;
	uint64_t buf_off;              /* where its bytes sit in the client's buffer */
};

static struct {
	struct xseg *seg;
	const char *segment;
	uint32_t port, blocker_port;
	uint64_t object_size;
	unsigned threads;
	uint64_t spin_ns;
	struct volume volumes[MAX_VOLUMES];
	unsigned nr_volumes;
} V = { .object_size = 4u << 20, .threads = 2, .spin_ns = 20000 };

/* Lock-free atomics are async-signal-safe and visible to every thread. */
static _Atomic int stop;
static _Atomic uint64_t outstanding;    /* parents not yet answered */

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static struct volume *find_volume(const char *name)
{
	for (unsigned i = 0; i < V.nr_volumes; i++)
		if (!strcmp(V.volumes[i].name, name))
			return &V.volumes[i];
	return NULL;
}

static void answer(struct xseg_request *req, int err, uint64_t serviced)
{
	req->result = err ? XR_FAILED : XR_SERVED;
	req->error = err;
	req->serviced = err ? 0 : serviced;
	if (xseg_respond(V.seg, req, V.port) < 0)
		fprintf(stderr, "vlmcd: cannot answer: %s\n", xseg_last_error());
}

static void parent_done_one(struct parent *p)
{
	if (atomic_fetch_sub(&p->pending, 1) != 1)
		return;
	answer(p->req, atomic_load(&p->error), atomic_load(&p->serviced));
	free(p);
	atomic_fetch_sub(&outstanding, 1);
}

/* Sends one part; on failure the part counts as failed. */
static void send_part(struct parent *p, uint32_t op, const char *object, uint64_t offset,
		      uint64_t size, uint64_t buf_off)
{
	struct xseg_request *r = xseg_get_request(V.seg, V.port);
	struct part *part = malloc(sizeof(*part));
	if (!r || !part || xseg_prep_target(V.seg, r, object, op == X_FLUSH ? 0 : size) < 0) {
		atomic_store(&p->error, r ? ENOMEM : ENOBUFS);
		if (r)
			xseg_put_request(V.seg, r);
		free(part);
		parent_done_one(p);
		return;
	}
	part->parent = p;
	part->buf_off = buf_off;
	r->op = op;
	r->flags = p->req->flags;
	r->offset = offset;
	r->size = size;
	r->priv = (uint64_t)(uintptr_t)part;
	if (op == X_WRITE)
		memcpy(xseg_get_data(V.seg, r), (char *)xseg_get_data(V.seg, p->req) + buf_off, size);
	if (xseg_submit(V.seg, r, V.port, V.blocker_port) < 0) {
		atomic_store(&p->error, EHOSTUNREACH);
		xseg_put_request(V.seg, r);
		free(part);
		parent_done_one(p);
	}
}

static void on_part_reply(struct xseg_request *r)
{
	struct part *part = (struct part *)(uintptr_t)r->priv;
	struct parent *p = part->parent;
	if (r->result != XR_SERVED || (r->op != X_FLUSH && r->serviced != r->size)) {
		atomic_store(&p->error, r->result == XR_FAILED && r->error ? r->error : EIO);
	} else if (r->op == X_READ || r->op == X_WRITE) {
		if (r->op == X_READ)
			memcpy((char *)xseg_get_data(V.seg, p->req) + part->buf_off,
			       xseg_get_data(V.seg, r), r->size);
		atomic_fetch_add(&p->serviced, r->size);
	}
	xseg_put_request(V.seg, r);
	free(part);
	parent_done_one(p);
}

static void object_name(char *out, size_t len, const struct volume *v, uint64_t index)
{
	snprintf(out, len, "%s_%016" PRIx64, v->name, index);
}

static void serve_rw(struct xseg_request *req, struct volume *v)
{
	if (req->size > req->datalen || req->offset > v->size || req->size > v->size - req->offset) {
		answer(req, EINVAL, 0);
		return;
	}
	if (req->size == 0) {
		answer(req, 0, 0);
		return;
	}
	uint64_t first = req->offset / V.object_size;
	uint64_t last = (req->offset + req->size - 1) / V.object_size;
	struct parent *p = calloc(1, sizeof(*p));
	if (!p) {
		answer(req, ENOMEM, 0);
		return;
	}
	p->req = req;
	atomic_init(&p->pending, (uint32_t)(last - first + 1) + 1);   /* +1: ours */
	atomic_fetch_add(&outstanding, 1);
	if (req->op == X_WRITE) {
		pthread_mutex_lock(&v->lock);
		for (uint64_t o = first; o <= last; o++)
			v->written[o] = 1;
		pthread_mutex_unlock(&v->lock);
	}
	char name[XSEG_MAX_TARGETLEN + 1];
	uint64_t pos = req->offset, end = req->offset + req->size;
	for (uint64_t o = first; o <= last; o++) {
		uint64_t obj_start = o * V.object_size;
		uint64_t part_end = end < obj_start + V.object_size ? end : obj_start + V.object_size;
		object_name(name, sizeof(name), v, o);
		send_part(p, req->op, name, pos - obj_start, part_end - pos, pos - req->offset);
		pos = part_end;
	}
	parent_done_one(p);
}

static void serve_flush(struct xseg_request *req, struct volume *v)
{
	uint8_t *dirty = calloc(v->nr_objects, 1);
	if (!dirty) {
		answer(req, ENOMEM, 0);
		return;
	}
	/* Swap out the written set: writes after this point belong to the
	 * next FLUSH. */
	pthread_mutex_lock(&v->lock);
	uint8_t *was = v->written;
	v->written = dirty;
	pthread_mutex_unlock(&v->lock);
	uint32_t n = 0;
	for (uint64_t o = 0; o < v->nr_objects; o++)
		n += was[o];
	struct parent *p = calloc(1, sizeof(*p));
	if (!p) {
		free(was);
		answer(req, ENOMEM, 0);
		return;
	}
	p->req = req;
	atomic_init(&p->pending, n + 1);
	atomic_fetch_add(&outstanding, 1);
	char name[XSEG_MAX_TARGETLEN + 1];
	for (uint64_t o = 0; o < v->nr_objects; o++)
		if (was[o]) {
			object_name(name, sizeof(name), v, o);
			send_part(p, X_FLUSH, name, 0, 0, 0);
		}
	free(was);
	parent_done_one(p);
}

static void serve(struct xseg_request *req)
{
	const char *name = xseg_get_target(V.seg, req);
	struct volume *v = name ? find_volume(name) : NULL;
	if (req->op == X_PING) {
		answer(req, 0, 0);
		return;
	}
	if (!v) {
		answer(req, ENOENT, 0);
		return;
	}
	switch (req->op) {
	case X_READ:
	case X_WRITE:
		serve_rw(req, v);
		break;
	case X_FLUSH:
		serve_flush(req, v);
		break;
	case X_INFO:
		if (req->datalen < sizeof(struct xseg_reply_info) &&
		    xseg_prep_request(V.seg, req, req->targetlen, sizeof(struct xseg_reply_info)) < 0) {
			answer(req, ENOMEM, 0);
			break;
		}
		((struct xseg_reply_info *)xseg_get_data(V.seg, req))->size = v->size;
		answer(req, 0, sizeof(struct xseg_reply_info));
		break;
	default:
		answer(req, EOPNOTSUPP, 0);
	}
}

static void *worker(void *arg)
{
	(void)arg;
	struct xseg_request *batch[BATCH];
	/* Keep receiving replies after a stop until every request is answered. */
	while (!stop || atomic_load(&outstanding)) {
		int n = stop ? 0 : xseg_accept(V.seg, V.port, batch, BATCH);
		for (int i = 0; i < n; i++)
			serve(batch[i]);
		int m = xseg_receive(V.seg, V.port, batch, BATCH);
		for (int i = 0; i < m; i++)
			on_part_reply(batch[i]);
		if (n <= 0 && m <= 0)
			xseg_poll(V.seg, V.port, V.spin_ns, 100000000ull);
	}
	return NULL;
}

static void usage(FILE *out)
{
	fprintf(out,
"usage: vlmcd --segment NAME --port N --blocker-port N --volume NAME:SIZE... [options]\n"
"Turns volume I/O into object I/O on objects <volume>_<16 hex digits>.\n"
"  --volume NAME:SIZE     a volume (repeatable; SIZE takes K, M, G)\n"
"  --volumes-file F       more volumes, one 'NAME SIZE' per line\n"
"  --object-size SIZE     object size (default 4M)\n"
"  --blocker-port N       next hop for object requests\n"
"  --threads N            (default 2)\n"
"  --spin-us N            busy-poll before sleeping (default 20)\n");
}

static void bad(const char *opt, const char *val, const char *why)
{
	fprintf(stderr, "vlmcd: %s: '%s' %s\n", opt, val, why);
	exit(2);
}

static void add_volume(const char *opt, const char *name, const char *size)
{
	uint64_t bytes;
	if (V.nr_volumes == MAX_VOLUMES)
		bad(opt, name, "is one volume too many (64 at most)");
	if (!*name || strlen(name) >= sizeof(V.volumes[0].name) || strchr(name, '/'))
		bad(opt, name, "is not a valid volume name");
	if (find_volume(name))
		bad(opt, name, "is given twice");
	if (xseg_parse_size(size, &bytes) < 0 || !bytes)
		bad(opt, size, "is not a size");
	struct volume *v = &V.volumes[V.nr_volumes++];
	snprintf(v->name, sizeof(v->name), "%s", name);
	v->size = bytes;
}

static void read_volumes_file(const char *path)
{
	FILE *f = fopen(path, "r");
	char line[512], name[256], size[64];
	if (!f)
		bad("--volumes-file", path, "cannot be read");
	while (fgets(line, sizeof(line), f)) {
		if (line[0] == '#' || line[strspn(line, " \t\n")] == '\0')
			continue;
		if (sscanf(line, "%255s %63s", name, size) != 2)
			bad("--volumes-file", line, "is not 'NAME SIZE'");
		add_volume("--volumes-file", name, size);
	}
	fclose(f);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "segment", required_argument, NULL, 's' }, { "port", required_argument, NULL, 'p' },
		{ "blocker-port", required_argument, NULL, 'b' }, { "volume", required_argument, NULL, 'v' },
		{ "volumes-file", required_argument, NULL, 'f' }, { "object-size", required_argument, NULL, 'o' },
		{ "threads", required_argument, NULL, 't' }, { "spin-us", required_argument, NULL, 'S' },
		{ "log-level", required_argument, NULL, 'l' }, { "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	bool have_port = false, have_bport = false;
	uint64_t v;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 's': V.segment = optarg; break;
		case 'p': if (xseg_parse_uint(optarg, XSEG_MAX_PORTS, &v) < 0) bad("--port", optarg, "is not a port number");
			V.port = (uint32_t)v; have_port = true; break;
		case 'b': if (xseg_parse_uint(optarg, XSEG_MAX_PORTS, &v) < 0) bad("--blocker-port", optarg, "is not a port number");
			V.blocker_port = (uint32_t)v; have_bport = true; break;
		case 'v': {
			char *colon = strrchr(optarg, ':');
			if (!colon)
				bad("--volume", optarg, "is not NAME:SIZE");
			*colon = '\0';
			add_volume("--volume", optarg, colon + 1);
			break;
		}
		case 'f': read_volumes_file(optarg); break;
		case 'o': if (xseg_parse_size(optarg, &V.object_size) < 0 || !V.object_size) bad("--object-size", optarg, "is not a size");
			break;
		case 't': if (xseg_parse_uint(optarg, 64, &v) < 0 || !v) bad("--threads", optarg, "is not 1..64");
			V.threads = (unsigned)v; break;
		case 'S': if (xseg_parse_uint(optarg, 1000000, &v) < 0) bad("--spin-us", optarg, "is not a number");
			V.spin_ns = v * 1000; break;
		case 'l': break;
		case 'h': usage(stdout); return 0;
		default:
			fprintf(stderr, "vlmcd: unknown or incomplete option '%s' (see --help)\n", argv[optind - 1]);
			return 2;
		}
	}
	if (!V.segment || !have_port || !have_bport || !V.nr_volumes) {
		fprintf(stderr, "vlmcd: --segment, --port, --blocker-port and at least one --volume are required\n");
		return 2;
	}
	for (unsigned i = 0; i < V.nr_volumes; i++) {
		struct volume *vol = &V.volumes[i];
		vol->nr_objects = (vol->size + V.object_size - 1) / V.object_size;
		vol->written = calloc(vol->nr_objects, 1);
		pthread_mutex_init(&vol->lock, NULL);
		if (!vol->written) {
			fprintf(stderr, "vlmcd: out of memory for volume %s\n", vol->name);
			return 1;
		}
	}
	if (xseg_join(V.segment, &V.seg) < 0 || xseg_bind_port(V.seg, V.port) < 0) {
		fprintf(stderr, "vlmcd: %s\n", xseg_last_error());
		return 1;
	}
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	pthread_t *t = calloc(V.threads, sizeof(*t));
	for (unsigned i = 0; i < V.threads; i++)
		pthread_create(&t[i], NULL, worker, NULL);
	for (unsigned i = 0; i < V.threads; i++)
		pthread_join(t[i], NULL);
	struct xseg_request *late[BATCH];
	int n;
	while ((n = xseg_accept(V.seg, V.port, late, BATCH)) > 0)
		for (int i = 0; i < n; i++)
			answer(late[i], ESHUTDOWN, 0);
	free(t);
	xseg_leave(V.seg);
	return 0;
}
