/* Shared by the CPU reduction and softmax kernel files: vectorised primitives over one dense
 * run of n elements (n may be 0). AVX2 where the CPU has it and vmath has not been told to use
 * scalar code (KILN_ISA=scalar, kiln__vmath_force_isa), portable C otherwise. */
#ifndef KILN_BACKEND_CPU_REDUCE_IMPL_H
#define KILN_BACKEND_CPU_REDUCE_IMPL_H

#include "backend/cpu/cpu-impl.h"

/* Sum in f32 blocks of 256 (8 adds deep per lane) added into double: ~1e-7 relative even for
 * millions of elements, at f32 vector speed. */
double kiln__rsum_f32(const float *x, int64_t n);
double kiln__rsum_f64(const double *x, int64_t n);
/* NaN if any element is NaN (torch's max/min); -inf / +inf for n = 0. */
float kiln__rmax_f32(const float *x, int64_t n);
float kiln__rmin_f32(const float *x, int64_t n);
double kiln__rmax_f64(const double *x, int64_t n);
double kiln__rmin_f64(const double *x, int64_t n);
/* Sum of (x - mean)^2, in double. */
double kiln__rsqdev_f32(const float *x, int64_t n, double mean);
double kiln__rsqdev_f64(const double *x, int64_t n, double mean);
/* Index of the first element equal to v (of the first NaN when v is NaN); n if none. */
int64_t kiln__rfind_f32(const float *x, int64_t n, float v);
/* acc[j] += x[j];  acc[j] = max(acc[j], x[j]) (NaN in x is skipped). */
void kiln__rcol_sum_f32(double *acc, const float *x, int64_t n);
/* acc[j] += rows[0][j] + ... + rows[nrows - 1][j] for nrows <= 8, summed in f32 first: the
 * double accumulators are read and written once per 8 rows. */
void kiln__rcol_sum_rows_f32(double *acc, const float *const *rows, int nrows, int64_t n);
void kiln__rcol_sum_f64(double *acc, const double *x, int64_t n);
/* bf16 read as it is stored (sums only: autocast's bf16 gradients summed into f32, e.g. a conv's
 * bias gradient), widened a block at a time into f32 and summed by the f32 primitives above, so
 * the result is the one a cast to f32 and the f32 sum give, without the cast's pass and copy.
 * kiln__rsum_bf16 folds n elements st apart (elements); kiln__rcol_sum_bf16 is
 * kiln__rcol_sum_f32 over dense bf16, widening through buf (n floats). */
double kiln__rsum_bf16(const uint16_t *x, int64_t n, int64_t st);
void kiln__rcol_sum_bf16(double *acc, const uint16_t *x, int64_t n, float *buf);
void kiln__rcol_max_f32(float *acc, const float *x, int64_t n);
/* y[j] = (x[j] - a) - b;  y[j] = x[j] - v[j];  y[j] *= s;  y[j] *= v[j]  (y may be x). */
void kiln__rsub_f32(float *y, const float *x, float a, float b, int64_t n);
void kiln__rvsub_f32(float *y, const float *x, const float *v, int64_t n);
void kiln__rscale_f32(float *y, float s, int64_t n);
void kiln__rvmul_f32(float *y, const float *v, int64_t n);

/* SUM (or MEAN) over the outer and inner dims of an input of [outer, K, inner] dense blocks
 * (element strides: outer_stride between blocks, k_stride between a block's K runs of inner
 * contiguous elements; dt f32, f64 or bf16) into out[c * out_stride], f32 or f64
 * (reduce_blocks.c: a conv's bias gradient). kiln__reduce_blocks_fits says whether it takes
 * the shape. */
bool kiln__reduce_blocks_fits(kiln_dtype dt, int64_t outer, int64_t k, int64_t inner);
kiln_status kiln__reduce_blocks_sum(const char *in, kiln_dtype dt, int64_t outer, int64_t outer_stride, int64_t k,
                                    int64_t k_stride, int64_t inner, char *out, kiln_dtype out_dt, int64_t out_stride,
                                    bool mean);

/* SOFTMAX and LOG_SOFTMAX (softmax.c), registered by kiln__cpu_register_reduce. */
void kiln__cpu_register_softmax(kiln__kernel_fn *table);

#endif
