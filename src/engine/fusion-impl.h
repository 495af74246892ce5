/* Inside fusion (fusion.c, fusion_join.c): a stream's window and the rules for joining it. */
#ifndef KILN_ENGINE_FUSION_IMPL_H
#define KILN_ENGINE_FUSION_IMPL_H

#include "engine/fusion.h"
#include "engine/node.h"
#include "ir/expr.h"

#define MAX_STORAGES KILN__NODE_MAX_VARS

typedef struct {
    kiln__storage *s;
    kiln__view map;  /* the first access's element mapping */
    bool same;       /* every access so far used map */
    bool written;
    bool read_first; /* read before the group first wrote it: its old value is loaded */
} window_storage;

/* Windows are never freed: a thread that read a storage's mark may lock the window after its
 * stream is gone (it then finds it empty or reused, and a flush is harmless either way). */
struct kiln__window {
    atomic_bool lock;     /* a spinlock (engine/spinlock.h) */
    kiln__stream *stream; /* owner; NULL while spare */
    struct kiln__window *next_all, *next_spare;
    kiln__fused *g;       /* the group being built (g->n_ops ops) */
    atomic_int n_held;    /* g->n_ops + n_dead, readable without the lock: only the owner raises it */
    int n_st, n_dead;
    int64_t bytes;        /* of the storages the group writes: counted against the bounded queue */
    bool closed;          /* the group has its reduction: only epilogue ops may join now */
    window_storage st[MAX_STORAGES];
    kiln__storage *dead[MAX_STORAGES]; /* released while held: freed after the group */
    struct kiln__subst_hold *hold; /* substitute.c: ops held back before fusion (NULL: none yet) */
    atomic_int n_hold;             /* the ops in hold, readable without the lock */
};

/* One more op or deferred free held (w->lock held). Every write of n_held happens under the
 * lock, so a plain store does, not a locked add (one locked instruction fewer per op). */
static inline void kiln__window_count_held(kiln__window *w) {
    int n = atomic_load_explicit(&w->n_held, memory_order_relaxed);
    atomic_store_explicit(&w->n_held, n + 1, memory_order_release);
}

/* An elementwise op the IR and the CPU interpreter handle (shapes, devices, layout). */
bool kiln__fusion_op_fusable(const kiln__op *op);
/* A 2-d MATMUL on the CPU that may start a group as its producer (fusion_matmul.c). */
bool kiln__fusion_matmul_fusable(const kiln__op *op);
/* Starts w's empty group with such a MATMUL (w->lock held); false when it does not fit. */
bool kiln__window_try_join_matmul(kiln__window *w, const kiln__op *op);
/* A reduction that may end a group (opcode only). */
bool kiln__fusion_is_reduction(kiln__opcode code);
/* Adds op to w's group (w->lock held), marking its storages; false when it does not fit. */
bool kiln__window_try_join(kiln__window *w, const kiln__op *op);
/* Adds a reduction of a value w's group wrote as the group's end (w->lock held). */
bool kiln__window_try_join_reduce(kiln__window *w, const kiln__op *op);

#endif
