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

#endif
