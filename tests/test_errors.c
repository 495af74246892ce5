/* Poisoned tensors: an error at dispatch travels through later ops unchanged and comes back
 * at the first read, naming the op that failed and the caller's file:line. */
#include <kiln.h>

#include "kiln_test.h"

KT_TEST(poison_propagates_to_the_first_read) {
    uint64_t live = kiln_memory_stats_get(KILN_CPU).live_tensors;
    kiln_tensor a = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3));
    int line = __LINE__ + 1;
    kiln_tensor bad = kiln_reshape(a, KILN_SHAPE(5));
    kiln_tensor b = kiln_transpose(kiln_unsqueeze(bad, 0), 0, 1);
    kiln_tensor c = kiln_cast(kiln_contiguous(b), KILN_F64);
    double v;
    KT_CHECK(kiln_into_scalar_f64(c, &v) == KILN_ERR_SHAPE);
    char where[64];
    snprintf(where, sizeof where, "test_errors.c:%d", line);
    const char *msg = kiln_last_error();
    KT_CHECK_MSG(strstr(msg, "kiln_reshape at") && strstr(msg, where), "%s", msg);
    KT_CHECK(kiln_last_status() == KILN_ERR_SHAPE);
    KT_CHECK(kiln_memory_stats_get(KILN_CPU).live_tensors == live);
}

KT_TEST(poisoned_metadata_queries) {
    kiln_tensor bad = kiln_reshape(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4)), KILN_SHAPE(3));
    KT_CHECK(kiln_is_valid(bad)); /* a live handle to an error */
    KT_CHECK(kiln_tensor_ndim(bad) == -1);
    KT_CHECK(kiln_tensor_status(bad) == KILN_ERR_SHAPE);
    kiln_release(bad);
}

KT_TEST(read_arguments_are_checked) {
    kiln_tensor a = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4));
    float out[4];
    KT_CHECK(kiln_into_data(kiln_ref(a), out, 8) == KILN_ERR_BUFFER_SIZE);
    KT_CHECK(strstr(kiln_last_error(), "kiln_into_data") != NULL);
    KT_CHECK(kiln_into_data(kiln_ref(a), NULL, 16) == KILN_ERR_NULL);
    float v;
    KT_CHECK(kiln_into_scalar(kiln_ref(a), &v) == KILN_ERR_SHAPE);
    KT_CHECK(kiln_into_scalar(a, NULL) == KILN_ERR_NULL);
    KT_CHECK(!kiln_is_valid(a)); /* reads consume even when they fail */
}

KT_TEST(sync_with_nothing_pending_is_ok) {
    KT_CHECK(kiln_sync() == KILN_OK);
    KT_CHECK(kiln_sync_all() == KILN_OK);
}

KT_TEST(clear_error) {
    kiln_release((kiln_tensor){42});
    KT_CHECK(kiln_last_status() != KILN_OK);
    kiln_clear_error();
    KT_CHECK(kiln_last_status() == KILN_OK && kiln_last_error()[0] == '\0');
}

KT_TEST(settings_reject_bad_values) {
    int threads = kiln_num_threads();
    KT_CHECK(threads >= 1);
    kiln_set_num_threads(0);
    KT_CHECK(kiln_last_status() == KILN_ERR_INVALID_ARGUMENT);
    KT_CHECK(strstr(kiln_last_error(), "kiln_set_num_threads") != NULL);
    KT_CHECK(kiln_num_threads() == threads);
    kiln_set_num_threads(1);
    KT_CHECK(kiln_num_threads() == 1);
    kiln_set_num_threads(threads);
    kiln_engine_set_limits(0, -5); /* values < 1 keep the current limits */
    float v;
    KT_CHECK(kiln_into_scalar(kiln_sum(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(100))), &v) == KILN_OK);
    KT_NEAR(v, 100.0, 0);
}

int main(void) {
    KT_RUN(poison_propagates_to_the_first_read);
    KT_RUN(poisoned_metadata_queries);
    KT_RUN(read_arguments_are_checked);
    KT_RUN(sync_with_nothing_pending_is_ok);
    KT_RUN(clear_error);
    KT_RUN(settings_reject_bad_values);
    return kt_finish();
}
