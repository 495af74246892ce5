/* COPY (strided copy with dtype conversion) and FILL kernels. */
#include <math.h>
#include <string.h>

#include "backend/cpu/convert_lowp.h"
#include "backend/cpu/cpu-impl.h"

/* ---- element loads and stores through double (exact for every value a dtype pair shares,
 * except i64 magnitudes past 2^53, which only same-dtype copies preserve: they use memcpy) -- */
static inline double ld_f32(const char *p) { return *(const float *)p; }
static inline double ld_f64(const char *p) { return *(const double *)p; }
static inline double ld_i32(const char *p) { return *(const int32_t *)p; }
static inline double ld_i64(const char *p) { return (double)*(const int64_t *)p; }
static inline double ld_b(const char *p) { return *(const uint8_t *)p ? 1.0 : 0.0; }
static inline double ld_f16(const char *p) { return kiln__f16_to_f32(*(const uint16_t *)p); }
static inline double ld_bf16(const char *p) { return kiln__bf16_to_f32(*(const uint16_t *)p); }

static inline void st_f32(char *p, double v) { *(float *)p = (float)v; }
static inline void st_f64(char *p, double v) { *(double *)p = v; }
static inline void st_i32(char *p, double v) { *(int32_t *)p = (int32_t)kiln__saturate_i64(v, INT32_MIN, INT32_MAX); }
static inline void st_i64(char *p, double v) { *(int64_t *)p = kiln__saturate_i64(v, INT64_MIN, INT64_MAX); }
static inline void st_b(char *p, double v) { *(uint8_t *)p = v != 0.0; }
static inline void st_f16(char *p, double v) { *(uint16_t *)p = kiln__f32_to_f16((float)v); }
static inline void st_bf16(char *p, double v) { *(uint16_t *)p = kiln__f32_to_bf16((float)v); }

enum { SZ_f32 = 4, SZ_f64 = 8, SZ_i32 = 4, SZ_i64 = 8, SZ_b = 1, SZ_f16 = 2, SZ_bf16 = 2 };

/* Dense runs (the usual cast) get their own loop: with the strides constant the compiler
 * vectorizes it (a bool -> f32 cast went 4x faster). */
#define CONVERT_FN(S, D)                                                                    \
    static void convert_##S##_to_##D(void *ctx, int64_t n, char **p, const int64_t *st) {    \
        char *dst = p[0];                                                                   \
        const char *src = p[1];                                                             \
        if (st[0] == SZ_##D && st[1] == SZ_##S)                                             \
            for (int64_t i = 0; i < n; i++) st_##D(dst + i * SZ_##D, ld_##S(src + i * SZ_##S)); \
        else                                                                                \
            for (int64_t i = 0; i < n; i++) st_##D(dst + i * st[0], ld_##S(src + i * st[1]));  \
    }
#define CONVERT_FROM(S) \
    CONVERT_FN(S, f32) CONVERT_FN(S, f64) CONVERT_FN(S, i32) CONVERT_FN(S, i64) CONVERT_FN(S, b) \
    CONVERT_FN(S, f16) CONVERT_FN(S, bf16)
CONVERT_FROM(f32)
CONVERT_FROM(f64)
CONVERT_FROM(i32)
CONVERT_FROM(i64)
CONVERT_FROM(b)
CONVERT_FROM(f16)
CONVERT_FROM(bf16)

#define ROW(S) \
    {convert_##S##_to_f32, convert_##S##_to_f64, convert_##S##_to_i32, convert_##S##_to_i64, \
     convert_##S##_to_b, convert_##S##_to_f16, convert_##S##_to_bf16}
/* [src][dst] in kiln_dtype order: f32 f64 i32 i64 bool f16 bf16 */
static const kiln__loop_fn convert_table[KILN_DTYPE_COUNT][KILN_DTYPE_COUNT] = {
    ROW(f32), ROW(f64), ROW(i32), ROW(i64), ROW(b), ROW(f16), ROW(bf16)};

/* Same-dtype copy: memcpy for dense runs, typed moves otherwise. */
static void copy_same(void *ctx, int64_t n, char **p, const int64_t *st) {
    size_t es = *(const size_t *)ctx;
    if (p[0] == p[1] && st[0] == st[1]) return; /* onto itself (a fused cast in place) */
    if (st[0] == (int64_t)es && st[1] == (int64_t)es) {
        memcpy(p[0], p[1], (size_t)n * es);
        return;
    }
    switch (es) {
    case 1: for (int64_t i = 0; i < n; i++) p[0][i * st[0]] = p[1][i * st[1]]; break;
    case 2: for (int64_t i = 0; i < n; i++) memcpy(p[0] + i * st[0], p[1] + i * st[1], 2); break;
    case 4: for (int64_t i = 0; i < n; i++) memcpy(p[0] + i * st[0], p[1] + i * st[1], 4); break;
    default: for (int64_t i = 0; i < n; i++) memcpy(p[0] + i * st[0], p[1] + i * st[1], 8); break;
    }
}

static kiln_status kernel_copy(const kiln__op *op) {
    kiln__view views[2] = {op->out[0], op->in[0]};
    if (views[1].storage && views[1].storage == views[0].storage && views[0].dtype == views[1].dtype &&
        views[0].offset == views[1].offset &&
        memcmp(views[0].strides, views[1].strides, sizeof(int64_t) * (size_t)views[0].ndim) == 0)
        return KILN_OK; /* copying a buffer onto itself */
    kiln__ew_loop l;
    if (NEVER(!kiln__cpu_copy_loop(views[1].dtype, views[0].dtype, &l))) return KILN_ERR_INTERNAL;
    int64_t grain = views[0].dtype == views[1].dtype ? KILN__GRAIN_ELEMENTWISE * 4 : KILN__GRAIN_ELEMENTWISE;
    kiln__cpu_foreach(2, views, l.fn, l.ctx, grain);
    return KILN_OK;
}

bool kiln__cpu_copy_loop(kiln_dtype src, kiln_dtype dst, kiln__ew_loop *l) {
    static const size_t elsize[KILN_DTYPE_COUNT] = {4, 8, 4, 8, 1, 2, 2}; /* kiln_dtype order */
    if (!kiln__dtype_valid(src) || !kiln__dtype_valid(dst)) return false;
    kiln__loop_fn fast = kiln__cpu_convert_lowp_loop(src, dst);
    *l = (kiln__ew_loop){.fn = src == dst ? copy_same : fast ? fast : convert_table[src][dst],
                         .ctx = src == dst ? (void *)&elsize[src] : NULL};
    return true;
}

static void fill_loop(void *ctx, int64_t n, char **p, const int64_t *st) {
    const unsigned char *value = ctx; /* the bytes of one element, then its size */
    size_t size = *(const size_t *)(value + 8);
    for (int64_t i = 0; i < n; i++) memcpy(p[0] + i * st[0], value, size);
}

static kiln_status kernel_fill(const kiln__op *op) {
    struct {
        _Alignas(8) unsigned char value[8];
        size_t size;
    } fill;
    kiln__view out = op->out[0];
    fill.size = kiln__elsize(out.dtype);
    /* the conversions of COPY, so kiln_full(KILN_I32, .., 1e10) saturates as a cast would */
    static void (*const store[KILN_DTYPE_COUNT])(char *, double) = {st_f32, st_f64, st_i32, st_i64, st_b, st_f16, st_bf16};
    store[out.dtype]((char *)fill.value, op->p.f[0]);
    bool zero = true;
    for (size_t i = 0; i < fill.size; i++) zero = zero && fill.value[i] == 0;
    if (zero && kiln__view_is_contiguous(&out)) {
        memset(kiln__view_ptr(&out), 0, (size_t)kiln__view_numel(&out) * fill.size);
        return KILN_OK;
    }
    kiln__view views[2] = {out, kiln__view_scalar(out.dtype, out.ndim, out.shape, 0)};
    kiln__cpu_foreach(2, views, fill_loop, &fill, KILN__GRAIN_ELEMENTWISE * 4);
    return KILN_OK;
}

static kiln_status kernel_noop(const kiln__op *op) { return KILN_OK; }

static kiln_status kernel_to_host(const kiln__op *op) {
    memcpy((void *)(intptr_t)op->pi[0], kiln__view_ptr(&op->in[0]), (size_t)op->pi[1]);
    return KILN_OK;
}

void kiln__cpu_register_copy(kiln__kernel_fn *table) {
    table[KILN__OP_NOOP] = kernel_noop;
    table[KILN__OP_TO_HOST] = kernel_to_host;
    table[KILN__OP_COPY] = kernel_copy;
    table[KILN__OP_FILL] = kernel_fill;
}
