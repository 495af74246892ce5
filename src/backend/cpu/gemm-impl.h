/* What gemm.c (who runs a product), gemm_blas.c (the CBLAS's products) and gemm_builtin.c (kiln's
 * own blocked kernel) share. */
#ifndef KILN_BACKEND_CPU_GEMM_IMPL_H
#define KILN_BACKEND_CPU_GEMM_IMPL_H

#include <stdbool.h>
#include <stdint.h>

/* C = beta * C over m x n (beta 0 writes zeros without reading C; beta 1 touches nothing). */
void kiln__gemm_scale_f32(int64_t m, int64_t n, float beta, float *c, int64_t ldc);
void kiln__gemm_scale_f64(int64_t m, int64_t n, double beta, double *c, int64_t ldc);

/* The built-in product (gemm.h's kiln__gemm_builtin_*), its tiles over kiln's pool, or on the
 * calling thread alone when serial. */
void kiln__gemm_builtin_run_f32(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                                const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                                int64_t ldc, int serial);
void kiln__gemm_builtin_run_f64(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                                const double *a, int64_t lda, const double *b, int64_t ldb, double beta, double *c,
                                int64_t ldc, int serial);

/* Whether the CBLAS takes the product (a build with one; int sizes; leading dimensions of at
 * least a stored row's width, a single row's fixed up in place). */
bool kiln__gemm_blas_can_take(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, int64_t *lda, int64_t *ldb,
                              int64_t *ldc);
/* The row period of the CBLAS's kernel for f32 (f64): cutting a product's rows at multiples of
 * it keeps every row's bits (probed once, gemm_blas.c); 0 when no cut does. */
int64_t kiln__gemm_blas_row_period(bool f64);
/* A product the CBLAS takes, as single-threaded calls on tiles over kiln's pool (gemm_blas.c: the
 * bits of one whole call, whatever the tiling). Only in a build with a CBLAS. */
void kiln__gemm_blas_f32(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                         int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
void kiln__gemm_blas_f64(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double *a,
                         int64_t lda, const double *b, int64_t ldb, double beta, double *c, int64_t ldc);

#endif
