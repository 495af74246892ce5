/* Calling a user's registered op: take the handles, name the op by its registered name (its
 * errors and profiler events then do), and send tracked inputs through autodiff. */
#include "api/call_site.h"
#include "autodiff/autodiff-impl.h"
#include "ops/custom_op-impl.h"

kiln_tensor kiln_custom_op_call(kiln_custom_op *op, int n_inputs, const kiln_tensor *inputs) {
    KILN__OP_BEGIN(op ? op->name : "kiln_custom_op_call");
    kiln__tensor *in[KILN_CUSTOM_MAX_INPUTS] = {0};
    int n = n_inputs < 0 ? 0 : n_inputs > KILN_CUSTOM_MAX_INPUTS ? KILN_CUSTOM_MAX_INPUTS : n_inputs;
    for (int i = 0; inputs && i < n_inputs && i < 64; i++) { /* every input is consumed, as ops do */
        kiln__tensor *t = kiln__arg(&c, inputs[i]);
        if (i < n) in[i] = t; else kiln__tensor_release(t);
    }
    if (!op) kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "op is NULL");
    else if (!inputs) kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "inputs is NULL");
    else if (n_inputs != op->def.n_inputs)
        kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "op %s takes %d inputs, got %d", op->name, op->def.n_inputs, n_inputs);
    if (c.err) {
        for (int i = 0; i < n; i++) kiln__tensor_release(in[i]);
        return kiln__result(&c, NULL);
    }
    if (KILN__UNLIKELY(kiln__ad_active(n, in))) return kiln__result(&c, kiln__ad_custom(&c, op, n, in));
    return kiln__result(&c, kiln__t_custom(&c, op, n, in));
}

KILN_CUSTOM_OP_API(KILN__AT_DEFINE)
