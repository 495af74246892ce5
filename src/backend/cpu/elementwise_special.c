/* Elementwise kernels of issue #15's math and activations that do not map onto vmath's
 * array-in array-out shape: the class tests (bool out), nan_to_num, leaky_relu and elu (with
 * parameters), fmod and remainder (integer zero divisors fail the op), atan2, and lerp (three
 * inputs). The op layer converts f16/bf16 to f32 around them, as for the other kernels. */
#include <math.h>
#include <stdatomic.h>

#include "backend/cpu/elementwise-impl.h"

#define UNARY_P_FN(name, T, U, EXPR)                                             \
    static void name(void *ctx, int64_t n, char **p, const int64_t *st) {        \
        const double *prm = ctx;                                                 \
        (void)prm;                                                               \
        KILN__EW_RUN1(n, p[0], st[0], p[1], st[1], T, U, EXPR);                  \
    }

/* ---- isnan, isinf, isfinite: f32 f64 in, bool out ---------------------------------------- */
#define CLASS_SET(sfx, T)                                       \
    UNARY_P_FN(isnan_##sfx, T, uint8_t, isnan(x) != 0)          \
    UNARY_P_FN(isinf_##sfx, T, uint8_t, isinf(x) != 0)          \
    UNARY_P_FN(isfinite_##sfx, T, uint8_t, isfinite(x) != 0)
CLASS_SET(f32, float)
CLASS_SET(f64, double)

/* ---- nan_to_num, leaky_relu, elu: f32 f64, parameters from p.f --------------------------- */
/* elu: scale * (x > 0 ? x : alpha * (exp(input_scale * x) - 1)), torch.nn.ELU and SELU. */
#define PARAM_SET(sfx, T, EXPM1)                                                                           \
    UNARY_P_FN(nan_to_num_##sfx, T, T, x != x ? (T)prm[0] : x == (T)INFINITY ? (T)prm[1] : x == (T)-INFINITY ? (T)prm[2] : x) \
    UNARY_P_FN(leaky_relu_##sfx, T, T, x < 0 ? x * (T)prm[0] : x)                                        \
    UNARY_P_FN(elu_##sfx, T, T, (T)prm[1] * (x > 0 ? x : (T)prm[0] * EXPM1((T)prm[2] * x)))
PARAM_SET(f32, float, expm1f)
PARAM_SET(f64, double, expm1)

static kiln__loop_fn param_loop(kiln__opcode code, kiln_dtype dt) {
    bool f64 = dt == KILN_F64;
    if (dt != KILN_F32 && dt != KILN_F64) return NULL;
    switch (code) {
    case KILN__OP_ISNAN: return f64 ? isnan_f64 : isnan_f32;
    case KILN__OP_ISINF: return f64 ? isinf_f64 : isinf_f32;
    case KILN__OP_ISFINITE: return f64 ? isfinite_f64 : isfinite_f32;
    case KILN__OP_NAN_TO_NUM: return f64 ? nan_to_num_f64 : nan_to_num_f32;
    case KILN__OP_LEAKY_RELU: return f64 ? leaky_relu_f64 : leaky_relu_f32;
    default: return f64 ? elu_f64 : elu_f32;
    }
}

static kiln_status kernel_unary_param(const kiln__op *op) {
    kiln__ew_loop l;
    if (!kiln__ew_special_loop(op->code, op->in[0].dtype, op->out[0].dtype, op->p.f, &l))
        return kiln__ew_bad_dtype(op, op->in[0].dtype);
    kiln__cpu_foreach_op(op, 1, l.fn, l.ctx, KILN__GRAIN_ELEMENTWISE);
    return KILN_OK;
}

/* ---- fmod, remainder, atan2 ------------------------------------------------------------- */
/* remainder takes the divisor's sign: fmod's result moved by y when the signs differ (torch's
 * formula, for floats and integers alike). */
#define FLOAT_MOD(T, FMOD)                                                                     \
    static inline T fmod_##T(T x, T y) { return FMOD(x, y); }                                  \
    static inline T remainder_##T(T x, T y) {                                                  \
        T r = FMOD(x, y);                                                                      \
        return r != 0 && ((r < 0) != (y < 0)) ? r + y : r;                                     \
    }
FLOAT_MOD(float, fmodf)
FLOAT_MOD(double, fmod)

#define FLOAT_BINARY_FN(name, T, EXPR) \
    static void name(void *ctx, int64_t n, char **p, const int64_t *st) { (void)ctx; KILN__EW_RUN2(n, p, st, T, T, EXPR); }
FLOAT_BINARY_FN(fmod_f32, float, fmod_float(x, y))
FLOAT_BINARY_FN(fmod_f64, double, fmod_double(x, y))
FLOAT_BINARY_FN(remainder_f32, float, remainder_float(x, y))
FLOAT_BINARY_FN(remainder_f64, double, remainder_double(x, y))
FLOAT_BINARY_FN(atan2_f32, float, atan2f(x, y))
FLOAT_BINARY_FN(atan2_f64, double, atan2(x, y))

/* Integers: a zero divisor is noted in the context (the kernel fails once the loop is done);
 * y == -1 gives 0 without computing INT_MIN % -1, which traps. */
#define INT_MOD(T)                                                                             \
    static inline T imod_##T(T x, T y, bool floor_mod, atomic_bool *zero) {                    \
        if (y == 0) {                                                                          \
            atomic_store_explicit(zero, true, memory_order_relaxed);                           \
            return 0;                                                                          \
        }                                                                                      \
        T r = y == -1 ? 0 : x % y;                                                             \
        return floor_mod && r != 0 && ((r < 0) != (y < 0)) ? (T)(r + y) : r;                   \
    }
INT_MOD(int32_t)
INT_MOD(int64_t)

typedef struct {
    bool floor_mod;
    atomic_bool zero;
} int_mod_ctx;

#define INT_MOD_FN(name, T)                                                                    \
    static void name(void *ctx, int64_t n, char **p, const int64_t *st) {                      \
        int_mod_ctx *m = ctx;                                                                  \
        bool fm = m->floor_mod;                                                                \
        for (int64_t i = 0; i < n; i++) {                                                      \
            T x = *(const T *)(p[1] + i * st[1]), y = *(const T *)(p[2] + i * st[2]);          \
            *(T *)(p[0] + i * st[0]) = imod_##T(x, y, fm, &m->zero);                           \
        }                                                                                      \
    }
INT_MOD_FN(mod_i32, int32_t)
INT_MOD_FN(mod_i64, int64_t)

static kiln_status kernel_mod_atan2(const kiln__op *op) {
    kiln_dtype dt = op->in[0].dtype;
    if (op->in[1].dtype != dt || op->out[0].dtype != dt) return kiln__ew_bad_dtype(op, dt);
    kiln__view v[3] = {op->out[0], op->in[0], op->in[1]};
    kiln__ew_loop l;
    if (kiln__ew_special_loop(op->code, dt, dt, op->p.f, &l)) {
        kiln__cpu_foreach(3, v, l.fn, NULL, KILN__GRAIN_ELEMENTWISE);
        return KILN_OK;
    }
    if ((dt != KILN_I32 && dt != KILN_I64) || op->code == KILN__OP_ATAN2) return kiln__ew_bad_dtype(op, dt);
    int_mod_ctx m = {.floor_mod = op->code == KILN__OP_REMAINDER};
    atomic_init(&m.zero, false);
    kiln__cpu_foreach(3, v, dt == KILN_I32 ? mod_i32 : mod_i64, &m, KILN__GRAIN_ELEMENTWISE);
    if (atomic_load(&m.zero)) {
        kiln__kernel_error("integer division by zero in %s", op->code == KILN__OP_FMOD ? "fmod" : "remainder");
        return KILN_ERR_INVALID_ARGUMENT;
    }
    return KILN_OK;
}

/* Float loops only: the integer fmod and remainder report a zero divisor after the loop. */
bool kiln__ew_special_loop(kiln__opcode code, kiln_dtype dt, kiln_dtype out, const double *param, kiln__ew_loop *l) {
    bool f64 = dt == KILN_F64;
    *l = (kiln__ew_loop){.ctx = (void *)param};
    if (dt != KILN_F32 && dt != KILN_F64) return false;
    switch (code) {
    case KILN__OP_ISNAN: case KILN__OP_ISINF: case KILN__OP_ISFINITE:
        l->fn = param_loop(code, dt);
        return out == KILN_BOOL;
    case KILN__OP_NAN_TO_NUM: case KILN__OP_LEAKY_RELU: case KILN__OP_ELU: l->fn = param_loop(code, dt); break;
    case KILN__OP_FMOD: l->fn = f64 ? fmod_f64 : fmod_f32; break;
    case KILN__OP_REMAINDER: l->fn = f64 ? remainder_f64 : remainder_f32; break;
    case KILN__OP_ATAN2: l->fn = f64 ? atan2_f64 : atan2_f32; break;
    default: return false;
    }
    return out == dt;
}

/* ---- lerp: three inputs, any of them broadcast or a scalar -------------------------------- */
#define LERP_FN(sfx, T)                                                                        \
    static void lerp_##sfx(void *ctx, int64_t n, char **p, const int64_t *st) {                \
        (void)ctx;                                                                             \
        for (int64_t i = 0; i < n; i++) {                                                      \
            T a = *(const T *)(p[1] + i * st[1]), b = *(const T *)(p[2] + i * st[2]);          \
            T w = *(const T *)(p[3] + i * st[3]), d = b - a;                                   \
            *(T *)(p[0] + i * st[0]) = w < (T)0.5 ? a + w * d : b - d * ((T)1 - w);           \
        }                                                                                      \
    }
LERP_FN(f32, float)
LERP_FN(f64, double)

static kiln_status kernel_lerp(const kiln__op *op) {
    kiln_dtype dt = op->out[0].dtype;
    if ((dt != KILN_F32 && dt != KILN_F64) || op->in[0].dtype != dt || op->in[1].dtype != dt || op->in[2].dtype != dt)
        return kiln__ew_bad_dtype(op, op->in[0].dtype);
    kiln__view v[4] = {op->out[0], op->in[0], op->in[1], op->in[2]};
    kiln__cpu_foreach(4, v, dt == KILN_F64 ? lerp_f64 : lerp_f32, NULL, KILN__GRAIN_ELEMENTWISE);
    return KILN_OK;
}

void kiln__cpu_register_special(kiln__kernel_fn *table) {
    static const kiln__opcode param[] = {KILN__OP_ISNAN, KILN__OP_ISINF, KILN__OP_ISFINITE, KILN__OP_NAN_TO_NUM,
                                         KILN__OP_LEAKY_RELU, KILN__OP_ELU};
    for (size_t i = 0; i < sizeof param / sizeof param[0]; i++) table[param[i]] = kernel_unary_param;
    table[KILN__OP_FMOD] = kernel_mod_atan2;
    table[KILN__OP_REMAINDER] = kernel_mod_atan2;
    table[KILN__OP_ATAN2] = kernel_mod_atan2;
    table[KILN__OP_LERP] = kernel_lerp;
}
