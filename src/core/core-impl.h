/* kiln core internals: errors, storages, tensors, handles. Never installed. */
#ifndef KILN_CORE_IMPL_H
#define KILN_CORE_IMPL_H

#include <stdatomic.h>
#include <stdio.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/core.h"

/* ALWAYS(x)/NEVER(x): assert in debug builds, a handled branch in release (SQLite's habit). */
#ifdef NDEBUG
#define ALWAYS(x) (x)
#define NEVER(x) (x)
#else
#include <assert.h>
#define ALWAYS(x) ((x) ? 1 : (assert(0 && #x), 0))
#define NEVER(x) ((x) ? (assert(0 && #x), 1) : 0)
#endif

#define KILN__UNLIKELY(x) __builtin_expect(!!(x), 0)
#define KILN__LIKELY(x) __builtin_expect(!!(x), 1)

/* ---- errors ------------------------------------------------------------------------------ */
/* Shared, refcounted: a poisoned tensor and everything computed from it point to one record. */
typedef struct kiln__error {
    atomic_int refs;
    kiln_status status;
    const char *op;   /* static string: the public op name */
    const char *file; /* caller's file (static string from __FILE__) */
    int line;
    uint64_t seq;     /* engine sequence number of the failing op, 0 at dispatch time */
    /* Where the error stands among its stream's errors: 2*seq for an op that failed while
     * running, 2*(last seq)+1 for a poisoned result made at dispatch. The lowest is reported. */
    uint64_t order;
    atomic_bool delivered; /* returned by a read (on any thread): a sync does not report it again */
    char message[];   /* "<op> at <file>:<line>: <detail>" */
} kiln__error;

kiln__error *kiln__error_new(kiln_status status, const char *op, const char *file, int line,
                             uint64_t seq, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
kiln__error *kiln__error_ref(kiln__error *e);
void kiln__error_unref(kiln__error *e);
/* Makes e this thread's last error (kiln_last_error) and returns its status, as the status
 * of a call: e is delivered, so no kiln_sync reports it again. */
kiln_status kiln__error_report(kiln__error *e);
void kiln__error_mark_delivered(kiln__error *e);
/* Makes e the thread's last error without delivering it (a poisoned result carries it on). */
void kiln__error_set_last(const kiln__error *e);
/* Sets the thread's last error from scratch (for calls that return a status directly). */
kiln_status kiln__report(kiln_status status, const char *op, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Caller location recorded by the public macros (thread-local). */
typedef struct {
    const char *file;
    int line;
    const char *op; /* the public call ("kiln_randn"), or NULL when unknown */
} kiln__site;
/* Inline so that a call-site wrapper (src/api/) costs two stores, not another call. */
extern _Thread_local kiln__site kiln__site_now;
static inline kiln__site kiln__call_site(void) { return kiln__site_now; }
static inline void kiln__site_set(const char *file, int line) {
    kiln__site_now.file = file;
    kiln__site_now.line = line;
    kiln__site_now.op = NULL;
}
/* The same from a call-site wrapper, which also knows the public call's name. */
static inline void kiln__site_set_op(const char *file, int line, const char *op) {
    kiln__site_now.file = file;
    kiln__site_now.line = line;
    kiln__site_now.op = op;
}

/* ---- objects a user frees (object.c): use after free and double free are errors ---------- */
/* kind is the public type's name ("kiln_module"). A made object enters the registry (false: no
 * memory, the maker fails); each public entry point checks its object first; its free function
 * retires it first (a refused retire is a double free: return without touching it) and ends
 * with kiln__object_dispose instead of free(). */
bool kiln__object_register(const void *obj, const char *kind);
/* NULL when obj is a live object of that kind; else why not, in thread-local text, and the
 * status (ERR_NULL, ERR_STALE_HANDLE after a free, ERR_INVALID_ARGUMENT for another kind). */
const char *kiln__object_problem(const void *obj, const char *kind, kiln_status *status);
/* The same, reported for op (kiln_last_error); KILN_OK when live. */
kiln_status kiln__object_check(const void *obj, const char *kind, const char *op);
bool kiln__object_live(const void *obj, const char *kind);
kiln_status kiln__object_retire(const void *obj, const char *kind, const char *op);
/* Gives obj's memory (malloc'd) back after a delay, remembering who freed it and where. */
void kiln__object_dispose(void *obj, const char *kind, const char *op);
/* The kinds, by their public type names. */
#define KILN__MODULE_KIND "kiln_module"
#define KILN__OPTIMIZER_KIND "kiln_optimizer"
#define KILN__GRADS_KIND "kiln_grads"
#define KILN__DATASET_KIND "kiln_dataset"
#define KILN__LOADER_KIND "kiln_loader"
#define KILN__GENERATOR_KIND "kiln_generator"
#define KILN__METRICS_KIND "kiln_metrics"
#define KILN__TOKENIZER_KIND "kiln_tokenizer"
#define KILN__TRANSACTION_KIND "kiln_transaction"
#define KILN__SUMMARY_WRITER_KIND "kiln_summary_writer"
#define KILN__DDP_KIND "kiln_ddp"
#define KILN__BERT_KIND "kiln_bert"
/* Early return from a public entry point when obj is not a live `kind` (the error reported). */
#define KILN__OBJECT_OR_RETURN(obj, kind, op, ...)                              \
    do {                                                                       \
        if (kiln__object_check((obj), (kind), (op)) != KILN_OK) return __VA_ARGS__; \
    } while (0)

/* ---- leak check (KILN_LEAK_CHECK=1, kiln_leak_check) -------------------------------------- */
/* A higher layer's count of its live objects (gradient containers): writes one line per
 * object to f when f is not NULL, returns how many there are. Registered once. */
typedef int64_t (*kiln__leak_reporter)(FILE *f);
void kiln__leak_add_reporter(kiln__leak_reporter fn);

/* ---- devices ----------------------------------------------------------------------------- */
/* Tables indexed by device use a slot: 0 the CPU (host memory: core's own), then
 * KILN_MAX_DEVICES per other kind of KILN_DEVICE_KINDS, in kind order. */
#define KILN__DEVICE_SLOTS (1 + (KILN_KIND_COUNT - 1) * KILN_MAX_DEVICES)
/* The slot of a valid device, or -1 (an invalid kind or index). */
static inline int kiln__device_slot(kiln_device d) {
    int v = (int)d, kind = v >> 8, idx = v & 0xff;
    if (v < 0 || kind >= KILN_KIND_COUNT) return -1;
    if (kind == KILN_KIND_CPU) return idx == 0 ? 0 : -1;
    if (idx >= KILN_MAX_DEVICES) return -1;
    return 1 + (kind - 1) * KILN_MAX_DEVICES + idx;
}

/* ---- dtypes ------------------------------------------------------------------------------ */
bool kiln__dtype_valid(kiln_dtype dtype);
/* Element size of a valid dtype (no checks: hot path). */
static inline size_t kiln__elsize(kiln_dtype d) {
    static const unsigned char sizes[KILN_DTYPE_COUNT] = {4, 8, 4, 8, 1, 2, 2};
    return sizes[d];
}
bool kiln__dtype_is_float(kiln_dtype dtype); /* f32 f64 f16 bf16 */
bool kiln__dtype_is_int(kiln_dtype dtype);   /* i32 i64 */
/* Result dtype of a binary op on a and b (bool < i32 < i64 < bf16/f16 < f32 < f64;
 * f16 with bf16 gives f32). */
kiln_dtype kiln__dtype_promote(kiln_dtype a, kiln_dtype b);
/* torch.result_type of two tensors, each with dims (ndim > 0) or 0-d: as kiln__dtype_promote,
 * except that a 0-d tensor changes the dtype of a dimensioned one only when of a higher
 * category (bool < integer < floating): f32 [n] with f64 0-d is f32, i32 [n] with f64 0-d f64. */
kiln_dtype kiln__dtype_result(kiln_dtype a, bool a_dims, kiln_dtype b, bool b_dims);
/* The dtype kernels compute in: f16/bf16 compute in f32. */
kiln_dtype kiln__dtype_compute(kiln_dtype dtype);
float kiln__f16_to_f32(uint16_t h);
uint16_t kiln__f32_to_f16(float f); /* round to nearest even */
float kiln__bf16_to_f32(uint16_t h);
uint16_t kiln__f32_to_bf16(float f); /* round to nearest even, NaN kept */
/* Float to integer conversion that C leaves undefined out of range: NaN -> 0, else clamped. */
static inline int64_t kiln__saturate_i64(double v, int64_t lo, int64_t hi) {
    if (v != v) return 0;
    if (v >= (double)hi) return hi; /* (double)INT64_MAX rounds up to 2^63: still saturates */
    if (v <= (double)lo) return lo;
    return (int64_t)v;
}
/* Read/write element i of a raw array of dtype as double (slow paths and tests). */
double kiln__load_as_f64(const void *base, kiln_dtype dtype, int64_t i);
void kiln__store_from_f64(void *base, kiln_dtype dtype, int64_t i, double v);

/* ---- storage ----------------------------------------------------------------------------- */
struct kiln__var; /* engine dependency state */
struct kiln__window; /* engine: a stream's fusion window */

typedef struct kiln__storage {
    atomic_long owners;  /* tensor objects (views) sharing this buffer */
    void *data;
    size_t nbytes;
    size_t granted;      /* the size of the block the allocator gave (>= nbytes), for its free */
    kiln_device device;
    bool borrowed;       /* user memory: never written in place, never freed by kiln */
    bool exported;       /* its address left kiln writable (DLPack): writes may bypass the engine */
    uint8_t cast_dtype;  /* the dtype of cast_copy */
    void (*on_release)(void *ctx);
    void *release_ctx;
    _Atomic(kiln__error *) err; /* set when an op writing this buffer failed while running */
    struct kiln__var *var;      /* engine: pending readers/writers */
    struct kiln__window *window; /* engine: the fusion window holding ops on it (atomic) */
    atomic_ullong last_write;   /* the write clock's value at the last write queued (0: none) */
    /* Autocast's cast of the whole buffer to cast_dtype (api/autocast_cache.c), made when
     * last_write was cast_version; an owner reference, released with this storage's last owner. */
    _Atomic(struct kiln__storage *) cast_copy;
    uint64_t cast_version;
} kiln__storage;

/* The write clock: every op queued that writes a storage (engine's kiln__submit, at submission,
 * so in program order on the submitting thread), and every host copy into one, gives it a fresh
 * value of one process-wide counter. Two equal stamps mean the same write of the same storage (a
 * freed storage's address reused by a new one cannot look unchanged), which is how a holder of a
 * copy made from it (an optimizer's f32 master of a bf16 parameter, autocast's bf16 cast of an
 * f32 one) tells that someone else wrote the buffer since the copy was made. */
static inline uint64_t kiln__storage_note_write(kiln__storage *s) {
    extern atomic_ullong kiln__write_clock;
    if (!s) return 0;
    uint64_t now = atomic_fetch_add_explicit(&kiln__write_clock, 1, memory_order_relaxed) + 1;
    atomic_store_explicit(&s->last_write, now, memory_order_relaxed);
    return now;
}
static inline uint64_t kiln__storage_last_write(kiln__storage *s) {
    return atomic_load_explicit(&s->last_write, memory_order_relaxed);
}

/* New storage with an uninitialised buffer of nbytes (from the device's caching allocator).
 * NULL on out-of-memory. */
kiln__storage *kiln__storage_new(kiln_device dev, size_t nbytes);
kiln__storage *kiln__storage_borrow(void *data, size_t nbytes, void (*on_release)(void *), void *ctx);
void kiln__storage_retain(kiln__storage *s);
/* Drops one owner. The last one frees the buffer at once if no op was ever queued on it, else
 * hands it to the engine's release hook, which frees it after the queued users. */
void kiln__storage_release(kiln__storage *s);
/* Frees the buffer now (the engine calls it once nothing uses the buffer any more). */
void kiln__storage_destroy(kiln__storage *s);
/* For a storage whose value nobody will read or write (a fused group's unwritten intermediate):
 * gives its memory back now, leaving data NULL until kiln__storage_ensure_data. Not for
 * borrowed storages. */
void kiln__storage_drop_data(kiln__storage *s);
/* Allocates a dropped storage's memory again (its value undefined); false when out of memory. */
bool kiln__storage_ensure_data(kiln__storage *s);

/* How core reaches up, through what the layers above register (never a call upward). A
 * device's buffer memory: the CPU's is core's own allocator and needs no registration; a
 * device backend registers its memory when it initialises, before the layers above can make
 * a tensor there (they reach a device only through its backend). m must stay valid. */
typedef struct kiln__device_memory {
    /* NULL on failure; *granted: the size of the block given (>= nbytes), passed to free */
    void *(*alloc)(void *ctx, size_t nbytes, size_t *granted);
    void (*free)(void *ctx, void *ptr, size_t granted);
    void *context;
    void (*empty_cache)(void *ctx); /* optional: return cached blocks to the device */
} kiln__device_memory;
void kiln__storage_register_memory(kiln_device dev, const kiln__device_memory *m);
/* Frees s once every queued op that uses it is done. The engine registers it when it starts,
 * before it queues any op, hence before any storage gets a var. */
typedef void (*kiln__storage_release_fn)(kiln__storage *s);
void kiln__storage_set_release_hook(kiln__storage_release_fn fn);

/* ---- tensors ----------------------------------------------------------------------------- */
typedef struct kiln__tensor {
    atomic_int refs; /* live handles */
    kiln_dtype dtype;
    int32_t ndim;
    kiln_device device;
    int64_t offset;  /* in elements */
    int64_t shape[KILN_MAX_DIMS];
    int64_t strides[KILN_MAX_DIMS]; /* in elements; 0 for broadcast dims */
    kiln__storage *storage;         /* NULL when poisoned at dispatch */
    kiln__error *err;               /* dispatch-time poison, shared */
    void *autodiff;                 /* autodiff metadata (owned by the autodiff layer) */
} kiln__tensor;

/* A tensor with a fresh dense buffer (NULL on OOM; no error is set). */
kiln__tensor *kiln__tensor_new(kiln_device dev, kiln_dtype dtype, int ndim, const int64_t *shape);
/* A view: same storage (retained), new shape/strides/offset. */
kiln__tensor *kiln__tensor_view(const kiln__tensor *base, int ndim, const int64_t *shape,
                                const int64_t *strides, int64_t offset);
/* A tensor that only carries an error (takes its own ref of err). */
kiln__tensor *kiln__tensor_poisoned(kiln__error *err);
/* A tensor of given metadata around an existing storage (retains it). */
kiln__tensor *kiln__tensor_wrap(kiln__storage *s, kiln_dtype dtype, int ndim, const int64_t *shape,
                                const int64_t *strides, int64_t offset);
/* Gives t, which its caller holds the only reference to, new metadata over the same storage
 * (an op's output taking over its input's object and buffer in place). */
void kiln__tensor_describe(kiln__tensor *t, kiln_dtype dtype, int ndim, const int64_t *shape, const int64_t *strides,
                           int64_t offset);
void kiln__tensor_retain(kiln__tensor *t);
void kiln__tensor_release(kiln__tensor *t);
int64_t kiln__tensor_numel(const kiln__tensor *t);
bool kiln__tensor_is_contiguous(const kiln__tensor *t);
/* Row-major dense strides (size-1 dims may have any stride): shared by tensors and op views. */
static inline bool kiln__layout_is_contiguous(int ndim, const int64_t *shape, const int64_t *strides) {
    int64_t expect = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        if (shape[d] == 1) continue;
        if (strides[d] != expect) return false;
        expect *= shape[d];
    }
    return true;
}
/* Single owner: one handle, one view on the storage, not borrowed: may be overwritten. */
bool kiln__tensor_is_exclusive(const kiln__tensor *t);
/* The element count of a shape in *numel, and the product of its non-zero dims (which bounds
 * its dense strides) in *extent unless NULL; false when a dim is negative or that product
 * overflows int64. */
bool kiln__shape_numel_checked(int ndim, const int64_t *shape, int64_t *numel, int64_t *extent);
/* Dense strides for a shape; returns numel, or -1 when it overflows int64. */
int64_t kiln__dense_strides(int ndim, const int64_t *shape, int64_t *strides);
/* Set autodiff metadata cleanup hook (autodiff layer registers it). */
typedef void (*kiln__meta_free_fn)(void *meta);
extern _Atomic(kiln__meta_free_fn) kiln__autodiff_free_hook;

/* ---- handles ----------------------------------------------------------------------------- */
/* The handle given out when no handle can be made: every later use reports out of memory. */
#define KILN__OOM_HANDLE_ID UINT64_MAX
/* Registers t (taking its reference) under a fresh handle. On handle-table exhaustion the
 * tensor is released and KILN_NONE returned with the last error set. */
kiln_tensor kiln__handle_new(kiln__tensor *t);
/* Borrowed lookup (no ownership moves). NULL and *err set if the handle is stale/invalid. */
kiln__tensor *kiln__handle_peek(kiln_tensor h, const char *op, kiln__error **err);
/* Consumes the handle: the caller now owns the tensor's reference. NULL + *err if stale. */
kiln__tensor *kiln__handle_take(kiln_tensor h, const char *op, kiln__error **err);
/* Slots handed out and not yet back in the shared free list (live handles, plus freed ones
 * waiting in a thread's batch): tests check that a thread's exit gives every batch back. */
uint32_t kiln__handle_slots_outstanding(void);

/* ---- fork ------------------------------------------------------------------------------- */
/* Registers (once) fork handlers that hold core's locks (the handle table's, the counters' and the CPU
 * allocator's) across fork(), so a child never inherits one held by a thread it lacks. A layer
 * above that drains work in its own prepare handler calls this before registering its own
 * handlers: prepare handlers run newest first, so core's locks are then taken last. */
void kiln__core_fork_guard(void);
void kiln__handle_fork_lock(bool lock);
void kiln__alloc_fork_lock(bool lock);

/* ---- environment ------------------------------------------------------------------------ */
/* Settings from the environment, parsed strictly (env.c): unset or empty gives fallback; a
 * value that is not wholly a number in [min, max] (or a switch: 0/1, true/false, yes/no, on/off)
 * gives fallback too, after one warning on stderr naming the variable. */
int64_t kiln__env_int(const char *name, int64_t min, int64_t fallback); /* max INT64_MAX */
int64_t kiln__env_int_range(const char *name, int64_t min, int64_t max, int64_t fallback);
double kiln__env_double(const char *name, double min, double max, double fallback);
bool kiln__env_flag(const char *name, bool fallback);

/* ---- files ------------------------------------------------------------------------------ */
/* Opens path for reading if it is a regular file (never blocking in open() on a FIFO): the
 * descriptor, with *size; or -1 with *why a static description of what is wrong. */
int kiln__open_regular(const char *path, uint64_t *size, const char **why);
/* The whole of the regular file at path, NUL-terminated (*size bytes without the NUL; free()
 * it), or NULL with the error reported for op: KILN_ERR_IO (cannot open or read),
 * KILN_ERR_CORRUPT (over max_bytes; `what` names the kind of file: "a vocabulary"),
 * KILN_ERR_OUT_OF_MEMORY. */
char *kiln__read_small_file(const char *path, uint64_t max_bytes, const char *what, const char *op, size_t *size);

/* ---- memory ------------------------------------------------------------------------------ */
/* The caching allocators' size classes (4 per power of two): the class of n (< 256) with its
 * rounded size, or -1 for a size too large to cache. */
#define KILN__ALLOC_CLASSES 256
int kiln__alloc_size_class(size_t n, size_t *rounded);
/* 64-byte aligned, from the cache; NULL on failure. *granted: the block's size (>= nbytes),
 * which kiln__cpu_free must be given back. */
void *kiln__cpu_alloc(size_t nbytes, size_t *granted);
void kiln__cpu_free(void *p, size_t granted);
bool kiln__alloc_should_fail(void); /* fault injection */
kiln_memory_stats kiln__memory_stats_snapshot(kiln_device dev); /* dev must be valid */
void kiln__memory_reset_peak(kiln_device dev);
void kiln__cpu_empty_cache(void); /* frees the host cache's blocks (kiln__storage_empty_cache) */
void kiln__stats_add_in_use(kiln_device dev, int64_t delta);
void kiln__stats_count_alloc(kiln_device dev, bool from_system);
/* Per-thread counts (core/counts.c), summed over the threads by kiln__stats_counts_sum. */
void kiln__stats_count_inplace(void);
void kiln__stats_count_tensor(int delta);
void kiln__stats_counts_sum(int64_t *live_tensors, int64_t *inplace);
void kiln__counts_fork_lock(bool lock);
/* A device allocator's cached bytes (the CPU's own cache counts itself). */
void kiln__stats_add_cached(kiln_device dev, int64_t delta);
/* Empties the cache of a device whose memory was registered (kiln__device_memory.empty_cache),
 * the host's included. Storages call the allocator, never the other way (alloc.c knows no
 * storage). */
void kiln__storage_empty_cache(kiln_device dev);

#endif
