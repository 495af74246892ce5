/* kiln_cast between every pair of dtypes, bit for bit against a reference written here:
 * exact where the value is representable, round to nearest even into f16/bf16, truncation
 * toward zero and saturation into integers, NaN -> 0, non-zero (NaN included) -> true.
 * Also views, sizes, in-place reuse of same-size buffers, and bad input. */
#include "ew_util.h"

/* One source element, exact whatever its dtype (i64 past 2^53 does not fit a double). */
typedef struct {
    bool is_int;
    int64_t i;
    double f;
} value;

static int64_t sat_i64(double f) {
    if (isnan(f)) return 0;
    if (f >= 0x1p63) return INT64_MAX;
    if (f < -0x1p63) return INT64_MIN;
    return (int64_t)f;
}

/* Writes v converted to dtype d at raw element k. */
static void ref_store(void *raw, kiln_dtype d, int64_t k, value v) {
    double f = v.is_int ? (double)v.i : v.f;
    float f32 = v.is_int ? (float)v.i : (float)v.f;
    int64_t i = v.is_int ? v.i : sat_i64(v.f);
    switch (d) {
    case KILN_F32: ((float *)raw)[k] = f32; break;
    case KILN_F64: ((double *)raw)[k] = f; break;
    case KILN_I32: ((int32_t *)raw)[k] = (int32_t)(i > INT32_MAX ? INT32_MAX : i < INT32_MIN ? INT32_MIN : i); break;
    case KILN_I64: ((int64_t *)raw)[k] = i; break;
    case KILN_BOOL: ((uint8_t *)raw)[k] = v.is_int ? v.i != 0 : v.f != 0; break;
    case KILN_F16: ((uint16_t *)raw)[k] = kiln__f32_to_f16(f32); break;
    default: ((uint16_t *)raw)[k] = kiln__f32_to_bf16(f32); break;
    }
}

/* Test values for a source dtype, as that dtype holds them. */
static int source_values(kiln_dtype d, value *out) {
    static const double floats[] = {0.0, -0.0, 1, -1, 2.5, -2.5, 0.7, -0.7, 100, 2049, 65504, 65520, 1e10, -1e10,
                                    3e9, -3e9, 2147483520.0, 1e20, -1e20, INFINITY, -INFINITY, NAN, 1e-8, 255.5,
                                    0x1p63, -0x1p63, 9.3e18, 1e-40};
    static const int64_t ints[] = {0, 1, -1, 7, -128, 255, 2049, 65504, 70000, 16777217, INT32_MAX, INT32_MIN,
                                   (int64_t)INT32_MAX + 1, 3000000000LL, -3000000000LL, (int64_t)1 << 53,
                                   ((int64_t)1 << 53) + 2, INT64_MAX, INT64_MIN};
    int n = 0;
    if (d == KILN_BOOL) {
        out[n++] = (value){true, 0, 0};
        out[n++] = (value){true, 1, 0};
    } else if (d == KILN_I32 || d == KILN_I64) {
        for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++)
            if (d == KILN_I64 || (ints[k] >= INT32_MIN && ints[k] <= INT32_MAX)) out[n++] = (value){true, ints[k], 0};
    } else {
        for (size_t k = 0; k < sizeof floats / sizeof floats[0]; k++) out[n++] = (value){false, 0, ew_round(d, floats[k])};
    }
    return n;
}

static bool same_element(const unsigned char *a, const unsigned char *b, kiln_dtype d) {
    size_t es = kiln_dtype_size(d);
    if (ew_is_float(d) && isnan(kiln__load_as_f64(a, d, 0)) && isnan(kiln__load_as_f64(b, d, 0))) return true;
    return memcmp(a, b, es) == 0;
}

/* Casts the values (laid out as a [rows, n] matrix in `layout`) from src to dst and compares. */
static void check_cast(kiln_dtype src, kiln_dtype dst, ew_layout layout) {
    value vals[64];
    int n = source_values(src, vals);
    enum { ROWS = 3 };
    size_t ss = kiln_dtype_size(src), ds = kiln_dtype_size(dst);
    unsigned char *raw = malloc(ss * ROWS * (size_t)n), *want = malloc(ds * ROWS * (size_t)n);
    unsigned char *got = malloc(ds * ROWS * (size_t)n), *tr = malloc(ss * ROWS * (size_t)n * 2 + ss);
    for (int r = 0; r < ROWS; r++)
        for (int k = 0; k < n; k++) {
            ref_store(raw, src, r * n + k, vals[k]);
            ref_store(want, dst, r * n + k, vals[k]);
        }
    kiln_tensor x;
    if (layout == EW_TRANSPOSED) { /* a [n, ROWS] buffer seen as [ROWS, n] */
        for (int r = 0; r < ROWS; r++)
            for (int k = 0; k < n; k++) memcpy(tr + ((size_t)k * ROWS + r) * ss, raw + ((size_t)r * n + k) * ss, ss);
        x = kiln_transpose(kiln_from_data(KILN_CPU, src, KILN_SHAPE(n, ROWS), tr), 0, 1);
    } else if (layout == EW_STRIDED) { /* every other element of [ROWS, 2n] */
        memset(tr, 0, ss * ROWS * (size_t)n * 2);
        for (int e = 0; e < ROWS * n; e++) memcpy(tr + (size_t)e * 2 * ss, raw + (size_t)e * ss, ss);
        x = kiln_slice(kiln_from_data(KILN_CPU, src, KILN_SHAPE(ROWS, 2 * n), tr), 1, 0, 2 * n, 2);
    } else {
        x = kiln_from_data(KILN_CPU, src, KILN_SHAPE(ROWS, n), raw);
    }
    kiln_tensor y = kiln_cast(x, dst);
    KT_CHECK(kiln_tensor_dtype(y) == dst);
    int bad = 0;
    if (kiln_into_data(y, got, ds * ROWS * (size_t)n) != KILN_OK) {
        bad = -1;
    } else {
        for (int e = 0; e < ROWS * n; e++) {
            if (same_element(got + (size_t)e * ds, want + (size_t)e * ds, dst)) continue;
            if (bad++ < 3) {
                value v = vals[e % n];
                fprintf(stderr, "    %s -> %s: %.17g / %lld gives %.17g, want %.17g\n", kiln_dtype_name(src),
                        kiln_dtype_name(dst), v.f, (long long)v.i, kiln__load_as_f64(got, dst, e),
                        kiln__load_as_f64(want, dst, e));
            }
        }
    }
    KT_CHECK_MSG(bad == 0, "cast %s -> %s (%s): %d wrong", kiln_dtype_name(src), kiln_dtype_name(dst),
                 ew_layout_names[layout], bad);
    free(raw);
    free(want);
    free(got);
    free(tr);
}

KT_TEST(every_pair_every_layout) {
    ew_mark m = ew_mark_now();
    for (int i = 0; i < EW_NDTYPES; i++)
        for (int j = 0; j < EW_NDTYPES; j++) {
            check_cast(ew_dtypes[i], ew_dtypes[j], EW_DENSE);
            check_cast(ew_dtypes[i], ew_dtypes[j], EW_TRANSPOSED);
            check_cast(ew_dtypes[i], ew_dtypes[j], EW_STRIDED);
        }
    EW_NO_LEAKS(m);
}

KT_TEST(sizes_and_long_runs) {
    ew_mark m = ew_mark_now();
    const kiln_shape shapes[] = {KILN_SHAPE(0), KILN_SHAPE(4, 0), KILN_SCALAR_SHAPE, KILN_SHAPE(1, 3, 1), KILN_SHAPE(100003)};
    for (int s = 0; s < 5; s++) {
        int64_t n = kiln_shape_numel(shapes[s]);
        double *v = malloc(sizeof(double) * (size_t)(n + 1)), *want = malloc(sizeof(double) * (size_t)(n + 1));
        for (int i = 0; i < EW_NDTYPES; i++)
            for (int j = 0; j < EW_NDTYPES; j++) {
                kiln_dtype src = ew_dtypes[i], dst = ew_dtypes[j];
                ew_values(v, n, src, -100, 100);
                for (int64_t k = 0; k < n; k++) want[k] = ew_round(dst, v[k]);
                double *got = ew_read(kiln_cast(ew_tensor(src, shapes[s], v), dst), dst, n);
                if (got) EW_EXPECT_CLOSE("cast sizes", got, want, n, 0, 0);
                free(got);
            }
        free(v);
        free(want);
    }
    EW_NO_LEAKS(m);
}

static kiln_memory_stats stats(void) { return kiln_memory_stats_get(KILN_CPU); }

KT_TEST(in_place_and_identity) {
    ew_mark m = ew_mark_now();
    enum { N = 300 };
    double v[N];
    const kiln_dtype same_size[][2] = {{KILN_F32, KILN_I32}, {KILN_I32, KILN_F32}, {KILN_F64, KILN_I64},
                                       {KILN_I64, KILN_F64}, {KILN_F16, KILN_BF16}, {KILN_BF16, KILN_F16}};
    for (int p = 0; p < 6; p++) {
        kiln_dtype src = same_size[p][0], dst = same_size[p][1];
        ew_values(v, N, src, -1000, 1000);
        double want[N];
        for (int k = 0; k < N; k++) want[k] = ew_round(dst, v[k]);
        kiln_tensor x = ew_tensor(src, KILN_SHAPE(N), v);
        kiln_memory_stats s0 = stats();
        double *got = ew_read(kiln_cast(x, dst), dst, N);
        KT_CHECK(stats().alloc_count == s0.alloc_count && stats().inplace_reuses == s0.inplace_reuses + 1);
        if (got) EW_EXPECT_CLOSE("cast in place", got, want, N, 0, 0);
        free(got);
        /* with a second handle the source keeps its values */
        x = ew_tensor(src, KILN_SHAPE(N), v);
        kiln_tensor keep = kiln_ref(x);
        s0 = stats();
        got = ew_read(kiln_cast(x, dst), dst, N);
        KT_CHECK(stats().alloc_count == s0.alloc_count + 1);
        if (got) EW_EXPECT_CLOSE("cast shared", got, want, N, 0, 0);
        free(got);
        got = ew_read(keep, src, N);
        if (got) EW_EXPECT_CLOSE("cast source kept", got, v, N, 0, 0);
        free(got);
    }
    /* borrowed memory is never written, even where the sizes match */
    float host[4] = {1.5f, -2.5f, 3, 4};
    kiln_tensor b = kiln_from_borrowed(KILN_F32, KILN_SHAPE(4), host, NULL, NULL);
    int32_t iv[4];
    KT_CHECK(kiln_into_data(kiln_cast(b, KILN_I32), iv, sizeof iv) == KILN_OK);
    KT_CHECK(iv[0] == 1 && iv[1] == -2 && host[0] == 1.5f && host[1] == -2.5f);
    /* casting to the same dtype is the tensor itself: nothing is allocated or copied */
    kiln_tensor x = kiln_ones(KILN_CPU, KILN_F64, KILN_SHAPE(8));
    kiln_memory_stats s0 = stats();
    kiln_tensor y = kiln_cast(x, KILN_F64);
    KT_CHECK(stats().alloc_count == s0.alloc_count && !kiln_is_valid(x) && kiln_is_valid(y));
    kiln_release(y);
    EW_NO_LEAKS(m);
}

/* kiln_full converts its value the way a cast from f64 does: saturating, NaN -> 0. */
KT_TEST(fill_converts_like_cast) {
    ew_mark m = ew_mark_now();
    const double fills[] = {1e10, -1e10, NAN, INFINITY, -INFINITY, 2.7, -2.7, 70000, 1e-8, 0x1p63, 0.0, -0.0};
    for (int d = 0; d < EW_NDTYPES; d++)
        for (int k = 0; k < (int)(sizeof fills / sizeof fills[0]); k++) {
            kiln_dtype dt = ew_dtypes[d];
            _Alignas(8) unsigned char want[8], got[5 * 8];
            ref_store(want, dt, 0, (value){false, 0, fills[k]});
            KT_CHECK(kiln_into_data(kiln_full(KILN_CPU, dt, KILN_SHAPE(5), fills[k]), got, 5 * kiln_dtype_size(dt)) == KILN_OK);
            for (int i = 0; i < 5; i++)
                KT_CHECK_MSG(same_element(got + (size_t)i * kiln_dtype_size(dt), want, dt), "full(%s, %g)", kiln_dtype_name(dt), fills[k]);
        }
    EW_NO_LEAKS(m);
}

KT_TEST(bad_input) {
    ew_mark m = ew_mark_now();
    int line;
    kiln_tensor r = kiln_cast(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2)), KILN_DTYPE_COUNT); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_DTYPE, "kiln_cast", line);
    r = kiln_cast(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2)), (kiln_dtype)-1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_DTYPE, "kiln_cast", line);
    r = kiln_cast(KILN_NONE, KILN_F32); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, "kiln_cast", line);
    kiln_tensor stale = ew_stale();
    r = kiln_cast(stale, KILN_I32); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, "kiln_cast", line);
    stale = ew_stale();
    r = kiln_cast(stale, KILN_DTYPE_COUNT); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, "kiln_cast", line);
    kiln_tensor bad = EW_POISONED(); line = __LINE__;
    EW_EXPECT_ERROR(kiln_cast(bad, KILN_F16), KILN_ERR_SHAPE, "kiln_reshape", line);
    bad = EW_POISONED(); line = __LINE__;
    EW_EXPECT_ERROR(kiln_cast(bad, KILN_F32), KILN_ERR_SHAPE, "kiln_reshape", line); /* same dtype: still poisoned */
    kiln_clear_error();
    EW_NO_LEAKS(m);
}

int main(void) {
    KT_RUN(every_pair_every_layout);
    KT_RUN(sizes_and_long_runs);
    KT_RUN(in_place_and_identity);
    KT_RUN(fill_converts_like_cast);
    KT_RUN(bad_input);
    return kt_finish();
}
