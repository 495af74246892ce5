/* The OpenCL caching allocator: cl_mem buffers in the CPU allocator's size classes, freed
 * buffers kept per class for reuse up to KILN_CACHE_LIMIT_MB (default 1 GiB per device),
 * KILN_NO_CACHING=1 to release every buffer at once. The same fault injection as the CPU's
 * (kiln_debug_fail_alloc_after) and the same stats; a request past the device's global
 * memory fails (NULL: the op reports out of memory) instead of reaching the driver. */
#include <stdlib.h>

#include "backend/backend-impl.h"

#if KILN_HAVE_OPENCL
#include "backend/opencl/opencl-impl.h"

#define DEFAULT_CACHE_LIMIT ((size_t)1 << 30)

static bool caching(void) {
    return !kiln__env_flag("KILN_NO_CACHING", false);
}

static void *opencl_alloc(void *ctx, size_t nbytes, size_t *granted) {
    kiln__opencl_device *d = ctx;
    *granted = nbytes; /* (the buffer keeps its own size) */
    if (kiln__alloc_should_fail()) return NULL;
    size_t rounded = nbytes;
    int cls = caching() ? kiln__alloc_size_class(nbytes ? nbytes : 1, &rounded) : -1;
    if (rounded == 0) rounded = 64;
    if (cls >= 0) {
        pthread_mutex_lock(&d->mem_lock);
        kiln__opencl_buf *b = d->free_class[cls];
        if (b) {
            d->free_class[cls] = b->next;
            d->cached_bytes -= b->size;
        }
        pthread_mutex_unlock(&d->mem_lock);
        if (b) {
            kiln__stats_add_cached(d->device, -(int64_t)b->size);
            kiln__stats_count_alloc(d->device, false);
            atomic_fetch_add(&d->in_use, b->size);
            return b;
        }
    }
    uint64_t used = atomic_fetch_add(&d->in_use, rounded) + rounded;
    if (d->desc.global_memory && used > d->desc.global_memory) {
        atomic_fetch_sub(&d->in_use, rounded);
        return NULL;
    }
    kiln__opencl_buf *b = malloc(sizeof *b);
    cl_int err = CL_SUCCESS;
    cl_mem m = b ? clCreateBuffer(d->context, CL_MEM_READ_WRITE, rounded, NULL, &err) : NULL;
    if (!m || err != CL_SUCCESS) {
        free(b);
        atomic_fetch_sub(&d->in_use, rounded);
        return NULL;
    }
    *b = (kiln__opencl_buf){.mem = m, .size = rounded}; /* no events: nothing used it yet */
    kiln__stats_count_alloc(d->device, true);
    return b;
}

static void opencl_free(void *ctx, void *ptr, size_t nbytes) {
    kiln__opencl_device *d = ctx;
    kiln__opencl_buf *b = ptr;
    if (!b) return;
    atomic_fetch_sub(&d->in_use, b->size);
    size_t rounded;
    int cls = caching() ? kiln__alloc_size_class(nbytes ? nbytes : 1, &rounded) : -1;
    if (cls >= 0) {
        pthread_mutex_lock(&d->mem_lock);
        bool keep = d->cached_bytes + b->size <= d->cache_limit;
        if (keep) {
            b->next = d->free_class[cls];
            d->free_class[cls] = b;
            d->cached_bytes += b->size;
        }
        pthread_mutex_unlock(&d->mem_lock);
        if (keep) {
            kiln__stats_add_cached(d->device, (int64_t)b->size);
            return;
        }
    }
    kiln__opencl_buf_forget(d, b);
    clReleaseMemObject(b->mem); /* the driver keeps it alive for commands still using it */
    free(b);
}

static void opencl_empty_cache(void *ctx) {
    kiln__opencl_device *d = ctx;
    pthread_mutex_lock(&d->mem_lock);
    size_t freed = d->cached_bytes;
    for (int c = 0; c < KILN__ALLOC_CLASSES; c++) {
        for (kiln__opencl_buf *b = d->free_class[c], *next; b; b = next) {
            next = b->next;
            kiln__opencl_buf_forget(d, b); /* (dep_lock after mem_lock, never the other way) */
            clReleaseMemObject(b->mem);
            free(b);
        }
        d->free_class[c] = NULL;
    }
    d->cached_bytes = 0;
    pthread_mutex_unlock(&d->mem_lock);
    kiln__stats_add_cached(d->device, -(int64_t)freed);
}

void kiln__opencl_memory_init(kiln__opencl_device *d); /* device.c calls it once per device */
void kiln__opencl_memory_init(kiln__opencl_device *d) {
    pthread_mutex_init(&d->mem_lock, NULL);
    d->cache_limit = (size_t)kiln__env_int_range("KILN_CACHE_LIMIT_MB", 0, (int64_t)(SIZE_MAX >> 21),
                                                 (int64_t)(DEFAULT_CACHE_LIMIT >> 20)) << 20;
    d->memory = (kiln__device_memory){.alloc = opencl_alloc, .free = opencl_free, .empty_cache = opencl_empty_cache, .context = d};
    kiln__storage_register_memory(d->device, &d->memory);
}

#endif
