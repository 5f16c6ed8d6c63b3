/* Plugging a peer into a path and clearing routes to it; see plug.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "control.h"
#include "plug.h"

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
	/* The whole chain in front of the port counts: past a dead clean
	 * hop a live cache is still in the path (routing skips the dead
	 * one), and a route over the dead hop would cut it out too. */
	uint32_t busy = XSEG_NO_PORT;
	for (uint32_t cur = there, steps = 0; there != via && cur != XSEG_NO_PORT &&
	     steps < XSEG_MAX_PATH; cur = xseg_get_next_hop(seg, cur), steps++) {
		struct xseg_port_info ti;
		if (xseg_port_info(seg, cur, &ti) == 0 &&
		    ((ti.owner && ti.owner_alive) || ti.dirty_bytes))
			busy = cur;   /* the front-most one is where to plug */
	}
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
	if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL) {
		fprintf(stderr, "xseg: %s: port %u did not take the plug command: %s\n", what, via,
			why);
		return 1;
	}
	/* Only over the hop checked above: a plug of another cache that
	 * came in meanwhile is not overwritten (it would leave the path). */
	if (xseg_replace_next_hop(seg, port, there, via) < 0) {
		fprintf(stderr, "xseg: %s: %s\n", what, xseg_last_error());
		return 1;
	}
	return 0;
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
	struct xseg_segment_info si;
	xseg_segment_info(seg, &si);
	/* Spliced out, not cut: a hop in front of `via` (a cache holding
	 * dirty data) stays in the path of the ports behind it. */
	uint32_t front = xseg_get_next_hop(seg, via);
	for (uint32_t p = 0; p < si.nr_ports; p++)
		if (xseg_get_next_hop(seg, p) == via)   /* not a route set since */
			xseg_replace_next_hop(seg, p, via, front);
	if (front != XSEG_NO_PORT)
		xseg_replace_next_hop(seg, via, front, XSEG_NO_PORT);
}
