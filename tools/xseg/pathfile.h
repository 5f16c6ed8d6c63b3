/*
 * A path file (`xseg up FILE`): one segment line, then one line per peer
 * in start order.
 *
 *   # comment (from '#' to the end of a line)
 *   segment NAME [ports=N] [requests=N] [heap=SIZE] [mode=OCTAL]
 *   peer PROGRAM port=N|A-B [plug=B] [key=value | key]...
 *
 * `peer NAME key=value...` runs `NAME --key value ...` (a key without '='
 * is a bare `--key`; a key that abbreviates one xseg reads or sets is
 * refused: the peer's getopt_long would take it whole); `plug=B` is
 * xseg's own: once the peer serves, it is plugged in front of port B,
 * which an earlier peer serves. A port a peer sends to
 * (PATH_PEER_SENDS_TO: blocker-port= ...) may not be one a later line
 * serves (down stops in reverse order). Values are one word each (no
 * blanks, no '#').
 */
#ifndef XSEG_TOOL_PATHFILE_H
#define XSEG_TOOL_PATHFILE_H

#include <limits.h>
#include <stdint.h>

#include "xseg/xseg.h"

#define PATH_FILE_MAX_PEERS 64
#define PATH_FILE_MAX_WORDS 64

/* The keys that name a port the peer sends its requests to (its blocker,
 * a mirror, the port it forwards to), in path_peer.sends_to's order. */
#define PATH_PEER_SENDS_TO { "blocker-port", "mirror-port", "forward", "target-port" }
#define PATH_PEER_NR_SENDS_TO 4

struct path_peer {
	unsigned line;                 /* in the file, for messages */
	const char *program;           /* PROGRAM as written */
	char exe[PATH_MAX];            /* where it was found */
	uint32_t port_first, port_last;
	uint32_t bound_last;           /* port_last, or with lanes=N the last lane */
	uint32_t plug;                 /* XSEG_NO_PORT: none */
	/* each PATH_PEER_SENDS_TO key's port (the last given), XSEG_NO_PORT
	 * when absent or not a number (the peer refuses that itself) */
	uint32_t sends_to[PATH_PEER_NR_SENDS_TO];
	unsigned argc;                 /* "--key", "value", ... in file order, */
	const char *argv[2 * PATH_FILE_MAX_WORDS];   /* port included, plug not */
};

struct path_file {
	const char *file;
	const char *segment;
	struct xseg_config cfg;        /* xseg create's defaults where not given */
	unsigned nr_peers;
	struct path_peer *peers;
	char *words;                   /* storage for every string above */
};

/*
 * Reads and checks `file`, and finds every peer's program: next to the
 * running xseg first, then on PATH. On a fault prints one line on stderr,
 * "xseg: FILE:LINE: ..." naming the value (or "xseg: FILE: ..." when it
 * cannot be read), and returns -1: a bad argument (exit 2).
 */
int path_file_read(const char *file, struct path_file *pf);
/* The value of a peer's key=value (its --KEY=VALUE), "" for the key
 * alone, NULL when absent; the last one, as getopt takes it. */
const char *path_peer_option(const struct path_peer *pp, const char *key);
void path_file_free(struct path_file *pf);

/* PROGRAM next to the running xseg, else on PATH, into out; false if neither. */
bool path_find_program(const char *program, char *out, size_t outlen);

#endif
