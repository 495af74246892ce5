/* The op layer's shared machinery. Public ops are thin: take handles into owned tensor
 * references, call a tensor-level function, wrap the result in a handle.
 *
 *   kiln_tensor kiln_exp(kiln_tensor x) {
 *       KILN__OP_BEGIN("kiln_exp");
 *       kiln__tensor *tx = kiln__arg(&c, x);
 *       return kiln__result(&c, kiln__t_unary(&c, KILN__OP_EXP, tx));
 *   }
 *
 * Tensor-level functions (kiln__t_*) CONSUME the owned references they are given (NULL is
 * allowed and means "this argument already failed"), and return an owned reference, or NULL
 * with c->err set. They check inputs with kiln__ok() first, which adopts a poisoned input's
 * error so it propagates unchanged. */
#ifndef KILN_OPS_IMPL_H
#define KILN_OPS_IMPL_H

#include "backend/backend-impl.h"
#include "engine/engine-impl.h"

#define KILN__OP_TAKEN 8 /* handles remembered per call (a longer list names a repeat instead) */
typedef struct {
    const char *name;
    kiln__error *err; /* first error of this op, owned */
    /* The handles this call has taken and their tensors (not owned: the op holds them while it
     * takes its arguments), so a handle passed twice, kiln_mul(x, x), is one tensor used twice. */
    int n_taken;
    uint64_t taken_id[KILN__OP_TAKEN];
    kiln__tensor *taken[KILN__OP_TAKEN];
} kiln__opctx;

#define KILN__OP_BEGIN(opname) kiln__opctx c = {.name = kiln__op_name(opname), .err = NULL}

/* A public op built from other public ops (a loss) is the op its caller knows: while its scope
 * is open, the ops it calls record its name, so their errors (found at dispatch or when the
 * kernel runs) name it. Scopes nest; the outermost name wins. enter returns what leave takes. */
const char *kiln__op_scope_enter(const char *name);
void kiln__op_scope_leave(const char *outer);
/* name, or the open scope's name. */
const char *kiln__op_name(const char *name);

/* The most elements any tensor (view or not) may have, zero dims aside: byte sizes, strides
 * and offsets computed from a shape then never overflow. */
#define KILN__MAX_NUMEL (INT64_MAX / 16)

/* Takes (consumes) a handle; NULL and c->err set if stale. A handle this call took already
 * (the same handle passed twice) gives the same tensor again, with a reference of its own:
 * an op must take all its arguments before it consumes any of them. */
kiln__tensor *kiln__arg(kiln__opctx *c, kiln_tensor h);
/* The usable tensor behind h, borrowed (h is not taken: a module slot, a saved tensor); NULL
 * and c->err set if stale or poisoned. */
kiln__tensor *kiln__peek(kiln__opctx *c, kiln_tensor h);
/* True if t is usable; false if NULL or poisoned (then its error is adopted). */
bool kiln__ok(kiln__opctx *c, kiln__tensor *t);
/* Records an error (the first one wins). Always returns NULL for `return kiln__fail(...)`. */
kiln__tensor *kiln__fail(kiln__opctx *c, kiln_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Releases every non-NULL tensor in the list (n of them). */
void kiln__drop(int n, ...);
/* Wraps the result in a handle; NULL becomes a poisoned tensor carrying c->err. Frees c. */
kiln_tensor kiln__result(kiln__opctx *c, kiln__tensor *out);

/* Normalises a possibly negative dim for ndim dims; false + error if out of range. */
bool kiln__norm_dim(kiln__opctx *c, int *dim, int ndim);
/* Same device for all; false + error otherwise. */
bool kiln__same_device(kiln__opctx *c, const kiln__tensor *a, const kiln__tensor *b);
/* The products (matmul, linear, addmm, convolutions) take operands of one dtype, as PyTorch's:
 * false (c->err set, naming both) when b (and bias, unless NULL) differ from a's. */
bool kiln__same_dtype(kiln__opctx *c, const kiln__tensor *a, const kiln__tensor *b, const kiln__tensor *bias);
/* Shape as text "[2, 3]" into buf. */
const char *kiln__shape_str(char *buf, size_t size, int ndim, const int64_t *shape);
/* Validates a user shape (ndim 0..8, then as kiln__check_dims); false + error otherwise. */
bool kiln__check_shape(kiln__opctx *c, kiln_shape shape);
/* dims >= 0 (else KILN_ERR_SHAPE) and a product of the non-zero dims of at most
 * KILN__MAX_NUMEL, counted without overflow (else KILN_ERR_OUT_OF_MEMORY): elements, dense
 * strides and their byte sizes then fit int64. False + error otherwise. */
bool kiln__check_dims(kiln__opctx *c, int ndim, const int64_t *shape);

/* NumPy broadcasting of two shapes; false + error if incompatible. */
bool kiln__broadcast_shapes(kiln__opctx *c, int na, const int64_t *a, int nb, const int64_t *b, int *nout,
                            int64_t *out);
/* t's view broadcast (right-aligned, stride 0 on expanded dims) to shape. */
kiln__view kiln__view_broadcast(const kiln__tensor *t, int ndim, const int64_t *shape);
/* The same, written into *v (ndim >= t->ndim; the dims past ndim are zero). */
static inline void kiln__view_set_broadcast(kiln__view *v, const kiln__tensor *t, int ndim, const int64_t *shape) {
    int lead = ndim - t->ndim;
    v->storage = t->storage;
    v->dtype = t->dtype;
    v->ndim = ndim;
    v->offset = t->offset;
    v->scalar = 0;
    for (int d = 0; d < KILN_MAX_DIMS; d++) {
        int s = d - lead;
        v->shape[d] = d < ndim ? shape[d] : 0;
        v->strides[d] = d < ndim && s >= 0 && t->shape[s] == shape[d] ? t->strides[s] : 0;
    }
}

/* An output tensor of dtype/shape on dev. Reuses (in place) the first candidate that is
 * exclusive, dense, not borrowed and of the same byte size and element size; else allocates.
 * Candidates are only borrowed here: the caller still releases them after submitting. */
kiln__tensor *kiln__t_output(kiln__opctx *c, kiln_device dev, kiln_dtype dtype, int ndim, const int64_t *shape,
                             kiln__tensor *const *candidates, int n_candidates);
/* The same for a caller that has read its candidates' views already: a reused candidate with
 * no autodiff metadata becomes the output itself (the tensor object and its reference to the
 * buffer move over, no new object, no reference counted) and its entry is set to NULL. The
 * caller releases the candidates left. */
kiln__tensor *kiln__t_output_taking(kiln__opctx *c, kiln_device dev, kiln_dtype dtype, int ndim, const int64_t *shape,
                                    kiln__tensor **candidates, int n_candidates);
/* Fresh dense output, never in place. */
kiln__tensor *kiln__t_empty(kiln__opctx *c, kiln_device dev, kiln_dtype dtype, int ndim, const int64_t *shape);

/* Queues a copy of src into dst: a view (of another tensor's storage) with src's shape, any
 * strides and dtype. The caller keeps both references. False + error if it cannot. */
bool kiln__t_copy_into(kiln__opctx *c, kiln__view dst, const kiln__tensor *src);
/* Submits op after checking the device has a kernel for it; false + error if not. */
bool kiln__t_submit(kiln__opctx *c, kiln__op *op, kiln_device dev);

/* The read path for calls that do not consume t (src/ops/read.c): waits for t's data and
 * copies it, dense and in t's dtype, into exactly numel*elsize bytes; reports any error. */
kiln_status kiln__read_borrowed(kiln__opctx *c, kiln__tensor *t, void *dst, size_t dst_bytes);

/* Tensor-level building blocks (consume their tensor arguments). */
kiln__tensor *kiln__t_cast(kiln__opctx *c, kiln__tensor *x, kiln_dtype dtype);
kiln__tensor *kiln__t_contiguous(kiln__opctx *c, kiln__tensor *x);
kiln__tensor *kiln__t_fill(kiln__opctx *c, kiln_device dev, kiln_dtype dtype, int ndim, const int64_t *shape,
                           double value);
kiln__tensor *kiln__t_unary(kiln__opctx *c, kiln__opcode code, kiln__tensor *x);
kiln__tensor *kiln__t_clamp(kiln__opctx *c, kiln__tensor *x, double lo, double hi);
/* A unary op whose kernel reads p.f[0..3] (LEAKY_RELU, ELU, NAN_TO_NUM). */
kiln__tensor *kiln__t_unary_params(kiln__opctx *c, kiln__opcode code, kiln__tensor *x, const double params[4]);
/* posinf / neginf NaN: the largest / lowest finite value of x's dtype (torch's defaults). */
kiln__tensor *kiln__t_nan_to_num(kiln__opctx *c, kiln__tensor *x, double nan, double posinf, double neginf);
/* clamp for float tensors (its gradient differs: see autodiff). */
kiln__tensor *kiln__t_hardtanh(kiln__opctx *c, kiln__tensor *x, double lo, double hi);
/* CUMSUM / CUMPROD along dim (reverse: from the end); ints and bools give i64. */
kiln__tensor *kiln__t_scan(kiln__opctx *c, kiln__opcode code, kiln__tensor *x, int dim, bool reverse);
/* The gradient of cumprod along dim (normalised, x at least 1-d) from g, exact at zeros of x. */
kiln__tensor *kiln__t_cumprod_backward(kiln__opctx *c, kiln__tensor *g, kiln__tensor *x, int dim);
/* The first k (all when k < 0) of each line of x along dim in order, descending or not (NaN
 * largest, ties in index order): returns the values, *indices the i64 indices (both NULL on
 * failure). Consumes x. */
kiln__tensor *kiln__t_sort(kiln__opctx *c, kiln__tensor *x, int dim, bool descending, int64_t k,
                           kiln__tensor **indices);
/* torch.lerp: weight a tensor, or NULL for the scalar w. */
kiln__tensor *kiln__t_lerp(kiln__opctx *c, kiln__tensor *start, kiln__tensor *end, kiln__tensor *weight, double w);
kiln__tensor *kiln__t_binary(kiln__opctx *c, kiln__opcode code, kiln__tensor *a, kiln__tensor *b);
/* scalar_first: computes f(s, x) instead of f(x, s) (rsub, rdiv). */
kiln__tensor *kiln__t_binary_scalar(kiln__opctx *c, kiln__opcode code, kiln__tensor *x, double s, bool scalar_first);
kiln__tensor *kiln__t_where(kiln__opctx *c, kiln__tensor *mask, kiln__tensor *a, kiln__tensor *b);
/* Masks (src/ops/mask.c), one WHERE pass each, the result of x's shape and dtype: value where
 * the bool mask (broadcast to x's shape, never growing it) is true; tril (upper false) or triu
 * of the last two dims, zeros outside the kept triangle (PyTorch's diagonal offset). */
kiln__tensor *kiln__t_masked_fill(kiln__opctx *c, kiln__tensor *x, kiln__tensor *mask, double value);
kiln__tensor *kiln__t_tri(kiln__opctx *c, kiln__tensor *x, int64_t diagonal, bool upper);
/* Fused inference attention (src/ops/attention.c): whether q, k, v (and mask, which may be
 * NULL) suit the ATTENTION kernel, and the op itself on operands that do (consumed; mask may be
 * NULL). The arguments are checked by the caller (kiln_scaled_dot_product_attention). */
/* The batch dims (all but the last two) of q, k and v (t[0..2]) broadcast together into out,
 * nb of them; false if they cannot (no error set). */
bool kiln__attention_batch_shape(const kiln__tensor *const *t, int *nb, int64_t *out);
bool kiln__t_attention_fits(const kiln__tensor *q, const kiln__tensor *k, const kiln__tensor *v, const kiln__tensor *mask);
kiln__tensor *kiln__t_attention(kiln__opctx *c, kiln__tensor *q, kiln__tensor *k, kiln__tensor *v, kiln__tensor *mask,
                                bool causal, double scale);
/* Attention within each of n sequences packed along T (src/ops/attention_segments.c): q, k
 * [heads, T, E], v [heads, T, Ev] (consumed), lengths[0..n) adding up to T; inference only. */
kiln__tensor *kiln__t_attention_segments(kiln__opctx *c, kiln__tensor *q, kiln__tensor *k, kiln__tensor *v, int64_t n,
                                         const int64_t *lengths, double scale);
/* g where y > 0, else 0 (one pass; y is relu's output). */
kiln__tensor *kiln__t_relu_backward(kiln__opctx *c, kiln__tensor *g, kiln__tensor *y);

/* Views (consume x; share its storage). */
kiln__tensor *kiln__t_reshape(kiln__opctx *c, kiln__tensor *x, int ndim, const int64_t *shape);
kiln__tensor *kiln__t_permute(kiln__opctx *c, kiln__tensor *x, int ndim, const int *order);
kiln__tensor *kiln__t_transpose(kiln__opctx *c, kiln__tensor *x, int d0, int d1);
kiln__tensor *kiln__t_slice(kiln__opctx *c, kiln__tensor *x, int dim, int64_t start, int64_t end, int64_t step);
kiln__tensor *kiln__t_expand(kiln__opctx *c, kiln__tensor *x, int ndim, const int64_t *shape);
kiln__tensor *kiln__t_unsqueeze(kiln__opctx *c, kiln__tensor *x, int dim);
kiln__tensor *kiln__t_squeeze(kiln__opctx *c, kiln__tensor *x, int dim);
kiln__tensor *kiln__t_flatten(kiln__opctx *c, kiln__tensor *x, int start_dim, int end_dim);
/* narrow's checks: normalises dim and start; false + error unless x is usable, not 0-d, and
 * [start, start + length) lies inside dim (then start + length cannot overflow). */
bool kiln__narrow_range(kiln__opctx *c, kiln__tensor *x, int *dim, int64_t *start, int64_t length);

/* Reductions (src/ops/reduce.c): dims as a mask over x's dims. */
/* A public dim list to that mask: KILN_ALL_DIMS is every dim, an empty list none; a 0-d
 * tensor accepts dim 0 and -1. False + error on a bad or repeated dim. */
bool kiln__dims_mask(kiln__opctx *c, kiln_dims dims, int ndim, uint32_t *mask);
kiln__tensor *kiln__t_reduce(kiln__opctx *c, kiln__opcode code, kiln__tensor *x, uint32_t dim_mask, bool keepdim,
                             int64_t param);
kiln__tensor *kiln__t_matmul(kiln__opctx *c, kiln__tensor *a, kiln__tensor *b);
/* kiln__t_matmul whose bf16/f16 operands' f32 sums stay f32 (the product's compute dtype, not
 * rounded to the operands'): autocast's weight gradients, which go on to an f32 parameter. */
kiln__tensor *kiln__t_matmul_wide(kiln__opctx *c, kiln__tensor *a, kiln__tensor *b);

/* The rest of the differentiable ops, for the autodiff rules (consume their tensors). */
kiln__tensor *kiln__t_std(kiln__opctx *c, kiln__tensor *x, uint32_t dim_mask, bool keepdim, int64_t correction);
/* code: SOFTMAX or LOG_SOFTMAX; dim may be negative. */
kiln__tensor *kiln__t_softmax(kiln__opctx *c, kiln__opcode code, kiln__tensor *x, int dim);
/* bias is read only when has_bias (so a NULL bias can still mean "that argument failed"). */
kiln__tensor *kiln__t_linear(kiln__opctx *c, kiln__tensor *x, kiln__tensor *w, kiln__tensor *bias, bool has_bias);
kiln__tensor *kiln__t_index_select(kiln__opctx *c, kiln__tensor *t, int dim, kiln__tensor *index);
kiln__tensor *kiln__t_gather(kiln__opctx *c, kiln__tensor *t, int dim, kiln__tensor *index);
kiln__tensor *kiln__t_scatter_add(kiln__opctx *c, kiln__tensor *t, int dim, kiln__tensor *index, kiln__tensor *src);
kiln__tensor *kiln__t_one_hot(kiln__opctx *c, kiln__tensor *index, int64_t classes, kiln_dtype dtype);
kiln__tensor *kiln__t_to_device(kiln__opctx *c, kiln__tensor *t, kiln_device dev);

/* Joins (src/ops/index.c). They consume ts[0..n): each entry is released and set to NULL,
 * the array itself stays the caller's. */
kiln__tensor *kiln__t_cat(kiln__opctx *c, kiln__tensor **ts, int n, int dim);
kiln__tensor *kiln__t_stack(kiln__opctx *c, kiln__tensor **ts, int n, int dim);
/* stack's checks (n >= 1, all usable, equal shapes), normalising dim; false + error if not. */
bool kiln__stack_check(kiln__opctx *c, kiln__tensor *const *ts, int n, int *dim);

/* Registers kiln's fused kernels as substitutes of the compositions they compute, once
 * (builtin_patterns.c): called by the ops that start one (mean, matmul) before they are queued. */
void kiln__builtin_patterns_ensure(void);
void kiln__layer_norm_patterns_register(void); /* layer_norm_pattern.c */
void kiln__attention_patterns_register(void);  /* attention_pattern.c */

#endif
