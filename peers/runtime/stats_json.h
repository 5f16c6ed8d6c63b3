/* The "stats" control command's answer (stats_json.c); private to the runtime. */
#ifndef PEER_STATS_JSON_H
#define PEER_STATS_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xseg/xseg.h"

struct peer;

/* The figures as one JSON object, malloc'd, *len bytes without the NUL;
 * NULL without memory. `addressed`: the port the command was sent to. */
char *peer_stats_json(struct peer *p, uint32_t addressed, size_t *len);
/* Whether an X_CONTROL request's text (its data) is "stats". */
bool peer_stats_command(const struct xseg_request *req, const char *data);

#endif
