/*
 * Who a process is, for port ownership: its pid and start time (so a
 * recycled pid is never mistaken for the owner), and whether an owner
 * recorded in a port is still alive.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "xseg_internal.h"

static pid_t cached_pid;
static pthread_once_t pid_once = PTHREAD_ONCE_INIT;

static void refresh_pid(void)
{
	cached_pid = getpid();
}

static void init_pid(void)
{
	refresh_pid();
	pthread_atfork(NULL, NULL, refresh_pid);
}

pid_t xseg_self_pid(void)
{
	pthread_once(&pid_once, init_pid);
	return cached_pid;
}

/* Field 22 of /proc/PID/stat: start time in clock ticks since boot. 0
 * with errno ESRCH when the process is gone, with another errno (EMFILE,
 * ENFILE, ENOMEM...) when this process could not look. A zombie is gone:
 * it has let go of the segment, and its parent (init, for a daemon) may
 * reap it only much later. Not one whose main thread alone ended (state Z
 * too, but other threads run: field 20, the thread count, says so). */
static uint64_t pid_start_time(pid_t pid)
{
	char path[64], buf[1024];
	FILE *f;
	size_t n;
	unsigned long long start = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (!(f = fopen(path, "r"))) {
		if (errno == ENOENT)
			errno = ESRCH;
		return 0;
	}
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	char *p = strrchr(buf, ')');  /* the command name may hold spaces */
	char state = 0;
	long threads = 0;
	/* after ") " come fields 3..; the state is field 3, start time 22 */
	if (!p || sscanf(p + 2, "%c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d "
			 "%*d %*d %ld %*d %llu", &state, &threads, &start) != 3 ||
	    ((state == 'Z' || state == 'X') && threads <= 1)) {
		errno = ESRCH;   /* gone while we read, or a zombie */
		return 0;
	}
	return start;
}

bool xseg_pid_alive(pid_t pid)
{
	if (pid <= 0 || (kill(pid, 0) < 0 && errno != EPERM))
		return false;
	return pid_start_time(pid) != 0 || errno != ESRCH;   /* could not look: alive */
}

uint64_t xseg_owner_word(pid_t pid)
{
	uint64_t start = pid_start_time(pid);
	if (!start)
		return 0;
	return ((start & 0xffffffffu) << 32) | (uint32_t)pid;
}

bool xseg_owner_alive(uint64_t owner)
{
	pid_t pid = xseg_owner_pid(owner);
	if (pid <= 0)
		return false;
	if (kill(pid, 0) < 0 && errno == ESRCH)
		return false;
	/* pid exists: is it the same process, not a recycled pid? */
	uint64_t word = xseg_owner_word(pid);
	if (!word && errno != ESRCH)
		return true;   /* could not look (out of files...): never take a live peer's port */
	return word == owner;
}

/* The owner word names this process: its pid and its start time, so that a
 * dead owner whose pid this process got is not taken for us. */
bool xseg_owner_is_self(uint64_t owner)
{
	uint64_t me = xseg_self_owner_word();
	if (!me)   /* could not look (out of files): the pid alone */
		return xseg_owner_pid(owner) == xseg_self_pid();
	return owner == me;
}

uint64_t xseg_self_owner_word(void)
{
	static _Thread_local uint64_t word;
	static _Thread_local pid_t word_pid;
	pid_t me = xseg_self_pid();
	if (word_pid != me || !word) {   /* a failed look (EMFILE) is not kept */
		word = xseg_owner_word(me);
		word_pid = me;
	}
	return word;
}
