/* Finite-difference gradient checks in double precision.
 *
 * gc_check(name, fn, ctx, n, shapes, tol): builds n random f64 inputs of the given shapes,
 * computes out = fn(inputs) and the loss sum(out * W) for a fixed random W, and compares
 * kiln_backward's gradient of every input with central differences. fn consumes its
 * inputs (it may transpose/slice them to test non-contiguous paths). */
#ifndef KILN_GRADCHECK_H
#define KILN_GRADCHECK_H

#include <kiln.h>

#include "kiln_test.h"

typedef kiln_tensor (*gc_fn)(kiln_tensor *in, void *ctx);

static double gc_loss(gc_fn fn, void *ctx, int n, const kiln_shape *shapes, double *const *data, kiln_tensor *leaves,
                      kiln_tensor *out_keep) {
    kiln_tensor in[8];
    for (int i = 0; i < n; i++) {
        in[i] = kiln_from_data(KILN_CPU, KILN_F64, shapes[i], data[i]);
        if (leaves) {
            kiln_require_grad(in[i]);
            leaves[i] = kiln_ref(in[i]);
        }
    }
    kiln_tensor out = kiln_cast(fn(in, ctx), KILN_F64);
    kiln_shape os = kiln_tensor_shape(out);
    kiln_tensor w = kiln_uniform(KILN_CPU, KILN_F64, os.ndim >= 0 ? os : KILN_SCALAR_SHAPE, -1.0, 1.0, 4242);
    if (out_keep) { /* d(sum(out * w))/d(out) = w: backward is seeded with w */
        out_keep[0] = out;
        out_keep[1] = w;
        return 0;
    }
    kiln_tensor loss = kiln_sum(kiln_mul(out, w));
    double v = NAN;
    if (kiln_into_scalar_f64(loss, &v) != KILN_OK) fprintf(stderr, "  gradcheck forward failed: %s\n", kiln_last_error());
    return v;
}

/* Returns the number of mismatching gradient entries (0 = pass). */
static int gc_check(const char *name, gc_fn fn, void *ctx, int n, const kiln_shape *shapes, double tol) {
    double *data[8];
    uint64_t seed = 1;
    for (const char *p = name; *p; p++) seed = seed * 131 + (uint64_t)*p;
    for (int i = 0; i < n; i++) {
        int64_t m = kiln_shape_numel(shapes[i]);
        data[i] = malloc(sizeof(double) * (size_t)(m ? m : 1));
        kiln_tensor r = kiln_uniform(KILN_CPU, KILN_F64, shapes[i], -1.0, 1.0, seed + (uint64_t)i);
        kiln_into_data(r, data[i], sizeof(double) * (size_t)m);
    }
    kiln_tensor leaves[8], root[2];
    gc_loss(fn, ctx, n, shapes, data, leaves, root);
    kiln_grads *g = NULL;
    int bad = 0;
    kiln_status st = kiln_backward_seed(root[0], root[1], &g);
    if (st != KILN_OK) {
        fprintf(stderr, "  %s: backward failed: %s\n", name, kiln_last_error());
        bad++;
    }
    const double eps = 1e-6;
    for (int i = 0; i < n && st == KILN_OK; i++) {
        int64_t m = kiln_shape_numel(shapes[i]);
        double *analytic = calloc((size_t)(m ? m : 1), sizeof(double));
        kiln_tensor gi = kiln_grad(g, leaves[i]);
        if (gi.id) {
            if (kiln_into_data(kiln_cast(gi, KILN_F64), analytic, sizeof(double) * (size_t)m) != KILN_OK) {
                fprintf(stderr, "  %s: reading grad %d failed: %s\n", name, i, kiln_last_error());
                bad++;
            }
        }
        for (int64_t j = 0; j < m; j++) {
            double keep = data[i][j];
            data[i][j] = keep + eps;
            double up = gc_loss(fn, ctx, n, shapes, data, NULL, NULL);
            data[i][j] = keep - eps;
            double down = gc_loss(fn, ctx, n, shapes, data, NULL, NULL);
            data[i][j] = keep;
            double numeric = (up - down) / (2 * eps);
            double scale = fabs(numeric) > 1 ? fabs(numeric) : 1;
            if (!(fabs(numeric - analytic[j]) <= tol * scale)) {
                if (bad < 5)
                    fprintf(stderr, "  %s: d/dx%d[%lld] analytic %.9g numeric %.9g\n", name, i, (long long)j, analytic[j],
                            numeric);
                bad++;
            }
        }
        free(analytic);
    }
    kiln_grads_free(g);
    for (int i = 0; i < n; i++) {
        kiln_release(leaves[i]);
        free(data[i]);
    }
    return bad;
}

#define GC_CHECK(name, fn, ctx, n, shapes, tol) KT_CHECK_MSG(gc_check(name, fn, ctx, n, shapes, tol) == 0, "%s", name)

#endif
