/*
 * --daemon and --pidfile.
 *
 * Daemonizing is a double fork, before the port is bound (so the daemon is
 * the port's owner). The original process waits on a pipe until the daemon
 * says it is serving (its port bound, its threads running) or failed, and
 * exits with its status (0, 1, or 2 for a bad argument such as a segment
 * that does not exist), so a script that starts a peer with --daemon can
 * use it as soon as the command returns. Serving, the daemon lets go of
 * the caller's stdout and stderr (stderr is kept when it is a file).
 *
 * The pidfile is created with O_EXCL. One that names a dead process is
 * stale and replaced (a zombie is dead: xseg_pid_alive); one that names a
 * live process is an error naming it.
 * It is removed on exit, if it still holds our pid.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime.h"

int peer_daemonize(int *ready_fd)
{
	int fds[2];

	if (pipe(fds) < 0) {
		peer_error("--daemon: pipe: %s", strerror(errno));
		return -1;
	}
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		peer_error("--daemon: fork: %s", strerror(errno));
		return -1;
	}
	if (pid > 0) {
		/* The original process: wait for the daemon's word. */
		unsigned char status = 1;
		sigset_t set;
		sigemptyset(&set);
		sigaddset(&set, SIGTERM);
		sigaddset(&set, SIGINT);
		pthread_sigmask(SIG_UNBLOCK, &set, NULL);   /* a TERM ends the wait */
		close(fds[1]);
		waitpid(pid, NULL, 0);   /* the middle child exits at once */
		ssize_t n;
		do
			n = read(fds[0], &status, 1);
		while (n < 0 && errno == EINTR);
		_exit(n == 1 ? status : 1);
	}
	close(fds[0]);
	if (setsid() < 0)
		_exit(1);
	pid = fork();
	if (pid < 0)
		_exit(1);
	if (pid > 0)
		_exit(0);
	/* The daemon. stdout/stderr stay where the caller sent them (logs go
	 * to stderr); stdin is /dev/null. The working directory is kept, so
	 * relative paths in options keep their meaning. */
	int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (null >= 0) {
		dup2(null, STDIN_FILENO);
		close(null);
	}
	umask(022);
	*ready_fd = fds[1];
	return 0;
}

/*
 * Once serving, the daemon lets go of the caller's stdout and of its
 * stderr unless that is a file (a log): `out=$(filed --daemon ...)` would
 * otherwise wait for the daemon's exit.
 */
static void release_caller_output(void)
{
	struct stat st;
	bool log_to_file = fstat(STDERR_FILENO, &st) == 0 && S_ISREG(st.st_mode);
	int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (null < 0)
		return;
	fflush(NULL);
	dup2(null, STDOUT_FILENO);
	if (!log_to_file)
		dup2(null, STDERR_FILENO);
	close(null);
}

void peer_daemon_ready(int ready_fd, int status)
{
	if (ready_fd < 0)
		return;
	unsigned char b = (unsigned char)status;
	ssize_t n = write(ready_fd, &b, 1);
	(void)n;
	close(ready_fd);
	if (status == 0)
		release_caller_output();
}

static pid_t read_pid(const char *path)
{
	char buf[32];
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	char *end;
	long v = strtol(buf, &end, 10);
	if (end == buf || v <= 0 || v > 0x3fffffff)
		return 0;
	return (pid_t)v;
}

int peer_pidfile_create(const char *path)
{
	char buf[32];
	for (int attempt = 0; attempt < 2; attempt++) {
		int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
		if (fd >= 0) {
			int len = snprintf(buf, sizeof(buf), "%d\n", (int)getpid());
			if (write(fd, buf, (size_t)len) != len) {
				peer_error("--pidfile %s: write: %s", path, strerror(errno));
				close(fd);
				unlink(path);
				return -1;
			}
			close(fd);
			return 0;
		}
		if (errno != EEXIST) {
			peer_error("--pidfile %s: %s", path, strerror(errno));
			return -1;
		}
		pid_t other = read_pid(path);
		if (other > 0 && xseg_pid_alive(other)) {
			peer_error("--pidfile %s: belongs to live pid %d", path, (int)other);
			return -1;
		}
		peer_warn("--pidfile %s: replacing a stale pidfile (pid %d is gone)", path,
			  (int)other);
		if (unlink(path) < 0 && errno != ENOENT) {
			peer_error("--pidfile %s: cannot remove the stale file: %s", path,
				   strerror(errno));
			return -1;
		}
	}
	peer_error("--pidfile %s: another process keeps creating it", path);
	return -1;
}

void peer_pidfile_remove(const char *path)
{
	if (path && read_pid(path) == getpid())
		unlink(path);
}
