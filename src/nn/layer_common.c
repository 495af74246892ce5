/* Shared layer helpers: input checks and error reporting, parameter registration, seeds. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include "kiln/tensor.h"
#include "nn/layers-impl.h"

const kiln__tensor *kiln__nn_peek(kiln_tensor x) {
    const kiln__tensor *t = kiln__handle_peek(x, "nn", NULL);
    return t && !t->err ? t : NULL;
}

kiln_tensor kiln__nn_fail(const char *op, int n, const kiln_tensor *inputs, kiln_status st, const char *fmt, ...) {
    KILN__OP_BEGIN(op);
    for (int i = 0; i < n; i++) {
        kiln__tensor *t = kiln__arg(&c, inputs[i]);
        kiln__ok(&c, t); /* adopts a poisoned input's error, so the first bad input wins */
        kiln__drop(1, t);
    }
    if (!c.err) {
        char detail[384];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(detail, sizeof detail, fmt, ap);
        va_end(ap);
        kiln__fail(&c, st, "%s", detail);
    }
    return kiln__result(&c, NULL);
}

static bool input_fits(const kiln__tensor *t, int ndim, const int64_t *want, bool leading) {
    if (!t || !kiln__dtype_is_float(t->dtype) || t->ndim < ndim || (!leading && t->ndim != ndim)) return false;
    for (int d = 0; d < ndim; d++) {
        int64_t size = t->shape[t->ndim - ndim + d];
        if (want[d] >= 0 && size != want[d]) return false;
    }
    return true;
}

bool kiln__nn_expect_input(kiln_tensor *x, int ndim, const int64_t *want, bool leading, const char *op,
                           const char *desc_fmt, ...) {
    const kiln__tensor *t = kiln__nn_peek(*x);
    if (input_fits(t, ndim, want, leading)) return true;
    char desc[128], pattern[160], got[128];
    va_list ap;
    va_start(ap, desc_fmt);
    vsnprintf(desc, sizeof desc, desc_fmt, ap);
    va_end(ap);
    size_t at = (size_t)snprintf(pattern, sizeof pattern, "[%s", leading ? "..." : "");
    for (int d = 0; d < ndim && at < sizeof pattern; d++) {
        const char *sep = d || leading ? ", " : "";
        at += want[d] >= 0 ? (size_t)snprintf(pattern + at, sizeof pattern - at, "%s%lld", sep, (long long)want[d])
                           : (size_t)snprintf(pattern + at, sizeof pattern - at, "%s*", sep);
    }
    if (at < sizeof pattern) snprintf(pattern + at, sizeof pattern - at, "]");
    bool dtype_wrong = t && !kiln__dtype_is_float(t->dtype);
    *x = kiln__nn_fail(op, 1, x, dtype_wrong ? KILN_ERR_DTYPE : KILN_ERR_SHAPE,
                       "%s expects a floating-point input of shape %s, got %s %s", desc, pattern,
                       t ? kiln_dtype_name(t->dtype) : "?", t ? kiln__nn_shape_str(got, sizeof got, t) : "?");
    return false;
}

kiln_module *kiln__nn_bad_arg(const char *op, const char *fmt, ...) {
    char detail[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "%s", detail);
    return NULL;
}

kiln_module *kiln__nn_finish(kiln_module *m, int n, const kiln__nn_param *ps) {
    int i = 0;
    for (; m && i < n; i++)
        if (kiln__module_add_param(m, ps[i].name, ps[i].tensor, ps[i].buffer) != KILN_OK) {
            kiln_module_free(m);
            m = NULL;
        }
    for (; i < n; i++) kiln_release(ps[i].tensor);
    return m;
}

static uint64_t splitmix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t kiln__nn_seed(uint64_t seed, uint64_t k) { return splitmix64(splitmix64(seed) ^ splitmix64(~k)); }

kiln_tensor kiln__nn_uniform_fan_in(kiln_shape shape, int64_t fan_in, uint64_t seed) {
    if (fan_in <= 0) return kiln_zeros(KILN_CPU, KILN_F32, shape);
    double bound = 1.0 / sqrt((double)fan_in);
    return kiln_uniform(KILN_CPU, KILN_F32, shape, -bound, bound, seed);
}

const char *kiln__nn_shape_str(char *buf, size_t size, const kiln__tensor *x) {
    return kiln__shape_str(buf, size, x->ndim, x->shape);
}
