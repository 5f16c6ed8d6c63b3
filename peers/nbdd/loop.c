/*
 * nbdd's socket threads as a set: their epoll sets and eventfds, the
 * choice of the thread a new connection goes to, starting and joining
 * them (loop.h). What a thread does with its connections is server.c's.
 * Calls nothing above it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "loop.h"
#include "nbdd.h"

static struct loop *loops;
static unsigned nr_loops;

static int open_one(struct loop *L, unsigned index)
{
	L->wake_kind = SRC_WAKE;
	L->index = index;
	pthread_mutex_init(&L->kick_lock, NULL);
	L->epfd = epoll_create1(EPOLL_CLOEXEC);
	L->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &L->wake_kind };
	if (L->epfd < 0 || L->wakefd < 0 || epoll_ctl(L->epfd, EPOLL_CTL_ADD, L->wakefd, &ev) < 0) {
		peer_error("socket thread %u: epoll/eventfd: %s", index, strerror(errno));
		return -1;
	}
	return 0;
}

int loops_open(unsigned n)
{
	loops = calloc(n, sizeof(*loops));
	if (!loops) {
		peer_error("out of memory for %u socket threads", n);
		return -1;
	}
	for (unsigned i = 0; i < n; i++) {
		loops[i].epfd = loops[i].wakefd = -1;
		nr_loops = i + 1;   /* what loops_close closes */
		if (open_one(&loops[i], i) < 0)
			return -1;
	}
	return 0;
}

int loops_start(void *(*body)(void *))
{
	for (unsigned i = 0; i < nr_loops; i++) {
		struct loop *L = &loops[i];
		int rc = pthread_create(&L->thread, NULL, body, L);
		if (rc) {
			peer_error("cannot start socket thread %u: %s", i, strerror(rc));
			return -1;
		}
		L->started = true;
		peer_name_thread(L->thread, "nbdd-sock%u", i);
	}
	return 0;
}

void loops_join(void)
{
	for (unsigned i = 0; i < nr_loops; i++) {
		struct loop *L = &loops[i];
		if (!L->started)
			continue;
		loop_wake(L);
		pthread_join(L->thread, NULL);
		L->started = false;
	}
}

void loops_close(void)
{
	for (unsigned i = 0; i < nr_loops; i++) {
		struct loop *L = &loops[i];
		if (L->wakefd >= 0)
			close(L->wakefd);
		if (L->epfd >= 0)
			close(L->epfd);
		pthread_mutex_destroy(&L->kick_lock);
	}
	free(loops);
	loops = NULL;
	nr_loops = 0;
}

unsigned loops_count(void)
{
	return nr_loops;
}

struct loop *loop_at(unsigned i)
{
	return &loops[i];
}

struct loop *loops_first(void)
{
	return &loops[0];
}

struct loop *loops_least_loaded(void)
{
	struct loop *best = &loops[0];
	for (unsigned i = 1; i < nr_loops; i++)
		if (atomic_load(&loops[i].nr_conns) < atomic_load(&best->nr_conns))
			best = &loops[i];
	return best;
}

void loop_wake(struct loop *L)
{
	uint64_t one = 1;
	if (write(L->wakefd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		peer_warn("cannot wake socket thread %u: %s", L->index, strerror(errno));
}

void loops_wake_waiters(void)
{
	for (unsigned i = 0; i < nr_loops; i++) {
		atomic_store(&loops[i].total_released, true);
		loop_wake(&loops[i]);
	}
}
