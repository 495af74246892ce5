/* Elementwise ops: dtype rules, broadcasting and in-place output choice. Kernels compute in
 * f32/f64/i32/i64 (and bool for logic); f16/bf16 are converted to f32 around the kernel. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "kiln/tensor.h"
#include "ops/ops-impl.h"

/* The dtype rules, read from the op table (ir/optable.h). */
static kiln__dtype_rule dtype_rule(kiln__opcode code) { return kiln__op_info_of(code)->dtype; }
static bool is_float_math(kiln__opcode code) { return dtype_rule(code) == KILN__DT_FLOAT; }
static bool is_comparison(kiln__opcode code) { return dtype_rule(code) == KILN__DT_COMPARE; }
/* Activations PyTorch defines for floating-point tensors only. */
static bool is_float_only(kiln__opcode code) { return dtype_rule(code) == KILN__DT_FLOAT_ONLY; }
/* Ops that leave integer values as they are (torch.floor of an int tensor is the tensor). */
static bool is_int_identity(kiln__opcode code) { return dtype_rule(code) == KILN__DT_ROUNDING; }
/* isnan, isinf, isfinite: bool out; for integers and bools a constant. */
static bool is_class_test(kiln__opcode code) { return dtype_rule(code) == KILN__DT_CLASSIFY; }
static bool is_logical(kiln__opcode code) { return dtype_rule(code) == KILN__DT_LOGICAL; }

/* The dtype the kernel runs in, given the (promoted) input dtype. */
static kiln_dtype kernel_dtype(kiln__opcode code, kiln_dtype in) {
    if (is_logical(code)) return KILN_BOOL;
    if (in == KILN_F16 || in == KILN_BF16) return KILN_F32;
    if (is_float_math(code) && !kiln__dtype_is_float(in)) return KILN_F32;
    if (in == KILN_BOOL && !is_comparison(code)) return KILN_I32; /* arithmetic on bools counts */
    return in;
}

/* The dtype the caller gets back. */
static kiln_dtype result_dtype(kiln__opcode code, kiln_dtype in, kiln_dtype kernel) {
    if (is_logical(code) || is_comparison(code) || is_class_test(code)) return KILN_BOOL;
    if (in == KILN_F16 || in == KILN_BF16) return in;
    return kernel;
}

/* Runs a 1- to 3-input elementwise kernel in dtype `kd` over broadcast inputs; the output
 * may reuse an input's buffer. Consumes the inputs. */
static kiln__tensor *run_elementwise(kiln__opctx *c, kiln__opcode code, int n_in, kiln__tensor **in, int n_shape,
                                     const int64_t *shape, kiln_dtype out_dtype, const double *params) {
    kiln_device dev = in[0]->device;
    kiln__op op;
    kiln__op_init(&op, code, c->name);
    for (int i = 0; i < n_in; i++) kiln__view_set_broadcast(&op.in[i], in[i], n_shape, shape);
    kiln__tensor *out = kiln__t_output_taking(c, dev, out_dtype, n_shape, shape, in, n_in); /* (after the views) */
    if (out) {
        kiln__view_set(&op.out[0], out);
        op.n_in = (int8_t)n_in;
        op.n_out = 1;
        if (params)
            for (int i = 0; i < 4; i++) op.p.f[i] = params[i];
        if (!kiln__t_submit(c, &op, dev)) kiln__tensor_release(out), out = NULL;
    }
    for (int i = 0; i < n_in; i++) kiln__tensor_release(in[i]);
    return out;
}

static bool check_numeric(kiln__opctx *c, kiln__opcode code, kiln_dtype d) {
    if (d == KILN_BOOL && (code == KILN__OP_NEG || code == KILN__OP_ABS || code == KILN__OP_SIGN ||
                           code == KILN__OP_RELU || code == KILN__OP_CLAMP || code == KILN__OP_SUB ||
                           code == KILN__OP_FLOOR || code == KILN__OP_CEIL || code == KILN__OP_ROUND ||
                           code == KILN__OP_TRUNC)) {
        kiln__fail(c, KILN_ERR_DTYPE, "%s is not defined for bool tensors", kiln__opcode_name(code));
        return false;
    }
    return true;
}

/* params: NULL or 4 doubles for the kernel's p.f. */
static kiln__tensor *unary_with_params(kiln__opctx *c, kiln__opcode code, kiln__tensor *x, const double *params) {
    if (!kiln__ok(c, x)) return kiln__drop(1, x), NULL;
    if (!check_numeric(c, code, x->dtype)) return kiln__drop(1, x), NULL;
    bool is_float = kiln__dtype_is_float(x->dtype);
    if (is_float_only(code) && !is_float) {
        kiln__fail(c, KILN_ERR_DTYPE, "%s is defined for floating-point tensors only, got %s", kiln__opcode_name(code),
                   kiln_dtype_name(x->dtype));
        return kiln__drop(1, x), NULL;
    }
    if (is_int_identity(code) && !is_float) return x;
    if (is_class_test(code) && !is_float) { /* integers are never NaN or infinite */
        kiln__tensor *out = kiln__t_fill(c, x->device, KILN_BOOL, x->ndim, x->shape, code == KILN__OP_ISFINITE);
        kiln__tensor_release(x);
        return out;
    }
    kiln_dtype kd = kernel_dtype(code, x->dtype);
    if (code == KILN__OP_RELU && x->dtype == KILN_BF16 && x->device == KILN_CPU) kd = KILN_BF16; /* no casts: CPU */
    kiln_dtype rd = result_dtype(code, x->dtype, kd);
    x = kiln__t_cast(c, x, kd);
    if (!x) return NULL;
    bool bool_out = code == KILN__OP_LOGICAL_NOT || is_class_test(code);
    kiln__tensor *out = run_elementwise(c, code, 1, &x, x->ndim, x->shape, bool_out ? KILN_BOOL : kd, params);
    return out && out->dtype != rd ? kiln__t_cast(c, out, rd) : out;
}

kiln__tensor *kiln__t_unary(kiln__opctx *c, kiln__opcode code, kiln__tensor *x) {
    return unary_with_params(c, code, x, NULL);
}

kiln__tensor *kiln__t_unary_params(kiln__opctx *c, kiln__opcode code, kiln__tensor *x, const double params[4]) {
    return unary_with_params(c, code, x, params);
}

/* The largest finite value of a float dtype. */
static double dtype_max(kiln_dtype d) {
    switch (d) {
    case KILN_F16: return 65504.0;
    case KILN_BF16: return 3.3895313892515355e38;
    case KILN_F32: return FLT_MAX;
    default: return DBL_MAX;
    }
}

kiln__tensor *kiln__t_nan_to_num(kiln__opctx *c, kiln__tensor *x, double nan, double posinf, double neginf) {
    if (x && !x->err && kiln__dtype_is_float(x->dtype)) { /* defaults: x's dtype's extremes */
        if (isnan(posinf)) posinf = dtype_max(x->dtype);
        if (isnan(neginf)) neginf = -dtype_max(x->dtype);
    }
    double params[4] = {nan, posinf, neginf, 0};
    return unary_with_params(c, KILN__OP_NAN_TO_NUM, x, params);
}

kiln__tensor *kiln__t_hardtanh(kiln__opctx *c, kiln__tensor *x, double lo, double hi) {
    if (x && !x->err && !kiln__dtype_is_float(x->dtype)) {
        kiln__fail(c, KILN_ERR_DTYPE, "hardtanh is defined for floating-point tensors only, got %s",
                   kiln_dtype_name(x->dtype));
        return kiln__drop(1, x), NULL;
    }
    if (isnan(lo) || isnan(hi)) {
        kiln__drop(1, x);
        return kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "hardtanh bounds must not be NaN");
    }
    return kiln__t_clamp(c, x, lo, hi);
}

/* start + w (end - start), for w below 1/2, else end - (1 - w)(end - start): exact at both
 * ends, as torch.lerp. weight NULL: the scalar w. Float dtypes only. */
kiln__tensor *kiln__t_lerp(kiln__opctx *c, kiln__tensor *start, kiln__tensor *end, kiln__tensor *weight, double w) {
    int n_in = weight ? 3 : 2;
    if (!kiln__ok(c, start) || !kiln__ok(c, end) || (weight && !kiln__ok(c, weight)))
        return kiln__drop(3, start, end, weight), NULL;
    int n1 = 0, nd = 0;
    int64_t s1[KILN_MAX_DIMS], shape[KILN_MAX_DIMS];
    if (!kiln__same_device(c, start, end) || (weight && !kiln__same_device(c, start, weight)) ||
        !kiln__broadcast_shapes(c, start->ndim, start->shape, end->ndim, end->shape, &n1, s1) ||
        !kiln__broadcast_shapes(c, n1, s1, weight ? weight->ndim : 0, weight ? weight->shape : s1, &nd, shape))
        return kiln__drop(3, start, end, weight), NULL;
    kiln_dtype pd = kiln__dtype_promote(start->dtype, end->dtype);
    if (weight) pd = kiln__dtype_promote(pd, weight->dtype);
    if (!kiln__dtype_is_float(pd)) {
        kiln__fail(c, KILN_ERR_DTYPE, "lerp is defined for floating-point tensors only, got %s", kiln_dtype_name(pd));
        return kiln__drop(3, start, end, weight), NULL;
    }
    kiln_dtype kd = kernel_dtype(KILN__OP_LERP, pd);
    start = kiln__t_cast(c, start, kd);
    end = kiln__t_cast(c, end, kd);
    if (weight) weight = kiln__t_cast(c, weight, kd);
    if (!start || !end || (n_in == 3 && !weight)) return kiln__drop(3, start, end, weight), NULL;
    kiln__tensor *in[3] = {start, end, weight};
    kiln__tensor *out;
    if (weight) {
        out = run_elementwise(c, KILN__OP_LERP, 3, in, nd, shape, kd, NULL);
    } else {
        kiln_device dev = start->device;
        out = kiln__t_output(c, dev, kd, nd, shape, in, 2);
        if (out) {
            kiln__op op;
            kiln__op_init(&op, KILN__OP_LERP, c->name);
            op.in[0] = kiln__view_broadcast(start, nd, shape);
            op.in[1] = kiln__view_broadcast(end, nd, shape);
            op.in[2] = kiln__view_scalar(kd, nd, shape, w);
            op.out[0] = kiln__view_of(out);
            op.n_in = 3;
            op.n_out = 1;
            if (!kiln__t_submit(c, &op, dev)) kiln__tensor_release(out), out = NULL;
        }
        kiln__drop(2, start, end);
    }
    return out && out->dtype != pd ? kiln__t_cast(c, out, pd) : out;
}

kiln__tensor *kiln__t_clamp(kiln__opctx *c, kiln__tensor *x, double lo, double hi) {
    if (!isnan(lo) && !isnan(hi) && lo > hi) {
        kiln__drop(1, x);
        return kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "clamp bounds lo=%g > hi=%g", lo, hi);
    }
    if (x && !x->err && kiln__dtype_is_int(x->dtype) && ((!isnan(lo) && lo != floor(lo)) || (!isnan(hi) && hi != floor(hi))))
        x = kiln__t_cast(c, x, KILN_F32);
    double params[4] = {lo, hi, 0, 0};
    return unary_with_params(c, KILN__OP_CLAMP, x, params);
}

kiln__tensor *kiln__t_binary(kiln__opctx *c, kiln__opcode code, kiln__tensor *a, kiln__tensor *b) {
    if (!kiln__ok(c, a) || !kiln__ok(c, b)) return kiln__drop(2, a, b), NULL;
    int nd;
    int64_t shape[KILN_MAX_DIMS];
    if (!kiln__same_device(c, a, b) || !kiln__broadcast_shapes(c, a->ndim, a->shape, b->ndim, b->shape, &nd, shape))
        return kiln__drop(2, a, b), NULL;
    kiln_dtype pd = kiln__dtype_result(a->dtype, a->ndim > 0, b->dtype, b->ndim > 0); /* torch.result_type */
    if (!check_numeric(c, code, pd)) return kiln__drop(2, a, b), NULL;
    kiln_dtype kd = kernel_dtype(code, pd);
    kiln_dtype rd = result_dtype(code, pd, kd);
    a = kiln__t_cast(c, a, kd);
    b = kiln__t_cast(c, b, kd);
    if (!a || !b) return kiln__drop(2, a, b), NULL;
    kiln__tensor *in[2] = {a, b};
    kiln_dtype kernel_out = (is_comparison(code) || is_logical(code)) ? KILN_BOOL : kd;
    kiln__tensor *out = run_elementwise(c, code, 2, in, nd, shape, kernel_out, NULL);
    return out && out->dtype != rd ? kiln__t_cast(c, out, rd) : out;
}

kiln__tensor *kiln__t_binary_scalar(kiln__opctx *c, kiln__opcode code, kiln__tensor *x, double s, bool scalar_first) {
    if (!kiln__ok(c, x)) return kiln__drop(1, x), NULL;
    kiln_dtype xd = x->dtype;
    bool integral = s == floor(s) && fabs(s) < 9e15;
    if (!kiln__dtype_is_float(xd) && !integral) xd = KILN_F32; /* 1.5 promotes an int tensor */
    else if (xd == KILN_BOOL && !is_logical(code)) xd = KILN_I64; /* as torch: a whole number is an i64 */
    if (xd == KILN_I32 && (s > INT32_MAX || s < INT32_MIN)) xd = KILN_I64; /* rather than wrap the scalar */
    if (!check_numeric(c, code, xd)) return kiln__drop(1, x), NULL;
    kiln_dtype kd = kernel_dtype(code, xd);
    kiln_dtype rd = result_dtype(code, xd, kd);
    x = kiln__t_cast(c, x, kd);
    if (!x) return NULL;
    kiln_device dev = x->device;
    kiln_dtype kernel_out = (is_comparison(code) || is_logical(code)) ? KILN_BOOL : kd;
    kiln__tensor *out = kiln__t_output(c, dev, kernel_out, x->ndim, x->shape, &x, 1);
    if (out) {
        kiln__op op;
        kiln__op_init(&op, code, c->name);
        kiln__view scalar = kiln__view_scalar(kd, x->ndim, x->shape, s);
        op.in[scalar_first ? 1 : 0] = kiln__view_of(x);
        op.in[scalar_first ? 0 : 1] = scalar;
        op.out[0] = kiln__view_of(out);
        op.n_in = 2;
        op.n_out = 1;
        if (!kiln__t_submit(c, &op, dev)) kiln__tensor_release(out), out = NULL;
    }
    kiln__tensor_release(x);
    return out && out->dtype != rd ? kiln__t_cast(c, out, rd) : out;
}

kiln__tensor *kiln__t_relu_backward(kiln__opctx *c, kiln__tensor *g, kiln__tensor *y) {
    if (!(kiln__ok(c, g) && kiln__ok(c, y))) return kiln__drop(2, g, y), NULL;
    kiln_dtype dt = g->dtype;
    bool low = dt == KILN_BF16 || dt == KILN_F16;
    bool fused = dt == y->dtype && (dt == KILN_F32 || dt == KILN_F64 || low) && g->ndim == y->ndim &&
                 memcmp(g->shape, y->shape, sizeof(int64_t) * (size_t)g->ndim) == 0;
    if (fused && dt == KILN_BF16 && g->device == KILN_CPU && y->device == KILN_CPU) { /* the CPU's bf16 loop: the casts' bits */
        kiln__tensor *in[2] = {g, y};
        return run_elementwise(c, KILN__OP_RELU_BACKWARD, 2, in, g->ndim, g->shape, dt, NULL);
    }
    if (fused && low) { /* in f32 between casts, as the binary ops run them (fusion makes one pass of
                         * the three); the where() below took ~4.5 ms per CNN layer under autocast */
        kiln__tensor *in[2] = {kiln__t_cast(c, g, KILN_F32), kiln__t_cast(c, y, KILN_F32)};
        if (!in[0] || !in[1]) return kiln__drop(2, in[0], in[1]), NULL;
        return kiln__t_cast(c, run_elementwise(c, KILN__OP_RELU_BACKWARD, 2, in, in[0]->ndim, in[0]->shape, KILN_F32,
                                               NULL), dt);
    }
    if (!fused) { /* where(y > 0, g, 0) */
        kiln__tensor *mask = kiln__t_binary_scalar(c, KILN__OP_GT, y, 0.0, false);
        kiln__tensor *zero = g ? kiln__t_fill(c, g->device, g->dtype, 0, NULL, 0.0) : NULL;
        return kiln__t_where(c, mask, g, zero);
    }
    kiln__tensor *in[2] = {g, y};
    return run_elementwise(c, KILN__OP_RELU_BACKWARD, 2, in, g->ndim, g->shape, g->dtype, NULL);
}

kiln__tensor *kiln__t_where(kiln__opctx *c, kiln__tensor *mask, kiln__tensor *a, kiln__tensor *b) {
    if (!kiln__ok(c, mask) || !kiln__ok(c, a) || !kiln__ok(c, b)) return kiln__drop(3, mask, a, b), NULL;
    int n1, nd;
    int64_t s1[KILN_MAX_DIMS], shape[KILN_MAX_DIMS];
    if (!kiln__same_device(c, mask, a) || !kiln__same_device(c, a, b) ||
        !kiln__broadcast_shapes(c, a->ndim, a->shape, b->ndim, b->shape, &n1, s1) ||
        !kiln__broadcast_shapes(c, mask->ndim, mask->shape, n1, s1, &nd, shape))
        return kiln__drop(3, mask, a, b), NULL;
    if (mask->dtype != KILN_BOOL) {
        kiln__fail(c, KILN_ERR_DTYPE, "mask must be bool, got %s", kiln_dtype_name(mask->dtype));
        return kiln__drop(3, mask, a, b), NULL;
    }
    kiln_dtype pd = kiln__dtype_result(a->dtype, a->ndim > 0, b->dtype, b->ndim > 0);
    a = kiln__t_cast(c, a, pd);
    b = kiln__t_cast(c, b, pd);
    if (!a || !b) return kiln__drop(3, mask, a, b), NULL;
    /* order matters for in-place: the output may take a's or b's buffer, never the mask's */
    kiln__tensor *in[3] = {a, b, mask};
    kiln_device dev = a->device;
    kiln__tensor *out = kiln__t_output(c, dev, pd, nd, shape, in, 2);
    if (out) {
        kiln__op op;
        kiln__op_init(&op, KILN__OP_WHERE, c->name);
        op.in[0] = kiln__view_broadcast(mask, nd, shape);
        op.in[1] = kiln__view_broadcast(a, nd, shape);
        op.in[2] = kiln__view_broadcast(b, nd, shape);
        op.out[0] = kiln__view_of(out);
        op.n_in = 3;
        op.n_out = 1;
        if (!kiln__t_submit(c, &op, dev)) kiln__tensor_release(out), out = NULL;
    }
    kiln__drop(3, mask, a, b);
    return out;
}
