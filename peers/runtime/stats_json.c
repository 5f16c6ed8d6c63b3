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

static double us(uint64_t ns)
{
	return (double)ns / 1e3;
}

/* Who answers: so that a plugged port's figures are not taken for its own. */
static void put_who(struct out *o, struct peer *p, uint32_t addressed)
{
	put(o, "{\"peer\":\"%s\",\"pid\":%d,\"segment\":\"%s\",\"port\":%u,\"port_last\":%u,"
	    "\"addressed_port\":%u,\"threads\":%u,\"uptime_s\":%.1f", p->ops->name, (int)getpid(),
	    p->cfg.segment, p->cfg.port_first, p->cfg.port_last, addressed, p->cfg.threads,
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
	    ",\"sent\":%" PRIu64 ",\"sent_failed\":%" PRIu64,
	    reqs, s->requests[PEER_STATS_READ], s->requests[PEER_STATS_WRITE],
	    s->requests[PEER_STATS_OTHER], s->bytes[PEER_STATS_READ], s->bytes[PEER_STATS_WRITE],
	    errs, s->errors[PEER_STATS_READ], s->errors[PEER_STATS_WRITE],
	    s->errors[PEER_STATS_OTHER], s->begun > s->done + 1 ? s->begun - s->done - 1 : 0,
	    s->sent, s->sent_failed);
}

/* Percentiles, and the buckets themselves ([low ns, width ns, count],
 * the empty left out) so that a reader can take the difference of two
 * answers: latency over an interval (xseg stats --watch). */
static void put_latency(struct out *o, const struct peer_stats_sum *s)
{
	uint64_t reqs = s->requests[0] + s->requests[1] + s->requests[2];
	put(o, ",\"lat_us_avg\":%.1f,\"lat_us_p50\":%.1f,\"lat_us_p99\":%.1f"
	    ",\"lat_us_p999\":%.1f,\"lat_us_max\":%.1f,\"lat_sum_us\":%.1f,\"lat_buckets\":[",
	    reqs ? us(s->lat_sum_ns) / (double)reqs : 0.0, us(peer_stats_percentile(s, 50)),
	    us(peer_stats_percentile(s, 99)), us(peer_stats_percentile(s, 99.9)),
	    us(s->lat_max_ns), us(s->lat_sum_ns));
	bool first = true;
	for (unsigned i = 0; i < PEER_STATS_BUCKETS; i++) {
		if (!s->hist[i])
			continue;
		uint64_t lo, width;
		peer_stats_bucket_range(i, &lo, &width);
		put(o, "%s[%" PRIu64 ",%" PRIu64 ",%" PRIu64 "]", first ? "" : ",", lo, width,
		    s->hist[i]);
		first = false;
	}
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
	if (p->ops->stats) {
		int n = p->ops->stats(p, o.buf + o.len, o.cap - o.len - 2);
		if (n > 0 && (size_t)n < o.cap - o.len - 2)
			o.len += (size_t)n;
		else
			o.buf[o.len] = '\0';   /* it did not fit: the runtime's part only */
	}
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
