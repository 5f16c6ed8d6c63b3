/*
 * A round of "stats": the command sent to one port or to every port a
 * peer serves at once, the answers read back (statsjson.c). The peer
 * runtime answers "stats" for every peer, naming itself and its port.
 */
#ifndef XSEG_TOOL_ROUND_H
#define XSEG_TOOL_ROUND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xseg/xseg.h"
#include "statsjson.h"

/* One port asked, and what it answered. */
struct port_answer {
	uint32_t asked;         /* the port the command was sent to */
	uint32_t next_hop;      /* its route then (XSEG_NO_PORT: none) */
	int rc;                 /* 0: answered (doc filled) */
	const char *why;        /* otherwise */
	char *text;             /* the answer as sent */
	struct stats_doc doc;
	bool duplicate;         /* the same peer and port answered an earlier one */
};

struct stats_round {
	struct port_answer *a;
	size_t n;
	uint64_t at_ns;         /* when it was taken (xseg_now_ns) */
};

/* Asks `port`, or with all every port a peer serves (one per process;
 * clients such as bench-xseg and xseg itself left out). 0, or -1 after
 * one line on stderr. */
int stats_collect(struct xseg *seg, bool all, uint32_t port, struct stats_round *r);
void stats_round_free(struct stats_round *r);

#endif
