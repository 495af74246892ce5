/* index_select, gather, scatter_add, one_hot, to_device: values against references computed
 * here in double, every dtype, i32 and i64 indices, non-contiguous inputs and indices, empty
 * tensors, runtime index errors, and bad input for every function (no leaks). */
#include <kiln.h>

#include "kiln_test.h"



static kiln_tensor from_f64(kiln_dtype dt, kiln_shape shape, const double *v) {
    return kiln_cast(kiln_from_data(KILN_CPU, KILN_F64, shape, v), dt);
}

/* A deterministic stream of small numbers. */
static uint32_t lcg_state = 12345;
static uint32_t lcg(void) {
    lcg_state = lcg_state * 1664525u + 1013904223u;
    return lcg_state >> 8;
}

/* Values exact in every dtype (bf16 included); bool gets 0/1. */
static void fill_values(kiln_dtype dt, double *v, int64_t n) {
    for (int64_t i = 0; i < n; i++) v[i] = dt == KILN_BOOL ? (double)(lcg() % 2) : (double)((int)(lcg() % 200) - 100);
}

static kiln_status read_f64(kiln_tensor t, double *out, int64_t n) {
    return kiln_into_data(kiln_cast(t, KILN_F64), out, sizeof(double) * (size_t)n);
}

static bool has_shape(kiln_tensor t, kiln_shape want) {
    kiln_shape s = kiln_tensor_shape(t);
    if (s.ndim != want.ndim) return false;
    for (int d = 0; d < s.ndim; d++)
        if (s.dims[d] != want.dims[d]) return false;
    return true;
}

/* 3-d multi-index helpers (row-major). */
static int64_t at3(const int64_t *shape, int64_t i, int64_t j, int64_t k) { return (i * shape[1] + j) * shape[2] + k; }

/* ---- index_select ------------------------------------------------------------------------ */

static void check_index_select(kiln_dtype dt, kiln_dtype idt, int dim, bool transposed_input, bool strided_index) {
    int64_t shape[3] = {3, 4, 5};
    double src[60], idx[8], got[160], want[160];
    fill_values(dt, src, 60);
    int nd = dim < 0 ? dim + 3 : dim;
    int64_t len = 7;
    for (int i = 0; i < len; i++) idx[i] = (double)(lcg() % (uint32_t)shape[nd]); /* duplicates likely */
    kiln_tensor t;
    if (transposed_input) { /* the same values held as a [5,4,3] block, transposed back */
        double tr[60];
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++)
                for (int k = 0; k < 5; k++) tr[(k * 4 + j) * 3 + i] = src[at3(shape, i, j, k)];
        t = kiln_permute(from_f64(dt, KILN_SHAPE(5, 4, 3), tr), KILN_DIMS(2, 1, 0));
    } else {
        t = from_f64(dt, KILN_SHAPE(3, 4, 5), src);
    }
    kiln_tensor index;
    if (strided_index) { /* every other element of a longer index */
        double wide[14];
        for (int i = 0; i < 14; i++) wide[i] = i % 2 ? 99 : idx[i / 2];
        index = kiln_slice(from_f64(idt, KILN_SHAPE(14), wide), 0, 0, 14, 2);
    } else {
        index = from_f64(idt, KILN_SHAPE(7), idx);
    }
    int64_t os[3] = {3, 4, 5};
    os[nd] = len;
    for (int64_t i = 0; i < os[0]; i++)
        for (int64_t j = 0; j < os[1]; j++)
            for (int64_t k = 0; k < os[2]; k++) {
                int64_t c[3] = {i, j, k};
                c[nd] = (int64_t)idx[c[nd]];
                want[at3(os, i, j, k)] = src[at3(shape, c[0], c[1], c[2])];
            }
    kiln_tensor r = kiln_index_select(t, dim, index);
    KT_CHECK(kiln_tensor_dtype(r) == dt);
    KT_CHECK(has_shape(r, (kiln_shape){3, {os[0], os[1], os[2]}}));
    KT_CHECK(read_f64(r, got, os[0] * os[1] * os[2]) == KILN_OK);
    for (int64_t i = 0; i < os[0] * os[1] * os[2]; i++) KT_NEAR(got[i], want[i], 0);
}

KT_TEST(index_select_values) {
    kt_mem_begin();
    for (int k = 0; k < KT_N_DTYPES; k++)
        for (int dim = -3; dim < 3; dim++) {
            check_index_select(kt_all_dtypes[k], dim % 2 ? KILN_I64 : KILN_I32, dim, false, false);
            check_index_select(kt_all_dtypes[k], KILN_I64, dim, true, dim >= 0);
        }
    KT_MEM_CHECK();
}

KT_TEST(index_select_edges) {
    kt_mem_begin();
    double got[12];
    /* a 0-d index keeps the dim, with size 1 */
    kiln_tensor t = from_f64(KILN_F32, KILN_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6});
    kiln_tensor r = kiln_index_select(kiln_ref(t), 1, kiln_full(KILN_CPU, KILN_I64, KILN_SCALAR_SHAPE, 2));
    KT_CHECK(has_shape(r, KILN_SHAPE(2, 1)));
    KT_CHECK(read_f64(r, got, 2) == KILN_OK);
    KT_NEAR(got[0], 3, 0);
    KT_NEAR(got[1], 6, 0);
    /* an empty index, and an empty input dim with an empty index */
    r = kiln_index_select(kiln_ref(t), 0, kiln_zeros(KILN_CPU, KILN_I32, KILN_SHAPE(0)));
    KT_CHECK(has_shape(r, KILN_SHAPE(0, 3)));
    KT_CHECK(read_f64(r, got, 0) == KILN_OK);
    r = kiln_index_select(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0, 3)), 0, kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(0)));
    KT_CHECK(read_f64(r, got, 0) == KILN_OK);
    /* a size-1 dim and an expanded (zero-stride) input */
    r = kiln_index_select(kiln_expand(kiln_ref(t), KILN_SHAPE(4, 2, 3)), 0,
                          from_f64(KILN_I32, KILN_SHAPE(2), (double[]){3, 0}));
    KT_CHECK(read_f64(r, got, 12) == KILN_OK);
    for (int i = 0; i < 12; i++) KT_NEAR(got[i], (i % 6) + 1, 0);
    /* a large embedding-style lookup: rows of a [1000, 64] table */
    enum { V = 1000, D = 64, N = 300 };
    static double table[V * D], ids[N], out[N * D];
    for (int i = 0; i < V * D; i++) table[i] = i % 977;
    for (int i = 0; i < N; i++) ids[i] = (i * 37) % V;
    r = kiln_index_select(from_f64(KILN_F32, KILN_SHAPE(V, D), table), 0, from_f64(KILN_I64, KILN_SHAPE(N), ids));
    KT_CHECK(read_f64(r, out, N * D) == KILN_OK);
    int bad = 0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < D; j++) bad += out[i * D + j] != table[(int)ids[i] * D + j];
    KT_CHECK(bad == 0);
    kiln_release(t);
    KT_MEM_CHECK();
}

/* ---- gather ----------------------------------------------------------------------------- */

static void check_gather(kiln_dtype dt, kiln_dtype idt, int dim, bool sliced_input, bool transposed_index) {
    int64_t shape[3] = {3, 4, 5}; /* the input seen by gather */
    int nd = dim < 0 ? dim + 3 : dim;
    int64_t is[3] = {2, 3, 4};    /* index: smaller than the input off dim */
    is[nd] = 6;                   /* and any size along dim */
    double src[60], idx[72], got[72], want[72];
    fill_values(dt, src, 60);
    int64_t n = is[0] * is[1] * is[2];
    for (int64_t i = 0; i < n; i++) idx[i] = (double)(lcg() % (uint32_t)shape[nd]);
    kiln_tensor t;
    if (sliced_input) { /* rows 1, 3, 5 of a [6,4,5] block */
        double big[120];
        for (int i = 0; i < 120; i++) big[i] = 77;
        for (int i = 0; i < 60; i++) big[20 + (i / 20) * 40 + i % 20] = src[i];
        t = kiln_slice(from_f64(dt, KILN_SHAPE(6, 4, 5), big), 0, 1, 6, 2);
    } else {
        t = from_f64(dt, KILN_SHAPE(3, 4, 5), src);
    }
    kiln_tensor index;
    if (transposed_index) { /* held as [is2, is1, is0], permuted back */
        double tr[72];
        for (int64_t i = 0; i < is[0]; i++)
            for (int64_t j = 0; j < is[1]; j++)
                for (int64_t k = 0; k < is[2]; k++) tr[(k * is[1] + j) * is[0] + i] = idx[at3(is, i, j, k)];
        index = kiln_permute(from_f64(idt, KILN_SHAPE(is[2], is[1], is[0]), tr), KILN_DIMS(2, 1, 0));
    } else {
        index = from_f64(idt, KILN_SHAPE(is[0], is[1], is[2]), idx);
    }
    for (int64_t i = 0; i < is[0]; i++)
        for (int64_t j = 0; j < is[1]; j++)
            for (int64_t k = 0; k < is[2]; k++) {
                int64_t c[3] = {i, j, k};
                c[nd] = (int64_t)idx[at3(is, i, j, k)];
                want[at3(is, i, j, k)] = src[at3(shape, c[0], c[1], c[2])];
            }
    kiln_tensor r = kiln_gather(t, dim, index);
    KT_CHECK(kiln_tensor_dtype(r) == dt);
    KT_CHECK(has_shape(r, (kiln_shape){3, {is[0], is[1], is[2]}}));
    KT_CHECK(read_f64(r, got, n) == KILN_OK);
    for (int64_t i = 0; i < n; i++) KT_NEAR(got[i], want[i], 0);
}

KT_TEST(gather_values) {
    kt_mem_begin();
    for (int k = 0; k < KT_N_DTYPES; k++)
        for (int dim = -3; dim < 3; dim++) {
            check_gather(kt_all_dtypes[k], KILN_I64, dim, false, false);
            check_gather(kt_all_dtypes[k], KILN_I32, dim, true, dim % 2 != 0);
        }
    /* cross-entropy style: pick one entry per row; a 1-d gather; an empty index */
    double got[4];
    kiln_tensor logits = from_f64(KILN_F32, KILN_SHAPE(3, 4), (double[]){0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23});
    kiln_tensor r = kiln_gather(kiln_ref(logits), 1, from_f64(KILN_I32, KILN_SHAPE(3, 1), (double[]){3, 0, 2}));
    KT_CHECK(read_f64(r, got, 3) == KILN_OK);
    KT_NEAR(got[0], 3, 0);
    KT_NEAR(got[1], 10, 0);
    KT_NEAR(got[2], 22, 0);
    r = kiln_gather(from_f64(KILN_I64, KILN_SHAPE(3), (double[]){7, 8, 9}), 0,
                    from_f64(KILN_I64, KILN_SHAPE(4), (double[]){2, 2, 0, 1}));
    KT_CHECK(read_f64(r, got, 4) == KILN_OK);
    KT_NEAR(got[0], 9, 0);
    KT_NEAR(got[2], 7, 0);
    KT_NEAR(got[3], 8, 0);
    r = kiln_gather(logits, 0, kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(0, 4)));
    KT_CHECK(has_shape(r, KILN_SHAPE(0, 4)));
    KT_CHECK(read_f64(r, got, 0) == KILN_OK);
    KT_MEM_CHECK();
}

/* ---- scatter_add ------------------------------------------------------------------------- */

/* want = t; want[.. idx ..] += src[..] over the index's shape, in double. */
static void ref_scatter_add(const double *t, const int64_t *ts, const double *idx, const int64_t *is, const double *src,
                            const int64_t *ss, int dim, double *want) {
    memcpy(want, t, sizeof(double) * (size_t)(ts[0] * ts[1] * ts[2]));
    for (int64_t i = 0; i < is[0]; i++)
        for (int64_t j = 0; j < is[1]; j++)
            for (int64_t k = 0; k < is[2]; k++) {
                int64_t c[3] = {i, j, k};
                c[dim] = (int64_t)idx[at3(is, i, j, k)];
                want[at3(ts, c[0], c[1], c[2])] += src[at3(ss, i, j, k)];
            }
}

static void check_scatter_add(kiln_dtype dt, kiln_dtype idt, int dim, bool strided) {
    int nd = dim < 0 ? dim + 3 : dim;
    int64_t ts[3] = {3, 4, 5}, is[3] = {2, 3, 4}, ss[3] = {3, 4, 5};
    is[nd] = 7; /* more index entries than out rows: duplicates accumulate */
    ss[nd] = 8;
    double t[60], idx[84], src[160], want[60], got[60];
    fill_values(dt, t, 60);
    fill_values(dt, src, 160);
    if (dt != KILN_BOOL) /* keep every sum exact in f16/bf16 */
        for (int i = 0; i < 160; i++) src[i] = (double)((int)src[i] % 8);
    int64_t n = is[0] * is[1] * is[2];
    for (int64_t i = 0; i < n; i++) idx[i] = (double)(lcg() % (uint32_t)ts[nd]);
    ref_scatter_add(t, ts, idx, is, src, ss, nd, want);
    if (dt == KILN_BOOL)
        for (int i = 0; i < 60; i++) want[i] = want[i] != 0;
    kiln_tensor tt = from_f64(dt, KILN_SHAPE(3, 4, 5), t);
    kiln_tensor ti = from_f64(idt, KILN_SHAPE(is[0], is[1], is[2]), idx);
    kiln_tensor tsrc = from_f64(dt, KILN_SHAPE(ss[0], ss[1], ss[2]), src);
    if (strided) { /* the input and src as transposed views, the index sliced from a wider one */
        tt = kiln_contiguous(kiln_transpose(tt, 0, 2));
        tt = kiln_transpose(tt, 0, 2);
        tsrc = kiln_transpose(kiln_contiguous(kiln_transpose(tsrc, 1, 2)), 1, 2);
        ti = kiln_slice(kiln_cat((kiln_tensor[]){ti, kiln_zeros(KILN_CPU, idt, KILN_SHAPE(is[0], is[1], 2))}, 2, 2), 2, 0,
                        is[2], 1);
        KT_CHECK(!kiln_tensor_is_contiguous(tt) && !kiln_tensor_is_contiguous(tsrc) && !kiln_tensor_is_contiguous(ti));
    }
    kiln_tensor r = kiln_scatter_add(tt, dim, ti, tsrc);
    KT_CHECK(kiln_tensor_dtype(r) == dt);
    KT_CHECK(has_shape(r, KILN_SHAPE(3, 4, 5)));
    KT_CHECK(read_f64(r, got, 60) == KILN_OK);
    for (int i = 0; i < 60; i++) KT_NEAR(got[i], want[i], 0);
}

KT_TEST(scatter_add_values) {
    kt_mem_begin();
    for (int k = 0; k < KT_N_DTYPES; k++)
        for (int dim = -3; dim < 3; dim++) {
            check_scatter_add(kt_all_dtypes[k], dim % 2 ? KILN_I32 : KILN_I64, dim, false);
            check_scatter_add(kt_all_dtypes[k], KILN_I64, dim, true);
        }
    KT_MEM_CHECK();
}

KT_TEST(scatter_add_in_place_and_copies) {
    kt_mem_begin();
    double got[4];
    /* an exclusive input is updated in place */
    uint64_t reuses = kiln_memory_stats_get(KILN_CPU).inplace_reuses;
    kiln_tensor r = kiln_scatter_add(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4)), 0,
                                     from_f64(KILN_I32, KILN_SHAPE(5), (double[]){1, 3, 1, 1, 0}),
                                     from_f64(KILN_F32, KILN_SHAPE(5), (double[]){1, 2, 3, 4, 5}));
    KT_CHECK(kiln_memory_stats_get(KILN_CPU).inplace_reuses == reuses + 1);
    KT_CHECK(read_f64(r, got, 4) == KILN_OK);
    KT_NEAR(got[0], 5, 0);
    KT_NEAR(got[1], 8, 0);
    KT_NEAR(got[2], 0, 0);
    KT_NEAR(got[3], 2, 0);
    /* a shared input is copied first and stays as it was */
    kiln_tensor t = kiln_full(KILN_CPU, KILN_F64, KILN_SHAPE(4), 1);
    r = kiln_scatter_add(kiln_ref(t), 0, from_f64(KILN_I64, KILN_SHAPE(2), (double[]){2, 2}), kiln_ref(t));
    KT_CHECK(read_f64(r, got, 4) == KILN_OK);
    KT_NEAR(got[2], 3, 0);
    KT_NEAR(got[0], 1, 0);
    KT_CHECK(read_f64(kiln_ref(t), got, 4) == KILN_OK);
    for (int i = 0; i < 4; i++) KT_NEAR(got[i], 1, 0);
    /* dtypes promote: an i32 input with f32 src gives f32 */
    r = kiln_scatter_add(kiln_full(KILN_CPU, KILN_I32, KILN_SHAPE(2), 1), 0, from_f64(KILN_I32, KILN_SHAPE(1), (double[]){1}),
                         kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(1), 0.5));
    KT_CHECK(kiln_tensor_dtype(r) == KILN_F32);
    KT_CHECK(read_f64(r, got, 2) == KILN_OK);
    KT_NEAR(got[1], 1.5, 0);
    /* an empty index leaves the input unchanged */
    r = kiln_scatter_add(t, 0, kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(0)), kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE(3)));
    KT_CHECK(read_f64(r, got, 4) == KILN_OK);
    for (int i = 0; i < 4; i++) KT_NEAR(got[i], 1, 0);
    KT_MEM_CHECK();
}

/* Sums of many floats into few bins: the same bits whatever the thread count. */
KT_TEST(scatter_add_is_deterministic) {
    kt_mem_begin();
    enum { ROWS = 20000, COLS = 16, BINS = 7 };
    static double src[ROWS * COLS], idx[ROWS * COLS];
    static float a[BINS * COLS], b[BINS * COLS];
    for (int i = 0; i < ROWS * COLS; i++) {
        src[i] = (double)(lcg() % 100000) / 997.0;
        idx[i] = (double)(lcg() % BINS);
    }
    int saved = kiln_num_threads();
    float *outs[2] = {a, b};
    for (int run = 0; run < 2; run++) {
        kiln_set_num_threads(run ? 2 : 1);
        kiln_tensor r = kiln_scatter_add(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(BINS, COLS)), 0,
                                         from_f64(KILN_I64, KILN_SHAPE(ROWS, COLS), idx),
                                         from_f64(KILN_F32, KILN_SHAPE(ROWS, COLS), src));
        KT_CHECK(kiln_into_data(r, outs[run], sizeof a) == KILN_OK);
    }
    kiln_set_num_threads(saved);
    KT_CHECK(memcmp(a, b, sizeof a) == 0);
    double want[BINS * COLS] = {0};
    for (int i = 0; i < ROWS * COLS; i++) want[(int)idx[i] * COLS + i % COLS] += (float)src[i];
    for (int i = 0; i < BINS * COLS; i++) KT_NEAR(a[i], want[i], 1e-4);
    KT_MEM_CHECK();
}

/* ---- one_hot ------------------------------------------------------------------------------ */

KT_TEST(one_hot_values) {
    kt_mem_begin();
    double idx[6] = {2, 0, 3, 3, 1, 0}, got[48];
    for (int k = 0; k < KT_N_DTYPES; k++) {
        kiln_dtype dt = kt_all_dtypes[k];
        for (int form = 0; form < 3; form++) {
            kiln_tensor index;
            if (form == 0) /* 1-d i64 */
                index = from_f64(KILN_I64, KILN_SHAPE(6), idx);
            else if (form == 1) /* 2-d i32 */
                index = from_f64(KILN_I32, KILN_SHAPE(2, 3), idx);
            else /* transposed: element (i, j) is idx[j * 2 + i] */
                index = kiln_transpose(from_f64(KILN_I32, KILN_SHAPE(3, 2), idx), 0, 1);
            kiln_tensor r = kiln_one_hot(index, 5, dt);
            KT_CHECK(kiln_tensor_dtype(r) == dt);
            KT_CHECK(has_shape(r, form ? KILN_SHAPE(2, 3, 5) : KILN_SHAPE(6, 5)));
            KT_CHECK(read_f64(r, got, 30) == KILN_OK);
            for (int e = 0; e < 6; e++) {
                int src = form == 2 ? (e % 3) * 2 + e / 3 : e;
                for (int c = 0; c < 5; c++) KT_NEAR(got[e * 5 + c], c == (int)idx[src], 0);
            }
        }
    }
    /* a 0-d index, one class, an empty index */
    kiln_tensor r = kiln_one_hot(kiln_full(KILN_CPU, KILN_I32, KILN_SCALAR_SHAPE, 1), 3, KILN_F32);
    KT_CHECK(has_shape(r, KILN_SHAPE(3)));
    KT_CHECK(read_f64(r, got, 3) == KILN_OK);
    KT_NEAR(got[0], 0, 0);
    KT_NEAR(got[1], 1, 0);
    KT_NEAR(got[2], 0, 0);
    r = kiln_one_hot(kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(4)), 1, KILN_I64);
    KT_CHECK(read_f64(r, got, 4) == KILN_OK);
    for (int i = 0; i < 4; i++) KT_NEAR(got[i], 1, 0);
    r = kiln_one_hot(kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(0, 2)), 4, KILN_F32);
    KT_CHECK(has_shape(r, KILN_SHAPE(0, 2, 4)));
    KT_CHECK(read_f64(r, got, 0) == KILN_OK);
    KT_MEM_CHECK();
}

/* ---- runtime index errors ------------------------------------------------------------------ */

KT_TEST(out_of_range_indices_fail_when_run) {
    kt_mem_begin();
    const double bad_values[] = {3, -1, 1e9};
    for (int b = 0; b < 3; b++) {
        for (int w = 0; w < 2; w++) {
            kiln_dtype idt = w ? KILN_I64 : KILN_I32;
            double idx[3] = {0, bad_values[b], 1};
            kiln_tensor t = from_f64(KILN_F32, KILN_SHAPE(3, 2), (double[]){1, 2, 3, 4, 5, 6});
            KT_READ_ERROR(kiln_index_select(kiln_ref(t), 0, from_f64(idt, KILN_SHAPE(3), idx)), KILN_ERR_INDEX,
                              "kiln_index_select");
            KT_READ_ERROR(kiln_gather(kiln_ref(t), 0, from_f64(idt, KILN_SHAPE(3, 1), idx)), KILN_ERR_INDEX,
                              "kiln_gather");
            KT_READ_ERROR(kiln_scatter_add(kiln_ref(t), 0, from_f64(idt, KILN_SHAPE(3, 1), idx),
                                               kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3, 1))),
                              KILN_ERR_INDEX, "kiln_scatter_add");
            KT_READ_ERROR(kiln_one_hot(from_f64(idt, KILN_SHAPE(3), idx), 3, KILN_F32), KILN_ERR_INDEX,
                              "kiln_one_hot");
            /* the error says which value was bad */
            char want[64];
            snprintf(want, sizeof want, "index %lld out of range", (long long)bad_values[b]);
            KT_READ_ERROR(kiln_gather(t, 0, from_f64(idt, KILN_SHAPE(3, 2), (double[]){0, 0, bad_values[b], 0, 1, 1})),
                              KILN_ERR_INDEX, "kiln_gather");
            KT_CHECK_MSG(strstr(kiln_last_error(), want) != NULL, "'%s' lacks '%s'", kiln_last_error(), want);
            /* downstream ops carry the error */
            kiln_tensor g = kiln_index_select(from_f64(KILN_F32, KILN_SHAPE(3), (double[]){1, 2, 3}), 0,
                                              from_f64(idt, KILN_SHAPE(3), idx));
            KT_READ_ERROR(kiln_gather(g, 0, kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(2))), KILN_ERR_INDEX,
                              "kiln_index_select");
        }
    }
    kiln_sync();
    KT_MEM_CHECK();
}

/* ---- bad input ------------------------------------------------------------------------------ */

static kiln_tensor poisoned(void) { return kiln_reshape(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3)), KILN_SHAPE(2)); }
static kiln_tensor stale(void) {
    kiln_tensor t = kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(2));
    kiln_release(t);
    return t;
}
static kiln_tensor mat(void) { return kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3, 2)); }
static kiln_tensor ids(kiln_shape s) { return kiln_zeros(KILN_CPU, KILN_I64, s); }

KT_TEST(index_select_and_gather_bad_input) {
    kt_mem_begin();
    const char *is = "kiln_index_select", *g = "kiln_gather";
    KT_READ_ERROR(kiln_index_select(mat(), 0, kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2))), KILN_ERR_DTYPE, is);
    KT_READ_ERROR(kiln_index_select(mat(), 0, kiln_zeros(KILN_CPU, KILN_BOOL, KILN_SHAPE(2))), KILN_ERR_DTYPE, is);
    KT_READ_ERROR(kiln_index_select(mat(), 2, ids(KILN_SHAPE(2))), KILN_ERR_INVALID_ARGUMENT, is);
    KT_READ_ERROR(kiln_index_select(mat(), -3, ids(KILN_SHAPE(2))), KILN_ERR_INVALID_ARGUMENT, is);
    KT_READ_ERROR(kiln_index_select(mat(), 0, ids(KILN_SHAPE(2, 1))), KILN_ERR_SHAPE, is);
    KT_READ_ERROR(kiln_index_select(kiln_full(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE, 1), 0, ids(KILN_SHAPE(1))),
                      KILN_ERR_SHAPE, is);
    KT_READ_ERROR(kiln_index_select(stale(), 0, ids(KILN_SHAPE(2))), KILN_ERR_STALE_HANDLE, is);
    KT_READ_ERROR(kiln_index_select(mat(), 0, stale()), KILN_ERR_STALE_HANDLE, is);
    KT_READ_ERROR(kiln_index_select(KILN_NONE, 0, ids(KILN_SHAPE(2))), KILN_ERR_NULL, is);
    KT_READ_ERROR(kiln_index_select(mat(), 0, KILN_NONE), KILN_ERR_NULL, is);
    KT_READ_ERROR(kiln_index_select(poisoned(), 0, ids(KILN_SHAPE(2))), KILN_ERR_SHAPE, "kiln_reshape");
    KT_READ_ERROR(kiln_index_select(mat(), 0, poisoned()), KILN_ERR_SHAPE, "kiln_reshape");

    KT_READ_ERROR(kiln_gather(mat(), 0, kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE(2, 2))), KILN_ERR_DTYPE, g);
    KT_READ_ERROR(kiln_gather(mat(), 2, ids(KILN_SHAPE(2, 2))), KILN_ERR_INVALID_ARGUMENT, g);
    KT_READ_ERROR(kiln_gather(mat(), 0, ids(KILN_SHAPE(2))), KILN_ERR_SHAPE, g);       /* ndim differs */
    KT_READ_ERROR(kiln_gather(mat(), 0, ids(KILN_SHAPE(2, 3))), KILN_ERR_SHAPE, g);    /* too wide off dim */
    KT_READ_ERROR(kiln_gather(kiln_full(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE, 1), 0, ids(KILN_SCALAR_SHAPE)),
                      KILN_ERR_SHAPE, g);
    KT_READ_ERROR(kiln_gather(stale(), 0, ids(KILN_SHAPE(2, 2))), KILN_ERR_STALE_HANDLE, g);
    KT_READ_ERROR(kiln_gather(mat(), 0, stale()), KILN_ERR_STALE_HANDLE, g);
    KT_READ_ERROR(kiln_gather(KILN_NONE, 0, KILN_NONE), KILN_ERR_NULL, g);
    KT_READ_ERROR(kiln_gather(poisoned(), 0, ids(KILN_SHAPE(2, 2))), KILN_ERR_SHAPE, "kiln_reshape");
    KT_MEM_CHECK();
}

KT_TEST(scatter_add_one_hot_to_device_bad_input) {
    kt_mem_begin();
    const char *s = "kiln_scatter_add", *o = "kiln_one_hot";
    KT_READ_ERROR(kiln_scatter_add(mat(), 0, kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 2)), mat()), KILN_ERR_DTYPE, s);
    KT_READ_ERROR(kiln_scatter_add(mat(), 2, ids(KILN_SHAPE(2, 2)), mat()), KILN_ERR_INVALID_ARGUMENT, s);
    KT_READ_ERROR(kiln_scatter_add(mat(), 0, ids(KILN_SHAPE(2)), mat()), KILN_ERR_SHAPE, s);
    KT_READ_ERROR(kiln_scatter_add(mat(), 0, ids(KILN_SHAPE(2, 3)), mat()), KILN_ERR_SHAPE, s); /* wider than t */
    KT_READ_ERROR(kiln_scatter_add(mat(), 0, ids(KILN_SHAPE(4, 2)), mat()), KILN_ERR_SHAPE, s); /* longer than src */
    KT_READ_ERROR(kiln_scatter_add(mat(), 0, ids(KILN_SHAPE(2, 2)), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(6))),
                      KILN_ERR_SHAPE, s);
    KT_READ_ERROR(kiln_scatter_add(stale(), 0, ids(KILN_SHAPE(2, 2)), mat()), KILN_ERR_STALE_HANDLE, s);
    KT_READ_ERROR(kiln_scatter_add(mat(), 0, ids(KILN_SHAPE(2, 2)), stale()), KILN_ERR_STALE_HANDLE, s);
    KT_READ_ERROR(kiln_scatter_add(mat(), 0, ids(KILN_SHAPE(2, 2)), KILN_NONE), KILN_ERR_NULL, s);
    KT_READ_ERROR(kiln_scatter_add(mat(), 0, poisoned(), mat()), KILN_ERR_SHAPE, "kiln_reshape");

    KT_READ_ERROR(kiln_one_hot(ids(KILN_SHAPE(2)), 0, KILN_F32), KILN_ERR_INVALID_ARGUMENT, o);
    KT_READ_ERROR(kiln_one_hot(ids(KILN_SHAPE(2)), -1, KILN_F32), KILN_ERR_INVALID_ARGUMENT, o);
    KT_READ_ERROR(kiln_one_hot(ids(KILN_SHAPE(2)), 3, (kiln_dtype)42), KILN_ERR_DTYPE, o);
    KT_READ_ERROR(kiln_one_hot(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2)), 3, KILN_F32), KILN_ERR_DTYPE, o);
    KT_READ_ERROR(kiln_one_hot(ids(KILN_SHAPE(1, 1, 1, 1, 1, 1, 1, 1)), 3, KILN_F32), KILN_ERR_SHAPE, o);
    KT_READ_ERROR(kiln_one_hot(stale(), 3, KILN_F32), KILN_ERR_STALE_HANDLE, o);
    KT_READ_ERROR(kiln_one_hot(poisoned(), 3, KILN_F32), KILN_ERR_SHAPE, "kiln_reshape");

    /* to_device: the same device gives the same data back; CUDA is not in this build */
    double got[2];
    kiln_tensor t = from_f64(KILN_F32, KILN_SHAPE(2), (double[]){4, 5});
    kiln_tensor same = kiln_to_device(t, KILN_CPU);
    KT_CHECK(!kiln_is_valid(t) && kiln_tensor_device(same) == KILN_CPU);
    KT_CHECK(read_f64(same, got, 2) == KILN_OK);
    KT_NEAR(got[1], 5, 0);
    KT_READ_ERROR(kiln_to_device(mat(), KILN_CUDA), KILN_ERR_DEVICE, "kiln_to_device");
    KT_READ_ERROR(kiln_to_device(mat(), (kiln_device)7), KILN_ERR_DEVICE, "kiln_to_device");
    KT_READ_ERROR(kiln_to_device(stale(), KILN_CPU), KILN_ERR_STALE_HANDLE, "kiln_to_device");
    KT_READ_ERROR(kiln_to_device(poisoned(), KILN_CPU), KILN_ERR_SHAPE, "kiln_reshape");
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(index_select_values);
    KT_RUN(index_select_edges);
    KT_RUN(gather_values);
    KT_RUN(scatter_add_values);
    KT_RUN(scatter_add_in_place_and_copies);
    KT_RUN(scatter_add_is_deterministic);
    KT_RUN(one_hot_values);
    KT_RUN(out_of_range_indices_fail_when_run);
    KT_RUN(index_select_and_gather_bad_input);
    KT_RUN(scatter_add_one_hot_to_device_bad_input);
    return kt_finish();
}
