/* Scans along one dim: CUMSUM and CUMPROD (forward, or from the end when p.i[1] is set), and
 * CUMPROD_BACKWARD, exact where x has zeros. Inputs may have any strides; the output has the
 * same shape and may alias the first input exactly (each element is read before it is
 * written). Lines (the other dims) are split over the thread pool. f32 accumulates in double. */
#include <stdlib.h>

#include "backend/cpu/cpu-impl.h"

typedef struct {
    const kiln__op *op;
    int dim;
    const kiln__view *v[3]; /* out, in[0], in[1] */
    _Atomic int oom;
} scan_ctx;


#define AT(T, v, off, i, dim) (((T *)(v)->storage->data)[(off) + (i) * (v)->strides[dim]])

/* One line of a cumulative sum or product in accumulator type A. */
#define SCAN_LINE(T, A, IS_PROD)                                                                \
    do {                                                                                        \
        A acc = IS_PROD ? (A)1 : (A)0;                                                          \
        for (int64_t k = 0; k < n; k++) {                                                       \
            int64_t i = reverse ? n - 1 - k : k;                                                \
            T x = AT(T, in, io, i, dim);                                                        \
            acc = IS_PROD ? (A)(acc * (A)x) : (A)(acc + (A)x);                                  \
            AT(T, out, oo, i, dim) = (T)acc;                                                    \
        }                                                                                       \
    } while (0)

static void scan_lines(void *vctx, int64_t begin, int64_t end) {
    scan_ctx *s = vctx;
    const kiln__view *out = s->v[0], *in = s->v[1];
    int dim = s->dim;
    int64_t n = out->shape[dim];
    bool reverse = s->op->p.i[1] != 0, prod = s->op->code == KILN__OP_CUMPROD;
    for (int64_t l = begin; l < end; l++) {
        int64_t oo = kiln__cpu_line_offset(out, dim, l), io = kiln__cpu_line_offset(in, dim, l);
        switch (out->dtype) {
        case KILN_F32: if (prod) SCAN_LINE(float, double, 1); else SCAN_LINE(float, double, 0); break;
        case KILN_F64: if (prod) SCAN_LINE(double, double, 1); else SCAN_LINE(double, double, 0); break;
        default: /* i64, wrapping like PyTorch's */
            if (prod) SCAN_LINE(int64_t, uint64_t, 1); else SCAN_LINE(int64_t, uint64_t, 0);
            break;
        }
    }
}

/* d/dx[k] of sum_j g[j] P[j], P[j] = x[0] ... x[j]. With z the first zero of x:
 *   k < z:  (sum_{k <= j < z} g[j] P[j]) / x[k]   (P[j] = 0 from z on)
 *   k = z:  sum_{j >= z} g[j] P[z-1] x[z+1] ... x[j]
 *   k > z:  0 (every term has the factor x[z] = 0)
 * so zeros in x give PyTorch's gradient, not 0/0. P is kept in a per-line buffer. */
#define CUMPROD_BACKWARD_LINE(T)                                                                \
    do {                                                                                        \
        int64_t z = n;                                                                          \
        double run = 1;                                                                         \
        for (int64_t j = 0; j < n; j++) {                                                       \
            double xj = AT(T, x, xo, j, dim);                                                   \
            if (xj == 0 && z == n) z = j;                                                       \
            run *= xj;                                                                          \
            p[j] = run;                                                                         \
        }                                                                                       \
        double at_z = 0;                                                                        \
        if (z < n) {                                                                            \
            double r = z ? p[z - 1] : 1;                                                        \
            for (int64_t j = z; j < n; j++) {                                                   \
                if (j > z) r *= AT(T, x, xo, j, dim);                                           \
                at_z += AT(T, g, go, j, dim) * r;                                               \
            }                                                                                   \
        }                                                                                       \
        double acc = 0;                                                                         \
        for (int64_t k = z - 1; k >= 0; k--) {                                                  \
            acc += AT(T, g, go, k, dim) * p[k];                                                 \
            AT(T, out, oo, k, dim) = (T)(acc / AT(T, x, xo, k, dim));                           \
        }                                                                                       \
        for (int64_t k = z; k < n; k++) AT(T, out, oo, k, dim) = (T)(k == z ? at_z : 0);        \
    } while (0)

static void cumprod_backward_lines(void *vctx, int64_t begin, int64_t end) {
    scan_ctx *s = vctx;
    const kiln__view *out = s->v[0], *g = s->v[1], *x = s->v[2];
    int dim = s->dim;
    int64_t n = out->shape[dim];
    double *p = malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (!p) {
        s->oom = 1;
        return;
    }
    for (int64_t l = begin; l < end; l++) {
        int64_t oo = kiln__cpu_line_offset(out, dim, l), go = kiln__cpu_line_offset(g, dim, l), xo = kiln__cpu_line_offset(x, dim, l);
        if (out->dtype == KILN_F32)
            CUMPROD_BACKWARD_LINE(float);
        else
            CUMPROD_BACKWARD_LINE(double);
    }
    free(p);
}

static kiln_status kernel_scan(const kiln__op *op) {
    kiln_dtype dt = op->out[0].dtype;
    bool backward = op->code == KILN__OP_CUMPROD_BACKWARD;
    bool ok = backward ? (dt == KILN_F32 || dt == KILN_F64) && op->in[1].dtype == dt
                       : dt == KILN_F32 || dt == KILN_F64 || dt == KILN_I64;
    if (!ok || op->in[0].dtype != dt) {
        kiln__kernel_error("the cpu %s kernel has no %s version", kiln__opcode_name(op->code), kiln_dtype_name(dt));
        return KILN_ERR_DTYPE;
    }
    scan_ctx s = {.op = op, .dim = (int)op->p.i[0], .v = {&op->out[0], &op->in[0], &op->in[1]}};
    int64_t numel = kiln__view_numel(&op->out[0]);
    int64_t n = op->out[0].shape[s.dim];
    if (numel == 0) return KILN_OK;
    int64_t lines = numel / n, grain = n >= 32768 ? 1 : 32768 / n;
    kiln__parallel_for(lines, grain, backward ? cumprod_backward_lines : scan_lines, &s);
    if (s.oom) {
        kiln__kernel_error("no memory for a %lld-element scan line", (long long)n);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    return KILN_OK;
}

void kiln__cpu_register_scan(kiln__kernel_fn *table) {
    table[KILN__OP_CUMSUM] = kernel_scan;
    table[KILN__OP_CUMPROD] = kernel_scan;
    table[KILN__OP_CUMPROD_BACKWARD] = kernel_scan;
}
