/* How an op record reaches a user's registered kernel (KILN__OP_CUSTOM): p.i[0] points to the
 * registered definition, which the op layer (src/ops/custom_op.c) starts with this head, so a
 * backend (the CPU's; OpenCL's for an op with an OpenCL kernel), which knows nothing of the
 * public custom-op types, can run it. */
#ifndef KILN_IR_CUSTOM_H
#define KILN_IR_CUSTOM_H

#include <stdbool.h>
#include <stdint.h>

#include "ir/op.h"

typedef struct kiln__custom_head {
    /* Runs op on the CPU, the kernel allowed `threads` threads; KILN_OK or a failure whose
     * message was set with kiln__kernel_error. */
    kiln_status (*run_cpu)(const kiln__op *op, int threads);
    /* OpenCL C source and the name of its kernel (copies that live as long as the process),
     * or NULL: the op has no OpenCL kernel. */
    const char *cl_source, *cl_kernel;
    /* The kernel takes each operand's layout after n (kiln_custom_op_def.opencl_layout), and its
     * inputs as they are; cl_source then starts with KILN__CUSTOM_CL_LAYOUT_PRELUDE. */
    bool cl_layout;
} kiln__custom_head;

/* What kiln declares ahead of the source of a kernel that takes layouts: each operand as
 * (long8 shape, long8 strides, long offset), dims right-aligned (leading ones of size 1), and
 * the buffer position of an operand's i-th element in row-major order. "#line 1" keeps the
 * build log's line numbers those of the user's source. */
#define KILN__CUSTOM_CL_LAYOUT_PRELUDE                                                          \
    "#define KILN_LAYOUT(name) long8 name##_shape, long8 name##_strides, long name##_offset\n" \
    "inline long kiln_at(long i, long8 shape, long8 strides, long offset) {\n"                  \
    "    long s[8], st[8];\n"                                                                  \
    "    vstore8(shape, 0, s);\n"                                                              \
    "    vstore8(strides, 0, st);\n"                                                           \
    "    for (int d = 7; d >= 0; d--) { offset += (i % s[d]) * st[d]; i /= s[d]; }\n"          \
    "    return offset;\n"                                                                     \
    "}\n"                                                                                      \
    "#define KILN_AT(name, i) kiln_at((i), name##_shape, name##_strides, name##_offset)\n"      \
    "#line 1\n"

static inline const kiln__custom_head *kiln__custom_of(const kiln__op *op) {
    return (const kiln__custom_head *)(uintptr_t)op->p.i[0];
}

#endif
