/*
 * The answer to the X_CONTROL command "stats": the runtime's figures for
 * the process (counters.h, summed now) as one JSON object, then whatever
 * the peer adds (peer_ops.stats: cached's cache figures). Names are a
 * promise (docs/interfaces.md): extend, never rename.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "counters.h"
#include "runtime.h"
#include "stats_json.h"

/* Bytes the JSON may take: the fixed fields, the buckets, the peer's own. */
#define JSON_MAX (32u * 1024)

struct out {
	char *buf;
	size_t len, cap;
};

__attribute__((format(printf, 2, 3)))
static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
	va_end(ap);
	if (n > 0)
		o->len = o->len + (size_t)n < o->cap ? o->len + (size_t)n : o->cap - 1;
}

static double us(double ns)
{
	return ns / 1e3;
}

/* Who answers: so that a plugged port's figures are not taken for its own. */
static void put_who(struct out *o, struct peer *p, uint32_t addressed)
{
	put(o, "{\"peer\":\"%s\",\"pid\":%d,\"segment\":\"%s\",\"port\":%u,\"port_last\":%u,"
	    "\"addressed_port\":%u,\"threads\":%u,\"watchers\":%u,\"uptime_s\":%.1f",
	    p->ops->name, (int)getpid(), p->cfg.segment, p->cfg.port_first, p->cfg.port_last,
	    addressed, p->cfg.threads, p->max_watchers,
	    (double)(xseg_now_ns() - p->start_ns) / 1e9);
}

/* In flight: not counting the "stats" request being answered. */
static void put_counts(struct out *o, const struct peer_stats_sum *s)
{
	uint64_t reqs = s->requests[0] + s->requests[1] + s->requests[2];
	uint64_t errs = s->errors[0] + s->errors[1] + s->errors[2];
	put(o, ",\"requests\":%" PRIu64 ",\"requests_read\":%" PRIu64
	    ",\"requests_write\":%" PRIu64 ",\"requests_other\":%" PRIu64
	    ",\"bytes_read\":%" PRIu64 ",\"bytes_written\":%" PRIu64
	    ",\"errors\":%" PRIu64 ",\"errors_read\":%" PRIu64 ",\"errors_write\":%" PRIu64
	    ",\"errors_other\":%" PRIu64 ",\"in_flight\":%" PRIu64
	    ",\"sent\":%" PRIu64 ",\"sent_failed\":%" PRIu64 ",\"cpu_yields\":%" PRIu64
	    ",\"bench_calls\":%" PRIu64,
	    reqs, s->requests[PEER_STATS_READ], s->requests[PEER_STATS_WRITE],
	    s->requests[PEER_STATS_OTHER], s->bytes[PEER_STATS_READ], s->bytes[PEER_STATS_WRITE],
	    errs, s->errors[PEER_STATS_READ], s->errors[PEER_STATS_WRITE],
	    s->errors[PEER_STATS_OTHER], s->begun > s->done + 1 ? s->begun - s->done - 1 : 0,
	    s->sent, s->sent_failed, s->cpu_yields, s->bench_calls);
}

/* The non-empty buckets in ns, lowest first. Ticks may be shorter than a
 * ns: buckets that round to the same low ns are one. */
static void put_buckets(struct out *o, const struct peer_stats_sum *s)
{
	uint64_t lo_ns = 0, end_ns = 0, count = 0;
	bool first = true;
	for (unsigned i = 0; i <= PEER_STATS_BUCKETS; i++) {
		uint64_t lo = 0, width = 0, l = 0, e = 0;
		if (i < PEER_STATS_BUCKETS) {
			if (!s->hist[i])
				continue;
			peer_stats_bucket_range(i, &lo, &width);
			l = (uint64_t)((double)lo * s->ns_per_tick);
			e = (uint64_t)((double)(lo + width) * s->ns_per_tick);
			if (count && l <= lo_ns) {   /* the same ns as the one before */
				count += s->hist[i];
				end_ns = e > end_ns ? e : end_ns;
				continue;
			}
		}
		if (count) {
			put(o, "%s[%" PRIu64 ",%" PRIu64 ",%" PRIu64 "]", first ? "" : ",", lo_ns,
			    end_ns > lo_ns ? end_ns - lo_ns : 1, count);
			first = false;
		}
		if (i < PEER_STATS_BUCKETS) {
			lo_ns = l;
			end_ns = e;
			count = s->hist[i];
		}
	}
}

/* Percentiles in µs to the ns (a bare hop's are under 1 µs, and with one
 * decimal its p50 could read 0.0), and the buckets themselves ([low ns, width ns, count],
 * the empty left out) so that a reader can take the difference of two
 * answers: latency over an interval (xseg stats --watch). */
static void put_latency(struct out *o, const struct peer_stats_sum *s)
{
	uint64_t reqs = s->requests[0] + s->requests[1] + s->requests[2];
	double sum_ns = (double)s->lat_sum * s->ns_per_tick;
	put(o, ",\"lat_us_avg\":%.3f,\"lat_us_p50\":%.3f,\"lat_us_p99\":%.3f"
	    ",\"lat_us_p999\":%.3f,\"lat_us_max\":%.3f,\"lat_sum_us\":%.3f,\"lat_buckets\":[",
	    reqs ? us(sum_ns) / (double)reqs : 0.0, us(peer_stats_percentile(s, 50)),
	    us(peer_stats_percentile(s, 99)), us(peer_stats_percentile(s, 99.9)),
	    us((double)s->lat_max * s->ns_per_tick), us(sum_ns));
	put_buckets(o, s);
	put(o, "]");
}

char *peer_stats_json(struct peer *p, uint32_t addressed, size_t *len)
{
	struct out o = { .buf = malloc(JSON_MAX), .cap = JSON_MAX };
	struct peer_stats_sum *s = malloc(sizeof(*s));
	if (!o.buf || !s) {
		free(o.buf);
		free(s);
		return NULL;
	}
	o.buf[0] = '\0';
	peer_stats_read(s);
	put_who(&o, p, addressed);
	put_counts(&o, s);
	put_latency(&o, s);
	free(s);
	size_t room = o.cap - o.len;   /* put() leaves at least the NUL's byte */
	if (p->ops->stats && room > 2) {
		int n = p->ops->stats(p, o.buf + o.len, room - 1);
		if (n > 0 && (size_t)n < room - 1)
			o.len += (size_t)n;
		else
			o.buf[o.len] = '\0';   /* it did not fit: the runtime's part only */
	}
	if (o.len + 2 > o.cap)
		o.len = o.cap - 2;   /* cut (cannot happen: 496 buckets fit) */
	put(&o, "}");
	*len = o.len;
	return o.buf;
}

bool peer_stats_command(const struct xseg_request *req, const char *data)
{
	/* "stats", maybe with a newline or a NUL after it */
	uint64_t n = req->datalen < req->size ? req->datalen : req->size;
	if (!data || n < 5 || memcmp(data, "stats", 5))
		return false;
	return n == 5 || data[5] == '\0' || data[5] == '\n';
}
