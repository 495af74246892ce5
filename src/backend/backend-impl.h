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
    /* Whether this device runs `op` as it is (its dtypes, shapes, params). NULL: whenever it has
     * a kernel for the opcode. Read through kiln__backend_supports. */
    bool (*supports_op)(void *ctx, const kiln__op *op);
    kiln__kernel_fn kernels[KILN__OP_COUNT];
} kiln__backend;

/* A device's description, for kiln_device_info_get. */
typedef struct kiln__device_desc {
    char name[128];
    char driver[64];
    uint64_t global_memory;
    int compute_units;
} kiln__device_desc;

/* What a backend registers for its device kind (ggml's ggml_backend_reg): how many devices this
 * process can use, each one's vtable and description, and the hooks the engine calls on every
 * backend. One per line of KILN_DEVICE_KINDS (kiln/core.h); src/backend/registry.c collects them
 * as kiln__<id>_backend_reg, and nothing else in backend/, engine/ or core/ names a backend. */
typedef struct kiln__backend_reg {
    const char *name;
    kiln_device_kind kind;
    /* Devices of this kind in this build and machine (0: none; the CPU has 1). */
    int (*device_count)(void);
    /* Device `index`'s vtable, opened on first use; NULL when it is not available. */
    const kiln__backend *(*device)(int index);
    /* false when the device is not available. */
    bool (*describe)(int index, kiln__device_desc *out);
    /* Optional (NULL: nothing to do). Waits until every kernel this backend queued on its
     * devices is done: KILN_OK or its first failure. */
    kiln_status (*synchronize_all)(void);
    /* Optional. The engine ended a stream (its thread is gone and its queued ops have run): a
     * device backend releases the queue it kept for it. */
    void (*stream_end)(int stream_id);
    /* Optional. At exit, once kiln's kernels are held: waits, at most until deadline_ns
     * (CLOCK_MONOTONIC), for the work already queued on this backend's devices, whose driver
     * threads would otherwise run it (compiling, launching) inside libraries exit() is tearing
     * down. */
    void (*quiesce)(uint64_t deadline_ns);
} kiln__backend_reg;

/* Every kind's registration, indexed by kind (registry.c). */
extern const kiln__backend_reg *const kiln__backend_regs[KILN_KIND_COUNT];
/* The registration of a kind, or NULL for an invalid kind. */
static inline const kiln__backend_reg *kiln__backend_reg_get(kiln_device_kind kind) {
    return (unsigned)kind < KILN_KIND_COUNT ? kiln__backend_regs[kind] : NULL;
}

const kiln__backend *kiln__cpu_backend(void);
/* NULL when the device is not available in this build or machine. */
const kiln__backend *kiln__backend_get(kiln_device dev);
/* Whether `be` runs `op` (its supports_op, or a kernel for the opcode). */
bool kiln__backend_supports(const kiln__backend *be, const kiln__op *op);

/* Waits until every device's queued kernels are done (a device kernel may return to the engine
 * once enqueued): kiln_sync calls it after draining its stream. KILN_OK or the first failure. */
kiln_status kiln__backends_synchronize(void);
/* The engine ended a stream: every backend's stream_end. */
void kiln__backends_stream_end(int stream_id);
/* Every backend's quiesce (the exit hold's last step). */
void kiln__backends_quiesce(uint64_t deadline_ns);

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

#endif
