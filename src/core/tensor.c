/* Tensor objects: metadata (shape, strides, offset, dtype) over a shared storage. */
#include <stdlib.h>
#include <string.h>

#include "core/core-impl.h"

_Atomic(kiln__meta_free_fn) kiln__autodiff_free_hook;

bool kiln__shape_numel_checked(int ndim, const int64_t *shape, int64_t *numel, int64_t *extent) {
    /* zeros are skipped so the answer does not depend on where a 0 sits: dense strides are
     * suffix products of the other dims, and they must fit too */
    int64_t n = 1;
    bool empty = false;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return false;
        if (shape[d] == 0) empty = true;
        else if (__builtin_mul_overflow(n, shape[d], &n)) return false;
    }
    *numel = empty ? 0 : n;
    if (extent) *extent = n;
    return true;
}

int64_t kiln__dense_strides(int ndim, const int64_t *shape, int64_t *strides) {
    int64_t n = 1;
    bool overflow = false;
    for (int d = ndim - 1; d >= 0; d--) {
        strides[d] = n;
        overflow |= __builtin_mul_overflow(n, shape[d], &n);
    }
    return overflow || n < 0 ? -1 : n;
}

/* A tensor object with one reference and nothing else set but its pointers (the caller sets
 * the rest). malloc, never calloc (nor malloc + memset, which the compiler turns into calloc):
 * glibc's calloc skips the thread's cache of small blocks, a quarter of a small op's dispatch. */
static kiln__tensor *tensor_alloc(void) {
    if (kiln__alloc_should_fail()) return NULL;
    kiln__tensor *t = malloc(sizeof *t);
    if (!t) return NULL;
    atomic_init(&t->refs, 1);
    t->storage = NULL;
    t->err = NULL;
    t->autodiff = NULL;
    kiln__stats_count_tensor(1);
    return t;
}

void kiln__tensor_describe(kiln__tensor *t, kiln_dtype dtype, int ndim, const int64_t *shape, const int64_t *strides,
                           int64_t offset) {
    t->dtype = dtype;
    t->ndim = ndim;
    t->offset = offset;
    for (int d = 0; d < KILN_MAX_DIMS; d++) { /* (the dims past ndim are zero) */
        t->shape[d] = d < ndim ? shape[d] : 0;
        t->strides[d] = d < ndim ? strides[d] : 0;
    }
}

kiln__tensor *kiln__tensor_wrap(kiln__storage *s, kiln_dtype dtype, int ndim, const int64_t *shape,
                                const int64_t *strides, int64_t offset) {
    kiln__tensor *t = tensor_alloc();
    if (!t) return NULL;
    t->device = s->device;
    kiln__tensor_describe(t, dtype, ndim, shape, strides, offset);
    kiln__storage_retain(s);
    t->storage = s;
    return t;
}

kiln__tensor *kiln__tensor_new(kiln_device dev, kiln_dtype dtype, int ndim, const int64_t *shape) {
    int64_t strides[KILN_MAX_DIMS];
    int64_t n = kiln__dense_strides(ndim, shape, strides), bytes;
    if (n < 0 || __builtin_mul_overflow(n, (int64_t)kiln__elsize(dtype), &bytes)) return NULL;
    kiln__storage *s = kiln__storage_new(dev, (size_t)bytes);
    if (!s) return NULL;
    kiln__tensor *t = kiln__tensor_wrap(s, dtype, ndim, shape, strides, 0);
    kiln__storage_release(s); /* the tensor holds the only owner */
    return t;
}

kiln__tensor *kiln__tensor_view(const kiln__tensor *base, int ndim, const int64_t *shape,
                                const int64_t *strides, int64_t offset) {
    return kiln__tensor_wrap(base->storage, base->dtype, ndim, shape, strides, offset);
}

kiln__tensor *kiln__tensor_poisoned(kiln__error *err) {
    kiln__tensor *t = calloc(1, sizeof *t); /* never fault-injected: poison must always exist */
    if (!t) return NULL;
    atomic_init(&t->refs, 1);
    kiln__stats_count_tensor(1);
    t->err = kiln__error_ref(err);
    return t;
}

void kiln__tensor_retain(kiln__tensor *t) { atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed); }

void kiln__tensor_release(kiln__tensor *t) {
    if (!t || atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1) return;
    if (t->autodiff) atomic_load_explicit(&kiln__autodiff_free_hook, memory_order_relaxed)(t->autodiff);
    kiln__storage_release(t->storage);
    kiln__error_unref(t->err);
    kiln__stats_count_tensor(-1);
    free(t);
}

int64_t kiln__tensor_numel(const kiln__tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        if (NEVER(__builtin_mul_overflow(n, t->shape[d], &n))) return -1; /* the op layer checks every shape */
    return n;
}

bool kiln__tensor_is_contiguous(const kiln__tensor *t) { return kiln__layout_is_contiguous(t->ndim, t->shape, t->strides); }

bool kiln__tensor_is_exclusive(const kiln__tensor *t) {
    return t->storage && !t->err && !t->storage->borrowed &&
           atomic_load_explicit(&t->refs, memory_order_acquire) == 1 &&
           atomic_load_explicit(&t->storage->owners, memory_order_acquire) == 1;
}
