/*
 * Readiness and stopping for systemd (units with Type=notify), through
 * sd_notify(3); nothing is sent when $NOTIFY_SOCKET is unset (not started
 * by systemd), so peers run the same everywhere else.
 *
 * READY=1 goes out where --daemon's caller is told we serve: the port is
 * bound and the workers run, so a unit ordered after ours can send to us
 * at once. It names MAINPID: under --daemon the process systemd started
 * exits once we serve and the daemon is the one to watch (such a unit
 * needs NotifyAccess=all; ours run in the foreground). STOPPING=1 goes out
 * once, when a stop begins (before a cache's write-back or any drain), so
 * `systemctl status` says "deactivating" while the drain runs.
 *
 * STATUS= is "serving on ..." from READY=1 on; a peer replaces it while
 * it is in a state the operator must act on (peer_status).
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "runtime.h"

static atomic_int stopping_sent;

#define STATUS_MAX 512
static struct {
	pthread_mutex_t lock;
	char serving[STATUS_MAX];   /* READY=1's text, for peer_status(NULL) */
	char shown[STATUS_MAX];     /* what STATUS= last said */
} S = { .lock = PTHREAD_MUTEX_INITIALIZER };

void peer_notify_ready(struct peer *p)
{
	pthread_mutex_lock(&S.lock);
	snprintf(S.serving, sizeof(S.serving), "serving on segment '%s', port %u-%u",
		 p->cfg.segment, p->cfg.port_first, p->cfg.port_last);
	if (!S.shown[0])   /* a peer_status before READY=1 stays */
		memcpy(S.shown, S.serving, sizeof(S.shown));
	int rc = sd_notifyf(0, "READY=1\nMAINPID=%d\nSTATUS=%s", (int)getpid(), S.shown);
	pthread_mutex_unlock(&S.lock);
	if (rc < 0)
		peer_warn("sd_notify READY=1 to NOTIFY_SOCKET %s: %s", getenv("NOTIFY_SOCKET"),
			  strerror(-rc));
}

void peer_status(const char *fmt, ...)
{
	char text[STATUS_MAX];
	if (fmt) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(text, sizeof(text), fmt, ap);
		va_end(ap);
	}
	pthread_mutex_lock(&S.lock);
	if (!fmt)
		memcpy(text, S.serving, sizeof(text));
	int rc = 0;
	if (!atomic_load(&stopping_sent) && strcmp(text, S.shown)) {
		memcpy(S.shown, text, sizeof(S.shown));
		if (text[0])
			rc = sd_notifyf(0, "STATUS=%s", text);
	}
	pthread_mutex_unlock(&S.lock);
	if (rc < 0)
		peer_warn("sd_notify STATUS= to NOTIFY_SOCKET %s: %s", getenv("NOTIFY_SOCKET"),
			  strerror(-rc));
}

void peer_notify_stopping(void)
{
	if (atomic_exchange(&stopping_sent, 1))
		return;
	int rc = sd_notify(0, "STOPPING=1\nSTATUS=stopping");
	if (rc < 0)
		peer_warn("sd_notify STOPPING=1 to NOTIFY_SOCKET %s: %s", getenv("NOTIFY_SOCKET"),
			  strerror(-rc));
}
