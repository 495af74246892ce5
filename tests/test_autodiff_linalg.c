/* Gradients of matmul (every torch.matmul case: 1-d and n-d operands, batch dims broadcast
 * both ways, transposed and sliced operands, one operand untracked) and of linear (any
 * leading dims, with and without bias); bad input on tracked tensors. */
#include "gradcheck.h"

static kiln_memory_stats stats(void) {
    kiln_sync();
    return kiln_memory_stats_get(KILN_CPU);
}

static kiln_tensor run_matmul(kiln_tensor *in, void *ctx) { return kiln_matmul(in[0], in[1]); }
/* a given as [4,3] and transposed; b given as [4,10] and every other column taken */
static kiln_tensor run_matmul_views(kiln_tensor *in, void *ctx) {
    return kiln_matmul(kiln_transpose(in[0], 0, 1), kiln_slice(in[1], 1, 0, 10, 2));
}
/* a @ a: both gradients land on one leaf */
static kiln_tensor run_square(kiln_tensor *in, void *ctx) { return kiln_matmul(kiln_ref(in[0]), in[0]); }

KT_TEST(matmul_every_case) {
    struct {
        const char *name;
        kiln_shape a, b;
    } cases[] = {
        {"1d.1d", KILN_SHAPE(4), KILN_SHAPE(4)},
        {"1d.2d", KILN_SHAPE(4), KILN_SHAPE(4, 3)},
        {"2d.1d", KILN_SHAPE(3, 4), KILN_SHAPE(4)},
        {"2d.2d", KILN_SHAPE(3, 4), KILN_SHAPE(4, 5)},
        {"1d.3d", KILN_SHAPE(4), KILN_SHAPE(2, 4, 3)},
        {"3d.1d", KILN_SHAPE(2, 3, 4), KILN_SHAPE(4)},
        {"2d.3d", KILN_SHAPE(3, 4), KILN_SHAPE(2, 4, 5)},
        {"3d.2d", KILN_SHAPE(2, 3, 4), KILN_SHAPE(4, 5)},
        {"batch broadcast both ways", KILN_SHAPE(2, 1, 3, 4), KILN_SHAPE(5, 4, 2)},
        {"batch of one", KILN_SHAPE(1, 3, 4), KILN_SHAPE(3, 4, 2)},
        {"empty inner dim", KILN_SHAPE(3, 0), KILN_SHAPE(0, 2)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kiln_shape s[2] = {cases[i].a, cases[i].b};
        GC_CHECK(cases[i].name, run_matmul, NULL, 2, s, 1e-6);
    }
    kiln_shape views[2] = {KILN_SHAPE(4, 3), KILN_SHAPE(4, 10)};
    GC_CHECK("transposed and sliced", run_matmul_views, NULL, 2, views, 1e-6);
    kiln_shape sq[1] = {KILN_SHAPE(3, 3)};
    GC_CHECK("a @ a", run_square, NULL, 1, sq, 1e-6);
}

/* One operand tracked (the other is then never saved): d(sum(a b))/da = rowsums of b
 * broadcast, and the other way round, against loops in double. */
KT_TEST(matmul_one_side_tracked) {
    double a[2][3], b[3][4];
    for (int i = 0; i < 6; i++) a[i / 3][i % 3] = 0.25 * i - 0.5;
    for (int i = 0; i < 12; i++) b[i / 4][i % 4] = 0.1 * i * (i % 2 ? -1 : 1);
    for (int side = 0; side < 2; side++) {
        kiln_tensor ta = kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(2, 3), a);
        kiln_tensor tb = kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(3, 4), b);
        kiln_tensor leaf = side ? tb : ta;
        kiln_require_grad(leaf);
        kiln_tensor keep = kiln_ref(leaf);
        kiln_grads *g = NULL;
        KT_CHECK(kiln_backward(kiln_sum(kiln_matmul(ta, tb)), &g) == KILN_OK);
        KT_CHECK(kiln_grads_count(g) == 1);
        double got[12], want[12];
        int n = side ? 12 : 6;
        for (int k = 0; k < n; k++) {
            want[k] = 0;
            if (side) /* d/db[p][q] = sum_i a[i][p] */
                for (int i = 0; i < 2; i++) want[k] += a[i][k / 4];
            else /* d/da[i][p] = sum_q b[p][q] */
                for (int q = 0; q < 4; q++) want[k] += b[k % 3][q];
        }
        KT_CHECK(kiln_into_data(kiln_grad(g, keep), got, sizeof(double) * (size_t)n) == KILN_OK);
        for (int k = 0; k < n; k++) KT_NEAR(got[k], want[k], 1e-12);
        kiln_grads_free(g);
        kiln_release(keep);
    }
}

static kiln_tensor run_linear(kiln_tensor *in, void *ctx) { return kiln_linear(in[0], in[1], ctx ? in[2] : KILN_NONE); }
/* x transposed from [4,3], w transposed from [4,5], bias every other entry of [10] */
static kiln_tensor run_linear_views(kiln_tensor *in, void *ctx) {
    return kiln_linear(kiln_transpose(in[0], 0, 1), kiln_transpose(in[1], 0, 1), kiln_slice(in[2], 0, 1, 10, 2));
}

KT_TEST(linear_any_leading_dims) {
    struct {
        const char *name;
        kiln_shape x;
    } cases[] = {{"x 1-d", KILN_SHAPE(4)}, {"x 2-d", KILN_SHAPE(3, 4)}, {"x 3-d", KILN_SHAPE(2, 3, 4)},
                 {"x 4-d", KILN_SHAPE(2, 1, 3, 4)}, {"no rows", KILN_SHAPE(0, 4)}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kiln_shape s[3] = {cases[i].x, KILN_SHAPE(5, 4), KILN_SHAPE(5)};
        char name[64];
        snprintf(name, sizeof name, "linear %s with bias", cases[i].name);
        GC_CHECK(name, run_linear, (void *)1, 3, s, 1e-6);
        snprintf(name, sizeof name, "linear %s without bias", cases[i].name);
        GC_CHECK(name, run_linear, NULL, 2, s, 1e-6);
    }
    kiln_shape views[3] = {KILN_SHAPE(4, 3), KILN_SHAPE(4, 5), KILN_SHAPE(10)};
    GC_CHECK("linear of views", run_linear_views, NULL, 3, views, 1e-6);
}

/* linear in f16 and bf16 (computed in f32): gradients come back in the inputs' dtype and
 * agree with f64 from the same rounded values. */
KT_TEST(half_precision_linear) {
    const kiln_dtype dts[] = {KILN_F16, KILN_BF16};
    const kiln_shape shapes[3] = {KILN_SHAPE(2, 3, 4), KILN_SHAPE(5, 4), KILN_SHAPE(5)};
    for (int k = 0; k < 2; k++) {
        double grads[2][3][24];
        for (int pass = 0; pass < 2; pass++) {
            kiln_dtype d = pass ? dts[k] : KILN_F64;
            kiln_tensor in[3], keep[3];
            for (int i = 0; i < 3; i++) {
                in[i] = kiln_uniform(KILN_CPU, KILN_F64, shapes[i], -1, 1, 30 + (uint64_t)i);
                in[i] = kiln_cast(kiln_cast(in[i], dts[k]), d);
                kiln_require_grad(in[i]);
                keep[i] = kiln_ref(in[i]);
            }
            kiln_tensor y = kiln_linear(in[0], in[1], in[2]);
            KT_CHECK(kiln_tensor_dtype(y) == d);
            kiln_tensor w = kiln_uniform(KILN_CPU, KILN_F64, KILN_SHAPE(2, 3, 5), -1, 1, 33);
            w = kiln_cast(kiln_cast(w, dts[k]), KILN_F64);
            kiln_grads *g = NULL;
            KT_CHECK(kiln_backward(kiln_sum(kiln_mul(kiln_cast(y, KILN_F64), w)), &g) == KILN_OK);
            for (int i = 0; i < 3; i++) {
                kiln_tensor gi = kiln_grad(g, keep[i]);
                size_t bytes = sizeof(double) * (size_t)kiln_shape_numel(shapes[i]);
                KT_CHECK(kiln_tensor_dtype(gi) == d);
                KT_CHECK(kiln_into_data(kiln_cast(gi, KILN_F64), grads[pass][i], bytes) == KILN_OK);
                kiln_release(keep[i]);
            }
            kiln_grads_free(g);
        }
        for (int i = 0; i < 3; i++)
            for (int64_t j = 0; j < kiln_shape_numel(shapes[i]); j++) KT_NEAR(grads[1][i][j], grads[0][i][j], 3e-2);
    }
}

KT_TEST(bad_input_on_tracked_tensors) {
    kiln_memory_stats base = stats();
    kiln_tensor a = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3, 4));
    kiln_require_grad(a);
    float v[64];
    kiln_tensor y = kiln_matmul(kiln_ref(a), kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(5, 6)));
    KT_CHECK(kiln_into_data(y, v, sizeof v) == KILN_ERR_SHAPE);
    KT_CHECK(strstr(kiln_last_error(), "kiln_matmul") && strstr(kiln_last_error(), "test_autodiff_linalg.c"));
    y = kiln_matmul(kiln_ref(a), kiln_ones(KILN_CPU, KILN_I32, KILN_SHAPE(4, 2)));
    KT_CHECK(kiln_into_data(y, v, sizeof v) == KILN_ERR_DTYPE);
    kiln_tensor w = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 4));
    y = kiln_linear(kiln_ref(a), w, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)));
    KT_CHECK(kiln_into_data(y, v, sizeof v) == KILN_ERR_SHAPE);
    KT_CHECK(strstr(kiln_last_error(), "kiln_linear") && strstr(kiln_last_error(), "bias"));
    kiln_tensor gone = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(4, 2));
    kiln_release(gone);
    y = kiln_matmul(kiln_ref(a), gone);
    KT_CHECK(kiln_into_data(y, v, sizeof v) == KILN_ERR_STALE_HANDLE);
    kiln_release(a);
    KT_CHECK(stats().live_tensors == base.live_tensors);
    KT_CHECK(stats().bytes_in_use == base.bytes_in_use);
}

int main(void) {
    KT_RUN(matmul_every_case);
    KT_RUN(matmul_one_side_tracked);
    KT_RUN(linear_any_leading_dims);
    KT_RUN(half_precision_linear);
    KT_RUN(bad_input_on_tracked_tensors);
    return kt_finish();
}
