/* Pinned staging buffers for copies from host memory: a copy to the device copies its source
 * into a mapped CL_MEM_ALLOC_HOST_PTR buffer (page-locked where the driver can), queues the
 * write from it and returns without waiting; the buffer goes back to a small per-device cache
 * when the write's event completes (an event callback). Up to STAGING_LIMIT bytes are staged at
 * once; a copy past it (or one the driver refuses a buffer for) waits for its write instead. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend-impl.h"

#if KILN_HAVE_OPENCL
#include "backend/opencl/opencl-impl.h"

#define STAGING_LIMIT ((size_t)64 << 20)
#define STAGING_MIN ((size_t)4 << 10)

struct kiln__opencl_staging {
    kiln__opencl_device *d;
    cl_mem mem;
    void *ptr; /* mapped for the buffer's life */
    size_t size;
    struct kiln__opencl_staging *next;
};

static size_t round_size(size_t n) {
    size_t s = STAGING_MIN;
    while (s < n) s *= 2;
    return s;
}

/* A free staging buffer of at least n bytes (smallest first fit), or a new one; NULL past the
 * limit or when the driver refuses. */
static kiln__opencl_staging *staging_get(kiln__opencl_device *d, size_t n) {
    size_t size = round_size(n);
    pthread_mutex_lock(&d->staging_lock);
    kiln__opencl_staging **best = NULL;
    for (kiln__opencl_staging **p = &d->staging_free; *p; p = &(*p)->next)
        if ((*p)->size >= size && (!best || (*p)->size < (*best)->size)) best = p;
    kiln__opencl_staging *s = best ? *best : NULL;
    if (s) *best = s->next;
    bool room = !s && d->staging_bytes + size <= STAGING_LIMIT;
    if (room) d->staging_bytes += size;
    pthread_mutex_unlock(&d->staging_lock);
    if (s || !room) return s;
    cl_int err = CL_SUCCESS;
    s = malloc(sizeof *s);
    cl_mem mem = s ? clCreateBuffer(d->context, CL_MEM_READ_ONLY | CL_MEM_ALLOC_HOST_PTR, size, NULL, &err) : NULL;
    void *ptr = mem && err == CL_SUCCESS
                    ? clEnqueueMapBuffer(d->transfer, mem, CL_TRUE, CL_MAP_WRITE, 0, size, 0, NULL, NULL, &err)
                    : NULL;
    if (!ptr || err != CL_SUCCESS) {
        if (mem) clReleaseMemObject(mem);
        free(s);
        pthread_mutex_lock(&d->staging_lock);
        d->staging_bytes -= size;
        pthread_mutex_unlock(&d->staging_lock);
        return NULL;
    }
    *s = (kiln__opencl_staging){.d = d, .mem = mem, .ptr = ptr, .size = size};
    return s;
}

static void staging_put(kiln__opencl_staging *s) {
    kiln__opencl_device *d = s->d;
    pthread_mutex_lock(&d->staging_lock);
    s->next = d->staging_free;
    d->staging_free = s;
    pthread_mutex_unlock(&d->staging_lock);
}

static void CL_CALLBACK write_done(cl_event ev, cl_int status, void *arg) { staging_put(arg); }

kiln_status kiln__opencl_write_staged(kiln__opencl_device *d, cl_command_queue q, cl_mem dst, size_t offset, const void *src,
                                  size_t n) {
    kiln__opencl_staging *s = staging_get(d, n);
    cl_event ev = NULL;
    cl_int err;
    if (!s) { /* no staging room: the write waits for itself (src is the caller's memory) */
        err = clEnqueueWriteBuffer(q, dst, CL_FALSE, offset, n, src, 0, NULL, &ev);
        if (err != CL_SUCCESS) return kiln__opencl_fail(err, "clEnqueueWriteBuffer");
        return kiln__opencl_wait(ev, "a copy from the host to an OpenCL device");
    }
    memcpy(s->ptr, src, n);
    err = clEnqueueWriteBuffer(q, dst, CL_FALSE, offset, n, s->ptr, 0, NULL, &ev);
    if (err == CL_SUCCESS && (err = clSetEventCallback(ev, CL_COMPLETE, write_done, s)) != CL_SUCCESS) {
        clWaitForEvents(1, &ev); /* (no callback: the buffer is free once the write is done) */
        staging_put(s);
        err = CL_SUCCESS;
    }
    if (err != CL_SUCCESS) {
        staging_put(s);
        return kiln__opencl_fail(err, "clEnqueueWriteBuffer");
    }
    return kiln__opencl_done(d, ev, "a copy from the host to an OpenCL device");
}

size_t kiln__opencl_staging_count(kiln__opencl_device *d, size_t *bytes_free) {
    pthread_mutex_lock(&d->staging_lock);
    size_t made = d->staging_bytes, free_bytes = 0;
    for (kiln__opencl_staging *s = d->staging_free; s; s = s->next) free_bytes += s->size;
    pthread_mutex_unlock(&d->staging_lock);
    if (bytes_free) *bytes_free = free_bytes;
    return made;
}

#endif
