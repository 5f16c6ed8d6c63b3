/* Reading a "stats" answer back; see statsjson.h. */
#include <stdlib.h>
#include <string.h>

#include "statsjson.h"

struct parser {
	const char *p;
	const char *why;
};

static void ws(struct parser *ps)
{
	while (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\t' || *ps->p == '\r')
		ps->p++;
}

/* A JSON string at ps->p, unescaped (\uXXXX below 0x80 only, others '?'). */
static char *string(struct parser *ps)
{
	if (*ps->p != '"') {
		ps->why = "a string was expected";
		return NULL;
	}
	const char *s = ++ps->p;
	size_t n = 0;
	char *out = malloc(strlen(s) + 1);
	if (!out) {
		ps->why = "out of memory";
		return NULL;
	}
	for (; *s && *s != '"'; s++) {
		if (*s != '\\') {
			out[n++] = *s;
			continue;
		}
		s++;
		if (!*s)
			break;
		if (*s == 'u' && strlen(s) >= 5) {
			unsigned long c = strtoul((char[5]){ s[1], s[2], s[3], s[4], 0 }, NULL, 16);
			out[n++] = c < 0x80 && c ? (char)c : '?';
			s += 4;
		} else {
			out[n++] = *s == 'n' ? '\n' : *s == 't' ? '\t' : *s;
		}
	}
	if (*s != '"') {
		free(out);
		ps->why = "a string does not end";
		return NULL;
	}
	out[n] = '\0';
	ps->p = s + 1;
	return out;
}

/* Skips an array or object (unknown ones), ps->p at its '[' or '{'. */
static int skip(struct parser *ps)
{
	int depth = 0;
	do {
		ws(ps);
		if (*ps->p == '"') {
			char *s = string(ps);
			if (!s)
				return -1;
			free(s);
			continue;
		}
		if (!*ps->p) {
			ps->why = "the text ends inside a value";
			return -1;
		}
		if (*ps->p == '[' || *ps->p == '{')
			depth++;
		else if (*ps->p == ']' || *ps->p == '}')
			depth--;
		ps->p++;
	} while (depth > 0);
	return 0;
}

static int buckets(struct parser *ps, struct stats_doc *d)
{
	ps->p++;   /* [ */
	for (;;) {
		ws(ps);
		if (*ps->p == ']') {
			ps->p++;
			return 0;
		}
		if (*ps->p == ',') {
			ps->p++;
			continue;
		}
		struct stats_bucket b;
		char *end;
		if (*ps->p != '[')
			goto bad;
		b.lo = strtoull(ps->p + 1, &end, 10);
		if (*end != ',')
			goto bad;
		b.width = strtoull(end + 1, &end, 10);
		if (*end != ',')
			goto bad;
		b.count = strtoull(end + 1, &end, 10);
		if (*end != ']')
			goto bad;
		ps->p = end + 1;
		struct stats_bucket *nb = realloc(d->buckets, (d->nr_buckets + 1) * sizeof(*nb));
		if (!nb) {
			ps->why = "out of memory";
			return -1;
		}
		d->buckets = nb;
		d->buckets[d->nr_buckets++] = b;
	}
bad:
	ps->why = "lat_buckets is not a list of [low,width,count]";
	return -1;
}

/* A scalar value: number, true, false, null; its text kept. */
static int scalar(struct parser *ps, struct stats_field *f)
{
	size_t n = strcspn(ps->p, ",}] \n\t");
	if (!n) {
		ps->why = "a value is missing";
		return -1;
	}
	f->str = strndup(ps->p, n);
	if (!f->str) {
		ps->why = "out of memory";
		return -1;
	}
	char *end;
	f->num = strtod(f->str, &end);
	f->is_num = !*end;
	if (!f->is_num && strcmp(f->str, "true") && strcmp(f->str, "false") &&
	    strcmp(f->str, "null")) {
		ps->why = "a value is not a number, string or boolean";
		return -1;
	}
	if (!strcmp(f->str, "true"))
		f->num = 1;
	ps->p += n;
	return 0;
}

/* {"NAME": number, ...} into d->volumes, ps->p at its '{'. */
static int volumes(struct parser *ps, struct stats_doc *d)
{
	ps->p++;   /* { */
	for (;;) {
		ws(ps);
		if (*ps->p == '}') {
			ps->p++;
			return 0;
		}
		if (*ps->p == ',') {
			ps->p++;
			continue;
		}
		struct stats_volume v = { .name = string(ps) };
		if (!v.name)
			return -1;
		ws(ps);
		char *end;
		if (*ps->p == ':')
			ps->p++;
		v.bytes = strtod(ps->p, &end);
		struct stats_volume *nv = end == ps->p ? NULL :
			realloc(d->volumes, (d->nr_volumes + 1) * sizeof(*nv));
		if (!nv) {
			free(v.name);
			ps->why = end == ps->p ? "a volume's bytes are not a number" : "out of memory";
			return -1;
		}
		ps->p = end;
		d->volumes = nv;
		d->volumes[d->nr_volumes++] = v;
	}
}

static int field(struct parser *ps, struct stats_doc *d)
{
	struct stats_field f = { 0 };
	if (!(f.key = string(ps)))
		return -1;
	ws(ps);
	if (*ps->p != ':') {
		free(f.key);
		ps->why = "a ':' was expected";
		return -1;
	}
	ps->p++;
	ws(ps);
	int rc;
	if (*ps->p == '[' && !strcmp(f.key, "lat_buckets")) {
		free(f.key);
		return buckets(ps, d);
	}
	if (*ps->p == '{' && !strcmp(f.key, "dirty_by_volume")) {
		free(f.key);
		return volumes(ps, d);
	}
	if (*ps->p == '[' || *ps->p == '{') {
		free(f.key);
		return skip(ps);
	}
	if (*ps->p == '"') {
		f.str = string(ps);
		f.is_str = true;
		rc = f.str ? 0 : -1;
	} else {
		rc = scalar(ps, &f);
	}
	struct stats_field *nf = rc ? NULL : realloc(d->fields, (d->nr_fields + 1) * sizeof(*nf));
	if (!nf) {
		free(f.key);
		free(f.str);
		if (!rc)
			ps->why = "out of memory";
		return -1;
	}
	d->fields = nf;
	d->fields[d->nr_fields++] = f;
	return 0;
}

int stats_doc_parse(const char *text, struct stats_doc *d, const char **why)
{
	struct parser ps = { .p = text, .why = NULL };
	memset(d, 0, sizeof(*d));
	ws(&ps);
	if (*ps.p != '{') {
		*why = "not a JSON object";
		return -1;
	}
	ps.p++;
	for (;;) {
		ws(&ps);
		if (*ps.p == '}')
			return 0;
		if (*ps.p == ',') {
			ps.p++;
			continue;
		}
		if (field(&ps, d) < 0) {
			*why = ps.why ? ps.why : "malformed";
			stats_doc_free(d);
			return -1;
		}
	}
}

void stats_doc_free(struct stats_doc *d)
{
	for (size_t i = 0; i < d->nr_fields; i++) {
		free(d->fields[i].key);
		free(d->fields[i].str);
	}
	free(d->fields);
	free(d->buckets);
	for (size_t i = 0; i < d->nr_volumes; i++)
		free(d->volumes[i].name);
	free(d->volumes);
	memset(d, 0, sizeof(*d));
}

const struct stats_field *stats_doc_get(const struct stats_doc *d, const char *key)
{
	for (size_t i = 0; i < d->nr_fields; i++)
		if (!strcmp(d->fields[i].key, key))
			return &d->fields[i];
	return NULL;
}

double stats_doc_num(const struct stats_doc *d, const char *key, double dflt)
{
	const struct stats_field *f = stats_doc_get(d, key);
	return f && !f->is_str ? f->num : dflt;
}

const char *stats_doc_str(const struct stats_doc *d, const char *key, const char *dflt)
{
	const struct stats_field *f = stats_doc_get(d, key);
	return f ? f->str : dflt;
}

/* Count of the bucket at `lo` in `d` (0 when absent). */
static uint64_t count_at(const struct stats_doc *d, uint64_t lo)
{
	for (size_t i = 0; d && i < d->nr_buckets; i++)
		if (d->buckets[i].lo == lo)
			return d->buckets[i].count;
	return 0;
}

double stats_doc_percentile(const struct stats_doc *now, const struct stats_doc *before,
			    double pct)
{
	uint64_t total = 0, seen = 0;
	for (size_t i = 0; i < now->nr_buckets; i++) {
		uint64_t was = count_at(before, now->buckets[i].lo);
		total += now->buckets[i].count > was ? now->buckets[i].count - was : 0;
	}
	if (!total)
		return -1;
	double rank = (double)total * pct / 100.0;
	/* buckets come lowest first */
	for (size_t i = 0; i < now->nr_buckets; i++) {
		const struct stats_bucket *b = &now->buckets[i];
		uint64_t was = count_at(before, b->lo);
		seen += b->count > was ? b->count - was : 0;
		if ((double)seen >= rank && seen)
			return (double)b->lo + (double)b->width / 2;
	}
	return (double)now->buckets[now->nr_buckets - 1].lo;
}
