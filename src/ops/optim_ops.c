/* The fused optimizer updates, clipping's sums of squares and checkpoints' host copies (see
 * optim_ops-impl.h). The update ops keep their outputs on error: the parameter and its state
 * are never poisoned by a failed update. */
#include "ops/optim_ops-impl.h"

bool kiln__t_has_kernel(kiln_device dev, kiln__opcode code) {
    const kiln__backend *be = kiln__backend_get(dev);
    return be && be->kernels[code];
}

bool kiln__t_optim_update(kiln__opctx *c, kiln__opcode code, int n_out, kiln__tensor *const *outs, int n_in,
                          const kiln__tensor *const *ins, const void *u) {
    const kiln__optim_row *row = kiln__optim_row_of(code);
    if (!row) return kiln__fail(c, KILN_ERR_INTERNAL, "%s is no optimizer update", kiln__opcode_name(code)), false;
    if (n_out < row->out_min || n_out > row->out_max || n_in < row->in_min || n_in > row->in_max)
        return kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "%s takes %d..%d outputs and %d..%d inputs (%s), not %d and %d",
                          row->name, row->out_min, row->out_max, row->in_min, row->in_max, row->tensors, n_out, n_in),
               false;
    for (int i = 0; i < n_out + n_in; i++) {
        const kiln__tensor *t = i < n_out ? outs[i] : ins[i - n_out];
        if (!t) return kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "%s: tensor %d is NULL", row->name, i), false;
        if (t->device != outs[0]->device)
            return kiln__fail(c, KILN_ERR_DEVICE, "%s: tensor %d is on %s, the parameter on %s", row->name, i,
                              kiln_device_name(t->device), kiln_device_name(outs[0]->device)),
                   false;
        if (t->ndim != outs[0]->ndim || memcmp(t->shape, outs[0]->shape, sizeof(int64_t) * (size_t)t->ndim) != 0)
            return kiln__fail(c, KILN_ERR_SHAPE, "%s: tensor %d's shape differs from the parameter's", row->name, i),
                   false;
    }
    kiln__op op;
    kiln__op_init(&op, code, c->name);
    for (int i = 0; i < n_out; i++) op.out[i] = kiln__view_of(outs[i]);
    for (int i = 0; i < n_in; i++) op.in[i] = kiln__view_of(ins[i]);
    op.n_out = n_out;
    op.n_in = n_in;
    kiln__optim_encode(&op, u);
    return kiln__t_submit(c, &op, outs[0]->device);
}

bool kiln__t_sgd_update(kiln__opctx *c, kiln__tensor *param, kiln__tensor *momentum, const kiln__tensor *grad,
                        const kiln__sgd_update *u, kiln__tensor *bf16_copy) {
    if (!bf16_copy) {
        kiln__tensor *outs[2] = {param, momentum};
        return kiln__t_optim_update(c, KILN__OP_SGD_UPDATE, momentum ? 2 : 1, outs, 1, &grad, u);
    }
    /* the copy is the last output (see KILN__OPTIM_FLAG_BF16_COPY): a bf16 tensor of an f32
     * parameter's shape, which the submit's same-shape check does not cover in dtype */
    kiln__op op;
    kiln__op_init(&op, KILN__OP_SGD_UPDATE, c->name);
    op.out[0] = kiln__view_of(param);
    op.n_out = 1;
    if (momentum) op.out[op.n_out++] = kiln__view_of(momentum);
    op.out[op.n_out++] = kiln__view_of(bf16_copy);
    op.in[0] = kiln__view_of(grad);
    op.n_in = 1;
    kiln__sgd_update_encode(&op, u);
    op.pi[KILN__OPTIM_PI_FLAGS] |= KILN__OPTIM_FLAG_BF16_COPY;
    return kiln__t_submit(c, &op, param->device);
}

bool kiln__t_adam_update(kiln__opctx *c, kiln__tensor *param, kiln__tensor *exp_avg, kiln__tensor *exp_avg_sq,
                         const kiln__tensor *grad, const kiln__adam_update *u) {
    kiln__tensor *outs[3] = {param, exp_avg, exp_avg_sq};
    return kiln__t_optim_update(c, KILN__OP_ADAM_UPDATE, 3, outs, 1, &grad, u);
}

bool kiln__t_rmsprop_grad_avg(kiln__opctx *c, kiln__tensor *grad_avg, const kiln__tensor *param,
                              const kiln__tensor *grad, const kiln__rmsprop_grad_avg *u) {
    const kiln__tensor *ins[2] = {grad, param};
    return kiln__t_optim_update(c, KILN__OP_RMSPROP_GRAD_AVG, 1, &grad_avg, 2, ins, u);
}

bool kiln__t_rmsprop_update(kiln__opctx *c, kiln__tensor *param, kiln__tensor *square_avg, kiln__tensor *momentum,
                            const kiln__tensor *grad_avg, const kiln__tensor *grad, const kiln__rmsprop_update *u) {
    kiln__tensor *outs[3] = {param, square_avg, momentum};
    const kiln__tensor *ins[2] = {grad, grad_avg};
    kiln__rmsprop_update e = *u;
    e.centered = grad_avg != NULL; /* the kernel reads grad_avg exactly when the flag says so */
    return kiln__t_optim_update(c, KILN__OP_RMSPROP_UPDATE, momentum ? 3 : 2, outs, grad_avg ? 2 : 1, ins, &e);
}

bool kiln__t_adagrad_update(kiln__opctx *c, kiln__tensor *param, kiln__tensor *sum, const kiln__tensor *grad,
                            const kiln__adagrad_update *u) {
    kiln__tensor *outs[2] = {param, sum};
    return kiln__t_optim_update(c, KILN__OP_ADAGRAD_UPDATE, 2, outs, 1, &grad, u);
}

bool kiln__t_sum_squares_into(kiln__opctx *c, kiln__tensor *sums, int64_t k, const kiln__tensor *x) {
    if (sums->dtype != KILN_F64 || sums->ndim != 1 || k < 0 || k >= sums->shape[0])
        return kiln__fail(c, KILN_ERR_INVALID_ARGUMENT, "sum of squares into element %lld of a bad vector",
                          (long long)k), false;
    kiln__op op;
    kiln__op_init(&op, KILN__OP_SUM_SQUARES, c->name);
    op.in[0] = kiln__view_of(x);
    op.out[0] = kiln__view_of(sums);
    op.out[0].ndim = 0;
    op.out[0].offset += k * sums->strides[0];
    op.n_in = op.n_out = 1;
    return kiln__t_submit(c, &op, sums->device);
}

bool kiln__t_copy_to_host(kiln__opctx *c, kiln__tensor *t, void *dst, size_t nbytes) {
    kiln__tensor_retain(t);
    t = kiln__t_contiguous(c, t);
    if (!t) return false;
    bool ok = kiln__wait_storage(t->storage) == KILN_OK;
    if (!ok) {
        if (!c->err) c->err = kiln__error_ref(atomic_load(&t->storage->err));
    } else if (nbytes) {
        const kiln__backend *be = kiln__backend_get(t->device);
        size_t off = (size_t)t->offset * kiln__elsize(t->dtype);
        ok = be->copy_to_host(be->context, dst, t->storage, off, nbytes) == KILN_OK;
        if (!ok) kiln__fail(c, KILN_ERR_DEVICE, "copy from %s failed", kiln_device_name(t->device));
    }
    kiln__tensor_release(t);
    return ok;
}

bool kiln__t_copy_from_host(kiln__opctx *c, kiln__tensor *dst, const void *src, size_t nbytes) {
    const kiln__backend *be = kiln__backend_get(dst->device);
    kiln__storage_note_write(dst->storage);
    bool ok = !nbytes || be->copy_from_host(be->context, dst->storage, (size_t)dst->offset * kiln__elsize(dst->dtype), src, nbytes) == KILN_OK;
    if (!ok) kiln__fail(c, KILN_ERR_DEVICE, "copy to %s failed", kiln_device_name(dst->device));
    return ok;
}
