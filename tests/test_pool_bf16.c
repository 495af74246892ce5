/* Pooling of bf16 tensors on the CPU's own bf16 kernels (backend/cpu/pool.c), with no casts
 * around them: values and gradients bit for bit those of the f32 kernels between casts (the
 * route the op layer took before) for max, average and adaptive pooling over overlapping,
 * padded and rectangular windows, dense, permuted and column-sliced inputs, on data full of
 * ties, NaNs, infinities and -0; the max pool's gradient against central finite differences of
 * its own bf16 forward (exact: the data are whole numbers a step apart, the step a bf16 value);
 * an autocast conv -> relu -> max pool block whose pooling stays bf16, its gradients against
 * f32 within bf16 tolerance; bad bf16 input; no leaks. */
#include <math.h>
#include <string.h>

#include "backend/cpu/pool.h"
#include "ew_util.h"
#include "kiln_test.h"

typedef enum { P_MAX, P_AVG, P_ADAPTIVE } pool_kind;

typedef struct {
    pool_kind kind;
    int kh, kw, sh, sw, ph, pw; /* adaptive: kh, kw are the output size */
} pool_case;

typedef enum { L_DENSE, L_PERMUTED, L_SLICED } layout;

static const int64_t N = 2, C = 3, H = 9, W = 37; /* 2x2: two blocks of 8 outputs a row and a tail */

static kiln_tensor pool_of(const pool_case *p, kiln_tensor x) {
    switch (p->kind) {
    case P_MAX: return kiln_max_pool2d(x, p->kh, p->kw, p->sh, p->sw, p->ph, p->pw);
    case P_AVG: return kiln_avg_pool2d(x, p->kh, p->kw, p->sh, p->sw, p->ph, p->pw);
    default: return kiln_adaptive_avg_pool2d(x, p->kh, p->kw);
    }
}

static uint64_t lcg = 7;

/* bf16 bits: mostly small whole numbers (ties), some NaN, +-inf and -0, some fractions. */
static uint16_t next_bf16(void) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    unsigned r = (unsigned)(lcg >> 33) % 64;
    if (r == 4) return (uint16_t)(lcg >> 62 ? 0x7f81 : 0xffa0); /* signaling NaNs (the casts make them quiet) */
    float v = r == 0 ? NAN : r == 1 ? INFINITY : r == 2 ? -INFINITY : r == 3 ? -0.0f
              : r < 40 ? (float)((int)(r % 7) - 3) : (float)((int)(lcg >> 40) % 2000 - 1000) / 64.0f;
    return kiln__f32_to_bf16(v);
}

/* The leaf's stored shape for a layout, its element count, and x = the [N, C, H, W] view of it. */
static kiln_shape stored_shape(layout l) {
    return l == L_PERMUTED ? KILN_SHAPE(N, H, W, C) : l == L_SLICED ? KILN_SHAPE(N, C, H, W + 3) : KILN_SHAPE(N, C, H, W);
}

static kiln_tensor view_of(layout l, kiln_tensor leaf) {
    if (l == L_PERMUTED) return kiln_permute(leaf, KILN_DIMS(0, 3, 1, 2));
    if (l == L_SLICED) return kiln_slice(leaf, 3, 2, W + 2, 1);
    return leaf;
}

/* y = pool(x) and d sum(y * seed) / d leaf, as bf16 bits, pooled in bf16 (through_f32 false)
 * or between casts to f32 and back; *ny the output's element count. */
static void run(const pool_case *p, layout l, bool through_f32, const uint16_t *data, uint16_t *y, uint16_t *dx,
                int64_t *ny) {
    kiln_shape ss = stored_shape(l);
    kiln_tensor leaf = kiln_from_data(KILN_CPU, KILN_BF16, ss, data);
    KT_CHECK(kiln_require_grad(leaf) == KILN_OK);
    kiln_tensor x = view_of(l, kiln_ref(leaf));
    if (through_f32) x = kiln_cast(x, KILN_F32);
    kiln_tensor out = pool_of(p, x);
    if (through_f32) out = kiln_cast(out, KILN_BF16);
    kiln_shape os = kiln_tensor_shape(out);
    KT_CHECK(kiln_tensor_dtype(out) == KILN_BF16);
    *ny = kiln_shape_numel(os);
    uint16_t *seed = malloc(sizeof(uint16_t) * (size_t)(*ny + 1));
    for (int64_t i = 0; i < *ny; i++) seed[i] = kiln__f32_to_bf16((float)(i % 13 - 6) * 0.375f);
    KT_CHECK(kiln_into_data(kiln_ref(out), y, sizeof(uint16_t) * (size_t)*ny) == KILN_OK);
    kiln_grads *g = NULL;
    kiln_status st = kiln_backward_seed(out, kiln_from_data(KILN_CPU, KILN_BF16, os, seed), &g);
    KT_CHECK_MSG(st == KILN_OK, "%s", kiln_last_error());
    KT_CHECK(kiln_into_data(kiln_grad(g, leaf), dx, sizeof(uint16_t) * (size_t)kiln_shape_numel(ss)) == KILN_OK);
    kiln_grads_free(g);
    kiln_release(leaf);
    free(seed);
}

static const pool_case cases[] = {
    {P_MAX, 2, 2, 2, 2, 0, 0}, /* the CNN's pool (the AVX2 kernel on the widened plane) */
    {P_MAX, 3, 3, 1, 1, 1, 1}, /* overlapping: the backward sums */
    {P_MAX, 3, 2, 2, 1, 1, 1}, {P_AVG, 2, 2, 2, 2, 0, 0}, {P_AVG, 3, 3, 2, 2, 1, 1},
    {P_AVG, 4, 3, 1, 2, 2, 1}, {P_ADAPTIVE, 4, 5, 0, 0, 0, 0}, {P_ADAPTIVE, 1, 1, 0, 0, 0, 0},
};
static const char *const kind_names[] = {"max", "avg", "adaptive"};

KT_TEST(bf16_kernels_match_the_cast_route) {
    ew_mark mark = ew_mark_now();
    int64_t total = N * C * H * (W + 3), ny = 0, ny_ref = 0;
    uint16_t *data = malloc(sizeof(uint16_t) * (size_t)total);
    uint16_t *y = malloc(sizeof(uint16_t) * (size_t)total), *y_ref = malloc(sizeof(uint16_t) * (size_t)total);
    uint16_t *dx = malloc(sizeof(uint16_t) * (size_t)total), *dx_ref = malloc(sizeof(uint16_t) * (size_t)total);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (layout l = L_DENSE; l <= L_SLICED; l++) {
            for (int64_t k = 0; k < total; k++) data[k] = next_bf16();
            int64_t nx = kiln_shape_numel(stored_shape(l));
            long before = kiln__cpu_pool_bf16_calls();
            run(&cases[i], l, false, data, y, dx, &ny);
            long direct = kiln__cpu_pool_bf16_calls() - before;
            run(&cases[i], l, true, data, y_ref, dx_ref, &ny_ref);
            long cast = kiln__cpu_pool_bf16_calls() - before - direct;
            KT_CHECK_MSG(direct == 2 && cast == 0, "%s case %zu layout %d: %ld bf16 kernel calls direct, %ld cast",
                         kind_names[cases[i].kind], i, (int)l, direct, cast);
            KT_CHECK(ny == ny_ref);
            KT_CHECK_MSG(memcmp(y, y_ref, sizeof(uint16_t) * (size_t)ny) == 0, "%s case %zu layout %d: values differ",
                         kind_names[cases[i].kind], i, (int)l);
            KT_CHECK_MSG(memcmp(dx, dx_ref, sizeof(uint16_t) * (size_t)nx) == 0,
                         "%s case %zu layout %d: gradients differ", kind_names[cases[i].kind], i, (int)l);
        }
    free(data), free(y), free(y_ref), free(dx), free(dx_ref);
    EW_NO_LEAKS(mark);
}

/* sum(max_pool(x) * seed) in double for bf16 x holding v (whole numbers and half steps). */
static double pooled_loss(const pool_case *p, const double *v, const double *seed, int64_t ny) {
    kiln_tensor y = kiln_cast(pool_of(p, ew_tensor(KILN_BF16, KILN_SHAPE(N, C, H, W), v)), KILN_F64);
    double *got = ew_read(y, KILN_F64, ny), loss = 0;
    for (int64_t i = 0; got && i < ny; i++) loss += got[i] * seed[i];
    free(got);
    return loss;
}

/* x holds whole numbers in 1..127 (bf16-exact, as is any x +- 1/2 there), distinct within every
 * window below (steps of 37 mod 127 along a row, 99 down a column), so a step of 1/2 never
 * changes a window's order and the central difference is the gradient. */
KT_TEST(max_pool_bf16_finite_differences) {
    ew_mark mark = ew_mark_now();
    static const pool_case maxes[] = {{P_MAX, 2, 2, 2, 2, 0, 0}, {P_MAX, 3, 3, 1, 1, 1, 1}, {P_MAX, 3, 2, 2, 1, 1, 1}};
    int64_t nx = N * C * H * W, plane = H * W;
    double *v = malloc(sizeof(double) * (size_t)nx), *seed = malloc(sizeof(double) * (size_t)nx);
    for (int64_t pl = 0; pl < N * C; pl++)
        for (int64_t i = 0; i < plane; i++) v[pl * plane + i] = (double)((i * 37 + pl * 11) % 127 + 1);
    for (size_t c = 0; c < sizeof maxes / sizeof maxes[0]; c++) {
        kiln_tensor leaf = ew_tensor(KILN_BF16, KILN_SHAPE(N, C, H, W), v);
        kiln_require_grad(leaf);
        kiln_tensor y = pool_of(&maxes[c], kiln_ref(leaf));
        int64_t ny = kiln_shape_numel(kiln_tensor_shape(y));
        for (int64_t i = 0; i < ny; i++) seed[i] = (double)(i % 7 - 3);
        kiln_grads *g = NULL;
        KT_CHECK(kiln_backward_seed(y, ew_tensor(KILN_BF16, kiln_tensor_shape(y), seed), &g) == KILN_OK);
        double *grad = ew_read(kiln_grad(g, leaf), KILN_BF16, nx);
        kiln_grads_free(g);
        kiln_release(leaf);
        int bad = 0;
        for (int64_t i = 0; grad && i < nx; i += 5) { /* every fifth input: all planes, rows and columns */
            double keep = v[i];
            v[i] = keep + 0.5;
            double up = pooled_loss(&maxes[c], v, seed, ny);
            v[i] = keep - 0.5;
            double down = pooled_loss(&maxes[c], v, seed, ny);
            v[i] = keep;
            double fd = up - down; /* over a step of 2 x 1/2 */
            if (fd != grad[i] && bad++ < 3)
                fprintf(stderr, "  max %dx%d s%d,%d: d/dx[%lld] = %g, finite difference %g\n", maxes[c].kh,
                        maxes[c].kw, maxes[c].sh, maxes[c].sw, (long long)i, grad[i], fd);
        }
        KT_CHECK(grad && bad == 0);
        free(grad);
    }
    free(v), free(seed);
    EW_NO_LEAKS(mark);
}

/* sum(max_pool(relu(conv2d(x, w))) * seed) and its gradients (of x and w, f32 leaves), under bf16
 * autocast or not. */
static void cnn_block(bool autocast, const double *xv, const double *wv, const double *seedv, double **dx,
                      double **dw, kiln_dtype *pooled_dtype) {
    kiln_tensor x = ew_tensor(KILN_F32, KILN_SHAPE(4, 8, 10, 10), xv), w = ew_tensor(KILN_F32, KILN_SHAPE(16, 8, 3, 3), wv);
    kiln_require_grad(x), kiln_require_grad(w);
    if (autocast) KT_CHECK(kiln_autocast_begin(KILN_BF16) == KILN_OK);
    kiln_tensor y = kiln_max_pool2d(kiln_relu(kiln_conv2d(kiln_ref(x), kiln_ref(w), KILN_NONE, 1, 1, 1, 1, 1, 1, 1)), 2,
                                    2, 2, 2, 0, 0);
    if (autocast) KT_CHECK(kiln_autocast_end() == KILN_OK);
    *pooled_dtype = kiln_tensor_dtype(y);
    kiln_tensor seed = kiln_cast(ew_tensor(KILN_F32, KILN_SHAPE(4, 16, 5, 5), seedv), kiln_tensor_dtype(y));
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward_seed(y, seed, &g) == KILN_OK);
    *dx = ew_read(kiln_grad(g, x), KILN_F32, 4 * 8 * 10 * 10);
    *dw = ew_read(kiln_grad(g, w), KILN_F32, 16 * 8 * 3 * 3);
    kiln_grads_free(g);
    kiln_release(x), kiln_release(w);
}

/* Largest |got - want| over the largest |want|. */
static double relative_error(const double *got, const double *want, int64_t n) {
    double err = 0, scale = 0;
    for (int64_t i = 0; i < n; i++) {
        err = fmax(err, fabs(got[i] - want[i]));
        scale = fmax(scale, fabs(want[i]));
    }
    return scale > 0 ? err / scale : err;
}

KT_TEST(autocast_cnn_block_pools_in_bf16) {
    ew_mark mark = ew_mark_now();
    static double xv[3200], wv[1152], seedv[1600];
    ew_values(xv, 3200, KILN_BF16, -1, 1);
    ew_values(wv, 1152, KILN_BF16, -0.5, 0.5);
    ew_values(seedv, 1600, KILN_BF16, -1, 1);
    double *dx_ref, *dw_ref, *dx, *dw;
    kiln_dtype ref_dtype, dtype;
    cnn_block(false, xv, wv, seedv, &dx_ref, &dw_ref, &ref_dtype);
    long before = kiln__cpu_pool_bf16_calls();
    cnn_block(true, xv, wv, seedv, &dx, &dw, &dtype);
    long calls = kiln__cpu_pool_bf16_calls() - before;
    KT_CHECK(ref_dtype == KILN_F32 && dtype == KILN_BF16);
    KT_CHECK_MSG(calls == 2, "%ld bf16 pooling calls (forward and backward expected)", calls);
    /* bf16 operands of a 72-term conv and a bf16 conv output: a few bf16 roundings */
    if (dx && dx_ref) KT_CHECK_MSG(relative_error(dx, dx_ref, 3200) < 3e-2, "dx off by %g", relative_error(dx, dx_ref, 3200));
    if (dw && dw_ref) KT_CHECK_MSG(relative_error(dw, dw_ref, 1152) < 3e-2, "dw off by %g", relative_error(dw, dw_ref, 1152));
    free(dx_ref), free(dw_ref), free(dx), free(dw);
    EW_NO_LEAKS(mark);
}

KT_TEST(bad_bf16_input) {
    ew_mark mark = ew_mark_now();
    kiln_tensor x = kiln_zeros(KILN_CPU, KILN_BF16, KILN_SHAPE(2, 3, 6, 6));
    int line;
    kiln_tensor r = kiln_max_pool2d(kiln_ref(x), 9, 9, 1, 1, 1, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_max_pool2d", line);
    r = kiln_avg_pool2d(kiln_ref(x), 2, 2, 2, 2, 2, 0); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_avg_pool2d", line);
    r = kiln_adaptive_avg_pool2d(kiln_reshape(kiln_ref(x), KILN_SHAPE(6, 6, 6)), 2, 2); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_adaptive_avg_pool2d", line);
    kiln_release(x);
    EW_NO_LEAKS(mark);
}

int main(void) {
    KT_RUN(bf16_kernels_match_the_cast_route);
    KT_RUN(max_pool_bf16_finite_differences);
    KT_RUN(autocast_cnn_block_pools_in_bf16);
    KT_RUN(bad_bf16_input);
    return kt_finish();
}
