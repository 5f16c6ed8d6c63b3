/*
 * synapsed's request table: ids carry a generation, so a reply naming a
 * freed or reused slot, an index out of range or a forged generation finds
 * nothing; the in-flight list holds linked slots in order (deadline order).
 */
#include <check.h>

#include "support/xseg_test_util.h"

#include "../peers/synapsed/slots.c"

START_TEST(ids_are_never_zero_and_name_their_slot)
{
	struct slot_table st;
	ck_assert_int_eq(slots_init(&st, 4), 0);
	uint32_t a = slots_alloc(&st, 10);
	ck_assert_uint_ne(a, SLOT_NONE);
	uint64_t id = slots_id(&st, a);
	ck_assert_uint_ne(id, 0);
	ck_assert_ptr_eq(slots_lookup(&st, id), &st.slots[a]);
	ck_assert_ptr_null(slots_lookup(&st, id + (1ull << 32)));   /* another generation */
	ck_assert_ptr_null(slots_lookup(&st, (id & ~0xffffffffull) | 4));   /* out of range */
	ck_assert_ptr_null(slots_lookup(&st, UINT64_MAX));
	slots_destroy(&st);
}
END_TEST

START_TEST(a_freed_slot_forgets_its_id)
{
	struct slot_table st;
	ck_assert_int_eq(slots_init(&st, 1), 0);
	uint32_t a = slots_alloc(&st, 10);
	uint64_t old = slots_id(&st, a);
	slots_link(&st, a);
	slots_unlink(&st, a);
	slots_free(&st, a);
	ck_assert_ptr_null(slots_lookup(&st, old));
	uint32_t b = slots_alloc(&st, 20);
	ck_assert_uint_eq(b, a);   /* the same slot again ... */
	ck_assert_uint_ne(slots_id(&st, b), old);   /* ... under a new id */
	ck_assert_ptr_null(slots_lookup(&st, old));
	ck_assert_ptr_nonnull(slots_lookup(&st, slots_id(&st, b)));
	slots_destroy(&st);
}
END_TEST

START_TEST(full_table_and_in_flight_order)
{
	struct slot_table st;
	uint32_t idx[3];
	ck_assert_int_eq(slots_init(&st, 3), 0);
	for (int i = 0; i < 3; i++)
		idx[i] = slots_alloc(&st, (uint64_t)i);
	ck_assert_uint_eq(slots_alloc(&st, 9), SLOT_NONE);
	ck_assert_uint_eq(st.head, SLOT_NONE);   /* not in flight until linked */
	for (int i = 0; i < 3; i++)
		slots_link(&st, idx[i]);
	ck_assert_uint_eq(st.head, idx[0]);
	slots_unlink(&st, idx[1]);   /* the middle one answered */
	ck_assert_uint_eq(st.slots[idx[0]].next, idx[2]);
	ck_assert_uint_eq(st.slots[idx[2]].prev, idx[0]);
	slots_unlink(&st, idx[0]);
	ck_assert_uint_eq(st.head, idx[2]);
	slots_unlink(&st, idx[2]);
	ck_assert_uint_eq(st.head, SLOT_NONE);
	ck_assert_uint_eq(st.tail, SLOT_NONE);
	for (int i = 0; i < 3; i++)
		slots_free(&st, idx[i]);
	ck_assert_uint_eq(st.used, 0);
	ck_assert_uint_ne(slots_alloc(&st, 1), SLOT_NONE);
	slots_destroy(&st);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("synapsed_slots");
	TCase *tc = tcase_create("slots");
	tcase_add_test(tc, ids_are_never_zero_and_name_their_slot);
	tcase_add_test(tc, a_freed_slot_forgets_its_id);
	tcase_add_test(tc, full_table_and_in_flight_order);
	suite_add_tcase(s, tc);
	return xt_run(s);
}
