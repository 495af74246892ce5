/* Helpers of the layer tests that compare a module against a double-precision loop: module
 * parameters set by name to f64 values, random values, and small dense linear algebra. */
#ifndef KILN_TEST_NN_REF_H
#define KILN_TEST_NN_REF_H

#include "ew_util.h"

/* The slot of m's parameter `name`, or NULL. */
static inline kiln_tensor *nr_slot(kiln_module *m, const char *name) {
    kiln_param ps[128];
    int n = kiln_module_params(m, ps, 128);
    for (int i = 0; i < n && i < 128; i++)
        if (strcmp(ps[i].name, name) == 0) return ps[i].slot;
    return NULL;
}

/* Replaces parameter `name` by t (taken), a leaf that requires a gradient. */
static inline void nr_set(kiln_module *m, const char *name, kiln_tensor t) {
    kiln_tensor *s = nr_slot(m, name);
    KT_CHECK_MSG(s != NULL, "no parameter %s", name);
    if (!s) {
        kiln_release(t);
        return;
    }
    kiln_release(*s);
    kiln_require_grad(t);
    *s = t;
}

/* n random doubles in [-1, 1] (freed by the caller). */
static inline double *nr_rand(int64_t n) {
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    ew_values(v, n, KILN_F64, -1, 1);
    return v;
}

/* y[r, o] = sum_i x[r, i] w[o, i] + b[o] (b may be NULL): a Linear over rows. */
static inline void nr_linear(const double *x, const double *w, const double *b, int64_t rows, int64_t in, int64_t out,
                             double *y) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < out; o++) {
            double acc = b ? b[o] : 0;
            for (int64_t i = 0; i < in; i++) acc += x[r * in + i] * w[o * in + i];
            y[r * out + o] = acc;
        }
}

static inline double nr_sigmoid(double x) { return 1 / (1 + exp(-x)); }

#endif
