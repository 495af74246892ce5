/* Views share storage: reshape, permute, transpose, narrow, slice, expand, squeeze,
 * unsqueeze, flatten, contiguous. Checked element by element against index arithmetic. */
#include <kiln.h>

#include "kiln_test.h"

static kiln_tensor iota(kiln_shape shape) {
    int64_t n = kiln_shape_numel(shape);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) v[i] = (double)i;
    kiln_tensor t = kiln_from_data(KILN_CPU, KILN_F64, shape, v);
    free(v);
    return t;
}

static uint64_t allocs(void) { return kiln_memory_stats_get(KILN_CPU).alloc_count; }

KT_TEST(reshape_is_a_view_when_dense) {
    kiln_tensor a = iota(KILN_SHAPE(2, 3, 4));
    uint64_t before = allocs();
    kiln_tensor r = kiln_reshape(a, KILN_SHAPE(4, -1));
    KT_CHECK(allocs() == before);
    kiln_shape s = kiln_tensor_shape(r);
    KT_CHECK(s.ndim == 2 && s.dims[0] == 4 && s.dims[1] == 6);
    double out[24];
    KT_CHECK(kiln_into_data(r, out, sizeof out) == KILN_OK);
    for (int i = 0; i < 24; i++) KT_NEAR(out[i], i, 0);
}

KT_TEST(transpose_then_reshape_copies) {
    kiln_tensor a = iota(KILN_SHAPE(3, 4));
    kiln_tensor t = kiln_transpose(a, 0, 1); /* [4,3], strides [1,4] */
    KT_CHECK(!kiln_tensor_is_contiguous(t));
    kiln_tensor r = kiln_reshape(t, KILN_SHAPE(12));
    double out[12];
    KT_CHECK(kiln_into_data(r, out, sizeof out) == KILN_OK);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) KT_NEAR(out[i * 3 + j], j * 4 + i, 0);
}

KT_TEST(reshape_of_a_split_view_stays_a_view) {
    kiln_tensor a = iota(KILN_SHAPE(2, 6));
    kiln_tensor t = kiln_transpose(a, 0, 1);           /* [6,2] strides [1,6] */
    uint64_t before = allocs();
    kiln_tensor r = kiln_reshape(t, KILN_SHAPE(3, 2, 2)); /* splits the stride-1 dim: viewable */
    KT_CHECK(allocs() == before);
    double out[12];
    KT_CHECK(kiln_into_data(r, out, sizeof out) == KILN_OK);
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 2; j++) KT_NEAR(out[i * 2 + j], j * 6 + i, 0);
}

KT_TEST(permute_and_contiguous) {
    kiln_tensor a = iota(KILN_SHAPE(2, 3, 4));
    kiln_tensor p = kiln_contiguous(kiln_permute(a, KILN_DIMS(2, 0, 1))); /* [4,2,3] */
    double out[24];
    KT_CHECK(kiln_into_data(p, out, sizeof out) == KILN_OK);
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++) KT_NEAR(out[(k * 2 + i) * 3 + j], i * 12 + j * 4 + k, 0);
}

KT_TEST(slice_narrow_with_steps_and_negatives) {
    kiln_tensor a = iota(KILN_SHAPE(10));
    kiln_tensor s = kiln_slice(kiln_ref(a), 0, -8, 100, 3); /* 2, 5, 8 */
    double out[3];
    KT_CHECK(kiln_tensor_dim(s, 0) == 3);
    KT_CHECK(kiln_into_data(s, out, sizeof out) == KILN_OK);
    KT_NEAR(out[0], 2, 0);
    KT_NEAR(out[2], 8, 0);
    kiln_tensor n = kiln_narrow(kiln_ref(a), 0, 7, 3);
    KT_CHECK(kiln_into_data(n, out, sizeof out) == KILN_OK);
    KT_NEAR(out[0], 7, 0);
    kiln_tensor empty = kiln_slice(kiln_ref(a), 0, 5, 2, 1);
    KT_CHECK(kiln_tensor_numel(empty) == 0);
    KT_CHECK(kiln_into_data(empty, NULL, 0) == KILN_OK);
    kiln_tensor bad = kiln_narrow(kiln_ref(a), 0, 8, 5);
    KT_CHECK(kiln_into_data(bad, out, sizeof out) == KILN_ERR_INDEX);
    kiln_tensor bad_step = kiln_slice(a, 0, 0, 5, 0);
    KT_CHECK(kiln_tensor_status(bad_step) == KILN_ERR_INVALID_ARGUMENT);
    kiln_release(bad_step);
}

KT_TEST(expand_squeeze_unsqueeze_flatten) {
    kiln_tensor a = iota(KILN_SHAPE(3, 1));
    kiln_tensor e = kiln_expand(a, KILN_SHAPE(2, 3, 4));
    double out[24];
    KT_CHECK(kiln_into_data(kiln_ref(e), out, sizeof out) == KILN_OK);
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++) KT_NEAR(out[(b * 3 + i) * 4 + j], i, 0);
    kiln_tensor f = kiln_flatten(e, 1, -1);
    KT_CHECK(kiln_tensor_dim(f, 0) == 2 && kiln_tensor_dim(f, 1) == 12);
    kiln_tensor u = kiln_unsqueeze(f, 0);
    KT_CHECK(kiln_tensor_ndim(u) == 3 && kiln_tensor_dim(u, 0) == 1);
    kiln_tensor s = kiln_squeeze(kiln_ref(u), 0);
    KT_CHECK(kiln_tensor_ndim(s) == 2);
    kiln_tensor bad = kiln_squeeze(u, 1); /* size 2: not squeezable */
    KT_CHECK(kiln_tensor_status(bad) == KILN_ERR_SHAPE);
    kiln_tensor bad_expand = kiln_expand(s, KILN_SHAPE(3, 12));
    KT_CHECK(kiln_tensor_status(bad_expand) == KILN_ERR_SHAPE);
    kiln_release(bad);
    kiln_release(bad_expand);
}

KT_TEST(bad_view_arguments) {
    kiln_tensor a = iota(KILN_SHAPE(2, 3));
    kiln_tensor p = kiln_permute(kiln_ref(a), KILN_DIMS(0, 0));
    KT_CHECK(kiln_tensor_status(p) == KILN_ERR_INVALID_ARGUMENT);
    kiln_tensor t = kiln_transpose(kiln_ref(a), 0, 5);
    KT_CHECK(kiln_tensor_status(t) == KILN_ERR_INVALID_ARGUMENT);
    kiln_tensor r = kiln_reshape(kiln_ref(a), KILN_SHAPE(-1, -1));
    KT_CHECK(kiln_tensor_status(r) == KILN_ERR_SHAPE);
    kiln_tensor big = kiln_reshape(a, (kiln_shape){9, {1}});
    KT_CHECK(kiln_tensor_status(big) == KILN_ERR_SHAPE);
    kiln_release(p);
    kiln_release(t);
    kiln_release(r);
    kiln_release(big);
}

KT_TEST(scalar_tensors) {
    kiln_tensor s = kiln_full(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE, 3.0);
    KT_CHECK(kiln_tensor_ndim(s) == 0 && kiln_tensor_numel(s) == 1);
    kiln_tensor r = kiln_reshape(s, KILN_SHAPE(1, 1));
    float v;
    KT_CHECK(kiln_into_scalar(r, &v) == KILN_OK);
    KT_NEAR(v, 3.0, 0);
}

int main(void) {
    uint64_t live = kiln_memory_stats_get(KILN_CPU).live_tensors;
    KT_RUN(reshape_is_a_view_when_dense);
    KT_RUN(transpose_then_reshape_copies);
    KT_RUN(reshape_of_a_split_view_stays_a_view);
    KT_RUN(permute_and_contiguous);
    KT_RUN(slice_narrow_with_steps_and_negatives);
    KT_RUN(expand_squeeze_unsqueeze_flatten);
    KT_RUN(bad_view_arguments);
    KT_RUN(scalar_tensors);
    KT_CHECK(kiln_memory_stats_get(KILN_CPU).live_tensors == live);
    KT_CHECK(kiln_memory_stats_get(KILN_CPU).bytes_in_use == 0);
    return kt_finish();
}
