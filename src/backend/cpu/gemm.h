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
 * goes to cblas_sgemm/cblas_dgemm (OpenBLAS, told to use kiln__pool_threads() threads), an
 * f32 one to oneDNN's sgemm instead where the build also has oneDNN (gemm_dnnl.c);
 * otherwise, and for sizes CBLAS's int arguments cannot hold, a built-in blocked kernel
 * runs on the kiln thread pool. */
#ifndef KILN_BACKEND_CPU_GEMM_H
#define KILN_BACKEND_CPU_GEMM_H

#include <stdint.h>

void kiln__gemm_f32(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                    float *c, int64_t ldc);
void kiln__gemm_f64(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                    const double *a, int64_t lda, const double *b, int64_t ldb, double beta,
                    double *c, int64_t ldc);

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

/* ---- f32 products through oneDNN's sgemm (gemm_dnnl.c has the measurement) ---------------
 *
 *   if (!kiln__gemm_dnnl_f32(0, 1, m, n, k, 1.0f, x, k, w, k, 0.0f, y, n))
 *       cblas_sgemm(...);   // not taken: no oneDNN in this build, or KILN_GEMM_DNNL=0
 *
 * Same contract as kiln__gemm_f32 (row-major; leading dimensions at least the row width), run
 * on the calling thread alone. Returns 1 when oneDNN computed C, 0 (C untouched) when the
 * caller must: also for k == 0 or alpha == 0 (C = beta * C, which oneDNN skips at beta 0), or
 * when oneDNN refused the call (out of memory). */
int kiln__gemm_dnnl_f32(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                        const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                        float *c, int64_t ldc);

/* The same product cut into one block of C per pool thread, each block a one-thread sgemm run
 * by kiln__parallel_for (inline, one block after another, when another caller holds the pool);
 * a block oneDNN refuses (out of memory) runs through kiln__gemm_serial_f32. Returns 0 (C
 * untouched) only when the path is off or k == 0 or alpha == 0. */
int kiln__gemm_dnnl_f32_pool(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                             const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                             float *c, int64_t ldc);

/* 0: off (built without oneDNN, libgomp's thread setter not found, or KILN_GEMM_DNNL=0);
 * 1: one-thread products only (KILN_GEMM_DNNL=1); 2: also products for every core (default).
 * Read once. */
int kiln__gemm_dnnl_mode(void);

/* Where products go: "openblas", "cblas" (another CBLAS library) or "builtin". */
const char *kiln__gemm_impl(void);

/* The micro-kernel the built-in path picked for this CPU: "avx2-fma" or "portable". */
const char *kiln__gemm_builtin_kernel(void);

/* Tests: make the built-in path use the portable micro-kernel even where AVX2 exists. */
void kiln__gemm_builtin_use_portable(int on);

#endif
