/*
 * nbdd's NBD wire format: byte layouts against the spec's numbers, short
 * input asks for more, malformed input is refused, and request checks give
 * the errors the spec names (EINVAL, ENOSPC).
 */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "support/xseg_test_util.h"
#include "../peers/nbdd/proto.c"

static void put_be(uint8_t *b, uint64_t v, int bytes)
{
	for (int i = bytes - 1; i >= 0; i--, v >>= 8)
		b[i] = (uint8_t)v;
}

static void make_request(uint8_t *b, uint16_t flags, uint16_t type, uint64_t cookie,
			 uint64_t offset, uint32_t length)
{
	put_be(b, NBD_REQUEST_MAGIC, 4);
	put_be(b + 4, flags, 2);
	put_be(b + 6, type, 2);
	put_be(b + 8, cookie, 8);
	put_be(b + 16, offset, 8);
	put_be(b + 24, length, 4);
}

START_TEST(hello_is_the_fixed_newstyle_greeting)
{
	uint8_t b[NBD_HELLO_LEN];
	nbd_encode_hello(b);
	ck_assert(!memcmp(b, "NBDMAGICIHAVEOPT", 16));
	ck_assert_uint_eq(b[16], 0);
	ck_assert_uint_eq(b[17], NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES);
}
END_TEST

START_TEST(client_flags)
{
	uint8_t b[4] = { 0, 0, 0, 3 };
	uint32_t flags = 99;
	ck_assert_int_eq(nbd_decode_client_flags(b, 3, &flags), 0);
	ck_assert_int_eq(nbd_decode_client_flags(b, 4, &flags), 4);
	ck_assert_uint_eq(flags, 3);
	b[0] = 0x80;
	ck_assert_int_eq(nbd_decode_client_flags(b, 4, &flags), NBD_PROTO_BAD_FLAGS);
}
END_TEST

START_TEST(option_header)
{
	uint8_t b[16];
	struct nbd_option o;
	memcpy(b, "IHAVEOPT", 8);
	put_be(b + 8, NBD_OPT_GO, 4);
	put_be(b + 12, 10, 4);
	for (size_t n = 0; n < 16; n++)
		ck_assert_int_eq(nbd_decode_option(b, n, &o), 0);
	ck_assert_int_eq(nbd_decode_option(b, 16, &o), 16);
	ck_assert_uint_eq(o.option, NBD_OPT_GO);
	ck_assert_uint_eq(o.length, 10);
	put_be(b + 12, NBD_OPTION_MAX_DATA + 1, 4);
	ck_assert_int_eq(nbd_decode_option(b, 16, &o), NBD_PROTO_TOO_LONG);
	b[0] = 'X';
	ck_assert_int_eq(nbd_decode_option(b, 16, &o), NBD_PROTO_BAD_MAGIC);
	ck_assert_str_eq(nbd_proto_error_name(NBD_PROTO_BAD_MAGIC), "bad magic number");
}
END_TEST

START_TEST(export_query)
{
	uint8_t b[32];
	struct nbd_export_query q;
	put_be(b, 3, 4);
	memcpy(b + 4, "vol", 3);
	put_be(b + 7, 2, 2);
	put_be(b + 9, NBD_INFO_BLOCK_SIZE, 2);
	put_be(b + 11, NBD_INFO_NAME, 2);
	ck_assert_int_eq(nbd_decode_export_query(b, 13, &q), 0);
	ck_assert_uint_eq(q.name_len, 3);
	ck_assert(!memcmp(q.name, "vol", 3));
	ck_assert(q.want_block_size && q.want_name);
	/* every shorter or longer length disagrees with the counts inside */
	for (uint32_t len = 0; len < sizeof(b); len++)
		if (len != 13)
			ck_assert_int_eq(nbd_decode_export_query(b, len, &q), NBD_PROTO_BAD_LENGTH);
	put_be(b, 0xffffffffu, 4);   /* a name length that wraps */
	ck_assert_int_eq(nbd_decode_export_query(b, 13, &q), NBD_PROTO_BAD_LENGTH);
	put_be(b, 0, 4);             /* empty name, no infos */
	put_be(b + 4, 0, 2);
	ck_assert_int_eq(nbd_decode_export_query(b, 6, &q), 0);
	ck_assert_uint_eq(q.name_len, 0);
	ck_assert(!q.want_block_size);
}
END_TEST

START_TEST(replies_layout)
{
	uint8_t b[NBD_EXPORT_NAME_REPLY_LEN];
	nbd_encode_option_reply(b, NBD_OPT_GO, NBD_REP_ERR_UNKNOWN, 7);
	ck_assert_uint_eq(b[0], 0x00); ck_assert_uint_eq(b[1], 0x03); ck_assert_uint_eq(b[7], 0xa9);
	ck_assert_uint_eq(b[11], NBD_OPT_GO);
	ck_assert_uint_eq(b[12], 0x80); ck_assert_uint_eq(b[15], 6);
	ck_assert_uint_eq(b[19], 7);
	nbd_encode_info_export(b, 0x0102030405060708ull, 0x1234);
	ck_assert_uint_eq(b[1], NBD_INFO_EXPORT);
	ck_assert_uint_eq(b[2], 1); ck_assert_uint_eq(b[9], 8);
	ck_assert_uint_eq(b[10], 0x12); ck_assert_uint_eq(b[11], 0x34);
	nbd_encode_info_block_size(b, 1, 4096, 32u << 20);
	ck_assert_uint_eq(b[1], NBD_INFO_BLOCK_SIZE);
	ck_assert_uint_eq(b[5], 1);
	ck_assert_uint_eq(b[8], 0x10);
	ck_assert_uint_eq(b[10], 0x02);
	nbd_encode_simple_reply(b, NBD_ENOSPC, 0xa1a2a3a4a5a6a7a8ull);
	ck_assert(!memcmp(b, "\x67\x44\x66\x98\0\0\0\x1c\xa1\xa2", 10));
	ck_assert_uint_eq(b[15], 0xa8);
	memset(b, 0x55, sizeof(b));
	ck_assert_uint_eq(nbd_encode_export_name_reply(b, 512, 3, true), 10);
	ck_assert_uint_eq(b[6], 2); ck_assert_uint_eq(b[9], 3);
	ck_assert_uint_eq(nbd_encode_export_name_reply(b, 512, 3, false), 134);
	ck_assert_uint_eq(b[133], 0);
}
END_TEST

START_TEST(request_decode)
{
	uint8_t b[NBD_REQUEST_LEN];
	struct nbd_request r;
	make_request(b, NBD_CMD_FLAG_FUA, NBD_CMD_WRITE, 0x1122334455667788ull, 1ull << 40, 4097);
	for (size_t n = 0; n < NBD_REQUEST_LEN; n++)
		ck_assert_int_eq(nbd_decode_request(b, n, &r), 0);
	ck_assert_int_eq(nbd_decode_request(b, NBD_REQUEST_LEN, &r), NBD_REQUEST_LEN);
	ck_assert_uint_eq(r.flags, NBD_CMD_FLAG_FUA);
	ck_assert_uint_eq(r.type, NBD_CMD_WRITE);
	ck_assert_uint_eq(r.cookie, 0x1122334455667788ull);
	ck_assert_uint_eq(r.offset, 1ull << 40);
	ck_assert_uint_eq(r.length, 4097);
	ck_assert_uint_eq(nbd_request_payload(&r), 4097);
	r.type = NBD_CMD_READ;
	ck_assert_uint_eq(nbd_request_payload(&r), 0);
	b[3] ^= 1;
	ck_assert_int_eq(nbd_decode_request(b, NBD_REQUEST_LEN, &r), NBD_PROTO_BAD_MAGIC);
}
END_TEST

static uint32_t check(uint16_t flags, uint16_t type, uint64_t offset, uint32_t length)
{
	struct nbd_request r = { .flags = flags, .type = type, .offset = offset, .length = length };
	return nbd_check_request(&r, 1u << 20, 64u << 10);
}

START_TEST(request_checks)
{
	ck_assert_uint_eq(check(0, NBD_CMD_READ, 0, 4096), 0);
	ck_assert_uint_eq(check(0, NBD_CMD_READ, (1u << 20) - 1, 1), 0);
	ck_assert_uint_eq(check(0, NBD_CMD_READ, (1u << 20) - 1, 2), NBD_EINVAL);
	ck_assert_uint_eq(check(0, NBD_CMD_READ, UINT64_MAX, 1), NBD_EINVAL);   /* no wrap */
	ck_assert_uint_eq(check(0, NBD_CMD_WRITE, 1u << 20, 1), NBD_ENOSPC);
	ck_assert_uint_eq(check(0, NBD_CMD_WRITE_ZEROES, 1u << 19, 1u << 20), NBD_ENOSPC);
	ck_assert_uint_eq(check(0, NBD_CMD_TRIM, 1u << 19, 1u << 20), NBD_EINVAL);
	ck_assert_uint_eq(check(0, NBD_CMD_WRITE, 0, (64u << 10) + 1), NBD_EINVAL);   /* > max */
	ck_assert_uint_eq(check(0, NBD_CMD_WRITE_ZEROES, 0, 1u << 20), 0);   /* no payload: no max */
	ck_assert_uint_eq(check(NBD_CMD_FLAG_FUA, NBD_CMD_WRITE, 0, 512), 0);
	ck_assert_uint_eq(check(NBD_CMD_FLAG_FUA, NBD_CMD_READ, 0, 512), 0);
	ck_assert_uint_eq(check(NBD_CMD_FLAG_NO_HOLE, NBD_CMD_READ, 0, 512), NBD_EINVAL);
	ck_assert_uint_eq(check(NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_NO_HOLE, NBD_CMD_READ, 0, 512),
			  NBD_EINVAL);
	ck_assert_uint_eq(check(NBD_CMD_FLAG_NO_HOLE, NBD_CMD_WRITE_ZEROES, 0, 512), 0);
	ck_assert_uint_eq(check(NBD_CMD_FLAG_NO_HOLE, NBD_CMD_WRITE, 0, 512), NBD_EINVAL);
	ck_assert_uint_eq(check(1u << 4, NBD_CMD_WRITE_ZEROES, 0, 512), NBD_EINVAL);  /* FAST_ZERO */
	ck_assert_uint_eq(check(0, NBD_CMD_FLUSH, 0, 0), 0);
	ck_assert_uint_eq(check(NBD_CMD_FLAG_NO_HOLE, NBD_CMD_FLUSH, 0, 0), NBD_EINVAL);
	ck_assert_uint_eq(check(1u << 4, NBD_CMD_FLUSH, 0, 0), NBD_EINVAL);
	ck_assert_uint_eq(check(0, NBD_CMD_DISC, 0, 0), 0);
	ck_assert_uint_eq(check(NBD_CMD_FLAG_NO_HOLE, NBD_CMD_DISC, 0, 0), NBD_EINVAL);   /* nbdd answers DISC before this check: no reply */
	ck_assert_uint_eq(check(0, 5, 0, 512), NBD_EINVAL);    /* CACHE: not offered */
	ck_assert_uint_eq(check(0, 7, 0, 512), NBD_EINVAL);    /* BLOCK_STATUS */
	ck_assert_uint_eq(check(0, 0xffff, 0, 0), NBD_EINVAL);
}
END_TEST

/* The NBD spec, "Command flags": NBD_CMD_FLAG_FUA "is valid for all
 * commands, provided NBD_FLAG_SEND_FUA has been negotiated, in which case
 * the server MUST accept all commands with this bit set (even by ignoring
 * the bit)". nbdd always announces NBD_FLAG_SEND_FUA. */
START_TEST(fua_accepted_on_every_command)
{
	ck_assert_uint_eq(check(NBD_CMD_FLAG_FUA, NBD_CMD_WRITE, 0, 512), 0);
	ck_assert_uint_eq(check(NBD_CMD_FLAG_FUA, NBD_CMD_TRIM, 0, 512), 0);
	ck_assert_uint_eq(check(NBD_CMD_FLAG_FUA, NBD_CMD_WRITE_ZEROES, 0, 512), 0);
	ck_assert_msg(check(NBD_CMD_FLAG_FUA, NBD_CMD_FLUSH, 0, 0) == 0,
		      "FLUSH with FUA refused: NBD error %u",
		      check(NBD_CMD_FLAG_FUA, NBD_CMD_FLUSH, 0, 0));
	ck_assert_msg(check(NBD_CMD_FLAG_FUA, NBD_CMD_READ, 0, 512) == 0,
		      "READ with FUA refused: NBD error %u",
		      check(NBD_CMD_FLAG_FUA, NBD_CMD_READ, 0, 512));
	ck_assert_uint_eq(check(NBD_CMD_FLAG_FUA, NBD_CMD_DISC, 0, 0), 0);
}
END_TEST

START_TEST(errno_mapping)
{
	ck_assert_uint_eq(nbd_error_from_errno(0), 0);
	ck_assert_uint_eq(nbd_error_from_errno(EINVAL), NBD_EINVAL);
	ck_assert_uint_eq(nbd_error_from_errno(ENOSPC), NBD_ENOSPC);
	ck_assert_uint_eq(nbd_error_from_errno(ENOBUFS), NBD_ENOMEM);
	/* a peer behind nbdd stopping is not nbdd stopping */
	ck_assert_uint_eq(nbd_error_from_errno(ESHUTDOWN), NBD_EIO);
	ck_assert_uint_eq(nbd_error_from_errno(ENOENT), NBD_EIO);
	ck_assert_uint_eq(nbd_error_from_errno(EHOSTUNREACH), NBD_EIO);
	ck_assert_str_eq(nbd_cmd_name(NBD_CMD_WRITE_ZEROES), "WRITE_ZEROES");
	ck_assert_str_eq(nbd_cmd_name(99), "unknown");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("nbdd_proto");
	TCase *tc = tcase_create("proto");
	tcase_add_test(tc, hello_is_the_fixed_newstyle_greeting);
	tcase_add_test(tc, client_flags);
	tcase_add_test(tc, option_header);
	tcase_add_test(tc, export_query);
	tcase_add_test(tc, replies_layout);
	tcase_add_test(tc, request_decode);
	tcase_add_test(tc, request_checks);
	tcase_add_test(tc, errno_mapping);
	tcase_add_test(tc, fua_accepted_on_every_command);
	suite_add_tcase(s, tc);
	return xt_run(s);
}
