/* Device results against the CPU's for the OpenCL tests: read_f64 and compare (include after
 * kiln_test.h, with DEV defined). */
#ifndef KILN_TEST_OPENCL_COMPARE_H
#define KILN_TEST_OPENCL_COMPARE_H

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

/* Reads t (consumed, on any device) as doubles. */
static double *read_f64(kiln_tensor t, int64_t *n) {
    *n = kiln_tensor_numel(t);
    double *v = malloc(sizeof(double) * (size_t)(*n > 0 ? *n : 1));
    kiln_tensor h = kiln_cast(kiln_to_device(t, KILN_CPU), KILN_F64);
    if (kiln_into_data(h, v, sizeof(double) * (size_t)*n) != KILN_OK) {
        fprintf(stderr, "  read failed: %s\n", kiln_last_error());
        free(v);
        return NULL;
    }
    return v;
}

/* got (a device result) against want (the CPU's), both consumed: same shape and dtype,
 * |got - want| <= rtol |want| + atol elementwise (NaNs and infinities equal). */
static void compare(const char *what, kiln_tensor got, kiln_tensor want, double rtol, double atol) {
    kiln_shape gs = kiln_tensor_shape(got), ws = kiln_tensor_shape(want);
    kiln_dtype gd = kiln_tensor_dtype(got), wd = kiln_tensor_dtype(want);
    KT_CHECK_MSG(kiln_tensor_device(got) == DEV, "%s: result on %s", what, kiln_device_name(kiln_tensor_device(got)));
    int bad = gs.ndim != ws.ndim || gd != wd;
    for (int d = 0; !bad && d < gs.ndim; d++) bad = gs.dims[d] != ws.dims[d];
    KT_CHECK_MSG(!bad, "%s: shape or dtype differs (%s vs %s)", what, kiln_dtype_name(gd), kiln_dtype_name(wd));
    int64_t n, m;
    double *g = read_f64(got, &n), *w = read_f64(want, &m);
    if (!g || !w || n != m) bad++;
    for (int64_t i = 0; !bad && i < n; i++) {
        bool ok = g[i] == w[i] || (isnan(g[i]) && isnan(w[i])) || fabs(g[i] - w[i]) <= rtol * fabs(w[i]) + atol;
        if (!ok && bad++ < 3) fprintf(stderr, "  %s[%lld]: got %.9g, want %.9g\n", what, (long long)i, g[i], w[i]);
    }
    KT_CHECK_MSG(bad == 0, "%s: %d mismatches", what, bad);
    free(g);
    free(w);
}

#endif
