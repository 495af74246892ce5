/* Autodiff internals: leaf records, backward nodes, and the recording API the op layer
 * calls when an input is tracked. */
#ifndef KILN_AUTODIFF_IMPL_H
#define KILN_AUTODIFF_IMPL_H

#include "kiln/autodiff.h"
#include "ops/conv-impl.h"
#include "ops/ops-impl.h"

/* Identity of a leaf: gradients are keyed by it, so a graph never keeps the leaf's
 * tensor (or its buffer) alive. */
/* A gradient hook (kiln_tensor_register_hook), in registration order. */
typedef struct kiln__ad_hook {
    kiln_grad_hook_fn fn;
    void *ctx;
    kiln__site site; /* the registering call */
    struct kiln__ad_hook *next;
} kiln__ad_hook;

typedef struct kiln__ad_leaf {
    atomic_int refs;
    kiln__ad_hook *hooks; /* run on its total gradient at the end of a walk */
} kiln__ad_leaf;

struct kiln__ad_node;

/* What a tensor object carries when it is tracked (kiln__tensor.autodiff). */
typedef struct kiln__ad_meta {
    kiln__ad_leaf *leaf;         /* set for leaves */
    struct kiln__ad_node *node;  /* the op that produced it, for non-leaves */
} kiln__ad_meta;

/* One input of a recorded op: where its gradient goes, and its metadata (gradients are
 * summed back to its shape when it was broadcast, and cast back to its dtype). */
typedef struct {
    struct kiln__ad_node *node; /* producer (a reference), or NULL */
    kiln__ad_leaf *leaf;        /* leaf (a reference), or NULL */
    kiln_dtype dtype;
    int32_t ndim;
    int64_t shape[KILN_MAX_DIMS];
} kiln__ad_slot;

typedef struct kiln__ad_node kiln__ad_node;

/* What making a node's output again costs (the automatic policy, recompute.c): element
 * operations, the saved tensors it reads (bit k: saved[k], which may themselves be lazy), and the
 * inputs it takes from their producers, recomputed in turn (bit i: slot i). */
typedef struct {
    double ops;
    uint32_t saved, inputs;
} kiln__ad_work;

typedef struct kiln__ad_rule {
    const char *name;
    /* Gradients of the node's inputs from g, the gradient of its output (consumed). Writes
     * an owned tensor or NULL (no gradient) to grads[0..n_slots). Runs with grad mode off.
     * Shapes may be broadcast versions of the inputs' shapes: the walker sums them back. */
    void (*backward)(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *g, kiln__tensor **grads);
    /* The automatic policy: the node's output made again from what plan names (read through
     * kiln__ad_saved_now and kiln__ad_input_now), and plan, false where this node cannot. Both
     * NULL for ops whose outputs are always kept (matrix products, convolutions, attention). */
    kiln__tensor *(*recompute)(kiln__opctx *c, const kiln__ad_node *n);
    bool (*plan)(const kiln__ad_node *n, kiln__ad_work *w);
} kiln__ad_rule;

#define KILN__AD_MAX_SAVED 4 /* a custom op saves its 3 inputs and its output */

struct kiln__ad_node {
    atomic_int refs; /* output metas, child nodes, the backward walk */
    const kiln__ad_rule *rule;
    kiln__opcode code; /* forward kernel, for rules shared by a family */
    int64_t pi[8];     /* op parameters the derivative needs (dims, sizes, ...) */
    double pf[4];
    kiln__tensor *saved[KILN__AD_MAX_SAVED]; /* untracked aliases, released once used */
    /* (automatic checkpointing) saved[i] not kept: it is the output of this producer (a
     * reference), recomputed from what the producer saved just before this node's rule runs */
    struct kiln__ad_node *lazy[KILN__AD_MAX_SAVED];
    kiln_dtype out_dtype;
    int32_t out_ndim;
    int64_t out_shape[KILN_MAX_DIMS];
    /* backward walk state */
    bool consumed;
    int pending;
    uint64_t visit;
    kiln__tensor *grad;
    /* state a rule keeps beyond saved[] (a checkpointed region's inputs and function), freed
     * with ext_free once the node is consumed or dropped */
    void *ext;
    void (*ext_free)(void *ext);
    kiln__ad_hook *hooks; /* on its output's gradient, before the rule runs */
    kiln__site site;      /* the forward call that recorded it: a recomputation's errors name it */
    int n_slots;
    kiln__ad_slot slots[];
};

/* True when grad mode is on and any of the n inputs is tracked (and all are usable). */
bool kiln__ad_active(int n, kiln__tensor *const *inputs);
/* A node for rule over n inputs (before the forward op consumes them). NULL + c->err on OOM. */
kiln__ad_node *kiln__ad_node_new(kiln__opctx *c, const kiln__ad_rule *rule, int n, kiln__tensor *const *inputs);
/* Saves an untracked alias of t in slot i (shares t's storage, so t is never overwritten in
 * place while the node needs it), or under the automatic policy a reference to t's producer to
 * replay (recompute.c). */
void kiln__ad_save(kiln__opctx *c, kiln__ad_node *n, int i, const kiln__tensor *t);
/* A new reference to saved tensor i (NULL if it was not saved). */
kiln__tensor *kiln__ad_saved(kiln__ad_node *n, int i);
/* Makes n the producer of out (out gains a meta); on a NULL out the node is dropped. */
kiln__tensor *kiln__ad_attach(kiln__opctx *c, kiln__ad_node *n, kiln__tensor *out);
void kiln__ad_node_unref(kiln__ad_node *n);
bool kiln__grad_mode(void);
/* Sets this thread's no-grad depth (0: recording on), returning the previous one: a region's
 * recomputation records with grad mode on in the middle of the backward walk. */
int kiln__ad_no_grad_swap(int depth);
/* Makes untracked float t a leaf and returns its leaf record (owned by t's meta); NULL on OOM. */
kiln__ad_leaf *kiln__ad_make_leaf(kiln__tensor *t);

/* While a checkpointed region runs its forward pass untracked, the tracked tensors its ops read
 * that were not its inputs (a module's parameters, captured activations) are gathered here, so
 * the region's node can pass their gradients on. One per thread at a time (kiln__ad_active
 * adds to it under no-grad); each slot holds a reference to its leaf or node. */
typedef struct kiln__ad_capture {
    kiln__ad_slot *v;
    int n, cap;
    bool lost; /* out of memory while growing */
} kiln__ad_capture;
kiln__ad_capture *kiln__ad_capture_swap(kiln__ad_capture *cap);
void kiln__ad_capture_clear(kiln__ad_capture *cap); /* drops the references it holds */

/* Where a leaf's gradient sits in a container (NULL if the container has none for it): lets
 * clipping scale gradients in place, where they are. */
kiln__tensor **kiln__grads_slot(kiln_grads *grads, const kiln__ad_leaf *leaf);
/* Marks a container whose gradients a higher layer replaced by results of queued collectives
 * (dist's data-parallel all-reduces), which finish at different times: kiln_optimizer_step then
 * starts each parameter's update as soon as its own gradient is ready (and commits them all
 * once every gradient succeeded) instead of waiting for every gradient first. `sync` (may be
 * NULL; up to 8 per container, kept in order) is how the processes sharing the step agree:
 * agree(ctx, c) runs once from the step, when its own updates are known to have succeeded or
 * not (c's error), on every path, and sets c's error when any process failed, so all commit or
 * none does; release(ctx) runs when the container is freed (a step never taken still has to
 * tell the peers). False (nothing marked) when 8 are registered. */
typedef struct kiln__grads_sync {
    void (*agree)(void *ctx, kiln__opctx *c);
    void (*release)(void *ctx);
} kiln__grads_sync;
bool kiln__grads_mark_late(kiln_grads *grads, const kiln__grads_sync *sync, void *ctx);
bool kiln__grads_late(const kiln_grads *grads);
/* Runs every registered agree, in order (kiln_optimizer_step's early path). */
void kiln__grads_agree(kiln_grads *grads, kiln__opctx *c);
/* Whether this walk's graph reaches leaf (a gradient is or will be in the container). */
bool kiln__grads_expects(const kiln_grads *grads, const kiln__ad_leaf *leaf);
/* An empty container, as a backward pass starts with (kiln_optimizer_step_tensors fills one). */
kiln_grads *kiln__grads_new(void);
/* Puts g (consumed) as leaf's gradient, replacing any; false + c's error on out of memory. */
bool kiln__grads_put(kiln__opctx *c, kiln_grads *grads, kiln__ad_leaf *leaf, kiln__tensor *g);

/* Backward hooks, registered by a higher layer (dist's data-parallel wrapper). During every
 * backward walk, leaf_final(ctx, grads, leaf) runs on the walking thread once the leaf's
 * gradient in grads is complete (every op adding to it is queued), and walk_done(ctx, grads,
 * ok) once the walk ends (ok false: it failed, and grads is freed next; grads NULL: the call
 * failed before it could walk, e.g. on a poisoned loss). Add returns false when
 * 8 are registered already; remove takes the ctx given. */
typedef struct kiln__ad_backward_hooks {
    void (*leaf_final)(void *ctx, kiln_grads *grads, const kiln__ad_leaf *leaf);
    void (*walk_done)(void *ctx, kiln_grads *grads, bool ok);
    void *ctx;
} kiln__ad_backward_hooks;
bool kiln__ad_hooks_add(kiln__ad_backward_hooks h);
void kiln__ad_hooks_remove(void *ctx);

/* Backpropagates seed (consumed) from root (consumed) through the graph that ends at the n_edge
 * nodes in edge: their gradients are summed into edge_grads[k] (owned, NULL when none came)
 * and the walk does not go past them; leaves' gradients land in the container returned (NULL
 * when c failed). Runs no backward hooks: a region's node passes these gradients on in the
 * enclosing walk, which does. */
kiln_grads *kiln__ad_region_backward(kiln__opctx *c, kiln__tensor *root, kiln__tensor *seed, int n_edge,
                                     kiln__ad_node *const *edge, kiln__tensor **edge_grads);

/* What keeps a checkpointed region's ctx honest (a module's): the object owns one reference and
 * kills it when freed; each region holding the object takes one, and its recomputation reports
 * the free (where, and what) instead of calling into freed memory. */
typedef struct kiln__ad_guard {
    atomic_int refs;
    atomic_bool freed;
    kiln__site freed_at;
    char what[64]; /* "module Linear" */
} kiln__ad_guard;
kiln__ad_guard *kiln__ad_guard_new(const char *what); /* NULL on OOM */
void kiln__ad_guard_kill(kiln__ad_guard *g);           /* the owner's free: marks and drops its ref */
void kiln__ad_guard_unref(kiln__ad_guard *g);
/* kiln_checkpoint whose region holds a reference to guard (may be NULL). */
kiln_tensor kiln__checkpoint_guarded(kiln_checkpoint_fn fn, void *ctx, kiln__ad_guard *guard, int n_inputs,
                                     kiln_tensor *inputs);

/* The automatic policy (KILN_CHECKPOINT=auto, recompute.c): a tensor saved for backward that a
 * chain of cheap ops (elementwise, reductions, views) computed from tensors kept anyway (GELU of a
 * matmul's output, layer norm's affine output from its x̂) is not kept. Whether dropping t, the
 * output of p, is worth it (p's chain can be replayed from what its nodes keep, at a cost below
 * the policy's bound per dropped element); whether p's output can be replayed at all; the replay
 * (an owned tensor, NULL and c's error on failure, which names p's forward call). */
bool kiln__ad_worth_recomputing(const kiln__ad_node *p, const kiln__tensor *t);
bool kiln__ad_recomputable(const kiln__ad_node *p);
kiln__tensor *kiln__ad_recompute(kiln__opctx *c, const kiln__ad_node *p);
/* For a rule's recompute: saved tensor k of n (made again when it is lazy), and n's input i
 * (its producer's output, made again). Owned; NULL and c's error on failure. */
kiln__tensor *kiln__ad_saved_now(kiln__opctx *c, const kiln__ad_node *n, int k);
kiln__tensor *kiln__ad_input_now(kiln__opctx *c, const kiln__ad_node *n, int i);
/* Saved tensor k's plan bit when n has it (kept or lazy), else input i's: what a rule that
 * saved its input only sometimes reads. */
void kiln__ad_plan_saved_or_input(const kiln__ad_node *n, kiln__ad_work *w, int k, int i);
/* Elements of n's output and of its input i. */
double kiln__ad_out_numel(const kiln__ad_node *n);
double kiln__ad_slot_numel(const kiln__ad_node *n, int i);
/* Materialises n's lazy saved tensors (before its rule runs); false and c's error on failure. */
bool kiln__ad_unlazy(kiln__opctx *c, kiln__ad_node *n);

/* g (consumed) through the hooks in order; NULL and c's error when one fails. */
kiln__tensor *kiln__ad_run_hooks(kiln__opctx *c, const kiln__ad_hook *h, kiln__tensor *g);

/* Sums g down to shape (reversing broadcasting). Consumes g. */
kiln__tensor *kiln__ad_sum_to(kiln__opctx *c, kiln__tensor *g, int ndim, const int64_t *shape);

/* The op table's gradient expressions (rules_expr.c, for rows whose grad column is EXPR): what
 * one reads (bit 1 the input, bit 2 the output: what the node saves), and the input's gradient
 * from g (consumed) and the saved x and y (borrowed; NULL when not read). */
int kiln__ad_expr_saves(kiln__opcode code);
kiln__tensor *kiln__ad_expr_backward(kiln__opctx *c, kiln__opcode code, kiln__tensor *g, kiln__tensor *x, kiln__tensor *y);

/* The decorated ops, one per family (src/autodiff/rules_*.c). They take the same owned
 * references as the kiln__t_* functions they wrap. */
kiln__tensor *kiln__ad_unary(kiln__opctx *c, kiln__opcode code, kiln__tensor *x);
kiln__tensor *kiln__ad_clamp(kiln__opctx *c, kiln__tensor *x, double lo, double hi);
/* Issue #15's math and activations: as kiln__t_unary_params, kiln__t_hardtanh,
 * kiln__t_nan_to_num and kiln__t_lerp. */
kiln__tensor *kiln__ad_unary_params(kiln__opctx *c, kiln__opcode code, kiln__tensor *x, const double params[4]);
kiln__tensor *kiln__ad_hardtanh(kiln__opctx *c, kiln__tensor *x, double lo, double hi);
kiln__tensor *kiln__ad_nan_to_num(kiln__opctx *c, kiln__tensor *x, double nan, double posinf, double neginf);
kiln__tensor *kiln__ad_lerp(kiln__opctx *c, kiln__tensor *start, kiln__tensor *end, kiln__tensor *weight, double w);
kiln__tensor *kiln__ad_binary(kiln__opctx *c, kiln__opcode code, kiln__tensor *a, kiln__tensor *b);
kiln__tensor *kiln__ad_binary_scalar(kiln__opctx *c, kiln__opcode code, kiln__tensor *x, double s, bool scalar_first);
kiln__tensor *kiln__ad_where(kiln__opctx *c, kiln__tensor *mask, kiln__tensor *a, kiln__tensor *b);
kiln__tensor *kiln__ad_cast(kiln__opctx *c, kiln__tensor *x, kiln_dtype dtype);
/* kiln__ad_cast of x whose value is already made: cast (x's values in another dtype, as the
 * cast op would write them) becomes the tracked result. Consumes x and cast. */
kiln__tensor *kiln__ad_cast_reuse(kiln__opctx *c, kiln__tensor *x, kiln__tensor *cast);
bool kiln__ad_node_is_cast(const kiln__ad_node *n);
/* The dtype input i's gradient ends in: the slot's own, or, where the input is a cast of a
 * wider float tensor (autocast's bf16 copy of an f32 weight) with no hook on it, that tensor's
 * dtype. A rule may compute the gradient there directly (f32 sums of bf16 products kept f32:
 * no bf16 rounding, no cast back); the walker then hands it through the cast unnarrowed. */
kiln_dtype kiln__ad_grad_dtype(const kiln__ad_node *n, int i);
/* masked_fill and tril/triu (rules_mask.c): only x has a gradient. */
kiln__tensor *kiln__ad_masked_fill(kiln__opctx *c, kiln__tensor *x, kiln__tensor *mask, double value);
kiln__tensor *kiln__ad_tri(kiln__opctx *c, kiln__tensor *x, int64_t diagonal, bool upper);

/* Views record before the forward runs and attach after (kiln__ad_attach accepts the NULL
 * returned when x is not tracked). Params the rule keeps: PERMUTE the order (normalised);
 * SLICE (dim, start, step) normalised; RESHAPE and EXPAND none. */
typedef enum { KILN__AD_VIEW_RESHAPE, KILN__AD_VIEW_PERMUTE, KILN__AD_VIEW_SLICE, KILN__AD_VIEW_EXPAND } kiln__ad_view_kind;
kiln__ad_node *kiln__ad_begin_view(kiln__opctx *c, kiln__ad_view_kind kind, kiln__tensor *x, const int64_t *params, int np);
/* The decorated views (rules_view.c): same arguments as the kiln__t_* views they wrap. */
kiln__tensor *kiln__ad_reshape(kiln__opctx *c, kiln__tensor *x, int ndim, const int64_t *shape);
kiln__tensor *kiln__ad_flatten(kiln__opctx *c, kiln__tensor *x, int start_dim, int end_dim);
kiln__tensor *kiln__ad_squeeze(kiln__opctx *c, kiln__tensor *x, int dim);
kiln__tensor *kiln__ad_unsqueeze(kiln__opctx *c, kiln__tensor *x, int dim);
kiln__tensor *kiln__ad_expand(kiln__opctx *c, kiln__tensor *x, int ndim, const int64_t *shape);
kiln__tensor *kiln__ad_contiguous(kiln__opctx *c, kiln__tensor *x);
/* ndim is 0..KILN_MAX_DIMS. */
kiln__tensor *kiln__ad_permute(kiln__opctx *c, kiln__tensor *x, int ndim, const int *order);
kiln__tensor *kiln__ad_transpose(kiln__opctx *c, kiln__tensor *x, int d0, int d1);
kiln__tensor *kiln__ad_slice(kiln__opctx *c, kiln__tensor *x, int dim, int64_t start, int64_t end, int64_t step);

/* ---- reductions, softmax, matmul, joins and indexing (rules_reduce.c, rules_linalg.c,
 * rules_index.c) ---- */

/* Whether input i of node n wants a gradient (it is a leaf or computed by tracked ops). */
static inline bool kiln__ad_wants(const kiln__ad_node *n, int i) {
    return n && (n->slots[i].leaf || n->slots[i].node);
}
/* dim normalised as kiln__norm_dim does, without reporting: an out-of-range dim fails in the
 * forward op, which then drops the node. */
static inline int kiln__ad_dim(int dim, int ndim) { return dim < 0 ? dim + (ndim > 0 ? ndim : 1) : dim; }
/* Zeros of shape (g's dtype and device) with g scatter-added along dim at index (which fits
 * g, as kiln__t_scatter_add requires). Consumes index and g. */
kiln__tensor *kiln__ad_scatter_zeros(kiln__opctx *c, int ndim, const int64_t *shape, int dim, kiln__tensor *index,
                                     kiln__tensor *g);

/* mask as kiln__t_reduce's; param: VAR's correction; take_sqrt: std. */
kiln__tensor *kiln__ad_reduce(kiln__opctx *c, kiln__opcode code, kiln__tensor *x, uint32_t mask, bool keepdim,
                              int64_t param, bool take_sqrt);
/* CUMSUM or CUMPROD along dim (rules_scan.c). */
kiln__tensor *kiln__ad_scan(kiln__opctx *c, kiln__opcode code, kiln__tensor *x, int dim);
/* As kiln__t_sort; the values carry the gradient (rules_scan.c). */
kiln__tensor *kiln__ad_sort(kiln__opctx *c, kiln__tensor *x, int dim, bool descending, int64_t k,
                            kiln__tensor **indices);
kiln__tensor *kiln__ad_softmax(kiln__opctx *c, kiln__opcode code, kiln__tensor *x, int dim);
kiln__tensor *kiln__ad_matmul(kiln__opctx *c, kiln__tensor *a, kiln__tensor *b);
kiln__tensor *kiln__ad_linear(kiln__opctx *c, kiln__tensor *x, kiln__tensor *w, kiln__tensor *bias, bool has_bias);
/* cat (stack = false) or stack of ts[0..n) along dim, recorded before the forward consumes
 * them (attach the result with kiln__ad_attach). For stack, dim is already normalised. */
kiln__ad_node *kiln__ad_begin_join(kiln__opctx *c, kiln__tensor *const *ts, int n, int dim, bool stack);
/* Consume ts[0..n) as kiln__t_cat and kiln__t_stack do. */
kiln__tensor *kiln__ad_cat(kiln__opctx *c, kiln__tensor **ts, int n, int dim);
kiln__tensor *kiln__ad_stack(kiln__opctx *c, kiln__tensor **ts, int n, int dim);
/* code: INDEX_SELECT, GATHER (src NULL) or SCATTER_ADD. */
kiln__tensor *kiln__ad_index(kiln__opctx *c, kiln__opcode code, kiln__tensor *t, int dim, kiln__tensor *index,
                             kiln__tensor *src);

/* ---- conv2d and pooling (rules_nn.c) ---- */
kiln__tensor *kiln__ad_conv2d(kiln__opctx *c, kiln__tensor *x, kiln__tensor *w, kiln__tensor *bias, bool has_bias,
                              const kiln__conv2d_params *p);
kiln__tensor *kiln__ad_conv_transpose2d(kiln__opctx *c, kiln__tensor *x, kiln__tensor *w, kiln__tensor *bias,
                                        bool has_bias, const kiln__conv2d_params *p, int out_pad_h, int out_pad_w);
kiln__tensor *kiln__ad_max_pool2d(kiln__opctx *c, kiln__tensor *x, const kiln__pool2d_params *p);
kiln__tensor *kiln__ad_avg_pool2d(kiln__opctx *c, kiln__tensor *x, const kiln__pool2d_params *p);

/* ---- attention (rules_attention.c) ---- */
/* Whether tracked attention over q, k, v (no mask) can run fused: the CPU kernel takes them and
 * they share their batch dims. */
bool kiln__ad_attention_fits(const kiln__tensor *q, const kiln__tensor *k, const kiln__tensor *v);
/* The fused attention op, recorded: keeps q, k and v, not the attention weights. */
kiln__tensor *kiln__ad_attention(kiln__opctx *c, kiln__tensor *q, kiln__tensor *k, kiln__tensor *v, bool causal,
                                 double scale);

/* ---- layer norm (rules_layer_norm.c) ---- */
/* Layer norm of x over its last n_norm dims, times w and plus b where not NULL (one float dtype,
 * checked by the caller), recorded as one node that keeps the normalised x and 1/std. */
kiln__tensor *kiln__ad_layer_norm(kiln__opctx *c, kiln__tensor *x, kiln__tensor *w, kiln__tensor *b, int n_norm,
                                  double eps);

/* ---- users' registered ops (rules_custom.c) ---- */
struct kiln_custom_op;
/* As kiln__t_custom; the backward is the op's own, run through the public API. */
kiln__tensor *kiln__ad_custom(kiln__opctx *c, const struct kiln_custom_op *op, int n, kiln__tensor **in);

#endif
