/* Poisoned tensors: an error at dispatch travels through later ops unchanged and comes back
 * at the first read, naming the op that failed and the caller's file:line. */
#include <kiln.h>
#include <pthread.h>

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
    KT_CHECK(kiln_sync() == KILN_ERR_SHAPE); /* a query is not a read: the error is still owed */
}

/* An error made at dispatch whose tensor is released unread comes back from kiln_sync, once. */
KT_TEST(sync_reports_a_dispatch_error_released_unread) {
    kiln_tensor a = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4));
    int line = __LINE__ + 1;
    kiln_tensor bad = kiln_reshape(a, KILN_SHAPE(3));
    kiln_tensor worse = kiln_exp(bad); /* carries the same error on: still one error */
    kiln_release(worse);
    kiln_clear_error();
    KT_CHECK(kiln_sync() == KILN_ERR_SHAPE);
    KT_EXPECT_ERROR(KILN_ERR_SHAPE, "kiln_reshape", line);
    KT_CHECK(kiln_sync() == KILN_OK);
    /* read instead of released: the read reports it and sync does not repeat it */
    bad = kiln_reshape(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4)), KILN_SHAPE(3));
    float v[3];
    KT_CHECK(kiln_into_data(bad, v, sizeof v) == KILN_ERR_SHAPE);
    KT_CHECK(kiln_sync() == KILN_OK);
}

/* Errors found while ops run: sync names the earliest failing op (as KILN_SYNC=1 would), not
 * whichever the workers happened to finish first. */
KT_TEST(sync_reports_the_earliest_runtime_error) {
    int64_t bad_index[1] = {300};
    for (int round = 0; round < 50; round++) {
        kiln_tensor big = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(256, 256));
        kiln_tensor idx = kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(1), bad_index);
        kiln_tensor small = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(4));
        kiln_tensor idx2 = kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(1), bad_index);
        kiln_tensor mm = kiln_matmul(kiln_ref(big), kiln_ref(big)); /* keeps a worker busy */
        int line = __LINE__ + 1;
        kiln_tensor first = kiln_index_select(kiln_matmul(big, mm), 0, idx); /* fails late */
        kiln_tensor second = kiln_index_select(small, 0, idx2);              /* fails at once */
        kiln_release(first);
        kiln_release(second);
        KT_CHECK(kiln_sync() == KILN_ERR_INDEX);
        KT_EXPECT_ERROR(KILN_ERR_INDEX, "kiln_index_select", line);
        KT_CHECK(kiln_sync() == KILN_OK);
    }
}

/* A runtime error read on another thread is reported there, and not again by the producer. */
typedef struct {
    kiln_tensor t;
    kiln_status got;
} cross_read;

static void *read_on_other_thread(void *arg) {
    cross_read *r = arg;
    float v[2];
    r->got = kiln_into_data(r->t, v, sizeof v);
    return NULL;
}

KT_TEST(runtime_error_crossing_threads_is_reported_once) {
    int64_t bad_index[2] = {0, 9};
    for (int round = 0; round < 20; round++) {
        kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3));
        kiln_tensor idx = kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(2), bad_index);
        cross_read r = {kiln_index_select(x, 0, idx), KILN_OK};
        pthread_t th;
        KT_CHECK(pthread_create(&th, NULL, read_on_other_thread, &r) == 0);
        pthread_join(th, NULL);
        KT_CHECK(r.got == KILN_ERR_INDEX);
        KT_CHECK_MSG(kiln_sync() == KILN_OK, "reported twice: %s", kiln_last_error());
    }
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
    KT_RUN(sync_reports_a_dispatch_error_released_unread);
    KT_RUN(sync_reports_the_earliest_runtime_error);
    KT_RUN(runtime_error_crossing_threads_is_reported_once);
    KT_RUN(read_arguments_are_checked);
    KT_RUN(sync_with_nothing_pending_is_ok);
    KT_RUN(clear_error);
    KT_RUN(settings_reject_bad_values);
    return kt_finish();
}
