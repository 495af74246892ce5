/* OpenCL kernels of the nn family: CONV2D and its two gradients, MAX_POOL2D, AVG_POOL2D (plain
 * and adaptive) and their gradients, for f32 and f64 (the op layer casts other dtypes).
 *
 * In f32 with one group, the forward and the weight gradient are im2col (a generated kernel
 * into a column buffer from the device's caching allocator) + the device's GEMM (matmul.c),
 * the input gradient the GEMM into a column buffer + col2im; everything else (groups, f64,
 * columns too large) runs direct kernels, one
 * work item per output element (the forward's y, the input gradient's dx, the weight
 * gradient's dw), each summing its taps with stride, padding, dilation and groups as the CPU's
 * im2col + GEMM does; sums are in the operand dtype, so f32 results differ from the CPU's in
 * rounding only. The sources depend on the dtype alone
 * (geometry and strides are arguments), so a program is compiled once per dtype.
 *
 * Pooling forward is one work item per output; the backward kernels run one work item per
 * plane (image, channel) walking its outputs in the CPU's order, so they write no shared
 * element and equal the CPU's bit for bit. Semantics as the CPU's (pool.c): padding is -inf
 * for max, the first maximum wins and a NaN propagates, averages count the padding. */
#include <stdint.h>
#include <string.h>

#include "backend/backend-impl.h"
#include "ir/pool_params.h"

#if KILN_HAVE_OPENCL
#include "backend/opencl/opencl-impl.h"

/* Geometry arguments: every kernel takes these longs first, in this order. */
enum { G_N, G_C, G_H, G_W, G_O, G_KH, G_KW, G_OH, G_OW, G_SH, G_SW, G_PH, G_PW, G_DH, G_DW, G_GROUPS,
       G_XS0, G_XS1, G_XS2, G_XS3, G_XO, G_YS0, G_YS1, G_YS2, G_YS3, G_YO, G_AO, G_BO, G_BS, G_TOTAL, G_COUNT };

/* Their names in the kernels. The layer's shape (C..G) is printed into the source as constants,
 * so loops over taps unroll and index divisions are by constants: a program per layer shape and
 * dtype; the batch, strides and offsets stay arguments. On PoCL (one run, loaded machine) the
 * Fashion-MNIST CNN's conv 32->64 3x3 over [128, 32, 14, 14] went from 520-570 to 420-440 ms
 * forward and from 790-910 to 680-710 ms for both gradients. */
static const char *const geom_names[G_COUNT] = {
    "N", "C", "H", "W", "O", "KH", "KW", "OH", "OW", "sh", "sw", "ph", "pw", "dh", "dw", "G",
    "xs0", "xs1", "xs2", "xs3", "xo", "ys0", "ys1", "ys2", "ys3", "yo", "ao", "bo", "bs", "total"};
#define G_FIRST_CONST G_C
#define G_LAST_CONST G_GROUPS

/* Kernel sources by (op, dtype): the body after "__kernel void k(<geometry>, <buffers>) {". */
static const char *const conv_body[3] = {
    /* CONV2D: y[n,o,oy,ox] (dense, at ao) from x (strided), w (dense, at bo), bias (strides bs, at yo) */
    "__global T *y, __global const T *x, __global const T *wt, __global const T *b, int has_bias) {\n"
    "  long i = get_global_id(0); if (i >= total) return;\n"
    "  long ox = i % OW, t = i / OW, oy = t % OH; t /= OH; long o = t % O, n = t / O;\n"
    "  long cg = C / G, og = O / G, c0 = (o / og) * cg;\n"
    "  T acc = 0;\n"
    "  for (long ci = 0; ci < cg; ci++)\n"
    "    for (long ki = 0; ki < KH; ki++) {\n"
    "      long iy = oy * sh - ph + ki * dh; if (iy < 0 || iy >= H) continue;\n"
    "      __global const T *xr = x + xo + n * xs0 + (c0 + ci) * xs1 + iy * xs2;\n"
    "      __global const T *wr = wt + bo + ((o * cg + ci) * KH + ki) * KW;\n"
    "      for (long kj = 0; kj < KW; kj++) {\n"
    "        long ix = ox * sw - pw + kj * dw; if (ix < 0 || ix >= W) continue;\n"
    "        acc += xr[ix * xs3] * wr[kj];\n"
    "      }\n"
    "    }\n"
    "  if (has_bias) acc += b[yo + o * bs];\n"
    "  y[ao + i] = acc;\n}\n",
    /* CONV2D_BACKWARD_INPUT: dx[n,c,iy,ix] (dense, at ao) from dy (dense, at yo), w (dense, at bo) */
    "__global T *dx, __global const T *dy, __global const T *wt) {\n"
    "  long i = get_global_id(0); if (i >= total) return;\n"
    "  long ix = i % W, t = i / W, iy = t % H; t /= H; long c = t % C, n = t / C;\n"
    "  long cg = C / G, og = O / G, ci = c % cg, o0 = (c / cg) * og;\n"
    "  T acc = 0;\n"
    "  for (long oo = 0; oo < og; oo++) {\n"
    "    long o = o0 + oo;\n"
    "    for (long ki = 0; ki < KH; ki++) {\n"
    "      int ty = (int)(iy + ph - ki * dh), oy = ty; if (ty < 0) continue;\n"
    "      if (sh != 1) { if (ty % (int)sh) continue; oy = ty / (int)sh; }\n" /* no 64-bit divisions per tap */
    "      if (oy >= OH) continue;\n"
    "      for (long kj = 0; kj < KW; kj++) {\n"
    "        int tx = (int)(ix + pw - kj * dw), ox = tx; if (tx < 0) continue;\n"
    "        if (sw != 1) { if (tx % (int)sw) continue; ox = tx / (int)sw; }\n"
    "        if (ox >= OW) continue;\n"
    "        acc += dy[yo + ((n * O + o) * OH + oy) * OW + ox] * wt[bo + ((o * cg + ci) * KH + ki) * KW + kj];\n"
    "      }\n"
    "    }\n"
    "  }\n"
    "  dx[ao + i] = acc;\n}\n",
    /* CONV2D_BACKWARD_WEIGHT: dw[o,ci,ki,kj] (dense, at ao) from dy (dense, at yo), x (strided) */
    "__global T *dwt, __global const T *dy, __global const T *x) {\n"
    "  long i = get_global_id(0); if (i >= total) return;\n"
    "  long cg = C / G, og = O / G;\n"
    "  long kj = i % KW, t = i / KW, ki = t % KH; t /= KH; long ci = t % cg, o = t / cg;\n"
    "  long c = (o / og) * cg + ci;\n"
    "  T acc = 0;\n"
    "  for (long n = 0; n < N; n++)\n"
    "    for (long oy = 0; oy < OH; oy++) {\n"
    "      long iy = oy * sh - ph + ki * dh; if (iy < 0 || iy >= H) continue;\n"
    "      __global const T *xr = x + xo + n * xs0 + c * xs1 + iy * xs2;\n"
    "      __global const T *dr = dy + yo + ((n * O + o) * OH + oy) * OW;\n"
    "      for (long ox = 0; ox < OW; ox++) {\n"
    "        long ix = ox * sw - pw + kj * dw; if (ix < 0 || ix >= W) continue;\n"
    "        acc += dr[ox] * xr[ix * xs3];\n"
    "      }\n"
    "    }\n"
    "  dwt[ao + i] = acc;\n}\n",
};

/* IM2COL (for the f32 forward): col[n, (c*KH + ki)*KW + kj, oy*OW + ox] (dense) is the input
 * tap of output (oy, ox), 0 in the padding. */
static const char *const im2col_body =
    "__global T *col, __global const T *x) {\n"
    "  long i = get_global_id(0); if (i >= total) return;\n"
    "  long ox = i % OW, t = i / OW, oy = t % OH; t /= OH; long kj = t % KW; t /= KW; long ki = t % KH; t /= KH;\n"
    "  long c = t % C, n = t / C, iy = oy * sh - ph + ki * dh, ix = ox * sw - pw + kj * dw;\n"
    "  col[i] = (iy >= 0 && iy < H && ix >= 0 && ix < W) ? x[xo + n * xs0 + c * xs1 + iy * xs2 + ix * xs3] : (T)0;\n}\n";

/* For the weight gradient: the same taps with the images inner, colt[(c*KH + ki)*KW + kj, n,
 * oy*OW + ox] (so col^T is one matrix whose rows run along the GEMM's K), and dy [N, O, P]
 * (dense, at yo) turned into dyt [O, N, P]. */
static const char *const im2col_t_body =
    "__global T *col, __global const T *x) {\n"
    "  long i = get_global_id(0); if (i >= total) return;\n"
    "  long ox = i % OW, t = i / OW, oy = t % OH; t /= OH; long n = t % N; t /= N; long kj = t % KW; t /= KW;\n"
    "  long ki = t % KH, c = t / KH, iy = oy * sh - ph + ki * dh, ix = ox * sw - pw + kj * dw;\n"
    "  col[i] = (iy >= 0 && iy < H && ix >= 0 && ix < W) ? x[xo + n * xs0 + c * xs1 + iy * xs2 + ix * xs3] : (T)0;\n}\n";
static const char *const dy_t_body =
    "__global T *dyt, __global const T *dy) {\n"
    "  long i = get_global_id(0); if (i >= total) return;\n"
    "  long p = i % (OH * OW), t = i / (OH * OW), n = t % N, o = t / N;\n"
    "  dyt[i] = dy[yo + (n * O + o) * (OH * OW) + p];\n}\n";

/* For the input gradient: dx[n,c,iy,ix] (dense, at ao) sums colt[n, oy*OW + ox, (c*KH + ki)*KW
 * + kj] over the taps (ki, kj) whose output (oy, ox) reads it (taps as the direct kernel's). */
static const char *const col2im_t_body =
    "__global T *dx, __global const T *col) {\n"
    "  long i = get_global_id(0); if (i >= total) return;\n"
    "  long ix = i % W, t = i / W, iy = t % H; t /= H; long c = t % C, n = t / C;\n"
    "  __global const T *cn = col + n * (OH * OW) * (C * KH * KW) + c * (KH * KW);\n"
    "  T acc = 0;\n"
    "  for (long ki = 0; ki < KH; ki++) {\n"
    "    int ty = (int)(iy + ph - ki * dh), oy = ty; if (ty < 0) continue;\n"
    "    if (sh != 1) { if (ty % (int)sh) continue; oy = ty / (int)sh; }\n"
    "    if (oy >= OH) continue;\n"
    "    for (long kj = 0; kj < KW; kj++) {\n"
    "      int tx = (int)(ix + pw - kj * dw), ox = tx; if (tx < 0) continue;\n"
    "      if (sw != 1) { if (tx % (int)sw) continue; ox = tx / (int)sw; }\n"
    "      if (ox >= OW) continue;\n"
    "      acc += cn[(oy * OW + ox) * (C * KH * KW) + ki * KW + kj];\n"
    "    }\n"
    "  }\n"
    "  dx[ao + i] = acc;\n}\n";

/* The pooling window of output i along one dim (pool.c's window()). */
static const char *const pool_window =
    "void window(int mode, long i, long k, long s, long p, long size, long n_out, long *lo, long *hi, long *div) {\n"
    "  if (mode == 1) { *lo = i * size / n_out; *hi = ((i + 1) * size + n_out - 1) / n_out; *div = *hi - *lo; return; }\n"
    "  long start = i * s - p, end = start + k; if (end > size + p) end = size + p;\n"
    "  *lo = start > 0 ? start : 0; *hi = end < size ? end : size; *div = mode == 2 ? *hi - *lo : end - start;\n}\n";

/* Pooling: in (x or dy) strided (xs, at xo); out dense (at ao); indices strided (ys, at yo) */
static const char *const pool_body[4] = {
    /* MAX_POOL2D: y and (when has_idx) its indices into the plane */
    "__global T *y, __global long *idx, __global const T *x, int has_idx, int adaptive) {\n"
    "  long i = get_global_id(0); if (i >= total) return;\n"
    "  long ox = i % OW, t = i / OW, oy = t % OH, pl = t / OH;\n"
    "  __global const T *xp = x + xo + (pl / C) * xs0 + (pl % C) * xs1;\n"
    "  long y0, y1, dv; window(adaptive, oy, KH, sh, ph, H, OH, &y0, &y1, &dv);\n"
    "  long x0 = ox * sw - pw;\n"
    "  T best = -INFINITY; long at = y0 * W + (x0 > 0 ? x0 : 0);\n"
    "  for (long iy = y0; iy < y1; iy++)\n"
    "    for (long kj = 0; kj < KW; kj++) {\n"
    "      long ix = x0 + kj; if (ix < 0 || ix >= W) continue;\n"
    "      T v = xp[iy * xs2 + ix * xs3];\n"
    "      if (v > best || v != v) { best = v; at = iy * W + ix; }\n"
    "    }\n"
    "  y[ao + i] = best; if (has_idx) idx[bo + i] = at;\n}\n",
    /* MAX_POOL2D_BACKWARD: one item per plane */
    "__global T *dx, __global const T *dy, __global const long *idx) {\n"
    "  long pl = get_global_id(0); if (pl >= total) return;\n"
    "  long hw = H * W, n = pl / C, c = pl % C;\n"
    "  __global T *d = dx + ao + pl * hw;\n"
    "  for (long q = 0; q < hw; q++) d[q] = 0;\n"
    "  __global const T *g = dy + xo + n * xs0 + c * xs1;\n"
    "  __global const long *ip = idx + yo + n * ys0 + c * ys1;\n"
    "  for (long oy = 0; oy < OH; oy++)\n"
    "    for (long ox = 0; ox < OW; ox++) {\n"
    "      long at = ip[oy * ys2 + ox * ys3];\n"
    "      if ((ulong)at < (ulong)hw) d[at] += g[oy * xs2 + ox * xs3];\n"
    "    }\n}\n",
    /* AVG_POOL2D */
    "__global T *y, __global const T *x, int adaptive) {\n"
    "  long i = get_global_id(0); if (i >= total) return;\n"
    "  long ox = i % OW, t = i / OW, oy = t % OH, pl = t / OH;\n"
    "  __global const T *xp = x + xo + (pl / C) * xs0 + (pl % C) * xs1;\n"
    "  long y0, y1, x0, x1, dvy, dvx;\n"
    "  window(adaptive, oy, KH, sh, ph, H, OH, &y0, &y1, &dvy); window(adaptive, ox, KW, sw, pw, W, OW, &x0, &x1, &dvx);\n"
    "  T sum = 0;\n"
    "  for (long iy = y0; iy < y1; iy++) for (long ix = x0; ix < x1; ix++) sum += xp[iy * xs2 + ix * xs3];\n"
    "  y[ao + i] = sum / (T)(dvy * dvx);\n}\n",
    /* AVG_POOL2D_BACKWARD: one item per plane */
    "__global T *dx, __global const T *dy, int adaptive) {\n"
    "  long pl = get_global_id(0); if (pl >= total) return;\n"
    "  long hw = H * W;\n"
    "  __global T *d = dx + ao + pl * hw;\n"
    "  for (long q = 0; q < hw; q++) d[q] = 0;\n"
    "  __global const T *g = dy + xo + (pl / C) * xs0 + (pl % C) * xs1;\n"
    "  for (long oy = 0; oy < OH; oy++) {\n"
    "    long y0, y1, x0, x1, dvy, dvx; window(adaptive, oy, KH, sh, ph, H, OH, &y0, &y1, &dvy);\n"
    "    for (long ox = 0; ox < OW; ox++) {\n"
    "      window(adaptive, ox, KW, sw, pw, W, OW, &x0, &x1, &dvx);\n"
    "      T v = g[oy * xs2 + ox * xs3] / (T)(dvy * dvx);\n"
    "      for (long iy = y0; iy < y1; iy++) for (long ix = x0; ix < x1; ix++) d[iy * W + ix] += v;\n"
    "    }\n"
    "  }\n}\n",
};

static kiln__opencl_device *dev_of(const kiln__op *op) { return kiln__opencl_device_of(op->out[0].storage->device); }

/* f32 or f64 everywhere (indices aside), f64 only where the device has it. */
static bool check_dtypes(kiln__opencl_device *d, const kiln__op *op) {
    kiln_dtype dt = op->out[0].dtype;
    bool ok = (dt == KILN_F32 || (dt == KILN_F64 && d->fp64));
    for (int i = 0; ok && i < op->n_in; i++) ok = op->in[i].dtype == dt || op->in[i].dtype == KILN_I64;
    if (!ok)
        kiln__kernel_error("no OpenCL %s kernel for %s on %s", kiln__opcode_name(op->code), kiln_dtype_name(dt),
                           kiln_device_name(d->device));
    return ok;
}

static void strides4(cl_long *g, int at, const kiln__view *v) {
    for (int k = 0; k < 4; k++) g[at + k] = v->strides[k];
}

/* Builds "<prelude> typedef T; k(<geometry>, body" and launches it over global items with the
 * geometry followed by bufs and the ints. */
static kiln_status launch(kiln__opencl_device *d, const kiln__op *op, const char *helpers, const char *body, const cl_long *g,
                          size_t global, cl_mem *bufs, int n_bufs, const cl_int *ints, int n_ints) {
    kiln__text s = {0};
    bool f64 = op->out[0].dtype == KILN_F64;
    kiln__opencl_src_prelude(&s, d->fp64);
    kiln__text_printf(&s, "typedef %s T;\n", f64 ? "double" : "float");
    for (int i = 0; i < G_COUNT; i++) {
        if (i >= G_FIRST_CONST && i <= G_LAST_CONST) kiln__text_printf(&s, "#define %s (%lldL)\n", geom_names[i], (long long)g[i]);
        else kiln__text_printf(&s, "#define %s g%d\n", geom_names[i], i);
    }
    kiln__text_printf(&s, "%s__kernel void k(", helpers);
    for (int i = 0; i < G_COUNT; i++) kiln__text_printf(&s, "long g%d, ", i);
    kiln__text_printf(&s, "\n  %s", body);
    kiln__opencl_arg args[G_COUNT + 8];
    int n = 0;
    for (int i = 0; i < G_COUNT; i++) args[n++] = (kiln__opencl_arg){8, &g[i]};
    for (int i = 0; i < n_bufs; i++) args[n++] = (kiln__opencl_arg){sizeof(cl_mem), &bufs[i]};
    for (int i = 0; i < n_ints; i++) args[n++] = (kiln__opencl_arg){4, &ints[i]};
    return kiln__opencl_run(d, op, &s, global, args, n);
}

/* The column matrix of one conv forward on the device: at most this many bytes (and an eighth
 * of the device's memory); past it the direct kernel runs. */
#define IM2COL_MAX_BYTES ((size_t)512 << 20)

static kiln__view dense3(kiln__storage *s, kiln_dtype dt, int64_t offset, int64_t d0, int64_t d1, int64_t d2) {
    return (kiln__view){.storage = s, .dtype = dt, .ndim = 3, .offset = offset, .shape = {d0, d1, d2},
                        .strides = {d1 * d2, d2, 1}};
}

/* A MATMUL of n_in operands run inside op (the caller sets the views). */
static kiln__op matmul_in(const kiln__op *op, int n_in) {
    kiln__op mm = *op;
    mm.code = KILN__OP_MATMUL;
    mm.n_out = 1;
    mm.n_in = n_in;
    return mm;
}

/* Runs body (im2col_body, im2col_t_body or dy_t_body) over total items writing scratch from src. */
static kiln_status to_scratch(kiln__opencl_device *d, const kiln__op *op, const char *body, const cl_long *g, int64_t total,
                              kiln__opencl_buf *scratch, const kiln__storage *src) {
    cl_long gc[G_COUNT];
    memcpy(gc, g, sizeof gc);
    gc[G_TOTAL] = total;
    cl_mem bufs[2] = {scratch->mem, kiln__opencl_mem(src)};
    return launch(d, op, "", body, gc, (size_t)total, bufs, 2, NULL, 0);
}

/* What the GEMM paths below take: f32, one group, a dense output at offset 0 (the GEMM's out),
 * unless KILN_OPENCL_CONV=direct. */
static bool im2col_takes(const kiln__op *op, const cl_long *g) {
    const char *mode = getenv("KILN_OPENCL_CONV");
    return !(mode && strcmp(mode, "direct") == 0) && op->out[0].dtype == KILN_F32 && g[G_GROUPS] == 1 &&
           !op->out[0].offset;
}

/* Whether `floats` floats of scratch stay within the bounds: IM2COL_MAX_BYTES and an eighth of
 * the device's memory. */
static bool scratch_fits(const kiln__opencl_device *d, size_t floats) {
    return floats <= IM2COL_MAX_BYTES / sizeof(float) &&
           !(d->desc.global_memory && floats * sizeof(float) > d->desc.global_memory / 8);
}

/* CONV2D forward as im2col + the device's GEMM (matmul.c: the tiled kernels on a CPU device,
 * CLBlast on a GPU): y[n] [O, OH*OW] = w [O, C*KH*KW] col[n] (+ bias, which the matmul copies
 * into y first), one batched product over the images. The direct kernel reads each input tap
 * once per output channel with no reuse across items; the GEMM kernels keep tiles in
 * registers. f32 with one group into a dense y at offset 0 (the GEMM's out); *done false
 * otherwise (KILN_OPENCL_CONV=direct too), or when the column buffer would be too large or
 * cannot be had: the direct kernel runs then. */
static kiln_status conv_im2col(kiln__opencl_device *d, const kiln__op *op, const cl_long *g, bool *done) {
    *done = false;
    if (!im2col_takes(op, g)) return KILN_OK;
    int64_t ck = g[G_C] * g[G_KH] * g[G_KW], p = g[G_OH] * g[G_OW];
    if (!g[G_N] || !ck || !p || !g[G_O]) return KILN_OK;
    size_t bytes = (size_t)g[G_N] * (size_t)ck * (size_t)p * sizeof(float);
    if (bytes / sizeof(float) / (size_t)g[G_N] / (size_t)p != (size_t)ck || !scratch_fits(d, bytes / sizeof(float)))
        return KILN_OK;
    kiln__storage *col = kiln__storage_new(d->device, bytes);
    if (!col) return KILN_OK; /* the direct kernel needs no scratch */
    kiln__opencl_buf *cb = col->data;
    kiln_status st = kiln__opencl_scratch_begin(d, cb, kiln__opencl_queue(d, op));
    if (st == KILN_OK) st = to_scratch(d, op, im2col_body, g, g[G_N] * ck * p, cb, op->in[0].storage);
    if (st == KILN_OK) {
        kiln__op mm = matmul_in(op, op->n_in > 2 ? 3 : 2);
        kiln_dtype dt = op->out[0].dtype;
        mm.in[0] = dense3(op->in[1].storage, dt, op->in[1].offset, g[G_N], g[G_O], ck);
        mm.in[0].strides[0] = 0; /* one weight for every image */
        mm.in[1] = dense3(col, dt, 0, g[G_N], ck, p);
        mm.out[0] = dense3(op->out[0].storage, dt, 0, g[G_N], g[G_O], p);
        if (mm.n_in == 3) { /* the bias broadcast over images and positions */
            mm.in[2] = dense3(op->in[2].storage, dt, op->in[2].offset, g[G_N], g[G_O], p);
            mm.in[2].strides[0] = 0, mm.in[2].strides[1] = op->in[2].strides[0], mm.in[2].strides[2] = 0;
        }
        st = d->backend.kernels[KILN__OP_MATMUL](&mm);
    }
    kiln__opencl_scratch_end(d, cb);
    kiln__storage_release(col);
    *done = true;
    return st;
}

/* CONV2D_BACKWARD_WEIGHT as one GEMM over every image and position: dw [O, C*KH*KW] =
 * dyt [O, N*P] colt^T [N*P, C*KH*KW] (the dot form of the tiled GEMM: both operands contiguous
 * along K). The direct kernel walks all N*P positions per weight element with no reuse. Same
 * conditions and fallback as conv_im2col, for both scratch buffers together. */
static kiln_status conv_weight_im2col(kiln__opencl_device *d, const kiln__op *op, const cl_long *g, bool *done) {
    *done = false;
    if (!im2col_takes(op, g)) return KILN_OK;
    int64_t ck = g[G_C] * g[G_KH] * g[G_KW], np = g[G_N] * g[G_OH] * g[G_OW];
    if (!np || !ck || !g[G_O]) return KILN_OK;
    size_t elems = (size_t)np * (size_t)(ck + g[G_O]);
    if (elems / (size_t)np != (size_t)(ck + g[G_O]) || !scratch_fits(d, elems)) return KILN_OK;
    kiln__storage *col = kiln__storage_new(d->device, (size_t)(np * ck) * sizeof(float));
    kiln__storage *dyt = col ? kiln__storage_new(d->device, (size_t)(np * g[G_O]) * sizeof(float)) : NULL;
    if (!dyt) {
        kiln__storage_release(col);
        return KILN_OK; /* the direct kernel needs no scratch */
    }
    kiln__opencl_buf *cb = col->data, *tb = dyt->data;
    cl_command_queue q = kiln__opencl_queue(d, op);
    kiln_status st = kiln__opencl_scratch_begin(d, cb, q);
    if (st == KILN_OK) st = kiln__opencl_scratch_begin(d, tb, q);
    if (st == KILN_OK) st = to_scratch(d, op, im2col_t_body, g, np * ck, cb, op->in[1].storage);
    if (st == KILN_OK) st = to_scratch(d, op, dy_t_body, g, np * g[G_O], tb, op->in[0].storage);
    if (st == KILN_OK) {
        kiln__op mm = matmul_in(op, 2);
        kiln_dtype dt = op->out[0].dtype;
        mm.in[0] = (kiln__view){.storage = dyt, .dtype = dt, .ndim = 2, .shape = {g[G_O], np}, .strides = {np, 1}};
        mm.in[1] = (kiln__view){.storage = col, .dtype = dt, .ndim = 2, .shape = {np, ck}, .strides = {1, np}};
        mm.out[0] = (kiln__view){.storage = op->out[0].storage, .dtype = dt, .ndim = 2, .shape = {g[G_O], ck}, .strides = {ck, 1}};
        st = d->backend.kernels[KILN__OP_MATMUL](&mm);
    }
    kiln__opencl_scratch_end(d, cb);
    kiln__opencl_scratch_end(d, tb);
    kiln__storage_release(col);
    kiln__storage_release(dyt);
    *done = true;
    return st;
}

/* CONV2D_BACKWARD_INPUT as one batched GEMM and col2im: colt[n] [P, C*KH*KW] = dy[n]^T [P, O]
 * w [O, C*KH*KW] (the outer form of the tiled GEMM), then one work item per dx element sums
 * its taps' entries of colt (col2im_t_body: a gather, no two items write one element). The
 * direct kernel reads dy and w once per input element and tap, with no reuse across items.
 * Same conditions and fallback as conv_im2col, dy dense too. */
static kiln_status conv_input_im2col(kiln__opencl_device *d, const kiln__op *op, const cl_long *g, bool *done) {
    *done = false;
    if (!im2col_takes(op, g) || !kiln__view_is_contiguous(&op->in[0])) return KILN_OK;
    int64_t ck = g[G_C] * g[G_KH] * g[G_KW], p = g[G_OH] * g[G_OW];
    if (!g[G_N] || !ck || !p || !g[G_O]) return KILN_OK;
    size_t floats = (size_t)g[G_N] * (size_t)ck * (size_t)p;
    if (floats / (size_t)g[G_N] / (size_t)p != (size_t)ck || !scratch_fits(d, floats)) return KILN_OK;
    kiln__storage *col = kiln__storage_new(d->device, floats * sizeof(float));
    if (!col) return KILN_OK; /* the direct kernel needs no scratch */
    kiln__opencl_buf *cb = col->data;
    kiln_status st = kiln__opencl_scratch_begin(d, cb, kiln__opencl_queue(d, op));
    if (st == KILN_OK) {
        kiln__op mm = matmul_in(op, 2);
        kiln_dtype dt = op->out[0].dtype;
        mm.in[0] = dense3(op->in[0].storage, dt, op->in[0].offset, g[G_N], p, g[G_O]);
        mm.in[0].strides[1] = 1, mm.in[0].strides[2] = p; /* dy[n] [O, P] read transposed */
        mm.in[1] = dense3(op->in[1].storage, dt, op->in[1].offset, g[G_N], g[G_O], ck);
        mm.in[1].strides[0] = 0; /* one weight for every image */
        mm.out[0] = dense3(col, dt, 0, g[G_N], p, ck);
        st = d->backend.kernels[KILN__OP_MATMUL](&mm);
    }
    if (st == KILN_OK) {
        cl_mem bufs[2] = {kiln__opencl_mem(op->out[0].storage), cb->mem};
        st = launch(d, op, "", col2im_t_body, g, (size_t)g[G_TOTAL], bufs, 2, NULL, 0);
    }
    kiln__opencl_scratch_end(d, cb);
    kiln__storage_release(col);
    *done = true;
    return st;
}

static kiln_status kernel_conv(const kiln__op *op) {
    kiln__opencl_device *d = dev_of(op);
    if (NEVER(!d)) return KILN_ERR_INTERNAL;
    if (!check_dtypes(d, op)) return KILN_ERR_DTYPE;
    int which = op->code == KILN__OP_CONV2D ? 0 : op->code == KILN__OP_CONV2D_BACKWARD_INPUT ? 1 : 2;
    const kiln__view *x = which == 0 ? &op->in[0] : which == 1 ? &op->out[0] : &op->in[1];
    const kiln__view *w = which == 2 ? &op->out[0] : &op->in[1];
    const kiln__view *y = which == 0 ? &op->out[0] : &op->in[0];
    cl_long g[G_COUNT] = {0};
    g[G_N] = x->shape[0], g[G_C] = x->shape[1], g[G_H] = x->shape[2], g[G_W] = x->shape[3];
    g[G_O] = w->shape[0], g[G_KH] = w->shape[2], g[G_KW] = w->shape[3], g[G_OH] = y->shape[2], g[G_OW] = y->shape[3];
    g[G_SH] = op->p.i[0], g[G_SW] = op->p.i[1], g[G_PH] = op->p.i[2], g[G_PW] = op->p.i[3];
    g[G_DH] = op->pi[0], g[G_DW] = op->pi[1], g[G_GROUPS] = op->pi[2];
    strides4(g, G_XS0, x);
    g[G_XO] = x->offset;
    g[G_AO] = op->out[0].offset;
    g[G_BO] = which == 2 ? 0 : op->in[1].offset; /* the weight; x (which 2) is read at xo */
    g[G_YO] = which == 0 ? 0 : y->offset;
    g[G_TOTAL] = kiln__view_numel(&op->out[0]);
    cl_mem bufs[4];
    cl_int ints[1] = {0};
    bufs[0] = kiln__opencl_mem(op->out[0].storage);
    bufs[1] = kiln__opencl_mem(op->in[0].storage);
    bufs[2] = kiln__opencl_mem(op->in[1].storage);
    int n_bufs = 3, n_ints = 0;
    if (which == 0) {
        bool bias = op->n_in > 2;
        bufs[n_bufs++] = kiln__opencl_mem(op->in[bias ? 2 : 0].storage);
        if (bias) g[G_YO] = op->in[2].offset, g[G_BS] = op->in[2].strides[0];
        ints[0] = bias;
        n_ints = 1;
    }
    if (g[G_GROUPS] < 1 || g[G_C] % g[G_GROUPS] || g[G_O] % g[G_GROUPS]) return KILN_ERR_INTERNAL;
    if (g[G_H] + g[G_PH] >= INT32_MAX / 2 || g[G_W] + g[G_PW] >= INT32_MAX / 2) { /* the input gradient's int taps */
        kiln__kernel_error("no OpenCL %s kernel for images of 2^30 rows or columns", kiln__opcode_name(op->code));
        return KILN_ERR_UNSUPPORTED;
    }
    bool done;
    kiln_status st = which == 0   ? conv_im2col(d, op, g, &done)
                     : which == 1 ? conv_input_im2col(d, op, g, &done)
                                  : conv_weight_im2col(d, op, g, &done);
    if (done) return st;
    return launch(d, op, "", conv_body[which], g, (size_t)g[G_TOTAL], bufs, n_bufs, ints, n_ints);
}

static kiln_status kernel_pool(const kiln__op *op) {
    kiln__opencl_device *d = dev_of(op);
    if (NEVER(!d)) return KILN_ERR_INTERNAL;
    if (!check_dtypes(d, op)) return KILN_ERR_DTYPE;
    int which = op->code == KILN__OP_MAX_POOL2D            ? 0
                : op->code == KILN__OP_MAX_POOL2D_BACKWARD ? 1
                : op->code == KILN__OP_AVG_POOL2D          ? 2
                                                           : 3;
    bool backward = which % 2 == 1;
    const kiln__view *x = backward ? &op->out[0] : &op->in[0], *y = backward ? &op->in[0] : &op->out[0];
    cl_long g[G_COUNT] = {0};
    g[G_N] = x->shape[0], g[G_C] = x->shape[1], g[G_H] = x->shape[2], g[G_W] = x->shape[3];
    g[G_OH] = y->shape[2], g[G_OW] = y->shape[3];
    g[G_KH] = op->p.i[0], g[G_KW] = op->p.i[1], g[G_SH] = op->p.i[2], g[G_SW] = op->p.i[3];
    g[G_PH] = op->pi[0], g[G_PW] = op->pi[1];
    strides4(g, G_XS0, &op->in[0]);
    g[G_XO] = op->in[0].offset;
    g[G_AO] = op->out[0].offset;
    cl_mem bufs[3];
    int n_bufs = 0;
    bufs[n_bufs++] = kiln__opencl_mem(op->out[0].storage);
    cl_int ints[2] = {0};
    int n_ints = 0;
    if (which == 0) {
        bool idx = op->n_out > 1;
        bufs[n_bufs++] = kiln__opencl_mem(op->out[idx ? 1 : 0].storage);
        if (idx) g[G_BO] = op->out[1].offset;
        ints[n_ints++] = idx;
    }
    bufs[n_bufs++] = kiln__opencl_mem(op->in[0].storage);
    if (which == 1) {
        bufs[n_bufs++] = kiln__opencl_mem(op->in[1].storage);
        strides4(g, G_YS0, &op->in[1]);
        g[G_YO] = op->in[1].offset;
    }
    if (which != 1) ints[n_ints++] = (cl_int)op->pi[2]; /* the window mode (ir/pool_params.h) */
    g[G_TOTAL] = backward ? g[G_N] * g[G_C] : kiln__view_numel(&op->out[0]);
    return launch(d, op, pool_window, pool_body[which], g, (size_t)g[G_TOTAL], bufs, n_bufs, ints, n_ints);
}

void kiln__opencl_register_nn(kiln__kernel_fn *table) {
    table[KILN__OP_CONV2D] = kernel_conv;
    table[KILN__OP_CONV2D_BACKWARD_INPUT] = kernel_conv;
    table[KILN__OP_CONV2D_BACKWARD_WEIGHT] = kernel_conv;
    table[KILN__OP_MAX_POOL2D] = kernel_pool;
    table[KILN__OP_MAX_POOL2D_BACKWARD] = kernel_pool;
    table[KILN__OP_AVG_POOL2D] = kernel_pool;
    table[KILN__OP_AVG_POOL2D_BACKWARD] = kernel_pool;
}

#endif
