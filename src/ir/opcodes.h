/* Every kernel kiln can run, by id. Backends fill a table indexed by these. The elementwise
 * ops come from the op table (ir/optable.h) and the reductions from the reduction table
 * (ir/reduce_table.h), softmax and log_softmax from the row-op table (ir/row_table.h), whose
 * rows carry more columns: so an X given to KILN__OPCODES takes the
 * name and ignores the rest, X(name, ...). */
#ifndef KILN_IR_OPCODES_H
#define KILN_IR_OPCODES_H

#include <stdbool.h>

#include "ir/optable.h"
#include "ir/reduce_table.h"
#include "ir/row_table.h"
#include "ir/linalg_table.h"
#include "ir/optim_table.h"

#define KILN__OPCODES(X)                                                                    \
    /* the elementwise ops, with their facts: one row each in ir/optable.h */               \
    KILN__OPTABLE(X)                                                                         \
    /* data movement */                                                                      \
    X(FILL)        /* out = p.f[0] */                                                        \
    X(ARANGE)      /* out[i] = p.f[0] + i * p.f[1] (dense 1-d out) */                         \
    X(LINSPACE)    /* start p.f[0], end p.f[1], steps pi[0] (out dense 1-d) */                     \
    X(EYE)         /* out 2-d: 1 on the diagonal */                                          \
    X(RAND_UNIFORM)   /* seed pi[0], offset pi[1], lo p.f[0], hi p.f[1] */                 \
    X(RAND_NORMAL)    /* seed pi[0], offset pi[1], mean p.f[0], std p.f[1] */              \
    X(RAND_BERNOULLI) /* seed pi[0], offset pi[1], prob p.f[0] */                          \
    /* reductions, one row each in ir/reduce_table.h: out has in's ndim with reduced dims of \
     * size 1; VAR: correction p.i[0], p.i[1] 1 for std; ARGMAX, ARGMIN: dim p.i[0], out i64 */ \
    KILN__REDUCE_KERNELS(X)                                                                  \
    KILN__ROW_KERNELS(X) /* one row each in ir/row_table.h: dim p.i[0]; out same shape */      \
    X(CUMSUM) X(CUMPROD) /* dim p.i[0], reverse p.i[1] (from the end); out same shape */     \
    /* linear algebra */                                                                     \
    X(MATMUL)      /* in[0] [..,M,K] in[1] [..,K,N] (batch dims broadcast), out dense [..,M,N] */ \
    /* indexing */                                                                           \
    X(INDEX_SELECT)   /* in[0] src, in[1] index (1-d), dim p.i[0] */                         \
    X(GATHER)         /* in[0] src, in[1] index, dim p.i[0] */                               \
    X(SCATTER_ADD)    /* out += scatter(in[1] src at in[0] index), dim p.i[0] */             \
    X(ONE_HOT)        /* in[0] index, classes p.i[0] */                                     \
    X(SORT)           /* in[0] x; out[0] values, out[1] i64 indices: the first p.i[2] of each \
                         line along dim p.i[0], descending if p.i[1] (NaN largest), stable */ \
    /* free slots for later layers (autodiff, nn) go below */                               \
    X(CUMPROD_BACKWARD) /* in[0] grad, in[1] x, dim p.i[0]; out dx (exact where x has zeros) */ \
    /* 2-d convolution and pooling (src/backend/cpu/conv.c, pool.c). in[0] is [N, C, H, W]     \
     * (any strides); outputs are dense. Conv params: p.i[0..3] = stride_h, stride_w, pad_h,    \
     * pad_w; pi[0..2] = dilation_h, dilation_w, groups. */                                    \
    X(CONV2D)         /* in[0] x, in[1] w [O, C/g, KH, KW] dense, opt. in[2] bias [O]; out y */ \
    X(CONV2D_BACKWARD_INPUT)  /* in[0] dy dense, in[1] w dense; out[0] dx */                    \
    X(CONV2D_BACKWARD_WEIGHT) /* in[0] dy dense, in[1] x; out[0] dw */                          \
    /* Pool params: p.i[0..3] = kernel_h, kernel_w, stride_h, stride_w; pi[0..1] = pad_h,      \
     * pad_w. Max indices are i64 into each input plane's flattened H * W. */                  \
    X(MAX_POOL2D)     /* out[0] values; out[1] i64 indices when n_out == 2 */                  \
    X(MAX_POOL2D_BACKWARD) /* in[0] dy, in[1] indices; out[0] dx (zeroed, then scattered) */   \
    X(AVG_POOL2D)     /* pi[2] = 1: adaptive windows (the params are unused) */                \
    X(AVG_POOL2D_BACKWARD) /* in[0] dy; out[0] dx; params as AVG_POOL2D */                     \
    /* optimizer updates: one row each in ir/optim_table.h (tensors, parameters, formula),    \
     * written in place into the parameter's and the state's own storages */                  \
    KILN__OPTIM_TABLE(X)                                                                      \
    X(SUM_SQUARES)    /* out[0] 0-d f64 = sum of in[0]^2 accumulated in double */               \
    X(TO_HOST)        /* copy dense in[0] to host pointer pi[0] (pi[1] bytes) */                 \
    X(FUSED)          /* a fused elementwise group: p.i[0] is its kiln__fused (ir/expr.h) */     \
    /* collectives (src/dist/): run in queue order on the engine's communication thread, by    \
     * the kernel dist registers (kiln__engine_set_comm_kernel); they run even when an input is \
     * poisoned, so every rank takes part, then pass the poison on. p.i[3]: 1 = this rank failed \
     * at dispatch. A last output is dist's order token (written by every collective). */       \
    X(ALL_REDUCE)     /* in[0] dense, out[0] dense same shape; p.i[0] 0 sum, 1 mean */          \
    X(BROADCAST)      /* in[0] dense, out[0] dense same shape; root p.i[0] */                   \
    X(ALL_GATHER)     /* in[0] dense, out[0] dense [world, in's shape] */                       \
    X(BARRIER)        /* out[0] the order token only */                                         \
    X(NOOP)                                                                                     \
    X(ATTENTION)      /* softmax(q k^T * p.f[0] + mask) v for inference (src/backend/cpu/attention.c): \
                         in[0] q [.., L, E]; no mask (pi[1] 0): in[1] k, in[2] v; a mask: in[1] k \
                         and v as one [2, .., S, E] view (pi[1] 1: k first, 2: v first), in[2]  \
                         the mask [.., L, S] (bool, or q's dtype: added); pi[0] causal; out dense */ \
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

static inline bool kiln__opcode_is_comm(kiln__opcode code) {
    return code >= KILN__OP_ALL_REDUCE && code <= KILN__OP_BARRIER;
}

#endif
