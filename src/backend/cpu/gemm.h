/* Dense matrix product for the CPU backend, row-major.
 *
 *   C = alpha * op(A) * op(B) + beta * C,   op(X) = X, or X^T when trans_x is non-zero
 *
 * op(A) is m x k, op(B) is k x n, C is m x n. A row-major matrix stored with leading
 * dimension ld has element (i, j) at x[i * ld + j]; a transposed operand is the stored
 * matrix read the other way round (A^T: A is stored k x m with lda >= m).
 *
 *   float a[2 * 3] = {...}, b[3 * 4] = {...}, c[2 * 4];
 *   kiln__gemm_f32(0, 0, 2, 4, 3, 1.0f, a, 3, b, 4, 0.0f, c, 4);   // c = a @ b
 *
 * When beta is 0, C is written without being read (NaN in C does not leak through); when
 * k is 0 or alpha is 0 the result is beta * C. Built with KILN_HAVE_CBLAS=1 the product
 * goes to cblas_sgemm/cblas_dgemm (OpenBLAS on one thread per tile of rows, the tiles on kiln's
 * thread pool: gemm_blas.c), or for f32 to oneDNN (gemm_dnnl.c); otherwise, and for sizes
 * CBLAS's int arguments cannot hold, a built-in blocked kernel runs on the kiln thread pool. */
#ifndef KILN_BACKEND_CPU_GEMM_H
#define KILN_BACKEND_CPU_GEMM_H

#include <stdint.h>

#include "backend/cpu/tune.h"

void kiln__gemm_f32(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                    float *c, int64_t ldc);
void kiln__gemm_f64(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                    const double *a, int64_t lda, const double *b, int64_t ldb, double beta,
                    double *c, int64_t ldc);

/* Who runs an f32 product of n columns over k: the user's word (KILN_GEMM_DNNL, a test's
 * kiln__gemm_dnnl_force), else what the tuner measured on this machine (tune.h), else the rule
 * (oneDNN where the CPU has AVX-512, else the BLAS, else the built-in kernel). The same for
 * every row panel of a product (m plays no part). */
kiln__gemm_provider kiln__gemm_f32_provider(int64_t n, int64_t k);
/* The rows a panel of such a product must start at a multiple of to get the whole product's bits
 * (fused_matmul.c cuts panels on it): oneDNN's tile height (kiln__gemm_dnnl_tile_rows: from n, k
 * and the machine), the CBLAS kernel's row period (gemm_blas.c), or 0 (the built-in kernel: any). */
int64_t kiln__gemm_f32_tile_rows(int64_t n, int64_t k);
/* The product through provider p, or the next that takes its layout (oneDNN, then CBLAS, then
 * the built-in kernel, which takes any): for the tuner and tests. */
void kiln__gemm_f32_with(kiln__gemm_provider p, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                         float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                         float *c, int64_t ldc);

/* The same product on the calling thread alone, never waking BLAS's threads or the pool's:
 * for a caller that runs many products side by side (a batch spread across the pool). With
 * CBLAS, a product over OpenBLAS's single-thread size goes to it in row blocks under that
 * size; kiln__gemm_serial_is_fast says whether a shape keeps BLAS that way (else the built-in
 * kernel runs it, slower than a multi-threaded BLAS call on a large product). */
void kiln__gemm_serial_f32(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                           const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                           float *c, int64_t ldc);
void kiln__gemm_serial_f64(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                           double alpha, const double *a, int64_t lda, const double *b,
                           int64_t ldb, double beta, double *c, int64_t ldc);
int kiln__gemm_serial_is_fast(int64_t m, int64_t n, int64_t k);

/* The built-in kernel, whatever the build: for tests and benchmarks against CBLAS. */
void kiln__gemm_builtin_f32(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                            float alpha, const float *a, int64_t lda, const float *b,
                            int64_t ldb, float beta, float *c, int64_t ldc);
void kiln__gemm_builtin_f64(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                            double alpha, const double *a, int64_t lda, const double *b,
                            int64_t ldb, double beta, double *c, int64_t ldc);

/* Where products go: "openblas", "cblas" (another CBLAS library) or "builtin". */
const char *kiln__gemm_impl(void);

/* The micro-kernel the built-in path picked for this CPU: "avx2-fma" or "portable". */
const char *kiln__gemm_builtin_kernel(void);

/* Tests: make the built-in path use the portable micro-kernel even where AVX2 exists. */
void kiln__gemm_builtin_use_portable(int on);

#endif
