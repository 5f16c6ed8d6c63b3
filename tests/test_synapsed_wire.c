/*
 * synapsed's frame header: round trips, byte order on the wire, and every
 * kind of malformed header refused before its lengths are trusted.
 */
#include <check.h>

#include "support/xseg_test_util.h"
#include <string.h>

#include "xseg/xseg.h"
#include "../peers/synapsed/wire.c"

static struct wire_header sample(void)
{
	return (struct wire_header){
		.kind = WIRE_REPLY, .result = XR_SERVED, .op = X_READ, .flags = XF_FUA,
		.id = 0x0102030405060708ull, .offset = 4096, .size = 8192, .serviced = 8192,
		.error = 0, .target_len = 11, .data_len = 8192,
	};
}

START_TEST(round_trip)
{
	struct wire_header h = sample(), back;
	uint8_t buf[WIRE_HEADER_LEN];
	wire_encode_header(&h, buf);
	ck_assert_int_eq(wire_decode_header(buf, sizeof(buf), &back),
			 WIRE_HEADER_LEN + 11 + 8192);
	ck_assert_uint_eq(back.kind, h.kind); ck_assert_uint_eq(back.result, h.result);
	ck_assert_uint_eq(back.op, h.op); ck_assert_uint_eq(back.flags, h.flags);
	ck_assert_uint_eq(back.id, h.id); ck_assert_uint_eq(back.offset, h.offset);
	ck_assert_uint_eq(back.size, h.size); ck_assert_uint_eq(back.serviced, h.serviced);
	ck_assert_int_eq(back.error, h.error); ck_assert_uint_eq(back.target_len, h.target_len);
	ck_assert_uint_eq(back.data_len, h.data_len);
}
END_TEST

/* A mirror request's epoch (XF_TAG) crosses with it. */
START_TEST(mirror_tag_round_trip)
{
	struct wire_header h = sample(), back;
	h.flags = XF_MIRROR | 0xbeefu << XF_TAG_SHIFT;
	uint8_t buf[WIRE_HEADER_LEN];
	wire_encode_header(&h, buf);
	ck_assert_int_eq(wire_decode_header(buf, sizeof(buf), &back), WIRE_HEADER_LEN + 11 + 8192);
	ck_assert_uint_eq(XF_TAG(back.flags), 0xbeef);
	ck_assert_uint_eq(back.flags, h.flags);
}
END_TEST

START_TEST(little_endian_on_the_wire)
{
	struct wire_header h = sample();
	uint8_t buf[WIRE_HEADER_LEN];
	wire_encode_header(&h, buf);
	ck_assert_uint_eq(buf[0], 'X'); ck_assert_uint_eq(buf[1], 'S');
	ck_assert_uint_eq(buf[2], 'Y'); ck_assert_uint_eq(buf[3], 'N');
	ck_assert_uint_eq(buf[16], 0x08);   /* id, least significant byte first */
	ck_assert_uint_eq(buf[23], 0x01);
}
END_TEST

START_TEST(short_input_needs_more)
{
	struct wire_header h = sample(), back;
	uint8_t buf[WIRE_HEADER_LEN];
	wire_encode_header(&h, buf);
	for (size_t n = 0; n < WIRE_HEADER_LEN; n++)
		ck_assert_int_eq(wire_decode_header(buf, n, &back), WIRE_NEED_MORE);
}
END_TEST

static int64_t decode_modified(void (*edit)(struct wire_header *), size_t byte, uint8_t value)
{
	struct wire_header h = sample(), back;
	uint8_t buf[WIRE_HEADER_LEN];
	if (edit)
		edit(&h);
	wire_encode_header(&h, buf);
	if (byte < WIRE_HEADER_LEN)
		buf[byte] = value;
	return wire_decode_header(buf, sizeof(buf), &back);
}

static void big_target(struct wire_header *h) { h->target_len = WIRE_MAX_TARGET + 1; }
static void big_data(struct wire_header *h) { h->data_len = WIRE_MAX_DATA + 1ull; }
static void huge_data(struct wire_header *h) { h->data_len = UINT64_MAX; }
static void bad_op(struct wire_header *h) { h->op = X_OP_MAX; }
static void request_with_result(struct wire_header *h) { h->kind = WIRE_REQUEST; }
static void reply_without_result(struct wire_header *h) { h->result = XR_NONE; }
static void negative_error(struct wire_header *h) { h->error = -1; }
static void unknown_flag(struct wire_header *h) { h->flags = 1u << 20; }
static void tag_without_mirror(struct wire_header *h) { h->flags = XF_FUA | 7u << XF_TAG_SHIFT; }
static void low_unknown_flag(struct wire_header *h) { h->flags = XF_MIRROR | 1u << 8; }
static void overserviced(struct wire_header *h) { h->serviced = h->size + 1; }
static void max_lengths(struct wire_header *h) { h->target_len = WIRE_MAX_TARGET; h->data_len = WIRE_MAX_DATA; }

START_TEST(malformed_headers_are_refused)
{
	ck_assert_int_eq(decode_modified(NULL, 0, 'x'), WIRE_BAD_MAGIC);
	ck_assert_int_eq(decode_modified(NULL, 4, 2), WIRE_BAD_VERSION);
	ck_assert_int_eq(decode_modified(NULL, 6, 9), WIRE_BAD_KIND);
	ck_assert_int_eq(decode_modified(bad_op, 99, 0), WIRE_BAD_OP);
	ck_assert_int_eq(decode_modified(request_with_result, 99, 0), WIRE_BAD_RESULT);
	ck_assert_int_eq(decode_modified(reply_without_result, 99, 0), WIRE_BAD_RESULT);
	ck_assert_int_eq(decode_modified(big_target, 99, 0), WIRE_BAD_LENGTH);
	ck_assert_int_eq(decode_modified(big_data, 99, 0), WIRE_BAD_LENGTH);
	ck_assert_int_eq(decode_modified(huge_data, 99, 0), WIRE_BAD_LENGTH);
	ck_assert_int_eq(decode_modified(negative_error, 99, 0), WIRE_BAD_FIELD);
	ck_assert_int_eq(decode_modified(unknown_flag, 99, 0), WIRE_BAD_FIELD);
	ck_assert_int_eq(decode_modified(tag_without_mirror, 99, 0), WIRE_BAD_FIELD);
	ck_assert_int_eq(decode_modified(low_unknown_flag, 99, 0), WIRE_BAD_FIELD);
	ck_assert_int_eq(decode_modified(overserviced, 99, 0), WIRE_BAD_FIELD);
	ck_assert_int_eq(decode_modified(max_lengths, 99, 0),
			 WIRE_HEADER_LEN + WIRE_MAX_TARGET + WIRE_MAX_DATA);
	ck_assert_str_eq(wire_error_name(WIRE_BAD_VERSION), "unknown protocol version");
}
END_TEST

/* A hello: header only, the requester in id and the epoch in offset;
 * anything else set is refused. */
START_TEST(hello_is_header_only)
{
	struct wire_header h = { .kind = WIRE_HELLO, .id = 0x5eed, .offset = 1764300000000000000ull };
	struct wire_header back;
	uint8_t buf[WIRE_HEADER_LEN];
	wire_encode_header(&h, buf);
	ck_assert_int_eq(wire_decode_header(buf, sizeof(buf), &back), WIRE_HEADER_LEN);
	ck_assert_uint_eq(back.kind, WIRE_HELLO);
	ck_assert_uint_eq(back.id, h.id);
	ck_assert_uint_eq(back.offset, h.offset);
	struct wire_header bad[] = {
		{ .kind = WIRE_HELLO, .size = 1 }, { .kind = WIRE_HELLO, .op = X_READ },
		{ .kind = WIRE_HELLO, .result = XR_SERVED }, { .kind = WIRE_HELLO, .flags = XF_FUA },
		{ .kind = WIRE_HELLO, .target_len = 1 }, { .kind = WIRE_HELLO, .data_len = 1 },
		{ .kind = WIRE_HELLO, .serviced = 1 }, { .kind = WIRE_HELLO, .error = 5 },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		wire_encode_header(&bad[i], buf);
		ck_assert_int_eq(wire_decode_header(buf, sizeof(buf), &back), WIRE_BAD_FIELD);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("synapsed_wire");
	TCase *tc = tcase_create("wire");
	tcase_add_test(tc, round_trip);
	tcase_add_test(tc, mirror_tag_round_trip);
	tcase_add_test(tc, little_endian_on_the_wire);
	tcase_add_test(tc, short_input_needs_more);
	tcase_add_test(tc, malformed_headers_are_refused);
	tcase_add_test(tc, hello_is_header_only);
	suite_add_tcase(s, tc);
	return xt_run(s);
}
