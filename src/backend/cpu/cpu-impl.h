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
/* The same over an op's views: op->out[0], then op->in[0 .. n_in - 1] (n_in + 1 views at most
 * the iterator's limit), without copying them where they are dense and one thread runs them
 * (a tiny op's views are not copied: ~60 instructions of its dispatch). */
void kiln__cpu_foreach_op(const kiln__op *op, int n_in, kiln__loop_fn fn, void *ctx, int64_t grain);

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

/* The inner loop an elementwise kernel runs for one opcode and dtype pair, resolved once so a
 * caller (the fused kernel) can run it over many short runs without an op record each time.
 * ctx points at the op's params (which must outlive the loop) or into the struct itself (the
 * vmath function a math loop calls), so a resolved loop must not be moved. */
typedef struct kiln__ew_loop {
    kiln__loop_fn fn;
    void *ctx;
    union {
        void (*f32)(float *y, const float *x, int64_t n);   /* kiln__vmath_f32_fn */
        void (*f64)(double *y, const double *x, int64_t n); /* kiln__vmath_f64_fn */
    } math;
} kiln__ew_loop;

/* Resolves the loop the unfused kernel of code runs for inputs of dtypes in[0..n_in) and an
 * output of dtype out, with params param (p.f); false when that kernel refuses the dtypes (it
 * would fail) or is not a plain elementwise loop. Elementwise families (elementwise*.c) and
 * COPY (copy.c). */
bool kiln__ew_loop_find(kiln__opcode code, int n_in, const kiln_dtype *in, kiln_dtype out, const double *param,
                        kiln__ew_loop *l);
bool kiln__cpu_copy_loop(kiln_dtype src, kiln_dtype dst, kiln__ew_loop *l);

/* Elements per parallel task for cheap elementwise work. */
#define KILN__GRAIN_ELEMENTWISE 32768

/* Stops the helper threads OpenBLAS's pthread build started at load, which would otherwise
 * spin for the program's first 0.1 s (blas_startup.c); once, when the CPU backend starts. */
void kiln__openblas_stop_helpers(void);

#endif
