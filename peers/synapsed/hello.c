/*
 * The hello: the first frame the --remote link writes on each connection.
 * It names this requester (a hash of the machine's id and name, the
 * segment's and the port: the same after a restart, different for any
 * other synapsed that could be running beside it, or on another machine) and gives the connection an epoch that
 * only grows: the realtime clock in ns when connecting, and past the last
 * one. A listener runs nothing of an older connection once it has seen a
 * newer one (epochs.c): what this side timed out and failed on a closed
 * connection may still sit in the listener's socket, and must not land
 * after what was acknowledged on the next.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "synapsed.h"

static uint64_t requester, last_epoch;   /* network thread only, once started */

/* The machine's id (systemd's, made at install or first boot), or "":
 * two machines cloned with the same host name still differ by it. */
static void machine_id(char *id, size_t len)
{
	FILE *f = fopen("/etc/machine-id", "re");
	id[0] = '\0';
	if (f) {
		if (!fgets(id, (int)len, f))
			id[0] = '\0';
		fclose(f);
	}
	id[strcspn(id, "\n")] = '\0';
}

void hello_init(void)
{
	char host[256] = "", id[64], who[700];
	if (gethostname(host, sizeof(host) - 1) < 0)
		host[0] = '\0';
	machine_id(id, sizeof(id));
	int n = snprintf(who, sizeof(who), "%s\n%s\n%s\n%u", id, host,
			 peer_segment_name(S.peer), peer_port(S.peer));
	requester = XXH3_64bits(who, n > 0 && (size_t)n < sizeof(who) ? (size_t)n : sizeof(who));
	if (!requester)
		requester = 1;   /* 0 is no requester */
}

struct frame *hello_frame(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t epoch = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	last_epoch = epoch > last_epoch ? epoch : last_epoch + 1;
	struct frame *f = frame_new(0);
	if (!f)
		return NULL;
	struct wire_header h = { .kind = WIRE_HELLO, .id = requester, .offset = last_epoch };
	wire_encode_header(&h, f->bytes);
	return f;
}
