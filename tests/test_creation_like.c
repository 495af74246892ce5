/* kiln_empty, the *_like creations and kiln_clone: shapes, dtypes and values as PyTorch's
 * (a like of a view is dense; the result never tracks a gradient), clone's own storage (an
 * optimizer step on the original does not show in the clone) and its identity gradient, and
 * bad input naming the op and this file's line (no leaks). */
#include "gradcheck.h"
#include "nn_util.h"

KT_TEST(empty_and_likes) {
    kt_mem_begin();
    kiln_tensor e = kiln_empty(KILN_CPU, KILN_I32, KILN_SHAPE(2, 3));
    KT_CHECK(has_shape(e, KILN_SHAPE(2, 3)) && kiln_tensor_dtype(e) == KILN_I32);
    KT_CHECK(kiln_sync() == KILN_OK);
    kiln_release(e);
    /* from a transposed f64 view: dense results of its shape */
    kiln_tensor src = kiln_transpose(kiln_arange(KILN_CPU, KILN_F64, 0, 6, 1), 0, 0);
    src = kiln_transpose(kiln_reshape(src, KILN_SHAPE(2, 3)), 0, 1); /* [3, 2] */
    double v[6];
    kiln_tensor z = kiln_zeros_like(kiln_ref(src)), o = kiln_ones_like(kiln_ref(src));
    kiln_tensor f = kiln_full_like(kiln_ref(src), -2.5), el = kiln_empty_like(kiln_ref(src));
    KT_CHECK(has_shape(z, KILN_SHAPE(3, 2)) && kiln_tensor_dtype(z) == KILN_F64);
    KT_CHECK(has_shape(el, KILN_SHAPE(3, 2)) && kiln_tensor_dtype(el) == KILN_F64);
    kiln_release(el);
    if (read_f64(z, v, 6))
        for (int i = 0; i < 6; i++) KT_CHECK(v[i] == 0);
    if (read_f64(o, v, 6))
        for (int i = 0; i < 6; i++) KT_CHECK(v[i] == 1);
    if (read_f64(f, v, 6))
        for (int i = 0; i < 6; i++) KT_CHECK(v[i] == -2.5);
    /* random likes: the seeded op's values, t's shape and dtype */
    kiln_tensor r = kiln_rand_like(kiln_ref(src), 7), rn = kiln_randn_like(kiln_ref(src), 7);
    double a[6], b[6];
    if (read_f64(r, a, 6) && read_f64(kiln_rand(KILN_CPU, KILN_F64, KILN_SHAPE(3, 2), 7), b, 6))
        for (int i = 0; i < 6; i++) KT_CHECK(a[i] == b[i] && a[i] >= 0 && a[i] < 1);
    if (read_f64(rn, a, 6) && read_f64(kiln_randn(KILN_CPU, KILN_F64, KILN_SHAPE(3, 2), 7), b, 6))
        for (int i = 0; i < 6; i++) KT_CHECK(a[i] == b[i]);
    /* ints and bools */
    kiln_tensor bi = kiln_full_like(kiln_zeros(KILN_CPU, KILN_BOOL, KILN_SHAPE(4)), 1);
    KT_CHECK(kiln_tensor_dtype(bi) == KILN_BOOL);
    bool bv[4];
    KT_CHECK(kiln_into_data(bi, bv, sizeof bv) == KILN_OK && bv[0] && bv[3]);
    /* a like of a tracked tensor does not track */
    kiln_tensor w = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2));
    kiln_require_grad(w);
    kiln_tensor zw = kiln_zeros_like(kiln_ref(w));
    KT_CHECK(!kiln_requires_grad(zw));
    kiln_release(zw);
    kiln_release(w);
    kiln_release(src);
    KT_MEM_CHECK();
}

KT_TEST(like_bad_input) {
    kt_mem_begin();
    kiln_tensor t = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2));
    kiln_tensor stale = kiln_ref(t);
    kiln_release(stale);
    KT_READ_ERROR(kiln_zeros_like(stale), KILN_ERR_STALE_HANDLE, "kiln_zeros_like");
    KT_READ_ERROR(kiln_clone(stale), KILN_ERR_STALE_HANDLE, "kiln_clone");
    /* a poisoned input's own error comes through */
    kiln_tensor bad = kiln_reshape(kiln_ref(t), KILN_SHAPE(5));
    KT_READ_ERROR(kiln_ones_like(bad), KILN_ERR_SHAPE, "kiln_reshape");
    KT_READ_ERROR(kiln_rand_like(kiln_zeros(KILN_CPU, KILN_I32, KILN_SHAPE(2)), 1), KILN_ERR_DTYPE, "kiln_rand_like");
    KT_READ_ERROR(kiln_randn_like(kiln_zeros(KILN_CPU, KILN_BOOL, KILN_SHAPE(2)), 1), KILN_ERR_DTYPE, "kiln_randn_like");
    KT_READ_ERROR(kiln_empty(KILN_CPU, (kiln_dtype)99, KILN_SHAPE(2)), KILN_ERR_DTYPE, "kiln_empty");
    KT_READ_ERROR(kiln_empty(KILN_CPU, KILN_F32, KILN_SHAPE(-1)), KILN_ERR_SHAPE, "kiln_empty");
    KT_READ_ERROR(kiln_empty(KILN_CPU, KILN_F32, KILN_SHAPE(INT64_MAX / 2, 4)), KILN_ERR_OUT_OF_MEMORY, "kiln_empty");
    kiln_release(t);
    KT_MEM_CHECK();
}

KT_TEST(clone_copies) {
    kt_mem_begin();
    /* a clone of a view is dense and equal */
    kiln_tensor m = kiln_reshape(kiln_arange(KILN_CPU, KILN_I64, 0, 6, 1), KILN_SHAPE(2, 3));
    kiln_tensor cl = kiln_clone(kiln_transpose(kiln_ref(m), 0, 1));
    KT_CHECK(has_shape(cl, KILN_SHAPE(3, 2)) && kiln_tensor_dtype(cl) == KILN_I64);
    int64_t got[6];
    KT_CHECK(kiln_into_data(cl, got, sizeof got) == KILN_OK);
    const int64_t want[6] = {0, 3, 1, 4, 2, 5};
    for (int i = 0; i < 6; i++) KT_CHECK(got[i] == want[i]);
    kiln_release(m);
    /* a clone keeps its values when the original is updated in place by an optimizer */
    kiln_tensor w = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3));
    kiln_require_grad(w);
    kiln_tensor before = kiln_clone(kiln_detach(kiln_ref(w)));
    kiln_tensor before_tracked = kiln_clone(kiln_ref(w)); /* the tracked path */
    kiln_param_group g = kiln_param_group_of(1, &w);
    kiln_sgd_options so = kiln_sgd_defaults();
    so.lr = 0.5;
    kiln_optimizer *opt = kiln_sgd_new_groups(1, &g, so);
    kiln_grads *gr = NULL;
    KT_CHECK(kiln_backward(kiln_sum(kiln_ref(w)), &gr) == KILN_OK);
    KT_CHECK(kiln_optimizer_step(opt, gr) == KILN_OK);
    kiln_grads_free(gr);
    double a[3], b[3], c[3];
    if (read_f64(kiln_detach(kiln_ref(w)), a, 3) && read_f64(before, b, 3) && read_f64(kiln_detach(before_tracked), c, 3))
        for (int i = 0; i < 3; i++) KT_CHECK(a[i] == 0.5 && b[i] == 1 && c[i] == 1);
    kiln_optimizer_free(opt);
    kiln_release(w);
    /* NaN, -0 and infinities survive */
    double special[4] = {NAN, -0.0, INFINITY, -INFINITY}, out[4];
    if (read_f64(kiln_clone(tensor_of(KILN_F64, KILN_SHAPE(4), special)), out, 4))
        KT_CHECK(isnan(out[0]) && out[1] == 0 && signbit(out[1]) && out[2] == INFINITY && out[3] == -INFINITY);
    KT_MEM_CHECK();
}

static kiln_tensor run_clone(kiln_tensor *in, void *ctx) {
    (void)ctx;
    return kiln_mul(kiln_clone(kiln_transpose(in[0], 0, 1)), kiln_full(KILN_CPU, KILN_F64, KILN_SHAPE(3, 2), 3.0));
}

KT_TEST(clone_gradient) {
    kt_mem_begin();
    GC_CHECK("clone", run_clone, NULL, 1, ((kiln_shape[]){KILN_SHAPE(2, 3)}), 1e-7);
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(empty_and_likes);
    KT_RUN(like_bad_input);
    KT_RUN(clone_copies);
    KT_RUN(clone_gradient);
    return kt_finish();
}
