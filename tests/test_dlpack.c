/* DLPack out and in: zero-copy round trips, strided imports copied, the buffer kept from
 * in-place reuse while exported, deleters called once, and bad input. */
#include <dlpack/dlpack.h>
#include <kiln.h>
#include <kiln/dlpack.h>

#include "kiln_test.h"

static int deleted;
static void count_delete(DLManagedTensor *m) { deleted++, (void)m; }

KT_TEST(export_describes_the_buffer) {
    kiln_tensor x = kiln_reshape(kiln_arange(KILN_CPU, KILN_F32, 0, 6, 1), KILN_SHAPE(2, 3));
    DLManagedTensor *m = NULL;
    KT_CHECK(kiln_to_dlpack(kiln_transpose(kiln_ref(x), 0, 1), &m) == KILN_OK);
    KT_CHECK(m && m->dl_tensor.ndim == 2 && m->dl_tensor.shape[0] == 3 && m->dl_tensor.shape[1] == 2);
    KT_CHECK(m->dl_tensor.strides[0] == 1 && m->dl_tensor.strides[1] == 3);
    KT_CHECK(m->dl_tensor.dtype.code == kDLFloat && m->dl_tensor.dtype.bits == 32);
    const float *v = (const float *)((const char *)m->dl_tensor.data + m->dl_tensor.byte_offset);
    KT_NEAR(v[1 * 1 + 0 * 3], 1.0, 0); /* element [1][0] of the transpose is x[0][1] */
    KT_NEAR(v[2 * 1 + 1 * 3], 5.0, 0);
    /* while exported, an op consuming x's last handle must not write the shared buffer */
    uint64_t reuses = kiln_memory_stats_get(KILN_CPU).inplace_reuses;
    kiln_tensor y = kiln_add_scalar(x, 100);
    float out[6];
    KT_CHECK(kiln_into_data(y, out, sizeof out) == KILN_OK);
    KT_NEAR(out[5], 105.0, 0);
    KT_CHECK(kiln_memory_stats_get(KILN_CPU).inplace_reuses == reuses);
    KT_NEAR(v[2 + 3], 5.0, 0);
    m->deleter(m);
}

KT_TEST(round_trip_without_copy) {
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F64, KILN_SHAPE(4, 5), 3);
    double want[20], got[20];
    KT_CHECK(kiln_into_data(kiln_ref(x), want, sizeof want) == KILN_OK);
    DLManagedTensor *m = NULL;
    KT_CHECK(kiln_to_dlpack(x, &m) == KILN_OK);
    void *data = m->dl_tensor.data;
    kiln_tensor y = kiln_from_dlpack(m);
    KT_CHECK(kiln_tensor_dtype(y) == KILN_F64 && kiln_tensor_dim(y, 1) == 5);
    KT_CHECK(kiln_into_data(kiln_exp(kiln_ref(y)), got, sizeof got) == KILN_OK);
    KT_NEAR(got[7], exp(want[7]), 1e-12);
    KT_CHECK(m->dl_tensor.data == data);
    KT_CHECK(kiln_release(y) == KILN_OK); /* the deleter runs once nothing uses it */
    KT_CHECK(kiln_sync() == KILN_OK);
}

KT_TEST(import_strided_copies_and_deletes) {
    int32_t buf[6] = {0, 1, 2, 3, 4, 5};
    int64_t shape[2] = {3, 2}, strides[2] = {1, 3}; /* the transpose of a [2, 3] row-major */
    DLManagedTensor m = {.dl_tensor = {.data = buf, .device = {kDLCPU, 0}, .ndim = 2, .dtype = {kDLInt, 32, 1},
                                       .shape = shape, .strides = strides},
                         .deleter = count_delete};
    deleted = 0;
    kiln_tensor t = kiln_from_dlpack(&m);
    KT_CHECK(deleted == 1); /* copied: given back at once */
    int32_t out[6];
    KT_CHECK(kiln_into_data(t, out, sizeof out) == KILN_OK);
    KT_CHECK(out[0] == 0 && out[1] == 3 && out[2] == 1 && out[5] == 5);
    /* dense: borrowed, deleted once released */
    int64_t dense_shape[1] = {6};
    DLManagedTensor d = {.dl_tensor = {.data = buf, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLInt, 32, 1},
                                       .shape = dense_shape},
                         .deleter = count_delete};
    deleted = 0;
    kiln_tensor b = kiln_from_dlpack(&d);
    KT_CHECK(deleted == 0);
    kiln_tensor s = kiln_sum(b);
    int64_t total;
    KT_CHECK(kiln_into_data(s, &total, sizeof total) == KILN_OK && total == 15);
    KT_CHECK(kiln_sync() == KILN_OK);
    KT_CHECK(deleted == 1);
}

KT_TEST(bad_input) {
    DLManagedTensor *m = (DLManagedTensor *)1;
    KT_CHECK(kiln_to_dlpack(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2)), NULL) == KILN_ERR_NULL);
    KT_CHECK(kiln_to_dlpack(kiln_reshape(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2)), KILN_SHAPE(3)), &m) == KILN_ERR_SHAPE);
    KT_CHECK(m == NULL);
    kiln_tensor gone = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2));
    kiln_release(gone);
    KT_CHECK(kiln_to_dlpack(gone, &m) == KILN_ERR_STALE_HANDLE);
    KT_READ_ERROR(kiln_from_dlpack(NULL), KILN_ERR_NULL, "kiln_from_dlpack");
    float f[2] = {1, 2};
    int64_t shape[1] = {2}, bad_shape[1] = {-4};
    DLManagedTensor d = {.dl_tensor = {.data = f, .device = {kDLCUDA, 0}, .ndim = 1, .dtype = {kDLFloat, 32, 1}, .shape = shape},
                         .deleter = count_delete};
    deleted = 0;
    KT_READ_ERROR(kiln_from_dlpack(&d), KILN_ERR_DEVICE, "kiln_from_dlpack");
    d.dl_tensor.device.device_type = kDLCPU;
    d.dl_tensor.dtype = (DLDataType){kDLFloat, 32, 4};
    KT_READ_ERROR(kiln_from_dlpack(&d), KILN_ERR_DTYPE, "kiln_from_dlpack");
    d.dl_tensor.dtype = (DLDataType){kDLComplex, 64, 1};
    KT_READ_ERROR(kiln_from_dlpack(&d), KILN_ERR_DTYPE, "kiln_from_dlpack");
    d.dl_tensor.dtype = (DLDataType){kDLFloat, 32, 1};
    d.dl_tensor.ndim = 9;
    KT_READ_ERROR(kiln_from_dlpack(&d), KILN_ERR_SHAPE, "kiln_from_dlpack");
    d.dl_tensor.ndim = 1;
    d.dl_tensor.shape = bad_shape;
    KT_READ_ERROR(kiln_from_dlpack(&d), KILN_ERR_SHAPE, "kiln_from_dlpack");
    d.dl_tensor.shape = shape;
    d.dl_tensor.data = NULL;
    KT_READ_ERROR(kiln_from_dlpack(&d), KILN_ERR_NULL, "kiln_from_dlpack");
    KT_CHECK(deleted == 0); /* on failure the struct stays the caller's */
    KT_CHECK(kiln_to_dlpack(kiln_zeros(KILN_OPENCL, KILN_F32, KILN_SHAPE(2)), &m) != KILN_OK);
    kiln_sync();
}

int main(void) {
    KT_RUN(export_describes_the_buffer);
    KT_RUN(round_trip_without_copy);
    KT_RUN(import_strided_copies_and_deletes);
    KT_RUN(bad_input);
    return kt_finish();
}
