/* vmath: every f32 function under every ISA this CPU has (scalar, avx2, avx512), against a
 * double or long-double reference on a dense sweep (about a million inputs per function:
 * special values, the function's working range, and random bit patterns over all floats);
 * the worst error in ulp is printed and bounded, and avx2 must equal avx512 to the bit. Then
 * in-place use, every length 0..67 (the tails), edge values spelled out, the f64 versions, and
 * the ISA switch. */
#include "backend/cpu/vmath.h"
#include "kiln_test.h"

#include <float.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* ---- references ---------------------------------------------------------------------------- */

static long double sigmoid_ref(long double x)
{
    if (x >= 0)
        return 1 / (1 + expl(-x));
    long double e = expl(x);
    return e / (1 + e);
}
static long double silu_ref(long double x)
{
    return isinf(x) && x < 0 ? -0.0L : x * sigmoid_ref(x);
}
static long double gelu_ref(long double x)
{
    return isinf(x) && x < 0 ? -0.0L : 0.5L * x * erfcl(-x / sqrtl(2.0L));
}
static long double gelu_tanh_ref(long double x)
{
    if (isinf(x))
        return x > 0 ? x : -0.0L;
    const long double pi = 3.14159265358979323846264338327950288L;
    long double u = sqrtl(2 / pi) * (x + 0.044715L * x * x * x);
    return x * sigmoid_ref(2 * u); /* 0.5 (1 + tanh u) = sigmoid(2u) */
}
static long double softplus_ref(long double x)
{
    if (x > 20 || isnan(x))
        return x;
    return fmaxl(x, 0) + log1pl(expl(-fabsl(x)));
}

static double ref_of(kiln__vmath_op op, float xf)
{
    double x = xf;
    switch (op) {
    case KILN_VMATH_EXP: return exp(x);
    case KILN_VMATH_LOG: return log(x);
    case KILN_VMATH_LOG1P: return log1p(x);
    case KILN_VMATH_EXPM1: return expm1(x);
    case KILN_VMATH_TANH: return tanh(x);
    case KILN_VMATH_SIGMOID: return (double)sigmoid_ref(x);
    case KILN_VMATH_SIN: return sin(x);
    case KILN_VMATH_COS: return cos(x);
    case KILN_VMATH_ERF: return erf(x);
    case KILN_VMATH_SQRT: return sqrt(x);
    case KILN_VMATH_RSQRT: return (double)(1 / sqrtl(x));
    case KILN_VMATH_GELU: return (double)gelu_ref(x);
    case KILN_VMATH_GELU_TANH: return (double)gelu_tanh_ref(x);
    case KILN_VMATH_SILU: return (double)silu_ref(x);
    case KILN_VMATH_SOFTPLUS: return (double)softplus_ref(x);
    case KILN_VMATH_FLOOR: return floor(x);
    case KILN_VMATH_CEIL: return ceil(x);
    case KILN_VMATH_ROUND: return nearbyint(x); /* the default mode: ties to even */
    case KILN_VMATH_TRUNC: return trunc(x);
    case KILN_VMATH_ATAN: return atan(x);
    case KILN_VMATH_LOG2: return log2(x);
    case KILN_VMATH_LOG10: return log10(x);
    case KILN_VMATH_EXP2: return exp2(x);
    case KILN_VMATH_LOG_SIGMOID: return (double)-(fmaxl(-x, 0) + log1pl(expl(-fabsl(x))));
    case KILN_VMATH_MISH: return isinf(x) && x < 0 ? -0.0 : (double)(x * tanhl(log1pl(expl(x))));
    case KILN_VMATH_SOFTSIGN: return isinf(x) ? copysign(1.0, x) : x / (1 + fabs(x));
    case KILN_VMATH_HARDSWISH: return x * fmin(fmax(x + 3, 0.0), 6.0) / 6;
    case KILN_VMATH_HARDSIGMOID: return isnan(x) ? x : x <= -3 ? 0.0 : x >= 3 ? 1.0 : x / 6 + 0.5;
    case KILN_VMATH_RECIPROCAL: return (double)(1.0L / x);
    default: return NAN;
    }
}

/* Error of got in units of the last place of the float nearest want (denormal ulp below
 * 2^-126); inf counts as 2^128, so FLT_MAX for an overflow is a large error, not zero. Signed
 * zeros must match when both are zero. */
static double ulp_error(float got, double want)
{
    if (isnan(want) || isnan(got))
        return isnan(want) && isnan(got) ? 0 : INFINITY;
    if (got == 0 && want == 0)
        return !signbit(got) == !signbit(want) ? 0 : INFINITY;
    double g = isinf(got) ? copysign(0x1p128, got) : got;
    double w = fabs(want) >= 0x1p128 ? copysign(0x1p128, want) : want;
    int e;
    frexp(w, &e); /* |w| in [2^(e-1), 2^e) */
    double ulp = ldexp(1.0, e - 24 < -149 ? -149 : e - 24);
    return fabs(g - w) / ulp;
}

/* ---- inputs ------------------------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static uint32_t rng_u32(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15u); /* splitmix64 */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return (uint32_t)((z ^ (z >> 31)) >> 32);
}
static float bits_to_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static float rng_uniform(double lo, double hi)
{
    return (float)(lo + (hi - lo) * (rng_u32() / 4294967296.0));
}

static const float special_values[] = {
    0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1.0f, -1.0f, 0.5f, -0.5f, 2.0f, -2.0f,
    FLT_MIN, -FLT_MIN, 0x1p-149f, -0x1p-149f, 0x1.fffffcp-127f, -0x1.fffffcp-127f, 1e-30f,
    -1e-30f, 0x1p-24f, -0x1p-24f, 1e-7f, -1e-7f, FLT_MAX, -FLT_MAX, FLT_EPSILON, 1 - FLT_EPSILON,
    1 + FLT_EPSILON, -1 + FLT_EPSILON / 2, 88.72283f, 88.7228394f, 88.73f, 89.0f, -87.33654f,
    -87.4f, -100.0f, -103.97208f, -103.98f, -104.0f, -110.0f, -120.0f, -200.0f, 100.0f,
    20.0f, 20.0001f, 19.9999f, -20.0f, 9.0f, 9.1f, -9.1f, 0.70710677f, 0.7071068f, 1.4142135f,
    1.4142137f, 0.35355338f, 0.7071067f, -0.7071067f, 3.92f, 3.93f, -3.92f, 10.5f, -14.8f,
    -15.0f, 15.0f, -16.0f, -29.9f, -30.0f, 30.0f, 31.0f, 1.5707964f, 3.1415927f, 4.712389f,
    6.2831855f, 1e4f, -1e4f, 131071.99f, 131072.0f, 131072.01f, 1e6f, 1e20f, -1e20f,
    0.54930615f, 3.0e38f};

enum { SWEEP_N = 1 << 20 };

/* The working range of each op, where the uniform part of the sweep goes. */
static void op_range(kiln__vmath_op op, double *lo, double *hi)
{
    static const double ranges[KILN_VMATH_OP_COUNT][2] = {
        [KILN_VMATH_EXP] = {-105, 90},       [KILN_VMATH_LOG] = {0, 4},
        [KILN_VMATH_LOG1P] = {-1, 4},        [KILN_VMATH_EXPM1] = {-20, 90},
        [KILN_VMATH_TANH] = {-10, 10},       [KILN_VMATH_SIGMOID] = {-110, 30},
        [KILN_VMATH_SIN] = {-1e4, 1e4},      [KILN_VMATH_COS] = {-1e4, 1e4},
        [KILN_VMATH_ERF] = {-5, 5},          [KILN_VMATH_SQRT] = {0, 1e4},
        [KILN_VMATH_RSQRT] = {0, 1e4},       [KILN_VMATH_GELU] = {-16, 16},
        [KILN_VMATH_GELU_TANH] = {-12, 12},  [KILN_VMATH_SILU] = {-120, 30},
        [KILN_VMATH_SOFTPLUS] = {-110, 30},
        [KILN_VMATH_FLOOR] = {-1e7, 1e7},    [KILN_VMATH_CEIL] = {-1e7, 1e7},
        [KILN_VMATH_ROUND] = {-1e7, 1e7},    [KILN_VMATH_TRUNC] = {-1e7, 1e7},
        [KILN_VMATH_ATAN] = {-10, 10},       [KILN_VMATH_LOG2] = {0, 4},
        [KILN_VMATH_LOG10] = {0, 4},         [KILN_VMATH_EXP2] = {-155, 130},
        [KILN_VMATH_LOG_SIGMOID] = {-30, 110}, [KILN_VMATH_MISH] = {-120, 30},
        [KILN_VMATH_SOFTSIGN] = {-100, 100}, [KILN_VMATH_HARDSWISH] = {-6, 6},
        [KILN_VMATH_HARDSIGMOID] = {-6, 6},  [KILN_VMATH_RECIPROCAL] = {-1e4, 1e4},
    };
    *lo = ranges[op][0];
    *hi = ranges[op][1];
}

/* specials, then 1/2 uniform over the range, 1/8 uniform over [-4, 4], 1/8 random bits with
 * |x| inside the range (every binade, denormals included), 1/4 random bits over all floats */
static void make_sweep(kiln__vmath_op op, float *x)
{
    double lo, hi;
    op_range(op, &lo, &hi);
    double mag = fmax(fabs(lo), fabs(hi));
    size_t n_special = sizeof special_values / sizeof special_values[0];
    size_t i = 0;
    for (; i < n_special; i++)
        x[i] = special_values[i];
    for (; i < SWEEP_N / 2; i++)
        x[i] = rng_uniform(lo, hi);
    for (; i < SWEEP_N / 2 + SWEEP_N / 8; i++)
        x[i] = rng_uniform(-4, 4);
    for (; i < SWEEP_N / 2 + SWEEP_N / 4; i++) {
        float v;
        do
            v = bits_to_float(rng_u32());
        while (!(fabsf(v) <= mag));
        x[i] = v;
    }
    for (; i < SWEEP_N; i++)
        x[i] = bits_to_float(rng_u32());
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* ---- the sweep ---------------------------------------------------------------------------- */

static const char *const isa_list[] = {"scalar", "avx2", "avx512"};
static float *sweep_x, *sweep_y, *sweep_avx2;
static double *sweep_ref;

/* The bound on the worst error, in ulp, for every ISA. */
static double op_bound(kiln__vmath_op op)
{
    switch (op) {
    case KILN_VMATH_SQRT: return 0.5;
    case KILN_VMATH_RSQRT: return 1.5; /* two correctly rounded steps */
    case KILN_VMATH_FLOOR: case KILN_VMATH_CEIL: case KILN_VMATH_ROUND: case KILN_VMATH_TRUNC:
        return 0; /* exact */
    default: return 4.0;
    }
}

KT_TEST(vmath_accuracy_sweep)
{
    sweep_x = malloc(SWEEP_N * sizeof *sweep_x);
    sweep_y = malloc(SWEEP_N * sizeof *sweep_y);
    sweep_avx2 = malloc(SWEEP_N * sizeof *sweep_avx2);
    sweep_ref = malloc(SWEEP_N * sizeof *sweep_ref);
    KT_CHECK(sweep_x && sweep_y && sweep_avx2 && sweep_ref);
    if (!sweep_x || !sweep_y || !sweep_avx2 || !sweep_ref)
        return;
    printf("max error in ulp over %d inputs each (bound in brackets):\n", SWEEP_N);
    printf("  %-10s %10s %10s %10s\n", "op", "scalar", "avx2", "avx512");
    for (int op = 0; op < KILN_VMATH_OP_COUNT; op++) {
        make_sweep(op, sweep_x);
        for (int i = 0; i < SWEEP_N; i++)
            sweep_ref[i] = ref_of(op, sweep_x[i]);
        printf("  %-10s", kiln__vmath_op_name(op));
        int have_avx2 = 0;
        for (size_t k = 0; k < sizeof isa_list / sizeof isa_list[0]; k++) {
            if (kiln__vmath_force_isa(isa_list[k]) != 0) {
                printf(" %10s", "n/a");
                continue;
            }
            kiln__vmath_f32_kernel(op)(sweep_y, sweep_x, SWEEP_N);
            double worst = 0;
            int worst_i = 0;
            for (int i = 0; i < SWEEP_N; i++) {
                double err = ulp_error(sweep_y[i], sweep_ref[i]);
                if (err > worst) {
                    worst = err;
                    worst_i = i;
                }
            }
            printf(" %10.3f", worst);
            KT_CHECK_MSG(worst <= op_bound(op), "%s/%s: %.3g ulp at x = %.9g (got %.9g, want %.9g)",
                         kiln__vmath_op_name(op), isa_list[k], worst, sweep_x[worst_i],
                         sweep_y[worst_i], sweep_ref[worst_i]);
            /* The two vector ISAs run the same algorithm and must agree to the bit, so results do
             * not depend on the machine. */
            if (strcmp(isa_list[k], "avx2") == 0) {
                memcpy(sweep_avx2, sweep_y, SWEEP_N * sizeof *sweep_y);
                have_avx2 = 1;
            }
            if (strcmp(isa_list[k], "avx512") == 0 && have_avx2) {
                int differ = 0;
                for (int i = 0; i < SWEEP_N; i++)
                    differ += !same_bits(sweep_y[i], sweep_avx2[i]);
                KT_CHECK_MSG(differ == 0, "%s: avx2 and avx512 differ in %d lanes",
                             kiln__vmath_op_name(op), differ);
            }
        }
        printf("  [%g]\n", op_bound(op));
    }
    kiln__vmath_force_isa(NULL);
    free(sweep_x);
    free(sweep_y);
    free(sweep_avx2);
    free(sweep_ref);
}

/* ---- in place and tails ------------------------------------------------------------------- */

KT_TEST(vmath_in_place_and_every_tail_length)
{
    enum { N = 1000, MAXLEN = 67 };
    static float x[N], y[N], z[N], whole[N];
    for (int i = 0; i < N; i++)
        x[i] = i < 40 ? special_values[i] : rng_uniform(-30, 30);
    for (size_t k = 0; k < sizeof isa_list / sizeof isa_list[0]; k++) {
        if (kiln__vmath_force_isa(isa_list[k]) != 0)
            continue;
        for (int op = 0; op < KILN_VMATH_OP_COUNT; op++) {
            kiln__vmath_f32_fn f = kiln__vmath_f32_kernel(op);
            f(whole, x, N);
            memcpy(z, x, sizeof z);
            f(z, z, N); /* in place */
            int bad = 0;
            for (int i = 0; i < N; i++)
                bad += !same_bits(z[i], whole[i]);
            KT_CHECK_MSG(bad == 0, "%s/%s in place: %d lanes differ", kiln__vmath_op_name(op),
                         isa_list[k], bad);
            f(NULL, NULL, 0);
            /* Every length 0..67 from several offsets: equal to the whole-array result, and
             * nothing written past n. */
            for (int offset = 0; offset < 3; offset++) {
                for (int n = 0; n <= MAXLEN; n++) {
                    for (int i = 0; i < MAXLEN + 8; i++)
                        y[i] = 12345.0f;
                    f(y, x + offset, n);
                    for (int i = 0; i < n; i++)
                        bad += !same_bits(y[i], whole[i + offset]);
                    for (int i = n; i < MAXLEN + 8; i++)
                        bad += y[i] != 12345.0f;
                }
            }
            KT_CHECK_MSG(bad == 0, "%s/%s tails: %d lanes wrong", kiln__vmath_op_name(op),
                         isa_list[k], bad);
        }
    }
    kiln__vmath_force_isa(NULL);
}

/* ---- edge values, spelled out ------------------------------------------------------------- */

static float one(kiln__vmath_op op, float x)
{
    float y;
    kiln__vmath_f32_kernel(op)(&y, &x, 1);
    return y;
}

KT_TEST(vmath_edge_values)
{
    for (size_t k = 0; k < sizeof isa_list / sizeof isa_list[0]; k++) {
        if (kiln__vmath_force_isa(isa_list[k]) != 0)
            continue;
        KT_CHECK(one(KILN_VMATH_EXP, 89.0f) == INFINITY);
        KT_CHECK(one(KILN_VMATH_EXP, 88.72283f) == (float)exp(88.72283f)); /* just below FLT_MAX */
        KT_CHECK(one(KILN_VMATH_EXP, -104.0f) == 0.0f);
        KT_CHECK(one(KILN_VMATH_EXP, -100.0f) > 0.0f && one(KILN_VMATH_EXP, -100.0f) < FLT_MIN);
        KT_CHECK(one(KILN_VMATH_EXP, -INFINITY) == 0.0f);
        KT_CHECK(one(KILN_VMATH_EXP, 0.0f) == 1.0f);
        KT_CHECK(isnan(one(KILN_VMATH_LOG, -1.0f)));
        KT_CHECK(one(KILN_VMATH_LOG, 0.0f) == -INFINITY);
        KT_CHECK(one(KILN_VMATH_LOG, -0.0f) == -INFINITY);
        KT_CHECK(one(KILN_VMATH_LOG, 1.0f) == 0.0f);
        KT_CHECK(one(KILN_VMATH_LOG, INFINITY) == INFINITY);
        KT_NEAR(one(KILN_VMATH_LOG, 0x1p-149f), -103.27893f, 1e-6);
        KT_CHECK(one(KILN_VMATH_LOG1P, -1.0f) == -INFINITY);
        KT_CHECK(isnan(one(KILN_VMATH_LOG1P, -2.0f)));
        KT_CHECK(one(KILN_VMATH_LOG1P, 1e-30f) == 1e-30f);
        KT_CHECK(one(KILN_VMATH_EXPM1, 1e-30f) == 1e-30f);
        KT_CHECK(one(KILN_VMATH_EXPM1, -INFINITY) == -1.0f);
        KT_CHECK(one(KILN_VMATH_EXPM1, 100.0f) == INFINITY);
        KT_CHECK(one(KILN_VMATH_TANH, 100.0f) == 1.0f);
        KT_CHECK(one(KILN_VMATH_TANH, -100.0f) == -1.0f);
        KT_CHECK(one(KILN_VMATH_TANH, INFINITY) == 1.0f);
        KT_CHECK(one(KILN_VMATH_SIGMOID, 100.0f) == 1.0f);
        KT_NEAR(one(KILN_VMATH_SIGMOID, -100.0f) / 3.7200760e-44f, 1.0, 0.05); /* denormal */
        KT_CHECK(one(KILN_VMATH_SIGMOID, -INFINITY) == 0.0f);
        KT_CHECK(one(KILN_VMATH_SIGMOID, 0.0f) == 0.5f);
        KT_NEAR(one(KILN_VMATH_SIN, 1e4f), -0.30561438888825215, 1e-7);
        KT_NEAR(one(KILN_VMATH_COS, 1e4f), -0.95215536825901481, 1e-7);
        KT_NEAR(one(KILN_VMATH_SIN, 1e6f), -0.34999350217129294, 1e-7); /* libm lane */
        KT_CHECK(isnan(one(KILN_VMATH_SIN, INFINITY)));
        KT_CHECK(isnan(one(KILN_VMATH_COS, NAN)));
        KT_CHECK(one(KILN_VMATH_ERF, 10.0f) == 1.0f && one(KILN_VMATH_ERF, -INFINITY) == -1.0f);
        KT_CHECK(one(KILN_VMATH_RSQRT, 0.0f) == INFINITY && one(KILN_VMATH_RSQRT, INFINITY) == 0);
        KT_CHECK(one(KILN_VMATH_SOFTPLUS, 1000.0f) == 1000.0f);
        KT_CHECK(one(KILN_VMATH_SOFTPLUS, 21.0f) == 21.0f);
        KT_CHECK(one(KILN_VMATH_SOFTPLUS, -INFINITY) == 0.0f);
        KT_NEAR(one(KILN_VMATH_SOFTPLUS, 0.0f), 0.69314718055994531, 1e-7);
        KT_CHECK(one(KILN_VMATH_SILU, -INFINITY) == 0.0f);
        KT_CHECK(one(KILN_VMATH_SILU, INFINITY) == INFINITY);
        KT_CHECK(one(KILN_VMATH_GELU, -INFINITY) == 0.0f);
        KT_CHECK(one(KILN_VMATH_GELU, INFINITY) == INFINITY);
        KT_CHECK(one(KILN_VMATH_GELU_TANH, -INFINITY) == 0.0f);
        KT_CHECK(one(KILN_VMATH_GELU_TANH, INFINITY) == INFINITY);
        KT_NEAR(one(KILN_VMATH_GELU, 1.0f), 0.84134474606854293, 1e-7);
        KT_NEAR(one(KILN_VMATH_GELU_TANH, 1.0f), 0.84119199, 1e-7);
        KT_CHECK(one(KILN_VMATH_ROUND, 2.5f) == 2.0f && one(KILN_VMATH_ROUND, 3.5f) == 4.0f);
        KT_CHECK(one(KILN_VMATH_ROUND, -0.5f) == 0.0f && signbit(one(KILN_VMATH_ROUND, -0.5f)));
        KT_CHECK(one(KILN_VMATH_CEIL, -0.5f) == 0.0f && signbit(one(KILN_VMATH_CEIL, -0.5f)));
        KT_CHECK(one(KILN_VMATH_TRUNC, -0.7f) == 0.0f && signbit(one(KILN_VMATH_TRUNC, -0.7f)));
        KT_CHECK(one(KILN_VMATH_FLOOR, -0.5f) == -1.0f && one(KILN_VMATH_FLOOR, 1e30f) == 1e30f);
        KT_CHECK(one(KILN_VMATH_EXP2, 3.0f) == 8.0f && one(KILN_VMATH_EXP2, -149.0f) == 0x1p-149f);
        KT_CHECK(one(KILN_VMATH_EXP2, 128.0f) == INFINITY && one(KILN_VMATH_EXP2, -INFINITY) == 0.0f);
        KT_CHECK(one(KILN_VMATH_LOG2, 8.0f) == 3.0f && one(KILN_VMATH_LOG10, 0.0f) == -INFINITY);
        KT_NEAR(one(KILN_VMATH_ATAN, INFINITY), 1.5707963267948966, 1e-7);
        KT_CHECK(one(KILN_VMATH_MISH, -INFINITY) == 0.0f && one(KILN_VMATH_MISH, INFINITY) == INFINITY);
        KT_CHECK(one(KILN_VMATH_SOFTSIGN, -INFINITY) == -1.0f && one(KILN_VMATH_LOG_SIGMOID, -INFINITY) == -INFINITY);
        KT_CHECK(one(KILN_VMATH_HARDSWISH, -3.5f) == 0.0f && one(KILN_VMATH_HARDSWISH, 4.0f) == 4.0f);
        for (int op = 0; op < KILN_VMATH_OP_COUNT; op++)
            KT_CHECK_MSG(isnan(one(op, NAN)), "%s(NaN)", kiln__vmath_op_name(op));
    }
    kiln__vmath_force_isa(NULL);
}

/* ---- f64 ---------------------------------------------------------------------------------- */

KT_TEST(vmath_f64)
{
    enum { N = 41 };
    double x[N], y[N], z[N];
    for (int i = 0; i < N; i++)
        x[i] = -20 + i;
    for (int op = 0; op < KILN_VMATH_OP_COUNT; op++) {
        kiln__vmath_f64_fn f = kiln__vmath_f64_kernel(op);
        f(y, x, N);
        memcpy(z, x, sizeof z);
        f(z, z, N);
        KT_CHECK(memcmp(y, z, sizeof y) == 0);
        f(NULL, NULL, 0);
        for (int i = 0; i < N; i++) {
            double want = ref_of(op, (float)x[i]); /* x is exactly a float here */
            if (isnan(want) || isinf(want))
                KT_CHECK(isnan(want) ? isnan(y[i]) : y[i] == want);
            else /* libm loops: the tails of gelu and gelu_tanh lose ~1e-13 to rounding of x */
                KT_CHECK_MSG(fabs(y[i] - want) <= 1e-12 * fabs(want) + 1e-300,
                             "%s(%g) = %.17g, want %.17g", kiln__vmath_op_name(op), x[i], y[i],
                             want);
        }
    }
    double big[4] = {-800, 800, -INFINITY, INFINITY}, out[4];
    kiln__vsigmoid_f64(out, big, 4);
    KT_CHECK(out[0] == 0 && out[1] == 1 && out[2] == 0 && out[3] == 1);
    kiln__vsoftplus_f64(out, big, 4);
    KT_CHECK(out[0] == 0 && out[1] == 800 && out[2] == 0 && out[3] == INFINITY);
    kiln__vgelu_f64(out, big, 4);
    KT_CHECK(out[0] == 0 && out[1] == 800 && out[2] == 0 && out[3] == INFINITY);
    kiln__vtanh_f64(out, big, 4);
    KT_CHECK(out[0] == -1 && out[1] == 1);
}

/* ---- dispatch ----------------------------------------------------------------------------- */

KT_TEST(vmath_isa_switch)
{
    const char *isa = kiln__vmath_isa();
    KT_CHECK(strcmp(isa, "scalar") == 0 || strcmp(isa, "avx2") == 0 || strcmp(isa, "avx512") == 0);
    KT_CHECK(kiln__vmath_force_isa("scalar") == 0);
    KT_CHECK(strcmp(kiln__vmath_isa(), "scalar") == 0);
    KT_CHECK(kiln__vmath_force_isa("sse9") == -1);
    KT_CHECK(strcmp(kiln__vmath_isa(), "scalar") == 0);
    KT_CHECK(kiln__vmath_force_isa(NULL) == 0);
    KT_CHECK(strcmp(kiln__vmath_isa(), isa) == 0);
    KT_CHECK(kiln__vmath_f32_kernel(KILN_VMATH_OP_COUNT) == NULL);
    KT_CHECK(strcmp(kiln__vmath_op_name(KILN_VMATH_GELU_TANH), "gelu_tanh") == 0);
    float x = 1.0f, y = 0;
    kiln__vexp_f32(&y, &x, 1);
    KT_NEAR(y, 2.718281828, 1e-7);
    printf("vmath ISA in use: %s\n", isa);
}

/* ---- threads ------------------------------------------------------------------------------ */

/* Kernels called from several threads while another switches between the vector ISAs (whose
 * results are bit-identical, so every call can be checked). */
enum { THREAD_N = 4096, THREAD_ROUNDS = 200 };
static float thread_x[THREAD_N], thread_want[THREAD_N];
static atomic_int thread_bad;

static void *thread_body(void *arg)
{
    (void)arg;
    float y[THREAD_N];
    for (int round = 0; round < THREAD_ROUNDS; round++) {
        kiln__vgelu_f32(y, thread_x, THREAD_N);
        if (memcmp(y, thread_want, sizeof y) != 0)
            atomic_fetch_add(&thread_bad, 1);
    }
    return NULL;
}

KT_TEST(vmath_threads)
{
    int vector_isas = (kiln__vmath_force_isa("avx2") == 0) + (kiln__vmath_force_isa("avx512") == 0);
    kiln__vmath_force_isa(NULL);
    for (int i = 0; i < THREAD_N; i++)
        thread_x[i] = rng_uniform(-20, 20);
    kiln__vgelu_f32(thread_want, thread_x, THREAD_N);
    pthread_t threads[3];
    for (int t = 0; t < 3; t++)
        KT_CHECK(pthread_create(&threads[t], NULL, thread_body, NULL) == 0);
    for (int i = 0; vector_isas == 2 && i < 1000; i++)
        kiln__vmath_force_isa(i % 2 ? "avx2" : "avx512");
    for (int t = 0; t < 3; t++)
        pthread_join(threads[t], NULL);
    kiln__vmath_force_isa(NULL);
    KT_CHECK(atomic_load(&thread_bad) == 0);
}

int main(void)
{
    KT_RUN(vmath_isa_switch);
    KT_RUN(vmath_edge_values);
    KT_RUN(vmath_in_place_and_every_tail_length);
    KT_RUN(vmath_f64);
    KT_RUN(vmath_threads);
    KT_RUN(vmath_accuracy_sweep);
    return kt_finish();
}
