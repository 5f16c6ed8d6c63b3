/*
 * Volume lists (include/peer/volumes.h): the syntax vlmcd and nbdd share,
 * so that one --volumes-file serves both.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "peer/peer.h"
#include "peer/volumes.h"

static int check_and_add(const char *opt, const char *name, const char *size,
			 peer_volume_fn add, void *ctx)
{
	uint64_t bytes;
	size_t len = strlen(name);

	if (!len || len > PEER_VOLUME_NAME_MAX || name[0] == '.' || strpbrk(name, "/ \t\n"))
		return peer_arg_error(opt, name, "is not a volume name (1..238 bytes, no '/', "
				      "no blanks, not starting with '.')");
	if (xseg_parse_size(size, &bytes) < 0 || !bytes)
		return peer_arg_error(opt, size, "is not a volume size (K, M, G suffixes)");
	return add(ctx, opt, name, bytes);
}

int peer_volume_arg(const char *opt, const char *arg, peer_volume_fn add, void *ctx)
{
	char name[512];
	const char *colon = strrchr(arg, ':');
	if (!colon || (size_t)(colon - arg) >= sizeof(name))
		return peer_arg_error(opt, arg, "is not NAME:SIZE");
	memcpy(name, arg, (size_t)(colon - arg));
	name[colon - arg] = '\0';
	return check_and_add(opt, name, colon + 1, add, ctx);
}

int peer_volumes_file(const char *opt, const char *path, peer_volume_fn add, void *ctx)
{
	char line[1024], name[512], size[128], extra[2];
	unsigned lineno = 0;
	int rc = 0;
	FILE *f = fopen(path, "r");

	if (!f)
		return peer_arg_error(opt, path, strerror(errno));
	while (!rc && fgets(line, sizeof(line), f)) {
		lineno++;
		char *s = line + strspn(line, " \t\r\n");
		if (*s == '#' || *s == '\0')
			continue;
		if (sscanf(s, "%511s %127s %1s", name, size, extra) != 2) {
			char where[64];
			snprintf(where, sizeof(where), "line %u is not 'NAME SIZE'", lineno);
			rc = peer_arg_error(opt, path, where);
			break;
		}
		rc = check_and_add(opt, name, size, add, ctx);
	}
	fclose(f);
	return rc;
}
