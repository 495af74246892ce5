/* Storages: refcounted buffers shared by views. Core reaches the layers above it only through
 * what they register here: each device's buffer memory (its backend) and the release of a
 * storage that queued ops still use (the engine). */
#include <stdlib.h>

#include "core/core-impl.h"

/* Host memory is core's own caching allocator, so a CPU storage needs nothing registered. */
static void *host_alloc(void *ctx, size_t nbytes, size_t *granted) { return kiln__cpu_alloc(nbytes, granted); }
static void host_free(void *ctx, void *ptr, size_t granted) { kiln__cpu_free(ptr, granted); }
static void host_empty_cache(void *ctx) { kiln__cpu_empty_cache(); }
static const kiln__device_memory host_memory = {.alloc = host_alloc, .free = host_free, .empty_cache = host_empty_cache};

static _Atomic(const kiln__device_memory *) device_memory[KILN__DEVICE_SLOTS] = {[0] = &host_memory};
static _Atomic(kiln__storage_release_fn) release_hook;

void kiln__storage_register_memory(kiln_device dev, const kiln__device_memory *m) {
    int slot = kiln__device_slot(dev);
    if (ALWAYS(slot > 0)) atomic_store_explicit(&device_memory[slot], m, memory_order_release);
}

void kiln__storage_set_release_hook(kiln__storage_release_fn fn) {
    atomic_store_explicit(&release_hook, fn, memory_order_release);
}

static const kiln__device_memory *memory_of(kiln_device dev) {
    int slot = kiln__device_slot(dev);
    return slot >= 0 ? atomic_load_explicit(&device_memory[slot], memory_order_acquire) : NULL;
}

void kiln__storage_empty_cache(kiln_device dev) {
    const kiln__device_memory *m = memory_of(dev);
    if (m && m->empty_cache) m->empty_cache(m->context);
}

/* (a field added to kiln__storage must be set in kiln__storage_new too, which does not zero) */
_Static_assert(sizeof(void *) != 8 || sizeof(kiln__storage) == 104, "kiln__storage_new sets each field");

atomic_ullong kiln__write_clock;

kiln__storage *kiln__storage_new(kiln_device dev, size_t nbytes) {
    const kiln__device_memory *m = memory_of(dev);
    if (!m) return NULL;
    /* malloc and every field set, not calloc: glibc's calloc skips the thread's cache of small
     * blocks (as tensor.c's tensor_alloc says), a twentieth of a tiny op's dispatch */
    kiln__storage *s = malloc(sizeof *s);
    if (!s) return NULL;
    s->data = m->alloc(m->context, nbytes, &s->granted);
    if (!s->data) {
        free(s);
        return NULL;
    }
    atomic_init(&s->owners, 1);
    s->nbytes = nbytes;
    s->device = dev;
    s->borrowed = false;
    s->exported = false;
    s->cast_dtype = 0;
    s->on_release = NULL;
    s->release_ctx = NULL;
    atomic_init(&s->err, NULL);
    s->var = NULL;
    s->window = NULL;
    atomic_init(&s->last_write, 0);
    atomic_init(&s->cast_copy, NULL);
    s->cast_version = 0;
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
    if (!s || atomic_fetch_sub_explicit(&s->owners, 1, memory_order_acq_rel) != 1) return;
    /* autocast's copy goes with the last owner (it is one of the copy's owners, no more) */
    kiln__storage *copy = atomic_exchange_explicit(&s->cast_copy, NULL, memory_order_acq_rel);
    if (copy) kiln__storage_release(copy);
    /* Only the engine sets s->var, and only after registering its hook: a storage that no op
     * was ever queued on goes at once, and one that has a var finds the hook (the acquire
     * orders this read after the engine's registration). */
    if (!atomic_load_explicit((struct kiln__var *_Atomic *)&s->var, memory_order_acquire)) {
        kiln__storage_destroy(s);
        return;
    }
    kiln__storage_release_fn hook = atomic_load_explicit(&release_hook, memory_order_relaxed);
    if (ALWAYS(hook))
        hook(s);
    else
        kiln__storage_destroy(s); /* (unreachable: see above) */
}

void kiln__storage_destroy(kiln__storage *s) {
    (void)NEVER(atomic_load(&s->cast_copy) != NULL); /* (released with the last owner) */
    if (s->borrowed) {
        if (s->on_release) s->on_release(s->release_ctx);
    } else if (s->data) { /* (NULL: dropped) */
        const kiln__device_memory *m = memory_of(s->device);
        if (ALWAYS(m)) m->free(m->context, s->data, s->granted);
        kiln__stats_add_in_use(s->device, -(int64_t)s->nbytes);
    }
    kiln__error_unref(atomic_load(&s->err));
    free(s);
}

void kiln__storage_drop_data(kiln__storage *s) {
    const kiln__device_memory *m = memory_of(s->device);
    if (NEVER(s->borrowed || !m) || !s->data || s->nbytes == 0) return;
    m->free(m->context, s->data, s->granted);
    kiln__stats_add_in_use(s->device, -(int64_t)s->nbytes);
    s->data = NULL;
}

bool kiln__storage_ensure_data(kiln__storage *s) {
    const kiln__device_memory *m = memory_of(s->device);
    if (s->data || s->borrowed || s->nbytes == 0) return true;
    if (NEVER(!m) || !(s->data = m->alloc(m->context, s->nbytes, &s->granted))) return false;
    kiln__stats_add_in_use(s->device, (int64_t)s->nbytes);
    return true;
}
