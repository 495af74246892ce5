/* The plan of a fused group's run (see fused-impl.h): how each input is read, which nodes are
 * stored, which scratch block each value lives in, and each node's inner loop and constant. */
#include <string.h>

#include "backend/cpu/fused-impl.h"

/* Elements per block of a group with a reduction, at least (whole rows). Measured on the
 * composed softmax, rows of 2048 (bench_softmax CPU time, inference / forward+backward, a
 * loaded machine): one row a block 41 / 119 ms, 2 rows 45 / 122, 4 rows 50 / 136, 16 rows
 * 52 / 142: a row's values stay in L1 between the reduction and the epilogue. */
#define REDUCE_BLOCK KILN__FUSED_BLOCK

/* True when node i's value needs a scratch block: an unstored OP or REDUCE, or a gathered
 * load. Dense and scalar loads and constants are read where they are; a stored node is
 * written straight into its output and read back from there. */
static bool needs_slot(const kiln__fused_plan *p, int i) {
    const kiln__expr_node *n = &p->g->expr.node[i];
    switch (n->kind) {
    case KILN__EXPR_LOAD: return p->load_mode[n->input] == KILN__LOAD_GATHER;
    case KILN__EXPR_CONST: return false;
    default: return p->store_of[i] < 0;
    }
}

/* Gives each node that needs one a scratch block, reusing one whose value no later node
 * reads, so a chain of any length cycles through two or three. A node never shares a block
 * with its own arguments, so loops see distinct buffers. */
static void plan_slots(kiln__fused_plan *p) {
    const kiln__expr *e = &p->g->expr;
    int16_t last_use[KILN__EXPR_MAX_NODES], free_after[KILN__EXPR_MAX_NODES];
    for (int i = 0; i < e->n_nodes; i++) {
        last_use[i] = (int16_t)i;
        const kiln__expr_node *n = &e->node[i];
        if (n->kind == KILN__EXPR_OP || n->kind == KILN__EXPR_REDUCE)
            for (int a = 0; a < n->n_args; a++)
                if (last_use[n->arg[a]] < i) last_use[n->arg[a]] = (int16_t)i;
    }
    p->n_slots = 0;
    for (int i = 0; i < e->n_nodes; i++) {
        p->slot_of[i] = -1;
        if (!needs_slot(p, i)) continue;
        int s = 0;
        while (s < p->n_slots && free_after[s] >= i) s++;
        if (s == p->n_slots) p->n_slots++;
        p->slot_of[i] = (int8_t)s;
        free_after[s] = last_use[i];
    }
}

static kiln_status resolve_node(kiln__fused_plan *p, int i) {
    const kiln__expr *e = &p->g->expr;
    const kiln__expr_node *n = &e->node[i];
    switch (n->kind) {
    case KILN__EXPR_CONST: kiln__store_from_f64(p->konst[i], n->dtype, 0, n->value); return KILN_OK;
    case KILN__EXPR_LOAD: return KILN_OK;
    case KILN__EXPR_REDUCE:
        /* the join took f32 or f64 rows; the kernel refuses another output dtype */
        return n->dtype == e->node[n->arg[0]].dtype ? KILN_OK : KILN_ERR_DTYPE;
    default: {
        kiln_dtype in[KILN__OP_MAX_IN];
        for (int a = 0; a < n->n_args; a++) in[a] = e->node[n->arg[a]].dtype;
        bool ok = kiln__ew_loop_find(n->code, n->n_args, in, n->dtype, n->param, &p->loop[i]);
        return ok ? KILN_OK : KILN_ERR_DTYPE;
    }
    }
}

kiln_status kiln__fused_plan_make(kiln__fused_plan *p, const kiln__fused *g) {
    const kiln__expr *e = &g->expr;
    p->g = g;
    p->vec.run = NULL, p->vec.run_rows = NULL; /* the block path, unless kiln__fused_vec_make says otherwise */
    p->kernels = kiln__cpu_backend()->kernels;
    p->numel = 1;
    for (int d = 0; d < g->ndim; d++) p->numel *= g->shape[d];
    atomic_init(&p->status, KILN_OK);
    for (int k = 0; k < e->n_inputs; k++) p->load_mode[k] = (uint8_t)kiln__fused_load_mode(g, &g->input[k]);
    for (int i = 0; i < e->n_nodes; i++) { /* per-row loads: dense in the reduced shape, or one value */
        const kiln__expr_node *n = &e->node[i];
        if (n->kind != KILN__EXPR_LOAD || !n->rows) continue;
        const kiln__view *v = &g->input[n->input];
        bool scalar = true;
        for (int d = 0; d < v->ndim; d++) scalar &= v->shape[d] == 1 || v->strides[d] == 0;
        if (!scalar && NEVER(!kiln__view_is_contiguous(v))) return KILN_ERR_INTERNAL;
        p->load_mode[n->input] = scalar ? KILN__LOAD_SCALAR : KILN__LOAD_ROWS;
    }
    memset(p->store_of, -1, sizeof p->store_of);
    for (int s = 0; s < e->n_stores; s++) p->store_of[e->store[s].node] = (int8_t)e->store[s].output;
    for (int i = 0; i < e->n_nodes; i++) {
        p->es[i] = (int8_t)kiln__elsize(e->node[i].dtype);
        kiln_status st = resolve_node(p, i);
        if (st != KILN_OK) return st;
    }
    plan_slots(p);
    if (g->row > 0) {
        p->block = (REDUCE_BLOCK + g->row - 1) / g->row * g->row;
        if (p->block > p->numel) p->block = p->numel;
    } else {
        p->block = KILN__FUSED_BLOCK;
    }
    return KILN_OK;
}
