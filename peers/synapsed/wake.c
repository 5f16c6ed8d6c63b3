/* The eventfd through which any thread wakes the network thread: below
 * every other file, so a worker or a frame freed anywhere can call it. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "synapsed.h"

void net_wake(void)
{
	if (!atomic_exchange(&S.wake_pending, 1)) {
		uint64_t one = 1;
		if (write(S.wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			peer_error("cannot wake the network thread: %s", strerror(errno));
	}
}
