/*
 * What keeps one client (any address --allow lets in) from taking the
 * peer from the others:
 *
 * - Memory. A request's body and the reply it will need are reserved from
 *   --max-inflight-bytes when its header arrives, before anything is
 *   allocated; one connection may hold at most a share of it (a quarter,
 *   but always room for the largest frame). A header that finds no room
 *   waits in the connection's buffer and the connection is not read until
 *   one of its replies is written (a reply holds its request's place until
 *   then, so a client that does not read is not read either). The
 *   sender's TCP window fills: back-pressure, not a close, since a busy
 *   but honest client must not lose its link. Only
 *   a request larger than a connection may ever hold closes it.
 * - Time. A frame must be complete within --timeout of its first byte
 *   (time spent waiting for room does not count: that is ours); a
 *   connection with nothing under way is closed after --idle-timeout.
 * - Slots. With --max-connections incoming connections open, a new one
 *   evicts the one idle the longest, preferring those that never sent a
 *   whole frame; with none idle, one whose header waits for room while
 *   nothing of its own is out. So neither silent sockets nor headers that
 *   announce more than the budget can lock out the real remote; a table
 *   of frames under way empties within --timeout.
 * Every close is logged at warn with the peer's address and counted.
 *
 * The budget's accounting is budget.c (below frame.c, which gives it
 * back); this file is above net.c, which calls it through net_ops.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "synapsed.h"

static const char *secs(uint64_t ns, char *buf, size_t len)
{
	snprintf(buf, len, "%" PRIu64 " s", ns / 1000000000u);
	return buf;
}

void limits_sweep(uint64_t now)
{
	char why[160], t[32];

	for (uint32_t ci = 0; ci < S.nr_conns; ci++) {
		struct conn *c = &S.conns[ci];
		if (c->fd < 0 || c->connecting)
			continue;
		if (c->frame_since_ns && now - c->frame_since_ns >= S.timeout_ns) {
			S.counts.frame_timeouts++;
			if (ci == REMOTE_CONN && c->rx.in_body && c->rx.h.kind == WIRE_REPLY)
				snprintf(why, sizeof(why), "a reply stopped in the middle of its data "
					 "(--timeout %s; frame timeouts so far: %" PRIu64 ")",
					 secs(S.timeout_ns, t, sizeof(t)), S.counts.frame_timeouts);
			else
				snprintf(why, sizeof(why), "a frame not complete within --timeout %s "
					 "(frame timeouts so far: %" PRIu64 ")",
					 secs(S.timeout_ns, t, sizeof(t)), S.counts.frame_timeouts);
			conn_close(ci, why, ETIMEDOUT);
			continue;
		}
		if (ci == REMOTE_CONN || !S.idle_timeout_ns)
			continue;
		if (!conn_idle(c)) {
			c->idle_since_ns = now;
			continue;
		}
		if (now - c->idle_since_ns >= S.idle_timeout_ns) {
			S.counts.idle_closed++;
			snprintf(why, sizeof(why), "idle for %s (--idle-timeout; idle closes so far: "
				 "%" PRIu64 ")", secs(now - c->idle_since_ns, t, sizeof(t)),
				 S.counts.idle_closed);
			conn_close(ci, why, ECONNRESET);
		}
	}
}

/* How readily a connection is evicted: 0 idle and never sent a whole frame,
 * 1 idle, 2 a header waiting for room with nothing of its own out (it holds
 * no memory but its buffer), -1 not at all (under way). */
static int evict_class(struct conn *c)
{
	if (c->fd < 0)
		return -1;
	if (conn_idle(c))
		return c->frames_done ? 1 : 0;
	if (c->read_paused && conn_owes_nothing(c))
		return 2;
	return -1;
}

uint32_t limits_evict(void)
{
	static const char *const what[] = { "idle, never sent a frame", "idle",
					    "waiting for room, nothing out" };
	uint32_t victim = 0;
	int victim_class = 3;
	uint64_t victim_since = UINT64_MAX;

	for (uint32_t ci = 1; ci < S.nr_conns; ci++) {
		struct conn *c = &S.conns[ci];
		int k = evict_class(c);
		if (k >= 0 && (k < victim_class ||
			       (k == victim_class && c->idle_since_ns < victim_since))) {
			victim = ci;
			victim_class = k;
			victim_since = c->idle_since_ns;
		}
	}
	if (victim) {
		char why[192], t[32];
		S.counts.evicted++;
		snprintf(why, sizeof(why), "evicted: %u connections open (--max-connections) and it "
			 "was the most evictable (%s, silent %s; evictions so far: %" PRIu64 ")",
			 S.max_conns, what[victim_class],
			 secs(xseg_now_ns() - victim_since, t, sizeof(t)), S.counts.evicted);
		conn_close(victim, why, ECONNRESET);
	}
	return victim;
}

void limits_report(void)
{
	const struct limit_counts *n = &S.counts;
	bool any = n->idle_closed || n->frame_timeouts || n->evicted || n->refused_full ||
		   n->over_budget || n->budget_waits;
	peer_log(any ? PEER_LOG_WARN : PEER_LOG_INFO,
		 "connection limits: %" PRIu64 " closed idle, %" PRIu64 " closed with a frame "
		 "incomplete after --timeout, %" PRIu64 " evicted, %" PRIu64 " refused (table "
		 "full), %" PRIu64 " closed for a request over --max-inflight-bytes, %" PRIu64
		 " waits for --max-inflight-bytes", n->idle_closed, n->frame_timeouts, n->evicted,
		 n->refused_full, n->over_budget, n->budget_waits);
}
