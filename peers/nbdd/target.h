/*
 * What nbdd asks its target port (vlmcd) at start: its volumes and sizes.
 */
#ifndef NBDD_TARGET_H
#define NBDD_TARGET_H

#include <stdint.h>

#include "peer/peer.h"
#include "peer/volumes.h"

/*
 * Sends `port` an INFO with no target from nbdd's own port and calls
 * add(ctx, opt, name, size) for each volume of the reply. Waits up to
 * timeout_s seconds for the port to be served and to answer (a warning
 * line says so once per reason). Only before the workers start (init).
 * 0, or -1 after one line saying why (add's own line when add refused).
 */
int target_volumes(struct peer *p, uint32_t port, unsigned timeout_s,
		   peer_volume_fn add, void *ctx);

#endif /* NBDD_TARGET_H */
