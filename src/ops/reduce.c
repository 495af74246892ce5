/* Reductions and softmax: dim lists, dtype rules, output shapes.
 *
 * A reduction kernel sees `in` and an `out` of in's ndim whose reduced dims have size 1;
 * keepdim=false is a view of that output with those dims dropped. Kernels compute in f32, f64
 * or i64 only: f16/bf16 go through f32 and come back in their dtype (the CPU's sums and means
 * read bf16 as stored, into f32, with no cast of the input), integer sums and products
 * accumulate in i64 (and stay i64, like torch), integer max/min come back in their own dtype,
 * and the float statistics (mean, var, std, logsumexp, softmax) of integers are f32. */
#include <string.h>

#include "kiln/tensor.h"
#include "ops/ops-impl.h"

/* An index (argmax, argmin): the row finishes with the winner's position. */
static bool is_arg(kiln__opcode code) { return kiln__reduce_info_of(code)->finish == KILN__RFIN_INDEX; }

/* The dtype the kernel reads (and, except for argmax/argmin, writes): the row's dtype rule
 * (ir/reduce_table.h) for integers and bools; softmax, not a row, computes them in f32. */
static kiln_dtype kernel_dtype(kiln__opcode code, kiln_dtype in) {
    if (in == KILN_F16 || in == KILN_BF16) return KILN_F32;
    if (kiln__dtype_is_float(in)) return in;
    switch (kiln__reduce_info_of(code)->dtype) {
    case KILN__RDT_ACCUM: case KILN__RDT_SAME: case KILN__RDT_I64: return KILN_I64;
    default: return KILN_F32; /* FLOAT: mean, var, logsumexp; and softmax */
    }
}

/* The dtype the caller gets back. */
static kiln_dtype result_dtype(kiln__opcode code, kiln_dtype in, kiln_dtype kernel) {
    kiln__reduce_dtype rule = kiln__reduce_info_of(code)->dtype;
    if (rule == KILN__RDT_I64) return KILN_I64;
    if (in == KILN_F16 || in == KILN_BF16) return in;
    if (rule == KILN__RDT_SAME) return in;
    return kernel;
}

/* MAX and MIN folds have no identity to give an empty group. */
static bool needs_nonempty(kiln__opcode code) {
    kiln__reduce_fold fold = kiln__reduce_info_of(code)->fold;
    return fold == KILN__RFOLD_MAX || fold == KILN__RFOLD_MIN;
}

/* Runs code from x into out (NULL: its allocation failed) with params p.i[0], p.i[1].
 * Consumes x; returns out, or NULL when the op could not be queued. */
static kiln__tensor *submit(kiln__opctx *c, kiln__opcode code, kiln__tensor *x, kiln__tensor *out, int64_t p0,
                            int64_t p1) {
    if (out) {
        kiln__op op;
        kiln__op_init(&op, code, c->name);
        op.in[0] = kiln__view_of(x);
        op.out[0] = kiln__view_of(out);
        op.n_in = op.n_out = 1;
        op.p.i[0] = p0;
        op.p.i[1] = p1;
        if (!kiln__t_submit(c, &op, x->device)) kiln__tensor_release(out), out = NULL;
    }
    kiln__tensor_release(x);
    return out;
}

/* take_sqrt turns VAR into std inside the kernel (no separate sqrt pass). */
static kiln__tensor *reduce_impl(kiln__opctx *c, kiln__opcode code, kiln__tensor *x, uint32_t mask, bool keepdim,
                                 int64_t param, bool take_sqrt) {
    if (code == KILN__OP_MEAN) kiln__builtin_patterns_ensure(); /* before a layer norm's first op is queued */
    if (!kiln__ok(c, x)) return kiln__drop(1, x), NULL;
    int nd = x->ndim;
    mask &= nd ? (uint32_t)((1u << nd) - 1) : 0u;
    if (needs_nonempty(code)) {
        for (int d = 0; d < nd; d++) {
            if (!(mask >> d & 1) || x->shape[d] != 0) continue;
            char buf[128];
            kiln__fail(c, KILN_ERR_SHAPE, "cannot take the %s over dim %d of size 0 (shape %s): it has no identity",
                       kiln__reduce_info_of(code)->name, d, kiln__shape_str(buf, sizeof buf, nd, x->shape));
            return kiln__drop(1, x), NULL;
        }
    }
    kiln_dtype kd = kernel_dtype(code, x->dtype);
    kiln_dtype rd = result_dtype(code, x->dtype, kd);
    kiln_device dev = x->device;
    /* the CPU sums bf16 as it is stored, into f32 (backend/cpu/reduce.c): no f32 copy of x */
    bool bf16_read = x->dtype == KILN_BF16 && dev == KILN_CPU && !is_arg(code) &&
                     kiln__reduce_info_of(code)->fold == KILN__RFOLD_SUM;
    if (!bf16_read) x = kiln__t_cast(c, x, kd);
    if (!x) return NULL;

    int64_t kshape[KILN_MAX_DIMS], squeezed[KILN_MAX_DIMS];
    int nsq = 0;
    for (int d = 0; d < nd; d++) {
        kshape[d] = (mask >> d & 1) ? 1 : x->shape[d];
        if (!(mask >> d & 1)) squeezed[nsq++] = x->shape[d];
    }
    kiln__tensor *out = kiln__t_empty(c, dev, is_arg(code) ? KILN_I64 : kd, nd, kshape);
    if (is_arg(code)) param = mask ? __builtin_ctz(mask) : 0;
    out = submit(c, code, x, out, param, take_sqrt);
    if (out && out->dtype != rd) out = kiln__t_cast(c, out, rd);
    if (out && !keepdim && nsq != nd) out = kiln__t_reshape(c, out, nsq, squeezed);
    return out;
}

kiln__tensor *kiln__t_reduce(kiln__opctx *c, kiln__opcode code, kiln__tensor *x, uint32_t dim_mask, bool keepdim,
                             int64_t param) {
    return reduce_impl(c, code, x, dim_mask, keepdim, param, false);
}

kiln__tensor *kiln__t_std(kiln__opctx *c, kiln__tensor *x, uint32_t dim_mask, bool keepdim, int64_t correction) {
    return reduce_impl(c, KILN__OP_VAR, x, dim_mask, keepdim, correction, true);
}

/* Dim list to a mask of x's dims. KILN_ALL_DIMS is every dim; an empty list reduces nothing
 * (NumPy's axis=(), what code that computes its dim list needs). A 0-d tensor accepts dim 0
 * and -1, like torch. */
bool kiln__dims_mask(kiln__opctx *c, kiln_dims dims, int ndim, uint32_t *mask) {
    if (dims.n == -1) {
        *mask = ndim ? (uint32_t)((1u << ndim) - 1) : 0u;
        return true;
    }
    if (dims.n < 0 || dims.n > KILN_MAX_DIMS) {
        kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "dim list has %d entries (0..%d, or KILN_ALL_DIMS)", dims.n,
                   KILN_MAX_DIMS);
        return false;
    }
    uint32_t m = 0;
    for (int i = 0; i < dims.n; i++) {
        int d = dims.d[i];
        if (!kiln__norm_dim(c, &d, ndim)) return false;
        if (m >> d & 1) {
            kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "dim %d appears more than once in the dim list", dims.d[i]);
            return false;
        }
        m |= 1u << d;
    }
    *mask = m;
    return true;
}

/* ---- softmax ----------------------------------------------------------------------------- */
/* The kernels read every element of a slice along `dim` before writing any of it back, so the
 * output may take the input's buffer. */
kiln__tensor *kiln__t_softmax(kiln__opctx *c, kiln__opcode code, kiln__tensor *x, int dim) {
    if (!kiln__ok(c, x) || !kiln__norm_dim(c, &dim, x->ndim)) return kiln__drop(1, x), NULL;
    kiln_dtype kd = kernel_dtype(code, x->dtype);
    kiln_dtype rd = result_dtype(code, x->dtype, kd);
    kiln_device dev = x->device;
    /* the CPU sums bf16 as it is stored, into f32 (backend/cpu/reduce.c): no f32 copy of x */
    bool bf16_read = x->dtype == KILN_BF16 && dev == KILN_CPU && !is_arg(code) &&
                     kiln__reduce_info_of(code)->fold == KILN__RFOLD_SUM;
    if (!bf16_read) x = kiln__t_cast(c, x, kd);
    if (!x) return NULL;
    kiln__tensor *out = submit(c, code, x, kiln__t_output(c, dev, kd, x->ndim, x->shape, &x, 1), dim, 0);
    if (out && out->dtype != rd) out = kiln__t_cast(c, out, rd);
    return out;
}
