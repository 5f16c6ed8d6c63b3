/* Control commands to peers; see control.h. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
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

/* The reply's text into reply (NUL-terminated, cut to replylen - 1). */
static void copy_reply(struct xseg *seg, struct xseg_request *back, char *reply, size_t replylen)
{
	/* a peer that overstates serviced must not make us read past its reply */
	uint64_t have = back->serviced < back->datalen ? back->serviced : back->datalen;
	size_t n = have < replylen ? (size_t)have : replylen - 1;
	memcpy(reply, xseg_get_data(seg, back), n);
	reply[n] = '\0';
}

/* A request holding `command`, with room for a 4K answer. */
static struct xseg_request *command_request(struct xseg *seg, uint32_t me, const char *command,
					    const char **why)
{
	struct xseg_request *req = xseg_get_request(seg, me);
	if (!req) {
		*why = xseg_last_error();
		return NULL;
	}
	size_t len = strlen(command);
	if (xseg_prep_target(seg, req, "", len + 1 > 4096 ? len + 1 : 4096) < 0) {
		*why = xseg_last_error();
		xseg_put_request(seg, req);
		return NULL;
	}
	memcpy(xseg_get_data(seg, req), command, len + 1);
	req->op = X_CONTROL;
	req->size = len + 1;
	return req;
}

int control_call(struct xseg *seg, uint32_t port, const char *command,
		 char *reply, size_t replylen, unsigned timeout_s, const char **why)
{
	int me = bind_spare_port(seg);
	if (me < 0) {
		*why = "no free port to send from";
		return me;
	}
	/* room for the answer too: stats come back as JSON in the data */
	struct xseg_request *req = command_request(seg, (uint32_t)me, command, why);
	int rc;
	if (!req) {
		xseg_leave_port(seg, (uint32_t)me);
		return -ENOBUFS;
	}
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
		if (replylen)
			copy_reply(seg, back, reply, replylen);
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

/* Takes what came back to `me`; false when nothing did. */
static bool take_replies(struct xseg *seg, uint32_t me, size_t n, struct control_answer *out,
			 size_t replylen, size_t *left)
{
	struct xseg_request *back[16];
	int got = xseg_receive(seg, me, back, 16);
	for (int k = 0; k < got; k++) {
		size_t i = (size_t)back[k]->priv;
		if (i < n && out[i].rc == -ETIMEDOUT) {
			out[i].rc = back[k]->result == XR_SERVED ? 0
				  : back[k]->error ? back[k]->error : EIO;
			if (!out[i].rc && (out[i].reply = malloc(replylen)))
				copy_reply(seg, back[k], out[i].reply, replylen);
			else if (!out[i].rc)
				out[i].rc = ENOMEM;
			(*left)--;
		}
		xseg_put_request(seg, back[k]);
	}
	return got > 0;
}

int control_call_all(struct xseg *seg, const uint32_t *ports, size_t n, const char *command,
		     size_t replylen, unsigned timeout_ms, struct control_answer *out,
		     const char **why)
{
	int me = bind_spare_port(seg);
	if (me < 0) {
		*why = "no free port to send from";
		return me;
	}
	size_t left = 0;
	for (size_t i = 0; i < n; i++) {
		out[i] = (struct control_answer){ .rc = -ETIMEDOUT, .why = "no answer in time" };
		struct xseg_request *req = command_request(seg, (uint32_t)me, command, &out[i].why);
		if (!req) {
			out[i].rc = -ENOBUFS;
			continue;
		}
		req->priv = i;   /* comes back with the reply */
		if (xseg_submit(seg, req, (uint32_t)me, ports[i]) < 0) {
			out[i].why = xseg_last_error();
			out[i].rc = -EHOSTUNREACH;
			xseg_put_request(seg, req);
			continue;
		}
		left++;
	}
	uint64_t deadline = xseg_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	while (left && xseg_now_ns() < deadline)
		if (!take_replies(seg, (uint32_t)me, n, out, replylen, &left))
			xseg_wait(seg, (uint32_t)me, 10000000ull);
	/* What did not come back stays with its peer; leaving the port lets
	 * a later binder settle it. */
	xseg_leave_port(seg, (uint32_t)me);
	return 0;
}
