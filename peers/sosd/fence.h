/*
 * sosd --fence NAME: an exclusive RADOS lock that fences the sosd before
 * (fence.c says why and how).
 */
#ifndef SOSD_FENCE_H
#define SOSD_FENCE_H

#include <rados/librados.h>
#include <stdbool.h>

struct sosd_fence {
	rados_t cluster;
	rados_ioctx_t io;
	char object[256];            /* the lock's object in the pool */
	char cookie[32];             /* this sosd's instance of the lock */
	bool held;
	unsigned fenced_count;       /* earlier holders blocklisted at the start */
};

/* Takes the lock on `object` in io's pool, blocklisting and breaking an
 * earlier holder's, and then waits for the OSD map that holds the
 * blocklist. 0, or -errno with one line in `why`. */
int sosd_fence_start(struct sosd_fence *f, rados_t cluster, rados_ioctx_t io,
		     const char *object, char *why, size_t len);
/* Gives the lock back (a clean stop). */
void sosd_fence_stop(struct sosd_fence *f);

#endif
