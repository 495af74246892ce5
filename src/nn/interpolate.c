/* interpolate (torch.nn.functional.interpolate's nearest and bilinear modes on [N, C, H, W]),
 * composed from differentiable ops so autodiff gives the input's gradient. Each spatial dim is
 * resampled on its own: the source rows (and their weights) are computed here on the host,
 * exactly as PyTorch maps an output index to the input, then
 *
 *   nearest   y = index_select(x, dim, src)
 *   bilinear  y = lerp(index_select(x, dim, lo), index_select(x, dim, hi), frac)
 *
 * PyTorch's mapping: with align_corners, src = dst (in - 1) / (out - 1); otherwise the scale
 * is 1 / scale_factor when one was given, else in / out, and bilinear samples pixel centres,
 * src = max((dst + 0.5) scale - 0.5, 0), while nearest takes floor(dst scale) (in float, as
 * PyTorch computes it), both clamped to the last row. Upsample is the same as a module. */
#include <math.h>
#include <stdlib.h>

#include "kiln/tensor.h"
#include "nn/layers-impl.h"

#define MAX_OUT ((int64_t)1 << 40) /* output sizes beyond any real image */

/* Resamples dim of x (consumed) from in to out rows. */
static kiln_tensor resample(kiln_tensor x, int dim, int64_t in, int64_t out, double scale, kiln_interp_mode mode,
                            bool align_corners, kiln_device dev, kiln_dtype dtype) {
    int64_t *lo = malloc(sizeof(int64_t) * (size_t)out), *hi = malloc(sizeof(int64_t) * (size_t)out);
    double *frac = malloc(sizeof(double) * (size_t)out);
    if (!lo || !hi || !frac) {
        free(lo), free(hi), free(frac);
        return kiln__nn_fail("kiln_interpolate", 1, &x, KILN_ERR_OUT_OF_MEMORY, "no memory for %lld source indices",
                             (long long)out);
    }
    for (int64_t i = 0; i < out; i++) {
        if (mode == KILN_INTERP_NEAREST) {
            float s = scale > 0 ? (float)(1.0 / scale) : (float)in / (float)out;
            int64_t k = (int64_t)floorf((float)i * s);
            lo[i] = k < in - 1 ? k : in - 1;
            continue;
        }
        double s = align_corners ? (out > 1 ? (double)(in - 1) / (double)(out - 1) : 0.0)
                                 : (scale > 0 ? 1.0 / scale : (double)in / (double)out);
        double src = align_corners ? s * (double)i : fmax(s * ((double)i + 0.5) - 0.5, 0.0);
        int64_t k = (int64_t)src;
        if (k > in - 1) k = in - 1;
        lo[i] = k;
        hi[i] = k < in - 1 ? k + 1 : k;
        frac[i] = src - (double)k;
    }
    kiln_tensor ilo = kiln_from_data(dev, KILN_I64, KILN_SHAPE(out), lo);
    kiln_tensor y;
    if (mode == KILN_INTERP_NEAREST) {
        y = kiln_index_select(x, dim, ilo);
    } else {
        kiln_tensor ihi = kiln_from_data(dev, KILN_I64, KILN_SHAPE(out), hi);
        kiln_tensor w = kiln_cast(kiln_from_data(dev, KILN_F64, KILN_SHAPE(out), frac), dtype);
        if (dim == 2) w = kiln_unsqueeze(w, 1); /* [out, 1]: broadcast over the width */
        kiln_tensor a = kiln_index_select(kiln_ref(x), dim, ilo); /* before x is consumed below */
        y = kiln_lerp(a, kiln_index_select(x, dim, ihi), w);
    }
    free(lo), free(hi), free(frac);
    return y;
}

static kiln_tensor interpolate(kiln_tensor x, int64_t out_h, int64_t out_w, double scale_h, double scale_w,
                               kiln_interp_mode mode, bool align_corners) {
    const char *op = "kiln_interpolate";
    const kiln__tensor *t = kiln__nn_peek(x);
    char s[128];
    if (!t) return kiln__nn_fail(op, 1, &x, KILN_ERR_INVALID_ARGUMENT, "unusable input");
    if (mode != KILN_INTERP_NEAREST && mode != KILN_INTERP_BILINEAR)
        return kiln__nn_fail(op, 1, &x, KILN_ERR_INVALID_ARGUMENT, "unknown mode %d", (int)mode);
    if (t->ndim != 4)
        return kiln__nn_fail(op, 1, &x, KILN_ERR_SHAPE, "expects an input [N, C, H, W], got %s",
                             kiln__nn_shape_str(s, sizeof s, t));
    if (mode == KILN_INTERP_BILINEAR && !kiln__dtype_is_float(t->dtype))
        return kiln__nn_fail(op, 1, &x, KILN_ERR_DTYPE, "bilinear mode needs a floating-point input, got %s",
                             kiln_dtype_name(t->dtype));
    if (mode == KILN_INTERP_NEAREST && align_corners)
        return kiln__nn_fail(op, 1, &x, KILN_ERR_INVALID_ARGUMENT,
                             "align_corners can only be set with bilinear mode (as PyTorch)");
    bool by_size = out_h != 0 || out_w != 0, by_scale = scale_h != 0 || scale_w != 0;
    if (by_size == by_scale)
        return kiln__nn_fail(op, 1, &x, KILN_ERR_INVALID_ARGUMENT,
                             "give either an output size (%lld, %lld) or scale factors (%g, %g), not both or neither",
                             (long long)out_h, (long long)out_w, scale_h, scale_w);
    int64_t h = t->shape[2], w = t->shape[3];
    if (by_scale) {
        double max = (double)MAX_OUT;
        if (!(scale_h > 0 && scale_w > 0 && scale_h * (double)h < max && scale_w * (double)w < max))
            return kiln__nn_fail(op, 1, &x, KILN_ERR_INVALID_ARGUMENT,
                                 "scale factors (%g, %g) must be positive and finite, and not grow %s past 2^40",
                                 scale_h, scale_w, kiln__nn_shape_str(s, sizeof s, t));
        out_h = (int64_t)floor((double)h * scale_h);
        out_w = (int64_t)floor((double)w * scale_w);
    } else {
        scale_h = scale_w = 0; /* the mapping then comes from the sizes */
    }
    if (out_h < 1 || out_w < 1 || out_h > MAX_OUT || out_w > MAX_OUT || h < 1 || w < 1)
        return kiln__nn_fail(op, 1, &x, KILN_ERR_SHAPE, "cannot resample %s to %lld x %lld: sizes must be >= 1",
                             kiln__nn_shape_str(s, sizeof s, t), (long long)out_h, (long long)out_w);
    int64_t numel;
    if (__builtin_mul_overflow(t->shape[0] * t->shape[1], out_h, &numel) ||
        __builtin_mul_overflow(numel, out_w, &numel) || numel > KILN__MAX_NUMEL)
        return kiln__nn_fail(op, 1, &x, KILN_ERR_OUT_OF_MEMORY, "resampling %s to %lld x %lld gives too many elements",
                             kiln__nn_shape_str(s, sizeof s, t), (long long)out_h, (long long)out_w);
    kiln_device dev = t->device;
    kiln_dtype dtype = t->dtype;
    if (out_h != h || scale_h > 0) x = resample(x, 2, h, out_h, scale_h, mode, align_corners, dev, dtype);
    if (out_w != w || scale_w > 0) x = resample(x, 3, w, out_w, scale_w, mode, align_corners, dev, dtype);
    return x;
}

kiln_tensor kiln_interpolate(kiln_tensor x, int64_t out_h, int64_t out_w, double scale_h, double scale_w,
                             kiln_interp_mode mode, bool align_corners) {
    const char *outer = kiln__op_scope_enter("kiln_interpolate"); /* the ops inside report as it */
    kiln_tensor y = interpolate(x, out_h, out_w, scale_h, scale_w, mode, align_corners);
    kiln__op_scope_leave(outer);
    return y;
}

/* ---- Upsample: interpolate as a module --------------------------------------------------- */

typedef struct {
    int64_t out_h, out_w;
    double scale_h, scale_w;
    kiln_interp_mode mode;
    bool align_corners;
} upsample_state;

static kiln_tensor upsample_forward(kiln_module *m, kiln_tensor x) {
    const upsample_state *s = m->state;
    return kiln_interpolate(x, s->out_h, s->out_w, s->scale_h, s->scale_w, s->mode, s->align_corners);
}

static const kiln__module_vtable upsample_vt = {"Upsample", upsample_forward, NULL};

kiln_module *kiln_upsample_new(int64_t out_h, int64_t out_w, double scale_h, double scale_w, kiln_interp_mode mode,
                               bool align_corners) {
    const char *op = "kiln_upsample_new";
    bool by_size = out_h > 0 && out_w > 0 && scale_h == 0 && scale_w == 0;
    bool by_scale = out_h == 0 && out_w == 0 && scale_h > 0 && scale_w > 0 && isfinite(scale_h) && isfinite(scale_w);
    if (!by_size && !by_scale)
        return kiln__nn_bad_arg(op, "give either an output size (%lld, %lld) > 0 or finite scale factors (%g, %g) > 0, "
                                "the other 0", (long long)out_h, (long long)out_w, scale_h, scale_w);
    if ((mode != KILN_INTERP_NEAREST && mode != KILN_INTERP_BILINEAR) || (mode == KILN_INTERP_NEAREST && align_corners))
        return kiln__nn_bad_arg(op, "mode %d with align_corners %d: nearest or bilinear, align_corners with bilinear only",
                                (int)mode, (int)align_corners);
    kiln_module *m = kiln__module_new(&upsample_vt, sizeof(upsample_state));
    if (m) *(upsample_state *)m->state = (upsample_state){out_h, out_w, scale_h, scale_w, mode, align_corners};
    return m;
}
