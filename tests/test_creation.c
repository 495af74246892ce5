/* Creation ops: zeros, ones, full, arange, linspace, eye, from_data, from_borrowed. Values
 * against references computed here in double, every dtype, empty and 0-d shapes, and bad
 * input for every function (no leaks). */
#include <kiln.h>

#include "kiln_test.h"



/* What a dtype can hold of v: the rounding the library is expected to do. */
static double as_dtype(kiln_dtype dt, double v) {
    switch (dt) {
    case KILN_F32: return (float)v;
    case KILN_I32: return isnan(v) ? 0 : v >= 2147483647.0 ? 2147483647.0 : v <= -2147483648.0 ? -2147483648.0 : trunc(v);
    case KILN_I64: return isnan(v) ? 0 : trunc(v);
    case KILN_BOOL: return v != 0;
    default: return v; /* f64; f16/bf16 are compared with a tolerance */
    }
}

static double tolerance(kiln_dtype dt) { return dt == KILN_F16 ? 1e-3 : dt == KILN_BF16 ? 8e-3 : dt == KILN_F32 ? 1e-7 : 0; }

/* Reads t (consumed) as doubles and checks its shape. */
static kiln_status read_checked(kiln_tensor t, kiln_shape want, double *out) {
    kiln_shape s = kiln_tensor_shape(t);
    bool same = s.ndim == want.ndim;
    for (int d = 0; same && d < s.ndim; d++) same = s.dims[d] == want.dims[d];
    KT_CHECK_MSG(same, "shape has %d dims, expected %d (or a size differs)", s.ndim, want.ndim);
    int64_t n = kiln_shape_numel(want);
    return kiln_into_data(kiln_cast(t, KILN_F64), out, sizeof(double) * (size_t)n);
}

static void expect_failure(kiln_tensor t, kiln_status st, const char *op) {
    kiln_status got = kiln_into_data(t, NULL, 0);
    const char *msg = kiln_last_error();
    KT_CHECK_MSG(got == st, "status %s, expected %s (%s)", kiln_status_str(got), kiln_status_str(st), msg);
    KT_CHECK_MSG(strstr(msg, op) != NULL, "message '%s' does not name %s", msg, op);
    KT_CHECK_MSG(strstr(msg, "test_creation.c") != NULL, "message '%s' has no call site", msg);
}

KT_TEST(zeros_ones_full) {
    kt_mem_begin();
    const kiln_shape shapes[] = {KILN_SCALAR_SHAPE, KILN_SHAPE(3, 4), KILN_SHAPE(0, 5), KILN_SHAPE(1, 7, 1), KILN_SHAPE(40000)};
    static double got[40000];
    for (int k = 0; k < KT_N_DTYPES; k++) {
        kiln_dtype dt = kt_all_dtypes[k];
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int64_t n = kiln_shape_numel(shapes[s]);
            const double values[] = {0, 1, 2.75, -3.5, 1.0 / 3};
            for (int v = 0; v < 5; v++) {
                kiln_tensor t = v == 0   ? kiln_zeros(KILN_CPU, dt, shapes[s])
                                : v == 1 ? kiln_ones(KILN_CPU, dt, shapes[s])
                                         : kiln_full(KILN_CPU, dt, shapes[s], values[v]);
                KT_CHECK(kiln_tensor_dtype(t) == dt);
                KT_CHECK(read_checked(t, shapes[s], got) == KILN_OK);
                double want = as_dtype(dt, values[v]);
                int bad = 0;
                for (int64_t i = 0; i < n; i++) bad += fabs(got[i] - want) > tolerance(dt) * fmax(1, fabs(want));
                KT_CHECK_MSG(bad == 0, "%s value %g: %d wrong", kiln_dtype_name(dt), values[v], bad);
            }
        }
    }
    /* NaN and infinity in float dtypes */
    double g[2];
    KT_CHECK(read_checked(kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(2), NAN), KILN_SHAPE(2), g) == KILN_OK);
    KT_CHECK(isnan(g[0]) && isnan(g[1]));
    KT_CHECK(read_checked(kiln_full(KILN_CPU, KILN_BF16, KILN_SHAPE(2), -INFINITY), KILN_SHAPE(2), g) == KILN_OK);
    KT_CHECK(isinf(g[0]) && g[1] < 0);
    KT_MEM_CHECK();
}

KT_TEST(zeros_ones_full_bad_input) {
    kt_mem_begin();
    expect_failure(kiln_zeros(KILN_CPU, (kiln_dtype)99, KILN_SHAPE(2)), KILN_ERR_DTYPE, "kiln_zeros");
    expect_failure(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, -1)), KILN_ERR_SHAPE, "kiln_ones");
    expect_failure(kiln_full(KILN_CUDA, KILN_F32, KILN_SHAPE(2), 1), KILN_ERR_DEVICE, "kiln_full");
    expect_failure(kiln_full((kiln_device)9, KILN_F32, KILN_SHAPE(2), 1), KILN_ERR_DEVICE, "kiln_full");
    kiln_shape nine = {9, {1, 1, 1, 1, 1, 1, 1, 1}};
    expect_failure(kiln_zeros(KILN_CPU, KILN_F32, nine), KILN_ERR_SHAPE, "kiln_zeros");
    kiln_shape neg = {-1, {0}};
    expect_failure(kiln_zeros(KILN_CPU, KILN_F32, neg), KILN_ERR_SHAPE, "kiln_zeros");
    expect_failure(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(INT64_MAX / 2, 4)), KILN_ERR_OUT_OF_MEMORY, "kiln_zeros");
    KT_MEM_CHECK();
}

static void check_arange(kiln_dtype dt, double start, double end, double step) {
    double count = ceil((end - start) / step);
    int64_t n = count > 0 ? (int64_t)count : 0;
    double *got = malloc(sizeof(double) * (size_t)(n + 1));
    kiln_tensor t = kiln_arange(KILN_CPU, dt, start, end, step);
    KT_CHECK(kiln_tensor_dtype(t) == dt);
    KT_CHECK(read_checked(t, KILN_SHAPE(n), got) == KILN_OK);
    for (int64_t i = 0; i < n; i++) {
        double want = as_dtype(dt, start + (double)i * step);
        KT_NEAR(got[i], want, tolerance(dt));
    }
    free(got);
}

KT_TEST(arange_values) {
    kt_mem_begin();
    for (int k = 0; k < KT_N_DTYPES; k++) {
        kiln_dtype dt = kt_all_dtypes[k];
        check_arange(dt, 0, 10, 1);
        check_arange(dt, -3, 7, 2);
        check_arange(dt, 5, 0, -1.5);
        check_arange(dt, 0, 1, 0.1);
        check_arange(dt, 2, 2, 1);   /* empty */
        check_arange(dt, 3, 1, 1);   /* empty: wrong direction */
        check_arange(dt, 0, 1, 5);   /* one element */
        check_arange(dt, 0, 60000, 1); /* several threads; still finite in f16 */
    }
    /* integer dtypes compute exactly, past double's 2^53 */
    int64_t got[512];
    double base = 1152921504606846976.0; /* 2^60 */
    kiln_tensor t = kiln_arange(KILN_CPU, KILN_I64, base, base + 512, 1);
    KT_CHECK(kiln_into_data(t, got, sizeof got) == KILN_OK);
    int bad = 0;
    for (int i = 0; i < 512; i++) bad += got[i] != ((int64_t)1 << 60) + i;
    KT_CHECK(bad == 0);
    /* i32 saturates instead of overflowing */
    int32_t g32[3];
    KT_CHECK(kiln_into_data(kiln_arange(KILN_CPU, KILN_I32, 2147483640.0, 2147483650.0, 4), g32, sizeof g32) == KILN_OK);
    KT_CHECK(g32[0] == 2147483640 && g32[1] == 2147483644 && g32[2] == INT32_MAX);
    KT_MEM_CHECK();
}

KT_TEST(linspace_values) {
    kt_mem_begin();
    static double got[50001];
    const struct {
        double a, b;
        int64_t n;
    } cases[] = {{0, 1, 5}, {-1, 0.3, 7}, {10, -10, 21}, {3, 3, 4}, {2.5, 9, 1}, {0, 1, 0}, {-5, 5, 50001}, {0, 10, 4}};
    for (int k = 0; k < KT_N_DTYPES; k++) {
        kiln_dtype dt = kt_all_dtypes[k];
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            double a = cases[c].a, b = cases[c].b;
            int64_t n = cases[c].n;
            KT_CHECK(read_checked(kiln_linspace(KILN_CPU, dt, a, b, n), KILN_SHAPE(n), got) == KILN_OK);
            /* torch's formula: each half counts from its own end, so both ends are exact */
            double step = n > 1 ? (b - a) / (double)(n - 1) : 0;
            int bad = 0;
            for (int64_t i = 0; i < n; i++) {
                double v = i < n / 2 || n == 1 ? a + step * (double)i : b - step * (double)(n - 1 - i);
                double want = as_dtype(dt, v);
                bad += fabs(got[i] - want) > tolerance(dt) * fmax(1, fabs(want));
            }
            KT_CHECK_MSG(bad == 0, "%s linspace(%g, %g, %lld): %d wrong", kiln_dtype_name(dt), a, b, (long long)n, bad);
            if (n > 1 && dt != KILN_BOOL) { /* both ends exact */
                KT_CHECK(got[0] == as_dtype(dt, a) || kiln_dtype_size(dt) == 2);
                KT_CHECK(got[n - 1] == as_dtype(dt, b) || kiln_dtype_size(dt) == 2);
            }
        }
    }
    double g[4];
    KT_CHECK(read_checked(kiln_linspace(KILN_CPU, KILN_I64, 0, 10, 4), KILN_SHAPE(4), g) == KILN_OK);
    KT_CHECK(g[0] == 0 && g[1] == 3 && g[2] == 6 && g[3] == 10);
    KT_MEM_CHECK();
}

KT_TEST(eye_values) {
    kt_mem_begin();
    const int64_t sizes[][2] = {{3, 3}, {2, 4}, {4, 2}, {1, 1}, {0, 3}, {3, 0}, {300, 200}};
    static double got[60000];
    for (int k = 0; k < KT_N_DTYPES; k++) {
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            int64_t r = sizes[s][0], c = sizes[s][1];
            kiln_tensor t = kiln_eye(KILN_CPU, kt_all_dtypes[k], r, c);
            KT_CHECK(kiln_tensor_dtype(t) == kt_all_dtypes[k]);
            KT_CHECK(read_checked(t, KILN_SHAPE(r, c), got) == KILN_OK);
            int bad = 0;
            for (int64_t i = 0; i < r; i++)
                for (int64_t j = 0; j < c; j++) bad += got[i * c + j] != (i == j);
            KT_CHECK(bad == 0);
        }
    }
    KT_MEM_CHECK();
}

KT_TEST(range_bad_input) {
    kt_mem_begin();
    const char *a = "kiln_arange", *l = "kiln_linspace", *e = "kiln_eye";
    expect_failure(kiln_arange(KILN_CPU, KILN_F32, 0, 10, 0), KILN_ERR_INVALID_ARGUMENT, a);
    expect_failure(kiln_arange(KILN_CPU, KILN_F32, NAN, 10, 1), KILN_ERR_INVALID_ARGUMENT, a);
    expect_failure(kiln_arange(KILN_CPU, KILN_F32, 0, INFINITY, 1), KILN_ERR_INVALID_ARGUMENT, a);
    expect_failure(kiln_arange(KILN_CPU, KILN_F32, 0, 10, NAN), KILN_ERR_INVALID_ARGUMENT, a);
    expect_failure(kiln_arange(KILN_CPU, KILN_F32, 0, 1e20, 1), KILN_ERR_OUT_OF_MEMORY, a);
    expect_failure(kiln_arange(KILN_CPU, (kiln_dtype)-1, 0, 10, 1), KILN_ERR_DTYPE, a);
    expect_failure(kiln_arange(KILN_CUDA, KILN_F32, 0, 10, 1), KILN_ERR_DEVICE, a);
    expect_failure(kiln_linspace(KILN_CPU, KILN_F32, 0, 1, -1), KILN_ERR_SHAPE, l);
    expect_failure(kiln_linspace(KILN_CPU, KILN_F32, NAN, 1, 3), KILN_ERR_INVALID_ARGUMENT, l);
    expect_failure(kiln_linspace(KILN_CPU, KILN_F32, 0, NAN, 3), KILN_ERR_INVALID_ARGUMENT, l);
    expect_failure(kiln_linspace(KILN_CPU, KILN_DTYPE_COUNT, 0, 1, 3), KILN_ERR_DTYPE, l);
    expect_failure(kiln_linspace(KILN_CUDA, KILN_F32, 0, 1, 3), KILN_ERR_DEVICE, l);
    expect_failure(kiln_eye(KILN_CPU, KILN_F32, -1, 3), KILN_ERR_SHAPE, e);
    expect_failure(kiln_eye(KILN_CPU, KILN_F32, 3, -2), KILN_ERR_SHAPE, e);
    expect_failure(kiln_eye(KILN_CPU, (kiln_dtype)7, 3, 3), KILN_ERR_DTYPE, e);
    expect_failure(kiln_eye(KILN_CUDA, KILN_F32, 3, 3), KILN_ERR_DEVICE, e);
    KT_MEM_CHECK();
}

KT_TEST(from_data_round_trips) {
    kt_mem_begin();
    /* raw bytes of every dtype come back unchanged (i64 past 2^53 included) */
    unsigned char bytes[6 * 8], back[6 * 8];
    for (int i = 0; i < (int)sizeof bytes; i++) bytes[i] = (unsigned char)(i * 37 + 11);
    for (int k = 0; k < KT_N_DTYPES; k++) {
        kiln_dtype dt = kt_all_dtypes[k];
        unsigned char src[sizeof bytes];
        memcpy(src, bytes, sizeof src);
        if (dt == KILN_BOOL)
            for (int i = 0; i < 6; i++) src[i] = (unsigned char)(i % 2);
        size_t n = 6 * kiln_dtype_size(dt);
        kiln_tensor t = kiln_from_data(KILN_CPU, dt, KILN_SHAPE(2, 3), src);
        memset(src, 0, sizeof src); /* copied at the call: the caller may reuse its buffer */
        KT_CHECK(kiln_into_data(t, back, n) == KILN_OK);
        if (dt == KILN_BOOL)
            for (int i = 0; i < 6; i++) KT_CHECK(back[i] == i % 2);
        else
            KT_CHECK(memcmp(back, bytes, n) == 0);
    }
    int64_t big[2] = {((int64_t)1 << 62) + 1, -((int64_t)1 << 60) - 3}, got[2];
    KT_CHECK(kiln_into_data(kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(2), big), got, sizeof got) == KILN_OK);
    KT_CHECK(got[0] == big[0] && got[1] == big[1]);
    /* 0-d and empty; NULL data is fine when there is nothing to copy */
    float one = 2.5f, f;
    KT_CHECK(kiln_into_scalar(kiln_from_data(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE, &one), &f) == KILN_OK && f == 2.5f);
    KT_CHECK(kiln_into_data(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(0, 4), NULL), NULL, 0) == KILN_OK);

    expect_failure(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(2), NULL), KILN_ERR_NULL, "kiln_from_data");
    expect_failure(kiln_from_data(KILN_CPU, (kiln_dtype)12, KILN_SHAPE(2), &one), KILN_ERR_DTYPE, "kiln_from_data");
    expect_failure(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(-2), &one), KILN_ERR_SHAPE, "kiln_from_data");
    expect_failure(kiln_from_data(KILN_CUDA, KILN_F32, KILN_SHAPE(1), &one), KILN_ERR_DEVICE, "kiln_from_data");
    KT_MEM_CHECK();
}

static int release_calls;
static void *release_ctx_seen;
static void on_release(void *ctx) {
    release_calls++;
    release_ctx_seen = ctx;
}

KT_TEST(from_borrowed_wraps_user_memory) {
    kt_mem_begin();
    int32_t data[6] = {1, 2, 3, 4, 5, 6};
    int marker;
    release_calls = 0;
    kiln_tensor t = kiln_from_borrowed(KILN_I32, KILN_SHAPE(2, 3), data, on_release, &marker);
    KT_CHECK(kiln_tensor_dtype(t) == KILN_I32 && kiln_tensor_device(t) == KILN_CPU);
    /* not a copy: a change to the user's memory shows */
    data[4] = 50;
    double got[6];
    KT_CHECK(read_checked(kiln_ref(t), KILN_SHAPE(2, 3), got) == KILN_OK);
    KT_NEAR(got[4], 50, 0);
    /* on_release runs once, when the last view goes */
    kiln_tensor view = kiln_transpose(t, 0, 1);
    kiln_sync();
    KT_CHECK(release_calls == 0);
    KT_CHECK(read_checked(view, KILN_SHAPE(3, 2), got) == KILN_OK);
    kiln_sync();
    KT_CHECK(release_calls == 1 && release_ctx_seen == &marker);
    /* never reused in place, even when consumed by its only handle */
    int32_t small[4] = {-1, 0, 1, 2};
    uint64_t reuses = kiln_memory_stats_get(KILN_CPU).inplace_reuses;
    kiln_tensor f = kiln_cast(kiln_from_borrowed(KILN_I32, KILN_SHAPE(4), small, on_release, NULL), KILN_F32);
    KT_CHECK(kiln_memory_stats_get(KILN_CPU).inplace_reuses == reuses); /* same element size: it could have */
    float fv[4];
    KT_CHECK(kiln_into_data(f, fv, sizeof fv) == KILN_OK);
    KT_CHECK(fv[0] == -1.0f && fv[3] == 2.0f && small[0] == -1 && small[3] == 2);
    kiln_sync();
    KT_CHECK(release_calls == 2);
    /* no callback given; empty; 0-d */
    kiln_tensor e = kiln_from_borrowed(KILN_F64, KILN_SHAPE(0, 2), NULL, NULL, NULL);
    KT_CHECK(read_checked(e, KILN_SHAPE(0, 2), got) == KILN_OK);
    double scalar = 7.25;
    kiln_tensor s = kiln_from_borrowed(KILN_F64, KILN_SCALAR_SHAPE, &scalar, on_release, NULL);
    KT_CHECK(read_checked(s, KILN_SCALAR_SHAPE, got) == KILN_OK && got[0] == 7.25);
    kiln_sync();
    KT_CHECK(release_calls == 3);
    /* failures never call the callback: the caller still owns the memory */
    expect_failure(kiln_from_borrowed(KILN_F32, KILN_SHAPE(2), NULL, on_release, NULL), KILN_ERR_NULL, "kiln_from_borrowed");
    expect_failure(kiln_from_borrowed((kiln_dtype)8, KILN_SHAPE(2), data, on_release, NULL), KILN_ERR_DTYPE,
                   "kiln_from_borrowed");
    expect_failure(kiln_from_borrowed(KILN_I32, KILN_SHAPE(2, -3), data, on_release, NULL), KILN_ERR_SHAPE,
                   "kiln_from_borrowed");
    KT_CHECK(release_calls == 3);
    KT_MEM_CHECK();
}

/* Out of memory at each of kiln_from_borrowed's allocations in turn (its storage record, its
 * tensor, its handle): a failure never calls the callback (the caller still owns the memory and
 * frees it), a success calls it once when the tensor goes. */
KT_TEST(from_borrowed_out_of_memory) {
    kt_mem_begin();
    float data[3] = {1, 2, 3};
    int failures = 0;
    for (int64_t n = 1; n <= 8; n++) {
        release_calls = 0;
        kiln_debug_fail_alloc_after(n);
        kiln_tensor t = kiln_from_borrowed(KILN_F32, KILN_SHAPE(3), data, on_release, NULL);
        kiln_debug_fail_alloc_after(0);
        bool ok = kiln_tensor_status(t) == KILN_OK;
        kiln_release(t);
        kiln_sync();
        failures += !ok;
        KT_CHECK_MSG(release_calls == (ok ? 1 : 0), "allocation %lld failed: %s, %d callbacks", (long long)n,
                     ok ? "made" : "not made", release_calls);
    }
    KT_CHECK(failures >= 3); /* (the record, the tensor, the handle) */
    kiln_sync();
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(zeros_ones_full);
    KT_RUN(zeros_ones_full_bad_input);
    KT_RUN(arange_values);
    KT_RUN(linspace_values);
    KT_RUN(eye_values);
    KT_RUN(range_bad_input);
    KT_RUN(from_data_round_trips);
    KT_RUN(from_borrowed_wraps_user_memory);
    KT_RUN(from_borrowed_out_of_memory);
    return kt_finish();
}
