/* kiln_meshgrid (ij and xy indexing, 0-d inputs, gradients summed over the repeated dims) and
 * kiln_unfold (torch.Tensor.unfold's windows along any dim, overlapping or strided, size 0,
 * gradients adding up where windows overlap), against references written from PyTorch's
 * definitions; bad input naming the op and this file's line; no leaks. */
#include "gradcheck.h"
#include "nn_util.h"

KT_TEST(meshgrid_values) {
    kt_mem_begin();
    const double xv[2] = {1, 2}, yv[3] = {10, 20, 30}, zv[4] = {-1, -2, -3, -4};
    for (int xy = 0; xy < 2; xy++) {
        kiln_tensor in[3] = {tensor_of(KILN_F32, KILN_SHAPE(2), xv), tensor_of(KILN_F32, KILN_SHAPE(3), yv),
                             tensor_of(KILN_F32, KILN_SHAPE(4), zv)};
        kiln_tensor out[3];
        KT_CHECK(kiln_meshgrid(in, 3, xy ? KILN_MESHGRID_XY : KILN_MESHGRID_IJ, out, 3) == 3);
        int64_t s0 = xy ? 3 : 2, s1 = xy ? 2 : 3;
        for (int k = 0; k < 3; k++) {
            KT_CHECK(has_shape(out[k], KILN_SHAPE(s0, s1, 4)));
            double v[24];
            if (!read_f64(out[k], v, 24)) continue;
            for (int a = 0; a < s0; a++)
                for (int b = 0; b < s1; b++)
                    for (int c = 0; c < 4; c++) {
                        int i = xy ? b : a, j = xy ? a : b; /* indices into x and y */
                        double want = k == 0 ? xv[i] : k == 1 ? yv[j] : zv[c];
                        KT_CHECK(v[(a * s1 + b) * 4 + c] == want);
                    }
        }
    }
    /* 0-d inputs count as size 1; a single input is itself */
    kiln_tensor in2[2] = {kiln_full(KILN_CPU, KILN_I64, KILN_SCALAR_SHAPE, 5), kiln_arange(KILN_CPU, KILN_I64, 0, 3, 1)};
    kiln_tensor out2[2];
    KT_CHECK(kiln_meshgrid(in2, 2, KILN_MESHGRID_IJ, out2, 2) == 2);
    KT_CHECK(has_shape(out2[0], KILN_SHAPE(1, 3)) && has_shape(out2[1], KILN_SHAPE(1, 3)));
    int64_t iv[3];
    KT_CHECK(kiln_into_data(out2[0], iv, sizeof iv) == KILN_OK && iv[0] == 5 && iv[2] == 5);
    KT_CHECK(kiln_into_data(out2[1], iv, sizeof iv) == KILN_OK && iv[0] == 0 && iv[2] == 2);
    kiln_tensor one = kiln_arange(KILN_CPU, KILN_F32, 0, 4, 1), o1;
    KT_CHECK(kiln_meshgrid(&one, 1, KILN_MESHGRID_XY, &o1, 1) == 1 && has_shape(o1, KILN_SHAPE(4)));
    kiln_release(o1);
    KT_MEM_CHECK();
}

typedef struct {
    int which;
    bool xy;
} mesh_case;

static kiln_tensor run_mesh(kiln_tensor *in, void *ctx) {
    const mesh_case *mc = ctx;
    kiln_tensor out[2];
    kiln_meshgrid(in, 2, mc->xy ? KILN_MESHGRID_XY : KILN_MESHGRID_IJ, out, 2);
    kiln_release(out[1 - mc->which]);
    return out[mc->which];
}

KT_TEST(meshgrid_gradients) {
    kt_mem_begin();
    for (int w = 0; w < 2; w++)
        for (int xy = 0; xy < 2; xy++) {
            mesh_case mc = {w, xy};
            GC_CHECK(xy ? "meshgrid xy" : "meshgrid ij", run_mesh, &mc, 2, ((kiln_shape[]){KILN_SHAPE(3), KILN_SHAPE(4)}), 1e-7);
        }
    KT_MEM_CHECK();
}

KT_TEST(meshgrid_bad_input) {
    kt_mem_begin();
    kiln_tensor out[3];
    kiln_tensor in[2] = {kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 2)), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3))};
    KT_CHECK(kiln_meshgrid(in, 2, KILN_MESHGRID_IJ, out, 3) == 2);
    KT_READ_ERROR(out[0], KILN_ERR_SHAPE, "kiln_meshgrid");
    KT_READ_ERROR(out[1], KILN_ERR_SHAPE, "kiln_meshgrid");
    kiln_tensor mixed[2] = {kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2)), kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE(3))};
    KT_CHECK(kiln_meshgrid(mixed, 2, KILN_MESHGRID_IJ, out, 2) == 2);
    KT_READ_ERROR(out[0], KILN_ERR_DTYPE, "kiln_meshgrid");
    kiln_release(out[1]);
    kiln_tensor few[2] = {kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2)), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3))};
    KT_CHECK(kiln_meshgrid(few, 2, KILN_MESHGRID_IJ, out, 1) == 1); /* out too small: one poisoned */
    KT_READ_ERROR(out[0], KILN_ERR_INVALID_ARGUMENT, "kiln_meshgrid");
    kiln_tensor bad_ix[1] = {kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2))};
    KT_CHECK(kiln_meshgrid(bad_ix, 1, (kiln_meshgrid_indexing)5, out, 1) == 1);
    KT_READ_ERROR(out[0], KILN_ERR_INVALID_ARGUMENT, "kiln_meshgrid");
    kiln_tensor lost[1] = {kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2))};
    KT_CHECK(kiln_meshgrid(lost, 1, KILN_MESHGRID_IJ, NULL, 1) == 0); KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_meshgrid", __LINE__);
    KT_CHECK(kiln_meshgrid(NULL, 1, KILN_MESHGRID_IJ, out, 1) == 1);
    KT_READ_ERROR(out[0], KILN_ERR_NULL, "kiln_meshgrid");
    KT_CHECK(kiln_meshgrid(in, 0, KILN_MESHGRID_IJ, out, 1) == 1);
    KT_READ_ERROR(out[0], KILN_ERR_INVALID_ARGUMENT, "kiln_meshgrid");
    KT_MEM_CHECK();
}

/* ---- unfold ---------------------------------------------------------------------------------- */

/* torch: out[..., w, ..., j] = x[..., w * step + j, ...] with the window's j last. */
static void unfold_case(int64_t d0, int64_t d1, int64_t d2, int dim_arg, int64_t size, int64_t step) {
    int dim = dim_arg < 0 ? dim_arg + 3 : dim_arg;
    int64_t shape[3] = {d0, d1, d2}, n = d0 * d1 * d2;
    double *x = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = (double)i;
    int64_t windows = (shape[dim] - size) / step + 1;
    int64_t os[4];
    for (int d = 0, k = 0; d < 3; d++) os[k++] = d == dim ? windows : shape[d];
    os[3] = size;
    kiln_tensor u = kiln_unfold(tensor_of(KILN_F64, KILN_SHAPE(d0, d1, d2), x), dim_arg, size, step);
    KT_CHECK_MSG(has_shape(u, KILN_SHAPE(os[0], os[1], os[2], os[3])), "unfold dim %d size %lld step %lld", dim,
                 (long long)size, (long long)step);
    int64_t m = os[0] * os[1] * os[2] * os[3];
    double *got = malloc(sizeof(double) * (size_t)(m ? m : 1));
    if (read_f64(u, got, m)) {
        int64_t k = 0;
        for (int64_t a = 0; a < os[0]; a++)
            for (int64_t b = 0; b < os[1]; b++)
                for (int64_t c = 0; c < os[2]; c++)
                    for (int64_t j = 0; j < size; j++, k++) {
                        int64_t idx[3] = {a, b, c};
                        idx[dim] = idx[dim] * step + j;
                        KT_CHECK(got[k] == x[(idx[0] * d1 + idx[1]) * d2 + idx[2]]);
                    }
    }
    free(got);
    free(x);
}

KT_TEST(unfold_values) {
    kt_mem_begin();
    unfold_case(2, 7, 3, 1, 3, 1);  /* overlapping */
    unfold_case(2, 7, 3, 1, 2, 3);  /* gaps */
    unfold_case(5, 2, 3, 0, 5, 2);  /* one window */
    unfold_case(2, 3, 6, -1, 2, 2); /* the last dim, negative */
    unfold_case(2, 3, 4, 2, 0, 1);  /* empty windows: 5 of them */
    /* torch.arange(7).unfold(0, 2, 2) */
    int64_t v[6];
    kiln_tensor u = kiln_unfold(kiln_arange(KILN_CPU, KILN_I64, 0, 7, 1), 0, 2, 2);
    KT_CHECK(has_shape(u, KILN_SHAPE(3, 2)));
    KT_CHECK(kiln_into_data(u, v, sizeof v) == KILN_OK && v[0] == 0 && v[1] == 1 && v[4] == 4 && v[5] == 5);
    KT_MEM_CHECK();
}

typedef struct {
    int dim;
    int64_t size, step;
} unfold_args;

static kiln_tensor run_unfold(kiln_tensor *in, void *ctx) {
    const unfold_args *a = ctx;
    return kiln_unfold(kiln_transpose(in[0], 0, 1), a->dim, a->size, a->step);
}

KT_TEST(unfold_gradients) {
    kt_mem_begin();
    unfold_args cases[3] = {{0, 3, 1}, {1, 2, 2}, {0, 4, 3}};
    for (int i = 0; i < 3; i++)
        GC_CHECK("unfold", run_unfold, &cases[i], 1, ((kiln_shape[]){KILN_SHAPE(4, 7)}), 1e-7);
    KT_MEM_CHECK();
}

KT_TEST(unfold_bad_input) {
    kt_mem_begin();
    kiln_tensor t = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3, 4));
    KT_READ_ERROR(kiln_unfold(kiln_ref(t), 1, 5, 1), KILN_ERR_INVALID_ARGUMENT, "kiln_unfold");
    KT_READ_ERROR(kiln_unfold(kiln_ref(t), 1, -1, 1), KILN_ERR_INVALID_ARGUMENT, "kiln_unfold");
    KT_READ_ERROR(kiln_unfold(kiln_ref(t), 1, 2, 0), KILN_ERR_INVALID_ARGUMENT, "kiln_unfold");
    KT_READ_ERROR(kiln_unfold(kiln_ref(t), 2, 2, 1), KILN_ERR_INVALID_ARGUMENT, "kiln_unfold");
    KT_READ_ERROR(kiln_unfold(kiln_zeros(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE), 0, 1, 1), KILN_ERR_SHAPE, "kiln_unfold");
    kiln_tensor stale = kiln_ref(t);
    kiln_release(stale);
    KT_READ_ERROR(kiln_unfold(stale, 0, 1, 1), KILN_ERR_STALE_HANDLE, "kiln_unfold");
    KT_READ_ERROR(kiln_unfold(kiln_reshape(kiln_ref(t), KILN_SHAPE(5)), 0, 1, 1), KILN_ERR_SHAPE, "kiln_reshape");
    kiln_release(t);
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(meshgrid_values);
    KT_RUN(meshgrid_gradients);
    KT_RUN(meshgrid_bad_input);
    KT_RUN(unfold_values);
    KT_RUN(unfold_gradients);
    KT_RUN(unfold_bad_input);
    return kt_finish();
}
