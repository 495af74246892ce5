/* CONV2D, CONV2D_BACKWARD_INPUT and CONV2D_BACKWARD_WEIGHT for f32 and f64.
 *
 * Each image and group is one GEMM over an im2col matrix col [K, OH*OW], K = C/g * KH * KW,
 * whose row (c, i, j) holds the input pixel that kernel tap (i, j) of channel c sees at each
 * output position (zero in the padding):
 *   forward        y[n, g]  = W[g] (og x K) @ col             (bias preloaded, beta 1)
 *   input grad     dcol     = W[g]^T @ dy[n, g], added back into dx by col2im
 *   weight grad    dW[g]   += dy[n, g] @ col^T, summed over the batch
 * A 1x1 convolution with stride 1 and no padding reads its input planes directly as col.
 *
 * Threads: a batch of at least as many images as threads runs images in parallel, each GEMM
 * single-threaded on its thread: MNIST-sized products are too small to split well, and
 * im2col/col2im parallelise with them. Measured on conv 32->64 3x3 pad 1 over [128, 32, 14, 14]
 * with 2 threads: 9.1 ms, against 13.3 ms image by image with OpenBLAS threading each GEMM
 * and 12.2 ms batch-parallel with OpenBLAS GEMMs (each starting its own threads). A smaller
 * batch runs image by image and lets the GEMM use the pool.
 *
 * The weight gradient adds per-chunk partial sums in a fixed order, with chunks fixed by the
 * batch size alone, so its value does not depend on the thread count.
 *
 * f32 convs go to oneDNN first where the build has it (conv_dnnl.c), and the weight gradient of
 * a 3x3 conv of one input channel to conv_direct.c; this path runs the rest.
 * bf16 and f16 convs (the op layer keeps them so on the CPU, as it keeps products) go to
 * oneDNN's bf16 convs where the CPU has AVX512-BF16; the rest are widened to f32 here (exact),
 * run as f32 convs and rounded once into their dtype: correct on any CPU, slower by the
 * conversion. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/conv_direct.h"
#include "backend/cpu/conv_dnnl.h"
#include "backend/cpu/convert_lowp.h"
#include "backend/cpu/cpu-impl.h"
#include "backend/cpu/gemm.h"

typedef struct {
    int64_t n, c, h, w;  /* input (or dx) */
    int64_t o, kh, kw;   /* weight */
    int64_t oh, ow, ohw; /* output (or dy) */
    int64_t sh, sw, ph, pw, dh, dw, groups;
    int64_t cg, og, k;   /* channels per group in and out; rows of col */
    int64_t xs[4];       /* input (or dx) strides, elements */
} conv_geom;

typedef struct {
    conv_geom g;
    kiln__opcode code;
    const void *x, *w, *dy, *bias;
    void *out;
    int64_t bias_stride;
    bool direct;  /* 1x1, stride 1, no padding, planes dense: col is the input itself */
    int64_t chunks; /* weight grad: fixed split of the batch */
    void *partials; /* weight grad: chunks 1.. (chunk 0 sums into out) */
    atomic_int oom;
} conv_job;

/* x [N, C, H, W], w [O, C/g, KH, KW], y [N, O, OH, OW] in whichever views hold them. */
static conv_geom geom_of(const kiln__op *op, const kiln__view *x, const kiln__view *w, const kiln__view *y) {
    conv_geom g = {
        .n = x->shape[0], .c = x->shape[1], .h = x->shape[2], .w = x->shape[3],
        .o = w->shape[0], .kh = w->shape[2], .kw = w->shape[3],
        .oh = y->shape[2], .ow = y->shape[3],
        .sh = op->p.i[0], .sw = op->p.i[1], .ph = op->p.i[2], .pw = op->p.i[3],
        .dh = op->pi[0], .dw = op->pi[1], .groups = op->pi[2],
    };
    g.ohw = g.oh * g.ow;
    g.cg = g.c / g.groups;
    g.og = g.o / g.groups;
    g.k = g.cg * g.kh * g.kw;
    memcpy(g.xs, x->strides, sizeof g.xs);
    return g;
}

static bool is_direct(const conv_geom *g) {
    return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0 && g->xs[3] == 1 &&
           (g->h == 1 || g->xs[2] == g->w) && (g->cg <= 1 || g->xs[1] >= g->h * g->w);
}

static inline int64_t div_up(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Output columns [lo, hi) whose tap at input column ox * s + off lies inside [0, size). */
static void valid_range(int64_t off, int64_t s, int64_t size, int64_t n_out, int64_t *lo, int64_t *hi) {
    int64_t l = off >= 0 ? 0 : div_up(-off, s);
    int64_t h = size - off <= 0 ? 0 : div_up(size - off, s);
    if (h > n_out) h = n_out;
    if (l > h) l = h;
    *lo = l;
    *hi = h;
}

/* Which GEMM runs a product: small ones go to kiln__gemm, where CBLAS runs them on the
 * calling thread (OpenBLAS keeps products under 64^3 single-threaded), larger ones to the
 * built-in kernel, which runs inline inside a batch task and on the pool outside one. So no
 * BLAS threads start inside a pool task, and every output element is summed in the same
 * order whatever the thread count. */
#define SMALL_GEMM ((int64_t)1 << 18)

/* The budget for the weight gradient's partial sums. */
#define PARTIAL_BYTES ((int64_t)64 << 20)
#define MAX_CHUNKS 8

#define CONV_DEFINE(T, SFX)                                                                                     \
    static void gemm_##SFX(int ta, int tb, int64_t m, int64_t n, int64_t k, const T *a, int64_t lda, const T *b, \
                           int64_t ldb, T beta, T *c, int64_t ldc) {                                         \
        if (m * n * k <= SMALL_GEMM)                                                                         \
            kiln__gemm_##SFX(ta, tb, m, n, k, 1, a, lda, b, ldb, beta, c, ldc);                              \
        else                                                                                                 \
            kiln__gemm_builtin_##SFX(ta, tb, m, n, k, 1, a, lda, b, ldb, beta, c, ldc);                      \
    }                                                                                                        \
                                                                                                             \
    /* col = im2col of the cg channels at x (or, when add_back, x += col2im(col)). */                        \
    static void im2col_##SFX(const conv_geom *g, T *x, T *col, bool add_back) {                              \
        for (int64_t ci = 0; ci < g->cg; ci++)                                                               \
            for (int64_t i = 0; i < g->kh; i++)                                                              \
                for (int64_t j = 0; j < g->kw; j++) {                                                        \
                    T *row = col + ((ci * g->kh + i) * g->kw + j) * g->ohw;                                  \
                    int64_t offw = j * g->dw - g->pw, lo, hi, step = g->sw * g->xs[3];                       \
                    valid_range(offw, g->sw, g->w, g->ow, &lo, &hi);                                         \
                    for (int64_t oy = 0; oy < g->oh; oy++) {                                                 \
                        T *r = row + oy * g->ow;                                                             \
                        int64_t iy = oy * g->sh - g->ph + i * g->dh;                                         \
                        bool inside = iy >= 0 && iy < g->h;                                                  \
                        if (add_back) {                                                                      \
                            if (!inside || lo == hi) continue;                                               \
                            T *xr = x + ci * g->xs[1] + iy * g->xs[2] + (lo * g->sw + offw) * g->xs[3];      \
                            for (int64_t ox = lo; ox < hi; ox++) xr[(ox - lo) * step] += r[ox];              \
                            continue;                                                                        \
                        }                                                                                    \
                        if (!inside || lo == hi) {                                                           \
                            memset(r, 0, sizeof(T) * (size_t)g->ow);                                         \
                            continue;                                                                        \
                        }                                                                                    \
                        const T *xr = x + ci * g->xs[1] + iy * g->xs[2] + (lo * g->sw + offw) * g->xs[3];    \
                        for (int64_t ox = 0; ox < lo; ox++) r[ox] = 0;                                       \
                        if (step == 1)                                                                       \
                            memcpy(r + lo, xr, sizeof(T) * (size_t)(hi - lo));                               \
                        else                                                                                 \
                            for (int64_t ox = lo; ox < hi; ox++) r[ox] = xr[(ox - lo) * step];               \
                        for (int64_t ox = hi; ox < g->ow; ox++) r[ox] = 0;                                   \
                    }                                                                                        \
                }                                                                                            \
    }                                                                                                        \
                                                                                                             \
    static void forward_image_##SFX(const conv_job *j, int64_t n, T *col) {                                  \
        const conv_geom *g = &j->g;                                                                          \
        const T *bias = j->bias;                                                                             \
        for (int64_t gi = 0; gi < g->groups; gi++) {                                                         \
            T *x = (T *)j->x + n * g->xs[0] + gi * g->cg * g->xs[1];                                         \
            T *y = (T *)j->out + (n * g->o + gi * g->og) * g->ohw;                                           \
            for (int64_t o = 0; bias && o < g->og; o++) {                                                    \
                T v = bias[(gi * g->og + o) * j->bias_stride];                                               \
                for (int64_t q = 0; q < g->ohw; q++) y[o * g->ohw + q] = v;                                  \
            }                                                                                                \
            if (!j->direct) im2col_##SFX(g, x, col, false);                                                  \
            gemm_##SFX(0, 0, g->og, g->ohw, g->k, (const T *)j->w + gi * g->og * g->k, g->k, j->direct ? x : col, \
                       j->direct ? g->xs[1] : g->ohw, bias ? 1 : 0, y, g->ohw);                              \
        }                                                                                                    \
    }                                                                                                        \
                                                                                                             \
    static void input_image_##SFX(const conv_job *j, int64_t n, T *col) {                                    \
        const conv_geom *g = &j->g;                                                                          \
        T *dx = (T *)j->out + n * g->xs[0];                                                                  \
        if (!j->direct) memset(dx, 0, sizeof(T) * (size_t)(g->c * g->h * g->w));                             \
        for (int64_t gi = 0; gi < g->groups; gi++) {                                                         \
            const T *w = (const T *)j->w + gi * g->og * g->k;                                                \
            const T *dy = (const T *)j->dy + (n * g->o + gi * g->og) * g->ohw;                               \
            T *dxg = dx + gi * g->cg * g->xs[1];                                                             \
            if (j->direct) {                                                                                 \
                gemm_##SFX(1, 0, g->k, g->ohw, g->og, w, g->k, dy, g->ohw, 0, dxg, g->xs[1]);                \
            } else {                                                                                         \
                gemm_##SFX(1, 0, g->k, g->ohw, g->og, w, g->k, dy, g->ohw, 0, col, g->ohw);                  \
                im2col_##SFX(g, dxg, col, true);                                                             \
            }                                                                                                \
        }                                                                                                    \
    }                                                                                                        \
                                                                                                             \
    /* Chunk ch of the batch: its images' dy @ col^T summed into its own partial (chunk 0's is  \
     * the output itself). */                                                                                \
    static void weight_chunk_##SFX(const conv_job *j, int64_t ch, T *col) {                                  \
        const conv_geom *g = &j->g;                                                                          \
        T *dw = ch == 0 ? (T *)j->out : (T *)j->partials + (ch - 1) * g->o * g->k;                           \
        int64_t first = ch * g->n / j->chunks, last = (ch + 1) * g->n / j->chunks;                           \
        for (int64_t n = first; n < last; n++)                                                               \
            for (int64_t gi = 0; gi < g->groups; gi++) {                                                     \
                T *x = (T *)j->x + n * g->xs[0] + gi * g->cg * g->xs[1];                                     \
                const T *dy = (const T *)j->dy + (n * g->o + gi * g->og) * g->ohw;                           \
                if (!j->direct) im2col_##SFX(g, x, col, false);                                              \
                gemm_##SFX(0, 1, g->og, g->k, g->ohw, dy, g->ohw, j->direct ? x : col,                       \
                           j->direct ? g->xs[1] : g->ohw, n == first ? 0 : 1, dw + gi * g->og * g->k, g->k); \
            }                                                                                                \
    }                                                                                                        \
                                                                                                             \
    /* One task: a col buffer of its own, then its images (or weight-gradient chunks). */                    \
    static void task_##SFX(void *ctx, int64_t begin, int64_t end) {                                          \
        conv_job *j = ctx;                                                                                   \
        T *col = j->direct ? NULL : malloc(sizeof(T) * (size_t)(j->g.k * j->g.ohw + 1));                     \
        if (!j->direct && !col) {                                                                            \
            atomic_store(&j->oom, 1);                                                                        \
            return;                                                                                          \
        }                                                                                                    \
        for (int64_t i = begin; i < end; i++) {                                                              \
            if (j->code == KILN__OP_CONV2D)                                                                  \
                forward_image_##SFX(j, i, col);                                                              \
            else if (j->code == KILN__OP_CONV2D_BACKWARD_INPUT)                                              \
                input_image_##SFX(j, i, col);                                                                \
            else                                                                                             \
                weight_chunk_##SFX(j, i, col);                                                               \
        }                                                                                                    \
        free(col);                                                                                           \
    }                                                                                                        \
                                                                                                             \
    static void add_partials_##SFX(void *ctx, int64_t begin, int64_t end) {                                  \
        conv_job *j = ctx;                                                                                   \
        int64_t size = j->g.o * j->g.k;                                                                      \
        T *dw = j->out;                                                                                      \
        const T *p = j->partials;                                                                            \
        for (int64_t ch = 1; ch < j->chunks; ch++, p += size)                                                \
            for (int64_t i = begin; i < end; i++) dw[i] += p[i];                                             \
    }

CONV_DEFINE(float, f32)
CONV_DEFINE(double, f64)

/* Every operand in out[0]'s dtype (f32 or f64), and every view but the input image (x) and
 * the bias contiguous: the op layer guarantees both. */
static kiln_status check_op(const kiln__op *op, const kiln__view *x) {
    kiln_dtype dt = op->out[0].dtype;
    for (int i = 0; i < op->n_in; i++)
        if (op->in[i].dtype != dt || (dt != KILN_F32 && dt != KILN_F64)) {
            kiln__kernel_error("no CPU %s kernel for %s operands into %s", kiln__opcode_name(op->code),
                               kiln_dtype_name(op->in[i].dtype), kiln_dtype_name(dt));
            return KILN_ERR_DTYPE;
        }
    for (int i = 0; i < op->n_in + 1; i++) {
        const kiln__view *v = i < op->n_in ? &op->in[i] : &op->out[0];
        if (v != x && i != 2 && !kiln__view_is_contiguous(v)) {
            kiln__kernel_error("%s needs its weight, dy and output dense", kiln__opcode_name(op->code));
            return KILN_ERR_INTERNAL;
        }
    }
    return KILN_OK;
}

static kiln_status kernel_conv(const kiln__op *op);

/* Element i (row-major over v's shape) of a bf16 or f16 view of up to 4 dims, as f32. */
static float lowp_at(const kiln__view *v, const char *base, int64_t i) {
    int64_t off = 0;
    for (int d = v->ndim - 1; d >= 0; d--) {
        off += (i % v->shape[d]) * v->strides[d];
        i /= v->shape[d];
    }
    uint16_t h;
    memcpy(&h, base + off * 2, 2);
    return v->dtype == KILN_BF16 ? kiln__bf16_to_f32(h) : kiln__f16_to_f32(h);
}

/* n elements between a dense low-precision buffer and a dense f32 one, by the casts' vectorised
 * loops where they have the pair (bf16), element by element otherwise (f16). */
static void convert_dense(kiln_dtype from, kiln_dtype to, int64_t n, const void *src, void *dst) {
    kiln__loop_fn loop = kiln__cpu_convert_lowp_loop(from, to);
    if (loop) {
        char *p[2] = {dst, (char *)(uintptr_t)src};
        int64_t st[2] = {(int64_t)kiln__elsize(to), (int64_t)kiln__elsize(from)};
        loop(NULL, n, p, st);
    } else if (to == KILN_F32) {
        for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = kiln__f16_to_f32(((const uint16_t *)src)[i]);
    } else {
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = kiln__f32_to_f16(((const float *)src)[i]);
    }
}

/* A bf16/f16 conv as an f32 one: every operand widened into a dense f32 copy (bf16 and f16
 * values are all f32 values, so the f32 conv sums the same products), the f32 result rounded
 * once into the output. The copies live on stack storages of this call alone. */
static kiln_status conv_widened(const kiln__op *op) {
    kiln__op f;
    kiln__op_copy(&f, op);
    kiln__storage st[KILN__OP_MAX_IN + 1] = {0};
    float *buf[KILN__OP_MAX_IN + 1] = {0};
    kiln_status status = KILN_OK;
    for (int i = 0; i < op->n_in + 1 && status == KILN_OK; i++) {
        const kiln__view *v = i < op->n_in ? &op->in[i] : &op->out[0];
        kiln__view *fv = i < op->n_in ? &f.in[i] : &f.out[0];
        int64_t n = kiln__view_numel(v);
        if (!(buf[i] = malloc((size_t)n * sizeof(float) + 1))) {
            kiln__kernel_error("out of memory widening a %s %s to f32", kiln_dtype_name(v->dtype),
                               kiln__opcode_name(op->code));
            status = KILN_ERR_OUT_OF_MEMORY;
            break;
        }
        if (i < op->n_in && kiln__view_is_contiguous(v)) {
            convert_dense(v->dtype, KILN_F32, n, kiln__view_ptr(v), buf[i]);
        } else if (i < op->n_in) { /* a strided input image or bias */
            const char *base = kiln__view_ptr(v);
            for (int64_t e = 0; e < n; e++) buf[i][e] = lowp_at(v, base, e);
        }
        st[i] = (kiln__storage){.data = buf[i], .nbytes = (size_t)n * sizeof(float), .device = KILN_CPU};
        fv->storage = &st[i], fv->dtype = KILN_F32, fv->offset = 0;
        int64_t stride = 1;
        for (int d = v->ndim - 1; d >= 0; d--) fv->strides[d] = stride, stride *= v->shape[d];
    }
    if (status == KILN_OK) status = kernel_conv(&f);
    if (status == KILN_OK) /* the output is dense (is_lowp's rule) */
        convert_dense(KILN_F32, op->out[0].dtype, kiln__view_numel(&op->out[0]), buf[op->n_in],
                      kiln__view_ptr(&op->out[0]));
    for (int i = 0; i < KILN__OP_MAX_IN + 1; i++) free(buf[i]);
    return status;
}

/* Whether op is a bf16 or f16 conv: every operand of the output's dtype. */
static bool is_lowp(const kiln__op *op) {
    kiln_dtype dt = op->out[0].dtype;
    if (dt != KILN_BF16 && dt != KILN_F16) return false;
    for (int i = 0; i < op->n_in; i++)
        if (op->in[i].dtype != dt) return false;
    return kiln__view_is_contiguous(&op->out[0]);
}

/* The three kernels: the geometry comes from whichever views hold x, w and y. Forward and
 * input gradient run one task per image; the weight gradient one per chunk of the batch. */
static kiln_status kernel_conv(const kiln__op *op) {
    kiln__opcode code = op->code;
    if (is_lowp(op)) {
        kiln_status st;
        if (kiln__conv_dnnl_run(op, &st)) return st; /* oneDNN's bf16 conv took it */
        return conv_widened(op);
    }
    bool forward = code == KILN__OP_CONV2D, input_grad = code == KILN__OP_CONV2D_BACKWARD_INPUT;
    const kiln__view *x = forward ? &op->in[0] : input_grad ? &op->out[0] : &op->in[1];
    const kiln__view *w = forward || input_grad ? &op->in[1] : &op->out[0];
    const kiln__view *y = forward ? &op->out[0] : &op->in[0];
    kiln_status st = check_op(op, x);
    if (st != KILN_OK) return st;
    if (kiln__conv_dnnl_run(op, &st)) return st; /* oneDNN took it (f32, dense, supported) */
    conv_job j = {.g = geom_of(op, x, w, y), .code = code, .x = kiln__view_ptr(x), .w = kiln__view_ptr(w),
                  .out = kiln__view_ptr(&op->out[0])};
    size_t es = kiln__elsize(op->out[0].dtype);
    int64_t out_numel = kiln__view_numel(&op->out[0]);
    if (out_numel == 0) return KILN_OK;
    if (j.g.n == 0 || j.g.cg == 0) { /* only the weight gradient (or an all-bias output) is left */
        if (!forward || op->n_in < 3) {
            memset(j.out, 0, (size_t)out_numel * es);
            return KILN_OK;
        }
    }
    if (op->out[0].dtype == KILN_F32 && !forward && !input_grad) { /* 3x3, one input channel: conv_direct.c */
        kiln__conv_direct_shape ds = {.n = j.g.n, .h = j.g.h, .w = j.g.w, .o = j.g.o, .oh = j.g.oh, .ow = j.g.ow,
                                      .ph = j.g.ph, .pw = j.g.pw};
        memcpy(ds.xs, j.g.xs, sizeof ds.xs);
        if (kiln__conv_direct_ok(&ds, j.g.kh, j.g.kw, j.g.sh, j.g.sw, j.g.dh, j.g.dw, j.g.groups, j.g.cg))
            return kiln__conv_direct_weight(&ds, j.x, (const float *)kiln__view_ptr(y), j.out);
    }
    j.direct = is_direct(&j.g);
    if (!forward) j.dy = kiln__view_ptr(y);
    if (forward && op->n_in > 2) {
        j.bias = kiln__view_ptr(&op->in[2]);
        j.bias_stride = op->in[2].strides[0];
    }
    kiln__range_fn task = op->out[0].dtype == KILN_F32 ? task_f32 : task_f64;
    int threads = kiln__pool_threads();
    if (forward || input_grad) {
        /* batch-parallel when there are images enough to go round; otherwise the GEMMs thread */
        if (threads > 1 && j.g.n >= threads)
            kiln__parallel_for(j.g.n, 1, task, &j);
        else
            task(&j, 0, j.g.n);
    } else {
        int64_t size = j.g.o * j.g.k;
        j.chunks = j.g.n < MAX_CHUNKS ? j.g.n : MAX_CHUNKS;
        while (j.chunks > 1 && (j.chunks - 1) * size * (int64_t)es > PARTIAL_BYTES) j.chunks--;
        if (j.chunks > 1 && !(j.partials = malloc((size_t)((j.chunks - 1) * size) * es))) j.chunks = 1;
        kiln__parallel_for(j.chunks, 1, task, &j);
        if (j.chunks > 1 && !atomic_load(&j.oom))
            kiln__parallel_for(size, KILN__GRAIN_ELEMENTWISE, es == 4 ? add_partials_f32 : add_partials_f64, &j);
        free(j.partials);
    }
    if (!atomic_load(&j.oom)) return KILN_OK;
    kiln__kernel_error("out of memory for the %s im2col buffer", kiln__opcode_name(code));
    return KILN_ERR_OUT_OF_MEMORY;
}

void kiln__cpu_register_pool(kiln__kernel_fn *table); /* pool.c */

void kiln__cpu_register_nn(kiln__kernel_fn *table) {
    table[KILN__OP_CONV2D] = kernel_conv;
    table[KILN__OP_CONV2D_BACKWARD_INPUT] = kernel_conv;
    table[KILN__OP_CONV2D_BACKWARD_WEIGHT] = kernel_conv;
    kiln__cpu_register_pool(table);
}
