/*
 * --fence NAME: one sosd at a time writes under NAME.
 *
 * RADOS does not fence a dead client's operations: the writes of a
 * SIGKILLed sosd that are still on their way (in a socket buffer to a
 * stalled OSD) land when the OSD takes them, after the writes its
 * successor acknowledged meanwhile (a review: 2 blocks of a round older
 * than the acknowledged ones). So a sosd started with --fence NAME takes
 * an exclusive RADOS lock, lock "sosd" on object NAME of its pool, before
 * it serves. Where an earlier sosd holds it, its address is blocklisted
 * first (the OSDs refuse every operation of that client from the OSD map
 * that holds the entry on), then its lock broken; the new sosd then waits
 * for that map before it serves: each of its operations carries that map's
 * epoch, and an OSD takes none of them before it has the map, so the old
 * client's operations are either done before them or refused. This is
 * librbd's exclusive lock, as Ceph's own clients fence each other.
 *
 * A live sosd fenced this way fails every request from then on (ESHUTDOWN,
 * its warnings say it is blocklisted): two sosd with one NAME take turns
 * fencing each other, so NAME names one path's store (one sosd per NAME).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "fence.h"
#include "peer/peer.h"

#define LOCK_NAME "sosd"
#define LOCKERS_BUF 4096

static int fence_take(struct sosd_fence *f)
{
	return rados_lock_exclusive(f->io, f->object, LOCK_NAME, f->cookie, "sosd --fence", NULL,
				    0);
}

/* Blocklists and unlocks every holder of the lock but us; how many. */
static int fence_holders(struct sosd_fence *f, char *why, size_t len)
{
	char tag[256], clients[LOCKERS_BUF], cookies[LOCKERS_BUF], addrs[LOCKERS_BUF];
	size_t tag_len = sizeof(tag), clients_len = sizeof(clients);
	size_t cookies_len = sizeof(cookies), addrs_len = sizeof(addrs);
	int exclusive = 0;
	ssize_t n = rados_list_lockers(f->io, f->object, LOCK_NAME, &exclusive, tag, &tag_len,
				       clients, &clients_len, cookies, &cookies_len, addrs,
				       &addrs_len);
	if (n < 0) {
		snprintf(why, len, "cannot list the holders of lock '" LOCK_NAME "' on '%s': %s",
			 f->object, strerror((int)-n));
		return (int)n;
	}
	const char *client = clients, *cookie = cookies, *addr = addrs;
	for (ssize_t i = 0; i < n; i++) {
		int rc = rados_blocklist_add(f->cluster, (char *)addr, 0);
		if (rc < 0) {
			snprintf(why, len, "cannot blocklist %s at %s, the holder of --fence '%s': %s",
				 client, addr, f->object, strerror(-rc));
			return rc;
		}
		rc = rados_break_lock(f->io, f->object, LOCK_NAME, client, cookie);
		if (rc < 0 && rc != -ENOENT) {
			snprintf(why, len, "cannot break the lock of %s on --fence '%s': %s", client,
				 f->object, strerror(-rc));
			return rc;
		}
		peer_warn("--fence '%s': %s at %s held it (an earlier sosd): blocklisted and its "
			  "lock broken, so none of its operations still on their way can land after "
			  "ours", f->object, client, addr);
		f->fenced_count++;
		client += strlen(client) + 1;
		cookie += strlen(cookie) + 1;
		addr += strlen(addr) + 1;
	}
	return (int)n;
}

int sosd_fence_start(struct sosd_fence *f, rados_t cluster, rados_ioctx_t io,
		     const char *object, char *why, size_t len)
{
	memset(f, 0, sizeof(*f));
	f->cluster = cluster;
	f->io = io;
	snprintf(f->object, sizeof(f->object), "%s", object);
	uint64_t r;
	if (getrandom(&r, sizeof(r), 0) != sizeof(r))
		r = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	snprintf(f->cookie, sizeof(f->cookie), "%016" PRIx64, r);
	for (int tries = 0; tries < 5; tries++) {
		int rc = fence_take(f);
		if (rc == 0) {
			f->held = true;
			if (!f->fenced_count)
				return 0;
			/* our operations carry the epoch that holds the blocklist */
			if ((rc = rados_wait_for_latest_osdmap(cluster)) < 0) {
				snprintf(why, len, "--fence '%s': cannot get the OSD map with the "
					 "blocklist: %s", object, strerror(-rc));
				return rc;
			}
			return 0;
		}
		if (rc != -EBUSY && rc != -EEXIST) {
			snprintf(why, len, "--fence '%s': cannot take lock '" LOCK_NAME "': %s",
				 object, strerror(-rc));
			return rc;
		}
		if ((rc = fence_holders(f, why, len)) < 0)
			return rc;
	}
	snprintf(why, len, "--fence '%s': the lock was taken again each time it was broken: "
		 "another sosd with the same --fence is starting too", object);
	return -EBUSY;
}

void sosd_fence_stop(struct sosd_fence *f)
{
	if (!f->held)
		return;
	int rc = rados_unlock(f->io, f->object, LOCK_NAME, f->cookie);
	if (rc < 0 && rc != -ENOENT)
		peer_warn("--fence '%s': cannot give the lock back: %s (the next sosd breaks it)",
			  f->object, strerror(-rc));
	f->held = false;
}
