/*
 * Prometheus / OpenMetrics exposition text (format 0.0.4) of a round of
 * answers: `xseg_` names, a `port` and a `peer` label, HELP and TYPE
 * once per metric, counters ending in _total, one series per port
 * (duplicate answers left out).
 */
#ifndef XSEG_TOOL_PROMETHEUS_H
#define XSEG_TOOL_PROMETHEUS_H

#include <stdio.h>

struct stats_round;

void prometheus_write(FILE *out, const struct stats_round *r);

#endif
