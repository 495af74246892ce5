/* Derivatives of the elementwise ops: unary, binary (broadcasting is undone by the walker),
 * scalar variants, where, clamp and cast. Each op saves only what its formula reads. */
#include <math.h>

#include "autodiff/ad-math.h"

enum { SAVE_NONE = 0, SAVE_IN = 1, SAVE_OUT = 2 };

/* What the op's formula reads: its grad column in the op table (ir/optable.h). */
static int unary_saves(kiln__opcode code) {
    switch (kiln__op_info_of(code)->grad) {
    case KILN__GRAD_SAVE_OUT: return SAVE_OUT;
    case KILN__GRAD_SAVE_IN: return SAVE_IN;
    case KILN__GRAD_EXPR: return kiln__ad_expr_saves(code); /* the same bits */
    default: return SAVE_NONE;
    }
}

static void unary_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    kiln__tensor *x = n->saved[0], *y = n->saved[1];
    kiln__tensor *r = NULL;
    const double inv_sqrt2 = 0.70710678118654752440, inv_sqrt2pi = 0.39894228040143267794;
    if (kiln__op_info_of(n->code)->grad == KILN__GRAD_EXPR) {
        grads[0] = kiln__ad_expr_backward(c, n->code, g, x, y);
        return;
    }
    switch (n->code) {
    case KILN__OP_NEG: r = ad_neg(c, g); break;
    case KILN__OP_ABS: r = ad_mul(c, g, ad_un(c, KILN__OP_SIGN, ad_ref(x))); break;
    case KILN__OP_EXP: /* y's last use: handed over, so g * y may be written in place over it */
        r = ad_mul(c, g, y);
        n->saved[1] = NULL;
        break;
    case KILN__OP_EXPM1: r = ad_mul(c, g, ad_adds(c, ad_ref(y), 1.0)); break;
    case KILN__OP_LOG: r = ad_div(c, g, ad_ref(x)); break;
    case KILN__OP_LOG1P: r = ad_div(c, g, ad_adds(c, ad_ref(x), 1.0)); break;
    case KILN__OP_SQRT: r = ad_div(c, ad_muls(c, g, 0.5), ad_ref(y)); break;
    case KILN__OP_RSQRT: r = ad_mul(c, ad_muls(c, g, -0.5), ad_pows(c, ad_ref(y), 3.0)); break;
    case KILN__OP_SIN: r = ad_mul(c, g, ad_un(c, KILN__OP_COS, ad_ref(x))); break;
    case KILN__OP_COS: r = ad_mul(c, ad_neg(c, g), ad_un(c, KILN__OP_SIN, ad_ref(x))); break;
    case KILN__OP_RELU: r = kiln__t_relu_backward(c, g, ad_ref(y)); break;
    case KILN__OP_GELU: { /* Phi(x) + x phi(x) */
        kiln__tensor *cdf = ad_muls(c, ad_adds(c, ad_un(c, KILN__OP_ERF, ad_muls(c, ad_ref(x), inv_sqrt2)), 1.0), 0.5);
        kiln__tensor *pdf = ad_muls(c, ad_un(c, KILN__OP_EXP, ad_muls(c, ad_mul(c, ad_ref(x), ad_ref(x)), -0.5)), inv_sqrt2pi);
        r = ad_mul(c, g, ad_add(c, cdf, ad_mul(c, ad_ref(x), pdf)));
        break;
    }
    case KILN__OP_GELU_TANH: { /* 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3a x^2), t = tanh(k (x + a x^3)) */
        const double k = 0.79788456080286535588, a = 0.044715;
        kiln__tensor *x2 = ad_mul(c, ad_ref(x), ad_ref(x));
        kiln__tensor *t = ad_un(c, KILN__OP_TANH, ad_muls(c, ad_mul(c, ad_ref(x), ad_adds(c, ad_muls(c, ad_ref(x2), a), 1.0)), k));
        kiln__tensor *dt = ad_rsubs(c, ad_mul(c, ad_ref(t), ad_ref(t)), 1.0);
        kiln__tensor *inner = ad_muls(c, ad_adds(c, ad_muls(c, x2, 3.0 * a), 1.0), k);
        kiln__tensor *d = ad_add(c, ad_muls(c, ad_adds(c, t, 1.0), 0.5), ad_muls(c, ad_mul(c, ad_mul(c, ad_ref(x), dt), inner), 0.5));
        r = ad_mul(c, g, d);
        break;
    }
    case KILN__OP_SILU: { /* s (1 + x (1 - s)) */
        /* (a tensor is never ref'd and consumed in one expression: argument order is unspecified) */
        kiln__tensor *s = ad_un(c, KILN__OP_SIGMOID, ad_ref(x));
        kiln__tensor *one_minus_s = ad_rsubs(c, ad_ref(s), 1.0);
        kiln__tensor *d = ad_mul(c, s, ad_adds(c, ad_mul(c, ad_ref(x), one_minus_s), 1.0));
        r = ad_mul(c, g, d);
        break;
    }
    case KILN__OP_SOFTPLUS: { /* sigmoid(x), and 1 above the threshold where softplus is x (as PyTorch's) */
        kiln__tensor *one = g ? kiln__t_fill(c, g->device, g->dtype, 0, NULL, 1.0) : NULL;
        kiln__tensor *above = kiln__t_binary_scalar(c, KILN__OP_GT, ad_ref(x), 20.0, false);
        r = ad_mul(c, g, kiln__t_where(c, above, one, ad_un(c, KILN__OP_SIGMOID, ad_ref(x))));
        break;
    }
    case KILN__OP_ERF: /* 2/sqrt(pi) exp(-x^2) */
        r = ad_mul(c, g, ad_muls(c, ad_un(c, KILN__OP_EXP, ad_neg(c, ad_mul(c, ad_ref(x), ad_ref(x)))), 1.12837916709551257390));
        break;
    case KILN__OP_FLOOR: case KILN__OP_CEIL: case KILN__OP_ROUND: case KILN__OP_TRUNC: /* zeros, as PyTorch's */
        r = g ? kiln__t_fill(c, g->device, g->dtype, g->ndim, g->shape, 0.0) : NULL;
        kiln__tensor_release(g);
        break;
    case KILN__OP_LOG_SIGMOID: r = ad_mul(c, g, ad_un(c, KILN__OP_SIGMOID, ad_neg(c, ad_ref(x)))); break;
    case KILN__OP_SOFTSIGN: /* 1 / (1 + |x|)^2 */
        r = ad_div(c, g, ad_pows(c, ad_adds(c, ad_un(c, KILN__OP_ABS, ad_ref(x)), 1.0), 2.0));
        break;
    case KILN__OP_MISH: { /* t + x sigmoid(x) (1 - t^2), t = tanh(softplus(x)) */
        kiln__tensor *t = ad_un(c, KILN__OP_TANH, ad_un(c, KILN__OP_SOFTPLUS, ad_ref(x)));
        kiln__tensor *one_minus_t2 = ad_rsubs(c, ad_mul(c, ad_ref(t), ad_ref(t)), 1.0);
        kiln__tensor *xs = ad_mul(c, ad_ref(x), ad_un(c, KILN__OP_SIGMOID, ad_ref(x)));
        r = ad_mul(c, g, ad_add(c, t, ad_mul(c, xs, one_minus_t2)));
        break;
    }
    case KILN__OP_LEAKY_RELU: { /* g where x > 0, slope g elsewhere */
        kiln__tensor *pos = kiln__t_binary_scalar(c, KILN__OP_GT, ad_ref(x), 0.0, false);
        kiln__tensor *scaled = ad_muls(c, ad_ref(g), n->pf[0]); /* before g is given away */
        r = kiln__t_where(c, pos, g, scaled);
        break;
    }
    case KILN__OP_ELU: { /* scale for x > 0, scale alpha input_scale exp(input_scale x) elsewhere */
        double alpha = n->pf[0], scale = n->pf[1], in_scale = n->pf[2];
        kiln__tensor *neg = ad_muls(c, ad_un(c, KILN__OP_EXP, ad_muls(c, ad_ref(x), in_scale)), scale * alpha * in_scale);
        kiln__tensor *s = g ? kiln__t_fill(c, g->device, g->dtype, 0, NULL, scale) : NULL;
        kiln__tensor *d = kiln__t_where(c, kiln__t_binary_scalar(c, KILN__OP_GT, ad_ref(x), 0.0, false), s, neg);
        r = ad_mul(c, g, d);
        break;
    }
    case KILN__OP_NAN_TO_NUM: r = ad_keep(c, kiln__t_unary(c, KILN__OP_ISFINITE, ad_ref(x)), g); break;
    default: /* sign, logical_not: zero almost everywhere, no gradient */
        kiln__tensor_release(g);
        return;
    }
    grads[0] = r;
}

/* The automatic policy: a unary op's output is its saved output, or is made again from its
 * saved input (or its producer's output, when it saved none: neg, floor, ...). NAN_TO_NUM's node
 * does not keep its replacement values. Transcendental or not, one op counts 4 per element. */
static bool unary_plan(const kiln__ad_node *n, kiln__ad_work *w) {
    if (n->code == KILN__OP_NAN_TO_NUM) return false;
    if (n->saved[1]) return true;
    w->ops = 4 * kiln__ad_out_numel(n);
    kiln__ad_plan_saved_or_input(n, w, 0, 0);
    return true;
}

static kiln__tensor *unary_recompute(kiln__opctx *c, const kiln__ad_node *n) {
    if (n->saved[1]) return ad_ref(n->saved[1]);
    kiln__tensor *x = n->saved[0] || n->lazy[0] ? kiln__ad_saved_now(c, n, 0) : kiln__ad_input_now(c, n, 0);
    return n->pi[0] ? kiln__t_unary_params(c, n->code, x, n->pf) : kiln__t_unary(c, n->code, x);
}

static const kiln__ad_rule unary_rule = {"unary", unary_backward, unary_recompute, unary_plan};

kiln__tensor *kiln__ad_unary(kiln__opctx *c, kiln__opcode code, kiln__tensor *x) {
    return kiln__ad_unary_params(c, code, x, NULL);
}

kiln__tensor *kiln__ad_unary_params(kiln__opctx *c, kiln__opcode code, kiln__tensor *x, const double params[4]) {
    kiln__ad_node *n = kiln__ad_node_new(c, &unary_rule, 1, &x);
    if (n) n->code = code, n->pi[0] = params != NULL;
    if (n && params)
        for (int i = 0; i < 4; i++) n->pf[i] = params[i];
    int saves = unary_saves(code);
    if (saves & SAVE_IN) kiln__ad_save(c, n, 0, x);
    kiln__tensor *y = params ? kiln__t_unary_params(c, code, x, params) : kiln__t_unary(c, code, x);
    if (saves & SAVE_OUT) kiln__ad_save(c, n, 1, y);
    return kiln__ad_attach(c, n, y);
}

/* ---- clamp and hardtanh ------------------------------------------------------------------ */

/* The gradient passes where x is within the bounds: clamp's includes them, hardtanh's
 * (pi[0] set) does not, as PyTorch's. */
static void clamp_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    kiln__tensor *x = n->saved[0];
    double lo = n->pf[0], hi = n->pf[1];
    bool strict = n->pi[0];
    kiln__tensor *mask = NULL;
    if (!isnan(lo)) mask = kiln__t_binary_scalar(c, strict ? KILN__OP_GT : KILN__OP_GE, ad_ref(x), lo, false);
    if (!isnan(hi)) {
        kiln__tensor *upper = kiln__t_binary_scalar(c, strict ? KILN__OP_LT : KILN__OP_LE, ad_ref(x), hi, false);
        mask = mask ? kiln__t_binary(c, KILN__OP_LOGICAL_AND, mask, upper) : upper;
    }
    grads[0] = mask ? ad_keep(c, mask, g) : g;
}

static const kiln__ad_rule clamp_rule = {.name = "clamp", .backward = clamp_backward};

static kiln__tensor *bounded(kiln__opctx *c, kiln__tensor *x, double lo, double hi, bool hardtanh) {
    kiln__ad_node *n = kiln__ad_node_new(c, &clamp_rule, 1, &x);
    if (n) n->pf[0] = lo, n->pf[1] = hi, n->pi[0] = hardtanh;
    kiln__ad_save(c, n, 0, x);
    return kiln__ad_attach(c, n, hardtanh ? kiln__t_hardtanh(c, x, lo, hi) : kiln__t_clamp(c, x, lo, hi));
}

kiln__tensor *kiln__ad_clamp(kiln__opctx *c, kiln__tensor *x, double lo, double hi) { return bounded(c, x, lo, hi, false); }

kiln__tensor *kiln__ad_hardtanh(kiln__opctx *c, kiln__tensor *x, double lo, double hi) {
    return bounded(c, x, lo, hi, true);
}

kiln__tensor *kiln__ad_nan_to_num(kiln__opctx *c, kiln__tensor *x, double nan, double posinf, double neginf) {
    kiln__ad_node *n = kiln__ad_node_new(c, &unary_rule, 1, &x);
    if (n) n->code = KILN__OP_NAN_TO_NUM;
    kiln__ad_save(c, n, 0, x);
    return kiln__ad_attach(c, n, kiln__t_nan_to_num(c, x, nan, posinf, neginf));
}

/* lerp: d/dstart = 1 - w, d/dend = w, d/dweight = end - start. */
static void lerp_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    kiln__tensor *a = n->saved[0], *b = n->saved[1], *w = n->saved[2];
    bool scalar_w = n->pi[0];
    if (kiln__ad_wants(n, 0))
        grads[0] = scalar_w ? ad_muls(c, ad_ref(g), 1.0 - n->pf[0]) : ad_mul(c, ad_ref(g), ad_rsubs(c, ad_ref(w), 1.0));
    if (kiln__ad_wants(n, 1)) grads[1] = scalar_w ? ad_muls(c, ad_ref(g), n->pf[0]) : ad_mul(c, ad_ref(g), ad_ref(w));
    if (!scalar_w && kiln__ad_wants(n, 2)) grads[2] = ad_mul(c, ad_ref(g), ad_sub(c, ad_ref(b), ad_ref(a)));
    kiln__tensor_release(g);
}

static const kiln__ad_rule lerp_rule = {.name = "lerp", .backward = lerp_backward};

kiln__tensor *kiln__ad_lerp(kiln__opctx *c, kiln__tensor *start, kiln__tensor *end, kiln__tensor *weight, double w) {
    kiln__tensor *in[3] = {start, end, weight};
    kiln__ad_node *n = kiln__ad_node_new(c, &lerp_rule, weight ? 3 : 2, in);
    if (n) n->pi[0] = !weight, n->pf[0] = w;
    if (weight) {
        if (kiln__ad_wants(n, 2)) kiln__ad_save(c, n, 0, start), kiln__ad_save(c, n, 1, end);
        kiln__ad_save(c, n, 2, weight);
    }
    return kiln__ad_attach(c, n, kiln__t_lerp(c, start, end, weight, w));
}

/* ---- binary ---------------------------------------------------------------------------- */

/* d max(a, b)/da: 1 where a wins, 1/2 on ties (like PyTorch), 0 elsewhere. */
static kiln__tensor *win_share(kiln__opctx *c, kiln__opcode wins, kiln__tensor *a, kiln__tensor *b, kiln_dtype dtype) {
    kiln__tensor *w = ad_as(c, kiln__t_binary(c, wins, ad_ref(a), ad_ref(b)), dtype);
    kiln__tensor *tie = ad_as(c, kiln__t_binary(c, KILN__OP_EQ, ad_ref(a), ad_ref(b)), dtype);
    return ad_add(c, w, ad_muls(c, tie, 0.5));
}

/* where(cond, 0, v): PyTorch's masks for the points where a formula's 0 * inf must be 0.
 * Consumes cond and v. */
static kiln__tensor *zero_where(kiln__opctx *c, kiln__tensor *cond, kiln__tensor *v) {
    if (!v) return kiln__drop(1, cond), NULL;
    kiln__tensor *zero = kiln__t_fill(c, v->device, v->dtype, 0, NULL, 0.0);
    return kiln__t_where(c, cond, zero, v);
}

/* Only the gradients an input wants are computed, and only what they read was saved. */
static void binary_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    kiln__tensor *a = n->saved[0], *b = n->saved[1], *y = n->saved[2];
    bool want_a = kiln__ad_wants(n, 0), want_b = kiln__ad_wants(n, 1);
    switch (n->code) {
    case KILN__OP_ADD: grads[0] = ad_ref(g), grads[1] = g; break;
    case KILN__OP_SUB: grads[0] = ad_ref(g), grads[1] = ad_neg(c, g); break;
    case KILN__OP_MUL:
        if (want_a) grads[0] = ad_mul(c, ad_ref(g), ad_ref(b));
        if (want_b) grads[1] = ad_mul(c, ad_ref(g), ad_ref(a));
        kiln__tensor_release(g);
        break;
    case KILN__OP_DIV: /* d/da = 1/b, d/db = -a/b^2 = -y/b */
        if (want_a) grads[0] = ad_div(c, ad_ref(g), ad_ref(b));
        if (want_b) grads[1] = ad_neg(c, ad_div(c, ad_mul(c, ad_ref(g), ad_ref(y)), ad_ref(b)));
        kiln__tensor_release(g);
        break;
    case KILN__OP_POW: /* PyTorch's: d/da = b a^(b-1), 0 where b == 0; d/db = y log(a), 0 where a == 0 <= b */
        if (want_a) {
            kiln__tensor *d = ad_mul(c, ad_ref(b), kiln__t_binary(c, KILN__OP_POW, ad_ref(a), ad_adds(c, ad_ref(b), -1.0)));
            grads[0] = zero_where(c, kiln__t_binary_scalar(c, KILN__OP_EQ, ad_ref(b), 0.0, false), ad_mul(c, ad_ref(g), d));
        }
        if (want_b) {
            kiln__tensor *at_zero = kiln__t_binary(c, KILN__OP_LOGICAL_AND, kiln__t_binary_scalar(c, KILN__OP_EQ, ad_ref(a), 0.0, false),
                                                   kiln__t_binary_scalar(c, KILN__OP_GE, ad_ref(b), 0.0, false));
            kiln__tensor *d = ad_mul(c, ad_ref(y), ad_un(c, KILN__OP_LOG, ad_ref(a)));
            grads[1] = ad_mul(c, ad_ref(g), zero_where(c, at_zero, d));
        }
        kiln__tensor_release(g);
        break;
    case KILN__OP_MAXIMUM:
    case KILN__OP_MINIMUM: {
        kiln__opcode wins = n->code == KILN__OP_MAXIMUM ? KILN__OP_GT : KILN__OP_LT;
        kiln__tensor *share = win_share(c, wins, a, b, g ? g->dtype : KILN_F32);
        grads[0] = ad_mul(c, ad_ref(g), ad_ref(share));
        grads[1] = ad_mul(c, g, ad_rsubs(c, share, 1.0));
        break;
    }
    case KILN__OP_FMOD: /* PyTorch's: 1, and -trunc(a / b) (floor for remainder) */
    case KILN__OP_REMAINDER:
        if (want_b) {
            kiln__opcode whole = n->code == KILN__OP_FMOD ? KILN__OP_TRUNC : KILN__OP_FLOOR;
            grads[1] = ad_neg(c, ad_mul(c, ad_ref(g), ad_un(c, whole, ad_div(c, ad_ref(a), ad_ref(b)))));
        }
        grads[0] = g;
        break;
    case KILN__OP_ATAN2: { /* d/da = b / (a^2 + b^2), d/db = -a / (a^2 + b^2) */
        kiln__tensor *r2 = ad_add(c, ad_mul(c, ad_ref(a), ad_ref(a)), ad_mul(c, ad_ref(b), ad_ref(b)));
        if (want_a) grads[0] = ad_div(c, ad_mul(c, ad_ref(g), ad_ref(b)), ad_ref(r2));
        if (want_b) grads[1] = ad_neg(c, ad_div(c, ad_mul(c, ad_ref(g), ad_ref(a)), ad_ref(r2)));
        kiln__tensor_release(r2);
        kiln__tensor_release(g);
        break;
    }
    default: kiln__tensor_release(g); break; /* comparisons and logic: no gradient */
    }
}

/* a and b from what the node saved (saved[0], saved[1]) or from their producers; y when saved */
static bool binary_plan(const kiln__ad_node *n, kiln__ad_work *w) {
    if (n->saved[2]) return true;
    w->ops = (n->code == KILN__OP_POW || n->code == KILN__OP_ATAN2 ? 4 : 1) * kiln__ad_out_numel(n);
    kiln__ad_plan_saved_or_input(n, w, 0, 0);
    kiln__ad_plan_saved_or_input(n, w, 1, 1);
    return true;
}

static kiln__tensor *binary_recompute(kiln__opctx *c, const kiln__ad_node *n) {
    if (n->saved[2]) return ad_ref(n->saved[2]);
    kiln__tensor *a = n->saved[0] || n->lazy[0] ? kiln__ad_saved_now(c, n, 0) : kiln__ad_input_now(c, n, 0);
    kiln__tensor *b = n->saved[1] || n->lazy[1] ? kiln__ad_saved_now(c, n, 1) : kiln__ad_input_now(c, n, 1);
    return kiln__t_binary(c, n->code, a, b);
}

static const kiln__ad_rule binary_rule = {"binary", binary_backward, binary_recompute, binary_plan};

kiln__tensor *kiln__ad_binary(kiln__opctx *c, kiln__opcode code, kiln__tensor *a, kiln__tensor *b) {
    kiln__tensor *in[2] = {a, b};
    kiln__ad_node *n = kiln__ad_node_new(c, &binary_rule, 2, in);
    if (n) n->code = code;
    bool want_a = kiln__ad_wants(n, 0), want_b = kiln__ad_wants(n, 1);
    bool save_a = false, save_b = false, save_y = false;
    switch (code) {
    case KILN__OP_MUL: save_a = want_b, save_b = want_a; break; /* x * mask keeps only the mask */
    case KILN__OP_DIV: save_b = true, save_y = want_b; break;
    case KILN__OP_POW: save_a = save_b = true, save_y = want_b; break; /* the masks read a and b */
    case KILN__OP_MAXIMUM: case KILN__OP_MINIMUM: save_a = save_b = true; break;
    case KILN__OP_FMOD: case KILN__OP_REMAINDER: save_a = save_b = want_b; break;
    case KILN__OP_ATAN2: save_a = save_b = true; break;
    default: break;
    }
    if (save_a) kiln__ad_save(c, n, 0, a);
    if (save_b) kiln__ad_save(c, n, 1, b);
    kiln__tensor *y = kiln__t_binary(c, code, a, b);
    if (save_y) kiln__ad_save(c, n, 2, y);
    return kiln__ad_attach(c, n, y);
}

/* ---- tensor op scalar -------------------------------------------------------------------- */

static void scalar_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    kiln__tensor *x = n->saved[0], *y = n->saved[1];
    double s = n->pf[0];
    bool scalar_first = n->pi[0];
    switch (n->code) {
    case KILN__OP_ADD: grads[0] = g; break;
    case KILN__OP_FMOD: case KILN__OP_REMAINDER: grads[0] = g; break; /* x fmod s: 1 */
    case KILN__OP_SUB: grads[0] = scalar_first ? ad_neg(c, g) : g; break;
    case KILN__OP_MUL: grads[0] = ad_muls(c, g, s); break;
    case KILN__OP_DIV: /* x / s, or s / x: -s/x^2 = -y/x */
        grads[0] = scalar_first ? ad_neg(c, ad_div(c, ad_mul(c, g, ad_ref(y)), ad_ref(x))) : ad_muls(c, g, 1.0 / s);
        break;
    case KILN__OP_POW: /* PyTorch's: x^s: s x^(s-1), zeros for s == 0; s^x: y ln s, 0 where x >= 0 if s == 0 */
        if (!scalar_first && s == 0) {
            grads[0] = g ? kiln__t_fill(c, g->device, g->dtype, g->ndim, g->shape, 0.0) : NULL;
            kiln__tensor_release(g);
        } else if (!scalar_first) {
            grads[0] = ad_mul(c, g, ad_muls(c, ad_pows(c, ad_ref(x), s - 1.0), s));
        } else if (s == 0) {
            kiln__tensor *nonneg = kiln__t_binary_scalar(c, KILN__OP_GE, ad_ref(x), 0.0, false);
            grads[0] = ad_mul(c, g, zero_where(c, nonneg, ad_muls(c, ad_ref(y), log(s))));
        } else {
            grads[0] = ad_mul(c, g, ad_muls(c, ad_ref(y), log(s)));
        }
        break;
    case KILN__OP_MAXIMUM:
    case KILN__OP_MINIMUM: {
        kiln_dtype dt = g ? g->dtype : KILN_F32;
        kiln__opcode wins = n->code == KILN__OP_MAXIMUM ? KILN__OP_GT : KILN__OP_LT;
        kiln__tensor *w = ad_as(c, kiln__t_binary_scalar(c, wins, ad_ref(x), s, false), dt);
        kiln__tensor *tie = ad_as(c, kiln__t_binary_scalar(c, KILN__OP_EQ, ad_ref(x), s, false), dt);
        grads[0] = ad_mul(c, g, ad_add(c, w, ad_muls(c, tie, 0.5)));
        break;
    }
    default: kiln__tensor_release(g); break;
    }
}

static bool scalar_plan(const kiln__ad_node *n, kiln__ad_work *w) {
    if (n->saved[1]) return true;
    w->ops = (n->code == KILN__OP_POW ? 4 : 1) * kiln__ad_out_numel(n);
    kiln__ad_plan_saved_or_input(n, w, 0, 0);
    return true;
}

static kiln__tensor *scalar_recompute(kiln__opctx *c, const kiln__ad_node *n) {
    if (n->saved[1]) return ad_ref(n->saved[1]);
    kiln__tensor *x = n->saved[0] || n->lazy[0] ? kiln__ad_saved_now(c, n, 0) : kiln__ad_input_now(c, n, 0);
    return kiln__t_binary_scalar(c, n->code, x, n->pf[0], n->pi[0]);
}

static const kiln__ad_rule scalar_rule = {"scalar", scalar_backward, scalar_recompute, scalar_plan};

kiln__tensor *kiln__ad_binary_scalar(kiln__opctx *c, kiln__opcode code, kiln__tensor *x, double s, bool scalar_first) {
    kiln__ad_node *n = kiln__ad_node_new(c, &scalar_rule, 1, &x);
    if (n) n->code = code, n->pf[0] = s, n->pi[0] = scalar_first;
    bool rdiv = code == KILN__OP_DIV && scalar_first;
    bool pow_of_zero = code == KILN__OP_POW && scalar_first && s == 0; /* its mask reads x */
    if (rdiv || (code == KILN__OP_POW && !scalar_first) || pow_of_zero || code == KILN__OP_MAXIMUM ||
        code == KILN__OP_MINIMUM)
        kiln__ad_save(c, n, 0, x);
    kiln__tensor *y = kiln__t_binary_scalar(c, code, x, s, scalar_first);
    if (rdiv || (code == KILN__OP_POW && scalar_first)) kiln__ad_save(c, n, 1, y);
    return kiln__ad_attach(c, n, y);
}

/* ---- where and cast ---------------------------------------------------------------------- */

static void where_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    kiln__tensor *mask = n->saved[0];
    grads[1] = ad_keep(c, ad_ref(mask), ad_ref(g));
    grads[2] = ad_keep(c, kiln__t_unary(c, KILN__OP_LOGICAL_NOT, ad_ref(mask)), g);
}

static const kiln__ad_rule where_rule = {.name = "where", .backward = where_backward};

kiln__tensor *kiln__ad_where(kiln__opctx *c, kiln__tensor *mask, kiln__tensor *a, kiln__tensor *b) {
    kiln__tensor *in[3] = {mask, a, b};
    kiln__ad_node *n = kiln__ad_node_new(c, &where_rule, 3, in);
    kiln__ad_save(c, n, 0, mask);
    return kiln__ad_attach(c, n, kiln__t_where(c, mask, a, b));
}

static void cast_backward(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads) {
    grads[0] = g; /* the walker casts it back to the input's dtype */
}

static bool cast_plan(const kiln__ad_node *n, kiln__ad_work *w) {
    w->ops = kiln__ad_out_numel(n);
    w->inputs = 1;
    return true;
}

static kiln__tensor *cast_recompute(kiln__opctx *c, const kiln__ad_node *n) {
    return kiln__t_cast(c, kiln__ad_input_now(c, n, 0), n->out_dtype);
}

static const kiln__ad_rule cast_rule = {"cast", cast_backward, cast_recompute, cast_plan};

bool kiln__ad_node_is_cast(const kiln__ad_node *n) { return n && n->rule == &cast_rule; }

kiln__tensor *kiln__ad_cast(kiln__opctx *c, kiln__tensor *x, kiln_dtype dtype) {
    if (!kiln__dtype_is_float(dtype)) return kiln__t_cast(c, x, dtype); /* integers carry no gradient */
    kiln__ad_node *n = kiln__ad_node_new(c, &cast_rule, 1, &x);
    return kiln__ad_attach(c, n, kiln__t_cast(c, x, dtype));
}

kiln__tensor *kiln__ad_cast_reuse(kiln__opctx *c, kiln__tensor *x, kiln__tensor *cast) {
    kiln__ad_node *n = kiln__ad_node_new(c, &cast_rule, 1, &x);
    kiln__tensor_release(x);
    return kiln__ad_attach(c, n, cast);
}
