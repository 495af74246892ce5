/* Joining (cat, stack), splitting (split, chunk), indexing (index_select, gather, scatter_add,
 * one_hot) and device transfer.
 *
 * cat writes each input into its slice of one output with an ordinary COPY op, so no op
 * record ever needs a variable number of inputs. split and chunk only make views. Index
 * values are checked by the kernels (they are known only when the op runs). */
#include <stdlib.h>
#include <string.h>

#include "kiln/tensor.h"
#include "autodiff/autodiff-impl.h"
#include "ops/ops-impl.h"

/* ---- arrays of handles -------------------------------------------------------------------- */

enum { LIST_INLINE = 16 };

typedef struct {
    kiln__tensor **t;
    int n;
    kiln__tensor *inline_slots[LIST_INLINE];
} tensor_list;

/* Takes every handle in ts[0..n): each is consumed even when another one is stale or
 * poisoned. Returns false (c->err set, the first bad one by position) if any is unusable. */
static bool list_take(kiln__opctx *c, const kiln_tensor *ts, int n, tensor_list *l) {
    l->t = l->inline_slots;
    l->n = 0;
    if (!ts) return kiln__fail(c, KILN_ERR_NULL, "tensor array is NULL"), false;
    if (n < 1) return kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "needs at least one tensor, got n=%d", n), false;
    if (n > LIST_INLINE && !(l->t = malloc(sizeof *l->t * (size_t)n))) {
        l->t = l->inline_slots;
        for (int i = 0; i < n; i++) kiln__tensor_release(kiln__arg(c, ts[i]));
        return kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate a list of %d tensors", n), false;
    }
    l->n = n;
    bool ok = true;
    for (int i = 0; i < n; i++) {
        l->t[i] = kiln__arg(c, ts[i]);
        ok = kiln__ok(c, l->t[i]) && ok;
    }
    return ok;
}

/* Releases the tensors still held and the array. */
static void list_free(tensor_list *l) {
    for (int i = 0; i < l->n; i++) kiln__tensor_release(l->t[i]);
    if (l->t != l->inline_slots) free(l->t);
    l->n = 0;
}

/* ---- cat / stack --------------------------------------------------------------------------- */

/* torch's legacy rule: a 1-d tensor with no elements joins anything (it is skipped). */
static bool skippable(const kiln__tensor *t) { return t->ndim == 1 && t->shape[0] == 0; }

/* Checks shapes and devices; fills the output shape, dtype and the normalised dim. */
static bool cat_plan(kiln__opctx *c, kiln__tensor *const *ts, int n, int *dim, int *ndim, int64_t *shape,
                     kiln_dtype *dtype) {
    const kiln__tensor *ref = ts[0];
    for (int i = 0; i < n; i++)
        if (!skippable(ts[i])) {
            ref = ts[i];
            break;
        }
    if (ref->ndim == 0) return kiln__fail(c, KILN_ERR_SHAPE, "zero-dimensional tensors cannot be concatenated"), false;
    if (!kiln__norm_dim(c, dim, ref->ndim)) return false;
    *ndim = ref->ndim;
    memcpy(shape, ref->shape, sizeof(int64_t) * (size_t)ref->ndim);
    shape[*dim] = 0;
    *dtype = ts[0]->dtype;
    for (int i = 0; i < n; i++) {
        const kiln__tensor *t = ts[i];
        if (!kiln__same_device(c, ref, t)) return false;
        *dtype = kiln__dtype_promote(*dtype, t->dtype);
        if (skippable(t)) continue;
        bool match = t->ndim == ref->ndim;
        for (int d = 0; match && d < t->ndim; d++) match = d == *dim || t->shape[d] == ref->shape[d];
        if (!match) {
            char a[128], b[128];
            kiln__fail(c, KILN_ERR_SHAPE, "tensor %d has shape %s, expected %s except in dim %d", i,
                       kiln__shape_str(a, sizeof a, t->ndim, t->shape), kiln__shape_str(b, sizeof b, ref->ndim, ref->shape),
                       *dim);
            return false;
        }
        if (__builtin_add_overflow(shape[*dim], t->shape[*dim], &shape[*dim])) {
            kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "the joined dim %d has more elements than int64 can count", *dim);
            return false;
        }
    }
    return true;
}

/* Concatenates the list's (usable) tensors along dim. They stay the list's to release, except
 * a lone input handed back as the result (its entry becomes NULL). */
static kiln__tensor *cat_list(kiln__opctx *c, tensor_list *l, int dim) {
    int64_t shape[KILN_MAX_DIMS];
    int nd;
    kiln_dtype dtype;
    if (!cat_plan(c, l->t, l->n, &dim, &nd, shape, &dtype)) return NULL;
    if (l->n == 1 && l->t[0]->dtype == dtype) { /* nothing to join: hand the input back */
        kiln__tensor *only = l->t[0];
        l->t[0] = NULL;
        return only;
    }
    kiln_device dev = l->t[0]->device;
    kiln__tensor *out = kiln__t_empty(c, dev, dtype, nd, shape);
    if (!out) return NULL;
    int64_t at = 0;
    for (int i = 0; i < l->n; i++) {
        kiln__tensor *t = l->t[i];
        if (skippable(t)) continue; /* no elements; its ndim may differ from out's */
        if (kiln__tensor_numel(t) > 0) {
            kiln__view slice = kiln__view_of(out); /* the slice of out that t fills */
            memcpy(slice.shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
            slice.offset += at * out->strides[dim];
            if (!kiln__t_copy_into(c, slice, t)) return kiln__drop(1, out), NULL;
        }
        at += t->shape[dim];
    }
    return out;
}

kiln_tensor kiln_cat(const kiln_tensor *ts, int n, int dim) {
    KILN__OP_BEGIN("kiln_cat");
    tensor_list l;
    kiln__tensor *out = NULL;
    if (list_take(&c, ts, n, &l)) {
        kiln__ad_node *node = NULL;
        if (KILN__UNLIKELY(kiln__ad_active(l.n, l.t))) node = kiln__ad_begin_join(&c, l.t, l.n, dim, false);
        out = kiln__ad_attach(&c, node, cat_list(&c, &l, dim));
    }
    list_free(&l);
    return kiln__result(&c, out);
}

kiln_tensor kiln_stack(const kiln_tensor *ts, int n, int dim) {
    KILN__OP_BEGIN("kiln_stack");
    tensor_list l;
    kiln__tensor *out = NULL;
    if (list_take(&c, ts, n, &l)) {
        const kiln__tensor *ref = l.t[0];
        bool ok = kiln__norm_dim(&c, &dim, ref->ndim + 1);
        for (int i = 1; ok && i < n; i++) {
            const kiln__tensor *t = l.t[i];
            ok = t->ndim == ref->ndim && memcmp(t->shape, ref->shape, sizeof(int64_t) * (size_t)t->ndim) == 0;
            if (!ok) {
                char a[128], b[128];
                kiln__fail(&c, KILN_ERR_SHAPE, "stack needs equal shapes: tensor 0 is %s, tensor %d is %s",
                           kiln__shape_str(a, sizeof a, ref->ndim, ref->shape), i,
                           kiln__shape_str(b, sizeof b, t->ndim, t->shape));
            }
        }
        kiln__ad_node *node = NULL;
        if (ok && KILN__UNLIKELY(kiln__ad_active(n, l.t))) node = kiln__ad_begin_join(&c, l.t, n, dim, true);
        /* unsqueeze consumes each entry; a failure leaves NULL there and c->err set */
        for (int i = 0; ok && i < n; i++) l.t[i] = kiln__t_unsqueeze(&c, l.t[i], dim);
        if (ok && !c.err) out = cat_list(&c, &l, dim);
        out = kiln__ad_attach(&c, node, out);
    }
    list_free(&l);
    return kiln__result(&c, out);
}

/* ---- split / chunk -------------------------------------------------------------------------- */

static int split_fail(kiln__opctx *c, kiln__tensor *t, kiln_tensor *out) {
    kiln__tensor_release(t);
    out[0] = kiln__result(c, NULL);
    return 1;
}

/* Takes h and checks it, dim and the output array. NULL when the call is already over (the
 * error reported): *ret is then what to return. */
static kiln__tensor *split_begin(kiln__opctx *c, kiln_tensor h, int *dim, kiln_tensor *out, int cap, int *ret) {
    kiln__tensor *t = kiln__arg(c, h);
    if (!out || cap < 1) { /* no room for even the poisoned result: report and return 0 */
        kiln__fail(c, out ? KILN_ERR_INVALID_ARGUMENT : KILN_ERR_NULL, "no room for the pieces (cap %d)", cap);
        kiln__tensor_release(t);
        kiln__error_report(c->err);
        kiln__error_unref(c->err);
        c->err = NULL;
        *ret = 0;
        return NULL;
    }
    if (kiln__ok(c, t) && t->ndim == 0) kiln__fail(c, KILN_ERR_SHAPE, "cannot split a 0-d tensor");
    if (c->err || !kiln__norm_dim(c, dim, t->ndim)) {
        *ret = split_fail(c, t, out);
        return NULL;
    }
    return t;
}

/* Piece i is [i*piece, min((i+1)*piece, size)) along dim, i < count: views sharing t's
 * storage, each holding its own reference. Consumes t. */
static int split_views(kiln__opctx *c, kiln__tensor *t, int dim, int64_t piece, int64_t count, kiln_tensor *out,
                       int cap) {
    if (count > cap) {
        kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "output array of %d cannot hold %lld pieces", cap, (long long)count);
        return split_fail(c, t, out);
    }
    int64_t size = t->shape[dim];
    bool tracked = KILN__UNLIKELY(kiln__ad_active(1, &t));
    for (int i = 0; i < (int)count; i++) {
        int64_t start = i * piece < size ? i * piece : size;
        int64_t end = start + piece < size ? start + piece : size;
        /* each piece is a slice, with the slice's derivative */
        kiln__ad_node *n = NULL;
        if (tracked) n = kiln__ad_begin_view(c, KILN__AD_VIEW_SLICE, t, (int64_t[]){dim, start, 1}, 3);
        kiln__tensor_retain(t);
        kiln__tensor *v = kiln__ad_attach(c, n, kiln__t_slice(c, t, dim, start, end, 1));
        out[i] = v ? kiln__handle_new(v) : KILN_NONE;
        if (!out[i].id) { /* out of memory: undo the pieces handed out so far */
            kiln__fail(c, KILN_ERR_OUT_OF_MEMORY, "cannot allocate piece %d", i);
            for (int j = 0; j < i; j++) kiln_release(out[j]);
            return split_fail(c, t, out);
        }
    }
    kiln__tensor_release(t);
    return (int)count;
}

int kiln_split(kiln_tensor h, int64_t split_size, int dim, kiln_tensor *out, int cap) {
    KILN__OP_BEGIN("kiln_split");
    int ret;
    kiln__tensor *t = split_begin(&c, h, &dim, out, cap, &ret);
    if (!t) return ret;
    int64_t size = t->shape[dim];
    if (split_size < 0 || (split_size == 0 && size > 0)) {
        kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "split_size %lld must be positive", (long long)split_size);
        return split_fail(&c, t, out);
    }
    int64_t count = size == 0 ? 1 : size / split_size + (size % split_size != 0); /* no overflow for a huge split */
    return split_views(&c, t, dim, split_size, count, out, cap);
}

int kiln_chunk(kiln_tensor h, int chunks, int dim, kiln_tensor *out, int cap) {
    KILN__OP_BEGIN("kiln_chunk");
    int ret;
    kiln__tensor *t = split_begin(&c, h, &dim, out, cap, &ret);
    if (!t) return ret;
    if (chunks < 1) {
        kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "chunks %d must be positive", chunks);
        return split_fail(&c, t, out);
    }
    int64_t size = t->shape[dim];
    int64_t piece = (size + chunks - 1) / chunks;
    /* an empty dim gives `chunks` empty pieces (as torch), otherwise possibly fewer pieces */
    int64_t count = size == 0 ? chunks : (size + piece - 1) / piece;
    return split_views(&c, t, dim, piece, count, out, cap);
}

/* ---- index_select / gather / scatter_add / one_hot ----------------------------------------- */

/* kiln__ok on each of n arguments in order, so the first one's error is the one kept. */
static bool usable(kiln__opctx *c, int n, kiln__tensor *const *ts) {
    bool ok = true;
    for (int i = 0; i < n; i++) ok = kiln__ok(c, ts[i]) && ok;
    return ok;
}

static bool check_index(kiln__opctx *c, const kiln__tensor *t, const kiln__tensor *index) {
    if (index->dtype != KILN_I32 && index->dtype != KILN_I64)
        return kiln__fail(c, KILN_ERR_DTYPE, "index must be i32 or i64, got %s", kiln_dtype_name(index->dtype)), false;
    return !t || kiln__same_device(c, t, index);
}

/* Checks the indexed tensor and its dim (0-d tensors have no dim to index). */
static bool check_indexed(kiln__opctx *c, const kiln__tensor *t, int *dim) {
    if (t->ndim == 0) return kiln__fail(c, KILN_ERR_SHAPE, "cannot index a 0-d tensor"), false;
    return kiln__norm_dim(c, dim, t->ndim);
}

/* Submits `code` reading a (and b when not NULL) into out, with p.i[0] = param; releases a
 * and b. Returns out, or NULL with c->err set. */
static kiln__tensor *submit_indexing(kiln__opctx *c, kiln__opcode code, kiln__tensor *out, kiln__tensor *a,
                                     kiln__tensor *b, int64_t param) {
    kiln__op op;
    kiln__op_init(&op, code, c->name);
    op.in[0] = kiln__view_of(a);
    if (b) op.in[1] = kiln__view_of(b);
    op.n_in = b ? 2 : 1;
    op.p.i[0] = param;
    op.out[0] = kiln__view_of(out);
    op.n_out = 1;
    if (!kiln__t_submit(c, &op, out->device)) kiln__tensor_release(out), out = NULL;
    kiln__drop(2, a, b);
    return out;
}

kiln__tensor *kiln__t_index_select(kiln__opctx *c, kiln__tensor *t, int dim, kiln__tensor *index) {
    if (!usable(c, 2, (kiln__tensor *[]){t, index})) return kiln__drop(2, t, index), NULL;
    if (!check_indexed(c, t, &dim) || !check_index(c, t, index)) return kiln__drop(2, t, index), NULL;
    if (index->ndim > 1) {
        kiln__fail(c, KILN_ERR_SHAPE, "index must be 1-d, got %d dims", index->ndim);
        return kiln__drop(2, t, index), NULL;
    }
    /* a scalar index selects one entry, keeping the dim */
    if (index->ndim == 0 && !(index = kiln__t_reshape(c, index, 1, (int64_t[]){1}))) return kiln__drop(1, t), NULL;
    int64_t shape[KILN_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[dim] = index->shape[0];
    kiln__tensor *out = kiln__t_empty(c, t->device, t->dtype, t->ndim, shape);
    if (!out) return kiln__drop(2, t, index), NULL;
    return submit_indexing(c, KILN__OP_INDEX_SELECT, out, t, index, dim);
}

/* torch's rule: same ndim, and index no larger than `t` in every dim but `dim` (dim -1:
 * in every dim). */
static bool check_fits(kiln__opctx *c, const kiln__tensor *index, const kiln__tensor *t, int dim, const char *what) {
    bool ok = index->ndim == t->ndim;
    for (int d = 0; ok && d < t->ndim; d++) ok = d == dim || index->shape[d] <= t->shape[d];
    if (ok) return true;
    char a[128], b[128];
    kiln__fail(c, KILN_ERR_SHAPE, "index of shape %s does not fit %s of shape %s (dim %d)",
               kiln__shape_str(a, sizeof a, index->ndim, index->shape), what,
               kiln__shape_str(b, sizeof b, t->ndim, t->shape), dim);
    return false;
}

kiln__tensor *kiln__t_gather(kiln__opctx *c, kiln__tensor *t, int dim, kiln__tensor *index) {
    if (!usable(c, 2, (kiln__tensor *[]){t, index})) return kiln__drop(2, t, index), NULL;
    if (!check_indexed(c, t, &dim) || !check_index(c, t, index) || !check_fits(c, index, t, dim, "input"))
        return kiln__drop(2, t, index), NULL;
    kiln__tensor *out = kiln__t_empty(c, t->device, t->dtype, index->ndim, index->shape);
    if (!out) return kiln__drop(2, t, index), NULL;
    return submit_indexing(c, KILN__OP_GATHER, out, t, index, dim);
}

kiln__tensor *kiln__t_scatter_add(kiln__opctx *c, kiln__tensor *t, int dim, kiln__tensor *index, kiln__tensor *src) {
    if (!usable(c, 3, (kiln__tensor *[]){t, index, src})) return kiln__drop(3, t, index, src), NULL;
    if (!check_indexed(c, t, &dim) || !check_index(c, t, index) || !kiln__same_device(c, t, src) ||
        !check_fits(c, index, t, dim, "input") || !check_fits(c, index, src, -1, "src"))
        return kiln__drop(3, t, index, src), NULL;
    kiln_dtype dtype = kiln__dtype_promote(t->dtype, src->dtype);
    t = kiln__t_cast(c, t, dtype);
    src = kiln__t_cast(c, src, dtype);
    if (!t || !src) return kiln__drop(3, t, index, src), NULL;
    /* out starts as a copy of t, or is t itself when t's buffer may be overwritten */
    kiln__tensor *out = kiln__t_output(c, t->device, dtype, t->ndim, t->shape, &t, 1);
    if (!out) return kiln__drop(3, t, index, src), NULL;
    if (out->storage != t->storage && !kiln__t_copy_into(c, kiln__view_of(out), t))
        return kiln__drop(4, out, t, index, src), NULL;
    kiln__tensor_release(t);
    return submit_indexing(c, KILN__OP_SCATTER_ADD, out, index, src, dim);
}

static kiln__tensor *t_one_hot(kiln__opctx *c, kiln__tensor *index, int64_t classes, kiln_dtype dtype) {
    if (!kiln__ok(c, index)) return kiln__drop(1, index), NULL;
    if (!check_index(c, NULL, index)) return kiln__drop(1, index), NULL;
    if (!kiln__dtype_valid(dtype)) return kiln__drop(1, index), kiln__fail(c, KILN_ERR_DTYPE, "invalid dtype %d", (int)dtype);
    if (classes < 1)
        return kiln__drop(1, index), kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "num_classes %lld must be positive",
                                                (long long)classes);
    if (index->ndim >= KILN_MAX_DIMS)
        return kiln__drop(1, index), kiln__fail(c, KILN_ERR_SHAPE, "index already has %d dims", KILN_MAX_DIMS);
    int64_t shape[KILN_MAX_DIMS];
    memcpy(shape, index->shape, sizeof(int64_t) * (size_t)index->ndim);
    shape[index->ndim] = classes;
    kiln_shape s = {.ndim = index->ndim + 1};
    memcpy(s.dims, shape, sizeof shape);
    if (!kiln__check_shape(c, s)) return kiln__drop(1, index), NULL;
    kiln__tensor *out = kiln__t_empty(c, index->device, dtype, s.ndim, shape);
    if (!out) return kiln__drop(1, index), NULL;
    return submit_indexing(c, KILN__OP_ONE_HOT, out, index, NULL, classes);
}

kiln_tensor kiln_index_select(kiln_tensor t, int dim, kiln_tensor index) {
    KILN__OP_BEGIN("kiln_index_select");
    kiln__tensor *tt = kiln__arg(&c, t);
    kiln__tensor *ti = kiln__arg(&c, index);
    if (KILN__UNLIKELY(kiln__ad_active(2, (kiln__tensor *[]){tt, ti})))
        return kiln__result(&c, kiln__ad_index(&c, KILN__OP_INDEX_SELECT, tt, dim, ti, NULL));
    return kiln__result(&c, kiln__t_index_select(&c, tt, dim, ti));
}

kiln_tensor kiln_gather(kiln_tensor t, int dim, kiln_tensor index) {
    KILN__OP_BEGIN("kiln_gather");
    kiln__tensor *tt = kiln__arg(&c, t);
    kiln__tensor *ti = kiln__arg(&c, index);
    if (KILN__UNLIKELY(kiln__ad_active(2, (kiln__tensor *[]){tt, ti})))
        return kiln__result(&c, kiln__ad_index(&c, KILN__OP_GATHER, tt, dim, ti, NULL));
    return kiln__result(&c, kiln__t_gather(&c, tt, dim, ti));
}

kiln_tensor kiln_scatter_add(kiln_tensor t, int dim, kiln_tensor index, kiln_tensor src) {
    KILN__OP_BEGIN("kiln_scatter_add");
    kiln__tensor *tt = kiln__arg(&c, t);
    kiln__tensor *ti = kiln__arg(&c, index);
    kiln__tensor *ts = kiln__arg(&c, src);
    if (KILN__UNLIKELY(kiln__ad_active(3, (kiln__tensor *[]){tt, ti, ts})))
        return kiln__result(&c, kiln__ad_index(&c, KILN__OP_SCATTER_ADD, tt, dim, ti, ts));
    return kiln__result(&c, kiln__t_scatter_add(&c, tt, dim, ti, ts));
}

kiln_tensor kiln_one_hot(kiln_tensor index, int64_t num_classes, kiln_dtype dtype) {
    KILN__OP_BEGIN("kiln_one_hot");
    kiln__tensor *ti = kiln__arg(&c, index);
    return kiln__result(&c, t_one_hot(&c, ti, num_classes, dtype));
}

/* ---- devices ------------------------------------------------------------------------------- */

kiln_tensor kiln_to_device(kiln_tensor t, kiln_device dev) {
    KILN__OP_BEGIN("kiln_to_device");
    kiln__tensor *tt = kiln__arg(&c, t);
    if (!kiln__ok(&c, tt)) return kiln__drop(1, tt), kiln__result(&c, NULL);
    if (tt->device == dev) return kiln__result(&c, tt);
    kiln_device from = tt->device;
    kiln__tensor_release(tt);
    if ((unsigned)dev >= KILN_DEVICE_COUNT)
        return kiln__result(&c, kiln__fail(&c, KILN_ERR_DEVICE, "invalid device %d", (int)dev));
    if (!kiln__backend_get(dev))
        return kiln__result(&c, kiln__fail(&c, KILN_ERR_DEVICE, "device %s is not available", kiln_device_name(dev)));
    return kiln__result(&c, kiln__fail(&c, KILN_ERR_UNSUPPORTED, "copies from %s to %s are not implemented",
                                       kiln_device_name(from), kiln_device_name(dev)));
}
