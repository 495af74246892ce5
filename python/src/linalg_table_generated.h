/* The Python binding's rows of the linear-algebra table: generated from src/ir/linalg_table.h by
 * scripts/gen_optable.py; do not edit. op_table.h puts the METHOD rows in KP_BINARY_OPS (kiln.name,
 * Tensor.name); functional_linalg.c makes the FUNCTIONAL rows kiln.nn.functional functions. */
#ifndef KILN_PY_LINALG_TABLE_GENERATED_H
#define KILN_PY_LINALG_TABLE_GENERATED_H

/* X(name, function, 0, 0, doc): KP_BINARY_OPS's form (no scalar variants) */
#define KP_TABLE_LINALG_METHODS(X) \
    X(matmul, kiln_matmul, 0, 0, "torch.matmul: 1-d operands promoted, batch dims broadcast") \
    X(bmm, kiln_bmm, 0, 0, "torch.bmm: [B, n, k] @ [B, k, m], no broadcasting") \
    X(dot, kiln_dot, 0, 0, "torch.dot: 1-d a and b of one length -> 0-d") \
    X(outer, kiln_outer, 0, 0, "torch.outer: 1-d [n] and [m] -> [n, m]")

/* X(sig, name, function, doc): kiln.nn.functional.name, called as torch's */
#define KP_TABLE_LINALG_FUNCTIONS(X) \
    X(LINEAR, linear, kiln_linear, "x @ w^T + bias; w [out, in], bias [out] or KILN_NONE") \
    X(CONV2D, conv2d, kiln_conv2d, "x [N, C, H, W], w [O, C/groups, KH, KW], bias [O] or KILN_NONE") \
    X(ATTENTION, scaled_dot_product_attention, kiln_scaled_dot_product_attention, "softmax(q k^T * scale + mask) v (torch.nn.functional.scaled_dot_product_attention)") \
    X(BATCH_NORM, batch_norm, kiln_batch_norm, "x [N, C, ...] normalised per channel (torch.nn.functional.batch_norm)")

#endif
