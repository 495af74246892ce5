/* Users' registered ops inside kiln: the definition kept for each, and the forward op the API
 * and autodiff layers queue. */
#ifndef KILN_OPS_CUSTOM_OP_IMPL_H
#define KILN_OPS_CUSTOM_OP_IMPL_H

#include "ir/custom.h"
#include "kiln/custom_op.h"
#include "ops/ops-impl.h"

struct kiln_custom_op {
    kiln__custom_head head; /* first: what the CPU backend's CUSTOM kernel reads */
    kiln_custom_op_def def; /* def.name points to name below */
    struct kiln_custom_op *next;
    char name[];
};

/* Queues op over in[0..n) (consumed; n already checked against the definition) and returns
 * its result, or NULL with c->err set. c->name is the registered name. */
kiln__tensor *kiln__t_custom(kiln__opctx *c, const kiln_custom_op *op, int n, kiln__tensor **in);

/* Turns op's public pattern into the engine's (false: `why` says what is wrong with it). */
struct kiln__pattern;
bool kiln__custom_pattern_make(const kiln_custom_op *op, struct kiln__pattern *p, char *why, size_t size);

#endif
