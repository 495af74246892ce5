/* Dynamic int8 quantization of Linear layers (PyTorch's quantize_dynamic): each Linear's weight
 * becomes int8 values per output channel with one f32 scale per channel (symmetric, zero point
 * 0), and its forward quantizes each block of 32 values of an input row with a scale of its own
 * at run time (per row only, BERT's outlier channels cost MiniLM cosine 0.98), multiplies with
 * int32 accumulation and rescales to f32 before adding the f32 bias.
 *
 * kiln has no int8 dtype, so the int8 weight [out, in] is stored four values to an i32 element
 * ("weight_int8" [out, ceil(in/4)], the last element's unused bytes zero) next to "weight_scale"
 * [out] f32: both are ordinary kiln tensors (buffers, not parameters), so checkpoints and
 * safetensors carry them bit-exactly and nothing else needs to know int8. The product is a
 * registered custom op, so it is queued, poisoned and profiled like any other op. */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/gemm_int8.h"
#include "kiln/custom_op.h"
#include "kiln/tensor.h"
#include "nn/layers-impl.h"

#define QMAX 127

/* ---- the kernel ---------------------------------------------------------------------------- */

typedef struct {
    const int8_t *qx;    /* [rows, kpad] */
    const float *xscale; /* [rows, blocks of KILN__S8_BLOCK]; NAN for a block with a non-finite value */
    const int8_t *qw;    /* [out, kpad] */
    const float *wscale; /* [out] */
    float *y;            /* [rows, out] */
    int64_t rows, out, kpad;
} int8_gemm;

static void int8_gemm_cols(void *ctx, int64_t begin, int64_t end) {
    const int8_gemm *g = ctx;
    kiln__gemm_s8_rescale(g->qx, g->xscale, g->rows, g->qw, g->wscale, begin, end, g->kpad, g->y, g->out);
}

/* Symmetric quantization of n values read with stride `stride` into q[0..n). Returns
 * the scale (x ~ q * scale), NAN when a value is not finite. */
static float quantize_row(const float *x, int64_t stride, int64_t n, int8_t *q) {
    float amax = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        float a = fabsf(x[i * stride]);
        if (!(a <= FLT_MAX)) return NAN; /* inf or NaN (fmaxf would skip a NaN) */
        amax = a > amax ? a : amax;
    }
    float scale = amax > 0.0f ? amax / QMAX : 1.0f;
    float inv = 1.0f / scale;
    for (int64_t i = 0; i < n; i++) {
        float v = nearbyintf(x[i * stride] * inv);
        q[i] = (int8_t)(v > QMAX ? QMAX : v < -QMAX ? -QMAX : v);
    }
    return scale;
}

static kiln_status int8_linear_shape(int n, const kiln_custom_meta *in, kiln_custom_meta *out, void *user) {
    (void)n, (void)user;
    const kiln_custom_meta *x = &in[0], *w = &in[1], *s = &in[2];
    if (x->dtype != KILN_F32)
        return kiln_custom_op_error("the input of an int8 Linear must be f32, not %s", kiln_dtype_name(x->dtype));
    if (x->ndim < 1) return kiln_custom_op_error("the input of an int8 Linear needs at least one dim");
    if (w->dtype != KILN_I32 || w->ndim != 2 || s->dtype != KILN_F32 || s->ndim != 1 || s->shape[0] != w->shape[0])
        return kiln_custom_op_error("the packed int8 weight is malformed");
    int64_t in_features = x->shape[x->ndim - 1];
    if ((in_features + 3) / 4 != w->shape[1])
        return kiln_custom_op_error("input has %lld features, the int8 weight takes %lld", (long long)in_features,
                                    (long long)(w->shape[1] * 4));
    *out = *x;
    out->shape[x->ndim - 1] = w->shape[0];
    return KILN_OK;
}

static kiln_status int8_linear_cpu(int n, const kiln_custom_operand *in, const kiln_custom_operand *out, int threads,
                                   void *user) {
    (void)n, (void)threads, (void)user;
    const kiln_custom_operand *x = &in[0], *w = &in[1], *s = &in[2];
    if (w->strides[1] != 1 || w->strides[0] != w->shape[1] || s->strides[0] != 1)
        return kiln_custom_op_error("the packed int8 weight must be dense");
    int64_t in_features = x->shape[x->ndim - 1], kpad = w->shape[1] * 4, rows = 1;
    for (int d = 0; d < x->ndim - 1; d++) rows *= x->shape[d];
    if (rows == 0 || w->shape[0] == 0) return KILN_OK;
    int64_t nblk = (kpad + KILN__S8_BLOCK - 1) / KILN__S8_BLOCK;
    int8_t *qx = calloc((size_t)(rows * kpad), 1);
    float *xscale = malloc((size_t)(rows * nblk) * sizeof *xscale);
    if (!qx || !xscale) {
        free(qx), free(xscale);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = 0, rest = r; /* the row's first element, over any strides */
        for (int d = x->ndim - 2; d >= 0; d--) {
            off += (rest % x->shape[d]) * x->strides[d];
            rest /= x->shape[d];
        }
        const float *row = (const float *)x->data + off;
        int64_t stride = x->strides[x->ndim - 1];
        for (int64_t b = 0; b < nblk; b++) {
            int64_t k0 = b * KILN__S8_BLOCK, len = in_features - k0 < KILN__S8_BLOCK ? in_features - k0 : KILN__S8_BLOCK;
            xscale[r * nblk + b] = len > 0 ? quantize_row(row + k0 * stride, stride, len, qx + r * kpad + k0) : 0.0f;
        }
    }
    int8_gemm g = {qx, xscale, w->data, s->data, out->data, rows, w->shape[0], kpad};
    int64_t grain = (int64_t)(1 << 16) / (rows * kpad > 0 ? rows * kpad : 1); /* ~64k products a chunk */
    kiln_parallel_for(g.out, grain > 0 ? grain : 1, int8_gemm_cols, &g);
    free(qx), free(xscale);
    return KILN_OK;
}

static kiln_custom_op *int8_linear_op;
static pthread_once_t int8_linear_once = PTHREAD_ONCE_INIT;

static void int8_linear_register(void) {
    kiln_custom_op_def def = {.name = "linear_int8", .n_inputs = 3, .shape = int8_linear_shape,
                              .cpu_kernel = int8_linear_cpu};
    if (kiln_custom_op_register(&def, &int8_linear_op) != KILN_OK) int8_linear_op = NULL;
}

kiln_tensor kiln__linear_i8(const char *op, kiln_tensor x, kiln_tensor packed, kiln_tensor scales, kiln_tensor bias) {
    pthread_once(&int8_linear_once, int8_linear_register);
    if (!int8_linear_op) {
        kiln_tensor all[4] = {x, packed, scales, bias};
        return kiln__nn_fail(op, bias.id ? 4 : 3, all, KILN_ERR_INTERNAL, "the int8 product is not registered");
    }
    kiln_tensor y = kiln_custom_op_call(int8_linear_op, 3, (kiln_tensor[]){x, packed, scales});
    return bias.id ? kiln_add(y, bias) : y;
}

kiln_status kiln__quantize_weight_i8(const char *op, kiln_tensor w, kiln_tensor *packed, kiln_tensor *scales) {
    *packed = *scales = KILN_NONE;
    if (kiln_tensor_ndim(w) != 2 || kiln_tensor_dtype(w) != KILN_F32 || kiln_tensor_device(w) != KILN_CPU)
        return kiln__report(KILN_ERR_UNSUPPORTED, op, "a weight to quantize must be a 2-d f32 CPU tensor (it is %s on %s)",
                            kiln_dtype_name(kiln_tensor_dtype(w)), kiln_device_name(kiln_tensor_device(w)));
    int64_t out = kiln_tensor_dim(w, 0), in = kiln_tensor_dim(w, 1), kp = (in + 3) / 4;
    size_t n_w = (size_t)(out * in), n_q = (size_t)(out * kp * 4); /* calloc(0) may give NULL: ask for 1 */
    float *wf = malloc((n_w > 0 ? n_w : 1) * sizeof *wf);
    int8_t *q = calloc(n_q > 0 ? n_q : 1, 1);
    float *scale = malloc((size_t)(out ? out : 1) * sizeof *scale);
    kiln_status st = wf && q && scale ? KILN_OK : kiln__report(KILN_ERR_OUT_OF_MEMORY, op, "cannot quantize a weight");
    if (st == KILN_OK) st = kiln_into_data(kiln_ref(w), wf, n_w * sizeof *wf);
    for (int64_t o = 0; st == KILN_OK && o < out; o++) {
        scale[o] = quantize_row(wf + o * in, 1, in, q + o * kp * 4);
        if (isnan(scale[o]))
            st = kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "row %lld of a weight has a non-finite value", (long long)o);
    }
    if (st == KILN_OK) {
        *packed = kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(out, kp), q);
        *scales = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(out), scale);
        st = kiln_tensor_status(*packed) != KILN_OK ? kiln_tensor_status(*packed) : kiln_tensor_status(*scales);
        if (st != KILN_OK) kiln__report(st, op, "cannot quantize a weight");
    }
    free(wf), free(q), free(scale);
    if (st != KILN_OK) {
        kiln_release(*packed), kiln_release(*scales);
        *packed = *scales = KILN_NONE;
    }
    return st;
}

/* ---- the quantized layer -------------------------------------------------------------------- */

static kiln_tensor int8_linear_forward(kiln_module *m, kiln_tensor x) {
    const kiln__linear_state *s = m->state;
    if (!kiln__nn_expect_input(&x, 1, &s->in_features, true, "Linear", "int8 Linear(%lld -> %lld)",
                               (long long)s->in_features, (long long)s->out_features))
        return x;
    return kiln__linear_i8("Linear", x, kiln_ref(m->params[0].tensor), kiln_ref(m->params[1].tensor),
                           s->bias ? kiln_ref(m->params[2].tensor) : KILN_NONE);
}

static const kiln__module_vtable int8_linear_vt = {"Linear", int8_linear_forward, NULL};

/* Quantizes one Linear's weight (a blocking read) and puts the packed weight, the scales and
 * the bias (as buffers) in place of its parameters. */
static kiln_status quantize_linear(kiln_module *m) {
    const kiln__linear_state *s = m->state;
    kiln_tensor packed, scales;
    kiln_status st = kiln__quantize_weight_i8("kiln_quantize_dynamic", m->params[0].tensor, &packed, &scales);
    if (st != KILN_OK) return st;
    /* the new tensors replace the parameters only now that nothing can fail */
    kiln__module_param *ps = calloc(3, sizeof *ps);
    if (!ps) {
        kiln_release(packed), kiln_release(scales);
        return kiln__report(KILN_ERR_OUT_OF_MEMORY, "kiln_quantize_dynamic", "cannot quantize a Linear");
    }
    ps[0] = (kiln__module_param){"weight_int8", packed, true};
    ps[1] = (kiln__module_param){"weight_scale", scales, true};
    if (s->bias) ps[2] = (kiln__module_param){"bias", kiln_detach(m->params[1].tensor), true};
    kiln_release(m->params[0].tensor);
    free(m->params);
    m->params = ps;
    m->n_params = s->bias ? 3 : 2;
    m->vt = &int8_linear_vt;
    return KILN_OK;
}

static kiln_status quantize_tree(kiln_module *m) {
    if (m->vt == &kiln__linear_vt) return quantize_linear(m);
    for (int i = 0; i < m->n_children; i++) {
        kiln_status st = quantize_tree(m->children[i]);
        if (st != KILN_OK) return st;
    }
    return KILN_OK;
}

kiln_status kiln_quantize_dynamic(kiln_module *m, kiln_quant_type type) {
    if (!m) return kiln__report(KILN_ERR_NULL, "kiln_quantize_dynamic", "module is NULL");
    KILN__OBJECT_OR_RETURN(m, KILN__MODULE_KIND, "kiln_quantize_dynamic", KILN_ERR_STALE_HANDLE);
    if (type != KILN_QUANT_I8)
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, "kiln_quantize_dynamic",
                            "unknown quantized type %d (KILN_QUANT_I8 is the one there is)", (int)type);
    return quantize_tree(m);
}

static bool tree_is_quantized(const kiln_module *m) {
    if (m->vt == &int8_linear_vt) return true;
    for (int i = 0; i < m->n_children; i++)
        if (tree_is_quantized(m->children[i])) return true;
    return false;
}

bool kiln_module_is_quantized(kiln_module *m) {
    if (!m || !KILN__MODULE_LIVE(m)) return false;
    return tree_is_quantized(m);
}
