/* Vectorised elementwise math for the CPU backend: array in, array out.
 *
 *   float x[1000], y[1000];
 *   ...
 *   kiln__vexp_f32(y, x, 1000);          // y[i] = expf(x[i]), AVX-512/AVX2/scalar by CPU
 *   kiln__vtanh_f32(x, x, 1000);         // in place: y may be x itself
 *
 *   kiln__vmath_f32_fn f = kiln__vmath_f32_kernel(KILN_VMATH_GELU);
 *   f(y, x, 1000);                       // pick by op, e.g. once per kernel launch
 *
 * Every function takes (y, x, n): y[i] = f(x[i]) for 0 <= i < n. y may alias x exactly; any
 * other overlap is not allowed. n may be 0. Nothing here allocates, locks or fails.
 *
 * The f32 functions are vectorised with AVX-512F or AVX2+FMA, whichever the CPU has, chosen at
 * run time once (thread-safe), with a portable scalar fallback (libm). KILN_ISA=scalar|avx2|avx512
 * in the environment selects a lower ISA than the best available, e.g. to test each path.
 *
 * Accuracy (f32, against the exactly rounded result; tests/test_vmath.c prints the measured
 * worst cases): at most 2.5 ulp for every function (sqrt 0.5, rsqrt 1.5), special values
 * included: exp/expm1 overflow to inf above 88.72 and underflow through the denormals to 0;
 * log(0) = -inf, log(x<0) = NaN; sin/cos stay accurate for any |x| (lanes from 2^17 on go to
 * libm). tanh, sigmoid, silu, gelu, gelu_tanh and softplus are computed without cancellation or
 * overflow, so their tiny negative tails (e.g. sigmoid(-100) = 3.7e-44) keep their relative
 * accuracy. Limits at infinity are returned at infinity: silu(-inf) = gelu(-inf) =
 * gelu_tanh(-inf) = -0, softplus(-inf) = 0. The AVX2 and AVX-512 kernels return the same bits.
 *
 * floor, ceil, round (half to even) and trunc are exact, keeping -0 (ceil(-0.5) = -0).
 * atan, log2, log10, exp2, log_sigmoid, mish, softsign and hardswish have the same bound;
 * mish(-inf) = -0, softsign(+-inf) = +-1, log_sigmoid(-inf) = -inf.
 *
 * The f64 functions are plain libm loops (same formulas for the composite ops). */
#ifndef KILN_BACKEND_CPU_VMATH_H
#define KILN_BACKEND_CPU_VMATH_H

#include <stdint.h>

typedef void (*kiln__vmath_f32_fn)(float *y, const float *x, int64_t n);
typedef void (*kiln__vmath_f64_fn)(double *y, const double *x, int64_t n);

/* The elementwise ops, in the order of the kernel tables. */
typedef enum {
    KILN_VMATH_EXP,
    KILN_VMATH_LOG,
    KILN_VMATH_LOG1P,
    KILN_VMATH_EXPM1,
    KILN_VMATH_TANH,
    KILN_VMATH_SIGMOID,   /* 1 / (1 + exp(-x)) */
    KILN_VMATH_SIN,
    KILN_VMATH_COS,
    KILN_VMATH_ERF,
    KILN_VMATH_SQRT,
    KILN_VMATH_RSQRT,     /* 1 / sqrt(x) */
    KILN_VMATH_GELU,      /* x * 0.5 * (1 + erf(x / sqrt(2))) */
    KILN_VMATH_GELU_TANH, /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    KILN_VMATH_SILU,      /* x * sigmoid(x) */
    KILN_VMATH_SOFTPLUS,  /* log1p(exp(x)); x itself for x > 20 */
    KILN_VMATH_FLOOR,
    KILN_VMATH_CEIL,
    KILN_VMATH_ROUND,     /* half to even */
    KILN_VMATH_TRUNC,
    KILN_VMATH_ATAN,
    KILN_VMATH_LOG2,
    KILN_VMATH_LOG10,
    KILN_VMATH_EXP2,
    KILN_VMATH_LOG_SIGMOID, /* -softplus(-x) */
    KILN_VMATH_MISH,      /* x * tanh(softplus(x)) */
    KILN_VMATH_SOFTSIGN,  /* x / (1 + |x|) */
    KILN_VMATH_HARDSWISH, /* x * min(max(x + 3, 0), 6) / 6 */
    KILN_VMATH_OP_COUNT
} kiln__vmath_op;

void kiln__vexp_f32(float *y, const float *x, int64_t n);
void kiln__vlog_f32(float *y, const float *x, int64_t n);
void kiln__vlog1p_f32(float *y, const float *x, int64_t n);
void kiln__vexpm1_f32(float *y, const float *x, int64_t n);
void kiln__vtanh_f32(float *y, const float *x, int64_t n);
void kiln__vsigmoid_f32(float *y, const float *x, int64_t n);
void kiln__vsin_f32(float *y, const float *x, int64_t n);
void kiln__vcos_f32(float *y, const float *x, int64_t n);
void kiln__verf_f32(float *y, const float *x, int64_t n);
void kiln__vsqrt_f32(float *y, const float *x, int64_t n);
void kiln__vrsqrt_f32(float *y, const float *x, int64_t n);
void kiln__vgelu_f32(float *y, const float *x, int64_t n);
void kiln__vgelu_tanh_f32(float *y, const float *x, int64_t n);
void kiln__vsilu_f32(float *y, const float *x, int64_t n);
void kiln__vsoftplus_f32(float *y, const float *x, int64_t n);
void kiln__vfloor_f32(float *y, const float *x, int64_t n);
void kiln__vceil_f32(float *y, const float *x, int64_t n);
void kiln__vround_f32(float *y, const float *x, int64_t n);
void kiln__vtrunc_f32(float *y, const float *x, int64_t n);
void kiln__vatan_f32(float *y, const float *x, int64_t n);
void kiln__vlog2_f32(float *y, const float *x, int64_t n);
void kiln__vlog10_f32(float *y, const float *x, int64_t n);
void kiln__vexp2_f32(float *y, const float *x, int64_t n);
void kiln__vlog_sigmoid_f32(float *y, const float *x, int64_t n);
void kiln__vmish_f32(float *y, const float *x, int64_t n);
void kiln__vsoftsign_f32(float *y, const float *x, int64_t n);
void kiln__vhardswish_f32(float *y, const float *x, int64_t n);

void kiln__vexp_f64(double *y, const double *x, int64_t n);
void kiln__vlog_f64(double *y, const double *x, int64_t n);
void kiln__vlog1p_f64(double *y, const double *x, int64_t n);
void kiln__vexpm1_f64(double *y, const double *x, int64_t n);
void kiln__vtanh_f64(double *y, const double *x, int64_t n);
void kiln__vsigmoid_f64(double *y, const double *x, int64_t n);
void kiln__vsin_f64(double *y, const double *x, int64_t n);
void kiln__vcos_f64(double *y, const double *x, int64_t n);
void kiln__verf_f64(double *y, const double *x, int64_t n);
void kiln__vsqrt_f64(double *y, const double *x, int64_t n);
void kiln__vrsqrt_f64(double *y, const double *x, int64_t n);
void kiln__vgelu_f64(double *y, const double *x, int64_t n);
void kiln__vgelu_tanh_f64(double *y, const double *x, int64_t n);
void kiln__vsilu_f64(double *y, const double *x, int64_t n);
void kiln__vsoftplus_f64(double *y, const double *x, int64_t n);
void kiln__vfloor_f64(double *y, const double *x, int64_t n);
void kiln__vceil_f64(double *y, const double *x, int64_t n);
void kiln__vround_f64(double *y, const double *x, int64_t n);
void kiln__vtrunc_f64(double *y, const double *x, int64_t n);
void kiln__vatan_f64(double *y, const double *x, int64_t n);
void kiln__vlog2_f64(double *y, const double *x, int64_t n);
void kiln__vlog10_f64(double *y, const double *x, int64_t n);
void kiln__vexp2_f64(double *y, const double *x, int64_t n);
void kiln__vlog_sigmoid_f64(double *y, const double *x, int64_t n);
void kiln__vmish_f64(double *y, const double *x, int64_t n);
void kiln__vsoftsign_f64(double *y, const double *x, int64_t n);
void kiln__vhardswish_f64(double *y, const double *x, int64_t n);

/* The kernel for op under the ISA in effect now (NULL for an op out of range). Callers that
 * run one op over many chunks can look it up once. */
kiln__vmath_f32_fn kiln__vmath_f32_kernel(kiln__vmath_op op);
kiln__vmath_f64_fn kiln__vmath_f64_kernel(kiln__vmath_op op);

/* "exp", "gelu_tanh", ...; "?" for an op out of range. */
const char *kiln__vmath_op_name(kiln__vmath_op op);

/* The ISA the f32 kernels use: "avx512", "avx2" or "scalar". */
const char *kiln__vmath_isa(void);

/* For tests and benchmarks: use isa ("avx512", "avx2" or "scalar") from now on, in every
 * thread. NULL goes back to the automatic choice (KILN_ISA, then the best the CPU has).
 * Returns 0, or -1 (and changes nothing) when isa is unknown or this CPU lacks it. */
int kiln__vmath_force_isa(const char *isa);

/* Private to the vmath*.c files: each ISA's f32 kernels, indexed by kiln__vmath_op. They exist
 * only on x86-64 and may be called only where the CPU has the ISA. */
extern const kiln__vmath_f32_fn kiln__vmath_avx2_kernels[KILN_VMATH_OP_COUNT];
extern const kiln__vmath_f32_fn kiln__vmath_avx512_kernels[KILN_VMATH_OP_COUNT];

#endif
