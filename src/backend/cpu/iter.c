/* Joint strided iteration over several views: the CPU's one loop nest. */
#include <string.h>

#include "backend/cpu/cpu-impl.h"

#define MAX_VIEWS (KILN__OP_MAX_IN + KILN__OP_MAX_OUT)

typedef struct {
    int ndim, nv;
    int64_t shape[KILN_MAX_DIMS];
    int64_t strides[MAX_VIEWS][KILN_MAX_DIMS]; /* bytes */
    char *base[MAX_VIEWS];
    kiln__loop_fn fn;
    void *ctx;
} iter_plan;

/* Scalars are materialised once per call in the view's dtype. */
typedef struct {
    _Alignas(8) unsigned char bytes[MAX_VIEWS][8];
} scalar_slots;

static void plan_build(iter_plan *it, int nv, const kiln__view *views, scalar_slots *scalars) {
    const kiln__view *out = &views[0];
    int nd = 0;
    it->nv = nv;
    /* drop size-1 dims, keep the rest in order */
    for (int d = 0; d < out->ndim; d++) {
        if (out->shape[d] == 1) continue;
        it->shape[nd] = out->shape[d];
        for (int v = 0; v < nv; v++) {
            const kiln__view *w = &views[v];
            it->strides[v][nd] = w->storage ? w->strides[d] * (int64_t)kiln__elsize(w->dtype) : 0;
        }
        nd++;
    }
    /* merge a dim into the next one when every operand steps through both as one */
    int m = 0;
    for (int d = 0; d < nd; d++) {
        if (m > 0) {
            bool mergeable = true;
            for (int v = 0; v < nv && mergeable; v++)
                mergeable = it->strides[v][m - 1] == it->strides[v][d] * it->shape[d];
            if (mergeable) {
                it->shape[m - 1] *= it->shape[d];
                for (int v = 0; v < nv; v++) it->strides[v][m - 1] = it->strides[v][d];
                continue;
            }
        }
        it->shape[m] = it->shape[d];
        for (int v = 0; v < nv; v++) it->strides[v][m] = it->strides[v][d];
        m++;
    }
    if (m == 0) { /* 0-d or all-ones: one element */
        it->shape[0] = 1;
        for (int v = 0; v < nv; v++) it->strides[v][0] = 0;
        m = 1;
    }
    it->ndim = m;
    for (int v = 0; v < nv; v++) {
        const kiln__view *w = &views[v];
        if (w->storage) {
            it->base[v] = kiln__view_ptr(w);
        } else {
            kiln__store_from_f64(scalars->bytes[v], w->dtype, 0, w->scalar);
            it->base[v] = (char *)scalars->bytes[v];
        }
    }
}

/* Runs elements [begin, end) of the flattened index space. */
static void plan_run_range(void *arg, int64_t begin, int64_t end) {
    const iter_plan *it = arg;
    int nd = it->ndim, nv = it->nv;
    int64_t idx[KILN_MAX_DIMS];
    char *ptrs[MAX_VIEWS];
    int64_t inner_strides[MAX_VIEWS];
    int64_t rem = begin;
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = rem % it->shape[d];
        rem /= it->shape[d];
    }
    for (int v = 0; v < nv; v++) {
        char *p = it->base[v];
        for (int d = 0; d < nd; d++) p += idx[d] * it->strides[v][d];
        ptrs[v] = p;
        inner_strides[v] = it->strides[v][nd - 1];
    }
    int64_t inner = it->shape[nd - 1];
    int64_t pos = begin;
    while (pos < end) {
        int64_t run = inner - idx[nd - 1];
        if (run > end - pos) run = end - pos;
        char *call[MAX_VIEWS];
        memcpy(call, ptrs, sizeof(char *) * (size_t)nv);
        it->fn(it->ctx, run, call, inner_strides);
        pos += run;
        if (pos >= end) break;
        /* advance the multi-index by `run` (which finished the inner row) */
        idx[nd - 1] += run;
        for (int v = 0; v < nv; v++) ptrs[v] += run * it->strides[v][nd - 1];
        for (int d = nd - 1; d > 0 && idx[d] == it->shape[d]; d--) {
            idx[d] = 0;
            idx[d - 1]++;
            for (int v = 0; v < nv; v++) ptrs[v] += it->strides[v][d - 1] - it->shape[d] * it->strides[v][d];
        }
    }
}

/* Views that all walk the output's elements densely in the same order (each contiguous over the
 * output's shape): the loop called once over them, as plan_run_range calls it for the one-dim
 * plan such views merge into, without building the plan (two thirds of a tiny op's kernel time:
 * callgrind). Only for a range that one thread runs anyway (n <= grain). */
static bool run_dense(int nv, const kiln__view *const *views, kiln__loop_fn fn, void *ctx, int64_t n) {
    const kiln__view *out = views[0];
    char *ptrs[MAX_VIEWS];
    int64_t strides[MAX_VIEWS];
    for (int v = 0; v < nv; v++) {
        const kiln__view *w = views[v];
        if (!w->storage || w->ndim != out->ndim) return false;
        int64_t dense = 1; /* (strides in elements; a dim of one may have any) */
        for (int d = out->ndim - 1; d >= 0; d--) {
            if (w->shape[d] != out->shape[d] || (w->shape[d] != 1 && w->strides[d] != dense)) return false;
            dense *= w->shape[d];
        }
        int64_t elsize = (int64_t)kiln__elsize(w->dtype);
        ptrs[v] = (char *)w->storage->data + w->offset * elsize;
        strides[v] = elsize;
    }
    fn(ctx, n, ptrs, strides);
    return true;
}

static void foreach_planned(int nv, const kiln__view *views, kiln__loop_fn fn, void *ctx, int64_t grain, int64_t n) {
    iter_plan it;
    scalar_slots scalars;
    plan_build(&it, nv, views, &scalars);
    it.fn = fn;
    it.ctx = ctx;
    kiln__parallel_for(n, grain, plan_run_range, &it);
}

void kiln__cpu_foreach(int nv, const kiln__view *views, kiln__loop_fn fn, void *ctx, int64_t grain) {
    int64_t n = kiln__view_numel(&views[0]);
    if (n == 0) return;
    const kiln__view *dense[MAX_VIEWS];
    for (int v = 0; v < nv && n <= grain; v++) dense[v] = &views[v];
    if (n <= grain && run_dense(nv, dense, fn, ctx, n)) return;
    foreach_planned(nv, views, fn, ctx, grain, n);
}

void kiln__cpu_foreach_op(const kiln__op *op, int n_in, kiln__loop_fn fn, void *ctx, int64_t grain) {
    int64_t n = kiln__view_numel(&op->out[0]);
    if (n == 0) return;
    const kiln__view *dense[MAX_VIEWS] = {&op->out[0]};
    for (int i = 0; i < n_in; i++) dense[1 + i] = &op->in[i];
    if (n <= grain && run_dense(1 + n_in, dense, fn, ctx, n)) return;
    kiln__view views[MAX_VIEWS]; /* (copied only for the plan: a tiny dense op never is) */
    views[0] = op->out[0];
    for (int i = 0; i < n_in; i++) views[1 + i] = op->in[i];
    foreach_planned(1 + n_in, views, fn, ctx, grain, n);
}
