/* OpenCL reductions (every KERNEL row of ir/reduce_table.h, over any dims) and SOFTMAX /
 * LOG_SOFTMAX over one dim: generated kernels, one work item per output element (per line for
 * softmax) walking its reduced elements in row-major order. A reduction's source follows its
 * row's fold and finish, so a new row of a known fold and finish needs no edit here; it
 * depends on the row and dtypes only: shapes and strides are arguments. A long f32 SUM or MEAN to one
 * value runs in chunks instead (reduce_chunked.c). Floats accumulate in double
 * when the device has it (the CPU accumulates in double too, in another order: sums agree to
 * rounding, max/min/arg* exactly); NaN propagates as on the CPU. */
#include <string.h>

#include "backend/backend-impl.h"

#if KILN_HAVE_OPENCL
#include "backend/opencl/opencl-impl.h"

static void fold_source(kiln__text *b, kiln__opcode code, kiln_dtype in, kiln_dtype out, bool fp64) {
    const char *T = kiln__opencl_ctype(in), *U = kiln__opencl_ctype(out);
    bool f = kiln__dtype_is_float(in);
    const char *A = f ? (fp64 ? "double" : "float") : "long";
    kiln__opencl_src_prelude(b, fp64);
    kiln__text_printf(b, "%s", kiln__opencl_layout_helpers);
    /* reduced element j: the innermost reduced dim (ilen elements, istep apart) walked directly;
     * the others (nouter combinations) through roff */
    kiln__text_printf(b, "#define RO(j) (nouter == 1 ? (j) * istep : roff((j) / ilen, rshape, istr) + ((j) %% ilen) * istep)\n");
    kiln__text_printf(b,
                      "__kernel void k(long nout, long nred, long8 oshape8, long8 rshape8, long8 istr8, long8 ostr8,\n"
                      "  long io, long oo, long corr, long take_sqrt, long ilen, long istep, long nouter,\n"
                      "  __global const %s *x, __global %s *y) {\n"
                      "  long o = get_global_id(0); if (o >= nout) return;\n"
                      "  long oshape[8], rshape[8], istr[8], ostr[8];\n"
                      "  unpack(oshape8, oshape); unpack(rshape8, rshape); unpack(istr8, istr); unpack(ostr8, ostr);\n"
                      "  long ib = io, ob = oo; locate(o, oshape, istr, ostr, &ib, &ob);\n",
                      T, U);
    const kiln__reduce_info *row = kiln__reduce_info_of(code);
    switch (row->fold) {
    case KILN__RFOLD_SUM: case KILN__RFOLD_SQDEV: /* SQDEV: this sum gives the mean first */
        if (f) kiln__text_printf(b, "  %s a = 0; for (long j = 0; j < nred; j++) a += (%s)x[ib + RO(j)];\n", A, A);
        else kiln__text_printf(b, "  ulong a = 0; for (long j = 0; j < nred; j++) a += (ulong)x[ib + RO(j)];\n");
        if (row->finish == KILN__RFIN_VALUE) kiln__text_printf(b, "  y[ob] = (%s)a;\n", U);
        else if (row->finish == KILN__RFIN_MEAN) kiln__text_printf(b, "  y[ob] = (%s)(a / (%s)nred);\n", U, A);
        else
            kiln__text_printf(b,
                              "  %s m = a / (%s)nred, s = 0;\n"
                              "  for (long j = 0; j < nred; j++) { %s d = (%s)x[ib + RO(j)] - m; s += d * d; }\n"
                              "  %s v = s / (nred > corr ? (%s)nred - (%s)corr : (%s)0);\n"
                              "  y[ob] = (%s)(take_sqrt ? sqrt(v) : v);\n",
                              A, A, A, A, A, A, A, A, U);
        return;
    case KILN__RFOLD_PROD:
        if (f) kiln__text_printf(b, "  %s a = 1; for (long j = 0; j < nred; j++) a *= (%s)x[ib + RO(j)];\n", A, A);
        else kiln__text_printf(b, "  ulong a = 1; for (long j = 0; j < nred; j++) a *= (ulong)x[ib + RO(j)];\n");
        kiln__text_printf(b, "  y[ob] = (%s)a;\n", U);
        return;
    case KILN__RFOLD_EXPSUM: /* finish LSE */
        kiln__text_printf(b,
                          "  %s m = -INFINITY; for (long j = 0; j < nred; j++) { %s v = x[ib + RO(j)];\n"
                          "    if (isnan(m)) break; if (isnan(v) || v > m) m = v; }\n"
                          "  if (isinf(m) || isnan(m)) { y[ob] = (%s)m; return; }\n"
                          "  %s s = 0; for (long j = 0; j < nred; j++) s += exp((%s)x[ib + RO(j)] - (%s)m);\n"
                          "  y[ob] = (%s)((%s)m + log(s));\n",
                          T, T, U, A, A, A, U, A);
        return;
    default: { /* MAX MIN, finish VALUE or INDEX: the first NaN wins, else the first best */
        bool max = row->fold == KILN__RFOLD_MAX, arg = row->finish == KILN__RFIN_INDEX;
        kiln__text_printf(b, "  %s best = x[ib]; long at = 0;\n  for (long j = 1; j < nred; j++) {\n", T);
        if (f) kiln__text_printf(b, "    if (isnan(best)) break;\n");
        kiln__text_printf(b, "    %s v = x[ib + RO(j)];\n    if (%sv %s best) { best = v; at = j; }\n  }\n", T,
                          f ? "isnan(v) || " : "", max ? ">" : "<");
        kiln__text_printf(b, arg ? "  y[ob] = at;\n" : "  y[ob] = best;\n");
        return;
    }
    }
}

static kiln_status kernel_reduce(const kiln__op *op) {
    const kiln__view *in = &op->in[0], *out = &op->out[0];
    kiln__opencl_device *d = kiln__opencl_device_of(out->storage->device);
    if (NEVER(!d) || in->ndim != out->ndim) return KILN_ERR_INTERNAL;
    kiln_dtype idt = in->dtype, odt = out->dtype;
    if ((idt != KILN_F32 && idt != KILN_F64 && idt != KILN_I64) || (idt == KILN_F64 && !d->fp64)) {
        kiln__kernel_error("no OpenCL kernel for %s on %s yet", kiln__opcode_name(op->code), kiln_dtype_name(idt));
        return KILN_ERR_UNSUPPORTED;
    }
    if (kiln__opencl_sum_chunked_takes(op)) return kiln__opencl_sum_chunked(d, op);
    int nd = in->ndim;
    int64_t oshape[KILN_MAX_DIMS], rshape[KILN_MAX_DIMS];
    cl_long nout = 1, nred = 1;
    for (int k = 0; k < nd; k++) {
        bool red = out->shape[k] == 1 && in->shape[k] != 1;
        oshape[k] = red ? 1 : in->shape[k];
        rshape[k] = red ? in->shape[k] : 1;
        nout *= oshape[k];
        nred *= rshape[k];
    }
    kiln__text src = {0};
    fold_source(&src, op->code, idt, odt, d->fp64);
    kiln__text_printf(&src, "}\n");
    cl_long8 os, rs, ist, ost;
    kiln__opencl_pack8(&os, oshape, nd, 1);
    kiln__opencl_pack8(&rs, rshape, nd, 1);
    kiln__opencl_pack8(&ist, in->strides, nd, 0);
    kiln__opencl_pack8(&ost, out->strides, nd, 0);
    cl_long io = in->offset, oo = out->offset, corr = op->p.i[0], sq = op->p.i[1], ilen = 1, istep = 0;
    for (int k = nd - 1; k >= 0; k--)
        if (rshape[k] != 1) {
            ilen = rshape[k], istep = in->strides[k];
            rshape[k] = 1;
            kiln__opencl_pack8(&rs, rshape, nd, 1); /* the outer reduced dims */
            break;
        }
    cl_long nouter = ilen ? nred / ilen : 1;
    if (!ilen) ilen = 1;
    cl_mem x = kiln__opencl_mem(in->storage), y = kiln__opencl_mem(out->storage);
    kiln__reduce_fold fold = kiln__reduce_info_of(op->code)->fold;
    if (nred == 0 && (fold == KILN__RFOLD_MAX || fold == KILN__RFOLD_MIN)) { /* no identity to write */
        free(src.s);
        kiln__kernel_error("%s over an empty dim", kiln__opcode_name(op->code));
        return KILN_ERR_SHAPE;
    }
    kiln__opencl_arg args[] = {{8, &nout}, {8, &nred}, {64, &os}, {64, &rs}, {64, &ist}, {64, &ost}, {8, &io}, {8, &oo},
                           {8, &corr}, {8, &sq}, {8, &ilen}, {8, &istep}, {8, &nouter}, {sizeof x, &x}, {sizeof y, &y}};
    return kiln__opencl_run(d, op, &src, (size_t)nout, args, (int)(sizeof args / sizeof args[0]));
}

/* SOFTMAX / LOG_SOFTMAX over dim p.i[0]: one work item per line. */
static kiln_status kernel_softmax(const kiln__op *op) {
    const kiln__view *in = &op->in[0], *out = &op->out[0];
    kiln__opencl_device *d = kiln__opencl_device_of(out->storage->device);
    if (NEVER(!d)) return KILN_ERR_INTERNAL;
    kiln_dtype dt = in->dtype;
    if ((dt != KILN_F32 && dt != KILN_F64) || out->dtype != dt || (dt == KILN_F64 && !d->fp64)) {
        kiln__kernel_error("no OpenCL kernel for %s on %s yet", kiln__opcode_name(op->code), kiln_dtype_name(dt));
        return KILN_ERR_UNSUPPORTED;
    }
    int nd = in->ndim, dim = (int)op->p.i[0];
    if (nd == 0) dim = 0;
    const char *T = kiln__opencl_ctype(dt), *A = d->fp64 ? "double" : "float";
    kiln__text src = {0};
    kiln__opencl_src_prelude(&src, d->fp64);
    kiln__text_printf(&src, "%s", kiln__opencl_layout_helpers);
    kiln__text_printf(&src,
                      "__kernel void k(long nout, long len, long8 oshape8, long8 istr8, long8 ostr8, long io, long oo,\n"
                      "  long is, long os, __global const %s *x, __global %s *y) {\n"
                      "  long o = get_global_id(0); if (o >= nout) return;\n"
                      "  long oshape[8], istr[8], ostr[8];\n"
                      "  unpack(oshape8, oshape); unpack(istr8, istr); unpack(ostr8, ostr);\n"
                      "  long ib = io, ob = oo; locate(o, oshape, istr, ostr, &ib, &ob);\n"
                      "  %s m = -INFINITY; for (long j = 0; j < len; j++) { %s v = x[ib + j * is]; if (isnan(v) || v > m) m = v; if (isnan(m)) break; }\n"
                      "  %s s = 0; for (long j = 0; j < len; j++) s += exp((%s)(x[ib + j * is] - m));\n",
                      T, T, T, T, A, T);
    if (op->code == KILN__OP_SOFTMAX)
        kiln__text_printf(&src, "  for (long j = 0; j < len; j++) y[ob + j * os] = (%s)(exp((%s)(x[ib + j * is] - m)) / s);\n}\n", T, A);
    else
        kiln__text_printf(&src, "  %s ls = (%s)log(s);\n  for (long j = 0; j < len; j++) y[ob + j * os] = x[ib + j * is] - m - ls;\n}\n", T, T);
    int64_t oshape[KILN_MAX_DIMS], zero8[8] = {0};
    cl_long nout = 1, len = nd ? in->shape[dim] : 1;
    for (int k = 0; k < nd; k++) {
        oshape[k] = k == dim ? 1 : in->shape[k];
        nout *= oshape[k];
    }
    cl_long8 os8, is8, ost8;
    kiln__opencl_pack8(&os8, oshape, nd, 1);
    kiln__opencl_pack8(&is8, nd ? in->strides : zero8, nd, 0);
    kiln__opencl_pack8(&ost8, nd ? out->strides : zero8, nd, 0);
    cl_long io = in->offset, oo = out->offset, is = nd ? in->strides[dim] : 0, os = nd ? out->strides[dim] : 0;
    cl_mem x = kiln__opencl_mem(in->storage), y = kiln__opencl_mem(out->storage);
    kiln__opencl_arg args[] = {{8, &nout}, {8, &len}, {64, &os8}, {64, &is8}, {64, &ost8}, {8, &io}, {8, &oo},
                           {8, &is}, {8, &os}, {sizeof x, &x}, {sizeof y, &y}};
    return kiln__opencl_run(d, op, &src, len ? (size_t)nout : 0, args, (int)(sizeof args / sizeof args[0]));
}

void kiln__opencl_register_reduce(kiln__kernel_fn *table) {
#define REGISTER(NAME, ...) table[KILN__OP_##NAME] = kernel_reduce;
    KILN__REDUCE_KERNELS(REGISTER)
#undef REGISTER
    table[KILN__OP_SOFTMAX] = kernel_softmax;
    table[KILN__OP_LOG_SOFTMAX] = kernel_softmax;
}

#endif
