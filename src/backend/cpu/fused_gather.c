/* Reading a strided or broadcast input of a fused group over a block (see fused-impl.h). */
#include <string.h>

#include "backend/cpu/fused-impl.h"

/* Copies n elements, stride elements apart, from src to dst: a whole run of the innermost
 * dim at once, so a broadcast (stride 0) or dense (stride 1) run costs one fill or memcpy. */
static void copy_run(char *dst, const char *src, int64_t n, int64_t stride, size_t es) {
    if (stride == 1) {
        memcpy(dst, src, (size_t)n * es);
    } else if (stride == 0 && es == 4) {
        uint32_t v;
        memcpy(&v, src, 4);
        for (int64_t i = 0; i < n; i++) memcpy(dst + i * 4, &v, 4);
    } else if (stride == 0 && es == 8) {
        uint64_t v;
        memcpy(&v, src, 8);
        for (int64_t i = 0; i < n; i++) memcpy(dst + i * 8, &v, 8);
    } else {
        for (int64_t i = 0; i < n; i++) memcpy(dst + (size_t)i * es, src + i * stride * (int64_t)es, es);
    }
}

/* The multi-index of flat element t0 in g's shape, and its element offset in v. */
static int64_t locate(const kiln__fused *g, const kiln__view *v, int64_t t0, int64_t *idx) {
    int64_t rest = t0, off = v->offset;
    for (int d = g->ndim - 1; d >= 0; d--) {
        idx[d] = rest % g->shape[d];
        rest /= g->shape[d];
        off += idx[d] * v->strides[d];
    }
    return off;
}

int kiln__fused_load_mode(const kiln__fused *g, const kiln__view *v) {
    bool zero = true, dense = true;
    int64_t expect = 1;
    for (int d = g->ndim - 1; d >= 0; d--) {
        if (g->shape[d] == 1) continue;
        if (v->strides[d] != 0) zero = false;
        if (v->strides[d] != expect) dense = false;
        expect *= g->shape[d];
    }
    return zero ? KILN__LOAD_SCALAR : dense ? KILN__LOAD_DENSE : KILN__LOAD_GATHER;
}

int64_t kiln__fused_run_offset(const kiln__fused *g, const kiln__view *v, int64_t t0, int64_t m, int64_t *stride) {
    int64_t idx[KILN_MAX_DIMS];
    int last = g->ndim - 1;
    if (last < 0) return -1;
    int64_t off = locate(g, v, t0, idx);
    if (idx[last] + m > g->shape[last]) return -1;
    *stride = v->strides[last];
    return off;
}

/* A run of the innermost dim at a time (element by element, the broadcast lse of a composed
 * softmax made the fused pass slower than the unfused ops). */
void kiln__fused_gather(const kiln__fused *g, const kiln__view *v, int64_t t0, int64_t m, char *buf) {
    int64_t idx[KILN_MAX_DIMS], off = locate(g, v, t0, idx);
    size_t es = kiln__elsize(v->dtype);
    const char *base = v->storage->data;
    int last = g->ndim - 1;
    if (last < 0) {
        memcpy(buf, base + off * (int64_t)es, es);
        return;
    }
    for (int64_t i = 0; i < m;) {
        int64_t run = g->shape[last] - idx[last];
        if (run > m - i) run = m - i;
        copy_run(buf + (size_t)i * es, base + off * (int64_t)es, run, v->strides[last], es);
        i += run;
        idx[last] += run;
        off += run * v->strides[last];
        if (idx[last] < g->shape[last]) break; /* the block ended inside this run */
        off -= idx[last] * v->strides[last];
        idx[last] = 0;
        for (int d = last - 1; d >= 0; d--) {
            off += v->strides[d];
            if (++idx[d] < g->shape[d]) break;
            off -= idx[d] * v->strides[d];
            idx[d] = 0;
        }
    }
}
