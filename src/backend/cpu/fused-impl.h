/* Inside the CPU's fused kernel (fused.c, fused_plan.c, fused_gather.c, fused_vec.c): a group's
 * plan, made once per run from its IR (ir/expr.h), and the block loop that evaluates it.
 *
 * An f32 group of the simple ops over dense or one-value inputs takes the fast path of
 * fused_vec.c instead: the whole expression a chunk of a few vectors at a time (the block loop
 * still runs the last elements of a thread's range, fewer than a chunk). So does a group
 * ending in a reduction (exp allowed too) whose outputs are large enough to be streamed: each
 * block of whole rows in three steps, the REDUCE's argument chunk by chunk into scratch (the
 * `pre` program), the reduction and the per-row nodes as on the block path, then the values
 * of the group's shape after them chunk by chunk (the `vec` program).
 *
 * Elementwise groups are evaluated a block of BLOCK elements at a time (L1-resident scratch):
 * each IR node calls the inner loop the unfused kernel of its opcode runs (kiln__ew_loop,
 * resolved once per run), so results are bit-identical to the ops run one by one, and a node
 * costs one indirect call per block instead of an op record, an iterator plan and a dispatch.
 * Dense inputs are read in place, a scalar or a block inside one run of a broadcast's
 * innermost dim as a stride-0 pointer; other strided inputs are gathered into scratch. A
 * group ending in a reduction takes whole rows per block instead (the reduction kernel needs
 * whole rows to give the unfused bits). */
#ifndef KILN_BACKEND_CPU_FUSED_IMPL_H
#define KILN_BACKEND_CPU_FUSED_IMPL_H

#include <stdatomic.h>

#include "backend/cpu/cpu-impl.h"
#include "ir/expr.h"

/* Elements per block of an elementwise group. Measured on chain8 (bench_elementwise, CPU time,
 * a loaded machine): 128 -> 116 ms, 256 -> 119, 512 -> 114, 1024 -> 122, 4096 -> 121, 16384 ->
 * 148 (one thread, before the prefetch); with it, medians of 4: 256 -> 123, 512 -> 112, 1024
 * -> 138. */
#define KILN__FUSED_BLOCK ((int64_t)512)

/* KILN__LOAD_ROWS: an epilogue's input of the reduced shape, dense in it (one value a row). */
enum { KILN__LOAD_GATHER, KILN__LOAD_DENSE, KILN__LOAD_SCALAR, KILN__LOAD_ROWS };

/* The register-level fast path (fused_vec.c): opcodes of its instructions. */
enum {
    KILN__VEC_LOAD, /* d = input a's elements */
    KILN__VEC_ADD, KILN__VEC_SUB, KILN__VEC_MUL, KILN__VEC_DIV, KILN__VEC_MAX, KILN__VEC_MIN, KILN__VEC_RELU_BWD,
    KILN__VEC_NEG, /* first of the unary ones */
    KILN__VEC_ABS, KILN__VEC_RELU, KILN__VEC_SQRT, KILN__VEC_CLAMP, /* bounds in registers b, c */
    KILN__VEC_EXP /* vmath's exp (vmath_exp.h), the unfused kernel's bits */
};
/* Registers: one per IR node, then the clamp bounds. */
#define KILN__VEC_REGS (KILN__EXPR_MAX_NODES + 16)

/* An instruction's form: which operands are the accumulator (the previous instruction's result,
 * in registers) rather than read through the register file or an input. */
enum { KILN__VEC_A_ACC = 1, KILN__VEC_B_ACC = 2 };

typedef struct kiln__vec_ins {
    uint8_t op, d, a, b, c; /* d = op(a, b); registers, or an input index (LOAD) */
    uint8_t form;           /* KILN__VEC_A_ACC | KILN__VEC_B_ACC; unary ops: A only */
    bool spill;             /* d is read later than by the next instruction: kept in register d too */
} kiln__vec_ins;

/* What the evaluator runs per chunk: the instructions lowered to steps (LOADs become pointers
 * set once a chunk, spills and stores steps of their own), each a kind and up to three slots.
 * A step of an op has kind op << 2 | form; the others come after those. Slots [0,
 * KILN__VEC_REGS) are the registers (a LOADed node's slot points at its input's chunk
 * instead), slot KILN__VEC_REGS + s output s's chunk. */
enum {
    KILN__VEC_SPILL = (KILN__VEC_EXP + 1) << 2, /* register a = the accumulator */
    KILN__VEC_STORE,                            /* output slot b = slot a */
    KILN__VEC_STORE_ACC,                        /* output slot b = the accumulator */
    KILN__VEC_STREAM,                           /* STORE with streaming stores */
    KILN__VEC_STREAM_ACC,                       /* STORE_ACC with streaming stores */
    KILN__VEC_END,                              /* the chunk is done */
    KILN__VEC_KINDS
};
#define KILN__VEC_SLOTS (KILN__VEC_REGS + KILN__EXPR_MAX_OUTPUTS + 1)
#define KILN__VEC_STEPS (2 * KILN__EXPR_MAX_NODES + KILN__EXPR_MAX_OUTPUTS + 2)
typedef struct kiln__vec_step {
    uint8_t kind, a, b, c; /* slots: operands a and b (clamp: x a, bounds b and c) */
} kiln__vec_step;

/* A group compiled for the fast path: loads, ops and stores of one chunk, in program order.
 * Elementwise groups use run; the two programs of a group with a reduction use run_rows over
 * blocks of whole rows, reading the per-row values (the REDUCE and the nodes after it with
 * `rows` set) broadcast from the block path's pointers. */
typedef struct kiln__fused_vec {
    void (*run)(const struct kiln__fused_vec *v, int64_t t0, int64_t n); /* whole chunks of [t0, t0 + n) */
    /* Rows [t0, t0 + m) / row whole, every element: node i's value for the block's row j at
     * rp[i] + j * rst[i] (rows nodes only); a store with out NULL writes element t to
     * local[t - t0]. */
    void (*run_rows)(const struct kiln__fused_vec *v, int64_t t0, int64_t m, char *const *rp, const int64_t *rst,
                     float *local);
    int64_t chunk; /* elements per chunk */
    int64_t row;   /* run_rows: elements per row */
    int n_code, n_bcast, n_store, n_rowb, n_in; /* n_in: inputs [0, n_in) may be loaded */
    bool stream; /* outputs written with streaming stores */
    kiln__vec_ins code[KILN__EXPR_MAX_NODES];
    struct {
        uint8_t node;
        float value;
    } bcast[KILN__VEC_REGS]; /* registers set once: constants, one-value inputs, clamp bounds */
    uint8_t rowb[KILN__EXPR_MAX_NODES]; /* registers set once a row: per-row nodes */
    const float *in[KILN__EXPR_MAX_INPUTS];
    float *out[KILN__EXPR_MAX_OUTPUTS + 1]; /* NULL: the caller's local buffer */
    uint8_t store_node[KILN__EXPR_MAX_OUTPUTS + 1];
    bool store_acc[KILN__EXPR_MAX_OUTPUTS + 1]; /* the stored node is the last result: from the accumulator */
    int n_step, n_load;
    kiln__vec_step step[KILN__VEC_STEPS]; /* code lowered: what runs */
    uint8_t load_node[KILN__EXPR_MAX_NODES], load_input[KILN__EXPR_MAX_NODES]; /* slot load_node[i] = input's chunk */
} kiln__fused_vec;

typedef struct kiln__fused_plan {
    const kiln__fused *g;
    const kiln__kernel_fn *kernels; /* the REDUCE node's kernel */
    int64_t numel;
    int64_t block; /* elements per block: KILN__FUSED_BLOCK, or whole rows ending in a reduction */
    int n_slots;   /* scratch blocks of block * 8 bytes each */
    int arg_slot;  /* with vec.run_rows: the scratch block pre writes the REDUCE's argument to */
    uint8_t load_mode[KILN__EXPR_MAX_INPUTS];
    int8_t store_of[KILN__EXPR_MAX_NODES]; /* the output a node is stored to, or -1 */
    int8_t slot_of[KILN__EXPR_MAX_NODES];  /* the scratch block a node's value lives in */
    int8_t es[KILN__EXPR_MAX_NODES];       /* bytes per element of each node's value */
    kiln__ew_loop loop[KILN__EXPR_MAX_NODES]; /* OP nodes */
    _Alignas(8) unsigned char konst[KILN__EXPR_MAX_NODES][8]; /* CONST nodes, in their dtype */
    _Atomic kiln_status status;
    kiln__fused_vec vec; /* vec.run and vec.run_rows NULL: the block path */
    kiln__fused_vec pre; /* with vec.run_rows: the REDUCE's argument (and stored values before it) */
} kiln__fused_plan;

/* Outputs of the fast path of at least this many bytes in all are written with streaming
 * stores, which skip the read of each line a plain store first makes: the size at which a write
 * and a reread stop fitting the cache this core gets, measured once per machine
 * (stream_probe.h), else half the last-level cache (core/machine.h), so a value that is streamed
 * would not have stayed in cache for its reader anyway. Tests lower it to reach the streaming
 * code. */
extern _Atomic int64_t kiln__fused_stream_bytes; /* 0: not yet decided (kiln__stream_bytes) */
/* Groups with a reduction run on the fast path so far (tests see which path ran). */
extern _Atomic int64_t kiln__fused_rows_runs;

/* Compiles p's group for the fast path when it qualifies (every value f32, inputs dense or one
 * value, simple ops, an AVX2 or AVX-512 CPU not held back by KILN_ISA; with a reduction: rows
 * of 64 or more, streamed outputs, and no value before the REDUCE stored over an input):
 * p->vec.run, or p->vec.run_rows and p->pre (p->block then whole rows of 8192 elements or
 * more); false (both NULL) otherwise. */
bool kiln__fused_vec_make(kiln__fused_plan *p);
/* The per-ISA evaluators (fused_vec_avx2.c, fused_vec_avx512.c); chunk: U vectors. */
void kiln__fused_vec_run_avx2(const kiln__fused_vec *v, int64_t t0, int64_t n);
void kiln__fused_vec_run_rows_avx2(const kiln__fused_vec *v, int64_t t0, int64_t m, char *const *rp,
                                   const int64_t *rst, float *local);
void kiln__fused_vec_run_avx512(const kiln__fused_vec *v, int64_t t0, int64_t n);
void kiln__fused_vec_run_rows_avx512(const kiln__fused_vec *v, int64_t t0, int64_t m, char *const *rp,
                                     const int64_t *rst, float *local);
/* Vectors per chunk. chain8 (bench_elementwise, CPU ms, AVX-512, medians of 3 on a loaded
 * machine): 2 -> 80, 4 -> 71, 8 -> 68; a chunk's values (a few KiB) stay in L1. */
#define KILN__VEC_U 8

/* Fills p for g (p must not move afterwards: loops point into it). Returns KILN_OK, or the
 * status of a node no loop handles (the group is then run op by op, which reports it). */
kiln_status kiln__fused_plan_make(kiln__fused_plan *p, const kiln__fused *g);
/* How input view v is read over g's iteration space. */
int kiln__fused_load_mode(const kiln__fused *g, const kiln__view *v);
/* Copies elements [t0, t0 + m) of v (in g's row-major order) into buf. */
void kiln__fused_gather(const kiln__fused *g, const kiln__view *v, int64_t t0, int64_t m, char *buf);
/* When elements [t0, t0 + m) of v lie in one run of its innermost dim: the first one's
 * element offset in v's storage, with *stride set to that dim's stride; -1 otherwise. */
int64_t kiln__fused_run_offset(const kiln__fused *g, const kiln__view *v, int64_t t0, int64_t m, int64_t *stride);

/* Evaluates blocks [begin, end) of p's group (a kiln__parallel_for range function). */
void kiln__fused_run_blocks(void *p, int64_t begin, int64_t end);
/* Runs a group that starts with a matrix product: its GEMM a panel of rows at a time, each
 * panel's epilogue blocks right after it (fused_matmul.c). */
kiln_status kiln__fused_matmul_run(kiln__fused_plan *p);

#endif
