/* Weight-only block quantization of Linear layers, in the manner of ggml's q8_0 and q4_0:
 * kiln_quantize_dynamic(m, KILN_QUANT_Q8_0 or KILN_QUANT_Q4_0). Each Linear's weight becomes
 * blocks of 32 inputs of an output row, each one f32 scale and 32 integers (8 or 4 bits,
 * symmetric); activations stay f32 and are never rounded, so where int8's dynamic scheme
 * (linear_int8.c) halves the arithmetic's cost, this one cuts the weights' bytes (to 9/32 and
 * 5/32 of f32's with the scales): what a one-sentence product, which reads every weight for a
 * handful of rows, waits on.
 *
 * The packed weight is an i32 tensor [out, ceil(in/32), 8] (q8_0) or [out, ceil(in/32), 4]
 * (q4_0): one 32- or 16-byte block an element row, in the interleaved order kiln__gemm_bq
 * reads ("weight_q8_0" / "weight_q4_0"), beside "weight_scale_b32" [out, ceil(in/32)] f32 and
 * the f32 bias: buffers, so checkpoints and safetensors carry them bit-exactly; the names say
 * the format, so a checkpoint of the other one, or of int8's, fails to load by name instead of
 * computing wrong values. The product is a registered custom op per format and epilogue (the
 * bias and a GELU for models that fuse them, as BERT does: the bias then rides in the scales
 * as one more column), so it is queued, poisoned and profiled like any other op. From
 * BQ_GEMM_ROWS rows on, the products are no longer bound by the weights' bytes: the weight is
 * dequantized to f32 once and the f32 GEMM (OpenBLAS, oneDNN) runs it. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/gemm_blockq.h"
#include "backend/cpu/gemm_int8.h"
#include "kiln/custom_op.h"
#include "kiln/tensor.h"
#include "nn/linear_blockq-impl.h"

_Static_assert(KILN__S8_GROUP == KILN__BQ_GROUP, "the scales are packed by kiln__s8_pack_scales' group order");

/* Rows from which the product dequantizes the weight and runs the f32 GEMM: its f32 copy costs
 * out * in * 8 bytes of traffic once, which 64 rows of a product of out * in FMAs each repay. */
#ifndef BQ_GEMM_ROWS
#define BQ_GEMM_ROWS 64
#endif

typedef struct {
    kiln__bq_format format;
    kiln__bq_epilogue epilogue;
} bq_kind;

/* One op per format and epilogue (a custom op takes at most three inputs: the bias travels in
 * the scales); the name says which, in errors and in the profiler. */
static const bq_kind KINDS[6] = {{KILN__BQ_Q8_0, KILN__BQ_PLAIN}, {KILN__BQ_Q8_0, KILN__BQ_BIAS},
                                 {KILN__BQ_Q8_0, KILN__BQ_BIAS_GELU}, {KILN__BQ_Q4_0, KILN__BQ_PLAIN},
                                 {KILN__BQ_Q4_0, KILN__BQ_BIAS}, {KILN__BQ_Q4_0, KILN__BQ_BIAS_GELU}};
static const char *const OP_NAMES[6] = {"linear_q8_0", "linear_q8_0_bias", "linear_q8_0_bias_gelu",
                                        "linear_q4_0", "linear_q4_0_bias", "linear_q4_0_bias_gelu"};
static kiln_custom_op *bq_ops[6];
static pthread_once_t bq_once = PTHREAD_ONCE_INIT;

static const char *format_name(kiln__bq_format f) { return f == KILN__BQ_Q4_0 ? "q4_0" : "q8_0"; }

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---- the op ------------------------------------------------------------------------------- */

static kiln_status bq_shape(int n, const kiln_custom_meta *in, kiln_custom_meta *out, void *user) {
    (void)n;
    const bq_kind *kind = user;
    const char *fmt = format_name(kind->format);
    const kiln_custom_meta *x = &in[0], *w = &in[1], *s = &in[2];
    if (x->dtype != KILN_F32)
        return kiln_custom_op_error("the input of a %s Linear must be f32, not %s", fmt, kiln_dtype_name(x->dtype));
    if (x->ndim < 1) return kiln_custom_op_error("the input of a %s Linear needs at least one dim", fmt);
    int64_t words = kiln__bq_block_bytes(kind->format) / 4, bias = kind->epilogue != KILN__BQ_PLAIN;
    if (w->dtype != KILN_I32 || w->ndim != 3 || w->shape[2] != words || s->dtype != KILN_F32 || s->ndim != 2 ||
        s->shape[0] != w->shape[0] || s->shape[1] != w->shape[1] + bias)
        return kiln_custom_op_error("the packed %s weight is malformed (i32 [out, in/32, %lld] and f32 scales [out, %s])",
                                    fmt, (long long)words, bias ? "in/32 + 1, the bias last" : "in/32");
    int64_t k = x->shape[x->ndim - 1];
    if (k / KILN__BQ_BLOCK + (k % KILN__BQ_BLOCK != 0) != w->shape[1])
        return kiln_custom_op_error("input has %lld features, the %s weight takes %lld blocks of %d", (long long)k, fmt,
                                    (long long)w->shape[1], KILN__BQ_BLOCK);
    *out = *x;
    out->shape[x->ndim - 1] = w->shape[0];
    return KILN_OK;
}

typedef struct {
    kiln__bq_format format;
    kiln__bq_epilogue epilogue;
    const float *x; /* [rows, k], dense; packed by kiln__bq_pack_x for the tiles */
    int64_t rows, k, out, nblk, cols;
    const uint8_t *w;
    const float *s;
    float *y;  /* [rows, out] */
    float *wf; /* [out, k]: the dequantized weight (the GEMM path) */
} bq_run;

static void run_groups(void *ctx, int64_t begin, int64_t end) {
    const bq_run *g = ctx;
    kiln__gemm_bq_packed(g->format, g->x, g->rows, g->w, g->s, g->out, begin * KILN__BQ_GROUP,
                         min64(end * KILN__BQ_GROUP, g->out), g->k, g->epilogue, g->y, g->out);
}

static void dequantize_groups(void *ctx, int64_t begin, int64_t end) {
    const bq_run *g = ctx;
    kiln__bq_dequantize(g->format, g->w, g->s, g->cols, g->out, begin * KILN__BQ_GROUP,
                        min64(end * KILN__BQ_GROUP, g->out), g->k, g->wf + begin * KILN__BQ_GROUP * g->k, g->k);
}

static void epilogue_rows(void *ctx, int64_t begin, int64_t end) {
    const bq_run *g = ctx;
    kiln__bq_epilogue_rows(g->epilogue, g->s, g->out, 0, g->out, g->nblk, g->y + begin * g->out, g->out, end - begin);
}

/* x's rows gathered into a dense [rows, k] copy, for an input that is a view. */
static float *gather_rows(const kiln_custom_operand *x, int64_t rows, int64_t k) {
    float *d = malloc((size_t)(rows * k) * sizeof *d + 1);
    if (!d) return NULL;
    const float *src = x->data;
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = 0, rest = r;
        for (int i = x->ndim - 2; i >= 0; i--) {
            off += (rest % x->shape[i]) * x->strides[i];
            rest /= x->shape[i];
        }
        for (int64_t i = 0; i < k; i++) d[r * k + i] = src[off + i * x->strides[x->ndim - 1]];
    }
    return d;
}

static bool is_dense(const kiln_custom_operand *t) {
    int64_t want = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != want) return false;
        want *= t->shape[i];
    }
    return true;
}

static kiln_status bq_cpu(int n, const kiln_custom_operand *in, const kiln_custom_operand *out, int threads, void *user) {
    (void)n, (void)threads;
    const bq_kind *kind = user;
    const kiln_custom_operand *x = &in[0], *w = &in[1], *s = &in[2];
    if (!is_dense(w) || !is_dense(s)) return kiln_custom_op_error("the packed %s weight must be dense", format_name(kind->format));
    int64_t k = x->shape[x->ndim - 1], rows = 1;
    for (int d = 0; d < x->ndim - 1; d++) rows *= x->shape[d];
    bq_run g = {kind->format, kind->epilogue, x->data, rows, k, w->shape[0], w->shape[1], s->shape[1], w->data, s->data,
                out->data, NULL};
    if (rows == 0 || g.out == 0) return KILN_OK;
    float *dense = NULL;
    if (!is_dense(x)) {
        if (!(dense = gather_rows(x, rows, k))) return KILN_ERR_OUT_OF_MEMORY;
        g.x = dense;
    }
    int64_t groups = (g.out + KILN__BQ_GROUP - 1) / KILN__BQ_GROUP;
    if (rows >= BQ_GEMM_ROWS && (g.wf = malloc((size_t)(g.out * k) * sizeof *g.wf + 1)) != NULL) {
        kiln_parallel_for(groups, 1, dequantize_groups, &g);
        kiln__gemm_bq_dequantized(g.x, rows, g.wf, g.out, k, g.y);
        int64_t grain = (int64_t)(1 << 14) / g.out;
        kiln_parallel_for(rows, grain > 0 ? grain : 1, epilogue_rows, &g);
        free(g.wf);
    } else { /* (out of memory for the f32 copy: the tiles serve any rows) */
        float *xp = malloc((size_t)(rows * k) * sizeof *xp + 1);
        if (!xp) {
            free(dense);
            return KILN_ERR_OUT_OF_MEMORY;
        }
        kiln__bq_pack_x(g.x, k, rows, k, xp);
        g.x = xp;
        int64_t per_group = rows * (k > 0 ? k : 1) * KILN__BQ_GROUP;
        int64_t grain = ((int64_t)1 << 16) / per_group; /* ~64k products a chunk */
        kiln_parallel_for(groups, grain > 0 ? grain : 1, run_groups, &g);
        free(xp);
    }
    free(dense);
    return KILN_OK;
}

static void bq_register(void) {
    for (int i = 0; i < 6; i++) {
        kiln_custom_op_def def = {.name = OP_NAMES[i], .n_inputs = 3, .shape = bq_shape, .cpu_kernel = bq_cpu,
                                  .user_data = (void *)&KINDS[i]};
        if (kiln_custom_op_register(&def, &bq_ops[i]) != KILN_OK) bq_ops[i] = NULL;
    }
}

static kiln_tensor call_bq(const char *op, int index, kiln_tensor x, kiln_tensor packed, kiln_tensor scales) {
    pthread_once(&bq_once, bq_register);
    kiln_tensor in[3] = {x, packed, scales};
    if (!bq_ops[index]) return kiln__nn_fail(op, 3, in, KILN_ERR_INTERNAL, "the %s product is not registered", OP_NAMES[index]);
    return kiln_custom_op_call(bq_ops[index], 3, in);
}

kiln_quant_type kiln__quant_type_of(kiln_tensor packed) {
    int nd = kiln_tensor_ndim(packed);
    if (nd == 2) return KILN_QUANT_I8;
    if (nd != 3) return (kiln_quant_type)0;
    int64_t words = kiln_tensor_dim(packed, 2);
    return words == KILN__BQ_BLOCK / 4 ? KILN_QUANT_Q8_0 : words == KILN__BQ_BLOCK / 8 ? KILN_QUANT_Q4_0 : (kiln_quant_type)0;
}

kiln_tensor kiln__linear_blockq(const char *op, kiln_quant_type type, kiln_tensor x, kiln_tensor packed,
                                kiln_tensor scales, kiln_tensor bias) {
    kiln_tensor y = call_bq(op, type == KILN_QUANT_Q4_0 ? 3 : 0, x, packed, scales);
    return bias.id ? kiln_add(y, bias) : y;
}

kiln_tensor kiln__linear_blockq_fused(const char *op, kiln_tensor x, kiln_tensor packed, kiln_tensor scales_bias,
                                      bool gelu) {
    kiln_quant_type type = kiln__quant_type_of(packed);
    if (type != KILN_QUANT_Q8_0 && type != KILN_QUANT_Q4_0)
        return kiln__nn_fail(op, 3, (kiln_tensor[]){x, packed, scales_bias}, KILN_ERR_INVALID_ARGUMENT,
                             "the packed weight is neither q8_0 ([out, in/32, 8] i32) nor q4_0 ([out, in/32, 4] i32)");
    return call_bq(op, (type == KILN_QUANT_Q4_0 ? 3 : 0) + (gelu ? 2 : 1), x, packed, scales_bias);
}

/* ---- quantizing a weight ------------------------------------------------------------------ */

kiln_status kiln__quantize_weight_blockq(const char *op, kiln_quant_type type, kiln_tensor w, kiln_tensor bias,
                                         kiln_tensor *packed, kiln_tensor *scales) {
    *packed = *scales = KILN_NONE;
    if (type != KILN_QUANT_Q8_0 && type != KILN_QUANT_Q4_0)
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "%d is not a block format (KILN_QUANT_Q8_0, KILN_QUANT_Q4_0)",
                            (int)type);
    kiln__bq_format f = type == KILN_QUANT_Q4_0 ? KILN__BQ_Q4_0 : KILN__BQ_Q8_0;
    if (kiln_tensor_ndim(w) != 2 || kiln_tensor_dtype(w) != KILN_F32 || kiln_tensor_device(w) != KILN_CPU)
        return kiln__report(KILN_ERR_UNSUPPORTED, op, "a weight to quantize must be a 2-d f32 CPU tensor (it is %s on %s)",
                            kiln_dtype_name(kiln_tensor_dtype(w)), kiln_device_name(kiln_tensor_device(w)));
    int64_t out = kiln_tensor_dim(w, 0), in = kiln_tensor_dim(w, 1), nblk = (in + KILN__BQ_BLOCK - 1) / KILN__BQ_BLOCK;
    if (bias.id && (kiln_tensor_ndim(bias) != 1 || kiln_tensor_dim(bias, 0) != out || kiln_tensor_dtype(bias) != KILN_F32 ||
                    kiln_tensor_device(bias) != KILN_CPU))
        return kiln__report(KILN_ERR_SHAPE, op, "a bias to fuse must be an f32 CPU tensor [%lld]", (long long)out);
    int64_t cols = nblk + (bias.id != 0), bb = kiln__bq_block_bytes(f);
    size_t n_w = (size_t)(out * in), n_q = (size_t)(out * nblk * KILN__BQ_BLOCK), n_s = (size_t)(out * cols);
    size_t n_wf = n_w > (size_t)out ? n_w : (size_t)out; /* it holds the bias too, a while */
    float *wf = malloc(n_wf * sizeof *wf + 1), *scale = malloc(n_s * sizeof *scale + 1);
    float *pscale = malloc(n_s * sizeof *pscale + 1);
    int8_t *q = malloc(n_q + 1);
    uint8_t *pw = malloc((size_t)(out * nblk * bb) + 4);
    kiln_status st = wf && scale && pscale && q && pw ? KILN_OK
                                                      : kiln__report(KILN_ERR_OUT_OF_MEMORY, op, "cannot quantize a weight");
    if (st == KILN_OK) st = kiln_into_data(kiln_ref(w), wf, n_w * sizeof *wf);
    for (int64_t o = 0; st == KILN_OK && o < out; o++)
        for (int64_t b = 0; st == KILN_OK && b < nblk; b++) {
            int64_t k0 = b * KILN__BQ_BLOCK;
            float *sc = &scale[o * cols + b];
            *sc = kiln__bq_quantize_block(f, wf + o * in + k0, min64(KILN__BQ_BLOCK, in - k0), q + o * nblk * KILN__BQ_BLOCK + k0);
            if (isnan(*sc))
                st = kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "row %lld of a weight has a non-finite value", (long long)o);
        }
    if (st == KILN_OK && bias.id) { /* the bias as the last column */
        st = kiln_into_data(kiln_ref(bias), wf, (size_t)out * sizeof *wf);
        for (int64_t o = 0; st == KILN_OK && o < out; o++) scale[o * cols + nblk] = wf[o];
    }
    if (st == KILN_OK) {
        kiln__bq_pack_weight(f, q, out, nblk, pw);
        kiln__s8_pack_scales(scale, out, cols, pscale);
        *packed = kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(out, nblk, bb / 4), pw);
        *scales = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(out, cols), pscale);
        st = kiln_tensor_status(*packed) != KILN_OK ? kiln_tensor_status(*packed) : kiln_tensor_status(*scales);
        if (st != KILN_OK) kiln__report(st, op, "cannot quantize a weight");
    }
    free(wf), free(scale), free(pscale), free(q), free(pw);
    if (st != KILN_OK) {
        if (packed->id) kiln_release(*packed);
        if (scales->id) kiln_release(*scales);
        *packed = *scales = KILN_NONE;
    }
    return st;
}

/* ---- the quantized layer -------------------------------------------------------------------- */

static kiln_tensor bq_forward(kiln_module *m, kiln_tensor x, kiln_quant_type type) {
    const kiln__linear_state *s = m->state;
    if (!kiln__nn_expect_input(&x, 1, &s->in_features, true, "Linear", "%s Linear(%lld -> %lld)",
                               type == KILN_QUANT_Q4_0 ? "q4_0" : "q8_0", (long long)s->in_features,
                               (long long)s->out_features))
        return x;
    return kiln__linear_blockq("Linear", type, x, kiln_ref(m->params[0].tensor), kiln_ref(m->params[1].tensor),
                               s->bias ? kiln_ref(m->params[2].tensor) : KILN_NONE);
}

static kiln_tensor q8_0_forward(kiln_module *m, kiln_tensor x) { return bq_forward(m, x, KILN_QUANT_Q8_0); }
static kiln_tensor q4_0_forward(kiln_module *m, kiln_tensor x) { return bq_forward(m, x, KILN_QUANT_Q4_0); }

static const kiln__module_vtable q8_0_linear_vt = {"Linear", q8_0_forward, NULL};
static const kiln__module_vtable q4_0_linear_vt = {"Linear", q4_0_forward, NULL};

bool kiln__module_is_blockq(const kiln_module *m) { return m->vt == &q8_0_linear_vt || m->vt == &q4_0_linear_vt; }

/* Quantizes one Linear's weight (a blocking read) and puts the packed weight, the scales and
 * the bias (as buffers) in place of its parameters. */
static kiln_status quantize_linear(kiln_module *m, kiln_quant_type type) {
    kiln_tensor packed, scales;
    kiln_status st = kiln__quantize_weight_blockq("kiln_quantize_dynamic", type, m->params[0].tensor, KILN_NONE, &packed, &scales);
    if (st != KILN_OK) return st;
    return type == KILN_QUANT_Q4_0
               ? kiln__linear_take_quantized(m, &q4_0_linear_vt, "weight_q4_0", "weight_scale_b32", packed, scales)
               : kiln__linear_take_quantized(m, &q8_0_linear_vt, "weight_q8_0", "weight_scale_b32", packed, scales);
}

kiln_status kiln__quantize_tree_blockq(kiln_module *m, kiln_quant_type type) {
    if (m->vt == &kiln__linear_vt) return quantize_linear(m, type);
    for (int i = 0; i < m->n_children; i++) {
        kiln_status st = kiln__quantize_tree_blockq(m->children[i], type);
        if (st != KILN_OK) return st;
    }
    return KILN_OK;
}
