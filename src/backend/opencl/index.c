/* OpenCL indexing kernels: GATHER and INDEX_SELECT (one work item per output element),
 * SCATTER_ADD (one per position off dim, adding along dim in index order: the CPU's order,
 * so sums match bit for bit), ONE_HOT (one per index). Elements move as raw bits of their
 * size. An index out of range is written to a small flag buffer read back after the kernel:
 * the op then fails with KILN_ERR_INDEX as on the CPU. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend-impl.h"

#if KILN_HAVE_OPENCL
#include "backend/opencl/opencl-impl.h"

static const char *raw_type(kiln_dtype d) {
    switch (kiln__elsize(d)) {
    case 1: return "uchar";
    case 2: return "ushort";
    case 4: return "uint";
    default: return "ulong";
    }
}

kiln_status kiln__opencl_run_flagged(kiln__opencl_device *d, const kiln__op *op, kiln__text *src, size_t global,
                                 kiln__opencl_arg *args, int n_args, cl_long flag[2]) {
    flag[0] = flag[1] = 0;
    cl_int err = CL_SUCCESS;
    cl_mem bad = clCreateBuffer(d->context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, 2 * sizeof(cl_long), flag, &err);
    if (err != CL_SUCCESS) return free(src->s), src->s = NULL, kiln__opencl_fail(err, "clCreateBuffer");
    args[n_args++] = (kiln__opencl_arg){sizeof bad, &bad};
    kiln_status st = kiln__opencl_run(d, op, src, global, args, n_args);
    if (st == KILN_OK) {
        err = clEnqueueReadBuffer(kiln__opencl_queue(d, op), bad, CL_TRUE, 0, 2 * sizeof(cl_long), flag, 0, NULL, NULL);
        if (err != CL_SUCCESS) st = kiln__opencl_fail(err, "clEnqueueReadBuffer");
    }
    clReleaseMemObject(bad);
    return st;
}

/* kiln__opencl_run_flagged; KILN_ERR_INDEX when the kernel flagged an index out of range. */
static kiln_status launch_checked(kiln__opencl_device *d, const kiln__op *op, kiln__text *src, size_t global,
                                  kiln__opencl_arg *args, int n_args, int64_t size) {
    cl_long flag[2];
    kiln_status st = kiln__opencl_run_flagged(d, op, src, global, args, n_args, flag);
    if (st == KILN_OK && flag[0]) {
        kiln__kernel_error("index %lld out of range for dim of size %lld", (long long)flag[1], (long long)size);
        st = KILN_ERR_INDEX;
    }
    return st;
}

static kiln__opencl_device *dev_of(const kiln__op *op) { return kiln__opencl_device_of(op->out[0].storage->device); }

/* out[e] = src[e with dim's coordinate replaced by idx[e]]; idx seen over out's shape. */
static kiln_status run_gather(const kiln__op *op, const kiln__view *idx) {
    const kiln__view *src = &op->in[0], *out = &op->out[0];
    kiln__opencl_device *d = dev_of(op);
    if (NEVER(!d)) return KILN_ERR_INTERNAL;
    int nd = out->ndim, dim = (int)op->p.i[0];
    kiln__text s = {0};
    kiln__text_printf(&s, "%s", kiln__opencl_layout_helpers);
    kiln__text_printf(&s,
                      "__kernel void k(long n, long8 shape8, long8 ost8, long oo, long8 sst8, long so, long8 ist8, long io,\n"
                      "  int dim, long size, __global %s *out, __global const %s *src, __global const %s *idx, __global long *bad) {\n"
                      "  long e = get_global_id(0); if (e >= n) return;\n"
                      "  long shape[8], ost[8], sst[8], ist[8], c[8];\n"
                      "  unpack(shape8, shape); unpack(ost8, ost); unpack(sst8, sst); unpack(ist8, ist); coords(e, shape, c);\n"
                      "  long kk = idx[io + dot(c, ist)];\n"
                      "  if (kk < 0 || kk >= size) { bad[0] = 1; bad[1] = kk; return; }\n"
                      "  long ob = oo + dot(c, ost); c[dim] = kk; out[ob] = src[so + dot(c, sst)];\n}\n",
                      raw_type(out->dtype), raw_type(src->dtype), idx->dtype == KILN_I64 ? "long" : "int");
    int64_t sstr[KILN_MAX_DIMS];
    memcpy(sstr, src->strides, sizeof sstr);
    cl_long8 shape8, ost8, sst8, ist8;
    kiln__opencl_pack8(&shape8, out->shape, nd, 1);
    kiln__opencl_pack8(&ost8, out->strides, nd, 0);
    kiln__opencl_pack8(&sst8, sstr, nd, 0);
    kiln__opencl_pack8(&ist8, idx->strides, nd, 0);
    cl_long n = kiln__view_numel(out), oo = out->offset, so = src->offset, io = idx->offset, size = src->shape[dim];
    cl_int dim8 = dim + 8 - nd;
    cl_mem om = kiln__opencl_mem(out->storage), sm = kiln__opencl_mem(src->storage), im = kiln__opencl_mem(idx->storage);
    kiln__opencl_arg args[16] = {{8, &n},  {64, &shape8}, {64, &ost8}, {8, &oo},          {64, &sst8},       {8, &so},
                             {64, &ist8}, {8, &io},   {4, &dim8},  {8, &size},        {sizeof om, &om},  {sizeof sm, &sm},
                             {sizeof im, &im}};
    return launch_checked(d, op, &s, (size_t)n, args, 13, size);
}

static kiln_status kernel_gather(const kiln__op *op) { return run_gather(op, &op->in[1]); }

static kiln_status kernel_index_select(const kiln__op *op) {
    const kiln__view *index = &op->in[1], *out = &op->out[0];
    int dim = (int)op->p.i[0];
    kiln__view idx = *index; /* the 1-d index, broadcast over out: it steps along dim only */
    idx.ndim = out->ndim;
    for (int k = 0; k < out->ndim; k++) {
        idx.shape[k] = out->shape[k];
        idx.strides[k] = k == dim ? (index->ndim ? index->strides[0] : 0) : 0;
    }
    return run_gather(op, &idx);
}

/* out[.. idx[j] ..] += src[.. j ..] along dim, j in order, per position off dim. */
static kiln_status kernel_scatter_add(const kiln__op *op) {
    const kiln__view *idx = &op->in[0], *src = &op->in[1], *out = &op->out[0];
    kiln__opencl_device *d = dev_of(op);
    if (NEVER(!d)) return KILN_ERR_INTERNAL;
    kiln_dtype dt = out->dtype;
    bool f = dt == KILN_F32 || dt == KILN_F64, i = dt == KILN_I32 || dt == KILN_I64;
    if ((!f && !i) || src->dtype != dt || (dt == KILN_F64 && !d->fp64)) {
        kiln__kernel_error("no OpenCL kernel for SCATTER_ADD on %s yet", kiln_dtype_name(dt));
        return KILN_ERR_UNSUPPORTED;
    }
    int nd = idx->ndim, dim = (int)op->p.i[0];
    const char *T = kiln__opencl_ctype(dt), *UT = dt == KILN_I32 ? "uint" : "ulong";
    kiln__text s = {0};
    kiln__opencl_src_prelude(&s, d->fp64);
    kiln__text_printf(&s, "%s", kiln__opencl_layout_helpers);
    kiln__text_printf(&s,
                      "__kernel void k(long n, long8 shape8, long8 ost8, long oo, long8 sst8, long so, long8 ist8, long io,\n"
                      "  int dim, long len, long size, __global %s *out, __global const %s *src, __global const %s *idx,\n"
                      "  __global long *bad) {\n"
                      "  long e = get_global_id(0); if (e >= n) return;\n"
                      "  long shape[8], ost[8], sst[8], ist[8], c[8];\n"
                      "  unpack(shape8, shape); unpack(ost8, ost); unpack(sst8, sst); unpack(ist8, ist); coords(e, shape, c);\n"
                      "  long ob = oo + dot(c, ost), sb = so + dot(c, sst), ib = io + dot(c, ist);\n"
                      "  for (long j = 0; j < len; j++) {\n"
                      "    long kk = idx[ib + j * ist[dim]];\n"
                      "    if (kk < 0 || kk >= size) { bad[0] = 1; bad[1] = kk; return; }\n",
                      T, T, idx->dtype == KILN_I64 ? "long" : "int");
    if (f) kiln__text_printf(&s, "    out[ob + kk * ost[dim]] += src[sb + j * sst[dim]];\n  }\n}\n");
    else kiln__text_printf(&s, "    out[ob + kk * ost[dim]] = (%s)((%s)out[ob + kk * ost[dim]] + (%s)src[sb + j * sst[dim]]);\n  }\n}\n", T, UT, UT);
    int64_t shape[KILN_MAX_DIMS];
    memcpy(shape, idx->shape, sizeof shape);
    shape[dim] = 1;
    cl_long8 shape8, ost8, sst8, ist8;
    kiln__opencl_pack8(&shape8, shape, nd, 1);
    kiln__opencl_pack8(&ost8, out->strides, nd, 0);
    kiln__opencl_pack8(&sst8, src->strides, nd, 0);
    kiln__opencl_pack8(&ist8, idx->strides, nd, 0);
    cl_long n = 1, oo = out->offset, so = src->offset, io = idx->offset, len = idx->shape[dim], size = out->shape[dim];
    for (int k = 0; k < nd; k++) n *= shape[k];
    cl_int dim8 = dim + 8 - nd;
    cl_mem om = kiln__opencl_mem(out->storage), sm = kiln__opencl_mem(src->storage), im = kiln__opencl_mem(idx->storage);
    kiln__opencl_arg args[16] = {{8, &n},     {64, &shape8}, {64, &ost8}, {8, &oo},   {64, &sst8},      {8, &so},
                             {64, &ist8}, {8, &io},      {4, &dim8},  {8, &len},  {8, &size},       {sizeof om, &om},
                             {sizeof sm, &sm}, {sizeof im, &im}};
    return launch_checked(d, op, &s, len ? (size_t)n : 0, args, 14, size);
}

/* out[.., c] = (idx[..] == c) in out's dtype. */
static kiln_status kernel_one_hot(const kiln__op *op) {
    const kiln__view *idx = &op->in[0], *out = &op->out[0];
    kiln__opencl_device *d = dev_of(op);
    if (NEVER(!d)) return KILN_ERR_INTERNAL;
    int nd = idx->ndim;
    const char *ET = raw_type(out->dtype);
    kiln__text s = {0};
    kiln__text_printf(&s, "%s", kiln__opencl_layout_helpers);
    kiln__text_printf(&s,
                      "__kernel void k(long n, long8 shape8, long8 ost8, long oo, long cstep, long8 ist8, long io, long classes,\n"
                      "  %s one, __global %s *out, __global const %s *idx, __global long *bad) {\n"
                      "  long e = get_global_id(0); if (e >= n) return;\n"
                      "  long shape[8], ost[8], ist[8], c[8];\n"
                      "  unpack(shape8, shape); unpack(ost8, ost); unpack(ist8, ist); coords(e, shape, c);\n"
                      "  long kk = idx[io + dot(c, ist)], ob = oo + dot(c, ost);\n"
                      "  if (kk < 0 || kk >= classes) { bad[0] = 1; bad[1] = kk; return; }\n"
                      "  for (long j = 0; j < classes; j++) out[ob + j * cstep] = j == kk ? one : (%s)0;\n}\n",
                      ET, ET, idx->dtype == KILN_I64 ? "long" : "int", ET);
    cl_long8 shape8, ost8, ist8;
    kiln__opencl_pack8(&shape8, idx->shape, nd, 1);
    kiln__opencl_pack8(&ost8, out->strides, nd, 0);
    kiln__opencl_pack8(&ist8, idx->strides, nd, 0);
    cl_long n = kiln__view_numel(idx), oo = out->offset, cstep = out->strides[out->ndim - 1], io = idx->offset,
            classes = op->p.i[0];
    _Alignas(8) unsigned char one[8] = {0};
    kiln__store_from_f64(one, out->dtype, 0, 1.0);
    cl_mem om = kiln__opencl_mem(out->storage), im = kiln__opencl_mem(idx->storage);
    kiln__opencl_arg args[16] = {{8, &n},       {64, &shape8}, {64, &ost8},      {8, &oo},        {8, &cstep},
                             {64, &ist8},   {8, &io},      {8, &classes},    {kiln__elsize(out->dtype), one},
                             {sizeof om, &om}, {sizeof im, &im}};
    return launch_checked(d, op, &s, (size_t)n, args, 11, classes);
}

void kiln__opencl_register_index(kiln__kernel_fn *table) {
    table[KILN__OP_GATHER] = kernel_gather;
    table[KILN__OP_INDEX_SELECT] = kernel_index_select;
    table[KILN__OP_SCATTER_ADD] = kernel_scatter_add;
    table[KILN__OP_ONE_HOT] = kernel_one_hot;
}

#endif
