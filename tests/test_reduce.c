/* Reductions (sum, mean, prod, max, min, var, std, logsumexp, argmax, argmin) against double
 * references: every dtype and result dtype, every dim subset with and without keepdim, dense /
 * permuted / strided / offset / expanded inputs, the row, column, split and full-reduction
 * kernel paths, f32 accuracy over a million elements, special values, empty and 0-d tensors,
 * the same bits at any thread count, the scalar fallbacks, and bad input. */
#include "backend/cpu/vmath.h"
#include "nd_layout.h"

typedef enum { R_SUM, R_MEAN, R_PROD, R_MAX, R_MIN, R_VAR, R_STD, R_LSE, R_ARGMAX, R_ARGMIN, R_NOPS } rop;
static const char *const rop_names[R_NOPS] = {"sum", "mean", "prod", "max", "min", "var", "std", "logsumexp", "argmax", "argmin"};

/* ---- the double reference ------------------------------------------------------------------ */
/* Reduces v (shape s) over the dims in mask into out (kept dims in order), like torch. */
static void ref_reduce(rop op, kiln_shape s, const double *v, uint32_t mask, int correction, double *out) {
    int64_t n = kiln_shape_numel(s), n_out = 1, n_red = 1;
    for (int d = 0; d < s.ndim; d++) {
        if (mask >> d & 1) n_red *= s.dims[d];
        else n_out *= s.dims[d];
    }
    double *acc = calloc((size_t)(n_out + 1), sizeof(double)), *stat = calloc((size_t)(n_out + 1), sizeof(double));
    int64_t *pos = calloc((size_t)(n_out + 1), sizeof(int64_t));
    for (int64_t o = 0; o < n_out; o++) {
        acc[o] = op == R_PROD ? 1 : 0;
        stat[o] = op == R_MIN || op == R_ARGMIN ? INFINITY : -INFINITY;
        pos[o] = -1;
    }
    for (int pass = 0; pass < 2; pass++) {
        int64_t idx[KILN_MAX_DIMS] = {0};
        for (int64_t i = 0; i < n; i++) {
            int64_t o = 0, r = 0;
            for (int d = s.ndim - 1; i > 0 && d >= 0 && ++idx[d] == s.dims[d]; d--) idx[d] = 0;
            for (int d = 0; d < s.ndim; d++) {
                if (mask >> d & 1) r = r * s.dims[d] + idx[d];
                else o = o * s.dims[d] + idx[d];
            }
            double x = v[i];
            if (pass == 0) {
                switch (op) {
                case R_SUM: case R_MEAN: case R_VAR: case R_STD: acc[o] += x; break;
                case R_PROD: acc[o] *= x; break;
                case R_MAX: case R_ARGMAX: case R_LSE:
                    if (!isnan(stat[o]) && (x > stat[o] || isnan(x) || pos[o] < 0)) stat[o] = x, pos[o] = r;
                    break;
                default:
                    if (!isnan(stat[o]) && (x < stat[o] || isnan(x) || pos[o] < 0)) stat[o] = x, pos[o] = r;
                    break;
                }
            } else if (op == R_VAR || op == R_STD) {
                double m = acc[o] / (double)n_red;
                stat[o] += (x - m) * (x - m);
            } else if (op == R_LSE) {
                double shift = isfinite(stat[o]) ? stat[o] : 0;
                acc[o] += exp(x - shift);
            }
        }
        if (pass == 0 && (op == R_VAR || op == R_STD))
            for (int64_t o = 0; o < n_out; o++) stat[o] = 0; /* now the sum of squared deviations */
    }
    for (int64_t o = 0; o < n_out; o++) {
        double div = fmax(0.0, (double)n_red - correction);
        switch (op) {
        case R_SUM: case R_PROD: out[o] = acc[o]; break;
        case R_MEAN: out[o] = acc[o] / (double)n_red; break;
        case R_MAX: case R_MIN: out[o] = stat[o]; break;
        case R_VAR: out[o] = stat[o] / div; break;
        case R_STD: out[o] = sqrt(stat[o] / div); break;
        case R_LSE: out[o] = isnan(stat[o]) ? NAN : (isfinite(stat[o]) ? stat[o] : 0) + log(acc[o]); break;
        default: out[o] = (double)(pos[o] < 0 ? 0 : pos[o]); break;
        }
    }
    free(acc);
    free(stat);
    free(pos);
}

/* ---- running one case -------------------------------------------------------------------- */
static kiln_tensor run_op(rop op, kiln_tensor t, kiln_dims dims, bool keepdim, int correction) {
    switch (op) {
    case R_SUM: return kiln_sum_dims(t, dims, keepdim);
    case R_MEAN: return kiln_mean_dims(t, dims, keepdim);
    case R_PROD: return kiln_prod_dims(t, dims, keepdim);
    case R_MAX: return kiln_max_dims(t, dims, keepdim);
    case R_MIN: return kiln_min_dims(t, dims, keepdim);
    case R_VAR: return kiln_var_dims(t, dims, correction, keepdim);
    case R_STD: return kiln_std_dims(t, dims, correction, keepdim);
    case R_LSE: return kiln_logsumexp_dims(t, dims, keepdim);
    case R_ARGMAX: return kiln_argmax(t, dims.d[0], keepdim);
    default: return kiln_argmin(t, dims.d[0], keepdim);
    }
}

static kiln_dtype expected_dtype(rop op, kiln_dtype in) {
    bool fl = ew_is_float(in);
    switch (op) {
    case R_SUM: case R_PROD: return fl ? in : KILN_I64;
    case R_MAX: case R_MIN: return in;
    case R_ARGMAX: case R_ARGMIN: return KILN_I64;
    default: return fl ? in : KILN_F32;
    }
}

static double tolerance(rop op, kiln_dtype rd) {
    if (op == R_ARGMAX || op == R_ARGMIN || !ew_is_float(rd)) return 0;
    double t = rd == KILN_F32 ? 4e-6 : rd == KILN_F64 ? 1e-12 : 2 * ew_rtol(rd);
    return op == R_STD || op == R_VAR ? t * 4 : t;
}

static uint32_t dims_mask(kiln_dims dims, int ndim) {
    if (dims.n < 0) return ndim ? (1u << ndim) - 1 : 0;
    uint32_t m = 0;
    for (int i = 0; i < dims.n; i++) m |= 1u << ((dims.d[i] + ndim) % (ndim ? ndim : 1));
    return m;
}

/* Runs op over dims on t (consumed; holds v of logical shape s) and compares with the
 * reference: result dtype, shape (keepdim or not) and values. */
static void check_case(rop op, kiln_tensor t, kiln_dtype dt, kiln_shape s, const double *v, kiln_dims dims, bool keepdim,
                       int correction, const char *what) {
    uint32_t mask = dims_mask(dims, s.ndim);
    kiln_shape want = {0, {0}};
    for (int d = 0; d < s.ndim; d++) {
        if (!(mask >> d & 1)) want.dims[want.ndim++] = s.dims[d];
        else if (keepdim) want.dims[want.ndim++] = 1;
    }
    int64_t n_out = kiln_shape_numel(want);
    double *ref = malloc(sizeof(double) * (size_t)(n_out + 1));
    ref_reduce(op, s, v, mask, correction, ref);
    kiln_tensor r = run_op(op, t, dims, keepdim, correction);
    kiln_shape got = kiln_tensor_shape(r);
    KT_CHECK_MSG(got.ndim == want.ndim && !memcmp(got.dims, want.dims, sizeof(int64_t) * (size_t)want.ndim),
                 "%s: %s result has %d dims", what, rop_names[op], got.ndim);
    kiln_dtype rd = expected_dtype(op, dt);
    double *res = ew_read(r, rd, n_out);
    if (res) {
        double tol = tolerance(op, rd);
        char label[256];
        snprintf(label, sizeof label, "%s %s %s", what, rop_names[op], kiln_dtype_name(dt));
        if (rd == KILN_F16 || rd == KILN_BF16 || rd == KILN_BOOL || (!ew_is_float(rd) && op != R_ARGMAX && op != R_ARGMIN))
            for (int64_t i = 0; i < n_out; i++) ref[i] = ew_round(rd, ref[i]);
        EW_EXPECT_CLOSE(label, res, ref, n_out, tol, tol * 4);
    }
    free(res);
    free(ref);
}

/* Every dim subset (and KILN_ALL_DIMS, and a negative-dim spelling) of a [3, 4, 5] tensor. */
static void sweep(rop op, kiln_dtype dt, double lo, double hi, int correction) {
    kiln_shape s = KILN_SHAPE(3, 4, 5);
    double v[60];
    ew_values(v, 60, dt, lo, hi);
    for (int layout = 0; layout < ND_NLAYOUTS; layout++) {
        for (int m = 0; m <= 9; m++) {
            kiln_dims dims = {0, {0}};
            if (m == 8) dims = KILN_ALL_DIMS;
            else if (m == 9) dims = KILN_DIMS(-1, 0);
            else
                for (int d = 0; d < 3; d++)
                    if (m >> d & 1) dims.d[dims.n++] = d;
            for (int keep = 0; keep < 2; keep++) {
                char what[96];
                snprintf(what, sizeof what, "%s dims#%d keepdim=%d", nd_layout_names[layout], m, keep);
                check_case(op, nd_make(dt, s, v, (nd_layout)layout), dt, s, v, dims, keep, correction, what);
            }
        }
    }
}

KT_TEST(sum_mean_max_min_every_dtype_dim_layout) {
    for (int k = 0; k < EW_NDTYPES; k++) {
        sweep(R_SUM, ew_dtypes[k], -3, 3.99, 0);
        sweep(R_MEAN, ew_dtypes[k], -3, 3.99, 0);
        sweep(R_MAX, ew_dtypes[k], -3, 3.99, 0);
        sweep(R_MIN, ew_dtypes[k], -3, 3.99, 0);
    }
}

KT_TEST(prod_every_dtype) {
    for (int k = 0; k < EW_NDTYPES; k++) {
        bool fl = ew_is_float(ew_dtypes[k]);
        sweep(R_PROD, ew_dtypes[k], fl ? 0.7 : -1, fl ? 1.3 : 2.99, 0); /* ints -1, 0, 1, 2: exact */
    }
}

KT_TEST(var_std_logsumexp_dtypes_and_corrections) {
    static const kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16, KILN_I32, KILN_BOOL};
    for (int k = 0; k < 6; k++) {
        for (int corr = 0; corr <= 2; corr++) {
            sweep(R_VAR, dts[k], -3, 4, corr);
            sweep(R_STD, dts[k], -3, 4, corr);
        }
        sweep(R_LSE, dts[k], -30, 30, 0);
    }
}

KT_TEST(argmax_argmin_every_dtype_and_dim) {
    kiln_shape s = KILN_SHAPE(3, 4, 5);
    double v[60];
    for (int k = 0; k < EW_NDTYPES; k++) {
        kiln_dtype dt = ew_dtypes[k];
        ew_values(v, 60, dt, -2, 2.99); /* few distinct values: many ties */
        for (int layout = 0; layout < ND_NLAYOUTS; layout++)
            for (int dim = -3; dim < 3; dim++)
                for (int keep = 0; keep < 2; keep++) {
                    check_case(R_ARGMAX, nd_make(dt, s, v, (nd_layout)layout), dt, s, v, KILN_DIMS(dim), keep, 0, "argmax");
                    check_case(R_ARGMIN, nd_make(dt, s, v, (nd_layout)layout), dt, s, v, KILN_DIMS(dim), keep, 0, "argmin");
                }
    }
}

/* Long rows (vector bodies and tails), tall columns (column tiles), few long outputs (split
 * into pieces), many short outputs, and full reductions, for every op. */
KT_TEST(kernel_paths_every_op) {
    static const kiln_shape shapes[] = {{2, {7, 1000}},  {2, {1000, 300}}, {3, {5, 33, 9}},
                                        {2, {513, 17}},  {2, {2, 66001}},  {2, {66001, 2}}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        kiln_shape s = shapes[si];
        int64_t n = kiln_shape_numel(s);
        bool big = n > 100000; /* few outputs, long ranges: the split path; f64 shares it with f32 */
        double *v = malloc(sizeof(double) * (size_t)n);
        for (int ti = 0; ti < 3; ti++) {
            kiln_dtype dt = ti == 0 ? KILN_F32 : ti == 1 ? KILN_I64 : KILN_F64;
            if (big && dt == KILN_F64) continue;
            for (int op = 0; op < R_NOPS; op++) {
                if (dt == KILN_I64 && op != R_SUM && op != R_MAX && op != R_MIN && op != R_ARGMAX) continue;
                ew_values(v, n, dt, op == R_PROD ? 0.999 : -5, op == R_PROD ? 1.001 : 5);
                for (int dim = -1; dim < s.ndim; dim++) {
                    if (dim < 0 && (op == R_ARGMAX || op == R_ARGMIN)) continue;
                    if (big && dim >= 0 && s.dims[dim] == 2) continue;
                    kiln_dims dims = dim < 0 ? KILN_ALL_DIMS : KILN_DIMS(dim);
                    char what[96];
                    snprintf(what, sizeof what, "shape#%zu dim %d", si, dim);
                    for (int layout = 0; layout < (big ? 1 : 2); layout++)
                        check_case((rop)op, nd_make(dt, s, v, (nd_layout)layout), dt, s, v, dims, false, 1, what);
                }
            }
        }
        free(v);
    }
}

KT_TEST(f32_sum_of_a_million_is_accurate) {
    int64_t n = 1 << 20;
    float *x = malloc(sizeof(float) * (size_t)n);
    double want = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = (float)ew_uniform(0.5, 1.5);
        want += x[i];
    }
    kiln_tensor t = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(n), x);
    double got;
    KT_CHECK(kiln_into_scalar_f64(kiln_sum(kiln_ref(t)), &got) == KILN_OK);
    KT_CHECK_MSG(fabs(got - want) <= 1e-6 * want, "sum %.10g want %.10g", got, want);
    /* as one column of a tall matrix, and as 16 rows */
    KT_CHECK(kiln_into_scalar_f64(kiln_sum(kiln_reshape(kiln_ref(t), KILN_SHAPE(n / 16, 16))), &got) == KILN_OK);
    KT_CHECK_MSG(fabs(got - want) <= 1e-6 * want, "2-d sum %.10g want %.10g", got, want);
    float cols[16];
    double wcols[16] = {0};
    for (int64_t i = 0; i < n; i++) wcols[i % 16] += x[i];
    KT_CHECK(kiln_into_data(kiln_sum_dims(kiln_reshape(kiln_ref(t), KILN_SHAPE(n / 16, 16)), KILN_DIMS(0), false), cols,
                            sizeof cols) == KILN_OK);
    for (int j = 0; j < 16; j++) KT_NEAR(cols[j], wcols[j], 1e-6);
    double mean;
    KT_CHECK(kiln_into_scalar_f64(kiln_mean(t), &mean) == KILN_OK);
    KT_NEAR(mean, want / (double)n, 1e-7);
    free(x);
}

/* Partial sums are merged in a fixed order: the result does not depend on the thread count. */
KT_TEST(same_bits_at_any_thread_count) {
    int64_t n = 300007;
    double *v = malloc(sizeof(double) * (size_t)n);
    ew_values(v, n, KILN_F32, -100, 100);
    kiln_tensor t = ew_tensor(KILN_F32, KILN_SHAPE(n), v);
    int saved = kiln_num_threads();
    float r[4][3];
    for (int k = 0; k < 3; k++) {
        kiln_set_num_threads(k + 1);
        KT_CHECK(kiln_into_scalar(kiln_sum(kiln_ref(t)), &r[k][0]) == KILN_OK);
        KT_CHECK(kiln_into_scalar(kiln_var_dims(kiln_ref(t), KILN_ALL_DIMS, 1, false), &r[k][1]) == KILN_OK);
        KT_CHECK(kiln_into_scalar(kiln_logsumexp_dims(kiln_ref(t), KILN_ALL_DIMS, false), &r[k][2]) == KILN_OK);
    }
    kiln_set_num_threads(saved);
    for (int k = 1; k < 3; k++) KT_CHECK(!memcmp(r[0], r[k], sizeof r[0]));
    kiln_release(t);
    free(v);
}

/* bf16 sums and means on the CPU read bf16 as stored, into f32 (no COPY op: the profiler sees
 * SUM or MEAN alone), through each kernel path: [outer, K, inner] blocks (a conv's bias
 * gradient over N, H, W, dense and with a padded row stride), rows, strided runs, columns and
 * the split full reduction. Against double references within bf16's rounding of the result,
 * the same bits on 1 and 2 threads, and the scalar primitives (KILN_ISA=scalar's) too. */
KT_TEST(bf16_sums_read_as_stored) {
    static const struct {
        int64_t d[4];
        int nd;
        uint32_t mask;
        bool pad_w; /* a [.., W + 5] buffer sliced to W */
    } cases[] = {
        {{6, 64, 14, 14}, 4, 0xd, false}, {{5, 7, 9, 11}, 4, 0xd, false}, {{3, 5, 4, 9}, 4, 0xd, true},
        {{37, 301}, 2, 0x2, false},       {{37, 301}, 2, 0x1, false},    {{70001}, 1, 0x1, false},
        {{9, 41, 3}, 3, 0x5, false},
    };
    int saved = kiln_num_threads();
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        kiln_shape s = {cases[ci].nd, {0}};
        memcpy(s.dims, cases[ci].d, sizeof(int64_t) * (size_t)s.ndim);
        int64_t n = kiln_shape_numel(s), wpad = cases[ci].pad_w ? 5 : 0;
        kiln_shape stored = s;
        stored.dims[s.ndim - 1] += wpad;
        int64_t ns = kiln_shape_numel(stored);
        double *v = malloc(sizeof(double) * (size_t)ns), *dense = malloc(sizeof(double) * (size_t)n);
        ew_values(v, ns, KILN_BF16, -3, 3);
        int64_t last = s.dims[s.ndim - 1];
        for (int64_t i = 0; i < n; i++) dense[i] = v[(i / last) * (last + wpad) + i % last];
        kiln_dims dims = {0, {0}};
        for (int d = 0; d < s.ndim; d++)
            if (cases[ci].mask >> d & 1) dims.d[dims.n++] = d;
        uint16_t bits[3][2][512];
        for (int run = 0; run < 3; run++) { /* 1 thread, 2 threads, scalar primitives */
            kiln_set_num_threads(run == 0 ? 1 : 2);
            if (run == 2 && kiln__vmath_force_isa("scalar") != 0) break;
            for (int mean = 0; mean < 2; mean++) {
                kiln_tensor t = ew_tensor(KILN_BF16, stored, v);
                if (wpad) t = kiln_slice(t, s.ndim - 1, 0, last, 1);
                kiln_profiler_start();
                check_case(mean ? R_MEAN : R_SUM, kiln_ref(t), KILN_BF16, s, dense, dims, false, 1, "bf16 read");
                kiln_tensor r = mean ? kiln_mean_dims(t, dims, false) : kiln_sum_dims(t, dims, false);
                int64_t nr = kiln_tensor_numel(r);
                KT_CHECK(nr <= 512 && kiln_into_data(r, bits[run][mean], sizeof(uint16_t) * (size_t)nr) == KILN_OK);
                kiln_profiler_stop();
                kiln_profile_event ev[64];
                size_t ne = kiln_profiler_events(ev, 64);
                int copies = 0, reductions = 0; /* two reductions, each a COPY only for its bf16 result */
                for (size_t e = 0; e < ne && e < 64; e++) {
                    copies += strcmp(ev[e].kernel, "COPY") == 0;
                    reductions += strcmp(ev[e].kernel, mean ? "MEAN" : "SUM") == 0;
                }
                KT_CHECK_MSG(reductions == 2 && copies == 2, "case %zu: %d reductions, %d casts", ci, reductions, copies);
                if (run == 1) KT_CHECK_MSG(!memcmp(bits[run][mean], bits[0][mean], sizeof(uint16_t) * (size_t)nr),
                                          "case %zu run %d mean %d: other bits than on one thread", ci, run, mean);
            }
            if (run == 2) kiln__vmath_force_isa(NULL);
        }
        free(v);
        free(dense);
    }
    kiln_set_num_threads(saved);
}

/* The vector primitives and their scalar fallbacks give the same answers. */
KT_TEST(scalar_fallbacks) {
    if (kiln__vmath_force_isa("scalar") != 0) return;
    kiln_shape s = KILN_SHAPE(37, 301);
    double *v = malloc(sizeof(double) * 37 * 301);
    for (int k = 0; k < 2; k++) {
        kiln_dtype dt = k ? KILN_F64 : KILN_F32;
        for (int op = 0; op < R_NOPS; op++)
            for (int dim = 0; dim < 2; dim++) {
                ew_values(v, 37 * 301, dt, op == R_PROD ? 0.99 : -4, op == R_PROD ? 1.01 : 4);
                check_case((rop)op, ew_tensor(dt, s, v), dt, s, v, KILN_DIMS(dim), true, 1, "scalar isa");
            }
    }
    kiln__vmath_force_isa(NULL);
    free(v);
}

KT_TEST(special_values) {
    /* rows: has NaN | all -inf | has +inf | huge | -inf and finite */
    double v[5][4] = {{1, NAN, 3, 2}, {-INFINITY, -INFINITY, -INFINITY, -INFINITY}, {1, INFINITY, 2, -INFINITY},
                      {1000, 999, 1000, -1000}, {-INFINITY, 0, 1, -INFINITY}};
    kiln_shape s = KILN_SHAPE(5, 4);
    for (int k = 0; k < 2; k++) {
        kiln_dtype dt = k ? KILN_F64 : KILN_F32;
        for (int op = 0; op < R_NOPS; op++) {
            if (op == R_PROD || op == R_VAR || op == R_STD) continue; /* inf - inf: NaN both ways */
            check_case((rop)op, ew_tensor(dt, s, &v[0][0]), dt, s, &v[0][0], KILN_DIMS(1), false, 0, "special rows");
        }
    }
    float lse[5];
    KT_CHECK(kiln_into_data(kiln_logsumexp_dims(ew_tensor(KILN_F32, s, &v[0][0]), KILN_DIMS(1), false), lse,
                            sizeof lse) == KILN_OK);
    KT_CHECK(isnan(lse[0]) && lse[1] == -INFINITY && lse[2] == INFINITY);
    KT_NEAR(lse[3], 1000 + log(2 + exp(-1.0)), 1e-6);
    int64_t am[5];
    KT_CHECK(kiln_into_data(kiln_argmax(ew_tensor(KILN_F32, s, &v[0][0]), 1, false), am, sizeof am) == KILN_OK);
    KT_CHECK(am[0] == 1 && am[1] == 0 && am[2] == 1 && am[3] == 0 && am[4] == 2);
    KT_CHECK(kiln_into_data(kiln_argmin(ew_tensor(KILN_F32, s, &v[0][0]), 1, false), am, sizeof am) == KILN_OK);
    KT_CHECK(am[0] == 1 && am[1] == 0 && am[2] == 3 && am[3] == 3 && am[4] == 0);
    /* integer sums accumulate in i64: past the range of i32 */
    int32_t big[3] = {2000000000, 2000000000, 2000000000};
    int64_t total;
    KT_CHECK(kiln_into_data(kiln_sum(kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(3), big)), &total, sizeof total) ==
             KILN_OK);
    KT_CHECK(total == 6000000000LL);
}

KT_TEST(empty_and_size_one_and_scalar) {
    ew_mark mark = ew_mark_now();
    kiln_shape e = KILN_SHAPE(3, 0);
    double none[1] = {0};
    check_case(R_SUM, ew_tensor(KILN_F32, e, none), KILN_F32, e, none, KILN_DIMS(1), false, 0, "empty");
    check_case(R_PROD, ew_tensor(KILN_I32, e, none), KILN_I32, e, none, KILN_DIMS(1), true, 0, "empty");
    check_case(R_MEAN, ew_tensor(KILN_F64, e, none), KILN_F64, e, none, KILN_DIMS(1), false, 0, "empty");
    check_case(R_VAR, ew_tensor(KILN_F32, e, none), KILN_F32, e, none, KILN_DIMS(1), false, 1, "empty");
    check_case(R_LSE, ew_tensor(KILN_F32, e, none), KILN_F32, e, none, KILN_DIMS(1), false, 0, "empty");
    check_case(R_SUM, ew_tensor(KILN_F32, e, none), KILN_F32, e, none, KILN_ALL_DIMS, false, 0, "empty");
    /* max over the non-empty dim of an empty tensor is fine: the result is empty */
    check_case(R_MAX, ew_tensor(KILN_F32, e, none), KILN_F32, e, none, KILN_DIMS(0), false, 0, "empty");
    check_case(R_ARGMIN, ew_tensor(KILN_F32, e, none), KILN_F32, e, none, KILN_DIMS(0), true, 0, "empty");
    /* size-1 dims, an empty dim list (reduces nothing) and 0-d tensors */
    double v[6] = {1, -2, 3, 4, 5, -6};
    kiln_shape s1 = KILN_SHAPE(1, 6, 1);
    for (int op = 0; op < R_NOPS; op++) {
        check_case((rop)op, ew_tensor(KILN_F32, s1, v), KILN_F32, s1, v, KILN_DIMS(2), false, 0, "size 1");
        check_case((rop)op, ew_tensor(KILN_F32, s1, v), KILN_F32, s1, v, KILN_DIMS(0), true, 0, "size 1");
        if (op < R_ARGMAX) check_case((rop)op, ew_tensor(KILN_F32, s1, v), KILN_F32, s1, v, (kiln_dims){0, {0}}, false, 0, "no dims");
        kiln_shape s0 = KILN_SCALAR_SHAPE;
        check_case((rop)op, ew_tensor(KILN_F64, s0, v), KILN_F64, s0, v, op < R_ARGMAX ? KILN_ALL_DIMS : KILN_DIMS(0), false, 1, "0-d");
        check_case((rop)op, ew_tensor(KILN_F64, s0, v), KILN_F64, s0, v, KILN_DIMS(-1), true, 1, "0-d");
    }
    float x;
    KT_CHECK(kiln_into_scalar(kiln_sum(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0))), &x) == KILN_OK && x == 0);
    KT_CHECK(kiln_into_scalar(kiln_prod(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0))), &x) == KILN_OK && x == 1);
    KT_CHECK(kiln_into_scalar(kiln_mean(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0))), &x) == KILN_OK && isnan(x));
    EW_NO_LEAKS(mark);
}

/* Broadcast (stride 0) inputs: reduced and kept dims may be expanded. */
KT_TEST(expanded_inputs) {
    double row[5] = {1, 2, 3, 4, 5.5};
    double v[4 * 5];
    for (int i = 0; i < 20; i++) v[i] = row[i % 5];
    kiln_shape s = KILN_SHAPE(4, 5);
    for (int op = 0; op < R_NOPS; op++)
        for (int dim = 0; dim < 2; dim++) {
            kiln_tensor t = kiln_expand(ew_tensor(KILN_F32, KILN_SHAPE(1, 5), row), KILN_SHAPE(4, 5));
            check_case((rop)op, t, KILN_F32, s, v, KILN_DIMS(dim), false, 1, "expanded rows");
            t = kiln_expand(ew_tensor(KILN_F32, KILN_SHAPE(1, 5), row), KILN_SHAPE(4, 5));
            if (op < R_ARGMAX) check_case((rop)op, t, KILN_F32, s, v, KILN_ALL_DIMS, false, 1, "expanded all");
            else kiln_release(t);
        }
}

/* ---- bad input ------------------------------------------------------------------------------ */
KT_TEST(bad_input) {
    ew_mark mark = ew_mark_now();
    kiln_tensor x = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3));
    int line;
    kiln_tensor r;
    r = kiln_sum_dims(kiln_ref(x), KILN_DIMS(2), false); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_sum_dims", line);
    r = kiln_mean_dims(kiln_ref(x), KILN_DIMS(-3), false); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_mean_dims", line);
    r = kiln_max_dims(kiln_ref(x), KILN_DIMS(1, -1), true); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_max_dims", line);
    KT_CHECK(strstr(kiln_last_error(), "more than once") != NULL);
    r = kiln_var_dims(kiln_ref(x), (kiln_dims){9, {0}}, 1, false); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_var_dims", line);
    r = kiln_argmax(kiln_ref(x), 2, false); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_argmax", line);
    r = kiln_argmin(kiln_ref(x), -3, false); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, "kiln_argmin", line);
    /* max / min / argmax of an empty dim: no identity */
    kiln_tensor e = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3, 0));
    r = kiln_max(kiln_ref(e)); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_max", line);
    r = kiln_min_dims(kiln_ref(e), KILN_DIMS(1), false); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_min_dims", line);
    r = kiln_argmax(kiln_ref(e), 1, true); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_argmax", line);
    kiln_release(e);
    /* stale, none, poisoned */
    kiln_tensor stale = ew_stale();
    r = kiln_sum(stale); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, "kiln_sum", line);
    r = kiln_logsumexp_dims(stale, KILN_DIMS(0), false); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, "kiln_logsumexp_dims", line);
    r = kiln_argmax(stale, 0, true); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, "kiln_argmax", line);
    r = kiln_prod(KILN_NONE); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, "kiln_prod", line);
    r = kiln_argmin(KILN_NONE, 0, false); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, "kiln_argmin", line);
    line = __LINE__; r = kiln_std_dims(EW_POISONED(), KILN_DIMS(0), 1, false);
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_reshape", line);
    line = __LINE__; r = kiln_mean(EW_POISONED());
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_reshape", line);
    /* a failed op leaves the others usable */
    float s;
    KT_CHECK(kiln_into_scalar(kiln_sum(x), &s) == KILN_OK && s == 0);
    EW_NO_LEAKS(mark);
}

int main(void) {
    KT_RUN(sum_mean_max_min_every_dtype_dim_layout);
    KT_RUN(prod_every_dtype);
    KT_RUN(var_std_logsumexp_dtypes_and_corrections);
    KT_RUN(argmax_argmin_every_dtype_and_dim);
    KT_RUN(kernel_paths_every_op);
    KT_RUN(f32_sum_of_a_million_is_accurate);
    KT_RUN(same_bits_at_any_thread_count);
    KT_RUN(bf16_sums_read_as_stored);
    KT_RUN(scalar_fallbacks);
    KT_RUN(special_values);
    KT_RUN(empty_and_size_one_and_scalar);
    KT_RUN(expanded_inputs);
    KT_RUN(bad_input);
    return kt_finish();
}
