/* A fused group ending in a reduction over its last dim (ir/expr.h: a prologue, one REDUCE
 * node, an epilogue of per-row and per-element nodes) printed as OpenCL C: one work-group of
 * ROW_GROUP items per row, item lid taking elements lid, lid + ROW_GROUP, ... The group walks
 * its row once per pass of the reduction (twice for LOGSUMEXP: the max, then the sum of
 * exponentials), evaluating the prologue at each element, and combines the items' partial
 * values through local memory; then every item evaluates the per-row nodes, and the group walks
 * the row a last time to evaluate the prologue and the per-element epilogue and store them.
 * Every store happens in that last walk (per row: after it, behind a barrier), so a group
 * that overwrites its own input in place reads the input unchanged in every earlier walk. The
 * walks have a barrier per step so that PoCL runs the items of a step side by side (and
 * vectorizes them when the accesses are dense). Semantics as the CPU's reductions: floats
 * accumulate in double when the device has it (sums in another order: equal to rounding),
 * a NaN wins max and min, LOGSUMEXP returns an infinite or NaN max as is.
 *
 *   long r = get_group_id(0); int lid = get_local_id(0); ... c0 = r % shape.s0 ...
 *   double acc = 0;
 *   for (long j0 = 0; j0 < len; j0 += 64) { long j = j0 + lid; if (j < len) {
 *     float v0 = in0[ib0 + j]; float v1 = exp(v0); acc += (double)v1; } barrier(...); }
 *   ra[lid] = acc; ... (a tree over ra) ... acc = ra[0]; float v2 = (float)acc;
 *   for (...) { ... float v0 = in0[ib0 + j]; float v3 = (exp(v0) / v2); out0[ob0 + j] = v3; ... }
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend-impl.h"

#if KILN_HAVE_OPENCL
#include "backend/opencl/opencl-impl.h"

/* Work items per row (a power of two). */
#define ROW_GROUP 64
/* Elements per item between two barriers (each step printed out in full). */
#define ROW_UNROLL 4

/* The element index of j along a row of stride `step` from base: literal for the usual dense
 * and broadcast cases, so that the compiler sees consecutive accesses and vectorizes. */
static void along(char *buf, size_t cap, const char *base, int k, int64_t step, char kind, int last) {
    if (step == 1) snprintf(buf, cap, "%s%d + j", base, k);
    else if (step == 0) snprintf(buf, cap, "%s%d", base, k);
    else snprintf(buf, cap, "%s%d + j * %cs%d.s%d", base, k, kind, k, last);
}

void kiln__opencl_row_input_index(kiln__text *b, const void *ctx, int k) {
    const kiln__opencl_row_index *x = ctx;
    if (x->rows_in[k]) kiln__text_printf(b, "io%d + r * is%d.s0", k, k);
    else {
        char idx[64];
        along(idx, sizeof idx, "ib", k, x->step[k], 'i', x->g->ndim - 1);
        kiln__text_printf(b, "%s", idx);
    }
}

/* A walk over the row evaluating the per-element nodes before `end` (all of them when end is
 * the node count, skipping per-row ones), then `tail`. */
static bool walk(kiln__text *b, const kiln__fused *g, bool fp64, const kiln__opencl_row_index *x, int end, const char *tail) {
    const kiln__expr *e = &g->expr;
    kiln__text_printf(b, "  for (long j0 = 0; j0 < len; j0 += %d) {\n", ROW_GROUP * ROW_UNROLL);
    for (int u = 0; u < ROW_UNROLL; u++) {
        kiln__text_printf(b, "  { long j = j0 + %d + lid;\n  if (j < len) {\n", u * ROW_GROUP);
        for (int i = 0; i < end; i++) {
            const kiln__expr_node *n = &e->node[i];
            if (n->kind == KILN__EXPR_CONST || n->kind == KILN__EXPR_REDUCE || n->rows) continue;
            if (!kiln__opencl_codegen_node(b, g, i, fp64, kiln__opencl_row_input_index, x)) return false;
        }
        kiln__text_printf(b, "%s  } }\n", tail);
    }
    kiln__text_printf(b, "  barrier(CLK_LOCAL_MEM_FENCE);\n  }\n");
    return true;
}

/* Combines the work-group's partial values `var` (one per item) into var, in every item:
 * through __local array `arr`, a tree of `step` (which combines x with y into x). */
static void combine(kiln__text *b, const char *arr, const char *var, const char *step) {
    kiln__text_printf(b,
                      "  %s[lid] = %s;\n  barrier(CLK_LOCAL_MEM_FENCE);\n"
                      "  for (int h = %d; h > 0; h >>= 1) {\n    if (lid < h) { %s; }\n    barrier(CLK_LOCAL_MEM_FENCE);\n  }\n"
                      "  %s = %s[0];\n  barrier(CLK_LOCAL_MEM_FENCE);\n",
                      arr, var, ROW_GROUP / 2, step, var, arr);
}

/* The REDUCE node R as v<R> in every item, over the walks its opcode needs. */
static bool reduce(kiln__text *b, const kiln__fused *g, bool fp64, const kiln__opencl_row_index *x, int R) {
    const kiln__expr_node *n = &g->expr.node[R];
    int a = n->arg[0];
    const char *T = kiln__opencl_ctype(n->dtype), *TA = kiln__opencl_ctype(g->expr.node[a].dtype);
    const char *A = fp64 ? "double" : "float";
    char tail[512];
    kiln__text_printf(b, "  __local %s ra[%d];\n  __local %s rt[%d];\n", A, ROW_GROUP, TA, ROW_GROUP);
    const char *sum_step = "ra[lid] += ra[lid + h]";
    const kiln__reduce_info *row = kiln__reduce_info_of(n->code); /* its fold and finish */
    switch (row->finish == KILN__RFIN_INDEX ? KILN__RFOLD_NONE : row->fold) {
    case KILN__RFOLD_SUM: /* finish VALUE or MEAN */
        kiln__text_printf(b, "  %s acc = 0;\n", A);
        snprintf(tail, sizeof tail, "    acc += (%s)v%d;\n", A, a);
        if (!walk(b, g, fp64, x, R, tail)) return false;
        combine(b, "ra", "acc", sum_step);
        if (row->finish == KILN__RFIN_VALUE) kiln__text_printf(b, "  %s v%d = (%s)acc;\n", T, R, T);
        else kiln__text_printf(b, "  %s v%d = (%s)(acc / (%s)len);\n", T, R, T, A);
        return true;
    case KILN__RFOLD_MAX: case KILN__RFOLD_MIN: case KILN__RFOLD_EXPSUM: { /* EXPSUM: the max first */
        bool min = row->fold == KILN__RFOLD_MIN;
        const char *cmp = min ? "<" : ">";
        /* NaN wins, else the largest (smallest); an item with no element holds the identity */
        kiln__text_printf(b, "  %s best = %s;\n", TA, min ? "INFINITY" : "(-INFINITY)");
        snprintf(tail, sizeof tail, "    if (isnan(v%d) || v%d %s best) best = v%d;\n", a, a, cmp, a);
        if (!walk(b, g, fp64, x, R, tail)) return false;
        char step[160];
        snprintf(step, sizeof step, "if (isnan(rt[lid + h]) || rt[lid + h] %s rt[lid]) rt[lid] = rt[lid + h]", cmp);
        combine(b, "rt", "best", step);
        if (row->fold != KILN__RFOLD_EXPSUM) {
            kiln__text_printf(b, "  %s v%d = (%s)best;\n", T, R, T);
            return true;
        }
        kiln__text_printf(b, "  %s v%d = (%s)best;\n  if (!isinf(best) && !isnan(best)) {\n  %s acc = 0;\n", T, R, T, A);
        snprintf(tail, sizeof tail, "    acc += exp((%s)v%d - (%s)best);\n", A, a, A);
        if (!walk(b, g, fp64, x, R, tail)) return false;
        combine(b, "ra", "acc", sum_step);
        kiln__text_printf(b, "  v%d = (%s)((%s)best + log(acc));\n  }\n", R, T, A);
        return true;
    }
    default:
        kiln__kernel_error("no fused OpenCL kernel for %s", kiln__opcode_name(n->code));
        return false;
    }
}

int kiln__opencl_row_reduce_node(const kiln__fused *g) {
    for (int i = 0; i < g->expr.n_nodes; i++)
        if (g->expr.node[i].kind == KILN__EXPR_REDUCE) return i;
    return -1;
}

/* The kernel's part after `r` (the row) is declared: len, the row's bases ib<k> and ob<s>, the
 * constants; *last_walk: per-element values are stored or an epilogue follows. */
static bool row_head(kiln__text *b, const kiln__fused *g, bool fp64, kiln__opencl_row_index *x, bool *last_walk) {
    const kiln__expr *e = &g->expr;
    int nd = g->ndim, R = kiln__opencl_row_reduce_node(g);
    *x = (kiln__opencl_row_index){.g = g};
    for (int i = 0; i < e->n_nodes; i++)
        if (e->node[i].kind == KILN__EXPR_LOAD && e->node[i].rows) x->rows_in[e->node[i].input] = true;
    for (int k = 0; k < e->n_inputs; k++) x->step[k] = g->input[k].strides[nd - 1];
    kiln__text_printf(b, "  long len = shape.s%d, rr = r;\n", nd - 1);
    for (int d = nd - 2; d >= 0; d--) kiln__text_printf(b, "  long c%d = rr %% shape.s%d; rr /= shape.s%d;\n", d, d, d);
    for (int k = 0; k < e->n_inputs; k++) {
        if (x->rows_in[k]) continue;
        kiln__text_printf(b, "  long ib%d = io%d", k, k);
        for (int d = 0; d < nd - 1; d++) kiln__text_printf(b, " + c%d * is%d.s%d", d, k, d);
        kiln__text_printf(b, ";\n");
    }
    *last_walk = false; /* per-element values to store, or an epilogue */
    for (int s = 0; s < e->n_stores; s++) {
        *last_walk |= !e->node[e->store[s].node].rows;
        kiln__text_printf(b, "  long ob%d = oo%d", s, s);
        for (int d = 0; d < nd - 1; d++) kiln__text_printf(b, " + c%d * os%d.s%d", d, s, d);
        kiln__text_printf(b, ";\n");
    }
    for (int i = 0; i < e->n_nodes; i++) {
        const kiln__expr_node *n = &e->node[i];
        if (n->kind == KILN__EXPR_CONST && !kiln__opencl_codegen_node(b, g, i, fp64, kiln__opencl_row_input_index, x)) return false;
        *last_walk |= i > R && !n->rows && n->kind != KILN__EXPR_CONST;
    }
    return true;
}

bool kiln__opencl_row_body(kiln__text *b, const kiln__fused *g, bool fp64, kiln__opencl_row_index *x, bool *last_walk,
                       kiln__opencl_row_reduce_fn reduce_row) {
    const kiln__expr *e = &g->expr;
    int R = kiln__opencl_row_reduce_node(g);
    if (!row_head(b, g, fp64, x, last_walk) || !reduce_row(b, g, fp64, x, R)) return false;
    for (int i = R + 1; i < e->n_nodes; i++) /* the per-row epilogue */
        if (e->node[i].rows && e->node[i].kind != KILN__EXPR_CONST &&
            !kiln__opencl_codegen_node(b, g, i, fp64, kiln__opencl_row_input_index, x))
            return false;
    return true;
}

void kiln__opencl_row_stores(const kiln__fused *g, kiln__text *stores, kiln__text *vstores) {
    const kiln__expr *e = &g->expr;
    for (int s = 0; s < e->n_stores; s++) {
        if (e->node[e->store[s].node].rows) continue;
        char idx[64];
        along(idx, sizeof idx, "ob", s, g->output[e->store[s].output].strides[g->ndim - 1], 'o', g->ndim - 1);
        kiln__opencl_codegen_store(stores, g, s, idx);
        if (vstores) kiln__text_printf(vstores, "  vstore16(v%d, 0, out%d + ob%d + j);\n", e->store[s].node, s, s);
    }
}

bool kiln__opencl_codegen_rows(const kiln__fused *g, bool fp64, kiln__text *b, kiln__opencl_ew_launch *l) {
    const kiln__expr *e = &g->expr;
    int nd = g->ndim, R = kiln__opencl_row_reduce_node(g);
    if (NEVER(R < 0 || nd < 1 || g->row != g->shape[nd - 1])) return false;
    if (!kiln__opencl_codegen_params(g, fp64, b, l)) return false;
    l->n = l->n / g->row * ROW_GROUP; /* one work-group per row */
    l->local = ROW_GROUP;
    kiln__text_printf(b, "  long r = get_group_id(0);\n  int lid = (int)get_local_id(0);\n");
    kiln__opencl_row_index x;
    bool last_walk;
    if (!kiln__opencl_row_body(b, g, fp64, &x, &last_walk, reduce)) return false;
    if (last_walk) {
        kiln__text stores = {0};
        kiln__opencl_row_stores(g, &stores, NULL);
        bool ok = !stores.oom && walk(b, g, fp64, &x, e->n_nodes, stores.s);
        b->oom |= stores.oom;
        free(stores.s);
        if (!ok && !b->oom) return false;
    }
    /* every item has read the per-row inputs before one of them overwrites any (in place) */
    kiln__text_printf(b, "  barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);\n");
    for (int s = 0; s < e->n_stores; s++) {
        if (!e->node[e->store[s].node].rows) continue;
        char idx[32];
        snprintf(idx, sizeof idx, "ob%d", s);
        kiln__text_printf(b, "  if (lid == 0)");
        kiln__opencl_codegen_store(b, g, s, idx);
    }
    kiln__text_printf(b, "}\n");
    if (b->oom) kiln__kernel_error("out of host memory generating an OpenCL kernel");
    return !b->oom;
}

#endif
