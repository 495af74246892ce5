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

/* ---- every error path of every op family, with inputs only the failing op owns -----------
 * An op that fails must not read an input after releasing it (for the message's shape, dtype
 * or name): the op holds the only reference, so ASan sees any such read. Each call runs once
 * with untracked inputs and once with inputs that require a gradient (the autodiff path). */

static bool tracked_inputs;

/* Inputs are made inside the failing call's expression, on its line: a nested public call
 * records its own line as the call site, and the op's error must name the line under test.
 * (kiln_require_grad) without its macro leaves that call site alone. */
static kiln_tensor track(kiln_tensor t) {
    if (tracked_inputs) (kiln_require_grad)(t);
    return t;
}
#define FRESH(...) track(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(__VA_ARGS__)))
#define SCALAR track(kiln_zeros(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE))
#define INTS(...) kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(__VA_ARGS__))
#define BOOLS(...) kiln_zeros(KILN_CPU, KILN_BOOL, KILN_SHAPE(__VA_ARGS__))
#define M23 FRESH(2, 3)
#define PAIR(a, b) ((kiln_tensor[]){(a), (b)})

static kiln_tensor pieces[4];

/* Bad call number k: sets the op it must name, the status and its line; KILN_NONE past the end. */
#define BAD(k, op_, st_, expr)     \
    case k:                        \
        *op = (op_);               \
        *st = KILN_ERR_##st_;      \
        *line = __LINE__;          \
        return (expr);
static kiln_tensor bad_call(int k, const char **op, kiln_status *st, int *line) {
    switch (k) {
    /* views */
    BAD(0, "kiln_permute", SHAPE, kiln_permute(M23, KILN_DIMS(0, 1, 2)))
    BAD(1, "kiln_permute", INVALID_ARGUMENT, kiln_permute(M23, KILN_DIMS(1, 1)))
    BAD(2, "kiln_permute", INVALID_ARGUMENT, kiln_permute(M23, KILN_DIMS(0, 2)))
    BAD(3, "kiln_permute", INVALID_ARGUMENT, kiln_permute(M23, (kiln_dims){9, {0}}))
    BAD(4, "kiln_transpose", INVALID_ARGUMENT, kiln_transpose(M23, 0, 2))
    BAD(5, "kiln_squeeze", SHAPE, kiln_squeeze(M23, 0))
    BAD(6, "kiln_squeeze", INVALID_ARGUMENT, kiln_squeeze(M23, 2))
    BAD(7, "kiln_unsqueeze", INVALID_ARGUMENT, kiln_unsqueeze(M23, 3))
    BAD(8, "kiln_unsqueeze", SHAPE, kiln_unsqueeze(track(kiln_zeros(KILN_CPU, KILN_F32, (kiln_shape){8, {1, 1, 1, 1, 1, 1, 1, 1}})), 0))
    BAD(9, "kiln_narrow", INDEX, kiln_narrow(M23, 1, 2, 2))
    BAD(10, "kiln_narrow", INVALID_ARGUMENT, kiln_narrow(M23, 2, 0, 1))
    BAD(11, "kiln_slice", INVALID_ARGUMENT, kiln_slice(M23, 0, 0, 1, 0))
    BAD(12, "kiln_slice", SHAPE, kiln_slice(SCALAR, 0, 0, 1, 1))
    BAD(13, "kiln_slice", INVALID_ARGUMENT, kiln_slice(M23, -3, 0, 1, 1))
    BAD(14, "kiln_expand", SHAPE, kiln_expand(M23, KILN_SHAPE(2, 4)))
    BAD(15, "kiln_expand", SHAPE, kiln_expand(M23, KILN_SHAPE(3)))
    BAD(16, "kiln_expand", SHAPE, kiln_expand(M23, KILN_SHAPE(-1, 2, 3)))
    BAD(17, "kiln_reshape", SHAPE, kiln_reshape(M23, KILN_SHAPE(4)))
    BAD(18, "kiln_reshape", SHAPE, kiln_reshape(M23, KILN_SHAPE(-1, -1)))
    BAD(19, "kiln_reshape", SHAPE, kiln_reshape(M23, KILN_SHAPE(-1, 4)))
    BAD(20, "kiln_reshape", SHAPE, kiln_reshape(M23, (kiln_shape){9, {1}}))
    BAD(21, "kiln_flatten", INVALID_ARGUMENT, kiln_flatten(M23, 1, 0))
    /* joins and splits */
    BAD(22, "kiln_cat", SHAPE, kiln_cat(PAIR(M23, FRESH(3, 3)), 2, 1))
    BAD(23, "kiln_cat", SHAPE, kiln_cat(PAIR(SCALAR, SCALAR), 2, 0))
    BAD(24, "kiln_cat", INVALID_ARGUMENT, kiln_cat(PAIR(M23, M23), 2, 2))
    BAD(25, "kiln_stack", SHAPE, kiln_stack(PAIR(M23, FRESH(3, 2)), 2, 0))
    BAD(26, "kiln_stack", INVALID_ARGUMENT, kiln_stack(PAIR(M23, M23), 2, 3))
    BAD(27, "kiln_split", INVALID_ARGUMENT, (kiln_split(M23, 1, 2, pieces, 4), pieces[0]))
    BAD(28, "kiln_split", INVALID_ARGUMENT, (kiln_split(M23, 0, 0, pieces, 4), pieces[0]))
    BAD(29, "kiln_split", INVALID_ARGUMENT, (kiln_split(M23, 1, 1, pieces, 2), pieces[0]))
    BAD(30, "kiln_chunk", INVALID_ARGUMENT, (kiln_chunk(M23, 0, 0, pieces, 4), pieces[0]))
    /* indexing */
    BAD(31, "kiln_index_select", DTYPE, kiln_index_select(M23, 0, FRESH(2)))
    BAD(32, "kiln_index_select", SHAPE, kiln_index_select(M23, 0, INTS(2, 1)))
    BAD(33, "kiln_index_select", INVALID_ARGUMENT, kiln_index_select(M23, 2, INTS(1)))
    BAD(34, "kiln_gather", SHAPE, kiln_gather(M23, 1, INTS(2)))
    BAD(35, "kiln_gather", SHAPE, kiln_gather(SCALAR, 0, kiln_zeros(KILN_CPU, KILN_I64, KILN_SCALAR_SHAPE)))
    BAD(36, "kiln_scatter_add", SHAPE, kiln_scatter_add(M23, 1, INTS(3, 1), M23))
    BAD(37, "kiln_one_hot", DTYPE, kiln_one_hot(FRESH(3), 4, KILN_F32))
    BAD(38, "kiln_one_hot", INVALID_ARGUMENT, kiln_one_hot(INTS(3), 0, KILN_F32))
    BAD(39, "kiln_one_hot", DTYPE, kiln_one_hot(INTS(3), 4, (kiln_dtype)99))
    BAD(40, "kiln_to_device", DEVICE, kiln_to_device(M23, (kiln_device)7))
    /* products */
    BAD(41, "kiln_matmul", SHAPE, kiln_matmul(M23, M23))
    BAD(42, "kiln_matmul", SHAPE, kiln_matmul(SCALAR, M23))
    BAD(43, "kiln_matmul", DTYPE, kiln_matmul(INTS(2, 3), FRESH(3, 2)))
    BAD(44, "kiln_matmul", SHAPE, kiln_matmul(FRESH(2, 2, 3), FRESH(3, 3, 4)))
    BAD(45, "kiln_linear", SHAPE, kiln_linear(M23, FRESH(4, 2), KILN_NONE))
    BAD(46, "kiln_linear", SHAPE, kiln_linear(M23, FRESH(4, 3), FRESH(5)))
    /* reductions */
    BAD(47, "kiln_sum_dims", INVALID_ARGUMENT, kiln_sum_dims(M23, KILN_DIMS(2), false))
    BAD(48, "kiln_sum_dims", INVALID_ARGUMENT, kiln_sum_dims(M23, KILN_DIMS(0, -2), false))
    BAD(49, "kiln_mean_dims", INVALID_ARGUMENT, kiln_mean_dims(M23, (kiln_dims){9, {0}}, false))
    BAD(50, "kiln_max_dims", SHAPE, kiln_max_dims(FRESH(0, 3), KILN_DIMS(0), false))
    BAD(51, "kiln_argmax", INVALID_ARGUMENT, kiln_argmax(M23, 2, false))
    BAD(52, "kiln_softmax", INVALID_ARGUMENT, kiln_softmax(M23, 2))
    BAD(53, "kiln_var_dims", INVALID_ARGUMENT, kiln_var_dims(M23, KILN_DIMS(-3), 1, false))
    /* elementwise */
    BAD(54, "kiln_add", SHAPE, kiln_add(M23, FRESH(3, 2)))
    BAD(55, "kiln_where", DTYPE, kiln_where(M23, M23, M23))
    BAD(56, "kiln_where", SHAPE, kiln_where(BOOLS(2, 3), M23, FRESH(4)))
    BAD(57, "kiln_clamp", INVALID_ARGUMENT, kiln_clamp(M23, 1, 0))
    BAD(58, "kiln_neg", DTYPE, kiln_neg(BOOLS(2)))
    BAD(59, "kiln_cast", DTYPE, kiln_cast(M23, (kiln_dtype)99))
    /* layers and losses */
    BAD(60, "kiln_conv2d", SHAPE, kiln_conv2d(M23, FRESH(1, 1, 1, 1), KILN_NONE, 1, 1, 0, 0, 1, 1, 1))
    BAD(61, "kiln_max_pool2d", SHAPE, kiln_max_pool2d(M23, 2, 2, 2, 2, 0, 0))
    BAD(62, "kiln_dropout", DTYPE, kiln_dropout(INTS(3), 0.5, 1))
    BAD(63, "kiln_cross_entropy", SHAPE, kiln_cross_entropy(FRESH(4), INTS(3), kiln_cross_entropy_defaults()))
    BAD(64, "kiln_mse_loss", SHAPE, kiln_mse_loss(M23, FRESH(3, 2)))
    /* issue #15's math and activations */
    BAD(65, "kiln_floor", DTYPE, kiln_floor(BOOLS(2)))
    BAD(66, "kiln_fmod", SHAPE, kiln_fmod(M23, FRESH(3, 2)))
    BAD(67, "kiln_round", DTYPE, kiln_round(BOOLS(2)))
    BAD(68, "kiln_atan2", SHAPE, kiln_atan2(M23, FRESH(4)))
    BAD(69, "kiln_lerp", SHAPE, kiln_lerp(M23, M23, FRESH(4)))
    BAD(70, "kiln_lerp", DTYPE, kiln_lerp(INTS(2), INTS(2), INTS(2)))
    BAD(71, "kiln_lerp_scalar", SHAPE, kiln_lerp_scalar(M23, FRESH(2), 0.5))
    BAD(72, "kiln_leaky_relu", DTYPE, kiln_leaky_relu(INTS(2), 0.01))
    BAD(73, "kiln_elu", DTYPE, kiln_elu(INTS(2), 1.0))
    BAD(74, "kiln_hardtanh", INVALID_ARGUMENT, kiln_hardtanh(M23, 1, -1))
    BAD(75, "kiln_mish", DTYPE, kiln_mish(BOOLS(2)))
    /* scans, sorting and shape ops */
    BAD(76, "kiln_cumsum", INVALID_ARGUMENT, kiln_cumsum(M23, 2))
    BAD(77, "kiln_cumprod", INVALID_ARGUMENT, kiln_cumprod(M23, -3))
    BAD(78, "kiln_topk", INVALID_ARGUMENT, kiln_topk(M23, 4, 1, true, NULL))
    BAD(79, "kiln_sort", INVALID_ARGUMENT, kiln_sort(M23, 2, false, NULL))
    BAD(80, "kiln_flip", INVALID_ARGUMENT, kiln_flip(M23, KILN_DIMS(1, -1)))
    BAD(81, "kiln_roll", INVALID_ARGUMENT, kiln_roll(M23, 1, 2))
    BAD(82, "kiln_repeat", INVALID_ARGUMENT, kiln_repeat(M23, KILN_SHAPE(2)))
    BAD(83, "kiln_pad", INVALID_ARGUMENT, kiln_pad(M23, KILN_SHAPE(3, 3), KILN_PAD_REFLECT, 0))
    BAD(84, "kiln_any_dims", INVALID_ARGUMENT, kiln_any_dims(M23, KILN_DIMS(2), false))
    default: return KILN_NONE;
    }
}

KT_TEST(error_paths_never_read_released_inputs) {
    for (int pass = 0; pass < 2; pass++) {
        tracked_inputs = pass == 1;
        kt_mem_begin();
        const char *op;
        kiln_status st;
        int line, k = 0;
        for (kiln_tensor t; (t = bad_call(k, &op, &st, &line)).id != KILN_NONE.id; k++) {
            KT_CHECK_MSG(kiln_tensor_status(t) == st, "call %d (%s, tracked %d): status %s", k, op, pass,
                         kiln_status_str(kiln_tensor_status(t)));
            kt_expect_error_at(st, op, __FILE__, line, line);
            kiln_release(t);
        }
        KT_CHECK(k == 85);
        KT_MEM_CHECK();
    }
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
    KT_RUN(error_paths_never_read_released_inputs);
    return kt_finish();
}
