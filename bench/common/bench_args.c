/* Option helpers for the bench programs; see bench_args.h. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "xseg/xseg.h"
#include "bench_args.h"

const char *bench_prog = "bench";

void bench_bad_arg(const char *opt, const char *val, const char *why)
{
	fprintf(stderr, "%s: %s: '%s' %s\n", bench_prog, opt, val, why);
	exit(2);
}

void bench_usage_error(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: ", bench_prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

uint64_t bench_arg_uint(const char *opt, const char *val, uint64_t min, uint64_t max)
{
	uint64_t v;
	int rc = xseg_parse_uint(val, UINT64_MAX, &v);
	if (rc == -EINVAL)
		bench_bad_arg(opt, val, "is not a number");
	if (rc < 0 || v < min || v > max) {
		char why[80];
		snprintf(why, sizeof(why), "is out of range %" PRIu64 "..%" PRIu64, min, max);
		bench_bad_arg(opt, val, why);
	}
	return v;
}

uint64_t bench_arg_size(const char *opt, const char *val)
{
	uint64_t v;
	if (xseg_parse_size(val, &v) < 0 || v == 0)
		bench_bad_arg(opt, val, "is not a size (e.g. 4096, 4K, 1M)");
	return v;
}

double bench_arg_seconds(const char *opt, const char *val)
{
	char *end;
	errno = 0;
	double v = strtod(val, &end);
	if (end == val || *end || errno || !isfinite(v) || v <= 0 || v > 86400)
		bench_bad_arg(opt, val, "is not a number of seconds (0 < S <= 86400)");
	return v;
}
