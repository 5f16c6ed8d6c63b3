/*
 * Operation names and the number parsing every program shares.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <strings.h>

#include "xseg_internal.h"

static const char *const op_names[X_OP_MAX] = {
	[X_PING] = "PING", [X_READ] = "READ", [X_WRITE] = "WRITE",
	[X_FLUSH] = "FLUSH", [X_DELETE] = "DELETE", [X_INFO] = "INFO",
	[X_COPY] = "COPY", [X_CONTROL] = "CONTROL",
};

const char *xseg_op_name(uint32_t op)
{
	return op < X_OP_MAX && op_names[op] ? op_names[op] : "?";
}

int xseg_op_from_name(const char *name)
{
	if (!name)
		return -1;
	for (int op = 0; op < X_OP_MAX; op++)
		if (op_names[op] && strcasecmp(name, op_names[op]) == 0)
			return op;
	return -1;
}

int xseg_parse_uint(const char *s, uint64_t max, uint64_t *out)
{
	char *end;
	if (!s || !*s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno == ERANGE || v > max)
		return -ERANGE;
	if (*end)
		return -EINVAL;
	*out = v;
	return 0;
}

int xseg_parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned shift = 0;

	if (!s || !*s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno == ERANGE)
		return -ERANGE;
	switch (toupper((unsigned char)*end)) {
	case '\0': case 'B': break;
	case 'K': shift = 10; end++; break;
	case 'M': shift = 20; end++; break;
	case 'G': shift = 30; end++; break;
	case 'T': shift = 40; end++; break;
	default: return -EINVAL;
	}
	if (shift && (*end == 'i' || *end == 'I'))    /* "4KiB" */
		end++;
	if (*end == 'b' || *end == 'B')    /* "512B", "4KB" */
		end++;
	if (*end)
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = v << shift;
	return 0;
}
