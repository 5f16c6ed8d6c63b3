/*
 * Creating, joining and leaving a segment; its header and integrity checks.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "xseg_internal.h"

void xseg_config_default(struct xseg_config *cfg)
{
	cfg->nr_ports = XSEG_DEFAULT_PORTS;
	cfg->nr_requests = XSEG_DEFAULT_REQUESTS;
	cfg->heap_size = XSEG_DEFAULT_HEAP;
	cfg->mode = 0600;
}

/* "/name" for shm_open; validates the name. */
static int shm_path(const char *name, char *out, size_t outlen)
{
	size_t len;

	if (!name || !*name)
		return xseg_fail(EINVAL, "segment name is empty");
	len = strlen(name);
	if (len > XSEG_NAME_MAX)
		return xseg_fail(ENAMETOOLONG, "segment name '%.40s...' is longer than %u bytes",
				 name, XSEG_NAME_MAX);
	if (strchr(name, '/'))
		return xseg_fail(EINVAL, "segment name '%s' contains '/'", name);
	snprintf(out, outlen, "/%s", name);
	return 0;
}

static uint64_t round_pow2(uint64_t v)
{
	uint64_t p = 1;
	while (p < v)
		p <<= 1;
	return p;
}

static uint64_t align_up(uint64_t v)
{
	return (v + XSEG_CACHELINE - 1) & ~(uint64_t)(XSEG_CACHELINE - 1);
}

/* FNV-1a over the header's fixed fields: catches a torn or scribbled header. */
static uint64_t header_checksum(const struct xseg_header *h)
{
	const unsigned char *p = (const unsigned char *)h;
	size_t n = offsetof(struct xseg_header, checksum);
	uint64_t x = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		x = (x ^ p[i]) * 1099511628211ull;
	return x;
}

/* Computes the layout into hdr. */
static int plan_layout(const struct xseg_config *cfg, struct xseg_header *h)
{
	uint64_t off, heap;

	if (cfg->nr_ports < 1 || cfg->nr_ports > XSEG_MAX_PORTS)
		return xseg_fail(EINVAL, "ports %u out of range 1..%u", cfg->nr_ports,
				 XSEG_MAX_PORTS);
	if (cfg->nr_requests < 1 || cfg->nr_requests > XSEG_MAX_REQUESTS)
		return xseg_fail(EINVAL, "requests %u out of range 1..%u", cfg->nr_requests,
				 XSEG_MAX_REQUESTS);
	/* Check before rounding: round_pow2 never ends above 2^63. */
	heap = cfg->heap_size > (1ull << 40) ? 0 : round_pow2(cfg->heap_size);
	if (heap < 4096 || heap > (1ull << 40))
		return xseg_fail(EINVAL, "heap size %llu out of range 4K..1T",
				 (unsigned long long)cfg->heap_size);

	memset(h, 0, sizeof(*h));
	memcpy(h->magic, XSEG_MAGIC, sizeof(XSEG_MAGIC));
	h->layout_version = XSEG_LAYOUT_VERSION;
	h->header_size = sizeof(*h);
	h->nr_ports = cfg->nr_ports;
	h->nr_requests = cfg->nr_requests;
	/* At least 2: with capacity 1 (mask 0) an empty cell reads as a full
	 * one holding request 0 (ring.c's cell_filled), and a reap took a
	 * request its dead owner had popped for still queued. */
	h->ring_capacity = (uint32_t)round_pow2(cfg->nr_requests < 2 ? 2 : cfg->nr_requests);
	h->request_size = sizeof(struct xseg_request);
	h->port_size = sizeof(struct xseg_port_shm);
	h->ring_bytes = xseg_ring_bytes(h->ring_capacity);

	off = align_up(sizeof(*h));
	h->ports_off = off;
	off = align_up(off + (uint64_t)cfg->nr_ports * sizeof(struct xseg_port_shm));
	h->requests_off = off;
	off = align_up(off + (uint64_t)cfg->nr_requests * sizeof(struct xseg_request));
	h->free_ring_off = off;
	off += h->ring_bytes;
	h->port_rings_off = off;
	off += (uint64_t)cfg->nr_ports * 2 * h->ring_bytes;
	h->heap_meta_off = off;
	off = align_up(off + xseg_heap_meta_bytes(heap));
	off = (off + 4095) & ~4095ull;
	h->heap_off = off;
	h->heap_size = heap;
	h->segment_size = off + heap;
	if (getrandom(&h->instance, sizeof(h->instance), 0) != (ssize_t)sizeof(h->instance))
		h->instance = ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL);
	h->instance |= 1;   /* never 0: 0 means unknown */
	if (h->segment_size > (1ull << 42))
		return xseg_fail(EINVAL, "segment would be %llu bytes: too large",
				 (unsigned long long)h->segment_size);
	h->checksum = header_checksum(h);
	return 0;
}

/* Fills the process-local handle from a mapped, verified header. */
static void attach(struct xseg *s, void *base, size_t size)
{
	struct xseg_header *h = base;
	s->base = base;
	s->size = size;
	s->hdr = h;
	s->ports = (struct xseg_port_shm *)((char *)base + h->ports_off);
	s->requests = (struct xseg_request *)((char *)base + h->requests_off);
	s->free_ring = (struct xseg_ring *)((char *)base + h->free_ring_off);
	s->port_rings = (char *)base + h->port_rings_off;
	s->ring_bytes = h->ring_bytes;
	s->heap_meta = (struct xseg_heap_meta *)((char *)base + h->heap_meta_off);
	s->heap = (char *)base + h->heap_off;
	s->nr_ports = h->nr_ports;
	s->nr_requests = h->nr_requests;
}

int xseg_create(const char *name, const struct xseg_config *cfg)
{
	char path[XSEG_NAME_MAX + 2];
	struct xseg_header plan;
	struct xseg s;
	void *base;
	int fd, rc;

	if (!cfg)
		return xseg_fail(EINVAL, "no configuration given");
	if ((rc = shm_path(name, path, sizeof(path))) < 0)
		return rc;
	if ((rc = plan_layout(cfg, &plan)) < 0)
		return rc;

	fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL, cfg->mode ? cfg->mode : 0600);
	if (fd < 0)
		return xseg_fail(errno, "cannot create segment '%s': %s", name, strerror(errno));
	/* shm_open applies the umask; the mode asked for is the mode we give. */
	fchmod(fd, cfg->mode ? cfg->mode : 0600);
	if (ftruncate(fd, (off_t)plan.segment_size) < 0) {
		rc = xseg_fail(errno, "cannot size segment '%s' to %llu bytes: %s", name,
			       (unsigned long long)plan.segment_size, strerror(errno));
		goto fail_unlink;
	}
	base = mmap(NULL, plan.segment_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		rc = xseg_fail(errno, "cannot map segment '%s': %s", name, strerror(errno));
		goto fail_unlink;
	}
	close(fd);

	memcpy(base, &plan, sizeof(plan));
	attach(&s, base, plan.segment_size);
	pthread_mutexattr_t attr;
	pthread_mutexattr_init(&attr);
	pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(&s.hdr->route_lock, &attr);
	pthread_mutexattr_destroy(&attr);
	for (uint32_t p = 0; p < s.nr_ports; p++) {
		struct xseg_port_shm *port = &s.ports[p];
		atomic_init(&port->owner, 0);
		atomic_init(&port->next_hop, XSEG_NO_PORT);
		atomic_init(&port->group_leader, p);
		atomic_init(&port->group_first, p);
		atomic_init(&port->group_count, 1);
		xseg_ring_init(xseg_req_ring(&s, p), plan.ring_capacity);
		xseg_ring_init(xseg_rep_ring(&s, p), plan.ring_capacity);
	}
	xseg_ring_init(s.free_ring, plan.ring_capacity);
	for (uint32_t i = 0; i < s.nr_requests; i++) {
		struct xseg_request *r = &s.requests[i];
		memset(r, 0, sizeof(*r));
		r->index = i;
		r->src_port = r->dst_port = r->holder = XSEG_NO_PORT;
		uint64_t at;   /* tagged as request.c's puts are (by nobody) */
		xseg_ring_push_tagged(s.free_ring, i, &r->pushing, 0, &at);
		r->pushing = at | XSEG_PUSH_DONE;
	}
	rc = xseg_heap_init(s.heap_meta, s.heap, plan.heap_size);
	if (rc < 0) {
		rc = xseg_fail(-rc, "cannot initialise heap of %llu bytes",
			       (unsigned long long)plan.heap_size);
		munmap(base, plan.segment_size);
		shm_unlink(path);
		return rc;
	}
	s.hdr->creator_pid = (uint32_t)getpid();
	atomic_store_explicit(&s.hdr->ready, 1, memory_order_release);
	munmap(base, plan.segment_size);
	return 0;

fail_unlink:
	close(fd);
	shm_unlink(path);
	return rc;
}

int xseg_destroy(const char *name)
{
	char path[XSEG_NAME_MAX + 2];
	int rc = shm_path(name, path, sizeof(path));
	if (rc < 0)
		return rc;
	if (shm_unlink(path) < 0)
		return xseg_fail(errno, "cannot destroy segment '%s': %s", name, strerror(errno));
	return 0;
}

/* Checks a header read from a segment of `file_size` bytes. */
static int verify_header(const char *name, const struct xseg_header *h, uint64_t file_size)
{
	if (memcmp(h->magic, XSEG_MAGIC, sizeof(XSEG_MAGIC)) != 0)
		return xseg_fail(EBADMSG, "'%s' is not an xseg segment (bad magic)", name);
	if (h->layout_version != XSEG_LAYOUT_VERSION)
		return xseg_fail(EPROTO, "segment '%s' has layout version %u, this library speaks %u",
				 name, h->layout_version, XSEG_LAYOUT_VERSION);
	if (!atomic_load_explicit(&((struct xseg_header *)h)->ready, memory_order_acquire))
		return xseg_fail(EAGAIN, "segment '%s' is still being created", name);
	if (h->checksum != header_checksum(h))
		return xseg_fail(EBADMSG, "segment '%s' header is corrupt (checksum mismatch)", name);
	if (h->header_size != sizeof(*h) || h->request_size != sizeof(struct xseg_request) ||
	    h->port_size != sizeof(struct xseg_port_shm))
		return xseg_fail(EPROTO, "segment '%s' was built with other structure sizes", name);
	if (h->segment_size != file_size)
		return xseg_fail(EBADMSG, "segment '%s' is %llu bytes but its header says %llu",
				 name, (unsigned long long)file_size,
				 (unsigned long long)h->segment_size);
	return 0;
}

int xseg_join(const char *name, struct xseg **out)
{
	char path[XSEG_NAME_MAX + 2];
	struct xseg_header head;
	struct stat st;
	struct xseg *s;
	void *base;
	int fd, rc;

	if (!out)
		return xseg_fail(EINVAL, "no handle to return the segment in");
	*out = NULL;
	if ((rc = shm_path(name, path, sizeof(path))) < 0)
		return rc;
	fd = shm_open(path, O_RDWR, 0);
	if (fd < 0)
		return xseg_fail(errno, "cannot open segment '%s': %s", name, strerror(errno));
	if (fstat(fd, &st) < 0 || (size_t)st.st_size < sizeof(head)) {
		close(fd);
		return xseg_fail(EBADMSG, "segment '%s' is too small to be a segment", name);
	}
	if (pread(fd, &head, sizeof(head), 0) != (ssize_t)sizeof(head)) {
		close(fd);
		return xseg_fail(EIO, "cannot read segment '%s' header", name);
	}
	if ((rc = verify_header(name, &head, (uint64_t)st.st_size)) < 0) {
		close(fd);
		return rc;
	}
	base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (base == MAP_FAILED)
		return xseg_fail(errno, "cannot map segment '%s': %s", name, strerror(errno));

	s = calloc(1, sizeof(*s));
	if (!s) {
		munmap(base, (size_t)st.st_size);
		return xseg_fail(ENOMEM, "out of memory");
	}
	attach(s, base, (size_t)st.st_size);
	s->bound = calloc(s->nr_ports, 1);
	s->contacts = calloc((s->nr_ports + 63) / 64, sizeof(*s->contacts));
	if (!s->bound || !s->contacts) {
		munmap(base, s->size);
		free(s->bound);
		free(s->contacts);
		free(s);
		return xseg_fail(ENOMEM, "out of memory");
	}
	pthread_mutex_init(&s->bind_lock, NULL);
	snprintf(s->name, sizeof(s->name), "%s", name);
	*out = s;
	return 0;
}

void xseg_leave(struct xseg *s)
{
	if (!s)
		return;
	for (uint32_t p = 0; p < s->nr_ports; p++)
		if (s->bound[p])
			xseg_leave_port(s, p);
	munmap(s->base, s->size);
	pthread_mutex_destroy(&s->bind_lock);
	free(s->bound);
	free(s->contacts);
	free(s);
}

int xseg_segment_info(struct xseg *s, struct xseg_segment_info *info)
{
	if (!s || !info)
		return xseg_fail(EINVAL, "segment info: null argument");
	memset(info, 0, sizeof(*info));
	info->layout_version = s->hdr->layout_version;
	info->nr_ports = s->nr_ports;
	info->nr_requests = s->nr_requests;
	info->free_requests = xseg_ring_count(s->free_ring);
	for (uint32_t p = 0; p < s->nr_ports; p++)
		info->reserved_requests += atomic_load_explicit(&s->ports[p].reserved,
								memory_order_relaxed);
	info->segment_size = s->hdr->segment_size;
	info->heap_size = s->hdr->heap_size;
	info->instance = s->hdr->instance;
	xseg_heap_usage(s->heap_meta, s->heap, &info->heap_used, &info->heap_allocs,
			&info->heap_free_largest);
	return 0;
}
