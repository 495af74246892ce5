/* Derivatives of the ops written as expressions in the op table (ir/optable.h, KILN__OPEXPR):
 * each row's gradient expression expanded over tensor ops, so a new op of that kind needs no
 * line here. Constants stay scalars (t * 0.5 is one op, not a fill and a multiply) until a where
 * needs a tensor; constant-only subexpressions fold. */
#include <math.h>
#include <stdarg.h>

#include "autodiff/ad-math.h"

/* What each gradient reads, as bits: 1 the input (E_X), 2 the output (E_Y); a constant expression
 * of the expression over the same vocabulary. */
#define E_X 1
#define E_Y 2
#define E_G 0
#define E_K(c) 0
#define E_ADD(a, b) ((a) | (b))
#define E_SUB(a, b) ((a) | (b))
#define E_MUL(a, b) ((a) | (b))
#define E_DIV(a, b) ((a) | (b))
#define E_MIN(a, b) ((a) | (b))
#define E_MAX(a, b) ((a) | (b))
#define E_LT(a, b) ((a) | (b))
#define E_GT(a, b) ((a) | (b))
#define E_LE(a, b) ((a) | (b))
#define E_GE(a, b) ((a) | (b))
#define E_AND(a, b) ((a) | (b))
#define E_NEG(a) (a)
#define E_ABS(a) (a)
#define E_EXP(a) (a)
#define E_TANH(a) (a)
#define E_SIGMOID(a) (a)
#define E_WHERE(m, a, b) ((m) | (a) | (b))
int kiln__ad_expr_saves(kiln__opcode code) {
    switch (code) {
#define SAVES(NAME, name, forward, gradient) \
    case KILN__OP_##NAME: return gradient;
        KILN__OPEXPR(SAVES)
#undef SAVES
    default: return 0;
    }
}
#include "ir/opexpr_end.h"

/* A value of the expression: a tensor (owned; NULL after an error, which the next op carries)
 * or a constant. */
typedef struct {
    kiln__tensor *t;
    double k;
    bool is_k;
} ex_val;

typedef struct {
    kiln__opctx *c;
    kiln__tensor *g, *x, *y; /* borrowed: each use takes its own reference */
} ex_ctx;

static ex_val ex_t(kiln__tensor *t) { return (ex_val){.t = t}; }
static ex_val ex_k(double k) { return (ex_val){.k = k, .is_k = true}; }

/* A constant as a 0-d tensor of the gradient's dtype, for the ops that take no scalar. */
static kiln__tensor *ex_tensor(ex_ctx *s, ex_val v) {
    if (!v.is_k) return v.t;
    return s->g ? kiln__t_fill(s->c, s->g->device, s->g->dtype, 0, NULL, v.k) : NULL;
}

static double fold2(kiln__opcode op, double a, double b) {
    switch (op) {
    case KILN__OP_ADD: return a + b;
    case KILN__OP_SUB: return a - b;
    case KILN__OP_MUL: return a * b;
    case KILN__OP_DIV: return a / b;
    case KILN__OP_MINIMUM: return isnan(a) || isnan(b) ? NAN : fmin(a, b);
    case KILN__OP_MAXIMUM: return isnan(a) || isnan(b) ? NAN : fmax(a, b);
    case KILN__OP_LT: return a < b;
    case KILN__OP_GT: return a > b;
    case KILN__OP_LE: return a <= b;
    case KILN__OP_GE: return a >= b;
    case KILN__OP_LOGICAL_AND: return a != 0 && b != 0;
    default: return NAN;
    }
}

static inline double fold1(kiln__opcode op, double a) {
    switch (op) {
    case KILN__OP_NEG: return -a;
    case KILN__OP_ABS: return fabs(a);
    case KILN__OP_EXP: return exp(a);
    case KILN__OP_TANH: return tanh(a);
    case KILN__OP_SIGMOID: return 1 / (1 + exp(-a));
    default: return NAN;
    }
}

static ex_val ex_bin(ex_ctx *s, kiln__opcode op, ex_val a, ex_val b) {
    if (a.is_k && b.is_k) return ex_k(fold2(op, a.k, b.k));
    if (op == KILN__OP_LOGICAL_AND && (a.is_k || b.is_k)) { /* true and m is m */
        ex_val k = a.is_k ? a : b, m = a.is_k ? b : a;
        if (k.k != 0) return m;
        kiln__drop(1, m.t);
        return ex_k(0);
    }
    if (b.is_k) return ex_t(kiln__t_binary_scalar(s->c, op, a.t, b.k, false));
    if (a.is_k) return ex_t(kiln__t_binary_scalar(s->c, op, b.t, a.k, true));
    return ex_t(kiln__t_binary(s->c, op, a.t, b.t));
}

static inline ex_val ex_un(ex_ctx *s, kiln__opcode op, ex_val a) {
    return a.is_k ? ex_k(fold1(op, a.k)) : ex_t(kiln__t_unary(s->c, op, a.t));
}

static inline ex_val ex_where(ex_ctx *s, ex_val m, ex_val a, ex_val b) {
    if (m.is_k) {
        kiln__drop(1, m.k != 0 ? b.t : a.t);
        return m.k != 0 ? a : b;
    }
    kiln__tensor *at = ex_tensor(s, a), *bt = ex_tensor(s, b);
    return ex_t(kiln__t_where(s->c, m.t, at, bt));
}

#define E_X ex_t(ad_ref(s->x))
#define E_Y ex_t(ad_ref(s->y))
#define E_G ex_t(ad_ref(s->g))
#define E_K(c) ex_k(c)
#define E_ADD(a, b) ex_bin(s, KILN__OP_ADD, a, b)
#define E_SUB(a, b) ex_bin(s, KILN__OP_SUB, a, b)
#define E_MUL(a, b) ex_bin(s, KILN__OP_MUL, a, b)
#define E_DIV(a, b) ex_bin(s, KILN__OP_DIV, a, b)
#define E_MIN(a, b) ex_bin(s, KILN__OP_MINIMUM, a, b) /* NaN wins, as torch.minimum */
#define E_MAX(a, b) ex_bin(s, KILN__OP_MAXIMUM, a, b)
#define E_LT(a, b) ex_bin(s, KILN__OP_LT, a, b)
#define E_GT(a, b) ex_bin(s, KILN__OP_GT, a, b)
#define E_LE(a, b) ex_bin(s, KILN__OP_LE, a, b)
#define E_GE(a, b) ex_bin(s, KILN__OP_GE, a, b)
#define E_AND(a, b) ex_bin(s, KILN__OP_LOGICAL_AND, a, b)
#define E_NEG(a) ex_un(s, KILN__OP_NEG, a)
#define E_ABS(a) ex_un(s, KILN__OP_ABS, a)
#define E_EXP(a) ex_un(s, KILN__OP_EXP, a)
#define E_TANH(a) ex_un(s, KILN__OP_TANH, a)
#define E_SIGMOID(a) ex_un(s, KILN__OP_SIGMOID, a)
#define E_WHERE(m, a, b) ex_where(s, m, a, b)
kiln__tensor *kiln__ad_expr_backward(kiln__opctx *c, kiln__opcode code, kiln__tensor *g, kiln__tensor *x, kiln__tensor *y) {
    ex_ctx ctx = {c, g, x, y}, *s = &ctx;
    ex_val r;
    switch (code) {
#define BACKWARD(NAME, name, forward, gradient) \
    case KILN__OP_##NAME: r = gradient; break;
        KILN__OPEXPR(BACKWARD)
#undef BACKWARD
    default: r = ex_k(NAN); break; /* not reached: only EXPR rows come here */
    }
    kiln__tensor *out = r.is_k ? (g ? kiln__t_fill(c, g->device, g->dtype, g->ndim, g->shape, r.k) : NULL) : r.t;
    kiln__drop(1, g);
    return out;
}
#include "ir/opexpr_end.h"
