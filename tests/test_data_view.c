/* kiln_data_view_get: a tensor's values read in place, without a copy (the same pointer twice,
 * the tensor still usable after), a dense copy for a transposed tensor, queued work waited
 * for, the buffer safe from in-place writes while the view lives; errors (poisoned, stale,
 * NULL) with an empty view and the caller's line; no leaks. */
#include <kiln.h>

#include "kiln_test.h"

static const float vals[6] = {1, 2, 3, 4, 5, 6};

KT_TEST(in_place_without_copy) {
    kt_mem_begin();
    kiln_tensor x = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3), vals);
    kiln_data_view a, b;
    KT_CHECK(kiln_data_view_get(x, &a) == KILN_OK && kiln_data_view_get(x, &b) == KILN_OK);
    KT_CHECK(a.data && a.data == b.data); /* one buffer, not copies */
    KT_CHECK(a.numel == 6 && a.dtype == KILN_F32 && a.shape.ndim == 2 && a.shape.dims[0] == 2 && a.shape.dims[1] == 3);
    KT_CHECK(memcmp(a.data, vals, sizeof vals) == 0);
    /* x is not consumed; an op that consumes it cannot write over the viewed buffer */
    float e[6];
    KT_CHECK(kiln_into_data(kiln_exp(x), e, sizeof e) == KILN_OK);
    KT_CHECK(memcmp(a.data, vals, sizeof vals) == 0 && e[1] == expf(2.0f));
    kiln_data_view_release(&a);
    kiln_data_view_release(&b);
    kiln_data_view_release(&b); /* released twice: an empty view, nothing to do */
    KT_CHECK(b.data == NULL);
    KT_MEM_CHECK();
}

KT_TEST(transposed_and_queued) {
    kt_mem_begin();
    kiln_tensor x = kiln_transpose(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3), vals), 0, 1);
    kiln_data_view v;
    KT_CHECK(kiln_data_view_get(x, &v) == KILN_OK);
    const float *d = v.data, want[6] = {1, 4, 2, 5, 3, 6};
    KT_CHECK(v.shape.dims[0] == 3 && v.shape.dims[1] == 2 && memcmp(d, want, sizeof want) == 0);
    kiln_data_view_release(&v);
    kiln_release(x);
    /* a product still queued: the view waits for it */
    kiln_tensor p = kiln_matmul(kiln_ones(KILN_CPU, KILN_F64, KILN_SHAPE(64, 64)), kiln_ones(KILN_CPU, KILN_F64, KILN_SHAPE(64, 64)));
    KT_CHECK(kiln_data_view_get(p, &v) == KILN_OK);
    const double *pd = v.data;
    KT_CHECK(v.dtype == KILN_F64 && pd[0] == 64 && pd[64 * 64 - 1] == 64);
    kiln_data_view_release(&v);
    kiln_release(p);
    KT_MEM_CHECK();
}

KT_TEST(bad_input) {
    kt_mem_begin();
    kiln_data_view v = {.data = vals};
    kiln_tensor bad = kiln_reshape(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2)), KILN_SHAPE(3));
    KT_CHECK(kiln_data_view_get(bad, &v) == KILN_ERR_SHAPE && v.data == NULL && v.keep.id == 0);
    KT_CHECK(strstr(kiln_last_error(), "kiln_reshape") != NULL);
    kiln_release(bad);
    kiln_tensor gone = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2));
    kiln_release(gone);
    int line = __LINE__ + 1;
    KT_CHECK(kiln_data_view_get(gone, &v) == KILN_ERR_STALE_HANDLE && v.data == NULL);
    KT_EXPECT_ERROR(KILN_ERR_STALE_HANDLE, "kiln_data_view_get", line);
    kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2));
    line = __LINE__ + 1;
    KT_CHECK(kiln_data_view_get(x, NULL) == KILN_ERR_NULL);
    KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_data_view_get", line);
    kiln_release(x);
    kiln_data_view_release(NULL);
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(in_place_without_copy);
    KT_RUN(transposed_and_queued);
    KT_RUN(bad_input);
    return kt_finish();
}
