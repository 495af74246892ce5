/* kiln core: status codes, dtypes, devices, shapes, tensor handles, errors, memory stats.
 *
 * Example (every public call records the caller's file:line through a macro, so an error
 * message can say where it came from):
 *
 *   #include <kiln.h>
 *   kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3), 42);
 *   kiln_tensor y = kiln_exp(kiln_ref(x));        // x is kept: it was ref'd
 *   kiln_tensor s = kiln_sum(y);                  // y is consumed
 *   float v;
 *   if (kiln_into_scalar(s, &v) != KILN_OK)       // the first blocking read
 *       fprintf(stderr, "%s\n", kiln_last_error());
 *   kiln_release(x);
 */
#ifndef KILN_CORE_H
#define KILN_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(KILN_SHARED_BUILD)
#define KILN_API __attribute__((visibility("default")))
#else
#define KILN_API
#endif

/* ---- status codes: one X-macro makes the enum and its string table ---------------------- */
#define KILN_STATUS_MAP(X)                                                   \
    X(DONE, 1, "no more data")                                               \
    X(OK, 0, "ok")                                                           \
    X(ERR_INVALID_ARGUMENT, -1, "invalid argument")                          \
    X(ERR_NULL, -2, "null pointer")                                          \
    X(ERR_SHAPE, -3, "shape mismatch")                                       \
    X(ERR_DTYPE, -4, "unsupported or mismatched dtype")                      \
    X(ERR_DEVICE, -5, "device mismatch or device unavailable")               \
    X(ERR_STALE_HANDLE, -6, "use of a consumed or released tensor handle")   \
    X(ERR_OUT_OF_MEMORY, -7, "out of memory")                                \
    X(ERR_INDEX, -8, "index out of range")                                   \
    X(ERR_IO, -9, "input/output error")                                      \
    X(ERR_CORRUPT, -10, "corrupt or malformed data")                         \
    X(ERR_UNSUPPORTED, -11, "unsupported operation")                         \
    X(ERR_KERNEL, -12, "kernel failed")                                      \
    X(ERR_NO_GRAPH, -13, "tensor has no autodiff graph")                     \
    X(ERR_BUFFER_SIZE, -14, "destination buffer has the wrong size")         \
    X(ERR_INTERNAL, -15, "internal error")

typedef enum {
#define KILN__STATUS_ENUM(name, code, text) KILN_##name = code,
    KILN_STATUS_MAP(KILN__STATUS_ENUM)
#undef KILN__STATUS_ENUM
} kiln_status;

KILN_API const char *kiln_status_str(kiln_status status);

/* ---- dtypes and devices ------------------------------------------------------------------ */
typedef enum {
    KILN_F32 = 0,
    KILN_F64,
    KILN_I32,
    KILN_I64,
    KILN_BOOL,
    KILN_F16, /* storage type: CPU ops compute in f32 */
    KILN_BF16,
    KILN_DTYPE_COUNT
} kiln_dtype;

KILN_API const char *kiln_dtype_name(kiln_dtype dtype);
KILN_API size_t kiln_dtype_size(kiln_dtype dtype); /* 0 for an invalid dtype */

/* A device is a kind plus an index, packed in one integer: the kind in bits 8 and up, the
 * index (0..KILN_MAX_DEVICES-1) in the low bits. KILN_CPU, KILN_CUDA and KILN_OPENCL are
 * device 0 of their kind; kiln_opencl_device(i) names another. KILN_OPENCL is the default
 * OpenCL device: the platforms' device KILN_OPENCL_DEVICE (an index into the list of all
 * OpenCL devices, 0 when unset) becomes kiln's OpenCL device 0. KILN_DEVICE_COUNT is not a
 * device (an always-invalid value, kept for code that used it as a sentinel). KILN_CUDA has no
 * backend yet: it is a kind with no devices.
 *
 * KILN_DEVICE_KINDS is the one list of device kinds: X(NAME, kind number, id, index0) gives
 * KILN_KIND_NAME and KILN_NAME, the name "id" (device 0 is "id:0" when index0 is 1, else
 * "id"), and the backend registration src/backend/registry.c expands from it
 * (kiln__<id>_backend_reg). A new backend adds its line here (DESIGN.md, section 10). */
#define KILN_MAX_DEVICES 16
#define KILN_DEVICE_KINDS(X) \
    X(CPU, 0, cpu, 0)        \
    X(CUDA, 1, cuda, 0)      \
    X(OPENCL, 2, opencl, 1)
typedef enum {
#define KILN__DEVICE_KIND_ENUM(NAME, kind, id, index0) KILN_KIND_##NAME = kind,
    KILN_DEVICE_KINDS(KILN__DEVICE_KIND_ENUM)
#undef KILN__DEVICE_KIND_ENUM
    KILN_KIND_COUNT
} kiln_device_kind;
typedef enum {
#define KILN__DEVICE_ENUM(NAME, kind, id, index0) KILN_##NAME = (kind) << 8,
    KILN_DEVICE_KINDS(KILN__DEVICE_ENUM)
#undef KILN__DEVICE_ENUM
    KILN_DEVICE_COUNT = KILN_KIND_COUNT << 8
} kiln_device;
#define kiln_opencl_device(i) ((kiln_device)(KILN_OPENCL | ((int)(i) & 0xff)))
#define kiln_device_kind(d) ((kiln_device_kind)((int)(d) >> 8))
#define kiln_device_index(d) ((int)(d) & 0xff)
/* "cpu", "opencl:0", ..., or "invalid". */
KILN_API const char *kiln_device_name(kiln_device device);
/* Parses "cpu", "opencl", "opencl:1", "cuda": KILN_OK and *out, or KILN_ERR_INVALID_ARGUMENT. */
KILN_API kiln_status kiln_device_parse(const char *name, kiln_device *out);

/* The devices of a kind this process can use (1 for KILN_KIND_CPU; 0 for OpenCL in a build
 * without it or on a machine without an OpenCL platform; 0 for an invalid kind). */
KILN_API int kiln_device_count(kiln_device_kind kind);
typedef struct {
    kiln_device device;
    char name[128];       /* the driver's name for it */
    char driver[64];      /* driver version ("" for the CPU) */
    uint64_t global_memory; /* bytes */
    int compute_units;
} kiln_device_info;
/* Describes an available device: KILN_OK and *info, or KILN_ERR_DEVICE.
 *
 *   for (int i = 0; i < kiln_device_count(KILN_KIND_OPENCL); i++) {
 *       kiln_device_info info;
 *       if (kiln_device_info_get(kiln_opencl_device(i), &info) == KILN_OK)
 *           printf("%s: %s, %d compute units\n", kiln_device_name(info.device), info.name, info.compute_units);
 *   }
 */
KILN_API kiln_status kiln_device_info_get(kiln_device device, kiln_device_info *info);

/* ---- shapes and dim lists (up to 8 dims; passed by value) -------------------------------- */
#define KILN_MAX_DIMS 8

typedef struct {
    int32_t ndim;
    int64_t dims[KILN_MAX_DIMS];
} kiln_shape;

typedef struct {
    int32_t n;
    int32_t d[KILN_MAX_DIMS];
} kiln_dims;

#define KILN__NARGS_I64(...) ((int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define KILN__NARGS_I32(...) ((int32_t)(sizeof((int32_t[]){__VA_ARGS__}) / sizeof(int32_t)))
/* KILN_SHAPE(128, 2048); a 0-d (scalar) shape is KILN_SCALAR_SHAPE. */
#define KILN_SHAPE(...) ((kiln_shape){KILN__NARGS_I64(__VA_ARGS__), {__VA_ARGS__}})
#define KILN_SCALAR_SHAPE ((kiln_shape){0, {0}})
/* KILN_DIMS(0, 2): a list of dimensions (negative counts from the end). */
#define KILN_DIMS(...) ((kiln_dims){KILN__NARGS_I32(__VA_ARGS__), {__VA_ARGS__}})
#define KILN_ALL_DIMS ((kiln_dims){-1, {0}})

/* -1 when ndim or a dim is out of range, or the product of the non-zero dims overflows int64 */
KILN_API int64_t kiln_shape_numel(kiln_shape shape);

/* ---- tensor handles ----------------------------------------------------------------------- */
/* A handle is a generation-checked slot: using it after it was consumed or released is a
 * reported error (KILN_ERR_STALE_HANDLE naming the op that consumed it), never UB. One handle
 * passed twice to one call, kiln_mul(x, x), is one tensor used twice (consumed once).
 * The all-zero handle KILN_NONE means "no tensor" (e.g. linear without bias). */
typedef struct {
    uint64_t id;
} kiln_tensor;
#define KILN_NONE ((kiln_tensor){0})

/* A new handle to the same tensor: O(1), never a copy. Does not consume t (that is its point).
 * Every other exception to "ops consume their tensor arguments" says so beside its function
 * in a line "Does not consume ...": metadata queries, kiln_tensor_status, kiln_print /
 * kiln_to_string, kiln_require_grad, kiln_grad, kiln_init, class_weights, the parameter
 * groups of optimizers, kiln_module_param (gives a new handle). */
KILN_API kiln_tensor kiln_ref(kiln_tensor t);
/* Drops one handle. The buffer is freed once no handle and no queued op uses it. */
KILN_API kiln_status kiln_release(kiln_tensor t);
KILN_API bool kiln_is_valid(kiln_tensor t); /* live handle (poisoned tensors are live) */

/* Metadata queries do not consume and never block (shapes are known at dispatch). */
KILN_API kiln_shape kiln_tensor_shape(kiln_tensor t); /* ndim -1 for an invalid handle */
KILN_API int64_t kiln_tensor_dim(kiln_tensor t, int dim); /* -1 on error */
KILN_API int kiln_tensor_ndim(kiln_tensor t);
KILN_API int64_t kiln_tensor_numel(kiln_tensor t);
KILN_API kiln_dtype kiln_tensor_dtype(kiln_tensor t);
KILN_API kiln_device kiln_tensor_device(kiln_tensor t);
KILN_API bool kiln_tensor_is_contiguous(kiln_tensor t);
/* The error a tensor carries (KILN_OK if none known yet); does not wait for queued ops. */
KILN_API kiln_status kiln_tensor_status(kiln_tensor t);

/* ---- errors -------------------------------------------------------------------------------- */
/* The message of the last failed call on this thread: "<op> at <file>:<line>: <detail>". */
KILN_API const char *kiln_last_error(void);
KILN_API kiln_status kiln_last_status(void);
KILN_API void kiln_clear_error(void);

/* Records the caller's location for the next kiln calls on this thread, for bindings from
 * other languages: they call it, then the plain functions (define KILN_NO_CALL_SITE_MACROS to
 * include the headers without the macros below). C callers never need it: each public call
 * in a header's "call sites" list is a macro, kiln_exp(x) -> kiln__exp_at(x, __FILE__,
 * __LINE__), and that wrapper records the location once the arguments have been evaluated,
 * so kiln_sum(helper()) names the kiln_sum line even when helper makes kiln calls itself. */
KILN_API void kiln_set_call_site(const char *file, int line);
/* Declare the wrapper of one entry of a "call sites" list (X, or X0 for no parameters); the
 * library defines them (src/api/call_site.h). The plain functions keep their names and ABI. */
#define KILN__AT_PARAMS(...) (__VA_ARGS__, const char *kiln__file, int kiln__line)
#define KILN__AT_DECLARE(ret, name, params, args) KILN_API ret kiln__##name##_at KILN__AT_PARAMS params;
#define KILN__AT_DECLARE0(ret, name) KILN_API ret kiln__##name##_at(const char *kiln__file, int kiln__line);
#define KILN__FREE_AT_DECLARE(type, name) KILN_API void kiln__##name##_at(type *obj, const char *kiln__file, int kiln__line);

/* ---- memory ------------------------------------------------------------------------------ */
typedef struct {
    uint64_t bytes_in_use;   /* held by live storages */
    uint64_t peak_bytes;     /* max of bytes_in_use since the last reset */
    uint64_t bytes_cached;   /* freed, kept by the caching allocator for reuse */
    uint64_t alloc_count;    /* storages created (cache hits included) */
    uint64_t system_allocs;  /* allocations that reached the system allocator */
    uint64_t inplace_reuses; /* op outputs written into a consumed input's buffer */
    uint64_t live_tensors;   /* tensor objects alive (views included) */
} kiln_memory_stats;

/* Waits for queued work first (a read), so the numbers match the program as written. */
KILN_API kiln_memory_stats kiln_memory_stats_get(kiln_device device);
KILN_API void kiln_memory_reset_peak(kiln_device device);
KILN_API void kiln_memory_empty_cache(kiln_device device); /* return cached blocks to the system */

/* Leak check: the number of live tensor handles plus gradient containers not yet freed
 * (kiln_grads_free); when there are any, each is written to stderr with the public call and
 * file:line that made it ("tensor f32[2, 3] made by kiln_randn at app.c:12"). With
 * KILN_LEAK_CHECK=1 in the environment kiln runs it at exit, and a leak makes the process
 * exit with status 1 (kiln's tests run so). Live handles include the ones your modules and
 * optimizers still hold: free them first. */
KILN_API int64_t kiln_leak_check(void);

/* Fault injection for tests: make the Nth allocation from now (1-based) fail; 0 disables. */
KILN_API void kiln_debug_fail_alloc_after(int64_t n);

/* ---- threads ------------------------------------------------------------------------------ */
KILN_API int kiln_num_threads(void);
KILN_API void kiln_set_num_threads(int n);

/* ---- call sites ------------------------------------------------------------------------- */
/* The calls that record the caller's file:line, one line each: X(return type, name without
 * kiln_, (parameters), (arguments)); each header has such a list. A new entry also needs its
 * macro below the list, and the library defines its wrapper from the list (src/api/). */
#define KILN_CORE_API(X) \
    X(kiln_tensor, ref, (kiln_tensor t), (t)) \
    X(kiln_status, release, (kiln_tensor t), (t))
KILN_CORE_API(KILN__AT_DECLARE)

#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
/* As in an installed header: a compiler error in a call through these macros (a wrong
 * number of arguments, say) is reported at the caller's line, not here. */
#pragma GCC system_header
#define KILN__AT(name, ...) kiln__##name##_at(__VA_ARGS__, __FILE__, __LINE__)
#define KILN__AT0(name) kiln__##name##_at(__FILE__, __LINE__)
#define kiln_ref(...) KILN__AT(ref, __VA_ARGS__)
#define kiln_release(...) KILN__AT(release, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif
#endif
