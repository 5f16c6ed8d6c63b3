/*
 * A persist file's dirty data guards its cache's plug target until the
 * cache serves it; see guard.h.
 *
 * Why: a cache that crashed (or was killed mid-write-back) holds in its
 * persist file acknowledged writes its blocker lacks. On a segment made
 * anew (a reboot) no mark says so, and whatever reaches the blocker
 * before the cache is plugged again reads older data, and writes there
 * are overwritten once the cache replays its file. If the cache then
 * refuses its file (an option changed: exit 2), the peers in front of it
 * go straight to the blocker for good. The mark makes that fail (EIO).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "guard.h"
#include "pathfile.h"

uint64_t guard_persisted_dirty(const char *cached, const char *file)
{
	struct stat st;
	int fds[2];
	/* not there yet, or not a file the cache could use (a FIFO's open
	 * would wait for a writer) */
	if (stat(file, &st) < 0 || !S_ISREG(st.st_mode) || !st.st_size || pipe(fds) < 0)
		return 0;
	fflush(NULL);
	pid_t child = fork();
	if (child < 0) {
		close(fds[0]);
		close(fds[1]);
		return 0;
	}
	if (child == 0) {
		int null = open("/dev/null", O_RDWR);
		if (null >= 0) {
			dup2(null, STDIN_FILENO);
			dup2(null, STDERR_FILENO);
		}
		dup2(fds[1], STDOUT_FILENO);
		execl(cached, cached, "--persist-inspect", file, "--json", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	char buf[4096];
	size_t n = 0;
	ssize_t r;
	while (n < sizeof(buf) - 1 && ((r = read(fds[0], buf + n, sizeof(buf) - 1 - n)) > 0 ||
				       (r < 0 && errno == EINTR)))
		n += r > 0 ? (size_t)r : 0;
	buf[n] = '\0';
	close(fds[0]);
	int status;
	while (waitpid(child, &status, 0) < 0 && errno == EINTR)
		;
	const char *f = strstr(buf, "\"dirty_bytes\":");
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !f)
		return 0;
	return strtoull(f + strlen("\"dirty_bytes\":"), NULL, 10);
}

int guard_port(struct xseg *seg, uint32_t b, uint32_t c, uint64_t dirty)
{
	if (xseg_bind_port(seg, c) < 0 || xseg_port_set_dirty(seg, c, dirty) < 0 ||
	    xseg_leave_port(seg, c) < 0 || xseg_set_next_hop(seg, b, c) < 0)
		return -1;
	return 0;
}

int guard_command(const char *segment, uint32_t b, uint32_t c, const char *file)
{
	char cached[PATH_MAX];
	if (!path_find_program("cached", cached, sizeof(cached))) {
		fprintf(stderr, "xseg: guard: cached is neither next to xseg nor on PATH\n");
		return 1;
	}
	uint64_t dirty = guard_persisted_dirty(cached, file);
	if (!dirty) {
		printf("xseg guard: %s holds no dirty data: port %u not guarded\n", file, b);
		return 0;
	}
	struct xseg *seg;
	if (xseg_join(segment, &seg) < 0) {
		fprintf(stderr, "xseg: guard: %s\n", xseg_last_error());
		return 1;
	}
	struct xseg_port_info pi;
	uint32_t hop = xseg_get_next_hop(seg, b);
	int rc = 1;
	if (xseg_port_info(seg, c, &pi) < 0)
		fprintf(stderr, "xseg: guard: %s\n", xseg_last_error());
	else if (pi.owner && pi.owner_alive)
		fprintf(stderr, "xseg: guard: port %u is served by pid %d: not a cache to come\n", c,
			(int)pi.owner);
	else if (hop != XSEG_NO_PORT && hop != c)
		fprintf(stderr, "xseg: guard: port %u is routed to port %u, not %u: unplug it first\n",
			b, hop, c);
	else if (pi.dirty_bytes && hop == c)
		rc = 0;   /* a kept segment: already so */
	else if (guard_port(seg, b, c, pi.dirty_bytes ? pi.dirty_bytes : dirty) < 0)
		fprintf(stderr, "xseg: guard: cannot keep port %u closed until the cache on port %u "
			"serves the dirty data of %s: %s\n", b, c, file, xseg_last_error());
	else
		rc = 0;
	if (!rc)
		printf("xseg guard: %s holds %" PRIu64 " dirty bytes: port %u fails closed until "
		       "the cache on port %u serves them\n", file, dirty, b, c);
	xseg_leave(seg);
	return rc;
}
