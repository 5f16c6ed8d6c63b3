/* Reading a path file; see pathfile.h. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pathfile.h"

#define MAX_FILE_SIZE (1u << 20)

/* "xseg: FILE:LINE: ..." on stderr; returns -1. */
static int fault(const struct path_file *pf, unsigned line, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "xseg: %s:%u: ", pf->file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return -1;
}

/* The whole file, NUL-terminated, at most MAX_FILE_SIZE bytes. */
static char *slurp(const char *file, size_t *len)
{
	FILE *f = fopen(file, "r");
	if (!f) {
		fprintf(stderr, "xseg: %s: %s\n", file, strerror(errno));
		return NULL;
	}
	char *buf = malloc(MAX_FILE_SIZE + 1);
	size_t n = buf ? fread(buf, 1, MAX_FILE_SIZE + 1, f) : 0;
	bool err = ferror(f);
	fclose(f);
	if (!buf || err || n > MAX_FILE_SIZE) {
		fprintf(stderr, "xseg: %s: %s\n", file,
			!buf ? "out of memory" : err ? "cannot be read" : "is larger than 1M");
		free(buf);
		return NULL;
	}
	buf[n] = '\0';
	*len = n;
	return buf;
}

static bool name_char(char c, bool first)
{
	return isalnum((unsigned char)c) || c == '_' || (!first && (c == '-' || c == '.' || c == '+'));
}

/* NAME: letters, digits, '_', and after the first also '-', '.', '+'. */
static bool plain_name(const char *s)
{
	if (!*s)
		return false;
	for (const char *p = s; *p; p++)
		if (!name_char(*p, p == s))
			return false;
	return true;
}

static int segment_line(struct path_file *pf, unsigned line, char **w, unsigned n)
{
	if (pf->segment)
		return fault(pf, line, "a second segment line (the first is '%s')", pf->segment);
	if (n < 2)
		return fault(pf, line, "segment: the name is missing (segment NAME [ports=N] ...)");
	const char *name = w[1];
	if (strchr(name, '=') || strlen(name) > XSEG_NAME_MAX || strchr(name, '/') ||
	    !plain_name(name))
		return fault(pf, line, "segment: '%s' is not a segment name", name);
	pf->segment = name;
	for (unsigned i = 2; i < n; i++) {
		char *eq = strchr(w[i], '=');
		if (!eq)
			return fault(pf, line, "segment: '%s' is not key=value", w[i]);
		*eq = '\0';
		const char *key = w[i], *val = eq + 1;
		uint64_t v;
		char *end;
		if (!strcmp(key, "ports")) {
			if (xseg_parse_uint(val, XSEG_MAX_PORTS, &v) < 0 || !v)
				return fault(pf, line, "segment: ports: '%s' is not a number in 1..%u",
					     val, XSEG_MAX_PORTS);
			pf->cfg.nr_ports = (uint32_t)v;
		} else if (!strcmp(key, "requests")) {
			if (xseg_parse_uint(val, XSEG_MAX_REQUESTS, &v) < 0 || !v)
				return fault(pf, line, "segment: requests: '%s' is not a number in 1..%u",
					     val, XSEG_MAX_REQUESTS);
			pf->cfg.nr_requests = (uint32_t)v;
		} else if (!strcmp(key, "heap")) {
			if (xseg_parse_size(val, &v) < 0 || !v)
				return fault(pf, line, "segment: heap: '%s' is not a size (e.g. 64M)", val);
			pf->cfg.heap_size = v;
		} else if (!strcmp(key, "mode")) {
			errno = 0;
			unsigned long m = strtoul(val, &end, 8);
			if (!*val || *end || errno || m > 0777)
				return fault(pf, line, "segment: mode: '%s' is not an octal mode like 0600",
					     val);
			if (!m)   /* 0 was taken for "not given" (0600) */
				return fault(pf, line, "segment: mode: '%s' lets nobody open the segment "
					     "(e.g. 0600)", val);
			pf->cfg.mode = (mode_t)m;
		} else {
			return fault(pf, line, "segment: unknown key '%s' (ports, requests, heap, mode)",
				     key);
		}
	}
	return 0;
}

/* N or A-B inside the segment's ports. */
static int parse_port(const struct path_file *pf, unsigned line, const char *val,
		      uint32_t *first, uint32_t *last)
{
	char a[16];
	const char *dash = strchr(val, '-');
	uint64_t x, y;
	uint32_t max = pf->cfg.nr_ports - 1;
	if (!dash) {
		if (xseg_parse_uint(val, max, &x) < 0)
			return fault(pf, line, "port: '%s' is not a port in 0..%u", val, max);
		*first = *last = (uint32_t)x;
		return 0;
	}
	size_t len = (size_t)(dash - val);
	if (len >= sizeof(a))
		return fault(pf, line, "port: '%s' is not a port or a range A-B", val);
	memcpy(a, val, len);
	a[len] = '\0';
	if (xseg_parse_uint(a, max, &x) < 0 || xseg_parse_uint(dash + 1, max, &y) < 0 || x > y)
		return fault(pf, line, "port: '%s' is not a port or a range A-B in 0..%u", val, max);
	*first = (uint32_t)x;
	*last = (uint32_t)y;
	return 0;
}

/* PROGRAM next to the running xseg, else on PATH; false if neither. */
bool path_find_program(const char *program, char *out, size_t outlen)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = '\0';
		char *slash = strrchr(self, '/');
		if (slash) {
			*slash = '\0';
			if ((size_t)snprintf(out, outlen, "%s/%s", self, program) < outlen &&
			    access(out, X_OK) == 0)
				return true;
		}
	}
	const char *path = getenv("PATH");
	while (path && *path) {
		const char *colon = strchr(path, ':');
		size_t len = colon ? (size_t)(colon - path) : strlen(path);
		if (len && (size_t)snprintf(out, outlen, "%.*s/%s", (int)len, path, program) < outlen &&
		    access(out, X_OK) == 0)
			return true;
		path = colon ? colon + 1 : NULL;
	}
	return false;
}

const char *path_peer_option(const struct path_peer *pp, const char *key)
{
	size_t len = strlen(key);
	const char *v = NULL;
	for (unsigned i = 0; i < pp->argc; i++)
		if (!strncmp(pp->argv[i], "--", 2) && !strncmp(pp->argv[i] + 2, key, len) &&
		    (pp->argv[i][2 + len] == '=' || !pp->argv[i][2 + len]))
			v = pp->argv[i][2 + len] ? pp->argv[i] + 3 + len : "";
	return v;   /* the last one, as getopt takes it */
}

/* A peer's persist=FILE, or NULL (none, or the key alone). */
static const char *persist_of(const struct path_peer *pp)
{
	const char *f = path_peer_option(pp, "persist");
	return f && *f ? f : NULL;
}

/* The same file: the same name, or (both there) the same inode. */
static bool same_file(const char *a, const char *b)
{
	struct stat x, y;
	if (!strcmp(a, b))
		return true;
	return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/*
 * The keys xseg reads or sets itself. The peer's getopt_long takes any
 * unambiguous prefix of an option (di=data is --dir=data), so a prefix of
 * one of these would pass every check made on the whole key.
 */
static const char *const own_keys[] = {
	"segment", "daemon", "pidfile", "port", "lanes", "plug", "dir", "persist",
	"persist-discard", "conf", "volumes-file", "blocker-port", "mirror-port",
	"forward", "target-port",
};
/* whole options of a peer that are prefixes of one of those */
static const char *const whole_keys[] = { "volume" };

/* The own key that `key`, a proper prefix of it, abbreviates, or NULL. */
static const char *abbreviates(const char *key)
{
	size_t len = strlen(key);
	const char *longer = NULL;
	for (size_t i = 0; i < sizeof(own_keys) / sizeof(own_keys[0]); i++) {
		if (!strcmp(key, own_keys[i]))
			return NULL;
		if (!strncmp(key, own_keys[i], len) && (!longer || strlen(own_keys[i]) < strlen(longer)))
			longer = own_keys[i];   /* the shortest, to name */
	}
	for (size_t i = 0; longer && i < sizeof(whole_keys) / sizeof(whole_keys[0]); i++)
		if (!strcmp(key, whole_keys[i]))
			return NULL;
	return longer;
}

static int peer_line(struct path_file *pf, unsigned line, char **w, unsigned n, char **arena)
{
	if (!pf->segment)
		return fault(pf, line, "a peer line before the segment line");
	if (n < 2)
		return fault(pf, line, "peer: the program is missing (peer PROGRAM port=N ...)");
	if (pf->nr_peers == PATH_FILE_MAX_PEERS)
		return fault(pf, line, "more than %u peers", PATH_FILE_MAX_PEERS);
	if (n - 2 > PATH_FILE_MAX_WORDS)
		return fault(pf, line, "more than %u options", PATH_FILE_MAX_WORDS);
	struct path_peer *pp = &pf->peers[pf->nr_peers];
	memset(pp, 0, sizeof(*pp));
	pp->line = line;
	pp->program = w[1];
	pp->plug = XSEG_NO_PORT;
	for (unsigned k = 0; k < PATH_PEER_NR_SENDS_TO; k++)
		pp->sends_to[k] = XSEG_NO_PORT;
	if (!plain_name(pp->program) || strchr(pp->program, '=') || strlen(pp->program) > 64)
		return fault(pf, line, "peer: '%s' is not a program name", pp->program);
	bool have_port = false;
	uint64_t lanes = 1;
	for (unsigned i = 2; i < n; i++) {
		char *word = w[i];
		char *eq = strchr(word, '=');
		size_t klen = eq ? (size_t)(eq - word) : strlen(word);
		if (word[0] == '-')
			return fault(pf, line, "'%s': write keys without dashes (dir=PATH, not --dir PATH)",
				     word);
		for (size_t k = 0; k < klen; k++)
			if (!name_char(word[k], k == 0))
				return fault(pf, line, "'%s' is not key=value or a key", word);
		if (!klen)
			return fault(pf, line, "'%s' has no key", word);
		if (eq && !eq[1])
			return fault(pf, line, "'%s': the value is missing", word);
		char key[64];
		snprintf(key, sizeof(key), "%.*s", (int)klen, word);
		const char *whole = abbreviates(key);
		if (whole)
			return fault(pf, line, "'%s': write the whole key (%s): the peer would take "
				     "'%s' for --%s, past xseg's checks of it", word, whole, key, whole);
		if (!strcmp(key, "segment") || !strcmp(key, "daemon") || !strcmp(key, "pidfile"))
			return fault(pf, line, "'%s': xseg up sets --segment, --daemon and --pidfile itself",
				     word);
		/* up, down and status may run from other directories (a systemd
		 * unit runs from /): a relative file would be another file, a
		 * persist file's dirty data left behind for an empty one */
		if ((!strcmp(key, "dir") || !strcmp(key, "persist") || !strcmp(key, "conf") ||
		     !strcmp(key, "volumes-file")) && eq && eq[1] != '/')
			return fault(pf, line, "'%s': a relative path; give it from / (xseg up and "
				     "down may run from other directories)", word);
		if (!strcmp(key, "port")) {
			if (have_port)
				return fault(pf, line, "a second port ('%s')", word);
			if (!eq)
				return fault(pf, line, "port needs a value (port=N)");
			if (parse_port(pf, line, eq + 1, &pp->port_first, &pp->port_last) < 0)
				return -1;
			have_port = true;
		}
		/* The runtime's --lanes binds the ports after port=N too: they
		 * are the peer's as much as N is (the last lanes= counts). */
		if (!strcmp(key, "lanes") && eq && xseg_parse_uint(eq + 1, XSEG_MAX_PORTS, &lanes) < 0)
			lanes = 1;   /* the peer itself refuses the value */
		static const char *const sends[] = PATH_PEER_SENDS_TO;
		for (unsigned k = 0; k < PATH_PEER_NR_SENDS_TO; k++) {
			uint64_t to;
			if (!strcmp(key, sends[k]) && eq)
				pp->sends_to[k] = xseg_parse_uint(eq + 1, XSEG_MAX_PORTS - 1, &to) < 0 ?
						  XSEG_NO_PORT : (uint32_t)to;
		}
		if (!strcmp(key, "plug")) {
			uint64_t b;
			if (pp->plug != XSEG_NO_PORT)
				return fault(pf, line, "a second plug ('%s')", word);
			if (!eq || xseg_parse_uint(eq + 1, pf->cfg.nr_ports - 1, &b) < 0)
				return fault(pf, line, "plug: '%s' is not a port in 0..%u",
					     eq ? eq + 1 : "", pf->cfg.nr_ports - 1);
			pp->plug = (uint32_t)b;
			continue;   /* xseg's own, not the peer's */
		}
		/* --key=value: the value stays bound to its key whatever it is */
		char *arg = *arena;
		*arena += sprintf(arg, "--%s", word) + 1;
		pp->argv[pp->argc++] = arg;
	}
	if (!have_port)
		return fault(pf, line, "peer %s: port=N is missing", pp->program);
	pp->bound_last = pp->port_last;
	if (lanes > 1 && pp->port_first == pp->port_last) {
		if (lanes > pf->cfg.nr_ports - pp->port_first)
			return fault(pf, line, "lanes=%" PRIu64 ": port %u's lanes end past port %u",
				     lanes, pp->port_first, pf->cfg.nr_ports - 1);
		pp->bound_last = pp->port_first + (uint32_t)lanes - 1;
	}
	for (unsigned i = 0; i < pf->nr_peers; i++) {
		const struct path_peer *o = &pf->peers[i];
		if (pp->port_first <= o->bound_last && o->port_first <= pp->bound_last)
			return fault(pf, line, "port %u is %s's already (line %u)",
				     pp->port_first > o->port_first ? pp->port_first : o->port_first,
				     o->program, o->line);
	}
	/* A peer sends to ports served by earlier lines only, as plug= does:
	 * down stops in reverse order, and stopping the port a cache writes
	 * back to before the cache would lose its dirty data. */
	static const char *const sends[] = PATH_PEER_SENDS_TO;
	for (unsigned i = 0; i < pf->nr_peers; i++) {
		const struct path_peer *o = &pf->peers[i];
		for (unsigned k = 0; k < PATH_PEER_NR_SENDS_TO; k++)
			if (o->sends_to[k] >= pp->port_first && o->sends_to[k] <= pp->bound_last)
				return fault(pf, o->line, "%s=%u: port %u is served by %s on a later "
					     "line (%u); list %s before this line", sends[k],
					     o->sends_to[k], o->sends_to[k], pp->program, line,
					     pp->program);
	}
	/* Two caches on one persist file would overwrite each other's data
	 * (the second's start is refused only once the first runs). */
	const char *persist = persist_of(pp);
	for (unsigned i = 0; persist && i < pf->nr_peers; i++) {
		const char *other = persist_of(&pf->peers[i]);
		if (other && same_file(persist, other))
			return fault(pf, line, "persist=%s: the persist file of %s on line %u already",
				     persist, pf->peers[i].program, pf->peers[i].line);
	}
	if (pp->plug != XSEG_NO_PORT) {
		bool earlier = false;
		for (unsigned i = 0; i < pf->nr_peers; i++)
			earlier |= pf->peers[i].port_first <= pp->plug && pp->plug <= pf->peers[i].port_last;
		if (!earlier)
			return fault(pf, line, "plug=%u: no peer on an earlier line serves port %u",
				     pp->plug, pp->plug);
	}
	if (!path_find_program(pp->program, pp->exe, sizeof(pp->exe)))
		return fault(pf, line, "peer: no program '%s' next to xseg or on PATH", pp->program);
	pf->nr_peers++;
	return 0;
}

int path_file_read(const char *file, struct path_file *pf)
{
	size_t len;
	memset(pf, 0, sizeof(*pf));
	pf->file = file;
	xseg_config_default(&pf->cfg);
	char *text = slurp(file, &len);
	if (!text)
		return -1;
	if (memchr(text, '\0', len)) {
		unsigned line = 1;
		for (const char *p = text; *p; p++)
			line += *p == '\n';
		free(text);
		return fault(pf, line, "a NUL byte: not a text file");
	}
	/* the text, then "--" + word for every word: at most 3 bytes more each */
	char *words = realloc(text, 4 * len + 16);
	pf->peers = calloc(PATH_FILE_MAX_PEERS, sizeof(*pf->peers));
	if (!words || !pf->peers) {
		free(words ? words : text);
		free(pf->peers);
		memset(pf, 0, sizeof(*pf));
		fprintf(stderr, "xseg: %s: out of memory\n", file);
		return -1;
	}
	pf->words = text = words;
	char *arena = text + len + 1;
	unsigned line = 0;
	char *next = text;
	while (next) {
		char *s = next;
		line++;
		next = strchr(s, '\n');
		if (next)
			*next++ = '\0';
		char *hash = strchr(s, '#');
		if (hash)
			*hash = '\0';
		char *w[PATH_FILE_MAX_WORDS + 3];
		unsigned n = 0;
		for (char *tok = strtok(s, " \t\r\v\f"); tok; tok = strtok(NULL, " \t\r\v\f")) {
			if (n == PATH_FILE_MAX_WORDS + 3) {
				fault(pf, line, "more than %u words", PATH_FILE_MAX_WORDS + 2);
				goto bad;
			}
			w[n++] = tok;
		}
		if (!n)
			continue;
		int rc;
		if (!strcmp(w[0], "segment"))
			rc = segment_line(pf, line, w, n);
		else if (!strcmp(w[0], "peer"))
			rc = peer_line(pf, line, w, n, &arena);
		else
			rc = fault(pf, line, "'%s' is not a segment or peer line", w[0]);
		if (rc < 0)
			goto bad;
	}
	if (!pf->segment) {
		fprintf(stderr, "xseg: %s: no segment line (segment NAME ...)\n", file);
		goto bad;
	}
	if (!pf->nr_peers) {
		fprintf(stderr, "xseg: %s: no peer lines (peer PROGRAM port=N ...)\n", file);
		goto bad;
	}
	return 0;
bad:
	path_file_free(pf);
	return -1;
}

void path_file_free(struct path_file *pf)
{
	free(pf->words);
	free(pf->peers);
	pf->words = NULL;
	pf->peers = NULL;
}
