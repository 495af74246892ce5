/* Substitution of queued ops: a layer above may register a pattern (a small DAG of opcodes
 * over input slots) with a builder of the one op that computes the same result; each stream's
 * window then holds back ops that may belong to a pattern, and when the pattern is complete
 * and no handle or other queued op reads one of its intermediates, queues the builder's op in
 * place of the pattern's ops. It runs before fusion (what it does not replace goes on to
 * fusion unchanged). KILN_SUBSTITUTE=0 turns it off. */
#ifndef KILN_ENGINE_SUBSTITUTE_H
#define KILN_ENGINE_SUBSTITUTE_H

#include "engine/engine-impl.h"

#define KILN__PAT_MAX_NODES 12
#define KILN__PAT_MAX_SLOTS 6
#define KILN__PAT_SLOT(k) (-1 - (k)) /* a node input that is the pattern's slot k */

enum {
    KILN__PAT_LAST_DIM = 1, /* a reduction (p.i[0] dim mask) or softmax (p.i[0] dim) over the last dim only */
    KILN__PAT_CONST = 2,    /* in[1] is a scalar equal to `constant` (not a slot) */
};

typedef struct kiln__pat_node {
    kiln__opcode code;
    int8_t n_in;
    int8_t in[2]; /* >= 0: an earlier node's result; KILN__PAT_SLOT(k): slot k */
    uint8_t flags;
    double constant;
} kiln__pat_node;

/* A complete match: the op whose result the pattern gives (its output is the replacement's),
 * and each slot's operand as the pattern's ops read it (a tensor slot: the view, perhaps
 * broadcast; a scalar slot: storage NULL and the value in .scalar). */
typedef struct kiln__subst_match {
    const kiln__op *root;
    kiln__view slot[KILN__PAT_MAX_SLOTS];
} kiln__subst_match;

typedef struct kiln__pattern {
    const char *name; /* for errors and the counters */
    int n_nodes, n_slots;
    uint32_t scalar_slots; /* bit k: slot k is a scalar operand, not a tensor */
    uint32_t in_place_slots; /* bit k: the replacement may write over slot k's memory (same view) */
    kiln__pat_node nodes[KILN__PAT_MAX_NODES]; /* topological; the last is the result */
    /* Fills rep's code, name, inputs and params from m (the engine sets its output, call site
     * and stream); false when the replacement does not support these shapes or dtypes. Runs
     * under the stream's window lock: it must not call kiln. */
    bool (*build)(const kiln__subst_match *m, kiln__op *rep, const void *ctx);
    const void *ctx;
} kiln__pattern;

/* Whether p is well formed (false: `why` says what is wrong); kiln__subst_register checks too. */
bool kiln__subst_check(const kiln__pattern *p, char *why, size_t why_size);
/* Checks p and adds a copy of it (thread-safe). On a bad pattern: false, and `why` says what is
 * wrong. Patterns are tried largest first. */
bool kiln__subst_register(const kiln__pattern *p, char *why, size_t why_size);
/* Whether substitution runs (some pattern is registered and KILN_SUBSTITUTE is not 0). */
bool kiln__subst_on(void);
/* Test hook: turns it on or off for the whole process (as KILN_SUBSTITUTE does). */
void kiln__subst_set_enabled(bool on);

/* Counters since the last reset: replacements queued, and complete matches refused because an
 * intermediate was still read elsewhere, or the builder refused the shapes. */
typedef struct kiln__subst_stats {
    int64_t substituted, refused_consumer, refused_shape;
} kiln__subst_stats;
kiln__subst_stats kiln__subst_stats_get(void);
void kiln__subst_stats_reset(void);

#endif
