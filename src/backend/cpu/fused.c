/* The CPU kernel of a fused group (ir/expr.h): runs the plan of fused-impl.h block by block,
 * blocks split over the thread pool (a thread's range chunk by chunk on fused_vec.c's fast
 * path). Each IR node runs the inner loop of its op's unfused kernel over the block, so results
 * are bit-identical to running the ops one by one. A group ending in a reduction takes whole
 * rows per block, and its REDUCE node runs the unfused reduction kernel over those rows (each
 * row's result depends on that row alone). */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/fused-impl.h"

/* Scratch a task keeps on its stack; a plan that needs more allocates once per task. */
#define STACK_SCRATCH ((size_t)32768)

static char *node_base(const kiln__view *v, size_t es) { return (char *)v->storage->data + v->offset * (int64_t)es; }

/* Bytes between scratch blocks: padded so that two blocks' elements at one index are not a
 * multiple of 4 KiB apart ("4K aliasing": a load after a store to such an address may wait
 * on it, and a chain reads one block while writing the next). Cheap insurance: chain8 showed
 * no difference either way on this machine. */
static size_t slot_size(const kiln__fused_plan *p) {
    return (size_t)p->block * 8 + 192;
}

/* Where a load's elements [t0, t0 + m) are read: in place when dense, a scalar, or inside one
 * run of the innermost dim with stride 0 or 1; gathered into the node's scratch otherwise. */
static void load(const kiln__fused_plan *p, int i, int64_t t0, int64_t m, char *slot, char **ptr, int64_t *st) {
    const kiln__fused *g = p->g;
    int k = g->expr.node[i].input;
    const kiln__view *in = &g->input[k];
    size_t es = (size_t)p->es[i];
    int64_t stride;
    switch (p->load_mode[k]) {
    case KILN__LOAD_DENSE: *ptr = node_base(in, es) + t0 * (int64_t)es, *st = (int64_t)es; return;
    case KILN__LOAD_SCALAR: *ptr = node_base(in, es), *st = 0; return;
    case KILN__LOAD_ROWS: *ptr = node_base(in, es) + t0 / g->row * (int64_t)es, *st = (int64_t)es; return;
    default: {
        int64_t off = kiln__fused_run_offset(g, in, t0, m, &stride);
        if (off >= 0 && (stride == 0 || stride == 1)) {
            *ptr = (char *)in->storage->data + off * (int64_t)es, *st = stride * (int64_t)es;
            return;
        }
        kiln__fused_gather(g, in, t0, m, slot);
        *ptr = slot, *st = (int64_t)es;
    }
    }
}

/* The REDUCE node over the m / row whole rows of its argument, through the unfused kernel. */
static kiln_status reduce_rows(const kiln__fused_plan *p, int i, int64_t t0, int64_t m, char *slot, char **ptr,
                               const int64_t *st) {
    const kiln__fused *g = p->g;
    const kiln__expr_node *n = &g->expr.node[i];
    int64_t row = g->row, rows = m / row;
    int a = n->arg[0];
    kiln__storage arg = {.data = ptr[a]}, tmp = {.data = slot};
    kiln__op op = {.code = n->code, .n_in = 1, .n_out = 1, .name = g->ops[n->op].name};
    op.p.i[0] = (int64_t)n->param[0];
    op.p.i[1] = (int64_t)n->param[1];
    int64_t in_es = p->es[a];
    op.in[0] = (kiln__view){.storage = &arg, .dtype = g->expr.node[a].dtype, .ndim = 2, .shape = {rows, row},
                            .strides = {st[a] ? row : 0, st[a] / in_es}};
    int w = p->store_of[i];
    const kiln__view *out = w >= 0 ? &g->output[w] : NULL;
    op.out[0] = (kiln__view){.storage = out ? out->storage : &tmp, .dtype = n->dtype, .ndim = 2,
                             .offset = out ? out->offset + t0 / row : 0, .shape = {rows, 1}, .strides = {1, 1}};
    ptr[i] = kiln__view_ptr(&op.out[0]);
    kiln__kernel_fn fn = p->kernels[n->code];
    return fn ? fn(&op) : KILN_ERR_UNSUPPORTED;
}

static void run_node(const kiln__fused_plan *p, int i, int64_t m, char *const *ptr, const int64_t *st) {
    const kiln__expr_node *n = &p->g->expr.node[i];
    char *args[KILN__OP_MAX_IN + 1];
    int64_t strides[KILN__OP_MAX_IN + 1];
    args[0] = ptr[i], strides[0] = st[i];
    for (int a = 0; a < n->n_args; a++) args[a + 1] = ptr[n->arg[a]], strides[a + 1] = st[n->arg[a]];
    p->loop[i].fn(p->loop[i].ctx, m, args, strides);
}

/* An epilogue node of the group's shape that reads a per-row value: a row at a time, the
 * row's value as a stride-0 operand (what the unfused kernel's iterator hands its loop). */
static void epilogue_rows(const kiln__fused_plan *p, int i, int64_t m, char *const *ptr, const int64_t *st) {
    const kiln__expr *e = &p->g->expr;
    const kiln__expr_node *n = &e->node[i];
    int64_t row = p->g->row;
    char *args[KILN__OP_MAX_IN + 1];
    int64_t strides[KILN__OP_MAX_IN + 1];
    strides[0] = st[i];
    for (int a = 0; a < n->n_args; a++) strides[a + 1] = e->node[n->arg[a]].rows ? 0 : st[n->arg[a]];
    for (int64_t r = 0; r < m / row; r++) {
        args[0] = ptr[i] + r * row * st[i];
        for (int a = 0; a < n->n_args; a++) {
            int k = n->arg[a];
            args[a + 1] = ptr[k] + (e->node[k].rows ? r * st[k] : r * row * st[k]);
        }
        p->loop[i].fn(p->loop[i].ctx, row, args, strides);
    }
}

/* An OP node over the block: into its output when stored, else its scratch slot. */
static void eval_op(const kiln__fused_plan *p, int i, int64_t t0, int64_t m, char *slot, char **ptr, int64_t *st) {
    const kiln__fused *g = p->g;
    const kiln__expr *e = &g->expr;
    const kiln__expr_node *n = &e->node[i];
    int64_t es = p->es[i];
    int w = p->store_of[i];
    bool per_row = false;
    int64_t first = n->rows ? t0 / g->row : t0; /* in the node's own shape */
    ptr[i] = w >= 0 ? node_base(&g->output[w], (size_t)es) + first * es : slot;
    st[i] = es;
    for (int a = 0; a < n->n_args; a++) per_row |= !n->rows && e->node[n->arg[a]].rows;
    if (per_row) epilogue_rows(p, i, m, ptr, st);
    else run_node(p, i, n->rows ? m / g->row : m, ptr, st);
}

/* Scratch block k of a task's scratch (NULL for -1). */
static char *slot_at(const kiln__fused_plan *p, char *scratch, int k) {
    return k >= 0 ? scratch + (size_t)k * slot_size(p) : NULL;
}

/* On the fast path, the REDUCE's argument a: read in place when loaded, else computed chunk by
 * chunk by pre into its own scratch block. */
static void reduce_arg(const kiln__fused_plan *p, int a, int64_t t0, int64_t m, char *scratch, char **ptr,
                       int64_t *st) {
    if (p->g->expr.node[a].kind == KILN__EXPR_LOAD) {
        load(p, a, t0, m, slot_at(p, scratch, p->slot_of[a]), &ptr[a], &st[a]);
        return;
    }
    float *local = (float *)slot_at(p, scratch, p->arg_slot);
    p->pre.run_rows(&p->pre, t0, m, NULL, NULL, local);
    ptr[a] = (char *)local, st[a] = 4;
}

/* Evaluates every node over elements [t0, t0 + m). A stored node writes straight into its
 * output: every read of the value it overwrites comes earlier in program order (later reads
 * name the node), and all accesses share one element mapping. On the fast path for a block of
 * whole rows (vec.run_rows), only the REDUCE and the per-row nodes run here: pre computes the
 * REDUCE's argument before it, and vec every value of the group's shape after them, reading
 * the per-row values this loop leaves in ptr. */
static kiln_status eval_block(const kiln__fused_plan *p, int64_t t0, int64_t m, char *scratch) {
    const kiln__fused *g = p->g;
    const kiln__expr *e = &g->expr;
    char *ptr[KILN__EXPR_MAX_NODES];
    int64_t st[KILN__EXPR_MAX_NODES];
    bool fast = p->vec.run_rows != NULL;
    for (int i = 0; i < e->n_nodes; i++) {
        const kiln__expr_node *n = &e->node[i];
        char *slot = slot_at(p, scratch, p->slot_of[i]);
        if (fast && !n->rows && (n->kind == KILN__EXPR_LOAD || n->kind == KILN__EXPR_OP)) continue;
        switch (n->kind) {
        case KILN__EXPR_CONST: ptr[i] = (char *)p->konst[i], st[i] = 0; break;
        case KILN__EXPR_LOAD: load(p, i, t0, m, slot, &ptr[i], &st[i]); break;
        case KILN__EXPR_REDUCE: {
            if (fast) reduce_arg(p, n->arg[0], t0, m, scratch, ptr, st);
            kiln_status s = reduce_rows(p, i, t0, m, slot, ptr, st);
            if (s != KILN_OK) return s;
            st[i] = p->es[i];
            break;
        }
        default: eval_op(p, i, t0, m, slot, ptr, st);
        }
    }
    if (fast && p->vec.n_store > 0) p->vec.run_rows(&p->vec, t0, m, ptr, st, NULL);
    return KILN_OK;
}

/* Asks for elements [t0, t0 + m) of the dense inputs while the block before them runs: a
 * block of a few KiB starts a fresh page of each input, where the hardware prefetcher stops,
 * and the chain's first reads of it then waited on memory. */
static void prefetch_block(const kiln__fused_plan *p, int64_t t0, int64_t m) {
    const kiln__fused *g = p->g;
    for (int k = 0; k < g->expr.n_inputs; k++) {
        if (p->load_mode[k] != KILN__LOAD_DENSE) continue;
        const kiln__view *in = &g->input[k];
        size_t es = kiln__elsize(in->dtype);
        const char *a = node_base(in, es) + t0 * (int64_t)es, *end = a + m * (int64_t)es;
        for (; a < end; a += 64) __builtin_prefetch(a, 0, 3);
    }
}

static void run_blocks(void *ctx, int64_t begin, int64_t end) {
    kiln__fused_plan *p = ctx;
    int64_t t = begin * p->block, t_end = end * p->block < p->numel ? end * p->block : p->numel;
    if (p->vec.run) { /* whole chunks on the fast path; the last few elements through a block */
        int64_t done = (t_end - t) / p->vec.chunk * p->vec.chunk;
        p->vec.run(&p->vec, t, done);
        t += done;
        if (t == t_end) return;
    }
    _Alignas(64) char stack[STACK_SCRATCH];
    size_t bytes = (size_t)p->n_slots * slot_size(p);
    char *scratch = bytes <= sizeof stack ? stack : malloc(bytes);
    if (!scratch) {
        atomic_store(&p->status, KILN_ERR_OUT_OF_MEMORY);
        return;
    }
    for (int64_t m; t < t_end && atomic_load_explicit(&p->status, memory_order_relaxed) == KILN_OK; t += m) {
        m = t_end - t < p->block ? t_end - t : p->block;
        if (t + m < t_end) prefetch_block(p, t + m, t_end - t - m < p->block ? t_end - t - m : p->block);
        kiln_status st = eval_block(p, t, m, scratch);
        if (st != KILN_OK) atomic_store(&p->status, st);
    }
    if (scratch != stack) free(scratch);
}

static kiln_status kernel_fused(const kiln__op *op) {
    const kiln__fused *g = (const kiln__fused *)(intptr_t)op->p.i[0];
    kiln__fused_plan p;
    /* a node no loop handles fails here, before any output (maybe an input, in place) is
     * written; the engine then runs the ops one by one and reports the one that failed */
    kiln_status st = kiln__fused_plan_make(&p, g);
    if (st != KILN_OK || p.numel == 0) return st;
    if (kiln__fused_vec_make(&p) && p.vec.run_rows) atomic_fetch_add_explicit(&kiln__fused_rows_runs, 1, memory_order_relaxed);
    if (g->matmul) return kiln__fused_matmul_run(&p);
    int64_t blocks = (p.numel + p.block - 1) / p.block;
    int64_t grain = KILN__GRAIN_ELEMENTWISE / p.block;
    kiln__parallel_for(blocks, grain > 0 ? grain : 1, run_blocks, &p);
    return atomic_load(&p.status);
}

void kiln__fused_run_blocks(void *p, int64_t begin, int64_t end) { run_blocks(p, begin, end); }

void kiln__cpu_register_fused(kiln__kernel_fn *table) { table[KILN__OP_FUSED] = kernel_fused; }
