/* A fused group ending in a reduction over its last dim (ir/expr.h: a prologue, one REDUCE
 * node, an epilogue of per-row and per-element nodes) printed as OpenCL C: one work item per
 * row. It walks its row once per pass of the reduction (twice for LOGSUMEXP: the max, then
 * the sum of exponentials), evaluating the prologue at each element, then evaluates the
 * per-row nodes, then walks the row a last time to evaluate the prologue and the per-element
 * epilogue and store them. Every store happens in that last walk (or after it, per row), so
 * a group that overwrites its own input in place reads the input unchanged in every earlier
 * walk. The reduction follows the device's unfused kernels (reduce.c), which follow the CPU:
 * floats accumulate in double when the device has it, sums in element order, the first NaN
 * wins max and min, LOGSUMEXP returns an infinite or NaN max as is.
 *
 *   long r = get_global_id(0); ... c0 = r % shape.s0 ...
 *   double acc = 0;
 *   for (long j = 0; j < len; j++) { float v0 = in0[ib0 + j * is0.s1]; float v1 = exp(v0); acc += (double)v1; }
 *   float v2 = (float)acc;
 *   for (long j = 0; j < len; j++) { float v0 = ...; float v1 = exp(v0); float v3 = (v1 / v2); out0[ob0 + j * os0.s1] = v3; }
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend-impl.h"

#if KILN_HAVE_OPENCL
#include "backend/opencl/opencl-impl.h"

typedef struct {
    const kiln__fused *g;
    bool rows_in[KILN__EXPR_MAX_INPUTS]; /* input k is read once per row */
} row_index;

static void input_index(kiln__cl_src *b, const void *ctx, int k) {
    const row_index *x = ctx;
    if (x->rows_in[k]) kiln__cl_src_printf(b, "io%d + r * is%d.s0", k, k);
    else kiln__cl_src_printf(b, "ib%d + j * is%d.s%d", k, k, x->g->ndim - 1);
}

/* A walk over the row evaluating the per-element nodes before `end` (all of them when end is
 * the node count, skipping per-row ones), then `tail`. */
static bool walk(kiln__cl_src *b, const kiln__fused *g, bool fp64, const row_index *x, int end, const char *tail) {
    const kiln__expr *e = &g->expr;
    kiln__cl_src_printf(b, "  for (long j = 0; j < len; j++) {\n");
    for (int i = 0; i < end; i++) {
        const kiln__expr_node *n = &e->node[i];
        if (n->kind == KILN__EXPR_CONST || n->kind == KILN__EXPR_REDUCE || n->rows) continue;
        if (!kiln__cl_codegen_node(b, g, i, fp64, input_index, x)) return false;
    }
    kiln__cl_src_printf(b, "%s", tail);
    return true;
}

/* The REDUCE node R as v<R>, over the walks its opcode needs. */
static bool reduce(kiln__cl_src *b, const kiln__fused *g, bool fp64, const row_index *x, int R) {
    const kiln__expr_node *n = &g->expr.node[R];
    int a = n->arg[0];
    const char *T = kiln__cl_ctype(n->dtype), *TA = kiln__cl_ctype(g->expr.node[a].dtype);
    const char *A = fp64 ? "double" : "float";
    char tail[512];
    switch (n->code) {
    case KILN__OP_SUM: case KILN__OP_MEAN:
        kiln__cl_src_printf(b, "  %s acc = 0;\n", A);
        snprintf(tail, sizeof tail, "    acc += (%s)v%d;\n  }\n", A, a);
        if (!walk(b, g, fp64, x, R, tail)) return false;
        if (n->code == KILN__OP_SUM) kiln__cl_src_printf(b, "  %s v%d = (%s)acc;\n", T, R, T);
        else kiln__cl_src_printf(b, "  %s v%d = (%s)(acc / (%s)len);\n", T, R, T, A);
        return true;
    case KILN__OP_MAX: case KILN__OP_MIN:
        kiln__cl_src_printf(b, "  %s best = 0;\n", TA);
        snprintf(tail, sizeof tail, "    if (j == 0 || isnan(v%d) || v%d %s best) best = v%d;\n    if (isnan(best)) break;\n  }\n",
                 a, a, n->code == KILN__OP_MAX ? ">" : "<", a);
        if (!walk(b, g, fp64, x, R, tail)) return false;
        kiln__cl_src_printf(b, "  %s v%d = (%s)best;\n", T, R, T);
        return true;
    case KILN__OP_LOGSUMEXP:
        kiln__cl_src_printf(b, "  %s m = -INFINITY;\n", TA);
        snprintf(tail, sizeof tail, "    if (isnan(m)) break;\n    if (isnan(v%d) || v%d > m) m = v%d;\n  }\n", a, a, a);
        if (!walk(b, g, fp64, x, R, tail)) return false;
        kiln__cl_src_printf(b, "  %s v%d = (%s)m;\n  if (!isinf(m) && !isnan(m)) {\n  %s s = 0;\n", T, R, T, A);
        snprintf(tail, sizeof tail, "    s += exp((%s)v%d - (%s)m);\n  }\n  v%d = (%s)((%s)m + log(s));\n  }\n", A, a, A, R, T, A);
        return walk(b, g, fp64, x, R, tail);
    default:
        kiln__kernel_error("no fused OpenCL kernel for %s", kiln__opcode_name(n->code));
        return false;
    }
}

bool kiln__cl_codegen_rows(const kiln__fused *g, bool fp64, kiln__cl_src *b, kiln__cl_ew_launch *l) {
    const kiln__expr *e = &g->expr;
    int nd = g->ndim, R = -1;
    for (int i = 0; i < e->n_nodes && R < 0; i++)
        if (e->node[i].kind == KILN__EXPR_REDUCE) R = i;
    if (NEVER(R < 0 || nd < 1 || g->row != g->shape[nd - 1])) return false;
    row_index x = {.g = g};
    for (int i = 0; i < e->n_nodes; i++)
        if (e->node[i].kind == KILN__EXPR_LOAD && e->node[i].rows) x.rows_in[e->node[i].input] = true;
    if (!kiln__cl_codegen_params(g, fp64, b, l)) return false;
    l->n /= g->row; /* one work item per row */
    kiln__cl_src_printf(b, "  long r = get_global_id(0);\n  if (r >= n) return;\n  long len = shape.s%d, rr = r;\n", nd - 1);
    for (int d = nd - 2; d >= 0; d--) kiln__cl_src_printf(b, "  long c%d = rr %% shape.s%d; rr /= shape.s%d;\n", d, d, d);
    for (int k = 0; k < e->n_inputs; k++) {
        if (x.rows_in[k]) continue;
        kiln__cl_src_printf(b, "  long ib%d = io%d", k, k);
        for (int d = 0; d < nd - 1; d++) kiln__cl_src_printf(b, " + c%d * is%d.s%d", d, k, d);
        kiln__cl_src_printf(b, ";\n");
    }
    bool last_walk = false; /* per-element values to store, or an epilogue */
    for (int s = 0; s < e->n_stores; s++) {
        last_walk |= !e->node[e->store[s].node].rows;
        kiln__cl_src_printf(b, "  long ob%d = oo%d", s, s);
        for (int d = 0; d < nd - 1; d++) kiln__cl_src_printf(b, " + c%d * os%d.s%d", d, s, d);
        kiln__cl_src_printf(b, ";\n");
    }
    for (int i = 0; i < e->n_nodes; i++) {
        const kiln__expr_node *n = &e->node[i];
        if (n->kind == KILN__EXPR_CONST && !kiln__cl_codegen_node(b, g, i, fp64, input_index, &x)) return false;
        last_walk |= i > R && !n->rows && n->kind != KILN__EXPR_CONST;
    }
    if (!reduce(b, g, fp64, &x, R)) return false;
    for (int i = R + 1; i < e->n_nodes; i++) /* the per-row epilogue */
        if (e->node[i].rows && e->node[i].kind != KILN__EXPR_CONST && !kiln__cl_codegen_node(b, g, i, fp64, input_index, &x))
            return false;
    if (last_walk) {
        kiln__cl_src stores = {0};
        for (int s = 0; s < e->n_stores; s++) {
            if (e->node[e->store[s].node].rows) continue;
            char idx[64];
            snprintf(idx, sizeof idx, "ob%d + j * os%d.s%d", s, s, nd - 1);
            kiln__cl_codegen_store(&stores, g, s, idx);
        }
        kiln__cl_src_printf(&stores, "  }\n");
        bool ok = !stores.oom && walk(b, g, fp64, &x, e->n_nodes, stores.s);
        b->oom |= stores.oom;
        free(stores.s);
        if (!ok && !b->oom) return false;
    }
    for (int s = 0; s < e->n_stores; s++) {
        if (!e->node[e->store[s].node].rows) continue;
        char idx[32];
        snprintf(idx, sizeof idx, "ob%d", s);
        kiln__cl_codegen_store(b, g, s, idx);
    }
    kiln__cl_src_printf(b, "}\n");
    if (b->oom) kiln__kernel_error("out of host memory generating an OpenCL kernel");
    return !b->oom;
}

#endif
