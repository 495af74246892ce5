/* The OpenCL backend's devices: discovery (every device of every platform, with
 * KILN_OPENCL_DEVICE=k making the platforms' device k kiln's opencl:0), one context per
 * platform shared by its devices (so a buffer of one is a kernel argument, a copy source and
 * an event source for another; KILN_OPENCL_SHARED_CONTEXT=0 gives each device its own, as a
 * driver that refuses a context of several devices does), the devices' queues (the streams',
 * stream.c), the vtable, and blocking host copies. Without OpenCL in the build every entry
 * reports no device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend-impl.h"

#if !KILN_HAVE_OPENCL

static int opencl_device_count(void) { return 0; }

const kiln__backend_reg kiln__opencl_backend_reg = {
    .name = "opencl",
    .kind = KILN_KIND_OPENCL,
    .device_count = opencl_device_count,
};

#else

#include "backend/opencl/opencl-impl.h"

void kiln__opencl_memory_init(kiln__opencl_device *d); /* memory.c */

static struct {
    pthread_once_t once;
    int count;
    cl_platform_id platform[KILN_MAX_DEVICES];
    cl_device_id id[KILN_MAX_DEVICES];
    pthread_mutex_t lock;
    kiln__opencl_device *dev[KILN_MAX_DEVICES];
    bool failed[KILN_MAX_DEVICES];
    cl_context context[KILN_MAX_DEVICES]; /* made for the platform, not yet taken by the device */
} cl = {.once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER};

static void discover(void) {
    cl_platform_id plats[16];
    cl_uint np = 0;
    if (clGetPlatformIDs(16, plats, &np) != CL_SUCCESS) return;
    cl_platform_id all_p[KILN_MAX_DEVICES];
    cl_device_id all_d[KILN_MAX_DEVICES];
    int n = 0;
    for (cl_uint p = 0; p < np && p < 16; p++) {
        cl_device_id ids[KILN_MAX_DEVICES];
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, KILN_MAX_DEVICES, ids, &nd) != CL_SUCCESS) continue;
        for (cl_uint i = 0; i < nd && i < KILN_MAX_DEVICES && n < KILN_MAX_DEVICES; i++) {
            all_p[n] = plats[p];
            all_d[n++] = ids[i];
        }
    }
    int first = (int)kiln__env_int_range("KILN_OPENCL_DEVICE", 0, KILN_MAX_DEVICES - 1, 0);
    if (first >= n) first = 0;
    for (int i = 0; i < n; i++) { /* the chosen device first, the others in platform order */
        int k = (first + i) % n;
        cl.platform[i] = all_p[k];
        cl.id[i] = all_d[k];
    }
    cl.count = n;
}

static int opencl_device_count(void) {
    pthread_once(&cl.once, discover);
    return cl.count;
}

static void describe(cl_device_id id, kiln__device_desc *out) {
    memset(out, 0, sizeof *out);
    cl_ulong mem = 0;
    cl_uint cu = 0;
    clGetDeviceInfo(id, CL_DEVICE_NAME, sizeof out->name - 1, out->name, NULL);
    clGetDeviceInfo(id, CL_DRIVER_VERSION, sizeof out->driver - 1, out->driver, NULL);
    clGetDeviceInfo(id, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
    clGetDeviceInfo(id, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL);
    out->global_memory = mem;
    out->compute_units = (int)cu;
}

static bool opencl_describe(int index, kiln__device_desc *out) {
    if (index < 0 || index >= opencl_device_count()) return false;
    describe(cl.id[index], out);
    return true;
}

/* A blocking read on the transfer queue, after the last write of src only. */
static kiln_status opencl_copy_to_host(void *ctx, void *dst, const kiln__storage *src, size_t offset, size_t nbytes) {
    kiln__opencl_device *d = ctx;
    if (!nbytes) return KILN_OK;
    cl_event deps[1 + KILN__OPENCL_READERS];
    int n = kiln__opencl_buf_deps(d, src->data, false, d->transfer_qid, deps);
    cl_int err = clEnqueueReadBuffer(d->transfer, kiln__opencl_mem(src), CL_TRUE, offset, nbytes, dst, (cl_uint)n, n ? deps : NULL, NULL);
    for (int i = 0; i < n; i++) clReleaseEvent(deps[i]);
    return err == CL_SUCCESS ? KILN_OK : kiln__opencl_fail(err, "clEnqueueReadBuffer");
}

/* A blocking write after every queued user of dst: once it returns they are all done. */
static kiln_status opencl_copy_from_host(void *ctx, kiln__storage *dst, size_t offset, const void *src, size_t nbytes) {
    kiln__opencl_device *d = ctx;
    if (!nbytes) return KILN_OK;
    cl_event deps[1 + KILN__OPENCL_READERS];
    int n = kiln__opencl_buf_deps(d, dst->data, true, d->transfer_qid, deps);
    cl_int err = clEnqueueWriteBuffer(d->transfer, kiln__opencl_mem(dst), CL_TRUE, offset, nbytes, src, (cl_uint)n, n ? deps : NULL, NULL);
    for (int i = 0; i < n; i++) clReleaseEvent(deps[i]);
    if (err == CL_SUCCESS) kiln__opencl_buf_forget(d, dst->data);
    return err == CL_SUCCESS ? KILN_OK : kiln__opencl_fail(err, "clEnqueueWriteBuffer");
}

static kiln_status opencl_synchronize(void *ctx) { return kiln__opencl_streams_finish(ctx); }

/* The device's context (a reference it owns; cl.lock held): the one made for its platform's
 * devices when one of them opened first, or a new one with all of them (or only this one, when
 * sharing is off or the driver refuses several). */
static cl_context open_context(int index) {
    cl_context ctx = cl.context[index];
    if (ctx) {
        cl.context[index] = NULL;
        return ctx;
    }
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)cl.platform[index], 0};
    cl_int err = CL_SUCCESS;
    if (kiln__env_flag("KILN_OPENCL_SHARED_CONTEXT", true)) {
        cl_device_id ids[KILN_MAX_DEVICES];
        int who[KILN_MAX_DEVICES], n = 0;
        for (int k = 0; k < cl.count; k++)
            if (cl.platform[k] == cl.platform[index] && !cl.dev[k] && !cl.failed[k]) who[n] = k, ids[n++] = cl.id[k];
        if (n > 1) {
            ctx = clCreateContext(props, (cl_uint)n, ids, NULL, NULL, &err);
            if (ctx && err == CL_SUCCESS) {
                for (int i = 0; i < n; i++)
                    if (who[i] != index) clRetainContext(cl.context[who[i]] = ctx);
                return ctx;
            }
            if (ctx) clReleaseContext(ctx);
        }
    }
    ctx = clCreateContext(props, 1, &cl.id[index], NULL, NULL, &err);
    return err == CL_SUCCESS ? ctx : NULL;
}

/* other's buffers live in d's context: d's kernels and copies use them as they are. */
static bool opencl_shares_memory(void *ctx, kiln_device other) {
    kiln__opencl_device *d = ctx, *o = kiln_device_kind(other) == KILN_KIND_OPENCL ? kiln__opencl_device_of(other) : NULL;
    return o && o->context == d->context;
}

static void device_free(kiln__opencl_device *d) {
    kiln__opencl_streams_free(d);
    if (d->context) clReleaseContext(d->context);
    free(d);
}

static kiln__opencl_device *device_open(int index) {
    kiln__opencl_device *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->index = index;
    d->device = kiln_opencl_device(index);
    d->platform = cl.platform[index];
    d->id = cl.id[index];
    describe(d->id, &d->desc);
    cl_device_fp_config fp64 = 0;
    clGetDeviceInfo(d->id, CL_DEVICE_DOUBLE_FP_CONFIG, sizeof fp64, &fp64, NULL);
    d->fp64 = fp64 != 0;
    cl_device_type type = 0;
    d->cpu = clGetDeviceInfo(d->id, CL_DEVICE_TYPE, sizeof type, &type, NULL) == CL_SUCCESS && (type & CL_DEVICE_TYPE_CPU);
    d->context = open_context(index);
    if (!d->context || !kiln__opencl_streams_init(d)) {
        device_free(d);
        return NULL;
    }
    pthread_mutex_init(&d->prog_lock, NULL);
    d->backend = (kiln__backend){.name = "opencl", .device = d->device, .context = d,
                                 .copy_to_host = opencl_copy_to_host, .copy_from_host = opencl_copy_from_host,
                                 .synchronize = opencl_synchronize, .shares_memory = opencl_shares_memory};
    kiln__opencl_register_elementwise(d->backend.kernels);
    kiln__opencl_register_reduce(d->backend.kernels);
    kiln__opencl_register_matmul(d->backend.kernels);
    kiln__opencl_register_index(d->backend.kernels);
    kiln__opencl_register_optim(d->backend.kernels);
    kiln__opencl_register_random(d->backend.kernels);
    kiln__opencl_register_scan(d->backend.kernels);
    kiln__opencl_register_nn(d->backend.kernels);
    kiln__opencl_register_sort(d->backend.kernels);
    kiln__opencl_register_intmod(d->backend.kernels);
    kiln__opencl_register_custom(d->backend.kernels);
    kiln__opencl_streams_wrap(d); /* (last: every kernel runs on its stream's queue) */
    kiln__opencl_memory_init(d); /* registers the memory with core: from here on storages can be made */
    return d;
}

/* Devices stay open for the process (storages and cached programs point into them); the
 * ICD loader and the driver own their memory at exit. */
static const kiln__backend *opencl_device(int index) {
    if (index < 0 || index >= opencl_device_count()) return NULL;
    kiln__opencl_device *d = __atomic_load_n(&cl.dev[index], __ATOMIC_ACQUIRE);
    if (d) return &d->backend;
    pthread_mutex_lock(&cl.lock);
    d = cl.dev[index];
    if (!d && !cl.failed[index]) {
        d = device_open(index);
        cl.failed[index] = !d;
        kiln__backend_exit_hold_register(); /* after the driver's own exit handlers (loaded now) */
        __atomic_store_n(&cl.dev[index], d, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&cl.lock);
    return d ? &d->backend : NULL;
}

static kiln_status opencl_synchronize_all(void) {
    kiln_status st = KILN_OK;
    for (int i = 0; i < KILN_MAX_DEVICES; i++) {
        kiln__opencl_device *d = __atomic_load_n(&cl.dev[i], __ATOMIC_ACQUIRE);
        if (d && opencl_synchronize(d) != KILN_OK && st == KILN_OK) st = KILN_ERR_DEVICE;
    }
    return st;
}

kiln__opencl_device *kiln__opencl_device_of(kiln_device dev) {
    int i = kiln_device_index(dev);
    return i < KILN_MAX_DEVICES ? __atomic_load_n(&cl.dev[i], __ATOMIC_ACQUIRE) : NULL;
}

static void opencl_quiesce(uint64_t deadline_ns) {
    for (int i = 0; i < KILN_MAX_DEVICES; i++) {
        kiln__opencl_device *d = __atomic_load_n(&cl.dev[i], __ATOMIC_ACQUIRE);
        if (d) kiln__opencl_streams_quiesce(d, deadline_ns);
    }
}

static void opencl_stream_end(int stream_id) {
    for (int i = 0; i < KILN_MAX_DEVICES; i++) {
        kiln__opencl_device *d = __atomic_load_n(&cl.dev[i], __ATOMIC_ACQUIRE);
        if (d) kiln__opencl_stream_end(d, stream_id);
    }
}

const kiln__backend_reg kiln__opencl_backend_reg = {
    .name = "opencl",
    .kind = KILN_KIND_OPENCL,
    .device_count = opencl_device_count,
    .device = opencl_device,
    .describe = opencl_describe,
    .synchronize_all = opencl_synchronize_all,
    .stream_end = opencl_stream_end,
    .quiesce = opencl_quiesce,
};

#endif
