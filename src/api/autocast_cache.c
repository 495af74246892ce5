/* Autocast's cast cache: a parameter's bf16/f16 copy, kept until the parameter changes.
 *
 * Why: under autocast every product casts its f32 weight down again, a full pass over the
 * weight (2.6 ms for each 2048 x 2048 one, 12 of them per MLP step) although the weight
 * changes only when an optimizer steps. PyTorch keeps such casts for the length of one
 * autocast region (`torch.autocast`'s cache, cleared when the outermost region exits); kiln
 * keeps them for as long as they are right: the copy hangs on the parameter's storage with the
 * storage's write stamp (kiln__storage_last_write: the write clock's value, renewed as each op
 * that writes the storage is queued: an optimizer step, kiln_copy_ into it, a load, a
 * collective), and is used only while that stamp is unchanged. The copy goes with the parameter's last owner.
 *
 * What is cached is what PyTorch caches: f32 leaves that require gradients (parameters), dense
 * and alone in their buffer, in kiln's own memory (not borrowed or mapped, never exported
 * through DLPack, whose consumer may write behind the engine). Each use is a new tracked cast
 * (its gradient reaches the parameter as the cast's would) over the kept values. An SGD step
 * rewrites the copy as it updates the parameter (kiln__autocast_copy_for_update,
 * below), so a training loop casts each weight once, not once per step.
 * KILN_AUTOCAST_CACHE=0 turns it off (every cast made again, as before). */
#include <pthread.h>
#include <stdatomic.h>

#include "api/autocast-impl.h"
#include "autodiff/autodiff-impl.h"
#include "kiln/tensor.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* cast_copy with its dtype and version */
static atomic_int enabled = -1;
static atomic_llong hits;

static bool cache_on(void) {
    int e = atomic_load_explicit(&enabled, memory_order_relaxed);
    if (e < 0) {
        e = kiln__env_flag("KILN_AUTOCAST_CACHE", true);
        atomic_store_explicit(&enabled, e, memory_order_relaxed);
    }
    return e;
}

/* t as the whole of its storage, dense, of element size `size` (then the storage is t). */
static bool whole_buffer(const kiln__tensor *t, size_t size) {
    int64_t n = kiln__tensor_numel(t);
    return t->storage && n > 0 && t->offset == 0 && kiln__tensor_is_contiguous(t) && (size_t)n * size == t->storage->nbytes;
}

/* x's storage when x may have a cached cast (see above), else NULL. */
static kiln__storage *cacheable(const kiln__tensor *x) {
    const kiln__ad_meta *m = x->autodiff;
    if (x->err || !m || !m->leaf || x->dtype != KILN_F32 || !whole_buffer(x, 4)) return NULL;
    return x->storage->borrowed || x->storage->exported ? NULL : x->storage;
}

/* The copy of s in dtype made at s's current version (a new owner reference), or NULL. */
static kiln__storage *lookup(kiln__storage *s, kiln_dtype dtype, uint64_t version) {
    pthread_mutex_lock(&lock);
    kiln__storage *copy = atomic_load_explicit(&s->cast_copy, memory_order_relaxed);
    bool hit = copy && s->cast_dtype == dtype && s->cast_version == version && !atomic_load(&copy->err);
    if (hit) kiln__storage_retain(copy);
    pthread_mutex_unlock(&lock);
    return hit ? copy : NULL;
}

/* Keeps out (the cast of s at version, just queued) as s's copy, when it is a whole buffer. */
static void remember(kiln__storage *s, uint64_t version, kiln_tensor out, kiln_dtype dtype) {
    kiln__error *err = NULL;
    kiln__tensor *y = kiln__handle_peek(out, "kiln_cast", &err);
    kiln__error_unref(err);
    if (!y || y->err || y->dtype != dtype || !whole_buffer(y, kiln__elsize(dtype))) return;
    kiln__storage_retain(y->storage);
    pthread_mutex_lock(&lock);
    kiln__storage *old = atomic_exchange_explicit(&s->cast_copy, y->storage, memory_order_acq_rel);
    s->cast_dtype = (uint8_t)dtype;
    s->cast_version = version;
    pthread_mutex_unlock(&lock);
    if (old) kiln__storage_release(old);
}

/* A tracked cast of t (an f32 leaf) whose values are copy's. Consumes t and copy. */
static kiln_tensor reuse(kiln_tensor t, kiln_dtype dtype, kiln__storage *copy) {
    KILN__OP_BEGIN("kiln_cast");
    kiln__tensor *x = kiln__arg(&c, t);
    kiln__tensor *y = x ? kiln__tensor_wrap(copy, dtype, x->ndim, x->shape, x->strides, 0) : NULL;
    kiln__storage_release(copy); /* (y holds its own) */
    if (!x || !y) {
        kiln__drop(2, x, y);
        return kiln__result(&c, c.err ? NULL : kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate a tensor"));
    }
    if (kiln__ad_active(1, &x)) return kiln__result(&c, kiln__ad_cast_reuse(&c, x, y));
    kiln__tensor_release(x); /* (no grad mode: an untracked cast) */
    return kiln__result(&c, y);
}

kiln_tensor kiln__autocast_cast(kiln_tensor t, kiln_dtype dtype) {
    kiln__error *err = NULL;
    kiln__tensor *x = cache_on() ? kiln__handle_peek(t, "kiln_cast", &err) : NULL;
    kiln__error_unref(err);
    kiln__storage *s = x ? cacheable(x) : NULL;
    if (!s) return kiln_cast(t, dtype);
    uint64_t version = kiln__storage_last_write(s);
    kiln__storage *copy = lookup(s, dtype, version);
    if (copy) {
        atomic_fetch_add_explicit(&hits, 1, memory_order_relaxed);
        return reuse(t, dtype, copy);
    }
    kiln__storage_retain(s); /* t may be the last handle: s outlives the cast that consumes it */
    kiln_tensor out = kiln_cast(t, dtype);
    remember(s, version, out, dtype);
    kiln__storage_release(s);
    return out;
}

int64_t kiln__autocast_cache_hits(void) { return atomic_load_explicit(&hits, memory_order_relaxed); }

/* ---- the optimizer's rewrite of the copy ----
 * Why: after each optimizer step the next forward pass cast every weight again (a pass reading
 * 4 and writing 2 bytes per element, 12 of them per MLP step) right after the update had the
 * new weights in its registers. The update now rounds them into the copy as it stores them. In
 * place, and only while the cache is the copy's one owner (as kiln's in-place rule asks): a
 * tensor still holding the copy keeps its values; queued readers of it run before the rewrite
 * (the engine's write-after-read order). An update that is skipped (a poisoned gradient) keeps
 * both the parameter and the copy as they were, so they stay in step. */
#define NO_VERSION UINT64_MAX /* a stamp no storage has: the copy is not s's cast now */

kiln__tensor *kiln__autocast_copy_for_update(kiln__tensor *p) {
    kiln__storage *s = p && cache_on() && kiln_device_kind(p->device) == KILN_KIND_CPU ? cacheable(p) : NULL;
    if (!s) return NULL;
    pthread_mutex_lock(&lock);
    kiln__storage *copy = atomic_load_explicit(&s->cast_copy, memory_order_relaxed);
    bool ok = copy && s->cast_dtype == KILN_BF16 && s->cast_version == kiln__storage_last_write(s) &&
              atomic_load_explicit(&copy->owners, memory_order_acquire) == 1 && !atomic_load(&copy->err);
    if (ok) {
        kiln__storage_retain(copy);
        s->cast_version = NO_VERSION;
    }
    pthread_mutex_unlock(&lock);
    if (!ok) return NULL;
    kiln__tensor *t = kiln__tensor_wrap(copy, KILN_BF16, p->ndim, p->shape, p->strides, 0);
    kiln__storage_release(copy); /* (t holds its own) */
    return t;
}

void kiln__autocast_copy_updated(kiln__tensor *p, kiln__tensor *copy, bool queued) {
    if (!copy) return;
    kiln__storage *s = p->storage;
    pthread_mutex_lock(&lock);
    if (queued && atomic_load_explicit(&s->cast_copy, memory_order_relaxed) == copy->storage)
        s->cast_version = kiln__storage_last_write(s);
    pthread_mutex_unlock(&lock);
    kiln__tensor_release(copy);
}
