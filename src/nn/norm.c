/* The functional batch_norm (which BatchNorm2d runs), BatchNorm2d, LayerNorm and the
 * functional layer_norm (which LayerNorm runs), composed from differentiable ops so autodiff
 * runs through the statistics as well as the affine parameters; tracked layer norm is one node
 * of its own instead, which keeps half as much (src/autodiff/rules_layer_norm.c). */
#include <math.h>
#include <stdio.h>

#include "kiln/autodiff.h"
#include "kiln/tensor.h"
#include "autodiff/autodiff-impl.h"
#include "nn/layers-impl.h"

/* x - mean and the (biased) variance mean((x - mean)^2) over dims, both keeping dims;
 * consumes x, keeps mean. Computing the variance from the centred values (rather than with
 * kiln_var_dims on x) means the backward pass saves only x - mean, not x as well. */
kiln_tensor kiln__nn_centre(kiln_tensor x, kiln_tensor mean, kiln_dims dims, kiln_tensor *var) {
    kiln_tensor xc = kiln_sub(x, kiln_ref(mean));
    *var = kiln_mean_dims(kiln_mul(kiln_ref(xc), kiln_ref(xc)), dims, true);
    return xc;
}

bool kiln__nn_bad_eps(double eps) { return !(eps >= 0 && isfinite(eps)); }

/* ---- BatchNorm2d --------------------------------------------------------------------------- */

enum { BN_WEIGHT, BN_BIAS, BN_RUNNING_MEAN, BN_RUNNING_VAR, BN_NUM_BATCHES };

typedef struct {
    int64_t channels;
    double eps, momentum;
} batch_norm_state;

/* running = (1 - momentum) running + momentum batch, in the buffer's dtype; consumes batch.
 * The buffer is the op's only owner in the common case, so the update reuses its memory. */
static void update_running(kiln_tensor *slot, kiln_tensor batch, double momentum) {
    kiln_dtype dt = kiln_tensor_dtype(*slot);
    kiln_tensor mixed = kiln_add(kiln_mul_scalar(*slot, 1.0 - momentum), kiln_mul_scalar(batch, momentum));
    *slot = kiln_cast(mixed, dt);
}

bool kiln__nn_check_channel_vec(kiln_tensor h, const char *what, int64_t channels, bool optional, kiln_status *st, char *msg,
                              size_t size) {
    char a[128];
    if (optional && h.id == KILN_NONE.id) return true;
    const kiln__tensor *t = kiln__nn_peek(h);
    if (!t) {
        *st = KILN_ERR_INVALID_ARGUMENT; /* the input's own error is reported instead */
        snprintf(msg, size, "%s is unusable", what);
    } else if (!kiln__dtype_is_float(t->dtype)) {
        *st = KILN_ERR_DTYPE;
        snprintf(msg, size, "%s must be floating point, got %s", what, kiln_dtype_name(t->dtype));
    } else if (t->ndim != 1 || t->shape[0] != channels) {
        *st = KILN_ERR_SHAPE;
        snprintf(msg, size, "%s must have shape [%lld], got %s", what, (long long)channels, kiln__nn_shape_str(a, sizeof a, t));
    } else {
        return true;
    }
    return false;
}

const kiln__tensor *kiln__nn_norm_input(const char *op, kiln_tensor x, kiln_tensor weight, kiln_tensor bias, kiln_tensor *in,
                                        int *n, kiln_tensor *fail) {
    *n = 0;
    in[(*n)++] = x;
    if (weight.id != KILN_NONE.id) in[(*n)++] = weight;
    if (bias.id != KILN_NONE.id) in[(*n)++] = bias;
    const kiln__tensor *t = kiln__nn_peek(x);
    if (!t) *fail = kiln__nn_fail(op, *n, in, KILN_ERR_INVALID_ARGUMENT, "unusable input");
    else if (!kiln__dtype_is_float(t->dtype))
        *fail = kiln__nn_fail(op, *n, in, KILN_ERR_DTYPE, "input must be floating point, got %s", kiln_dtype_name(t->dtype));
    else return t;
    return NULL;
}

static kiln_tensor batch_norm(kiln_tensor x, kiln_tensor *running_mean, kiln_tensor *running_var, kiln_tensor weight,
                              kiln_tensor bias, bool training, double momentum, double eps) {
    const char *op = "kiln_batch_norm";
    bool has_w = weight.id != KILN_NONE.id, has_b = bias.id != KILN_NONE.id, has_running = running_mean || running_var;
    kiln_tensor in[3], fail;
    int n;
    const kiln__tensor *t = kiln__nn_norm_input(op, x, weight, bias, in, &n, &fail);
    if (!t) return fail;
    char msg[384], sa[128];
    kiln_status st = KILN_OK;
    if (t->ndim < 2)
        return kiln__nn_fail(op, n, in, KILN_ERR_SHAPE, "expects input [N, C, ...], got %s", kiln__nn_shape_str(sa, sizeof sa, t));
    int64_t channels = t->shape[1], per_channel = kiln__tensor_numel(t) / (channels ? channels : 1);
    if (has_running && (!running_mean || !running_var))
        return kiln__nn_fail(op, n, in, KILN_ERR_NULL, "running_%s is NULL: give both running statistics or neither",
                             running_mean ? "var" : "mean");
    if (!training && !has_running)
        return kiln__nn_fail(op, n, in, KILN_ERR_INVALID_ARGUMENT, "running_mean and running_var are needed when not training");
    if ((has_running && (!kiln__nn_check_channel_vec(*running_mean, "running_mean", channels, false, &st, msg, sizeof msg) ||
                         !kiln__nn_check_channel_vec(*running_var, "running_var", channels, false, &st, msg, sizeof msg))) ||
        !kiln__nn_check_channel_vec(weight, "weight", channels, true, &st, msg, sizeof msg) ||
        !kiln__nn_check_channel_vec(bias, "bias", channels, true, &st, msg, sizeof msg))
        return kiln__nn_fail(op, n, in, st, "%s", msg);
    if (kiln__nn_bad_eps(eps)) return kiln__nn_fail(op, n, in, KILN_ERR_INVALID_ARGUMENT, "eps %g must be finite and >= 0", eps);
    if (!(momentum >= 0 && momentum <= 1))
        return kiln__nn_fail(op, n, in, KILN_ERR_INVALID_ARGUMENT, "momentum %g must lie in [0, 1]", momentum);
    if (training && per_channel == 1)
        return kiln__nn_fail(op, n, in, KILN_ERR_SHAPE,
                             "expected more than 1 value per channel when training, got input of shape %s",
                             kiln__nn_shape_str(sa, sizeof sa, t));
    kiln_shape bshape = {t->ndim, {0}};
    kiln_dims dims = {t->ndim - 1, {0}};
    for (int d = 0; d < t->ndim; d++) bshape.dims[d] = d == 1 ? channels : 1;
    for (int d = 0, k = 0; d < t->ndim; d++)
        if (d != 1) dims.d[k++] = d;
    kiln_tensor w = has_w ? kiln_reshape(weight, bshape) : KILN_NONE;
    kiln_tensor b = has_b ? kiln_reshape(bias, bshape) : KILN_NONE;
    if (per_channel == 0 && training) { /* nothing to normalise: keep the graph to weight and bias, as torch does */
        if (has_w) x = kiln_mul(x, w);
        return has_b ? kiln_add(x, b) : x;
    }
    kiln_tensor xc, var;
    if (training) {
        kiln_tensor mean = kiln_mean_dims(kiln_ref(x), dims, true);
        xc = kiln__nn_centre(x, mean, dims, &var);
        if (has_running) { /* the running variance is the unbiased one, like torch */
            kiln_no_grad_begin();
            kiln_shape cshape = KILN_SHAPE(channels);
            update_running(running_mean, kiln_reshape(kiln_detach(mean), cshape), momentum);
            double bessel = (double)per_channel / (double)(per_channel - 1);
            update_running(running_var, kiln_mul_scalar(kiln_reshape(kiln_detach(kiln_ref(var)), cshape), bessel), momentum);
            kiln_no_grad_end();
        } else {
            kiln_release(mean);
        }
    } else {
        xc = kiln_sub(x, kiln_reshape(kiln_detach(kiln_ref(*running_mean)), bshape));
        var = kiln_reshape(kiln_detach(kiln_ref(*running_var)), bshape);
    }
    /* weight / sqrt(var + eps) is per channel: one full-size multiply, and the only full-size
     * tensor the backward pass keeps is x - mean */
    kiln_tensor scale = kiln_rsqrt(kiln_add_scalar(var, eps));
    if (has_w) scale = kiln_mul(w, scale);
    kiln_tensor y = kiln_mul(xc, scale);
    return has_b ? kiln_add(y, b) : y;
}

kiln_tensor kiln_batch_norm(kiln_tensor x, kiln_tensor *running_mean, kiln_tensor *running_var, kiln_tensor weight,
                            kiln_tensor bias, bool training, double momentum, double eps) {
    const char *outer = kiln__op_scope_enter("kiln_batch_norm");
    kiln_tensor y = batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps);
    kiln__op_scope_leave(outer);
    return y;
}

static kiln_tensor batch_norm_forward(kiln_module *m, kiln_tensor x) {
    const batch_norm_state *s = m->state;
    if (!kiln__nn_expect_input(&x, 4, (int64_t[]){-1, s->channels, -1, -1}, false, "BatchNorm2d", "BatchNorm2d(%lld)",
                               (long long)s->channels))
        return x;
    const kiln__tensor *t = kiln__nn_peek(x);
    int64_t per_channel = t->shape[0] * t->shape[2] * t->shape[3];
    if (m->training && per_channel == 1) {
        char buf[128];
        return kiln__nn_fail("BatchNorm2d", 1, &x, KILN_ERR_SHAPE,
                             "expected more than 1 value per channel when training, got input of shape %s",
                             kiln__nn_shape_str(buf, sizeof buf, t));
    }
    bool update = m->training && per_channel > 0; /* an empty batch leaves the statistics alone */
    kiln_tensor y = batch_norm(x, &m->params[BN_RUNNING_MEAN].tensor, &m->params[BN_RUNNING_VAR].tensor,
                               kiln_ref(m->params[BN_WEIGHT].tensor), kiln_ref(m->params[BN_BIAS].tensor), m->training,
                               s->momentum, s->eps);
    if (update) {
        kiln_no_grad_begin();
        kiln_tensor *count = &m->params[BN_NUM_BATCHES].tensor;
        *count = kiln_add_scalar(*count, 1.0);
        kiln_no_grad_end();
    }
    return y;
}

static const kiln__module_vtable batch_norm_vt = {"BatchNorm2d", batch_norm_forward, NULL};

kiln_module *kiln_batch_norm2d_new(int64_t channels, double eps, double momentum) {
    if (channels < 1)
        return kiln__nn_bad_arg("kiln_batch_norm2d_new", "channels %lld must be positive", (long long)channels);
    if (kiln__nn_bad_eps(eps)) return kiln__nn_bad_arg("kiln_batch_norm2d_new", "eps %g must be finite and >= 0", eps);
    if (!(momentum >= 0 && momentum <= 1))
        return kiln__nn_bad_arg("kiln_batch_norm2d_new", "momentum %g must lie in [0, 1]", momentum);
    kiln_module *m = kiln__module_new(&batch_norm_vt, sizeof(batch_norm_state));
    if (m) *(batch_norm_state *)m->state = (batch_norm_state){channels, eps, momentum};
    kiln_shape cs = KILN_SHAPE(channels);
    /* the same names, order and dtypes as torch's state_dict, num_batches_tracked included */
    kiln__nn_param ps[5] = {
        {"weight", kiln_ones(KILN_CPU, KILN_F32, cs), false},
        {"bias", kiln_zeros(KILN_CPU, KILN_F32, cs), false},
        {"running_mean", kiln_zeros(KILN_CPU, KILN_F32, cs), true},
        {"running_var", kiln_ones(KILN_CPU, KILN_F32, cs), true},
        {"num_batches_tracked", kiln_zeros(KILN_CPU, KILN_I64, KILN_SCALAR_SHAPE), true},
    };
    return kiln__nn_finish(m, 5, ps);
}

/* ---- layer_norm (functional) and LayerNorm ------------------------------------------------- */

/* t's last dims equal normalized_shape */
static bool fits_trailing(const kiln__tensor *t, kiln_shape ns) {
    if (t->ndim < ns.ndim) return false;
    for (int d = 0; d < ns.ndim; d++)
        if (t->shape[t->ndim - ns.ndim + d] != ns.dims[d]) return false;
    return true;
}

/* weight or bias: a float tensor of exactly normalized_shape (as torch requires) */
static bool check_affine(const kiln__tensor *p, const char *what, kiln_shape ns, kiln_status *st, char *msg, size_t size) {
    char a[128], b[128];
    if (!kiln__dtype_is_float(p->dtype)) {
        *st = KILN_ERR_DTYPE;
        snprintf(msg, size, "%s must be floating point, got %s", what, kiln_dtype_name(p->dtype));
        return false;
    }
    if (p->ndim != ns.ndim || !fits_trailing(p, ns)) {
        *st = KILN_ERR_SHAPE;
        snprintf(msg, size, "%s must have the shape of normalized_shape %s, got %s", what,
                 kiln__shape_str(a, sizeof a, ns.ndim, ns.dims), kiln__nn_shape_str(b, sizeof b, p));
        return false;
    }
    return true;
}

static kiln_tensor layer_norm(kiln_tensor x, kiln_shape ns, kiln_tensor weight, kiln_tensor bias, double eps) {
    const char *op = "kiln_layer_norm";
    bool has_w = weight.id != KILN_NONE.id, has_b = bias.id != KILN_NONE.id;
    kiln_tensor in[3] = {x, weight, bias};
    int n = 1;
    if (has_w) in[n++] = weight;
    if (has_b) in[n++] = bias;
    const kiln__tensor *t = kiln__nn_peek(x), *w = has_w ? kiln__nn_peek(weight) : NULL,
                       *b = has_b ? kiln__nn_peek(bias) : NULL;
    if (!t || (has_w && !w) || (has_b && !b)) return kiln__nn_fail(op, n, in, KILN_ERR_INVALID_ARGUMENT, "unusable input");
    kiln_status st = KILN_OK;
    char msg[384], sa[128], sb[128];
    if (ns.ndim < 1 || ns.ndim > KILN_MAX_DIMS)
        return kiln__nn_fail(op, n, in, KILN_ERR_INVALID_ARGUMENT, "normalized_shape must have 1 to %d dims, got %d",
                             KILN_MAX_DIMS, ns.ndim);
    if (!kiln__dtype_is_float(t->dtype))
        return kiln__nn_fail(op, n, in, KILN_ERR_DTYPE, "input must be floating point, got %s", kiln_dtype_name(t->dtype));
    if (!fits_trailing(t, ns))
        return kiln__nn_fail(op, n, in, KILN_ERR_SHAPE, "given normalized_shape=%s, expected an input of shape [*, %s (its last dims), got %s",
                             kiln__shape_str(sa, sizeof sa, ns.ndim, ns.dims),
                             kiln__shape_str(sb, sizeof sb, ns.ndim, ns.dims) + 1 /* past its "[" */, kiln__nn_shape_str(msg, sizeof msg, t));
    if ((has_w && !check_affine(w, "weight", ns, &st, msg, sizeof msg)) ||
        (has_b && !check_affine(b, "bias", ns, &st, msg, sizeof msg)))
        return kiln__nn_fail(op, n, in, st, "%s", msg);
    if (kiln__nn_bad_eps(eps)) return kiln__nn_fail(op, n, in, KILN_ERR_INVALID_ARGUMENT, "eps %g must be finite and >= 0", eps);

    bool one_dtype = (!has_w || w->dtype == t->dtype) && (!has_b || b->dtype == t->dtype);
    if (one_dtype && kiln_grad_enabled() &&
        (kiln_requires_grad(x) || (has_w && kiln_requires_grad(weight)) || (has_b && kiln_requires_grad(bias)))) {
        KILN__OP_BEGIN(op); /* tracked: one node that keeps x̂ and 1/std (src/autodiff/rules_layer_norm.c) */
        kiln__tensor *tx = kiln__arg(&c, x), *tw = has_w ? kiln__arg(&c, weight) : NULL, *tb = has_b ? kiln__arg(&c, bias) : NULL;
        if (!tx || (has_w && !tw) || (has_b && !tb)) return kiln__drop(3, tx, tw, tb), kiln__result(&c, NULL);
        return kiln__result(&c, kiln__ad_layer_norm(&c, tx, tw, tb, ns.ndim, eps));
    }
    kiln_dims dims = {ns.ndim, {0}};
    for (int d = 0; d < ns.ndim; d++) dims.d[d] = d - ns.ndim;
    kiln_tensor mean = kiln_mean_dims(kiln_ref(x), dims, true), var;
    kiln_tensor xc = kiln__nn_centre(x, mean, dims, &var);
    kiln_release(mean);
    kiln_tensor y = kiln_mul(xc, kiln_rsqrt(kiln_add_scalar(var, eps)));
    if (has_w) y = kiln_mul(y, weight);
    return has_b ? kiln_add(y, bias) : y;
}

kiln_tensor kiln_layer_norm(kiln_tensor x, kiln_shape normalized_shape, kiln_tensor weight, kiln_tensor bias, double eps) {
    const char *outer = kiln__op_scope_enter("kiln_layer_norm"); /* the ops inside report as layer_norm */
    kiln_tensor y = layer_norm(x, normalized_shape, weight, bias, eps);
    kiln__op_scope_leave(outer);
    return y;
}

typedef struct {
    int64_t size;
    double eps;
    bool affine;
} layer_norm_state;

static kiln_tensor layer_norm_forward(kiln_module *m, kiln_tensor x) {
    const layer_norm_state *s = m->state;
    if (!kiln__nn_expect_input(&x, 1, &s->size, true, "LayerNorm", "LayerNorm(%lld)", (long long)s->size)) return x;
    kiln_tensor w = s->affine ? kiln_ref(m->params[0].tensor) : KILN_NONE;
    kiln_tensor b = s->affine ? kiln_ref(m->params[1].tensor) : KILN_NONE;
    return kiln_layer_norm(x, KILN_SHAPE(s->size), w, b, s->eps);
}

static const kiln__module_vtable layer_norm_vt = {"LayerNorm", layer_norm_forward, NULL};

kiln_module *kiln_layer_norm_new(int64_t normalized_size, double eps, bool affine) {
    if (normalized_size < 1)
        return kiln__nn_bad_arg("kiln_layer_norm_new", "normalized_size %lld must be positive",
                                (long long)normalized_size);
    if (kiln__nn_bad_eps(eps)) return kiln__nn_bad_arg("kiln_layer_norm_new", "eps %g must be finite and >= 0", eps);
    kiln_module *m = kiln__module_new(&layer_norm_vt, sizeof(layer_norm_state));
    if (m) *(layer_norm_state *)m->state = (layer_norm_state){normalized_size, eps, affine};
    if (!affine) return m;
    kiln__nn_param ps[2] = {
        {"weight", kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(normalized_size)), false},
        {"bias", kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(normalized_size)), false},
    };
    return kiln__nn_finish(m, 2, ps);
}
