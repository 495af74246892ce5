/* Matrix products: kiln_matmul (torch.matmul semantics) and kiln_linear.
 *
 * The MATMUL kernel takes in[0] [..., M, K] and in[1] [..., K, N] broadcast to the output's
 * batch dims (stride 0 where an operand is shared), and an optional in[2] broadcast to the
 * output's shape that the product is added to (linear's bias: one GEMM with beta = 1). Views
 * are passed as they are: transposed operands reach GEMM as transpose flags, and the kernel
 * copies only operands whose matrix dims are neither row- nor column-contiguous. On the CPU,
 * bf16 and f16 operands go in as they are and are summed in f32 (as PyTorch's), rounded to
 * their dtype by the kernel (or, with a bias, after it). */
#include <stdio.h>

#include "kiln/tensor.h"
#include "ops/ops-impl.h"

static bool check_float(kiln__opctx *c, const kiln__tensor *t, const char *what) {
    if (kiln__dtype_is_float(t->dtype)) return true;
    kiln__fail(c, KILN_ERR_DTYPE, "%s must be a floating-point tensor (f32, f64, f16, bf16), got %s", what,
               kiln_dtype_name(t->dtype));
    return false;
}

static kiln__tensor *shape_error(kiln__opctx *c, const kiln__tensor *a, const kiln__tensor *b, const char *why) {
    char sa[128], sb[128];
    return kiln__fail(c, KILN_ERR_SHAPE, "shapes %s and %s: %s", kiln__shape_str(sa, sizeof sa, a->ndim, a->shape),
                      kiln__shape_str(sb, sizeof sb, b->ndim, b->shape), why);
}

/* A view of t as a matrix stack [batch..., rows, cols] broadcast to the nb batch dims in
 * `batch`. A 1-d t becomes one row (as_row) or one column. */
static kiln__view matrix_view(const kiln__tensor *t, int nb, const int64_t *batch, bool as_row) {
    kiln__view v = kiln__view_of(t);
    int64_t rows, cols, rs, cs;
    if (t->ndim == 1) {
        rows = as_row ? 1 : t->shape[0];
        cols = as_row ? t->shape[0] : 1;
        rs = as_row ? 0 : t->strides[0];
        cs = as_row ? t->strides[0] : 0;
    } else {
        rows = t->shape[t->ndim - 2];
        cols = t->shape[t->ndim - 1];
        rs = t->strides[t->ndim - 2];
        cs = t->strides[t->ndim - 1];
    }
    int tb = t->ndim > 2 ? t->ndim - 2 : 0, lead = nb - tb;
    v.ndim = nb + 2;
    for (int d = 0; d < nb; d++) {
        int s = d - lead;
        v.shape[d] = batch[d];
        v.strides[d] = (s >= 0 && t->shape[s] == batch[d]) ? t->strides[s] : 0;
    }
    v.shape[nb] = rows;
    v.shape[nb + 1] = cols;
    v.strides[nb] = rs;
    v.strides[nb + 1] = cs;
    return v;
}

/* a @ b (+ bias broadcast to the product's shape). Consumes a, b and bias (which may be NULL
 * when there is none). wide: bf16/f16 operands' f32 sums are kept in f32, not rounded. */
static kiln__tensor *matmul_impl(kiln__opctx *c, kiln__tensor *a, kiln__tensor *b, kiln__tensor *bias, bool has_bias,
                                 bool wide) {
    if (!has_bias) kiln__builtin_patterns_ensure(); /* before an attention's first product is queued */
    if (!kiln__ok(c, a) || !kiln__ok(c, b) || (has_bias && !kiln__ok(c, bias))) return kiln__drop(3, a, b, bias), NULL;
    if (!kiln__same_device(c, a, b) || (has_bias && !kiln__same_device(c, a, bias))) return kiln__drop(3, a, b, bias), NULL;
    if (!check_float(c, a, "the first operand") || !check_float(c, b, "the second operand") ||
        (has_bias && !check_float(c, bias, "bias")) || !kiln__same_dtype(c, a, b, has_bias ? bias : NULL))
        return kiln__drop(3, a, b, bias), NULL;
    if (a->ndim == 0 || b->ndim == 0) {
        shape_error(c, a, b, "matmul needs operands of at least 1 dim");
        return kiln__drop(3, a, b, bias), NULL;
    }
    int64_t m = a->ndim == 1 ? 1 : a->shape[a->ndim - 2], k = a->shape[a->ndim - 1];
    int64_t kb = b->ndim == 1 ? b->shape[0] : b->shape[b->ndim - 2], n = b->ndim == 1 ? 1 : b->shape[b->ndim - 1];
    if (k != kb) {
        char why[96];
        snprintf(why, sizeof why, "cannot be multiplied (%lld columns against %lld rows)", (long long)k, (long long)kb);
        shape_error(c, a, b, why);
        return kiln__drop(3, a, b, bias), NULL;
    }
    int na = a->ndim > 2 ? a->ndim - 2 : 0, nbb = b->ndim > 2 ? b->ndim - 2 : 0, nb = na > nbb ? na : nbb;
    int64_t shape[KILN_MAX_DIMS];
    for (int d = 0; d < nb; d++) {
        int64_t da = d < nb - na ? 1 : a->shape[d - (nb - na)], db = d < nb - nbb ? 1 : b->shape[d - (nb - nbb)];
        if (da != db && da != 1 && db != 1) {
            shape_error(c, a, b, "batch dims cannot be broadcast together");
            return kiln__drop(3, a, b, bias), NULL;
        }
        shape[d] = da == 1 ? db : da;
    }
    shape[nb] = m;
    shape[nb + 1] = n;

    kiln_dtype rd = kiln__dtype_promote(a->dtype, b->dtype);
    if (has_bias) rd = kiln__dtype_promote(rd, bias->dtype);
    kiln_dtype kd = kiln__dtype_compute(rd);
    kiln_device dev = a->device;
    /* bf16/f16 operands reach the CPU's kernel as they are (it multiplies them into f32, with
     * oneDNN's bf16 matmul where the CPU has one); other devices get them widened */
    kiln_dtype operand_dt = (rd == KILN_BF16 || rd == KILN_F16) && dev == KILN_CPU ? rd : kd;
    a = kiln__t_cast(c, a, operand_dt);
    b = kiln__t_cast(c, b, operand_dt);
    if (has_bias) bias = kiln__t_cast(c, bias, kd);
    if (!a || !b || (has_bias && !bias)) return kiln__drop(3, a, b, bias), NULL;

    /* without a bias, a low-precision product is rounded into its dtype by the kernel itself */
    kiln__tensor *out = kiln__t_empty(c, dev, operand_dt != kd && !has_bias && !wide ? rd : kd, nb + 2, shape);
    if (out) {
        kiln__op op;
        kiln__op_init(&op, KILN__OP_MATMUL, c->name);
        op.in[0] = matrix_view(a, nb, shape, true);
        op.in[1] = matrix_view(b, nb, shape, false);
        op.n_in = 2;
        if (has_bias) op.in[op.n_in++] = kiln__view_broadcast(bias, nb + 2, shape);
        op.out[0] = kiln__view_of(out);
        op.n_out = 1;
        if (!kiln__t_submit(c, &op, dev)) kiln__tensor_release(out), out = NULL;
    }
    /* drop the dims that 1-d operands added */
    int64_t final_shape[KILN_MAX_DIMS];
    int nf = 0;
    for (int d = 0; d < nb; d++) final_shape[nf++] = shape[d];
    if (a->ndim > 1) final_shape[nf++] = m;
    if (b->ndim > 1) final_shape[nf++] = n;
    kiln__drop(3, a, b, bias);
    if (out && nf != nb + 2) out = kiln__t_reshape(c, out, nf, final_shape);
    if (out && out->dtype != rd && !wide) out = kiln__t_cast(c, out, rd);
    return out;
}

kiln__tensor *kiln__t_matmul(kiln__opctx *c, kiln__tensor *a, kiln__tensor *b) {
    return matmul_impl(c, a, b, NULL, false, false);
}

kiln__tensor *kiln__t_matmul_wide(kiln__opctx *c, kiln__tensor *a, kiln__tensor *b) {
    return matmul_impl(c, a, b, NULL, false, true);
}

/* x [..., in] @ w[out, in]^T + bias[out]: x's leading dims are flattened into the rows of one
 * GEMM (a view when x's layout allows), w^T is a transposed view, and the bias is the GEMM's
 * initial output. */
kiln__tensor *kiln__t_linear(kiln__opctx *c, kiln__tensor *x, kiln__tensor *w, kiln__tensor *bias, bool has_bias) {
    if (!kiln__ok(c, x) || !kiln__ok(c, w) || (has_bias && !kiln__ok(c, bias))) return kiln__drop(3, x, w, bias), NULL;
    if (w->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1]) {
        shape_error(c, x, w, "linear needs x [..., in_features] and weight [out_features, in_features]");
        return kiln__drop(3, x, w, bias), NULL;
    }
    if (has_bias && (bias->ndim != 1 || bias->shape[0] != w->shape[0])) {
        char sb[128];
        kiln__fail(c, KILN_ERR_SHAPE, "bias of shape %s does not match weight's %lld out_features",
                   kiln__shape_str(sb, sizeof sb, bias->ndim, bias->shape), (long long)w->shape[0]);
        return kiln__drop(3, x, w, bias), NULL;
    }
    int64_t lead[KILN_MAX_DIMS], in_f = w->shape[1], rows = 1;
    int nl = x->ndim - 1;
    for (int d = 0; d < nl; d++) rows *= (lead[d] = x->shape[d]);
    lead[nl] = w->shape[0];
    x = kiln__t_reshape(c, x, 2, (int64_t[]){rows, in_f});
    w = kiln__t_transpose(c, w, 0, 1);
    if (!x || !w) return kiln__drop(3, x, w, bias), NULL;
    kiln__tensor *out = matmul_impl(c, x, w, bias, has_bias, false);
    if (out && nl != 1) out = kiln__t_reshape(c, out, nl + 1, lead);
    return out;
}
