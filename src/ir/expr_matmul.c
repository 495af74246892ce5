/* A fused group that starts with a matrix product (see ir/expr.h): the product's output is the
 * group's input 0 and the value its storage holds, so the elementwise ops that follow (bias,
 * activation, any chain over the product's shape) join as the product's epilogue through
 * kiln__fused_add like any other elementwise op. */
#include "ir/expr.h"

bool kiln__fused_add_matmul(kiln__fused *g, const kiln__op *op) {
    if (op->code != KILN__OP_MATMUL || op->n_out != 1 || op->out[0].ndim != 2) return false;
    kiln__fused_init(g, &op->out[0]);
    g->matmul = true;
    kiln__expr *e = &g->expr;
    /* the product: read where the GEMM left it, a block of rows at a time */
    g->input[0] = op->out[0];
    g->output[0] = op->out[0];
    e->n_inputs = e->n_outputs = 1;
    e->node[0] = (kiln__expr_node){.kind = KILN__EXPR_LOAD, .input = 0, .dtype = op->out[0].dtype};
    e->n_nodes = 1;
    g->last_writer[0] = 0;
    g->ops[g->n_ops++] = *op;
    return true;
}
