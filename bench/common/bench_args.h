/*
 * Option helpers shared by the bench programs: parse one option's value or
 * exit 2 with one line on stderr that names the option and the value.
 */
#ifndef BENCH_ARGS_H
#define BENCH_ARGS_H

#include <stdint.h>

/* The program's name in error lines ("ipc-bench"); set it first in main. */
extern const char *bench_prog;

/* "PROG: OPT: 'VAL' WHY" on stderr, exit status 2. */
_Noreturn void bench_bad_arg(const char *opt, const char *val, const char *why);
/* "PROG: MESSAGE" on stderr, exit status 2. */
_Noreturn void bench_usage_error(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

/* An integer in [min, max]. */
uint64_t bench_arg_uint(const char *opt, const char *val, uint64_t min, uint64_t max);
/* A size with an optional K, M or G suffix, above zero. */
uint64_t bench_arg_size(const char *opt, const char *val);
/* Seconds, a decimal above zero and at most a day ("2", "0.5"). */
double bench_arg_seconds(const char *opt, const char *val);

#endif
