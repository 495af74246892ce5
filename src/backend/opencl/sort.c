/* OpenCL SORT (sort, argsort, topk): one work item per element, which counts the elements of its
 * line that sort before it (NaN largest, as PyTorch; ties by index, so the order is the CPU's
 * stable one) and, when that rank is under k, writes its value and index there. No scratch
 * memory and the same result as the CPU's bit for bit, at O(n) work per element: lines longer
 * than MAX_LINE are refused with an error rather than run for minutes. */
#include "backend/backend-impl.h"

#if KILN_HAVE_OPENCL
#include "backend/opencl/opencl-impl.h"

#define MAX_LINE 65536

static kiln_status kernel_sort(const kiln__op *op) {
    const kiln__view *in = &op->in[0], *vals = &op->out[0], *idx = &op->out[1];
    kiln__opencl_device *d = kiln__opencl_device_of(vals->storage->device);
    if (NEVER(!d)) return KILN_ERR_INTERNAL;
    kiln_dtype dt = in->dtype;
    bool is_float = dt == KILN_F32 || dt == KILN_F64;
    if (!(is_float || dt == KILN_I32 || dt == KILN_I64) || (dt == KILN_F64 && !d->fp64) || vals->dtype != dt ||
        op->n_out != 2 || idx->dtype != KILN_I64) {
        kiln__kernel_error("no OpenCL SORT kernel for %s", kiln_dtype_name(dt));
        return KILN_ERR_DTYPE;
    }
    int nd = in->ndim, dim = (int)op->p.i[0];
    cl_long n = nd ? in->shape[dim] : 1, k = nd ? vals->shape[dim] : 1;
    if (n > MAX_LINE) {
        kiln__kernel_error("no OpenCL SORT kernel for lines over %d elements (this one has %lld)", MAX_LINE, (long long)n);
        return KILN_ERR_UNSUPPORTED;
    }
    const char *T = kiln__opencl_ctype(dt);
    kiln__text s = {0};
    kiln__opencl_src_prelude(&s, d->fp64);
    kiln__text_printf(&s, "%s", kiln__opencl_layout_helpers);
    /* c(a, b): -1, 0, 1 as a sorts before, with, after b in ascending order */
    if (is_float)
        kiln__text_printf(&s, "inline int c(%s a, %s b) { int an = isnan(a), bn = isnan(b);\n"
                                "  if (an || bn) return an == bn ? 0 : an ? 1 : -1; return a < b ? -1 : a > b; }\n",
                          T, T);
    else
        kiln__text_printf(&s, "inline int c(%s a, %s b) { return a < b ? -1 : a > b; }\n", T, T);
    kiln__text_printf(&s,
                      "__kernel void k(long total, long n, long k, long8 shape8, long8 ist8, long io, long8 vst8, long vo,\n"
                      "  long8 xst8, long xo, int dim, int sign, __global %s *vals, __global long *idx,\n"
                      "  __global const %s *x) {\n"
                      "  long e = get_global_id(0); if (e >= total) return;\n"
                      "  long line = e / n, j = e %% n;\n"
                      "  long shape[8], ist[8], vst[8], xst[8], cc[8];\n"
                      "  unpack(shape8, shape); unpack(ist8, ist); unpack(vst8, vst); unpack(xst8, xst); coords(line, shape, cc);\n"
                      "  __global const %s *xl = x + io + dot(cc, ist); long step = ist[dim];\n"
                      "  %s v = xl[j * step]; long rank = 0;\n"
                      "  for (long m = 0; m < n; m++) { int r = sign * c(xl[m * step], v); rank += r < 0 || (r == 0 && m < j); }\n"
                      "  if (rank >= k) return;\n"
                      "  vals[vo + dot(cc, vst) + rank * vst[dim]] = v; idx[xo + dot(cc, xst) + rank * xst[dim]] = j;\n}\n",
                      T, T, T, T);
    int64_t shape[KILN_MAX_DIMS];
    cl_long lines = 1;
    for (int q = 0; q < nd; q++) shape[q] = q == dim ? 1 : in->shape[q], lines *= shape[q];
    cl_long8 shape8, ist8, vst8, xst8;
    kiln__opencl_pack8(&shape8, shape, nd, 1);
    kiln__opencl_pack8(&ist8, in->strides, nd, 0);
    kiln__opencl_pack8(&vst8, vals->strides, nd, 0);
    kiln__opencl_pack8(&xst8, idx->strides, nd, 0);
    cl_long total = n * lines, io = in->offset, vo = vals->offset, xo = idx->offset;
    cl_int dim8 = nd ? dim + 8 - nd : 7, sign = op->p.i[1] ? -1 : 1;
    cl_mem vm = kiln__opencl_mem(vals->storage), xm = kiln__opencl_mem(idx->storage), im = kiln__opencl_mem(in->storage);
    kiln__opencl_arg args[] = {{8, &total}, {8, &n},    {8, &k},   {64, &shape8}, {64, &ist8},         {8, &io},
                           {64, &vst8}, {8, &vo},   {64, &xst8}, {8, &xo},    {4, &dim8},          {4, &sign},
                           {sizeof vm, &vm}, {sizeof xm, &xm}, {sizeof im, &im}};
    return kiln__opencl_run(d, op, &s, k > 0 ? (size_t)total : 0, args, 15);
}

void kiln__opencl_register_sort(kiln__kernel_fn *table) { table[KILN__OP_SORT] = kernel_sort; }

#endif
