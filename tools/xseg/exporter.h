/*
 * xseg exporter: serves the Prometheus text of every port's "stats"
 * (prometheus.c) over HTTP, GET /metrics, one connection at a time.
 */
#ifndef XSEG_TOOL_EXPORTER_H
#define XSEG_TOOL_EXPORTER_H

#include <stdbool.h>
#include <stdint.h>

#include "xseg/xseg.h"

/* Checks --listen ADDR:PORT (numeric); 0, or -1 with *why. */
int exporter_check_listen(const char *listen, const char **why);
/* Serves until SIGTERM or SIGINT (then returns 0); 1 when it cannot
 * listen (one line on stderr). `all` or just `port`, as xseg stats. */
int exporter_run(struct xseg *seg, const char *listen, bool all, uint32_t port);

#endif
