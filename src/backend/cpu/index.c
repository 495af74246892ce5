/* Indexing kernels (INDEX_SELECT, GATHER, SCATTER_ADD, ONE_HOT) and the range generators
 * (ARANGE, LINSPACE, EYE).
 *
 * Index values are only known when a kernel runs, so every kernel checks each one and fails
 * with KILN_ERR_INDEX instead of reading or writing out of bounds. Checks run inside parallel
 * loops; the first bad value is parked in the loop context and reported by the kernel's own
 * thread, because kiln__kernel_error is thread-local. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "backend/cpu/cpu-impl.h"

/* ---- shared helpers ---------------------------------------------------------------------- */

typedef struct {
    atomic_bool hit;
    _Atomic int64_t value;
} bad_index;

static void bad_index_note(bad_index *b, int64_t v) {
    bool expect = false;
    if (atomic_compare_exchange_strong(&b->hit, &expect, true)) atomic_store(&b->value, v);
}

static kiln_status bad_index_status(bad_index *b, int64_t size) {
    if (!atomic_load(&b->hit)) return KILN_OK;
    kiln__kernel_error("index %lld out of range for dim of size %lld", (long long)atomic_load(&b->value),
                       (long long)size);
    return KILN_ERR_INDEX;
}

static inline int64_t load_index(const char *p, bool i64) {
    return i64 ? *(const int64_t *)p : (int64_t)*(const int32_t *)p;
}

static inline void copy_elem(char *dst, const char *src, size_t es) {
    switch (es) {
    case 1: *dst = *src; break;
    case 2: memcpy(dst, src, 2); break;
    case 4: memcpy(dst, src, 4); break;
    default: memcpy(dst, src, 8); break;
    }
}

/* v seen over `shape` (ndim dims) with its own strides, except `dim`, which steps 0: the
 * kernel adds index * (the dim's stride) itself. */
static kiln__view pinned_view(const kiln__view *v, int ndim, const int64_t *shape, int dim) {
    kiln__view w = *v;
    w.ndim = ndim;
    for (int d = 0; d < ndim; d++) w.shape[d] = shape[d];
    if (dim >= 0) w.strides[dim] = 0;
    return w;
}

/* ---- INDEX_SELECT and GATHER: out[..] = src[.. with dim replaced by index[..] ..] --------- */

typedef struct {
    size_t es;
    bool idx64;
    int64_t dim_size, dim_step; /* src's size along dim, and its step there in bytes */
    bad_index bad;
} gather_ctx;

/* Element by element, with the element and index types known to the compiler. */
#define GATHER_ELEMS(T, I)                                                                  \
    for (int64_t e = 0; e < n; e++) {                                                       \
        int64_t k = *(const I *)(p[2] + e * st[2]);                                         \
        if (KILN__UNLIKELY(k < 0 || k >= g->dim_size)) {                                    \
            bad_index_note(&g->bad, k);                                                     \
            return;                                                                         \
        }                                                                                   \
        *(T *)(p[0] + e * st[0]) = *(const T *)(p[1] + e * st[1] + k * g->dim_step);        \
    }                                                                                       \
    return;
#define GATHER_CASES(T, SIZE)                 \
    case SIZE * 2: GATHER_ELEMS(T, int32_t) \
    case SIZE * 2 + 1: GATHER_ELEMS(T, int64_t)

/* p[0] out, p[1] src at dim coordinate 0, p[2] index. */
static void gather_loop(void *vctx, int64_t n, char **p, const int64_t *st) {
    gather_ctx *g = vctx;
    size_t es = g->es;
    if (st[2] == 0) { /* one index for the whole run (index_select rows, broadcast index) */
        int64_t k = load_index(p[2], g->idx64);
        if (KILN__UNLIKELY(k < 0 || k >= g->dim_size)) {
            bad_index_note(&g->bad, k);
            return;
        }
        const char *src = p[1] + k * g->dim_step;
        if (st[0] == (int64_t)es && st[1] == (int64_t)es) {
            memcpy(p[0], src, (size_t)n * es);
            return;
        }
        for (int64_t e = 0; e < n; e++) copy_elem(p[0] + e * st[0], src + e * st[1], es);
        return;
    }
    switch (es * 2 + g->idx64) {
        GATHER_CASES(uint8_t, 1)
        GATHER_CASES(uint16_t, 2)
        GATHER_CASES(uint32_t, 4)
        GATHER_CASES(uint64_t, 8)
    default: break;
    }
}
#undef GATHER_CASES
#undef GATHER_ELEMS

/* Runs the gather loop over out's shape; idx is already seen over that shape. */
static kiln_status run_gather(const kiln__op *op, kiln__view idx) {
    const kiln__view *out = &op->out[0], *src = &op->in[0];
    int dim = (int)op->p.i[0];
    gather_ctx g = {.es = kiln__elsize(out->dtype),
                    .idx64 = idx.dtype == KILN_I64,
                    .dim_size = src->shape[dim],
                    .dim_step = src->strides[dim] * (int64_t)kiln__elsize(src->dtype)};
    atomic_init(&g.bad.hit, false);
    atomic_init(&g.bad.value, 0);
    kiln__view views[3] = {*out, pinned_view(src, out->ndim, out->shape, dim), idx};
    kiln__cpu_foreach(3, views, gather_loop, &g, KILN__GRAIN_ELEMENTWISE);
    return bad_index_status(&g.bad, g.dim_size);
}

static kiln_status kernel_index_select(const kiln__op *op) {
    /* the 1-d index, broadcast over out: it steps along dim only */
    const kiln__view *index = &op->in[1], *out = &op->out[0];
    int dim = (int)op->p.i[0];
    kiln__view idx = *index;
    idx.ndim = out->ndim;
    for (int d = 0; d < out->ndim; d++) {
        idx.shape[d] = out->shape[d];
        idx.strides[d] = d == dim ? (index->ndim ? index->strides[0] : 0) : 0;
    }
    return run_gather(op, idx);
}

static kiln_status kernel_gather(const kiln__op *op) { return run_gather(op, op->in[1]); }

/* ---- SCATTER_ADD: out[.. index[i] ..] += src[.. i ..] along dim --------------------------- */

typedef struct {
    kiln_dtype dtype;
    bool idx64;
    int64_t len;                            /* index's size along dim: the sequential loop */
    int64_t out_size;                       /* out's size along dim: the valid index range */
    int64_t out_step, idx_step, src_step;   /* bytes per step along dim */
    bad_index bad;
} scatter_ctx;

/* Each element of the run owns a distinct set of out positions (its coordinates off dim), so
 * runs may go to different threads; along dim the sums go in index order, which makes the
 * result independent of the thread count. */
#define SCATTER_TYPED(T, ACC)                                                                 \
    for (int64_t j = 0; j < s->len; j++) {                                                    \
        const char *ip = p[2] + j * s->idx_step, *sp = p[1] + j * s->src_step;                \
        for (int64_t e = 0; e < n; e++) {                                                     \
            int64_t k = load_index(ip + e * st[2], s->idx64);                                 \
            if (KILN__UNLIKELY(k < 0 || k >= s->out_size)) {                                 \
                bad_index_note(&s->bad, k);                                                   \
                return;                                                                       \
            }                                                                                 \
            T *o = (T *)(p[0] + e * st[0] + k * s->out_step);                                 \
            T v = *(const T *)(sp + e * st[1]);                                               \
            ACC;                                                                              \
        }                                                                                     \
    }

/* p[0] out at dim coordinate 0, p[1] src, p[2] index; one run covers n elements off dim. */
static void scatter_loop(void *vctx, int64_t n, char **p, const int64_t *st) {
    scatter_ctx *s = vctx;
    switch (s->dtype) {
    case KILN_F32: SCATTER_TYPED(float, *o += v) break;
    case KILN_F64: SCATTER_TYPED(double, *o += v) break;
    case KILN_I32: SCATTER_TYPED(int32_t, *o = (int32_t)((uint32_t)*o + (uint32_t)v)) break; /* wraps */
    case KILN_I64: SCATTER_TYPED(int64_t, *o = (int64_t)((uint64_t)*o + (uint64_t)v)) break;
    case KILN_BOOL: SCATTER_TYPED(uint8_t, *o = *o || v) break;
    case KILN_F16: SCATTER_TYPED(uint16_t, *o = kiln__f32_to_f16(kiln__f16_to_f32(*o) + kiln__f16_to_f32(v))) break;
    case KILN_BF16:
        SCATTER_TYPED(uint16_t, *o = kiln__f32_to_bf16(kiln__bf16_to_f32(*o) + kiln__bf16_to_f32(v))) break;
    default: break;
    }
}
#undef SCATTER_TYPED

static kiln_status kernel_scatter_add(const kiln__op *op) {
    const kiln__view *idx = &op->in[0], *src = &op->in[1], *out = &op->out[0];
    int dim = (int)op->p.i[0];
    if (out->dtype != src->dtype) {
        kiln__kernel_error("scatter_add needs src (%s) in out's dtype (%s)", kiln_dtype_name(src->dtype),
                           kiln_dtype_name(out->dtype));
        return KILN_ERR_INTERNAL;
    }
    size_t es = kiln__elsize(out->dtype);
    scatter_ctx s = {.dtype = out->dtype,
                     .idx64 = idx->dtype == KILN_I64,
                     .len = idx->shape[dim],
                     .out_size = out->shape[dim],
                     .out_step = out->strides[dim] * (int64_t)es,
                     .idx_step = idx->strides[dim] * (int64_t)kiln__elsize(idx->dtype),
                     .src_step = src->strides[dim] * (int64_t)es};
    atomic_init(&s.bad.hit, false);
    atomic_init(&s.bad.value, 0);
    /* iterate over the index's shape with dim collapsed to 1: the loop walks dim itself */
    int64_t shape[KILN_MAX_DIMS];
    memcpy(shape, idx->shape, sizeof shape);
    shape[dim] = 1;
    kiln__view views[3] = {pinned_view(out, idx->ndim, shape, dim), pinned_view(src, idx->ndim, shape, dim),
                           pinned_view(idx, idx->ndim, shape, dim)};
    int64_t grain = KILN__GRAIN_ELEMENTWISE / (s.len > 0 ? s.len : 1);
    kiln__cpu_foreach(3, views, scatter_loop, &s, grain > 0 ? grain : 1);
    return bad_index_status(&s.bad, s.out_size);
}

/* ---- ONE_HOT: out[.., c] = (index[..] == c) ------------------------------------------------ */

typedef struct {
    size_t es;
    bool idx64;
    int64_t classes, class_step; /* bytes between classes in out */
    _Alignas(8) unsigned char one[8];
    bad_index bad;
} one_hot_ctx;

/* p[0] out row start (class 0), p[1] index. Zero is all-zero bytes in every dtype. */
static void one_hot_loop(void *vctx, int64_t n, char **p, const int64_t *st) {
    one_hot_ctx *h = vctx;
    bool dense_rows = h->class_step == (int64_t)h->es;
    for (int64_t e = 0; e < n; e++) {
        int64_t k = load_index(p[1] + e * st[1], h->idx64);
        if (KILN__UNLIKELY(k < 0 || k >= h->classes)) {
            bad_index_note(&h->bad, k);
            return;
        }
        char *row = p[0] + e * st[0];
        if (dense_rows)
            memset(row, 0, (size_t)h->classes * h->es);
        else
            for (int64_t c = 0; c < h->classes; c++) memset(row + c * h->class_step, 0, h->es);
        memcpy(row + k * h->class_step, h->one, h->es);
    }
}

static kiln_status kernel_one_hot(const kiln__op *op) {
    const kiln__view *idx = &op->in[0], *out = &op->out[0];
    one_hot_ctx h = {.es = kiln__elsize(out->dtype),
                     .idx64 = idx->dtype == KILN_I64,
                     .classes = op->p.i[0],
                     .class_step = out->strides[out->ndim - 1] * (int64_t)kiln__elsize(out->dtype)};
    atomic_init(&h.bad.hit, false);
    atomic_init(&h.bad.value, 0);
    kiln__store_from_f64(h.one, out->dtype, 0, 1.0);
    kiln__view rows = *out; /* out without its class dim: one element per index */
    rows.ndim = out->ndim - 1;
    kiln__view views[2] = {rows, *idx};
    int64_t grain = KILN__GRAIN_ELEMENTWISE / (h.classes > 0 ? h.classes : 1);
    kiln__cpu_foreach(2, views, one_hot_loop, &h, grain > 0 ? grain : 1);
    return bad_index_status(&h.bad, h.classes);
}

/* ---- ranges: ARANGE, LINSPACE, EYE ------------------------------------------------------- */

static void store_value(char *p, kiln_dtype d, double v) { kiln__store_from_f64(p, d, 0, v); }

typedef struct {
    kiln__view out;
    double a, b;     /* arange: start, step; linspace: start, end */
    int64_t n;       /* linspace: steps */
    bool exact;      /* arange in an integer dtype with integral start and step */
} range_ctx;

static inline char *flat_ptr(const kiln__view *v, int64_t i) {
    int64_t step = v->ndim ? v->strides[0] : 0;
    return kiln__view_ptr(v) + i * step * (int64_t)kiln__elsize(v->dtype);
}

static void arange_range(void *vctx, int64_t begin, int64_t end) {
    const range_ctx *r = vctx;
    const kiln__view *out = &r->out;
    if (r->exact) { /* integer arithmetic: doubles lose i64 values past 2^53 */
        int64_t start = (int64_t)r->a, step = (int64_t)r->b;
        for (int64_t i = begin; i < end; i++) {
            int64_t v = (int64_t)((uint64_t)start + (uint64_t)i * (uint64_t)step);
            if (out->dtype == KILN_I64)
                *(int64_t *)flat_ptr(out, i) = v;
            else
                *(int32_t *)flat_ptr(out, i) = v > INT32_MAX ? INT32_MAX : v < INT32_MIN ? INT32_MIN : (int32_t)v;
        }
        return;
    }
    if (out->dtype == KILN_F32 && out->strides[0] == 1) {
        float *o = (float *)kiln__view_ptr(out);
        for (int64_t i = begin; i < end; i++) o[i] = (float)(r->a + (double)i * r->b);
        return;
    }
    for (int64_t i = begin; i < end; i++) store_value(flat_ptr(out, i), out->dtype, r->a + (double)i * r->b);
}

/* Both halves count from their own end, so the first and last values are exact (as torch). */
static void linspace_range(void *vctx, int64_t begin, int64_t end) {
    const range_ctx *r = vctx;
    double step = r->n > 1 ? (r->b - r->a) / (double)(r->n - 1) : 0.0;
    int64_t half = r->n / 2;
    for (int64_t i = begin; i < end; i++) {
        double v = i < half || r->n == 1 ? r->a + step * (double)i : r->b - step * (double)(r->n - 1 - i);
        store_value(flat_ptr(&r->out, i), r->out.dtype, v);
    }
}

static kiln_status check_1d(const kiln__view *out, const char *what) {
    if (out->ndim == 1) return KILN_OK;
    kiln__kernel_error("%s needs a 1-d output, got %d dims", what, out->ndim);
    return KILN_ERR_INTERNAL;
}

static kiln_status kernel_arange(const kiln__op *op) {
    kiln_status st = check_1d(&op->out[0], "ARANGE");
    if (st != KILN_OK) return st;
    range_ctx r = {.out = op->out[0], .a = op->p.f[0], .b = op->p.f[1]};
    r.exact = kiln__dtype_is_int(r.out.dtype) && r.a == floor(r.a) && r.b == floor(r.b) && fabs(r.a) < 9.2e18 &&
              fabs(r.b) < 9.2e18;
    kiln__parallel_for(r.out.shape[0], KILN__GRAIN_ELEMENTWISE, arange_range, &r);
    return KILN_OK;
}

static kiln_status kernel_linspace(const kiln__op *op) {
    kiln_status st = check_1d(&op->out[0], "LINSPACE");
    if (st != KILN_OK) return st;
    range_ctx r = {.out = op->out[0], .a = op->p.f[0], .b = op->p.f[1], .n = op->out[0].shape[0]};
    kiln__parallel_for(r.n, KILN__GRAIN_ELEMENTWISE, linspace_range, &r);
    return KILN_OK;
}

static void eye_rows(void *vctx, int64_t begin, int64_t end) {
    const kiln__view *out = vctx;
    size_t es = kiln__elsize(out->dtype);
    int64_t cols = out->shape[1], rs = out->strides[0] * (int64_t)es, cs = out->strides[1] * (int64_t)es;
    _Alignas(8) unsigned char one[8];
    kiln__store_from_f64(one, out->dtype, 0, 1.0);
    char *base = kiln__view_ptr(out);
    for (int64_t i = begin; i < end; i++) {
        char *row = base + i * rs;
        if (cs == (int64_t)es)
            memset(row, 0, (size_t)cols * es);
        else
            for (int64_t j = 0; j < cols; j++) memset(row + j * cs, 0, es);
        if (i < cols) memcpy(row + i * cs, one, es);
    }
}

static kiln_status kernel_eye(const kiln__op *op) {
    const kiln__view *out = &op->out[0];
    if (out->ndim != 2) {
        kiln__kernel_error("EYE needs a 2-d output, got %d dims", out->ndim);
        return KILN_ERR_INTERNAL;
    }
    if (out->shape[1] == 0) return KILN_OK;
    int64_t grain = KILN__GRAIN_ELEMENTWISE / out->shape[1];
    kiln__parallel_for(out->shape[0], grain > 0 ? grain : 1, eye_rows, (void *)out);
    return KILN_OK;
}

void kiln__cpu_register_index(kiln__kernel_fn *table) {
    table[KILN__OP_INDEX_SELECT] = kernel_index_select;
    table[KILN__OP_GATHER] = kernel_gather;
    table[KILN__OP_SCATTER_ADD] = kernel_scatter_add;
    table[KILN__OP_ONE_HOT] = kernel_one_hot;
    table[KILN__OP_ARANGE] = kernel_arange;
    table[KILN__OP_LINSPACE] = kernel_linspace;
    table[KILN__OP_EYE] = kernel_eye;
}
