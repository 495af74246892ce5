/* Unary elementwise kernels: sign-type ops in every numeric dtype, clamp, logical not, and
 * the float math of vmath.h (f32 and f64; the op layer converts everything else). */
#include <math.h>

#include "backend/cpu/elementwise-impl.h"
#include "backend/cpu/vmath.h"

/* ---- sign-type ops: f32 f64 i32 i64 ------------------------------------------------------- */
#define UNARY_FN(name, T, EXPR) \
    static void name(void *ctx, int64_t n, char **p, const int64_t *st) { KILN__EW_RUN1(n, p[0], st[0], p[1], st[1], T, T, EXPR); }

/* Integer negation wraps (INT_MIN stays INT_MIN) instead of overflowing. */
#define INT_UNARY_SET(sfx, T, UT)                                           \
    UNARY_FN(neg_##sfx, T, (T)((UT)0 - (UT)x))                              \
    UNARY_FN(abs_##sfx, T, x < 0 ? (T)((UT)0 - (UT)x) : x)                  \
    UNARY_FN(sign_##sfx, T, (x > 0) - (x < 0))                              \
    UNARY_FN(relu_##sfx, T, x < 0 ? 0 : x)
INT_UNARY_SET(i32, int32_t, uint32_t)
INT_UNARY_SET(i64, int64_t, uint64_t)

/* sign keeps NaN and the sign of zero (NumPy's choice); relu keeps NaN (PyTorch's). */
#define FLOAT_UNARY_SET(sfx, T, FABS)                                       \
    UNARY_FN(neg_##sfx, T, -x)                                              \
    UNARY_FN(abs_##sfx, T, FABS(x))                                         \
    UNARY_FN(sign_##sfx, T, x > 0 ? (T)1 : (x < 0 ? (T)-1 : x))             \
    UNARY_FN(relu_##sfx, T, x < 0 ? (T)0 : x)
FLOAT_UNARY_SET(f32, float, fabsf)
FLOAT_UNARY_SET(f64, double, fabs)

UNARY_FN(logical_not_b, uint8_t, x == 0)

/* ---- clamp: bounds arrive as doubles, NaN meaning "no bound" ------------------------------- */
/* An integer bound saturates to the dtype's range (the op layer passes only whole numbers). */
static int64_t int_bound(double b, int64_t none, int64_t lowest, int64_t highest) {
    if (isnan(b)) return none;
    if (b >= (double)highest) return highest; /* (double)INT64_MAX rounds up to 2^63 */
    if (b <= (double)lowest) return lowest;
    return (int64_t)b;
}
#define FLOAT_BOUNDS(T)                                                \
    const T lo = isnan(bound[0]) ? (T)-INFINITY : (T)bound[0];         \
    const T hi = isnan(bound[1]) ? (T)INFINITY : (T)bound[1];
#define INT_BOUNDS(T, LOWEST, HIGHEST)                                  \
    const T lo = (T)int_bound(bound[0], LOWEST, LOWEST, HIGHEST);      \
    const T hi = (T)int_bound(bound[1], HIGHEST, LOWEST, HIGHEST);

#define CLAMP_FN(sfx, T, BOUNDS)                                                           \
    static void clamp_##sfx(void *ctx, int64_t n, char **p, const int64_t *st) {           \
        const double *bound = ctx;                                                         \
        BOUNDS                                                                             \
        KILN__EW_RUN1(n, p[0], st[0], p[1], st[1], T, T, x < lo ? lo : (x > hi ? hi : x)); \
    }
CLAMP_FN(f32, float, FLOAT_BOUNDS(float))
CLAMP_FN(f64, double, FLOAT_BOUNDS(double))
CLAMP_FN(i32, int32_t, INT_BOUNDS(int32_t, INT32_MIN, INT32_MAX))
CLAMP_FN(i64, int64_t, INT_BOUNDS(int64_t, INT64_MIN, INT64_MAX))

#define ROW4(op) {[KILN_F32] = op##_f32, [KILN_F64] = op##_f64, [KILN_I32] = op##_i32, [KILN_I64] = op##_i64}

static const kiln__loop_fn neg_loops[KILN_DTYPE_COUNT] = ROW4(neg);
static const kiln__loop_fn abs_loops[KILN_DTYPE_COUNT] = ROW4(abs);
static const kiln__loop_fn sign_loops[KILN_DTYPE_COUNT] = ROW4(sign);
static const kiln__loop_fn relu_loops[KILN_DTYPE_COUNT] = ROW4(relu);
static const kiln__loop_fn clamp_loops[KILN_DTYPE_COUNT] = ROW4(clamp);

static const kiln__loop_fn *typed_loops(kiln__opcode code) {
    switch (code) {
    case KILN__OP_NEG: return neg_loops;
    case KILN__OP_ABS: return abs_loops;
    case KILN__OP_SIGN: return sign_loops;
    case KILN__OP_RELU: return relu_loops;
    default: return clamp_loops;
    }
}

static kiln_status kernel_typed(const kiln__op *op) {
    kiln__ew_loop l;
    if (!kiln__ew_unary_loop(op->code, op->in[0].dtype, op->out[0].dtype, op->p.f, &l))
        return kiln__ew_bad_dtype(op, op->in[0].dtype);
    kiln__cpu_foreach_op(op, 1, l.fn, l.ctx, KILN__GRAIN_ELEMENTWISE);
    return KILN_OK;
}

/* ---- float math through vmath ------------------------------------------------------------- */
/* Strided runs are gathered into a buffer this long, mapped there, and scattered back. */
#define MATH_CHUNK 256

#define MATH_LOOP(sfx, T)                                                                  \
    static void math_##sfx(void *ctx, int64_t n, char **p, const int64_t *st) {           \
        kiln__vmath_##sfx##_fn f = *(const kiln__vmath_##sfx##_fn *)ctx;                   \
        const int64_t es = (int64_t)sizeof(T);                                             \
        if (st[0] == es && st[1] == es) {                                                  \
            f((T *)p[0], (const T *)p[1], n);                                              \
            return;                                                                        \
        }                                                                                  \
        T buf[MATH_CHUNK];                                                                 \
        for (int64_t i = 0; i < n; i += MATH_CHUNK) {                                      \
            int64_t m = n - i < MATH_CHUNK ? n - i : MATH_CHUNK;                           \
            for (int64_t j = 0; j < m; j++) buf[j] = *(const T *)(p[1] + (i + j) * st[1]); \
            f(buf, buf, m);                                                                \
            for (int64_t j = 0; j < m; j++) *(T *)(p[0] + (i + j) * st[0]) = buf[j];       \
        }                                                                                  \
    }
MATH_LOOP(f32, float)
MATH_LOOP(f64, double)

/* The math kernel of an op whose cpu column in the op table is VMATH (ir/optable.h). */
static kiln__vmath_op vmath_op_of(kiln__opcode code) {
    switch (code) {
#define KILN__VMATH_X(OP, name) \
    case KILN__OP_##OP: return KILN_VMATH_##OP;
        KILN__VMATH_OPS
#undef KILN__VMATH_X
    default: return KILN_VMATH_OP_COUNT;
    }
}

/* Transcendentals cost tens of cycles an element: smaller pieces still pay for a thread. */
#define GRAIN_MATH (KILN__GRAIN_ELEMENTWISE / 4)

static kiln_status kernel_math(const kiln__op *op) {
    kiln__ew_loop l;
    if (!kiln__ew_unary_loop(op->code, op->in[0].dtype, op->out[0].dtype, op->p.f, &l))
        return kiln__ew_bad_dtype(op, op->in[0].dtype);
    kiln__cpu_foreach_op(op, 1, l.fn, l.ctx, GRAIN_MATH);
    return KILN_OK;
}

bool kiln__ew_unary_loop(kiln__opcode code, kiln_dtype dt, kiln_dtype out, const double *param, kiln__ew_loop *l) {
    *l = (kiln__ew_loop){.ctx = (void *)param};
    if (!kiln__dtype_valid(dt) || out != dt) return false;
    if (dt == KILN_BF16) return code == KILN__OP_RELU && (l->fn = kiln__ew_bf16_loop(code)) != NULL;
    if (code == KILN__OP_LOGICAL_NOT) {
        l->fn = dt == KILN_BOOL ? logical_not_b : NULL;
        return l->fn != NULL;
    }
    kiln__vmath_op vop = vmath_op_of(code);
    if (vop == KILN_VMATH_OP_COUNT) {
        if (code != KILN__OP_NEG && code != KILN__OP_ABS && code != KILN__OP_SIGN && code != KILN__OP_RELU &&
            code != KILN__OP_CLAMP)
            return false;
        kiln__loop_fn fast = kiln__ew_avx2_loop(code, dt);
        l->fn = fast ? fast : typed_loops(code)[dt];
        return l->fn != NULL;
    }
    if (dt == KILN_F32 && (l->math.f32 = kiln__vmath_f32_kernel(vop))) l->fn = math_f32;
    if (dt == KILN_F64 && (l->math.f64 = kiln__vmath_f64_kernel(vop))) l->fn = math_f64;
    l->ctx = &l->math;
    return l->fn != NULL;
}

void kiln__cpu_register_unary(kiln__kernel_fn *table) {
    static const kiln__opcode typed[] = {KILN__OP_NEG, KILN__OP_ABS, KILN__OP_SIGN, KILN__OP_RELU, KILN__OP_CLAMP};
    for (size_t i = 0; i < sizeof typed / sizeof typed[0]; i++) table[typed[i]] = kernel_typed;
    for (int code = 0; code < KILN__OP_COUNT; code++)
        if (vmath_op_of((kiln__opcode)code) != KILN_VMATH_OP_COUNT) table[code] = kernel_math;
    table[KILN__OP_LOGICAL_NOT] = kernel_typed;
}
