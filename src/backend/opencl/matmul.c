/* OpenCL MATMUL: in[0] [..., M, K] and in[1] [..., K, N] broadcast to out's batch dims, out
 * dense [..., M, N], an optional in[2] broadcast to out's shape added (copied into out first,
 * then the product added with beta = 1). f32 and f64. With CLBlast in the build, an operand
 * whose matrix is row- or column-contiguous and whose batch dims flatten to one stride goes to
 * CLBlast's (strided batched) GEMM, on a CPU device f32 goes to the register-tiled kernels
 * below first; anything else, and every product without CLBlast, runs a generated kernel: one
 * work item per output element, any strides. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend-impl.h"

#if KILN_HAVE_OPENCL
#include "backend/opencl/opencl-impl.h"
#if KILN_HAVE_CLBLAST
#include <clblast_c.h>
#endif

static kiln_status naive(kiln__opencl_device *d, const kiln__op *op, bool accumulate) {
    const kiln__view *a = &op->in[0], *b = &op->in[1], *c = &op->out[0];
    int nd = c->ndim, nb = nd - 2;
    const char *T = kiln__opencl_ctype(c->dtype), *A = T;
    kiln__text src = {0};
    kiln__opencl_src_prelude(&src, d->fp64);
    kiln__text_printf(&src,
                      "__kernel void k(long total, long M, long N, long K, long8 bshape8, long8 abst8, long8 bbst8,\n"
                      "  long ao, long ars, long acs, long bo, long brs, long bcs, long acc,\n"
                      "  __global const %s *a, __global const %s *b, __global %s *c) {\n"
                      "  long g = get_global_id(0); if (g >= total) return;\n"
                      "  long j = g %% N, i = (g / N) %% M, r = g / (M * N);\n"
                      "  long bshape[8], abst[8], bbst[8]; vstore8(bshape8, 0, bshape); vstore8(abst8, 0, abst); vstore8(bbst8, 0, bbst);\n"
                      "  long ab = ao, bb = bo;\n"
                      "  for (int q = 7; q >= 0; q--) { long t = r %% bshape[q]; r /= bshape[q]; ab += t * abst[q]; bb += t * bbst[q]; }\n"
                      "  %s s = 0; for (long p = 0; p < K; p++) s += a[ab + i * ars + p * acs] * b[bb + p * brs + j * bcs];\n"
                      "  c[g] = acc ? c[g] + s : s;\n}\n",
                      T, T, T, A);
    int64_t bshape[KILN_MAX_DIMS] = {0}, abst[KILN_MAX_DIMS] = {0}, bbst[KILN_MAX_DIMS] = {0};
    cl_long total = 1;
    for (int q = 0; q < nd; q++) total *= c->shape[q];
    for (int q = 0; q < nb; q++) {
        bshape[q] = c->shape[q];
        abst[q] = a->strides[q];
        bbst[q] = b->strides[q];
    }
    cl_long8 bs8, as8, bb8;
    kiln__opencl_pack8(&bs8, bshape, nb, 1);
    kiln__opencl_pack8(&as8, abst, nb, 0);
    kiln__opencl_pack8(&bb8, bbst, nb, 0);
    cl_long M = c->shape[nd - 2], N = c->shape[nd - 1], K = a->shape[nd - 1], ao = a->offset, bo = b->offset;
    cl_long ars = a->strides[nd - 2], acs = a->strides[nd - 1], brs = b->strides[nd - 2], bcs = b->strides[nd - 1];
    cl_long acc = accumulate;
    cl_mem am = kiln__opencl_mem(a->storage), bm = kiln__opencl_mem(b->storage), cm = kiln__opencl_mem(c->storage);
    if (c->offset) { /* out is a fresh dense tensor: its offset is 0 */
        free(src.s);
        kiln__kernel_error("matmul into an offset view");
        return KILN_ERR_UNSUPPORTED;
    }
    kiln__opencl_arg args[] = {{8, &total}, {8, &M},   {8, &N},   {8, &K},   {64, &bs8},          {64, &as8},
                           {64, &bb8},  {8, &ao},  {8, &ars}, {8, &acs}, {8, &bo},            {8, &brs},
                           {8, &bcs},   {8, &acc}, {sizeof am, &am}, {sizeof bm, &bm}, {sizeof cm, &cm}};
    return kiln__opencl_run(d, op, &src, (size_t)total, args, (int)(sizeof args / sizeof args[0]));
}

/* The stride between out's batch matrices in v (0 when v is broadcast over them), false when
 * v's batch dims do not flatten to one stride. */
static bool batch_stride(const kiln__view *v, const kiln__view *c, int64_t *out) {
    int64_t stride = -1, span = 1;
    for (int q = c->ndim - 3; q >= 0; q--) {
        if (c->shape[q] == 1) continue;
        if (stride < 0) stride = v->strides[q];
        else if (v->strides[q] != stride * span) return false;
        span *= c->shape[q];
    }
    *out = stride < 0 ? 0 : stride;
    return true;
}

/* ---- register-tiled f32 GEMM for CPU devices --------------------------------------------------
 * On a CPU OpenCL device (PoCL) CLBlast runs untuned defaults, about 15x slower than the host
 * BLAS on the MLP's [128,2048] x [2048,2048]; PoCL compiles explicit vector code well but
 * did not vectorize a scalar GEMM across work items (one column per item measured 20x slower
 * than these). So one work item computes a tile of out with float16 registers, two forms
 * (BENCHMARKS.md has the measurements):
 *  dot:   A's rows and B's columns contiguous along K (x @ w^T, the linear layer): a 4x4 tile,
 *         16 float16 partial sums along K, summed across lanes at the end (sums in another
 *         order than the CPU's, so results agree to rounding, not bit for bit).
 *  outer: B's rows contiguous along N, A any strides (x @ w, and a^T @ b of the weight
 *         gradient): 8 rows x 32 columns, A's element broadcast times two float16 of B's row.
 * Rows past M load row M-1 (so the K loop has no branch) and are not stored; the last columns
 * of the outer form (N not a multiple of 32) take a scalar loop. Work groups of one item: each
 * item is already a vector loop, and items of one group share B's tile through the cache.
 * The tiles are written out register by register (macros R4/R8 repeat a statement per row): with
 * private arrays indexed in loops, PoCL 3.1 (LLVM 15) kept the accumulators on the stack, a
 * load and a store around every fma, and ran both kernels 2-4x slower. */
static const char *const gemm_dot_source =
    "#define R4(X) X(0) X(1) X(2) X(3)\n"
    "float hsum(float16 w) { float8 v = w.lo + w.hi; float4 h = v.lo + v.hi; float2 t = h.lo + h.hi; return t.x + t.y; }\n"
    "__kernel void k(long M, long N, long K, long tiles_m, long tiles_n, long ao, long lda, long sa, long bo,\n"
    "  long ldb, long sb, long acc, __global const float *a, __global const float *b, __global float *c) {\n"
    "  long g = get_global_id(0), tm = g % tiles_m, rest = g / tiles_m, tn = rest % tiles_n, z = rest / tiles_n;\n"
    "  long i0 = tm * 4, j0 = tn * 4, k16 = K & ~15L;\n"
    "#define PTR(r) const __global float *a##r = a + ao + z * sa + min(i0 + r, M - 1) * lda,\\\n"
    "    *b##r = b + bo + z * sb + min(j0 + r, N - 1) * ldb; float16 s##r##0 = 0, s##r##1 = 0, s##r##2 = 0, s##r##3 = 0;\n"
    "  R4(PTR)\n"
    "  for (long p = 0; p < k16; p += 16) {\n"
    "#define LOAD(r) float16 x##r = vload16(0, a##r + p), y##r = vload16(0, b##r + p);\n"
    "    R4(LOAD)\n"
    "#define FMA(r) s##r##0 = fma(x##r, y0, s##r##0); s##r##1 = fma(x##r, y1, s##r##1);\\\n"
    "    s##r##2 = fma(x##r, y2, s##r##2); s##r##3 = fma(x##r, y3, s##r##3);\n"
    "    R4(FMA)\n"
    "  }\n"
    "#define ONE(r, q) { float sum = hsum(s##r##q); for (long p = k16; p < K; p++) sum = fma(a##r[p], b##q[p], sum);\\\n"
    "    long i = i0 + r, j = j0 + q;\\\n"
    "    if (i < M && j < N) { long o = (z * M + i) * N + j; c[o] = acc ? c[o] + sum : sum; } }\n"
    "#define STORE(r) ONE(r, 0) ONE(r, 1) ONE(r, 2) ONE(r, 3)\n"
    "  R4(STORE)\n"
    "}\n";

static const char *const gemm_outer_source =
    "#define R8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)\n"
    "__kernel void k(long M, long N, long K, long tiles_m, long tiles_n, long ao, long ars, long acs, long sa,\n"
    "  long bo, long ldb, long sb, long acc, __global const float *a, __global const float *b, __global float *c) {\n"
    "  long g = get_global_id(0), tm = g % tiles_m, rest = g / tiles_m, tn = rest % tiles_n, z = rest / tiles_n;\n"
    "  long i0 = tm * 8, j0 = tn * 32;\n"
    "#define PTR(r) const __global float *a##r = a + ao + z * sa + min(i0 + r, M - 1) * ars; float16 s##r = 0, t##r = 0;\n"
    "  R8(PTR)\n"
    "  const __global float *bz = b + bo + z * sb;\n"
    "  __global float *cz = c + z * M * N;\n"
    "  if (j0 + 32 <= N) {\n"
    "    for (long p = 0; p < K; p++) {\n"
    "      const __global float *row = bz + p * ldb + j0;\n"
    "      float16 y0 = vload16(0, row), y1 = vload16(1, row);\n"
    "#define FMA(r) { float16 x = (float16)(a##r[p * acs]); s##r = fma(x, y0, s##r); t##r = fma(x, y1, t##r); }\n"
    "      R8(FMA)\n"
    "    }\n"
    "#define STORE(r) if (i0 + r < M) { __global float *o = cz + (i0 + r) * N + j0;\\\n"
    "      if (acc) { s##r += vload16(0, o); t##r += vload16(1, o); }\\\n"
    "      vstore16(s##r, 0, o); vstore16(t##r, 1, o); }\n"
    "    R8(STORE)\n"
    "  } else {\n"
    "#define TAIL(r) if (i0 + r < M) for (long j = j0; j < N; j++) { float sum = 0;\\\n"
    "      for (long p = 0; p < K; p++) sum = fma(a##r[p * acs], bz[p * ldb + j], sum);\\\n"
    "      long o = (i0 + r) * N + j; cz[o] = acc ? cz[o] + sum : sum; }\n"
    "    R8(TAIL)\n"
    "  }\n"
    "}\n";

/* out = a b (+ out) by one of the tiled forms; *done false when neither fits the layout. */
static kiln_status tiled(kiln__opencl_device *d, const kiln__op *op, bool accumulate, bool *done) {
    const kiln__view *a = &op->in[0], *b = &op->in[1], *c = &op->out[0];
    int nd = c->ndim;
    cl_long M = c->shape[nd - 2], N = c->shape[nd - 1], K = a->shape[nd - 1], batch = 1;
    for (int q = 0; q < nd - 2; q++) batch *= c->shape[q];
    int64_t sa, sb;
    *done = false;
    if (c->dtype != KILN_F32 || !M || !N || !K || !batch || c->offset || !batch_stride(a, c, &sa) || !batch_stride(b, c, &sb))
        return KILN_OK;
    cl_long ars = a->strides[nd - 2], acs = a->strides[nd - 1], brs = b->strides[nd - 2], bcs = b->strides[nd - 1];
    cl_long ao = a->offset, bo = b->offset, csa = sa, csb = sb, acc = accumulate, tiles_m, tiles_n;
    cl_mem am = kiln__opencl_mem(a->storage), bm = kiln__opencl_mem(b->storage), cm = kiln__opencl_mem(c->storage);
    if ((acs == 1 || K == 1) && (brs == 1 || K == 1)) {
        tiles_m = (M + 3) / 4, tiles_n = (N + 3) / 4;
        kiln__opencl_arg args[] = {{8, &M},   {8, &N},   {8, &K},   {8, &tiles_m},    {8, &tiles_n},    {8, &ao},
                               {8, &ars}, {8, &csa}, {8, &bo},  {8, &bcs},        {8, &csb},        {8, &acc},
                               {sizeof am, &am},     {sizeof bm, &bm},            {sizeof cm, &cm}};
        *done = true;
        return kiln__opencl_launch_local(d, op, gemm_dot_source, (size_t)(tiles_m * tiles_n * batch), 1, args,
                                     (int)(sizeof args / sizeof args[0]));
    }
    if (bcs == 1 || N == 1) {
        tiles_m = (M + 7) / 8, tiles_n = (N + 31) / 32;
        kiln__opencl_arg args[] = {{8, &M},   {8, &N},   {8, &K},   {8, &tiles_m},    {8, &tiles_n},    {8, &ao},
                               {8, &ars}, {8, &acs}, {8, &csa}, {8, &bo},         {8, &brs},        {8, &csb},
                               {8, &acc}, {sizeof am, &am},     {sizeof bm, &bm}, {sizeof cm, &cm}};
        *done = true;
        return kiln__opencl_launch_local(d, op, gemm_outer_source, (size_t)(tiles_m * tiles_n * batch), 1, args,
                                     (int)(sizeof args / sizeof args[0]));
    }
    return KILN_OK;
}

#if KILN_HAVE_CLBLAST
typedef struct {
    bool trans;
    size_t ld, stride, offset;
} blas_operand;

/* rows x cols matrix with strides rs, cs, batch dims flattening to one stride. */
static bool blas_layout(const kiln__view *v, const kiln__view *c, int64_t rows, int64_t cols, blas_operand *o) {
    int nd = c->ndim;
    int64_t rs = v->strides[nd - 2], cs = v->strides[nd - 1];
    if (cs == 1 || cols == 1) {
        o->trans = false;
        o->ld = (size_t)(rs > cols ? rs : cols);
    } else if (rs == 1 || rows == 1) {
        o->trans = true;
        o->ld = (size_t)(cs > rows ? cs : rows);
    } else {
        return false;
    }
    int64_t stride;
    if (!batch_stride(v, c, &stride)) return false;
    o->stride = (size_t)stride;
    o->offset = (size_t)v->offset;
    return true;
}

/* CLBlast's first call per routine and precision fills a shared tuning database that is not
 * safe to fill from two threads at once (ASan: a use after free in Database::Database when two
 * streams' workers, or two KILN_SYNC=1 threads, start GEMMs together); a call only enqueues. */
static pthread_mutex_t clblast_lock = PTHREAD_MUTEX_INITIALIZER;

static kiln_status blas(kiln__opencl_device *d, const kiln__op *op, bool accumulate, bool *done) {
    const kiln__view *a = &op->in[0], *b = &op->in[1], *c = &op->out[0];
    int nd = c->ndim;
    size_t M = (size_t)c->shape[nd - 2], N = (size_t)c->shape[nd - 1], K = (size_t)a->shape[nd - 1], batch = 1;
    for (int q = 0; q < nd - 2; q++) batch *= (size_t)c->shape[q];
    blas_operand oa, ob;
    *done = false;
    if (!M || !N || !K || !batch || c->offset || !blas_layout(a, c, (int64_t)M, (int64_t)K, &oa) ||
        !blas_layout(b, c, (int64_t)K, (int64_t)N, &ob))
        return KILN_OK;
    CLBlastTranspose ta = oa.trans ? CLBlastTransposeYes : CLBlastTransposeNo, tb = ob.trans ? CLBlastTransposeYes : CLBlastTransposeNo;
    cl_command_queue q = kiln__opencl_queue(d, op);
    cl_event ev = NULL;
    cl_mem am = kiln__opencl_mem(a->storage), bm = kiln__opencl_mem(b->storage), cm = kiln__opencl_mem(c->storage);
    CLBlastStatusCode s;
    double beta = accumulate ? 1 : 0;
    pthread_mutex_lock(&clblast_lock);
    if (c->dtype == KILN_F32)
        s = batch == 1 ? CLBlastSgemm(CLBlastLayoutRowMajor, ta, tb, M, N, K, 1.0f, am, oa.offset, oa.ld, bm, ob.offset, ob.ld,
                                      (float)beta, cm, 0, N, &q, &ev)
                       : CLBlastSgemmStridedBatched(CLBlastLayoutRowMajor, ta, tb, M, N, K, 1.0f, am, oa.offset, oa.ld,
                                                    oa.stride, bm, ob.offset, ob.ld, ob.stride, (float)beta, cm, 0, N,
                                                    M * N, batch, &q, &ev);
    else
        s = batch == 1 ? CLBlastDgemm(CLBlastLayoutRowMajor, ta, tb, M, N, K, 1.0, am, oa.offset, oa.ld, bm, ob.offset, ob.ld,
                                      beta, cm, 0, N, &q, &ev)
                       : CLBlastDgemmStridedBatched(CLBlastLayoutRowMajor, ta, tb, M, N, K, 1.0, am, oa.offset, oa.ld,
                                                    oa.stride, bm, ob.offset, ob.ld, ob.stride, beta, cm, 0, N, M * N,
                                                    batch, &q, &ev);
    pthread_mutex_unlock(&clblast_lock);
    if (s != CLBlastSuccess) {
        if (ev) clReleaseEvent(ev);
        return KILN_OK; /* not done: the generated kernel runs it */
    }
    *done = true;
    return kiln__opencl_done(d, ev, "CLBlast GEMM");
}
#endif

static kiln_status kernel_matmul(const kiln__op *op) {
    const kiln__view *c = &op->out[0];
    kiln__opencl_device *d = kiln__opencl_device_of(c->storage->device);
    if (NEVER(!d)) return KILN_ERR_INTERNAL;
    kiln_dtype dt = c->dtype;
    if ((dt != KILN_F32 && dt != KILN_F64) || (dt == KILN_F64 && !d->fp64) || op->in[0].dtype != dt ||
        op->in[1].dtype != dt || c->ndim < 2) {
        kiln__kernel_error("no OpenCL kernel for matmul on %s yet", kiln_dtype_name(dt));
        return KILN_ERR_UNSUPPORTED;
    }
    bool accumulate = op->n_in == 3;
    if (accumulate) { /* out = in[2] first: a COPY through the elementwise kernel */
        kiln__op copy = *op;
        copy.code = KILN__OP_COPY;
        copy.n_in = 1;
        copy.in[0] = op->in[2];
        kiln_status st = d->backend.kernels[KILN__OP_COPY](&copy);
        if (st != KILN_OK) return st;
    }
    /* KILN_OPENCL_GEMM: "tiled" or "clblast" forces that path where its layout fits, "generic"
     * (or the older KILN_OPENCL_BLAS=0) the generated per-element kernel; unset: the tiled
     * GEMM on a CPU device, CLBlast on the others. */
    const char *mode = getenv("KILN_OPENCL_GEMM"), *blas_off = getenv("KILN_OPENCL_BLAS");
    bool generic = (mode && strcmp(mode, "generic") == 0) || (blas_off && strcmp(blas_off, "0") == 0);
    bool want_tiled = mode ? strcmp(mode, "tiled") == 0 : d->cpu;
    bool done = false;
    if (!generic && want_tiled) {
        kiln_status st = tiled(d, op, accumulate, &done);
        if (done || st != KILN_OK) return st;
    }
#if KILN_HAVE_CLBLAST
    if (!generic) {
        kiln_status st = blas(d, op, accumulate, &done);
        if (done || st != KILN_OK) return st;
    }
#endif
    return naive(d, op, accumulate);
}

void kiln__opencl_register_matmul(kiln__kernel_fn *table) { table[KILN__OP_MATMUL] = kernel_matmul; }

#endif
