/* Fused optimizer kernels: one pass over a parameter updates it and its state in place
 * (SGD_UPDATE, ADAM_UPDATE), and SUM_SQUARES for gradient clipping. The formulas follow
 * PyTorch's single-tensor SGD and Adam step by step, in the parameter's own precision (f32
 * parameters compute in float, as PyTorch's CPU kernels do). With KILN__OPTIM_FLAG_BF16_COPY an
 * f32 SGD update also rounds each stretch of the new parameter into its last output, autocast's
 * bf16 copy, while the stretch is still in cache (the same rounding as a cast). */
#include <math.h>
#include <string.h>

#include "backend/cpu/convert_lowp.h"
#include "backend/cpu/cpu-impl.h"
#include "backend/cpu/optim_avx2.h"
#include "backend/cpu/vmath.h"
#include "ir/optim_params.h"


#define INLINE static inline __attribute__((always_inline))

/* update over a run of n elements of n_views views (the parameter's first, the bf16 copy's
 * last), block by block, each block's new parameter rounded into the copy while it is in L1. */
#define COPY_BLOCK 2048
static void update_with_copy(kiln__loop_fn update, void *ctx, int64_t n, char **ptrs, const int64_t *st,
                             int n_views) {
    char *p[8];
    int copy = n_views - 1;
    for (int64_t at = 0; at < n; at += COPY_BLOCK) {
        int64_t len = n - at < COPY_BLOCK ? n - at : COPY_BLOCK;
        for (int v = 0; v < n_views; v++) p[v] = ptrs[v] + at * st[v];
        update(ctx, len, p, st);
        kiln__cpu_store_bf16(len, (const float *)p[0], st[0] / 4, (uint16_t *)p[copy], st[copy] / 2);
    }
}

/* ---- SGD ------------------------------------------------------------------------------------ */

typedef struct {
    double lr, momentum, dampening, weight_decay;
    bool first, nesterov, has_buffer;
} sgd_args;

/* One run of n elements; strides in elements (1 when dense, so the loop vectorises). The bool
 * parameters are constants at every call site: each combination compiles to its own loop. */
#define DEFINE_SGD(T)                                                                                  \
    INLINE void sgd_##T##_run(int64_t n, T *p, T *b, const T *g, int64_t sp, int64_t sb, int64_t sg,   \
                              const sgd_args *a, bool wd, bool mom, bool nesterov, bool first) {       \
        const T lr = (T)a->lr, mu = (T)a->momentum, damp = (T)(1.0 - a->dampening), w = (T)a->weight_decay; \
        for (int64_t i = 0; i < n; i++) {                                                              \
            T d = g[i * sg];                                                                           \
            if (wd) d = d + w * p[i * sp];                                                             \
            if (mom) {                                                                                 \
                T buf = first ? d : mu * b[i * sb] + damp * d;                                         \
                b[i * sb] = buf;                                                                       \
                d = nesterov ? d + mu * buf : buf;                                                     \
            }                                                                                          \
            p[i * sp] = p[i * sp] - lr * d;                                                            \
        }                                                                                              \
    }                                                                                                  \
    static void sgd_##T##_loop(void *ctx, int64_t n, char **ptrs, const int64_t *st) {                 \
        const sgd_args *a = ctx;                                                                       \
        const int64_t es = (int64_t)sizeof(T);                                                         \
        T *p = (T *)ptrs[0];                                                                           \
        T *b = a->has_buffer ? (T *)ptrs[1] : NULL;                                                    \
        const T *g = (const T *)ptrs[a->has_buffer ? 2 : 1];                                           \
        int64_t sp = st[0] / es, sb = a->has_buffer ? st[1] / es : 0, sg = st[a->has_buffer ? 2 : 1] / es; \
        bool dense = sp == 1 && sg == 1 && (!b || sb == 1);                                            \
        if (!dense) {                                                                                  \
            sgd_##T##_run(n, p, b, g, sp, sb, sg, a, a->weight_decay != 0, b != NULL,                  \
                          a->nesterov, a->first);                                                      \
            return;                                                                                    \
        }                                                                                              \
        bool wd = a->weight_decay != 0;                                                                \
        int mode = !b ? 0 : 1 + (a->nesterov ? 2 : 0) + (a->first ? 1 : 0);                            \
        switch (mode + (wd ? 5 : 0)) {                                                                 \
        case 0: sgd_##T##_run(n, p, b, g, 1, 1, 1, a, false, false, false, false); break;              \
        case 1: sgd_##T##_run(n, p, b, g, 1, 1, 1, a, false, true, false, false); break;               \
        case 2: sgd_##T##_run(n, p, b, g, 1, 1, 1, a, false, true, false, true); break;                \
        case 3: sgd_##T##_run(n, p, b, g, 1, 1, 1, a, false, true, true, false); break;                \
        case 4: sgd_##T##_run(n, p, b, g, 1, 1, 1, a, false, true, true, true); break;                 \
        case 5: sgd_##T##_run(n, p, b, g, 1, 1, 1, a, true, false, false, false); break;               \
        case 6: sgd_##T##_run(n, p, b, g, 1, 1, 1, a, true, true, false, false); break;                \
        case 7: sgd_##T##_run(n, p, b, g, 1, 1, 1, a, true, true, false, true); break;                 \
        case 8: sgd_##T##_run(n, p, b, g, 1, 1, 1, a, true, true, true, false); break;                 \
        default: sgd_##T##_run(n, p, b, g, 1, 1, 1, a, true, true, true, true); break;                 \
        }                                                                                              \
    }

typedef float f32;
typedef double f64;
DEFINE_SGD(f32)
DEFINE_SGD(f64)

static void sgd_f32_copy_loop(void *ctx, int64_t n, char **ptrs, const int64_t *st) {
    update_with_copy(sgd_f32_loop, ctx, n, ptrs, st, ((const sgd_args *)ctx)->has_buffer ? 4 : 3);
}

/* Whether op carries a bf16 copy (its last output) and it fits: an f32 parameter's shape. */
static bool bf16_copy_of(const kiln__op *op, bool *has) {
    *has = kiln__optim_flag(op, KILN__OPTIM_FLAG_BF16_COPY);
    if (!*has) return true;
    const kiln__view *p = &op->out[0], *c = &op->out[op->n_out - 1];
    bool fits = op->n_out >= 2 && p->dtype == KILN_F32 && c->dtype == KILN_BF16 && c->ndim == p->ndim &&
                memcmp(c->shape, p->shape, sizeof(int64_t) * (size_t)p->ndim) == 0;
    if (!fits) kiln__kernel_error("an update's bf16 copy must be a bf16 tensor of its f32 parameter's shape");
    return fits;
}

static bool float_views(const kiln__op *op, int n_out) {
    kiln_dtype d = op->out[0].dtype;
    if (d != KILN_F32 && d != KILN_F64) {
        kiln__kernel_error("%s parameters are not supported (f32 and f64 are)", kiln_dtype_name(d));
        return false;
    }
    for (int i = 1; i < n_out; i++)
        if (op->out[i].dtype != d) return kiln__kernel_error("optimizer state dtype differs from the parameter's"), false;
    if (op->in[0].dtype != d) return kiln__kernel_error("gradient dtype differs from the parameter's"), false;
    return true;
}

static kiln_status kernel_sgd(const kiln__op *op) {
    bool copy;
    if (!bf16_copy_of(op, &copy)) return KILN_ERR_DTYPE;
    int n_out = op->n_out - copy;
    if (!float_views(op, n_out)) return KILN_ERR_DTYPE;
    kiln__sgd_update u = kiln__sgd_update_decode(op);
    sgd_args a = {u.lr, u.momentum, u.dampening, u.weight_decay, u.first, u.nesterov, n_out == 2};
    kiln__view views[4] = {op->out[0], op->out[1], op->in[0]};
    if (!a.has_buffer) views[1] = op->in[0];
    int n_views = a.has_buffer ? 3 : 2;
    if (copy) views[n_views++] = op->out[op->n_out - 1];
    kiln__loop_fn fn = copy ? sgd_f32_copy_loop : op->out[0].dtype == KILN_F32 ? sgd_f32_loop : sgd_f64_loop;
    kiln__cpu_foreach(n_views, views, fn, &a, KILN__GRAIN_ELEMENTWISE);
    return KILN_OK;
}

/* ---- Adam / AdamW ----------------------------------------------------------------------------- */

typedef struct {
    double step_size, beta1, beta2, eps, bc2_sqrt, decay;
    bool first, decoupled;
} adam_args;

/* decay: 0 none, 1 L2 (grad += wd * p), 2 decoupled (p *= 1 - lr * wd). */
#define ADAM_MOMENTS(T)                                                                                \
    T x = p[i * sp], d = g[i * sg];                                                                    \
    if (decay == 1) d = d + k * x;                                                                     \
    if (decay == 2) x = x * k;                                                                         \
    T m0 = first ? (T)0 : m[i * sm], v0 = first ? (T)0 : v[i * sv];                                    \
    T m1 = m0 + w1 * (d - m0); /* lerp, as PyTorch's exp_avg.lerp_ */                                  \
    T v1 = v0 * b2 + w2 * d * d;                                                                       \
    m[i * sm] = m1;                                                                                    \
    v[i * sv] = v1;

#define ADAM_CONSTANTS(T)                                                                              \
    const T step = (T)a->step_size, w1 = (T)(1.0 - a->beta1), b2 = (T)a->beta2, w2 = (T)(1.0 - a->beta2); \
    const T eps = (T)a->eps, bc2 = (T)a->bc2_sqrt, k = (T)a->decay;

/* Dense runs go by blocks: moments first, then the block's square roots through the
 * vectorised sqrt (a libm sqrt call per element keeps the loop scalar), then the update. */
#define ADAM_BLOCK 512

/* Dense f32 runs on CPUs with AVX2: optim_avx2.c, the same bits eight at a time. */
static bool adam_f32_fast(int64_t n, float *p, float *m, float *v, const float *g, const adam_args *a, int decay,
                          bool first) {
    if (!kiln__adam_f32_avx2_ok()) return false;
    ADAM_CONSTANTS(float)
    kiln__adam_f32_consts c = {step, w1, b2, w2, eps, bc2, k};
    kiln__adam_f32_avx2(n, p, m, v, g, &c, decay, first);
    return true;
}

static bool adam_f64_fast(int64_t n, double *p, double *m, double *v, const double *g, const adam_args *a, int decay,
                          bool first) {
    (void)n, (void)p, (void)m, (void)v, (void)g, (void)a, (void)decay, (void)first;
    return false;
}

#define DEFINE_ADAM(T, SQRT, VSQRT)                                                                    \
    INLINE void adam_##T##_run(int64_t n, T *p, T *m, T *v, const T *g, int64_t sp, int64_t sm, int64_t sv, \
                               int64_t sg, const adam_args *a, int decay, bool first) {                 \
        ADAM_CONSTANTS(T)                                                                              \
        for (int64_t i = 0; i < n; i++) {                                                              \
            ADAM_MOMENTS(T)                                                                            \
            p[i * sp] = x - step * (m1 / (SQRT(v1) / bc2 + eps));                                      \
        }                                                                                              \
    }                                                                                                  \
    INLINE void adam_##T##_dense(int64_t len, T *p, T *m, T *v, const T *g, const adam_args *a, int decay, \
                                 bool first) {                                                         \
        ADAM_CONSTANTS(T)                                                                              \
        const int64_t sp = 1, sm = 1, sv = 1, sg = 1;                                                  \
        T root[ADAM_BLOCK];                                                                            \
        for (int64_t at = 0; at < len; at += ADAM_BLOCK) {                                             \
            int64_t n = len - at < ADAM_BLOCK ? len - at : ADAM_BLOCK;                                 \
            for (int64_t i = at; i < at + n; i++) {                                                    \
                ADAM_MOMENTS(T)                                                                        \
                (void)x;                                                                               \
                root[i - at] = v1;                                                                     \
            }                                                                                          \
            VSQRT(root, root, n);                                                                      \
            for (int64_t i = at; i < at + n; i++) {                                                    \
                T x = decay == 2 ? p[i] * k : p[i];                                                    \
                p[i] = x - step * (m[i] / (root[i - at] / bc2 + eps));                                 \
            }                                                                                          \
        }                                                                                              \
    }                                                                                                  \
    static void adam_##T##_loop(void *ctx, int64_t n, char **ptrs, const int64_t *st) {                \
        const adam_args *a = ctx;                                                                      \
        const int64_t es = (int64_t)sizeof(T);                                                         \
        T *p = (T *)ptrs[0], *m = (T *)ptrs[1], *v = (T *)ptrs[2];                                     \
        const T *g = (const T *)ptrs[3];                                                               \
        int decay = a->decay == 0 && !a->decoupled ? 0 : a->decoupled ? 2 : 1;                         \
        bool first = a->first;                                                                         \
        if (st[0] != es || st[1] != es || st[2] != es || st[3] != es) {                                \
            adam_##T##_run(n, p, m, v, g, st[0] / es, st[1] / es, st[2] / es, st[3] / es, a, decay, first); \
            return;                                                                                    \
        }                                                                                              \
        if (adam_##T##_fast(n, p, m, v, g, a, decay, first)) return;                                  \
        switch (decay * 2 + first) {                                                                   \
        case 0: adam_##T##_dense(n, p, m, v, g, a, 0, false); break;                                   \
        case 1: adam_##T##_dense(n, p, m, v, g, a, 0, true); break;                                    \
        case 2: adam_##T##_dense(n, p, m, v, g, a, 1, false); break;                                   \
        case 3: adam_##T##_dense(n, p, m, v, g, a, 1, true); break;                                    \
        case 4: adam_##T##_dense(n, p, m, v, g, a, 2, false); break;                                   \
        default: adam_##T##_dense(n, p, m, v, g, a, 2, true); break;                                   \
        }                                                                                              \
    }

DEFINE_ADAM(f32, sqrtf, kiln__vsqrt_f32)
DEFINE_ADAM(f64, sqrt, kiln__vsqrt_f64)

static kiln_status kernel_adam(const kiln__op *op) {
    if (op->n_out != 3 || !float_views(op, 3)) return op->n_out != 3 ? KILN_ERR_INTERNAL : KILN_ERR_DTYPE;
    kiln__adam_update u = kiln__adam_update_decode(op);
    adam_args a = {u.step_size, u.beta1, u.beta2, u.eps, u.sqrt_bias_correction2, u.weight_decay_term, u.first,
                   u.decoupled};
    kiln__view views[4] = {op->out[0], op->out[1], op->out[2], op->in[0]};
    kiln__cpu_foreach(4, views, op->out[0].dtype == KILN_F32 ? adam_f32_loop : adam_f64_loop, &a,
                      KILN__GRAIN_ELEMENTWISE / 2);
    return KILN_OK;
}

/* ---- sum of squares ------------------------------------------------------------------------- */

/* The input is cut into at most MAX_CHUNKS pieces whose partial sums are added in order, so
 * the result does not depend on the thread count. */
#define MAX_CHUNKS 1024
#define MIN_CHUNK 16384

typedef struct {
    const kiln__view *in;
    bool dense;
    int64_t chunk, n;
    double partial[MAX_CHUNKS];
} sumsq_args;

static double sumsq_dense(const kiln__view *v, int64_t begin, int64_t end) {
    double s[4] = {0, 0, 0, 0};
    int64_t i = begin;
    if (v->dtype == KILN_F32) {
        const float *x = (const float *)kiln__view_ptr(v);
        for (; i + 4 <= end; i += 4)
            for (int k = 0; k < 4; k++) s[k] += (double)x[i + k] * x[i + k];
        for (; i < end; i++) s[0] += (double)x[i] * x[i];
    } else {
        for (; i < end; i++) {
            double x = kiln__load_as_f64(kiln__view_ptr(v), v->dtype, i);
            s[i & 3] += x * x;
        }
    }
    return (s[0] + s[1]) + (s[2] + s[3]);
}

/* Strided: element i's offset from its multi-index. Rare (gradients come out dense). */
static double sumsq_strided(const kiln__view *v, int64_t begin, int64_t end) {
    double s = 0;
    for (int64_t i = begin; i < end; i++) {
        int64_t rem = i, off = 0;
        for (int d = v->ndim - 1; d >= 0; d--) {
            off += (rem % v->shape[d]) * v->strides[d];
            rem /= v->shape[d];
        }
        double x = kiln__load_as_f64(kiln__view_ptr(v), v->dtype, off);
        s += x * x;
    }
    return s;
}

static void sumsq_chunks(void *ctx, int64_t begin, int64_t end) {
    sumsq_args *a = ctx;
    for (int64_t c = begin; c < end; c++) {
        int64_t lo = c * a->chunk, hi = lo + a->chunk < a->n ? lo + a->chunk : a->n;
        a->partial[c] = a->dense ? sumsq_dense(a->in, lo, hi) : sumsq_strided(a->in, lo, hi);
    }
}

static kiln_status kernel_sum_squares(const kiln__op *op) {
    if (op->out[0].dtype != KILN_F64) return kiln__kernel_error("SUM_SQUARES writes f64"), KILN_ERR_INTERNAL;
    sumsq_args a;
    a.in = &op->in[0];
    a.n = kiln__view_numel(a.in);
    a.dense = kiln__view_is_contiguous(a.in);
    a.chunk = MIN_CHUNK;
    if ((a.n + a.chunk - 1) / a.chunk > MAX_CHUNKS) a.chunk = (a.n + MAX_CHUNKS - 1) / MAX_CHUNKS;
    int64_t chunks = (a.n + a.chunk - 1) / a.chunk;
    kiln__parallel_for(chunks, 1, sumsq_chunks, &a);
    double total = 0;
    for (int64_t c = 0; c < chunks; c++) total += a.partial[c];
    *(double *)kiln__view_ptr(&op->out[0]) = total;
    return KILN_OK;
}

void kiln__cpu_register_optim(kiln__kernel_fn *table) {
    table[KILN__OP_SGD_UPDATE] = kernel_sgd;
    table[KILN__OP_ADAM_UPDATE] = kernel_adam;
    table[KILN__OP_SUM_SQUARES] = kernel_sum_squares;
}
