/* Building the expression IR of a fused group from op records (see ir/expr.h). */
#include <string.h>

#include "ir/expr.h"

bool kiln__expr_opcode_fusable(kiln__opcode code) { return kiln__op_info_of(code)->fuse != KILN__FUSE_NONE; }

bool kiln__expr_has_epilogue(const kiln__expr *e) {
    for (int i = 0; i + 1 < e->n_nodes; i++)
        if (e->node[i].kind == KILN__EXPR_REDUCE) return true;
    return false;
}

bool kiln__view_is_row_broadcast(const kiln__view *v, const kiln__view *map) {
    int nd = v->ndim;
    if (v->storage != map->storage || v->dtype != map->dtype || v->offset != map->offset || nd != map->ndim || nd < 1 ||
        map->shape[nd - 1] != 1 || v->shape[nd - 1] < 2 || v->strides[nd - 1] != 0)
        return false;
    for (int d = 0; d < nd - 1; d++)
        if (v->shape[d] != map->shape[d] || (v->shape[d] != 1 && v->strides[d] != map->strides[d])) return false;
    return true;
}

void kiln__fused_copy(kiln__fused *dst, const kiln__fused *src) {
    const kiln__expr *e = &src->expr;
    dst->expr.n_nodes = e->n_nodes;
    dst->expr.n_inputs = e->n_inputs;
    dst->expr.n_outputs = e->n_outputs;
    dst->expr.n_stores = e->n_stores;
    memcpy(dst->expr.node, e->node, (size_t)e->n_nodes * sizeof e->node[0]);
    memcpy(dst->expr.store, e->store, (size_t)e->n_stores * sizeof e->store[0]);
    dst->ndim = src->ndim;
    memcpy(dst->shape, src->shape, sizeof dst->shape);
    memcpy(dst->input, src->input, (size_t)e->n_inputs * sizeof src->input[0]);
    memcpy(dst->output, src->output, (size_t)e->n_outputs * sizeof src->output[0]);
    dst->row = src->row;
    dst->matmul = src->matmul;
    dst->n_ops = src->n_ops;
    for (int k = 0; k < src->n_ops; k++) kiln__op_copy(&dst->ops[k], &src->ops[k]);
}

void kiln__fused_init(kiln__fused *g, const kiln__view *out) {
    g->expr.n_nodes = g->expr.n_inputs = g->expr.n_outputs = g->expr.n_stores = 0;
    g->n_ops = 0;
    g->row = 0;
    g->matmul = false;
    g->ndim = out->ndim;
    memcpy(g->shape, out->shape, sizeof g->shape);
}

static int find_output(const kiln__fused *g, const kiln__storage *s) {
    for (int w = 0; w < g->expr.n_outputs; w++)
        if (g->output[w].storage == s) return w;
    return -1;
}

static int load_of(kiln__fused *g, const kiln__view *v, bool rows) {
    kiln__expr *e = &g->expr;
    int k = 0;
    while (k < e->n_inputs && !kiln__view_same(&g->input[k], v)) k++;
    if (k < e->n_inputs) {
        for (int i = 0; i < e->n_nodes; i++)
            if (e->node[i].kind == KILN__EXPR_LOAD && e->node[i].input == k) return i;
    }
    if (k == KILN__EXPR_MAX_INPUTS) return -1;
    if (k == e->n_inputs) g->input[e->n_inputs++] = *v;
    kiln__expr_node *n = &e->node[e->n_nodes];
    *n = (kiln__expr_node){.kind = KILN__EXPR_LOAD, .input = (int16_t)k, .dtype = v->dtype, .rows = rows};
    return e->n_nodes++;
}

bool kiln__fused_add(kiln__fused *g, const kiln__op *op) {
    kiln__expr *e = &g->expr;
    if (g->n_ops == KILN__FUSE_MAX_OPS || e->n_nodes + op->n_in + 1 > KILN__EXPR_MAX_NODES) return false;
    int saved_nodes = e->n_nodes, saved_inputs = e->n_inputs, nd = g->ndim;
    bool rows = g->row > 0 && op->out[0].ndim == nd && op->out[0].shape[nd - 1] == 1; /* an epilogue op per row */
    int16_t args[KILN__OP_MAX_IN] = {0};
    for (int i = 0; i < op->n_in; i++) {
        const kiln__view *v = &op->in[i];
        int w = v->storage ? find_output(g, v->storage) : -1;
        int node;
        if (!v->storage) {
            node = e->n_nodes++;
            e->node[node] = (kiln__expr_node){.kind = KILN__EXPR_CONST, .dtype = v->dtype, .value = v->scalar};
        } else if (w >= 0) {
            node = g->last_writer[w];
        } else {
            node = load_of(g, v, rows);
        }
        if (node < 0) {
            e->n_nodes = saved_nodes, e->n_inputs = saved_inputs;
            return false;
        }
        args[i] = (int16_t)node;
    }
    int w = find_output(g, op->out[0].storage);
    if (w < 0 && e->n_outputs == KILN__EXPR_MAX_OUTPUTS) {
        e->n_nodes = saved_nodes, e->n_inputs = saved_inputs;
        return false;
    }
    if (w < 0) {
        w = e->n_outputs++;
        g->output[w] = op->out[0];
    }
    kiln__expr_node *n = &e->node[e->n_nodes];
    *n = (kiln__expr_node){.kind = KILN__EXPR_OP, .n_args = op->n_in, .op = (int16_t)g->n_ops, .code = op->code,
                           .dtype = op->out[0].dtype, .param = {op->p.f[0], op->p.f[1], op->p.f[2], op->p.f[3]},
                           .rows = rows};
    memcpy(n->arg, args, sizeof args);
    g->last_writer[w] = (int16_t)e->n_nodes++;
    kiln__op_copy(&g->ops[g->n_ops++], op);
    return true;
}

bool kiln__fused_add_reduce(kiln__fused *g, const kiln__op *op) {
    kiln__expr *e = &g->expr;
    int src = find_output(g, op->in[0].storage);
    if (src < 0 || g->n_ops == KILN__FUSE_MAX_OPS || e->n_nodes == KILN__EXPR_MAX_NODES ||
        e->n_outputs == KILN__EXPR_MAX_OUTPUTS || find_output(g, op->out[0].storage) >= 0)
        return false;
    int w = e->n_outputs++;
    g->output[w] = op->out[0];
    kiln__expr_node *n = &e->node[e->n_nodes];
    *n = (kiln__expr_node){.kind = KILN__EXPR_REDUCE, .n_args = 1, .arg = {g->last_writer[src]},
                           .op = (int16_t)g->n_ops, .code = op->code, .dtype = op->out[0].dtype,
                           .param = {(double)op->p.i[0], (double)op->p.i[1]}, .rows = true};
    g->last_writer[w] = (int16_t)e->n_nodes++;
    g->row = g->shape[g->ndim - 1];
    g->ops[g->n_ops++] = *op;
    return true;
}

void kiln__fused_finish(kiln__fused *g, bool (*dead)(void *ctx, const kiln__storage *s), void *ctx) {
    kiln__expr *e = &g->expr;
    e->n_stores = 0;
    for (int w = 0; w < e->n_outputs; w++) {
        if (dead && dead(ctx, g->output[w].storage)) continue;
        e->store[e->n_stores++] = (kiln__expr_store){.node = g->last_writer[w], .output = (int16_t)w};
    }
}
