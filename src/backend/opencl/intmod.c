/* OpenCL FMOD and REMAINDER: floats through the generated elementwise kernel (kernels.c);
 * integers here, as the CPU computes them (C's truncated %, REMAINDER adding the divisor when
 * the signs differ, a divisor of -1 giving 0 without INT_MIN % -1), a zero divisor flagged
 * for the host, which fails the op as the CPU does. Not fused (fusion_join.c keeps them out). */
#include "backend/backend-impl.h"

#if KILN_HAVE_OPENCL
#include "backend/opencl/opencl-impl.h"

static kiln__kernel_fn float_kernel; /* the elementwise one it replaces in the table */

static kiln_status kernel_mod(const kiln__op *op) {
    const kiln__view *out = &op->out[0], *x = &op->in[0], *y = &op->in[1];
    kiln_dtype dt = out->dtype;
    if (kiln__dtype_is_float(dt)) return float_kernel(op);
    kiln__opencl_device *d = kiln__opencl_device_of(out->storage->device);
    if (NEVER(!d)) return KILN_ERR_INTERNAL;
    if ((dt != KILN_I32 && dt != KILN_I64) || x->dtype != dt || y->dtype != dt || x->ndim != out->ndim ||
        y->ndim != out->ndim) {
        kiln__kernel_error("no OpenCL %s kernel for %s", kiln__opcode_name(op->code), kiln_dtype_name(x->dtype));
        return KILN_ERR_DTYPE;
    }
    const char *T = kiln__opencl_ctype(dt);
    kiln__text s = {0};
    kiln__opencl_src_prelude(&s, d->fp64);
    kiln__text_printf(&s, "%s", kiln__opencl_layout_helpers);
    kiln__text_printf(&s,
                      "__kernel void k(long n, long8 shape8, long8 ost8, long oo, long8 xst8, long xo, long8 yst8, long yo,\n"
                      "  int floor_mod, int x_is_k, long xk, int y_is_k, long yk, __global %s *out, __global const %s *x,\n"
                      "  __global const %s *y, __global long *bad) {\n"
                      "  long e = get_global_id(0); if (e >= n) return;\n"
                      "  long shape[8], ost[8], xst[8], yst[8], c[8];\n"
                      "  unpack(shape8, shape); unpack(ost8, ost); unpack(xst8, xst); unpack(yst8, yst); coords(e, shape, c);\n"
                      "  %s a = x_is_k ? (%s)xk : x[xo + dot(c, xst)], b = y_is_k ? (%s)yk : y[yo + dot(c, yst)], r = 0;\n"
                      "  if (b == 0) bad[0] = 1;\n"
                      "  else if (b != -1) { r = a %% b; if (floor_mod && r != 0 && ((r < 0) != (b < 0))) r = (%s)(r + b); }\n"
                      "  out[oo + dot(c, ost)] = r;\n}\n",
                      T, T, T, T, T, T, T);
    cl_long8 shape8, ost8, xst8, yst8;
    int nd = out->ndim;
    kiln__opencl_pack8(&shape8, out->shape, nd, 1);
    kiln__opencl_pack8(&ost8, out->strides, nd, 0);
    kiln__opencl_pack8(&xst8, x->strides, nd, 0);
    kiln__opencl_pack8(&yst8, y->strides, nd, 0);
    cl_long n = kiln__view_numel(out), oo = out->offset, xo = x->offset, yo = y->offset, flag[2];
    cl_int floor_mod = op->code == KILN__OP_REMAINDER;
    /* a scalar operand (kiln_fmod_scalar: no storage) travels by value; its buffer argument is
     * the output's, never read */
    cl_int x_is_k = !x->storage, y_is_k = !y->storage;
    cl_long xk = (cl_long)x->scalar, yk = (cl_long)y->scalar;
    cl_mem om = kiln__opencl_mem(out->storage);
    cl_mem xm = x_is_k ? om : kiln__opencl_mem(x->storage), ym = y_is_k ? om : kiln__opencl_mem(y->storage);
    kiln__opencl_arg args[17] = {{8, &n},          {64, &shape8}, {64, &ost8}, {8, &oo},         {64, &xst8},
                                 {8, &xo},         {64, &yst8},   {8, &yo},    {4, &floor_mod},  {4, &x_is_k},
                                 {8, &xk},         {4, &y_is_k},  {8, &yk},    {sizeof om, &om}, {sizeof xm, &xm},
                                 {sizeof ym, &ym}};
    kiln_status st = kiln__opencl_run_flagged(d, op, &s, (size_t)n, args, 16, flag);
    if (st == KILN_OK && flag[0]) {
        kiln__kernel_error("integer division by zero in %s", floor_mod ? "remainder" : "fmod");
        st = KILN_ERR_INVALID_ARGUMENT;
    }
    return st;
}

/* After kiln__opencl_register_elementwise: wraps its FMOD / REMAINDER kernel. */
void kiln__opencl_register_intmod(kiln__kernel_fn *table) {
    float_kernel = table[KILN__OP_FMOD];
    table[KILN__OP_FMOD] = kernel_mod;
    table[KILN__OP_REMAINDER] = kernel_mod;
}

#endif
