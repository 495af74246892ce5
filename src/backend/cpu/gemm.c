/* Matrix products: who runs each one (gemm.h). f32 products go to oneDNN in fixed tiles
 * (gemm_dnnl.c), the CBLAS (OpenBLAS) or kiln's own blocked kernel (gemm_builtin.c), by the
 * user's word, the tuner's measurement (tune.h) or the rule; f64 products to the CBLAS or the
 * built-in kernel (the CBLAS's products and the serial ones: gemm_blas.c). */
#include "backend/cpu/gemm.h"

#include <string.h>

#include "backend/cpu/gemm-impl.h"
#include "backend/cpu/gemm_dnnl.h"
#include "backend/cpu/threadpool.h"
#include "backend/cpu/vmath.h"
#include "core/core-impl.h"
#include "core/machine.h"

#ifndef KILN_HAVE_CBLAS
#define KILN_HAVE_CBLAS 0
#endif

/* ---- Who runs an f32 product: the rule, or what was measured here (tune.h) ---------- */

void kiln__gemm_f32_with(kiln__gemm_provider p, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                         float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                         float *c, int64_t ldc) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0 || alpha == 0.0f) {
        kiln__gemm_scale_f32(m, n, beta, c, ldc);
        return;
    }
    if (p == KILN__GEMM_DNNL && kiln__gemm_dnnl_fits(trans_a, trans_b, m, n, k, lda, ldb, ldc)) {
        (void)kiln__gemm_dnnl_f32(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    if (p != KILN__GEMM_BUILTIN && kiln__gemm_blas_can_take(trans_a, trans_b, m, n, k, &lda, &ldb, &ldc)) {
        kiln__gemm_blas_f32(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    kiln__gemm_builtin_f32(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* what the tuner times: a dense product, as a user's matmul runs it */
static void gemm_tune_run(kiln__gemm_provider p, int64_t m, int64_t n, int64_t k, const float *a, const float *b,
                          float *c) {
    kiln__gemm_f32_with(p, 0, 0, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
}

/* kiln's vector code runs at the CPU's best (KILN_ISA or a test did not cap it): a decision
 * measured with everything on holds only then */
static bool gemm_isa_uncapped(void) {
    const kiln__machine *mc = kiln__machine_facts();
    const char *best = mc->avx512f ? "avx512" : mc->avx2 && mc->fma ? "avx2" : "scalar";
    return strcmp(kiln__vmath_isa(), best) == 0;
}

kiln__gemm_provider kiln__gemm_f32_provider(int64_t n, int64_t k) {
    /* the rule: oneDNN where the CPU has AVX-512 (gemm_dnnl.c), else the BLAS, else our kernel */
    kiln__gemm_provider rule = kiln__gemm_dnnl_by_rule() ? KILN__GEMM_DNNL
                               : KILN_HAVE_CBLAS         ? KILN__GEMM_BLAS
                                                         : KILN__GEMM_BUILTIN;
    if (kiln__gemm_dnnl_user_mode() >= 0 || !gemm_isa_uncapped()) return rule;
    unsigned available = 1u << KILN__GEMM_BUILTIN | (KILN_HAVE_CBLAS ? 1u << KILN__GEMM_BLAS : 0u) |
                         (KILN_HAVE_DNNL ? 1u << KILN__GEMM_DNNL : 0u);
    kiln__gemm_provider p =
        kiln__tune_gemm_f32(n, k, gemm_tune_run, available, rule, !kiln__pool_in_parallel_region());
    return p == KILN__GEMM_BY_RULE ? rule : p;
}

int64_t kiln__gemm_f32_tile_rows(int64_t n, int64_t k) {
    kiln__gemm_provider p = kiln__gemm_f32_provider(n, k);
    if (KILN_HAVE_DNNL && p == KILN__GEMM_DNNL) return kiln__gemm_dnnl_tile_rows(n, k);
    if (!KILN_HAVE_CBLAS || p != KILN__GEMM_BLAS) return 0; /* (the built-in kernel's bits: any rows) */
    int64_t period = kiln__gemm_blas_row_period(false);
    return period > 0 ? period : (int64_t)1 << 40; /* (no cut keeps the bits: one panel) */
}

void kiln__gemm_f32(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                    float *c, int64_t ldc) {
    if (m <= 0 || n <= 0) return;
    kiln__gemm_f32_with(k > 0 ? kiln__gemm_f32_provider(n, k) : KILN__GEMM_BUILTIN, trans_a, trans_b, m, n, k,
                        alpha, a, lda, b, ldb, beta, c, ldc);
}

void kiln__gemm_f64(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                    const double *a, int64_t lda, const double *b, int64_t ldb, double beta,
                    double *c, int64_t ldc) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0 || alpha == 0.0) {
        kiln__gemm_scale_f64(m, n, beta, c, ldc);
        return;
    }
    if (kiln__gemm_blas_can_take(trans_a, trans_b, m, n, k, &lda, &ldb, &ldc)) {
        kiln__gemm_blas_f64(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    kiln__gemm_builtin_f64(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
