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
void kiln__rcol_max_f32(float *acc, const float *x, int64_t n);
/* y[j] = (x[j] - a) - b;  y[j] = x[j] - v[j];  y[j] *= s;  y[j] *= v[j]  (y may be x). */
void kiln__rsub_f32(float *y, const float *x, float a, float b, int64_t n);
void kiln__rvsub_f32(float *y, const float *x, const float *v, int64_t n);
void kiln__rscale_f32(float *y, float s, int64_t n);
void kiln__rvmul_f32(float *y, const float *v, int64_t n);

/* SOFTMAX and LOG_SOFTMAX (softmax.c), registered by kiln__cpu_register_reduce. */
void kiln__cpu_register_softmax(kiln__kernel_fn *table);

#endif
