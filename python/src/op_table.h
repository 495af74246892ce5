/* The op table of the Python binding: one row per public kiln op, from which ops.c makes a
 * Tensor method (t.exp()), a module function (kiln.exp(t)) and, for operators, a number
 * slot. Rows are data only: the unary ops of the C op table (src/ir/optable.h), the
 * reductions of the C reduction table with a py name (src/ir/reduce_table.h) and the DIM rows
 * of the row-op table (src/ir/row_table.h: softmax, log_softmax) come from
 * op_table_generated.h, the DIM rows of the shape table with a py name (src/ir/shape_table.h:
 * unsqueeze, cumsum, cumprod; its OFFSET rows: tril, triu) from shape_table_generated.h and the
 * METHOD rows of the linear-algebra table (src/ir/linalg_table.h: matmul, bmm, dot, outer) from
 * linalg_table_generated.h (all by scripts/gen_optable.py), so a new op there is a method here
 * too; the rows below are the ops the tables do not describe (binary ops pair with their scalar forms;
 * max, min, var, std, argmax and argmin, with torch's own signatures, are in methods.c).
 *   UNARY(name, kiln function, doc)                      t.name()
 *   BINARY(name, tensor-tensor fn, tensor-scalar fn, scalar-tensor fn or 0, doc)
 *                                                        t.name(other), kiln.name(a, b)
 *   REDUCE(name, whole-tensor fn, dims fn, doc)          t.name(dim=None, keepdim=False)
 *   DIM(name, fn(t, int dim), doc)                       t.name(dim)
 *   OFFSET(name, fn(t, int64_t diagonal), doc)           t.name(diagonal=0) */
#ifndef KILN_PY_OP_TABLE_H
#define KILN_PY_OP_TABLE_H

#include "linalg_table_generated.h"
#include "op_table_generated.h"
#include "shape_table_generated.h"

#define KP_UNARY_OPS(X)                                             \
    KP_TABLE_UNARY_OPS(X)                                           \
    X(selu, kiln_selu, "SELU activation")                           \
    X(contiguous, kiln_contiguous, "a dense copy, or t when dense") \
    X(clone, kiln_clone, "a copy in its own storage")

#define KP_BINARY_OPS(X)                                                                         \
    X(add, kiln_add, kiln_add_scalar, kiln_add_scalar, "a + b")                                  \
    X(sub, kiln_sub, kiln_sub_scalar, kiln_rsub_scalar, "a - b")                                 \
    X(mul, kiln_mul, kiln_mul_scalar, kiln_mul_scalar, "a * b")                                  \
    X(div, kiln_div, kiln_div_scalar, kiln_rdiv_scalar, "a / b")                                 \
    X(pow, kiln_pow, kiln_pow_scalar, 0, "a ** b")                                               \
    X(maximum, kiln_maximum, kiln_maximum_scalar, kiln_maximum_scalar, "elementwise maximum")    \
    X(minimum, kiln_minimum, kiln_minimum_scalar, kiln_minimum_scalar, "elementwise minimum")    \
    X(eq, kiln_eq, kiln_eq_scalar, kiln_eq_scalar, "a == b (bool)")                              \
    X(ne, kiln_ne, kiln_ne_scalar, kiln_ne_scalar, "a != b (bool)")                              \
    X(lt, kiln_lt, kiln_lt_scalar, kiln_gt_scalar, "a < b (bool)")                               \
    X(le, kiln_le, kiln_le_scalar, kiln_ge_scalar, "a <= b (bool)")                              \
    X(gt, kiln_gt, kiln_gt_scalar, kiln_lt_scalar, "a > b (bool)")                               \
    X(ge, kiln_ge, kiln_ge_scalar, kiln_le_scalar, "a >= b (bool)")                              \
    X(logical_and, kiln_logical_and, 0, 0, "a and b (bool)")                                     \
    X(logical_or, kiln_logical_or, 0, 0, "a or b (bool)")                                        \
    X(fmod, kiln_fmod, kiln_fmod_scalar, 0, "remainder with a's sign")                           \
    X(remainder, kiln_remainder, kiln_remainder_scalar, 0, "remainder with b's sign (Python %)") \
    X(atan2, kiln_atan2, 0, 0, "atan2(a, b)")                                                    \
    KP_TABLE_LINALG_METHODS(X)

#define KP_REDUCE_OPS(X) KP_TABLE_REDUCE_OPS(X)

#define KP_DIM_OPS(X) KP_TABLE_DIM_OPS(X) KP_TABLE_SHAPE_DIM_OPS(X)

#define KP_OFFSET_OPS(X) KP_TABLE_SHAPE_OFFSET_OPS(X)

#endif
