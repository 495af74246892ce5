/* A fused group ending in a reduction over its last dim (see codegen_rows.c) printed for a
 * CPU device: one work item per row, walking it 16 elements at a time in float16 values (then
 * the last len % 16 elements one by one, the same nodes printed as scalars). PoCL runs the
 * work-group form of codegen_rows.c as 8-wide loops with a barrier per step and calls into
 * its math library per element; this form compiles to straight AVX-512 code with the vector
 * exp inlined (bench_softmax --device opencl: 10x less CPU time, BENCHMARKS.md). Semantics as
 * the work-group form: floats accumulate in double when the device has it (16 partial sums per
 * row, then the tail: equal to rounding), a NaN wins max and min, LOGSUMEXP returns an
 * infinite or NaN max as is; the last walk reads each element before it stores it, so a group
 * writing its own input in place reads it unchanged.
 *
 *   long r = get_global_id(0); if (r >= n) return; ... ib0, ob0 as codegen_rows.c ...
 *   double16 acc16 = 0; double acc = 0; long j;
 *   for (j = 0; j + 16 <= len; j += 16) { float16 v0 = vload16(0, in0 + ib0 + j);
 *     float16 v1 = exp(v0); acc16 += convert_double16(v1); }
 *   for (; j < len; j++) { float v0 = in0[ib0 + j]; float v1 = exp(v0); acc += (double)v1; }
 *   acc += hsum(acc16); float v2 = (float)acc; ...
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend-impl.h"

#if KILN_HAVE_OPENCL
#include "backend/opencl/opencl-impl.h"

#define VEC 16

/* Opcodes whose printed form (codegen.c) is the same expression on float16: arithmetic and
 * the math functions, no ternaries, comparisons or casts (fusion class EW_VEC in the op table,
 * ir/optable.h). */
static bool vector_opcode(kiln__opcode code) { return kiln__op_info_of(code)->fuse == KILN__FUSE_EW_VEC; }

bool kiln__opencl_rows_vec_takes(const kiln__fused *g) {
    const kiln__expr *e = &g->expr;
    int nd = g->ndim, R = kiln__opencl_row_reduce_node(g);
    if (R < 0 || nd < 1 || g->row != g->shape[nd - 1]) return false;
    for (int i = 0; i < e->n_nodes; i++) {
        const kiln__expr_node *n = &e->node[i];
        if (n->kind == KILN__EXPR_CONST) continue;
        if (n->dtype != KILN_F32) return false;
        if (n->kind == KILN__EXPR_LOAD) {
            int64_t step = g->input[n->input].strides[nd - 1];
            if (g->input[n->input].dtype != KILN_F32 || (!n->rows && step != 0 && step != 1)) return false;
        }
        if (n->kind == KILN__EXPR_OP && !n->rows && !vector_opcode(n->code)) return false;
        if (n->kind == KILN__EXPR_REDUCE && e->node[n->arg[0]].dtype != KILN_F32) return false;
    }
    for (int s = 0; s < e->n_stores; s++) {
        const kiln__view *v = &g->output[e->store[s].output];
        if (v->dtype != KILN_F32 || (!e->node[e->store[s].node].rows && v->strides[nd - 1] != 1)) return false;
    }
    return true;
}

/* The per-element nodes that the stores of a last walk need. */
static void live_nodes(const kiln__expr *e, bool *live) {
    for (int i = 0; i < e->n_nodes; i++) live[i] = false;
    for (int s = 0; s < e->n_stores; s++)
        if (!e->node[e->store[s].node].rows) live[e->store[s].node] = true;
    for (int i = e->n_nodes - 1; i >= 0; i--)
        if (live[i] && e->node[i].kind == KILN__EXPR_OP)
            for (int a = 0; a < e->node[i].n_args; a++) live[e->node[i].arg[a]] = true;
}

/* Node i as a float16 declaration at elements j..j+15. */
static bool vector_node(kiln__text *b, const kiln__fused *g, int i, bool fp64, const kiln__opencl_row_index *x) {
    const kiln__expr_node *n = &g->expr.node[i];
    if (n->kind == KILN__EXPR_LOAD) {
        int k = n->input;
        if (x->step[k] == 0) kiln__text_printf(b, "  float16 v%d = (float16)in%d[ib%d];\n", i, k, k);
        else kiln__text_printf(b, "  float16 v%d = vload16(0, in%d + ib%d + j);\n", i, k, k);
        return true;
    }
    kiln__text_printf(b, "  float16 v%d = ", i);
    if (!kiln__opencl_codegen_op(b, g, i, fp64)) {
        kiln__kernel_error("no OpenCL kernel for %s yet", kiln__opcode_name(n->code));
        return false;
    }
    kiln__text_printf(b, ";\n");
    return true;
}

/* Two loops over the row: float16 steps, then single elements. Each evaluates the per-element
 * nodes before `end` that `need` marks (all when NULL), then vtail (vector loop) or tail. */
static bool walk(kiln__text *b, const kiln__fused *g, bool fp64, const kiln__opencl_row_index *x, int end,
                 const bool *need, const char *vtail, const char *tail) {
    const kiln__expr *e = &g->expr;
    for (int vector = 1; vector >= 0; vector--) {
        kiln__text_printf(b, vector ? "  for (j = 0; j + %d <= len; j += %d) {\n" : "  for (; j < len; j++) {\n", VEC, VEC);
        for (int i = 0; i < end; i++) {
            const kiln__expr_node *n = &e->node[i];
            if (n->kind == KILN__EXPR_CONST || n->kind == KILN__EXPR_REDUCE || n->rows || (need && !need[i])) continue;
            bool ok = vector ? vector_node(b, g, i, fp64, x) : kiln__opencl_codegen_node(b, g, i, fp64, kiln__opencl_row_input_index, x);
            if (!ok) return false;
        }
        kiln__text_printf(b, "%s  }\n", vector ? vtail : tail);
    }
    return true;
}

/* acc16's lanes added into acc (A: the accumulator type). */
static void fold_sum(kiln__text *b, const char *A) {
    kiln__text_printf(b, "  { %s8 h8 = acc16.lo + acc16.hi; %s4 h4 = h8.lo + h8.hi; %s2 h2 = h4.lo + h4.hi; acc += h2.x + h2.y; }\n",
                      A, A, A);
}

/* The REDUCE node R as v<R>. */
static bool reduce(kiln__text *b, const kiln__fused *g, bool fp64, const kiln__opencl_row_index *x, int R) {
    const kiln__expr_node *n = &g->expr.node[R];
    int a = n->arg[0];
    const char *A = fp64 ? "double" : "float";
    char vtail[256], tail[256];
    const kiln__reduce_info *row = kiln__reduce_info_of(n->code); /* its fold and finish */
    switch (row->finish == KILN__RFIN_INDEX ? KILN__RFOLD_NONE : row->fold) {
    case KILN__RFOLD_SUM: /* finish VALUE or MEAN */
        kiln__text_printf(b, "  %s16 acc16 = 0; %s acc = 0;\n", A, A);
        snprintf(vtail, sizeof vtail, "    acc16 += convert_%s16(v%d);\n", A, a);
        snprintf(tail, sizeof tail, "    acc += (%s)v%d;\n", A, a);
        if (!walk(b, g, fp64, x, R, NULL, vtail, tail)) return false;
        fold_sum(b, A);
        if (row->finish == KILN__RFIN_VALUE) kiln__text_printf(b, "  float v%d = (float)acc;\n", R);
        else kiln__text_printf(b, "  float v%d = (float)(acc / (%s)len);\n", R, A);
        return true;
    case KILN__RFOLD_MAX: case KILN__RFOLD_MIN: case KILN__RFOLD_EXPSUM: { /* EXPSUM: the max first */
        bool min = row->fold == KILN__RFOLD_MIN;
        const char *cmp = min ? "<" : ">", *id = min ? "INFINITY" : "(-INFINITY)";
        /* NaN wins, else the largest (smallest), lane by lane and then across the lanes */
        kiln__text_printf(b, "  float16 best16 = %s; float best = %s;\n", id, id);
        snprintf(vtail, sizeof vtail, "    best16 = select(best16, v%d, isnan(v%d) | (v%d %s best16));\n", a, a, a, cmp);
        snprintf(tail, sizeof tail, "    if (isnan(v%d) || v%d %s best) best = v%d;\n", a, a, cmp, a);
        if (!walk(b, g, fp64, x, R, NULL, vtail, tail)) return false;
        kiln__text_printf(b,
                          "  { float lanes[16]; vstore16(best16, 0, lanes);\n"
                          "    for (int u = 0; u < 16; u++) if (isnan(lanes[u]) || lanes[u] %s best) best = lanes[u]; }\n",
                          cmp);
        kiln__text_printf(b, "  float v%d = best;\n", R);
        if (row->fold != KILN__RFOLD_EXPSUM) return true;
        kiln__text_printf(b, "  if (!isinf(best) && !isnan(best)) {\n  %s16 acc16 = 0; %s acc = 0;\n", A, A);
        snprintf(vtail, sizeof vtail, "    acc16 += exp(convert_%s16(v%d) - (%s)best);\n", A, a, A);
        snprintf(tail, sizeof tail, "    acc += exp((%s)v%d - (%s)best);\n", A, a, A);
        if (!walk(b, g, fp64, x, R, NULL, vtail, tail)) return false;
        fold_sum(b, A);
        kiln__text_printf(b, "  v%d = (float)((%s)best + log(acc));\n  }\n", R, A);
        return true;
    }
    default:
        kiln__kernel_error("no fused OpenCL kernel for %s", kiln__opcode_name(n->code));
        return false;
    }
}

bool kiln__opencl_codegen_rows_vec(const kiln__fused *g, bool fp64, kiln__text *b, kiln__opencl_ew_launch *l) {
    const kiln__expr *e = &g->expr;
    if (NEVER(!kiln__opencl_rows_vec_takes(g))) return false;
    if (!kiln__opencl_codegen_params(g, fp64, b, l)) return false;
    l->n = l->n / g->row; /* one work item per row */
    l->local = 1;
    kiln__text_printf(b, "  long r = get_global_id(0), j;\n  if (r >= n) return;\n");
    kiln__opencl_row_index x;
    bool last_walk;
    if (!kiln__opencl_row_body(b, g, fp64, &x, &last_walk, reduce)) return false;
    if (last_walk) {
        kiln__text vstores = {0}, stores = {0};
        kiln__opencl_row_stores(g, &stores, &vstores);
        bool live[KILN__EXPR_MAX_NODES];
        live_nodes(e, live);
        bool oom = stores.oom || vstores.oom;
        bool ok = !oom && walk(b, g, fp64, &x, e->n_nodes, live, vstores.s ? vstores.s : "", stores.s ? stores.s : "");
        b->oom |= oom;
        free(stores.s);
        free(vstores.s);
        if (!ok && !b->oom) return false;
    }
    for (int s = 0; s < e->n_stores; s++) {
        if (!e->node[e->store[s].node].rows) continue;
        char idx[32];
        snprintf(idx, sizeof idx, "ob%d", s);
        kiln__opencl_codegen_store(b, g, s, idx);
    }
    kiln__text_printf(b, "}\n");
    if (b->oom) kiln__kernel_error("out of host memory generating an OpenCL kernel");
    return !b->oom;
}

#endif
