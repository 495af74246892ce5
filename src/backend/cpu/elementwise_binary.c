/* Binary elementwise kernels: arithmetic, comparisons (bool out), logical and/or, and the
 * relu gradient. Inputs share one dtype (the op layer promotes); either may be a broadcast
 * or a scalar view, which the iterator hands over with stride 0. */
#include <math.h>

#include "backend/cpu/elementwise-impl.h"

#define BINARY_FN(name, T, U, EXPR) \
    static void name(void *ctx, int64_t n, char **p, const int64_t *st) { KILN__EW_RUN2(n, p, st, T, U, EXPR); }

/* ---- arithmetic: f32 f64 i32 i64 ---------------------------------------------------------- */
/* Integer arithmetic wraps like PyTorch's (computed unsigned: signed overflow is UB in C). */
#define INT_ARITH_SET(sfx, T, UT)                          \
    BINARY_FN(add_##sfx, T, T, (T)((UT)x + (UT)y))         \
    BINARY_FN(sub_##sfx, T, T, (T)((UT)x - (UT)y))         \
    BINARY_FN(mul_##sfx, T, T, (T)((UT)x * (UT)y))         \
    BINARY_FN(maximum_##sfx, T, T, x > y ? x : y)          \
    BINARY_FN(minimum_##sfx, T, T, x < y ? x : y)
INT_ARITH_SET(i32, int32_t, uint32_t)
INT_ARITH_SET(i64, int64_t, uint64_t)

/* maximum/minimum return NaN when either side is NaN, as PyTorch's do. */
#define FLOAT_ARITH_SET(sfx, T)                                 \
    BINARY_FN(add_##sfx, T, T, x + y)                           \
    BINARY_FN(sub_##sfx, T, T, x - y)                           \
    BINARY_FN(mul_##sfx, T, T, x * y)                           \
    BINARY_FN(div_##sfx, T, T, x / y)                           \
    BINARY_FN(maximum_##sfx, T, T, (x > y || x != x) ? x : y)   \
    BINARY_FN(minimum_##sfx, T, T, (x < y || x != x) ? x : y)   \
    BINARY_FN(relu_backward_##sfx, T, T, y > 0 ? x : (T)0)
FLOAT_ARITH_SET(f32, float)
FLOAT_ARITH_SET(f64, double)

/* x ** 2 (variances, squared errors) is worth a multiply instead of a libm call. */
#define POW_FN(sfx, T, POW)                                                            \
    static void pow_##sfx(void *ctx, int64_t n, char **p, const int64_t *st) {         \
        if (st[2] == 0 && *(const T *)p[2] == (T)2) {                                  \
            KILN__EW_RUN1(n, p[0], st[0], p[1], st[1], T, T, x * x);                   \
            return;                                                                    \
        }                                                                              \
        KILN__EW_RUN2(n, p, st, T, T, POW(x, y));                                      \
    }
POW_FN(f32, float, powf)
POW_FN(f64, double, pow)

/* ---- comparisons: any numeric dtype in, bool (0/1 bytes) out ------------------------------ */
/* A bool byte other than 0/1 (raw user data) still counts as true. */
#define AS_IS(v) (v)
#define TRUTH(v) ((v) != 0)
#define COMPARE_SET(sfx, T, N)                          \
    BINARY_FN(eq_##sfx, T, uint8_t, N(x) == N(y))       \
    BINARY_FN(ne_##sfx, T, uint8_t, N(x) != N(y))       \
    BINARY_FN(lt_##sfx, T, uint8_t, N(x) < N(y))        \
    BINARY_FN(le_##sfx, T, uint8_t, N(x) <= N(y))       \
    BINARY_FN(gt_##sfx, T, uint8_t, N(x) > N(y))        \
    BINARY_FN(ge_##sfx, T, uint8_t, N(x) >= N(y))
COMPARE_SET(f32, float, AS_IS)
COMPARE_SET(f64, double, AS_IS)
COMPARE_SET(i32, int32_t, AS_IS)
COMPARE_SET(i64, int64_t, AS_IS)
COMPARE_SET(b, uint8_t, TRUTH)

BINARY_FN(logical_and_b, uint8_t, uint8_t, TRUTH(x) & TRUTH(y))
BINARY_FN(logical_or_b, uint8_t, uint8_t, TRUTH(x) | TRUTH(y))

/* ---- dispatch ----------------------------------------------------------------------------- */
/* [opcode][input dtype]; filled once at registration (under the backend's pthread_once). */
static kiln__loop_fn binary_loops[KILN__OP_COUNT][KILN_DTYPE_COUNT];

/* The comparisons and logical ops give bools: the row's dtype rule, not the opcode's place. */
static bool bool_result(kiln__opcode code) {
    kiln__dtype_rule rule = kiln__op_info_of(code)->dtype;
    return rule == KILN__DT_COMPARE || rule == KILN__DT_LOGICAL;
}

bool kiln__ew_binary_loop(kiln__opcode code, kiln_dtype dt, kiln_dtype out, kiln__ew_loop *l) {
    *l = (kiln__ew_loop){.fn = kiln__dtype_valid(dt) && code >= 0 && code < KILN__OP_COUNT ? binary_loops[code][dt] : NULL};
    kiln__loop_fn fast = l->fn ? kiln__ew_avx2_loop(code, dt) : NULL;
    if (fast) l->fn = fast;
    return l->fn && out == (bool_result(code) ? KILN_BOOL : dt);
}

static kiln_status kernel_binary(const kiln__op *op) {
    kiln_dtype dt = op->in[0].dtype;
    kiln__ew_loop l;
    if (op->in[1].dtype != dt || !kiln__ew_binary_loop(op->code, dt, op->out[0].dtype, &l))
        return kiln__ew_bad_dtype(op, dt);
    kiln__cpu_foreach_op(op, 2, l.fn, NULL, KILN__GRAIN_ELEMENTWISE);
    return KILN_OK;
}

#define SET4(CODE, op)                                                         \
    binary_loops[KILN__OP_##CODE][KILN_F32] = op##_f32;                        \
    binary_loops[KILN__OP_##CODE][KILN_F64] = op##_f64;                        \
    binary_loops[KILN__OP_##CODE][KILN_I32] = op##_i32;                        \
    binary_loops[KILN__OP_##CODE][KILN_I64] = op##_i64;
#define SET_FLOAT(CODE, op)                                                    \
    binary_loops[KILN__OP_##CODE][KILN_F32] = op##_f32;                        \
    binary_loops[KILN__OP_##CODE][KILN_F64] = op##_f64;
#define SET_COMPARE(CODE, op) SET4(CODE, op) binary_loops[KILN__OP_##CODE][KILN_BOOL] = op##_b;

void kiln__cpu_register_binary(kiln__kernel_fn *table) {
    SET4(ADD, add)
    SET4(SUB, sub)
    SET4(MUL, mul)
    SET4(MAXIMUM, maximum)
    SET4(MINIMUM, minimum)
    SET_FLOAT(DIV, div)
    SET_FLOAT(POW, pow)
    SET_FLOAT(RELU_BACKWARD, relu_backward)
    binary_loops[KILN__OP_RELU_BACKWARD][KILN_BF16] = kiln__ew_bf16_loop(KILN__OP_RELU_BACKWARD);
    SET_COMPARE(EQ, eq)
    SET_COMPARE(NE, ne)
    SET_COMPARE(LT, lt)
    SET_COMPARE(LE, le)
    SET_COMPARE(GT, gt)
    SET_COMPARE(GE, ge)
    binary_loops[KILN__OP_LOGICAL_AND][KILN_BOOL] = logical_and_b;
    binary_loops[KILN__OP_LOGICAL_OR][KILN_BOOL] = logical_or_b;
    for (int code = 0; code < KILN__OP_COUNT; code++)
        for (int d = 0; d < KILN_DTYPE_COUNT; d++)
            if (binary_loops[code][d]) table[code] = kernel_binary;
}
