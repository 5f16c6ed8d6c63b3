/* xseg up, down, status; see up.h. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "guard.h"
#include "plug.h"
#include "up.h"

#define PROGRESS_S 5          /* a line while waiting, this often */
#define POLL_NS 20000000ull   /* how often a wait looks again */
#define LOG_TAIL_LINES 20     /* of a failed peer's log */

struct run_dir {
	char path[PATH_MAX];
};

/* What stopping a peer came to. */
enum stopped {
	STOPPED,       /* it is gone (or was not running) */
	LEFT,          /* something else holds its port or pidfile: go on, but keep the segment */
	STUCK,         /* it still runs, or left dirty data: stop here */
};

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	interrupted = sig;
}

static void nap(void)
{
	struct timespec ts = { 0, (long)POLL_NS };
	nanosleep(&ts, NULL);
}

static unsigned since_s(uint64_t start_ns)
{
	return (unsigned)((xseg_now_ns() - start_ns) / 1000000000ull);
}

static int run_dir_of(const struct path_file *pf, const char *given, struct run_dir *rd)
{
	int n;
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	if (given)
		n = snprintf(rd->path, sizeof(rd->path), "%s", given);
	else if (geteuid() == 0)
		n = snprintf(rd->path, sizeof(rd->path), "/run/xseg/%s", pf->segment);
	else
		n = snprintf(rd->path, sizeof(rd->path), "%s/xseg-%s", xdg && *xdg ? xdg : "/tmp",
			     pf->segment);
	if (n < 0 || (size_t)n >= sizeof(rd->path) - 32) {
		fprintf(stderr, "xseg: the run directory's name is too long\n");
		return -1;
	}
	return 0;
}

/* Makes the run directory (mode 0700) unless it exists; it must be ours. */
static int make_run_dir(const struct run_dir *rd, bool given)
{
	if (!given && geteuid() == 0 && mkdir("/run/xseg", 0755) < 0 && errno != EEXIST) {
		fprintf(stderr, "xseg: up: /run/xseg: %s\n", strerror(errno));
		return -1;
	}
	if (mkdir(rd->path, 0700) < 0 && errno != EEXIST) {
		fprintf(stderr, "xseg: up: run directory %s: %s\n", rd->path, strerror(errno));
		return -1;
	}
	struct stat st;
	if (lstat(rd->path, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
		fprintf(stderr, "xseg: up: run directory %s is not a directory of this user's\n",
			rd->path);
		return -1;
	}
	return 0;
}

/* RUN_DIR/PORT-PROGRAM.EXT */
static void peer_file(const struct run_dir *rd, const struct path_peer *pp, const char *ext,
		      char *out, size_t len)
{
	int n = snprintf(out, len, "%s/%u-%s.%s", rd->path, pp->port_first, pp->program, ext);
	if (n < 0 || (size_t)n >= len)
		out[0] = '\0';   /* not reached: run_dir_of and the file's names leave room */
}

static pid_t read_pidfile(const char *path)
{
	char buf[32];
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	char *end;
	long v = strtol(buf, &end, 10);
	return end != buf && v > 0 && v <= 0x3fffffff ? (pid_t)v : 0;
}

/* The live process that owns `port`, or 0. */
static pid_t port_owner(struct xseg *seg, uint32_t port)
{
	struct xseg_port_info pi;
	if (!seg || xseg_port_info(seg, port, &pi) < 0 || !pi.owner || !pi.owner_alive)
		return 0;
	return pi.owner;
}

/* The value pid's command line gives `opt` ("--opt VALUE" or
 * "--opt=VALUE", the first), in out; false when it has none. */
static bool started_with(pid_t pid, const char *opt, char *out, size_t len)
{
	char path[64], buf[8192];
	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f), olen = strlen(opt);
	fclose(f);
	buf[n] = '\0';
	for (size_t i = 0; i < n; i += strlen(buf + i) + 1) {
		const char *arg = buf + i;
		if (!strcmp(arg, opt) && i + strlen(arg) + 1 < n) {
			snprintf(out, len, "%s", arg + strlen(arg) + 1);
			return true;
		}
		if (!strncmp(arg, opt, olen) && arg[olen] == '=') {
			snprintf(out, len, "%s", arg + olen + 1);
			return true;
		}
	}
	return false;
}

/* Whether pid runs pp's program and was started with "--pidfile PIDFILE"
 * (as xseg up starts a peer: peer_argv); its --segment in seg_of. */
static bool started_as(const struct path_peer *pp, pid_t pid, const char *pidfile,
		       char *seg_of, size_t len)
{
	char link[64], exe[PATH_MAX], real[PATH_MAX], given[PATH_MAX];
	snprintf(link, sizeof(link), "/proc/%d/exe", (int)pid);
	ssize_t n = readlink(link, exe, sizeof(exe) - 1);
	if (n <= 0 || !realpath(pp->exe, real))
		return false;
	exe[n] = '\0';
	char *deleted = strstr(exe, " (deleted)");   /* rebuilt while it ran */
	if (deleted)
		*deleted = '\0';
	const char *a = strrchr(exe, '/'), *b = strrchr(real, '/');
	if (strcmp(a ? a + 1 : exe, b ? b + 1 : real) ||
	    !started_with(pid, "--pidfile", given, sizeof(given)) || strcmp(given, pidfile))
		return false;
	if (!started_with(pid, "--segment", seg_of, len))
		seg_of[0] = '\0';
	return true;
}

/* Whether pid is the peer pp of segment `segment` whose pidfile is
 * `pidfile`: the owner of its port, or (the segment gone, the port not yet
 * bound) its program started with that pidfile and that segment. The
 * program alone would take a reused pid running the same program for
 * another path for ours, and signal it; the pidfile alone, a peer of
 * another path whose file names the same run directory. */
static bool is_peer(struct xseg *seg, const char *segment, const struct path_peer *pp,
		    pid_t pid, const char *pidfile)
{
	if (port_owner(seg, pp->port_first) == pid)
		return true;
	char seg_of[NAME_MAX + 1];
	return started_as(pp, pid, pidfile, seg_of, sizeof(seg_of)) && !strcmp(seg_of, segment);
}

/*
 * The pid of the peer's pidfile, 0 if none. One that names a live process
 * that is not the peer is stale (the peer died without removing it and
 * its pid was reused after a reboot or a long run): removed, said, 0 (the
 * peer would refuse it, and down would take a stranger for the peer).
 * One that names the same program started with this pidfile for another
 * segment is another path's (two path files, one --run-dir): left alone,
 * said, 0.
 */
static pid_t pidfile_pid(struct xseg *seg, const char *segment, const struct path_peer *pp,
			 const char *pidfile, const char *what)
{
	pid_t pid = read_pidfile(pidfile);
	if (!xseg_pid_alive(pid) || is_peer(seg, segment, pp, pid, pidfile))
		return pid;
	char seg_of[NAME_MAX + 1];
	if (started_as(pp, pid, pidfile, seg_of, sizeof(seg_of))) {
		fprintf(stderr, "xseg: %s: %s names pid %d, a %s of segment %s, not of %s (another "
			"path with this run directory): left alone\n", what, pidfile, (int)pid,
			pp->program, seg_of, segment);
		return 0;
	}
	if (unlink(pidfile) < 0 && errno != ENOENT) {
		fprintf(stderr, "xseg: %s: %s names pid %d, which is not %s, and cannot be removed: "
			"%s\n", what, pidfile, (int)pid, pp->program, strerror(errno));
		return pid;
	}
	fprintf(stderr, "xseg: %s: %s named pid %d, which is not %s (a stale pidfile, its pid "
		"reused): removed\n", what, pidfile, (int)pid, pp->program);
	return 0;
}

static void print_port(const struct path_peer *pp, char *out, size_t len)
{
	if (pp->port_first == pp->port_last)
		snprintf(out, len, "%u", pp->port_first);
	else
		snprintf(out, len, "%u-%u", pp->port_first, pp->port_last);
}

/*
 * A daemon's exit status reaches nobody's waitpid: the runtime says it in
 * its log ("NAME[PID] ERROR: stopped, exit status N", only when N is not
 * 0, or "stop: gave up" before it exits 1). True if `log` from `offset`
 * on holds such a line of `pid`; the line's text from the pid on in `why`.
 */
static bool failed_exit(const char *log, off_t offset, pid_t pid, char *why, size_t len)
{
	FILE *f = fopen(log, "re");
	if (!f)
		return false;
	char tag[32], line[1024];
	snprintf(tag, sizeof(tag), "[%d] ERROR: ", (int)pid);
	bool failed = false;
	if (fseeko(f, offset, SEEK_SET) == 0) {
		while (!failed && fgets(line, sizeof(line), f)) {
			const char *t = strstr(line, tag);
			const char *m = t ? t + strlen(tag) : "";
			failed = !strncmp(m, "stopped, exit status ", 21) || !strncmp(m, "stop: gave up", 13);
			if (failed) {
				line[strcspn(line, "\n")] = '\0';
				snprintf(why, len, "%s", m);
			}
		}
	}
	fclose(f);
	return failed;
}

/* The peer of the file that serves `port`, or NULL. */
static const struct path_peer *peer_serving(const struct path_file *pf, uint32_t port)
{
	for (unsigned i = 0; i < pf->nr_peers; i++)
		if (port >= pf->peers[i].port_first && port <= pf->peers[i].bound_last)
			return &pf->peers[i];
	return NULL;
}

/*
 * The port of a --replica cache of the file with persist=: what it holds
 * are copies of its primary's dirty data, kept in that file at its stop
 * (and at a crash); the primary writes them back itself (or resets the
 * replica), a promote takes them from the file. Its port's mark guards no
 * route (a replica is never plugged), so it does not hold down: a mark
 * there stopped down for good, also once the primary had written all back.
 * Without persist= the replica dropped them: the mark stays what stops
 * down (they were maybe the only copy).
 */
static bool replica_keeps(const struct path_file *pf, uint32_t port, const char *what,
			  struct xseg *seg)
{
	const struct path_peer *pp = peer_serving(pf, port);
	const char *file = pp ? path_peer_option(pp, "persist") : NULL;
	struct xseg_port_info pi;
	if (!file || !*file || !path_peer_option(pp, "replica") ||
	    xseg_port_info(seg, port, &pi) < 0 || !pi.dirty_bytes || (pi.owner && pi.owner_alive))
		return false;
	if (what)
		printf("xseg %s: the replica %s on port %u keeps %" PRIu64 " bytes of its primary's "
		       "in %s (the primary writes them back or resets it; xseg promote takes "
		       "them)\n", what, pp->program, port, pi.dirty_bytes, file);
	return true;
}

/*
 * SIGTERM to the peer of the pidfile, then waits for it to exit, one
 * progress line every few seconds (with the dirty bytes a cache still
 * writes back). seg may be NULL (the segment is gone).
 */
static enum stopped stop_peer(struct xseg *seg, const struct path_file *pf,
			      const struct path_peer *pp, const struct run_dir *rd,
			      unsigned timeout_s, const char *what)
{
	char pidfile[PATH_MAX];
	peer_file(rd, pp, "pid", pidfile, sizeof(pidfile));
	pid_t pid = pidfile_pid(seg, pf->segment, pp, pidfile, what);
	pid_t owner = port_owner(seg, pp->port_first);
	if (!xseg_pid_alive(pid)) {
		if (pid)
			unlink(pidfile);   /* stale: it died without removing it */
		/* A peer whose start failed may still be on its way out (a
		 * --daemon's launcher says its status before the daemon has
		 * unmapped and left: a fresh clone's CI took such a cache for
		 * another's, and the undo left the segment for it). */
		for (int i = 0; owner && i < 40; i++) {
			usleep(50000);
			owner = port_owner(seg, pp->port_first);
		}
		if (owner) {
			fprintf(stderr, "xseg: %s: port %u is served by pid %d, not by a %s that "
				"xseg up started (no pidfile in %s: another --run-dir?); left running\n",
				what, pp->port_first, (int)owner, pp->program, rd->path);
			return LEFT;
		}
		/* Dead before we came: a cache that died holding dirty bytes
		 * stops the stop here too, or the blocker behind it would be
		 * stopped and the segment (and the port's mark) removed. */
		if (seg)
			for (uint32_t p = pp->port_first; p <= pp->port_last; p++)
				if (!replica_keeps(pf, p, what, seg) && gone_dirty(seg, p, what))
					return STUCK;
		return STOPPED;
	}
	if (!is_peer(seg, pf->segment, pp, pid, pidfile)) {   /* a stale pidfile that could not be removed */
		fprintf(stderr, "xseg: %s: %s names pid %d, which is not %s; left running\n", what,
			pidfile, (int)pid, pp->program);
		return LEFT;
	}
	printf("xseg %s: stopping %s on port %u (pid %d)\n", what, pp->program, pp->port_first,
	       (int)pid);
	fflush(stdout);
	char log[PATH_MAX];
	struct stat st;
	peer_file(rd, pp, "log", log, sizeof(log));
	off_t log_from = stat(log, &st) == 0 ? st.st_size : 0;
	kill(pid, SIGTERM);
	uint64_t start = xseg_now_ns();
	unsigned shown = 0;
	while (xseg_pid_alive(pid)) {
		unsigned s = since_s(start);
		if (s >= timeout_s) {
			fprintf(stderr, "xseg: %s: %s (pid %d) on port %u still runs after %u s; "
				"it and the peers before it are left running (see its log, %s/%u-%s.log)\n",
				what, pp->program, (int)pid, pp->port_first, s, rd->path,
				pp->port_first, pp->program);
			return STUCK;
		}
		if (s >= shown + PROGRESS_S) {
			shown = s;
			struct xseg_port_info pi = { 0 };
			if (seg)
				xseg_port_info(seg, pp->port_first, &pi);
			printf("xseg %s: waiting for %s (pid %d) to stop: %u s", what, pp->program,
			       (int)pid, s);
			if (pi.dirty_bytes)
				printf(", %" PRIu64 " dirty bytes to write back", pi.dirty_bytes);
			printf("\n");
			fflush(stdout);
		}
		nap();
	}
	uint64_t ms = (xseg_now_ns() - start) / 1000000;
	printf("xseg %s: %s on port %u stopped after %" PRIu64 ".%01" PRIu64 " s\n", what,
	       pp->program, pp->port_first, ms / 1000, ms % 1000 / 100);
	fflush(stdout);
	if (seg)
		for (uint32_t p = pp->port_first; p <= pp->port_last; p++)
			if (!replica_keeps(pf, p, what, seg) && gone_dirty(seg, p, what))
				return STUCK;
	/* Also with no segment to look at (its name removed while the path
	 * ran): a cache that gave up its write-back exits non-zero. */
	char why[512];
	if (failed_exit(log, log_from, pid, why, sizeof(why))) {
		fprintf(stderr, "xseg: %s: %s on port %u (pid %d) failed its stop: '%s' (%s); data "
			"it held may be lost: the peers before it are left running%s\n", what,
			pp->program, pp->port_first, (int)pid, why, log,
			seg ? ", and the segment" : "");
		return STUCK;
	}
	if (seg)
		for (uint32_t p = pp->port_first; p <= pp->port_last; p++)
			clear_routes_to(seg, p);
	return STOPPED;
}

/* The last lines of `log` from `offset` on, indented, on stderr. */
static void print_log_tail(const char *log, off_t offset)
{
	static char buf[65536];
	int fd = open(log, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	off_t end = lseek(fd, 0, SEEK_END);
	if (end - offset > (off_t)sizeof(buf) - 1)
		offset = end - (off_t)sizeof(buf) + 1;
	ssize_t n = end > offset ? pread(fd, buf, (size_t)(end - offset), offset) : 0;
	close(fd);
	if (n <= 0) {
		fprintf(stderr, "  (it wrote nothing to %s)\n", log);
		return;
	}
	buf[n] = '\0';
	if (buf[n - 1] == '\n')
		buf[--n] = '\0';
	char *p = buf + n;
	for (int lines = 0; p > buf; p--)
		if (p[-1] == '\n' && ++lines == LOG_TAIL_LINES)
			break;
	fprintf(stderr, "  %s:\n", log);
	for (char *line = p, *nl; line; line = nl) {
		nl = strchr(line, '\n');
		if (nl)
			*nl++ = '\0';
		fprintf(stderr, "  | %s\n", line);
	}
}

/* argv of a peer: PROGRAM --segment S <the file's options> --daemon --pidfile F */
static void peer_argv(const struct path_file *pf, const struct path_peer *pp,
		      const char *pidfile, const char **argv)
{
	unsigned n = 0;
	argv[n++] = pp->exe;
	argv[n++] = "--segment";
	argv[n++] = pf->segment;
	for (unsigned i = 0; i < pp->argc; i++)
		argv[n++] = pp->argv[i];
	argv[n++] = "--daemon";
	argv[n++] = "--pidfile";
	argv[n++] = pidfile;
	argv[n] = NULL;
}

/*
 * Starts one peer with --daemon, stdout and stderr appended to its log,
 * and waits for it to serve. 0, or 1 with the reason and its log's end.
 */
static int start_peer(struct xseg *seg, const struct path_file *pf, const struct path_peer *pp,
		      const struct run_dir *rd, unsigned timeout_s)
{
	char pidfile[PATH_MAX], log[PATH_MAX], port[32];
	const char *argv[2 * PATH_FILE_MAX_WORDS + 8];
	peer_file(rd, pp, "pid", pidfile, sizeof(pidfile));
	peer_file(rd, pp, "log", log, sizeof(log));
	print_port(pp, port, sizeof(port));
	peer_argv(pf, pp, pidfile, argv);
	pidfile_pid(seg, pf->segment, pp, pidfile, "up");   /* a live peer's is kept: it refuses to start */

	int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0) {
		fprintf(stderr, "xseg: up: %s: %s\n", log, strerror(errno));
		return 1;
	}
	char when[32];
	time_t now = time(NULL);
	strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
	dprintf(fd, "== %s: xseg up %s (line %u):", when, pf->file, pp->line);
	for (unsigned i = 0; argv[i]; i++)
		dprintf(fd, " %s", argv[i]);
	dprintf(fd, "\n");
	off_t offset = lseek(fd, 0, SEEK_END);

	fflush(NULL);
	pid_t child = fork();
	if (child < 0) {
		fprintf(stderr, "xseg: up: fork: %s\n", strerror(errno));
		close(fd);
		return 1;
	}
	if (child == 0) {
		/* Its own process group: a Ctrl-C meant for xseg up does not cut
		 * its start short (which could leave the daemon it forked with no
		 * pidfile yet); up waits for the start to end, then stops it. */
		setpgid(0, 0);
		int null = open("/dev/null", O_RDONLY);
		if (null >= 0)
			dup2(null, STDIN_FILENO);
		dup2(fd, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
		execv(pp->exe, (char *const *)argv);
		fprintf(stderr, "xseg up: cannot run %s: %s\n", pp->exe, strerror(errno));
		_exit(127);
	}
	close(fd);

	uint64_t start = xseg_now_ns();
	unsigned shown = 0;
	const char *why = NULL;
	int status = 0;
	bool told = false;
	for (;;) {
		pid_t r = waitpid(child, &status, WNOHANG);
		if (r == child || (r < 0 && errno != EINTR))
			break;
		unsigned s = since_s(start);
		if (interrupted && !told) {
			printf("xseg up: interrupted: waiting for %s to finish starting, then stopping "
			       "everything\n", pp->program);
			fflush(stdout);
			told = true;
		}
		if (s >= timeout_s) {
			why = "no answer in time";
			/* its group (it and what it runs, not the daemon, which has
			 * its own session); its pidfile is long written, so the daemon
			 * stops by it below */
			kill(-child, SIGTERM);
			kill(child, SIGTERM);
			while (waitpid(child, &status, 0) < 0 && errno == EINTR)
				;
			break;
		}
		if (s >= shown + PROGRESS_S) {
			shown = s;
			printf("xseg up: waiting for %s on port %s to serve: %u s\n", pp->program, port, s);
			fflush(stdout);
		}
		nap();
	}
	char whybuf[64];
	pid_t pid = 0;
	if (!why && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
		if (WIFEXITED(status))
			snprintf(whybuf, sizeof(whybuf), "exit status %d", WEXITSTATUS(status));
		else
			snprintf(whybuf, sizeof(whybuf), "killed by signal %d", WTERMSIG(status));
		why = whybuf;
	} else if (!why && !xseg_pid_alive(pid = read_pidfile(pidfile))) {
		why = "it says it serves, but its pidfile names no live process";
	} else if (!why && port_owner(seg, pp->port_first) != pid) {
		snprintf(whybuf, sizeof(whybuf), "it says it serves, but pid %d does not own port %u",
			 (int)pid, pp->port_first);
		why = whybuf;
	}
	if (why) {
		fprintf(stderr, "xseg: up: %s on port %s (%s:%u) did not start: %s\n", pp->program,
			port, pf->file, pp->line, why);
		print_log_tail(log, offset);
		return 1;
	}
	if (pp->plug != XSEG_NO_PORT && plug_in(seg, pp->plug, pp->port_first, "up") != 0) {
		fprintf(stderr, "xseg: up: %s on port %s (%s:%u) serves but could not be plugged in "
			"front of port %u\n", pp->program, port, pf->file, pp->line, pp->plug);
		return 1;
	}
	printf("xseg up: %s on port %s serves (pid %d)", pp->program, port, (int)pid);
	if (pp->plug != XSEG_NO_PORT)
		printf(", plugged in front of port %u", pp->plug);
	printf("\n");
	fflush(stdout);
	return 0;
}

/*
 * A cache to be plugged in front of port B whose persist file holds dirty
 * data (a crash) holds acknowledged writes that B lacks. Peers on earlier
 * lines serve before it is plugged: a write that reached B then was
 * acknowledged there, and the cache, plugged after, served and wrote back
 * its older data over it. So before any peer starts, the cache's port is
 * marked as a cache gone dirty would leave it (the segment's fail-closed
 * mark) and B routed to it: submits to B fail with EIO until the cache
 * serves, recovers the data and takes the mark over. The data stays in
 * the file: a failed up may remove the segment (kept_in_file).
 * guarded[i]: peer i's port was marked so.
 */
static int guard_persisted(struct xseg *seg, const struct path_file *pf, bool *guarded)
{
	for (unsigned i = 0; i < pf->nr_peers; i++) {
		const struct path_peer *pp = &pf->peers[i];
		const char *file = path_peer_option(pp, "persist");
		if (pp->plug == XSEG_NO_PORT || !file || !*file || path_peer_option(pp, "persist-discard"))
			continue;
		uint64_t dirty = guard_persisted_dirty(pp->exe, file);
		if (!dirty)
			continue;
		if (guard_port(seg, pp->plug, pp->port_first, dirty) < 0) {
			fprintf(stderr, "xseg: up: cannot keep port %u closed until %s on port %u "
				"serves the dirty data of %s: %s\n", pp->plug, pp->program,
				pp->port_first, file, xseg_last_error());
			return -1;
		}
		guarded[i] = true;
		printf("xseg up: %s holds %" PRIu64 " dirty bytes: port %u fails closed until %s "
		       "on port %u serves them\n", file, dirty, pp->plug, pp->program, pp->port_first);
		fflush(stdout);
	}
	return 0;
}

/* A guarded cache that failed to start and is gone, its port marked dirty:
 * whatever it held is in its persist file, so the segment may go once all
 * else stopped (the next up guards the port again). */
static bool kept_in_file(struct xseg *seg, const struct path_peer *pp, bool guarded)
{
	if (!guarded || port_owner(seg, pp->port_first))
		return false;
	fprintf(stderr, "xseg: up: those dirty bytes stay in %s for the next start\n",
		path_peer_option(pp, "persist"));
	return true;
}

/*
 * A peer of the file whose pidfile names a live process that was started
 * with it: a peer of an earlier up still running (its segment removed
 * under it), or another path's that shares this run directory. The peer
 * would refuse the pidfile, and the undo of the failed up signalled the
 * pid it names: a peer this up never started, maybe with a dirty cache in
 * front of it. Says which; true if any (nothing is started then).
 */
static bool pidfiles_in_use(const struct path_file *pf, const struct run_dir *rd)
{
	bool any = false;
	for (unsigned i = 0; i < pf->nr_peers; i++) {
		const struct path_peer *pp = &pf->peers[i];
		char pidfile[PATH_MAX], seg_of[NAME_MAX + 1];
		peer_file(rd, pp, "pid", pidfile, sizeof(pidfile));
		pid_t pid = read_pidfile(pidfile);
		if (!xseg_pid_alive(pid) || !started_as(pp, pid, pidfile, seg_of, sizeof(seg_of)))
			continue;   /* none, or stale: start_peer removes it */
		if (!strcmp(seg_of, pf->segment))
			fprintf(stderr, "xseg: up: %s names pid %d, a %s of segment %s still running "
				"from an earlier up (the segment was removed under it): 'xseg down %s' "
				"stops it\n", pidfile, (int)pid, pp->program, seg_of, pf->file);
		else
			fprintf(stderr, "xseg: up: %s names pid %d, a %s of segment %s (another path "
				"with this run directory): give %s a run directory of its own "
				"(--run-dir)\n", pidfile, (int)pid, pp->program, seg_of, pf->file);
		any = true;
	}
	return any;
}

int path_up(const struct path_file *pf, const char *run_dir, unsigned timeout_s)
{
	struct run_dir rd;
	if (run_dir_of(pf, run_dir, &rd) < 0 || make_run_dir(&rd, run_dir != NULL) < 0)
		return 1;
	int crc = xseg_create(pf->segment, &pf->cfg);
	if (crc < 0) {
		if (crc == -EEXIST)
			fprintf(stderr, "xseg: up: segment %s exists already; 'xseg status %s' says "
				"what runs on it, 'xseg down %s' stops it\n", pf->segment, pf->file,
				pf->file);
		else
			fprintf(stderr, "xseg: up: %s\n", xseg_last_error());
		return 1;
	}
	struct xseg *seg;
	if (xseg_join(pf->segment, &seg) < 0) {
		fprintf(stderr, "xseg: up: %s\n", xseg_last_error());
		xseg_destroy(pf->segment);
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);   /* as in path_down: no stop halfway */
	bool guarded[PATH_FILE_MAX_PEERS] = { false };
	if (pidfiles_in_use(pf, &rd) || guard_persisted(seg, pf, guarded) < 0) {
		xseg_leave(seg);
		xseg_destroy(pf->segment);
		return 1;
	}
	struct sigaction sa = { 0 }, old[3];
	const int sigs[3] = { SIGINT, SIGTERM, SIGHUP };
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	for (int i = 0; i < 3; i++)
		sigaction(sigs[i], &sa, &old[i]);

	unsigned i = 0;
	for (; i < pf->nr_peers && !interrupted; i++)
		if (start_peer(seg, pf, &pf->peers[i], &rd, timeout_s) != 0)
			break;
	int rc = 0;
	if (i < pf->nr_peers || interrupted) {
		/* the one that failed too: it may have got as far as its pidfile */
		bool all_stopped = true;
		fprintf(stderr, "xseg: up: stopping what was started%s\n",
			interrupted ? " (interrupted)" : "");
		for (unsigned j = i < pf->nr_peers ? i + 1 : i; j-- > 0;)
			all_stopped &= stop_peer(seg, pf, &pf->peers[j], &rd, timeout_s, "up") == STOPPED ||
				       kept_in_file(seg, &pf->peers[j], guarded[j]);
		if (all_stopped)
			xseg_destroy(pf->segment);
		else
			fprintf(stderr, "xseg: up: segment %s left in place for what still runs "
				"('xseg down %s' once it is settled)\n", pf->segment, pf->file);
		rc = 1;
	} else {
		printf("xseg up: segment %s: %u peers serve (logs and pidfiles in %s)\n",
		       pf->segment, pf->nr_peers, rd.path);
	}
	xseg_leave(seg);
	for (int k = 0; k < 3; k++)
		sigaction(sigs[k], &old[k], NULL);
	return rc;
}

/*
 * Something still sends pp's requests on to pp, or holds data pp lacks: a
 * live peer (or a gone cache's dirty mark) in the chain in front of one of
 * its ports that down did not stop first (plugged by hand, not a line of
 * the file, or left running). Stopping pp would cut that cache off from
 * where it writes back. Says so; true if that is the case.
 */
static bool held_in_front(struct xseg *seg, const struct path_file *pf,
			  const struct path_peer *pp)
{
	for (uint32_t p = pp->port_first; p <= pp->port_last; p++) {
		uint32_t hop = front_in_use(seg, p);
		if (hop == XSEG_NO_PORT)
			continue;
		struct xseg_port_info pi = { 0 };
		xseg_port_info(seg, hop, &pi);
		if (!(pi.owner && pi.owner_alive)) {
			gone_dirty(seg, hop, "down");
		} else {
			fprintf(stderr, "xseg: down: port %u (pid %d, %" PRIu64 " dirty bytes) is in "
				"front of port %u and still runs: %s on port %u is not stopped, nor "
				"the peers before it in %s, and the segment is kept; unplug it first "
				"(xseg unplug --segment %s --via %u) or stop it, then run xseg down "
				"again\n", hop, (int)pi.owner, hop_dirty_bytes(seg, hop), p, pp->program,
				pp->port_first, pf->file, pf->segment, hop);
		}
		return true;
	}
	return false;
}

/* pp serves a port that a later peer left running sends to (blocker-port=,
 * plug= ...: a cache unplugged or not, writing back to it). Says so. */
static bool needed_by_left(const struct path_file *pf, const bool *left, unsigned i)
{
	const struct path_peer *pp = &pf->peers[i];
	for (unsigned j = i + 1; j < pf->nr_peers; j++) {
		const struct path_peer *o = &pf->peers[j];
		for (unsigned k = 0; left[j] && k <= PATH_PEER_NR_SENDS_TO; k++) {
			uint32_t to = k < PATH_PEER_NR_SENDS_TO ? o->sends_to[k] : o->plug;
			if (to == XSEG_NO_PORT || to < pp->port_first || to > pp->bound_last)
				continue;
			fprintf(stderr, "xseg: down: %s on port %u (%s:%u) is left running and sends to "
				"port %u: %s on port %u is not stopped, nor the peers before it, and the "
				"segment is kept; stop that %s first (its pidfile is not in the run "
				"directory), then run xseg down again\n", o->program, o->port_first,
				pf->file, o->line, to, pp->program, pp->port_first, o->program);
			return true;
		}
	}
	return false;
}

/*
 * A synapsed listener (listen=) that a requester is connected to: another
 * host's synapsed --remote, the link of a path there that sends its
 * requests here. A write-back cache of that path may hold acknowledged
 * writes that only this path's blocker takes: stopping the listener (and
 * the blocker) strands them there. Waits up to timeout_s for every
 * requester to leave (that path's own down stops its synapsed); true, said,
 * if one is still connected then. Not for a listener whose target is a
 * --replica cache: a primary that loses its replica writes its data to
 * the store itself (two hosts mirroring to each other would wait on each
 * other); nor when a peer on an earlier line of the file has remote=: it
 * is stopped after the listener, and may be the requester itself (both
 * ends in one file).
 */
static bool requesters_stay(struct xseg *seg, const struct path_file *pf,
			    const struct path_peer *pp, unsigned timeout_s)
{
	const char *listen = path_peer_option(pp, "listen");
	uint32_t target = pp->sends_to[3];   /* PATH_PEER_SENDS_TO: target-port */
	const struct path_peer *t = target != XSEG_NO_PORT ? peer_serving(pf, target) : NULL;
	if (!listen || (t && path_peer_option(t, "replica")) ||
	    !port_owner(seg, pp->port_first))
		return false;
	for (const struct path_peer *e = pf->peers; e < pp; e++)
		if (path_peer_option(e, "remote"))
			return false;
	uint64_t start = xseg_now_ns();
	unsigned shown = 0;
	for (;;) {
		/* no such figure (not a synapsed) or no answer: nothing to wait on */
		double n = port_stat_num(seg, pp->port_first, "requesters", 2);
		if (n <= 0)
			return false;
		unsigned s = since_s(start);
		if (s >= timeout_s) {
			fprintf(stderr, "xseg: down: %s on port %u (%s:%u) still has %.0f requester%s "
				"connected after %u s: another host's synapsed --remote, whose path sends "
				"here (a write-back cache there may hold data only this path's blocker "
				"takes); it is not stopped, nor the peers before it, and the segment is "
				"kept; xseg down that path first ('ss -tn' names its address on %s; a "
				"host that is gone: its connection closes after --idle-timeout), then run "
				"xseg down again\n", pp->program, pp->port_first, pf->file, pp->line, n,
				n == 1 ? "" : "s", s, listen);
			return true;
		}
		if (s >= shown + PROGRESS_S) {
			shown = s;
			printf("xseg down: waiting for %.0f requester%s connected to %s on port %u to "
			       "leave (the down of the path that sends here): %u s\n", n,
			       n == 1 ? "" : "s", pp->program, pp->port_first, s);
			fflush(stdout);
		}
		struct timespec ts = { 0, 200 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
}

/*
 * The segment goes only once nothing is left on it: a live process on
 * any port (a peer not in the file, a client), or a dirty mark (a cache
 * gone with data the blocker lacks: removing the segment removes the mark
 * and its fail-closed routes; not a replica's that keeps its copies in
 * its file: replica_keeps). The first such port, or XSEG_NO_PORT.
 */
static uint32_t port_in_use(struct xseg *seg, const struct path_file *pf,
			    struct xseg_port_info *pi)
{
	struct xseg_segment_info si;
	xseg_segment_info(seg, &si);
	for (uint32_t p = 0; p < si.nr_ports; p++)
		if (xseg_port_info(seg, p, pi) == 0 && ((pi->owner && pi->owner_alive) ||
							  (pi->dirty_bytes && !replica_keeps(pf, p, NULL, seg))))
			return p;
	return XSEG_NO_PORT;
}

int path_down(const struct path_file *pf, const char *run_dir, unsigned timeout_s)
{
	/* a reader gone from stdout (make run | head) must not stop it halfway */
	signal(SIGPIPE, SIG_IGN);
	struct run_dir rd;
	if (run_dir_of(pf, run_dir, &rd) < 0)
		return 1;
	struct xseg *seg = NULL;
	if (xseg_join(pf->segment, &seg) < 0)
		seg = NULL;
	bool left = false, was_left[PATH_FILE_MAX_PEERS] = { false };
	for (unsigned i = pf->nr_peers; i-- > 0;) {
		/* nothing behind a peer still running is stopped: a cache there
		 * writes back to it */
		enum stopped r = needed_by_left(pf, was_left, i) ||
				 (seg && held_in_front(seg, pf, &pf->peers[i])) ||
				 (seg && requesters_stay(seg, pf, &pf->peers[i], timeout_s)) ? STUCK :
				 stop_peer(seg, pf, &pf->peers[i], &rd, timeout_s, "down");
		if (r == STUCK) {
			if (seg)
				xseg_leave(seg);
			return 1;
		}
		was_left[i] = r == LEFT;
		left |= r == LEFT;
	}
	if (!seg) {
		printf("xseg down: segment %s does not exist\n", pf->segment);
		return left ? 1 : 0;
	}
	struct xseg_port_info pi;
	uint32_t busy = left ? XSEG_NO_PORT : port_in_use(seg, pf, &pi);
	xseg_leave(seg);
	if (left) {
		fprintf(stderr, "xseg: down: segment %s left in place for what still runs on it\n",
			pf->segment);
		return 1;
	}
	if (busy != XSEG_NO_PORT) {
		if (pi.owner && pi.owner_alive)
			fprintf(stderr, "xseg: down: segment %s kept: port %u is still served by pid %d "
				"(not a peer of %s)%s; stop it, then run xseg down again\n", pf->segment,
				busy, (int)pi.owner, pf->file, pi.dirty_bytes ? ", marked dirty" : "");
		else
			fprintf(stderr, "xseg: down: segment %s kept: port %u is marked as holding %"
				PRIu64 " dirty bytes of a cache that is gone (removing the segment would "
				"lose the mark); restart the cache on its persist file, or give them up "
				"with xseg unplug --force --via %u\n", pf->segment, busy, pi.dirty_bytes,
				busy);
		return 1;
	}
	if (xseg_destroy(pf->segment) < 0) {
		fprintf(stderr, "xseg: down: %s\n", xseg_last_error());
		return 1;
	}
	printf("xseg down: segment %s removed\n", pf->segment);
	return 0;
}

int path_status(const struct path_file *pf, const char *run_dir)
{
	struct run_dir rd;
	if (run_dir_of(pf, run_dir, &rd) < 0)
		return 1;
	struct xseg *seg = NULL;
	bool all = true;
	if (xseg_join(pf->segment, &seg) < 0) {
		seg = NULL;
		all = false;
		printf("segment %s: does not exist\n", pf->segment);
	} else {
		struct xseg_segment_info si;
		xseg_segment_info(seg, &si);
		printf("segment %s: %u ports, %u requests, %u free (run directory %s)\n",
		       pf->segment, si.nr_ports, si.nr_requests, si.free_requests, rd.path);
	}
	printf("%-9s %-12s %8s  %s\n", "port", "program", "pid", "state");
	for (unsigned i = 0; i < pf->nr_peers; i++) {
		const struct path_peer *pp = &pf->peers[i];
		char pidfile[PATH_MAX], port[32], pidtxt[16] = "-";
		peer_file(&rd, pp, "pid", pidfile, sizeof(pidfile));
		print_port(pp, port, sizeof(port));
		pid_t pid = read_pidfile(pidfile), owner = port_owner(seg, pp->port_first);
		bool runs = xseg_pid_alive(pid) && is_peer(seg, pf->segment, pp, pid, pidfile);
		if (runs)
			snprintf(pidtxt, sizeof(pidtxt), "%d", (int)pid);
		printf("%-9s %-12s %8s  ", port, pp->program, pidtxt);
		if (runs && owner == pid) {
			printf("serving");
			if (pp->plug != XSEG_NO_PORT) {
				bool plugged = xseg_get_next_hop(seg, pp->plug) == pp->port_first;
				printf(plugged ? ", plugged in front of port %u" :
						 ", NOT plugged in front of port %u", pp->plug);
				all &= plugged;
			}
		} else {
			all = false;
			if (runs)
				printf("running, port %u not bound by it", pp->port_first);
			else if (owner)
				printf("not running; port %u is served by pid %d", pp->port_first,
				       (int)owner);
			else
				printf("not running");
		}
		struct xseg_port_info pi;
		if (seg && xseg_port_info(seg, pp->port_first, &pi) == 0 && pi.dirty_bytes)
			printf(", %" PRIu64 " dirty bytes", pi.dirty_bytes);
		printf("\n");
	}
	if (seg)
		xseg_leave(seg);
	return all ? 0 : 1;
}
