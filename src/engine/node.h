/* An op record as the asynchronous engine holds it while queued. */
#ifndef KILN_ENGINE_NODE_H
#define KILN_ENGINE_NODE_H

#include "engine/engine-async.h"

#define KILN__NODE_MAX_VARS 16 /* a fused group's distinct storages; one op has at most 6 */

typedef struct kiln__node {
    kiln__op op;
    atomic_int wait; /* grants still missing + 1 for dispatch */
    kiln__stream *stream;
    kiln__event *event;
    struct kiln__epoch *epoch; /* the kiln_sync_all epoch it was counted in */
    kiln__storage *free_target; /* a deferred free: destroy this storage when granted */
    struct kiln__node *next_ready;
    int64_t bytes;
    int n_vars;
    struct {
        kiln__var *var;
        bool write;
    } vars[KILN__NODE_MAX_VARS];
    uint64_t t_dispatch; /* profiler timestamps (ns) */
} kiln__node;

/* s's dependency state, made on first use (NULL when out of memory). */
kiln__var *kiln__var_make(kiln__storage *s);
static inline kiln__var *kiln__var_of(kiln__storage *s) {
    kiln__var *v = atomic_load_explicit((kiln__var *_Atomic *)&s->var, memory_order_acquire);
    return KILN__LIKELY(v != NULL) ? v : kiln__var_make(s);
}
void kiln__var_free(kiln__var *v);
/* fork(): the list of freed vars locked before, unlocked in parent and child. */
void kiln__var_spares_fork_lock(bool lock);
bool kiln__var_idle(kiln__var *v);
bool kiln__var_append(kiln__var *v, kiln__node *n, bool write, bool *oom);
int kiln__var_complete(kiln__var *v, bool write, kiln__node **granted, int cap);

#endif
