/* The gradients of tril, triu and masked_fill in every float dtype (test_tril_triu.c and
 * test_masked_fill.c check them by finite differences in f64): for x of dtype d, the gradient
 * of sum(op(x) * w) is w where op keeps x and exactly 0 where it zeroes or fills, in dtype d,
 * with x dense or transposed. The weights are small multiples of 1/4, exact in f16 and bf16. */
#include <kiln.h>
#include <stdint.h>

#include "kiln_test.h"

enum { R = 3, C = 5, N = R * C };
typedef enum { TRIL, TRIU, FILL } which_op;
static const uint8_t fill_mask[C] = {1, 0, 0, 1, 0}; /* broadcast over the rows */

/* Whether op keeps element (i, j) of x. */
static bool kept(which_op op, int64_t diagonal, int i, int j) {
    return op == TRIL ? j - i <= diagonal : op == TRIU ? j - i >= diagonal : !fill_mask[j];
}

static void check_grad(which_op op, kiln_dtype d, int64_t diagonal, bool transposed) {
    double xv[N], wv[N], got[N];
    for (int k = 0; k < N; k++) xv[k] = k - 7, wv[k] = (k % 7 - 3) * 0.25 + 0.125 * (k % 2);
    /* x is [R, C]; transposed: made as [C, R] and viewed back */
    double xt[N];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) xt[j * R + i] = xv[i * C + j];
    kiln_tensor x = transposed ? kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(C, R), xt)
                               : kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(R, C), xv);
    x = kiln_leaf(kiln_cast(x, d));
    kiln_tensor view = transposed ? kiln_transpose(kiln_ref(x), 0, 1) : kiln_ref(x);
    kiln_tensor mask = kiln_from_data(KILN_CPU, KILN_BOOL, KILN_SHAPE(C), fill_mask);
    kiln_tensor y = op == FILL ? kiln_masked_fill(view, kiln_ref(mask), -1e4)
                    : op == TRIL ? kiln_tril(view, diagonal) : kiln_triu(view, diagonal);
    kiln_release(mask);
    kiln_tensor w = kiln_cast(kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(R, C), wv), d);
    kiln_grads *g = NULL;
    const char *name = op == TRIL ? "tril" : op == TRIU ? "triu" : "masked_fill";
    KT_CHECK_MSG(kiln_backward(kiln_sum(kiln_mul(y, w)), &g) == KILN_OK, "%s %s: %s", name, kiln_dtype_name(d),
                 kiln_last_error());
    kiln_tensor dx = kiln_grad(g, x);
    KT_CHECK_MSG(kiln_tensor_dtype(dx) == d, "%s: gradient dtype %s, not %s", name,
                 kiln_dtype_name(kiln_tensor_dtype(dx)), kiln_dtype_name(d));
    if (transposed) dx = kiln_transpose(dx, 0, 1);
    KT_CHECK(kiln_into_data(kiln_cast(dx, KILN_F64), got, sizeof got) == KILN_OK);
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) {
            double want = kept(op, diagonal, i, j) ? wv[i * C + j] : 0.0;
            KT_CHECK_MSG(got[i * C + j] == want, "%s %s diagonal %lld%s (%d, %d): %g, expected %g", name,
                         kiln_dtype_name(d), (long long)diagonal, transposed ? " transposed" : "", i, j, got[i * C + j],
                         want);
        }
    kiln_grads_free(g);
    kiln_release(x);
}

KT_TEST(tril_triu_masked_fill_gradients_every_float_dtype) {
    kt_mem_begin();
    const kiln_dtype floats[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16};
    const int64_t diagonals[] = {-2, 0, 1, 4};
    for (int d = 0; d < 4; d++)
        for (int t = 0; t < 2; t++) {
            for (int k = 0; k < 4; k++) {
                check_grad(TRIL, floats[d], diagonals[k], t);
                check_grad(TRIU, floats[d], diagonals[k], t);
            }
            check_grad(FILL, floats[d], 0, t);
        }
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(tril_triu_masked_fill_gradients_every_float_dtype);
    return kt_finish();
}
