/* Cumulative sums and products along a dim (torch.cumsum / torch.cumprod) and cumprod's
 * gradient kernel: dtype rules and in-place output choice. Integers and bools accumulate in
 * i64 (PyTorch's promotion); f16/bf16 compute in f32 and come back in their own dtype. */
#include "kiln/tensor.h"
#include "ops/ops-impl.h"

static kiln_dtype scan_dtype(kiln_dtype d) {
    if (d == KILN_F32 || d == KILN_F64) return d;
    return kiln__dtype_is_float(d) ? KILN_F32 : KILN_I64;
}

/* Runs code with out[0] in kd over in[0] (and in[1]); may reuse in[0]'s buffer. Consumes in. */
static kiln__tensor *submit_scan(kiln__opctx *c, kiln__opcode code, kiln__tensor **in, int n_in, kiln_dtype kd,
                                 int dim, bool reverse) {
    kiln__tensor *out = kiln__t_output(c, in[0]->device, kd, in[0]->ndim, in[0]->shape, in, 1);
    if (out) {
        kiln__op op;
        kiln__op_init(&op, code, c->name);
        for (int i = 0; i < n_in; i++) op.in[i] = kiln__view_of(in[i]);
        op.out[0] = kiln__view_of(out);
        op.n_in = (int8_t)n_in;
        op.n_out = 1;
        op.p.i[0] = dim;
        op.p.i[1] = reverse;
        if (!kiln__t_submit(c, &op, in[0]->device)) kiln__tensor_release(out), out = NULL;
    }
    for (int i = 0; i < n_in; i++) kiln__tensor_release(in[i]);
    return out;
}

kiln__tensor *kiln__t_scan(kiln__opctx *c, kiln__opcode code, kiln__tensor *x, int dim, bool reverse) {
    if (!kiln__ok(c, x)) return kiln__drop(1, x), NULL;
    if (x->ndim == 0 && (dim == 0 || dim == -1)) { /* a 0-d tensor is its own prefix, as in PyTorch */
        x = kiln__t_reshape(c, x, 1, (const int64_t[]){1});
        return kiln__t_reshape(c, kiln__t_scan(c, code, x, 0, reverse), 0, NULL);
    }
    if (!kiln__norm_dim(c, &dim, x->ndim)) return kiln__drop(1, x), NULL;
    kiln_dtype kd = scan_dtype(x->dtype);
    kiln_dtype rd = kiln__dtype_is_float(x->dtype) ? x->dtype : KILN_I64;
    x = kiln__t_cast(c, x, kd);
    if (!x) return NULL;
    kiln__tensor *out = submit_scan(c, code, &x, 1, kd, dim, reverse);
    return out && out->dtype != rd ? kiln__t_cast(c, out, rd) : out;
}

kiln__tensor *kiln__t_cumprod_backward(kiln__opctx *c, kiln__tensor *g, kiln__tensor *x, int dim) {
    if (!kiln__ok(c, g) || !kiln__ok(c, x)) return kiln__drop(2, g, x), NULL;
    kiln_dtype kd = scan_dtype(kiln__dtype_promote(g->dtype, x->dtype));
    if (kd == KILN_I64) kd = KILN_F32;
    g = kiln__t_contiguous(c, kiln__t_cast(c, g, kd));
    x = kiln__t_cast(c, x, kd);
    if (!g || !x) return kiln__drop(2, g, x), NULL;
    if (g->ndim == 0) {
        kiln__drop(2, g, x);
        return kiln__fail(c, KILN_ERR_INTERNAL, "cumprod backward of a 0-d tensor"); /* the op reshapes first */
    }
    kiln__tensor *in[2] = {g, x};
    return submit_scan(c, KILN__OP_CUMPROD_BACKWARD, in, 2, kd, dim, false);
}
