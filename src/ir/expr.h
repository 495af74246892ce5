/* The expression IR of a fused elementwise group: what fusion builds from queued op records
 * and what a backend runs (the CPU interprets it tile by tile; a device backend prints it as
 * kernel source). The IR itself holds no host pointers: loads name input k, stores name
 * output k, and the views behind them travel beside it in kiln__fused.
 *
 *   node 0: load input 0 (f32)        x
 *   node 1: EXP(node 0) (f32)         exp(x)
 *   node 2: const 1.0 (f32)
 *   node 3: ADD(node 1, node 2) (f32) exp(x) + 1
 *   store node 3 -> output 0
 *
 * Every node is evaluated over the group's whole iteration space (one shape, all outputs
 * dense in it); nodes come in program order, so a node's arguments precede it. A group may
 * hold one REDUCE node (an elementwise prologue into a reduction over the last dim): its
 * output has the group's shape with the last dim 1, and it is evaluated row by row.
 *
 * Nodes may follow the REDUCE (an elementwise epilogue: softmax's log and x - lse, exp). An
 * OP node with `rows` set is evaluated once per row, over the reduced shape (the REDUCE
 * node has it set too); an OP node without it that names a `rows` node reads that value
 * broadcast along the last dim. Only nodes after the REDUCE have `rows` set; a LOAD with
 * `rows` set reads an input of the reduced shape (dense in it, or one value). kiln__expr_
 * has_epilogue tells a backend that handles only the prologue form.
 *
 * A group may instead start with a matrix product (`matmul` set, ops[0] its MATMUL record):
 * input 0 is the product's output, and the expression is its epilogue (bias, activation, any
 * elementwise chain over the product's shape). A backend computes the product a block of rows
 * at a time and evaluates the expression over each block right after it, while it is in
 * cache; a device backend can print the same expression after its GEMM. */
#ifndef KILN_IR_EXPR_H
#define KILN_IR_EXPR_H

#include <stddef.h>

#include "ir/op.h"

#define KILN__EXPR_MAX_NODES 64
#define KILN__EXPR_MAX_INPUTS 16
#define KILN__EXPR_MAX_OUTPUTS 16
#define KILN__FUSE_MAX_OPS 16

typedef enum { KILN__EXPR_LOAD, KILN__EXPR_CONST, KILN__EXPR_OP, KILN__EXPR_REDUCE } kiln__expr_kind;

typedef struct kiln__expr_node {
    uint8_t kind;      /* kiln__expr_kind */
    int8_t n_args;
    int16_t arg[KILN__OP_MAX_IN]; /* earlier nodes (OP) */
    int16_t input;     /* LOAD: input index */
    int16_t op;        /* OP: index of the op record it came from (errors, profiler) */
    kiln__opcode code; /* OP: an elementwise opcode (unary, binary, WHERE, CLAMP, COPY);
                          REDUCE: SUM MEAN MAX MIN LOGSUMEXP over the last dim */
    kiln_dtype dtype;  /* the value's dtype */
    double value;      /* CONST */
    double param[4];   /* OP: p.f[0..3] of the op (CLAMP bounds, NAN_TO_NUM and ELU's three) */
    bool rows;         /* REDUCE, and OP and LOAD nodes after it: one value per row (see above) */
} kiln__expr_node;

typedef struct kiln__expr_store {
    int16_t node, output;
} kiln__expr_store;

typedef struct kiln__expr {
    int n_nodes, n_inputs, n_outputs, n_stores;
    kiln__expr_node node[KILN__EXPR_MAX_NODES];
    kiln__expr_store store[KILN__EXPR_MAX_OUTPUTS];
} kiln__expr;

/* A group as the host holds it: the IR, the views its loads and stores name, and the op
 * records it was built from (in program order). */
typedef struct kiln__fused {
    kiln__expr expr;
    int ndim;
    int64_t shape[KILN_MAX_DIMS];             /* the iteration space */
    kiln__view input[KILN__EXPR_MAX_INPUTS];  /* input k, broadcast to shape */
    kiln__view output[KILN__EXPR_MAX_OUTPUTS]; /* dense, of shape (a REDUCE's: last dim 1) */
    int64_t row; /* > 0: the group ends in a REDUCE over its last dim, of this length */
    bool matmul; /* ops[0] is a MATMUL producing input 0 (see above) */
    /* while building: the node that last wrote each output's storage */
    int16_t last_writer[KILN__EXPR_MAX_OUTPUTS];
    int n_ops;
    int cap; /* ops the record has room for: set by the engine that allocates and recycles it */
    /* last, so that a queued group's record can end after its own ops (KILN__FUSED_SIZE) */
    kiln__op ops[KILN__FUSE_MAX_OPS];
} kiln__fused;

/* Bytes of a group record that holds n ops: a group is built in a whole record (27 KiB, two
 * thirds of it op records) and queued as a copy of this size, so work in flight costs what
 * it holds (issue #23: a loop running ahead of its reads kept the peak of 27 KiB records). */
#define KILN__FUSED_SIZE(n) (offsetof(kiln__fused, ops) + (size_t)(n) * sizeof(kiln__op))

/* True when op is an elementwise op the IR can express (opcode and operand count only; the
 * group decides about shapes and storages). */
bool kiln__expr_opcode_fusable(kiln__opcode code);
/* *dst = *src for what a queued group uses (dst has room for src->n_ops ops): the used nodes,
 * stores, views and op records only, so that queuing a small group copies little. */
void kiln__fused_copy(kiln__fused *dst, const kiln__fused *src);
/* Starts an empty group over the iteration space of out. */
void kiln__fused_init(kiln__fused *g, const kiln__view *out);
/* Appends op (already accepted by the group's rules) as nodes: its inputs become loads, consts
 * or the nodes that last wrote their storage in the group. False when a limit is reached
 * (the group is left unchanged then). */
bool kiln__fused_add(kiln__fused *g, const kiln__op *op);
/* Appends a reduction over the last dim of a value the group wrote (op->in[0] is a storage
 * the group wrote, with the group's mapping). The group takes no op after it. */
bool kiln__fused_add_reduce(kiln__fused *g, const kiln__op *op);
/* Starts g (empty) with a 2-d MATMUL op as its producer: its output becomes input 0 and the
 * value of that storage, so elementwise ops over the product's shape join as its epilogue. */
bool kiln__fused_add_matmul(kiln__fused *g, const kiln__op *op);
/* Ends the group: each written storage is stored once, from its last writer, unless
 * dead(storage) says no handle to it remains (its value is then never written). */
void kiln__fused_finish(kiln__fused *g, bool (*dead)(void *ctx, const kiln__storage *s), void *ctx);
/* True when nodes follow the group's REDUCE node (an epilogue). */
bool kiln__expr_has_epilogue(const kiln__expr *e);
/* True when v reads, broadcast along the last dim, the dense reduced-shape view map (the
 * output of a REDUCE or of an epilogue node with rows set). */
bool kiln__view_is_row_broadcast(const kiln__view *v, const kiln__view *map);
/* Same element mapping: storage, dtype, offset, shape and strides (inline: fusion compares
 * each access of every joining op). */
static inline bool kiln__view_same(const kiln__view *a, const kiln__view *b) {
    if (a->storage != b->storage || a->dtype != b->dtype || a->offset != b->offset || a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d] || (a->shape[d] != 1 && a->strides[d] != b->strides[d])) return false;
    return true;
}

#endif
