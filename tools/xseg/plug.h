/*
 * Putting a peer in front of a port and taking routes to it away: what
 * `xseg plug`, `xseg unplug`, `xseg route --clear`, `xseg up` and
 * `xseg down` share.
 */
#ifndef XSEG_TOOL_PLUG_H
#define XSEG_TOOL_PLUG_H

#include <stdbool.h>
#include <stdint.h>

#include "xseg/xseg.h"

/*
 * Puts the peer serving `via` in front of `port`: sends it the control
 * command "plug" (a peer without control commands is fine), then routes
 * `port` to `via`. Returns 0, or 1 with the reason on stderr as
 * "xseg: WHAT: ...".
 */
int plug_in(struct xseg *seg, uint32_t port, uint32_t via, const char *what);

/*
 * The front-most hop in the chain in front of `port` (its next hop, that
 * one's, ...) that a live process serves or whose port is marked dirty: a
 * peer that still sends `port`'s requests on to it, or a gone cache's
 * data. XSEG_NO_PORT when none.
 */
uint32_t front_in_use(struct xseg *seg, uint32_t port);

/* The dirty bytes the cache at `hop` holds: its "stats" figure when it
 * answers within 2 s, else its port's dirty mark (maybe only "some": 1). */
uint64_t hop_dirty_bytes(struct xseg *seg, uint32_t hop);

/* The number `field` of the "stats" answer of the peer at `port` (within
 * timeout_s), or -1: no answer, or no such figure. */
double port_stat_num(struct xseg *seg, uint32_t port, const char *field, unsigned timeout_s);
/*
 * A cache at `port` that is gone but holds dirty data (xseg.h: fail
 * closed): taking it out of the path would serve older data. Says so and
 * what to do ("xseg: WHAT: ..."); true if that is the case.
 */
bool gone_dirty(struct xseg *seg, uint32_t port, const char *what);

/* Takes `via` out of every chain: a port routed to it is routed to the hop
 * in front of it (its next hop) instead, or to none, and its own route is
 * cleared. */
void clear_routes_to(struct xseg *seg, uint32_t via);

#endif
