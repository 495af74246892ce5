/* Weight gradients under autocast (src/autodiff/rules_linalg.c, grad_product): the gradient of
 * an f32 parameter that a product read as its bf16 cast is the bf16 product's f32 sums, stored
 * in f32, never rounded to bf16 on the way (PyTorch rounds it; kiln keeps the 8 more bits for
 * free). Checked against f64 sums of the same bf16 operands (to f32 accuracy, which the rounded
 * path misses by ~2^-9), against the rounded path itself (within bf16's tolerance), for linear
 * and matmul weights on either side, through the cache and without it (KILN_AUTOCAST_CACHE=0). */
#include <math.h>
#include <stdlib.h>

#include "kiln.h"
#include "kiln_test.h"

enum { ROWS = 64, IN = 300, OUT = 24 };

/* t's values as f64 on the host (t consumed); NULL on failure. */
static double *host(kiln_tensor t, int64_t n) {
    double *v = malloc((size_t)n * sizeof *v);
    if (v && kiln_into_data(kiln_cast(t, KILN_F64), v, (size_t)n * sizeof *v) != KILN_OK) free(v), v = NULL;
    KT_CHECK_MSG(v != NULL, "%s", kiln_last_error());
    return v;
}

/* f32 values that bf16 holds exactly. */
static kiln_tensor bf16_exact(kiln_shape s, uint64_t seed) {
    return kiln_cast(kiln_cast(kiln_randn(KILN_CPU, KILN_F32, s, seed), KILN_BF16), KILN_F32);
}

/* The gradient of sum(c * (x w^T)) (or of sum(c * (x wt)) with wt = w^T as matmul's operand)
 * with respect to the f32 leaf w, under bf16 autocast. */
static kiln_tensor autocast_weight_grad(kiln_tensor x, kiln_tensor w, kiln_tensor c, bool as_matmul) {
    kiln_autocast_begin(KILN_BF16);
    kiln_tensor y = as_matmul ? kiln_matmul(kiln_ref(x), kiln_ref(w)) : kiln_linear(kiln_ref(x), kiln_ref(w), KILN_NONE);
    kiln_autocast_end();
    kiln_grads *g = NULL;
    KT_CHECK_MSG(kiln_backward(kiln_sum(kiln_mul(kiln_cast(y, KILN_F32), kiln_ref(c))), &g) == KILN_OK, "%s",
                 kiln_last_error());
    kiln_tensor gw = kiln_grad(g, w);
    kiln_grads_free(g);
    return gw;
}

/* ref[j][k] = sum_i c[i][j] * bf16(x)[i][k] in f64 (linear's dw, [OUT, IN]). */
static double *reference(kiln_tensor x, kiln_tensor c) {
    double *xb = host(kiln_cast(kiln_ref(x), KILN_BF16), ROWS * IN), *cb = host(kiln_ref(c), ROWS * OUT);
    double *ref = calloc(OUT * IN, sizeof *ref);
    if (!xb || !cb || !ref) return free(xb), free(cb), free(ref), NULL;
    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < OUT; j++)
            for (int k = 0; k < IN; k++) ref[j * IN + k] += cb[i * OUT + j] * xb[i * IN + k];
    free(xb), free(cb);
    return ref;
}

/* max |got - ref| / max |ref| (got [OUT, IN], or [IN, OUT] when transposed). */
static double relative_error(kiln_tensor got, const double *ref, bool transposed) {
    KT_CHECK(kiln_tensor_dtype(got) == KILN_F32);
    double *g = host(got, OUT * IN), worst = 0, scale = 0;
    for (int j = 0; g && ref && j < OUT; j++)
        for (int k = 0; k < IN; k++) {
            double v = transposed ? g[k * OUT + j] : g[j * IN + k];
            worst = fmax(worst, fabs(v - ref[j * IN + k]));
            scale = fmax(scale, fabs(ref[j * IN + k]));
        }
    free(g);
    return scale > 0 ? worst / scale : 1;
}

KT_TEST(weight_gradients_are_f32_sums_of_the_bf16_products) {
    kt_mem_begin();
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(ROWS, IN), 1);
    kiln_tensor c = bf16_exact(KILN_SHAPE(ROWS, OUT), 2);
    double *ref = reference(x, c);
    for (int pass = 0; pass < 2; pass++) { /* the second through the kept copies */
        kiln_tensor w = kiln_leaf(kiln_mul_scalar(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(OUT, IN), 3), 0.1));
        kiln_tensor wt = kiln_leaf(kiln_mul_scalar(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(IN, OUT), 4), 0.1));
        for (int again = 0; again <= pass; again++) {
            double e_lin = relative_error(autocast_weight_grad(x, w, c, false), ref, false);
            double e_mm = relative_error(autocast_weight_grad(x, wt, c, true), ref, true);
            /* 64 f32 sums: ~1e-7; rounded to bf16 they would be ~2e-3 */
            KT_CHECK_MSG(e_lin < 1e-5, "linear: %g", e_lin);
            KT_CHECK_MSG(e_mm < 1e-5, "matmul: %g", e_mm);
        }
        kiln_release(w), kiln_release(wt);
    }
    free(ref);
    kiln_release(x), kiln_release(c);
    KT_MEM_CHECK();
}

/* The input's gradient too, when the input is an f32 leaf (cast under autocast as well). */
KT_TEST(an_f32_input_leaf_gets_f32_sums_too) {
    kt_mem_begin();
    kiln_tensor x = kiln_leaf(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(ROWS, IN), 5));
    kiln_tensor w = kiln_leaf(kiln_mul_scalar(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(OUT, IN), 6), 0.1));
    kiln_tensor c = bf16_exact(KILN_SHAPE(ROWS, OUT), 7);
    kiln_autocast_begin(KILN_BF16);
    kiln_tensor y = kiln_linear(kiln_ref(x), kiln_ref(w), KILN_NONE);
    kiln_autocast_end();
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_sum(kiln_mul(kiln_cast(y, KILN_F32), kiln_ref(c))), &g) == KILN_OK);
    kiln_tensor gx = kiln_grad(g, x);
    kiln_grads_free(g);
    /* dx[i][k] = sum_j c[i][j] bf16(w)[j][k] */
    double *wb = host(kiln_cast(kiln_detach(kiln_ref(w)), KILN_BF16), OUT * IN), *cb = host(kiln_ref(c), ROWS * OUT);
    KT_CHECK(kiln_tensor_dtype(gx) == KILN_F32);
    double *got = host(gx, ROWS * IN), worst = 0, scale = 0;
    for (int i = 0; wb && cb && got && i < ROWS; i++)
        for (int k = 0; k < IN; k++) {
            double r = 0;
            for (int j = 0; j < OUT; j++) r += cb[i * OUT + j] * wb[j * IN + k];
            worst = fmax(worst, fabs(got[i * IN + k] - r));
            scale = fmax(scale, fabs(r));
        }
    KT_CHECK_MSG(scale > 0 && worst / scale < 1e-5, "%g", worst / scale);
    free(wb), free(cb), free(got);
    kiln_release(x), kiln_release(w), kiln_release(c);
    KT_MEM_CHECK();
}

/* Against the path that rounds to bf16 (the bf16 product over a bf16 leaf, then widened): equal
 * within bf16's half ulp of each value. */
KT_TEST(the_rounded_path_agrees_within_bf16_tolerance) {
    kt_mem_begin();
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(ROWS, IN), 8);
    kiln_tensor c = bf16_exact(KILN_SHAPE(ROWS, OUT), 9);
    kiln_tensor w = kiln_leaf(kiln_mul_scalar(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(OUT, IN), 10), 0.1));
    kiln_tensor wb = kiln_leaf(kiln_cast(kiln_detach(kiln_ref(w)), KILN_BF16));
    kiln_tensor y = kiln_linear(kiln_cast(kiln_ref(x), KILN_BF16), kiln_ref(wb), KILN_NONE);
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_sum(kiln_mul(kiln_cast(y, KILN_F32), kiln_ref(c))), &g) == KILN_OK);
    kiln_tensor rounded = kiln_grad(g, wb);
    kiln_grads_free(g);
    KT_CHECK(kiln_tensor_dtype(rounded) == KILN_BF16);
    double *r = host(rounded, OUT * IN), *n = host(autocast_weight_grad(x, w, c, false), OUT * IN);
    int bad = 0;
    for (int i = 0; r && n && i < OUT * IN; i++) bad += fabs(r[i] - n[i]) > fabs(n[i]) / 256 + 1e-30;
    KT_CHECK_MSG(bad == 0, "%d of %d differ by more than bf16's rounding", bad, OUT * IN);
    free(r), free(n);
    kiln_release(x), kiln_release(c), kiln_release(w), kiln_release(wb);
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(weight_gradients_are_f32_sums_of_the_bf16_products);
    KT_RUN(an_f32_input_leaf_gets_f32_sums_too);
    KT_RUN(the_rounded_path_agrees_within_bf16_tolerance);
    return kt_finish();
}
