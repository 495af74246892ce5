/* The backend interface: one vtable per device kind, with a `void *context`. Kernels read the
 * IR's op records (ir/op.h); a backend knows nothing of the engine that runs them.
 * Optional entries may be NULL; the engine falls back to a generic path. */
#ifndef KILN_BACKEND_IMPL_H
#define KILN_BACKEND_IMPL_H

#include "ir/op.h"

/* A kernel runs one op record to completion; returns KILN_OK or an error status (and may
 * set a message with kiln__kernel_error). */
typedef kiln_status (*kiln__kernel_fn)(const kiln__op *op);

/* A device's buffers are not in the vtable: storages live in core, so a device backend hands
 * its memory to core (kiln__storage_register_memory) when it initialises; the CPU's is core's
 * own allocator. */
typedef struct kiln__backend {
    const char *name;
    kiln_device device;
    void *context;
    kiln_status (*copy_to_host)(void *ctx, void *dst, const void *src, size_t nbytes);
    kiln_status (*copy_from_host)(void *ctx, void *dst, const void *src, size_t nbytes);
    kiln_status (*synchronize)(void *ctx);
    kiln__kernel_fn kernels[KILN__OP_COUNT];
} kiln__backend;

const kiln__backend *kiln__cpu_backend(void);
/* NULL when the device is not available in this build or machine. */
const kiln__backend *kiln__backend_get(kiln_device dev);

/* Kernel-side detail for an error (thread-local; read by the engine after a failure). */
void kiln__kernel_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *kiln__kernel_error_detail(void);

/* CPU kernel registration, one function per kernel family (src/backend/cpu/). */
void kiln__cpu_register_copy(kiln__kernel_fn *table);
void kiln__cpu_register_elementwise(kiln__kernel_fn *table);
void kiln__cpu_register_reduce(kiln__kernel_fn *table);
void kiln__cpu_register_linalg(kiln__kernel_fn *table);
void kiln__cpu_register_index(kiln__kernel_fn *table);
void kiln__cpu_register_random(kiln__kernel_fn *table);
void kiln__cpu_register_optim(kiln__kernel_fn *table);
void kiln__cpu_register_nn(kiln__kernel_fn *table);
void kiln__cpu_register_scan(kiln__kernel_fn *table); /* cumsum, cumprod (scan.c) */
void kiln__cpu_register_sort(kiln__kernel_fn *table); /* sort, topk (sort.c) */
void kiln__cpu_register_fused(kiln__kernel_fn *table);
void kiln__cpu_register_optim_adaptive(kiln__kernel_fn *table); /* RMSprop, Adagrad (optim_adaptive.c) */

#endif
