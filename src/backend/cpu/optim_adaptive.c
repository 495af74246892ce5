/* Fused RMSprop and Adagrad kernels (RMSPROP_GRAD_AVG, RMSPROP_UPDATE, ADAGRAD_UPDATE): one
 * pass over a parameter updates it and its state in place, following PyTorch's single-tensor
 * RMSprop and Adagrad step by step in the parameter's own precision:
 *
 *   RMSprop: g += wd * p;  sq = alpha * sq + (1 - alpha) * g * g
 *            centered: ga = lerp(ga, g, 1 - alpha);  avg = sqrt(sq - ga * ga) + eps
 *            else avg = sqrt(sq) + eps
 *            momentum: buf = momentum * buf + g / avg;  p -= lr * buf   else p -= lr * g / avg
 *   Adagrad: g += wd * p;  sum += g * g;  p -= clr * g / (sqrt(sum) + eps)
 *
 * A centered RMSprop runs RMSPROP_GRAD_AVG first (an op has at most three outputs), then
 * RMSPROP_UPDATE reads the new grad_avg. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu-impl.h"
#include "backend/cpu/vmath.h"
#include "ir/optim_params.h"


typedef struct {
    double f[4], momentum; /* f: the op's doubles in the order its kernel names them below */
    bool first, centered, has_buffer;
} adaptive_args;

typedef float f32;
typedef double f64;

/* ---- RMSprop: the centered pass ---------------------------------------------------------- */

#define DEFINE_GRAD_AVG(T)                                                                             \
    static void grad_avg_##T##_loop(void *ctx, int64_t n, char **ptrs, const int64_t *st) {            \
        const adaptive_args *a = ctx;                                                                  \
        const T w = (T)(1.0 - a->f[0]), wd = (T)a->f[1];                                               \
        const bool first = a->first;                                                                   \
        const int64_t es = (int64_t)sizeof(T);                                                         \
        if (st[0] == es && st[1] == es && st[2] == es && !first) { /* dense: a loop that vectorises */ \
            T *restrict ga = (T *)ptrs[0];                                                             \
            const T *restrict g = (const T *)ptrs[1], *restrict p = (const T *)ptrs[2];                \
            for (int64_t i = 0; i < n; i++) {                                                          \
                T d = wd != 0 ? g[i] + wd * p[i] : g[i];                                               \
                ga[i] = ga[i] + w * (d - ga[i]);                                                       \
            }                                                                                          \
            return;                                                                                    \
        }                                                                                              \
        for (int64_t i = 0; i < n; i++) {                                                              \
            T *ga = (T *)(ptrs[0] + i * st[0]);                                                        \
            T d = *(const T *)(ptrs[1] + i * st[1]);                                                   \
            if (wd != 0) d = d + wd * *(const T *)(ptrs[2] + i * st[2]);                               \
            T g0 = first ? (T)0 : *ga;                                                                 \
            *ga = g0 + w * (d - g0); /* lerp, as grad_avg.lerp_ */                                     \
        }                                                                                              \
    }

DEFINE_GRAD_AVG(f32)
DEFINE_GRAD_AVG(f64)

/* ---- RMSprop: the update ------------------------------------------------------------------- */

/* Dense runs go by blocks: the new state and the square roots' arguments first, then the
 * block's square roots through the vectorised sqrt (a libm call per element keeps a loop
 * scalar), then the update. Strided runs take the element-by-element loop. */
#define BLOCK 512
#define INLINE static inline __attribute__((always_inline))

/* ptrs: p, square_avg, [buf], grad, [grad_avg]. */
#define DEFINE_RMSPROP(T, SQRT, VSQRT)                                                                 \
    INLINE void rmsprop_##T##_dense(int64_t len, T *restrict p, T *restrict sq, T *restrict b,         \
                                    const T *restrict g, const T *restrict ga, const adaptive_args *a, \
                                    bool first, bool centered, bool wd_on, bool mom) {                  \
        const T lr = (T)a->f[0], alpha = (T)a->f[1], w = (T)(1.0 - a->f[1]), eps = (T)a->f[2];         \
        const T wd = (T)a->f[3], mu = (T)a->momentum;                                                  \
        T root[BLOCK];                                                                                 \
        for (int64_t at = 0; at < len; at += BLOCK) {                                                  \
            int64_t n = len - at < BLOCK ? len - at : BLOCK;                                           \
            for (int64_t i = 0; i < n; i++) {                                                          \
                T d = g[at + i];                                                                       \
                if (wd_on) d = d + wd * p[at + i];                                                     \
                T s = (first ? (T)0 : sq[at + i] * alpha) + w * d * d;                                 \
                sq[at + i] = s;                                                                        \
                root[i] = centered ? s - ga[at + i] * ga[at + i] : s;                                  \
            }                                                                                          \
            VSQRT(root, root, n);                                                                      \
            for (int64_t i = 0; i < n; i++) {                                                          \
                T d = g[at + i];                                                                       \
                if (wd_on) d = d + wd * p[at + i];                                                     \
                T avg = root[i] + eps;                                                                 \
                if (mom) {                                                                             \
                    T buf = (first ? (T)0 : b[at + i] * mu) + d / avg;                                 \
                    b[at + i] = buf;                                                                   \
                    p[at + i] = p[at + i] - lr * buf;                                                  \
                } else {                                                                               \
                    p[at + i] = p[at + i] - lr * (d / avg);                                            \
                }                                                                                      \
            }                                                                                          \
        }                                                                                              \
    }                                                                                                  \
    static void rmsprop_##T##_loop(void *ctx, int64_t n, char **ptrs, const int64_t *st) {             \
        const adaptive_args *a = ctx;                                                                  \
        const T lr = (T)a->f[0], alpha = (T)a->f[1], w = (T)(1.0 - a->f[1]), eps = (T)a->f[2];         \
        const T wd = (T)a->f[3], mu = (T)a->momentum;                                                  \
        const bool first = a->first, centered = a->centered;                                           \
        const int ib = 2, ig = a->has_buffer ? 3 : 2, ia = ig + 1, nv = ia + centered;                 \
        bool dense = true;                                                                             \
        for (int k = 0; k < nv; k++) dense = dense && st[k] == (int64_t)sizeof(T);                     \
        if (dense) {                                                                                   \
            T *p = (T *)ptrs[0], *sq = (T *)ptrs[1], *b = a->has_buffer ? (T *)ptrs[ib] : NULL;        \
            const T *g = (const T *)ptrs[ig], *ga = centered ? (const T *)ptrs[ia] : NULL;             \
            bool wd_on = wd != 0, mom = a->has_buffer;                                                 \
            /* the flags are constants in each call: each combination compiles to its own loops */    \
            switch ((first ? 8 : 0) | (centered ? 4 : 0) | (wd_on ? 2 : 0) | (mom ? 1 : 0)) {          \
            case 0: rmsprop_##T##_dense(n, p, sq, b, g, ga, a, false, false, false, false); break;     \
            case 1: rmsprop_##T##_dense(n, p, sq, b, g, ga, a, false, false, false, true); break;      \
            case 2: rmsprop_##T##_dense(n, p, sq, b, g, ga, a, false, false, true, false); break;      \
            case 3: rmsprop_##T##_dense(n, p, sq, b, g, ga, a, false, false, true, true); break;       \
            case 4: rmsprop_##T##_dense(n, p, sq, b, g, ga, a, false, true, false, false); break;      \
            case 5: rmsprop_##T##_dense(n, p, sq, b, g, ga, a, false, true, false, true); break;       \
            case 6: rmsprop_##T##_dense(n, p, sq, b, g, ga, a, false, true, true, false); break;       \
            case 7: rmsprop_##T##_dense(n, p, sq, b, g, ga, a, false, true, true, true); break;        \
            default: rmsprop_##T##_dense(n, p, sq, b, g, ga, a, first, centered, wd_on, mom); break;   \
            }                                                                                          \
            return;                                                                                    \
        }                                                                                              \
        for (int64_t i = 0; i < n; i++) {                                                              \
            T *p = (T *)(ptrs[0] + i * st[0]), *sq = (T *)(ptrs[1] + i * st[1]);                       \
            T d = *(const T *)(ptrs[ig] + i * st[ig]);                                                 \
            if (wd != 0) d = d + wd * *p;                                                              \
            T s = (first ? (T)0 : *sq * alpha) + w * d * d;                                            \
            *sq = s;                                                                                   \
            if (centered) {                                                                            \
                T ga = *(const T *)(ptrs[ia] + i * st[ia]);                                            \
                s = s - ga * ga;                                                                       \
            }                                                                                          \
            T avg = SQRT(s) + eps;                                                                     \
            if (a->has_buffer) {                                                                       \
                T *b = (T *)(ptrs[ib] + i * st[ib]);                                                   \
                T buf = (first ? (T)0 : *b * mu) + d / avg;                                            \
                *b = buf;                                                                              \
                *p = *p - lr * buf;                                                                    \
            } else {                                                                                   \
                *p = *p - lr * (d / avg);                                                              \
            }                                                                                          \
        }                                                                                              \
    }

DEFINE_RMSPROP(f32, sqrtf, kiln__vsqrt_f32)
DEFINE_RMSPROP(f64, sqrt, kiln__vsqrt_f64)

/* ---- Adagrad ------------------------------------------------------------------------------- */

#define DEFINE_ADAGRAD(T, SQRT, VSQRT)                                                                 \
    INLINE void adagrad_##T##_dense(int64_t len, T *restrict p, T *restrict sum, const T *restrict g,  \
                                    const adaptive_args *a, bool first, bool wd_on) {                  \
        const T clr = (T)a->f[0], eps = (T)a->f[1], wd = (T)a->f[2], init = (T)a->f[3];               \
        T root[BLOCK];                                                                                 \
        for (int64_t at = 0; at < len; at += BLOCK) {                                                  \
            int64_t n = len - at < BLOCK ? len - at : BLOCK;                                           \
            for (int64_t i = 0; i < n; i++) {                                                          \
                T d = g[at + i];                                                                       \
                if (wd_on) d = d + wd * p[at + i];                                                     \
                T s = (first ? init : sum[at + i]) + d * d;                                            \
                sum[at + i] = s;                                                                       \
                root[i] = s;                                                                           \
            }                                                                                          \
            VSQRT(root, root, n);                                                                      \
            for (int64_t i = 0; i < n; i++) {                                                          \
                T d = g[at + i];                                                                       \
                if (wd_on) d = d + wd * p[at + i];                                                     \
                p[at + i] = p[at + i] - clr * (d / (root[i] + eps));                                   \
            }                                                                                          \
        }                                                                                              \
    }                                                                                                  \
    static void adagrad_##T##_loop(void *ctx, int64_t n, char **ptrs, const int64_t *st) {             \
        const adaptive_args *a = ctx;                                                                  \
        const T clr = (T)a->f[0], eps = (T)a->f[1], wd = (T)a->f[2], init = (T)a->f[3];               \
        const bool first = a->first;                                                                   \
        const int64_t es = (int64_t)sizeof(T);                                                         \
        if (st[0] == es && st[1] == es && st[2] == es) {                                               \
            T *p = (T *)ptrs[0], *sum = (T *)ptrs[1];                                                  \
            const T *g = (const T *)ptrs[2];                                                           \
            switch ((first ? 2 : 0) | (wd != 0 ? 1 : 0)) {                                             \
            case 0: adagrad_##T##_dense(n, p, sum, g, a, false, false); break;                         \
            case 1: adagrad_##T##_dense(n, p, sum, g, a, false, true); break;                          \
            case 2: adagrad_##T##_dense(n, p, sum, g, a, true, false); break;                          \
            default: adagrad_##T##_dense(n, p, sum, g, a, true, true); break;                          \
            }                                                                                          \
            return;                                                                                    \
        }                                                                                              \
        for (int64_t i = 0; i < n; i++) {                                                              \
            T *p = (T *)(ptrs[0] + i * st[0]), *sum = (T *)(ptrs[1] + i * st[1]);                      \
            T d = *(const T *)(ptrs[2] + i * st[2]);                                                   \
            if (wd != 0) d = d + wd * *p;                                                              \
            T s = (first ? init : *sum) + d * d;                                                       \
            *sum = s;                                                                                  \
            *p = *p - clr * (d / (SQRT(s) + eps));                                                     \
        }                                                                                              \
    }

DEFINE_ADAGRAD(f32, sqrtf, kiln__vsqrt_f32)
DEFINE_ADAGRAD(f64, sqrt, kiln__vsqrt_f64)

/* ---- kernels --------------------------------------------------------------------------------- */

static bool same_float_dtype(const kiln__op *op) {
    kiln_dtype d = op->out[0].dtype;
    if (d != KILN_F32 && d != KILN_F64)
        return kiln__kernel_error("%s parameters are not supported (f32 and f64 are)", kiln_dtype_name(d)), false;
    for (int i = 0; i < op->n_out; i++)
        if (op->out[i].dtype != d) return kiln__kernel_error("optimizer state dtype differs from the parameter's"), false;
    for (int i = 0; i < op->n_in; i++)
        if (op->in[i].dtype != d) return kiln__kernel_error("gradient dtype differs from the parameter's"), false;
    return true;
}


static kiln_status kernel_grad_avg(const kiln__op *op) {
    if (op->n_out != 1 || op->n_in != 2) return KILN_ERR_INTERNAL;
    if (!same_float_dtype(op)) return KILN_ERR_DTYPE;
    kiln__rmsprop_grad_avg u = kiln__rmsprop_grad_avg_decode(op);
    adaptive_args a = {.f = {u.alpha, u.weight_decay}, .first = u.first};
    kiln__view views[3] = {op->out[0], op->in[0], op->in[1]};
    kiln__cpu_foreach(3, views, op->out[0].dtype == KILN_F32 ? grad_avg_f32_loop : grad_avg_f64_loop, &a,
                      KILN__GRAIN_ELEMENTWISE);
    return KILN_OK;
}

static kiln_status kernel_rmsprop(const kiln__op *op) {
    kiln__rmsprop_update u = kiln__rmsprop_update_decode(op);
    adaptive_args a = {.f = {u.lr, u.alpha, u.eps, u.weight_decay}, .momentum = u.momentum, .first = u.first,
                       .centered = u.centered};
    if (op->n_out < 2 || op->n_out > 3 || op->n_in != (u.centered ? 2 : 1)) return KILN_ERR_INTERNAL;
    if (!same_float_dtype(op)) return KILN_ERR_DTYPE;
    a.has_buffer = op->n_out == 3;
    kiln__view views[5];
    int n = 0;
    for (int i = 0; i < op->n_out; i++) views[n++] = op->out[i];
    for (int i = 0; i < op->n_in; i++) views[n++] = op->in[i];
    kiln__cpu_foreach(n, views, op->out[0].dtype == KILN_F32 ? rmsprop_f32_loop : rmsprop_f64_loop, &a,
                      KILN__GRAIN_ELEMENTWISE / 2);
    return KILN_OK;
}

static kiln_status kernel_adagrad(const kiln__op *op) {
    if (op->n_out != 2 || op->n_in != 1) return KILN_ERR_INTERNAL;
    if (!same_float_dtype(op)) return KILN_ERR_DTYPE;
    kiln__adagrad_update u = kiln__adagrad_update_decode(op);
    adaptive_args a = {.f = {u.clr, u.eps, u.weight_decay, u.initial_accumulator_value}, .first = u.first};
    kiln__view views[3] = {op->out[0], op->out[1], op->in[0]};
    kiln__cpu_foreach(3, views, op->out[0].dtype == KILN_F32 ? adagrad_f32_loop : adagrad_f64_loop, &a,
                      KILN__GRAIN_ELEMENTWISE / 2);
    return KILN_OK;
}

void kiln__cpu_register_optim_adaptive(kiln__kernel_fn *table) {
    table[KILN__OP_RMSPROP_GRAD_AVG] = kernel_grad_avg;
    table[KILN__OP_RMSPROP_UPDATE] = kernel_rmsprop;
    table[KILN__OP_ADAGRAD_UPDATE] = kernel_adagrad;
}
