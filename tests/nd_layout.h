/* The same logical values in several memory layouts, for any number of dims (used by the
 * reduction, softmax and matmul tests; builds on ew_util.h):
 *
 *   kiln_tensor t = nd_make(KILN_F32, KILN_SHAPE(3, 4, 5), values, ND_PERMUTED);
 *
 * dense; permuted (a dense tensor of reversed shape, viewed back through kiln_permute);
 * transposed (the last two dims swapped the same way); strided (every other element of the
 * last dim); offset (all but a first slab of dim 0). Gaps hold junk that shows if read. */
#ifndef KILN_TEST_ND_LAYOUT_H
#define KILN_TEST_ND_LAYOUT_H

#include "ew_util.h"

typedef enum { ND_DENSE, ND_PERMUTED, ND_TRANSPOSED, ND_STRIDED, ND_OFFSET, ND_NLAYOUTS } nd_layout;
static const char *const nd_layout_names[ND_NLAYOUTS] = {"dense", "permuted", "transposed", "strided", "offset"};

#define ND_JUNK 1e30

static inline kiln_tensor nd_make(kiln_dtype dt, kiln_shape s, const double *v, nd_layout layout) {
    int64_t n = kiln_shape_numel(s);
    int nd = s.ndim;
    if (n == 0 || nd == 0 || (layout == ND_TRANSPOSED && nd < 2)) layout = ND_DENSE;
    double *buf = malloc(sizeof(double) * (size_t)(3 * n + 1));
    kiln_shape ps = s;
    kiln_tensor t;
    switch (layout) {
    case ND_PERMUTED:
    case ND_TRANSPOSED: {
        /* physical dim k is logical dim order[k]; both orders are their own inverse */
        kiln_dims order = {nd, {0}};
        for (int k = 0; k < nd; k++) order.d[k] = layout == ND_PERMUTED ? nd - 1 - k : k;
        if (layout == ND_TRANSPOSED) order.d[nd - 2] = nd - 1, order.d[nd - 1] = nd - 2;
        for (int k = 0; k < nd; k++) ps.dims[k] = s.dims[order.d[k]];
        int64_t idx[KILN_MAX_DIMS] = {0};
        for (int64_t i = 0; i < n; i++) {
            int64_t f = 0;
            for (int k = 0; k < nd; k++) f = f * ps.dims[k] + idx[order.d[k]];
            buf[f] = v[i];
            for (int d = nd - 1; d >= 0 && ++idx[d] == s.dims[d]; d--) idx[d] = 0;
        }
        t = kiln_permute(ew_tensor(dt, ps, buf), order);
        break;
    }
    case ND_STRIDED:
        ps.dims[nd - 1] *= 2;
        for (int64_t i = 0; i < n; i++) buf[2 * i] = v[i], buf[2 * i + 1] = ND_JUNK;
        t = kiln_slice(ew_tensor(dt, ps, buf), nd - 1, 0, ps.dims[nd - 1], 2);
        break;
    case ND_OFFSET: {
        int64_t slab = n / s.dims[0];
        ps.dims[0] += 1;
        for (int64_t i = 0; i < slab; i++) buf[i] = ND_JUNK;
        memcpy(buf + slab, v, sizeof(double) * (size_t)n);
        t = kiln_narrow(ew_tensor(dt, ps, buf), 0, 1, s.dims[0]);
        break;
    }
    default:
        t = ew_tensor(dt, s, v);
        break;
    }
    free(buf);
    return t;
}

#endif
