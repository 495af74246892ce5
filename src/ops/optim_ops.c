/* The fused optimizer updates, clipping's sums of squares and checkpoints' host copies (see
 * optim_ops-impl.h). The update ops keep their outputs on error: the parameter and its state
 * are never poisoned by a failed update. */
#include "ops/optim_ops-impl.h"

bool kiln__t_has_kernel(kiln_device dev, kiln__opcode code) {
    const kiln__backend *be = kiln__backend_get(dev);
    return be && be->kernels[code];
}

static void update_init(kiln__op *op, kiln__opcode code, const char *name, kiln__tensor *param,
                        const kiln__tensor *grad) {
    kiln__op_init(op, code, name);
    op->out[0] = kiln__view_of(param);
    op->in[0] = kiln__view_of(grad);
    op->n_in = 1;
    op->n_out = 1;
}

bool kiln__t_sgd_update(kiln__opctx *c, kiln__tensor *param, kiln__tensor *momentum, const kiln__tensor *grad,
                        const kiln__sgd_update *u, kiln__tensor *bf16_copy) {
    kiln__op op;
    update_init(&op, KILN__OP_SGD_UPDATE, c->name, param, grad);
    if (momentum) {
        op.out[1] = kiln__view_of(momentum);
        op.n_out = 2;
    }
    kiln__sgd_update_encode(&op, u);
    if (bf16_copy) { /* its last output (see KILN__OPTIM_FLAG_BF16_COPY) */
        op.out[op.n_out++] = kiln__view_of(bf16_copy);
        op.pi[KILN__OPTIM_PI_FLAGS] |= KILN__OPTIM_FLAG_BF16_COPY;
    }
    return kiln__t_submit(c, &op, param->device);
}

bool kiln__t_adam_update(kiln__opctx *c, kiln__tensor *param, kiln__tensor *exp_avg, kiln__tensor *exp_avg_sq,
                         const kiln__tensor *grad, const kiln__adam_update *u) {
    kiln__op op;
    update_init(&op, KILN__OP_ADAM_UPDATE, c->name, param, grad);
    op.out[1] = kiln__view_of(exp_avg);
    op.out[2] = kiln__view_of(exp_avg_sq);
    op.n_out = 3;
    kiln__adam_update_encode(&op, u);
    return kiln__t_submit(c, &op, param->device);
}

bool kiln__t_rmsprop_grad_avg(kiln__opctx *c, kiln__tensor *grad_avg, const kiln__tensor *param,
                              const kiln__tensor *grad, const kiln__rmsprop_update *u) {
    kiln__op op;
    update_init(&op, KILN__OP_RMSPROP_GRAD_AVG, c->name, grad_avg, grad);
    op.in[1] = kiln__view_of(param);
    op.n_in = 2;
    kiln__rmsprop_grad_avg_encode(&op, u);
    return kiln__t_submit(c, &op, param->device);
}

bool kiln__t_rmsprop_update(kiln__opctx *c, kiln__tensor *param, kiln__tensor *square_avg, kiln__tensor *momentum,
                            const kiln__tensor *grad_avg, const kiln__tensor *grad, const kiln__rmsprop_update *u) {
    kiln__op op;
    update_init(&op, KILN__OP_RMSPROP_UPDATE, c->name, param, grad);
    op.out[1] = kiln__view_of(square_avg);
    op.n_out = 2;
    if (momentum) op.out[op.n_out++] = kiln__view_of(momentum);
    if (grad_avg) op.in[op.n_in++] = kiln__view_of(grad_avg);
    kiln__rmsprop_update e = *u;
    e.centered = grad_avg != NULL; /* the kernel reads grad_avg exactly when the flag says so */
    kiln__rmsprop_update_encode(&op, &e);
    return kiln__t_submit(c, &op, param->device);
}

bool kiln__t_adagrad_update(kiln__opctx *c, kiln__tensor *param, kiln__tensor *sum, const kiln__tensor *grad,
                            const kiln__adagrad_update *u) {
    kiln__op op;
    update_init(&op, KILN__OP_ADAGRAD_UPDATE, c->name, param, grad);
    op.out[1] = kiln__view_of(sum);
    op.n_out = 2;
    kiln__adagrad_update_encode(&op, u);
    return kiln__t_submit(c, &op, param->device);
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
