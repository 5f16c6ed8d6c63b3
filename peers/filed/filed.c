/*
 * filed: the embedded default blocker. Each object is a file under --dir.
 *
 * Worker threads accept requests in batches and do pread/pwrite directly;
 * no lock is taken around I/O. Object names are checked before any path is
 * built, and files are opened relative to the directory with O_NOFOLLOW, so
 * no request reaches a file outside --dir.
 *
 *   READ    beyond the end of an object, or of a missing one: zeros
 *   WRITE   pwrite; an XF_FUA write is fdatasync'ed before the answer
 *   FLUSH   syncs the directory's file system (everything written before it)
 *   DELETE  unlink (ENOENT when missing)
 *   INFO    file size (0 when missing)
 *   COPY    target becomes a copy of the source named in the payload
 */
#define _GNU_SOURCE   /* syncfs */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "xseg/xseg.h"

#define BATCH 16u

static struct {
	struct xseg *seg;
	const char *segment, *dir;
	int dirfd;
	uint32_t port;
	unsigned threads;
	uint64_t spin_ns;
	unsigned fail_pct;
	uint64_t fail_seed;
	bool verbose;
} F = { .threads = 2, .spin_ns = 20000, .dirfd = -1 };

/* Lock-free atomics are async-signal-safe and visible to every thread. */
static _Atomic int stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

/* A name that stays inside --dir: no '/', not "." or "..", no leading '.'. */
static int check_name(const struct xseg_request *req, const char *name)
{
	if (!name || req->targetlen == 0)
		return EINVAL;
	if (req->targetlen > NAME_MAX)
		return ENAMETOOLONG;
	if (strlen(name) != req->targetlen || strchr(name, '/') || name[0] == '.')
		return EINVAL;
	return 0;
}

static int open_object(const char *name, int flags)
{
	return openat(F.dirfd, name, flags | O_NOFOLLOW | O_CLOEXEC, 0600);
}

/* Deterministic fault injection: fail this share of READ/WRITE. */
static bool inject_failure(uint32_t op)
{
	static _Atomic uint64_t counter;
	if (!F.fail_pct || (op != X_READ && op != X_WRITE))
		return false;
	uint64_t x = atomic_fetch_add(&counter, 1) + F.fail_seed;
	x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33;
	return x % 100 < F.fail_pct;
}

static int do_read(struct xseg_request *req, const char *name, char *data)
{
	int fd = open_object(name, O_RDONLY);
	if (fd < 0 && errno != ENOENT)
		return errno;
	uint64_t done = 0;
	while (fd >= 0 && done < req->size) {
		ssize_t n = pread(fd, data + done, req->size - done, (off_t)(req->offset + done));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			int err = errno;
			close(fd);
			return err;
		}
		if (n == 0)
			break;   /* end of the object: the rest reads as zeros */
		done += (uint64_t)n;
	}
	if (fd >= 0)
		close(fd);
	memset(data + done, 0, req->size - done);
	req->serviced = req->size;
	return 0;
}

static int do_write(struct xseg_request *req, const char *name, const char *data)
{
	int fd = open_object(name, O_WRONLY | O_CREAT);
	if (fd < 0)
		return errno;
	uint64_t done = 0;
	while (done < req->size) {
		ssize_t n = pwrite(fd, data + done, req->size - done, (off_t)(req->offset + done));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			int err = errno;
			close(fd);
			return err;
		}
		done += (uint64_t)n;
	}
	int err = 0;
	if ((req->flags & XF_FUA) && fdatasync(fd) < 0)
		err = errno;
	close(fd);
	req->serviced = err ? 0 : req->size;
	return err;
}

static int do_copy(struct xseg_request *req, const char *name, const char *data)
{
	const struct xseg_request_copy *cp = (const void *)data;
	char src[XSEG_MAX_TARGETLEN + 1];
	if (req->datalen < sizeof(*cp) || !cp->src_len || cp->src_len > XSEG_MAX_TARGETLEN)
		return EINVAL;
	memcpy(src, cp->src, cp->src_len);
	src[cp->src_len] = '\0';
	if (strchr(src, '/') || src[0] == '.' || strlen(src) != cp->src_len)
		return EINVAL;
	int in = open_object(src, O_RDONLY);
	if (in < 0)
		return errno;
	int out = open_object(name, O_WRONLY | O_CREAT | O_TRUNC);
	if (out < 0) {
		int err = errno;
		close(in);
		return err;
	}
	int err = 0;
	char buf[65536];
	ssize_t n;
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, (size_t)n) != n) {
			err = errno ? errno : EIO;
			break;
		}
	if (n < 0)
		err = errno;
	close(in);
	close(out);
	return err;
}

static int serve_one(struct xseg_request *req)
{
	char *name = xseg_get_target(F.seg, req);
	char *data = xseg_get_data(F.seg, req);
	int err;

	req->serviced = 0;
	if (req->op == X_PING)
		return 0;
	if (req->op == X_FLUSH)
		return syncfs(F.dirfd) < 0 ? errno : 0;
	if ((err = check_name(req, name)) != 0) {
		if (F.verbose)
			fprintf(stderr, "filed: refused object name '%.64s': %s\n", name ? name : "",
				strerror(err));
		return err;
	}
	if ((req->op == X_READ || req->op == X_WRITE) &&
	    (req->size > req->datalen || req->offset > INT64_MAX - req->size))
		return EINVAL;
	if (inject_failure(req->op))
		return EIO;
	switch (req->op) {
	case X_READ:
		return do_read(req, name, data);
	case X_WRITE:
		return do_write(req, name, data);
	case X_DELETE:
		return unlinkat(F.dirfd, name, 0) < 0 ? errno : 0;
	case X_INFO: {
		struct stat st;
		uint64_t size = 0;
		if (fstatat(F.dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
			size = (uint64_t)st.st_size;
		else if (errno != ENOENT)
			return errno;
		if (req->datalen < sizeof(struct xseg_reply_info) &&
		    xseg_prep_request(F.seg, req, req->targetlen, sizeof(struct xseg_reply_info)) < 0)
			return ENOMEM;
		((struct xseg_reply_info *)xseg_get_data(F.seg, req))->size = size;
		req->serviced = sizeof(struct xseg_reply_info);
		return 0;
	}
	case X_COPY:
		return do_copy(req, name, data);
	default:
		return EOPNOTSUPP;
	}
}

static void answer(struct xseg_request *req, int err)
{
	req->result = err ? XR_FAILED : XR_SERVED;
	req->error = err;
	if (xseg_respond(F.seg, req, F.port) < 0)
		fprintf(stderr, "filed: cannot answer: %s\n", xseg_last_error());
}

static void *worker(void *arg)
{
	(void)arg;
	struct xseg_request *batch[BATCH];
	while (!stop) {
		int n = xseg_accept(F.seg, F.port, batch, BATCH);
		for (int i = 0; i < n; i++)
			answer(batch[i], serve_one(batch[i]));
		if (n <= 0)
			xseg_poll(F.seg, F.port, F.spin_ns, 100000000ull);
	}
	return NULL;
}

static void usage(FILE *out)
{
	fprintf(out,
"usage: filed --segment NAME --port N --dir PATH [options]\n"
"Stores each object as a file under --dir (created if missing).\n"
"  --threads N        I/O threads (default 2)\n"
"  --spin-us N        busy-poll before sleeping (default 20)\n"
"  --fail-rate PCT    fail this share of reads and writes with EIO (tests)\n"
"  --fail-seed N      which ones (default 0)\n"
"  --log-level error|warn|info|debug\n"
"  --help\n");
}

static uint64_t uint_arg(const char *opt, const char *val, uint64_t max)
{
	uint64_t v;
	if (xseg_parse_uint(val, max, &v) < 0) {
		fprintf(stderr, "filed: %s: '%s' is not a number in range\n", opt, val);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "segment", required_argument, NULL, 's' }, { "port", required_argument, NULL, 'p' },
		{ "dir", required_argument, NULL, 'd' }, { "threads", required_argument, NULL, 't' },
		{ "spin-us", required_argument, NULL, 'S' }, { "fail-rate", required_argument, NULL, 'f' },
		{ "fail-seed", required_argument, NULL, 'F' }, { "log-level", required_argument, NULL, 'l' },
		{ "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 },
	};
	bool have_port = false;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 's': F.segment = optarg; break;
		case 'p': F.port = (uint32_t)uint_arg("--port", optarg, XSEG_MAX_PORTS); have_port = true; break;
		case 'd': F.dir = optarg; break;
		case 't': F.threads = (unsigned)uint_arg("--threads", optarg, 256);
			if (!F.threads) { fprintf(stderr, "filed: --threads: '%s' must be at least 1\n", optarg); return 2; }
			break;
		case 'S': F.spin_ns = uint_arg("--spin-us", optarg, 1000000) * 1000; break;
		case 'f': F.fail_pct = (unsigned)uint_arg("--fail-rate", optarg, 100); break;
		case 'F': F.fail_seed = uint_arg("--fail-seed", optarg, UINT64_MAX); break;
		case 'l': F.verbose = strcmp(optarg, "error") != 0; break;
		case 'h': usage(stdout); return 0;
		default:
			fprintf(stderr, "filed: unknown or incomplete option '%s' (see --help)\n", argv[optind - 1]);
			return 2;
		}
	}
	if (!F.segment || !have_port || !F.dir) {
		fprintf(stderr, "filed: --segment, --port and --dir are required\n");
		return 2;
	}
	if (mkdir(F.dir, 0700) < 0 && errno != EEXIST) {
		fprintf(stderr, "filed: --dir: cannot create '%s': %s\n", F.dir, strerror(errno));
		return 1;
	}
	F.dirfd = open(F.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (F.dirfd < 0) {
		fprintf(stderr, "filed: --dir: cannot open '%s': %s\n", F.dir, strerror(errno));
		return 1;
	}
	if (xseg_join(F.segment, &F.seg) < 0 || xseg_bind_port(F.seg, F.port) < 0) {
		fprintf(stderr, "filed: %s\n", xseg_last_error());
		return 1;
	}
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	pthread_t *t = calloc(F.threads, sizeof(*t));
	for (unsigned i = 0; i < F.threads; i++)
		pthread_create(&t[i], NULL, worker, NULL);
	for (unsigned i = 0; i < F.threads; i++)
		pthread_join(t[i], NULL);
	/* Finish what is queued: accepted work is never dropped. */
	struct xseg_request *batch[BATCH];
	int n;
	while ((n = xseg_accept(F.seg, F.port, batch, BATCH)) > 0)
		for (int i = 0; i < n; i++)
			answer(batch[i], serve_one(batch[i]));
	free(t);
	xseg_leave(F.seg);
	close(F.dirfd);
	return 0;
}
