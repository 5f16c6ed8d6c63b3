/*
 * The blocker contract's functions (include/peer/blocker.h), one by one:
 * the name rules (the shared table of bad names, the length limits),
 * printable names, reading a COPY payload, and the INFO reply on a real
 * segment (room made when the buffer is too small, the target kept).
 */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "peer/blocker.h"
#include "support/blocker_cases.h"
#include "support/xseg_test_util.h"

/* ---- names ---------------------------------------------------------------------- */

START_TEST(bad_names_table_matches_the_rules)
{
	for (size_t i = 0; i < blocker_bad_names_count; i++) {
		const struct blocker_bad_name *b = &blocker_bad_names[i];
		size_t len = b->len ? b->len : strlen(b->name);
		const char *why = NULL;
		ck_assert_msg(blocker_check_name(b->name, len, BLOCKER_NAME_MAX, &why) == b->error,
			      "bad name #%zu (%s) is not refused with %d", i, b->what, b->error);
		ck_assert_msg(why && *why, "bad name #%zu (%s): no reason", i, b->what);
	}
	const char *why = NULL;
	ck_assert_int_eq(blocker_check_name(NULL, 0, BLOCKER_NAME_MAX, &why), EINVAL);
	ck_assert_str_eq(why, "is empty");
}
END_TEST

START_TEST(good_names)
{
	static const char *const good[] = { "obj", "vol_0000000000000001", "a.b", "x..",
					    "-", "name with spaces", "\xc3\xa9t\xc3\xa9" };
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		const char *why = "unset";
		ck_assert_msg(blocker_check_name(good[i], strlen(good[i]), BLOCKER_NAME_MAX,
						 &why) == 0, "'%s' refused: %s", good[i], why);
	}
}
END_TEST

START_TEST(length_limits)
{
	char name[BLOCKER_NAME_MAX + 2];
	memset(name, 'x', sizeof(name));
	const char *why;
	ck_assert_int_eq(blocker_check_name(name, BLOCKER_NAME_MAX, BLOCKER_NAME_MAX, &why), 0);
	ck_assert_int_eq(blocker_check_name(name, BLOCKER_NAME_MAX + 1, BLOCKER_NAME_MAX, &why),
			 ENAMETOOLONG);
	ck_assert_str_eq(why, "is too long");
	/* a peer's own lower limit (--max-name-len) */
	ck_assert_int_eq(blocker_check_name(name, 8, 8, &why), 0);
	ck_assert_int_eq(blocker_check_name(name, 9, 8, &why), ENAMETOOLONG);
	/* a limit above the segment's is capped by it */
	ck_assert_int_eq(blocker_check_name(name, BLOCKER_NAME_MAX + 1, (size_t)-1, &why),
			 ENAMETOOLONG);
	/* too long wins over a bad byte: the length is what the operator set */
	name[0] = '.';
	ck_assert_int_eq(blocker_check_name(name, 9, 8, &why), ENAMETOOLONG);
}
END_TEST

/* ---- printable names -------------------------------------------------------------- */

START_TEST(printable_names)
{
	char out[BLOCKER_PRINTABLE_SIZE];
	ck_assert_str_eq(blocker_printable("obj-1", 5, out, sizeof(out)), "obj-1");
	ck_assert_str_eq(blocker_printable("a\0b\n\x7f\xff", 6, out, sizeof(out)), "a?b???");
	ck_assert_str_eq(blocker_printable("abc", 2, out, sizeof(out)), "ab");   /* len, not NUL */
	ck_assert_str_eq(blocker_printable(NULL, 5, out, sizeof(out)), "");
	ck_assert_str_eq(blocker_printable("x", 0, out, sizeof(out)), "");

	char longest[BLOCKER_NAME_MAX];
	memset(longest, 'y', sizeof(longest));
	blocker_printable(longest, sizeof(longest), out, sizeof(out));
	ck_assert_uint_eq(strlen(out), 64 + 3);
	ck_assert_str_eq(out + 64, "...");
	blocker_printable(longest, 64, out, sizeof(out));
	ck_assert_uint_eq(strlen(out), 64);                /* exactly 64: no "..." */

	char small[8];
	ck_assert_str_eq(blocker_printable(longest, sizeof(longest), small, sizeof(small)),
			 "yyyy");                              /* never past the buffer */
	small[0] = 'z';
	blocker_printable("abc", 3, small, 0);
	ck_assert_int_eq(small[0], 'z');                   /* no room: untouched */
}
END_TEST

/* ---- the COPY payload ------------------------------------------------------------- */

START_TEST(copy_payload)
{
	struct xseg_request_copy cp;
	const uint64_t header = offsetof(struct xseg_request_copy, src);
	const char *src, *why;
	uint32_t len;

	/* the short form: header and name only */
	size_t n = blocker_copy_payload(&cp, sizeof(cp), "source", 6);
	ck_assert_uint_eq(n, header + 6);
	ck_assert_int_eq(blocker_copy_source(&cp, n, BLOCKER_NAME_MAX, &src, &len, &why), 0);
	ck_assert_ptr_eq(src, cp.src);
	ck_assert_uint_eq(len, 6);
	ck_assert(!memcmp(src, "source", 6));
	/* the whole struct */
	ck_assert_int_eq(blocker_copy_source(&cp, sizeof(cp), BLOCKER_NAME_MAX, &src, &len, &why),
			 0);

	/* malformed payloads: EINVAL, no name to show */
	ck_assert_int_eq(blocker_copy_source(NULL, sizeof(cp), BLOCKER_NAME_MAX, &src, &len, &why),
			 EINVAL);
	ck_assert_ptr_null(src);
	ck_assert_int_eq(blocker_copy_source(&cp, header - 1, BLOCKER_NAME_MAX, &src, &len, &why),
			 EINVAL);
	ck_assert_ptr_null(src);
	ck_assert_int_eq(blocker_copy_source(&cp, header + 5, BLOCKER_NAME_MAX, &src, &len, &why),
			 EINVAL);                           /* shorter than src_len says */
	ck_assert_ptr_null(src);
	ck_assert_str_eq(why, "the payload is shorter than src_len says");
	cp.src_len = BLOCKER_NAME_MAX + 1;
	ck_assert_int_eq(blocker_copy_source(&cp, sizeof(cp), BLOCKER_NAME_MAX, &src, &len, &why),
			 EINVAL);
	ck_assert_ptr_null(src);
	cp.src_len = UINT32_MAX;                            /* no overflow of header + src_len */
	ck_assert_int_eq(blocker_copy_source(&cp, sizeof(cp), BLOCKER_NAME_MAX, &src, &len, &why),
			 EINVAL);

	/* the source follows the name rules, and is shown when refused */
	for (size_t i = 0; i < blocker_bad_names_count; i++) {
		const struct blocker_bad_name *b = &blocker_bad_names[i];
		uint32_t blen = b->len ? b->len : (uint32_t)strlen(b->name);
		n = blocker_copy_payload(&cp, sizeof(cp), b->name, blen);
		ck_assert_msg(blocker_copy_source(&cp, n, BLOCKER_NAME_MAX, &src, &len, &why) ==
			      b->error, "COPY from bad name #%zu (%s) not refused", i, b->what);
		ck_assert_ptr_eq(src, cp.src);
		ck_assert_uint_eq(len, blen);
	}
	n = blocker_copy_payload(&cp, sizeof(cp), "123456789", 9);
	ck_assert_int_eq(blocker_copy_source(&cp, n, 8, &src, &len, &why), ENAMETOOLONG);
}
END_TEST

/* ---- the INFO reply --------------------------------------------------------------- */

static struct xseg_request *request_for(const char *target, uint64_t datalen)
{
	ck_assert_int_eq(xseg_bind_port(xt_seg, 0), 0);
	struct xseg_request *req = xseg_get_request(xt_seg, 0);
	ck_assert_ptr_nonnull(req);
	ck_assert_int_eq(xseg_prep_target(xt_seg, req, target, datalen), 0);
	return req;
}

/* A name long enough that its buffer (256 bytes at least) has no room
 * for the reply after it. */
static const char *long_name(void)
{
	static char name[251];
	memset(name, 'n', sizeof(name) - 1);
	memcpy(name, "some-object", 11);
	return name;
}

START_TEST(info_reply_makes_room_and_keeps_the_target)
{
	struct xseg_request *req = request_for(long_name(), 0);
	ck_assert_uint_lt(req->bufferlen, req->data_off + sizeof(struct xseg_reply_info));
	ck_assert_int_eq(blocker_reply_info(xt_seg, req, 123456789), 0);
	ck_assert_uint_ge(req->bufferlen, req->data_off + sizeof(struct xseg_reply_info));
	ck_assert_uint_ge(req->datalen, sizeof(struct xseg_reply_info));
	ck_assert_uint_eq(req->serviced, sizeof(struct xseg_reply_info));
	ck_assert_uint_eq(req->targetlen, strlen(long_name()));
	ck_assert_str_eq(xseg_get_target(xt_seg, req), long_name());
	ck_assert_uint_eq(((struct xseg_reply_info *)xseg_get_data(xt_seg, req))->size, 123456789);
	xseg_put_request(xt_seg, req);
}
END_TEST

START_TEST(info_reply_in_place)
{
	struct xseg_request *req = request_for("obj", 4096);
	uint64_t buffer = req->buffer;
	void *data = xseg_get_data(xt_seg, req);
	ck_assert_int_eq(blocker_reply_info(xt_seg, req, 7), 0);
	ck_assert_uint_eq(req->buffer, buffer);              /* no new buffer */
	ck_assert_ptr_eq(xseg_get_data(xt_seg, req), data);
	ck_assert_uint_eq(req->serviced, sizeof(struct xseg_reply_info));
	ck_assert_uint_eq(((struct xseg_reply_info *)data)->size, 7);
	ck_assert_str_eq(xseg_get_target(xt_seg, req), "obj");
	xseg_put_request(xt_seg, req);
}
END_TEST

START_TEST(info_reply_heap_full)
{
	struct xseg_request *req = request_for(long_name(), 0);
	/* other requests take the rest of the heap, the largest blocks first,
	 * until not even the smallest block is left */
	struct xseg_request *held[64];
	int n = 0;
	bool full = false;
	while (!full && n < 64 && (held[n] = xseg_get_request(xt_seg, 0)) != NULL) {
		/* down to 256 - XSEG_TARGET_ROOM: the smallest block, 256 bytes,
		 * with the data's offset */
		uint64_t min = 256 - XSEG_TARGET_ROOM, size = 64u << 10;
		while (size && xseg_prep_request(xt_seg, held[n], 0, size) < 0)
			size = size == min ? 0 : size / 2 > min ? size / 2 : min;
		full = !size;
		n++;
	}
	ck_assert_msg(full, "the heap never filled up");
	ck_assert_uint_lt(req->bufferlen, req->data_off + sizeof(struct xseg_reply_info));
	ck_assert_int_eq(blocker_reply_info(xt_seg, req, 1), ENOMEM);
	for (int i = 0; i < n; i++)
		xseg_put_request(xt_seg, held[i]);
	xseg_put_request(xt_seg, req);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("peers_blocker");
	TCase *tc = tcase_create("names and payloads");
	tcase_add_test(tc, bad_names_table_matches_the_rules);
	tcase_add_test(tc, good_names);
	tcase_add_test(tc, length_limits);
	tcase_add_test(tc, printable_names);
	tcase_add_test(tc, copy_payload);
	suite_add_tcase(s, tc);
	tc = tcase_create("INFO reply");
	tcase_add_checked_fixture(tc, xt_setup, xt_teardown);
	tcase_add_test(tc, info_reply_makes_room_and_keeps_the_target);
	tcase_add_test(tc, info_reply_in_place);
	tcase_add_test(tc, info_reply_heap_full);
	suite_add_tcase(s, tc);
	return xt_run(s);
}
