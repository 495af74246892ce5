/* vmath: the scalar (libm) kernels, the f64 kernels, and the run-time choice of ISA for the
 * f32 ones. The vector kernels live in vmath_simd.h, built by vmath_avx2.c and vmath_avx512.c. */
#include "backend/cpu/vmath.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- the composite ops in double, written to avoid cancellation and overflow -------------- */

static double sigmoid_d(double x)
{
    if (x >= 0)
        return 1 / (1 + exp(-x));
    double e = exp(x); /* e / (1 + e): no overflow, tiny results keep their digits */
    return e / (1 + e);
}

/* x * sigmoid(x); at -inf the product would be -inf * 0, so the limit is given. */
static double silu_d(double x) { return x == -INFINITY ? -0.0 : x * sigmoid_d(x); }

/* x/2 (1 + erf(x/sqrt2)) = x/2 erfc(-x/sqrt2): erfc keeps the negative tail accurate. */
static double gelu_d(double x)
{
    return x == -INFINITY ? -0.0 : 0.5 * x * erfc(-x * 0.70710678118654752440);
}

/* 0.5x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3). */
static double gelu_tanh_d(double x)
{
    if (isinf(x))
        return x > 0 ? x : -0.0;
    const double two_sqrt_2_over_pi = 1.5957691216057308; /* 2 sqrt(2/pi) */
    return x * sigmoid_d(two_sqrt_2_over_pi * (x + 0.044715 * x * x * x));
}

static double softplus_d(double x)
{
    if (x > 20 || isnan(x))
        return x;
    return fmax(x, 0.0) + log1p(exp(-fabs(x)));
}

static double rsqrt_d(double x) { return 1 / sqrt(x); }

/* -softplus(-x), without the threshold; -0 where e^-x underflows, as PyTorch's. */
static double log_sigmoid_d(double x)
{
    return -(fmax(-x, 0.0) + log1p(exp(-fabs(x))));
}

/* x tanh(softplus(x)) = x n / (n + 2), n = e^x (e^x + 2): no tanh, no cancellation; the
 * limits at infinity are given (x itself above 20, where the factor rounds to 1 anyway). */
static double mish_d(double x)
{
    if (x > 20 || isnan(x))
        return x;
    if (x == -INFINITY)
        return -0.0;
    double u = exp(x), n = u * (u + 2);
    return x * (n / (n + 2));
}

static double softsign_d(double x) { return isinf(x) ? copysign(1.0, x) : x / (1 + fabs(x)); }

/* The ops written as expressions in the op table (ir/optable.h, KILN__OPEXPR), in double:
 * expr_name(x), as the hand-written composites above (so the scalar kernels compute in double:
 * tanh as before, where glibc's tanhf is off by 2 ulp). min and max take x86's rule (the second
 * operand when either is NaN) so every kernel of an op agrees. */
static inline double ex_min(double a, double b) { return a < b ? a : b; }
static inline double ex_max(double a, double b) { return a > b ? a : b; }
#define E_X x
#define E_K(c) ((double)(c))
#define E_ADD(a, b) ((a) + (b))
#define E_SUB(a, b) ((a) - (b))
#define E_MUL(a, b) ((a) * (b))
#define E_DIV(a, b) ((a) / (b))
#define E_NEG(a) (-(a))
#define E_ABS(a) fabs(a)
#define E_EXP(a) exp(a)
#define E_TANH(a) tanh(a)
#define E_SIGMOID(a) sigmoid_d(a)
#define E_MIN(a, b) ex_min(a, b)
#define E_MAX(a, b) ex_max(a, b)
#define E_LT(a, b) ((a) < (b))
#define E_GT(a, b) ((a) > (b))
#define E_WHERE(m, a, b) ((m) ? (a) : (b))
#define E_CALL(f, a) f(a)
#define KILN__OPEXPR_D(NAME, name, forward, gradient) \
    static double expr_##name(double x) { return forward; }
KILN__OPEXPR(KILN__OPEXPR_D)
#undef KILN__OPEXPR_D
#include "ir/opexpr_end.h"

/* Rounds half to even whatever the rounding mode (torch.round). */
static double round_even_d(double x)
{
    double r = round(x); /* half away from zero */
    if (fabs(r - x) == 0.5)
        r = 2.0 * round(x / 2);
    return r;
}

/* ---- scalar f32 kernels: libm where it has the function in float, else the double formula */

#define VMATH_SCALAR_KERNEL(kernel, expr)                              \
    static void kernel(float *y, const float *x, int64_t n)            \
    {                                                                  \
        for (int64_t i = 0; i < n; i++) {                              \
            float v = x[i];                                            \
            y[i] = (expr);                                             \
        }                                                              \
    }

VMATH_SCALAR_KERNEL(scalar_exp, expf(v))
VMATH_SCALAR_KERNEL(scalar_log, logf(v))
VMATH_SCALAR_KERNEL(scalar_log1p, log1pf(v))
VMATH_SCALAR_KERNEL(scalar_expm1, expm1f(v))
VMATH_SCALAR_KERNEL(scalar_sin, sinf(v))
VMATH_SCALAR_KERNEL(scalar_cos, cosf(v))
VMATH_SCALAR_KERNEL(scalar_erf, erff(v))
VMATH_SCALAR_KERNEL(scalar_sqrt, sqrtf(v))
VMATH_SCALAR_KERNEL(scalar_rsqrt, (float)rsqrt_d(v))
VMATH_SCALAR_KERNEL(scalar_gelu, (float)gelu_d(v))
VMATH_SCALAR_KERNEL(scalar_gelu_tanh, (float)gelu_tanh_d(v))
VMATH_SCALAR_KERNEL(scalar_silu, (float)silu_d(v))
VMATH_SCALAR_KERNEL(scalar_softplus, (float)softplus_d(v))
VMATH_SCALAR_KERNEL(scalar_floor, floorf(v))
VMATH_SCALAR_KERNEL(scalar_ceil, ceilf(v))
VMATH_SCALAR_KERNEL(scalar_round, (float)round_even_d(v))
VMATH_SCALAR_KERNEL(scalar_trunc, truncf(v))
VMATH_SCALAR_KERNEL(scalar_log_sigmoid, (float)log_sigmoid_d(v))
VMATH_SCALAR_KERNEL(scalar_mish, (float)mish_d(v))
VMATH_SCALAR_KERNEL(scalar_softsign, (float)softsign_d(v))
#define KILN__OPEXPR_SCALAR(NAME, name, forward, gradient) VMATH_SCALAR_KERNEL(scalar_##name, (float)expr_##name(v))
KILN__OPEXPR(KILN__OPEXPR_SCALAR)
#undef KILN__OPEXPR_SCALAR

static const kiln__vmath_f32_fn scalar_kernels[KILN_VMATH_OP_COUNT] = {
#define KILN__VMATH_X(OP, name) [KILN_VMATH_##OP] = scalar_##name,
    KILN__VMATH_OPS
#undef KILN__VMATH_X
};

/* ---- f64 kernels ------------------------------------------------------------------------- */

#define VMATH_F64_KERNEL(name, fn)                                                 \
    void kiln__v##name##_f64(double *y, const double *x, int64_t n)                \
    {                                                                              \
        for (int64_t i = 0; i < n; i++)                                            \
            y[i] = fn(x[i]);                                                       \
    }

VMATH_F64_KERNEL(exp, exp)
VMATH_F64_KERNEL(log, log)
VMATH_F64_KERNEL(log1p, log1p)
VMATH_F64_KERNEL(expm1, expm1)
VMATH_F64_KERNEL(sin, sin)
VMATH_F64_KERNEL(cos, cos)
VMATH_F64_KERNEL(erf, erf)
VMATH_F64_KERNEL(sqrt, sqrt)
VMATH_F64_KERNEL(rsqrt, rsqrt_d)
VMATH_F64_KERNEL(gelu, gelu_d)
VMATH_F64_KERNEL(gelu_tanh, gelu_tanh_d)
VMATH_F64_KERNEL(silu, silu_d)
VMATH_F64_KERNEL(softplus, softplus_d)
VMATH_F64_KERNEL(floor, floor)
VMATH_F64_KERNEL(ceil, ceil)
VMATH_F64_KERNEL(round, round_even_d)
VMATH_F64_KERNEL(trunc, trunc)
VMATH_F64_KERNEL(log_sigmoid, log_sigmoid_d)
VMATH_F64_KERNEL(mish, mish_d)
VMATH_F64_KERNEL(softsign, softsign_d)
#define KILN__OPEXPR_F64(NAME, name, forward, gradient) VMATH_F64_KERNEL(name, expr_##name)
KILN__OPEXPR(KILN__OPEXPR_F64)
#undef KILN__OPEXPR_F64

static const kiln__vmath_f64_fn f64_kernels[KILN_VMATH_OP_COUNT] = {
#define KILN__VMATH_X(OP, name) [KILN_VMATH_##OP] = kiln__v##name##_f64,
    KILN__VMATH_OPS
#undef KILN__VMATH_X
};

/* ---- choosing the ISA -------------------------------------------------------------------- */

enum { ISA_SCALAR, ISA_AVX2, ISA_AVX512, ISA_COUNT };

static const char *const isa_names[ISA_COUNT] = {"scalar", "avx2", "avx512"};

static const kiln__vmath_f32_fn *const isa_kernels[ISA_COUNT] = {
    scalar_kernels,
#if defined(__x86_64__)
    kiln__vmath_avx2_kernels,
    kiln__vmath_avx512_kernels,
#else
    NULL,
    NULL,
#endif
};

static pthread_once_t isa_once = PTHREAD_ONCE_INIT;
static int isa_best;         /* what the CPU has; written once, under isa_once */
static int isa_automatic;    /* isa_best, or lower when KILN_ISA says so */
static atomic_int isa_in_use; /* what the kernels use now */

static int isa_from_name(const char *name)
{
    for (int i = 0; i < ISA_COUNT; i++)
        if (strcmp(name, isa_names[i]) == 0)
            return i;
    return -1;
}

static int isa_of_cpu(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    /* These also check that the OS saves the wider registers (XGETBV). */
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return ISA_AVX2;
#endif
    return ISA_SCALAR;
}

static void isa_resolve(void)
{
    isa_best = isa_of_cpu();
    isa_automatic = isa_best;
    const char *env = getenv("KILN_ISA");
    int wanted = env ? isa_from_name(env) : -1;
    if (wanted >= 0 && wanted < isa_best)
        isa_automatic = wanted;
    atomic_store_explicit(&isa_in_use, isa_automatic, memory_order_relaxed);
}

static int isa_current(void)
{
    pthread_once(&isa_once, isa_resolve);
    return atomic_load_explicit(&isa_in_use, memory_order_relaxed);
}

const char *kiln__vmath_isa(void) { return isa_names[isa_current()]; }

int kiln__vmath_force_isa(const char *isa)
{
    pthread_once(&isa_once, isa_resolve);
    int wanted = isa ? isa_from_name(isa) : isa_automatic;
    if (wanted < 0 || wanted > isa_best)
        return -1;
    atomic_store_explicit(&isa_in_use, wanted, memory_order_relaxed);
    return 0;
}

kiln__vmath_f32_fn kiln__vmath_f32_kernel(kiln__vmath_op op)
{
    if ((unsigned)op >= KILN_VMATH_OP_COUNT)
        return NULL;
    return isa_kernels[isa_current()][op];
}

kiln__vmath_f64_fn kiln__vmath_f64_kernel(kiln__vmath_op op)
{
    if ((unsigned)op >= KILN_VMATH_OP_COUNT)
        return NULL;
    return f64_kernels[op];
}

const char *kiln__vmath_op_name(kiln__vmath_op op)
{
    static const char *const names[KILN_VMATH_OP_COUNT] = {
#define KILN__VMATH_X(OP, name) [KILN_VMATH_##OP] = #name,
        KILN__VMATH_OPS
#undef KILN__VMATH_X
    };
    if ((unsigned)op >= KILN_VMATH_OP_COUNT)
        return "?";
    return names[op];
}

/* ---- the f32 entry points ---------------------------------------------------------------- */

#define KILN__VMATH_X(OP, name)                                        \
    void kiln__v##name##_f32(float *y, const float *x, int64_t n)      \
    {                                                                  \
        isa_kernels[isa_current()][KILN_VMATH_##OP](y, x, n);          \
    }
KILN__VMATH_OPS
#undef KILN__VMATH_X
