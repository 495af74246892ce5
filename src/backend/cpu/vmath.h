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
 * atan, log2, log10, exp2, log_sigmoid, mish and softsign have the same bound, as have the other
 * ops written as expressions of the op table (hardswish, hardsigmoid, reciprocal, ...);
 * mish(-inf) = -0, softsign(+-inf) = +-1, log_sigmoid(-inf) = -inf.
 *
 * The f64 functions are plain libm loops (same formulas for the composite ops). */
#ifndef KILN_BACKEND_CPU_VMATH_H
#define KILN_BACKEND_CPU_VMATH_H

#include <stdint.h>

#include "ir/optable.h"

typedef void (*kiln__vmath_f32_fn)(float *y, const float *x, int64_t n);
typedef void (*kiln__vmath_f64_fn)(double *y, const double *x, int64_t n);

/* The ops: the op table's rows whose cpu column is VMATH or EXPR (ir/optable.h), in its order
 * (an EXPR row's kernels are expanded from its expression, KILN__OPEXPR).
 * KILN__VMATH_OPS expands KILN__VMATH_X(NAME, name) once per op: define KILN__VMATH_X, expand,
 * undefine (a site's list of kernels, prototypes or names). */
#define KILN__VMATH_ROW(NAME, name, arity, dtype, shape, fuse, grad, sig, cpu, domain, doc) \
    KILN__VMATH_ROW_##cpu(NAME, name)
#define KILN__VMATH_ROW_VMATH(NAME, name) KILN__VMATH_X(NAME, name)
#define KILN__VMATH_ROW_EXPR(NAME, name) KILN__VMATH_X(NAME, name)
#define KILN__VMATH_ROW_TYPED(NAME, name)
#define KILN__VMATH_OPS KILN__OPTABLE(KILN__VMATH_ROW)

typedef enum {
#define KILN__VMATH_X(NAME, name) KILN_VMATH_##NAME,
    KILN__VMATH_OPS
#undef KILN__VMATH_X
    KILN_VMATH_OP_COUNT
} kiln__vmath_op;

/* kiln__vexp_f32, kiln__vexp_f64, ...: one pair per op. */
#define KILN__VMATH_X(NAME, name)                                  \
    void kiln__v##name##_f32(float *y, const float *x, int64_t n); \
    void kiln__v##name##_f64(double *y, const double *x, int64_t n);
KILN__VMATH_OPS
#undef KILN__VMATH_X

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
