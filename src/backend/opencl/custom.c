/* CUSTOM on an OpenCL device: a user's registered op with an OpenCL kernel of its own. Its
 * source is built and cached per device like kiln's generated kernels (program.c: in memory by
 * source, on disk by hash) and enqueued on the op's stream queue, behind the dependency
 * wrapper's barrier, like any kernel of the table. The kernel receives its operands as
 * (__global const T *in0, ..., __global T *out, long n): every operand dense from element 0
 * (the op layer copies an input that is not), one work item per output element, n of them;
 * an op that asked for layouts gets its operands as they are, each one's (long8 shape, long8
 * strides, long offset) after n, packed as kiln's own generated kernels take theirs. */
#include "backend/backend-impl.h"

#if KILN_HAVE_OPENCL
#include "backend/opencl/opencl-impl.h"
#include "ir/custom.h"

static bool dense_from_start(const kiln__view *v) { return v->offset == 0 && kiln__view_is_contiguous(v); }

static kiln_status kernel_custom(const kiln__op *op) {
    const kiln__custom_head *head = kiln__custom_of(op);
    if (!head || !head->cl_source || !head->cl_kernel) {
        kiln__kernel_error("custom op %s has no OpenCL kernel", op->name);
        return KILN_ERR_UNSUPPORTED;
    }
    const kiln__view *out = &op->out[0];
    kiln__opencl_device *d = kiln__opencl_device_of(out->storage->device);
    enum { MAX_OPERANDS = KILN__OP_MAX_IN + 1 };
    if (NEVER(!d) || NEVER(op->n_in + 1 > MAX_OPERANDS)) return KILN_ERR_INTERNAL;
    cl_mem mem[MAX_OPERANDS];
    cl_long8 shape[MAX_OPERANDS], strides[MAX_OPERANDS];
    cl_long offset[MAX_OPERANDS];
    kiln__opencl_arg args[4 * MAX_OPERANDS + 1];
    int n_args = 0;
    for (int i = 0; i <= op->n_in; i++) {
        const kiln__view *v = i < op->n_in ? &op->in[i] : out;
        if (!v->storage || v->storage->device != d->device || (!head->cl_layout && NEVER(!dense_from_start(v)))) {
            kiln__kernel_error("operand %d of %s is not a dense tensor on %s", i, op->name, kiln_device_name(d->device));
            return KILN_ERR_DEVICE;
        }
        mem[i] = kiln__opencl_mem(v->storage);
        args[n_args++] = (kiln__opencl_arg){sizeof(cl_mem), &mem[i]};
        kiln__opencl_pack8(&shape[i], v->shape, v->ndim, 1);
        kiln__opencl_pack8(&strides[i], v->strides, v->ndim, 0);
        offset[i] = v->offset;
    }
    cl_long n = kiln__view_numel(out);
    args[n_args++] = (kiln__opencl_arg){sizeof n, &n};
    for (int i = 0; head->cl_layout && i <= op->n_in; i++) {
        args[n_args++] = (kiln__opencl_arg){sizeof(cl_long8), &shape[i]};
        args[n_args++] = (kiln__opencl_arg){sizeof(cl_long8), &strides[i]};
        args[n_args++] = (kiln__opencl_arg){sizeof(cl_long), &offset[i]};
    }
    return kiln__opencl_launch_named(d, op, head->cl_source, head->cl_kernel, (size_t)n, 0, args, n_args);
}

void kiln__opencl_register_custom(kiln__kernel_fn *table) { table[KILN__OP_CUSTOM] = kernel_custom; }
#endif
