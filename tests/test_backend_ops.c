/* Every op of the op table (src/ir/optable.h) on every registered device (ggml's
 * test-backend-ops): each row over the dtypes its dtype rule takes and four layouts
 * (contiguous, a transposed view, a broadcast, a narrowed view), on the CPU against the
 * double-precision run of the same op, and on every other device against the CPU, by
 * normalized squared error (exact for integer and bool results); each differentiable row
 * against central finite differences in double; bad input for each public row. The scalar
 * variants (KILN__OPTABLE_SCALAR: kiln_add_scalar, ...) are rows here too, after the opcodes,
 * and each is checked against its binary row given a tensor of the scalar.
 *
 *   KILN_TEST_OPS_UNSUPPORTED=1   also list each case a device does not run (else a count)
 *   KILN_TEST_OPS=softsign,add    only these rows
 *   KILN_TEST_FILTER=gradients_match_finite_differences   one test (tests/kiln_test.h)
 */
#include "backend_ops.h"

/* ---- rows: the opcodes of the table, then its scalar variants ---------------------------- */

typedef kiln_tensor (*scalar_fn)(kiln_tensor, double);

/* The scalar rows, as data: each runs its binary row's opcode with a double operand. */
static const struct {
    kiln__opcode code;
    const char *name;
    bool scalar_first;
} scalar_rows[] = {
#define SCALAR_FIRST_TS false
#define SCALAR_FIRST_ST true
#define SCALAR_ROW(NAME, name, order, doc) {KILN__OP_##NAME, #name, SCALAR_FIRST_##order},
    KILN__OPTABLE_SCALAR(SCALAR_ROW)
#undef SCALAR_ROW
};
/* A row id: an opcode (a row when the op table has one), or KILN__OP_COUNT + a scalar row. */
enum { SCALAR_ROWS = sizeof scalar_rows / sizeof scalar_rows[0], ROW_IDS = KILN__OP_COUNT + SCALAR_ROWS };

static bool is_scalar_row(int row) { return row >= KILN__OP_COUNT; }
/* The opcode whose facts (dtype rule, gradient, domain) the row has. */
static kiln__opcode code_of(int row) { return is_scalar_row(row) ? scalar_rows[row - KILN__OP_COUNT].code : (kiln__opcode)row; }
static const kiln__op_info *info_of(int row) { return kiln__op_info_of(code_of(row)); }
static const char *row_name(int row) { return is_scalar_row(row) ? scalar_rows[row - KILN__OP_COUNT].name : info_of(row)->name; }
static int row_arity(int row) { return is_scalar_row(row) ? 1 : info_of(row)->arity; }

/* The scalar a scalar row's case takes: a float exact in f32 for float tensors, a whole number
 * for integer ones (which keeps them integers). */
static double scalar_for(kiln_dtype dt) { return dt == KILN_F32 || dt == KILN_F64 ? 0.625 : 3.0; }

/* Whether the row runs: KILN_TEST_OPS unset, or naming it. */
static bool selected(int row) { return name_selected(row_name(row)); }

/* Whether the row runs here: a public signature or a hand-written call below. */
static bool callable(int row) {
    if (is_scalar_row(row)) return public_of(row_name(row)) != NULL;
    kiln__opcode code = (kiln__opcode)row;
    const kiln__op_info *r = kiln__op_info_of(code);
    if (!r->name) return false;
    if (r->sig != KILN__SIG_NONE) return public_of(r->name) != NULL;
    return code == KILN__OP_COPY || code == KILN__OP_WHERE;
}

/* Runs the row's op on in[0..arity-1] (consumed), through its public call; dt: the inputs'
 * dtype (a scalar row's scalar). A row with parameters runs with the values below. */
static kiln_tensor call_row(int row, kiln_tensor *in, kiln_dtype dt) {
    kiln_set_call_site(__FILE__, __LINE__);
    if (is_scalar_row(row)) return ((scalar_fn)public_of(row_name(row)))(in[0], scalar_for(dt));
    kiln__opcode code = (kiln__opcode)row;
    const kiln__op_info *r = kiln__op_info_of(code);
    if (r->sig == KILN__SIG_T) return ((unary_fn)public_of(r->name))(in[0]);
    if (r->sig == KILN__SIG_AB) return ((binary_fn)public_of(r->name))(in[0], in[1]);
    switch (code) {
    case KILN__OP_COPY: return kiln_cast(in[0], KILN_F64);
    case KILN__OP_CLAMP: return kiln_clamp(in[0], -0.5, 0.75);
    case KILN__OP_NAN_TO_NUM: return kiln_nan_to_num(in[0], 0.0, 1.0, -1.0);
    case KILN__OP_LEAKY_RELU: return kiln_leaky_relu(in[0], 0.1);
    case KILN__OP_ELU: return kiln_elu(in[0], 0.7);
    case KILN__OP_WHERE: return kiln_where(kiln_gt_scalar(in[0], 0.0), in[1], in[2]);
    case KILN__OP_LERP: return kiln_lerp(in[0], in[1], in[2]);
    default: return KILN_NONE;
    }
}

/* ---- inputs ------------------------------------------------------------------------------ */

/* The dtypes a row's rule takes (one run each). */
static int dtypes_of(kiln__opcode code, kiln_dtype *out) {
    switch (kiln__op_info_of(code)->dtype) {
    case KILN__DT_FLOAT_ONLY: out[0] = KILN_F32, out[1] = KILN_F64; return 2;
    case KILN__DT_LOGICAL: out[0] = KILN_BOOL; return 1;
    case KILN__DT_WHERE: out[0] = KILN_F32, out[1] = KILN_F64; return 2;
    case KILN__DT_ROUNDING: case KILN__DT_CLASSIFY: case KILN__DT_COMPARE: case KILN__DT_CAST:
        out[0] = KILN_F32, out[1] = KILN_I32; return 2;
    default: out[0] = KILN_F32, out[1] = KILN_F64, out[2] = KILN_I32; return 3;
    }
}

/* Input k of a case on dev in dtype dt: values of shape `made`, then seen through `view` (1: a
 * transpose, 2: expanded to [ROWS, COLS], 3: narrowed to COLS columns). */
static kiln_tensor make_input(kiln_device dev, kiln_dtype dt, kiln_shape made, int view, int k, kiln__test_domain dom) {
    int64_t n = kiln_shape_numel(made);
    double *v = malloc(sizeof(double) * (size_t)n);
    fill(v, n, dom, dt, 11 + 7919 * (uint64_t)k);
    kiln_tensor t = kiln_cast(kiln_from_data(KILN_CPU, KILN_F64, made, v), dt);
    free(v);
    if (dev != KILN_CPU) t = kiln_to_device(t, dev);
    if (view == 1) t = kiln_transpose(t, 0, 1);
    if (view == 2) t = kiln_expand(t, KILN_SHAPE(ROWS, COLS));
    if (view == 3) t = kiln_narrow(t, 1, 2, COLS);
    return t;
}

/* The case's result on dev, read back as doubles: KILN_OK or the read's status. Every layout
 * gives a [ROWS, COLS] result: contiguous inputs; input 0 a transposed view; a broadcast (a
 * unary op's input a row expanded, a binary op's [ROWS, 1] against [COLS]); input 0 narrowed. */
static kiln_status run_case(int row, kiln_device dev, kiln_dtype dt, int layout, double *out) {
    int arity = row_arity(row);
    kiln_tensor in[3];
    for (int k = 0; k < arity; k++) {
        kiln_shape made = KILN_SHAPE(ROWS, COLS);
        int view = 0;
        if (layout == 1 && k == 0) made = KILN_SHAPE(COLS, ROWS), view = 1;
        if (layout == 2 && arity == 1) made = KILN_SHAPE(1, COLS), view = 2;
        if (layout == 2 && arity > 1) made = k == 0 ? KILN_SHAPE(ROWS, 1) : KILN_SHAPE(COLS);
        if (layout == 3 && k == 0) made = KILN_SHAPE(ROWS, COLS + 3), view = 3;
        in[k] = make_input(dev, dt, made, view, k, info_of(row)->domain);
    }
    kiln_tensor y = call_row(row, in, dt);
    if (dev != KILN_CPU) y = kiln_to_device(y, KILN_CPU);
    y = kiln_cast(y, KILN_F64);
    kiln_status st = kiln_into_data(y, out, sizeof(double) * ROWS * COLS);
    return st;
}

/* Tolerance of a case's result: exact for integer and bool results (and any op on integers
 * but true division and math), else by the dtype the op computed in. */
static double tolerance(kiln__opcode code, kiln_dtype dt) {
    kiln__dtype_rule rule = kiln__op_info_of(code)->dtype;
    if (rule == KILN__DT_COMPARE || rule == KILN__DT_LOGICAL || rule == KILN__DT_CLASSIFY) return 0;
    if (dt == KILN_I32 && rule != KILN__DT_FLOAT) return 0;
    return dt == KILN_F64 ? 1e-24 : 1e-11;
}

/* ---- the tests --------------------------------------------------------------------------- */

KT_TEST(the_table_is_consistent) {
    int rows = 0;
    for (int code = 0; code < KILN__OP_COUNT; code++) {
        const kiln__op_info *r = kiln__op_info_of((kiln__opcode)code);
        if (!r->name) continue;
        rows++;
        char upper[64];
        size_t n = strlen(r->name);
        for (size_t i = 0; i <= n && i < sizeof upper; i++) upper[i] = (char)(r->name[i] >= 'a' && r->name[i] <= 'z' ? r->name[i] - 32 : r->name[i]);
        KT_CHECK_MSG(strcmp(upper, kiln__opcode_name((kiln__opcode)code)) == 0, "%s vs %s", r->name, kiln__opcode_name((kiln__opcode)code));
        KT_CHECK_MSG(r->arity >= 1 && r->arity <= 3 && r->doc && r->doc[0], "%s", r->name);
        KT_CHECK_MSG(r->sig == KILN__SIG_NONE || public_of(r->name), "%s has no public function", r->name);
        KT_CHECK_MSG(r->sig != KILN__SIG_T || r->arity == 1, "%s", r->name);
        KT_CHECK_MSG(r->sig != KILN__SIG_AB || r->arity == 2, "%s", r->name);
        /* what fusion joins is what the table says */
        KT_CHECK_MSG(kiln__expr_opcode_fusable((kiln__opcode)code) == (r->fuse != KILN__FUSE_NONE), "%s", r->name);
    }
    KT_CHECK(rows >= 60 && kiln__op_info_of(KILN__OP_SUM)->name == NULL && !kiln__expr_opcode_fusable(KILN__OP_SUM));
    KT_CHECK(kiln__op_info_of(KILN__OP_COUNT)->name == NULL); /* out of range reads as no row */
    /* each scalar row: a binary row's scalar form, named after it, with a public function */
    KT_CHECK(SCALAR_ROWS >= 17);
    for (int k = 0; k < SCALAR_ROWS; k++) {
        const kiln__op_info *base = kiln__op_info_of(scalar_rows[k].code);
        const char *name = scalar_rows[k].name;
        size_t n = strlen(name);
        KT_CHECK_MSG(base->sig == KILN__SIG_AB && strstr(name, base->name) && n > 7 && strcmp(name + n - 7, "_scalar") == 0,
                     "%s", name);
        KT_CHECK_MSG(public_of(name), "kiln_%s is not in kiln/ops.h", name);
    }
}

/* Every row has exactly one OpenCL form: its KILN__OPEXPR expression (cpu EXPR) or its
 * KILN__OPTABLE_DEVICE_C row, whose forms use only the words codegen.c knows. */
KT_TEST(every_row_has_one_opencl_form) {
    static int expr[KILN__OP_COUNT], form[KILN__OP_COUNT];
#define EXPR_ROW(NAME, ...) expr[KILN__OP_##NAME]++;
    KILN__OPEXPR(EXPR_ROW)
#undef EXPR_ROW
    static const struct {
        int code;
        const char *name, *forms[2];
    } rows[] = {
#define FORM_ROW(NAME, on, float_form, int_form) {KILN__OP_##NAME, #NAME, {float_form, int_form}},
        KILN__OPTABLE_DEVICE_C(FORM_ROW)
#undef FORM_ROW
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        form[rows[i].code]++;
        for (int k = 0; k < 2; k++)
            for (const char *c = strchr(rows[i].forms[k], '$'); c; c = strchr(c + 1, '$'))
                KT_CHECK_MSG(c[1] && strchr("xyzTU012LHC", c[1]), "%s: an unknown word $%c", rows[i].name, c[1]);
    }
    for (int code = 0; code < KILN__OP_COUNT; code++) {
        const kiln__op_info *r = kiln__op_info_of((kiln__opcode)code);
        if (!r->name) KT_CHECK_MSG(!form[code] && !expr[code], "%s is no row of the table", kiln__opcode_name((kiln__opcode)code));
        else KT_CHECK_MSG(form[code] + expr[code] == 1, "%s: %d OpenCL forms, %d expressions", r->name, form[code], expr[code]);
    }
}

/* Each scalar row against its binary row given a tensor full of the scalar, in the row's order:
 * the same values (so rsub is s - t, not t - s), dtype by dtype on the CPU. */
KT_TEST(scalar_rows_are_their_binary_rows) {
    double got[ROWS * COLS], want[ROWS * COLS];
    for (int k = 0; k < SCALAR_ROWS; k++) {
        int row = KILN__OP_COUNT + k;
        if (!selected(row)) continue;
        kiln__opcode code = scalar_rows[k].code;
        kiln_dtype dts[4];
        int nd = dtypes_of(code, dts);
        for (int d = 0; d < nd; d++) {
            KT_CHECK_MSG(run_case(row, KILN_CPU, dts[d], 0, got) == KILN_OK, "%s: %s", row_name(row), kiln_last_error());
            kiln_tensor t = make_input(KILN_CPU, dts[d], KILN_SHAPE(ROWS, COLS), 0, 0, info_of(row)->domain);
            kiln_tensor s = kiln_full(KILN_CPU, dts[d], KILN_SHAPE(ROWS, COLS), scalar_for(dts[d]));
            kiln_tensor in[2] = {scalar_rows[k].scalar_first ? s : t, scalar_rows[k].scalar_first ? t : s};
            kiln_tensor y = call_row(code, in, dts[d]);
            KT_CHECK(kiln_into_data(kiln_cast(y, KILN_F64), want, sizeof want) == KILN_OK);
            double e = nmse(got, want, ROWS * COLS), tol = tolerance(code, dts[d]);
            KT_CHECK_MSG(e <= tol, "%s %s: normalized error %.3g > %.3g against kiln_%s", row_name(row), dtype_str(dts[d]), e,
                         tol, info_of(row)->name);
        }
    }
}

/* The CPU against the double-precision run of the same op (f32 cases), and every case runs. */
KT_TEST(cpu_matches_double_precision) {
    double got[ROWS * COLS], want[ROWS * COLS];
    int cases = 0;
    for (int row = 0; row < ROW_IDS; row++) {
        if (!callable(row) || !selected(row)) continue;
        kiln_dtype dts[4];
        int nd = dtypes_of(code_of(row), dts);
        for (int d = 0; d < nd; d++)
            for (int layout = 0; layout < LAYOUTS; layout++) {
                kiln_status st = run_case(row, KILN_CPU, dts[d], layout, got);
                KT_CHECK_MSG(st == KILN_OK, "%s %s %s: %s", row_name(row), dtype_str(dts[d]), layout_names[layout],
                             kiln_last_error());
                cases++;
                if (st != KILN_OK || dts[d] != KILN_F32) continue;
                st = run_case(row, KILN_CPU, KILN_F64, layout, want);
                if (st != KILN_OK) continue; /* (the f64 case is checked on its own) */
                double e = nmse(got, want, ROWS * COLS), tol = tolerance(code_of(row), KILN_F32);
                KT_CHECK_MSG(e <= tol, "%s f32 %s: normalized error %.3g > %.3g against f64", row_name(row),
                             layout_names[layout], e, tol);
            }
    }
    printf("cpu: %d cases\n", cases);
}

/* Every other registered device against the CPU. */
KT_TEST(devices_match_the_cpu) {
    double got[ROWS * COLS], want[ROWS * COLS];
    bool list = list_unsupported();
    for (int di = 0; other_device(di) != KILN_CPU; di++) {
        kiln_device dev = other_device(di);
        int cases = 0, unsupported = 0;
        for (int row = 0; row < ROW_IDS; row++) {
            if (!callable(row) || !selected(row)) continue;
            kiln_dtype dts[4];
            int nd = dtypes_of(code_of(row), dts);
            for (int d = 0; d < nd; d++)
                for (int layout = 0; layout < LAYOUTS; layout++) {
                    /* views and broadcasts in the first dtype only: each case is a kernel
                     * the device compiles, and the layouts' code is shared by the dtypes */
                    if (d > 0 && layout > 0) continue;
                    cases++;
                    if (run_case(row, KILN_CPU, dts[d], layout, want) != KILN_OK) continue;
                    char what[96];
                    snprintf(what, sizeof what, "%s %s %s", row_name(row), dtype_str(dts[d]), layout_names[layout]);
                    kiln_status st = run_case(row, dev, dts[d], layout, got);
                    if (!device_case_ran(dev, st, what, list, &unsupported)) continue;
                    device_case_matches(dev, what, dts[d], nmse(got, want, ROWS * COLS), tolerance(code_of(row), dts[d]));
                }
        }
        device_summary(dev, "", cases, unsupported, list);
    }
}

/* Each row's input domain applied to gradcheck's inputs in [-1, 1]: smooth, so the chain
 * rule through it is checked too. */
static kiln_tensor grad_case(kiln_tensor *in, void *ctx) {
    int row = (int)(intptr_t)ctx;
    const kiln__op_info *r = info_of(row);
    for (int k = 0; k < row_arity(row); k++) {
        if (r->domain == KILN__DOMAIN_POS || r->domain == KILN__DOMAIN_AWAY) in[k] = kiln_exp(in[k]); /* [0.37, 2.7] */
        else in[k] = kiln_mul_scalar(in[k], r->domain == KILN__DOMAIN_WIDE ? 6.0 : 2.5);
    }
    return call_row(row, in, KILN_F64);
}

KT_TEST(gradients_match_finite_differences) {
    int checked = 0;
    for (int row = 0; row < ROW_IDS; row++) {
        const kiln__op_info *r = info_of(row);
        if (!callable(row) || !selected(row) || r->grad == KILN__GRAD_NONE || r->dtype == KILN__DT_COMPARE ||
            r->dtype == KILN__DT_LOGICAL || row == KILN__OP_COPY)
            continue;
        kiln_shape shapes[3] = {KILN_SHAPE(2, 3), KILN_SHAPE(2, 3), KILN_SHAPE(2, 3)};
        if (row_arity(row) >= 2) shapes[1] = KILN_SHAPE(3); /* broadcast: the gradient sums back */
        KT_CHECK_MSG(gc_check(row_name(row), grad_case, (void *)(intptr_t)row, row_arity(row), shapes, 1e-6) == 0, "%s",
                     row_name(row));
        checked++;
    }
    printf("gradients: %d rows\n", checked);
    KT_CHECK(checked > 0 || getenv("KILN_TEST_OPS"));
}

/* Bad input for each row with a public function: a consumed handle, and integers given to an
 * op for floating-point tensors only, fail with the op's name. */
KT_TEST(bad_input_fails_naming_the_op) {
    for (int row = 0; row < ROW_IDS; row++) {
        const kiln__op_info *r = info_of(row);
        if (!callable(row) || (!is_scalar_row(row) && r->sig == KILN__SIG_NONE) || !selected(row)) continue;
        char want[80];
        snprintf(want, sizeof want, "kiln_%s", row_name(row));
        kiln_dtype dt = r->dtype == KILN__DT_LOGICAL ? KILN_BOOL : KILN_F32;
        kiln_tensor stale = kiln_zeros(KILN_CPU, dt, KILN_SHAPE(2));
        kiln_release(kiln_ref(stale));
        kiln_tensor keep = kiln_ref(stale);
        kiln_release(stale); /* keep's handle stays good; stale's is released */
        int arity = row_arity(row);
        kiln_tensor in[3] = {stale, KILN_NONE, KILN_NONE};
        for (int k = 1; k < arity; k++) in[k] = kiln_zeros(KILN_CPU, dt, KILN_SHAPE(2));
        KT_READ_ERROR(call_row(row, in, dt), KILN_ERR_STALE_HANDLE, want);
        kiln_release(keep);
        if (r->dtype == KILN__DT_FLOAT_ONLY) {
            kiln_tensor ints[3];
            for (int k = 0; k < arity; k++) ints[k] = kiln_zeros(KILN_CPU, KILN_I32, KILN_SHAPE(2));
            KT_READ_ERROR(call_row(row, ints, KILN_I32), KILN_ERR_DTYPE, want);
        }
        if (arity >= 2) { /* shapes that do not broadcast */
            kiln_tensor mis[3];
            for (int k = 0; k < arity; k++) mis[k] = kiln_zeros(KILN_CPU, dt, KILN_SHAPE(k == 1 ? 3 : 2));
            KT_READ_ERROR(call_row(row, mis, dt), KILN_ERR_SHAPE, want);
        }
    }
}

/* ---- the public functions with parameters (KILN__OPTABLE_PARAMS) -------------------------- */

typedef kiln_tensor (*sig_T)(kiln_tensor);
typedef kiln_tensor (*sig_T_D)(kiln_tensor, double);
typedef kiln_tensor (*sig_T_DD)(kiln_tensor, double, double);
typedef kiln_tensor (*sig_T_DDD)(kiln_tensor, double, double, double);
typedef kiln_tensor (*sig_ABC)(kiln_tensor, kiln_tensor, kiln_tensor);
typedef kiln_tensor (*sig_AB_D)(kiln_tensor, kiln_tensor, double);
/* A generated prototype that drifts from its entry's sig does not build. */
#define PARAM_TYPE_CHECK(NAME, name, sig, args, doc) \
    _Static_assert(_Generic(&kiln_##name, sig_##sig: 1, default: 0), "kiln_" #name " does not have its entry's sig " #sig);
KILN__OPTABLE_PARAMS(PARAM_TYPE_CHECK)
#undef PARAM_TYPE_CHECK

static const struct {
    kiln__opcode code;
    const char *name;
    kiln__signature sig;
} param_rows[] = {
#define PARAM_ROW(NAME, name, sig, args, doc) {KILN__OP_##NAME, #name, KILN__SIG_##sig},
    KILN__OPTABLE_PARAMS(PARAM_ROW)
#undef PARAM_ROW
};
enum { PARAM_ROWS = sizeof param_rows / sizeof param_rows[0] };

/* Entry k's function on in[] (consumed) with the parameters p[]. */
static kiln_tensor call_param_row(int k, kiln_tensor *in, const double *p) {
    void (*fn)(void) = public_of(param_rows[k].name);
    kiln_set_call_site(__FILE__, __LINE__);
    switch (param_rows[k].sig) {
    case KILN__SIG_T: return ((sig_T)fn)(in[0]);
    case KILN__SIG_T_D: return ((sig_T_D)fn)(in[0], p[0]);
    case KILN__SIG_T_DD: return ((sig_T_DD)fn)(in[0], p[0], p[1]);
    case KILN__SIG_T_DDD: return ((sig_T_DDD)fn)(in[0], p[0], p[1], p[2]);
    case KILN__SIG_ABC: return ((sig_ABC)fn)(in[0], in[1], in[2]);
    case KILN__SIG_AB_D: return ((sig_AB_D)fn)(in[0], in[1], p[0]);
    default: return KILN_NONE;
    }
}

static int param_arity(int k) {
    kiln__signature sig = param_rows[k].sig;
    return sig == KILN__SIG_ABC ? 3 : sig == KILN__SIG_AB_D ? 2 : 1;
}

/* The largest difference between two f64 [ROWS, COLS] results (both consumed). */
static double max_difference(kiln_tensor a, kiln_tensor b) {
    double x[ROWS * COLS], y[ROWS * COLS], worst = 0;
    if (kiln_into_data(kiln_cast(a, KILN_F64), x, sizeof x) != KILN_OK) return kiln_release(b), INFINITY;
    if (kiln_into_data(kiln_cast(b, KILN_F64), y, sizeof y) != KILN_OK) return INFINITY;
    for (int i = 0; i < ROWS * COLS; i++) worst = fmax(worst, fabs(x[i] - y[i]));
    return worst;
}

/* Every entry: a public function in kiln/ops.h's list; the row of its own name has its sig, and
 * every row with a sig of parameters has such an entry; a consumed handle and, for the rows of
 * floating-point tensors only, integers fail naming the function; the compositions give their
 * row's values (selu is elu scaled, hardtanh clamp, lerp_scalar lerp with a full weight). */
KT_TEST(functions_with_parameters_are_their_rows) {
    KT_CHECK(PARAM_ROWS >= 8);
    static const double p[3] = {-0.5, 0.75, -1.0};
    for (int k = 0; k < PARAM_ROWS; k++) {
        const char *name = param_rows[k].name;
        const kiln__op_info *r = kiln__op_info_of(param_rows[k].code);
        KT_CHECK_MSG(r->name && public_of(name), "kiln_%s is not in kiln/ops.h", name);
        if (!r->name || !public_of(name)) continue;
        if (strcmp(r->name, name) == 0) KT_CHECK_MSG(r->sig == param_rows[k].sig, "%s: the row's sig differs", name);
        char want[80];
        snprintf(want, sizeof want, "kiln_%s", name);
        kiln_tensor stale = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2));
        kiln_release(kiln_ref(stale));
        kiln_tensor keep = kiln_ref(stale);
        kiln_release(stale);
        kiln_tensor in[3] = {stale, KILN_NONE, KILN_NONE};
        for (int i = 1; i < param_arity(k); i++) in[i] = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2));
        KT_READ_ERROR(call_param_row(k, in, p), KILN_ERR_STALE_HANDLE, want);
        kiln_release(keep);
        if (r->dtype == KILN__DT_FLOAT_ONLY || strcmp(name, "hardtanh") == 0) {
            for (int i = 0; i < param_arity(k); i++) in[i] = kiln_zeros(KILN_CPU, KILN_I32, KILN_SHAPE(2));
            KT_READ_ERROR(call_param_row(k, in, p), KILN_ERR_DTYPE, want);
        }
    }
    for (int code = 0; code < KILN__OP_COUNT; code++) {
        const kiln__op_info *r = kiln__op_info_of((kiln__opcode)code);
        if (!r->name || r->sig == KILN__SIG_NONE || r->sig == KILN__SIG_T || r->sig == KILN__SIG_AB) continue;
        int own = 0;
        for (int k = 0; k < PARAM_ROWS; k++) own += strcmp(param_rows[k].name, r->name) == 0;
        KT_CHECK_MSG(own == 1, "%s: %d entries of its name in KILN__OPTABLE_PARAMS", r->name, own);
    }
    kiln_tensor x = make_input(KILN_CPU, KILN_F64, KILN_SHAPE(ROWS, COLS), 0, 0, KILN__DOMAIN_WIDE);
    kiln_tensor end = make_input(KILN_CPU, KILN_F64, KILN_SHAPE(ROWS, COLS), 0, 1, KILN__DOMAIN_ANY);
    double d = max_difference(kiln_hardtanh(kiln_ref(x), -0.5, 0.75), kiln_clamp(kiln_ref(x), -0.5, 0.75));
    KT_CHECK_MSG(d == 0, "hardtanh differs from clamp by %g", d);
    d = max_difference(kiln_selu(kiln_ref(x)),
                       kiln_mul_scalar(kiln_elu(kiln_ref(x), 1.6732632423543772848), 1.0507009873554804934));
    KT_CHECK_MSG(d <= 1e-14, "selu differs from scaled elu by %g", d);
    d = max_difference(kiln_lerp_scalar(kiln_ref(x), kiln_ref(end), 0.3),
                       kiln_lerp(kiln_ref(x), kiln_ref(end), kiln_full(KILN_CPU, KILN_F64, KILN_SHAPE(ROWS, COLS), 0.3)));
    KT_CHECK_MSG(d == 0, "lerp_scalar differs from lerp by %g", d);
    kiln_release(x);
    kiln_release(end);
}

int main(void) {
    KT_RUN(the_table_is_consistent);
    KT_RUN(every_row_has_one_opencl_form);
    KT_RUN(scalar_rows_are_their_binary_rows);
    KT_RUN(cpu_matches_double_precision);
    KT_RUN(devices_match_the_cpu);
    KT_RUN(gradients_match_finite_differences);
    KT_RUN(bad_input_fails_naming_the_op);
    KT_RUN(functions_with_parameters_are_their_rows);
    return kt_finish();
}
