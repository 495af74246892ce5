/* Random kernels: RAND_UNIFORM, RAND_NORMAL, RAND_BERNOULLI.
 *
 * Element i of the (row-major) output takes Philox counter offset + i, so a tensor depends
 * only on its seed: any split across threads gives the same values. f16/bf16 outputs are
 * drawn in f32 and rounded; bernoulli is drawn in f32 for every dtype (0 and 1 are exact). */
#include <string.h>

#include "backend/cpu/cpu-impl.h"
#include "backend/cpu/philox.h"

enum { BLOCK = 1024 }; /* values drawn at a time into a stack buffer */

typedef struct {
    kiln__view out;
    kiln__opcode code;
    uint64_t seed, offset;
    double a, b; /* lo/hi, mean/std, or p */
    bool dense;
} rand_ctx;

static void draw_f32(const rand_ctx *r, uint64_t at, float *dst, int64_t n) {
    switch (r->code) {
    case KILN__OP_RAND_UNIFORM: kiln__rand_uniform_f32(r->seed, at, dst, n, (float)r->a, (float)r->b); break;
    case KILN__OP_RAND_NORMAL: kiln__rand_normal_f32(r->seed, at, dst, n, (float)r->a, (float)r->b); break;
    default: kiln__rand_bernoulli_f32(r->seed, at, dst, n, r->a); break;
    }
}

/* Only uniform and normal: bernoulli always draws in f32. */
static void draw_f64(const rand_ctx *r, uint64_t at, double *dst, int64_t n) {
    if (r->code == KILN__OP_RAND_UNIFORM)
        kiln__rand_uniform_f64(r->seed, at, dst, n, r->a, r->b);
    else
        kiln__rand_normal_f64(r->seed, at, dst, n, r->a, r->b);
}

/* Address of row-major element i of a strided view (the slow path for non-dense outputs). */
static char *element_ptr(const kiln__view *v, int64_t i) {
    int64_t off = 0;
    for (int d = v->ndim - 1; d >= 0; d--) {
        off += (i % v->shape[d]) * v->strides[d];
        i /= v->shape[d];
    }
    return kiln__view_ptr(v) + off * (int64_t)kiln__elsize(v->dtype);
}

/* Outputs the generators cannot write directly (f16/bf16, bernoulli in f64, non-dense):
 * draw a block into a buffer, then convert and store. */
static void rand_range(void *vctx, int64_t begin, int64_t end) {
    const rand_ctx *r = vctx;
    kiln_dtype dt = r->out.dtype;
    size_t es = kiln__elsize(dt);
    char *base = kiln__view_ptr(&r->out);
    bool in_f64 = dt == KILN_F64 && r->code != KILN__OP_RAND_BERNOULLI;
    for (int64_t i = begin; i < end; i += BLOCK) {
        int64_t n = end - i < BLOCK ? end - i : BLOCK;
        uint64_t at = r->offset + (uint64_t)i;
        if (in_f64) {
            double tmp[BLOCK];
            draw_f64(r, at, tmp, n);
            for (int64_t k = 0; k < n; k++) memcpy(element_ptr(&r->out, i + k), &tmp[k], es);
        } else {
            float tmp[BLOCK];
            draw_f32(r, at, tmp, n);
            for (int64_t k = 0; k < n; k++) {
                char *p = r->dense ? base + (i + k) * (int64_t)es : element_ptr(&r->out, i + k);
                kiln__store_from_f64(p, dt, 0, tmp[k]);
            }
        }
    }
}

static kiln_status kernel_rand(const kiln__op *op) {
    rand_ctx r = {.out = op->out[0],
                  .code = op->code,
                  .seed = (uint64_t)op->pi[0],
                  .offset = (uint64_t)op->pi[1],
                  .a = op->p.f[0],
                  .b = op->p.f[1]};
    kiln_dtype dt = r.out.dtype;
    if (!kiln__dtype_is_float(dt)) {
        kiln__kernel_error("random numbers need a float output, got %s", kiln_dtype_name(dt));
        return KILN_ERR_DTYPE;
    }
    int64_t n = kiln__view_numel(&r.out);
    r.dense = kiln__view_is_contiguous(&r.out);
    /* dense f32/f64: the generators write in place and spread the work over the pool */
    if (r.dense && n > 0 && dt == KILN_F32)
        draw_f32(&r, r.offset, (float *)kiln__view_ptr(&r.out), n);
    else if (r.dense && n > 0 && dt == KILN_F64 && r.code != KILN__OP_RAND_BERNOULLI)
        draw_f64(&r, r.offset, (double *)kiln__view_ptr(&r.out), n);
    else
        kiln__parallel_for(n, 16 * BLOCK, rand_range, &r);
    return KILN_OK;
}

void kiln__cpu_register_random(kiln__kernel_fn *table) {
    table[KILN__OP_RAND_UNIFORM] = kernel_rand;
    table[KILN__OP_RAND_NORMAL] = kernel_rand;
    table[KILN__OP_RAND_BERNOULLI] = kernel_rand;
}
