/*
 * xseg stats: peers' figures (round.c asks) shown for one port or every
 * bound one, as "name: value" lines, a table, JSON, rates every interval
 * (--watch), or Prometheus text (prometheus.c).
 */
#ifndef XSEG_TOOL_STATS_H
#define XSEG_TOOL_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xseg/xseg.h"

struct stats_opts {
	bool all;               /* no --port: every port */
	uint32_t port;
	bool json, prometheus;
	unsigned watch_s;       /* 0: once */
	uint64_t count;         /* --watch rounds, 0: until interrupted */
};
/* The command; returns the exit status. */
int stats_command(struct xseg *seg, const struct stats_opts *o);

#endif
