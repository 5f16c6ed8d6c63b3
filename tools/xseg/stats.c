/* xseg stats; see stats.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "prometheus.h"
#include "round.h"
#include "stats.h"

/* Whose figures: the asked port may be plugged (routed to a cache), and
 * a cache passes "stats" on to the port behind it, so say who answered. */
static void say_whose(const struct port_answer *a)
{
	printf("answered_by: %s, port %s, pid %s", stats_doc_str(&a->doc, "peer", "?"),
	       stats_doc_str(&a->doc, "port", "?"), stats_doc_str(&a->doc, "pid", "?"));
	if (a->next_hop != XSEG_NO_PORT)
		printf(" (port %u is plugged via port %u)", a->asked, a->next_hop);
	putchar('\n');
}

/* One port: "name: value" lines (the latency buckets left out). */
static void print_lines(const struct port_answer *a)
{
	say_whose(a);
	for (size_t i = 0; i < a->doc.nr_fields; i++)
		printf("%s: %s\n", a->doc.fields[i].key, a->doc.fields[i].str);
}

static double num(const struct port_answer *a, const char *key)
{
	return stats_doc_num(&a->doc, key, 0);
}

/* Every port: one line each. */
static void print_table(const struct stats_round *r)
{
	printf("%-10s %-9s %8s %12s %12s %12s %8s %8s %10s %10s %10s\n", "port", "peer", "pid",
	       "requests", "read_MiB", "written_MiB", "errors", "inflight", "p50_us", "p99_us",
	       "p999_us");
	for (size_t i = 0; i < r->n; i++) {
		const struct port_answer *a = &r->a[i];
		char port[32];
		if (a->next_hop != XSEG_NO_PORT)
			snprintf(port, sizeof(port), "%u(via %u)", a->asked, a->next_hop);
		else
			snprintf(port, sizeof(port), "%u", a->asked);
		if (a->rc) {
			printf("%-10s no answer: %s\n", port, a->why);
			continue;
		}
		if (a->duplicate)
			continue;
		printf("%-10s %-9s %8.0f %12.0f %12.1f %12.1f %8.0f %8.0f %10.1f %10.1f %10.1f\n",
		       port, stats_doc_str(&a->doc, "peer", "?"), num(a, "pid"), num(a, "requests"),
		       num(a, "bytes_read") / 1048576.0, num(a, "bytes_written") / 1048576.0,
		       num(a, "errors"), num(a, "in_flight"), num(a, "lat_us_p50"),
		       num(a, "lat_us_p99"), num(a, "lat_us_p999"));
	}
}

/* Every port: a JSON list of the answers, each with "asked_port". */
static void print_json_list(const struct stats_round *r)
{
	printf("[");
	bool first = true;
	for (size_t i = 0; i < r->n; i++) {
		const struct port_answer *a = &r->a[i];
		if (a->rc || a->duplicate)
			continue;
		const char *body = strchr(a->text, '{');
		printf("%s{\"asked_port\":%u,%s", first ? "" : ",", a->asked, body ? body + 1 : "}");
		first = false;
	}
	printf("]\n");
}

/* The answer in `before` from the same peer and port as `a`. */
static const struct port_answer *same_in(const struct stats_round *before,
					 const struct port_answer *a)
{
	for (size_t i = 0; i < before->n; i++) {
		const struct port_answer *b = &before->a[i];
		if (!b->rc && !b->duplicate && num(b, "pid") == num(a, "pid") &&
		    num(b, "port") == num(a, "port"))
			return b;
	}
	return NULL;
}

/* --watch: rates between two rounds, one line per port. */
static void print_rates(const struct stats_round *before, const struct stats_round *now)
{
	double dt = (double)(now->at_ns - before->at_ns) / 1e9;
	char when[16];
	time_t t = time(NULL);
	strftime(when, sizeof(when), "%H:%M:%S", localtime(&t));
	printf("%-8s %-10s %-9s %10s %10s %10s %10s %9s %8s\n", when, "port", "peer", "iops",
	       "rd_MiB/s", "wr_MiB/s", "p99_us", "errors/s", "inflight");
	for (size_t i = 0; i < now->n; i++) {
		const struct port_answer *a = &now->a[i];
		if (a->rc) {
			printf("%-8s %-10u no answer: %s\n", "", a->asked, a->why);
			continue;
		}
		const struct port_answer *b = a->duplicate ? NULL : same_in(before, a);
		if (!b)
			continue;
		double p99 = stats_doc_percentile(&a->doc, &b->doc, 99);
		char port[32];
		snprintf(port, sizeof(port), "%s", stats_doc_str(&a->doc, "port", "?"));
		printf("%-8s %-10s %-9s %10.1f %10.2f %10.2f %10.1f %9.1f %8.0f\n", "", port,
		       stats_doc_str(&a->doc, "peer", "?"),
		       (num(a, "requests") - num(b, "requests")) / dt,
		       (num(a, "bytes_read") - num(b, "bytes_read")) / dt / 1048576.0,
		       (num(a, "bytes_written") - num(b, "bytes_written")) / dt / 1048576.0,
		       p99 < 0 ? 0.0 : p99 / 1e3, (num(a, "errors") - num(b, "errors")) / dt,
		       num(a, "in_flight"));
	}
	fflush(stdout);
}

static int watch(struct xseg *seg, const struct stats_opts *o)
{
	struct stats_round before, now;
	if (stats_collect(seg, o->all, o->port, &before) < 0)
		return 1;
	for (uint64_t round = 0; !o->count || round < o->count; round++) {
		struct timespec ts = { (time_t)o->watch_s, 0 };
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
		if (stats_collect(seg, o->all, o->port, &now) < 0) {
			stats_round_free(&before);
			return 1;
		}
		print_rates(&before, &now);
		stats_round_free(&before);
		before = now;
	}
	stats_round_free(&before);
	return 0;
}

int stats_command(struct xseg *seg, const struct stats_opts *o)
{
	if (o->watch_s)
		return watch(seg, o);
	struct stats_round r;
	if (stats_collect(seg, o->all, o->port, &r) < 0)
		return 1;
	int status = 0;
	if (o->prometheus) {
		prometheus_write(stdout, &r);
	} else if (!o->all) {
		const struct port_answer *a = &r.a[0];
		if (a->rc) {
			fprintf(stderr, "xseg: stats: port %u gave none: %s\n", a->asked, a->why);
			status = 1;
		} else if (o->json) {
			printf("%s\n", a->text);
		} else {
			print_lines(a);
		}
	} else if (o->json) {
		print_json_list(&r);
	} else {
		print_table(&r);
	}
	stats_round_free(&r);
	return status;
}
