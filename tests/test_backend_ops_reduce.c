/* Every reduction of the reduction table (src/ir/reduce_table.h) on every registered device, as
 * tests/test_backend_ops.c runs the op table's rows: each row through each of its public
 * functions, in f32, f64, i32 and bool, over four layouts (contiguous, a transposed view, a
 * broadcast, a narrowed view) and four ways (every dim, one dim, one dim kept, every dim kept);
 * the result's dtype and shape against the row's rules, its values on the CPU against the f64 run
 * of the same values and on every other device against the CPU; each differentiable row against
 * central finite differences, and a row whose grad is NONE recording nothing; bad input for
 * each public function. Same switches as test_backend_ops (KILN_TEST_OPS=sum,argmax,
 * KILN_TEST_OPS_UNSUPPORTED=1, KILN_TEST_FILTER). */
#include "backend_ops.h"
#include "engine/fusion.h"

typedef kiln_tensor (*dims_fn)(kiln_tensor, kiln_dims, bool);
typedef kiln_tensor (*correction_fn)(kiln_tensor, kiln_dims, int, bool);
typedef kiln_tensor (*dim_fn)(kiln_tensor, int, bool);

static const kiln__reduce_info *reduction(int row) { return &kiln__reduce_rows[row]; }

static bool reduction_selected(int row) { return name_selected(reduction(row)->name); }

/* The public functions of a row by its signature: [0] kiln_name, [1] kiln_name_dims (NULL where
 * the signature has none). */
static void reduction_publics(const kiln__reduce_info *r, const char *names[2], char buf[2][64]) {
    snprintf(buf[0], 64, "%s", r->name);
    snprintf(buf[1], 64, "%s_dims", r->name);
    names[0] = r->sig == KILN__RSIG_ALL_DIMS || r->sig == KILN__RSIG_DIM ? buf[0] : NULL;
    names[1] = r->sig == KILN__RSIG_DIM ? NULL : buf[1];
}

/* The four ways a case reduces a 2-d input: 0 every dim (kiln_name(t) where the row has it),
 * 1 the last dim, 2 the first kept as size 1, 3 every dim kept; a DIM row: dims 0, 1, 0 kept,
 * -1 kept. CORRECTION rows alternate corrections 1 and 0. */
enum { WAYS = 4 };
static const char *const way_names[WAYS] = {"all dims", "dim 1", "dim 0 keepdim", "all dims keepdim"};

static kiln_tensor call_reduction(const kiln__reduce_info *r, kiln_tensor t, int way) {
    const char *names[2];
    char buf[2][64];
    reduction_publics(r, names, buf);
    kiln_dims dims = way == 1 ? KILN_DIMS(1) : way == 2 ? KILN_DIMS(0) : KILN_ALL_DIMS;
    bool keepdim = way >= 2;
    kiln_set_call_site(__FILE__, __LINE__);
    switch (r->sig) {
    case KILN__RSIG_ALL_DIMS:
        if (way == 0) return ((unary_fn)public_of(names[0]))(t);
        return ((dims_fn)public_of(names[1]))(t, dims, keepdim);
    case KILN__RSIG_DIMS: return ((dims_fn)public_of(names[1]))(t, dims, keepdim);
    case KILN__RSIG_CORRECTION: return ((correction_fn)public_of(names[1]))(t, dims, way % 2 ? 0 : 1, keepdim);
    case KILN__RSIG_DIM: return ((dim_fn)public_of(names[0]))(t, (const int[WAYS]){0, 1, 0, -1}[way], keepdim);
    }
    return KILN_NONE;
}

/* The result's shape for a [rows, cols] input. */
static kiln_shape reduced_shape(const kiln__reduce_info *r, int way, int64_t rows, int64_t cols) {
    if (r->sig == KILN__RSIG_DIM)
        return (kiln_shape[WAYS]){KILN_SHAPE(cols), KILN_SHAPE(rows), KILN_SHAPE(1, cols), KILN_SHAPE(rows, 1)}[way];
    return (kiln_shape[WAYS]){KILN_SCALAR_SHAPE, KILN_SHAPE(rows), KILN_SHAPE(1, cols), KILN_SHAPE(1, 1)}[way];
}

/* The row's dtype rule, as PyTorch's: what the caller gets from an input of dtype dt. */
static kiln_dtype reduced_dtype(const kiln__reduce_info *r, kiln_dtype dt) {
    bool is_float = dt == KILN_F32 || dt == KILN_F64 || dt == KILN_F16 || dt == KILN_BF16;
    switch (r->dtype) {
    case KILN__RDT_ACCUM: return is_float ? dt : KILN_I64;
    case KILN__RDT_FLOAT: return is_float ? dt : KILN_F32;
    case KILN__RDT_I64: return KILN_I64;
    case KILN__RDT_BOOL: return KILN_BOOL;
    default: return dt;
    }
}

static const kiln_dtype reduce_dtypes[] = {KILN_F32, KILN_F64, KILN_I32, KILN_BOOL};
enum { REDUCE_DTYPES = 4 };

/* Input of a reduction case: [ROWS, COLS] values of `values`' kind (floats exact in f32,
 * integers in [-2, 2] so that a product of COLS of them fits i64, bools), in dtype dt, seen
 * through the layout as run_case's input 0. */
static kiln_tensor reduction_input(kiln_device dev, kiln_dtype values, kiln_dtype dt, int layout) {
    kiln_shape made = layout == 1 ? KILN_SHAPE(COLS, ROWS) : layout == 2 ? KILN_SHAPE(1, COLS)
                    : layout == 3 ? KILN_SHAPE(ROWS, COLS + 3) : KILN_SHAPE(ROWS, COLS);
    int64_t n = kiln_shape_numel(made);
    double *v = malloc(sizeof(double) * (size_t)n);
    fill(v, n, KILN__DOMAIN_ANY, values == KILN_BOOL ? KILN_BOOL : KILN_F32, 101 + (uint64_t)layout);
    if (values == KILN_I32)
        for (int64_t i = 0; i < n; i++) v[i] = (double)(int)(v[i] * 0.999); /* [-2, 2] */
    kiln_tensor t = kiln_cast(kiln_from_data(KILN_CPU, KILN_F64, made, v), dt);
    free(v);
    if (dev != KILN_CPU) t = kiln_to_device(t, dev);
    if (layout == 1) t = kiln_transpose(t, 0, 1);
    if (layout == 2) t = kiln_expand(t, KILN_SHAPE(ROWS, COLS));
    if (layout == 3) t = kiln_narrow(t, 1, 2, COLS);
    return t;
}

/* Runs a case; its result as doubles in out (at most ROWS * COLS), its count in *n. Checks the
 * result's dtype and shape against the row's rules. values: the input's values (dt, or the
 * dtype whose values an f64 reference run takes). */
static kiln_status run_reduction(int row, kiln_device dev, kiln_dtype values, kiln_dtype dt, int layout, int way,
                                 double *out, int64_t *n) {
    const kiln__reduce_info *r = reduction(row);
    kiln_tensor y = call_reduction(r, reduction_input(dev, values, dt, layout), way);
    kiln_dtype want_dt = reduced_dtype(r, dt);
    kiln_shape want = reduced_shape(r, way, ROWS, COLS), got = kiln_tensor_shape(y);
    if (got.ndim >= 0) { /* (else a poisoned result: the read reports it) */
        bool same = got.ndim == want.ndim;
        for (int d = 0; same && d < got.ndim; d++) same = got.dims[d] == want.dims[d];
        KT_CHECK_MSG(kiln_tensor_dtype(y) == want_dt, "%s %s: dtype %s, the table says %s", r->name, dtype_str(dt),
                     dtype_str(kiln_tensor_dtype(y)), dtype_str(want_dt));
        KT_CHECK_MSG(same, "%s %s: %d dims, %d expected", r->name, way_names[way], got.ndim, want.ndim);
    }
    if (dev != KILN_CPU) y = kiln_to_device(y, KILN_CPU);
    *n = kiln_shape_numel(want);
    return kiln_into_data(kiln_cast(y, KILN_F64), out, sizeof(double) * (size_t)*n);
}

/* nmse with a floor of 1 on the reference's mean square: the inputs are of order 1, so a result
 * that cancels to about 0 (the variance of a broadcast dim, 1e-14 in f32 on the CPU, 0 on a
 * device) is compared on the inputs' scale, not on its own rounding. */
static double reduction_error(const double *got, const double *want, int64_t n) {
    double norm = 0;
    for (int64_t i = 0; i < n; i++) norm += isfinite(want[i]) ? want[i] * want[i] : 0;
    return nmse(got, want, n) * (norm > 0 ? norm : 1) / (norm > (double)n ? norm : (double)n);
}

/* Exact for integer, bool and index results and for max/min (a value of the input); else by
 * the dtype computed in, loose enough for a product of 185 factors in f32. */
static double reduction_tolerance(const kiln__reduce_info *r, kiln_dtype dt) {
    kiln_dtype out = reduced_dtype(r, dt);
    if (out == KILN_I64 || out == KILN_BOOL || r->dtype == KILN__RDT_SAME) return 0;
    return out == KILN_F64 ? 1e-24 : 1e-9;
}

KT_TEST(the_reduction_table_is_consistent) {
    KT_CHECK(KILN__RED_COUNT >= 12);
    for (int row = 0; row < KILN__RED_COUNT; row++) {
        const kiln__reduce_info *r = reduction(row);
        KT_CHECK_MSG(r->name && r->doc && r->doc[0], "row %d", row);
        if (r->code >= 0) { /* a KERNEL row: its opcode, named as the row, found by opcode, never fused */
            char upper[64];
            size_t n = strlen(r->name);
            for (size_t i = 0; i <= n && i < sizeof upper; i++) upper[i] = (char)(r->name[i] >= 'a' && r->name[i] <= 'z' ? r->name[i] - 32 : r->name[i]);
            KT_CHECK_MSG(strcmp(upper, kiln__opcode_name((kiln__opcode)r->code)) == 0, "%s", r->name);
            KT_CHECK_MSG(kiln__reduce_info_of((kiln__opcode)r->code) == r, "%s", r->name);
            KT_CHECK_MSG(!kiln__expr_opcode_fusable((kiln__opcode)r->code) && !kiln__op_info_of((kiln__opcode)r->code)->name, "%s", r->name);
        }
        const char *names[2];
        char buf[2][64];
        reduction_publics(r, names, buf);
        for (int k = 0; k < 2; k++) KT_CHECK_MSG(!names[k] || public_of(names[k]), "kiln_%s is not in kiln/ops.h", names[k]);
        KT_CHECK_MSG(r->sig != KILN__RSIG_DIM || r->grad == KILN__RGRAD_NONE, "%s", r->name);
        /* the kernels' columns: a KERNEL row folds and finishes, a COMPOSED row neither; an index
         * is not differentiable; a WINNERS rule finds its winners by the INDEX row of its fold */
        KT_CHECK_MSG((r->code >= 0) == (r->fold != KILN__RFOLD_NONE && r->finish != KILN__RFIN_NONE), "%s", r->name);
        KT_CHECK_MSG(r->finish != KILN__RFIN_INDEX || r->grad == KILN__RGRAD_NONE, "%s", r->name);
        bool index_row = r->grad != KILN__RGRAD_WINNERS;
        for (int other = 0; other < KILN__RED_COUNT; other++)
            index_row |= reduction(other)->code >= 0 && reduction(other)->fold == r->fold &&
                         reduction(other)->finish == KILN__RFIN_INDEX;
        KT_CHECK_MSG(index_row, "%s: a WINNERS row without an INDEX row of its fold", r->name);
    }
    /* the dtype rules against PyTorch's results for an i32 input (f32 where torch refuses
     * integers: mean, var, std), written from torch's documentation, not from the table */
    static const struct {
        const char *name;
        kiln_dtype dt;
    } torch_i32[] = {{"sum", KILN_I64}, {"prod", KILN_I64}, {"max", KILN_I32}, {"min", KILN_I32},
                     {"argmax", KILN_I64}, {"argmin", KILN_I64}, {"any", KILN_BOOL}, {"all", KILN_BOOL},
                     {"mean", KILN_F32}, {"var", KILN_F32}, {"std", KILN_F32}, {"logsumexp", KILN_F32},
                     {"count_nonzero", KILN_I64}};
    for (size_t i = 0; i < sizeof torch_i32 / sizeof torch_i32[0]; i++)
        for (int row = 0; row < KILN__RED_COUNT; row++)
            if (strcmp(reduction(row)->name, torch_i32[i].name) == 0)
                KT_CHECK_MSG(reduced_dtype(reduction(row), KILN_I32) == torch_i32[i].dt, "%s", torch_i32[i].name);
    KT_CHECK(kiln__reduce_info_of(KILN__OP_EXP)->name == NULL && kiln__reduce_info_of(KILN__OP_SOFTMAX)->dtype == KILN__RDT_NONE);
    KT_CHECK(kiln__reduce_info_of(KILN__OP_COUNT)->name == NULL);
}

/* Each row, dtype, layout and way on the CPU: the dtype and shape its rules give, and the values
 * of the f64 run of the same values (f32, integer and bool inputs). */
KT_TEST(reductions_match_double_precision) {
    double got[ROWS * COLS], want[ROWS * COLS];
    int cases = 0;
    for (int row = 0; row < KILN__RED_COUNT; row++) {
        if (!reduction_selected(row)) continue;
        const kiln__reduce_info *r = reduction(row);
        for (int d = 0; d < REDUCE_DTYPES; d++)
            for (int layout = 0; layout < LAYOUTS; layout++)
                for (int way = 0; way < WAYS; way++) {
                    kiln_dtype dt = reduce_dtypes[d];
                    int64_t n, nw;
                    kiln_status st = run_reduction(row, KILN_CPU, dt, dt, layout, way, got, &n);
                    KT_CHECK_MSG(st == KILN_OK, "%s %s %s %s: %s", r->name, dtype_str(dt), layout_names[layout],
                                 way_names[way], kiln_last_error());
                    cases++;
                    if (st != KILN_OK || dt == KILN_F64) continue;
                    st = run_reduction(row, KILN_CPU, dt, KILN_F64, layout, way, want, &nw);
                    if (st != KILN_OK) continue; /* (the f64 case is checked on its own) */
                    double e = reduction_error(got, want, n), tol = reduction_tolerance(r, dt);
                    KT_CHECK_MSG(e <= tol, "%s %s %s %s: normalized error %.3g > %.3g against f64", r->name, dtype_str(dt),
                                 layout_names[layout], way_names[way], e, tol);
                }
    }
    printf("reductions on the cpu: %d cases\n", cases);
}

/* Every other registered device against the CPU (views and broadcasts in f32 only). */
KT_TEST(reductions_on_devices_match_the_cpu) {
    double got[ROWS * COLS], want[ROWS * COLS];
    bool list = list_unsupported();
    for (int di = 0; other_device(di) != KILN_CPU; di++) {
        kiln_device dev = other_device(di);
        int cases = 0, unsupported = 0;
        for (int row = 0; row < KILN__RED_COUNT; row++) {
            if (!reduction_selected(row)) continue;
            const kiln__reduce_info *r = reduction(row);
            for (int d = 0; d < REDUCE_DTYPES; d++)
                for (int layout = 0; layout < LAYOUTS; layout++)
                    for (int way = 0; way < WAYS; way++) {
                        kiln_dtype dt = reduce_dtypes[d];
                        if (d > 0 && layout > 0) continue;
                        int64_t n, nw;
                        cases++;
                        if (run_reduction(row, KILN_CPU, dt, dt, layout, way, want, &nw) != KILN_OK) continue;
                        char what[128];
                        snprintf(what, sizeof what, "%s %s %s %s", r->name, dtype_str(dt), layout_names[layout], way_names[way]);
                        kiln_status st = run_reduction(row, dev, dt, dt, layout, way, got, &n);
                        if (!device_case_ran(dev, st, what, list, &unsupported)) continue;
                        device_case_matches(dev, what, dt, reduction_error(got, want, n), reduction_tolerance(r, dt));
                    }
        }
        device_summary(dev, "reduction ", cases, unsupported, list);
    }
}

static kiln_tensor reduction_grad_case(kiln_tensor *in, void *ctx) {
    intptr_t id = (intptr_t)ctx;
    return call_reduction(reduction((int)(id / WAYS)), kiln_mul_scalar(in[0], 2.5), (int)(id % WAYS));
}

/* Each differentiable row, every way, against central differences; a row whose grad is NONE
 * records nothing (its result does not require a gradient). */
KT_TEST(reduction_gradients_match_finite_differences) {
    int checked = 0;
    for (int row = 0; row < KILN__RED_COUNT; row++) {
        const kiln__reduce_info *r = reduction(row);
        if (!reduction_selected(row)) continue;
        for (int way = 0; way < WAYS; way++) {
            kiln_tensor x = kiln_randn(KILN_CPU, KILN_F64, KILN_SHAPE(3, 4), 7);
            kiln_require_grad(x);
            kiln_tensor y = call_reduction(r, kiln_ref(x), way);
            KT_CHECK_MSG(kiln_requires_grad(y) == (r->grad != KILN__RGRAD_NONE), "%s %s: the grad column says %s", r->name,
                         way_names[way], r->grad == KILN__RGRAD_NONE ? "NONE" : "differentiable");
            kiln_release(y);
            kiln_release(x);
            if (r->grad == KILN__RGRAD_NONE) continue;
            char name[96];
            snprintf(name, sizeof name, "%s %s", r->name, way_names[way]);
            kiln_shape shape = KILN_SHAPE(3, 4);
            KT_CHECK_MSG(gc_check(name, reduction_grad_case, (void *)(intptr_t)(row * WAYS + way), 1, &shape, 1e-6) == 0, "%s", name);
            checked++;
        }
    }
    printf("reduction gradients: %d cases\n", checked);
    KT_CHECK(checked > 0 || getenv("KILN_TEST_OPS"));
}

/* Each public function of each row: a consumed handle, a dim out of range, and a dim named twice
 * fail with its name and this file's line. */
KT_TEST(reduction_bad_input_fails_naming_the_op) {
    for (int row = 0; row < KILN__RED_COUNT; row++) {
        const kiln__reduce_info *r = reduction(row);
        if (!reduction_selected(row)) continue;
        const char *names[2];
        char buf[2][64];
        reduction_publics(r, names, buf);
        for (int k = 0; k < 2; k++) {
            if (!names[k]) continue;
            char want[96];
            snprintf(want, sizeof want, "kiln_%s at", names[k]);
            void (*fn)(void) = public_of(names[k]);
            kiln_tensor stale = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3));
            kiln_release(kiln_ref(stale));
            kiln_tensor keep = kiln_ref(stale);
            kiln_release(stale);
            kiln_tensor bad[3] = {stale, kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)),
                                  kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3))};
            kiln_status st[3] = {KILN_ERR_STALE_HANDLE, KILN_ERR_INVALID_ARGUMENT, KILN_ERR_INVALID_ARGUMENT};
            for (int b = 0; b < 3; b++) {
                /* kiln_name(t) takes no dims; one dim cannot be named twice */
                if ((b > 0 && k == 0 && r->sig != KILN__RSIG_DIM) || (b == 2 && r->sig == KILN__RSIG_DIM)) {
                    kiln_release(bad[b]);
                    continue;
                }
                kiln_dims dims = b == 1 ? KILN_DIMS(2) : b == 2 ? KILN_DIMS(1, -1) : KILN_DIMS(0);
                kiln_tensor y;
                kiln_set_call_site(__FILE__, __LINE__);
                if (k == 0 && r->sig == KILN__RSIG_ALL_DIMS) y = ((unary_fn)fn)(bad[b]);
                else if (r->sig == KILN__RSIG_DIM) y = ((dim_fn)fn)(bad[b], b == 0 ? 0 : -3, false);
                else if (r->sig == KILN__RSIG_CORRECTION) y = ((correction_fn)fn)(bad[b], dims, 1, false);
                else y = ((dims_fn)fn)(bad[b], dims, false);
                KT_READ_ERROR(y, st[b], want);
            }
            kiln_release(keep);
        }
    }
}

/* The fuse column: on the CPU, a reduction over the last dim of an elementwise result ends the
 * elementwise group (one fused pass) exactly when its row says LAST, with the bits of the
 * unfused run. */
KT_TEST(reductions_fuse_as_the_table_says) {
    if (!kiln_engine_is_async()) return; /* KILN_SYNC=1 runs each op at once: nothing groups */
    bool was = kiln_fusion_enabled();
    kiln__fusion_set_fuse_tiny(1); /* small tensors on an idle stream would run at dispatch, alone */
    for (int row = 0; row < KILN__RED_COUNT; row++) {
        const kiln__reduce_info *r = reduction(row);
        if (r->code < 0 || !reduction_selected(row)) continue;
        double got[2][ROWS];
        long long fused[2];
        for (int on = 0; on < 2; on++) {
            kiln_fusion_set_enabled(on);
            kiln_tensor x = reduction_input(KILN_CPU, KILN_F32, KILN_F32, 0);
            KT_CHECK(kiln_sync() == KILN_OK);
            kiln__fusion_stats_reset();
            kiln_tensor y = kiln_cast(call_reduction(r, kiln_exp(x), 1), KILN_F64);
            KT_CHECK_MSG(kiln_into_data(y, got[on], sizeof got[on]) == KILN_OK, "%s: %s", r->name, kiln_last_error());
            fused[on] = (long long)kiln__fusion_stats_get().reductions;
        }
        KT_CHECK_MSG(fused[1] == (r->fuse == KILN__RFUSE_LAST), "%s: fuse %s, %lld groups ended in it", r->name,
                     r->fuse == KILN__RFUSE_LAST ? "LAST" : "NONE", fused[1]);
        KT_CHECK_MSG(memcmp(got[0], got[1], sizeof got[0]) == 0, "%s: fused bits differ", r->name);
    }
    kiln_fusion_set_enabled(was);
    kiln__fusion_set_fuse_tiny(-1);
}

int main(void) {
    KT_RUN(the_reduction_table_is_consistent);
    KT_RUN(reductions_match_double_precision);
    KT_RUN(reductions_on_devices_match_the_cpu);
    KT_RUN(reduction_gradients_match_finite_differences);
    KT_RUN(reduction_bad_input_fails_naming_the_op);
    KT_RUN(reductions_fuse_as_the_table_says);
    return kt_finish();
}
