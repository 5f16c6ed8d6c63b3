/*
 * synapsed's wire format: one frame per request or reply.
 *
 *   header (64 bytes, little-endian) | target (target_len) | data (data_len)
 *
 * The header carries a request id chosen by the sender (never a pointer),
 * and every field a request or reply needs, `size` included. The decoder is
 * a pure function over bytes: it checks magic, version, kind, op, result and
 * every length against the limits before anyone trusts them. See
 * docs/synapsed-protocol.md.
 */
#ifndef SYNAPSED_WIRE_H
#define SYNAPSED_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define WIRE_MAGIC        0x4e595358u   /* "XSYN" in memory order */
#define WIRE_VERSION      1u
#define WIRE_HEADER_LEN   64u
#define WIRE_MAX_TARGET   255u
#define WIRE_MAX_DATA     (64u << 20)   /* one frame's payload */
#define WIRE_MAX_ERRNO    4095

/* A hello is the first frame a requester sends on each connection: `id`
 * names the requester, `offset` is the connection's epoch (it grows with
 * each connection); every other field is 0. */
enum wire_kind { WIRE_REQUEST = 1, WIRE_REPLY = 2, WIRE_HELLO = 3 };

struct wire_header {
	uint8_t kind;         /* enum wire_kind */
	uint8_t result;       /* replies: XR_SERVED or XR_FAILED; requests: 0 */
	uint32_t op;
	uint32_t flags;
	uint64_t id;
	uint64_t offset;
	uint64_t size;
	uint64_t serviced;
	int32_t error;
	uint32_t target_len;
	uint64_t data_len;
};

/* Decoding outcomes other than success (a positive frame length). */
enum wire_error {
	WIRE_NEED_MORE = 0,       /* fewer than WIRE_HEADER_LEN bytes so far */
	WIRE_BAD_MAGIC = -1,
	WIRE_BAD_VERSION = -2,
	WIRE_BAD_KIND = -3,
	WIRE_BAD_OP = -4,
	WIRE_BAD_RESULT = -5,
	WIRE_BAD_LENGTH = -6,     /* target or data over the limits */
	WIRE_BAD_FIELD = -7,      /* flags, error or serviced out of range */
};

/* Writes h into out[WIRE_HEADER_LEN]. */
void wire_encode_header(const struct wire_header *h, uint8_t out[WIRE_HEADER_LEN]);

/*
 * Decodes and checks the header at the start of buf[0..len). Returns the
 * whole frame's length (header + target + data) on success, WIRE_NEED_MORE
 * when len < WIRE_HEADER_LEN, or a negative enum wire_error.
 */
int64_t wire_decode_header(const uint8_t *buf, size_t len, struct wire_header *h);

const char *wire_error_name(int64_t err);

#endif
