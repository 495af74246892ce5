/* CONV2D and its two backward passes through oneDNN (f32, and bf16 where the CPU has
 * AVX512-BF16 and KILN_ISA allows it, as bf16 products: gemm_lowp.h), beside the built-in im2col+GEMM
 * kernels of conv.c, which ask here first:
 *
 *   kiln_status st;
 *   if (kiln__conv_dnnl_run(op, &st)) return st;   // taken: done, or failed with a message
 *   ...built-in path...
 *
 * KILN_CONV=builtin|dnnl forces one path (read once); by default oneDNN takes the f32 convs
 * (and bf16) with 8 or more input channels per group (conv_dnnl.c has the measurement). Built without oneDNN (KILN_HAVE_DNNL=0)
 * kiln__conv_dnnl_run never takes a call. */
#ifndef KILN_BACKEND_CPU_CONV_DNNL_H
#define KILN_BACKEND_CPU_CONV_DNNL_H

#include <stdbool.h>

#include "ir/op.h"

/* True when oneDNN ran the op (*st is its status, a kernel error message set on failure);
 * false when the built-in kernel should run it: another dtype, a strided input or bias, a
 * shape oneDNN has no implementation for, the default rule, KILN_CONV=builtin, or no oneDNN
 * in this build. */
bool kiln__conv_dnnl_run(const kiln__op *op, kiln_status *st);

/* The path asked for: "dnnl", "builtin" or "auto" (the default rule). */
const char *kiln__conv_dnnl_mode(void);

/* Tests and benchmarks: force a path (1 oneDNN, 0 built-in; -1 back to the default, with
 * KILN_CONV read again). */
void kiln__conv_dnnl_force(int mode);

/* Tests: how many convs oneDNN has run (taken and executed) in this process. */
long kiln__conv_dnnl_calls(void);

/* Tests: how many of those were bf16 convs (oneDNN's bf16 primitives, AVX512-BF16). */
long kiln__conv_dnnl_bf16_calls(void);

/* Tests: how many bf16 activations kiln's transpose (conv_reorder.h) moved into or out of a
 * oneDNN conv's layout in this process. */
long kiln__conv_dnnl_kiln_reorders(void);

/* Tests: how many bf16 activations oneDNN's convs took or gave in nChw16c (whole blocks of 16
 * channels) in this process, moved by kiln's transposes or oneDNN's reorders (its AMX convs ask
 * for nhwc: none). */
long kiln__conv_dnnl_blocked_bf16_activations(void);

/* Tests: the next `count` oneDNN convs fail at `stage` (count 0 clears): KILN__DNNL_FAIL_ALLOC
 * as if a buffer allocation returned NULL (KILN_ERR_OUT_OF_MEMORY), KILN__DNNL_FAIL_CREATE as
 * if oneDNN refused to create the primitive (KILN_ERR_KERNEL; only a shape not yet in the
 * primitive cache creates one). Does nothing in a build without oneDNN. */
enum { KILN__DNNL_FAIL_ALLOC = 1, KILN__DNNL_FAIL_CREATE = 2 };
void kiln__conv_dnnl_inject_failure(int stage, int count);

#endif
