/* kiln_dot, kiln_outer, kiln_bmm and kiln_addmm against double references written from
 * PyTorch's definitions (addmm's beta 0 ignoring NaN in input, broadcast inputs), their
 * finite-difference gradients, and bad shapes, dtypes and handles naming the op and this
 * file's line (no leaks). */
#include "gradcheck.h"
#include "nn_util.h"

KT_TEST(products_match_reference) {
    kt_mem_begin();
    double a[12], b[12], got[64];
    fill(a, 12, -2, 2);
    fill(b, 12, -2, 2);
    double dot = 0;
    for (int i = 0; i < 5; i++) dot += a[i] * b[i];
    KT_NEAR(read_scalar(kiln_dot(tensor_of(KILN_F64, KILN_SHAPE(5), a), tensor_of(KILN_F64, KILN_SHAPE(5), b))), dot, 1e-12);
    KT_NEAR(read_scalar(kiln_dot(tensor_of(KILN_F32, KILN_SHAPE(5), a), tensor_of(KILN_F32, KILN_SHAPE(5), b))), dot, 1e-5);
    kiln_tensor o = kiln_outer(tensor_of(KILN_F64, KILN_SHAPE(3), a), tensor_of(KILN_F64, KILN_SHAPE(4), b));
    KT_CHECK(has_shape(o, KILN_SHAPE(3, 4)));
    if (read_f64(o, got, 12))
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++) KT_CHECK(got[i * 4 + j] == a[i] * b[j]);
    int64_t ia[3] = {1, 2, 3}, ib[2] = {4, 5}, io[6];
    KT_CHECK(kiln_into_data(kiln_outer(kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(3), ia), kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(2), ib)),
                            io, sizeof io) == KILN_OK && io[0] == 4 && io[5] == 15);
    /* bmm [2, 3, 2] @ [2, 2, 3] */
    kiln_tensor p = kiln_bmm(tensor_of(KILN_F64, KILN_SHAPE(2, 3, 2), a), tensor_of(KILN_F64, KILN_SHAPE(2, 2, 3), b));
    KT_CHECK(has_shape(p, KILN_SHAPE(2, 3, 3)));
    if (read_f64(p, got, 18))
        for (int bt = 0; bt < 2; bt++)
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 3; j++) {
                    double s = 0;
                    for (int k = 0; k < 2; k++) s += a[bt * 6 + i * 2 + k] * b[bt * 6 + k * 3 + j];
                    KT_NEAR(got[bt * 9 + i * 3 + j], s, 1e-12);
                }
    /* addmm: beta * input + alpha * m1 @ m2 with input [3, 4], [4], [3, 1] and 0-d */
    double in[12];
    fill(in, 12, -1, 1);
    const kiln_shape ins[4] = {KILN_SHAPE(3, 4), KILN_SHAPE(4), KILN_SHAPE(3, 1), KILN_SCALAR_SHAPE};
    for (int k = 0; k < 4; k++) {
        kiln_tensor r = kiln_addmm(tensor_of(KILN_F64, ins[k], in), tensor_of(KILN_F64, KILN_SHAPE(3, 2), a),
                                   tensor_of(KILN_F64, KILN_SHAPE(2, 4), b), 0.5, -2.0);
        KT_CHECK(has_shape(r, KILN_SHAPE(3, 4)));
        if (!read_f64(r, got, 12)) continue;
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++) {
                double mm = a[i * 2] * b[j] + a[i * 2 + 1] * b[4 + j];
                double x = k == 0 ? in[i * 4 + j] : k == 1 ? in[j] : k == 2 ? in[i] : in[0];
                KT_NEAR(got[i * 4 + j], 0.5 * x + -2.0 * mm, 1e-12);
            }
    }
    /* beta 0: input ignored, NaN included */
    double nan_in[12];
    for (int i = 0; i < 12; i++) nan_in[i] = NAN;
    if (read_f64(kiln_addmm(tensor_of(KILN_F64, KILN_SHAPE(3, 4), nan_in), tensor_of(KILN_F64, KILN_SHAPE(3, 2), a),
                            tensor_of(KILN_F64, KILN_SHAPE(2, 4), b), 0.0, 1.0), got, 12))
        for (int i = 0; i < 12; i++) KT_CHECK(isfinite(got[i]));
    KT_MEM_CHECK();
}

static kiln_tensor run_dot(kiln_tensor *in, void *ctx) { return (void)ctx, kiln_dot(in[0], in[1]); }
static kiln_tensor run_outer(kiln_tensor *in, void *ctx) { return (void)ctx, kiln_outer(in[0], in[1]); }
static kiln_tensor run_bmm(kiln_tensor *in, void *ctx) { return (void)ctx, kiln_bmm(in[0], kiln_transpose(in[1], 1, 2)); }
static kiln_tensor run_addmm(kiln_tensor *in, void *ctx) { return (void)ctx, kiln_addmm(in[0], in[1], in[2], 0.7, 1.3); }

KT_TEST(product_gradients) {
    kt_mem_begin();
    GC_CHECK("dot", run_dot, NULL, 2, ((kiln_shape[]){KILN_SHAPE(5), KILN_SHAPE(5)}), 1e-7);
    GC_CHECK("outer", run_outer, NULL, 2, ((kiln_shape[]){KILN_SHAPE(3), KILN_SHAPE(4)}), 1e-7);
    GC_CHECK("bmm", run_bmm, NULL, 2, ((kiln_shape[]){KILN_SHAPE(2, 3, 4), KILN_SHAPE(2, 5, 4)}), 1e-7);
    GC_CHECK("addmm", run_addmm, NULL, 3, ((kiln_shape[]){KILN_SHAPE(4), KILN_SHAPE(3, 2), KILN_SHAPE(2, 4)}), 1e-7);
    KT_MEM_CHECK();
}

KT_TEST(product_bad_input) {
    kt_mem_begin();
    kiln_tensor v3 = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3)), v4 = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4));
    kiln_tensor m = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3, 4));
    KT_READ_ERROR(kiln_dot(kiln_ref(v3), kiln_ref(v4)), KILN_ERR_SHAPE, "kiln_dot");
    KT_READ_ERROR(kiln_dot(kiln_ref(m), kiln_ref(v4)), KILN_ERR_SHAPE, "kiln_dot");
    KT_READ_ERROR(kiln_dot(kiln_ref(v3), kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE(3))), KILN_ERR_DTYPE, "kiln_dot");
    KT_READ_ERROR(kiln_outer(kiln_ref(m), kiln_ref(v4)), KILN_ERR_SHAPE, "kiln_outer");
    KT_READ_ERROR(kiln_bmm(kiln_ref(m), kiln_ref(m)), KILN_ERR_SHAPE, "kiln_bmm");
    KT_READ_ERROR(kiln_bmm(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3, 4)), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3, 4, 2))),
                  KILN_ERR_SHAPE, "kiln_bmm"); /* batch sizes differ: no broadcasting */
    KT_READ_ERROR(kiln_bmm(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3, 4)), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3, 2))),
                  KILN_ERR_SHAPE, "kiln_bmm");
    KT_READ_ERROR(kiln_addmm(kiln_ref(v3), kiln_ref(m), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4, 2)), 1, 1), KILN_ERR_SHAPE,
                  "kiln_addmm"); /* input [3] does not broadcast to [3, 2] */
    KT_READ_ERROR(kiln_addmm(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(1, 3, 2)), kiln_ref(m), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4, 2)), 1, 1),
                  KILN_ERR_SHAPE, "kiln_addmm");
    KT_READ_ERROR(kiln_addmm(kiln_ref(v4), kiln_ref(m), kiln_ref(m), 1, 1), KILN_ERR_SHAPE, "kiln_addmm");
    KT_READ_ERROR(kiln_addmm(kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE(2)), kiln_ref(m), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4, 2)), 1, 1),
                  KILN_ERR_DTYPE, "kiln_addmm");
    KT_READ_ERROR(kiln_addmm(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2)), kiln_ref(m), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4, 2)), NAN, 1),
                  KILN_ERR_INVALID_ARGUMENT, "kiln_addmm");
    kiln_tensor stale = kiln_ref(v3);
    kiln_release(stale);
    KT_READ_ERROR(kiln_outer(stale, kiln_ref(v4)), KILN_ERR_STALE_HANDLE, "kiln_outer");
    KT_READ_ERROR(kiln_addmm(kiln_ref(v4), stale, kiln_ref(m), 1, 1), KILN_ERR_STALE_HANDLE, "kiln_addmm");
    /* a poisoned input's own error comes through */
    KT_READ_ERROR(kiln_dot(kiln_reshape(kiln_ref(v4), KILN_SHAPE(5)), kiln_ref(v4)), KILN_ERR_SHAPE, "kiln_reshape");
    KT_READ_ERROR(kiln_bmm(kiln_ref(m), kiln_reshape(kiln_ref(m), KILN_SHAPE(7))), KILN_ERR_SHAPE, "kiln_reshape");
    kiln_release(v3);
    kiln_release(v4);
    kiln_release(m);
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(products_match_reference);
    KT_RUN(product_gradients);
    KT_RUN(product_bad_input);
    return kt_finish();
}
