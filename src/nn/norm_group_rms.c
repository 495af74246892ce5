/* The functional group_norm and rms_norm (torch.nn.functional's) and the RMSNorm layer, composed
 * from differentiable ops (the statistics too), each in its own name's scope so errors inside
 * name the call the caller made. */
#include <float.h>
#include <math.h>
#include <stdio.h>

#include "kiln/tensor.h"
#include "nn/layers-impl.h"

/* ---- group_norm ------------------------------------------------------------------------------ */

static kiln_tensor group_norm(kiln_tensor x, int64_t groups, kiln_tensor weight, kiln_tensor bias, double eps) {
    const char *op = "kiln_group_norm";
    bool has_w = weight.id != KILN_NONE.id, has_b = bias.id != KILN_NONE.id;
    kiln_tensor in[3], fail;
    int n;
    const kiln__tensor *t = kiln__nn_norm_input(op, x, weight, bias, in, &n, &fail);
    if (!t) return fail;
    char msg[384], sa[128];
    kiln_status st = KILN_OK;
    if (t->ndim < 2 || t->ndim >= KILN_MAX_DIMS)
        return kiln__nn_fail(op, n, in, KILN_ERR_SHAPE, "expects input [N, C, ...] of 2 to %d dims, got %s", KILN_MAX_DIMS - 1,
                             kiln__nn_shape_str(sa, sizeof sa, t));
    int64_t channels = t->shape[1];
    if (groups < 1 || channels % groups != 0)
        return kiln__nn_fail(op, n, in, KILN_ERR_INVALID_ARGUMENT, "%lld channels cannot be split into %lld groups",
                             (long long)channels, (long long)groups);
    if (!kiln__nn_check_channel_vec(weight, "weight", channels, true, &st, msg, sizeof msg) ||
        !kiln__nn_check_channel_vec(bias, "bias", channels, true, &st, msg, sizeof msg))
        return kiln__nn_fail(op, n, in, st, "%s", msg);
    if (kiln__nn_bad_eps(eps)) return kiln__nn_fail(op, n, in, KILN_ERR_INVALID_ARGUMENT, "eps %g must be finite and >= 0", eps);
    kiln_shape shape = {t->ndim, {0}}, bshape = {t->ndim, {0}};
    for (int d = 0; d < t->ndim; d++) shape.dims[d] = t->shape[d], bshape.dims[d] = d == 1 ? channels : 1;
    /* [N, C, *] -> [N, G, C/G * prod(*)]: each group's values in one row */
    int64_t per_group = channels / groups;
    for (int d = 2; d < t->ndim; d++) per_group *= t->shape[d];
    kiln_tensor g = kiln_reshape(x, KILN_SHAPE(t->shape[0], groups, per_group)); /* x (and t) consumed */
    kiln_tensor mean = kiln_mean_dims(kiln_ref(g), KILN_DIMS(2), true), var;
    kiln_tensor xc = kiln__nn_centre(g, mean, KILN_DIMS(2), &var);
    kiln_release(mean);
    kiln_tensor y = kiln_reshape(kiln_mul(xc, kiln_rsqrt(kiln_add_scalar(var, eps))), shape);
    if (has_w) y = kiln_mul(y, kiln_reshape(weight, bshape));
    return has_b ? kiln_add(y, kiln_reshape(bias, bshape)) : y;
}

kiln_tensor kiln_group_norm(kiln_tensor x, int64_t num_groups, kiln_tensor weight, kiln_tensor bias, double eps) {
    const char *outer = kiln__op_scope_enter("kiln_group_norm");
    kiln_tensor y = group_norm(x, num_groups, weight, bias, eps);
    kiln__op_scope_leave(outer);
    return y;
}

/* ---- rms_norm --------------------------------------------------------------------------------- */

static kiln_tensor rms_norm(const char *op, kiln_tensor x, kiln_shape ns, kiln_tensor weight, double eps) {
    bool has_w = weight.id != KILN_NONE.id;
    kiln_tensor in[2] = {x, weight};
    int n = has_w ? 2 : 1;
    const kiln__tensor *t = kiln__nn_peek(x), *w = has_w ? kiln__nn_peek(weight) : NULL;
    char sa[128], sb[128];
    if (!t || (has_w && !w)) return kiln__nn_fail(op, n, in, KILN_ERR_INVALID_ARGUMENT, "unusable input");
    if (ns.ndim < 1 || ns.ndim > KILN_MAX_DIMS)
        return kiln__nn_fail(op, n, in, KILN_ERR_INVALID_ARGUMENT, "normalized_shape must have 1 to %d dims, got %d",
                             KILN_MAX_DIMS, ns.ndim);
    if (!kiln__dtype_is_float(t->dtype))
        return kiln__nn_fail(op, n, in, KILN_ERR_DTYPE, "input must be floating point, got %s", kiln_dtype_name(t->dtype));
    bool fits = t->ndim >= ns.ndim;
    for (int d = 0; fits && d < ns.ndim; d++) fits = t->shape[t->ndim - ns.ndim + d] == ns.dims[d];
    if (!fits)
        return kiln__nn_fail(op, n, in, KILN_ERR_SHAPE, "normalized_shape %s is not the last dims of the input %s",
                             kiln__shape_str(sa, sizeof sa, ns.ndim, ns.dims), kiln__nn_shape_str(sb, sizeof sb, t));
    if (has_w) {
        bool same = kiln__dtype_is_float(w->dtype) && w->ndim == ns.ndim;
        for (int d = 0; same && d < ns.ndim; d++) same = w->shape[d] == ns.dims[d];
        if (!same)
            return kiln__nn_fail(op, n, in, kiln__dtype_is_float(w->dtype) ? KILN_ERR_SHAPE : KILN_ERR_DTYPE,
                                 "weight must be a float tensor of normalized_shape %s, got %s %s",
                                 kiln__shape_str(sa, sizeof sa, ns.ndim, ns.dims), kiln_dtype_name(w->dtype),
                                 kiln__nn_shape_str(sb, sizeof sb, w));
    }
    if (isnan(eps)) eps = t->dtype == KILN_F64 ? DBL_EPSILON : t->dtype == KILN_F32 ? FLT_EPSILON
                          : t->dtype == KILN_F16 ? 0.0009765625 : 0.0078125; /* torch: finfo(dtype).eps */
    if (kiln__nn_bad_eps(eps)) return kiln__nn_fail(op, n, in, KILN_ERR_INVALID_ARGUMENT, "eps %g must be finite and >= 0", eps);
    kiln_dims dims = {ns.ndim, {0}};
    for (int d = 0; d < ns.ndim; d++) dims.d[d] = d - ns.ndim;
    kiln_tensor ms = kiln_mean_dims(kiln_mul(kiln_ref(x), kiln_ref(x)), dims, true);
    kiln_tensor y = kiln_mul(x, kiln_rsqrt(kiln_add_scalar(ms, eps)));
    return has_w ? kiln_mul(y, weight) : y;
}

kiln_tensor kiln_rms_norm(kiln_tensor x, kiln_shape normalized_shape, kiln_tensor weight, double eps) {
    const char *outer = kiln__op_scope_enter("kiln_rms_norm");
    kiln_tensor y = rms_norm("kiln_rms_norm", x, normalized_shape, weight, eps);
    kiln__op_scope_leave(outer);
    return y;
}

/* ---- RMSNorm -------------------------------------------------------------------------------------- */

typedef struct {
    int64_t size;
    double eps;
    bool affine;
} rms_norm_state;

static kiln_tensor rms_norm_forward(kiln_module *m, kiln_tensor x) {
    const rms_norm_state *s = m->state;
    if (!kiln__nn_expect_input(&x, 1, &s->size, true, "RMSNorm", "RMSNorm(%lld)", (long long)s->size)) return x;
    kiln_tensor w = s->affine ? kiln_ref(m->params[0].tensor) : KILN_NONE;
    const char *outer = kiln__op_scope_enter("RMSNorm");
    kiln_tensor y = rms_norm("RMSNorm", x, KILN_SHAPE(s->size), w, s->eps);
    kiln__op_scope_leave(outer);
    return y;
}

static const kiln__module_vtable rms_norm_vt = {"RMSNorm", rms_norm_forward, NULL};

kiln_module *kiln_rms_norm_new(int64_t normalized_size, double eps, bool affine) {
    if (normalized_size < 1)
        return kiln__nn_bad_arg("kiln_rms_norm_new", "normalized_size %lld must be positive", (long long)normalized_size);
    if (!isnan(eps) && kiln__nn_bad_eps(eps))
        return kiln__nn_bad_arg("kiln_rms_norm_new", "eps %g must be finite and >= 0 (NaN: the dtype's epsilon)", eps);
    kiln_module *m = kiln__module_new(&rms_norm_vt, sizeof(rms_norm_state));
    if (m) *(rms_norm_state *)m->state = (rms_norm_state){normalized_size, eps, affine};
    if (!affine) return m;
    kiln__nn_param ps[1] = {{"weight", kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(normalized_size)), false}};
    return kiln__nn_finish(m, 1, ps);
}
