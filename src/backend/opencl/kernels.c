/* OpenCL kernels of the elementwise family, every one generated from the expression IR: an
 * elementwise op record becomes a one-op group (ir/expr.h) and runs through the same printer
 * as a fused group (codegen.c). Also the copies between host and device (queued as COPY
 * records whose other side is a CPU storage), FILL, TO_HOST and NOOP. Each kernel enqueues
 * on the queue stream.c chose for it; a copy from host memory goes through a pinned staging
 * buffer and does not wait (staging.c); a read to host memory waits for its own event on the
 * engine worker that runs it (the host must have the data when the op is done). */
#include <stdlib.h>
#include <string.h>

#include "backend/backend-impl.h"

#if KILN_HAVE_OPENCL
#include "backend/opencl/opencl-impl.h"

static kiln__opencl_device *device_of_op(const kiln__op *op) {
    for (int i = 0; i < op->n_out; i++)
        if (op->out[i].storage && op->out[i].storage->device != KILN_CPU) return kiln__opencl_device_of(op->out[i].storage->device);
    for (int i = 0; i < op->n_in; i++)
        if (op->in[i].storage && op->in[i].storage->device != KILN_CPU) return kiln__opencl_device_of(op->in[i].storage->device);
    return NULL;
}

/* A group ending in a reduction as one vector loop per row (codegen_rows_vec.c) on a CPU
 * device, as a work-group per row elsewhere; KILN_OPENCL_ROWS=vector|group forces one. */
static bool vector_rows(const kiln__opencl_device *d) {
    const char *mode = getenv("KILN_OPENCL_ROWS");
    return mode ? strcmp(mode, "vector") == 0 : d->cpu;
}

static kiln_status run_group(kiln__opencl_device *d, const kiln__op *op, const kiln__fused *g) {
    for (int k = 0; k < g->expr.n_inputs; k++)
        if (g->input[k].storage->device != d->device) {
            kiln__kernel_error("input %d of %s is on %s, not %s", k, op->name, kiln_device_name(g->input[k].storage->device),
                               kiln_device_name(d->device));
            return KILN_ERR_DEVICE;
        }
    kiln__text src = {0};
    kiln__opencl_ew_launch *l = malloc(sizeof *l);
    kiln_status st = KILN_ERR_OUT_OF_MEMORY;
    if (!l) kiln__kernel_error("out of host memory");
    else if (!kiln__opencl_codegen_elementwise(g, d->fp64, vector_rows(d), &src, l)) st = KILN_ERR_UNSUPPORTED;
    else st = kiln__opencl_launch_local(d, op, src.s, (size_t)l->n, l->local, l->args, l->n_args);
    free(l);
    free(src.s);
    return st;
}

/* A group from the fusion window carries its views in the group, not the op. */
static kiln_status kernel_fused(const kiln__op *op) {
    const kiln__fused *g = (const kiln__fused *)(intptr_t)op->p.i[0];
    kiln__opencl_device *d = device_of_op(op);
    if (!d && g->expr.n_outputs > 0) d = kiln__opencl_device_of(g->output[0].storage->device);
    if (NEVER(!d)) return KILN_ERR_INTERNAL;
    return run_group(d, op, g);
}

static kiln_status kernel_elementwise(const kiln__op *op) {
    kiln__opencl_device *d = device_of_op(op);
    if (NEVER(!d)) return KILN_ERR_INTERNAL;
    kiln__fused *g = malloc(sizeof *g);
    if (!g) {
        kiln__kernel_error("out of host memory");
        return KILN_ERR_OUT_OF_MEMORY;
    }
    kiln__fused_init(g, &op->out[0]);
    kiln_status st = KILN_ERR_INTERNAL;
    if (ALWAYS(kiln__fused_add(g, op))) {
        kiln__fused_finish(g, NULL, NULL);
        st = run_group(d, op, g);
    }
    free(g);
    return st;
}

static bool dense(const kiln__view *v) { return kiln__view_is_contiguous(v); }

/* A dense, same-dtype COPY from another device of the context: one clEnqueueCopyBuffer on the
 * destination's queue, behind the barrier that waits for the source's last write. */
static kiln_status copy_between_devices(kiln__opencl_device *d, const kiln__op *op) {
    const kiln__view *in = &op->in[0], *out = &op->out[0];
    size_t es = kiln__elsize(out->dtype), n = (size_t)kiln__view_numel(out) * es;
    if (!n) return KILN_OK;
    cl_event ev = NULL;
    const cl_event *wait;
    cl_uint n_wait = (cl_uint)kiln__opencl_wait_list(&wait);
    cl_int err = clEnqueueCopyBuffer(kiln__opencl_queue(d, op), kiln__opencl_mem(in->storage), kiln__opencl_mem(out->storage),
                                     (size_t)in->offset * es, (size_t)out->offset * es, n, n_wait, n_wait ? wait : NULL, &ev);
    if (err != CL_SUCCESS) return kiln__opencl_fail(err, "clEnqueueCopyBuffer");
    return kiln__opencl_done(d, ev, "a copy between two OpenCL devices");
}

/* COPY: on one device it runs the generated kernel, from another device of the context a
 * buffer copy (the generated kernel for a view or a cast); host to device and back are
 * transfers of a dense, same-dtype run (kiln_to_device makes its source so first). */
static kiln_status kernel_copy(const kiln__op *op) {
    const kiln__view *in = &op->in[0], *out = &op->out[0];
    bool in_host = in->storage && in->storage->device == KILN_CPU, out_host = out->storage->device == KILN_CPU;
    kiln__opencl_device *d = device_of_op(op);
    if (!in_host && !out_host) {
        bool buffer_copy = in->storage && in->storage->device != out->storage->device && in->dtype == out->dtype && dense(in) && dense(out);
        return buffer_copy && ALWAYS(d) ? copy_between_devices(d, op) : kernel_elementwise(op);
    }
    if (NEVER(!d)) return KILN_ERR_INTERNAL;
    if (in->dtype != out->dtype || !dense(in) || !dense(out)) {
        kiln__kernel_error("a copy between the host and %s needs dense operands of one dtype", kiln_device_name(d->device));
        return KILN_ERR_UNSUPPORTED;
    }
    size_t es = kiln__elsize(out->dtype), n = (size_t)kiln__view_numel(out) * es;
    if (!n) return KILN_OK;
    if (in_host) /* (on the stream's queue, behind its barrier: no wait list) */
        return kiln__opencl_write_staged(d, kiln__opencl_queue(d, op), kiln__opencl_mem(out->storage), (size_t)out->offset * es,
                                     kiln__view_ptr(in), n);
    cl_event ev = NULL;
    const cl_event *wait;
    cl_uint n_wait = (cl_uint)kiln__opencl_wait_list(&wait);
    cl_int err = clEnqueueReadBuffer(kiln__opencl_queue(d, op), kiln__opencl_mem(in->storage), CL_FALSE, (size_t)in->offset * es,
                                     n, kiln__view_ptr(out), n_wait, n_wait ? wait : NULL, &ev);
    if (err != CL_SUCCESS) return kiln__opencl_fail(err, "clEnqueueReadBuffer");
    return kiln__opencl_wait(ev, "a copy from an OpenCL device to the host");
}

static kiln_status kernel_fill(const kiln__op *op) {
    const kiln__view *out = &op->out[0];
    kiln__opencl_device *d = device_of_op(op);
    if (NEVER(!d)) return KILN_ERR_INTERNAL;
    if (!dense(out)) { /* a strided fill: a one-node group storing a constant */
        kiln__fused *g = calloc(1, sizeof *g);
        if (!g) return KILN_ERR_OUT_OF_MEMORY;
        kiln__fused_init(g, out);
        g->expr.node[0] = (kiln__expr_node){.kind = KILN__EXPR_CONST, .dtype = out->dtype, .value = op->p.f[0]};
        g->expr.n_nodes = 1;
        g->expr.n_outputs = g->expr.n_stores = 1;
        g->output[0] = *out;
        g->expr.store[0] = (kiln__expr_store){.node = 0, .output = 0};
        kiln_status st = run_group(d, op, g);
        free(g);
        return st;
    }
    _Alignas(8) unsigned char pattern[8] = {0};
    size_t es = kiln__elsize(out->dtype), n = (size_t)kiln__view_numel(out);
    kiln__store_from_f64(pattern, out->dtype, 0, op->p.f[0]); /* COPY's conversions (saturating) */
    if (!n) return KILN_OK;
    cl_event ev = NULL;
    cl_int err = clEnqueueFillBuffer(kiln__opencl_queue(d, op), kiln__opencl_mem(out->storage), pattern, es,
                                     (size_t)out->offset * es, n * es, 0, NULL, &ev);
    if (err != CL_SUCCESS) return kiln__opencl_fail(err, "clEnqueueFillBuffer");
    return kiln__opencl_done(d, ev, "clEnqueueFillBuffer");
}

static kiln_status kernel_to_host(const kiln__op *op) {
    kiln__opencl_device *d = device_of_op(op);
    if (NEVER(!d)) return KILN_ERR_INTERNAL;
    const kiln__view *in = &op->in[0];
    if (!op->pi[1]) return KILN_OK;
    cl_event ev = NULL;
    const cl_event *wait;
    cl_uint n_wait = (cl_uint)kiln__opencl_wait_list(&wait);
    cl_int err = clEnqueueReadBuffer(kiln__opencl_queue(d, op), kiln__opencl_mem(in->storage), CL_FALSE,
                                     (size_t)in->offset * kiln__elsize(in->dtype), (size_t)op->pi[1],
                                     (void *)(intptr_t)op->pi[0], n_wait, n_wait ? wait : NULL, &ev);
    if (err != CL_SUCCESS) return kiln__opencl_fail(err, "clEnqueueReadBuffer");
    return kiln__opencl_wait(ev, "clEnqueueReadBuffer");
}

static kiln_status kernel_noop(const kiln__op *op) { return KILN_OK; }

void kiln__opencl_register_elementwise(kiln__kernel_fn *table) {
    for (int code = 0; code < KILN__OP_COUNT; code++)
        if (kiln__expr_opcode_fusable((kiln__opcode)code)) table[code] = kernel_elementwise;
    table[KILN__OP_LERP] = kernel_elementwise;
    table[KILN__OP_COPY] = kernel_copy;
    table[KILN__OP_FILL] = kernel_fill;
    table[KILN__OP_TO_HOST] = kernel_to_host;
    table[KILN__OP_NOOP] = kernel_noop;
    table[KILN__OP_FUSED] = kernel_fused;
}

#endif
