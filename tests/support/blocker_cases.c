/*
 * The bad names of the blocker contract, for the tests (blocker_cases.h).
 */
#include "blocker_cases.h"

#include <errno.h>
#include <string.h>

#include "xseg/xseg.h"

const struct blocker_bad_name blocker_bad_names[] = {
	{ "", 0, EINVAL, "empty" },
	{ "a\0b", 3, EINVAL, "a NUL inside" },
	{ "obj\0", 4, EINVAL, "a trailing NUL" },
	{ "dir/obj", 0, EINVAL, "a '/'" },
	{ "/abs", 0, EINVAL, "a leading '/'" },
	{ "obj/", 0, EINVAL, "a trailing '/'" },
	{ ".", 0, EINVAL, "\".\"" },
	{ "..", 0, EINVAL, "\"..\"" },
	{ "../escape", 0, EINVAL, "a way out" },
	{ ".hidden", 0, EINVAL, "a leading '.'" },
};
const size_t blocker_bad_names_count = sizeof(blocker_bad_names) / sizeof(blocker_bad_names[0]);

size_t blocker_copy_payload(void *buf, size_t buflen, const char *src, uint32_t src_len)
{
	struct xseg_request_copy *cp = buf;
	size_t len = offsetof(struct xseg_request_copy, src) + src_len;
	if (buflen < len || src_len > XSEG_MAX_TARGETLEN)
		return 0;
	memset(buf, 0, len);
	cp->src_len = src_len;
	memcpy(cp->src, src, src_len);
	return len;
}
