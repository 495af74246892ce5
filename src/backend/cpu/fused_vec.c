/* The fused kernel's fast path for f32 groups (see fused-impl.h): a group whose every value is
 * f32, whose inputs are dense or one value, and whose ops are among the simple ones below (exp
 * too, with a reduction) is compiled to a short list of instructions over registers, evaluated
 * a chunk of a few vectors at a time (fused_vec_body.h, once per ISA in fused_vec_avx2.c and
 * fused_vec_avx512.c).
 * The block path ran each op over a 512-element block in turn, so a block's loads from memory
 * and its arithmetic took turns; here they overlap, and outputs larger than the caches are
 * written with streaming stores (no read of the lines they overwrite). Bits are those of the
 * block path: the same IEEE operation per op, and vmath's own exp.
 *
 * A group ending in a reduction compiles to two programs over its blocks of whole rows: `pre`
 * computes the REDUCE's argument into scratch (and stores the values before it that are kept),
 * the block path's REDUCE kernel and per-row nodes run on that, and `vec` computes the
 * epilogue, reading each per-row value as a register set once a row. Values `vec` needs from
 * before the REDUCE are computed again from the inputs (a chunk's inputs are still in cache),
 * which is why no value `pre` stores may overwrite an input. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/fused-impl.h"
#include "backend/cpu/stream_probe.h"
#include "backend/cpu/vmath.h"

_Atomic int64_t kiln__fused_stream_bytes;
_Atomic int64_t kiln__fused_rows_runs;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

static int64_t stream_bytes(void) {
    int64_t b = atomic_load_explicit(&kiln__fused_stream_bytes, memory_order_relaxed);
    if (b > 0) return b;
    b = kiln__stream_bytes(); /* measured once per machine (stream_probe.h), else half the L3 */
    int64_t none = 0; /* a test's value wins over this one */
    atomic_compare_exchange_strong(&kiln__fused_stream_bytes, &none, b);
    return atomic_load_explicit(&kiln__fused_stream_bytes, memory_order_relaxed);
}

static int vec_op(kiln__opcode code) {
    switch (code) {
    case KILN__OP_ADD: return KILN__VEC_ADD;
    case KILN__OP_SUB: return KILN__VEC_SUB;
    case KILN__OP_MUL: return KILN__VEC_MUL;
    case KILN__OP_DIV: return KILN__VEC_DIV;
    case KILN__OP_MAXIMUM: return KILN__VEC_MAX;
    case KILN__OP_MINIMUM: return KILN__VEC_MIN;
    case KILN__OP_RELU_BACKWARD: return KILN__VEC_RELU_BWD;
    case KILN__OP_NEG: return KILN__VEC_NEG;
    case KILN__OP_ABS: return KILN__VEC_ABS;
    case KILN__OP_RELU: return KILN__VEC_RELU;
    case KILN__OP_SQRT: return KILN__VEC_SQRT;
    case KILN__OP_CLAMP: return KILN__VEC_CLAMP;
    case KILN__OP_EXP: return KILN__VEC_EXP;
    default: return -1;
    }
}

/* A value broadcast to every lane, in its own register (a constant, a one-value input, a
 * clamp bound); false when the register file is full. */
static bool add_bcast(kiln__fused_vec *v, int reg, float value) {
    if (v->n_bcast >= KILN__EXPR_MAX_NODES) return false;
    v->bcast[v->n_bcast].node = (uint8_t)reg, v->bcast[v->n_bcast].value = value;
    v->n_bcast++;
    return true;
}

/* Registers past the IR's nodes hold the clamp bounds. */
static bool compile_op(kiln__fused_vec *v, const kiln__expr_node *n, int i, int *spare) {
    int op = vec_op(n->code);
    if (op < 0 || n->n_args != (op >= KILN__VEC_NEG ? 1 : 2)) return false;
    /* exp only with a reduction: y = exp(x * 0.5) + 1 over 32M f32 measured 10-13 CPU ms here
     * against 8.2-9.6 on the block path (alternated, loaded machine) */
    if (op == KILN__VEC_EXP && v->row == 0) return false;
    kiln__vec_ins c = {.op = (uint8_t)op, .d = (uint8_t)i, .a = (uint8_t)n->arg[0]};
    c.b = (uint8_t)(n->n_args > 1 ? n->arg[1] : n->arg[0]);
    if (op == KILN__VEC_CLAMP) { /* the portable loop's bounds: NaN means none */
        if (*spare + 2 > KILN__VEC_REGS) return false;
        c.b = (uint8_t)(*spare)++, c.c = (uint8_t)(*spare)++;
        if (!add_bcast(v, c.b, isnan(n->param[0]) ? -INFINITY : (float)n->param[0]) ||
            !add_bcast(v, c.c, isnan(n->param[1]) ? INFINITY : (float)n->param[1]))
            return false;
    }
    v->code[v->n_code++] = c;
    return true;
}

/* Node i as instructions, registers or a per-row register. */
static bool compile_node(kiln__fused_vec *v, const kiln__fused_plan *p, int i, int *spare) {
    const kiln__fused *g = p->g;
    const kiln__expr_node *n = &g->expr.node[i];
    if (n->dtype != KILN_F32) return false;
    if (n->rows) { /* computed by the block path, once a row */
        v->rowb[v->n_rowb++] = (uint8_t)i;
        return true;
    }
    switch (n->kind) {
    case KILN__EXPR_CONST: {
        float f;
        memcpy(&f, p->konst[i], sizeof f);
        return add_bcast(v, i, f);
    }
    case KILN__EXPR_LOAD: {
        const kiln__view *in = &g->input[n->input];
        float *base = (float *)in->storage->data + in->offset;
        if (p->load_mode[n->input] == KILN__LOAD_SCALAR)
            /* (read now, at planning: a matmul group's input 0 is written after that) */
            return !(g->matmul && n->input == 0) && add_bcast(v, i, *base);
        if (p->load_mode[n->input] != KILN__LOAD_DENSE) return false;
        v->in[n->input] = base;
        if (v->n_in <= n->input) v->n_in = n->input + 1;
        v->code[v->n_code++] = (kiln__vec_ins){.op = KILN__VEC_LOAD, .d = (uint8_t)i, .a = (uint8_t)n->input};
        return true;
    }
    case KILN__EXPR_OP: return compile_op(v, n, i, spare);
    default: return false;
    }
}

/* Which operands of each instruction are the accumulator, which results must also be kept in
 * their register (read by a later instruction than the next, or stored while not the last
 * result), and which stores take the last result from the accumulator. LOADs leave the
 * accumulator alone (they only point at an input). */
static void use_accumulator(kiln__fused_vec *v) {
    bool read_later[KILN__VEC_REGS] = {0};
    int held = -1; /* the node whose value the accumulator holds */
    for (int j = 0; j < v->n_code; j++) {
        kiln__vec_ins *c = &v->code[j];
        c->form = 0, c->spill = false;
        if (c->op == KILN__VEC_LOAD) continue;
        if (c->a == held) c->form |= KILN__VEC_A_ACC;
        else read_later[c->a] = true;
        if (c->op < KILN__VEC_NEG) { /* binary; a unary op's b is its a, or a clamp bound */
            if (c->b == held) c->form |= KILN__VEC_B_ACC;
            else read_later[c->b] = true;
        }
        held = c->d;
    }
    for (int s = 0; s < v->n_store; s++) {
        v->store_acc[s] = held >= 0 && v->store_node[s] == held;
        if (!v->store_acc[s]) read_later[v->store_node[s]] = true;
    }
    for (int j = 0; j < v->n_code; j++)
        if (v->code[j].op != KILN__VEC_LOAD) v->code[j].spill = read_later[v->code[j].d];
}

/* The instructions as the evaluator's steps: LOADs out of the stream (their slots are set once a
 * chunk), a spill after the op whose result is read later, the stores last (after every read
 * of an input an output may overwrite in place), then END. Outputs the caller does not give
 * (the local buffer) are never streamed. */
static void lower(kiln__fused_vec *v) {
    int n = 0;
    v->n_load = 0;
    for (int j = 0; j < v->n_code; j++) {
        const kiln__vec_ins *c = &v->code[j];
        if (c->op == KILN__VEC_LOAD) {
            v->load_node[v->n_load] = c->d, v->load_input[v->n_load++] = c->a;
            continue;
        }
        v->step[n++] = (kiln__vec_step){.kind = (uint8_t)(c->op << 2 | c->form), .a = c->a, .b = c->b, .c = c->c};
        if (c->spill) v->step[n++] = (kiln__vec_step){.kind = KILN__VEC_SPILL, .a = c->d, .b = c->d, .c = c->d};
    }
    for (int s = 0; s < v->n_store; s++) {
        int kind = v->store_acc[s] ? KILN__VEC_STORE_ACC : KILN__VEC_STORE;
        if (v->out[s]) kind += KILN__VEC_STREAM - KILN__VEC_STORE; /* streamed when the run streams */
        uint8_t node = v->store_node[s];
        uint8_t into = (uint8_t)(KILN__VEC_REGS + s);
        v->step[n++] = (kiln__vec_step){.kind = (uint8_t)kind, .a = node, .b = into, .c = node};
    }
    v->step[n++] = (kiln__vec_step){.kind = KILN__VEC_END};
    v->n_step = n;
}

/* The nodes in want, in program order; then the stores of the nodes in store to their outputs,
 * and of node local (-1: none) to the caller's local buffer. */
static bool compile(kiln__fused_vec *v, const kiln__fused_plan *p, const bool *want, const bool *store, int local) {
    const kiln__fused *g = p->g;
    const kiln__expr *e = &g->expr;
    int spare = e->n_nodes;
    for (int i = 0; i < e->n_nodes; i++)
        if (want[i] && !compile_node(v, p, i, &spare)) return false;
    for (int s = 0; s < e->n_stores; s++) {
        if (!store[e->store[s].node]) continue;
        const kiln__view *o = &g->output[e->store[s].output];
        v->out[v->n_store] = (float *)o->storage->data + o->offset;
        v->store_node[v->n_store++] = (uint8_t)e->store[s].node;
    }
    if (local >= 0) v->out[v->n_store] = NULL, v->store_node[v->n_store++] = (uint8_t)local;
    use_accumulator(v);
    lower(v);
    return true;
}

/* Streaming stores when the outputs are large and start on a line (run writes whole chunks
 * from a block's start, a multiple of 16; run_rows starts each row's chunks on a line). */
static void decide_stream(kiln__fused_vec *v, const kiln__fused_plan *p) {
    uintptr_t align = 0;
    int64_t bytes = 0;
    for (int s = 0; s < v->n_store; s++) align |= (uintptr_t)v->out[s], bytes += v->out[s] ? p->numel * 4 : 0;
    v->stream = bytes > 0 && bytes >= stream_bytes() && align % 64 == 0;
}

/* Adds to want every non-per-row node the wanted ones read (per-row nodes come as registers). */
static void closure(const kiln__expr *e, bool *want) {
    for (int i = e->n_nodes - 1; i >= 0; i--) {
        const kiln__expr_node *n = &e->node[i];
        if (want[i] && !n->rows && n->kind == KILN__EXPR_OP)
            for (int a = 0; a < n->n_args; a++) want[n->arg[a]] = true;
    }
}

static bool compile_elementwise(kiln__fused_plan *p) {
    bool all[KILN__EXPR_MAX_NODES], stored[KILN__EXPR_MAX_NODES] = {0};
    const kiln__expr *e = &p->g->expr;
    for (int i = 0; i < e->n_nodes; i++) all[i] = true;
    for (int s = 0; s < e->n_stores; s++) stored[e->store[s].node] = true;
    if (!compile(&p->vec, p, all, stored, -1)) return false;
    decide_stream(&p->vec, p);
    return true;
}

/* Rows shorter than this stay on the block path: a row's tail goes through the stack. So do
 * groups whose epilogue's outputs are not written with streaming stores: a chunk's values go
 * through the register file in L1, and plain stores that miss (each reads its line first) then
 * hold up those in the store queue. The composed softmax, CPU ms (medians of 21-41 runs,
 * alternated, load 8-12): [1024, 2048] block path 0.94-1.37, here 1.59-1.90 with plain
 * stores, 1.07-1.13 streamed; [128*128, 2048] (bench_softmax) 20.7-25.5, 28.8-32.6, 19.2-22.4. */
#define MIN_ROW 64
/* Elements per block on this path, at least (whole rows): the REDUCE kernel's call, the per-row
 * nodes' calls and the block's prefetch then cover several short rows. bench_softmax, rows of
 * 2048, CPU ms inference / forward+backward (alternated, load 12): 1 row a block 19.6-21.0 /
 * 49.3-50.9, 2 rows 17.0-19.4 / 46.9-50.5, 4 rows 16.9-20.3 / 42.9-46.5, 8 rows 17.6-18.0 /
 * 42.3-43.8, 16 rows 17.0-17.3 / 42.8-46.1. */
#define ROWS_BLOCK 8192

static bool compile_rows(kiln__fused_plan *p) {
    const kiln__fused *g = p->g;
    const kiln__expr *e = &g->expr;
    int red = -1;
    for (int i = 0; i < e->n_nodes; i++)
        if (e->node[i].kind == KILN__EXPR_REDUCE) red = i;
    if (g->row < MIN_ROW || red < 0) return false;
    int arg = e->node[red].arg[0];
    bool want_pre[KILN__EXPR_MAX_NODES] = {0}, store_pre[KILN__EXPR_MAX_NODES] = {0};
    bool want[KILN__EXPR_MAX_NODES] = {0}, store[KILN__EXPR_MAX_NODES] = {0};
    bool loaded = e->node[arg].kind == KILN__EXPR_LOAD; /* a loaded argument is read in place */
    if (!loaded) {
        want_pre[arg] = true;
        closure(e, want_pre);
    }
    for (int s = 0; s < e->n_stores; s++) {
        int i = e->store[s].node;
        if (e->node[i].rows) continue; /* written by the block path */
        if (want_pre[i]) store_pre[i] = true;
        else want[i] = store[i] = true;
    }
    closure(e, want);
    p->pre.row = p->vec.row = g->row;
    /* the argument into scratch even when stored: the REDUCE reads it from L1, and its output
     * may be written with streaming stores */
    if (!compile(&p->pre, p, want_pre, store_pre, loaded ? -1 : arg) || !compile(&p->vec, p, want, store, -1))
        return false;
    for (int s = 0; s < e->n_stores; s++) /* vec may read again an input pre wrote over */
        for (int k = 0; want_pre[e->store[s].node] && k < e->n_inputs; k++)
            if (g->input[k].storage->data == g->output[e->store[s].output].storage->data) return false;
    decide_stream(&p->vec, p);
    decide_stream(&p->pre, p);
    if (!p->vec.stream) return false; /* see MIN_ROW */
    p->block = (ROWS_BLOCK + g->row - 1) / g->row * g->row;
    if (p->block > p->numel) p->block = p->numel;
    p->arg_slot = p->n_slots++; /* the REDUCE's argument, from pre */
    return true;
}

bool kiln__fused_vec_make(kiln__fused_plan *p) {
    const char *isa = kiln__vmath_isa(); /* KILN_ISA=scalar: the block path's portable loops */
    kiln__fused_vec *v = &p->vec, *pre = &p->pre;
    memset(v, 0, sizeof *v);
    memset(pre, 0, sizeof *pre);
    bool avx512 = strcmp(isa, "avx512") == 0, ok;
    /* vmath's avx512 asks for AVX512F only; xor and andnot of floats are AVX512DQ's */
    if (avx512 && __builtin_cpu_supports("avx512dq")) {
        v->run = kiln__fused_vec_run_avx512, v->chunk = KILN__VEC_U * 16;
        v->run_rows = pre->run_rows = kiln__fused_vec_run_rows_avx512;
    } else if (avx512 || strcmp(isa, "avx2") == 0) {
        v->run = kiln__fused_vec_run_avx2, v->chunk = KILN__VEC_U * 8;
        v->run_rows = pre->run_rows = kiln__fused_vec_run_rows_avx2;
    } else {
        return false;
    }
    pre->chunk = v->chunk;
    if (p->g->row > 0) {
        v->run = NULL;
        ok = compile_rows(p);
    } else {
        v->run_rows = pre->run_rows = NULL;
        ok = compile_elementwise(p);
    }
    if (!ok) v->run = NULL, v->run_rows = pre->run_rows = NULL;
    return ok;
}
#else
bool kiln__fused_vec_make(kiln__fused_plan *p) {
    memset(&p->vec, 0, sizeof p->vec);
    memset(&p->pre, 0, sizeof p->pre);
    return false;
}
#endif
