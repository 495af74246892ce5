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
    /* Blocking copies between host memory and a storage of this device, at a byte offset into
     * the storage (a device buffer is a handle, not an address to add offsets to). */
    kiln_status (*copy_to_host)(void *ctx, void *dst, const kiln__storage *src, size_t offset, size_t nbytes);
    kiln_status (*copy_from_host)(void *ctx, kiln__storage *dst, size_t offset, const void *src, size_t nbytes);
    kiln_status (*synchronize)(void *ctx);
    /* Whether storages of `other` (a device of the same kind) are this device's kernels' to use
     * as they are: a copy from `other` is then one op on this device, ordered by device events
     * (one OpenCL context). NULL: never (a copy goes through the host). */
    bool (*shares_memory)(void *ctx, kiln_device other);
    kiln__kernel_fn kernels[KILN__OP_COUNT];
} kiln__backend;

const kiln__backend *kiln__cpu_backend(void);
/* NULL when the device is not available in this build or machine. */
const kiln__backend *kiln__backend_get(kiln_device dev);

/* Waits until every device's queued kernels are done (a device kernel may return to the engine
 * once enqueued): kiln_sync calls it after draining its stream. KILN_OK or the first failure. */
kiln_status kiln__backends_synchronize(void);
/* The same for the OpenCL devices opened so far. */
kiln_status kiln__opencl_synchronize_all(void);
/* The engine ended a stream (its thread is gone and its queued ops have run): a device backend
 * releases the queue it kept for it. */
void kiln__backends_stream_end(int stream_id);
void kiln__opencl_stream_end(int stream_id);

/* Kernel-side detail for an error (thread-local; read by the engine after a failure). */
void kiln__kernel_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *kiln__kernel_error_detail(void);

/* exit() runs its handlers newest first, and a library may register its static objects'
 * destructors lazily, on first use (oneDNN does, while creating primitives): a kernel still
 * running then would use destroyed state. The engine sets the hold that stops kernels at exit;
 * a backend calls kiln__backend_exit_hold_register right after such a first use, so the hold
 * is registered after (and runs before) what the library registered. */
void kiln__backend_set_exit_hold(void (*hold)(void));
void kiln__backend_exit_hold_register(void);
/* Set by the engine around a kernel while the profiler records: a device kernel then leaves in
 * kiln__kernel_probe a probe of the device work it queued (it does not wait for it). The
 * profiler keeps the probe with the op's event and resolves it when the events are read:
 * resolve waits for the work and gives its device start and end on CLOCK_MONOTONIC's scale
 * (false if the device could not say); called again, it gives them on the device's best clock
 * match so far (resolving every probe twice lines them up); release frees the token. */
typedef struct kiln__device_probe {
    bool (*resolve)(void *token, uint64_t *start_ns, uint64_t *end_ns);
    void (*release)(void *token);
    void *token; /* NULL: no probe */
} kiln__device_probe;
extern _Thread_local bool kiln__kernel_timing;
extern _Thread_local kiln__device_probe kiln__kernel_probe;

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
void kiln__cpu_register_attention(kiln__kernel_fn *table); /* fused inference attention (attention.c) */
void kiln__cpu_register_fused(kiln__kernel_fn *table);
/* Output bytes per row panel of a fused matrix product on the CPU (fused_matmul.c): half of one
 * core's L2. A product smaller than this stays in L2 between its GEMM and a separate
 * elementwise pass anyway, so the engine does not make such a product an epilogue group. */
int64_t kiln__cpu_panel_bytes(void);
void kiln__cpu_register_optim_adaptive(kiln__kernel_fn *table); /* RMSprop, Adagrad (optim_adaptive.c) */
void kiln__cpu_register_custom(kiln__kernel_fn *table); /* users' registered ops (custom.c) */

/* The OpenCL backend (src/backend/opencl/): NULL when the build has no OpenCL or the machine
 * has no such device. */
const kiln__backend *kiln__opencl_backend(int index);
/* OpenCL devices found (0 without OpenCL), and one's description. */
int kiln__opencl_device_count(void);
typedef struct kiln__device_desc {
    char name[128];
    char driver[64];
    uint64_t global_memory;
    int compute_units;
} kiln__device_desc;
bool kiln__opencl_describe(int index, kiln__device_desc *out);

#endif
