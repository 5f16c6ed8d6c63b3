/*
 * The thread's last error: every call that fails records why, naming the
 * failing value, for xseg_last_error(). At the bottom of libxseg: it calls
 * nothing of it.
 */
#include <stdarg.h>
#include <stdio.h>

#include "xseg_internal.h"

static _Thread_local char last_error[256];

const char *xseg_last_error(void)
{
	return last_error[0] ? last_error : "no error";
}

int xseg_fail(int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	return -err;
}
