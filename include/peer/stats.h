/*
 * Counting requests a peer serves that do not come through its port.
 *
 * The runtime counts every request its workers accept and answer by
 * itself (requests and bytes by op, errors, in flight, latency from the
 * accept to the answer) and answers the X_CONTROL command "stats" with
 * those figures (docs/interfaces.md). A peer that also serves requests of
 * another kind (nbdd's NBD commands from its sockets) counts each with a
 * begin on any thread and an end on any thread; the figures join the
 * runtime's. Cheap: per-thread counters, no lock, no shared atomic.
 */
#ifndef PEER_STATS_H
#define PEER_STATS_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A request begins: counted in flight; returns its start (a time in
 * ticks of the runtime's own: only for peer_stats_end). */
uint64_t peer_stats_begin(void);
/* It ended: `op` an enum xseg_op (X_READ, X_WRITE, or any other), `bytes`
 * moved when served, `err` 0 or the errno it failed with. */
void peer_stats_end(uint32_t op, uint64_t bytes, int err, uint64_t begin_ns);

#ifdef __cplusplus
}
#endif
#endif /* PEER_STATS_H */
