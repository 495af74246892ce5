/* Every op of the shape op table (src/ir/shape_table.h: views, joins, splits, indexing, masks,
 * scans, sorts) on every registered device, as tests/test_backend_ops.c runs the op table's rows: each row's
 * example call (its ex column, compiled here against the public prototype) over x and y, two
 * [3, 4, 5] tensors, x seen through four layouts (contiguous, a transposed view, a broadcast, a
 * narrowed view), in f32 and i32 (integers: every op runs every dtype); the result's dtype and
 * shape against the row (dtype rule, out column); its values on the CPU against the f64 run of
 * the same values, x dense, within the row's tol (0: exact), and on every other device against the CPU
 * (f32 contiguous, i32 transposed; KILN_TEST_OPS_UNSUPPORTED=1 lists what a device does
 * not run); the gradient of x (and y) against central finite differences (a row of arity 0
 * records none); bad input (the row's bad call, and a consumed handle) failing with its status
 * and naming the function. A row with more than one output (split, chunk, meshgrid: an array;
 * sort, topk: the indices too) is checked as its outputs joined into one 1-d tensor.
 * KILN_TEST_OPS=reshape,cumsum runs only the rows named. */
#include <ctype.h>

#include "backend_ops.h"
#include "ir/shape_table.h"

enum { N = 3, C = 4, L = 5, X_NUMEL = N * C * L, OUT_CAP = 4 * X_NUMEL, OUTS_CAP = 8 };

typedef struct {
    const char *name, *ex, *bad;
    int arity;
    const char *dtype; /* the row's dtype rule */
    double tol;
    kiln_shape out;
    kiln_status bad_status;
} shape_row;

/* ---- the helpers the table's ex and bad columns use ----------------------------------------- */

static kiln_tensor i64_tensor(kiln_device dev, kiln_shape s, int64_t modulo, int64_t mul) {
    int64_t v[X_NUMEL];
    int64_t n = kiln_shape_numel(s);
    for (int64_t i = 0; i < n; i++) v[i] = (i * mul + 1) % modulo;
    return kiln_from_data(dev, KILN_I64, s, v);
}

static kiln_tensor mask_of(kiln_device dev, kiln_dtype dt) {
    bool m[C * L];
    for (int i = 0; i < C * L; i++) m[i] = (i * 7) % 3 == 0;
    kiln_tensor t = kiln_from_data(dev, KILN_BOOL, KILN_SHAPE(C, L), m);
    return dt == KILN_BOOL ? t : kiln_cast(t, dt);
}

static kiln_tensor stale_handle(void) {
    kiln_tensor t = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2));
    kiln_release(t);
    return t;
}

#define PAIR(a, b) ((const kiln_tensor[]){(a), (b)})
#define MASK mask_of(dev, KILN_BOOL)
#define MASK_F32 mask_of(dev, KILN_F32)
#define STALE stale_handle()
#define SELECT_INDEX i64_tensor(dev, KILN_SHAPE(3), 4, 3)
#define GATHER_INDEX i64_tensor(dev, KILN_SHAPE(N, C, 2), L, 3)
#define SCATTER_INDEX i64_tensor(dev, KILN_SHAPE(N, C, L), N, 2)
#define BAD_DTYPE ((kiln_dtype)99)
#define OUT (&second)
#define OUTS outs

/* A row's outputs as one tensor, so one comparison checks them all: an array's (n of them in
 * outs) flattened and joined; a result and its second output (sort's and topk's indices),
 * flattened and joined, the second cast to the first's dtype. A failed call's poison passes on. */
static kiln_tensor join_outs(int n, kiln_tensor *second, kiln_tensor *outs) {
    (void)second;
    if (n < 1) return kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(1), NAN); /* (no poisoned tensor: the shape check fails) */
    for (int i = 0; i < n; i++) outs[i] = kiln_reshape(outs[i], KILN_SHAPE(-1));
    return n == 1 ? outs[0] : kiln_cat(outs, n, 0);
}

static kiln_tensor join_second(kiln_tensor first, kiln_tensor *second, kiln_tensor *outs) {
    (void)outs;
    if (!second->id) return first;
    if (kiln_tensor_shape(first).ndim < 0) return kiln_release(*second), first; /* poisoned */
    kiln_dtype dt = kiln_tensor_dtype(first);
    kiln_tensor both[2] = {kiln_reshape(first, KILN_SHAPE(-1)), kiln_reshape(kiln_cast(*second, dt), KILN_SHAPE(-1))};
    return kiln_cat(both, 2, 0);
}
#define JOINED(call) _Generic((call), int: join_outs, default: join_second)((call), &second, outs)

/* Whether the call's text uses the variable v (a whole identifier: "kiln_dtype" is no use of y). */
static bool uses(const char *text, char v) {
    for (const char *p = strchr(text, v); p; p = strchr(p + 1, v))
        if ((p == text || !(isalnum((unsigned char)p[-1]) || p[-1] == '_')) && !(isalnum((unsigned char)p[1]) || p[1] == '_'))
            return true;
    return false;
}

/* Each row's example and bad call on x and y (consumed) on dev: the public function, called
 * through its call-site macro with the table's arguments (a compile error where they do not fit
 * the prototype). */
#define EXAMPLE(NAME, name, sig, args, arity, dtype, shape, kernel, grad, tol, py, ex, out, bad, bad_status, ...) \
    static kiln_tensor example_##NAME(kiln_tensor x, kiln_tensor y, kiln_device dev) {                     \
        (void)dev;                                                                                       \
        kiln_tensor second = KILN_NONE, outs[OUTS_CAP];                                                  \
        if (!uses(#ex, 'y')) kiln_release(y); /* a one-tensor row (the_shape_table_is_consistent) */     \
        return JOINED(kiln_##name ex);                                                                   \
    }                                                                                                    \
    static kiln_tensor bad_##NAME(kiln_tensor x, kiln_tensor y, kiln_device dev) {                         \
        (void)dev;                                                                                       \
        kiln_tensor second = KILN_NONE, outs[OUTS_CAP];                                                  \
        if (!uses(#bad, 'y')) kiln_release(y);                                                           \
        if (!uses(#bad, 'x')) kiln_release(x);                                                           \
        return JOINED(kiln_##name bad);                                                                  \
    }
KILN__SHAPE_TABLE(EXAMPLE)
#undef EXAMPLE

typedef kiln_tensor (*call_fn)(kiln_tensor x, kiln_tensor y, kiln_device dev);
static const call_fn examples[KILN__SHAPE_COUNT] = {
#define EXAMPLE_FN(NAME, ...) [KILN__SHAPE_##NAME] = example_##NAME,
    KILN__SHAPE_TABLE(EXAMPLE_FN)
#undef EXAMPLE_FN
};
static const call_fn bad_calls[KILN__SHAPE_COUNT] = {
#define BAD_FN(NAME, ...) [KILN__SHAPE_##NAME] = bad_##NAME,
    KILN__SHAPE_TABLE(BAD_FN)
#undef BAD_FN
};

#define OUT_SHAPE(...) {KILN__NARGS_I64(__VA_ARGS__), {__VA_ARGS__}}
static const shape_row rows[KILN__SHAPE_COUNT] = {
#define ROW(NAME, name_, sig, args, arity_, dtype_, shape, kernel, grad, tol_, py, ex_, out_, bad_, bad_status_, ...) \
    [KILN__SHAPE_##NAME] = {.name = #name_,                                                               \
                            .ex = #ex_,                                                                   \
                            .bad = #bad_,                                                                 \
                            .arity = arity_,                                                              \
                            .dtype = #dtype_,                                                             \
                            .tol = tol_,                                                                  \
                            .out = OUT_SHAPE out_,                                                        \
                            .bad_status = KILN_ERR_##bad_status_},
    KILN__SHAPE_TABLE(ROW)
#undef ROW
};

/* ---- cases ----------------------------------------------------------------------------------- */

/* x on dev in dtype dt with the values of dtype `values` (integers for an i32 case and its f64
 * reference), seen through the layout; y contiguous, other values. */
static kiln_tensor make_x(kiln_device dev, kiln_dtype values, kiln_dtype dt, int layout) {
    kiln_shape made = layout == 1 ? KILN_SHAPE(N, L, C) : layout == 2 ? KILN_SHAPE(1, C, L) : layout == 3 ? KILN_SHAPE(N, C, L + 3) : KILN_SHAPE(N, C, L);
    double v[N * C * (L + 3)];
    fill(v, kiln_shape_numel(made), KILN__DOMAIN_ANY, values, 17);
    kiln_tensor t = kiln_cast(kiln_from_data(KILN_CPU, KILN_F64, made, v), dt);
    if (dev != KILN_CPU) t = kiln_to_device(t, dev);
    if (layout == 1) t = kiln_transpose(t, 1, 2);
    if (layout == 2) t = kiln_expand(t, KILN_SHAPE(N, C, L));
    if (layout == 3) t = kiln_narrow(t, 2, 3, L);
    return t;
}

static kiln_tensor make_y(kiln_device dev, kiln_dtype values, kiln_dtype dt) {
    double v[X_NUMEL];
    fill(v, X_NUMEL, KILN__DOMAIN_ANY, values, 29);
    kiln_tensor t = kiln_cast(kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(N, C, L), v), dt);
    return dev != KILN_CPU ? kiln_to_device(t, dev) : t;
}

/* The row's dtype rule: a SCAN row accumulates integers and bools in i64; an I64 row gives
 * indices; a GIVEN row the dtype its example names. */
static kiln_dtype row_dtype(const shape_row *r, kiln_dtype dt) {
    if (strcmp(r->dtype, "I64") == 0) return KILN_I64;
    if (strcmp(r->dtype, "GIVEN") == 0) {
        const kiln_dtype named[] = {KILN_F32, KILN_F64, KILN_I32, KILN_I64, KILN_BOOL};
        const char *names[] = {"KILN_F32)", "KILN_F64)", "KILN_I32)", "KILN_I64)", "KILN_BOOL)"};
        for (int i = 0; i < 5; i++)
            if (strstr(r->ex, names[i])) return named[i]; /* the last argument */
        return KILN_DTYPE_COUNT;
    }
    return strcmp(r->dtype, "SCAN") == 0 && dt != KILN_F32 && dt != KILN_F64 ? KILN_I64 : dt;
}

static bool same_shape(kiln_shape a, kiln_shape b) {
    if (a.ndim != b.ndim) return false;
    for (int i = 0; i < a.ndim; i++)
        if (a.dims[i] != b.dims[i]) return false;
    return true;
}

/* Runs a case: the result as doubles in out, its dtype and shape checked against the row. x
 * made dense first (the reference: the same values, without the view) when dense. */
static kiln_status run_case_as(int row, kiln_device dev, kiln_dtype values, kiln_dtype dt, int layout, bool dense,
                               double *out) {
    const shape_row *r = &rows[row];
    kiln_tensor x = make_x(dev, values, dt, layout);
    if (dense) x = kiln_contiguous(x);
    kiln_tensor y = examples[row](x, make_y(dev, values, dt), dev);
    kiln_shape got = kiln_tensor_shape(y);
    if (got.ndim >= 0) { /* (else a poisoned result: the read reports it) */
        KT_CHECK_MSG(kiln_tensor_dtype(y) == row_dtype(r, dt), "%s %s: dtype %s", r->name, dtype_str(dt),
                     dtype_str(kiln_tensor_dtype(y)));
        KT_CHECK_MSG(same_shape(got, r->out), "%s %s: %d dims, not the row's out", r->name, layout_names[layout], got.ndim);
    }
    if (dev != KILN_CPU) y = kiln_to_device(y, KILN_CPU);
    return kiln_into_data(kiln_cast(y, KILN_F64), out, sizeof(double) * (size_t)kiln_shape_numel(r->out));
}

static kiln_status run_case(int row, kiln_device dev, kiln_dtype values, kiln_dtype dt, int layout, double *out) {
    return run_case_as(row, dev, values, dt, layout, false, out);
}

KT_TEST(the_shape_table_is_consistent) {
    KT_CHECK(KILN__SHAPE_COUNT >= 25);
    for (int row = 0; row < KILN__SHAPE_COUNT; row++) {
        const shape_row *r = &rows[row];
        KT_CHECK_MSG(r->arity >= 0 && r->arity <= 2 && r->tol >= 0 && r->out.ndim >= 0, "%s", r->name);
        KT_CHECK_MSG(public_of(r->name) == NULL, "kiln_%s: in kiln/ops.h's list too", r->name);
        int64_t n = kiln_shape_numel(r->out);
        KT_CHECK_MSG(n > 0 && n <= OUT_CAP, "%s: out of %lld elements", r->name, (long long)n);
        /* a two-tensor row's example takes y; a one-tensor row's gradient is x's alone */
        KT_CHECK_MSG(uses(r->ex, 'y') == (r->arity == 2), "%s: arity %d, ex %s", r->name, r->arity, r->ex);
        /* a row's own kernel (its kernel column) is an opcode the CPU runs */
        int k = kiln__shape_kernels[row];
        KT_CHECK_MSG(k >= -2 && k < KILN__OP_COUNT && (k < 0 || kiln__cpu_backend()->kernels[k]), "%s: kernel %d", r->name, k);
    }
}

/* Each row, dtype and layout on the CPU against the f64 run of the same values with x made
 * dense first (exact but for the sums' rounding): a view's strides, offset or broadcast that an
 * op reads wrongly shows here. */
KT_TEST(shape_ops_match_double_precision) {
    static double got[OUT_CAP], want[OUT_CAP];
    const kiln_dtype dts[2] = {KILN_F32, KILN_I32};
    int cases = 0;
    for (int row = 0; row < KILN__SHAPE_COUNT; row++) {
        const shape_row *r = &rows[row];
        if (!name_selected(r->name)) continue;
        for (int d = 0; d < 2; d++)
            for (int layout = 0; layout < LAYOUTS; layout++) {
                kiln_status st = run_case(row, KILN_CPU, dts[d], dts[d], layout, got);
                KT_CHECK_MSG(st == KILN_OK, "%s %s %s: %s", r->name, dtype_str(dts[d]), layout_names[layout], kiln_last_error());
                cases++;
                if (st != KILN_OK || run_case_as(row, KILN_CPU, dts[d], KILN_F64, layout, true, want) != KILN_OK) continue;
                double e = nmse(got, want, kiln_shape_numel(r->out));
                KT_CHECK_MSG(e <= r->tol, "%s %s %s: normalized error %.3g > %.3g against f64", r->name, dtype_str(dts[d]),
                             layout_names[layout], e, r->tol);
            }
    }
    printf("shape ops on the cpu: %d cases\n", cases);
}

/* Every other registered device against the CPU: f32 contiguous, i32 transposed. */
KT_TEST(shape_ops_on_devices_match_the_cpu) {
    static double got[OUT_CAP], want[OUT_CAP];
    const kiln_dtype dts[2] = {KILN_F32, KILN_I32};
    bool list = list_unsupported();
    for (int di = 0; other_device(di) != KILN_CPU; di++) {
        kiln_device dev = other_device(di);
        int cases = 0, unsupported = 0;
        for (int row = 0; row < KILN__SHAPE_COUNT; row++) {
            const shape_row *r = &rows[row];
            if (!name_selected(r->name)) continue;
            /* f32 contiguous and i32 transposed: each dtype and layout compiles its own device
             * programs (20 s with PoCL's cache cold for all four pairs on a loaded machine) */
            for (int d = 0; d < 2; d++)
                for (int layout = d; layout == d; layout++) {
                    cases++;
                    if (run_case(row, KILN_CPU, dts[d], dts[d], layout, want) != KILN_OK) continue;
                    char what[128];
                    snprintf(what, sizeof what, "%s %s %s", r->name, dtype_str(dts[d]), layout_names[layout]);
                    kiln_status st = run_case(row, dev, dts[d], dts[d], layout, got);
                    if (!device_case_ran(dev, st, what, list, &unsupported)) continue;
                    device_case_matches(dev, what, dts[d], nmse(got, want, kiln_shape_numel(r->out)), r->tol);
                }
        }
        device_summary(dev, "shape-op ", cases, unsupported, list);
    }
}

/* gradcheck's x (and y) through the row's example; a one-tensor row's y is unused. */
static kiln_tensor grad_case(kiln_tensor *in, void *ctx) {
    int row = (int)(intptr_t)ctx;
    kiln_tensor y = rows[row].arity == 2 ? in[1] : kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE(N, C, L));
    return examples[row](in[0], y, KILN_CPU);
}

/* Each row's gradient of x (and y) against central differences; a tracked input's result
 * requires a gradient, but for a row of arity 0 (indices, classes), whose must not. */
KT_TEST(shape_op_gradients_match_finite_differences) {
    int checked = 0;
    for (int row = 0; row < KILN__SHAPE_COUNT; row++) {
        const shape_row *r = &rows[row];
        if (!name_selected(r->name)) continue;
        kiln_shape shapes[2] = {KILN_SHAPE(N, C, L), KILN_SHAPE(N, C, L)};
        if (r->arity > 0)
            KT_CHECK_MSG(gc_check(r->name, grad_case, (void *)(intptr_t)row, r->arity, shapes, 1e-6) == 0, "%s", r->name);
        kiln_tensor x = kiln_randn(KILN_CPU, KILN_F64, KILN_SHAPE(N, C, L), 5);
        kiln_require_grad(x);
        kiln_tensor y = examples[row](kiln_ref(x), make_y(KILN_CPU, KILN_F64, KILN_F64), KILN_CPU);
        KT_CHECK_MSG(kiln_requires_grad(y) == (r->arity > 0), "%s: %s gradient recorded", r->name, r->arity ? "no" : "a");
        kiln_release(y), kiln_release(x);
        checked++;
    }
    printf("shape-op gradients: %d rows\n", checked);
    KT_CHECK(checked > 0 || getenv("KILN_TEST_OPS"));
}

/* Each row's bad call fails with the row's status naming the function and this file's line; a
 * consumed x, with a stale handle naming it (the function the example calls first). */
KT_TEST(shape_op_bad_input_fails_naming_the_op) {
    for (int row = 0; row < KILN__SHAPE_COUNT; row++) {
        const shape_row *r = &rows[row];
        if (!name_selected(r->name)) continue;
        char want[96];
        snprintf(want, sizeof want, "kiln_%s", r->name);
        KT_READ_ERROR(bad_calls[row](make_x(KILN_CPU, KILN_F32, KILN_F32, 0), make_y(KILN_CPU, KILN_F32, KILN_F32), KILN_CPU),
                      r->bad_status, want);
        kiln_tensor x = make_x(KILN_CPU, KILN_F32, KILN_F32, 0), keep = kiln_ref(x);
        kiln_release(x);
        /* an example whose x goes through another op first names that op: the innermost call
         * around x, the last "kiln_" before it */
        const char *xat = r->ex, *inner = NULL;
        while ((xat = strchr(xat + 1, 'x')) && !(strchr("( ", xat[-1]) && strchr(",)", xat[1]))) {
        }
        for (const char *k = strstr(r->ex, "kiln_"); k && xat && k < xat; k = strstr(k + 1, "kiln_")) inner = k;
        if (inner) {
            size_t len = strcspn(inner, "(");
            snprintf(want, sizeof want, "%.*s", (int)len, inner);
        }
        KT_READ_ERROR(examples[row](x, make_y(KILN_CPU, KILN_F32, KILN_F32), KILN_CPU), KILN_ERR_STALE_HANDLE, want);
        kiln_release(keep);
    }
}

int main(void) {
    KT_RUN(the_shape_table_is_consistent);
    KT_RUN(shape_ops_match_double_precision);
    KT_RUN(shape_ops_on_devices_match_the_cpu);
    KT_RUN(shape_op_gradients_match_finite_differences);
    KT_RUN(shape_op_bad_input_fails_naming_the_op);
    return kt_finish();
}
