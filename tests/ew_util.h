/* Helpers shared by the elementwise tests (test_unary, test_binary, test_compare_logical,
 * test_where_clamp, test_cast): deterministic data in every dtype, the same values in several
 * memory layouts, reads back as double, comparison against double references, leak marks. */
#ifndef KILN_TEST_EW_UTIL_H
#define KILN_TEST_EW_UTIL_H

#include <kiln.h>
#include <stdint.h>

#include "core/core-impl.h"
#include "kiln_test.h"

#define EW_NDTYPES 7
static const kiln_dtype ew_dtypes[EW_NDTYPES] = {KILN_F32, KILN_F64, KILN_I32, KILN_I64,
                                                 KILN_BOOL, KILN_F16, KILN_BF16};

static inline bool ew_is_float(kiln_dtype d) { return d == KILN_F32 || d == KILN_F64 || d == KILN_F16 || d == KILN_BF16; }

/* Binary promotion, written out independently of the library: bool < i32 < i64 < f16/bf16 <
 * f32 < f64, and f16 with bf16 gives f32. */
static inline kiln_dtype ew_promote(kiln_dtype a, kiln_dtype b) {
    static const int rank[KILN_DTYPE_COUNT] = {[KILN_BOOL] = 0, [KILN_I32] = 1, [KILN_I64] = 2, [KILN_F16] = 3,
                                               [KILN_BF16] = 3, [KILN_F32] = 4, [KILN_F64] = 5};
    if ((a == KILN_F16 && b == KILN_BF16) || (a == KILN_BF16 && b == KILN_F16)) return KILN_F32;
    return rank[a] >= rank[b] ? a : b;
}

/* The value v becomes once stored in dtype d (integer test values stay in range). */
static inline double ew_round(kiln_dtype d, double v) {
    _Alignas(8) unsigned char b[8];
    kiln__store_from_f64(b, d, 0, v);
    return kiln__load_as_f64(b, d, 0);
}

/* ---- deterministic data ------------------------------------------------------------------ */
static uint64_t ew_rng = 0x9e3779b97f4a7c15ull;

static inline double ew_uniform(double lo, double hi) {
    ew_rng ^= ew_rng << 13;
    ew_rng ^= ew_rng >> 7;
    ew_rng ^= ew_rng << 17;
    return lo + (hi - lo) * (double)(ew_rng >> 11) * 0x1p-53;
}

/* n values in [lo, hi] as dtype d holds them: whole numbers for integers, 0/1 for bool. */
static inline void ew_values(double *v, int64_t n, kiln_dtype d, double lo, double hi) {
    for (int64_t i = 0; i < n; i++) {
        double x = ew_uniform(lo, hi);
        if (d == KILN_BOOL) x = ew_uniform(0, 1) < 0.5;
        else if (!ew_is_float(d)) x = floor(x);
        v[i] = ew_round(d, x);
    }
}

/* ---- tensors ------------------------------------------------------------------------------ */
/* A dense tensor of dtype d and the given shape holding v (row-major). */
static inline kiln_tensor ew_tensor(kiln_dtype d, kiln_shape shape, const double *v) {
    int64_t n = kiln_shape_numel(shape);
    size_t es = kiln_dtype_size(d);
    unsigned char *raw = malloc((size_t)(n ? n : 1) * es);
    for (int64_t i = 0; i < n; i++) kiln__store_from_f64(raw, d, i, v[i]);
    kiln_tensor t = kiln_from_data(KILN_CPU, d, shape, raw);
    free(raw);
    return t;
}

typedef enum { EW_DENSE, EW_TRANSPOSED, EW_STRIDED, EW_OFFSET, EW_EXPANDED, EW_NLAYOUTS } ew_layout;
static const char *const ew_layout_names[EW_NLAYOUTS] = {"dense", "transposed", "strided", "offset", "expanded"};

/* An [r, c] tensor holding v (row-major) in the given layout: dense; the transpose of a dense
 * [c, r]; every other column of a [r, 2c]; rows 1.. of a [r+1, c]; a [1, c] expanded to r rows
 * (this one copies row 0 of v over the others first). Junk fills the gaps. */
static inline kiln_tensor ew_matrix(kiln_dtype d, int64_t r, int64_t c, double *v, ew_layout layout) {
    int64_t n = r * c;
    double *buf = malloc(sizeof(double) * (size_t)(2 * (r + 1) * c + 1));
    kiln_tensor t;
    switch (layout) {
    case EW_TRANSPOSED:
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < c; j++) buf[j * r + i] = v[i * c + j];
        t = kiln_transpose(ew_tensor(d, KILN_SHAPE(c, r), buf), 0, 1);
        break;
    case EW_STRIDED:
        for (int64_t i = 0; i < n; i++) buf[2 * i] = v[i], buf[2 * i + 1] = 1;
        t = kiln_slice(ew_tensor(d, KILN_SHAPE(r, 2 * c), buf), 1, 0, 2 * c, 2);
        break;
    case EW_OFFSET:
        for (int64_t j = 0; j < c; j++) buf[j] = 1;
        for (int64_t i = 0; i < n; i++) buf[c + i] = v[i];
        t = kiln_narrow(ew_tensor(d, KILN_SHAPE(r + 1, c), buf), 0, 1, r);
        break;
    case EW_EXPANDED:
        if (r == 0) goto dense; /* v holds no row to repeat */
        for (int64_t i = c; i < n; i++) v[i] = v[i % c];
        t = kiln_expand(ew_tensor(d, KILN_SHAPE(1, c), v), KILN_SHAPE(r, c));
        break;
    default:
    dense:
        t = ew_tensor(d, KILN_SHAPE(r, c), v);
        break;
    }
    free(buf);
    return t;
}

/* The same, for any shape: layouts other than dense apply to 2-d shapes only. */
static inline kiln_tensor ew_make(kiln_dtype d, kiln_shape shape, double *v, ew_layout layout) {
    if (shape.ndim == 2 && layout != EW_DENSE) return ew_matrix(d, shape.dims[0], shape.dims[1], v, layout);
    return ew_tensor(d, shape, v);
}

/* ---- broadcasting references ---------------------------------------------------------------- */
static inline kiln_shape ew_broadcast(kiln_shape a, kiln_shape b) {
    kiln_shape out = {a.ndim > b.ndim ? a.ndim : b.ndim, {0}};
    for (int i = 0; i < out.ndim; i++) {
        int ia = i - (out.ndim - a.ndim), ib = i - (out.ndim - b.ndim);
        int64_t da = ia >= 0 ? a.dims[ia] : 1, db = ib >= 0 ? b.dims[ib] : 1;
        out.dims[i] = da == 1 ? db : da;
    }
    return out;
}

/* The row-major index into a's values of the element that out's flat index i reads. */
static inline int64_t ew_source_index(kiln_shape a, kiln_shape out, int64_t i) {
    int64_t idx = 0, stride = 1;
    for (int d = out.ndim - 1; d >= 0; d--) {
        int64_t coord = i % out.dims[d];
        i /= out.dims[d];
        int da = d - (out.ndim - a.ndim);
        if (da < 0) continue;
        if (a.dims[da] != 1) idx += coord * stride;
        stride *= a.dims[da];
    }
    return idx;
}

/* Reads t (consumed) as doubles; checks its dtype and element count. Returns a malloc'd
 * array (free it) or NULL after a failed check. */
static inline double *ew_read_at(kiln_tensor t, kiln_dtype want_dtype, int64_t want_numel, const char *file, int line) {
    kiln_dtype d = kiln_tensor_dtype(t);
    int64_t n = kiln_tensor_numel(t);
    if (d != want_dtype || n != want_numel) {
        fprintf(stderr, "  %s:%d: result is %s[%lld], expected %s[%lld] (%s)\n", file, line, kiln_dtype_name(d),
                (long long)n, kiln_dtype_name(want_dtype), (long long)want_numel, kiln_last_error());
        kt_checks_failed_in_test++;
        kiln_release(t);
        return NULL;
    }
    unsigned char *raw = malloc((size_t)(n ? n : 1) * kiln_dtype_size(d));
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    kiln_status st = kiln_into_data(t, n ? raw : NULL, (size_t)n * kiln_dtype_size(d));
    if (st != KILN_OK) {
        fprintf(stderr, "  %s:%d: read failed: %s\n", file, line, kiln_last_error());
        kt_checks_failed_in_test++;
        free(raw);
        free(v);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) v[i] = kiln__load_as_f64(raw, d, i);
    free(raw);
    return v;
}
#define ew_read(t, dtype, numel) ew_read_at((t), (dtype), (numel), __FILE__, __LINE__)

/* ---- comparison ---------------------------------------------------------------------------- */
/* Elements where got and want differ by more than rtol*|want| + atol; NaN matches NaN and an
 * infinity only itself. Prints the first few under `what`. */
static inline int64_t ew_mismatches(const char *what, const double *got, const double *want, int64_t n, double rtol,
                             double atol) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double g = got[i], w = want[i];
        bool ok = (isnan(g) && isnan(w)) || g == w || (isfinite(w) && fabs(g - w) <= rtol * fabs(w) + atol);
        if (!ok && bad++ < 3) fprintf(stderr, "    %s: [%lld] got %.17g, want %.17g\n", what, (long long)i, g, w);
    }
    return bad;
}
#define EW_EXPECT_CLOSE(what, got, want, n, rtol, atol) \
    KT_CHECK_MSG(ew_mismatches((what), (got), (want), (n), (rtol), (atol)) == 0, "%s", (what))

/* Tolerance for a result of dtype d computed by exactly rounded arithmetic. */
static inline double ew_rtol(kiln_dtype d) {
    switch (d) {
    case KILN_F32: return 2e-7;
    case KILN_F64: return 1e-15;
    case KILN_F16: return 1e-3;
    case KILN_BF16: return 8e-3;
    default: return 0;
    }
}

/* ---- one binary op against its reference ------------------------------------------------- */
typedef struct {
    kiln_dtype dtype;
    kiln_shape shape;
    ew_layout layout;
    double lo, hi; /* values drawn in [lo, hi] */
    double step;   /* > 0: float values rounded down to multiples of it, so ties are common */
} ew_operand;

/* The expected result element for inputs x (from a) and y (from b). */
typedef double (*ew_ref2)(const void *ctx, double x, double y);

static inline double *ew_operand_values(const ew_operand *o) {
    int64_t n = kiln_shape_numel(o->shape);
    double *v = malloc(sizeof(double) * (size_t)(n + 1));
    ew_values(v, n, o->dtype, o->lo, o->hi);
    if (o->step > 0 && ew_is_float(o->dtype))
        for (int64_t i = 0; i < n; i++) v[i] = floor(v[i] / o->step) * o->step;
    return v;
}

/* Runs op(a, b) on fresh values and checks the broadcast shape, the result dtype rd and every
 * element against ref within rtol; `name` labels failures. */
static inline void ew_check_binary(const char *name, kiln_tensor (*op)(kiln_tensor, kiln_tensor), ew_operand a,
                                   ew_operand b, kiln_dtype rd, ew_ref2 ref, const void *ctx, double rtol) {
    kiln_shape so = ew_broadcast(a.shape, b.shape);
    int64_t no = kiln_shape_numel(so);
    double *va = ew_operand_values(&a), *vb = ew_operand_values(&b);
    kiln_tensor ta = ew_make(a.dtype, a.shape, va, a.layout), tb = ew_make(b.dtype, b.shape, vb, b.layout);
    kiln_set_call_site(__FILE__, __LINE__);
    kiln_tensor y = op(ta, tb);
    kiln_shape ys = kiln_tensor_shape(y);
    KT_CHECK(ys.ndim == so.ndim && memcmp(ys.dims, so.dims, sizeof(int64_t) * (size_t)so.ndim) == 0);
    double *got = ew_read(y, rd, no);
    if (got) {
        double *want = malloc(sizeof(double) * (size_t)(no + 1));
        for (int64_t i = 0; i < no; i++)
            want[i] = ref(ctx, va[ew_source_index(a.shape, so, i)], vb[ew_source_index(b.shape, so, i)]);
        char label[160];
        snprintf(label, sizeof label, "%s %s[%s] %s[%s]", name, kiln_dtype_name(a.dtype), ew_layout_names[a.layout],
                 kiln_dtype_name(b.dtype), ew_layout_names[b.layout]);
        EW_EXPECT_CLOSE(label, got, want, no, rtol, 0);
        free(want);
        free(got);
    }
    free(va);
    free(vb);
}

/* ---- errors and leaks ------------------------------------------------------------------------ */
/* t (consumed) must fail its read with status st, and the message must name op and the
 * caller's file:line (the line of the call that failed). */
static inline void ew_expect_error_at(kiln_tensor t, kiln_status st, const char *op, int line, const char *file, int here) {
    float sink[64];
    kiln_status got = kiln_into_data(t, sink, sizeof sink);
    const char *msg = kiln_last_error();
    const char *base = strrchr(file, '/');
    char where[128];
    snprintf(where, sizeof where, "%s:%d", base ? base + 1 : file, line);
    if (got != st || !strstr(msg, op) || !strstr(msg, where)) {
        fprintf(stderr, "  %s:%d: expected %s from %s at %s, got %s: %s\n", file, here, kiln_status_str(st), op, where,
                kiln_status_str(got), msg);
        kt_checks_failed_in_test++;
    }
}
#define EW_EXPECT_ERROR(t, st, op, line) ew_expect_error_at((t), (st), (op), (line), __FILE__, __LINE__)

typedef struct {
    uint64_t live, bytes;
} ew_mark;
static inline ew_mark ew_mark_now(void) {
    kiln_memory_stats s = kiln_memory_stats_get(KILN_CPU);
    return (ew_mark){s.live_tensors, s.bytes_in_use};
}
#define EW_NO_LEAKS(m)                                                                   \
    do {                                                                                 \
        ew_mark now_ = ew_mark_now();                                                    \
        KT_CHECK_MSG(now_.live == (m).live && now_.bytes == (m).bytes,                   \
                     "live tensors %llu -> %llu, bytes %llu -> %llu", (unsigned long long)(m).live, \
                     (unsigned long long)now_.live, (unsigned long long)(m).bytes,       \
                     (unsigned long long)now_.bytes);                                    \
    } while (0)

/* A tensor poisoned by a failed reshape (on the line where this is written). */
#define EW_POISONED() kiln_reshape(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4)), KILN_SHAPE(3))

/* A handle already consumed (by kiln_neg). */
static inline kiln_tensor ew_stale(void) {
    kiln_tensor t = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2));
    kiln_release(kiln_neg(t));
    return t;
}

#endif
