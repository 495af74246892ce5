/* Every op of the row-op table (src/ir/row_table.h: softmax, log_softmax, the norms, the losses)
 * on every registered device, as tests/test_backend_ops.c runs the op table's rows: each row
 * through its public function, called by its dims column (the signature), on inputs of shape
 * [3, 4, 5] seen through four layouts (contiguous, a transposed view, a broadcast, a narrowed
 * view: the first input's; weights, biases and targets contiguous); in f32 and f64 (and i32
 * for a FLOAT row); the result's dtype and shape against the row's rules; its values on the CPU
 * against the f64 run within the row's tol, and on every other device against the CPU (f32,
 * contiguous and transposed); each
 * row's gradient, every float input's, against central finite differences; bad input (a
 * consumed handle, integers to a FLOAT_ONLY row) naming the function. Same switches as
 * test_backend_ops (KILN_TEST_OPS=softmax,mse_loss, KILN_TEST_OPS_UNSUPPORTED=1,
 * KILN_TEST_FILTER). */
#include "backend_ops.h"

/* The public functions of kiln/nn_ops.h's call-site list too (the COMPOSED rows' are there). */
static const struct {
    const char *name;
    void (*fn)(void);
} nn_publics[] = {
#define NN_PUBLIC(ret, name, params, args) {#name, (void (*)(void))kiln_##name},
    KILN_NN_ROW_API(NN_PUBLIC)
#undef NN_PUBLIC
};

static void (*row_public(const char *name))(void) {
    for (size_t i = 0; i < sizeof nn_publics / sizeof nn_publics[0]; i++)
        if (strcmp(nn_publics[i].name, name) == 0) return nn_publics[i].fn;
    return public_of(name);
}

static const kiln__row_info *row_op(int row) { return &kiln__row_rows[row]; }

/* The cases' shapes: x [N, C, L]; NORMALIZED rows normalise over [L], GROUPS rows split C in
 * two groups; CLASSES rows take C classes along dim 1 and targets [N, L]. */
enum { N = 3, C = 4, L = 5, X_NUMEL = N * C * L, GROUPS = 2 };

static bool is_classes(const kiln__row_info *r) {
    return r->dims == KILN__RDIMS_CLASSES || r->dims == KILN__RDIMS_CLASSES_OPT;
}

/* The shape of tensor argument k of a row. */
static kiln_shape arg_shape(const kiln__row_info *r, int k) {
    if (k == 0) return KILN_SHAPE(N, C, L);
    if (r->dims == KILN__RDIMS_NORMALIZED) return KILN_SHAPE(L);
    if (r->dims == KILN__RDIMS_GROUPS) return KILN_SHAPE(C);
    if (is_classes(r)) return KILN_SHAPE(N, L);
    return KILN_SHAPE(N, C, L); /* a loss's target */
}

/* Class indices for a CLASSES row, i64 [N, L], each in [0, C). */
static kiln_tensor class_targets(kiln_device dev) {
    int64_t t[N * L];
    for (int i = 0; i < N * L; i++) t[i] = (i * 7 + 3) % C;
    return kiln_from_data(dev, KILN_I64, KILN_SHAPE(N, L), t);
}

/* Runs the row's public function on in[0..arity-1] (consumed), by its dims column. */
static kiln_tensor call_row_op(const kiln__row_info *r, kiln_tensor *in) {
    void (*fn)(void) = row_public(r->name);
    kiln_set_call_site(__FILE__, __LINE__);
    switch (r->dims) {
    case KILN__RDIMS_DIM: return ((kiln_tensor(*)(kiln_tensor, int))fn)(in[0], -1);
    case KILN__RDIMS_NORMALIZED:
        if (r->arity == 3)
            return ((kiln_tensor(*)(kiln_tensor, kiln_shape, kiln_tensor, kiln_tensor, double))fn)(in[0], KILN_SHAPE(L), in[1],
                                                                                                  in[2], 1e-5);
        return ((kiln_tensor(*)(kiln_tensor, kiln_shape, kiln_tensor, double))fn)(in[0], KILN_SHAPE(L), in[1], 1e-5);
    case KILN__RDIMS_GROUPS:
        return ((kiln_tensor(*)(kiln_tensor, int64_t, kiln_tensor, kiln_tensor, double))fn)(in[0], GROUPS, in[1], in[2], 1e-5);
    case KILN__RDIMS_NONE: return ((kiln_tensor(*)(kiln_tensor, kiln_tensor))fn)(in[0], in[1]);
    case KILN__RDIMS_NONE_K: return ((kiln_tensor(*)(kiln_tensor, kiln_tensor, double))fn)(in[0], in[1], 0.75);
    case KILN__RDIMS_NONE_FLAG: return ((kiln_tensor(*)(kiln_tensor, kiln_tensor, bool))fn)(in[0], in[1], false);
    case KILN__RDIMS_CLASSES: return ((kiln_tensor(*)(kiln_tensor, kiln_tensor))fn)(in[0], in[1]);
    case KILN__RDIMS_CLASSES_OPT:
        return ((kiln_tensor(*)(kiln_tensor, kiln_tensor, kiln_cross_entropy_options))fn)(in[0], in[1],
                                                                                          kiln_cross_entropy_defaults());
    }
    return KILN_NONE;
}

/* Values of the row's domain for argument k, exact in f32. */
static void row_fill(const kiln__row_info *r, int k, double *v, int64_t n, kiln_dtype dt) {
    fill(v, n, KILN__DOMAIN_ANY, dt, 31 + 7919 * (uint64_t)k);
    if (r->domain == KILN__ROWDOM_PROB)
        for (int64_t i = 0; i < n; i++) v[i] = (double)(float)(0.05 + 0.9 * (v[i] + 2.5) / 5.0);
}

/* Argument k of a case on dev in dtype dt, with the values of dtype `values` (integers for an
 * i32 case and its f64 reference): the first seen through the layout. */
static kiln_tensor row_arg(const kiln__row_info *r, int k, kiln_device dev, kiln_dtype values, kiln_dtype dt, int layout) {
    if (k == 1 && is_classes(r)) return class_targets(dev);
    kiln_shape made = arg_shape(r, k);
    if (k == 0 && layout == 1) made = KILN_SHAPE(N, L, C);
    if (k == 0 && layout == 2) made = KILN_SHAPE(1, C, L);
    if (k == 0 && layout == 3) made = KILN_SHAPE(N, C, L + 3);
    int64_t n = kiln_shape_numel(made);
    double v[N * C * (L + 3)];
    row_fill(r, k, v, n, values);
    kiln_tensor t = kiln_cast(kiln_from_data(KILN_CPU, KILN_F64, made, v), dt);
    if (dev != KILN_CPU) t = kiln_to_device(t, dev);
    if (k == 0 && layout == 1) t = kiln_transpose(t, 1, 2);
    if (k == 0 && layout == 2) t = kiln_expand(t, KILN_SHAPE(N, C, L));
    if (k == 0 && layout == 3) t = kiln_narrow(t, 2, 3, L);
    return t;
}

/* The row's rules: the result's dtype for an input of dtype dt (a FLOAT row's integers give
 * f32; a FLOAT_ONLY row refuses them), and its element count. */
static kiln_dtype row_dtype(kiln_dtype dt) { return dt == KILN_F32 || dt == KILN_F64 ? dt : KILN_F32; }
static int64_t row_numel(const kiln__row_info *r) { return r->shape == KILN__ROWSHAPE_SCALAR ? 1 : X_NUMEL; }

/* Runs a case: the result as doubles in out, its dtype and shape checked against the row. */
static kiln_status run_row(int row, kiln_device dev, kiln_dtype values, kiln_dtype dt, int layout, double *out) {
    const kiln__row_info *r = row_op(row);
    kiln_tensor in[3];
    for (int k = 0; k < r->arity; k++) in[k] = row_arg(r, k, dev, values, dt, layout);
    kiln_tensor y = call_row_op(r, in);
    kiln_shape got = kiln_tensor_shape(y);
    if (got.ndim >= 0) { /* (else a poisoned result: the read reports it) */
        KT_CHECK_MSG(kiln_tensor_dtype(y) == row_dtype(dt), "%s %s: dtype %s", r->name, dtype_str(dt),
                     dtype_str(kiln_tensor_dtype(y)));
        KT_CHECK_MSG(r->shape == KILN__ROWSHAPE_SCALAR ? got.ndim == 0 : got.ndim == 3 && got.dims[2] == L, "%s: %d dims",
                     r->name, got.ndim);
    }
    if (dev != KILN_CPU) y = kiln_to_device(y, KILN_CPU);
    return kiln_into_data(kiln_cast(y, KILN_F64), out, sizeof(double) * (size_t)row_numel(r));
}

/* The dtypes a row runs in: f32, f64, and i32 for a FLOAT row (computed in f32). */
static int row_dtypes(const kiln__row_info *r, kiln_dtype *out) {
    out[0] = KILN_F32, out[1] = KILN_F64, out[2] = KILN_I32;
    return r->dtype == KILN__ROWDT_FLOAT ? 3 : 2;
}

KT_TEST(the_row_table_is_consistent) {
    KT_CHECK(KILN__ROW_COUNT >= 14);
    for (int row = 0; row < KILN__ROW_COUNT; row++) {
        const kiln__row_info *r = row_op(row);
        KT_CHECK_MSG(r->name && r->doc && r->doc[0] && r->arity >= 1 && r->arity <= 3 && r->tol > 0, "row %d", row);
        KT_CHECK_MSG(row_public(r->name) != NULL, "kiln_%s is not in kiln/ops.h or kiln/nn_ops.h's call-site list", r->name);
        char ex[64];
        snprintf(ex, sizeof ex, "%s_ex", r->name);
        KT_CHECK_MSG((row_public(ex) != NULL) == (r->ex != KILN__ROWEX_NO), "%s: its ex column and kiln_%s", r->name, ex);
        KT_CHECK_MSG(r->args[0] == '(' && r->py[0], "%s: args %s, py %s", r->name,
                     r->args, r->py);
        if (r->code >= 0) { /* a KERNEL row: its opcode, named as the row, in no other table */
            char upper[64];
            size_t n = strlen(r->name);
            for (size_t i = 0; i <= n && i < sizeof upper; i++) upper[i] = (char)(r->name[i] >= 'a' && r->name[i] <= 'z' ? r->name[i] - 32 : r->name[i]);
            KT_CHECK_MSG(strcmp(upper, kiln__opcode_name((kiln__opcode)r->code)) == 0, "%s", r->name);
            KT_CHECK_MSG(!kiln__op_info_of((kiln__opcode)r->code)->name && !kiln__reduce_info_of((kiln__opcode)r->code)->name,
                         "%s", r->name);
            KT_CHECK_MSG(r->dims == KILN__RDIMS_DIM && public_of(r->name), "%s: a KERNEL row is kiln/ops.h's", r->name);
        }
        /* arity by signature: one tensor along a dim; norms take weight (and bias); losses a target */
        int want = r->dims == KILN__RDIMS_DIM ? 1 : r->dims == KILN__RDIMS_GROUPS ? 3 : r->dims == KILN__RDIMS_NORMALIZED ? r->arity : 2;
        KT_CHECK_MSG(r->arity == want, "%s: arity %d", r->name, r->arity);
        KT_CHECK_MSG((r->shape == KILN__ROWSHAPE_SCALAR) == (r->dims >= KILN__RDIMS_NONE), "%s: a loss is 0-d", r->name);
    }
}

/* Each row, dtype and layout on the CPU against the f64 run of the same values. */
KT_TEST(rows_match_double_precision) {
    double got[X_NUMEL], want[X_NUMEL];
    int cases = 0;
    for (int row = 0; row < KILN__ROW_COUNT; row++) {
        const kiln__row_info *r = row_op(row);
        if (!name_selected(r->name)) continue;
        kiln_dtype dts[3];
        int nd = row_dtypes(r, dts);
        for (int d = 0; d < nd; d++)
            for (int layout = 0; layout < LAYOUTS; layout++) {
                kiln_status st = run_row(row, KILN_CPU, dts[d], dts[d], layout, got);
                KT_CHECK_MSG(st == KILN_OK, "%s %s %s: %s", r->name, dtype_str(dts[d]), layout_names[layout], kiln_last_error());
                cases++;
                if (st != KILN_OK || dts[d] == KILN_F64) continue;
                if (run_row(row, KILN_CPU, dts[d], KILN_F64, layout, want) != KILN_OK) continue;
                double e = nmse(got, want, row_numel(r));
                KT_CHECK_MSG(e <= r->tol, "%s %s %s: normalized error %.3g > %.3g against f64", r->name, dtype_str(dts[d]),
                             layout_names[layout], e, r->tol);
            }
    }
    printf("row ops on the cpu: %d cases\n", cases);
}

/* Every other registered device against the CPU: f32, contiguous and transposed. */
KT_TEST(rows_on_devices_match_the_cpu) {
    double got[X_NUMEL], want[X_NUMEL];
    bool list = list_unsupported();
    for (int di = 0; other_device(di) != KILN_CPU; di++) {
        kiln_device dev = other_device(di);
        int cases = 0, unsupported = 0;
        for (int row = 0; row < KILN__ROW_COUNT; row++) {
            const kiln__row_info *r = row_op(row);
            if (!name_selected(r->name)) continue;
            /* f32, contiguous and transposed: each composition is several kernels the device
             * compiles (minutes with a cold program cache on a loaded machine), and the
             * other layouts' and dtypes' code is the elementwise and reduction rows' */
            for (int layout = 0; layout < 2; layout++) {
                cases++;
                if (run_row(row, KILN_CPU, KILN_F32, KILN_F32, layout, want) != KILN_OK) continue;
                char what[128];
                snprintf(what, sizeof what, "%s f32 %s", r->name, layout_names[layout]);
                kiln_status st = run_row(row, dev, KILN_F32, KILN_F32, layout, got);
                if (!device_case_ran(dev, st, what, list, &unsupported)) continue;
                device_case_matches(dev, what, KILN_F32, nmse(got, want, row_numel(r)), r->tol);
            }
        }
        device_summary(dev, "row-op ", cases, unsupported, list);
    }
}

/* gradcheck's inputs in [-1, 1] mapped to the row's domain; a CLASSES row's targets made here
 * (gradcheck varies only the scores). */
static kiln_tensor row_grad_case(kiln_tensor *in, void *ctx) {
    const kiln__row_info *r = row_op((int)(intptr_t)ctx);
    kiln_tensor args[3];
    for (int k = 0; k < r->arity; k++) {
        if (k == 1 && is_classes(r)) {
            args[k] = class_targets(KILN_CPU);
            continue;
        }
        args[k] = r->domain == KILN__ROWDOM_PROB ? kiln_add_scalar(kiln_mul_scalar(in[k], 0.45), 0.5)
                                                 : kiln_mul_scalar(in[k], 2.5);
    }
    return call_row_op(r, args);
}

/* Each row's gradient, of every float input, against central differences; a tracked input's
 * result requires a gradient (every row is differentiable). */
KT_TEST(row_gradients_match_finite_differences) {
    int checked = 0;
    for (int row = 0; row < KILN__ROW_COUNT; row++) {
        const kiln__row_info *r = row_op(row);
        if (!name_selected(r->name)) continue;
        kiln_shape shapes[3];
        int n = is_classes(r) ? 1 : r->arity;
        for (int k = 0; k < n; k++) shapes[k] = arg_shape(r, k);
        KT_CHECK_MSG(gc_check(r->name, row_grad_case, (void *)(intptr_t)row, n, shapes, 1e-6) == 0, "%s", r->name);
        kiln_tensor x = kiln_randn(KILN_CPU, KILN_F64, KILN_SHAPE(N, C, L), 5);
        kiln_require_grad(x);
        kiln_tensor in[3] = {kiln_ref(x)};
        for (int k = 1; k < r->arity; k++) in[k] = row_arg(r, k, KILN_CPU, KILN_F64, KILN_F64, 0);
        kiln_tensor y = call_row_op(r, in);
        KT_CHECK_MSG(kiln_requires_grad(y), "%s: no gradient recorded", r->name);
        kiln_release(y), kiln_release(x);
        checked++;
    }
    printf("row-op gradients: %d rows\n", checked);
    KT_CHECK(checked > 0 || getenv("KILN_TEST_OPS"));
}

/* A consumed handle, and integers given to a FLOAT_ONLY row, fail naming the function and this
 * file's line. */
KT_TEST(row_bad_input_fails_naming_the_op) {
    for (int row = 0; row < KILN__ROW_COUNT; row++) {
        const kiln__row_info *r = row_op(row);
        if (!name_selected(r->name)) continue;
        char want[96];
        snprintf(want, sizeof want, "kiln_%s", r->name);
        for (int bad = 0; bad < 2; bad++) {
            if (bad == 1 && r->dtype != KILN__ROWDT_FLOAT_ONLY) continue;
            kiln_tensor in[3], keep = KILN_NONE;
            for (int k = 0; k < r->arity; k++) in[k] = row_arg(r, k, KILN_CPU, KILN_F32, KILN_F32, 0);
            if (bad == 0) { /* in[0] consumed before the call */
                keep = kiln_ref(in[0]);
                kiln_release(in[0]);
            } else {
                in[0] = kiln_cast(in[0], KILN_I32);
            }
            KT_READ_ERROR(call_row_op(r, in), bad == 0 ? KILN_ERR_STALE_HANDLE : KILN_ERR_DTYPE, want);
            kiln_release(keep);
        }
    }
}

/* Runs a row's _ex form (kiln/nn_ops.h) on the contiguous f64 case with reduction red (REDUCTION
 * rows) or the default options (OPTIONS rows): the result in out (cap values), its shape in
 * *shape. */
static kiln_status run_row_ex(const kiln__row_info *r, kiln_reduction red, double *out, int64_t cap, kiln_shape *shape) {
    char name[64];
    snprintf(name, sizeof name, "%s_ex", r->name);
    void (*fn)(void) = row_public(name);
    kiln_tensor in[2] = {row_arg(r, 0, KILN_CPU, KILN_F64, KILN_F64, 0), row_arg(r, 1, KILN_CPU, KILN_F64, KILN_F64, 0)};
    kiln_tensor y;
    if (r->ex == KILN__ROWEX_OPTIONS) {
        kiln_cross_entropy_options o = kiln_cross_entropy_defaults();
        o.reduction = red;
        y = ((kiln_tensor(*)(kiln_tensor, kiln_tensor, kiln_cross_entropy_options))fn)(in[0], in[1], o);
    } else if (r->dims == KILN__RDIMS_NONE_K) {
        y = ((kiln_tensor(*)(kiln_tensor, kiln_tensor, double, kiln_reduction))fn)(in[0], in[1], 0.75, red);
    } else if (r->dims == KILN__RDIMS_NONE_FLAG) {
        y = ((kiln_tensor(*)(kiln_tensor, kiln_tensor, bool, kiln_reduction))fn)(in[0], in[1], false, red);
    } else {
        y = ((kiln_tensor(*)(kiln_tensor, kiln_tensor, kiln_reduction))fn)(in[0], in[1], red);
    }
    *shape = kiln_tensor_shape(y);
    int64_t n = shape->ndim >= 0 ? kiln_shape_numel(*shape) : 0;
    if (n > cap) {
        kiln_release(y);
        return KILN_ERR_SHAPE;
    }
    return kiln_into_data(y, out, sizeof(double) * (size_t)n);
}

/* Each row's _ex form against its plain function: the mean is the plain call, the sum is the
 * mean times the count, NONE keeps a value per element (per sample for the CLASSES rows) whose
 * mean is the plain call. */
KT_TEST(row_ex_forms_agree_with_the_row) {
    int checked = 0;
    for (int row = 0; row < KILN__ROW_COUNT; row++) {
        const kiln__row_info *r = row_op(row);
        if (r->ex == KILN__ROWEX_NO || !name_selected(r->name)) continue;
        double plain, mean, sum, none[X_NUMEL];
        kiln_shape s1, s2, s3;
        KT_CHECK_MSG(run_row(row, KILN_CPU, KILN_F64, KILN_F64, 0, &plain) == KILN_OK, "%s", r->name);
        KT_CHECK_MSG(run_row_ex(r, KILN_REDUCTION_MEAN, &mean, 1, &s1) == KILN_OK && s1.ndim == 0, "%s_ex mean: %s", r->name,
                     kiln_last_error());
        KT_CHECK_MSG(run_row_ex(r, KILN_REDUCTION_SUM, &sum, 1, &s2) == KILN_OK && s2.ndim == 0, "%s_ex sum: %s", r->name,
                     kiln_last_error());
        KT_CHECK_MSG(run_row_ex(r, KILN_REDUCTION_NONE, none, X_NUMEL, &s3) == KILN_OK, "%s_ex none: %s", r->name,
                     kiln_last_error());
        int64_t count = is_classes(r) ? N * L : X_NUMEL, n3 = s3.ndim >= 0 ? kiln_shape_numel(s3) : 0;
        KT_CHECK_MSG(n3 == count, "%s_ex none: %lld values, not %lld", r->name, (long long)n3, (long long)count);
        double total = 0;
        for (int64_t i = 0; i < n3; i++) total += none[i];
        double tol = 1e-12 * (1 + fabs(plain));
        KT_CHECK_MSG(fabs(mean - plain) <= tol && fabs(sum - plain * (double)count) <= tol * (double)count &&
                         fabs(total / (double)count - plain) <= tol,
                     "%s_ex: mean %.17g, sum %.17g, none's mean %.17g, the row %.17g", r->name, mean, sum,
                     total / (double)count, plain);
        checked++;
    }
    printf("row-op _ex forms: %d rows\n", checked);
}

int main(void) {
    KT_RUN(the_row_table_is_consistent);
    KT_RUN(rows_match_double_precision);
    KT_RUN(rows_on_devices_match_the_cpu);
    KT_RUN(row_gradients_match_finite_differences);
    KT_RUN(row_bad_input_fails_naming_the_op);
    KT_RUN(row_ex_forms_agree_with_the_row);
    return kt_finish();
}
