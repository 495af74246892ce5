/* Inside the CPU's fused kernel (fused.c, fused_plan.c, fused_gather.c): a group's plan, made
 * once per run from its IR (ir/expr.h), and the block loop that evaluates it.
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

typedef struct kiln__fused_plan {
    const kiln__fused *g;
    const kiln__kernel_fn *kernels; /* the REDUCE node's kernel */
    int64_t numel;
    int64_t block; /* elements per block: KILN__FUSED_BLOCK, or whole rows ending in a reduction */
    int n_slots;   /* scratch blocks of block * 8 bytes each */
    uint8_t load_mode[KILN__EXPR_MAX_INPUTS];
    int8_t store_of[KILN__EXPR_MAX_NODES]; /* the output a node is stored to, or -1 */
    int8_t slot_of[KILN__EXPR_MAX_NODES];  /* the scratch block a node's value lives in */
    int8_t es[KILN__EXPR_MAX_NODES];       /* bytes per element of each node's value */
    kiln__ew_loop loop[KILN__EXPR_MAX_NODES]; /* OP nodes */
    _Alignas(8) unsigned char konst[KILN__EXPR_MAX_NODES][8]; /* CONST nodes, in their dtype */
    _Atomic kiln_status status;
} kiln__fused_plan;

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
