/* Helpers shared by the nn tests (layers, losses, initialisation): leak checks, reads in
 * double, error expectations, module parameter slots, and gradient checks through modules. */
#ifndef KILN_NN_UTIL_H
#define KILN_NN_UTIL_H

#include <kiln.h>
#include <string.h>

#include "kiln_test.h"


/* Reads t (consumed) as n doubles; false (and a failed check) on error. */
static bool read_f64(kiln_tensor t, double *out, int64_t n) {
    kiln_status st = kiln_into_data(kiln_cast(t, KILN_F64), out, sizeof(double) * (size_t)n);
    KT_CHECK_MSG(st == KILN_OK, "read failed: %s", kiln_last_error());
    return st == KILN_OK;
}

static inline double read_scalar(kiln_tensor t) {
    double v = NAN;
    kiln_status st = kiln_into_scalar_f64(t, &v);
    KT_CHECK_MSG(st == KILN_OK, "read failed: %s", kiln_last_error());
    return v;
}

static inline kiln_tensor tensor_of(kiln_dtype dt, kiln_shape shape, const double *v) {
    return kiln_cast(kiln_from_data(KILN_CPU, KILN_F64, shape, v), dt);
}

/* Deterministic values in [lo, hi) (exact in f32, so f32 and f64 references agree). */
static uint32_t nn_lcg = 2024;
static inline void fill(double *v, int64_t n, double lo, double hi) {
    for (int64_t i = 0; i < n; i++) {
        nn_lcg = nn_lcg * 1664525u + 1013904223u;
        v[i] = lo + (hi - lo) * (double)(nn_lcg >> 16) / 65536.0;
    }
}

static inline bool has_shape(kiln_tensor t, kiln_shape want) {
    kiln_shape s = kiln_tensor_shape(t);
    if (s.ndim != want.ndim) return false;
    for (int d = 0; d < s.ndim; d++)
        if (s.dims[d] != want.dims[d]) return false;
    return true;
}

/* A constructor that must fail: NULL, KILN_ERR_INVALID_ARGUMENT naming op. */
#define EXPECT_BAD_NEW(expr, op)                                                                                       \
    do {                                                                                                               \
        kiln_clear_error();                                                                                            \
        kiln_module *bad_ = (expr);                                                                                    \
        KT_CHECK_MSG(bad_ == NULL, "%s", #expr);                                                                       \
        kiln_module_free(bad_);                                                                                        \
        KT_CHECK(kiln_last_status() == KILN_ERR_INVALID_ARGUMENT);                                                     \
        KT_CHECK_MSG(strstr(kiln_last_error(), op) != NULL, "message '%s' does not name %s", kiln_last_error(), op);   \
    } while (0)

/* y[r, o] = sum_i x[r, i] w[o, i] + b[o] (b may be NULL): a Linear over rows, in double. */
static inline void linear_ref(const double *x, const double *w, const double *b, int64_t rows, int64_t in, int64_t out,
                              double *y) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < out; o++) {
            double acc = b ? b[o] : 0;
            for (int64_t i = 0; i < in; i++) acc += x[r * in + i] * w[o * in + i];
            y[r * out + o] = acc;
        }
}

/* The module's own handle for the parameter or buffer called name (NULL if none). */
static kiln_tensor *param_slot(kiln_module *m, const char *name) {
    kiln_param ps[32];
    int n = kiln_module_params(m, ps, 32);
    for (int i = 0; i < n && i < 32; i++)
        if (strcmp(ps[i].name, name) == 0) return ps[i].slot;
    KT_CHECK_MSG(0, "no parameter %s", name);
    return NULL;
}

/* Replaces a parameter's tensor (takes t). */
static inline void set_param(kiln_module *m, const char *name, kiln_tensor t) {
    kiln_tensor *slot = param_slot(m, name);
    if (!slot) {
        kiln_release(t);
        return;
    }
    kiln_release(*slot);
    *slot = t;
}

static inline bool read_param(kiln_module *m, const char *name, double *out, int64_t n) {
    kiln_tensor *slot = param_slot(m, name);
    return slot && read_f64(kiln_ref(*slot), out, n);
}

/* Gradient checks through a module: in[0] is its input, in[1..n] take the places of the
 * parameters named in names, so every gradient (input and parameters) is checked. */
typedef struct {
    kiln_module *m;
    int n;
    const char *names[6];
} gc_module;

static inline kiln_tensor gc_run_module(kiln_tensor *in, void *ctx) {
    gc_module *g = ctx;
    for (int i = 0; i < g->n; i++) set_param(g->m, g->names[i], in[1 + i]);
    return kiln_module_forward(g->m, in[0]);
}

#endif
