/* MAX_POOL2D, AVG_POOL2D (plain and adaptive) and their backward kernels, f32, f64 and bf16.
 *
 * The work is split by planes (one image's channel): a plane's windows only read its own
 * input plane, and its backward only writes its own dx plane, so planes run in parallel with
 * no shared writes. Inputs and dy may have any strides; outputs are dense.
 *
 * Semantics follow PyTorch: max pooling treats padding as -inf, takes the first maximum of a
 * window (a NaN wins and propagates), and records its index into the plane's flattened
 * H * W; average pooling divides by the window's size in the padded input
 * (count_include_pad), or by its count of input elements (exclude_pad); adaptive windows of output i span [floor(i*H/OH), ceil((i+1)*H/OH)). */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/convert_lowp.h"
#include "backend/cpu/cpu-impl.h"
#include "backend/cpu/pool.h"
#include "backend/cpu/pool_avx2.h"
#include "ir/pool_params.h"

typedef struct {
    int64_t c, h, w, oh, ow;
    int64_t kh, kw, sh, sw, ph, pw;
    bool adaptive, exclude_pad, backward;
    const char *in; /* x (forward) or dy (backward) */
    int64_t is[4];  /* its strides, elements */
    const int64_t *idx_in; /* max backward: indices, strides ks */
    int64_t ks[4];
    char *out;       /* dense: y (forward) or dx (backward) */
    int64_t *idx_out; /* max forward: indices (dense), or NULL */
} pool_job;

/* Input rows [*lo, *hi) that output row i pools (clipped to the input), and the divisor an
 * average over that window uses. */
static inline void window(const pool_job *j, int64_t i, int64_t k, int64_t s, int64_t p, int64_t size, int64_t n_out,
                          int64_t *lo, int64_t *hi, int64_t *div) {
    if (j->adaptive) {
        *lo = i * size / n_out;
        *hi = ((i + 1) * size + n_out - 1) / n_out;
        *div = *hi - *lo;
        return;
    }
    int64_t start = i * s - p, end = start + k;
    if (end > size + p) end = size + p;
    *lo = start > 0 ? start : 0;
    *hi = end < size ? end : size;
    *div = j->exclude_pad ? *hi - *lo : end - start;
}

static inline const char *plane_of(const char *base, const int64_t *st, int64_t c, int64_t plane, size_t es) {
    return base + ((plane / c) * st[0] + (plane % c) * st[1]) * (int64_t)es;
}

/* Output columns per block of the max-pool row sweep (its running maxima live on the stack). */
#define MAX_BLOCK 256

/* Output columns [lo, hi) whose tap at input column ox * s + off lies inside [0, size). */
static inline void valid_range(int64_t off, int64_t s, int64_t size, int64_t n_out, int64_t *lo, int64_t *hi) {
    int64_t l = off >= 0 ? 0 : (-off + s - 1) / s;
    int64_t h = size - off <= 0 ? 0 : (size - off + s - 1) / s;
    *hi = h < n_out ? h : n_out;
    *lo = l < *hi ? l : *hi;
}

/* Max pooling sweeps a block of output columns at once, one kernel tap after another in
 * raster order, with branch-free (bit mask) updates: a per-element "if (v > best)" mispredicts
 * about half the time on real data (2x2 pooling of [128, 32, 28, 28] on one thread: 16.1 ms
 * with the branch, 4.9 ms without). */
#define POOL_DEFINE(T, SFX, U)                                                                                   \
    static void max_forward_##SFX(void *ctx, int64_t begin, int64_t end) {                                   \
        const pool_job *j = ctx;                                                                             \
        const int64_t w = j->w, ow = j->ow, sw = j->sw, is2 = j->is[2], is3 = j->is[3];                      \
        T best[MAX_BLOCK];                                                                                   \
        int64_t at[MAX_BLOCK];                                                                               \
        for (int64_t pl = begin; pl < end; pl++) {                                                           \
            const T *x = (const T *)plane_of(j->in, j->is, j->c, pl, sizeof(T));                            \
            T *y = (T *)j->out + pl * j->oh * ow;                                                            \
            int64_t *idx = j->idx_out ? j->idx_out + pl * j->oh * ow : NULL;                                 \
            for (int64_t oy = 0; oy < j->oh; oy++) {                                                         \
                int64_t y0, y1, div;                                                                         \
                window(j, oy, j->kh, j->sh, j->ph, j->h, j->oh, &y0, &y1, &div);                             \
                for (int64_t ob = 0; ob < ow; ob += MAX_BLOCK) {                                             \
                    int64_t nb = ow - ob < MAX_BLOCK ? ow - ob : MAX_BLOCK;                                  \
                    for (int64_t q = 0; q < nb; q++) {                                                       \
                        int64_t x0 = (ob + q) * sw - j->pw;                                                  \
                        best[q] = -(T)INFINITY;                                                              \
                        at[q] = y0 * w + (x0 > 0 ? x0 : 0);                                                  \
                    }                                                                                        \
                    for (int64_t iy = y0; iy < y1; iy++)                                                     \
                        for (int64_t kj = 0; kj < j->kw; kj++) {                                             \
                            int64_t off = kj - j->pw, lo, hi;                                                \
                            valid_range(off, sw, w, ow, &lo, &hi);                                           \
                            if (lo < ob) lo = ob;                                                            \
                            if (hi > ob + nb) hi = ob + nb;                                                  \
                            const T *xr = x + iy * is2;                                                      \
                            for (int64_t ox = lo; ox < hi; ox++) {                                           \
                                int64_t ix = ox * sw + off, q = ox - ob;                                     \
                                T v = xr[ix * is3];                                                          \
                                int take = (v > best[q]) | (v != v);                                         \
                                U keep = (U)take - 1, vb, bb; /* all ones: keep the old maximum */           \
                                memcpy(&vb, &v, sizeof vb);                                                  \
                                memcpy(&bb, &best[q], sizeof bb);                                            \
                                bb = (bb & keep) | (vb & ~keep);                                             \
                                memcpy(&best[q], &bb, sizeof bb);                                            \
                                at[q] = (at[q] & ((int64_t)take - 1)) | ((iy * w + ix) & -(int64_t)take);    \
                            }                                                                                \
                        }                                                                                    \
                    memcpy(y + oy * ow + ob, best, sizeof(T) * (size_t)nb);                                  \
                    if (idx) memcpy(idx + oy * ow + ob, at, sizeof(int64_t) * (size_t)nb);                   \
                }                                                                                            \
            }                                                                                                \
        }                                                                                                    \
    }                                                                                                        \
                                                                                                             \
    static void max_backward_##SFX(void *ctx, int64_t begin, int64_t end) {                                  \
        const pool_job *j = ctx;                                                                             \
        int64_t hw = j->h * j->w;                                                                            \
        for (int64_t pl = begin; pl < end; pl++) {                                                           \
            const T *dy = (const T *)plane_of(j->in, j->is, j->c, pl, sizeof(T));                           \
            const int64_t *idx = (const int64_t *)plane_of((const char *)j->idx_in, j->ks, j->c, pl, 8);     \
            T *dx = (T *)j->out + pl * hw;                                                                   \
            memset(dx, 0, sizeof(T) * (size_t)hw);                                                           \
            for (int64_t oy = 0; oy < j->oh; oy++)                                                           \
                for (int64_t ox = 0; ox < j->ow; ox++) {                                                     \
                    int64_t at = idx[oy * j->ks[2] + ox * j->ks[3]];                                         \
                    if ((uint64_t)at < (uint64_t)hw) dx[at] += dy[oy * j->is[2] + ox * j->is[3]];            \
                }                                                                                            \
        }                                                                                                    \
    }                                                                                                        \
                                                                                                             \
    /* Forward: y = the window's mean. Backward: each window's dy / size added over it. */                \
    static void avg_##SFX(void *ctx, int64_t begin, int64_t end) {                                           \
        const pool_job *j = ctx;                                                                             \
        int64_t hw = j->h * j->w, ohw = j->oh * j->ow;                                                       \
        for (int64_t pl = begin; pl < end; pl++) {                                                           \
            const T *in = (const T *)plane_of(j->in, j->is, j->c, pl, sizeof(T));                           \
            T *out = (T *)j->out + pl * (j->backward ? hw : ohw);                                            \
            if (j->backward) memset(out, 0, sizeof(T) * (size_t)hw);                                         \
            for (int64_t oy = 0; oy < j->oh; oy++) {                                                         \
                int64_t y0, y1, x0, x1, dy_, dx_;                                                            \
                window(j, oy, j->kh, j->sh, j->ph, j->h, j->oh, &y0, &y1, &dy_);                             \
                for (int64_t ox = 0; ox < j->ow; ox++) {                                                     \
                    window(j, ox, j->kw, j->sw, j->pw, j->w, j->ow, &x0, &x1, &dx_);                         \
                    if (j->backward) {                                                                       \
                        T v = in[oy * j->is[2] + ox * j->is[3]] / (T)(dy_ * dx_);                            \
                        for (int64_t iy = y0; iy < y1; iy++)                                                 \
                            for (int64_t ix = x0; ix < x1; ix++) out[iy * j->w + ix] += v;                   \
                        continue;                                                                            \
                    }                                                                                        \
                    T sum = 0;                                                                               \
                    for (int64_t iy = y0; iy < y1; iy++)                                                     \
                        for (int64_t ix = x0; ix < x1; ix++) sum += in[iy * j->is[2] + ix * j->is[3]];       \
                    out[oy * j->ow + ox] = sum / (T)(dy_ * dx_);                                             \
                }                                                                                            \
            }                                                                                                \
        }                                                                                                    \
    }

POOL_DEFINE(float, f32, uint32_t)
POOL_DEFINE(double, f64, uint64_t)

/* The CNNs' pool (2x2, stride 2, no padding, f32, dense columns) through pool_avx2.c: on one
 * thread, [128, 32, 28, 28] took 4.4-4.9 ms in the generic sweep above, 0.58 ms there. */
static void max_forward_2x2_f32(void *ctx, int64_t begin, int64_t end) {
    const pool_job *j = ctx;
    for (int64_t pl = begin; pl < end; pl++)
        kiln__max_pool_2x2_avx2((const float *)plane_of(j->in, j->is, j->c, pl, sizeof(float)), j->is[2], j->w, j->oh,
                                j->ow, (float *)j->out + pl * j->oh * j->ow,
                                j->idx_out ? j->idx_out + pl * j->oh * j->ow : NULL);
}

/* Whether the 2x2 kernels (f32 and bf16) take j's windows and layout. */
static bool is_2x2(const pool_job *j) {
    return !j->adaptive && j->kh == 2 && j->kw == 2 && j->sh == 2 && j->sw == 2 && j->ph == 0 &&
           j->pw == 0 && j->is[3] == 1 && 2 * j->oh <= j->h && 2 * j->ow <= j->w &&
           kiln__max_pool_2x2_avx2_ok(j->h, j->w);
}

/* ---- bf16: each plane widened into f32 scratch, pooled by the f32 kernels, rounded back ----
 * Why: the op layer used to cast a bf16 tensor to f32 before pooling and the result back (under
 * autocast, the CNN's conv outputs and their gradients): two more passes over the tensor and an
 * f32 copy of it. A plane (a few KB) widened in cache costs no memory traffic. The values are the
 * casts' bit for bit: max pooling picks one of its inputs (exact in bf16), and sums (average
 * pooling, the max backward of overlapping windows) are summed in f32 and rounded once, as the
 * cast after the f32 kernel rounded them. */
typedef struct {
    const pool_job *j;
    kiln__range_fn f32_fn;
    atomic_int oom;
} lowp_job;

/* Floats of scratch per task: a batch of planes widened at once (32 KB, in L1/L2), so that the
 * conversions run over long dense runs and the f32 kernel's per-plane work is not paid per call. */
#define LOWP_SCRATCH_FLOATS 8192

/* Planes [p0, p0 + n) of the input, widened into dense f32 planes of rows x cols at buf. */
static void widen_planes(const pool_job *j, int64_t p0, int64_t n, int64_t rows, int64_t cols, float *buf) {
    for (int64_t pl = p0; pl < p0 + n; pl++) {
        const uint16_t *src = (const uint16_t *)plane_of(j->in, j->is, j->c, pl, sizeof(uint16_t));
        uint32_t *dst = (uint32_t *)buf + (pl - p0) * rows * cols;
        bool dense = j->is[3] == 1 && j->is[2] == cols;
        for (int64_t r = 0; r < (dense ? 1 : rows); r++) { /* a dense plane is one run */
            const uint16_t *sr = src + r * j->is[2];
            uint32_t *dr = dst + r * cols;
            int64_t len = dense ? rows * cols : cols;
            if (j->is[3] == 1) /* a shift the compiler vectorises */
                for (int64_t q = 0; q < len; q++) dr[q] = (uint32_t)sr[q] << 16;
            else
                for (int64_t q = 0; q < len; q++) dr[q] = (uint32_t)sr[q * j->is[3]] << 16;
        }
    }
}

/* Planes [begin, end) of j (bf16) through f32_fn, a batch of planes at a time widened into
 * scratch; false when the scratch cannot be had. */
static bool f32_batches(const pool_job *j, kiln__range_fn f32_fn, int64_t begin, int64_t end) {
    int64_t rows = j->backward ? j->oh : j->h, cols = j->backward ? j->ow : j->w; /* the input plane */
    int64_t in_n = rows * cols, out_n = j->backward ? j->h * j->w : j->oh * j->ow;
    int64_t batch = LOWP_SCRATCH_FLOATS / (in_n + out_n);
    if (j->idx_in && j->ks[0] != j->c * j->ks[1]) batch = 1; /* the indices' planes are not one run */
    batch = batch < 1 ? 1 : batch > end - begin ? end - begin : batch;
    float *buf = malloc((size_t)(batch * (in_n + out_n)) * sizeof(float));
    if (!buf) return false;
    pool_job p = *j; /* `batch` dense f32 planes at a time, one after another */
    float *pooled = buf + batch * in_n;
    p.c = 1, p.in = (const char *)buf, p.out = (char *)pooled;
    p.is[0] = in_n, p.is[1] = 0, p.is[2] = cols, p.is[3] = 1;
    p.ks[0] = j->ks[1];
    for (int64_t p0 = begin; p0 < end; p0 += batch) {
        int64_t n = end - p0 < batch ? end - p0 : batch;
        widen_planes(j, p0, n, rows, cols, buf);
        p.idx_out = j->idx_out ? j->idx_out + p0 * out_n : NULL;
        p.idx_in = j->idx_in ? (const int64_t *)plane_of((const char *)j->idx_in, j->ks, j->c, p0, 8) : NULL;
        f32_fn(&p, 0, n);
        kiln__cpu_store_bf16(n * out_n, pooled, 1, (uint16_t *)j->out + p0 * out_n, 1);
    }
    free(buf);
    return true;
}

static void bf16_planes(void *ctx, int64_t begin, int64_t end) {
    lowp_job *l = ctx;
    if (!f32_batches(l->j, l->f32_fn, begin, end)) atomic_store(&l->oom, 1);
}

/* The CNNs' pool on bf16 as it is (pool_avx2.c): no widened copy. */
static void max_forward_2x2_bf16(void *ctx, int64_t begin, int64_t end) {
    const pool_job *j = ((lowp_job *)ctx)->j;
    int64_t ohw = j->oh * j->ow;
    for (int64_t pl = begin; pl < end; pl++)
        kiln__max_pool_2x2_bf16_avx2((const uint16_t *)plane_of(j->in, j->is, j->c, pl, sizeof(uint16_t)), j->is[2],
                                     j->w, j->oh, j->ow, (uint16_t *)j->out + pl * ohw,
                                     j->idx_out ? j->idx_out + pl * ohw : NULL);
}

/* dy's value as the f32 route leaves it in a zeroed dx: +0 + v (-0 becomes +0), a NaN made quiet. */
static inline uint16_t added_to_zero(uint16_t v) {
    if ((v & 0x7fffu) > 0x7f80u) return (uint16_t)(v | 0x40u);
    return v == 0x8000u ? 0 : v;
}

/* Max backward in bf16: each dy stored at its index, no widening, where no two of a plane's
 * windows chose one input (disjoint windows: the CNNs' 2x2 pools; a stamp per input tells). A
 * plane where two did (overlapping windows) is done again in f32, so its sums are rounded once,
 * as the f32 route rounds them. */
static void max_backward_bf16(void *ctx, int64_t begin, int64_t end) {
    lowp_job *l = ctx;
    const pool_job *j = l->j;
    int64_t hw = j->h * j->w;
    int64_t *stamp = malloc((size_t)hw * sizeof(int64_t)); /* the last plane whose windows chose each input */
    if (!stamp) {
        atomic_store(&l->oom, 1);
        return;
    }
    for (int64_t i = 0; i < hw; i++) stamp[i] = -1;
    memset((uint16_t *)j->out + begin * hw, 0, sizeof(uint16_t) * (size_t)((end - begin) * hw));
    for (int64_t pl = begin; pl < end; pl++) {
        const uint16_t *dy = (const uint16_t *)plane_of(j->in, j->is, j->c, pl, sizeof(uint16_t));
        const int64_t *idx = (const int64_t *)plane_of((const char *)j->idx_in, j->ks, j->c, pl, 8);
        uint16_t *dx = (uint16_t *)j->out + pl * hw;
        bool shared = false;
        for (int64_t oy = 0; oy < j->oh && !shared; oy++)
            for (int64_t ox = 0; ox < j->ow; ox++) {
                int64_t at = idx[oy * j->ks[2] + ox * j->ks[3]];
                if ((uint64_t)at >= (uint64_t)hw) continue;
                if (stamp[at] == pl) {
                    shared = true;
                    break;
                }
                stamp[at] = pl;
                dx[at] = added_to_zero(dy[oy * j->is[2] + ox * j->is[3]]);
            }
        if (shared && !f32_batches(j, max_backward_f32, pl, pl + 1)) atomic_store(&l->oom, 1);
    }
    free(stamp);
}

static atomic_long bf16_calls;

long kiln__cpu_pool_bf16_calls(void) { return atomic_load(&bf16_calls); }

static kiln_status pool_bf16(const pool_job *j, int64_t planes, kiln__range_fn f32_fn) {
    atomic_fetch_add(&bf16_calls, 1);
    lowp_job l = {.j = j, .f32_fn = f32_fn};
    kiln__range_fn fn = bf16_planes;
    pool_job dense = *j; /* the plane as the f32 kernel sees it: may the 2x2 kernel take it? */
    dense.is[2] = j->w, dense.is[3] = 1;
    if (f32_fn == max_forward_f32 && is_2x2(&dense)) l.f32_fn = max_forward_2x2_f32;
    if (f32_fn == max_forward_f32 && is_2x2(j)) fn = max_forward_2x2_bf16;
    if (f32_fn == max_backward_f32) fn = max_backward_bf16;
    int64_t work = j->oh * j->ow * (j->adaptive ? 1 : j->kh * j->kw) + 2 * j->h * j->w;
    int64_t grain = work > 0 ? KILN__GRAIN_ELEMENTWISE / work : planes;
    kiln__parallel_for(planes, grain > 0 ? grain : 1, fn, &l);
    if (!atomic_load(&l.oom)) return KILN_OK;
    kiln__kernel_error("out of memory for a bf16 pooling plane's f32 scratch (%lld x %lld)", (long long)j->h,
                       (long long)j->w);
    return KILN_ERR_OUT_OF_MEMORY;
}

/* x (or dx) [N, C, H, W] and y (or dy) [N, C, OH, OW] give the sizes; the op the windows. */
static pool_job job_of(const kiln__op *op, const kiln__view *x, const kiln__view *y, const kiln__view *in) {
    pool_job j = {
        .c = x->shape[1], .h = x->shape[2], .w = x->shape[3], .oh = y->shape[2], .ow = y->shape[3],
        .kh = op->p.i[0], .kw = op->p.i[1], .sh = op->p.i[2], .sw = op->p.i[3], .ph = op->pi[0], .pw = op->pi[1],
        .adaptive = op->pi[2] == KILN__POOL_ADAPTIVE,
        .exclude_pad = op->pi[2] == KILN__POOL_WINDOWS_EXCLUDE_PAD,
        .in = kiln__view_ptr(in),
        .out = kiln__view_ptr(&op->out[0]),
    };
    memcpy(j.is, in->strides, sizeof j.is);
    return j;
}

static kiln_status check_op(const kiln__op *op) {
    kiln_dtype dt = op->out[0].dtype;
    if ((dt != KILN_F32 && dt != KILN_F64 && dt != KILN_BF16) || op->in[0].dtype != dt) {
        kiln__kernel_error("no CPU %s kernel for %s into %s", kiln__opcode_name(op->code),
                           kiln_dtype_name(op->in[0].dtype), kiln_dtype_name(dt));
        return KILN_ERR_DTYPE;
    }
    if ((op->n_out > 1 && op->out[1].dtype != KILN_I64) || (op->n_in > 1 && op->in[1].dtype != KILN_I64)) {
        kiln__kernel_error("%s indices must be i64", kiln__opcode_name(op->code));
        return KILN_ERR_DTYPE;
    }
    for (int i = 0; i < op->n_out; i++)
        if (!kiln__view_is_contiguous(&op->out[i])) {
            kiln__kernel_error("%s needs dense outputs", kiln__opcode_name(op->code));
            return KILN_ERR_INTERNAL;
        }
    return KILN_OK;
}

/* Planes per task: enough window reads to outweigh waking a thread. */
static void run_planes(const pool_job *j, int64_t planes, kiln__range_fn fn) {
    int64_t work = j->oh * j->ow * (j->adaptive ? 1 : j->kh * j->kw) + j->h * j->w;
    int64_t grain = work > 0 ? KILN__GRAIN_ELEMENTWISE / work : planes;
    kiln__parallel_for(planes, grain > 0 ? grain : 1, fn, (void *)j);
}

static int64_t planes_of(const kiln__view *v) { return v->shape[0] * v->shape[1]; }

/* The four kernels: forward ops pool in[0] into out[0] (and the max's indices into out[1]);
 * backward ops spread dy (in[0]) back into out[0], through the max's indices (in[1]). */
static kiln_status kernel_pool(const kiln__op *op) {
    kiln_status st = check_op(op);
    if (st != KILN_OK) return st;
    static const kiln__range_fn fns[4][2] = {{max_forward_f32, max_forward_f64},
                                             {max_backward_f32, max_backward_f64},
                                             {avg_f32, avg_f64},
                                             {avg_f32, avg_f64}};
    int which = op->code == KILN__OP_MAX_POOL2D            ? 0
                : op->code == KILN__OP_MAX_POOL2D_BACKWARD ? 1
                : op->code == KILN__OP_AVG_POOL2D          ? 2
                                                           : 3;
    bool backward = which % 2 == 1;
    pool_job j = job_of(op, backward ? &op->out[0] : &op->in[0], backward ? &op->in[0] : &op->out[0], &op->in[0]);
    j.backward = backward;
    if (which == 0 && op->n_out > 1) j.idx_out = (int64_t *)kiln__view_ptr(&op->out[1]);
    if (which == 1) {
        j.idx_in = (const int64_t *)kiln__view_ptr(&op->in[1]);
        memcpy(j.ks, op->in[1].strides, sizeof j.ks);
    }
    kiln__range_fn fn = fns[which][op->out[0].dtype == KILN_F64];
    if (op->out[0].dtype == KILN_BF16) return pool_bf16(&j, planes_of(&op->out[0]), fn);
    if (which == 0 && op->out[0].dtype == KILN_F32 && is_2x2(&j)) fn = max_forward_2x2_f32;
    run_planes(&j, planes_of(&op->out[0]), fn);
    return KILN_OK;
}

void kiln__cpu_register_pool(kiln__kernel_fn *table); /* called by kiln__cpu_register_nn (conv.c) */

void kiln__cpu_register_pool(kiln__kernel_fn *table) {
    table[KILN__OP_MAX_POOL2D] = kernel_pool;
    table[KILN__OP_MAX_POOL2D_BACKWARD] = kernel_pool;
    table[KILN__OP_AVG_POOL2D] = kernel_pool;
    table[KILN__OP_AVG_POOL2D_BACKWARD] = kernel_pool;
}
