/* Every kernel kiln can run, by id. Backends fill a table indexed by these. The opcodes come
 * from the tables in ir/ that own the ops: the elementwise ops from the op table
 * (ir/optable.h), the creation kernels from ir/creation_table.h, the reductions from the
 * reduction table (ir/reduce_table.h), softmax and log_softmax from the row-op table
 * (ir/row_table.h), the indexing, scan and sort kernels from the shape op table
 * (ir/shape_table.h) and the products, convolution, pooling and attention kernels from the
 * linear-algebra table (ir/linalg_table.h), the optimizers' in-place updates from the update
 * table (ir/optim_table.h). A table's rows carry more columns, so an X given to KILN__OPCODES
 * takes the name and ignores the rest, X(name, ...). Written here by hand are only the opcodes
 * no user calls as an op: the engine's own records (FUSED, NOOP, TO_HOST), SUM_SQUARES (optim/'s
 * gradient clipping drives it), the collectives (dist/ queues them on the communication stream)
 * and CUSTOM (a user's registered op, by its definition).
 *
 * No code may depend on the opcodes' numeric order (a table's new row moves the ones after
 * it): a class of opcodes is a table's list (kiln__opcode_is_comm below) or a column of the
 * rows (kiln__op_info_of), never a range. */
#ifndef KILN_IR_OPCODES_H
#define KILN_IR_OPCODES_H

#include <stdbool.h>

#include "ir/creation_table.h"
#include "ir/optable.h"
#include "ir/reduce_table.h"
#include "ir/row_table.h"
#include "ir/linalg_table.h"
#include "ir/optim_table.h"
#include "ir/shape_table.h"

/* The collectives (src/dist/): run in queue order on the engine's communication thread, by the
 * kernel dist registers (kiln__engine_set_comm_kernel); they run even when an input is
 * poisoned, so every rank takes part, then pass the poison on. p.i[3]: 1 = this rank failed at
 * dispatch. A last output is dist's order token (written by every collective). */
#define KILN__COMM_OPCODES(X)                                                                   \
    X(ALL_REDUCE)     /* in[0] dense, out[0] dense same shape; p.i[0] 0 sum, 1 mean */          \
    X(BROADCAST)      /* in[0] dense, out[0] dense same shape; root p.i[0] */                   \
    X(ALL_GATHER)     /* in[0] dense, out[0] dense [world, in's shape] */                       \
    X(BARRIER)        /* out[0] the order token only */

#define KILN__OPCODES(X)                                                                    \
    /* the elementwise ops, with their facts: one row each in ir/optable.h */               \
    KILN__OPTABLE(X)                                                                         \
    KILN__CREATION_KERNELS(X) /* fills, ranges, random numbers: ir/creation_table.h */       \
    /* reductions, one row each in ir/reduce_table.h: out has in's ndim with reduced dims of \
     * size 1; VAR: correction p.i[0], p.i[1] 1 for std; ARGMAX, ARGMIN: dim p.i[0], out i64 */ \
    KILN__REDUCE_KERNELS(X)                                                                  \
    KILN__ROW_KERNELS(X) /* one row each in ir/row_table.h: dim p.i[0]; out same shape */      \
    KILN__SHAPE_KERNELS(X) /* indexing, scans, sort: ir/shape_table.h */                     \
    KILN__LINALG_KERNELS(X) /* products, convolution, pools, attention: ir/linalg_table.h */ \
    /* optimizer updates: one row each in ir/optim_table.h (tensors, parameters, formula),    \
     * written in place into the parameter's and the state's own storages */                  \
    KILN__OPTIM_TABLE(X)                                                                      \
    X(SUM_SQUARES)    /* out[0] 0-d f64 = sum of in[0]^2 accumulated in double */               \
    X(TO_HOST)        /* copy dense in[0] to host pointer pi[0] (pi[1] bytes) */                 \
    X(FUSED)          /* a fused elementwise group: p.i[0] is its kiln__fused (ir/expr.h) */     \
    KILN__COMM_OPCODES(X)                                                                   \
    X(NOOP)                                                                                     \
    X(CUSTOM)         /* a user's registered op: p.i[0] its definition (ir/custom.h), out dense */

typedef enum {
#define KILN__OPCODE_ENUM(name, ...) KILN__OP_##name,
    KILN__OPCODES(KILN__OPCODE_ENUM)
#undef KILN__OPCODE_ENUM
    KILN__OP_COUNT
} kiln__opcode;

const char *kiln__opcode_name(kiln__opcode code);
/* The op table's rows as data, by opcode (ir/opcodes.c); all zeros for an opcode outside the
 * table. Inline: the op layer reads its dtype rule on every op. */
extern const kiln__op_info kiln__op_infos[KILN__OP_COUNT];
static inline const kiln__op_info *kiln__op_info_of(kiln__opcode code) {
    return &kiln__op_infos[(unsigned)code < KILN__OP_COUNT ? code : KILN__OP_NOOP];
}

/* The reduction table's rows as data, by row (kiln__reduction), and by opcode: a row of zeros
 * (name NULL, dtype KILN__RDT_NONE) for an opcode that is not a reduction of the table. */
extern const kiln__reduce_info kiln__reduce_rows[KILN__RED_COUNT];
static inline const kiln__reduce_info *kiln__reduce_info_of(kiln__opcode code) {
    static const kiln__reduce_info none = {0};
    switch (code) {
#define KILN__REDUCE_CASE(NAME, ...) \
    case KILN__OP_##NAME: return &kiln__reduce_rows[KILN__RED_##NAME];
        KILN__REDUCE_KERNELS(KILN__REDUCE_CASE)
#undef KILN__REDUCE_CASE
    default: return &none;
    }
}

/* The row-op table's rows as data, by row (kiln__row_op). */
extern const kiln__row_info kiln__row_rows[KILN__ROW_COUNT];
/* The linear-algebra table's rows as data, by row (kiln__linalg_op). */
extern const kiln__linalg_info kiln__linalg_rows[KILN__LINALG_COUNT];

/* The opcode of the kernel each shape-table row runs (by kiln__shape_op): -1 for a row made of
 * other ops, -2 for a view. */
extern const int kiln__shape_kernels[KILN__SHAPE_COUNT];

/* A collective (KILN__COMM_OPCODES): the engine runs it on the communication thread. */
static inline bool kiln__opcode_is_comm(kiln__opcode code) {
    switch (code) {
#define KILN__COMM_CASE(NAME) case KILN__OP_##NAME:
        KILN__COMM_OPCODES(KILN__COMM_CASE)
#undef KILN__COMM_CASE
        return true;
    default: return false;
    }
}

#endif
