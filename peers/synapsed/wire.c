/* synapsed's frame header: encoding and checked decoding; see wire.h. */
#include <string.h>

#include "xseg/xseg.h"
#include "wire.h"

/* Offsets of the fields in the header. */
enum {
	OFF_MAGIC = 0, OFF_VERSION = 4, OFF_KIND = 6, OFF_RESULT = 7, OFF_OP = 8,
	OFF_FLAGS = 12, OFF_ID = 16, OFF_OFFSET = 24, OFF_SIZE = 32, OFF_SERVICED = 40,
	OFF_ERROR = 48, OFF_TARGET_LEN = 52, OFF_DATA_LEN = 56,
};

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
	return v;
}
static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
	return v;
}

void wire_encode_header(const struct wire_header *h, uint8_t out[WIRE_HEADER_LEN])
{
	memset(out, 0, WIRE_HEADER_LEN);
	put32(out + OFF_MAGIC, WIRE_MAGIC);
	put16(out + OFF_VERSION, WIRE_VERSION);
	out[OFF_KIND] = h->kind;
	out[OFF_RESULT] = h->result;
	put32(out + OFF_OP, h->op);
	put32(out + OFF_FLAGS, h->flags);
	put64(out + OFF_ID, h->id);
	put64(out + OFF_OFFSET, h->offset);
	put64(out + OFF_SIZE, h->size);
	put64(out + OFF_SERVICED, h->serviced);
	put32(out + OFF_ERROR, (uint32_t)h->error);
	put32(out + OFF_TARGET_LEN, h->target_len);
	put64(out + OFF_DATA_LEN, h->data_len);
}

int64_t wire_decode_header(const uint8_t *buf, size_t len, struct wire_header *h)
{
	if (len < WIRE_HEADER_LEN)
		return WIRE_NEED_MORE;
	if (get32(buf + OFF_MAGIC) != WIRE_MAGIC)
		return WIRE_BAD_MAGIC;
	if (get16(buf + OFF_VERSION) != WIRE_VERSION)
		return WIRE_BAD_VERSION;
	h->kind = buf[OFF_KIND];
	h->result = buf[OFF_RESULT];
	h->op = get32(buf + OFF_OP);
	h->flags = get32(buf + OFF_FLAGS);
	h->id = get64(buf + OFF_ID);
	h->offset = get64(buf + OFF_OFFSET);
	h->size = get64(buf + OFF_SIZE);
	h->serviced = get64(buf + OFF_SERVICED);
	h->error = (int32_t)get32(buf + OFF_ERROR);
	h->target_len = get32(buf + OFF_TARGET_LEN);
	h->data_len = get64(buf + OFF_DATA_LEN);

	if (h->kind != WIRE_REQUEST && h->kind != WIRE_REPLY && h->kind != WIRE_HELLO)
		return WIRE_BAD_KIND;
	if (h->kind == WIRE_HELLO)   /* all but the requester and the epoch: 0 */
		return h->result || h->op || h->flags || h->size || h->serviced || h->error ||
		       h->target_len || h->data_len ? WIRE_BAD_FIELD : (int64_t)WIRE_HEADER_LEN;
	if (h->op >= X_OP_MAX)
		return WIRE_BAD_OP;
	if (h->kind == WIRE_REQUEST ? h->result != XR_NONE
				    : h->result != XR_SERVED && h->result != XR_FAILED)
		return WIRE_BAD_RESULT;
	if (h->target_len > WIRE_MAX_TARGET || h->data_len > WIRE_MAX_DATA)
		return WIRE_BAD_LENGTH;
	if ((h->flags & ~XF_WIRE) || ((h->flags & XF_TAG_MASK) && !(h->flags & XF_MIRROR)) ||
	    h->error < 0 || h->error > WIRE_MAX_ERRNO ||
	    h->serviced > h->size || (h->kind == WIRE_REQUEST && h->error != 0))
		return WIRE_BAD_FIELD;
	return (int64_t)(WIRE_HEADER_LEN + h->target_len + h->data_len);
}

const char *wire_error_name(int64_t err)
{
	switch (err) {
	case WIRE_NEED_MORE: return "incomplete header";
	case WIRE_BAD_MAGIC: return "bad magic";
	case WIRE_BAD_VERSION: return "unknown protocol version";
	case WIRE_BAD_KIND: return "unknown frame kind";
	case WIRE_BAD_OP: return "unknown op";
	case WIRE_BAD_RESULT: return "result not allowed for this frame kind";
	case WIRE_BAD_LENGTH: return "target or data length over the limit";
	case WIRE_BAD_FIELD: return "field out of range";
	default: return err > 0 ? "ok" : "?";
	}
}
