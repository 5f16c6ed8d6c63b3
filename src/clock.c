/* The monotonic clock libxseg measures with (timeouts, latencies). */
#include <time.h>

#include "xseg_internal.h"

uint64_t xseg_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
