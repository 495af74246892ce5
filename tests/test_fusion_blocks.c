/* The fused CPU kernel's block evaluation (src/backend/cpu/fused*.c) and the AVX2 loops it
 * and the unfused kernels share (elementwise_avx2.c): fused chains equal KILN_FUSION=0 bit
 * for bit over sizes around the block (512) and vector (8) lengths, with dense, transposed
 * (gathered), row- and column-broadcast and scalar inputs; reductions with prologues over rows
 * shorter and longer than a block; and the AVX2 loops equal the portable ones (KILN_ISA
 * scalar) on values with NaN, infinities and signed zeros, dense and with a stride-0 side. */
#include <kiln.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/vmath.h"
#include "engine/fusion.h"
#include "kiln_test.h"

#define MAXN (3 * 1029)

/* Inputs of shape [r, c]: x dense, t a transposed view (gathered), row [1, c], col [r, 1]. */
static kiln_tensor chain(int64_t r, int64_t c) {
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(r, c), 11);
    kiln_tensor t = kiln_transpose(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(c, r), 12), 0, 1);
    kiln_tensor row = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(1, c), 13);
    kiln_tensor col = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(r, 1), 14);
    kiln_tensor one = kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(1, 1), 0.25);
    KT_CHECK(kiln_sync() == KILN_OK);
    kiln_tensor a = kiln_add_scalar(kiln_mul_scalar(kiln_ref(x), 0.5), 1.0);
    a = kiln_mul(kiln_sqrt(kiln_abs(a)), kiln_ref(t));
    a = kiln_sub(a, kiln_ref(row));
    a = kiln_div(a, kiln_add_scalar(kiln_abs(kiln_ref(col)), 0.5));
    a = kiln_maximum(a, kiln_mul(kiln_ref(one), kiln_ref(x)));
    a = kiln_minimum(a, kiln_add_scalar(kiln_ref(t), 1.0));
    a = kiln_clamp(kiln_neg(kiln_relu(a)), -1.5, NAN);
    a = kiln_where(kiln_gt(kiln_ref(x), kiln_ref(row)), a, kiln_exp(kiln_ref(col)));
    kiln_release(x), kiln_release(t), kiln_release(row), kiln_release(col), kiln_release(one);
    return a;
}

KT_TEST(fused_blocks_equal_unfused) {
    static float on[MAXN], off[MAXN];
    const int64_t shapes[][2] = {{1, 1}, {1, 7}, {3, 170}, {1, 512}, {1, 513}, {2, 511}, {3, 1029}, {1029, 3}};
    bool was = kiln_fusion_enabled();
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int64_t r = shapes[k][0], c = shapes[k][1];
        size_t bytes = sizeof(float) * (size_t)(r * c);
        kiln_fusion_set_enabled(false);
        KT_CHECK(kiln_into_data(chain(r, c), off, bytes) == KILN_OK);
        kiln_fusion_set_enabled(true);
        kiln__fusion_stats_reset();
        KT_CHECK(kiln_into_data(chain(r, c), on, bytes) == KILN_OK);
        if (kiln_engine_is_async()) KT_CHECK_MSG(kiln__fusion_stats_get().ops_fused >= 10, "[%lld, %lld]", (long long)r, (long long)c);
        KT_CHECK_MSG(memcmp(on, off, bytes) == 0, "[%lld, %lld] differs", (long long)r, (long long)c);
    }
    kiln_fusion_set_enabled(was);
}

/* sum(exp(x * col - row), -1) and max(...): rows of 3 (many per block), 4097, 9000 (one per
 * block) and 1 (a dense [r, 1] result). */
static void reductions(int64_t r, int64_t c, float *sum, float *max) {
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(r, c), 21);
    kiln_tensor row = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(1, c), 22);
    kiln_tensor col = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(r, 1), 23);
    KT_CHECK(kiln_sync() == KILN_OK);
    kiln_tensor e = kiln_exp(kiln_sub(kiln_mul(kiln_ref(x), kiln_ref(col)), kiln_ref(row)));
    KT_CHECK(kiln_into_data(kiln_sum_dims(e, KILN_DIMS(-1), true), sum, sizeof(float) * (size_t)r) == KILN_OK);
    kiln_tensor m = kiln_max_dims(kiln_tanh(kiln_add(x, row)), KILN_DIMS(-1), true);
    KT_CHECK(kiln_into_data(m, max, sizeof(float) * (size_t)r) == KILN_OK);
    kiln_release(col);
}

KT_TEST(fused_reductions_equal_unfused) {
    static float s_on[64], s_off[64], m_on[64], m_off[64];
    const int64_t shapes[][2] = {{61, 3}, {5, 4097}, {3, 9000}, {2, 2}};
    bool was = kiln_fusion_enabled();
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int64_t r = shapes[k][0], c = shapes[k][1];
        kiln_fusion_set_enabled(false);
        reductions(r, c, s_off, m_off);
        kiln_fusion_set_enabled(true);
        kiln__fusion_stats_reset();
        reductions(r, c, s_on, m_on);
        if (kiln_engine_is_async()) KT_CHECK(kiln__fusion_stats_get().reductions >= 1);
        KT_CHECK_MSG(memcmp(s_on, s_off, sizeof(float) * (size_t)r) == 0, "sum [%lld, %lld]", (long long)r, (long long)c);
        KT_CHECK_MSG(memcmp(m_on, m_off, sizeof(float) * (size_t)r) == 0, "max [%lld, %lld]", (long long)r, (long long)c);
    }
    kiln_fusion_set_enabled(was);
}

/* exp(x - log(sum(exp(x), -1))) (DESIGN.md's softmax): one group, the log and x - lse, exp
 * running after the sum as its epilogue, the exp(x) intermediate never written; equal to the
 * unfused ops. */
static kiln_tensor softmax_composed(int64_t r, int64_t c) {
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(r, c), 31);
    KT_CHECK(kiln_sync() == KILN_OK);
    kiln__fusion_stats_reset();
    kiln_tensor lse = kiln_log(kiln_sum_dims(kiln_exp(kiln_ref(x)), KILN_DIMS(-1), true));
    return kiln_exp(kiln_sub(x, lse));
}

KT_TEST(reduction_epilogue_equals_unfused) {
    static float on[3 * 9000], off[3 * 9000];
    const int64_t shapes[][2] = {{61, 3}, {5, 4097}, {3, 9000}};
    bool was = kiln_fusion_enabled();
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int64_t r = shapes[k][0], c = shapes[k][1];
        size_t bytes = sizeof(float) * (size_t)(r * c);
        kiln_fusion_set_enabled(false);
        KT_CHECK(kiln_into_data(softmax_composed(r, c), off, bytes) == KILN_OK);
        kiln_fusion_set_enabled(true);
        KT_CHECK(kiln_into_data(softmax_composed(r, c), on, bytes) == KILN_OK);
        kiln__fusion_stats st = kiln__fusion_stats_get();
        if (kiln_engine_is_async())
            KT_CHECK_MSG(st.groups == 1 && st.ops_fused == 5 && st.stores_elided >= 2,
                         "groups %lld ops %lld elided %lld", (long long)st.groups, (long long)st.ops_fused,
                         (long long)st.stores_elided);
        KT_CHECK_MSG(memcmp(on, off, bytes) == 0, "[%lld, %lld] differs", (long long)r, (long long)c);
    }
    kiln_fusion_set_enabled(was);
}

/* Epilogue ops per row that read inputs of the reduced shape ([r, 1] dense, [1, 1] one
 * value), and the composed softmax's gradient (its backward is a reduction with a per-row
 * epilogue too): equal to the unfused ops, and one group each where the engine is async. */
static void row_inputs(int64_t r, int64_t c, float *y, float *dx) {
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(r, c), 41);
    kiln_tensor col = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(r, 1), 42);
    kiln_tensor one = kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(1, 1), 0.75);
    KT_CHECK(kiln_sync() == KILN_OK);
    kiln__fusion_stats_reset();
    kiln_tensor lse = kiln_log(kiln_sum_dims(kiln_exp(kiln_ref(x)), KILN_DIMS(-1), true));
    kiln_tensor z = kiln_mul(kiln_add(lse, col), one);
    KT_CHECK(kiln_into_data(kiln_exp(kiln_sub(kiln_ref(x), z)), y, sizeof(float) * (size_t)(r * c)) == KILN_OK);
    if (kiln_engine_is_async() && kiln_fusion_enabled()) {
        kiln__fusion_stats st = kiln__fusion_stats_get();
        KT_CHECK_MSG(st.groups == 1 && st.ops_fused == 7 && st.epilogues == 1, "groups %lld ops %lld",
                     (long long)st.groups, (long long)st.ops_fused);
    }
    KT_CHECK(kiln_require_grad(x) == KILN_OK);
    kiln_tensor lse2 = kiln_log(kiln_sum_dims(kiln_exp(kiln_ref(x)), KILN_DIMS(-1), true));
    kiln_tensor sm = kiln_exp(kiln_sub(kiln_ref(x), lse2));
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_sum(kiln_mul_scalar(sm, 3.0)), &g) == KILN_OK);
    KT_CHECK(kiln_into_data(kiln_grad(g, x), dx, sizeof(float) * (size_t)(r * c)) == KILN_OK);
    kiln_grads_free(g);
    kiln_release(x);
}

KT_TEST(epilogue_row_inputs_and_backward_equal_unfused) {
    static float y_on[3 * 4097], y_off[3 * 4097], dx_on[3 * 4097], dx_off[3 * 4097];
    const int64_t shapes[][2] = {{37, 5}, {3, 4097}};
    bool was = kiln_fusion_enabled();
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int64_t r = shapes[k][0], c = shapes[k][1];
        size_t bytes = sizeof(float) * (size_t)(r * c);
        kiln_fusion_set_enabled(false);
        row_inputs(r, c, y_off, dx_off);
        kiln_fusion_set_enabled(true);
        row_inputs(r, c, y_on, dx_on);
        KT_CHECK_MSG(memcmp(y_on, y_off, bytes) == 0, "y [%lld, %lld] differs", (long long)r, (long long)c);
        KT_CHECK_MSG(memcmp(dx_on, dx_off, bytes) == 0, "dx [%lld, %lld] differs", (long long)r, (long long)c);
    }
    kiln_fusion_set_enabled(was);
}

/* A group whose unwritten intermediate gave its memory back, then run op by op (a kernel
 * fails): the ops before the failure still compute from that intermediate, which gets memory
 * again; the error names the failing op. */
KT_TEST(dropped_intermediate_when_run_op_by_op) {
    kiln_tensor x = kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(4, 300), 0.5);
    KT_CHECK(kiln_sync() == KILN_OK);
    kiln_tensor s = kiln_sum_dims(kiln_exp(kiln_ref(x)), KILN_DIMS(-1), true); /* exp(x) dies here */
    kiln_tensor kept = kiln_ref(s);
    kiln__debug_fail_next_kernel("kiln_log");
    int line = __LINE__ + 1;
    kiln_tensor y = kiln_sub(x, kiln_log(s));
    float v[4 * 300], sum[4];
    KT_CHECK(kiln_into_data(y, v, sizeof v) == KILN_ERR_KERNEL);
    KT_EXPECT_ERROR(KILN_ERR_KERNEL, "kiln_log", line);
    KT_CHECK(kiln_sync() == KILN_OK);
    KT_CHECK(kiln_into_data(kept, sum, sizeof sum) == KILN_OK);
    for (int i = 0; i < 4; i++) KT_NEAR(sum[i], 300.0 * exp(0.5), 1e-3);
}

/* Values that tell the loops' rules apart: NaN on either side, infinities, signed zeros. */
static void special_values(float *v, int n, unsigned seed) {
    static const float pick[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.5f, -3.25f, INFINITY, -INFINITY, NAN, 1e-40f, 7.0f};
    srand(seed);
    for (int i = 0; i < n; i++) v[i] = pick[rand() % (int)(sizeof pick / sizeof pick[0])];
}

typedef kiln_tensor (*binary_fn)(kiln_tensor, kiln_tensor);

static void run_ops(int n, const float *a, const float *b, float *out /* [13][n] */) {
    binary_fn bin[] = {kiln_add, kiln_sub, kiln_mul, kiln_div, kiln_maximum, kiln_minimum};
    kiln_tensor x = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(n), a);
    kiln_tensor y = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(n), b);
    kiln_tensor s = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(1), b); /* broadcast: stride 0 */
    size_t bytes = sizeof(float) * (size_t)n;
    for (int k = 0; k < 6; k++) {
        KT_CHECK(kiln_into_data(bin[k](kiln_ref(x), kiln_ref(y)), out + (size_t)k * (size_t)n, bytes) == KILN_OK);
        KT_CHECK(kiln_into_data(bin[k](kiln_ref(s), kiln_ref(x)), out + (size_t)(6 + k) * (size_t)n, bytes) == KILN_OK);
    }
    kiln_tensor u = kiln_clamp(kiln_relu(kiln_abs(kiln_neg(kiln_ref(x)))), 0.5, NAN);
    KT_CHECK(kiln_into_data(kiln_add(u, kiln_clamp(kiln_neg(kiln_ref(y)), -2.0, 3.0)), out + 12 * (size_t)n, bytes) ==
             KILN_OK);
    kiln_release(x), kiln_release(y), kiln_release(s);
}

/* Bit-identical, except that which NaN a sum of two NaNs keeps (sign, payload) is the
 * compiler's choice for the portable loop (clang swaps a commutative add's operands): IEEE 754
 * leaves it open, and no comparison or arithmetic can tell those NaNs apart. */
static bool same_bits_or_both_nan(const float *x, const float *y, int n) {
    for (int i = 0; i < n; i++)
        if (memcmp(&x[i], &y[i], sizeof(float)) != 0 && !(isnan(x[i]) && isnan(y[i]))) return false;
    return true;
}

KT_TEST(avx2_loops_equal_portable) {
    enum { N = 203 }; /* a body of vectors and a tail */
    static float a[N], b[N], fast[13 * N], portable[13 * N];
    if (strcmp(kiln__vmath_isa(), "scalar") == 0) return; /* no AVX2 here: one path only */
    for (unsigned seed = 1; seed <= 4; seed++) {
        special_values(a, N, seed);
        special_values(b, N, seed + 100);
        for (int n = 1; n <= N; n += 101) { /* 1, 102, 203 */
            run_ops(n, a, b, fast);
            KT_CHECK(kiln__vmath_force_isa("scalar") == 0);
            run_ops(n, a, b, portable);
            KT_CHECK(kiln__vmath_force_isa(NULL) == 0);
            KT_CHECK_MSG(same_bits_or_both_nan(fast, portable, 13 * n), "seed %u n %d", seed, n);
        }
    }
}

int main(void) {
    kt_mem_begin();
    /* small tensors on an idle stream would run at dispatch, each alone: these tests are of groups */
    kiln__fusion_set_fuse_tiny(1);
    KT_RUN(fused_blocks_equal_unfused);
    KT_RUN(fused_reductions_equal_unfused);
    KT_RUN(avx2_loops_equal_portable);
    KT_RUN(reduction_epilogue_equals_unfused);
    KT_RUN(dropped_intermediate_when_run_op_by_op);
    KT_RUN(epilogue_row_inputs_and_backward_equal_unfused);
    KT_MEM_CHECK();
    return kt_finish();
}
