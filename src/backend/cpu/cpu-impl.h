/* CPU backend internals shared by the kernel files. */
#ifndef KILN_CPU_IMPL_H
#define KILN_CPU_IMPL_H

#include "backend/backend-impl.h"
#include "backend/cpu/threadpool.h"

/* Inner loop over `n` elements: ptrs[i] is operand i's first element, strides[i] its step
 * in BYTES (0 for broadcast operands). Operand 0 is the output. */
typedef void (*kiln__loop_fn)(void *ctx, int64_t n, char **ptrs, const int64_t *strides);

/* Runs fn jointly over n_views views of one shape (views[0] is the output; the others are
 * broadcast to its shape by the op layer; a view without storage is a scalar). Dimensions are
 * coalesced, so dense operands reach fn as one long run (strides == element size). The
 * element range is split across the thread pool in pieces of at least `grain` elements. */
void kiln__cpu_foreach(int n_views, const kiln__view *views, kiln__loop_fn fn, void *ctx, int64_t grain);

/* Kernels that walk lines along one dim (scans, sort): the element offset of line l, counted
 * row-major over v's other dims, in v. */
static inline int64_t kiln__cpu_line_offset(const kiln__view *v, int dim, int64_t l) {
    int64_t off = v->offset;
    for (int d = v->ndim - 1; d >= 0; d--) {
        if (d == dim) continue;
        off += (l % v->shape[d]) * v->strides[d];
        l /= v->shape[d];
    }
    return off;
}

/* Elements per parallel task for cheap elementwise work. */
#define KILN__GRAIN_ELEMENTWISE 32768

#endif
