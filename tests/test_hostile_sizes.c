/* Hostile sizes: shapes, lengths, steps and dims near INT64_MAX. Every size computation must
 * either give the right answer or a clear error naming the public op and this file's line;
 * never a wrong result and never undefined behaviour (UBSan aborts this test in CI). */
#include <kiln.h>

#include "kiln_test.h"

#define BIG ((int64_t)1 << 62)

static kiln_tensor iota(int64_t n) {
    double v[16];
    for (int64_t i = 0; i < n; i++) v[i] = (double)i;
    return kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(n), v);
}

/* The call on `line` gave a poisoned tensor with status st, naming op and the call's line.
 * A check written over several lines: gcc gives __LINE__ the line where the call starts,
 * clang the one where the check ends, so the call site may be up to two lines above. */
static void expect_poisoned(kiln_tensor t, kiln_status st, const char *op, int line) {
    KT_CHECK_MSG(kiln_tensor_status(t) == st, "line %d: status %s, expected %s", line,
                 kiln_status_str(kiln_tensor_status(t)), kiln_status_str(st));
    int site = line;
    for (int above = 1; above <= 2; above++) {
        char at[64];
        snprintf(at, sizeof at, "test_hostile_sizes.c:%d:", line - above);
        if (strstr(kiln_last_error(), at)) site = line - above;
    }
    kt_expect_error_at(st, op, __FILE__, site, line);
    kiln_release(t);
}
#define EXPECT_POISONED(expr, st, op) expect_poisoned((expr), (st), (op), __LINE__)

/* Reads a 1-d f64 tensor of n elements. */
static void expect_values(kiln_tensor t, int64_t n, const double *want, int line) {
    double got[16];
    KT_CHECK_MSG(kiln_tensor_numel(t) == n, "line %d: %lld elements, expected %lld", line,
                 (long long)kiln_tensor_numel(t), (long long)n);
    if (kiln_tensor_numel(t) != n) return (void)kiln_release(t);
    KT_CHECK_MSG(kiln_into_data(t, got, sizeof(double) * (size_t)n) == KILN_OK, "line %d: %s", line, kiln_last_error());
    for (int64_t i = 0; i < n; i++) KT_NEAR(got[i], want[i], 0);
}

KT_TEST(shape_numel_reports_overflow) {
    KT_CHECK(kiln_shape_numel(KILN_SHAPE(INT64_MAX, INT64_MAX)) == -1);
    KT_CHECK(kiln_shape_numel(KILN_SHAPE(BIG, 2)) == -1);
    KT_CHECK(kiln_shape_numel(KILN_SHAPE(BIG + 1, 4)) == -1); /* wraps to 4 */
    KT_CHECK(kiln_shape_numel(KILN_SHAPE(0, INT64_MAX, INT64_MAX)) == -1); /* no strides fit */
    KT_CHECK(kiln_shape_numel(KILN_SHAPE(INT64_MAX, INT64_MAX, 0)) == -1); /* wherever the 0 sits */
    KT_CHECK(kiln_shape_numel(KILN_SHAPE(3, -2)) == -1);
    KT_CHECK(kiln_shape_numel((kiln_shape){9, {1}}) == -1);
    KT_CHECK(kiln_shape_numel(KILN_SHAPE((int64_t)1 << 31, (int64_t)1 << 31)) == BIG);
    KT_CHECK(kiln_shape_numel(KILN_SHAPE(INT64_MAX, 1)) == INT64_MAX);
    KT_CHECK(kiln_shape_numel(KILN_SHAPE(INT64_MAX, 0)) == 0);
    KT_CHECK(kiln_shape_numel(KILN_SCALAR_SHAPE) == 1);
}

KT_TEST(narrow_with_huge_start_or_length_fails) {
    kt_mem_begin();
    kiln_tensor a = iota(5);
    EXPECT_POISONED(kiln_narrow(kiln_ref(a), 0, INT64_MAX, 1), KILN_ERR_INDEX, "kiln_narrow");
    EXPECT_POISONED(kiln_narrow(kiln_ref(a), 0, 1, INT64_MAX), KILN_ERR_INDEX, "kiln_narrow");
    EXPECT_POISONED(kiln_narrow(kiln_ref(a), 0, INT64_MAX, INT64_MAX), KILN_ERR_INDEX, "kiln_narrow");
    EXPECT_POISONED(kiln_narrow(kiln_ref(a), 0, INT64_MIN, 1), KILN_ERR_INDEX, "kiln_narrow");
    EXPECT_POISONED(kiln_narrow(kiln_ref(a), 0, -1, INT64_MAX), KILN_ERR_INDEX, "kiln_narrow");
    EXPECT_POISONED(kiln_narrow(kiln_ref(a), 0, 6, 0), KILN_ERR_INDEX, "kiln_narrow");
    expect_values(kiln_narrow(kiln_ref(a), 0, -2, 2), 2, (double[]){3, 4}, __LINE__);
    expect_values(kiln_narrow(kiln_ref(a), 0, 5, 0), 0, NULL, __LINE__);
    kiln_release(a);
    KT_MEM_CHECK();
}

KT_TEST(slice_with_huge_bounds_and_steps) {
    kt_mem_begin();
    kiln_tensor a = iota(5);
    /* PyTorch: x[1::huge] is x[1] alone */
    expect_values(kiln_slice(kiln_ref(a), 0, 1, 5, INT64_MAX), 1, (double[]){1}, __LINE__);
    expect_values(kiln_slice(kiln_ref(a), 0, 0, INT64_MAX, INT64_MAX), 1, (double[]){0}, __LINE__);
    expect_values(kiln_slice(kiln_ref(a), 0, INT64_MIN, INT64_MAX, 1), 5, (double[]){0, 1, 2, 3, 4}, __LINE__);
    expect_values(kiln_slice(kiln_ref(a), 0, 3, INT64_MAX, INT64_MAX - 1), 1, (double[]){3}, __LINE__);
    expect_values(kiln_slice(kiln_ref(a), 0, INT64_MAX, INT64_MAX, 1), 0, NULL, __LINE__);
    expect_values(kiln_slice(kiln_ref(a), 0, -1, INT64_MIN, 2), 0, NULL, __LINE__);
    /* a slice of a slice: the stride multiplies only when more than one element remains */
    kiln_tensor every_2nd = kiln_slice(kiln_ref(a), 0, 0, 5, 2);
    expect_values(kiln_slice(every_2nd, 0, 1, 3, INT64_MAX), 1, (double[]){2}, __LINE__);
    /* its gradient goes back to the one element taken */
    kiln_require_grad(a);
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_sum(kiln_slice(kiln_ref(a), 0, 1, 5, INT64_MAX)), &g) == KILN_OK);
    expect_values(kiln_grad(g, a), 5, (double[]){0, 1, 0, 0, 0}, __LINE__);
    kiln_grads_free(g);
    kiln_release(a);
    KT_MEM_CHECK();
}

KT_TEST(split_with_a_huge_piece_is_one_piece) {
    kt_mem_begin();
    kiln_tensor out[2];
    KT_CHECK(kiln_split(iota(5), INT64_MAX, 0, out, 2) == 1);
    expect_values(out[0], 5, (double[]){0, 1, 2, 3, 4}, __LINE__);
    KT_MEM_CHECK();
}

KT_TEST(expand_beyond_countable_fails) {
    kt_mem_begin();
    kiln_tensor one = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1, 1));
    EXPECT_POISONED(kiln_expand(kiln_ref(one), KILN_SHAPE(BIG, BIG)), KILN_ERR_OUT_OF_MEMORY, "kiln_expand");
    EXPECT_POISONED(kiln_expand(kiln_ref(one), KILN_SHAPE(INT64_MAX, 2)), KILN_ERR_OUT_OF_MEMORY, "kiln_expand");
    EXPECT_POISONED(kiln_expand(kiln_ref(one), KILN_SHAPE(BIG, 1)), KILN_ERR_OUT_OF_MEMORY, "kiln_expand");
    EXPECT_POISONED(kiln_expand(kiln_ref(one), KILN_SHAPE(0, INT64_MAX, INT64_MAX)), KILN_ERR_OUT_OF_MEMORY,
                    "kiln_expand");
    EXPECT_POISONED(kiln_expand(kiln_ref(one), KILN_SHAPE(-2, 1)), KILN_ERR_SHAPE, "kiln_expand");
    /* large but countable: a view, no memory */
    kiln_tensor wide = kiln_expand(kiln_ref(one), KILN_SHAPE((int64_t)1 << 20, (int64_t)1 << 20));
    KT_CHECK(kiln_tensor_numel(wide) == (int64_t)1 << 40);
    kiln_release(wide);
    kiln_release(one);
    KT_MEM_CHECK();
}

KT_TEST(reshape_with_huge_dims_fails) {
    kt_mem_begin();
    kiln_tensor a = iota(4);
    /* (2^62 + 1) * 4 wraps to 4, the element count: must not pass as a reshape of 4 elements */
    EXPECT_POISONED(kiln_reshape(kiln_ref(a), KILN_SHAPE(BIG + 1, 4)), KILN_ERR_SHAPE, "kiln_reshape");
    EXPECT_POISONED(kiln_reshape(kiln_ref(a), KILN_SHAPE(BIG, BIG, -1)), KILN_ERR_SHAPE, "kiln_reshape");
    EXPECT_POISONED(kiln_reshape(kiln_ref(a), KILN_SHAPE(INT64_MAX, INT64_MAX)), KILN_ERR_SHAPE, "kiln_reshape");
    EXPECT_POISONED(kiln_reshape(kiln_ref(a), KILN_SHAPE(-1, BIG + 1, 4)), KILN_ERR_SHAPE, "kiln_reshape");
    kiln_tensor empty = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0));
    EXPECT_POISONED(kiln_reshape(empty, KILN_SHAPE(0, INT64_MAX, INT64_MAX)), KILN_ERR_OUT_OF_MEMORY, "kiln_reshape");
    kiln_release(a);
    KT_MEM_CHECK();
}

KT_TEST(creation_with_huge_shapes_fails) {
    kt_mem_begin();
    kiln_shape huge[] = {KILN_SHAPE(INT64_MAX, INT64_MAX), KILN_SHAPE(BIG + 1, 4), KILN_SHAPE(0, INT64_MAX, INT64_MAX),
                         KILN_SHAPE(INT64_MAX, INT64_MAX, 0), KILN_SHAPE((int64_t)1 << 60)};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        kiln_shape s = huge[i];
        EXPECT_POISONED(kiln_zeros(KILN_CPU, KILN_F32, s), KILN_ERR_OUT_OF_MEMORY, "kiln_zeros");
        EXPECT_POISONED(kiln_ones(KILN_CPU, KILN_F64, s), KILN_ERR_OUT_OF_MEMORY, "kiln_ones");
        EXPECT_POISONED(kiln_full(KILN_CPU, KILN_I64, s, 2.0), KILN_ERR_OUT_OF_MEMORY, "kiln_full");
        EXPECT_POISONED(kiln_randn(KILN_CPU, KILN_F32, s, 1), KILN_ERR_OUT_OF_MEMORY, "kiln_randn");
        EXPECT_POISONED(kiln_rand(KILN_CPU, KILN_F32, s, 1), KILN_ERR_OUT_OF_MEMORY, "kiln_rand");
        EXPECT_POISONED(kiln_bernoulli(KILN_CPU, KILN_F32, s, 0.5, 1), KILN_ERR_OUT_OF_MEMORY, "kiln_bernoulli");
        EXPECT_POISONED(kiln_from_data(KILN_CPU, KILN_F32, s, (float[]){0}), KILN_ERR_OUT_OF_MEMORY, "kiln_from_data");
        EXPECT_POISONED(kiln_from_borrowed(KILN_F32, s, (float[]){0}, NULL, NULL), KILN_ERR_OUT_OF_MEMORY,
                        "kiln_from_borrowed");
    }
    EXPECT_POISONED(kiln_linspace(KILN_CPU, KILN_F32, 0, 1, INT64_MAX), KILN_ERR_OUT_OF_MEMORY, "kiln_linspace");
    EXPECT_POISONED(kiln_eye(KILN_CPU, KILN_F32, INT64_MAX, INT64_MAX), KILN_ERR_OUT_OF_MEMORY, "kiln_eye");
    EXPECT_POISONED(kiln_eye(KILN_CPU, KILN_F32, 0, INT64_MAX), KILN_ERR_OUT_OF_MEMORY, "kiln_eye");
    EXPECT_POISONED(kiln_arange(KILN_CPU, KILN_F32, 0, 1e300, 1e-300), KILN_ERR_OUT_OF_MEMORY, "kiln_arange");
    EXPECT_POISONED(kiln_one_hot(kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(4)), INT64_MAX, KILN_F32),
                    KILN_ERR_OUT_OF_MEMORY, "kiln_one_hot");
    KT_MEM_CHECK();
}

/* Ops whose output is larger than their inputs: broadcasts, products and joins of views. */
KT_TEST(outputs_too_large_to_count_fail) {
    kt_mem_begin();
    int64_t h = (int64_t)1 << 40;
    kiln_tensor col = kiln_expand(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1, 1)), KILN_SHAPE(h, 1));
    kiln_tensor row = kiln_expand(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1, 1)), KILN_SHAPE(1, h));
    EXPECT_POISONED(kiln_add(kiln_ref(col), kiln_ref(row)), KILN_ERR_OUT_OF_MEMORY, "kiln_add");
    EXPECT_POISONED(kiln_where(kiln_gt(kiln_ref(col), kiln_ref(row)), kiln_ref(col), kiln_ref(row)),
                    KILN_ERR_OUT_OF_MEMORY, "kiln_gt");
    EXPECT_POISONED(kiln_matmul(kiln_ref(col), kiln_ref(row)), KILN_ERR_OUT_OF_MEMORY, "kiln_matmul");
    kiln_release(col);
    kiln_release(row);

    /* 17 views of 2^59 - 1 elements joined: the joined size overflows int64 */
    int64_t most = ((int64_t)1 << 59) - 1;
    kiln_tensor parts[17];
    for (int i = 0; i < 17; i++) parts[i] = kiln_expand(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1)), KILN_SHAPE(most));
    KT_CHECK(kiln_tensor_numel(parts[0]) == most);
    EXPECT_POISONED(kiln_cat(parts, 17, 0), KILN_ERR_OUT_OF_MEMORY, "kiln_cat");
    for (int i = 0; i < 2; i++) parts[i] = kiln_expand(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1)), KILN_SHAPE(most));
    EXPECT_POISONED(kiln_stack(parts, 2, 0), KILN_ERR_OUT_OF_MEMORY, "kiln_stack");
    KT_MEM_CHECK();
}

/* Convolution arithmetic on hostile parameters: a dilated kernel span and a channel count times
 * groups that overflow int64 are shape errors, not wrapped sizes. */
KT_TEST(conv_with_huge_dilation_or_groups_fails) {
    kt_mem_begin();
    int64_t big = (int64_t)1 << 40;
    kiln_tensor tall = kiln_expand(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1, 1, 1, 1)), KILN_SHAPE(1, 1, big, 1));
    EXPECT_POISONED(kiln_conv2d(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1, 1, 3, 3)), tall, KILN_NONE, 1, 1, 0, 0,
                                INT32_MAX, 1, 1),
                    KILN_ERR_SHAPE, "kiln_conv2d");
    kiln_tensor none_out = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0, big, 1, 1)); /* 0 elements */
    EXPECT_POISONED(kiln_conv2d(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1, 4, 3, 3)), none_out, KILN_NONE, 1, 1, 0, 0,
                                1, 1, INT32_MAX),
                    KILN_ERR_SHAPE, "kiln_conv2d");
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(shape_numel_reports_overflow);
    KT_RUN(narrow_with_huge_start_or_length_fails);
    KT_RUN(slice_with_huge_bounds_and_steps);
    KT_RUN(split_with_a_huge_piece_is_one_piece);
    KT_RUN(expand_beyond_countable_fails);
    KT_RUN(reshape_with_huge_dims_fails);
    KT_RUN(creation_with_huge_shapes_fails);
    KT_RUN(outputs_too_large_to_count_fail);
    KT_RUN(conv_with_huge_dilation_or_groups_fails);
    return kt_finish();
}
