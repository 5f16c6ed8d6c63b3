/*
 * libFuzzer target: synapsed's header decoder on arbitrary bytes. It must
 * never read past the input, and whatever it accepts must satisfy the
 * limits and survive a re-encode unchanged.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../peers/synapsed/wire.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct wire_header h;
	int64_t n = wire_decode_header(data, size, &h);
	if (n <= 0)
		return 0;
	if (h.target_len > WIRE_MAX_TARGET || h.data_len > WIRE_MAX_DATA ||
	    (uint64_t)n != WIRE_HEADER_LEN + h.target_len + h.data_len)
		abort();
	uint8_t again[WIRE_HEADER_LEN];
	wire_encode_header(&h, again);
	if (memcmp(again, data, WIRE_HEADER_LEN) != 0)
		abort();
	return 0;
}
