/* OpenCL range generators (ARANGE, LINSPACE, EYE: one work item per element, the CPU's
 * formulas in double and COPY's conversions to the output dtype) and scans (CUMSUM, CUMPROD:
 * one work item per line along dim, accumulating as the CPU does: f32 in double, i64 wrapping),
 * so results equal the CPU's bit for bit. */
#include <math.h>
#include <stdlib.h>

#include "backend/backend-impl.h"

#if KILN_HAVE_OPENCL
#include "backend/opencl/opencl-impl.h"

/* "y[at] = <v converted to dtype>;" for a double v. */
static void store_f64(kiln__text *s, kiln_dtype dt, const char *v) {
    switch (dt) {
    case KILN_F16: kiln__text_printf(s, "  vstore_half_rte((float)(%s), at, y);\n", v); return;
    case KILN_BF16: kiln__text_printf(s, "  y[at] = f2bf((float)(%s));\n", v); return;
    case KILN_I32: kiln__text_printf(s, "  y[at] = convert_int_sat(%s);\n", v); return;
    case KILN_I64: kiln__text_printf(s, "  y[at] = convert_long_sat(%s);\n", v); return;
    case KILN_BOOL: kiln__text_printf(s, "  y[at] = (%s) != 0.0;\n", v); return;
    default: kiln__text_printf(s, "  y[at] = (%s)(%s);\n", kiln__opencl_ctype(dt), v); return;
    }
}

static kiln__opencl_device *dev_of(const kiln__op *op) { return kiln__opencl_device_of(op->out[0].storage->device); }

static kiln_status run(kiln__opencl_device *d, const kiln__op *op, kiln__text *s, const kiln__view *out, double a, double b,
                       cl_long n_param) {
    cl_long8 shape8, st8;
    kiln__opencl_pack8(&shape8, out->shape, out->ndim, 1);
    kiln__opencl_pack8(&st8, out->strides, out->ndim, 0);
    cl_long n = kiln__view_numel(out), oo = out->offset;
    cl_mem y = kiln__opencl_mem(out->storage);
    kiln__opencl_arg args[] = {{8, &n}, {64, &shape8}, {64, &st8}, {8, &oo}, {8, &a}, {8, &b}, {8, &n_param}, {sizeof y, &y}};
    return kiln__opencl_run(d, op, s, (size_t)n, args, 8);
}

static void header(kiln__text *s, kiln_dtype dt) {
    kiln__opencl_src_prelude(s, true);
    kiln__text_printf(s, "%s__kernel void k(long n, long8 shape8, long8 st8, long oo, double a, double b, long np,\n"
                           "  __global %s *y) {\n  long i = get_global_id(0); if (i >= n) return;\n"
                           "  long shape[8], st[8], c[8]; unpack(shape8, shape); unpack(st8, st); coords(i, shape, c);\n"
                           "  long at = oo + dot(c, st);\n",
                      kiln__opencl_layout_helpers, kiln__opencl_storetype(dt));
}

static kiln_status kernel_range(const kiln__op *op) {
    const kiln__view *out = &op->out[0];
    kiln__opencl_device *d = dev_of(op);
    if (NEVER(!d)) return KILN_ERR_INTERNAL;
    int want = op->code == KILN__OP_EYE ? 2 : 1;
    if (out->ndim != want || !d->fp64) {
        kiln__kernel_error("no OpenCL kernel for %s here", kiln__opcode_name(op->code));
        return out->ndim != want ? KILN_ERR_INTERNAL : KILN_ERR_UNSUPPORTED;
    }
    kiln_dtype dt = out->dtype;
    double a = op->p.f[0], b = op->p.f[1];
    kiln__text s = {0};
    header(&s, dt);
    if (op->code == KILN__OP_EYE) {
        store_f64(&s, dt, "c[6] == c[7] ? 1.0 : 0.0");
    } else if (op->code == KILN__OP_LINSPACE) { /* both halves from their own end, as torch */
        kiln__text_printf(&s, "  double step = np > 1 ? (b - a) / (double)(np - 1) : 0.0;\n"
                                "  double v = i < np / 2 || np == 1 ? a + step * (double)i : b - step * (double)(np - 1 - i);\n");
        store_f64(&s, dt, "v");
    } else if (kiln__dtype_is_int(dt) && a == floor(a) && b == floor(b) && fabs(a) < 9.2e18 && fabs(b) < 9.2e18) {
        /* integer arithmetic: doubles lose i64 values past 2^53 */
        kiln__text_printf(&s, "  long v = (long)((ulong)(long)a + (ulong)i * (ulong)(long)b);\n");
        kiln__text_printf(&s, dt == KILN_I64 ? "  y[at] = v;\n" : "  y[at] = v > INT_MAX ? INT_MAX : v < INT_MIN ? INT_MIN : (int)v;\n");
    } else {
        store_f64(&s, dt, "a + (double)i * b");
    }
    kiln__text_printf(&s, "}\n");
    return run(d, op, &s, out, a, b, out->ndim ? out->shape[0] : 1);
}

/* CUMSUM / CUMPROD along dim p.i[0], from the end when p.i[1]. */
static kiln_status kernel_scan(const kiln__op *op) {
    const kiln__view *in = &op->in[0], *out = &op->out[0];
    kiln__opencl_device *d = dev_of(op);
    if (NEVER(!d)) return KILN_ERR_INTERNAL;
    kiln_dtype dt = out->dtype;
    if ((dt != KILN_F32 && dt != KILN_F64 && dt != KILN_I64) || in->dtype != dt || !d->fp64) {
        kiln__kernel_error("no OpenCL kernel for %s on %s yet", kiln__opcode_name(op->code), kiln_dtype_name(dt));
        return KILN_ERR_UNSUPPORTED;
    }
    int nd = out->ndim, dim = (int)op->p.i[0];
    bool prod = op->code == KILN__OP_CUMPROD;
    const char *T = kiln__opencl_ctype(dt), *A = dt == KILN_I64 ? "ulong" : "double";
    kiln__text s = {0};
    kiln__opencl_src_prelude(&s, true);
    kiln__text_printf(&s, "%s", kiln__opencl_layout_helpers);
    kiln__text_printf(&s,
                      "__kernel void k(long n, long8 shape8, long8 ost8, long oo, long8 ist8, long io, int dim, long len,\n"
                      "  long reverse, __global %s *y, __global const %s *x) {\n"
                      "  long e = get_global_id(0); if (e >= n) return;\n"
                      "  long shape[8], ost[8], ist[8], c[8];\n"
                      "  unpack(shape8, shape); unpack(ost8, ost); unpack(ist8, ist); coords(e, shape, c);\n"
                      "  long ob = oo + dot(c, ost), ib = io + dot(c, ist);\n"
                      "  %s acc = %s;\n"
                      "  for (long k = 0; k < len; k++) { long j = reverse ? len - 1 - k : k;\n"
                      "    acc = (%s)(acc %s (%s)x[ib + j * ist[dim]]); y[ob + j * ost[dim]] = (%s)acc; }\n}\n",
                      T, T, A, prod ? "1" : "0", A, prod ? "*" : "+", A, T);
    int64_t shape[KILN_MAX_DIMS];
    for (int k = 0; k < nd; k++) shape[k] = k == dim ? 1 : out->shape[k];
    cl_long8 shape8, ost8, ist8;
    kiln__opencl_pack8(&shape8, shape, nd, 1);
    kiln__opencl_pack8(&ost8, out->strides, nd, 0);
    kiln__opencl_pack8(&ist8, in->strides, nd, 0);
    cl_long n = 1, oo = out->offset, io = in->offset, len = nd ? out->shape[dim] : 1, rev = op->p.i[1] != 0;
    for (int k = 0; k < nd; k++) n *= shape[k];
    cl_int dim8 = dim + 8 - nd;
    cl_mem y = kiln__opencl_mem(out->storage), x = kiln__opencl_mem(in->storage);
    kiln__opencl_arg args[] = {{8, &n}, {64, &shape8}, {64, &ost8}, {8, &oo}, {64, &ist8}, {8, &io}, {4, &dim8},
                           {8, &len}, {8, &rev}, {sizeof y, &y}, {sizeof x, &x}};
    return kiln__opencl_run(d, op, &s, len ? (size_t)n : 0, args, 11);
}

/* CUMPROD_BACKWARD (out = dx of y = cumprod(x) along dim, from in[0] = g and in[1] = x), one
 * work item per line with the CPU's formula and order (exact where x has zeros, running products
 * in double in a scratch buffer), so results equal the CPU's bit for bit. out may alias g
 * exactly: each g[k] is read before out[k] is written. */
static kiln_status kernel_cumprod_backward(const kiln__op *op) {
    const kiln__view *out = &op->out[0], *g = &op->in[0], *x = &op->in[1];
    kiln__opencl_device *d = dev_of(op);
    if (NEVER(!d)) return KILN_ERR_INTERNAL;
    kiln_dtype dt = out->dtype;
    if ((dt != KILN_F32 && dt != KILN_F64) || g->dtype != dt || x->dtype != dt || !d->fp64 || out->ndim < 1) {
        kiln__kernel_error("no OpenCL kernel for %s on %s here", kiln__opcode_name(op->code), kiln_dtype_name(dt));
        return KILN_ERR_UNSUPPORTED;
    }
    int nd = out->ndim, dim = (int)op->p.i[0];
    const char *T = kiln__opencl_ctype(dt);
    kiln__text s = {0};
    kiln__opencl_src_prelude(&s, true);
    kiln__text_printf(&s, "%s", kiln__opencl_layout_helpers);
    kiln__text_printf(&s,
                      "__kernel void k(long lines, long8 shape8, long8 ost8, long oo, long8 gst8, long go, long8 xst8,\n"
                      "  long xo, int dim, long n, __global %s *out, __global const %s *g, __global const %s *x,\n"
                      "  __global double *scratch) {\n"
                      "  long l = get_global_id(0); if (l >= lines) return;\n"
                      "  long shape[8], ost[8], gst[8], xst[8], c[8];\n"
                      "  unpack(shape8, shape); unpack(ost8, ost); unpack(gst8, gst); unpack(xst8, xst); coords(l, shape, c);\n"
                      "  __global %s *o = out + oo + dot(c, ost); __global const %s *gl = g + go + dot(c, gst);\n"
                      "  __global const %s *xl = x + xo + dot(c, xst); __global double *p = scratch + l * n;\n"
                      "  long os = ost[dim], gs = gst[dim], xs = xst[dim], z = n; double run = 1;\n"
                      "  for (long j = 0; j < n; j++) { double xj = xl[j * xs]; if (xj == 0 && z == n) z = j; run *= xj; p[j] = run; }\n"
                      "  double at_z = 0;\n"
                      "  if (z < n) { double r = z ? p[z - 1] : 1;\n"
                      "    for (long j = z; j < n; j++) { if (j > z) r *= xl[j * xs]; at_z += gl[j * gs] * r; } }\n"
                      "  double acc = 0;\n"
                      "  for (long k = z - 1; k >= 0; k--) { acc += gl[k * gs] * p[k]; o[k * os] = (%s)(acc / xl[k * xs]); }\n"
                      "  for (long k = z; k < n; k++) o[k * os] = (%s)(k == z ? at_z : 0);\n}\n",
                      T, T, T, T, T, T, T, T);
    int64_t shape[KILN_MAX_DIMS];
    cl_long lines = 1, n = out->shape[dim];
    for (int q = 0; q < nd; q++) shape[q] = q == dim ? 1 : out->shape[q], lines *= shape[q];
    cl_long8 shape8, ost8, gst8, xst8;
    kiln__opencl_pack8(&shape8, shape, nd, 1);
    kiln__opencl_pack8(&ost8, out->strides, nd, 0);
    kiln__opencl_pack8(&gst8, g->strides, nd, 0);
    kiln__opencl_pack8(&xst8, x->strides, nd, 0);
    cl_long oo = out->offset, go = g->offset, xo = x->offset;
    cl_int dim8 = dim + 8 - nd, err = CL_SUCCESS;
    size_t bytes = (size_t)(lines * n > 0 ? lines * n : 1) * sizeof(cl_double);
    cl_mem scratch = clCreateBuffer(d->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (err != CL_SUCCESS) return free(s.s), kiln__opencl_fail(err, "clCreateBuffer (cumprod backward scratch)");
    cl_mem om = kiln__opencl_mem(out->storage), gm = kiln__opencl_mem(g->storage), xm = kiln__opencl_mem(x->storage);
    kiln__opencl_arg args[] = {{8, &lines}, {64, &shape8}, {64, &ost8}, {8, &oo},  {64, &gst8},      {8, &go},         {64, &xst8},
                           {8, &xo},    {4, &dim8},    {8, &n},     {sizeof om, &om}, {sizeof gm, &gm}, {sizeof xm, &xm},
                           {sizeof scratch, &scratch}};
    kiln_status st = kiln__opencl_run(d, op, &s, n ? (size_t)lines : 0, args, 14);
    clReleaseMemObject(scratch); /* freed once the kernel is done (OpenCL keeps it for queued work) */
    return st;
}

void kiln__opencl_register_scan(kiln__kernel_fn *table) {
    table[KILN__OP_CUMPROD_BACKWARD] = kernel_cumprod_backward;
    table[KILN__OP_ARANGE] = kernel_range;
    table[KILN__OP_LINSPACE] = kernel_range;
    table[KILN__OP_EYE] = kernel_range;
    table[KILN__OP_CUMSUM] = kernel_scan;
    table[KILN__OP_CUMPROD] = kernel_scan;
}

#endif
