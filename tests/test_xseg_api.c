/*
 * libxseg unit tests, part 1: segments (create, join, destroy, info,
 * header checks), ports (bind, ranges, leave, info, live owners in other
 * processes), routing (next hops, cycles, resolve_route) and names/parsing.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/xseg_internal.h"
#include "support/xseg_test_util.h"

static void shm_file(const char *name, char *buf, size_t len)
{
	snprintf(buf, len, "/dev/shm/%s", name);
}

static bool shm_exists(const char *name)
{
	char path[256];
	shm_file(name, path, sizeof(path));
	return access(path, F_OK) == 0;
}

static void small_cfg(struct xseg_config *cfg)
{
	xseg_config_default(cfg);
	cfg->nr_ports = 4;
	cfg->nr_requests = 8;
	cfg->heap_size = 4096;
}

#define ck_assert_error_mentions(s)                                          \
	ck_assert_msg(strstr(xseg_last_error(), (s)) != NULL,                  \
		      "last error '%s' does not mention '%s'", xseg_last_error(), (s))

/* ==== segment ============================================================ */

START_TEST(config_default_values)
{
	struct xseg_config cfg;
	memset(&cfg, 0xab, sizeof(cfg));
	xseg_config_default(&cfg);
	ck_assert_uint_eq(cfg.nr_ports, XSEG_DEFAULT_PORTS);
	ck_assert_uint_eq(cfg.nr_requests, XSEG_DEFAULT_REQUESTS);
	ck_assert_uint_eq(cfg.heap_size, XSEG_DEFAULT_HEAP);
	ck_assert_uint_eq(cfg.mode, 0600);
}
END_TEST

START_TEST(create_bad_arguments)
{
	struct xseg_config cfg;
	char name[64], longname[XSEG_NAME_MAX + 2];

	small_cfg(&cfg);
	xt_make_name(name, sizeof(name));
	ck_assert_int_eq(xseg_create(name, NULL), -EINVAL);
	ck_assert_int_eq(xseg_create(NULL, &cfg), -EINVAL);
	ck_assert_int_eq(xseg_create("", &cfg), -EINVAL);
	ck_assert_int_eq(xseg_create("a/b", &cfg), -EINVAL);
	ck_assert_error_mentions("'/'");
	ck_assert_int_eq(xseg_create("/leading", &cfg), -EINVAL);

	memset(longname, 'x', sizeof(longname));
	longname[XSEG_NAME_MAX + 1] = '\0';          /* one byte too long */
	ck_assert_int_eq(xseg_create(longname, &cfg), -ENAMETOOLONG);
	ck_assert_error_mentions("longer");

	cfg.nr_ports = 0;
	ck_assert_int_eq(xseg_create(name, &cfg), -EINVAL);
	ck_assert_error_mentions("ports 0");
	cfg.nr_ports = XSEG_MAX_PORTS + 1;
	ck_assert_int_eq(xseg_create(name, &cfg), -EINVAL);
	small_cfg(&cfg);
	cfg.nr_requests = 0;
	ck_assert_int_eq(xseg_create(name, &cfg), -EINVAL);
	ck_assert_error_mentions("requests 0");
	cfg.nr_requests = XSEG_MAX_REQUESTS + 1;
	ck_assert_int_eq(xseg_create(name, &cfg), -EINVAL);
	small_cfg(&cfg);
	cfg.heap_size = 0;
	ck_assert_int_eq(xseg_create(name, &cfg), -EINVAL);
	cfg.heap_size = 100;
	ck_assert_int_eq(xseg_create(name, &cfg), -EINVAL);
	ck_assert_error_mentions("heap size 100");
	cfg.heap_size = (1ull << 40) + 1;
	ck_assert_int_eq(xseg_create(name, &cfg), -EINVAL);
	cfg.heap_size = UINT64_MAX;
	ck_assert_int_eq(xseg_create(name, &cfg), -EINVAL);

	/* Nothing was left behind by any of these. */
	ck_assert(!shm_exists(name));
}
END_TEST

START_TEST(create_longest_name)
{
	struct xseg_config cfg;
	char name[XSEG_NAME_MAX + 1];
	struct xseg *seg;

	small_cfg(&cfg);
	/* Unique, and exactly XSEG_NAME_MAX bytes. */
	xt_make_name(name, sizeof(name));
	size_t len = strlen(name);
	memset(name + len, 'z', XSEG_NAME_MAX - len);
	name[XSEG_NAME_MAX] = '\0';
	ck_assert_int_eq(xseg_create(name, &cfg), 0);
	ck_assert_int_eq(xseg_join(name, &seg), 0);
	xseg_leave(seg);
	ck_assert_int_eq(xseg_destroy(name), 0);
}
END_TEST

START_TEST(create_exists_and_mode)
{
	struct xseg_config cfg;
	struct stat st;
	char path[256];

	small_cfg(&cfg);
	cfg.mode = 0;                       /* 0 means the default, 0600 */
	xt_make_name(xt_name, sizeof(xt_name));
	umask(0);                           /* the mode must not depend on it... */
	ck_assert_int_eq(xseg_create(xt_name, &cfg), 0);
	ck_assert_int_eq(xseg_create(xt_name, &cfg), -EEXIST);
	ck_assert_error_mentions(xt_name);
	shm_file(xt_name, path, sizeof(path));
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_uint_eq(st.st_mode & 0777, 0600);

	/* ...nor strip bits the caller asked for. */
	char other[64];
	xt_make_name(other, sizeof(other));
	umask(077);
	cfg.mode = 0640;
	ck_assert_int_eq(xseg_create(other, &cfg), 0);
	shm_file(other, path, sizeof(path));
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_uint_eq(st.st_mode & 0777, 0640);
	ck_assert_int_eq(xseg_destroy(other), 0);
	umask(022);
}
END_TEST

START_TEST(join_bad_arguments)
{
	struct xseg *seg = (struct xseg *)0x1;
	char name[64];

	xt_make_name(name, sizeof(name));
	ck_assert_int_eq(xseg_join(name, NULL), -EINVAL);
	ck_assert_int_eq(xseg_join(name, &seg), -ENOENT);
	ck_assert_ptr_null(seg);
	ck_assert_error_mentions(name);
	ck_assert_int_eq(xseg_join(NULL, &seg), -EINVAL);
	ck_assert_int_eq(xseg_join("", &seg), -EINVAL);
	ck_assert_int_eq(xseg_join("x/y", &seg), -EINVAL);
	xseg_leave(NULL);                   /* harmless */
}
END_TEST

/* Maps xt_name's header writable through a second mapping. */
static struct xseg_header *map_header(int *fd_out)
{
	char path[256];
	shm_file(xt_name, path, sizeof(path));
	int fd = open(path, O_RDWR);
	ck_assert_int_ge(fd, 0);
	void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert(p != MAP_FAILED);
	*fd_out = fd;
	return p;
}

static void unmap_header(struct xseg_header *h, int fd)
{
	munmap(h, 4096);
	close(fd);
}

static void create_small(void)
{
	struct xseg_config cfg;
	small_cfg(&cfg);
	xt_make_name(xt_name, sizeof(xt_name));
	ck_assert_int_eq(xseg_create(xt_name, &cfg), 0);
}

START_TEST(join_rejects_corrupt_header)
{
	struct xseg *seg = NULL;
	int fd;

	create_small();
	struct xseg_header *h = map_header(&fd);

	/* A scribbled size field: the checksum no longer matches. */
	uint32_t saved = h->nr_ports;
	h->nr_ports = 60000;
	ck_assert_int_eq(xseg_join(xt_name, &seg), -EBADMSG);
	ck_assert_ptr_null(seg);
	ck_assert_error_mentions("checksum");
	h->nr_ports = saved;

	/* A scribbled offset. */
	h->heap_off += 4096;
	ck_assert_int_eq(xseg_join(xt_name, &seg), -EBADMSG);
	h->heap_off -= 4096;

	/* Bad magic. */
	h->magic[0] = 'Y';
	ck_assert_int_eq(xseg_join(xt_name, &seg), -EBADMSG);
	ck_assert_error_mentions("magic");
	h->magic[0] = 'X';

	/* Restored: joins again. */
	ck_assert_int_eq(xseg_join(xt_name, &seg), 0);
	xseg_leave(seg);
	seg = NULL;

	/* Random garbage over the whole header. */
	unsigned char *b = (unsigned char *)h, copy[sizeof(*h)];
	memcpy(copy, b, sizeof(copy));
	for (size_t i = 0; i < sizeof(copy); i++)
		b[i] = (unsigned char)(i * 37 + 11);
	int rc = xseg_join(xt_name, &seg);
	ck_assert_msg(rc == -EBADMSG || rc == -EPROTO, "garbage header joined: %d", rc);
	ck_assert_ptr_null(seg);
	memcpy(b, copy, sizeof(copy));
	unmap_header(h, fd);
}
END_TEST

START_TEST(join_rejects_other_version)
{
	struct xseg *seg = NULL;
	int fd;

	create_small();
	struct xseg_header *h = map_header(&fd);
	h->layout_version = XSEG_LAYOUT_VERSION + 1;
	ck_assert_int_eq(xseg_join(xt_name, &seg), -EPROTO);
	ck_assert_ptr_null(seg);
	ck_assert_error_mentions("version");
	h->layout_version = XSEG_LAYOUT_VERSION - 1;
	ck_assert_int_eq(xseg_join(xt_name, &seg), -EPROTO);
	h->layout_version = XSEG_LAYOUT_VERSION;
	ck_assert_int_eq(xseg_join(xt_name, &seg), 0);
	xseg_leave(seg);
	unmap_header(h, fd);
}
END_TEST

START_TEST(join_rejects_unready_and_short)
{
	struct xseg *seg = NULL;
	struct stat st;
	char path[256];
	int fd;

	create_small();
	struct xseg_header *h = map_header(&fd);
	atomic_store(&h->ready, 0);
	ck_assert_int_eq(xseg_join(xt_name, &seg), -EAGAIN);
	atomic_store(&h->ready, 1);
	unmap_header(h, fd);

	/* A truncated segment: the header says more than the file holds. */
	shm_file(xt_name, path, sizeof(path));
	fd = open(path, O_RDWR);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_int_eq(ftruncate(fd, st.st_size - 4096), 0);
	ck_assert_int_eq(xseg_join(xt_name, &seg), -EBADMSG);
	ck_assert_error_mentions("bytes");
	/* Too small to hold a header at all. */
	ck_assert_int_eq(ftruncate(fd, 16), 0);
	ck_assert_int_eq(xseg_join(xt_name, &seg), -EBADMSG);
	ck_assert_ptr_null(seg);
	close(fd);
}
END_TEST

START_TEST(destroy_semantics)
{
	struct xseg *seg;
	char name[64];

	xt_make_name(name, sizeof(name));
	ck_assert_int_eq(xseg_destroy(name), -ENOENT);
	ck_assert_int_eq(xseg_destroy(NULL), -EINVAL);
	ck_assert_int_eq(xseg_destroy("a/b"), -EINVAL);

	create_small();
	ck_assert_int_eq(xseg_join(xt_name, &seg), 0);
	ck_assert_int_eq(xseg_destroy(xt_name), 0);
	ck_assert(!shm_exists(xt_name));
	ck_assert_int_eq(xseg_join(xt_name, &xt_seg), -ENOENT);
	/* A process that joined keeps a working mapping. */
	ck_assert_int_eq(xseg_bind_port(seg, 0), 0);
	struct xseg_request *r = xseg_get_request(seg, 0);
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(xseg_put_request(seg, r), 0);
	xseg_leave(seg);
	/* The name can be reused. */
	struct xseg_config cfg;
	small_cfg(&cfg);
	ck_assert_int_eq(xseg_create(xt_name, &cfg), 0);
}
END_TEST

START_TEST(segment_info_fresh)
{
	struct xseg_segment_info info;
	struct stat st;
	char path[256];

	xt_setup_with(5, 33, 5000);     /* heap rounds up to 8K */
	ck_assert_int_eq(xseg_segment_info(NULL, &info), -EINVAL);
	ck_assert_int_eq(xseg_segment_info(xt_seg, NULL), -EINVAL);
	ck_assert_int_eq(xseg_segment_info(xt_seg, &info), 0);
	ck_assert_uint_eq(info.layout_version, XSEG_LAYOUT_VERSION);
	ck_assert_uint_eq(info.nr_ports, 5);
	ck_assert_uint_eq(info.nr_requests, 33);
	ck_assert_uint_eq(info.free_requests, 33);
	ck_assert_uint_eq(info.heap_size, 8192);
	ck_assert_uint_eq(info.heap_used, 0);
	ck_assert_uint_eq(info.heap_allocs, 0);
	ck_assert_uint_eq(info.heap_free_largest, 8192);
	shm_file(xt_name, path, sizeof(path));
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_uint_eq(info.segment_size, (uint64_t)st.st_size);
	ck_assert_uint_ge(info.segment_size, 8192 + 33 * sizeof(struct xseg_request));
	/* Every port starts unbound and unrouted. */
	for (uint32_t p = 0; p < 5; p++) {
		struct xseg_port_info pi;
		ck_assert_int_eq(xseg_port_info(xt_seg, p, &pi), 0);
		ck_assert_uint_eq(pi.port, p);
		ck_assert_int_eq(pi.owner, 0);
		ck_assert_int_eq(pi.owner_alive, 0);
		ck_assert_uint_eq(pi.next_hop, XSEG_NO_PORT);
		ck_assert_uint_eq(pi.request_depth, 0);
		ck_assert_uint_eq(pi.reply_depth, 0);
		ck_assert_uint_eq(pi.waiters, 0);
		ck_assert_uint_eq(pi.submitted, 0);
		ck_assert_uint_eq(pi.replied, 0);
	}
}
END_TEST

START_TEST(last_error_is_per_thread_text)
{
	char name[64];
	struct xseg *seg;
	xt_make_name(name, sizeof(name));
	ck_assert_int_eq(xseg_join(name, &seg), -ENOENT);
	ck_assert_ptr_nonnull(xseg_last_error());
	ck_assert_error_mentions(name);
}
END_TEST

/* ==== ports ============================================================== */

START_TEST(bind_bad_arguments)
{
	ck_assert_int_eq(xseg_bind_port(NULL, 0), -EINVAL);
	ck_assert_int_eq(xseg_bind_port(xt_seg, 16), -EINVAL);
	ck_assert_int_eq(xseg_bind_port(xt_seg, XSEG_NO_PORT), -EINVAL);
	ck_assert_int_eq(xseg_bind_range(xt_seg, 3, 2), -EINVAL);
	ck_assert_int_eq(xseg_bind_range(xt_seg, 10, 16), -EINVAL);
	ck_assert_int_eq(xseg_bind_range(xt_seg, 0, UINT32_MAX), -EINVAL);
	ck_assert_error_mentions("0..15");
	for (uint32_t p = 0; p < 16; p++) {
		struct xseg_port_info pi;
		ck_assert_int_eq(xseg_port_info(xt_seg, p, &pi), 0);
		ck_assert_int_eq(pi.owner, 0);
	}
}
END_TEST

START_TEST(bind_and_double_bind)
{
	struct xseg_port_info pi;

	ck_assert_int_eq(xseg_bind_port(xt_seg, 3), 0);
	ck_assert_int_eq(xseg_port_info(xt_seg, 3, &pi), 0);
	ck_assert_int_eq(pi.owner, getpid());
	ck_assert_int_eq(pi.owner_alive, 1);
	ck_assert_int_eq(xseg_bind_port(xt_seg, 3), -EBUSY);
	ck_assert_error_mentions("port 3");

	/* A second handle in the same process cannot take it either. */
	struct xseg *other;
	ck_assert_int_eq(xseg_join(xt_name, &other), 0);
	ck_assert_int_eq(xseg_bind_port(other, 3), -EBUSY);
	ck_assert_int_eq(xseg_bind_port(other, 4), 0);
	xseg_leave(other);          /* releases 4, not 3 */
	ck_assert_int_eq(xseg_port_info(xt_seg, 4, &pi), 0);
	ck_assert_int_eq(pi.owner, 0);
	ck_assert_int_eq(xseg_port_info(xt_seg, 3, &pi), 0);
	ck_assert_int_eq(pi.owner, getpid());
}
END_TEST

START_TEST(bind_range_is_all_or_nothing)
{
	struct xseg_port_info pi;

	ck_assert_int_eq(xseg_bind_port(xt_seg, 6), 0);
	ck_assert_int_eq(xseg_bind_range(xt_seg, 3, 8), -EBUSY);
	for (uint32_t p = 3; p <= 8; p++) {
		ck_assert_int_eq(xseg_port_info(xt_seg, p, &pi), 0);
		ck_assert_int_eq(pi.owner, p == 6 ? getpid() : 0);
	}
	ck_assert_int_eq(xseg_bind_range(xt_seg, 7, 15), 0);
	for (uint32_t p = 7; p <= 15; p++) {
		ck_assert_int_eq(xseg_port_info(xt_seg, p, &pi), 0);
		ck_assert_int_eq(pi.owner, getpid());
	}
	ck_assert_int_eq(xseg_bind_range(xt_seg, 0, 0), 0);
}
END_TEST

START_TEST(leave_port_semantics)
{
	struct xseg_port_info pi;

	ck_assert_int_eq(xseg_leave_port(xt_seg, 16), -EINVAL);
	ck_assert_int_eq(xseg_leave_port(NULL, 0), -EINVAL);
	ck_assert_int_eq(xseg_leave_port(xt_seg, 2), -EPERM);
	ck_assert_int_eq(xseg_bind_port(xt_seg, 2), 0);
	ck_assert_int_eq(xseg_leave_port(xt_seg, 2), 0);
	ck_assert_int_eq(xseg_port_info(xt_seg, 2, &pi), 0);
	ck_assert_int_eq(pi.owner, 0);
	ck_assert_int_eq(xseg_leave_port(xt_seg, 2), -EPERM);
	ck_assert_int_eq(xseg_bind_port(xt_seg, 2), 0);

	/* Requests queued on a port that is left fail back to their issuer
	 * at once (EHOSTDOWN): nobody is there to serve them. */
	ck_assert_int_eq(xseg_bind_port(xt_seg, 1), 0);
	struct xseg_request *r = xseg_get_request(xt_seg, 1);
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(xseg_submit(xt_seg, r, 1, 2), 2);
	ck_assert_int_eq(xseg_leave_port(xt_seg, 2), 0);
	ck_assert_int_eq(xseg_port_info(xt_seg, 2, &pi), 0);
	ck_assert_uint_eq(pi.request_depth, 0);
	struct xseg_request *got;
	ck_assert_int_eq(xseg_receive(xt_seg, 1, &got, 1), 1);
	ck_assert_ptr_eq(got, r);
	ck_assert_uint_eq(got->result, XR_FAILED);
	ck_assert_int_eq(got->error, EHOSTDOWN);
	ck_assert_int_eq(xseg_put_request(xt_seg, got), 0);
	ck_assert_int_eq(xseg_bind_port(xt_seg, 2), 0);
}
END_TEST

START_TEST(port_info_bad_arguments)
{
	struct xseg_port_info pi;
	ck_assert_int_eq(xseg_port_info(xt_seg, 16, &pi), -EINVAL);
	ck_assert_int_eq(xseg_port_info(xt_seg, 0, NULL), -EINVAL);
	ck_assert_int_eq(xseg_port_info(NULL, 0, &pi), -EINVAL);
}
END_TEST

/* A live owner in another process keeps its port; once it is gone (and
 * reaped) the port can be taken over. */
START_TEST(live_owner_in_other_process)
{
	int up[2], down[2];
	char c = 0;
	struct xseg_port_info pi;

	ck_assert_int_eq(pipe(up), 0);
	ck_assert_int_eq(pipe(down), 0);
	pid_t pid = xt_fork(20);
	if (pid == 0) {
		struct xseg *seg;
		XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
		XT_CHILD_CHECK(xseg_bind_range(seg, 3, 5) == 0, 3, "%s", xseg_last_error());
		XT_CHILD_CHECK(write(up[1], "r", 1) == 1, 4, "write");
		XT_CHILD_CHECK(read(down[0], &c, 1) == 1, 5, "read");
		_exit(0);       /* without leaving: the ports stay owned by a dead pid */
	}
	ck_assert_int_eq(read(up[0], &c, 1), 1);
	ck_assert_int_eq(xseg_bind_port(xt_seg, 4), -EBUSY);
	char pidtext[16];
	snprintf(pidtext, sizeof(pidtext), "%d", (int)pid);
	ck_assert_error_mentions(pidtext);
	ck_assert_int_eq(xseg_bind_range(xt_seg, 0, 3), -EBUSY);
	ck_assert_int_eq(xseg_port_info(xt_seg, 0, &pi), 0);
	ck_assert_int_eq(pi.owner, 0);                      /* rolled back */
	ck_assert_int_eq(xseg_port_info(xt_seg, 5, &pi), 0);
	ck_assert_int_eq(pi.owner, pid);
	ck_assert_int_eq(pi.owner_alive, 1);
	ck_assert_int_eq(xseg_leave_port(xt_seg, 5), -EPERM);  /* not ours */

	ck_assert_int_eq(write(down[1], "q", 1), 1);
	xt_expect_child_ok(pid, 10000, "port holder");
	ck_assert_int_eq(xseg_port_info(xt_seg, 5, &pi), 0);
	ck_assert_int_eq(pi.owner, pid);
	ck_assert_int_eq(pi.owner_alive, 0);
	ck_assert_int_eq(xseg_bind_range(xt_seg, 3, 5), 0);
	ck_assert_int_eq(xseg_port_info(xt_seg, 5, &pi), 0);
	ck_assert_int_eq(pi.owner, getpid());
	ck_assert_int_eq(pi.owner_alive, 1);
}
END_TEST

/* An owner word whose start time does not match the live process with that
 * pid is a recycled pid: the port is free to take. */
START_TEST(recycled_pid_is_not_the_owner)
{
	struct xseg_port_info pi;

	/* pid 1 is alive, but did not bind port 7 at this start time. */
	atomic_store(&xt_seg->ports[7].owner, ((uint64_t)12345 << 32) | 1u);
	ck_assert_int_eq(xseg_port_info(xt_seg, 7, &pi), 0);
	ck_assert_int_eq(pi.owner, 1);
	ck_assert_int_eq(pi.owner_alive, 0);
	ck_assert_int_eq(xseg_bind_port(xt_seg, 7), 0);
	ck_assert_int_eq(xseg_port_info(xt_seg, 7, &pi), 0);
	ck_assert_int_eq(pi.owner, getpid());
}
END_TEST

/* The same when the recycled pid is this process's own: a peer that died
 * bound port 7 and this process, started later, got its pid (a restarted
 * service in a fresh pid namespace, or pids wrapped). The owner word's
 * start time is not ours, so the port is a dead owner's: a bind must take
 * it over, and before that this process must not count as its owner. */
START_TEST(own_recycled_pid_is_not_the_owner)
{
	struct xseg_port_info pi;

	atomic_store(&xt_seg->ports[7].owner, ((uint64_t)12345 << 32) | (uint32_t)getpid());
	ck_assert_int_eq(xseg_port_info(xt_seg, 7, &pi), 0);
	ck_assert_int_eq(pi.owner_alive, 0);
	/* not bound here: no request may be taken for it */
	struct xseg_request *r = xseg_get_request(xt_seg, 7);
	int rc = xseg_bind_port(xt_seg, 7);
	ck_assert_msg(r == NULL && rc == 0,
		      "get_request on the dead owner's port 7: %s; bind: %d (%s)",
		      r ? "got a request" : "refused", rc, xseg_last_error());
}
END_TEST

/* The state of pid in /proc/PID/stat ('?' when it cannot be read). */
static char proc_state(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return '?';
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return '?';
	buf[n] = '\0';
	char *p = strrchr(buf, ')');
	return p && p[1] == ' ' ? p[2] : '?';
}

static void wait_state(pid_t pid, char state)
{
	for (int i = 0; i < 1000 && proc_state(pid) != state; i++)
		usleep(5000);
	ck_assert_int_eq(proc_state(pid), state);
}

/* An owner that exited and was not reaped yet (a zombie: a daemon's
 * parent is init, which may reap it much later) holds nothing any more:
 * its port is a dead owner's, to be taken over. */
START_TEST(zombie_owner_is_dead)
{
	struct xseg_port_info pi;
	int up[2];
	char c = 0;

	ck_assert_int_eq(pipe(up), 0);
	pid_t pid = xt_fork(20);
	if (pid == 0) {
		struct xseg *seg;
		XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
		XT_CHILD_CHECK(xseg_bind_port(seg, 6) == 0, 3, "%s", xseg_last_error());
		XT_CHILD_CHECK(write(up[1], "r", 1) == 1, 4, "write");
		_exit(0);       /* not reaped until we wait: a zombie */
	}
	ck_assert_int_eq(read(up[0], &c, 1), 1);
	wait_state(pid, 'Z');
	/* its other threads (TSan's own, here) end a moment after the leader
	 * shows Z: until then it runs */
	for (int i = 0; i < 1000; i++) {
		ck_assert_int_eq(xseg_port_info(xt_seg, 6, &pi), 0);
		if (!pi.owner_alive)
			break;
		usleep(5000);
	}
	ck_assert_int_eq(pi.owner, pid);
	ck_assert_int_eq(pi.owner_alive, 0);
	ck_assert_msg(xseg_bind_port(xt_seg, 6) == 0, "bind over zombie %d: %s", (int)pid,
		      xseg_last_error());
	xt_expect_child_ok(pid, 10000, "zombie");
}
END_TEST

static int main_ended_pipe = -1;

static void *main_ended_thread(void *arg)
{
	(void)arg;
	char c;
	if (read(main_ended_pipe, &c, 1) != 1)
		_exit(6);
	_exit(0);   /* the whole process, without atexit's leak check */
}

/* A process whose main thread alone ended reads as a zombie too in
 * /proc/PID/stat, but its other threads run: it stays the owner. */
START_TEST(main_thread_ended_owner_stays_alive)
{
	struct xseg_port_info pi;
	int up[2], down[2];
	char c = 0;

	ck_assert_int_eq(pipe(up), 0);
	ck_assert_int_eq(pipe(down), 0);
	pid_t pid = xt_fork(20);
	if (pid == 0) {
		struct xseg *seg;
		pthread_t t;
		XT_CHILD_CHECK(xseg_join(xt_name, &seg) == 0, 2, "%s", xseg_last_error());
		XT_CHILD_CHECK(xseg_bind_port(seg, 6) == 0, 3, "%s", xseg_last_error());
		main_ended_pipe = down[0];
		XT_CHILD_CHECK(pthread_create(&t, NULL, main_ended_thread, NULL) == 0, 4, "thread");
		XT_CHILD_CHECK(write(up[1], "r", 1) == 1, 5, "write");
		pthread_exit(NULL);
	}
	ck_assert_int_eq(read(up[0], &c, 1), 1);
	wait_state(pid, 'Z');
	ck_assert_int_eq(xseg_port_info(xt_seg, 6, &pi), 0);
	ck_assert_int_eq(pi.owner, pid);
	ck_assert_int_eq(pi.owner_alive, 1);
	ck_assert_int_eq(xseg_bind_port(xt_seg, 6), -EBUSY);
	ck_assert_int_eq(write(down[1], "q", 1), 1);
	xt_expect_child_ok(pid, 10000, "main thread ended");
}
END_TEST

/* ==== routing ============================================================ */

enum { PA = 1, PB = 2, PC = 3, PD = 4 };

START_TEST(next_hop_bad_arguments)
{
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, 16, 1), -EINVAL);
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, 1, 16), -EINVAL);
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, 1, XSEG_NO_PORT), -EINVAL);
	ck_assert_int_eq(xseg_set_next_hop(NULL, 1, 2), -EINVAL);
	ck_assert_int_eq(xseg_clear_next_hop(xt_seg, 16), -EINVAL);
	ck_assert_uint_eq(xseg_get_next_hop(xt_seg, 16), XSEG_NO_PORT);
	ck_assert_uint_eq(xseg_get_next_hop(NULL, 0), XSEG_NO_PORT);
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, 5, 5), -ELOOP);
	ck_assert_uint_eq(xseg_get_next_hop(xt_seg, 5), XSEG_NO_PORT);
}
END_TEST

START_TEST(next_hop_set_clear_cycles)
{
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, PB, PC), 0);
	ck_assert_uint_eq(xseg_get_next_hop(xt_seg, PB), PC);
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, PC, PB), -ELOOP);
	ck_assert_error_mentions("cycle");
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, PC, PD), 0);
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, PD, PB), -ELOOP);
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, PD, PC), -ELOOP);
	ck_assert_uint_eq(xseg_get_next_hop(xt_seg, PD), XSEG_NO_PORT);
	/* Re-pointing is fine when it closes nothing. */
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, PB, PD), 0);
	ck_assert_uint_eq(xseg_get_next_hop(xt_seg, PB), PD);
	ck_assert_int_eq(xseg_clear_next_hop(xt_seg, PB), 0);
	ck_assert_uint_eq(xseg_get_next_hop(xt_seg, PB), XSEG_NO_PORT);
	ck_assert_int_eq(xseg_clear_next_hop(xt_seg, PB), 0);   /* idempotent */
	ck_assert_int_eq(xseg_clear_next_hop(xt_seg, PC), 0);
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, PD, PB), 0);
	struct xseg_port_info pi;
	ck_assert_int_eq(xseg_port_info(xt_seg, PD, &pi), 0);
	ck_assert_uint_eq(pi.next_hop, PB);
}
END_TEST

static void setup_32_ports(void)
{
	xt_setup_with(32, 64, 64 << 10);
}

START_TEST(next_hop_chain_length_limit)
{
	/* 16 ports in a chain (15 hops) are the most a return path can
	 * hold: a client's entry and one per hop but the last. */
	for (uint32_t i = 15; i-- > 0;)
		ck_assert_int_eq(xseg_set_next_hop(xt_seg, i, i + 1), 0);
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, 16, 0), -ELOOP);
	ck_assert_error_mentions("longer");
	/* Nor at the other end: a hop in front of 15 makes 0's chain 16
	 * hops, and 0's front (16) would be cut out of its path. */
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, 15, 16), -ELOOP);
	ck_assert_error_mentions("longer");
	/* Nor in the middle: two chains joined (0..8 and 9..17). */
	ck_assert_int_eq(xseg_clear_next_hop(xt_seg, 8), 0);
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, 15, 16), 0);
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, 16, 17), 0);
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, 8, 9), -ELOOP);
	ck_assert_error_mentions("longer");
	ck_assert_int_eq(xseg_clear_next_hop(xt_seg, 16), 0);
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, 8, 9), -ELOOP);
	ck_assert_int_eq(xseg_clear_next_hop(xt_seg, 15), 0);
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, 8, 9), 0);
	ck_assert_int_eq(xseg_bind_range(xt_seg, 0, 17), 0);
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, 20, 0), 15);
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, 15, 0), 14);
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, 1, 0), 0);
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, 0, 0), 0);
}
END_TEST

/* Replace: only over the hop the caller read; a clear with NO_PORT. */
START_TEST(next_hop_replace_only_over_old)
{
	ck_assert_int_eq(xseg_replace_next_hop(xt_seg, PB, XSEG_NO_PORT, PC), 0);
	ck_assert_int_eq(xseg_replace_next_hop(xt_seg, PB, XSEG_NO_PORT, PD), -EAGAIN);
	ck_assert_error_mentions("re-routed");
	ck_assert_uint_eq(xseg_get_next_hop(xt_seg, PB), PC);
	ck_assert_int_eq(xseg_replace_next_hop(xt_seg, PB, PC, PD), 0);
	ck_assert_int_eq(xseg_replace_next_hop(xt_seg, PD, XSEG_NO_PORT, PB), -ELOOP);
	ck_assert_int_eq(xseg_replace_next_hop(xt_seg, PB, PC, XSEG_NO_PORT), -EAGAIN);
	ck_assert_int_eq(xseg_replace_next_hop(xt_seg, PB, PD, XSEG_NO_PORT), 0);
	ck_assert_uint_eq(xseg_get_next_hop(xt_seg, PB), XSEG_NO_PORT);
	ck_assert_int_eq(xseg_replace_next_hop(xt_seg, 999, XSEG_NO_PORT, PB), -EINVAL);
	ck_assert_int_eq(xseg_replace_next_hop(xt_seg, PB, XSEG_NO_PORT, 999), -EINVAL);
}
END_TEST

/* The longest chain set_next_hop takes must carry a request end to end:
 * a client's submit to its front, each hop's forward, back again. */
START_TEST(longest_chain_carries_a_request)
{
	uint32_t hops = 0;
	/* As long a chain as is accepted: 0 <- 1 <- ... */
	while (hops + 1 < 32 && xseg_set_next_hop(xt_seg, hops, hops + 1) == 0)
		hops++;
	ck_assert_uint_ge(hops, 2);
	ck_assert_int_eq(xseg_bind_range(xt_seg, 0, hops), 0);
	ck_assert_int_eq(xseg_bind_port(xt_seg, 31), 0);
	struct xseg_request *r = xseg_get_request(xt_seg, 31), *got;
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(xseg_submit(xt_seg, r, 31, 0), (int)hops);
	for (uint32_t at = hops; at > 0; at--) {
		ck_assert_int_eq(xseg_accept(xt_seg, at, &got, 1), 1);
		int to = xseg_forward(xt_seg, r, at, 0);
		ck_assert_msg(to == (int)at - 1, "a chain of %u hops: the forward from %u gave %d: %s",
			      hops, at, to, xseg_last_error());
	}
	ck_assert_int_eq(xseg_accept(xt_seg, 0, &got, 1), 1);
	r->result = XR_SERVED;
	for (uint32_t at = 0; at < hops; at++) {
		ck_assert_int_eq(xseg_respond(xt_seg, r, at), (int)at + 1);
		ck_assert_int_eq(xseg_receive(xt_seg, at + 1, &got, 1), 1);
	}
	ck_assert_int_eq(xseg_respond(xt_seg, r, hops), 31);
	ck_assert_int_eq(xseg_receive(xt_seg, 31, &got, 1), 1);
	ck_assert_int_eq(xseg_put_request(xt_seg, r), 0);
}
END_TEST

START_TEST(resolve_route_semantics)
{
	ck_assert_int_eq(xseg_bind_range(xt_seg, PA, PD), 0);
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, PA, 16), XSEG_NO_PORT);
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, PA, PB), PB);

	/* B -> C: A reaches C, C reaches B, B itself reaches B. */
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, PB, PC), 0);
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, PA, PB), PC);
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, PD, PB), PC);
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, PC, PB), PB);
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, PB, PB), PB);
	/* Routes apply to the port they are set on only. */
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, PA, PC), PC);

	/* B -> C -> D: A reaches D, D reaches C, C reaches B. */
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, PC, PD), 0);
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, PA, PB), PD);
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, 0, PB), PD);
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, PD, PB), PC);
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, PC, PB), PB);
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, PA, PC), PD);

	/* An unbound hop is skipped; what is in front of it stays. */
	ck_assert_int_eq(xseg_leave_port(xt_seg, PD), 0);
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, PA, PB), PC);
	ck_assert_int_eq(xseg_bind_port(xt_seg, PD), 0);
	ck_assert_int_eq(xseg_leave_port(xt_seg, PC), 0);
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, PA, PB), PD);
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, PD, PB), PB);
	ck_assert_int_eq(xseg_bind_port(xt_seg, PC), 0);
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, PA, PB), PD);

	/* Cleared: straight to B again. */
	ck_assert_int_eq(xseg_clear_next_hop(xt_seg, PB), 0);
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, PA, PB), PB);
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, PC, PB), PB);
}
END_TEST

/* resolve_route is what submit does: check the requests really land there. */
START_TEST(submit_follows_routes)
{
	struct xseg_request *r, *got;
	struct xseg_port_info pi;

	ck_assert_int_eq(xseg_bind_range(xt_seg, PA, PD), 0);
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, PB, PC), 0);
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, PC, PD), 0);

	r = xseg_get_request(xt_seg, PA);
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(xseg_submit(xt_seg, r, PA, PB), PD);
	ck_assert_int_eq(xseg_port_info(xt_seg, PD, &pi), 0);
	ck_assert_uint_eq(pi.request_depth, 1);
	ck_assert_int_eq(xseg_accept(xt_seg, PD, &got, 1), 1);
	ck_assert_ptr_eq(got, r);
	ck_assert_uint_eq(r->dst_port, PB);
	ck_assert_int_eq(xseg_forward(xt_seg, r, PD, PB), PC);
	ck_assert_int_eq(xseg_accept(xt_seg, PC, &got, 1), 1);
	ck_assert_int_eq(xseg_forward(xt_seg, r, PC, PB), PB);
	ck_assert_int_eq(xseg_accept(xt_seg, PB, &got, 1), 1);
	ck_assert_ptr_eq(got, r);
	ck_assert_uint_eq(r->path_len, 3);

	/* The reply retraces the path. */
	ck_assert_int_eq(xseg_respond(xt_seg, r, PB), PC);
	ck_assert_int_eq(xseg_receive(xt_seg, PC, &got, 1), 1);
	ck_assert_int_eq(xseg_respond(xt_seg, r, PC), PD);
	ck_assert_int_eq(xseg_receive(xt_seg, PD, &got, 1), 1);
	ck_assert_int_eq(xseg_respond(xt_seg, r, PD), PA);
	ck_assert_int_eq(xseg_receive(xt_seg, PA, &got, 1), 1);
	ck_assert_uint_eq(r->path_len, 0);
	/* An unbound port with no route: nobody to take it. */
	ck_assert_int_eq(xseg_submit(xt_seg, r, PA, 9), -ENOENT);
	ck_assert_int_eq(xseg_put_request(xt_seg, r), 0);
}
END_TEST

/*
 * The middle hop of B <- C <- D spliced out while it holds a request D lent
 * it: the route is B <- D now and C is outside it, but C's forward must go
 * on to B, not to the front (D, which waits for that request's reply and
 * would take it as new: "request sent twice", then a double completion).
 * The same when C is moved in front of D: never back to a hop passed.
 */
START_TEST(forward_never_returns_to_a_hop_passed)
{
	struct xseg_request *r, *got;

	ck_assert_int_eq(xseg_bind_range(xt_seg, PA, PD), 0);
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, PB, PC), 0);
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, PC, PD), 0);
	r = xseg_get_request(xt_seg, PA);
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(xseg_submit(xt_seg, r, PA, PB), PD);
	ck_assert_int_eq(xseg_accept(xt_seg, PD, &got, 1), 1);
	ck_assert_int_eq(xseg_forward(xt_seg, r, PD, PB), PC);
	ck_assert_int_eq(xseg_accept(xt_seg, PC, &got, 1), 1);

	/* Unplug C: B -> D, C's hop cleared (what xseg unplug --via C does). */
	ck_assert_int_eq(xseg_replace_next_hop(xt_seg, PB, PC, PD), 0);
	ck_assert_int_eq(xseg_clear_next_hop(xt_seg, PC), 0);
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, PC, PB), PD);   /* a new request of C's */
	ck_assert_int_eq(xseg_forward(xt_seg, r, PC, PB), PB);
	ck_assert_int_eq(xseg_accept(xt_seg, PB, &got, 1), 1);
	r->result = XR_SERVED;
	ck_assert_int_eq(xseg_respond(xt_seg, r, PB), PC);
	ck_assert_int_eq(xseg_receive(xt_seg, PC, &got, 1), 1);
	ck_assert_int_eq(xseg_respond(xt_seg, r, PC), PD);
	ck_assert_int_eq(xseg_receive(xt_seg, PD, &got, 1), 1);
	ck_assert_int_eq(xseg_respond(xt_seg, r, PD), PA);
	ck_assert_int_eq(xseg_receive(xt_seg, PA, &got, 1), 1);

	/* B <- D, then C plugged in front of D (B <- D <- C): a request C
	 * lent D is forwarded by D to B, not to C. */
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, PD, PC), 0);
	ck_assert_int_eq(xseg_submit(xt_seg, r, PA, PB), PC);
	ck_assert_int_eq(xseg_accept(xt_seg, PC, &got, 1), 1);
	ck_assert_int_eq(xseg_forward(xt_seg, r, PC, PB), PD);
	ck_assert_int_eq(xseg_accept(xt_seg, PD, &got, 1), 1);
	/* Reordered meanwhile to B <- C <- D: D is the front now. */
	ck_assert_int_eq(xseg_clear_next_hop(xt_seg, PD), 0);
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, PB, PC), 0);
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, PC, PD), 0);
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, PD, PB), PC);
	ck_assert_int_eq(xseg_forward(xt_seg, r, PD, PB), PB);
	ck_assert_int_eq(xseg_accept(xt_seg, PB, &got, 1), 1);
	ck_assert_int_eq(xseg_respond(xt_seg, r, PB), PD);
	ck_assert_int_eq(xseg_receive(xt_seg, PD, &got, 1), 1);
	ck_assert_int_eq(xseg_respond(xt_seg, r, PD), PC);
	ck_assert_int_eq(xseg_receive(xt_seg, PC, &got, 1), 1);
	ck_assert_int_eq(xseg_respond(xt_seg, r, PC), PA);
	ck_assert_int_eq(xseg_receive(xt_seg, PA, &got, 1), 1);
	ck_assert_int_eq(xseg_put_request(xt_seg, r), 0);
}
END_TEST

/*
 * Fail closed: a cache that leaves its port while it says it holds dirty
 * data is never bypassed; requests through it fail EIO until it comes back
 * or its data is given up.
 */
START_TEST(dirty_cache_fails_closed)
{
	struct xseg_request *r, *q, *got;
	struct xseg_port_info pi;
	uint64_t bytes = 1;

	ck_assert_int_eq(xseg_bind_range(xt_seg, PA, PC), 0);
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, PB, PC), 0);   /* C caches B */
	ck_assert_int_eq(xseg_port_set_dirty(xt_seg, 9, 1), -EPERM);
	ck_assert_int_eq(xseg_port_set_dirty(xt_seg, 999, 1), -EINVAL);
	ck_assert_int_eq(xseg_port_set_dirty(xt_seg, PC, 8192), 0);
	ck_assert_int_eq(xseg_port_info(xt_seg, PC, &pi), 0);
	ck_assert_uint_eq(pi.dirty_bytes, 8192);
	ck_assert_int_eq(xseg_port_give_up_dirty(xt_seg, PC, &bytes), -EBUSY);
	ck_assert_error_mentions("live");

	/* Queued at C when it goes: failed, not passed on to B's older data. */
	q = xseg_get_request(xt_seg, PA);
	ck_assert_int_eq(xseg_submit(xt_seg, q, PA, PB), PC);
	ck_assert_int_eq(xseg_leave_port(xt_seg, PC), 0);
	ck_assert_int_eq(xseg_port_info(xt_seg, PB, &pi), 0);
	ck_assert_uint_eq(pi.request_depth, 0);
	ck_assert_int_eq(xseg_receive(xt_seg, PA, &got, 1), 1);
	ck_assert_ptr_eq(got, q);
	ck_assert_int_eq(q->result, XR_FAILED);

	/* C gone, dirty: the route ends at C and submits fail, naming it. */
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, PA, PB), PC);
	ck_assert_int_eq(xseg_submit(xt_seg, q, PA, PB), -EIO);
	ck_assert_error_mentions("unplug --force");
	/* A cache back on C (recovering) is routed to; it reaches B itself. */
	ck_assert_int_eq(xseg_bind_port(xt_seg, PC), 0);
	ck_assert_int_eq(xseg_port_info(xt_seg, PC, &pi), 0);
	ck_assert_uint_eq(pi.dirty_bytes, 8192);   /* until it publishes anew */
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, PC, PB), PB);
	ck_assert_int_eq(xseg_submit(xt_seg, q, PA, PB), PC);
	ck_assert_int_eq(xseg_accept(xt_seg, PC, &got, 1), 1);
	q->result = XR_SERVED;
	ck_assert_int_eq(xseg_respond(xt_seg, q, PC), PA);
	ck_assert_int_eq(xseg_receive(xt_seg, PA, &got, 1), 1);
	ck_assert_int_eq(xseg_leave_port(xt_seg, PC), 0);

	/* Given up: the dead hop is skipped again. */
	ck_assert_int_eq(xseg_port_give_up_dirty(xt_seg, PC, &bytes), 0);
	ck_assert_uint_eq(bytes, 8192);
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, PA, PB), PB);
	r = q;
	ck_assert_int_eq(xseg_submit(xt_seg, r, PA, PB), PB);
	ck_assert_int_eq(xseg_accept(xt_seg, PB, &got, 1), 1);
	r->result = XR_SERVED;
	ck_assert_int_eq(xseg_respond(xt_seg, r, PB), PA);
	ck_assert_int_eq(xseg_receive(xt_seg, PA, &got, 1), 1);
	ck_assert_int_eq(xseg_put_request(xt_seg, r), 0);

	/* A cache that says it is clean (0) leaves and is skipped at once. */
	ck_assert_int_eq(xseg_bind_port(xt_seg, PC), 0);
	ck_assert_int_eq(xseg_port_set_dirty(xt_seg, PC, 4096), 0);
	ck_assert_int_eq(xseg_port_set_dirty(xt_seg, PC, 0), 0);
	ck_assert_int_eq(xseg_leave_port(xt_seg, PC), 0);
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, PA, PB), PB);
}
END_TEST

/*
 * A dead clean hop in the middle of a chain is skipped, not the end of it:
 * B (blocker) <- C (cache, left clean) <- D (cache, live, dirty). Ending
 * the route at C sent A's reads straight to B, past D's newer data.
 */
START_TEST(dead_middle_hop_keeps_front_cache)
{
	struct xseg_request *r, *got;

	ck_assert_int_eq(xseg_bind_range(xt_seg, PA, PD), 0);
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, PB, PC), 0);
	ck_assert_int_eq(xseg_set_next_hop(xt_seg, PC, PD), 0);
	ck_assert_int_eq(xseg_port_set_dirty(xt_seg, PD, 4096), 0);
	ck_assert_int_eq(xseg_leave_port(xt_seg, PC), 0);   /* clean: skipped */

	ck_assert_uint_eq(xseg_resolve_route(xt_seg, PA, PB), PD);
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, PD, PB), PB);
	r = xseg_get_request(xt_seg, PA);
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(xseg_submit(xt_seg, r, PA, PB), PD);
	ck_assert_int_eq(xseg_accept(xt_seg, PD, &got, 1), 1);
	ck_assert_ptr_eq(got, r);
	/* D writes back past the dead hop, to B itself. */
	ck_assert_int_eq(xseg_forward(xt_seg, r, PD, PB), PB);
	ck_assert_int_eq(xseg_accept(xt_seg, PB, &got, 1), 1);
	r->result = XR_SERVED;
	ck_assert_int_eq(xseg_respond(xt_seg, r, PB), PD);
	ck_assert_int_eq(xseg_receive(xt_seg, PD, &got, 1), 1);
	ck_assert_int_eq(xseg_respond(xt_seg, r, PD), PA);
	ck_assert_int_eq(xseg_receive(xt_seg, PA, &got, 1), 1);
	ck_assert_int_eq(xseg_put_request(xt_seg, r), 0);

	/* C dead and dirty: D's requests stop there (fail closed). */
	ck_assert_int_eq(xseg_bind_port(xt_seg, PC), 0);
	ck_assert_int_eq(xseg_port_set_dirty(xt_seg, PC, 512), 0);
	ck_assert_int_eq(xseg_leave_port(xt_seg, PC), 0);
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, PA, PB), PD);
	ck_assert_uint_eq(xseg_resolve_route(xt_seg, PD, PB), PC);
	ck_assert_int_eq(xseg_port_give_up_dirty(xt_seg, PC, NULL), 0);
	ck_assert_int_eq(xseg_port_set_dirty(xt_seg, PD, 0), 0);
}
END_TEST

/* ==== names and parsing ==================================================== */

START_TEST(op_names)
{
	static const char *names[] = { "PING", "READ", "WRITE", "FLUSH", "DELETE",
				       "INFO", "COPY", "CONTROL" };
	ck_assert_int_eq(X_OP_MAX, 8);
	for (int op = 0; op < X_OP_MAX; op++) {
		ck_assert_str_eq(xseg_op_name((uint32_t)op), names[op]);
		ck_assert_int_eq(xseg_op_from_name(names[op]), op);
	}
	ck_assert_str_eq(xseg_op_name(X_OP_MAX), "?");
	ck_assert_str_eq(xseg_op_name(UINT32_MAX), "?");
	ck_assert_int_eq(xseg_op_from_name("read"), X_READ);
	ck_assert_int_eq(xseg_op_from_name("wRiTe"), X_WRITE);
	ck_assert_int_eq(xseg_op_from_name("bogus"), -1);
	ck_assert_int_eq(xseg_op_from_name("READX"), -1);
	ck_assert_int_eq(xseg_op_from_name("REA"), -1);
	ck_assert_int_eq(xseg_op_from_name(""), -1);
	ck_assert_int_eq(xseg_op_from_name("?"), -1);
	ck_assert_int_eq(xseg_op_from_name(NULL), -1);
}
END_TEST

START_TEST(parse_size_cases)
{
	static const struct { const char *s; uint64_t v; } ok[] = {
		{ "0", 0 }, { "123", 123 }, { "4K", 4096 }, { "4k", 4096 },
		{ "16M", 16ull << 20 }, { "2G", 2ull << 30 }, { "1T", 1ull << 40 },
		{ "1KiB", 1024 }, { "1KB", 1024 }, { "3kb", 3072 }, { "1Ki", 1024 },
		{ "007", 7 }, { "512B", 512 }, { "512b", 512 }, { "18446744073709551615", UINT64_MAX },
		{ "16777215T", 16777215ull << 40 }, { "17179869183G", 17179869183ull << 30 },
	};
	static const struct { const char *s; int err; } bad[] = {
		{ "", -EINVAL }, { "-1", -EINVAL }, { "+1", -EINVAL }, { " 1", -EINVAL },
		{ "1 ", -EINVAL }, { "1X", -EINVAL }, { "K", -EINVAL }, { "1.5M", -EINVAL },
		{ "1 K", -EINVAL }, { "1KK", -EINVAL }, { "1Kx", -EINVAL }, { "0x10", -EINVAL },
		{ "1KiBx", -EINVAL }, { "1iB", -EINVAL }, { "1BB", -EINVAL }, { "1Bi", -EINVAL },
		{ "18446744073709551616", -ERANGE }, { "99999999999999999999999", -ERANGE },
		{ "16777216T", -ERANGE }, { "17179869184G", -ERANGE },
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		uint64_t v = 42;
		ck_assert_msg(xseg_parse_size(ok[i].s, &v) == 0, "'%s' refused", ok[i].s);
		ck_assert_msg(v == ok[i].v, "'%s' -> %llu", ok[i].s, (unsigned long long)v);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint64_t v = 42;
		int rc = xseg_parse_size(bad[i].s, &v);
		ck_assert_msg(rc == bad[i].err, "'%s' -> %d, want %d", bad[i].s, rc, bad[i].err);
		ck_assert_msg(v == 42, "'%s' wrote the output on failure", bad[i].s);
	}
	uint64_t v;
	ck_assert_int_eq(xseg_parse_size(NULL, &v), -EINVAL);
}
END_TEST

START_TEST(parse_uint_cases)
{
	uint64_t v = 42;
	ck_assert_int_eq(xseg_parse_uint("0", 10, &v), 0);
	ck_assert_uint_eq(v, 0);
	ck_assert_int_eq(xseg_parse_uint("10", 10, &v), 0);
	ck_assert_uint_eq(v, 10);
	ck_assert_int_eq(xseg_parse_uint("65534", XSEG_MAX_PORTS, &v), 0);
	ck_assert_uint_eq(v, 65534);
	ck_assert_int_eq(xseg_parse_uint("18446744073709551615", UINT64_MAX, &v), 0);
	ck_assert_uint_eq(v, UINT64_MAX);

	static const struct { const char *s; uint64_t max; int err; } bad[] = {
		{ "11", 10, -ERANGE }, { "1", 0, -ERANGE },
		{ "18446744073709551616", UINT64_MAX, -ERANGE },
		{ "", 10, -EINVAL }, { "-1", 10, -EINVAL }, { "+1", 10, -EINVAL },
		{ " 1", 10, -EINVAL }, { "1 ", 10, -EINVAL }, { "0x10", 100, -EINVAL },
		{ "1e3", 10000, -EINVAL }, { "4K", 100000, -EINVAL }, { "abc", 10, -EINVAL },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = 42;
		int rc = xseg_parse_uint(bad[i].s, bad[i].max, &v);
		ck_assert_msg(rc == bad[i].err, "'%s' max %llu -> %d, want %d", bad[i].s,
			      (unsigned long long)bad[i].max, rc, bad[i].err);
		ck_assert_msg(v == 42, "'%s' wrote the output on failure", bad[i].s);
	}
	ck_assert_int_eq(xseg_parse_uint(NULL, 10, &v), -EINVAL);
}
END_TEST

START_TEST(now_ns_is_monotonic)
{
	uint64_t a = xseg_now_ns();
	usleep(2000);
	uint64_t b = xseg_now_ns();
	ck_assert_uint_gt(a, 0);
	ck_assert_uint_ge(b - a, 1500000);
}
END_TEST

static Suite *api_suite(void)
{
	Suite *s = suite_create("xseg_api");
	TCase *tc;

	tc = tcase_create("segment");
	tcase_set_timeout(tc, 20);
	tcase_add_checked_fixture(tc, NULL, xt_teardown);
	tcase_add_test(tc, config_default_values);
	tcase_add_test(tc, create_bad_arguments);
	tcase_add_test(tc, create_longest_name);
	tcase_add_test(tc, create_exists_and_mode);
	tcase_add_test(tc, join_bad_arguments);
	tcase_add_test(tc, join_rejects_corrupt_header);
	tcase_add_test(tc, join_rejects_other_version);
	tcase_add_test(tc, join_rejects_unready_and_short);
	tcase_add_test(tc, destroy_semantics);
	tcase_add_test(tc, segment_info_fresh);
	tcase_add_test(tc, last_error_is_per_thread_text);
	suite_add_tcase(s, tc);

	tc = tcase_create("ports");
	tcase_set_timeout(tc, 20);
	tcase_add_checked_fixture(tc, xt_setup, xt_teardown);
	tcase_add_test(tc, bind_bad_arguments);
	tcase_add_test(tc, bind_and_double_bind);
	tcase_add_test(tc, bind_range_is_all_or_nothing);
	tcase_add_test(tc, leave_port_semantics);
	tcase_add_test(tc, port_info_bad_arguments);
	tcase_add_test(tc, live_owner_in_other_process);
	tcase_add_test(tc, recycled_pid_is_not_the_owner);
	tcase_add_test(tc, own_recycled_pid_is_not_the_owner);
	tcase_add_test(tc, zombie_owner_is_dead);
	tcase_add_test(tc, main_thread_ended_owner_stays_alive);
	suite_add_tcase(s, tc);

	tc = tcase_create("routing");
	tcase_set_timeout(tc, 20);
	tcase_add_checked_fixture(tc, xt_setup, xt_teardown);
	tcase_add_test(tc, next_hop_bad_arguments);
	tcase_add_test(tc, next_hop_set_clear_cycles);
	tcase_add_test(tc, next_hop_replace_only_over_old);
	tcase_add_test(tc, resolve_route_semantics);
	tcase_add_test(tc, submit_follows_routes);
	tcase_add_test(tc, forward_never_returns_to_a_hop_passed);
	tcase_add_test(tc, dirty_cache_fails_closed);
	tcase_add_test(tc, dead_middle_hop_keeps_front_cache);
	suite_add_tcase(s, tc);

	tc = tcase_create("routing_long");
	tcase_set_timeout(tc, 20);
	tcase_add_checked_fixture(tc, setup_32_ports, xt_teardown);
	tcase_add_test(tc, next_hop_chain_length_limit);
	tcase_add_test(tc, longest_chain_carries_a_request);
	suite_add_tcase(s, tc);

	tc = tcase_create("names");
	tcase_add_test(tc, op_names);
	tcase_add_test(tc, parse_size_cases);
	tcase_add_test(tc, parse_uint_cases);
	tcase_add_test(tc, now_ns_is_monotonic);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return xt_run(api_suite());
}
