/* tril / triu (torch.tril, torch.triu) against a double reference: every dtype, batch dims,
 * square, wide, tall and empty matrices, diagonal offsets from far below to far above (the
 * int64 extremes included), non-contiguous inputs, in-place reuse, finite-difference gradients
 * (the same triangle of the incoming gradient), bad input, leaks. */
#include "gradcheck.h"
#include "nd_layout.h"

static void check_tri(bool upper, kiln_dtype d, kiln_shape s, nd_layout layout, int64_t diagonal) {
    int64_t n = kiln_shape_numel(s), rows = s.dims[s.ndim - 2], cols = s.dims[s.ndim - 1];
    double *v = malloc(sizeof(double) * (size_t)(n + 1)), *want = malloc(sizeof(double) * (size_t)(n + 1));
    ew_values(v, n, d, -20, 20);
    for (int64_t k = 0; k < n; k++) {
        int64_t j = k % cols, i = (k / cols) % rows, off = j - i; /* |j - i| is small: no overflow */
        bool keep = upper ? off >= diagonal : off <= diagonal;
        want[k] = keep ? v[k] : 0.0;
    }
    kiln_tensor x = nd_make(d, s, v, layout);
    kiln_tensor y = upper ? kiln_triu(x, diagonal) : kiln_tril(x, diagonal);
    kiln_shape ys = kiln_tensor_shape(y);
    KT_CHECK(ys.ndim == s.ndim && memcmp(ys.dims, s.dims, sizeof(int64_t) * (size_t)s.ndim) == 0);
    double *got = ew_read(y, d, n);
    char label[128];
    snprintf(label, sizeof label, "%s %s[%s] %d-d %lldx%lld diagonal %lld", upper ? "triu" : "tril", kiln_dtype_name(d),
             nd_layout_names[layout], s.ndim, (long long)rows, (long long)cols, (long long)diagonal);
    if (got) EW_EXPECT_CLOSE(label, got, want, n, 0, 0);
    free(got);
    free(v);
    free(want);
}

KT_TEST(tril_triu_every_dtype_shape_and_offset) {
    kt_mem_begin();
    const kiln_shape shapes[] = {KILN_SHAPE(5, 7), KILN_SHAPE(7, 5), KILN_SHAPE(3, 4, 6), KILN_SHAPE(2, 1, 3, 5),
                                 KILN_SHAPE(1, 1), KILN_SHAPE(0, 3), KILN_SHAPE(3, 0), KILN_SHAPE(2, 0, 4, 4)};
    const int64_t diagonals[] = {INT64_MIN, -9, -3, -1, 0, 1, 2, 6, 9, INT64_MAX};
    for (int u = 0; u < 2; u++)
        for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++)
            for (int k = 0; k < (int)(sizeof diagonals / sizeof diagonals[0]); k++)
                for (int i = 0; i < EW_NDTYPES; i++)
                    check_tri(u, ew_dtypes[i], shapes[s], (nd_layout)((s + k + i) % ND_NLAYOUTS), diagonals[k]);
    for (int l = 0; l < ND_NLAYOUTS; l++) {
        check_tri(false, KILN_F32, KILN_SHAPE(3, 130, 67), (nd_layout)l, -5);
        check_tri(true, KILN_F64, KILN_SHAPE(2, 67, 130), (nd_layout)l, 7);
    }
    KT_MEM_CHECK();
}

KT_TEST(tril_in_place_when_x_is_unshared) {
    kt_mem_begin();
    const float xv[] = {1, 2, 3, 4, 5, 6}, low[] = {1, 0, 0, 4, 5, 0};
    float got[6], kept[6];
    kiln_tensor x = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3), xv);
    uint64_t reuses = kiln_memory_stats_get(KILN_CPU).inplace_reuses;
    kiln_tensor y = kiln_tril(x, 0);
    KT_CHECK(kiln_memory_stats_get(KILN_CPU).inplace_reuses == reuses + 1);
    KT_CHECK(kiln_into_data(y, got, sizeof got) == KILN_OK && memcmp(got, low, sizeof got) == 0);
    x = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3), xv);
    y = kiln_tril(kiln_ref(x), 0);
    KT_CHECK(kiln_into_data(y, got, sizeof got) == KILN_OK && memcmp(got, low, sizeof got) == 0);
    KT_CHECK(kiln_into_data(x, kept, sizeof kept) == KILN_OK && memcmp(kept, xv, sizeof kept) == 0);
    KT_MEM_CHECK();
}

typedef struct {
    bool upper, transpose;
    int64_t diagonal;
} tri_case;

static kiln_tensor tri_fn(kiln_tensor *in, void *ctx) {
    const tri_case *t = ctx;
    kiln_tensor x = t->transpose ? kiln_transpose(in[0], -1, -2) : in[0];
    return t->upper ? kiln_triu(x, t->diagonal) : kiln_tril(x, t->diagonal);
}

KT_TEST(tril_triu_gradient) {
    kt_mem_begin();
    tri_case lo = {false, false, -1}, up = {true, false, 1}, lo_t = {false, true, 2}, up_t = {true, true, -2};
    GC_CHECK("tril -1", tri_fn, &lo, 1, ((kiln_shape[]){KILN_SHAPE(2, 4, 5)}), 1e-6);
    GC_CHECK("triu 1", tri_fn, &up, 1, ((kiln_shape[]){KILN_SHAPE(5, 4)}), 1e-6);
    GC_CHECK("tril 2 transposed", tri_fn, &lo_t, 1, ((kiln_shape[]){KILN_SHAPE(3, 2, 5, 4)}), 1e-6);
    GC_CHECK("triu -2 transposed", tri_fn, &up_t, 1, ((kiln_shape[]){KILN_SHAPE(4, 6)}), 1e-6);
    KT_MEM_CHECK();
}

KT_TEST(tril_triu_bad_input) {
    kt_mem_begin();
    int line;
    kiln_tensor y;
    y = kiln_tril(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(5)), 0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_SHAPE, "kiln_tril", line);
    y = kiln_triu(kiln_zeros(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE), 0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_SHAPE, "kiln_triu", line);
    y = kiln_tril(ew_stale(), 0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_STALE_HANDLE, "kiln_tril", line);
    y = kiln_triu(KILN_NONE, 1), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_NULL, "kiln_triu", line);
    kiln_tensor bad = EW_POISONED();
    line = __LINE__ - 1;
    y = kiln_triu(kiln_unsqueeze(bad, 0), 0);
    EW_EXPECT_ERROR(y, KILN_ERR_SHAPE, "kiln_reshape", line);
    kiln_tensor x = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3));
    kiln_require_grad(x);
    y = kiln_tril(kiln_ref(x), 0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_SHAPE, "kiln_tril", line);
    kiln_release(x);
    kiln_sync();
    kiln_clear_error();
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(tril_triu_every_dtype_shape_and_offset);
    KT_RUN(tril_in_place_when_x_is_unshared);
    KT_RUN(tril_triu_gradient);
    KT_RUN(tril_triu_bad_input);
    return kt_finish();
}
