/* masked_fill (torch.Tensor.masked_fill) against a double reference: every dtype, masks that
 * broadcast (fewer dims, size-1 dims, 0-d), strided and permuted inputs, infinite and NaN fill
 * values, in-place reuse only of an unshared x, finite-difference gradients (zero where filled,
 * none for the mask, also when the mask comes from a tracked comparison), bad input, leaks. */
#include "gradcheck.h"
#include "nd_layout.h"

/* x of shape sx (layout lx, dtype d) filled with value where a random mask of shape sm holds. */
static void check_fill(kiln_dtype d, kiln_shape sx, nd_layout lx, kiln_shape sm, double value) {
    int64_t nx = kiln_shape_numel(sx), nm = kiln_shape_numel(sm);
    double *vx = malloc(sizeof(double) * (size_t)(nx + 1)), *vm = malloc(sizeof(double) * (size_t)(nm + 1));
    double *want = malloc(sizeof(double) * (size_t)(nx + 1));
    ew_values(vx, nx, d, -50, 50);
    ew_values(vm, nm, KILN_BOOL, 0, 1);
    double filled = ew_round(d, value);
    for (int64_t i = 0; i < nx; i++) want[i] = vm[ew_source_index(sm, sx, i)] != 0 ? filled : vx[i];
    kiln_tensor y = kiln_masked_fill(nd_make(d, sx, vx, lx), ew_tensor(KILN_BOOL, sm, vm), value);
    kiln_shape ys = kiln_tensor_shape(y);
    KT_CHECK(ys.ndim == sx.ndim && memcmp(ys.dims, sx.dims, sizeof(int64_t) * (size_t)sx.ndim) == 0);
    double *got = ew_read(y, d, nx);
    char label[128];
    snprintf(label, sizeof label, "masked_fill %s[%s] x%d-d mask%d-d value %g", kiln_dtype_name(d), nd_layout_names[lx],
             sx.ndim, sm.ndim, value);
    if (got) EW_EXPECT_CLOSE(label, got, want, nx, 0, 0);
    free(got);
    free(vx);
    free(vm);
    free(want);
}

KT_TEST(masked_fill_every_dtype_layout_and_broadcast) {
    kt_mem_begin();
    const struct {
        kiln_shape x, mask;
    } cases[] = {
        {KILN_SHAPE(5, 7), KILN_SHAPE(5, 7)},       {KILN_SHAPE(3, 5, 7), KILN_SHAPE(7)},
        {KILN_SHAPE(3, 5, 7), KILN_SHAPE(5, 1)},    {KILN_SHAPE(2, 3, 1, 5), KILN_SHAPE(2, 1, 1, 5)},
        {KILN_SHAPE(4, 6), KILN_SCALAR_SHAPE},      {KILN_SHAPE(0, 3), KILN_SHAPE(3)},
        {KILN_SHAPE(3), KILN_SHAPE(1)},             {KILN_SCALAR_SHAPE, KILN_SCALAR_SHAPE},
        {KILN_SHAPE(3, 40001), KILN_SHAPE(1, 40001)},
    };
    for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++)
        for (int i = 0; i < EW_NDTYPES; i++)
            for (int l = 0; l < ND_NLAYOUTS; l++) check_fill(ew_dtypes[i], cases[k].x, (nd_layout)l, cases[k].mask, -3.0);
    const kiln_dtype floats[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16};
    for (int i = 0; i < 4; i++) {
        check_fill(floats[i], KILN_SHAPE(4, 9), ND_TRANSPOSED, KILN_SHAPE(9), -INFINITY);
        check_fill(floats[i], KILN_SHAPE(4, 9), ND_DENSE, KILN_SHAPE(4, 1), NAN);
        check_fill(floats[i], KILN_SHAPE(4, 9), ND_STRIDED, KILN_SHAPE(4, 9), 0.3);
    }
    check_fill(KILN_I32, KILN_SHAPE(6), ND_DENSE, KILN_SHAPE(6), 2.9);   /* truncated, as torch */
    check_fill(KILN_I64, KILN_SHAPE(6), ND_DENSE, KILN_SHAPE(6), -2.9);
    check_fill(KILN_BOOL, KILN_SHAPE(6), ND_DENSE, KILN_SHAPE(6), 0.0);
    KT_MEM_CHECK();
}

static kiln_memory_stats stats(void) { return kiln_memory_stats_get(KILN_CPU); }

KT_TEST(masked_fill_in_place_only_when_x_is_unshared) {
    kt_mem_begin();
    const float xv[] = {1, 2, 3, 4};
    const uint8_t mv[] = {0, 1, 1, 0};
    const float want[] = {1, 9, 9, 4};
    float got[4], kept[4];
    kiln_tensor x = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(4), xv);
    kiln_tensor m = kiln_from_data(KILN_CPU, KILN_BOOL, KILN_SHAPE(4), mv);
    kiln_memory_stats s0 = stats();
    kiln_tensor y = kiln_masked_fill(x, kiln_ref(m), 9.0);
    KT_CHECK(stats().alloc_count == s0.alloc_count && stats().inplace_reuses == s0.inplace_reuses + 1);
    KT_CHECK(kiln_into_data(y, got, sizeof got) == KILN_OK && memcmp(got, want, sizeof got) == 0);
    x = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(4), xv);
    y = kiln_masked_fill(kiln_ref(x), m, 9.0); /* x is still held: a new buffer */
    KT_CHECK(kiln_into_data(y, got, sizeof got) == KILN_OK && memcmp(got, want, sizeof got) == 0);
    KT_CHECK(kiln_into_data(x, kept, sizeof kept) == KILN_OK && memcmp(kept, xv, sizeof kept) == 0);
    KT_MEM_CHECK();
}

/* ---- gradients -------------------------------------------------------------------------- */

typedef struct {
    kiln_shape mask;
    bool transpose; /* run on a transposed (non-contiguous) view of the input */
} fill_case;

static kiln_tensor fill_fn(kiln_tensor *in, void *ctx) {
    const fill_case *fc = ctx;
    kiln_tensor x = fc->transpose ? kiln_transpose(in[0], -1, -2) : in[0];
    kiln_tensor m = kiln_lt_scalar(kiln_rand(KILN_CPU, KILN_F32, fc->mask, 77), 0.5);
    return kiln_masked_fill(x, m, 2.5);
}

/* a mask computed from x itself by a tracked comparison: relu written as a fill */
static kiln_tensor self_mask_fn(kiln_tensor *in, void *ctx) {
    (void)ctx;
    kiln_tensor negative = kiln_lt_scalar(kiln_ref(in[0]), 0.0);
    return kiln_masked_fill(in[0], negative, 0.0);
}

KT_TEST(masked_fill_gradient) {
    kt_mem_begin();
    fill_case same = {KILN_SHAPE(3, 4, 5), false}, row = {KILN_SHAPE(1, 5), false}, t = {KILN_SHAPE(4, 1), true};
    GC_CHECK("masked_fill", fill_fn, &same, 1, ((kiln_shape[]){KILN_SHAPE(3, 4, 5)}), 1e-6);
    GC_CHECK("masked_fill broadcast mask", fill_fn, &row, 1, ((kiln_shape[]){KILN_SHAPE(3, 4, 5)}), 1e-6);
    GC_CHECK("masked_fill transposed x", fill_fn, &t, 1, ((kiln_shape[]){KILN_SHAPE(2, 5, 4)}), 1e-6);
    GC_CHECK("masked_fill tracked mask", self_mask_fn, NULL, 1, ((kiln_shape[]){KILN_SHAPE(7, 3)}), 1e-6);
    /* exactly zero where filled, exactly the incoming gradient elsewhere */
    const double xv[] = {1, 2, 3, 4};
    const uint8_t mv[] = {1, 0, 0, 1};
    kiln_tensor x = kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(4), xv);
    kiln_require_grad(x);
    kiln_tensor y = kiln_masked_fill(kiln_ref(x), kiln_from_data(KILN_CPU, KILN_BOOL, KILN_SHAPE(4), mv), -INFINITY);
    kiln_tensor loss = kiln_sum(kiln_mul_scalar(kiln_exp(y), 3.0));
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(loss, &g) == KILN_OK);
    double gx[4];
    KT_CHECK(kiln_into_data(kiln_grad(g, x), gx, sizeof gx) == KILN_OK);
    KT_CHECK(gx[0] == 0 && gx[3] == 0 && gx[1] == 3 * exp(2.0) && gx[2] == 3 * exp(3.0));
    kiln_grads_free(g);
    kiln_release(x);
    KT_MEM_CHECK();
}

/* ---- bad input -------------------------------------------------------------------------------- */

static kiln_tensor zeros(kiln_dtype d, kiln_shape s) { return kiln_zeros(KILN_CPU, d, s); }

KT_TEST(masked_fill_bad_input) {
    kt_mem_begin();
    int line;
    kiln_tensor y;
    y = kiln_masked_fill(zeros(KILN_F32, KILN_SHAPE(3, 5)), zeros(KILN_F32, KILN_SHAPE(3, 5)), 1.0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_DTYPE, "kiln_masked_fill", line);
    y = kiln_masked_fill(zeros(KILN_F32, KILN_SHAPE(3, 5)), zeros(KILN_I32, KILN_SHAPE(5)), 1.0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_DTYPE, "kiln_masked_fill", line);
    y = kiln_masked_fill(zeros(KILN_F32, KILN_SHAPE(3, 5)), zeros(KILN_BOOL, KILN_SHAPE(4)), 1.0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_SHAPE, "kiln_masked_fill", line);
    /* a mask may not grow x: torch refuses to broadcast x to the mask */
    y = kiln_masked_fill(zeros(KILN_F32, KILN_SHAPE(3, 5)), zeros(KILN_BOOL, KILN_SHAPE(2, 3, 5)), 1.0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_SHAPE, "kiln_masked_fill", line);
    y = kiln_masked_fill(zeros(KILN_F32, KILN_SHAPE(3, 1)), zeros(KILN_BOOL, KILN_SHAPE(3, 5)), 1.0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_SHAPE, "kiln_masked_fill", line);
    y = kiln_masked_fill(zeros(KILN_I32, KILN_SHAPE(2)), zeros(KILN_BOOL, KILN_SHAPE(2)), 0x1p40), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_INVALID_ARGUMENT, "kiln_masked_fill", line);
    y = kiln_masked_fill(zeros(KILN_I64, KILN_SHAPE(2)), zeros(KILN_BOOL, KILN_SHAPE(2)), NAN), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_INVALID_ARGUMENT, "kiln_masked_fill", line);
    y = kiln_masked_fill(ew_stale(), zeros(KILN_BOOL, KILN_SHAPE(2)), 1.0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_STALE_HANDLE, "kiln_masked_fill", line);
    y = kiln_masked_fill(zeros(KILN_F32, KILN_SHAPE(2)), ew_stale(), 1.0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_STALE_HANDLE, "kiln_masked_fill", line);
    y = kiln_masked_fill(zeros(KILN_F32, KILN_SHAPE(2)), KILN_NONE, 1.0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_NULL, "kiln_masked_fill", line);
    y = kiln_masked_fill(KILN_NONE, zeros(KILN_BOOL, KILN_SHAPE(2)), 1.0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_NULL, "kiln_masked_fill", line);
    /* a poisoned input carries its own error through */
    kiln_tensor bad = EW_POISONED();
    line = __LINE__ - 1;
    y = kiln_masked_fill(bad, zeros(KILN_BOOL, KILN_SHAPE(3)), 1.0);
    EW_EXPECT_ERROR(y, KILN_ERR_SHAPE, "kiln_reshape", line);
    /* a tracked x takes the same checks */
    kiln_tensor x = zeros(KILN_F32, KILN_SHAPE(3));
    kiln_require_grad(x);
    y = kiln_masked_fill(kiln_ref(x), zeros(KILN_F32, KILN_SHAPE(3)), 1.0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_DTYPE, "kiln_masked_fill", line);
    kiln_release(x);
    kiln_sync();
    kiln_clear_error();
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(masked_fill_every_dtype_layout_and_broadcast);
    KT_RUN(masked_fill_in_place_only_when_x_is_unshared);
    KT_RUN(masked_fill_gradient);
    KT_RUN(masked_fill_bad_input);
    return kt_finish();
}
