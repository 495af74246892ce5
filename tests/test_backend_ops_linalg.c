/* Every op of the linear-algebra table (src/ir/linalg_table.h: matmul, bmm, dot, outer, addmm,
 * linear, conv2d, attention, batch norm, the pools) on every registered device, as tests/test_backend_ops.c
 * runs the op table's rows: each row's public function, held to the row's signature at compile
 * time and called by its sig column on small inputs (a variant each for attention's causal and masked
 * forms and batch norm's training and eval), with its first tensor contiguous or a transposed
 * view; in f32 and f64; the result's dtype and shape against the row's rules; its values on the
 * CPU against the f64 run within the row's tol; on every other device against the CPU, forward
 * and backward (the gradients of every float input); the gradient of every float input
 * against central finite differences; bad input (a consumed handle, integers, mismatched
 * shapes) naming the function. Same switches as test_backend_ops (KILN_TEST_OPS=matmul,conv2d,
 * KILN_TEST_OPS_UNSUPPORTED=1, KILN_TEST_FILTER). */
#include "backend_ops.h"

/* ---- the rows' signatures: each public function must have its row's ---------------------- */

typedef kiln_tensor (*sig_AB)(kiln_tensor, kiln_tensor);
typedef kiln_tensor (*sig_LINEAR)(kiln_tensor, kiln_tensor, kiln_tensor);
typedef kiln_tensor (*sig_CONV2D)(kiln_tensor, kiln_tensor, kiln_tensor, int, int, int, int, int, int, int);
typedef kiln_tensor (*sig_ATTENTION)(kiln_tensor, kiln_tensor, kiln_tensor, kiln_tensor, bool, double);
typedef kiln_tensor (*sig_ADDMM)(kiln_tensor, kiln_tensor, kiln_tensor, double, double);
typedef kiln_tensor (*sig_BATCH_NORM)(kiln_tensor, kiln_tensor *, kiln_tensor *, kiln_tensor, kiln_tensor, bool, double,
                                      double);
typedef kiln_tensor (*sig_POOL2D)(kiln_tensor, int, int, int, int, int, int);
typedef kiln_tensor (*sig_ADAPTIVE_POOL2D)(kiln_tensor, int, int);
typedef kiln_tensor (*sig_POOL2D_OPTS)(kiln_tensor, kiln_pool2d_options);

#define SIGNATURE_CHECK(NAME, name, arity, sig, ...) \
    _Static_assert(_Generic(&kiln_##name, sig_##sig: 1, default: 0), "kiln_" #name " does not have its row's signature " #sig);
KILN__LINALG_TABLE(SIGNATURE_CHECK)
#undef SIGNATURE_CHECK

static void (*const row_fns[KILN__LINALG_COUNT])(void) = {
#define ROW_FN(NAME, name, ...) [KILN__LINALG_##NAME] = (void (*)(void))kiln_##name,
    KILN__LINALG_TABLE(ROW_FN)
#undef ROW_FN
};

/* The calls of the public headers' call-site lists, to check each row's is one of them. */
static const char *const listed[] = {
#define LISTED(ret, name, params, args) #name,
    KILN_LINALG_API(LISTED) KILN_NN_LINALG_API(LISTED)
#undef LISTED
};

static const kiln__linalg_info *row_op(int row) { return &kiln__linalg_rows[row]; }

/* ---- cases --------------------------------------------------------------------------------- */

/* The variants of a row: attention causal without a mask, then with a float mask (added to the
 * scores); batch norm in training without running statistics, then in eval with them. */
static int variants(const kiln__linalg_info *r) {
    return r->sig == KILN__LSIG_ATTENTION || r->sig == KILN__LSIG_BATCH_NORM ? 2 : 1;
}

/* The cases' tensor count (a variant without a mask passes KILN_NONE, and batch norm's running
 * statistics are not tensor arguments that a gradient reaches). */
static int tensors(const kiln__linalg_info *r, int variant) {
    if (r->sig == KILN__LSIG_ATTENTION) return variant == 0 ? 3 : 4;
    if (r->sig == KILN__LSIG_BATCH_NORM) return 3; /* x, weight, bias */
    return r->arity;
}

/* The shape of tensor k of a case; bad: the second tensor made not to fit the first (a pool's
 * one tensor: not 4-d). */
static kiln_shape arg_shape(const kiln__linalg_info *r, int k, bool bad) {
    switch (r->sig) {
    case KILN__LSIG_POOL2D:
    case KILN__LSIG_ADAPTIVE_POOL2D:
    case KILN__LSIG_POOL2D_OPTS: return bad ? KILN_SHAPE(6, 5) : KILN_SHAPE(2, 3, 6, 5);
    case KILN__LSIG_AB:
        if (r->shape == KILN__LSHAPE_DOT) return k == 0 || !bad ? KILN_SHAPE(4) : KILN_SHAPE(5);
        if (r->shape == KILN__LSHAPE_OUTER) return k == 0 ? KILN_SHAPE(3) : bad ? KILN_SHAPE(2, 5) : KILN_SHAPE(5);
        if (k == 0) return KILN_SHAPE(2, 3, 4);
        if (r->shape == KILN__LSHAPE_BMM) return bad ? KILN_SHAPE(2, 5, 5) : KILN_SHAPE(2, 4, 5);
        return bad ? KILN_SHAPE(5, 5) : KILN_SHAPE(4, 5);
    case KILN__LSIG_LINEAR: return k == 0 ? KILN_SHAPE(2, 3, 4) : k == 1 ? (bad ? KILN_SHAPE(5, 5) : KILN_SHAPE(5, 4)) : KILN_SHAPE(5);
    case KILN__LSIG_CONV2D:
        return k == 0 ? KILN_SHAPE(2, 4, 5, 5) : k == 1 ? (bad ? KILN_SHAPE(6, 3, 3, 3) : KILN_SHAPE(6, 2, 3, 3)) : KILN_SHAPE(6);
    case KILN__LSIG_ATTENTION:
        return k == 0 ? KILN_SHAPE(2, 3, 4) : k == 1 ? (bad ? KILN_SHAPE(2, 5, 5) : KILN_SHAPE(2, 5, 4)) : k == 2 ? KILN_SHAPE(2, 5, 6) : KILN_SHAPE(3, 5);
    case KILN__LSIG_BATCH_NORM: return k == 0 ? KILN_SHAPE(4, 3, 5) : bad ? KILN_SHAPE(4) : KILN_SHAPE(3);
    case KILN__LSIG_ADDMM: return k == 0 ? KILN_SHAPE(3, 5) : k == 1 ? (bad ? KILN_SHAPE(3, 5) : KILN_SHAPE(3, 4)) : KILN_SHAPE(4, 5);
    }
    return KILN_SCALAR_SHAPE;
}

/* The result's shape by the row's shape rule, for the cases' inputs. */
static kiln_shape want_shape(const kiln__linalg_info *r) {
    switch (r->shape) {
    case KILN__LSHAPE_MATMUL:
    case KILN__LSHAPE_BMM:
    case KILN__LSHAPE_LINEAR: return KILN_SHAPE(2, 3, 5);
    case KILN__LSHAPE_DOT: return KILN_SCALAR_SHAPE;
    case KILN__LSHAPE_OUTER:
    case KILN__LSHAPE_ADDMM: return KILN_SHAPE(3, 5);
    case KILN__LSHAPE_CONV2D: return KILN_SHAPE(2, 6, 2, 3); /* stride (2, 1), padding (1, 0), dilation (2, 1) */
    case KILN__LSHAPE_ATTENTION: return KILN_SHAPE(2, 3, 6);
    case KILN__LSHAPE_SAME: return arg_shape(r, 0, false);
    /* [6, 5] by kernel (3, 2), stride (2, 1), padding (1, 0); with ceil_mode, stride (2, 2) */
    case KILN__LSHAPE_POOL2D: return r->sig == KILN__LSIG_POOL2D_OPTS ? KILN_SHAPE(2, 3, 4, 3) : KILN_SHAPE(2, 3, 3, 4);
    case KILN__LSHAPE_ADAPTIVE_POOL2D: return KILN_SHAPE(2, 3, 4, 3);
    }
    return KILN_SCALAR_SHAPE;
}

enum { MAX_NUMEL = 2 * 6 * 2 * 3 > 4 * 3 * 5 ? 2 * 6 * 2 * 3 : 4 * 3 * 5, MAX_ARG = 2 * 4 * 5 * 5 };

/* Tensor k of a case on dev in dtype dt, its values exact in f32; layout 1 makes the first a
 * transposed view (of its last two dims). */
static kiln_tensor case_arg(const kiln__linalg_info *r, int k, kiln_device dev, kiln_dtype dt, int layout, bool bad) {
    kiln_shape s = arg_shape(r, k, bad && k == (r->arity > 1 ? 1 : 0));
    bool transposed = k == 0 && layout == 1 && s.ndim >= 2; /* (a 1-d operand has one layout) */
    if (transposed) {
        int64_t last = s.dims[s.ndim - 1];
        s.dims[s.ndim - 1] = s.dims[s.ndim - 2];
        s.dims[s.ndim - 2] = last;
    }
    double v[MAX_ARG];
    int64_t n = kiln_shape_numel(s);
    fill(v, n, KILN__DOMAIN_ANY, KILN_F32, 17 + 7919 * (uint64_t)k);
    for (int64_t i = 0; i < n; i++) v[i] = (double)(float)(v[i] * 0.4); /* [-1, 1] */
    kiln_tensor t = kiln_cast(kiln_from_data(KILN_CPU, KILN_F64, s, v), dt);
    if (dev != KILN_CPU) t = kiln_to_device(t, dev);
    return transposed ? kiln_transpose(t, -1, -2) : t;
}

/* Batch norm's running statistics for the eval variant: mean in [-1, 1], variance in [0.5, 1.5]. */
static void running_stats(kiln_device dev, kiln_dtype dt, kiln_tensor *mean, kiln_tensor *var) {
    double m[3] = {0.25, -0.5, 0.75}, v[3] = {0.5, 1.25, 1.5};
    *mean = kiln_cast(kiln_from_data(dev, KILN_F64, KILN_SHAPE(3), m), dt);
    *var = kiln_cast(kiln_from_data(dev, KILN_F64, KILN_SHAPE(3), v), dt);
}

/* Runs the row's public function on in[] (consumed), by its sig column. */
static kiln_tensor call_row_op(int row, int variant, kiln_tensor *in) {
    const kiln__linalg_info *r = row_op(row);
    void (*fn)(void) = row_fns[row];
    kiln_set_call_site(__FILE__, __LINE__);
    switch (r->sig) {
    case KILN__LSIG_AB: return ((sig_AB)fn)(in[0], in[1]);
    case KILN__LSIG_LINEAR: return ((sig_LINEAR)fn)(in[0], in[1], in[2]);
    case KILN__LSIG_CONV2D: return ((sig_CONV2D)fn)(in[0], in[1], in[2], 2, 1, 1, 0, 2, 1, 2);
    case KILN__LSIG_ATTENTION:
        return ((sig_ATTENTION)fn)(in[0], in[1], in[2], variant == 0 ? KILN_NONE : in[3], variant == 0, 0.0);
    case KILN__LSIG_ADDMM: return ((sig_ADDMM)fn)(in[0], in[1], in[2], 0.5, -2.0);
    case KILN__LSIG_BATCH_NORM: {
        if (variant == 0) return ((sig_BATCH_NORM)fn)(in[0], NULL, NULL, in[1], in[2], true, 0.1, 1e-5);
        kiln_tensor mean, var;
        running_stats(kiln_tensor_device(in[0]), kiln_tensor_dtype(in[0]), &mean, &var);
        kiln_tensor y = ((sig_BATCH_NORM)fn)(in[0], &mean, &var, in[1], in[2], false, 0.1, 1e-5);
        kiln_release(mean), kiln_release(var);
        return y;
    }
    case KILN__LSIG_POOL2D: return ((sig_POOL2D)fn)(in[0], 3, 2, 2, 1, 1, 0);
    case KILN__LSIG_ADAPTIVE_POOL2D: return ((sig_ADAPTIVE_POOL2D)fn)(in[0], 4, 3);
    case KILN__LSIG_POOL2D_OPTS: {
        kiln_pool2d_options o = {.kernel_h = 3, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .pad_h = 1, .ceil_mode = true,
                                 .exclude_pad = r->kernel == KILN__OP_AVG_POOL2D};
        return ((sig_POOL2D_OPTS)fn)(in[0], o);
    }
    }
    return KILN_NONE;
}

/* Runs a case: the result as doubles in out, its dtype and shape checked against the row. */
static kiln_status run_case(int row, int variant, kiln_device dev, kiln_dtype dt, int layout, double *out) {
    const kiln__linalg_info *r = row_op(row);
    kiln_tensor in[4];
    for (int k = 0; k < tensors(r, variant); k++) in[k] = case_arg(r, k, dev, dt, layout, false);
    kiln_tensor y = call_row_op(row, variant, in);
    kiln_shape got = kiln_tensor_shape(y), want = want_shape(r);
    if (got.ndim >= 0) { /* (else a poisoned result: the read reports it) */
        KT_CHECK_MSG(kiln_tensor_dtype(y) == dt, "%s %s: dtype %s", r->name, dtype_str(dt), dtype_str(kiln_tensor_dtype(y)));
        bool same = got.ndim == want.ndim;
        for (int d = 0; same && d < got.ndim; d++) same = got.dims[d] == want.dims[d];
        KT_CHECK_MSG(same, "%s: the result's shape is not the row's shape rule's", r->name);
    }
    if (dev != KILN_CPU) y = kiln_to_device(y, KILN_CPU);
    return kiln_into_data(kiln_cast(y, KILN_F64), out, sizeof(double) * (size_t)kiln_shape_numel(want));
}

static int count_args(const char *args) {
    int n = 1;
    for (const char *p = args; *p; p++) n += *p == ',';
    return n;
}

KT_TEST(the_linalg_table_is_consistent) {
    KT_CHECK(KILN__LINALG_COUNT >= 14);
    static const int params[] = {[KILN__LSIG_AB] = 2, [KILN__LSIG_LINEAR] = 3, [KILN__LSIG_CONV2D] = 10,
                                 [KILN__LSIG_ATTENTION] = 6, [KILN__LSIG_BATCH_NORM] = 8, [KILN__LSIG_ADDMM] = 5,
                                 [KILN__LSIG_POOL2D] = 7, [KILN__LSIG_ADAPTIVE_POOL2D] = 3, [KILN__LSIG_POOL2D_OPTS] = 2};
    static const int arity[] = {[KILN__LSIG_AB] = 2, [KILN__LSIG_LINEAR] = 3, [KILN__LSIG_CONV2D] = 3,
                                [KILN__LSIG_ATTENTION] = 4, [KILN__LSIG_BATCH_NORM] = 5, [KILN__LSIG_ADDMM] = 3,
                                [KILN__LSIG_POOL2D] = 1, [KILN__LSIG_ADAPTIVE_POOL2D] = 1, [KILN__LSIG_POOL2D_OPTS] = 1};
    for (int row = 0; row < KILN__LINALG_COUNT; row++) {
        const kiln__linalg_info *r = row_op(row);
        KT_CHECK_MSG(r->name && r->doc && r->doc[0] && r->tol > 0 && row_fns[row], "row %d", row);
        KT_CHECK_MSG(r->arity == arity[r->sig] && count_args(r->args) == params[r->sig], "%s: arity %d, args %s", r->name,
                     r->arity, r->args);
        bool found = false;
        for (size_t i = 0; i < sizeof listed / sizeof listed[0]; i++) found |= strcmp(listed[i], r->name) == 0;
        KT_CHECK_MSG(found, "kiln_%s is in no call-site list of kiln/tensor.h or kiln/nn.h", r->name);
        KT_CHECK_MSG(r->kernel < 0 || (r->kernel < KILN__OP_COUNT && !kiln__op_info_of((kiln__opcode)r->kernel)->name),
                     "%s: kernel %d is an opcode outside the other tables", r->name, r->kernel);
    }
}

/* Each row, variant, dtype and layout on the CPU; f32 against the f64 run of the same values. */
KT_TEST(linalg_rows_match_double_precision) {
    double got[MAX_NUMEL], want[MAX_NUMEL];
    int cases = 0;
    for (int row = 0; row < KILN__LINALG_COUNT; row++) {
        const kiln__linalg_info *r = row_op(row);
        if (!name_selected(r->name)) continue;
        for (int variant = 0; variant < variants(r); variant++)
            for (int layout = 0; layout < 2; layout++) {
                kiln_status st = run_case(row, variant, KILN_CPU, KILN_F32, layout, got);
                KT_CHECK_MSG(st == KILN_OK, "%s/%d f32 %s: %s", r->name, variant, layout_names[layout], kiln_last_error());
                st = run_case(row, variant, KILN_CPU, KILN_F64, layout, want);
                KT_CHECK_MSG(st == KILN_OK, "%s/%d f64 %s: %s", r->name, variant, layout_names[layout], kiln_last_error());
                cases += 2;
                double e = nmse(got, want, kiln_shape_numel(want_shape(r)));
                KT_CHECK_MSG(e <= r->tol, "%s/%d f32 %s: normalized error %.3g > %.3g against f64", r->name, variant,
                             layout_names[layout], e, r->tol);
            }
    }
    printf("linear-algebra ops on the cpu: %d cases\n", cases);
}

/* The case's result and the gradients of sum(y * w) (w fixed) with respect to its tensors, on
 * dev, in f32, read into out (the result's values, then each gradient's); the count of values. */
static kiln_status forward_backward(int row, int variant, kiln_device dev, double *out, int64_t *count) {
    const kiln__linalg_info *r = row_op(row);
    int n = tensors(r, variant);
    kiln_tensor leaves[4], in[4];
    for (int k = 0; k < n; k++) {
        leaves[k] = case_arg(r, k, dev, KILN_F32, 0, false);
        kiln_require_grad(leaves[k]);
        in[k] = kiln_ref(leaves[k]);
    }
    kiln_tensor y = call_row_op(row, variant, in);
    kiln_shape ys = want_shape(r);
    kiln_tensor w = kiln_uniform(KILN_CPU, KILN_F32, ys, -1.0, 1.0, 99);
    if (dev != KILN_CPU) w = kiln_to_device(w, dev);
    kiln_grads *g = NULL;
    kiln_tensor y_read = kiln_ref(y);
    kiln_status st = kiln_backward_seed(y, w, &g);
    int64_t at = kiln_shape_numel(ys);
    if (st == KILN_OK) st = kiln_into_data(kiln_cast(kiln_to_device(y_read, KILN_CPU), KILN_F64), out, sizeof(double) * (size_t)at);
    else kiln_release(y_read);
    for (int k = 0; k < n; k++) {
        int64_t m = kiln_shape_numel(arg_shape(r, k, false));
        if (st == KILN_OK) {
            kiln_tensor gk = kiln_grad(g, leaves[k]);
            st = gk.id ? kiln_into_data(kiln_cast(kiln_to_device(gk, KILN_CPU), KILN_F64), out + at, sizeof(double) * (size_t)m)
                       : KILN_ERR_INVALID_ARGUMENT;
        }
        at += m;
        kiln_release(leaves[k]);
    }
    kiln_grads_free(g);
    *count = at;
    return st;
}

/* Every other registered device against the CPU: each row and variant in f32, forward and
 * backward (few cases: each is device kernels the device compiles). */
KT_TEST(linalg_rows_on_devices_match_the_cpu) {
    enum { MAX_VALUES = MAX_NUMEL + 3 * MAX_ARG };
    static double got[MAX_VALUES], want[MAX_VALUES];
    bool list = list_unsupported();
    for (int di = 0; other_device(di) != KILN_CPU; di++) {
        kiln_device dev = other_device(di);
        int cases = 0, unsupported = 0;
        for (int row = 0; row < KILN__LINALG_COUNT; row++) {
            const kiln__linalg_info *r = row_op(row);
            if (!name_selected(r->name)) continue;
            for (int variant = 0; variant < variants(r); variant++) {
                cases++;
                int64_t n_want, n_got;
                if (forward_backward(row, variant, KILN_CPU, want, &n_want) != KILN_OK) {
                    KT_CHECK_MSG(false, "%s/%d on the cpu: %s", r->name, variant, kiln_last_error());
                    continue;
                }
                char what[128];
                snprintf(what, sizeof what, "%s/%d f32 forward and backward", r->name, variant);
                kiln_status st = forward_backward(row, variant, dev, got, &n_got);
                if (!device_case_ran(dev, st, what, list, &unsupported)) continue;
                device_case_matches(dev, what, KILN_F32, nmse(got, want, n_want), r->tol);
            }
        }
        device_summary(dev, "linear-algebra ", cases, unsupported, list);
    }
}

/* gradcheck's inputs (f64 in [-1, 1]) as the case's tensors. */
static kiln_tensor grad_case(kiln_tensor *in, void *ctx) {
    int id = (int)(intptr_t)ctx;
    return call_row_op(id / 2, id % 2, in);
}

/* Each row's and variant's gradient, of every float input, against central differences. */
KT_TEST(linalg_gradients_match_finite_differences) {
    int checked = 0;
    for (int row = 0; row < KILN__LINALG_COUNT; row++) {
        const kiln__linalg_info *r = row_op(row);
        if (!name_selected(r->name)) continue;
        for (int variant = 0; variant < variants(r); variant++) {
            kiln_shape shapes[4];
            int n = tensors(r, variant);
            for (int k = 0; k < n; k++) shapes[k] = arg_shape(r, k, false);
            char name[96];
            snprintf(name, sizeof name, "%s/%d", r->name, variant);
            KT_CHECK_MSG(gc_check(name, grad_case, (void *)(intptr_t)(row * 2 + variant), n, shapes, 1e-6) == 0, "%s", name);
            checked++;
        }
    }
    printf("linear-algebra gradients: %d cases\n", checked);
    KT_CHECK(checked > 0 || getenv("KILN_TEST_OPS"));
}

/* A consumed handle, integers, and a second tensor that does not fit the first fail naming the
 * function and this file's line. */
KT_TEST(linalg_bad_input_fails_naming_the_op) {
    for (int row = 0; row < KILN__LINALG_COUNT; row++) {
        const kiln__linalg_info *r = row_op(row);
        if (!name_selected(r->name)) continue;
        char want[96];
        snprintf(want, sizeof want, "kiln_%s", r->name);
        for (int bad = 0; bad < 3; bad++) {
            kiln_tensor in[4], keep = KILN_NONE;
            int n = tensors(r, 1);
            for (int k = 0; k < n; k++) in[k] = case_arg(r, k, KILN_CPU, KILN_F32, 0, bad == 2);
            if (bad == 0) { /* in[0] consumed before the call */
                keep = kiln_ref(in[0]);
                kiln_release(in[0]);
            } else if (bad == 1) {
                in[0] = kiln_cast(in[0], KILN_I32);
            }
            static const kiln_status expect[] = {KILN_ERR_STALE_HANDLE, KILN_ERR_DTYPE, KILN_ERR_SHAPE};
            KT_READ_ERROR(call_row_op(row, 1, in), expect[bad], want);
            kiln_release(keep);
        }
    }
}

int main(void) {
    KT_RUN(the_linalg_table_is_consistent);
    KT_RUN(linalg_rows_match_double_precision);
    KT_RUN(linalg_rows_on_devices_match_the_cpu);
    KT_RUN(linalg_gradients_match_finite_differences);
    KT_RUN(linalg_bad_input_fails_naming_the_op);
    return kt_finish();
}
