/* OpenCL optimizer updates: SGD_UPDATE and ADAM_UPDATE in place, one work item per element,
 * the formulas of the CPU kernels (src/backend/cpu/optim.c, PyTorch's single-tensor steps) in
 * the parameter's precision, with contraction off and correctly rounded sqrt and division, so
 * an f32 step gives the CPU's bits. The flags (first step, momentum, nesterov, decay kind) are
 * printed into the source; hyperparameters are arguments. */
#include <string.h>

#include "backend/backend-impl.h"

#if KILN_HAVE_OPENCL
#include "backend/opencl/opencl-impl.h"
#include "ir/optim_params.h"

static bool float_params(const kiln__op *op, kiln__opencl_device *d) {
    kiln_dtype dt = op->out[0].dtype;
    bool ok = (dt == KILN_F32 || (dt == KILN_F64 && d->fp64)) && op->in[0].dtype == dt;
    for (int i = 1; i < op->n_out; i++) ok = ok && op->out[i].dtype == dt;
    if (!ok) kiln__kernel_error("no OpenCL kernel for %s on %s yet", kiln__opcode_name(op->code), kiln_dtype_name(dt));
    return ok;
}

/* Views v[0..n) over v[0]'s shape: their packed strides and offsets as kernel arguments. */
typedef struct {
    cl_long n;
    cl_long8 shape, st[5];
    cl_long off[5];
    cl_mem mem[5];
    cl_double hp[8];
} layout;

static int push_views(layout *l, const kiln__view *const *v, int n, kiln__opencl_arg *args) {
    int nd = v[0]->ndim, a = 0;
    l->n = kiln__view_numel(v[0]);
    kiln__opencl_pack8(&l->shape, v[0]->shape, nd, 1);
    args[a++] = (kiln__opencl_arg){8, &l->n};
    args[a++] = (kiln__opencl_arg){64, &l->shape};
    for (int i = 0; i < n; i++) {
        kiln__opencl_pack8(&l->st[i], v[i]->strides, nd, 0);
        l->off[i] = v[i]->offset;
        l->mem[i] = kiln__opencl_mem(v[i]->storage);
        args[a++] = (kiln__opencl_arg){64, &l->st[i]};
        args[a++] = (kiln__opencl_arg){8, &l->off[i]};
        args[a++] = (kiln__opencl_arg){sizeof(cl_mem), &l->mem[i]};
    }
    return a;
}

static void header(kiln__text *s, bool fp64, const char *T, int n_views, int n_hp) {
    kiln__opencl_src_prelude(s, fp64);
    kiln__text_printf(s, "%s__kernel void k(long n, long8 shape8", kiln__opencl_layout_helpers);
    for (int i = 0; i < n_views; i++) kiln__text_printf(s, ", long8 st%d, long o%d, __global %s *v%d", i, i, T, i);
    for (int i = 0; i < n_hp; i++) kiln__text_printf(s, ", %s h%d", fp64 ? "double" : "float", i);
    kiln__text_printf(s, ") {\n  long e = get_global_id(0); if (e >= n) return;\n  long shape[8], c[8], t[8];\n"
                           "  unpack(shape8, shape); coords(e, shape, c);\n");
    for (int i = 0; i < n_views; i++) kiln__text_printf(s, "  unpack(st%d, t); long i%d = o%d + dot(c, t);\n", i, i, i);
}

static kiln_status launch(kiln__opencl_device *d, const kiln__op *op, kiln__text *s, layout *l, kiln__opencl_arg *args, int a, int n_hp) {
    cl_float hf[8];
    for (int i = 0; i < n_hp; i++) {
        hf[i] = (cl_float)l->hp[i];
        args[a++] = d->fp64 ? (kiln__opencl_arg){8, &l->hp[i]} : (kiln__opencl_arg){4, &hf[i]};
    }
    return kiln__opencl_run(d, op, s, (size_t)l->n, args, a);
}

/* out[0] param, out[1] momentum buffer (n_out == 2), in[0] grad. */
static kiln_status kernel_sgd(const kiln__op *op) {
    kiln__opencl_device *d = kiln__opencl_device_of(op->out[0].storage->device);
    if (NEVER(!d)) return KILN_ERR_INTERNAL;
    if (!float_params(op, d)) return KILN_ERR_DTYPE;
    kiln__sgd_update u = kiln__sgd_update_decode(op);
    bool mom = op->n_out == 2, wd = u.weight_decay != 0;
    const char *T = kiln__opencl_ctype(op->out[0].dtype);
    kiln__text s = {0};
    /* views: v0 param, v1 grad, v2 buffer */
    header(&s, d->fp64, T, mom ? 3 : 2, 4);
    kiln__text_printf(&s, "  %s lr = (%s)h0, mu = (%s)h1, damp = (%s)h2, w = (%s)h3;\n  %s g = v1[i1];\n", T, T, T, T, T, T);
    if (wd) kiln__text_printf(&s, "  g = g + w * v0[i0];\n");
    if (mom) {
        kiln__text_printf(&s, u.first ? "  %s buf = g;\n" : "  %s buf = mu * v2[i2] + damp * g;\n", T);
        kiln__text_printf(&s, "  v2[i2] = buf;\n");
        kiln__text_printf(&s, u.nesterov ? "  g = g + mu * buf;\n" : "  g = buf;\n");
    }
    kiln__text_printf(&s, "  v0[i0] = v0[i0] - lr * g;\n}\n");
    const kiln__view *v[3] = {&op->out[0], &op->in[0], &op->out[1]};
    layout l;
    kiln__opencl_arg args[24];
    int a = push_views(&l, v, mom ? 3 : 2, args);
    l.hp[0] = u.lr, l.hp[1] = u.momentum, l.hp[2] = 1.0 - u.dampening, l.hp[3] = u.weight_decay;
    return launch(d, op, &s, &l, args, a, 4);
}

/* out[0] param, out[1] exp_avg, out[2] exp_avg_sq, in[0] grad. */
static kiln_status kernel_adam(const kiln__op *op) {
    kiln__opencl_device *d = kiln__opencl_device_of(op->out[0].storage->device);
    if (NEVER(!d)) return KILN_ERR_INTERNAL;
    if (op->n_out != 3) return KILN_ERR_INTERNAL;
    if (!float_params(op, d)) return KILN_ERR_DTYPE;
    kiln__adam_update u = kiln__adam_update_decode(op);
    double decay_v = u.weight_decay_term;
    int decay = decay_v == 0 && !u.decoupled ? 0 : u.decoupled ? 2 : 1;
    bool first = u.first;
    const char *T = kiln__opencl_ctype(op->out[0].dtype);
    kiln__text s = {0};
    /* views: v0 param, v1 exp_avg, v2 exp_avg_sq, v3 grad */
    header(&s, d->fp64, T, 4, 7);
    kiln__text_printf(&s, "  %s step = (%s)h0, w1 = (%s)h1, b2 = (%s)h2, w2 = (%s)h3, eps = (%s)h4, bc2 = (%s)h5, kd = (%s)h6;\n",
                      T, T, T, T, T, T, T, T);
    kiln__text_printf(&s, "  %s x = v0[i0], g = v3[i3];\n", T);
    if (decay == 1) kiln__text_printf(&s, "  g = g + kd * x;\n");
    if (decay == 2) kiln__text_printf(&s, "  x = x * kd;\n");
    kiln__text_printf(&s, first ? "  %s m0 = 0, s0 = 0;\n" : "  %s m0 = v1[i1], s0 = v2[i2];\n", T);
    kiln__text_printf(&s, "  %s m1 = m0 + w1 * (g - m0);\n  %s s1 = s0 * b2 + w2 * g * g;\n"
                            "  v1[i1] = m1; v2[i2] = s1;\n  v0[i0] = x - step * (m1 / (sqrt(s1) / bc2 + eps));\n}\n", T, T);
    const kiln__view *v[4] = {&op->out[0], &op->out[1], &op->out[2], &op->in[0]};
    layout l;
    kiln__opencl_arg args[24];
    int a = push_views(&l, v, 4, args);
    l.hp[0] = u.step_size, l.hp[1] = 1.0 - u.beta1, l.hp[2] = u.beta2, l.hp[3] = 1.0 - u.beta2;
    l.hp[4] = u.eps, l.hp[5] = u.sqrt_bias_correction2, l.hp[6] = decay_v;
    return launch(d, op, &s, &l, args, a, 7);
}

/* SUM_SQUARES: out[0] 0-d f64 = sum of in[0]^2 in double (gradient clipping). One work item
 * walks the tensor: a gradient's norm is one small kernel per parameter, not a bottleneck. */
static kiln_status kernel_sum_squares(const kiln__op *op) {
    const kiln__view *in = &op->in[0], *out = &op->out[0];
    kiln__opencl_device *d = kiln__opencl_device_of(out->storage->device);
    if (NEVER(!d)) return KILN_ERR_INTERNAL;
    if (out->dtype != KILN_F64 || !d->fp64 || (in->dtype != KILN_F32 && in->dtype != KILN_F64)) {
        kiln__kernel_error("no OpenCL kernel for SUM_SQUARES on %s yet", kiln_dtype_name(in->dtype));
        return KILN_ERR_UNSUPPORTED;
    }
    kiln__text s = {0};
    kiln__opencl_src_prelude(&s, true);
    kiln__text_printf(&s, "%s__kernel void k(long n, long8 shape8, long8 st8, long io, long oo, __global const %s *x,\n"
                            "  __global double *y) {\n  if (get_global_id(0) != 0) return;\n"
                            "  long shape[8], st[8], c[8]; unpack(shape8, shape); unpack(st8, st); double sum = 0;\n"
                            "  for (long e = 0; e < n; e++) { coords(e, shape, c); double v = x[io + dot(c, st)]; sum += v * v; }\n"
                            "  y[oo] = sum;\n}\n",
                      kiln__opencl_layout_helpers, kiln__opencl_ctype(in->dtype));
    cl_long8 shape8, st8;
    kiln__opencl_pack8(&shape8, in->shape, in->ndim, 1);
    kiln__opencl_pack8(&st8, in->strides, in->ndim, 0);
    cl_long n = kiln__view_numel(in), io = in->offset, oo = out->offset;
    cl_mem x = kiln__opencl_mem(in->storage), y = kiln__opencl_mem(out->storage);
    kiln__opencl_arg args[] = {{8, &n}, {64, &shape8}, {64, &st8}, {8, &io}, {8, &oo}, {sizeof x, &x}, {sizeof y, &y}};
    return kiln__opencl_run(d, op, &s, 1, args, 7);
}

/* RMSprop and Adagrad as the CPU's optim_adaptive.c computes them (PyTorch's single-tensor
 * steps in the parameter's precision): RMSPROP_GRAD_AVG (out ga; in grad, param),
 * RMSPROP_UPDATE (out param, square_avg, [buf]; in grad, [grad_avg]), ADAGRAD_UPDATE (out
 * param, sum; in grad); their parameters as ir/optim_params.h decodes them. */
static kiln_status kernel_adaptive(const kiln__op *op) {
    kiln__opencl_device *d = kiln__opencl_device_of(op->out[0].storage->device);
    if (NEVER(!d)) return KILN_ERR_INTERNAL;
    kiln__opcode code = op->code;
    kiln__rmsprop_grad_avg ga = code == KILN__OP_RMSPROP_GRAD_AVG ? kiln__rmsprop_grad_avg_decode(op) : (kiln__rmsprop_grad_avg){0};
    kiln__rmsprop_update r = code == KILN__OP_RMSPROP_UPDATE ? kiln__rmsprop_update_decode(op) : (kiln__rmsprop_update){0};
    kiln__adagrad_update ag = code == KILN__OP_ADAGRAD_UPDATE ? kiln__adagrad_update_decode(op) : (kiln__adagrad_update){0};
    bool first = code == KILN__OP_ADAGRAD_UPDATE ? ag.first : code == KILN__OP_RMSPROP_GRAD_AVG ? ga.first : r.first;
    bool centered = code == KILN__OP_RMSPROP_UPDATE && r.centered;
    bool shape_ok = code == KILN__OP_RMSPROP_GRAD_AVG ? op->n_out == 1 && op->n_in == 2
                    : code == KILN__OP_ADAGRAD_UPDATE ? op->n_out == 2 && op->n_in == 1
                                                      : op->n_out >= 2 && op->n_out <= 3 && op->n_in == (centered ? 2 : 1);
    if (!shape_ok) return KILN_ERR_INTERNAL;
    if (!float_params(op, d)) return KILN_ERR_DTYPE;
    for (int i = 0; i < op->n_in; i++)
        if (op->in[i].dtype != op->out[0].dtype) {
            kiln__kernel_error("gradient dtype differs from the parameter's");
            return KILN_ERR_DTYPE;
        }
    const char *T = kiln__opencl_ctype(op->out[0].dtype);
    const kiln__view *v[5];
    int n = 0;
    for (int i = 0; i < op->n_out; i++) v[n++] = &op->out[i];
    for (int i = 0; i < op->n_in; i++) v[n++] = &op->in[i];
    layout l;
    kiln__opencl_arg args[32];
    int a = push_views(&l, v, n, args);
    int n_hp = code == KILN__OP_RMSPROP_UPDATE ? 6 : code == KILN__OP_ADAGRAD_UPDATE ? 4 : 2;
    kiln__text s = {0};
    header(&s, d->fp64, T, n, n_hp);
    if (code == KILN__OP_RMSPROP_GRAD_AVG) { /* v0 ga, v1 grad, v2 param */
        l.hp[0] = 1.0 - ga.alpha, l.hp[1] = ga.weight_decay;
        kiln__text_printf(&s, "  %s w = (%s)h0, wd = (%s)h1, g = v1[i1];\n  if (wd != 0) g = g + wd * v2[i2];\n", T, T, T);
        kiln__text_printf(&s, first ? "  %s g0 = 0;\n" : "  %s g0 = v0[i0];\n", T);
        kiln__text_printf(&s, "  v0[i0] = g0 + w * (g - g0);\n}\n");
    } else if (code == KILN__OP_ADAGRAD_UPDATE) { /* v0 param, v1 sum, v2 grad */
        l.hp[0] = ag.clr, l.hp[1] = ag.eps, l.hp[2] = ag.weight_decay, l.hp[3] = ag.initial_accumulator_value;
        kiln__text_printf(&s, "  %s clr = (%s)h0, eps = (%s)h1, wd = (%s)h2, init = (%s)h3, g = v2[i2];\n"
                                "  if (wd != 0) g = g + wd * v0[i0];\n", T, T, T, T, T);
        kiln__text_printf(&s, first ? "  %s sm = init + g * g;\n" : "  %s sm = v1[i1] + g * g;\n", T);
        kiln__text_printf(&s, "  v1[i1] = sm;\n  v0[i0] = v0[i0] - clr * (g / (sqrt(sm) + eps));\n}\n");
    } else { /* v0 param, v1 square_avg, [v2 buf], grad, [grad_avg] */
        bool mom = op->n_out == 3;
        int ig = mom ? 3 : 2, ia = ig + 1;
        l.hp[0] = r.lr, l.hp[1] = r.alpha, l.hp[2] = 1.0 - r.alpha, l.hp[3] = r.eps;
        l.hp[4] = r.weight_decay, l.hp[5] = r.momentum;
        kiln__text_printf(&s, "  %s lr = (%s)h0, alpha = (%s)h1, w = (%s)h2, eps = (%s)h3, wd = (%s)h4, mu = (%s)h5;\n"
                                "  %s g = v%d[i%d];\n  if (wd != 0) g = g + wd * v0[i0];\n", T, T, T, T, T, T, T, T, ig, ig);
        kiln__text_printf(&s, first ? "  %s sq = (%s)0 + w * g * g;\n" : "  %s sq = v1[i1] * alpha + w * g * g;\n", T, T);
        kiln__text_printf(&s, "  v1[i1] = sq;\n");
        if (centered) kiln__text_printf(&s, "  %s ga = v%d[i%d]; sq = sq - ga * ga;\n", T, ia, ia);
        kiln__text_printf(&s, "  %s avg = sqrt(sq) + eps;\n", T);
        if (mom) {
            kiln__text_printf(&s, first ? "  %s buf = (%s)0 + g / avg;\n" : "  %s buf = v2[i2] * mu + g / avg;\n", T, T);
            kiln__text_printf(&s, "  v2[i2] = buf;\n  v0[i0] = v0[i0] - lr * buf;\n}\n");
        } else {
            kiln__text_printf(&s, "  v0[i0] = v0[i0] - lr * (g / avg);\n}\n");
        }
    }
    return launch(d, op, &s, &l, args, a, n_hp);
}

void kiln__opencl_register_optim(kiln__kernel_fn *table) {
    table[KILN__OP_RMSPROP_GRAD_AVG] = kernel_adaptive;
    table[KILN__OP_RMSPROP_UPDATE] = kernel_adaptive;
    table[KILN__OP_ADAGRAD_UPDATE] = kernel_adaptive;

    table[KILN__OP_SUM_SQUARES] = kernel_sum_squares;
    table[KILN__OP_SGD_UPDATE] = kernel_sgd;
    table[KILN__OP_ADAM_UPDATE] = kernel_adam;
}

#endif
