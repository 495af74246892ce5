/* Dynamic int8 quantization of Linear layers (PyTorch's quantize_dynamic): each Linear's weight
 * becomes int8 values with an f32 scale per output channel and block of 32 inputs (symmetric,
 * zero point 0), and its forward quantizes each block of 32 values of an input row with a
 * scale of its own at run time (per row only, BERT's outlier channels cost MiniLM cosine
 * 0.98), multiplies with int32 accumulation and rescales to f32 before adding the f32 bias.
 *
 * kiln has no int8 dtype, so the int8 weight [out, in] is stored four values to an i32 element
 * ("weight_int8_g16" [out, ceil(in/4)], the last element's unused bytes zero, in the interleaved
 * order of kiln__s8_pack_weight that the VNNI product reads) next to "weight_scale_k32" [out,
 * blocks] f32 (in kiln__s8_pack_scales' order): both are ordinary kiln tensors (buffers, not
 * parameters), so checkpoints and safetensors carry them bit-exactly and nothing else needs
 * to know int8. Their names say the layout (groups of 16 outputs, a scale per 32 inputs): a
 * checkpoint of the earlier per-channel layout, whose shapes can match, fails to load by name
 * instead of computing wrong values. The product is a registered custom op, so it is queued,
 * poisoned and profiled like any other op. A model that holds its own weights (BERT) may fuse
 * the bias, and a GELU after it, into the product (kiln__linear_i8_fused): the bias then rides
 * in the scales as one more column, since a custom op takes three inputs. */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/gemm_int8.h"
#include "kiln/custom_op.h"
#include "kiln/tensor.h"
#include "nn/layers-impl.h"
#include "nn/linear_blockq-impl.h"

/* ---- the kernel ---------------------------------------------------------------------------- */

typedef struct {
    const float *x; /* the input: row r at x + offset(r), values `stride` apart */
    const int64_t *shape, *strides;
    int ndim;
    int64_t in, kpad, nblk;
    int8_t *qx;    /* [rows, kpad]: the quantized rows */
    float *xscale; /* [rows, nblk]; NAN for a block with a non-finite value */
    int32_t *xsum; /* [rows, nblk]: each block's sum of qx */
    const int8_t *qw;
    const float *wscale;
    float *y; /* [rows, out] */
    int64_t rows, out;
    kiln__s8_epilogue epilogue;
} int8_gemm;

static void int8_quantize_rows(void *ctx, int64_t begin, int64_t end) {
    const int8_gemm *g = ctx;
    for (int64_t r = begin; r < end; r++) {
        int64_t off = 0, rest = r; /* the row's first element, over any strides */
        for (int d = g->ndim - 2; d >= 0; d--) {
            off += (rest % g->shape[d]) * g->strides[d];
            rest /= g->shape[d];
        }
        kiln__s8_quantize_row(g->x + off, g->strides[g->ndim - 1], g->in, g->kpad, g->qx + r * g->kpad,
                              g->xscale + r * g->nblk, g->xsum + r * g->nblk);
    }
}

/* Rows a pass over a chunk's groups takes: their quantized activations (~96 KiB) stay in L2
 * while each group's weights go by, where all rows of a batch (up to 3.5 MB for MiniLM's
 * output linear at 2300 tokens) would be read again from L3 for every group of 16 outputs. */
#ifndef INT8_ROW_BLOCK_BYTES
#define INT8_ROW_BLOCK_BYTES (96 << 10)
#endif

static void int8_gemm_groups(void *ctx, int64_t begin, int64_t end) {
    const int8_gemm *g = ctx;
    int64_t o_end = end * KILN__S8_GROUP < g->out ? end * KILN__S8_GROUP : g->out;
    int64_t block = INT8_ROW_BLOCK_BYTES / g->kpad / 16 * 16;
    if (block < 16) block = 16;
    for (int64_t r0 = 0; r0 < g->rows; r0 += block)
        kiln__gemm_s8_rescale(g->qx + r0 * g->kpad, g->xscale + r0 * g->nblk, g->xsum + r0 * g->nblk,
                              g->rows - r0 < block ? g->rows - r0 : block, g->qw, g->wscale, g->out,
                              begin * KILN__S8_GROUP, o_end, g->kpad, g->epilogue, g->y + r0 * g->out, g->out);
}

/* The scales' columns for a packed weight of kp elements a row: one a block, and the bias. */
static int64_t scale_cols(int64_t kp, kiln__s8_epilogue epilogue) {
    return (kp * 4 + KILN__S8_BLOCK - 1) / KILN__S8_BLOCK + (epilogue != KILN__S8_PLAIN);
}

static kiln_status int8_linear_shape(int n, const kiln_custom_meta *in, kiln_custom_meta *out, void *user) {
    (void)n;
    kiln__s8_epilogue epilogue = *(const kiln__s8_epilogue *)user;
    const kiln_custom_meta *x = &in[0], *w = &in[1], *s = &in[2];
    if (x->dtype != KILN_F32)
        return kiln_custom_op_error("the input of an int8 Linear must be f32, not %s", kiln_dtype_name(x->dtype));
    if (x->ndim < 1) return kiln_custom_op_error("the input of an int8 Linear needs at least one dim");
    if (w->dtype != KILN_I32 || w->ndim != 2 || s->dtype != KILN_F32 || s->ndim != 2 || s->shape[0] != w->shape[0] ||
        s->shape[1] != scale_cols(w->shape[1], epilogue))
        return kiln_custom_op_error("the packed int8 weight is malformed (i32 [out, in/4] and f32 scales [out, %s])",
                                    epilogue == KILN__S8_PLAIN ? "in/32" : "in/32 + 1, the bias last");
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
    (void)n, (void)threads;
    const kiln_custom_operand *x = &in[0], *w = &in[1], *s = &in[2];
    if (w->strides[1] != 1 || w->strides[0] != w->shape[1] || s->strides[1] != 1 || s->strides[0] != s->shape[1])
        return kiln_custom_op_error("the packed int8 weight must be dense");
    int64_t in_features = x->shape[x->ndim - 1], kpad = w->shape[1] * 4, rows = 1;
    for (int d = 0; d < x->ndim - 1; d++) rows *= x->shape[d];
    if (rows == 0 || w->shape[0] == 0) return KILN_OK;
    int64_t nblk = (kpad + KILN__S8_BLOCK - 1) / KILN__S8_BLOCK;
    int8_t *qx = malloc((size_t)(rows * kpad) + 1);
    float *xscale = malloc((size_t)(rows * nblk + 1) * sizeof *xscale);
    int32_t *xsum = malloc((size_t)(rows * nblk + 1) * sizeof *xsum);
    if (!qx || !xscale || !xsum) {
        free(qx), free(xscale), free(xsum);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    int8_gemm g = {(const float *)x->data, x->shape, x->strides, x->ndim, in_features, kpad, nblk, qx, xscale, xsum,
                   w->data, s->data, out->data, rows, w->shape[0], *(const kiln__s8_epilogue *)user};
    int64_t qgrain = (int64_t)(1 << 14) / (kpad > 0 ? kpad : 1); /* ~16k values a chunk */
    kiln_parallel_for(rows, qgrain > 0 ? qgrain : 1, int8_quantize_rows, &g);
    int64_t groups = (g.out + KILN__S8_GROUP - 1) / KILN__S8_GROUP;
    int64_t per_group = rows * kpad * KILN__S8_GROUP;
    int64_t grain = per_group > 0 ? ((int64_t)1 << 18) / per_group : 1; /* ~256k products a chunk */
    kiln_parallel_for(groups, grain > 0 ? grain : 1, int8_gemm_groups, &g);
    free(qx), free(xscale), free(xsum);
    return KILN_OK;
}

/* One op per epilogue (a custom op takes at most three inputs: the bias travels in the scales);
 * the name says which, in errors and in the profiler. */
static const kiln__s8_epilogue EPILOGUES[3] = {KILN__S8_PLAIN, KILN__S8_BIAS, KILN__S8_BIAS_GELU};
static const char *const OP_NAMES[3] = {"linear_int8", "linear_int8_bias", "linear_int8_bias_gelu"};
static kiln_custom_op *int8_linear_ops[3];
static pthread_once_t int8_linear_once = PTHREAD_ONCE_INIT;

static void int8_linear_register(void) {
    for (int i = 0; i < 3; i++) {
        kiln_custom_op_def def = {.name = OP_NAMES[i], .n_inputs = 3, .shape = int8_linear_shape,
                                  .cpu_kernel = int8_linear_cpu, .user_data = (void *)&EPILOGUES[i]};
        if (kiln_custom_op_register(&def, &int8_linear_ops[i]) != KILN_OK) int8_linear_ops[i] = NULL;
    }
}

static kiln_tensor call_int8(const char *op, kiln__s8_epilogue epilogue, kiln_tensor x, kiln_tensor packed,
                             kiln_tensor scales) {
    pthread_once(&int8_linear_once, int8_linear_register);
    kiln_tensor in[3] = {x, packed, scales};
    if (!int8_linear_ops[epilogue]) return kiln__nn_fail(op, 3, in, KILN_ERR_INTERNAL, "the int8 product is not registered");
    return kiln_custom_op_call(int8_linear_ops[epilogue], 3, in);
}

kiln_tensor kiln__linear_i8(const char *op, kiln_tensor x, kiln_tensor packed, kiln_tensor scales, kiln_tensor bias) {
    kiln_tensor y = call_int8(op, KILN__S8_PLAIN, x, packed, scales);
    return bias.id ? kiln_add(y, bias) : y;
}

kiln_tensor kiln__linear_i8_fused(const char *op, kiln_tensor x, kiln_tensor packed, kiln_tensor scales_bias, bool gelu) {
    /* a model's q8_0/q4_0 weights (kiln__quantize_weight_blockq: 3-d) take the same call */
    if (kiln_tensor_ndim(packed) == 3) return kiln__linear_blockq_fused(op, x, packed, scales_bias, gelu);
    return call_int8(op, gelu ? KILN__S8_BIAS_GELU : KILN__S8_BIAS, x, packed, scales_bias);
}

kiln_status kiln__quantize_weight_i8(const char *op, kiln_tensor w, kiln_tensor bias, kiln_tensor *packed,
                                     kiln_tensor *scales) {
    *packed = *scales = KILN_NONE;
    if (kiln_tensor_ndim(w) != 2 || kiln_tensor_dtype(w) != KILN_F32 || kiln_tensor_device(w) != KILN_CPU)
        return kiln__report(KILN_ERR_UNSUPPORTED, op, "a weight to quantize must be a 2-d f32 CPU tensor (it is %s on %s)",
                            kiln_dtype_name(kiln_tensor_dtype(w)), kiln_device_name(kiln_tensor_device(w)));
    int64_t out = kiln_tensor_dim(w, 0), in = kiln_tensor_dim(w, 1), kp = (in + 3) / 4;
    if (bias.id && (kiln_tensor_ndim(bias) != 1 || kiln_tensor_dim(bias, 0) != out || kiln_tensor_dtype(bias) != KILN_F32 ||
                    kiln_tensor_device(bias) != KILN_CPU))
        return kiln__report(KILN_ERR_SHAPE, op, "a bias to fuse must be an f32 CPU tensor [%lld]", (long long)out);
    int64_t nblk = (kp * 4 + KILN__S8_BLOCK - 1) / KILN__S8_BLOCK, cols = nblk + (bias.id != 0);
    size_t n_w = (size_t)(out * in), n_q = (size_t)(out * kp * 4), n_s = (size_t)(out * cols);
    /* calloc(0) may give NULL: ask for 1 */
    size_t n_wf = n_w > (size_t)out ? n_w : (size_t)out; /* it holds the bias too, a while */
    float *wf = malloc((n_wf > 0 ? n_wf : 1) * sizeof *wf);
    int8_t *rowmajor = calloc(n_q > 0 ? n_q : 1, 1), *q = malloc(n_q > 0 ? n_q : 1);
    float *scale = malloc((n_s > 0 ? n_s : 1) * sizeof *scale), *packed_scale = malloc((n_s > 0 ? n_s : 1) * sizeof *scale);
    kiln_status st = wf && rowmajor && q && scale && packed_scale
                         ? KILN_OK
                         : kiln__report(KILN_ERR_OUT_OF_MEMORY, op, "cannot quantize a weight");
    if (st == KILN_OK) st = kiln_into_data(kiln_ref(w), wf, n_w * sizeof *wf);
    for (int64_t o = 0; st == KILN_OK && o < out; o++)
        for (int64_t b = 0; st == KILN_OK && b < nblk; b++) {
            int64_t k0 = b * KILN__S8_BLOCK, len = in - k0 < KILN__S8_BLOCK ? in - k0 : KILN__S8_BLOCK;
            float *sc = &scale[o * cols + b];
            *sc = len > 0 ? kiln__s8_quantize_values(wf + o * in + k0, 1, len, rowmajor + o * kp * 4 + k0) : 1.0f;
            if (isnan(*sc))
                st = kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "row %lld of a weight has a non-finite value", (long long)o);
        }
    if (st == KILN_OK && bias.id) { /* the bias as the last column */
        st = kiln_into_data(kiln_ref(bias), wf, (size_t)out * sizeof *wf);
        for (int64_t o = 0; st == KILN_OK && o < out; o++) scale[o * cols + nblk] = wf[o];
    }
    if (st == KILN_OK) {
        kiln__s8_pack_weight(rowmajor, out, kp * 4, q);
        kiln__s8_pack_scales(scale, out, cols, packed_scale);
        *packed = kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(out, kp), q);
        *scales = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(out, cols), packed_scale);
        st = kiln_tensor_status(*packed) != KILN_OK ? kiln_tensor_status(*packed) : kiln_tensor_status(*scales);
        if (st != KILN_OK) kiln__report(st, op, "cannot quantize a weight");
    }
    free(packed_scale);
    free(wf), free(rowmajor), free(q), free(scale);
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
    kiln_tensor packed, scales;
    kiln_status st = kiln__quantize_weight_i8("kiln_quantize_dynamic", m->params[0].tensor, KILN_NONE, &packed, &scales);
    return st != KILN_OK ? st : kiln__linear_take_quantized(m, &int8_linear_vt, "weight_int8_g16", "weight_scale_k32", packed, scales);
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
    if (type == KILN_QUANT_Q8_0 || type == KILN_QUANT_Q4_0) return kiln__quantize_tree_blockq(m, type);
    if (type != KILN_QUANT_I8)
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, "kiln_quantize_dynamic",
                            "unknown quantized type %d (KILN_QUANT_I8, KILN_QUANT_Q8_0, KILN_QUANT_Q4_0)", (int)type);
    return quantize_tree(m);
}

static bool tree_is_quantized(const kiln_module *m) {
    if (m->vt == &int8_linear_vt || kiln__module_is_blockq(m)) return true;
    for (int i = 0; i < m->n_children; i++)
        if (tree_is_quantized(m->children[i])) return true;
    return false;
}

bool kiln_module_is_quantized(kiln_module *m) {
    if (!m || !KILN__MODULE_LIVE(m)) return false;
    return tree_is_quantized(m);
}
