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
    struct kiln__subst_hold *hold; /* the hold's (kiln__window_hold): ops held back before fusion (NULL: none yet) */
    atomic_int n_hold;             /* the ops in hold, readable without the lock */
};

/* The substitution hold a window may carry ahead of its group. It sits above fusion
 * (substitute.c): it registers these calls once (kiln__fusion_set_hold) before any op can be
 * held, and fusion reaches it only through them, never by name. Each runs with w locked. */
typedef struct kiln__window_hold {
    /* Holds op (true), or lets go of what is held (resolving it first) and returns false: the
     * caller then routes op as it would without substitution. Called by the window's owner.
     * *let_go_of: set when ops held before were given to the window or queued (the caller then
     * keeps the stream within its bounds, as after a flush). */
    bool (*hold_op)(kiln__window *w, const kiln__op *op, bool *let_go_of);
    /* Replaces what matches in the hold and gives every op back to the window in order
     * (kiln__window_admit); owner: called by the stream's own thread. Called when w->hold. */
    void (*resolve)(kiln__window *w, bool owner);
    /* s is a storage a held op uses (its mark stays while the group is flushed). */
    bool (*uses)(const kiln__window *w, const kiln__storage *s);
    /* The release hook for s: true when a held op uses s (freed after it, once resolved). */
    bool (*defer_free)(kiln__window *w, kiln__storage *s, bool owner);
    /* fork()'s child: forgets what is held (the parent's work). */
    void (*forget)(kiln__window *w);
} kiln__window_hold;
void kiln__fusion_set_hold(const kiln__window_hold *hold);

/* Which ops the hold wants, set by it and read on every op without a lock: whether it takes
 * ops at all (a pattern is registered and substitution is on), and per opcode whether a pattern
 * has it (START: as a node that reads only inputs, so an instance of the pattern can begin with
 * it; CO_START: as one of several such nodes of a pattern, so an instance can gain it while
 * another of its nodes is held already). */
enum { KILN__HOLD_MEMBER = 1, KILN__HOLD_START = 2, KILN__HOLD_CO_START = 4 };
extern atomic_bool kiln__hold_live;
extern _Atomic uint8_t kiln__hold_codes[KILN__OP_COUNT];

/* The cheap test that keeps an op off the hold's path: nothing held and no pattern starts with it. */
static inline bool kiln__window_hold_wants(const kiln__window *w, const kiln__op *op) {
    if (!atomic_load_explicit(&kiln__hold_live, memory_order_relaxed)) return false;
    return (w && atomic_load_explicit(&w->n_hold, memory_order_relaxed) > 0) ||
           (atomic_load_explicit(&kiln__hold_codes[op->code], memory_order_relaxed) & KILN__HOLD_START);
}

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

/* For the hold (it gives ops back to the window; w->lock held). Routes op as kiln__fusion_submit
 * would: into the group, or queued after the group is flushed; owner: called by the stream's
 * own thread. */
void kiln__window_admit(kiln__window *w, const kiln__op *op, bool owner);
/* Frees s after the group (its last users are in the group or queued before it). */
void kiln__window_add_dead(kiln__window *w, kiln__storage *s, bool owner);
/* s is one of the group's storages. */
bool kiln__window_holds(const kiln__window *w, const kiln__storage *s);
/* n_held after the hold let go. */
void kiln__window_recount_held(kiln__window *w);

#endif
