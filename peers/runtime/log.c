/*
 * Logging: one line per call on stderr, with a timestamp, the peer's name
 * and pid, and the level. The line is built in a buffer and written with a
 * single write(2), so lines of different threads never interleave.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "runtime.h"

static const char *log_name = "peer";
static _Atomic int log_level = PEER_LOG_WARN;

static const char *const level_names[] = { "ERROR", "WARN", "INFO", "DEBUG" };

void peer_log_setup(const char *name, enum peer_log_level level)
{
	if (name)
		log_name = name;
	atomic_store(&log_level, (int)level);
}

const char *peer_log_name(void)
{
	return log_name;
}

bool peer_log_enabled(enum peer_log_level level)
{
	return (int)level <= atomic_load_explicit(&log_level, memory_order_relaxed);
}

void peer_vlog(enum peer_log_level level, const char *fmt, va_list ap)
{
	char line[1024];
	struct timespec ts;
	struct tm tm;
	int saved = errno;

	if (!peer_log_enabled(level))
		return;
	if (level > PEER_LOG_DEBUG)
		level = PEER_LOG_DEBUG;
	clock_gettime(CLOCK_REALTIME, &ts);
	localtime_r(&ts.tv_sec, &tm);
	size_t n = strftime(line, sizeof(line), "%Y-%m-%d %H:%M:%S", &tm);
	int k = snprintf(line + n, sizeof(line) - n, ".%03ld %s[%d] %s: ",
			 ts.tv_nsec / 1000000, log_name, (int)getpid(), level_names[level]);
	if (k > 0)
		n += (size_t)k < sizeof(line) - n ? (size_t)k : sizeof(line) - n - 1;
	k = vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	if (k > 0)
		n += (size_t)k < sizeof(line) - n ? (size_t)k : sizeof(line) - n - 1;
	if (n >= sizeof(line) - 1)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	ssize_t w = write(STDERR_FILENO, line, n);
	(void)w;
	errno = saved;
}

void peer_log(enum peer_log_level level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	peer_vlog(level, fmt, ap);
	va_end(ap);
}

bool peer_log_once_a_second(_Atomic int64_t *last, _Atomic uint64_t *skipped,
			    uint64_t *suppressed)
{
	int64_t now = (int64_t)time(NULL);
	if (atomic_exchange(last, now) == now) {
		atomic_fetch_add(skipped, 1);
		return false;
	}
	*suppressed = atomic_exchange(skipped, 0);
	return true;
}
