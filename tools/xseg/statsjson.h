/*
 * A peer's "stats" answer read back: one flat JSON object of numbers,
 * strings and booleans, plus "lat_buckets" ([low ns, width ns, count]...)
 * and cached's "dirty_by_volume" ({"VOLUME": bytes, ...}).
 * Just what the runtime and cached write (docs/interfaces.md); anything
 * else nested is skipped.
 */
#ifndef XSEG_TOOL_STATSJSON_H
#define XSEG_TOOL_STATSJSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct stats_field {
	char *key;
	char *str;        /* the value as written (a string: unquoted, unescaped) */
	double num;
	bool is_num;      /* a number (true/false count as 1/0, not as numbers) */
	bool is_str;
};

struct stats_bucket {
	uint64_t lo, width, count;
};

struct stats_volume {
	char *name;
	double bytes;
};

struct stats_doc {
	struct stats_field *fields;
	size_t nr_fields;
	struct stats_bucket *buckets;
	size_t nr_buckets;
	struct stats_volume *volumes;   /* dirty_by_volume */
	size_t nr_volumes;
};

/* 0, or -1 with *why set when `text` is not such an object. */
int stats_doc_parse(const char *text, struct stats_doc *d, const char **why);
void stats_doc_free(struct stats_doc *d);
const struct stats_field *stats_doc_get(const struct stats_doc *d, const char *key);
/* The number under `key`, or `dflt`. */
double stats_doc_num(const struct stats_doc *d, const char *key, double dflt);
/* The string under `key`, or `dflt`. */
const char *stats_doc_str(const struct stats_doc *d, const char *key, const char *dflt);
/* The latency (ns) below which pct percent of the requests counted in
 * `now` and not in `before` (NULL: none) fell: a bucket's middle; -1
 * when no request fell between them. */
double stats_doc_percentile(const struct stats_doc *now, const struct stats_doc *before,
			    double pct);

#endif
