/* Per-storage dependency tracking (MXNet's "variables"): each storage orders the ops that
 * read or write it. Ops hold one "wait" count per storage they use plus one for dispatch;
 * the op becomes ready when every storage has granted it access. */
#include <stdlib.h>

#include "engine/engine-async.h"
#include "engine/node.h"
#include "engine/spinlock.h"

typedef struct kiln__var_wait {
    struct kiln__var_wait *next;
    kiln__node *node;
    bool write;
} var_wait;

/* Freed vars kept for the next storages: every op output gets one and loses it with its
 * storage, and a calloc and free per op were a tenth of a tiny op's dispatch (callgrind). One
 * list for all threads (a var is often freed on another thread than the one that made it),
 * under a spinlock held for two stores; bounded, the rest go back to malloc. */
#define SPARE_VARS 256
static struct {
    atomic_bool lock;
    int n;
    kiln__var *v[SPARE_VARS];
} spare;

void kiln__var_spares_fork_lock(bool lock) {
    if (lock)
        kiln__spin_lock(&spare.lock);
    else
        kiln__spin_unlock(&spare.lock);
}

static kiln__var *var_new(void) {
    kiln__var *v = NULL;
    kiln__spin_lock(&spare.lock);
    if (spare.n) v = spare.v[--spare.n];
    kiln__spin_unlock(&spare.lock);
    if (!v) return calloc(1, sizeof(kiln__var)); /* (unlocked) */
    *v = (kiln__var){0};
    return v;
}

kiln__var *kiln__var_make(kiln__storage *s) {
    kiln__var *v = atomic_load_explicit((kiln__var *_Atomic *)&s->var, memory_order_acquire);
    if (v) return v;
    kiln__var *fresh = var_new();
    if (!fresh) return NULL;
    kiln__var *expect = NULL;
    if (atomic_compare_exchange_strong((kiln__var *_Atomic *)&s->var, &expect, fresh)) return fresh;
    free(fresh);
    return expect;
}

void kiln__var_free(kiln__var *v) {
    if (!v) return;
    kiln__spin_lock(&spare.lock);
    bool kept = spare.n < SPARE_VARS;
    if (kept) spare.v[spare.n++] = v;
    kiln__spin_unlock(&spare.lock);
    if (!kept) free(v);
}

bool kiln__var_idle(kiln__var *v) {
    kiln__spin_lock(&v->lock);
    bool idle = !v->active_write && v->active_reads == 0 && !v->head;
    kiln__spin_unlock(&v->lock);
    return idle;
}

/* Returns true if access was granted at once; false if the op was queued (or, on
 * out-of-memory for the queue entry, the caller must run the op synchronously). */
bool kiln__var_append(kiln__var *v, kiln__node *n, bool write, bool *oom) {
    var_wait *w = NULL;
    kiln__spin_lock(&v->lock);
    bool grant = !v->head && !v->active_write && (!write || v->active_reads == 0);
    if (!grant) { /* (the entry is taken outside the lock, which others may spin on) */
        kiln__spin_unlock(&v->lock);
        if (!(w = malloc(sizeof *w))) {
            *oom = true;
            return false;
        }
        kiln__spin_lock(&v->lock);
        grant = !v->head && !v->active_write && (!write || v->active_reads == 0);
    }
    if (grant) {
        if (write)
            v->active_write = true;
        else
            v->active_reads++;
    } else {
        w->next = NULL;
        w->node = n;
        w->write = write;
        if (v->tail)
            v->tail->next = w;
        else
            v->head = w;
        v->tail = w;
    }
    kiln__spin_unlock(&v->lock);
    if (grant) free(w); /* (granted meanwhile: not needed after all; NULL when never taken) */
    return grant;
}

/* Marks one granted access done and grants what may run next: the reads up to the next
 * write, or that write once no read is active. Granted nodes go to `granted`. */
int kiln__var_complete(kiln__var *v, bool write, kiln__node **granted, int cap) {
    int n = 0;
    var_wait *done = NULL;
    kiln__spin_lock(&v->lock);
    if (write)
        v->active_write = false;
    else
        v->active_reads--;
    while (v->head && !v->active_write && n < cap) {
        var_wait *w = v->head;
        if (w->write && v->active_reads > 0) break;
        v->head = w->next;
        if (!v->head) v->tail = NULL;
        if (w->write)
            v->active_write = true;
        else
            v->active_reads++;
        granted[n++] = w->node;
        w->next = done;
        done = w;
        if (v->active_write) break;
    }
    kiln__spin_unlock(&v->lock);
    while (done) { /* (freed outside the lock, which a spinning thread may be waiting for) */
        var_wait *next = done->next;
        free(done);
        done = next;
    }
    return n;
}
