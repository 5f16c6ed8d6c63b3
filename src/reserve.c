/*
 * A process's reserve of pool requests (see xseg.h): a small stack under a
 * mutex, touched only when the pool is empty or the reserve is short, so
 * the common get and put cost one atomic load more than the pool's own.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "xseg_internal.h"

struct xseg_reserve {
	struct xseg *seg;
	uint32_t port;
	unsigned max;
	pthread_mutex_t lock;
	_Atomic unsigned n;              /* written under lock */
	struct xseg_request *reqs[];
};

/* Sets the reserve's size to n (under lock), in the port's shared count too. */
static void set_count(struct xseg_reserve *r, unsigned n)
{
	unsigned old = atomic_load(&r->n);
	atomic_store(&r->n, n);
	_Atomic uint32_t *shared = &r->seg->ports[r->port].reserved;
	if (n > old)
		atomic_fetch_add_explicit(shared, n - old, memory_order_relaxed);
	else if (n < old)
		atomic_fetch_sub_explicit(shared, old - n, memory_order_relaxed);
}

/* Tops the reserve up from the pool while it is short. */
static void refill(struct xseg_reserve *r)
{
	pthread_mutex_lock(&r->lock);
	unsigned n = atomic_load(&r->n);
	while (n < r->max) {
		struct xseg_request *req = xseg_get_request(r->seg, r->port);
		if (!req)
			break;
		r->reqs[n++] = req;
	}
	set_count(r, n);
	pthread_mutex_unlock(&r->lock);
}

struct xseg_reserve *xseg_reserve_create(struct xseg *seg, uint32_t port, unsigned max)
{
	if (!seg || !xseg_port_valid(seg, port)) {
		errno = -xseg_fail(EINVAL, "reserve: bad segment or port %u", port);
		return NULL;
	}
	if (max == 0) {   /* a few, and never more than a sixteenth of the pool */
		max = seg->nr_requests / 16 < XSEG_RESERVE_DEFAULT ? seg->nr_requests / 16
								   : XSEG_RESERVE_DEFAULT;
		max = max ? max : 1;
	}
	if (!xseg_port_owned_here(seg, port)) {
		errno = -xseg_fail(EPERM, "reserve: port %u is not bound by this process", port);
		return NULL;
	}
	struct xseg_reserve *r = calloc(1, sizeof(*r) + max * sizeof(r->reqs[0]));
	if (!r) {
		errno = -xseg_fail(ENOMEM, "reserve: no memory for %u requests", max);
		return NULL;
	}
	r->seg = seg;
	r->port = port;
	r->max = max;
	pthread_mutex_init(&r->lock, NULL);
	refill(r);
	return r;
}

struct xseg_request *xseg_reserve_get(struct xseg_reserve *r)
{
	struct xseg_request *req = xseg_get_request(r->seg, r->port);
	if (req || errno != ENOBUFS || !atomic_load(&r->n))
		return req;
	pthread_mutex_lock(&r->lock);
	unsigned n = atomic_load(&r->n);
	if (n) {
		req = r->reqs[--n];
		set_count(r, n);
	}
	pthread_mutex_unlock(&r->lock);
	if (!req)
		errno = -xseg_fail(ENOBUFS, "get request: the pool and port %u's reserve are "
				   "empty", r->port);
	return req;
}

int xseg_reserve_put(struct xseg_reserve *r, struct xseg_request *req)
{
	int rc = xseg_put_request(r->seg, req);
	if (rc == 0 && atomic_load(&r->n) < r->max)
		refill(r);
	return rc;
}

unsigned xseg_reserve_count(struct xseg_reserve *r)
{
	return atomic_load(&r->n);
}

void xseg_reserve_destroy(struct xseg_reserve *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	for (unsigned i = 0; i < atomic_load(&r->n); i++)
		xseg_put_request(r->seg, r->reqs[i]);
	set_count(r, 0);
	pthread_mutex_unlock(&r->lock);
	pthread_mutex_destroy(&r->lock);
	free(r);
}
