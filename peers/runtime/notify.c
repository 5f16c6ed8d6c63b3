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
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "runtime.h"

static atomic_int stopping_sent;

void peer_notify_ready(struct peer *p)
{
	int rc = sd_notifyf(0, "READY=1\nMAINPID=%d\nSTATUS=serving on segment '%s', port %u-%u",
			    (int)getpid(), p->cfg.segment, p->cfg.port_first, p->cfg.port_last);
	if (rc < 0)
		peer_warn("sd_notify READY=1 to NOTIFY_SOCKET %s: %s", getenv("NOTIFY_SOCKET"),
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
