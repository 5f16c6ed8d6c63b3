/* Plugging a peer into a path and clearing routes to it; see plug.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "control.h"
#include "plug.h"
#include "statsjson.h"

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

enum look { LOOK_IDLE, LOOK_BUSY, LOOK_NO_STATS, LOOK_ERROR };

/* A peer's whole "stats" answer, as xseg stats takes it (round.c): a
 * cache's, with its latency buckets, passes 4K under load, and cut short
 * it does not parse (a plug then took it for a peer without stats). */
#define STATS_REPLY_MAX (64u * 1024)

/*
 * One look at the peer serving `port`: the requests it took and has not
 * answered (its "stats" in_flight, which leaves that stats request out)
 * and those queued on its ports (lanes too). Routed to the cache now,
 * the stats request goes on to `port` from there (the runtime passes a
 * control on to the port it was addressed to); an answer from another
 * port (that hop is gone: the cache answered itself) is none.
 */
static enum look look_at(struct xseg *seg, uint32_t port, uint64_t deadline, uint64_t *busy,
			 const char **why)
{
	char *reply = malloc(STATS_REPLY_MAX);
	if (!reply) {
		*why = "out of memory";
		return LOOK_ERROR;
	}
	uint64_t now = xseg_now_ns();
	unsigned left = deadline > now ? (unsigned)((deadline - now) / 1000000000ull) + 1 : 1;
	int rc = control_call(seg, port, "stats", reply, STATS_REPLY_MAX, left, why);
	struct stats_doc d;
	const char *bad;
	int parsed = rc == 0 ? stats_doc_parse(reply, &d, &bad) : -1;
	free(reply);
	if (rc > 0)
		return LOOK_NO_STATS;   /* refused: not the runtime's peer */
	if (rc < 0)
		return LOOK_ERROR;
	if (parsed < 0)
		return LOOK_NO_STATS;
	double first = stats_doc_num(&d, "port", -1), last = stats_doc_num(&d, "port_last", -1);
	double in_flight = stats_doc_num(&d, "in_flight", -1);
	stats_doc_free(&d);
	if (first != port || last < first || last >= XSEG_NO_PORT || in_flight < 0)
		return LOOK_NO_STATS;
	uint64_t queued = 0;
	for (uint32_t p = port; p <= (uint32_t)last; p++) {
		struct xseg_port_info pi;
		if (xseg_port_info(seg, p, &pi) == 0)
			queued += pi.request_depth;
	}
	*busy = (uint64_t)in_flight + queued;
	return *busy ? LOOK_BUSY : LOOK_IDLE;
}

/*
 * After the route of `port` moved to the cache at `via`, which holds every
 * request it takes: waits until the peer at `port` holds nothing from
 * before the switch, so that no load of the cache can read data older
 * than a write still under way there (served on another worker, a read
 * may pass a write). Nothing new reaches it now but what the cache sends,
 * and the cache sends nothing while it holds (but write-back of dirty
 * data it had): idle in two looks in a row, DRAIN_LOOK_MS apart.
 */
#define DRAIN_TIMEOUT_S 30
#define DRAIN_LOOK_MS 5
static int wait_drained(struct xseg *seg, uint32_t port, uint32_t via, const char *what)
{
	uint64_t deadline = xseg_now_ns() + DRAIN_TIMEOUT_S * 1000000000ull;
	uint64_t busy = 0;
	for (unsigned idle = 0; idle < 2;) {
		const char *why = "";
		switch (look_at(seg, port, deadline, &busy, &why)) {
		case LOOK_IDLE:
			idle++;
			break;
		case LOOK_BUSY:
			idle = 0;
			break;
		case LOOK_NO_STATS:
			/* Every peer of the runtime answers "stats"; one that does
			 * not shows nothing of what it holds: a second is long for
			 * what it took before the switch to be answered. */
			sleep_ms(1000);
			return 0;
		case LOOK_ERROR:
			fprintf(stderr, "xseg: %s: port %u did not answer 'stats' (%s); port %u holds "
				"port %u's requests until its plug times out: run xseg plug again, or "
				"xseg unplug --via %u\n", what, port, why, via, port, via);
			return 1;
		}
		if (idle < 2 && xseg_now_ns() > deadline) {
			fprintf(stderr, "xseg: %s: port %u still holds %" PRIu64 " requests %d s after "
				"its route moved to port %u; port %u holds port %u's requests until its "
				"plug times out: run xseg plug again, or xseg unplug --via %u\n", what,
				port, busy, DRAIN_TIMEOUT_S, via, via, port, via);
			return 1;
		}
		sleep_ms(DRAIN_LOOK_MS);
	}
	return 0;
}

/* "plugged": the cache lets what it held go on. A peer that took "plug"
 * without holding (none of this project's) may not know the command. */
static int end_hold(struct xseg *seg, uint32_t port, uint32_t via, const char *what)
{
	const char *why = "";
	int rc = control_call(seg, via, "plugged", NULL, 0, 60, &why);
	if (rc == 0 || rc == EINVAL || rc == EOPNOTSUPP)
		return 0;
	if (rc != ESHUTDOWN && rc != ENOLINK)
		fprintf(stderr, "xseg: %s: port %u did not take 'plugged': %s; it holds port %u's "
			"requests until its plug times out: run xseg plug again\n", what, via, why,
			port);
	return rc;
}

/* The cache began its stop after it took the plug: its own unroute may
 * have run before the route moved, so the route goes back (unless
 * another plug moved it since). */
static int stopped_during_plug(struct xseg *seg, uint32_t port, uint32_t via, uint32_t there,
			       const char *what)
{
	bool back = xseg_replace_next_hop(seg, port, via, there) == 0;
	fprintf(stderr, "xseg: %s: port %u began to stop during the plug; port %u %s\n", what,
		via, port, back ? "routes as before again" : "was routed elsewhere meanwhile");
	return 1;
}

/* The port plugged in front of left its blocker's chain before the route
 * moved (an unplug of it at once): the cache is in no path, so the route
 * to it goes back and the plug fails. */
static int left_path_during_plug(struct xseg *seg, uint32_t port, uint32_t via, uint32_t there,
				 const char *what)
{
	bool back = xseg_replace_next_hop(seg, port, via, there) == 0;
	fprintf(stderr, "xseg: %s: port %u left the path of port %u's blocker during the plug "
		"(unplugged meanwhile?): not plugged; port %u %s\n", what, port, via, port,
		back ? "routes as before again" : "was routed elsewhere meanwhile");
	return 1;
}

uint32_t front_in_use(struct xseg *seg, uint32_t port)
{
	/* The whole chain in front of the port counts: past a dead clean
	 * hop a live cache is still in the path (routing skips the dead
	 * one). Bounded: a chain is at most XSEG_MAX_PATH long. */
	uint32_t busy = XSEG_NO_PORT;
	for (uint32_t cur = xseg_get_next_hop(seg, port), steps = 0;
	     cur != XSEG_NO_PORT && steps < XSEG_MAX_PATH; cur = xseg_get_next_hop(seg, cur), steps++) {
		struct xseg_port_info ti;
		if (xseg_port_info(seg, cur, &ti) == 0 &&
		    ((ti.owner && ti.owner_alive) || ti.dirty_bytes))
			busy = cur;
	}
	return busy;
}

uint64_t hop_dirty_bytes(struct xseg *seg, uint32_t hop)
{
	struct xseg_port_info pi;
	if (xseg_port_info(seg, hop, &pi) < 0)
		return 0;
	if (!pi.owner || !pi.owner_alive)
		return pi.dirty_bytes;
	/* the mark may be a bare "some" (1): the cache's own figure is exact */
	char *reply = malloc(STATS_REPLY_MAX);
	const char *why = "";
	struct stats_doc d;
	const char *bad;
	bool got = reply && control_call(seg, hop, "stats", reply, STATS_REPLY_MAX, 2, &why) == 0 &&
		   stats_doc_parse(reply, &d, &bad) == 0;
	free(reply);
	if (!got)
		return pi.dirty_bytes;
	double bytes = stats_doc_num(&d, "dirty_bytes", -1);
	stats_doc_free(&d);
	return bytes >= 0 && bytes > (double)pi.dirty_bytes ? (uint64_t)bytes : pi.dirty_bytes;
}

double port_stat_num(struct xseg *seg, uint32_t port, const char *field, unsigned timeout_s)
{
	char *reply = malloc(STATS_REPLY_MAX);
	const char *why = "", *bad;
	struct stats_doc d;
	bool got = reply && control_call(seg, port, "stats", reply, STATS_REPLY_MAX, timeout_s,
					 &why) == 0 && stats_doc_parse(reply, &d, &bad) == 0;
	free(reply);
	if (!got)
		return -1;
	double v = stats_doc_num(&d, field, -1);
	stats_doc_free(&d);
	return v;
}

int plug_in(struct xseg *seg, uint32_t port, uint32_t via, const char *what)
{
	struct xseg_port_info pi;
	if (xseg_port_info(seg, via, &pi) < 0 || !pi.owner || !pi.owner_alive) {
		fprintf(stderr, "xseg: %s: nothing is serving port %u; start the peer first\n",
			what, via);
		return 1;
	}
	/* Plugged already: a route over it would take the cache there out of
	 * the path, and its dirty bytes with it (reads then served the
	 * blocker's older data). The same cache again is fine. */
	uint32_t there = xseg_get_next_hop(seg, port);
	uint32_t busy = there == via ? XSEG_NO_PORT : front_in_use(seg, port);
	if (busy != XSEG_NO_PORT) {
		fprintf(stderr, "xseg: %s: port %u is plugged via port %u already; plug port "
			"%u in front of it (--port %u --via %u), or unplug --via %u first\n",
			what, port, busy, via, busy, via, busy);
		return 1;
	}
	/* Tell the peer it is going into a path (cached returns to the policy
	 * it was started with); a peer without control commands is fine. */
	char reply[64], cmd[32];
	const char *why = "";
	snprintf(cmd, sizeof(cmd), "plug %u", port);
	int rc = control_call(seg, via, cmd, reply, sizeof(reply), 60, &why);
	if (rc == EXDEV) {
		fprintf(stderr, "xseg: %s: port %u refused: it writes to another blocker port "
			"than %u (nor one %u is in front of); requests for port %u would be "
			"served there (its log names the port)\n", what, via, port, port, port);
		return 1;
	}
	if (rc == ESHUTDOWN) {
		fprintf(stderr, "xseg: %s: port %u is stopping: not plugged; port %u routes as "
			"before\n", what, via, port);
		return 1;
	}
	if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL) {
		fprintf(stderr, "xseg: %s: port %u did not take the plug command: %s\n", what, via,
			why);
		return 1;
	}
	/* Taken: a cache now holds every request it gets until "plugged". */
	bool holds = rc == 0;
	/* Only over the hop checked above: a plug of another cache that
	 * came in meanwhile is not overwritten (it would leave the path). */
	if (xseg_replace_next_hop(seg, port, there, via) < 0) {
		fprintf(stderr, "xseg: %s: %s\n", what, xseg_last_error());
		if (holds)   /* no route moved: nothing to wait for */
			end_hold(seg, port, via, what);
		return 1;
	}
	if (!holds)
		return 0;   /* it caches nothing: what port's peer still holds is no matter */
	if (wait_drained(seg, port, via, what) != 0)
		return 1;
	rc = end_hold(seg, port, via, what);
	if (rc == ESHUTDOWN)
		return stopped_during_plug(seg, port, via, there, what);
	if (rc == ENOLINK)
		return left_path_during_plug(seg, port, via, there, what);
	return rc ? 1 : 0;
}

bool gone_dirty(struct xseg *seg, uint32_t port, const char *what)
{
	struct xseg_port_info pi;
	if (port == XSEG_NO_PORT || xseg_port_info(seg, port, &pi) < 0 || !pi.dirty_bytes ||
	    (pi.owner && pi.owner_alive))
		return false;
	fprintf(stderr, "xseg: %s: the cache at port %u is gone holding %" PRIu64 " dirty bytes; "
		"restart it on its persist file, or give them up with xseg unplug --force "
		"--via %u\n", what, port, pi.dirty_bytes, port);
	return true;
}

void clear_routes_to(struct xseg *seg, uint32_t via)
{
	/* Spliced out, not cut: a hop in front of `via` (a cache holding
	 * dirty data) stays in the path of the ports behind it. As one
	 * change: an unplug of that hop at once must not see its own splice
	 * undone by ours (a route left to a cache said to be unplugged). */
	xseg_splice_out(seg, via);
}
