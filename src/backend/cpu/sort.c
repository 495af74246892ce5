/* SORT: each line along a dim sorted (ascending or descending) into values and i64 indices,
 * keeping the first k (topk). NaN sorts as the largest value, as in PyTorch; equal values keep
 * their order (a stable sort: ties are broken by index). Lines are split over the thread pool;
 * each sorts its (key, index) pairs with qsort in a buffer of its own. */
#include <math.h>
#include <stdlib.h>

#include "backend/cpu/cpu-impl.h"

typedef struct {
    double f;  /* float keys */
    int64_t q; /* integer keys (exact past 2^53) */
    int64_t i;
} sort_item;

/* -1, 0, 1 for a before, tied with, after b in ascending order; NaN last. */
static int cmp_float(const sort_item *a, const sort_item *b) {
    bool an = isnan(a->f), bn = isnan(b->f);
    if (an || bn) return an == bn ? 0 : an ? 1 : -1;
    return a->f < b->f ? -1 : a->f > b->f;
}
static int cmp_int(const sort_item *a, const sort_item *b) { return a->q < b->q ? -1 : a->q > b->q; }

#define COMPARATOR(name, KEY, SIGN)                                                  \
    static int name(const void *pa, const void *pb) {                                \
        const sort_item *a = pa, *b = pb;                                            \
        int c = SIGN KEY(a, b);                                                      \
        return c ? c : (a->i > b->i) - (a->i < b->i);                                \
    }
COMPARATOR(asc_float, cmp_float, +)
COMPARATOR(desc_float, cmp_float, -)
COMPARATOR(asc_int, cmp_int, +)
COMPARATOR(desc_int, cmp_int, -)

typedef struct {
    const kiln__op *op;
    int dim;
    _Atomic int oom;
} sort_ctx;


static void sort_lines(void *vctx, int64_t begin, int64_t end) {
    sort_ctx *s = vctx;
    const kiln__view *in = &s->op->in[0], *vals = &s->op->out[0], *idx = &s->op->out[1];
    int dim = s->dim;
    int64_t n = in->shape[dim], k = vals->shape[dim];
    kiln_dtype dt = in->dtype;
    bool is_float = dt == KILN_F32 || dt == KILN_F64, desc = s->op->p.i[1] != 0;
    int (*cmp)(const void *, const void *) = is_float ? (desc ? desc_float : asc_float) : (desc ? desc_int : asc_int);
    sort_item *buf = malloc(sizeof(sort_item) * (size_t)(n ? n : 1));
    if (!buf) {
        s->oom = 1;
        return;
    }
    size_t es = kiln__elsize(dt);
    for (int64_t l = begin; l < end; l++) {
        int64_t io = kiln__cpu_line_offset(in, dim, l), vo = kiln__cpu_line_offset(vals, dim, l), xo = kiln__cpu_line_offset(idx, dim, l);
        const char *src = (const char *)in->storage->data;
        for (int64_t j = 0; j < n; j++) {
            const char *p = src + (size_t)(io + j * in->strides[dim]) * es;
            sort_item *it = &buf[j];
            it->i = j;
            switch (dt) {
            case KILN_F32: it->f = *(const float *)p; break;
            case KILN_F64: it->f = *(const double *)p; break;
            case KILN_I32: it->q = *(const int32_t *)p; break;
            default: it->q = *(const int64_t *)p; break;
            }
        }
        qsort(buf, (size_t)n, sizeof *buf, cmp);
        char *dst = (char *)vals->storage->data;
        int64_t *ind = (int64_t *)idx->storage->data;
        for (int64_t j = 0; j < k; j++) {
            char *p = dst + (size_t)(vo + j * vals->strides[dim]) * es;
            switch (dt) {
            case KILN_F32: *(float *)p = (float)buf[j].f; break;
            case KILN_F64: *(double *)p = buf[j].f; break;
            case KILN_I32: *(int32_t *)p = (int32_t)buf[j].q; break;
            default: *(int64_t *)p = buf[j].q; break;
            }
            ind[xo + j * idx->strides[dim]] = buf[j].i;
        }
    }
    free(buf);
}

static kiln_status kernel_sort(const kiln__op *op) {
    kiln_dtype dt = op->in[0].dtype;
    bool ok = (dt == KILN_F32 || dt == KILN_F64 || dt == KILN_I32 || dt == KILN_I64) && op->out[0].dtype == dt &&
              op->n_out == 2 && op->out[1].dtype == KILN_I64;
    if (!ok) {
        kiln__kernel_error("the cpu SORT kernel has no %s version", kiln_dtype_name(dt));
        return KILN_ERR_DTYPE;
    }
    sort_ctx s = {.op = op, .dim = (int)op->p.i[0]};
    int64_t n = op->in[0].shape[s.dim], numel = kiln__view_numel(&op->in[0]);
    if (numel == 0 || kiln__view_numel(&op->out[0]) == 0) return KILN_OK;
    int64_t lines = numel / n;
    kiln__parallel_for(lines, n >= 4096 ? 1 : 4096 / n, sort_lines, &s);
    if (s.oom) {
        kiln__kernel_error("no memory to sort a line of %lld elements", (long long)n);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    return KILN_OK;
}

void kiln__cpu_register_sort(kiln__kernel_fn *table) { table[KILN__OP_SORT] = kernel_sort; }
