/* Control commands to peers; see control.h. */
#include <errno.h>
#include <string.h>

#include "control.h"

/* The highest port nobody has bound: out of the way of configured peers. */
static int bind_spare_port(struct xseg *seg)
{
	struct xseg_segment_info si;
	if (xseg_segment_info(seg, &si) < 0)
		return -EINVAL;
	for (uint32_t p = si.nr_ports; p-- > 0;) {
		struct xseg_port_info pi;
		if (xseg_port_info(seg, p, &pi) == 0 && pi.owner == 0 &&
		    xseg_bind_port(seg, p) == 0)
			return (int)p;
	}
	return -EBUSY;
}

int control_call(struct xseg *seg, uint32_t port, const char *command,
		 char *reply, size_t replylen, unsigned timeout_s, const char **why)
{
	int me = bind_spare_port(seg);
	if (me < 0) {
		*why = "no free port to send from";
		return me;
	}
	struct xseg_request *req = xseg_get_request(seg, (uint32_t)me);
	int rc;
	if (!req) {
		*why = xseg_last_error();
		xseg_leave_port(seg, (uint32_t)me);
		return -ENOBUFS;
	}
	size_t len = strlen(command);
	/* room for the answer too: stats come back as JSON in the data */
	rc = xseg_prep_target(seg, req, "", len + 1 > 4096 ? len + 1 : 4096);
	if (rc < 0) {
		*why = xseg_last_error();
		goto out;
	}
	memcpy(xseg_get_data(seg, req), command, len + 1);
	req->op = X_CONTROL;
	req->size = len + 1;
	if ((rc = xseg_submit(seg, req, (uint32_t)me, port)) < 0) {
		*why = xseg_last_error();
		goto out;
	}
	uint64_t deadline = xseg_now_ns() + (uint64_t)timeout_s * 1000000000ull;
	struct xseg_request *back = NULL;
	while (xseg_receive(seg, (uint32_t)me, &back, 1) == 0) {
		if (xseg_now_ns() > deadline) {
			/* The request stays with the peer; leaving the port lets a
			 * later binder settle it. */
			*why = "no answer in time";
			xseg_leave_port(seg, (uint32_t)me);
			return -ETIMEDOUT;
		}
		xseg_wait(seg, (uint32_t)me, 100000000ull);
	}
	if (back->result == XR_SERVED) {
		/* a peer that overstates serviced must not make us read past its reply */
		uint64_t have = back->serviced < back->datalen ? back->serviced : back->datalen;
		size_t n = have < replylen ? (size_t)have : replylen - 1;
		if (replylen) {
			memcpy(reply, xseg_get_data(seg, back), n);
			reply[n] = '\0';
		}
		rc = 0;
	} else {
		*why = strerror(back->error);
		rc = back->error ? back->error : EIO;
	}
out:
	xseg_put_request(seg, req);
	xseg_leave_port(seg, (uint32_t)me);
	return rc;
}
