/* Prometheus exposition text of a round of "stats" answers; see prometheus.h. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prometheus.h"
#include "round.h"

/* The runtime's figures, for every peer (docs/interfaces.md). */
struct series {
	const char *field;   /* in the answer */
	const char *label;   /* an extra label, e.g. op="read", or NULL */
	double scale;        /* 0: the value as written */
};
struct metric {
	const char *name, *type, *help;
	struct series s[4];
};

static const struct metric runtime_metrics[] = {
	{ "xseg_requests_total", "counter", "Requests the peer answered, by op.",
	  { { "requests_read", "op=\"read\"", 0 }, { "requests_write", "op=\"write\"", 0 },
	    { "requests_other", "op=\"other\"", 0 } } },
	{ "xseg_bytes_total", "counter", "Bytes moved by the reads and writes the peer served.",
	  { { "bytes_read", "op=\"read\"", 0 }, { "bytes_written", "op=\"write\"", 0 } } },
	{ "xseg_errors_total", "counter", "Requests the peer answered as failed, by op.",
	  { { "errors_read", "op=\"read\"", 0 }, { "errors_write", "op=\"write\"", 0 },
	    { "errors_other", "op=\"other\"", 0 } } },
	{ "xseg_in_flight", "gauge", "Requests the peer has taken and not yet answered.",
	  { { "in_flight", NULL, 0 } } },
	{ "xseg_sent_total", "counter", "Requests the peer sent on (to its blocker or target).",
	  { { "sent", NULL, 0 } } },
	{ "xseg_sent_failed_total", "counter", "Requests the peer sent on that came back failed.",
	  { { "sent_failed", NULL, 0 } } },
	{ "xseg_cpu_yields_total", "counter",
	  "Times a worker gave its shared CPU up after a round of work (--yield auto).",
	  { { "cpu_yields", NULL, 0 } } },
	{ "xseg_bench_calls_total", "counter",
	  "Times a busy worker called an idle one off the bench to help (--watchers).",
	  { { "bench_calls", NULL, 0 } } },
	{ "xseg_request_latency_seconds", "summary",
	  "From taking a request to answering it (quantiles since the peer started).",
	  { { "lat_us_p50", "quantile=\"0.5\"", 1e-6 }, { "lat_us_p99", "quantile=\"0.99\"", 1e-6 },
	    { "lat_us_p999", "quantile=\"0.999\"", 1e-6 } } },
	{ "xseg_request_latency_max_seconds", "gauge", "The longest request since the peer started.",
	  { { "lat_us_max", NULL, 1e-6 } } },
	{ "xseg_uptime_seconds", "gauge", "Seconds since the peer started.",
	  { { "uptime_s", NULL, 0 } } },
	{ "xseg_threads", "gauge", "The peer's worker threads.", { { "threads", NULL, 0 } } },
};
#define NR_RUNTIME (sizeof(runtime_metrics) / sizeof(runtime_metrics[0]))

/* Fields that are not figures, or that the table above shows. */
static bool runtime_field(const char *key)
{
	static const char *const names[] = {
		"peer", "pid", "segment", "port", "port_last", "addressed_port", "requests",
		"errors", "lat_us_avg", "lat_sum_us", "blocker_port",
	};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(key, names[i]))
			return true;
	for (size_t m = 0; m < NR_RUNTIME; m++)
		for (size_t i = 0; i < 4 && runtime_metrics[m].s[i].field; i++)
			if (!strcmp(key, runtime_metrics[m].s[i].field))
				return true;
	return false;
}

/* A peer's own figures that only grow (cached's): counters, the rest gauges. */
static bool counter_field(const char *key)
{
	static const char *const names[] = {
		"hits", "misses", "partial_hits", "parallel_hits", "read_bytes", "write_bytes",
		"blocker_read_bytes", "blocker_write_bytes", "evictions",
		"clean_released_bytes", "flushes", "flush_failures", "waits", "uncached",
		"lent", "raced_writes", "rereads", "failed", "persist_dropped", "persist_syncs",
	};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(key, names[i]))
			return true;
	return false;
}

/* A label value: backslash, quote and newline escaped. */
static void put_label_value(FILE *out, const char *v)
{
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			fprintf(out, "\\%c", *v);
		else if (*v == '\n')
			fputs("\\n", out);
		else
			fputc(*v, out);
	}
}

/* A metric name: anything but [a-zA-Z0-9_] becomes '_'. */
static void name_clean(char *s)
{
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '_'))
			*s = '_';
}

static void put_labels(FILE *out, const struct port_answer *a, const char *extra)
{
	fprintf(out, "{port=\"%s\",peer=\"", stats_doc_str(&a->doc, "port", "?"));
	put_label_value(out, stats_doc_str(&a->doc, "peer", "?"));
	fprintf(out, "\"%s%s}", extra ? "," : "", extra ? extra : "");
}

static void put_value(FILE *out, const struct stats_field *f, double scale)
{
	if (!f->is_num)
		fprintf(out, " %d\n", f->num != 0);   /* true, false */
	else if (scale)
		fprintf(out, " %.9g\n", f->num * scale);
	else
		fprintf(out, " %s\n", f->str);
}

static bool shown(const struct port_answer *a)
{
	return !a->rc && !a->duplicate;
}

static void put_runtime_metric(FILE *out, const struct stats_round *r, const struct metric *m)
{
	fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", m->name, m->help, m->name, m->type);
	for (size_t k = 0; k < r->n; k++) {
		const struct port_answer *a = &r->a[k];
		if (!shown(a))
			continue;
		for (size_t i = 0; i < 4 && m->s[i].field; i++) {
			const struct stats_field *f = stats_doc_get(&a->doc, m->s[i].field);
			if (!f || f->is_str)
				continue;
			fputs(m->name, out);
			put_labels(out, a, m->s[i].label);
			put_value(out, f, m->s[i].scale);
		}
		if (strcmp(m->type, "summary"))
			continue;
		const struct stats_field *sum = stats_doc_get(&a->doc, "lat_sum_us");
		const struct stats_field *cnt = stats_doc_get(&a->doc, "requests");
		if (sum && cnt) {
			fprintf(out, "%s_sum", m->name);
			put_labels(out, a, NULL);
			put_value(out, sum, 1e-6);
			fprintf(out, "%s_count", m->name);
			put_labels(out, a, NULL);
			put_value(out, cnt, 0);
		}
	}
}

/* xseg_PEER_FIELD for the figures a peer adds (cached's), first seen in
 * answer i: every answer of the same peer with that field. */
static void put_peer_metric(FILE *out, const struct stats_round *r, size_t i, const char *key)
{
	const char *peer = stats_doc_str(&r->a[i].doc, "peer", "peer");
	bool counter = counter_field(key);
	for (size_t k = 0; k < i; k++)   /* shown already with an earlier answer */
		if (shown(&r->a[k]) && !strcmp(stats_doc_str(&r->a[k].doc, "peer", ""), peer) &&
		    stats_doc_get(&r->a[k].doc, key))
			return;
	char full[256];
	snprintf(full, sizeof(full), "xseg_%s_%s%s", peer, key, counter ? "_total" : "");
	name_clean(full + 5);
	fprintf(out, "# HELP %s %s's %s (docs/interfaces.md, xseg stats).\n# TYPE %s %s\n", full,
		peer, key, full, counter ? "counter" : "gauge");
	for (size_t k = i; k < r->n; k++) {
		const struct port_answer *a = &r->a[k];
		const struct stats_field *f = shown(a) ? stats_doc_get(&a->doc, key) : NULL;
		if (!f || f->is_str || strcmp(stats_doc_str(&a->doc, "peer", ""), peer))
			continue;
		fputs(full, out);
		put_labels(out, a, NULL);
		put_value(out, f, 0);
	}
}

/* cached's dirty bytes by volume: one series per port and volume. */
static void put_volume_metric(FILE *out, const struct stats_round *r)
{
	bool any = false;
	for (size_t k = 0; k < r->n; k++) {
		const struct port_answer *a = &r->a[k];
		if (!shown(a))
			continue;
		for (size_t i = 0; i < a->doc.nr_volumes; i++) {
			if (!any)
				fputs("# HELP xseg_cached_volume_dirty_bytes Bytes a cache holds for a "
				      "volume and its blocker lacks.\n"
				      "# TYPE xseg_cached_volume_dirty_bytes gauge\n", out);
			any = true;
			fprintf(out, "xseg_cached_volume_dirty_bytes{port=\"%s\",peer=\"",
				stats_doc_str(&a->doc, "port", "?"));
			put_label_value(out, stats_doc_str(&a->doc, "peer", "?"));
			fputs("\",volume=\"", out);
			put_label_value(out, a->doc.volumes[i].name);
			fprintf(out, "\"} %.0f\n", a->doc.volumes[i].bytes);
		}
	}
}

void prometheus_write(FILE *out, const struct stats_round *r)
{
	fputs("# HELP xseg_up Whether the port answered \"stats\" (1) or not (0).\n"
	      "# TYPE xseg_up gauge\n", out);
	for (size_t k = 0; k < r->n; k++)
		if (!r->a[k].duplicate)
			fprintf(out, "xseg_up{port=\"%u\"} %d\n", r->a[k].asked, !r->a[k].rc);
	for (size_t m = 0; m < NR_RUNTIME; m++)
		put_runtime_metric(out, r, &runtime_metrics[m]);
	for (size_t i = 0; i < r->n; i++) {
		if (!shown(&r->a[i]))
			continue;
		for (size_t f = 0; f < r->a[i].doc.nr_fields; f++) {
			const struct stats_field *fd = &r->a[i].doc.fields[f];
			if (!fd->is_str && !runtime_field(fd->key))
				put_peer_metric(out, r, i, fd->key);
		}
	}
	put_volume_metric(out, r);
}
