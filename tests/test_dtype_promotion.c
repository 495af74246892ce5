/* Result dtypes against PyTorch's rules: every pair of dtypes, each operand dimensioned or
 * 0-d, and a tensor with a whole or a fractional number, from the table that
 * scripts/gen_promotion_table.py wrote with torch.result_type (tests/promotion_table.h); the
 * exceptions README's "Dtypes" lists; and the products, which refuse mixed dtypes as
 * PyTorch's do (f32 @ f64 used to give f64 silently). */
#include <kiln.h>

#include "kiln_test.h"
#include "promotion_table.h"

#define N_PAIRS ((int)(sizeof kt_promotions / sizeof kt_promotions[0]))
#define N_SCALARS ((int)(sizeof kt_scalar_promotions / sizeof kt_scalar_promotions[0]))

static kiln_tensor operand(kiln_dtype dt, int dims) {
    return dims ? kiln_ones(KILN_CPU, dt, KILN_SHAPE(2)) : kiln_ones(KILN_CPU, dt, KILN_SHAPE());
}

/* The dtype of r, which must be valid; r released. */
static kiln_dtype dtype_of(kiln_tensor r) {
    KT_CHECK_MSG(kiln_tensor_status(r) == KILN_OK, "%s", kiln_last_error());
    kiln_dtype d = kiln_tensor_dtype(r);
    kiln_release(r);
    return d;
}

KT_TEST(where_follows_result_type) {
    for (int i = 0; i < N_PAIRS; i++) {
        const kt_promotion *p = &kt_promotions[i];
        kiln_tensor mask = kiln_full(KILN_CPU, KILN_BOOL, KILN_SHAPE(2), 1);
        kiln_dtype got = dtype_of(kiln_where(mask, operand(p->a, p->a_dims), operand(p->b, p->b_dims)));
        KT_CHECK_MSG(got == p->result, "where(%s%s, %s%s): %s, torch %s", kiln_dtype_name(p->a), p->a_dims ? "[2]" : "",
                     kiln_dtype_name(p->b), p->b_dims ? "[2]" : "", kiln_dtype_name(got), kiln_dtype_name(p->result));
    }
}

/* Arithmetic follows it too, but for bool with bool (kiln counts: i32, where torch's add is
 * a logical or). */
KT_TEST(arithmetic_follows_result_type) {
    kiln_tensor (*const ops[])(kiln_tensor, kiln_tensor) = {kiln_add, kiln_mul, kiln_maximum};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < N_PAIRS; i++) {
            const kt_promotion *p = &kt_promotions[i];
            if (p->a == KILN_BOOL && p->b == KILN_BOOL) continue;
            kiln_dtype got = dtype_of(ops[k](operand(p->a, p->a_dims), operand(p->b, p->b_dims)));
            KT_CHECK_MSG(got == p->result, "op %d (%s%s, %s%s): %s, torch %s", k, kiln_dtype_name(p->a),
                         p->a_dims ? "[2]" : "", kiln_dtype_name(p->b), p->b_dims ? "[2]" : "", kiln_dtype_name(got),
                         kiln_dtype_name(p->result));
        }
    /* what kiln gives for bool with bool */
    KT_CHECK(dtype_of(kiln_add(operand(KILN_BOOL, 1), operand(KILN_BOOL, 1))) == KILN_I32);
}

/* A number: whole ones count as integers (kiln takes a double, so 2.0 is 2), others as floats. */
KT_TEST(scalars_follow_result_type) {
    for (int i = 0; i < N_SCALARS; i++) {
        const kt_scalar_promotion *p = &kt_scalar_promotions[i];
        kiln_dtype got = dtype_of(kiln_add_scalar(operand(p->a, 1), p->scalar));
        KT_CHECK_MSG(got == p->result, "%s + %g: %s, torch %s", kiln_dtype_name(p->a), p->scalar, kiln_dtype_name(got),
                     kiln_dtype_name(p->result));
        got = dtype_of(kiln_mul_scalar(operand(p->a, 1), p->scalar));
        KT_CHECK_MSG(got == p->result, "%s * %g: %s, torch %s", kiln_dtype_name(p->a), p->scalar, kiln_dtype_name(got),
                     kiln_dtype_name(p->result));
    }
}

/* The ops whose result is not the promoted dtype: true division and atan2 of integers give
 * f32, comparisons bool; and a 0-d f64 keeps an f32 tensor's dtype and values. */
KT_TEST(ops_with_their_own_result) {
    KT_CHECK(dtype_of(kiln_div(operand(KILN_I32, 1), operand(KILN_I64, 1))) == KILN_F32);
    KT_CHECK(dtype_of(kiln_atan2(operand(KILN_I64, 1), operand(KILN_BOOL, 1))) == KILN_F32);
    KT_CHECK(dtype_of(kiln_lt(operand(KILN_F32, 1), operand(KILN_F64, 0))) == KILN_BOOL);
    const float xs[2] = {1.5f, -2.0f};
    kiln_tensor x = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(2), xs);
    kiln_tensor y = kiln_mul(x, kiln_full(KILN_CPU, KILN_F64, KILN_SHAPE(), 0.1));
    KT_CHECK(kiln_tensor_dtype(y) == KILN_F32);
    float v[2];
    KT_CHECK(kiln_into_data(y, v, sizeof v) == KILN_OK && v[0] == 1.5f * 0.1f && v[1] == -2.0f * 0.1f);
}

/* Products refuse mixed dtypes, naming the op and the caller's line; one dtype passes, the
 * half-precision ones included. */
KT_TEST(products_refuse_mixed_dtypes) {
    kt_mem_begin();
    int line = __LINE__ + 1;
    kiln_tensor r = kiln_matmul(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 2)), kiln_ones(KILN_CPU, KILN_F64, KILN_SHAPE(2, 2)));
    KT_CHECK(kiln_into_data(r, NULL, 0) == KILN_ERR_DTYPE);
    KT_EXPECT_ERROR(KILN_ERR_DTYPE, "kiln_matmul", line);
    KT_CHECK(strstr(kiln_last_error(), "f32 and f64") != NULL);
    line = __LINE__ + 1;
    r = kiln_linear(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)), kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(4, 3)),
                    kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE(4)));
    KT_CHECK(kiln_into_data(r, NULL, 0) == KILN_ERR_DTYPE);
    KT_CHECK(strstr(kiln_last_error(), "kiln_linear") && strstr(kiln_last_error(), "bias"));
    r = kiln_conv2d(kiln_ones(KILN_CPU, KILN_F64, KILN_SHAPE(1, 1, 4, 4)), kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1, 1, 3, 3)),
                    KILN_NONE, 1, 1, 0, 0, 1, 1, 1);
    KT_CHECK(kiln_into_data(r, NULL, 0) == KILN_ERR_DTYPE);
    KT_CHECK(strstr(kiln_last_error(), "kiln_conv2d") != NULL);
    const kiln_dtype same[] = {KILN_F32, KILN_F64, KILN_BF16, KILN_F16};
    for (int i = 0; i < 4; i++) {
        kiln_tensor p = kiln_matmul(kiln_ones(KILN_CPU, same[i], KILN_SHAPE(2, 3)), kiln_ones(KILN_CPU, same[i], KILN_SHAPE(3, 2)));
        KT_CHECK(kiln_tensor_dtype(p) == same[i]);
        double v;
        KT_CHECK_MSG(kiln_into_scalar_f64(kiln_sum(p), &v) == KILN_OK && v == 12, "%s: %s", kiln_dtype_name(same[i]),
                     kiln_last_error());
    }
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(where_follows_result_type);
    KT_RUN(arithmetic_follows_result_type);
    KT_RUN(scalars_follow_result_type);
    KT_RUN(ops_with_their_own_result);
    KT_RUN(products_refuse_mixed_dtypes);
    return kt_finish();
}
