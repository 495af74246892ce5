/* The small-M product against a transposed weight (src/backend/cpu/gemm_small.c) that linear
 * layers over at most 32 rows use instead of BLAS: the kernel itself over every block edge
 * (m around its 4-row blocks and the 1-3 rows after them, n around its 3- and 6-column blocks
 * and the next block it prefetches, k around the 8- and 16-lane vectors, column sub-ranges,
 * padded leading dims, accumulate or not) against a double reference, then kiln_linear through
 * the MATMUL kernel on both sides of the 32-row switch, with and without bias, against the same
 * reference. */
#include "backend/cpu/gemm_small.h"
#include "ew_util.h"

/* C[i, j] (+)= sum_p A[i, p] W[j, p] in double */
static void reference(int64_t m, int64_t n0, int64_t n1, int64_t k, const float *a, int64_t lda, const float *w,
                      int64_t ldw, bool accumulate, const float *c0, double *c, int64_t ldc) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = n0; j < n1; j++) {
            double s = accumulate ? c0[i * ldc + j] : 0;
            for (int64_t p = 0; p < k; p++) s += (double)a[i * lda + p] * w[j * ldw + p];
            c[i * ldc + j] = s;
        }
}

static void fill(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)ew_uniform(-1, 1);
}

static void kernel_cases(int isa) {
    kiln__gemm_small_limit_isa(isa);
    const int64_t ms[] = {1, 2, 3, 4, 5, 8, 16, 17, 30, 32}, ns[] = {1, 2, 3, 5, 6, 7, 13, 50}, ks[] = {1, 7, 8, 9, 15, 16, 17, 40, 384};
    for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
        for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
            for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
                for (int acc = 0; acc < 2; acc++) {
                    int64_t m = ms[mi], n = ns[ni], k = ks[ki], lda = k + 3, ldw = k + 1, ldc = n + 2;
                    int64_t n0 = n > 4 ? 1 : 0, n1 = n > 4 ? n - 1 : n; /* a column range, as a pool task gets */
                    float *a = malloc(sizeof(float) * (size_t)(m * lda)), *w = malloc(sizeof(float) * (size_t)(n * ldw));
                    float *c = malloc(sizeof(float) * (size_t)(m * ldc)), *c0 = malloc(sizeof(float) * (size_t)(m * ldc));
                    double *want = malloc(sizeof(double) * (size_t)(m * ldc));
                    fill(a, m * lda), fill(w, n * ldw), fill(c0, m * ldc);
                    memcpy(c, c0, sizeof(float) * (size_t)(m * ldc));
                    reference(m, n0, n1, k, a, lda, w, ldw, acc, c0, want, ldc);
                    kiln__gemm_small_nt_f32(m, n0, n1, k, a, lda, w, ldw, acc, c, ldc);
                    double worst = 0;
                    bool outside_kept = true;
                    for (int64_t i = 0; i < m; i++)
                        for (int64_t j = 0; j < ldc; j++) {
                            if (j >= n0 && j < n1)
                                worst = fmax(worst, fabs(c[i * ldc + j] - want[i * ldc + j]));
                            else
                                outside_kept = outside_kept && c[i * ldc + j] == c0[i * ldc + j];
                        }
                    /* f32 products summed over k terms of size <= 1 */
                    KT_CHECK_MSG(worst <= 1e-6 * (double)(k + 2), "isa %d m %lld n %lld k %lld acc %d: off by %g", isa, (long long)m,
                                 (long long)n, (long long)k, acc, worst);
                    KT_CHECK_MSG(outside_kept, "m %lld n %lld k %lld: wrote outside columns [%lld, %lld)", (long long)m,
                                 (long long)n, (long long)k, (long long)n0, (long long)n1);
                    free(a), free(w), free(c), free(c0), free(want);
                }
    kiln__gemm_small_limit_isa(3);
}

/* each path the CPU can run: plain C, AVX2, AVX-512 (the same as AVX2 where it has none) */
KT_TEST(kernel_matches_reference) {
    for (int isa = 1; isa <= 3; isa++) kernel_cases(isa);
}

/* x [rows, in] -> linear with weight [out, in] and an optional bias, against double */
static void check_linear(int64_t rows, int64_t in, int64_t out, bool bias, bool three_d) {
    double *x = malloc(sizeof(double) * (size_t)(rows * in)), *w = malloc(sizeof(double) * (size_t)(out * in));
    double *b = malloc(sizeof(double) * (size_t)out), *want = malloc(sizeof(double) * (size_t)(rows * out));
    ew_values(x, rows * in, KILN_F32, -1, 1);
    ew_values(w, out * in, KILN_F32, -1, 1);
    ew_values(b, out, KILN_F32, -1, 1);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < out; j++) {
            double s = bias ? b[j] : 0;
            for (int64_t p = 0; p < in; p++) s += x[i * in + p] * w[j * in + p];
            want[i * out + j] = s;
        }
    kiln_shape xs = three_d ? KILN_SHAPE(2, rows / 2, in) : KILN_SHAPE(rows, in);
    kiln_tensor y = kiln_linear(ew_tensor(KILN_F32, xs, x), ew_tensor(KILN_F32, KILN_SHAPE(out, in), w),
                                bias ? ew_tensor(KILN_F32, KILN_SHAPE(out), b) : KILN_NONE);
    double *got = ew_read(y, KILN_F32, rows * out);
    char label[96];
    snprintf(label, sizeof label, "linear [%lld, %lld] -> %lld%s%s", (long long)rows, (long long)in, (long long)out,
             bias ? " bias" : "", three_d ? " 3-d" : "");
    if (got) EW_EXPECT_CLOSE(label, got, want, rows * out, 1e-5, 1e-6 * (double)(in + 2));
    free(got), free(x), free(w), free(b), free(want);
}

KT_TEST(linear_small_rows_match_reference) {
    kt_mem_begin();
    const int64_t rows[] = {1, 5, 16, 32, 33, 48};
    for (size_t r = 0; r < sizeof rows / sizeof *rows; r++)
        for (int bias = 0; bias < 2; bias++) {
            check_linear(rows[r], 384, 1152, bias, false);
            check_linear(rows[r], 37, 13, bias, false);
        }
    check_linear(16, 1536, 384, true, true);
    check_linear(2, 9, 7, true, true);
    KT_MEM_CHECK();
}

/* The next block's prefetches: every line once over all passes, the same share at each step,
 * so every pass gets its part of the stream (the first pass once took all of it, which left
 * the stream idle for the other three quarters of a 16-row block's arithmetic) */
KT_TEST(prefetch_spread_over_passes) {
    const int64_t lines_list[] = {1, 5, 144, 145, 576}, steps_per_pass[] = {1, 3, 24, 96}, passes_list[] = {1, 2, 4, 8};
    for (size_t li = 0; li < sizeof lines_list / sizeof *lines_list; li++)
        for (size_t si = 0; si < sizeof steps_per_pass / sizeof *steps_per_pass; si++)
            for (size_t pi = 0; pi < sizeof passes_list / sizeof *passes_list; pi++) {
                int64_t lines = lines_list[li], sp = steps_per_pass[si], passes = passes_list[pi], covered = 0;
                for (int64_t pass = 0; pass < passes; pass++) {
                    int64_t first = -1, count = -1;
                    int64_t per = kiln__gemm_small_prefetch_share(lines, passes * sp, pass * sp, &first, &count);
                    int64_t issued = per * sp < count ? per * sp : count; /* what this pass prefetches */
                    KT_CHECK_MSG(first == covered, "lines %lld steps %lld pass %lld: starts at %lld, not %lld",
                                 (long long)lines, (long long)sp, (long long)pass, (long long)first, (long long)covered);
                    KT_CHECK_MSG(per * passes * sp >= lines && (per - 1) * passes * sp < lines,
                                 "lines %lld over %lld steps: %lld a step", (long long)lines, (long long)(passes * sp),
                                 (long long)per);
                    KT_CHECK_MSG(issued <= per * sp, "pass %lld issues %lld", (long long)pass, (long long)issued);
                    covered += issued;
                }
                KT_CHECK_MSG(covered == lines, "lines %lld steps %lld passes %lld: %lld prefetched", (long long)lines,
                             (long long)sp, (long long)passes, (long long)covered);
            }
    int64_t first = -1, count = -1; /* a block too narrow for one vector step: nothing to spread */
    KT_CHECK(kiln__gemm_small_prefetch_share(144, 0, 0, &first, &count) == 0);
    /* MiniLM at 16 rows: 6 rows of 384 floats (144 lines) over 4 passes of 24 steps */
    KT_CHECK(kiln__gemm_small_prefetch_share(144, 96, 24, &first, &count) == 2 && first == 48 && count == 96);
}

int main(void) {
    KT_RUN(kernel_matches_reference);
    KT_RUN(prefetch_spread_over_passes);
    KT_RUN(linear_small_rows_match_reference);
    return kt_finish();
}
