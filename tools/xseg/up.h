/*
 * xseg up, down and status: a path file's segment and peers (pathfile.h)
 * started, stopped and looked at. Each peer runs as a daemon with its
 * pidfile PORT-PROGRAM.pid and its log PORT-PROGRAM.log (stdout and stderr,
 * appended) in a run directory: --run-dir, else /run/xseg/SEGMENT for root
 * and ${XDG_RUNTIME_DIR:-/tmp}/xseg-SEGMENT for others.
 */
#ifndef XSEG_TOOL_UP_H
#define XSEG_TOOL_UP_H

#include "pathfile.h"

/*
 * Creates the segment (refused if it exists), starts each peer with
 * --daemon (ready when that returns 0), plugs it where plug= says, in file
 * order. Returns 0 once all serve; on a failure, 1 with the peer's message
 * and the end of its log on stderr, everything started stopped again and
 * the segment removed. Waits at most timeout_s for each start.
 */
int path_up(const struct path_file *pf, const char *run_dir, unsigned timeout_s);

/*
 * SIGTERM to each peer in reverse order, waiting (at most timeout_s each)
 * for it to exit before the next (a cache writes back all it holds first);
 * then removes the segment. Returns 0 once nothing of the file runs, also
 * when nothing did; 1 when a peer did not stop, a cache left dirty data or
 * a peer's log says its stop failed (a daemon's exit status: the runtime's
 * "stopped, exit status N" or "stop: gave up"; the rest is left running
 * then), and 1 without stopping a peer that a
 * live peer or a dirty mark is in front of (plug.h, front_in_use), or
 * that a peer left running sends to (path_peer.sends_to, plug), nor those
 * before it. The segment stays while any port is served or marked
 * dirty.
 */
int path_down(const struct path_file *pf, const char *run_dir, unsigned timeout_s);

/* One line per peer: port, program, pid, serving or not. 0 if all serve. */
int path_status(const struct path_file *pf, const char *run_dir);

#endif
