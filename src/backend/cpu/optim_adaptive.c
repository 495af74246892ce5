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

#define FLAG_FIRST 1
#define FLAG_CENTERED 8

static double f64_of_bits(int64_t bits) {
    double v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

typedef struct {
    double f[4], momentum;
    int flags;
    bool has_buffer;
} adaptive_args;

typedef float f32;
typedef double f64;

/* ---- RMSprop: the centered pass ---------------------------------------------------------- */

#define DEFINE_GRAD_AVG(T)                                                                             \
    static void grad_avg_##T##_loop(void *ctx, int64_t n, char **ptrs, const int64_t *st) {            \
        const adaptive_args *a = ctx;                                                                  \
        const T w = (T)(1.0 - a->f[0]), wd = (T)a->f[1];                                               \
        const bool first = (a->flags & FLAG_FIRST) != 0;                                               \
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

/* ptrs: p, square_avg, [buf], grad, [grad_avg]. */
#define DEFINE_RMSPROP(T, SQRT)                                                                        \
    static void rmsprop_##T##_loop(void *ctx, int64_t n, char **ptrs, const int64_t *st) {             \
        const adaptive_args *a = ctx;                                                                  \
        const T lr = (T)a->f[0], alpha = (T)a->f[1], w = (T)(1.0 - a->f[1]), eps = (T)a->f[2];         \
        const T wd = (T)a->f[3], mu = (T)a->momentum;                                                  \
        const bool first = (a->flags & FLAG_FIRST) != 0, centered = (a->flags & FLAG_CENTERED) != 0;  \
        const int ib = 2, ig = a->has_buffer ? 3 : 2, ia = ig + 1;                                     \
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

DEFINE_RMSPROP(f32, sqrtf)
DEFINE_RMSPROP(f64, sqrt)

/* ---- Adagrad ------------------------------------------------------------------------------- */

#define DEFINE_ADAGRAD(T, SQRT)                                                                        \
    static void adagrad_##T##_loop(void *ctx, int64_t n, char **ptrs, const int64_t *st) {             \
        const adaptive_args *a = ctx;                                                                  \
        const T clr = (T)a->f[0], eps = (T)a->f[1], wd = (T)a->f[2], init = (T)a->f[3];               \
        const bool first = (a->flags & FLAG_FIRST) != 0;                                               \
        for (int64_t i = 0; i < n; i++) {                                                              \
            T *p = (T *)(ptrs[0] + i * st[0]), *sum = (T *)(ptrs[1] + i * st[1]);                      \
            T d = *(const T *)(ptrs[2] + i * st[2]);                                                   \
            if (wd != 0) d = d + wd * *p;                                                              \
            T s = (first ? init : *sum) + d * d;                                                       \
            *sum = s;                                                                                  \
            *p = *p - clr * (d / (SQRT(s) + eps));                                                     \
        }                                                                                              \
    }

DEFINE_ADAGRAD(f32, sqrtf)
DEFINE_ADAGRAD(f64, sqrt)

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

static adaptive_args args_of(const kiln__op *op) {
    adaptive_args a = {{op->p.f[0], op->p.f[1], op->p.f[2], op->p.f[3]}, f64_of_bits(op->pi[1]), (int)op->pi[0], false};
    return a;
}

static kiln_status kernel_grad_avg(const kiln__op *op) {
    if (op->n_out != 1 || op->n_in != 2) return KILN_ERR_INTERNAL;
    if (!same_float_dtype(op)) return KILN_ERR_DTYPE;
    adaptive_args a = args_of(op);
    kiln__view views[3] = {op->out[0], op->in[0], op->in[1]};
    kiln__cpu_foreach(3, views, op->out[0].dtype == KILN_F32 ? grad_avg_f32_loop : grad_avg_f64_loop, &a,
                      KILN__GRAIN_ELEMENTWISE);
    return KILN_OK;
}

static kiln_status kernel_rmsprop(const kiln__op *op) {
    adaptive_args a = args_of(op);
    bool centered = (a.flags & FLAG_CENTERED) != 0;
    if (op->n_out < 2 || op->n_out > 3 || op->n_in != (centered ? 2 : 1)) return KILN_ERR_INTERNAL;
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
    adaptive_args a = args_of(op);
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
