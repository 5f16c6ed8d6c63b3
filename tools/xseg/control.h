/*
 * Sending a peer a control command (X_CONTROL) from the xseg tool and
 * waiting for its answer: stats, unplug, policy changes.
 */
#ifndef XSEG_TOOL_CONTROL_H
#define XSEG_TOOL_CONTROL_H

#include <stddef.h>
#include <stdint.h>

#include "xseg/xseg.h"

/*
 * Binds a free port for the call, sends `command` to `port`, waits up to
 * timeout_s seconds for the reply and copies its data (NUL-terminated) into
 * reply. Returns 0 when the peer served it, the peer's errno when it failed
 * it, -ETIMEDOUT, or another negative errno (message in xseg_last_error()
 * or *why).
 */
int control_call(struct xseg *seg, uint32_t port, const char *command,
		 char *reply, size_t replylen, unsigned timeout_s, const char **why);

/* One peer's answer to control_call_all. */
struct control_answer {
	int rc;             /* 0 served, the peer's errno, -ETIMEDOUT, or -errno */
	char *reply;        /* served: its text (malloc'd, NUL-terminated) */
	const char *why;    /* otherwise: why not */
};

/*
 * `command` to each of ports[0..n) at once, from one spare port, waiting
 * up to timeout_ms in all (a port that never answers, a client's, costs
 * no more than that). out[i] for ports[i]; free each reply. 0, or a
 * negative errno (*why) when nothing could be sent.
 */
int control_call_all(struct xseg *seg, const uint32_t *ports, size_t n, const char *command,
		     size_t replylen, unsigned timeout_ms, struct control_answer *out,
		     const char **why);

#endif
