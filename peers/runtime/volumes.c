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

/* A line of the file that is not one: FILE, its number and why. */
static int line_error(const char *opt, const char *path, unsigned lineno, const char *why)
{
	char where[96];
	snprintf(where, sizeof(where), "line %u %s", lineno, why);
	return peer_arg_error(opt, path, where);
}

#define LINE_MAX_BYTES 1024   /* 'NAME SIZE': a name is at most 238 bytes */

/* One line into line[LINE_MAX_BYTES + 1], its newline dropped: 1, 0 at
 * the end, or -1 with why (a NUL byte: /dev/zero gave empty lines
 * forever; a line too long to be one). Bounded, whatever the file. */
static int read_line(FILE *f, char *line, const char **why)
{
	size_t n = 0;
	int c;
	while ((c = getc(f)) != EOF && c != '\n') {
		if (c == '\0') {
			*why = "holds a NUL byte: not a text file";
			return -1;
		}
		if (n == LINE_MAX_BYTES) {
			*why = "is over 1024 bytes: not 'NAME SIZE'";
			return -1;
		}
		line[n++] = (char)c;
	}
	line[n] = '\0';
	return c == EOF && n == 0 ? 0 : 1;
}

int peer_volumes_file(const char *opt, const char *path, peer_volume_fn add, void *ctx)
{
	char line[LINE_MAX_BYTES + 1], name[512], size[128], extra[2];
	const char *why = NULL;
	unsigned lineno = 0;
	int rc = 0, got;
	FILE *f = fopen(path, "r");

	if (!f)
		return peer_arg_error(opt, path, strerror(errno));
	errno = 0;
	while (!rc && (got = read_line(f, line, &why)) != 0) {
		lineno++;
		if (got < 0) {
			rc = line_error(opt, path, lineno, why);
			break;
		}
		char *s = line + strspn(line, " \t\r\n");
		if (*s == '#' || *s == '\0')
			continue;
		if (sscanf(s, "%511s %127s %1s", name, size, extra) != 2) {
			rc = line_error(opt, path, lineno, "is not 'NAME SIZE'");
			break;
		}
		rc = check_and_add(opt, name, size, add, ctx);
	}
	/* a read that failed (a directory: EISDIR) is not the file's end */
	if (!rc && ferror(f))
		rc = peer_arg_error(opt, path, strerror(errno ? errno : EIO));
	fclose(f);
	return rc;
}
