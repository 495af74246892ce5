/* Storages: refcounted buffers shared by views. The last owner hands the buffer to the
 * engine, which frees it after every queued op that uses it has run. */
#include <stdlib.h>

#include "backend/backend-impl.h"
#include "core/core-impl.h"
#include "engine/engine-impl.h" /* for now: the engine frees storages */

kiln__storage *kiln__storage_new(kiln_device dev, size_t nbytes) {
    const kiln__backend *be = kiln__backend_get(dev);
    if (!be) return NULL;
    kiln__storage *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->data = be->alloc(be->context, nbytes);
    if (!s->data) {
        free(s);
        return NULL;
    }
    atomic_init(&s->owners, 1);
    s->nbytes = nbytes;
    s->device = dev;
    kiln__stats_add_in_use(dev, (int64_t)nbytes);
    return s;
}

kiln__storage *kiln__storage_borrow(void *data, size_t nbytes, void (*on_release)(void *), void *ctx) {
    if (kiln__alloc_should_fail()) return NULL;
    kiln__storage *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    atomic_init(&s->owners, 1);
    s->data = data;
    s->nbytes = nbytes;
    s->device = KILN_CPU;
    s->borrowed = true;
    s->on_release = on_release;
    s->release_ctx = ctx;
    return s;
}

void kiln__storage_retain(kiln__storage *s) { atomic_fetch_add_explicit(&s->owners, 1, memory_order_relaxed); }

void kiln__storage_release(kiln__storage *s) {
    if (s && atomic_fetch_sub_explicit(&s->owners, 1, memory_order_acq_rel) == 1) kiln__engine_free_storage(s);
}

void kiln__storage_destroy(kiln__storage *s) {
    if (s->borrowed) {
        if (s->on_release) s->on_release(s->release_ctx);
    } else {
        const kiln__backend *be = kiln__backend_get(s->device);
        if (ALWAYS(be)) be->free(be->context, s->data, s->nbytes);
        kiln__stats_add_in_use(s->device, -(int64_t)s->nbytes);
    }
    kiln__error_unref(atomic_load(&s->err));
    free(s);
}
