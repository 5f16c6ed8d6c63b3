/*
 * filed: the embedded default blocker. Each object is a file under --dir,
 * named by the object name.
 *
 * The runtime's worker threads do pread/pwrite directly, each with its own
 * small cache of open files; no lock is held around I/O. Names are checked
 * before any path is used (include/peer/blocker.h) and files are opened relative to the
 * directory with O_NOFOLLOW, so no request reaches a file outside --dir.
 *
 *   READ    beyond the end of an object, or of a missing one: zeros;
 *           serviced = size
 *   WRITE   pwrite of the full size; XF_FUA: fdatasync before the answer
 *   FLUSH   fdatasync of every object written since the last FLUSH (or only
 *           the named object, if the FLUSH names one), then the answer.
 *           Writes are not synced one by one. The first FLUSH after start
 *           is preceded by a syncfs: an earlier filed's writes are in no set.
 *   DELETE  unlink; ENOENT when missing
 *   INFO    struct xseg_reply_info with the file's size (0 when missing)
 *   COPY    the target becomes a copy of the source the payload names
 *   PING    served
 * A request with XF_FLUSH set is preceded by a FLUSH of everything.
 */
#define _GNU_SOURCE   /* copy_file_range */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "peer/blocker.h"
#include "peer/peer.h"
#include "objects.h"

#define COPY_CHUNK (1u << 20)

struct filed {
	const char *dir;
	int dirfd;
	uint64_t max_request;
	uint64_t max_name;
	uint64_t fd_cache;
	uint64_t fail_pct, fail_seed;
	uint64_t delay_us;   /* --delay-us: a slow disk, for tests */
	_Atomic uint64_t fail_counter;
	_Atomic uint64_t epoch;          /* bumped after each DELETE */
	struct dir_sync dir_sync;        /* entries created or removed since an fsync */
	pthread_mutex_t dirty_lock;      /* guards dirty and the failed syncs */
	struct obj_set dirty;            /* objects written since the last FLUSH */
	struct obj_set sync_failed;      /* objects whose sync failed: see lost_to() */
	bool all_sync_failed;            /* a syncfs or the directory's fsync failed */
	int sync_err;                    /* the first failed sync's errno */
	pthread_mutex_t flush_lock;      /* one FLUSH at a time: a later FLUSH
					  * returns only after an earlier one */
	bool unsure;                     /* under flush_lock: no FLUSH served yet */
};

static struct filed F = {
	.dirfd = -1,
	.max_request = 16u << 20,
	.max_name = XSEG_MAX_TARGETLEN,
	.fd_cache = 64,
	.dirty_lock = PTHREAD_MUTEX_INITIALIZER,
	.dir_sync = { .lock = PTHREAD_MUTEX_INITIALIZER },
	.flush_lock = PTHREAD_MUTEX_INITIALIZER,
};

struct filed_thread {
	struct fd_cache files;
};

/* ---- options ------------------------------------------------------------- */

enum { OPT_DIR = 1, OPT_MAX_REQUEST, OPT_MAX_NAME, OPT_FD_CACHE, OPT_FAIL_RATE, OPT_FAIL_SEED,
       OPT_DELAY };

static const struct option filed_options[] = {
	{ "dir", required_argument, NULL, OPT_DIR },
	{ "max-request-size", required_argument, NULL, OPT_MAX_REQUEST },
	{ "max-name-len", required_argument, NULL, OPT_MAX_NAME },
	{ "fd-cache", required_argument, NULL, OPT_FD_CACHE },
	{ "fail-rate", required_argument, NULL, OPT_FAIL_RATE },
	{ "fail-seed", required_argument, NULL, OPT_FAIL_SEED },
	{ "delay-us", required_argument, NULL, OPT_DELAY },
	{ NULL, 0, NULL, 0 },
};

static const char filed_usage[] =
"  --dir PATH               directory of the objects (created if missing; required)\n"
"  --max-request-size SIZE  largest READ/WRITE accepted (default 16M)\n"
"  --max-name-len N         longest object name accepted (default and at most 255)\n"
"  --fd-cache N             open files kept per thread (default 64)\n"
"  --fail-rate PERCENT      fail this share of READs and WRITEs with EIO (fault\n"
"                           injection for tests; default 0)\n"
"  --fail-seed N            which ones fail: the same seed, the same sequence (default 0)\n"
"  --delay-us N             sleep this long before each READ/WRITE: a slow disk\n"
"                           (for tests; default 0)\n";

static int parse_option(struct peer *p, int val, const char *arg)
{
	(void)p;
	switch (val) {
	case OPT_DIR:
		if (!*arg)
			return peer_arg_error("--dir", arg, "is empty");
		F.dir = arg;
		return 0;
	case OPT_MAX_REQUEST:
		return peer_arg_size("--max-request-size", arg, 1, 1ull << 40, &F.max_request);
	case OPT_MAX_NAME:
		return peer_arg_uint("--max-name-len", arg, 1, XSEG_MAX_TARGETLEN, &F.max_name);
	case OPT_FD_CACHE:
		return peer_arg_uint("--fd-cache", arg, 1, 65536, &F.fd_cache);
	case OPT_FAIL_RATE:
		return peer_arg_uint("--fail-rate", arg, 0, 100, &F.fail_pct);
	case OPT_FAIL_SEED:
		return peer_arg_uint("--fail-seed", arg, 0, UINT64_MAX, &F.fail_seed);
	case OPT_DELAY:
		return peer_arg_uint("--delay-us", arg, 0, 10000000, &F.delay_us);
	}
	return -1;
}

static int check_options(struct peer *p)
{
	(void)p;
	if (!F.dir) {
		fprintf(stderr, "filed: --dir is required (see --help)\n");
		return -1;
	}
	return 0;
}

/* ---- helpers --------------------------------------------------------------- */

/* A broken client can send nothing but requests we refuse: one warning a
 * second, saying how many were left out, not a line each (10240 bad names
 * wrote 10240 lines; sosd did the same). */
static _Atomic int64_t refused_last;
static _Atomic uint64_t refused_skipped;
#define warn_refused(fmt, ...)                                                          \
	do {                                                                            \
		uint64_t quiet_;                                                        \
		if (peer_log_once_a_second(&refused_last, &refused_skipped, &quiet_))   \
			peer_warn(fmt " (%" PRIu64 " more refused since the last word)",   \
				  __VA_ARGS__, quiet_);                                         \
	} while (0)

static struct fd_cache *files_of(struct peer_thread *t)
{
	return &((struct filed_thread *)peer_thread_priv(t))->files;
}

/* Deterministic fault injection: the n-th READ/WRITE fails when the hash of
 * (seed, n) falls below the rate. */
static bool inject_failure(void)
{
	if (!F.fail_pct)
		return false;
	uint64_t x = atomic_fetch_add(&F.fail_counter, 1) + F.fail_seed * 0x9e3779b97f4a7c15ull;
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x % 100 < F.fail_pct;
}

static int mark_dirty(const char *name, size_t len)
{
	pthread_mutex_lock(&F.dirty_lock);
	int rc = obj_set_add(&F.dirty, name, len);
	pthread_mutex_unlock(&F.dirty_lock);
	return rc < 0 ? -rc : 0;
}

/*
 * A failed sync sticks. Linux reports a write-back error to one fsync only
 * and leaves the pages it could not write clean, so a FLUSH that syncs
 * again (a fresh descriptor, a retry) succeeds with the data gone. An
 * object whose sync failed fails every later FLUSH that covers it, with
 * that error, until it is deleted or filed restarts (the operator's word
 * that the device is fixed: writes acknowledged since its last good sync
 * may be lost). A failed syncfs or fsync of the directory names no object:
 * every later FLUSH fails.
 */
static void note_sync_failure(const char *name, size_t len, int err)
{
	pthread_mutex_lock(&F.dirty_lock);
	if (!F.sync_err)
		F.sync_err = err;
	if (!name)
		F.all_sync_failed = true;
	else if (obj_set_add(&F.sync_failed, name, len) < 0)
		F.all_sync_failed = true;   /* no room to name it: all, then */
	pthread_mutex_unlock(&F.dirty_lock);
	peer_error("sync of %s%s%s failed (%s): every later FLUSH of %s fails; writes "
		   "acknowledged since its last good sync may be lost (delete it, or restart "
		   "filed once the device is fixed)", name ? "object '" : "", name ? name : F.dir,
		   name ? "'" : "", strerror(err), name ? "it" : "any object");
}

/* The error a FLUSH of `name` (NULL: of everything) owes a failed sync. */
static int lost_to(const char *name, size_t len)
{
	pthread_mutex_lock(&F.dirty_lock);
	bool lost = F.all_sync_failed ||
		    (name ? obj_set_has(&F.sync_failed, name, len) : F.sync_failed.count > 0);
	int err = lost ? F.sync_err : 0;
	pthread_mutex_unlock(&F.dirty_lock);
	return err;
}

/* Under its lock: a caller that finds the directory clean while another's
 * fsync is still running waits for that fsync (the entries it covers are
 * not durable before it ends; a FLUSH was answered meanwhile). */
static int sync_dir(void)
{
	int err = 0;
	pthread_mutex_lock(&F.dir_sync.lock);
	if (atomic_exchange(&F.dir_sync.dirty, 0) && fsync(F.dirfd) < 0) {
		err = errno;
		atomic_store(&F.dir_sync.dirty, 1);
	}
	pthread_mutex_unlock(&F.dir_sync.lock);
	if (err)
		note_sync_failure(NULL, 0, err);
	return err;
}

/* fdatasync of each object in the list; one that cannot be opened goes back
 * into the set, one whose sync failed is lost to it. Frees the list.
 * Returns the first error. Called under flush_lock. */
static int sync_list(struct obj_name *list)
{
	int err = 0;
	while (list) {
		struct obj_name *n = list;
		list = n->next;
		int fd = openat(F.dirfd, n->name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		int e = 0;
		if (fd < 0) {
			if (errno != ENOENT) {   /* deleted since: nothing to sync */
				e = errno;
				peer_error("FLUSH: cannot open object '%s' to sync it: %s", n->name,
					   strerror(e));
				mark_dirty(n->name, n->len);
			}
		} else {
			if (fdatasync(fd) < 0) {
				e = errno;
				note_sync_failure(n->name, n->len, e);
			}
			close(fd);
		}
		if (e && !err)
			err = e;
		free(n);
	}
	return err;
}

/*
 * Under flush_lock. The set is in memory only: what an earlier filed wrote
 * under --dir (killed, or stopped with writes never flushed) is in the page
 * cache, maybe dirty, and in no set. The first FLUSH syncs the whole file
 * system once (syncfs), else it was answered with those bytes not durable.
 */
static int sync_earlier(void)
{
	if (!F.unsure)
		return 0;
	if (syncfs(F.dirfd) < 0) {
		int err = errno;
		note_sync_failure(NULL, 0, err);
		return err;
	}
	F.unsure = false;
	return 0;
}

/* FLUSH: the object `name` (len bytes), or every object (name NULL). */
static int flush_objects(const char *name, size_t len)
{
	pthread_mutex_lock(&F.flush_lock);
	int early = sync_earlier();
	pthread_mutex_lock(&F.dirty_lock);
	struct obj_name *list = name ? obj_set_remove(&F.dirty, name, len)
				     : obj_set_take_all(&F.dirty);
	pthread_mutex_unlock(&F.dirty_lock);
	int err = sync_list(list);
	int e = sync_dir();
	pthread_mutex_unlock(&F.flush_lock);
	return early ? early : err ? err : e ? e : lost_to(name, len);
}

static int flush_all(void)
{
	return flush_objects(NULL, 0);
}

/* After a write: durable now (FUA) or at the next FLUSH. */
static int after_write(int fd, bool fua, const char *name, size_t len)
{
	if (!fua)
		return mark_dirty(name, len);
	if (fdatasync(fd) < 0) {
		int err = errno;   /* maybe an earlier acknowledged write's */
		note_sync_failure(name, len, err);
		return err;
	}
	/* Its entry too, whoever made it: this write, an earlier plain one,
	 * or the thread that won the race to create it (nothing when clean). */
	return sync_dir();
}

/* ---- operations ---------------------------------------------------------------- */

static int do_read(struct peer_thread *t, struct xseg_request *req, const char *name,
		   size_t len, char *data)
{
	uint64_t done = 0;
	int fd = fd_cache_get(files_of(t), name, len, false);
	if (fd < 0 && fd != -ENOENT)
		return -fd;
	while (fd >= 0 && done < req->size) {
		ssize_t n = pread(fd, data + done, req->size - done, (off_t)(req->offset + done));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno;
		}
		if (n == 0)
			break;   /* end of the object: the rest reads as zeros */
		done += (uint64_t)n;
	}
	memset(data + done, 0, req->size - done);
	req->serviced = req->size;
	return 0;
}

static int do_write(struct peer_thread *t, struct xseg_request *req, const char *name,
		    size_t len, const char *data)
{
	uint64_t done = 0;
	int fd = fd_cache_get(files_of(t), name, len, true);
	if (fd < 0)
		return -fd;
	while (done < req->size) {
		ssize_t n = pwrite(fd, data + done, req->size - done, (off_t)(req->offset + done));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno;
		}
		if (n == 0)
			return EIO;   /* no progress (never for a regular file): not a loop */
		done += (uint64_t)n;
	}
	int err = after_write(fd, req->flags & XF_FUA, name, len);
	if (!err)
		req->serviced = req->size;
	return err;
}

static int do_delete(const char *name, size_t len)
{
	/* The unlink and the drop of the name's dirty mark under dirty_lock: a
	 * WRITE that recreates the object in between marks it after, not
	 * before (the drop took that WRITE's mark, and a FLUSH answered after
	 * the WRITE never synced it). */
	pthread_mutex_lock(&F.dirty_lock);
	if (unlinkat(F.dirfd, name, 0) < 0) {
		int err = errno;
		pthread_mutex_unlock(&F.dirty_lock);
		return err;
	}
	free(obj_set_remove(&F.dirty, name, len));
	free(obj_set_remove(&F.sync_failed, name, len));   /* nothing of it to lose now */
	pthread_mutex_unlock(&F.dirty_lock);
	/* After the unlink: a thread that looks at its cache from now on drops
	 * a descriptor of the unlinked file. */
	atomic_fetch_add_explicit(&F.epoch, 1, memory_order_release);
	atomic_store(&F.dir_sync.dirty, 1);
	return 0;
}

static int do_info(struct peer_thread *t, struct xseg_request *req, const char *name)
{
	struct stat st;
	uint64_t size = 0;
	if (fstatat(F.dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (!S_ISREG(st.st_mode))
			return EINVAL;
		size = (uint64_t)st.st_size;
	} else if (errno != ENOENT) {
		return errno;
	}
	return blocker_reply_info(peer_segment(peer_of(t)), req, size);
}

/* Copies in to out from the start; returns 0 or an errno. */
static int copy_contents(int in, int out, uint64_t size, uint64_t *copied)
{
	uint64_t done = 0;
	bool plain = false;
	char *buf = NULL;
	int err = 0;

	while (done < size) {
		size_t want = size - done > COPY_CHUNK ? COPY_CHUNK : (size_t)(size - done);
		ssize_t n;
		if (!plain) {
			loff_t ioff = (loff_t)done, ooff = (loff_t)done;
			n = copy_file_range(in, &ioff, out, &ooff, want, 0);
			if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL ||
				      errno == EOPNOTSUPP)) {
				plain = true;
				continue;
			}
		} else {
			if (!buf && !(buf = malloc(COPY_CHUNK))) {
				err = ENOMEM;
				break;
			}
			n = pread(in, buf, want, (off_t)done);
			if (n > 0) {
				ssize_t w = 0, k;
				while (w < n) {
					k = pwrite(out, buf + w, (size_t)(n - w), (off_t)done + w);
					if (k == 0)
						errno = EIO;   /* no progress: not a loop */
					if ((k < 0 && errno != EINTR) || k == 0)
						break;
					w += k > 0 ? k : 0;
				}
				if (w < n)
					n = -1;
			}
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			err = errno;
			break;
		}
		if (n == 0)
			break;   /* the source shrank meanwhile */
		done += (uint64_t)n;
	}
	free(buf);
	*copied = done;
	return err;
}

static int do_copy(struct peer_thread *t, struct xseg_request *req, const char *name,
		   size_t len, const char *data)
{
	const char *from, *why;
	uint32_t from_len;
	char shown[BLOCKER_PRINTABLE_SIZE];
	int err;

	if ((err = blocker_copy_source(data, req->datalen, F.max_name, &from, &from_len,
				       &why)) != 0) {
		if (from)
			warn_refused("refused COPY source name '%s' (%u bytes): %s",
				     blocker_printable(from, from_len, shown, sizeof(shown)), from_len,
				     why);
		else
			warn_refused("refused COPY to '%s': %s (%" PRIu64 " bytes of data)", name,
				     why, req->datalen);
		return err;
	}
	char src[BLOCKER_NAME_MAX + 1];
	memcpy(src, from, from_len);
	src[from_len] = '\0';
	int in = openat(F.dirfd, src, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (in < 0)
		return errno;
	int out = fd_cache_get(files_of(t), name, len, true);
	struct stat si, so;
	if (out < 0) {
		err = -out;
	} else if (fstat(in, &si) < 0 || fstat(out, &so) < 0) {
		err = errno;
	} else if (si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
		req->serviced = (uint64_t)si.st_size;   /* onto itself: nothing to do */
	} else if (ftruncate(out, 0) < 0) {
		err = errno;
	} else {
		uint64_t copied = 0;
		err = copy_contents(in, out, (uint64_t)si.st_size, &copied);
		if (!err)
			err = after_write(out, req->flags & XF_FUA, name, len);
		if (!err)
			req->serviced = copied;
	}
	close(in);
	return err;
}

/* ---- the peer ---------------------------------------------------------------------- */

static int serve(struct peer_thread *t, struct xseg_request *req)
{
	char own[BLOCKER_NAME_MAX + 1];   /* the name, NUL-terminated at targetlen */
	char *name = xseg_get_target(peer_segment(peer_of(t)), req);
	char *data = xseg_get_data(peer_segment(peer_of(t)), req);
	size_t len = name ? req->targetlen : 0;
	const char *why;
	char shown[BLOCKER_PRINTABLE_SIZE];
	int err;

	req->serviced = 0;
	if ((req->flags & XF_FLUSH) && (err = flush_all()) != 0)
		return err;
	if (req->op == X_FLUSH && len == 0)
		return flush_all();
	if ((err = blocker_check_name(name, len, F.max_name, &why)) != 0) {
		warn_refused("refused object name '%s' (%zu bytes) in a %s request: %s",
			     blocker_printable(name, len, shown, sizeof(shown)), len,
			     xseg_op_name(req->op), why);
		return err;
	}
	/* The name is targetlen bytes: the buffer may hold more before a NUL
	 * (room to rename in place), which the system calls below would take
	 * for part of the name ("abc" with "def" after it wrote "abcdef";
	 * "lost+found" with "/../../x" after it, outside --dir). */
	memcpy(own, name, len);
	own[len] = '\0';
	name = own;
	switch (req->op) {
	case X_READ:
	case X_WRITE:
		if (req->size > req->datalen || req->size > F.max_request ||
		    req->offset > (uint64_t)INT64_MAX - req->size) {
			warn_refused("refused %s of %" PRIu64 " bytes at %" PRIu64 " on '%s': the "
				     "buffer holds %" PRIu64 ", the limit is %" PRIu64,
				     xseg_op_name(req->op), req->size, req->offset, name,
				     req->datalen, F.max_request);
			return EINVAL;
		}
		if (F.delay_us)
			usleep((useconds_t)F.delay_us);
		if (inject_failure())
			return EIO;
		return req->op == X_READ ? do_read(t, req, name, len, data)
					 : do_write(t, req, name, len, data);
	case X_FLUSH:
		return flush_objects(name, len);
	case X_DELETE:
		return do_delete(name, len);
	case X_INFO:
		return do_info(t, req, name);
	case X_COPY:
		return do_copy(t, req, name, len, data);
	}
	return EOPNOTSUPP;
}

static void on_request(struct peer_thread *t, struct xseg_request *req)
{
	int err = serve(t, req);
	if (err) {
		peer_debug("%s '%.64s' failed: %s", xseg_op_name(req->op),
			   req->targetlen ? xseg_get_target(peer_segment(peer_of(t)), req) : "",
			   strerror(err));
		peer_fail(t, req, err);
	} else {
		peer_complete(t, req);
	}
}

static int mkdirs(const char *path)
{
	char buf[4096];
	size_t n = strlen(path);
	if (n >= sizeof(buf)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(buf, path, n + 1);
	for (char *s = buf + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(buf, 0700) < 0 && errno != EEXIST)
			return -1;
		*s = '/';
	}
	return mkdir(buf, 0700) < 0 && errno != EEXIST ? -1 : 0;
}

static int init(struct peer *p)
{
	struct rlimit rl;

	if (mkdirs(F.dir) < 0) {
		peer_error("--dir: cannot create '%s': %s", F.dir, strerror(errno));
		return -1;
	}
	F.dirfd = open(F.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (F.dirfd < 0) {
		peer_error("--dir: cannot open '%s': %s", F.dir, strerror(errno));
		return -1;
	}
	uint64_t want = F.fd_cache * peer_nr_threads(p) + 64;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    want > rl.rlim_cur) {
		uint64_t fit = rl.rlim_cur > 64 + peer_nr_threads(p) ?
			       (rl.rlim_cur - 64) / peer_nr_threads(p) : 1;
		peer_warn("--fd-cache %" PRIu64 " x %u threads exceeds the open file limit %llu; "
			  "using %" PRIu64, F.fd_cache, peer_nr_threads(p),
			  (unsigned long long)rl.rlim_cur, fit);
		F.fd_cache = fit;
	}
	obj_set_init(&F.dirty);
	obj_set_init(&F.sync_failed);
	F.unsure = true;
	peer_info("objects under %s", F.dir);
	return 0;
}

static int thread_init(struct peer_thread *t)
{
	struct filed_thread *ft = calloc(1, sizeof(*ft));
	if (!ft || fd_cache_init(&ft->files, (unsigned)F.fd_cache, F.dirfd, &F.epoch, &F.dir_sync) < 0) {
		free(ft);
		return -1;
	}
	peer_thread_set_priv(t, ft);
	return 0;
}

static void thread_fini(struct peer_thread *t)
{
	struct filed_thread *ft = peer_thread_priv(t);
	if (!ft)
		return;
	fd_cache_destroy(&ft->files);
	free(ft);
	peer_thread_set_priv(t, NULL);
}

/* Everything acknowledged is made durable before exit. */
static void fini(struct peer *p)
{
	(void)p;
	if (flush_all() != 0)
		peer_error("final sync failed: some written data may not be durable");
	obj_set_destroy(&F.dirty);
	obj_set_destroy(&F.sync_failed);
	close(F.dirfd);
	F.dirfd = -1;
}

static const struct peer_ops filed_ops = {
	.name = "filed",
	.summary = "Blocker: stores each object as a file under --dir.",
	.options = filed_options,
	.options_usage = filed_usage,
	.parse_option = parse_option,
	.check_options = check_options,
	.default_threads = 2,
	.supported_ops = PEER_OP(X_READ) | PEER_OP(X_WRITE) | PEER_OP(X_FLUSH) |
			 PEER_OP(X_DELETE) | PEER_OP(X_INFO) | PEER_OP(X_COPY),
	.accept_batch = 4,
	.default_watchers = PEER_WATCHERS_ALL,   /* workers block in pread/pwrite/fsync */
	.init = init,
	.thread_init = thread_init,
	.thread_fini = thread_fini,
	.on_request = on_request,
	.fini = fini,
};

int main(int argc, char **argv)
{
	return peer_main(argc, argv, &filed_ops, &F);
}
