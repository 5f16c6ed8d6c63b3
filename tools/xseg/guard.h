/*
 * A cache's persist file that holds dirty data guards the port the cache
 * will be plugged in front of, before the cache serves: `xseg up` does it
 * for a path file's peers (up.c), `xseg guard` for the per-peer systemd
 * units (xseg-cached@.service's ExecStartPre).
 */
#ifndef XSEG_TOOL_GUARD_H
#define XSEG_TOOL_GUARD_H

#include <stdint.h>

#include "xseg/xseg.h"

/* The dirty bytes `CACHED --persist-inspect FILE --json` says FILE holds
 * (cached the program at path `cached`); 0 when it is not a persist file
 * (yet) or cannot be read. */
uint64_t guard_persisted_dirty(const char *cached, const char *file);

/*
 * Port C marked as a cache gone dirty would leave it (dirty bytes, the
 * segment's fail-closed mark) and port B routed to it: submits to B fail
 * with EIO until a cache on C serves, recovers the data and takes the
 * mark over. -1 with xseg_last_error() set.
 */
int guard_port(struct xseg *seg, uint32_t b, uint32_t c, uint64_t dirty);

/* xseg guard --segment S --port B --via C --persist FILE: guards B when
 * FILE holds dirty data; 0 (also when it holds none), 1 refused. */
int guard_command(const char *segment, uint32_t b, uint32_t c, const char *file);

#endif
