/* Handles and ownership: ref/release, consumption, stale-handle errors naming the consumer. */
#include <kiln.h>

#include "kiln_test.h"

static uint64_t live(void) { return kiln_memory_stats_get(KILN_CPU).live_tensors; }

KT_TEST(ref_and_release_keep_data_alive) {
    uint64_t before = live();
    kiln_tensor a = kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(4), 2.0);
    kiln_tensor b = kiln_ref(a);
    KT_CHECK(kiln_is_valid(a) && kiln_is_valid(b));
    KT_CHECK(a.id != b.id);
    KT_CHECK(kiln_release(a) == KILN_OK);
    KT_CHECK(!kiln_is_valid(a));
    float out[4];
    KT_CHECK(kiln_into_data(b, out, sizeof out) == KILN_OK);
    KT_NEAR(out[3], 2.0, 0);
    KT_CHECK(live() == before);
}

KT_TEST(consumed_handle_names_the_consumer) {
    kiln_tensor a = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 2));
    kiln_tensor v = kiln_reshape(a, KILN_SHAPE(4)); /* consumes a */
    kiln_tensor bad = kiln_reshape(a, KILN_SHAPE(4));
    float out[4];
    KT_CHECK(kiln_into_data(bad, out, sizeof out) == KILN_ERR_STALE_HANDLE);
    const char *msg = kiln_last_error();
    KT_CHECK_MSG(strstr(msg, "kiln_reshape") && strstr(msg, "consumed by kiln_reshape") && strstr(msg, "test_handles.c:"),
                 "%s", msg);
    KT_CHECK(kiln_release(v) == KILN_OK);
}

KT_TEST(double_release_is_reported) {
    kiln_tensor a = kiln_zeros(KILN_CPU, KILN_I32, KILN_SHAPE(3));
    KT_CHECK(kiln_release(a) == KILN_OK);
    KT_CHECK(kiln_release(a) == KILN_ERR_STALE_HANDLE);
    KT_CHECK(strstr(kiln_last_error(), "kiln_release") != NULL);
    KT_CHECK(kiln_release(KILN_NONE) == KILN_OK); /* like free(NULL) */
}

KT_TEST(garbage_and_none_handles) {
    kiln_tensor junk = {0x123456789abcdefull};
    KT_CHECK(!kiln_is_valid(junk));
    KT_CHECK(kiln_tensor_ndim(junk) == -1);
    KT_CHECK(kiln_release(junk) == KILN_ERR_STALE_HANDLE);
    kiln_tensor y = kiln_exp(KILN_NONE);
    KT_CHECK(kiln_tensor_status(y) == KILN_ERR_NULL);
    float v;
    KT_CHECK(kiln_into_scalar(y, &v) == KILN_ERR_NULL);
    KT_CHECK(strstr(kiln_last_error(), "kiln_exp") != NULL);
    kiln_tensor r = kiln_ref(junk); /* a poisoned handle, not a crash */
    KT_CHECK(kiln_tensor_status(r) == KILN_ERR_STALE_HANDLE);
    kiln_release(r);
}

KT_TEST(same_handle_twice_in_one_op_is_one_tensor_used_twice) {
    uint64_t before = live();
    kiln_tensor a = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3));
    kiln_tensor s = kiln_add(a, a); /* as a + a in PyTorch (test_same_handle_twice has the rest) */
    KT_CHECK(kiln_tensor_status(s) == KILN_OK);
    float v[3];
    KT_CHECK(kiln_into_data(s, v, sizeof v) == KILN_OK && v[0] == 2 && v[2] == 2);
    KT_CHECK(live() == before);
}

KT_TEST(metadata_queries_do_not_consume) {
    kiln_tensor a = kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE(2, 3, 4));
    kiln_shape s = kiln_tensor_shape(a);
    KT_CHECK(s.ndim == 3 && s.dims[0] == 2 && s.dims[2] == 4);
    KT_CHECK(kiln_tensor_numel(a) == 24);
    KT_CHECK(kiln_tensor_dim(a, -1) == 4);
    KT_CHECK(kiln_tensor_dim(a, 3) == -1);
    KT_CHECK(kiln_tensor_dtype(a) == KILN_F64);
    KT_CHECK(kiln_tensor_device(a) == KILN_CPU);
    KT_CHECK(kiln_tensor_is_contiguous(a));
    KT_CHECK(kiln_tensor_status(a) == KILN_OK);
    KT_CHECK(kiln_release(a) == KILN_OK);
}

KT_TEST(many_handles_cycle_without_growth) {
    uint64_t before = live();
    for (int i = 0; i < 20000; i++) {
        kiln_tensor a = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(1));
        kiln_tensor b = kiln_ref(a);
        kiln_release(a);
        kiln_release(b);
    }
    KT_CHECK(live() == before);
}

int main(void) {
    KT_RUN(ref_and_release_keep_data_alive);
    KT_RUN(consumed_handle_names_the_consumer);
    KT_RUN(double_release_is_reported);
    KT_RUN(garbage_and_none_handles);
    KT_RUN(same_handle_twice_in_one_op_is_one_tensor_used_twice);
    KT_RUN(metadata_queries_do_not_consume);
    KT_RUN(many_handles_cycle_without_growth);
    return kt_finish();
}
