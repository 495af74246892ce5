/* where (mask ? a : b, any dtype) and clamp (NaN = no bound) against double references:
 * dtype pairs and promotion, broadcasting of all three operands, views, large runs, in-place
 * reuse (a or b, never the mask), saturated integer bounds, bad input. */
#include "ew_util.h"

static void check_where(kiln_shape sm, ew_layout lm, kiln_dtype da, kiln_shape sa, ew_layout la, kiln_dtype db,
                        kiln_shape sb, ew_layout lb) {
    int64_t nm = kiln_shape_numel(sm), na = kiln_shape_numel(sa), nb = kiln_shape_numel(sb);
    kiln_shape so = ew_broadcast(sm, ew_broadcast(sa, sb));
    int64_t no = kiln_shape_numel(so);
    double *vm = malloc(sizeof(double) * (size_t)(nm + 1)), *va = malloc(sizeof(double) * (size_t)(na + 1)),
           *vb = malloc(sizeof(double) * (size_t)(nb + 1)), *want = malloc(sizeof(double) * (size_t)(no + 1));
    ew_values(vm, nm, KILN_BOOL, 0, 1);
    ew_values(va, na, da, -100, 100);
    ew_values(vb, nb, db, -100, 100);
    kiln_tensor m = ew_make(KILN_BOOL, sm, vm, lm), a = ew_make(da, sa, va, la), b = ew_make(db, sb, vb, lb);
    kiln_dtype rd = ew_promote(da, db);
    for (int64_t i = 0; i < no; i++)
        want[i] = ew_round(rd, vm[ew_source_index(sm, so, i)] ? va[ew_source_index(sa, so, i)] : vb[ew_source_index(sb, so, i)]);
    kiln_tensor y = kiln_where(m, a, b);
    kiln_shape ys = kiln_tensor_shape(y);
    KT_CHECK(ys.ndim == so.ndim && memcmp(ys.dims, so.dims, sizeof(int64_t) * (size_t)so.ndim) == 0);
    double *got = ew_read(y, rd, no);
    char label[160];
    snprintf(label, sizeof label, "where %s[%s] %s[%s] mask[%s]", kiln_dtype_name(da), ew_layout_names[la],
             kiln_dtype_name(db), ew_layout_names[lb], ew_layout_names[lm]);
    if (got) EW_EXPECT_CLOSE(label, got, want, no, 0, 0);
    free(got);
    free(vm);
    free(va);
    free(vb);
    free(want);
}

KT_TEST(where_every_dtype_pair) {
    ew_mark m = ew_mark_now();
    kiln_shape s = KILN_SHAPE(6, 27);
    for (int i = 0; i < EW_NDTYPES; i++)
        for (int j = 0; j < EW_NDTYPES; j++) check_where(s, EW_DENSE, ew_dtypes[i], s, EW_DENSE, ew_dtypes[j], s, EW_DENSE);
    EW_NO_LEAKS(m);
}

KT_TEST(where_broadcasting_and_views) {
    ew_mark m = ew_mark_now();
    const struct {
        kiln_shape m, a, b;
    } shapes[] = {
        {KILN_SHAPE(7, 33), KILN_SHAPE(7, 33), KILN_SHAPE(7, 33)}, {KILN_SHAPE(7, 1), KILN_SHAPE(33), KILN_SCALAR_SHAPE},
        {KILN_SHAPE(33), KILN_SHAPE(7, 33), KILN_SHAPE(7, 1)},    {KILN_SCALAR_SHAPE, KILN_SHAPE(7, 33), KILN_SHAPE(1, 33)},
        {KILN_SHAPE(7, 33), KILN_SCALAR_SHAPE, KILN_SCALAR_SHAPE}, {KILN_SHAPE(0, 33), KILN_SHAPE(33), KILN_SHAPE(1)},
        {KILN_SHAPE(2, 1, 4), KILN_SHAPE(3, 1), KILN_SHAPE(1, 3, 4)}, {KILN_SHAPE(50001), KILN_SHAPE(50001), KILN_SHAPE(50001)},
    };
    const kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_I64, KILN_BOOL, KILN_F16, KILN_BF16};
    for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++)
        for (int d = 0; d < 6; d++)
            for (int l = 0; l < EW_NLAYOUTS; l++) {
                ew_layout other = (ew_layout)((l + 1) % EW_NLAYOUTS);
                check_where(shapes[s].m, (ew_layout)l, dts[d], shapes[s].a, other, dts[d], shapes[s].b, (ew_layout)l);
                check_where(shapes[s].m, EW_DENSE, dts[d], shapes[s].a, (ew_layout)l, dts[d], shapes[s].b, other);
            }
    EW_NO_LEAKS(m);
}

static kiln_memory_stats stats(void) { return kiln_memory_stats_get(KILN_CPU); }

KT_TEST(where_in_place_takes_a_or_b_never_the_mask) {
    ew_mark m = ew_mark_now();
    const uint8_t mask[] = {1, 0, 1, 0};
    const float av[] = {1, 2, 3, 4}, bv[] = {-1, -2, -3, -4}, want[] = {1, -2, 3, -4};
    float got[4];
    kiln_tensor a = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(4), av), b = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(4), bv);
    kiln_tensor mk = kiln_from_data(KILN_CPU, KILN_BOOL, KILN_SHAPE(4), mask);
    kiln_memory_stats s0 = stats();
    kiln_tensor y = kiln_where(mk, a, b);
    KT_CHECK(stats().alloc_count == s0.alloc_count && stats().inplace_reuses == s0.inplace_reuses + 1);
    KT_CHECK(kiln_into_data(y, got, sizeof got) == KILN_OK && memcmp(got, want, sizeof got) == 0);
    /* a shared: b's buffer */
    a = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(4), av), b = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(4), bv);
    mk = kiln_from_data(KILN_CPU, KILN_BOOL, KILN_SHAPE(4), mask);
    kiln_tensor keep = kiln_ref(a);
    s0 = stats();
    y = kiln_where(mk, a, b);
    KT_CHECK(stats().alloc_count == s0.alloc_count && stats().inplace_reuses == s0.inplace_reuses + 1);
    KT_CHECK(kiln_into_data(y, got, sizeof got) == KILN_OK && memcmp(got, want, sizeof got) == 0);
    KT_CHECK(kiln_into_data(keep, got, sizeof got) == KILN_OK && memcmp(got, av, sizeof got) == 0);
    /* bool a and b both shared: a single-owner bool mask would fit but is never written */
    const uint8_t ab[] = {1, 1, 0, 0}, bb[] = {0, 1, 1, 0}, wb[] = {1, 1, 0, 0};
    uint8_t gb[4];
    kiln_tensor xa = kiln_from_data(KILN_CPU, KILN_BOOL, KILN_SHAPE(4), ab), xb = kiln_from_data(KILN_CPU, KILN_BOOL, KILN_SHAPE(4), bb);
    kiln_tensor ka = kiln_ref(xa), kb = kiln_ref(xb);
    mk = kiln_from_data(KILN_CPU, KILN_BOOL, KILN_SHAPE(4), mask);
    s0 = stats();
    y = kiln_where(mk, xa, xb);
    KT_CHECK(stats().alloc_count == s0.alloc_count + 1 && stats().inplace_reuses == s0.inplace_reuses);
    KT_CHECK(kiln_into_data(y, gb, sizeof gb) == KILN_OK && memcmp(gb, wb, sizeof gb) == 0);
    kiln_release(ka);
    kiln_release(kb);
    EW_NO_LEAKS(m);
}

KT_TEST(where_bad_input) {
    ew_mark m = ew_mark_now();
    int line;
    kiln_tensor m3 = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)), a3 = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)),
                b3 = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3));
    kiln_tensor r = kiln_where(m3, a3, b3); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_DTYPE, "kiln_where", line);
    kiln_tensor m4 = kiln_ones(KILN_CPU, KILN_BOOL, KILN_SHAPE(4));
    a3 = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)), b3 = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3));
    r = kiln_where(m4, a3, b3); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_where", line);
    m3 = kiln_ones(KILN_CPU, KILN_BOOL, KILN_SHAPE(3));
    kiln_tensor a23 = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)), b312 = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3, 1, 2));
    r = kiln_where(m3, a23, b312); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_where", line);
    for (int pos = 0; pos < 3; pos++) {
        kiln_tensor args[3] = {kiln_ones(KILN_CPU, KILN_BOOL, KILN_SHAPE(3)), kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)),
                               kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3))};
        kiln_release(args[pos]);
        args[pos] = KILN_NONE;
        r = kiln_where(args[0], args[1], args[2]); line = __LINE__;
        EW_EXPECT_ERROR(r, KILN_ERR_NULL, "kiln_where", line);
        kiln_tensor st[3] = {kiln_ones(KILN_CPU, KILN_BOOL, KILN_SHAPE(3)), kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)),
                             kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3))};
        kiln_release(st[pos]);
        st[pos] = ew_stale();
        r = kiln_where(st[0], st[1], st[2]); line = __LINE__;
        EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, "kiln_where", line);
        kiln_tensor ps[3] = {kiln_ones(KILN_CPU, KILN_BOOL, KILN_SHAPE(3)), kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)),
                             kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3))};
        kiln_release(ps[pos]);
        ps[pos] = EW_POISONED(); line = __LINE__;
        EW_EXPECT_ERROR(kiln_where(ps[0], ps[1], ps[2]), KILN_ERR_SHAPE, "kiln_reshape", line);
    }
    kiln_clear_error();
    EW_NO_LEAKS(m);
}

/* ---- clamp ------------------------------------------------------------------------------------ */
static const kiln_dtype clamp_dtypes[] = {KILN_F32, KILN_F64, KILN_I32, KILN_I64, KILN_F16, KILN_BF16};

static double clamp_ref(double x, double lo, double hi) {
    if (!isnan(lo) && x < lo) x = lo;
    if (!isnan(hi) && x > hi) x = hi;
    return x;
}

/* A bound as the kernel sees it: in the compute dtype, integers saturated. */
static double bound_in(kiln_dtype kd, double b) {
    if (isnan(b)) return b;
    if (kd == KILN_I32) return b > INT32_MAX ? INT32_MAX : b < INT32_MIN ? INT32_MIN : b;
    if (kd == KILN_I64) return b >= 0x1p63 ? 0x1p63 : b < -0x1p63 ? -0x1p63 : b;
    return ew_round(kd, b);
}

KT_TEST(clamp_every_dtype_layout_and_bound) {
    ew_mark m = ew_mark_now();
    const double bounds[][2] = {{-1, 1}, {NAN, 0.5}, {-0.5, NAN}, {NAN, NAN}, {2, 2}, {-1e20, 1e20}, {-3, -3},
                                {-7, 40}, {0.25, 0.75}, {-INFINITY, INFINITY}};
    enum { R = 7, C = 31 };
    double v[R * C], want[R * C];
    for (int d = 0; d < (int)(sizeof clamp_dtypes / sizeof clamp_dtypes[0]); d++)
        for (int k = 0; k < (int)(sizeof bounds / sizeof bounds[0]); k++)
            for (int l = 0; l < EW_NLAYOUTS; l++) {
                kiln_dtype dt = clamp_dtypes[d];
                double lo = bounds[k][0], hi = bounds[k][1];
                bool whole = (isnan(lo) || lo == floor(lo)) && (isnan(hi) || hi == floor(hi));
                kiln_dtype rd = !ew_is_float(dt) && !whole ? KILN_F32 : dt;
                kiln_dtype kd = rd == KILN_F16 || rd == KILN_BF16 ? KILN_F32 : rd;
                ew_values(v, R * C, dt, -50, 50);
                if (ew_is_float(dt)) v[0] = NAN, v[1] = INFINITY, v[2] = -INFINITY;
                kiln_tensor x = ew_matrix(dt, R, C, v, (ew_layout)l);
                for (int i = 0; i < R * C; i++) want[i] = ew_round(rd, clamp_ref(v[i], bound_in(kd, lo), bound_in(kd, hi)));
                double *got = ew_read(kiln_clamp(x, lo, hi), rd, R * C);
                char label[96];
                snprintf(label, sizeof label, "clamp %s [%g, %g] %s", kiln_dtype_name(dt), lo, hi, ew_layout_names[l]);
                if (got) EW_EXPECT_CLOSE(label, got, want, R * C, 0, 0);
                free(got);
            }
    /* sizes: empty, 0-d, size-1 dims, and a long run through the threads */
    const kiln_shape shapes[] = {KILN_SHAPE(0), KILN_SHAPE(2, 0), KILN_SCALAR_SHAPE, KILN_SHAPE(1, 1, 5), KILN_SHAPE(90001)};
    for (int s = 0; s < 5; s++) {
        int64_t n = kiln_shape_numel(shapes[s]);
        double *big = malloc(sizeof(double) * (size_t)(n + 1)), *bw = malloc(sizeof(double) * (size_t)(n + 1));
        ew_values(big, n, KILN_F32, -3, 3);
        for (int64_t i = 0; i < n; i++) bw[i] = clamp_ref(big[i], -1, ew_round(KILN_F32, 0.3));
        double *got = ew_read(kiln_clamp(ew_tensor(KILN_F32, shapes[s], big), -1, 0.3), KILN_F32, n);
        if (got) EW_EXPECT_CLOSE("clamp sizes", got, bw, n, 0, 0);
        free(got);
        free(big);
        free(bw);
    }
    EW_NO_LEAKS(m);
}

/* Integer bounds beyond the dtype saturate instead of wrapping. */
KT_TEST(clamp_integer_extremes) {
    ew_mark m = ew_mark_now();
    int64_t v[] = {INT64_MIN, -5, 0, 5, INT64_MAX}, got[5];
    KT_CHECK(kiln_into_data(kiln_clamp(kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(5), v), -1e19, 1e19), got, sizeof got) == KILN_OK);
    KT_CHECK(memcmp(got, v, sizeof v) == 0);
    KT_CHECK(kiln_into_data(kiln_clamp(kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(5), v), 0x1p62, NAN), got, sizeof got) == KILN_OK);
    KT_CHECK(got[0] == (int64_t)1 << 62 && got[3] == (int64_t)1 << 62 && got[4] == INT64_MAX);
    int32_t w[] = {INT32_MIN, 3, INT32_MAX}, g32[3];
    KT_CHECK(kiln_into_data(kiln_clamp(kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(3), w), -1e12, 4), g32, sizeof g32) == KILN_OK);
    KT_CHECK(g32[0] == INT32_MIN && g32[1] == 3 && g32[2] == 4);
    EW_NO_LEAKS(m);
}

KT_TEST(clamp_in_place_and_bad_input) {
    ew_mark m = ew_mark_now();
    float v[] = {-2, 0.5f, 2}, got[3];
    kiln_tensor x = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(3), v);
    kiln_memory_stats s0 = stats();
    kiln_tensor y = kiln_clamp(x, -1, 1);
    KT_CHECK(stats().alloc_count == s0.alloc_count && stats().inplace_reuses == s0.inplace_reuses + 1);
    KT_CHECK(kiln_into_data(y, got, sizeof got) == KILN_OK && got[0] == -1 && got[1] == 0.5f && got[2] == 1);
    int line;
    kiln_tensor r = kiln_clamp(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)), 1, -1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_clamp", line);
    r = kiln_clamp(kiln_ones(KILN_CPU, KILN_BOOL, KILN_SHAPE(3)), 0, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_DTYPE, "kiln_clamp", line);
    r = kiln_clamp(KILN_NONE, 0, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, "kiln_clamp", line);
    kiln_tensor stale = ew_stale();
    r = kiln_clamp(stale, 0, 1); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, "kiln_clamp", line);
    stale = ew_stale();
    r = kiln_clamp(stale, 1, 0); line = __LINE__; /* the stale handle is reported first */
    EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, "kiln_clamp", line);
    kiln_tensor bad = EW_POISONED(); line = __LINE__;
    EW_EXPECT_ERROR(kiln_clamp(bad, 0, 1), KILN_ERR_SHAPE, "kiln_reshape", line);
    bad = EW_POISONED(); line = __LINE__;
    EW_EXPECT_ERROR(kiln_clamp(bad, 0.5, 1.5), KILN_ERR_SHAPE, "kiln_reshape", line);
    kiln_clear_error();
    EW_NO_LEAKS(m);
}

int main(void) {
    KT_RUN(where_every_dtype_pair);
    KT_RUN(where_broadcasting_and_views);
    KT_RUN(where_in_place_takes_a_or_b_never_the_mask);
    KT_RUN(where_bad_input);
    KT_RUN(clamp_every_dtype_layout_and_bound);
    KT_RUN(clamp_integer_extremes);
    KT_RUN(clamp_in_place_and_bad_input);
    return kt_finish();
}
