/* The fused layer norm (layer_norm.h): one row at a time, statistics then the normalised row,
 * rows split over the pool. The composed layer norm reads x three times and writes four
 * intermediates of its size; this reads each row from cache twice more and writes it once. */
#include "backend/backend-impl.h"
#include "backend/cpu/layer_norm.h"
#include "backend/cpu/threadpool.h"

typedef struct {
    const kiln__op *op;
    int64_t d; /* row length */
    double eps;
    bool has_w, has_b;
} ln_ctx;

/* Element offset of row r's first element in v (rows: every dim but the last). */
static int64_t row_offset(const kiln__view *v, int64_t r) {
    int64_t off = v->offset;
    for (int k = v->ndim - 2; k >= 0; k--) {
        off += (r % v->shape[k]) * v->strides[k];
        r /= v->shape[k];
    }
    return off;
}

#define LN_ROWS(T, ACC)                                                                                   \
    static void rows_##T(void *vctx, int64_t begin, int64_t end) {                                       \
        const ln_ctx *c = vctx;                                                                           \
        const kiln__op *op = c->op;                                                                       \
        const kiln__view *xv = &op->in[0], *yv = &op->out[0];                                             \
        const kiln__view *wv = c->has_w ? &op->in[1] : NULL, *bv = c->has_b ? &op->in[c->has_w ? 2 : 1] : NULL; \
        int last = yv->ndim - 1;                                                                          \
        int64_t d = c->d, xs = xv->strides[last], ws = wv ? wv->strides[last] : 0, bs = bv ? bv->strides[last] : 0; \
        for (int64_t r = begin; r < end; r++) {                                                           \
            const T *x = (const T *)xv->storage->data + row_offset(xv, r);                                \
            T *y = (T *)yv->storage->data + row_offset(yv, r);                                            \
            const T *w = wv ? (const T *)wv->storage->data + row_offset(wv, r) : NULL;                    \
            const T *b = bv ? (const T *)bv->storage->data + row_offset(bv, r) : NULL;                    \
            ACC sum = 0;                                                                                  \
            for (int64_t j = 0; j < d; j++) sum += x[j * xs];                                             \
            ACC mean = sum / (ACC)d, sq = 0;                                                              \
            for (int64_t j = 0; j < d; j++) {                                                             \
                ACC t = x[j * xs] - mean;                                                                 \
                sq += t * t;                                                                              \
            }                                                                                             \
            ACC rstd = (ACC)1 / sqrt(sq / (ACC)d + (ACC)c->eps);                                          \
            for (int64_t j = 0; j < d; j++) { /* x[j] is read before y[j] is written (in place) */        \
                ACC v = (x[j * xs] - mean) * rstd;                                                        \
                if (w) v *= w[j * ws];                                                                    \
                if (b) v += b[j * bs];                                                                    \
                y[j] = (T)v;                                                                              \
            }                                                                                             \
        }                                                                                                 \
    }

#include <math.h>
LN_ROWS(float, double)
LN_ROWS(double, double)

/* f32 rows with a unit stride along them (x, weight, bias): eight independent sums the compiler
 * keeps in vector registers (one sum would be a serial chain it may not reorder), in f32 as the
 * composition's own reductions are; the variance from the centred values, as there. */
enum { LANES = 8 };

static float sum_lanes(const float *lanes) {
    float s = 0;
    for (int k = 0; k < LANES; k++) s += lanes[k];
    return s;
}

static void rows_float_dense(void *vctx, int64_t begin, int64_t end) {
    const ln_ctx *c = vctx;
    const kiln__op *op = c->op;
    const kiln__view *xv = &op->in[0], *yv = &op->out[0];
    const kiln__view *wv = c->has_w ? &op->in[1] : NULL, *bv = c->has_b ? &op->in[c->has_w ? 2 : 1] : NULL;
    int64_t d = c->d, body = d - d % LANES;
    for (int64_t r = begin; r < end; r++) {
        const float *x = (const float *)xv->storage->data + row_offset(xv, r);
        float *y = (float *)yv->storage->data + row_offset(yv, r);
        float acc[LANES] = {0}, sq[LANES] = {0};
        for (int64_t j = 0; j < body; j += LANES)
            for (int k = 0; k < LANES; k++) acc[k] += x[j + k];
        float sum = sum_lanes(acc);
        for (int64_t j = body; j < d; j++) sum += x[j];
        float mean = sum / (float)d;
        for (int64_t j = 0; j < body; j += LANES)
            for (int k = 0; k < LANES; k++) sq[k] += (x[j + k] - mean) * (x[j + k] - mean);
        float ss = sum_lanes(sq);
        for (int64_t j = body; j < d; j++) ss += (x[j] - mean) * (x[j] - mean);
        float rstd = (float)(1.0 / sqrt((double)(ss / (float)d) + c->eps));
        const float *w = wv ? (const float *)wv->storage->data + row_offset(wv, r) : NULL;
        const float *b = bv ? (const float *)bv->storage->data + row_offset(bv, r) : NULL;
        if (w && b) { /* x[j] is read before y[j] is written (in place) */
            for (int64_t j = 0; j < d; j++) y[j] = (x[j] - mean) * rstd * w[j] + b[j];
        } else if (w) {
            for (int64_t j = 0; j < d; j++) y[j] = (x[j] - mean) * rstd * w[j];
        } else if (b) {
            for (int64_t j = 0; j < d; j++) y[j] = (x[j] - mean) * rstd + b[j];
        } else {
            for (int64_t j = 0; j < d; j++) y[j] = (x[j] - mean) * rstd;
        }
    }
}

static bool unit_stride(const kiln__view *v) { return !v || v->shape[v->ndim - 1] == 1 || v->strides[v->ndim - 1] == 1; }

kiln_status kiln__cpu_layer_norm(const kiln__op *op) {
    const kiln__view *y = &op->out[0];
    if (y->ndim < 1 || (y->dtype != KILN_F32 && y->dtype != KILN_F64)) {
        kiln__kernel_error("fused layer norm: an f32 or f64 tensor of 1 or more dims expected");
        return KILN_ERR_INTERNAL;
    }
    ln_ctx c = {.op = op, .d = y->shape[y->ndim - 1], .eps = op->p.f[1], .has_w = op->pi[0] & 1, .has_b = op->pi[0] & 2};
    int64_t n = kiln__view_numel(y), rows = c.d ? n / c.d : 0;
    if (rows == 0) return KILN_OK;
    int64_t grain = c.d >= 8192 ? 1 : 8192 / c.d;
    const kiln__view *w = c.has_w ? &op->in[1] : NULL, *b = c.has_b ? &op->in[c.has_w ? 2 : 1] : NULL;
    bool dense = y->dtype == KILN_F32 && unit_stride(&op->in[0]) && unit_stride(w) && unit_stride(b);
    kiln__parallel_for(rows, grain, dense ? rows_float_dense : y->dtype == KILN_F32 ? rows_float : rows_double, &c);
    return KILN_OK;
}
