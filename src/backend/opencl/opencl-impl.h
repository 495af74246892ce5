/* OpenCL backend internals shared by its files: one context per device, its command queues,
 * its caching buffer allocator, and its program cache. A storage's `data` on an OpenCL
 * device is a kiln__opencl_buf (a cl_mem and its size), never a host address. */
#ifndef KILN_OPENCL_IMPL_H
#define KILN_OPENCL_IMPL_H

#include <pthread.h>

#include <CL/cl.h>

#include "backend/backend-impl.h"
#include "core/text.h"
#include "ir/expr.h"

/* Each kiln stream has its own in-order command queue on each device it uses (stream.c),
 * created at the stream's first op there and released when the stream ends. Work on one queue
 * is ordered by the queue; a buffer remembers the events of its last write and of its reads
 * since, per queue, so an op on another queue waits for them as device events (a barrier
 * enqueued before it), never on the host. A kernel returns to the engine once enqueued
 * (kiln__opencl_done). Reads to the host go through a per-device transfer queue and wait only for
 * the tensor they read. */
/* Read events a buffer keeps (one per queue): past this many they are merged into one marker. */
#define KILN__OPENCL_READERS 8
/* Enqueued kernels not yet waited for: past this many the launching worker waits for its own
 * kernel, so the device queue stays bounded like the engine's (a flood of ops cannot grow it
 * without limit). */
#define KILN__OPENCL_MAX_UNWAITED 64

/* A device event and the queue it was enqueued on (by the queue's id: ids are never reused,
 * unlike the addresses of released queues). */
typedef struct {
    cl_event ev;
    uint64_t qid;
} kiln__opencl_dep;

typedef struct kiln__opencl_buf {
    cl_mem mem;
    size_t size; /* the rounded size it was created with */
    struct kiln__opencl_buf *next; /* in a free list */
    /* guarded by the device's dep_lock; kept while the buffer waits in the cache, so its next
     * user waits for its last one */
    kiln__opencl_dep write;                      /* the last command writing it */
    kiln__opencl_dep reads[KILN__OPENCL_READERS];    /* commands reading it since, one per queue */
    int n_reads;
} kiln__opencl_buf;

/* The command queue of one stream on one device. `order` is held from an op's first enqueue
 * on the queue to the recording of its event on its buffers: the engine runs independent ops
 * of one stream on several workers at once, and a buffer's read of a queue is replaced by the
 * one recorded last, which must then be the one enqueued last. */
typedef struct {
    int stream_id;
    cl_command_queue queue;
    uint64_t qid;
    pthread_mutex_t *order;
} kiln__opencl_stream_queue;

typedef struct kiln__opencl_program {
    char *source;
    uint64_t hash;
    cl_program program;
    struct kiln__opencl_program *next;
} kiln__opencl_program;

typedef struct kiln__opencl_device {
    int index;
    kiln_device device;
    cl_platform_id platform;
    cl_device_id id;
    cl_context context;
    /* queues (stream.c) */
    pthread_mutex_t queue_lock;
    kiln__opencl_stream_queue *queues; /* one per live stream that used the device */
    int n_queues, cap_queues;
    /* a marker on the queue of each ended stream whose commands may still run (the exit hold
     * waits for them; pruned as they complete) */
    cl_event *ended_marks;
    int n_ended_marks, cap_ended_marks;
    cl_command_queue transfer; /* reads to the host; out of order where the driver can */
    uint64_t transfer_qid;
    bool transfer_in_order;
    pthread_mutex_t dep_lock; /* the buffers' events */
    _Atomic int64_t clock_offset; /* host - device clock, the smallest seen (profiler) */
    /* pinned staging buffers for copies from the host (staging.c) */
    pthread_mutex_t staging_lock;
    struct kiln__opencl_staging *staging_free;
    size_t staging_bytes; /* of every staging buffer made, free or in use */
    kiln__kernel_fn inner[KILN__OP_COUNT]; /* the kernels the table's wrapper runs */
    bool fp64;
    bool cpu; /* a CPU device (PoCL): kernels written as explicit vector loops run best there */
    kiln__device_desc desc;
    kiln__backend backend;
    kiln__device_memory memory;
    /* caching allocator */
    pthread_mutex_t mem_lock;
    kiln__opencl_buf *free_class[KILN__ALLOC_CLASSES];
    size_t cached_bytes, cache_limit;
    _Atomic uint64_t in_use; /* bytes of live buffers, against desc.global_memory */
    atomic_int unwaited;     /* kernels enqueued since the last wait */
    /* programs by source */
    pthread_mutex_t prog_lock;
    kiln__opencl_program *programs;
    void *blas; /* matmul state (matmul.c) */
} kiln__opencl_device;

/* The device a storage lives on (storage->device must be an OpenCL device). */
kiln__opencl_device *kiln__opencl_device_of(kiln_device dev);
static inline cl_mem kiln__opencl_mem(const kiln__storage *s) { return ((const kiln__opencl_buf *)s->data)->mem; }
/* The queue the op being run enqueues on (its stream's; the transfer queue for a read to the
 * host). */
cl_command_queue kiln__opencl_queue(kiln__opencl_device *d, const kiln__op *op);
/* Device events the op's first command on an out-of-order queue must wait for (on an in-order
 * stream queue they are a barrier already, and this is empty). */
int kiln__opencl_wait_list(const cl_event **events);
/* Every command an op enqueues gives its event to kiln__opencl_done or kiln__opencl_wait: the last one
 * given stands for the op (its queue is in order) in the buffers' dependency state. */
void kiln__opencl_note_event(cl_event ev);
/* Writes n bytes of host memory src into dst at offset on q without waiting for the write: src
 * is copied into a pinned staging buffer first (staging.c). */
typedef struct kiln__opencl_staging kiln__opencl_staging;
kiln_status kiln__opencl_write_staged(kiln__opencl_device *d, cl_command_queue q, cl_mem dst, size_t offset, const void *src,
                                  size_t n);
/* Bytes of all staging buffers made, and of those free now (tests). */
size_t kiln__opencl_staging_count(kiln__opencl_device *d, size_t *bytes_free);
/* CLOCK_MONOTONIC in ns: the profiler's clock, which device times are put on. */
uint64_t kiln__opencl_host_ns(void);
/* stream.c: queues and the dependency wrapper around every kernel of the table. */
bool kiln__opencl_streams_init(kiln__opencl_device *d);
void kiln__opencl_streams_wrap(kiln__opencl_device *d);
kiln_status kiln__opencl_streams_finish(kiln__opencl_device *d);
/* Waits, until deadline_ns at most, for what d's queues hold (the exit hold). */
void kiln__opencl_streams_quiesce(kiln__opencl_device *d, uint64_t deadline_ns);
void kiln__opencl_streams_free(kiln__opencl_device *d);
/* The engine ended stream_id: its queue on d is released (its commands still complete). */
void kiln__opencl_stream_end(kiln__opencl_device *d, int stream_id);
/* The events of b (the last write; with write, the reads too) that a command on queue qid must
 * wait for, retained into deps (room for 1 + KILN__OPENCL_READERS); returns their count. */
int kiln__opencl_buf_deps(kiln__opencl_device *d, kiln__opencl_buf *b, bool write, uint64_t qid, cl_event *deps);
/* b's events, released (the buffer goes back to the driver, or a blocking command waited for
 * them all). */
void kiln__opencl_buf_forget(kiln__opencl_device *d, kiln__opencl_buf *b);
/* A scratch buffer (from the caching allocator) that the op being run writes on its queue q,
 * which the wrapper does not track: begin makes q wait for the buffer's earlier users on other
 * queues (a cached buffer keeps their events); end, after the op's last command that uses it,
 * records that command as its writer, so whoever takes it from the cache next waits for it. */
kiln_status kiln__opencl_scratch_begin(kiln__opencl_device *d, kiln__opencl_buf *b, cl_command_queue q);
void kiln__opencl_scratch_end(kiln__opencl_device *d, kiln__opencl_buf *b);
/* Waits for ev (and releases it), turning a failure into a kernel error naming what. */
kiln_status kiln__opencl_wait(cl_event ev, const char *what);
/* A kernel was enqueued with event ev: releases ev, or waits for it when the queue holds
 * KILN__OPENCL_MAX_UNWAITED unwaited kernels or KILN_SYNC=1 / KILN_OPENCL_WAIT=1 asks for a wait
 * after each kernel (errors then name the op that failed). The profiler never makes it wait:
 * it reads the device times from the events later (stream.c's probe). */
kiln_status kiln__opencl_done(kiln__opencl_device *d, cl_event ev, const char *what);
kiln_status kiln__opencl_fail(cl_int err, const char *what);
const char *kiln__opencl_strerror(cl_int err);

/* A built program for source (cached in memory and on disk); NULL with a kernel error set
 * (the build log's first lines) on failure. The program stays owned by the cache. */
cl_program kiln__opencl_program_get(kiln__opencl_device *d, const char *source);
/* Forgets every cached program (tests; only while no kernel of the device runs). */
void kiln__opencl_programs_free(kiln__opencl_device *d);
/* Launches kernel "k" of source over global items (1-d; local NULL) with args (size, ptr)
 * pairs, and waits for it. */
typedef struct {
    size_t size;
    const void *ptr;
} kiln__opencl_arg;
kiln_status kiln__opencl_launch(kiln__opencl_device *d, const kiln__op *op, const char *source, size_t global,
                            const kiln__opencl_arg *args, int n_args);
/* kiln__opencl_launch in work-groups of `local` items (a divisor of global; 0: the driver's choice). */
kiln_status kiln__opencl_launch_local(kiln__opencl_device *d, const kiln__op *op, const char *source, size_t global,
                                  size_t local, const kiln__opencl_arg *args, int n_args);
/* kiln__opencl_launch_local of the kernel called name (which lives as long as the process) in
 * source: a user's registered op names its own. */
kiln_status kiln__opencl_launch_named(kiln__opencl_device *d, const kiln__op *op, const char *source, const char *name,
                                  size_t global, size_t local, const kiln__opencl_arg *args, int n_args);
/* kiln__opencl_run with a trailing __global long[2] flag argument (zeroed before), read back into
 * flag after the kernel (it waits): how a kernel reports a bad value (an index out of range, an
 * integer division by zero) for the host to turn into the op's error. args needs room for one
 * more. */
kiln_status kiln__opencl_run_flagged(kiln__opencl_device *d, const kiln__op *op, kiln__text *src, size_t global,
                                 kiln__opencl_arg *args, int n_args, cl_long flag[2]);
/* kiln__opencl_launch of a generated source (out of memory if its generation ran out), which it
 * frees. */
kiln_status kiln__opencl_run(kiln__opencl_device *d, const kiln__op *op, kiln__text *src, size_t global,
                         const kiln__opencl_arg *args, int n_args);

/* ---- code generation (codegen.c) --------------------------------------------------------- */
/* The common prelude: pragmas, f16/bf16 helpers. */
void kiln__opencl_src_prelude(kiln__text *b, bool fp64);
/* OpenCL C helpers for kernels over strided views of up to 8 dims (as long8 arguments packed
 * by kiln__opencl_pack8: a view's dims right-aligned, leading dims of size 1): unpack, locate,
 * roff, coords, dot. */
extern const char *const kiln__opencl_layout_helpers;
void kiln__opencl_pack8(cl_long8 *v, const int64_t *a, int nd, int64_t pad);
const char *kiln__opencl_ctype(kiln_dtype dtype);     /* compute type: float double int long uchar */
const char *kiln__opencl_storetype(kiln_dtype dtype); /* buffer element type */
/* Source of kernel "k" evaluating a group and its launch arguments (l->n work items); false
 * with a kernel error when a node has no OpenCL form. The arguments point into *l, which
 * must outlive the launch. */
typedef struct {
    cl_long8 shape;
    cl_long off[KILN__EXPR_MAX_INPUTS + KILN__EXPR_MAX_OUTPUTS];
    cl_long8 strides[KILN__EXPR_MAX_INPUTS + KILN__EXPR_MAX_OUTPUTS];
    cl_double consts[KILN__EXPR_MAX_NODES];
    cl_mem mem[KILN__EXPR_MAX_INPUTS + KILN__EXPR_MAX_OUTPUTS];
    cl_long n;
    size_t local; /* work-group size, 0: the driver's */
    kiln__opencl_arg args[3 * (KILN__EXPR_MAX_INPUTS + KILN__EXPR_MAX_OUTPUTS) + KILN__EXPR_MAX_NODES + 2];
    int n_args;
} kiln__opencl_ew_launch;
/* vec_rows: a group ending in a reduction takes the vector form (codegen_rows_vec.c) when it
 * fits it. */
bool kiln__opencl_codegen_elementwise(const kiln__fused *g, bool fp64, bool vec_rows, kiln__text *src, kiln__opencl_ew_launch *l);
/* The parts codegen.c shares with codegen_rows.c: the prelude and signature with its launch
 * arguments, one node's declaration, one store. */
bool kiln__opencl_codegen_params(const kiln__fused *g, bool fp64, kiln__text *b, kiln__opencl_ew_launch *l);
bool kiln__opencl_codegen_node(kiln__text *b, const kiln__fused *g, int i, bool fp64,
                           void (*index)(kiln__text *b, const void *ctx, int k), const void *ctx);
void kiln__opencl_codegen_store(kiln__text *b, const kiln__fused *g, int s, const char *idx);
/* Prints OP node i's expression (no declaration); false when it has no OpenCL form. */
bool kiln__opencl_codegen_op(kiln__text *b, const kiln__fused *g, int i, bool fp64);
/* The forward expression of an op the op table writes as one (codegen_expr.c), on x in type;
 * false for any other op. */
bool kiln__opencl_codegen_expr(kiln__text *b, kiln__opcode code, const char *x, const char *type);
/* A group ending in a REDUCE over its last dim (g->row > 0), with its epilogue: one work-group
 * per row (l->n items in groups of l->local), see codegen_rows.c. */
bool kiln__opencl_codegen_rows(const kiln__fused *g, bool fp64, kiln__text *b, kiln__opencl_ew_launch *l);
/* What codegen_rows.c shares with codegen_rows_vec.c: which inputs are read once per row and
 * each input's stride along the row; the index of input k at element j of row r (a callback of
 * kiln__opencl_codegen_node); the REDUCE node; the kernel's part after `r` (the row) is declared
 * (len, the row's bases ib<k> and ob<s>, the constants, then `reduce` printing the REDUCE node R
 * as v<R>, then the per-row nodes after it; *last_walk: per-element values are stored or an
 * epilogue follows, so the row is walked once more); the per-element stores at element j
 * (and as vstore16 at j..j+15 into vstores unless NULL). */
typedef struct {
    const kiln__fused *g;
    bool rows_in[KILN__EXPR_MAX_INPUTS]; /* input k is read once per row */
    int64_t step[KILN__EXPR_MAX_INPUTS];  /* input k's stride along the row */
} kiln__opencl_row_index;
typedef bool (*kiln__opencl_row_reduce_fn)(kiln__text *b, const kiln__fused *g, bool fp64, const kiln__opencl_row_index *x, int R);
void kiln__opencl_row_input_index(kiln__text *b, const void *ctx, int k);
int kiln__opencl_row_reduce_node(const kiln__fused *g);
bool kiln__opencl_row_body(kiln__text *b, const kiln__fused *g, bool fp64, kiln__opencl_row_index *x, bool *last_walk,
                       kiln__opencl_row_reduce_fn reduce);
void kiln__opencl_row_stores(const kiln__fused *g, kiln__text *stores, kiln__text *vstores);
/* The same group as one work item per row walking it in float16 vectors (codegen_rows_vec.c),
 * for CPU devices; _takes: the group's nodes, dtypes and layouts have that form (f32, rows
 * dense or broadcast, opcodes whose OpenCL C reads the same on vectors). */
bool kiln__opencl_rows_vec_takes(const kiln__fused *g);
bool kiln__opencl_codegen_rows_vec(const kiln__fused *g, bool fp64, kiln__text *b, kiln__opencl_ew_launch *l);

/* A SUM or MEAN of a whole dense f32 tensor of at least 2^16 elements, in chunks then their
 * total (reduce_chunked.c); _takes: op has that form. */
bool kiln__opencl_sum_chunked_takes(const kiln__op *op);
kiln_status kiln__opencl_sum_chunked(kiln__opencl_device *d, const kiln__op *op);

/* ---- kernels --------------------------------------------------------------------------- */
void kiln__opencl_register_elementwise(kiln__kernel_fn *table);
void kiln__opencl_register_reduce(kiln__kernel_fn *table);
void kiln__opencl_register_matmul(kiln__kernel_fn *table);
void kiln__opencl_register_index(kiln__kernel_fn *table);
void kiln__opencl_register_optim(kiln__kernel_fn *table);
void kiln__opencl_register_random(kiln__kernel_fn *table);
void kiln__opencl_register_scan(kiln__kernel_fn *table);
void kiln__opencl_register_nn(kiln__kernel_fn *table);
void kiln__opencl_register_sort(kiln__kernel_fn *table);
void kiln__opencl_register_intmod(kiln__kernel_fn *table); /* after register_elementwise */
void kiln__opencl_register_custom(kiln__kernel_fn *table); /* users' registered ops (custom.c) */

#endif
