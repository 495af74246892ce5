/* The fused CPU kernel's fast path for groups that end in a reduction (src/backend/cpu/
 * fused_vec.c, run_rows): the REDUCE's argument and the epilogue computed chunk by chunk with
 * vmath's own exp, the reduction and the per-row nodes on the block path. Against
 * KILN_FUSION=0, bit for bit (the same reduction kernel sums the same values): the composed
 * softmax and its gradient, a max-subtracted softmax (a reduction of a loaded input, then a
 * second group), with NaN, infinities and overflowing rows, rows that are not a whole number
 * of vectors, blocks and thread ranges that end mid-way, on AVX-512 and on AVX2 (KILN_ISA);
 * the softmax also against a double-precision reference. Streaming stores are forced on (the
 * path is taken only then) and off (the block path). */
#include <kiln.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/fused-impl.h"
#include "backend/cpu/vmath.h"
#include "engine/fusion.h"
#include "kiln_test.h"

static const int64_t shapes[][2] = {
    {37, 64},   /* the shortest row the path takes */
    {5, 100},   /* a row is 6 AVX-512 vectors and 4 floats */
    {3, 2053},  /* 16 chunks and a tail */
    {129, 2048}, /* 33 blocks of 4 rows, the last of one: split over the threads */
    {7, 4097},
};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))
#define MAX_ELEMS (129 * 2048)

/* Normal values, and in some rows NaN, +-inf, or a value whose exp overflows. */
static void fill(float *v, int64_t r, int64_t c, unsigned seed) {
    static const float special[] = {NAN, INFINITY, -INFINITY, 100.0f, -0.0f, 1e-40f};
    srand(seed);
    for (int64_t i = 0; i < r * c; i++) v[i] = (float)(rand() % 4001 - 2000) / 256.0f;
    for (int64_t i = 0; i < r; i += 3) v[i * c + (rand() % c)] = special[(i / 3) % 6];
}

static kiln_tensor softmax_composed(kiln_tensor x) {
    kiln_tensor lse = kiln_log(kiln_sum_dims(kiln_exp(kiln_ref(x)), KILN_DIMS(-1), true));
    return kiln_exp(kiln_sub(x, lse));
}

/* y = softmax(x) and dx = d sum(3 y) / dx, fused or not. */
static void softmax_and_grad(const float *v, int64_t r, int64_t c, bool fused, float *y, float *dx) {
    size_t bytes = sizeof(float) * (size_t)(r * c);
    kiln_fusion_set_enabled(fused);
    kiln_tensor x = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(r, c), v);
    KT_CHECK(kiln_sync() == KILN_OK);
    KT_CHECK(kiln_into_data(softmax_composed(kiln_ref(x)), y, bytes) == KILN_OK);
    KT_CHECK(kiln_require_grad(x) == KILN_OK);
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_sum(kiln_mul_scalar(softmax_composed(kiln_ref(x)), 3.0)), &g) == KILN_OK);
    KT_CHECK(kiln_into_data(kiln_grad(g, x), dx, bytes) == KILN_OK);
    kiln_grads_free(g);
    kiln_release(x);
}

/* exp(x - max(x)) / sum(exp(x - max(x))): the max's argument is the input itself. */
static void softmax_max(const float *v, int64_t r, int64_t c, bool fused, float *y) {
    kiln_fusion_set_enabled(fused);
    kiln_tensor x = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(r, c), v);
    KT_CHECK(kiln_sync() == KILN_OK);
    kiln_tensor e = kiln_exp(kiln_sub(kiln_ref(x), kiln_max_dims(kiln_ref(x), KILN_DIMS(-1), true)));
    kiln_tensor s = kiln_sum_dims(kiln_ref(e), KILN_DIMS(-1), true);
    KT_CHECK(kiln_into_data(kiln_div(e, s), y, sizeof(float) * (size_t)(r * c)) == KILN_OK);
    kiln_release(x);
}

/* Rows with no NaN or infinity against softmax in double: a few float roundings of exp's
 * argument x - lse, scaled by its size. */
static void check_reference(const float *v, const float *y, int64_t r, int64_t c) {
    int bad = 0;
    for (int64_t i = 0; i < r; i++) {
        const float *x = v + i * c;
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < c; j++) m = x[j] > m ? x[j] : m;
        for (int64_t j = 0; j < c; j++) s += exp((double)x[j] - m);
        if (!isfinite(m) || !isfinite(s) || m > 80) continue;
        for (int64_t j = 0; j < c; j++) {
            double want = exp((double)x[j] - m) / s, arg = fabs((double)x[j] - m - log(s)) + fabs(m + log(s));
            bad += fabs(y[i * c + j] - want) > want * (4.0 + arg) * 0x1p-23 + 1e-44;
        }
    }
    KT_CHECK_MSG(bad == 0, "[%lld, %lld]: %d elements off the reference", (long long)r, (long long)c, bad);
}

static void compare_all(const char *isa, bool expect_fast) {
    float *buf = malloc(sizeof(float) * MAX_ELEMS * 5);
    KT_CHECK(buf != NULL);
    if (!buf) return;
    float *v = buf, *on = v + MAX_ELEMS, *off = on + MAX_ELEMS, *d_on = off + MAX_ELEMS, *d_off = d_on + MAX_ELEMS;
    for (int k = 0; k < N_SHAPES; k++) {
        int64_t r = shapes[k][0], c = shapes[k][1];
        size_t bytes = sizeof(float) * (size_t)(r * c);
        fill(v, r, c, (unsigned)k + 1);
        softmax_and_grad(v, r, c, false, off, d_off);
        int64_t before = atomic_load(&kiln__fused_rows_runs);
        softmax_and_grad(v, r, c, true, on, d_on);
        if (kiln_engine_is_async()) /* forward, backward: one group each */
            KT_CHECK_MSG((atomic_load(&kiln__fused_rows_runs) - before >= 2) == expect_fast, "%s [%lld, %lld]: path",
                         isa, (long long)r, (long long)c);
        KT_CHECK_MSG(memcmp(on, off, bytes) == 0, "%s [%lld, %lld]: softmax differs", isa, (long long)r, (long long)c);
        KT_CHECK_MSG(memcmp(d_on, d_off, bytes) == 0, "%s [%lld, %lld]: gradient differs", isa, (long long)r,
                     (long long)c);
        check_reference(v, on, r, c);
        softmax_max(v, r, c, false, off);
        softmax_max(v, r, c, true, on);
        KT_CHECK_MSG(memcmp(on, off, bytes) == 0, "%s [%lld, %lld]: max softmax differs", isa, (long long)r,
                     (long long)c);
    }
    free(buf);
}

/* Not under KILN_ISA=scalar: no fast path there. */
KT_TEST(rows_equal_unfused) {
    if (strcmp(kiln__vmath_isa(), "scalar") == 0) return;
    bool was = kiln_fusion_enabled();
    int64_t stream = atomic_load(&kiln__fused_stream_bytes);
    atomic_store(&kiln__fused_stream_bytes, (int64_t)1024); /* every epilogue streamed: the path taken */
    compare_all(kiln__vmath_isa(), true);
    if (strcmp(kiln__vmath_isa(), "avx512") == 0) { /* the AVX2 version too */
        KT_CHECK(kiln__vmath_force_isa("avx2") == 0);
        compare_all("avx2", true);
        KT_CHECK(kiln__vmath_force_isa(NULL) == 0);
    }
    atomic_store(&kiln__fused_stream_bytes, (int64_t)1 << 40); /* none streamed: the block path */
    compare_all(kiln__vmath_isa(), false);
    atomic_store(&kiln__fused_stream_bytes, stream);
    kiln_fusion_set_enabled(was);
}

/* e = exp(x) may take x's memory (no other handle to x); e kept, then e / sum(e): the fast
 * path would compute e again from x after writing e, so the group must not take it. */
static void kept_over_input(const float *v, int64_t r, int64_t c, bool fused, float *y, float *kept) {
    size_t bytes = sizeof(float) * (size_t)(r * c);
    kiln_fusion_set_enabled(fused);
    kiln_tensor x = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(r, c), v);
    KT_CHECK(kiln_sync() == KILN_OK);
    kiln_tensor e = kiln_exp(x);
    kiln_tensor k = kiln_ref(e);
    KT_CHECK(kiln_into_data(kiln_div(e, kiln_sum_dims(kiln_ref(e), KILN_DIMS(-1), true)), y, bytes) == KILN_OK);
    KT_CHECK(kiln_into_data(k, kept, bytes) == KILN_OK);
}

KT_TEST(rows_kept_value_over_its_input) {
    enum { R = 9, C = 300 };
    static float v[R * C], y_on[R * C], y_off[R * C], k_on[R * C], k_off[R * C];
    bool was = kiln_fusion_enabled();
    int64_t stream = atomic_load(&kiln__fused_stream_bytes);
    atomic_store(&kiln__fused_stream_bytes, (int64_t)1024);
    fill(v, R, C, 99);
    kept_over_input(v, R, C, false, y_off, k_off);
    kept_over_input(v, R, C, true, y_on, k_on);
    KT_CHECK_MSG(memcmp(k_on, k_off, sizeof k_on) == 0, "kept exp(x) differs");
    KT_CHECK_MSG(memcmp(y_on, y_off, sizeof y_on) == 0, "quotients differ");
    atomic_store(&kiln__fused_stream_bytes, stream);
    kiln_fusion_set_enabled(was);
}

int main(void) {
    kt_mem_begin();
    /* small tensors on an idle stream would run at dispatch, each alone: these tests are of groups */
    kiln__fusion_set_fuse_tiny(1);
    KT_RUN(rows_equal_unfused);
    KT_RUN(rows_kept_value_over_its_input);
    return kt_finish();
}
