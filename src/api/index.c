/* Public joins, splits, indexing and device moves: take the handles (arrays of them too),
 * then autodiff's decorated op for tracked inputs, the op layer's for untracked ones. */
#include <stdlib.h>

#include "kiln/tensor.h"
#include "autodiff/autodiff-impl.h"

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
        for (int i = 0; i < n; i++) kiln__tensor_release(kiln__handle_take(ts[i], c->name, NULL)); /* (no record) */
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

/* cat or stack: the list is taken whole, then joined by autodiff or by the op layer. */
static kiln_tensor join(kiln__opctx *c, const kiln_tensor *ts, int n, int dim, bool stack) {
    tensor_list l;
    kiln__tensor *out = NULL;
    if (list_take(c, ts, n, &l)) {
        if (KILN__UNLIKELY(kiln__ad_active(l.n, l.t)))
            out = stack ? kiln__ad_stack(c, l.t, l.n, dim) : kiln__ad_cat(c, l.t, l.n, dim);
        else
            out = stack ? kiln__t_stack(c, l.t, l.n, dim) : kiln__t_cat(c, l.t, l.n, dim);
    }
    list_free(&l);
    return kiln__result(c, out);
}

kiln_tensor kiln_cat(const kiln_tensor *ts, int n, int dim) {
    KILN__OP_BEGIN("kiln_cat");
    return join(&c, ts, n, dim, false);
}

kiln_tensor kiln_stack(const kiln_tensor *ts, int n, int dim) {
    KILN__OP_BEGIN("kiln_stack");
    return join(&c, ts, n, dim, true);
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
        kiln__tensor_retain(t);
        kiln__tensor *v = tracked ? kiln__ad_slice(c, t, dim, start, end, 1) : kiln__t_slice(c, t, dim, start, end, 1);
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
    return kiln__result(&c, kiln__t_one_hot(&c, ti, num_classes, dtype));
}

/* ---- devices ------------------------------------------------------------------------------- */

kiln_tensor kiln_to_device(kiln_tensor t, kiln_device dev) {
    KILN__OP_BEGIN("kiln_to_device");
    return kiln__result(&c, kiln__t_to_device(&c, kiln__arg(&c, t), dev));
}
