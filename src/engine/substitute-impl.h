/* Between a stream's fusion window (fusion.c) and the substitution hold it carries
 * (substitute.c): the hold takes ops before fusion sees them and gives back, in order, the ops
 * it did not replace and the replacements. Every function here runs with the window locked. */
#ifndef KILN_ENGINE_SUBSTITUTE_IMPL_H
#define KILN_ENGINE_SUBSTITUTE_IMPL_H

#include "engine/fusion-impl.h"
#include "engine/substitute.h"

enum { KILN__SUBST_MEMBER = 1, KILN__SUBST_START = 2, KILN__SUBST_CO_START = 4 };
/* Read on every op without a lock: whether any pattern is registered and substitution is on,
 * and per opcode whether a pattern has it (START: as a node that reads only inputs, so an
 * instance of the pattern can begin with it; CO_START: as one of several such nodes of a
 * pattern, so an instance can gain it while another of its nodes is held already). */
extern atomic_bool kiln__subst_live;
extern _Atomic uint8_t kiln__subst_codes[KILN__OP_COUNT];

/* The cheap test that keeps an op off the hold's path: nothing held and no pattern starts with it. */
static inline bool kiln__subst_wants(const kiln__window *w, const kiln__op *op) {
    if (!atomic_load_explicit(&kiln__subst_live, memory_order_relaxed)) return false;
    return (w && atomic_load_explicit(&w->n_hold, memory_order_relaxed) > 0) ||
           (atomic_load_explicit(&kiln__subst_codes[op->code], memory_order_relaxed) & KILN__SUBST_START);
}

/* Holds op (true), or lets go of what is held (resolving it first) and returns false: the
 * caller then routes op as it would without substitution. Called by the window's owner.
 * *let_go_of: set when ops held before were given to the window or queued (the caller then
 * keeps the stream within its bounds, as after a flush). */
bool kiln__subst_hold_op(kiln__window *w, const kiln__op *op, bool *let_go_of);
/* s is a storage a held op uses (its mark stays while the group is flushed). */
bool kiln__subst_uses(const kiln__window *w, const kiln__storage *s);
/* Replaces what matches in the hold and gives every op back to the window in order
 * (kiln__window_admit); owner: called by the stream's own thread. */
void kiln__subst_resolve(kiln__window *w, bool owner);
/* The release hook for s: true when a held op uses s (freed after it, once resolved). */
bool kiln__subst_defer_free(kiln__window *w, kiln__storage *s, bool owner);
/* fork()'s child: forgets what is held (the parent's work). */
void kiln__subst_forget(kiln__window *w);

/* fusion.c's side. Routes op as kiln__fusion_submit would: into the group, or queued after
 * the group is flushed. */
void kiln__window_admit(kiln__window *w, const kiln__op *op, bool owner);
/* Frees s after the group (its last users are in the group or queued before it). */
void kiln__window_add_dead(kiln__window *w, kiln__storage *s, bool owner);
/* s is one of the group's storages. */
bool kiln__window_holds(const kiln__window *w, const kiln__storage *s);
/* n_held after the hold let go. */
void kiln__window_recount_held(kiln__window *w);

#endif
