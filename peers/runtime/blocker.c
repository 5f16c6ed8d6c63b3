/*
 * The blocker contract (include/peer/blocker.h): name rules, printable
 * names, the COPY payload, the INFO reply.
 */
#include "peer/blocker.h"

#include <errno.h>
#include <string.h>

/* How much of a name a log line shows. */
#define SHOWN_BYTES 64

int blocker_check_name(const char *name, size_t len, size_t max_len, const char **why)
{
	if (!name || len == 0) {
		*why = "is empty";
		return EINVAL;
	}
	if (len > max_len || len > BLOCKER_NAME_MAX) {
		*why = "is too long";
		return ENAMETOOLONG;
	}
	if (memchr(name, '\0', len)) {
		*why = "contains a NUL byte";
		return EINVAL;
	}
	if (memchr(name, '/', len)) {
		*why = "contains '/'";
		return EINVAL;
	}
	if (name[0] == '.') {
		*why = "starts with '.' (\".\", \"..\" and hidden names are refused)";
		return EINVAL;
	}
	return 0;
}

char *blocker_printable(const char *name, size_t len, char *out, size_t outlen)
{
	size_t n = 0;
	if (!outlen)
		return out;
	/* room is kept for "..." and the NUL */
	for (size_t i = 0; name && i < len && i < SHOWN_BYTES && n + 4 < outlen; i++)
		out[n++] = (name[i] >= 0x20 && name[i] < 0x7f) ? name[i] : '?';
	if (name && len > SHOWN_BYTES && n + 4 < outlen) {
		memcpy(out + n, "...", 3);
		n += 3;
	}
	out[n] = '\0';
	return out;
}

int blocker_copy_source(const void *data, uint64_t datalen, size_t max_len,
			const char **src, uint32_t *src_len, const char **why)
{
	const struct xseg_request_copy *cp = data;
	const uint64_t header = offsetof(struct xseg_request_copy, src);

	*src = NULL;
	*src_len = 0;
	if (!data || datalen < header) {
		*why = "the payload is shorter than its header";
		return EINVAL;
	}
	*src_len = cp->src_len;
	if (cp->src_len > BLOCKER_NAME_MAX) {
		*why = "src_len is over the longest name";
		return EINVAL;
	}
	if (datalen < header + cp->src_len) {
		*why = "the payload is shorter than src_len says";
		return EINVAL;
	}
	*src = cp->src;
	return blocker_check_name(cp->src, cp->src_len, max_len, why);
}

int blocker_reply_info(struct xseg *seg, struct xseg_request *req, uint64_t size)
{
	const char *target = xseg_get_target(seg, req);
	uint32_t tl = target && req->targetlen <= XSEG_MAX_TARGETLEN ? req->targetlen : 0;
	char name[XSEG_MAX_TARGETLEN + 1];

	if (!target || req->datalen < sizeof(struct xseg_reply_info)) {
		if (tl)
			memcpy(name, target, tl);
		if (xseg_prep_request(seg, req, tl, sizeof(struct xseg_reply_info)) < 0)
			return ENOMEM;
		if (tl)
			memcpy(xseg_get_target(seg, req), name, tl);
	}
	struct xseg_reply_info *info = xseg_get_data(seg, req);
	info->size = size;
	req->serviced = sizeof(*info);
	return 0;
}
