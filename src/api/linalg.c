/* Public matmul and linear: take the handles, then autodiff's decorated op for tracked
 * inputs, the op layer's for untracked ones. */
#include <math.h>

#include "kiln/tensor.h"
#include "api/autocast-impl.h"
#include "autodiff/autodiff-impl.h"

kiln_tensor kiln_matmul(kiln_tensor a, kiln_tensor b) {
    KILN__OP_BEGIN("kiln_matmul");
    a = kiln__autocast_arg("kiln_matmul", a);
    b = kiln__autocast_arg("kiln_matmul", b);
    kiln__tensor *in[2];
    in[0] = kiln__arg(&c, a); /* in order: the first stale handle is the one reported */
    in[1] = kiln__arg(&c, b);
    if (KILN__UNLIKELY(kiln__ad_active(2, in))) return kiln__result(&c, kiln__ad_matmul(&c, in[0], in[1]));
    return kiln__result(&c, kiln__t_matmul(&c, in[0], in[1]));
}

kiln_tensor kiln_linear(kiln_tensor x, kiln_tensor w, kiln_tensor bias) {
    KILN__OP_BEGIN("kiln_linear");
    x = kiln__autocast_arg("kiln_linear", x);
    w = kiln__autocast_arg("kiln_linear", w);
    bias = kiln__autocast_arg("kiln_linear", bias);
    kiln__tensor *in[3] = {NULL, NULL, NULL};
    in[0] = kiln__arg(&c, x);
    in[1] = kiln__arg(&c, w);
    bool has_bias = bias.id != KILN_NONE.id;
    if (has_bias) in[2] = kiln__arg(&c, bias);
    if (KILN__UNLIKELY(kiln__ad_active(2 + has_bias, in)))
        return kiln__result(&c, kiln__ad_linear(&c, in[0], in[1], in[2], has_bias));
    return kiln__result(&c, kiln__t_linear(&c, in[0], in[1], in[2], has_bias));
}

/* ---- dot, outer, bmm, addmm: shape checks under their own names, then matmul / mul -------- */

/* Takes a and b; both usable, with ndim na and nb, or NULL in *x (c's error set). */
static bool take_pair(kiln__opctx *c, kiln_tensor a, kiln_tensor b, int na, int nb, kiln__tensor **x) {
    x[0] = kiln__arg(c, a);
    x[1] = kiln__arg(c, b);
    if (!kiln__ok(c, x[0]) || !kiln__ok(c, x[1])) return false;
    if (x[0]->ndim != na || x[1]->ndim != nb)
        return kiln__fail(c, KILN_ERR_SHAPE, "expects %d-d and %d-d tensors, got %d-d and %d-d", na, nb, x[0]->ndim,
                          x[1]->ndim), false;
    if (x[0]->dtype != x[1]->dtype)
        return kiln__fail(c, KILN_ERR_DTYPE, "tensors of one dtype expected, got %s and %s", kiln_dtype_name(x[0]->dtype),
                          kiln_dtype_name(x[1]->dtype)), false;
    return kiln__same_device(c, x[0], x[1]);
}

/* Hands x[0], x[1] out as handles (no error in c) for a composition in name's scope. */
static void as_handles(kiln__opctx *c, kiln__tensor **x, kiln_tensor *h) {
    for (int i = 0; i < 2; i++) {
        kiln__opctx ci = {.name = c->name, .err = NULL};
        h[i] = kiln__result(&ci, x[i]);
    }
}

/* x[0] @ x[1] (checked) in c's op's scope. */
static kiln_tensor scoped_matmul(kiln__opctx *c, kiln__tensor **x) {
    kiln_tensor h[2];
    as_handles(c, x, h);
    const char *outer = kiln__op_scope_enter(c->name);
    kiln_tensor out = kiln_matmul(h[0], h[1]);
    kiln__op_scope_leave(outer);
    return out;
}

static kiln_tensor pair_fail(kiln__opctx *c, kiln__tensor **x) {
    kiln__drop(2, x[0], x[1]);
    return kiln__result(c, NULL);
}

kiln_tensor kiln_dot(kiln_tensor a, kiln_tensor b) {
    KILN__OP_BEGIN("kiln_dot");
    kiln__tensor *x[2];
    if (!take_pair(&c, a, b, 1, 1, x)) return pair_fail(&c, x);
    if (x[0]->shape[0] != x[1]->shape[0]) {
        kiln__fail(&c, KILN_ERR_SHAPE, "lengths %lld and %lld differ", (long long)x[0]->shape[0], (long long)x[1]->shape[0]);
        return pair_fail(&c, x);
    }
    return scoped_matmul(&c, x); /* 1-d @ 1-d is 0-d */
}

kiln_tensor kiln_outer(kiln_tensor a, kiln_tensor b) {
    KILN__OP_BEGIN("kiln_outer");
    kiln__tensor *x[2];
    if (!take_pair(&c, a, b, 1, 1, x)) return pair_fail(&c, x);
    kiln_tensor h[2];
    as_handles(&c, x, h);
    const char *outer = kiln__op_scope_enter("kiln_outer");
    kiln_tensor out = kiln_mul(kiln_unsqueeze(h[0], 1), kiln_unsqueeze(h[1], 0));
    kiln__op_scope_leave(outer);
    return out;
}

kiln_tensor kiln_bmm(kiln_tensor a, kiln_tensor b) {
    KILN__OP_BEGIN("kiln_bmm");
    a = kiln__autocast_arg("kiln_bmm", a);
    b = kiln__autocast_arg("kiln_bmm", b);
    kiln__tensor *x[2];
    if (!take_pair(&c, a, b, 3, 3, x)) return pair_fail(&c, x);
    if (x[0]->shape[0] != x[1]->shape[0] || x[0]->shape[2] != x[1]->shape[1]) {
        char sa[96], sb[96];
        kiln__fail(&c, KILN_ERR_SHAPE, "cannot multiply %s by %s: expects [B, n, k] and [B, k, m]",
                   kiln__shape_str(sa, sizeof sa, 3, x[0]->shape), kiln__shape_str(sb, sizeof sb, 3, x[1]->shape));
        return pair_fail(&c, x);
    }
    return scoped_matmul(&c, x);
}

kiln_tensor kiln_addmm(kiln_tensor input, kiln_tensor m1, kiln_tensor m2, double beta, double alpha) {
    KILN__OP_BEGIN("kiln_addmm");
    input = kiln__autocast_arg("kiln_addmm", input);
    m1 = kiln__autocast_arg("kiln_addmm", m1);
    m2 = kiln__autocast_arg("kiln_addmm", m2);
    kiln__tensor *in = kiln__arg(&c, input), *x[2];
    bool ok = take_pair(&c, m1, m2, 2, 2, x) && kiln__ok(&c, in);
    char sa[96], sb[96];
    if (ok && x[0]->shape[1] != x[1]->shape[0]) {
        kiln__fail(&c, KILN_ERR_SHAPE, "cannot multiply %s by %s", kiln__shape_str(sa, sizeof sa, 2, x[0]->shape),
                   kiln__shape_str(sb, sizeof sb, 2, x[1]->shape));
        ok = false;
    }
    int64_t rows = ok ? x[0]->shape[0] : 0, cols = ok ? x[1]->shape[1] : 0;
    if (ok && in->dtype != x[0]->dtype)
        ok = (kiln__fail(&c, KILN_ERR_DTYPE, "input is %s, the matrices %s", kiln_dtype_name(in->dtype),
                         kiln_dtype_name(x[0]->dtype)), false);
    ok = ok && kiln__same_device(&c, in, x[0]);
    /* input broadcasts to [rows, cols] and never grows it */
    for (int d = 0; ok && d < in->ndim; d++) {
        int64_t want = d == in->ndim - 1 ? cols : rows;
        if (in->ndim > 2 || (in->shape[d] != want && in->shape[d] != 1)) {
            kiln__fail(&c, KILN_ERR_SHAPE, "input %s does not broadcast to [%lld, %lld]",
                       kiln__shape_str(sa, sizeof sa, in->ndim, in->shape), (long long)rows, (long long)cols);
            ok = false;
        }
    }
    if (ok && !(isfinite(beta) && isfinite(alpha))) {
        kiln__fail(&c, KILN_ERR_INVALID_ARGUMENT, "beta %g and alpha %g must be finite", beta, alpha);
        ok = false;
    }
    if (!ok) return kiln__drop(1, in), pair_fail(&c, x);
    kiln_tensor h[2];
    as_handles(&c, x, h);
    kiln__opctx ci = {.name = c.name, .err = NULL};
    kiln_tensor hi = kiln__result(&ci, in);
    const char *outer = kiln__op_scope_enter("kiln_addmm");
    kiln_tensor out = kiln_matmul(h[0], h[1]);
    if (alpha != 1) out = kiln_mul_scalar(out, alpha);
    if (beta == 0) kiln_release(hi); /* PyTorch: input is ignored, NaN and all */
    else out = kiln_add(beta == 1 ? hi : kiln_mul_scalar(hi, beta), out);
    kiln__op_scope_leave(outer);
    return out;
}
