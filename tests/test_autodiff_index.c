/* Gradients of the joins (cat, stack), the splits (split, chunk), and the indexing ops
 * (index_select, gather, scatter_add; one_hot carries none): finite-difference checks with
 * negative dims, repeated indices, non-contiguous inputs and empty pieces; bad input on
 * tracked tensors. */
#include "gradcheck.h"

static kiln_memory_stats stats(void) {
    kiln_sync();
    return kiln_memory_stats_get(KILN_CPU);
}

static kiln_tensor index_i64(kiln_shape shape, const int64_t *v) {
    return kiln_from_data(KILN_CPU, KILN_I64, shape, v);
}

/* ---- cat / stack ------------------------------------------------------------------------- */

typedef struct {
    int n, dim;
    bool stack, transpose_first;
} join_case;

static kiln_tensor run_join(kiln_tensor *in, void *ctx) {
    const join_case *j = ctx;
    if (j->transpose_first) in[0] = kiln_transpose(in[0], 0, 1);
    in[1] = kiln_sin(in[1]); /* an input computed by a tracked op, not only leaves */
    return j->stack ? kiln_stack(in, j->n, j->dim) : kiln_cat(in, j->n, j->dim);
}

KT_TEST(cat_and_stack) {
    struct {
        const char *name;
        join_case j;
        kiln_shape s[3];
    } cases[] = {
        {"cat dim 0", {3, 0, false, false}, {KILN_SHAPE(2, 3), KILN_SHAPE(4, 3), KILN_SHAPE(1, 3)}},
        {"cat dim -1", {2, -1, false, false}, {KILN_SHAPE(2, 1), KILN_SHAPE(2, 4)}},
        {"cat of a transpose", {2, 1, false, true}, {KILN_SHAPE(3, 2), KILN_SHAPE(2, 2)}},
        {"cat skipping an empty 1-d", {3, 1, false, false}, {KILN_SHAPE(2, 2), KILN_SHAPE(2, 3), KILN_SHAPE(0)}},
        {"stack dim 0", {3, 0, true, false}, {KILN_SHAPE(2, 3), KILN_SHAPE(2, 3), KILN_SHAPE(2, 3)}},
        {"stack dim -1", {2, -1, true, true}, {KILN_SHAPE(3, 2), KILN_SHAPE(2, 3)}},
        {"stack dim 1", {2, 1, true, false}, {KILN_SHAPE(2, 3), KILN_SHAPE(2, 3)}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        GC_CHECK(cases[i].name, run_join, &cases[i].j, cases[i].j.n, cases[i].s, 1e-6);
}

static kiln_tensor run_cat_one(kiln_tensor *in, void *ctx) { return kiln_cat(in, 1, 0); }

/* cat of one input (handed back as it is), and an input of another dtype (its gradient comes
 * back in its own dtype) */
KT_TEST(cat_of_one_and_mixed_dtypes) {
    kiln_shape s[1] = {KILN_SHAPE(3, 2)};
    GC_CHECK("cat of one", run_cat_one, NULL, 1, s, 1e-6);
    kiln_tensor a = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2));
    kiln_tensor b = kiln_ones(KILN_CPU, KILN_F64, KILN_SHAPE(3));
    kiln_require_grad(a);
    kiln_require_grad(b);
    kiln_tensor ka = kiln_ref(a), kb = kiln_ref(b);
    kiln_tensor y = kiln_cat((kiln_tensor[]){a, b}, 2, 0);
    KT_CHECK(kiln_tensor_dtype(y) == KILN_F64);
    const double w[5] = {1, 2, 3, 4, 5};
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward_seed(y, kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(5), w), &g) == KILN_OK);
    kiln_tensor da = kiln_grad(g, ka), db = kiln_grad(g, kb);
    KT_CHECK(kiln_tensor_dtype(da) == KILN_F32 && kiln_tensor_dtype(db) == KILN_F64);
    float va[2];
    double vb[3];
    KT_CHECK(kiln_into_data(da, va, sizeof va) == KILN_OK && kiln_into_data(db, vb, sizeof vb) == KILN_OK);
    KT_CHECK(va[0] == 1 && va[1] == 2 && vb[0] == 3 && vb[2] == 5);
    kiln_grads_free(g);
    kiln_release(ka);
    kiln_release(kb);
}

/* ---- split / chunk ------------------------------------------------------------------------- */

/* Pieces go through different ops and come back joined; one piece is dropped (its part of
 * the gradient is zero). */
static kiln_tensor run_split(kiln_tensor *in, void *ctx) {
    kiln_tensor p[4];
    int n = ctx ? kiln_chunk(kiln_transpose(in[0], 0, 1), 3, -1, p, 4) : kiln_split(in[0], 2, 0, p, 4);
    if (n != 3) return kiln_cat(p, n, 0); /* reported by the check as a mismatch */
    kiln_release(p[1]);
    int dim = ctx ? 1 : 0;
    return kiln_cat((kiln_tensor[]){kiln_mul_scalar(p[0], 3.0), kiln_exp(p[2])}, 2, dim);
}

KT_TEST(split_and_chunk) {
    kiln_shape split_s[1] = {KILN_SHAPE(5, 4)}; /* pieces of 2, 2, 1 rows */
    GC_CHECK("split", run_split, NULL, 1, split_s, 1e-6);
    kiln_shape chunk_s[1] = {KILN_SHAPE(7, 3)}; /* transposed to [3,7]: chunks of 3, 3, 1 columns */
    GC_CHECK("chunk", run_split, (void *)1, 1, chunk_s, 1e-6);
}

/* ---- index_select / gather / scatter_add --------------------------------------------------- */

typedef struct {
    int dim;
    kiln_shape index_shape;
    const int64_t *index;
    kiln_dtype index_dtype;
    bool transpose_first;
} index_case;

static kiln_tensor case_index(const index_case *ic) {
    return kiln_cast(index_i64(ic->index_shape, ic->index), ic->index_dtype);
}

static kiln_tensor run_index_select(kiln_tensor *in, void *ctx) {
    const index_case *ic = ctx;
    kiln_tensor x = ic->transpose_first ? kiln_transpose(in[0], 0, 1) : in[0];
    return kiln_index_select(x, ic->dim, case_index(ic));
}

static kiln_tensor run_gather(kiln_tensor *in, void *ctx) {
    const index_case *ic = ctx;
    kiln_tensor x = ic->transpose_first ? kiln_transpose(in[0], 0, 1) : in[0];
    return kiln_gather(x, ic->dim, case_index(ic));
}

static kiln_tensor run_scatter_add(kiln_tensor *in, void *ctx) {
    const index_case *ic = ctx;
    kiln_tensor t = ic->transpose_first ? kiln_transpose(in[0], 0, 1) : in[0];
    return kiln_scatter_add(t, ic->dim, case_index(ic), kiln_tanh(in[1]));
}

KT_TEST(index_select_gradients) {
    static const int64_t rows[] = {3, 0, 3, 1}, cols[] = {2, 2, 0}, one[] = {1};
    kiln_shape s[1] = {KILN_SHAPE(5, 4)};
    index_case cases[] = {
        {0, KILN_SHAPE(4), rows, KILN_I64, false},
        {-1, KILN_SHAPE(3), cols, KILN_I32, false},
        {1, KILN_SHAPE(3), cols, KILN_I64, true}, /* of the [4,5] transpose */
        {0, KILN_SCALAR_SHAPE, one, KILN_I64, false},
        {1, KILN_SHAPE(0), one, KILN_I64, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[48];
        snprintf(name, sizeof name, "index_select %zu", i);
        GC_CHECK(name, run_index_select, &cases[i], 1, s, 1e-6);
    }
}

KT_TEST(gather_gradients) {
    static const int64_t by_col[] = {3, 3, 0, 1, 2, 2}, by_row[] = {2, 0, 1, 2, 0, 0, 2, 1}, small[] = {1, 1, 0, 3};
    kiln_shape s[1] = {KILN_SHAPE(3, 4)};
    index_case cases[] = {
        {1, KILN_SHAPE(3, 2), by_col, KILN_I64, false},
        {0, KILN_SHAPE(2, 4), by_row, KILN_I32, false},
        {-1, KILN_SHAPE(2, 2), small, KILN_I64, false}, /* smaller than the input off dim too */
        {0, KILN_SHAPE(2, 3), by_row, KILN_I64, true},  /* of the [4,3] transpose */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[48];
        snprintf(name, sizeof name, "gather %zu", i);
        GC_CHECK(name, run_gather, &cases[i], 1, s, 1e-6);
    }
}

KT_TEST(scatter_add_gradients) {
    static const int64_t by_col[] = {3, 3, 0, 1, 2, 2}, small[] = {1, 1, 0, 3};
    struct {
        index_case ic;
        kiln_shape s[2];
    } cases[] = {
        {{1, KILN_SHAPE(3, 2), by_col, KILN_I64, false}, {KILN_SHAPE(3, 4), KILN_SHAPE(3, 2)}},
        {{-1, KILN_SHAPE(2, 2), small, KILN_I32, false}, {KILN_SHAPE(3, 4), KILN_SHAPE(3, 5)}}, /* src larger */
        {{0, KILN_SHAPE(2, 2), small, KILN_I64, true}, {KILN_SHAPE(2, 4), KILN_SHAPE(2, 3)}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[48];
        snprintf(name, sizeof name, "scatter_add %zu", i);
        GC_CHECK(name, run_scatter_add, &cases[i].ic, 2, cases[i].s, 1e-6);
    }
}

/* one_hot builds from integers: no gradient flows into it, and it passes none on. */
static kiln_tensor run_one_hot(kiln_tensor *in, void *ctx) {
    static const int64_t labels[] = {2, 0, 1};
    kiln_tensor oh = kiln_one_hot(index_i64(KILN_SHAPE(3), labels), 4, KILN_F64);
    return kiln_mul(in[0], oh);
}

KT_TEST(one_hot_is_constant) {
    kiln_shape s[1] = {KILN_SHAPE(3, 4)};
    GC_CHECK("one_hot", run_one_hot, NULL, 1, s, 1e-6);
}

KT_TEST(bad_input_on_tracked_tensors) {
    kiln_memory_stats base = stats();
    kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3, 4));
    kiln_require_grad(x);
    float v[64];
    kiln_tensor y = kiln_cat((kiln_tensor[]){kiln_ref(x), kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 5))}, 2, 0);
    KT_CHECK(kiln_into_data(y, v, sizeof v) == KILN_ERR_SHAPE);
    KT_CHECK(strstr(kiln_last_error(), "kiln_cat") && strstr(kiln_last_error(), "test_autodiff_index.c"));
    y = kiln_stack((kiln_tensor[]){kiln_ref(x), kiln_ref(x)}, 2, 3);
    KT_CHECK(kiln_into_data(y, v, sizeof v) == KILN_ERR_INVALID_ARGUMENT);
    y = kiln_index_select(kiln_ref(x), 0, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2)));
    KT_CHECK(kiln_into_data(y, v, sizeof v) == KILN_ERR_DTYPE);
    KT_CHECK(strstr(kiln_last_error(), "kiln_index_select") != NULL);
    static const int64_t idx[] = {0, 1};
    y = kiln_gather(kiln_ref(x), 1, index_i64(KILN_SHAPE(2), idx)); /* index of the wrong ndim */
    KT_CHECK(kiln_into_data(y, v, sizeof v) == KILN_ERR_SHAPE);
    kiln_tensor src = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1, 1)); /* smaller than the index */
    y = kiln_scatter_add(kiln_ref(x), 0, index_i64(KILN_SHAPE(1, 2), idx), src);
    KT_CHECK(kiln_into_data(y, v, sizeof v) == KILN_ERR_SHAPE);
    kiln_tensor pieces[2];
    KT_CHECK(kiln_split(kiln_ref(x), 0, 0, pieces, 2) == 1);
    KT_CHECK(kiln_into_data(pieces[0], v, sizeof v) == KILN_ERR_INVALID_ARGUMENT);
    /* an index out of range is found when the kernel runs: the gradient reports it */
    static const int64_t far[] = {0, 7};
    kiln_grads *g = NULL;
    kiln_status st = kiln_backward(kiln_sum(kiln_index_select(kiln_ref(x), 1, index_i64(KILN_SHAPE(2), far))), &g);
    if (st == KILN_OK) {
        kiln_status gs = kiln_into_data(kiln_grad(g, x), v, sizeof(float) * 12);
        KT_CHECK_MSG(gs == KILN_ERR_INDEX, "%s: %s", kiln_status_str(gs), kiln_last_error());
        kiln_grads_free(g);
    } else {
        KT_CHECK(st == KILN_ERR_INDEX);
    }
    kiln_release(x);
    KT_CHECK(stats().live_tensors == base.live_tensors);
    KT_CHECK(stats().bytes_in_use == base.bytes_in_use);
}

int main(void) {
    KT_RUN(cat_and_stack);
    KT_RUN(cat_of_one_and_mixed_dtypes);
    KT_RUN(split_and_chunk);
    KT_RUN(index_select_gradients);
    KT_RUN(gather_gradients);
    KT_RUN(scatter_add_gradients);
    KT_RUN(one_hot_is_constant);
    KT_RUN(bad_input_on_tracked_tensors);
    return kt_finish();
}
