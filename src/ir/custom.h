/* How an op record reaches a user's registered kernel (KILN__OP_CUSTOM): p.i[0] points to the
 * registered definition, which the op layer (src/ops/custom_op.c) starts with this head, so a
 * backend (the CPU's; OpenCL's for an op with an OpenCL kernel), which knows nothing of the
 * public custom-op types, can run it. */
#ifndef KILN_IR_CUSTOM_H
#define KILN_IR_CUSTOM_H

#include <stdint.h>

#include "ir/op.h"

typedef struct kiln__custom_head {
    /* Runs op on the CPU, the kernel allowed `threads` threads; KILN_OK or a failure whose
     * message was set with kiln__kernel_error. */
    kiln_status (*run_cpu)(const kiln__op *op, int threads);
    /* OpenCL C source and the name of its kernel (copies that live as long as the process),
     * or NULL: the op has no OpenCL kernel. */
    const char *cl_source, *cl_kernel;
} kiln__custom_head;

static inline const kiln__custom_head *kiln__custom_of(const kiln__op *op) {
    return (const kiln__custom_head *)(uintptr_t)op->p.i[0];
}

#endif
