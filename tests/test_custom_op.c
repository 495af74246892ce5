/* Users' registered ops (kiln/custom_op.h): values against the same composition of kiln's own
 * ops, gradients by finite differences, in-place writes, a failing kernel and a failing shape
 * rule reported at the caller's line, the thread count, bad registrations and bad calls, the
 * profiler's name. ctest runs it asynchronously and again with KILN_SYNC=1. */
#include <kiln.h>
#include <stdatomic.h>

#include "core/core-impl.h"
#include "kiln_test.h"

/* ---- a user's op: y = a * a * b (same shapes), any strides, f32 and f64 ------------------- */

static atomic_int seen_threads = -1;
static atomic_int kernel_runs;

static kiln_status same_shape_rule(int n, const kiln_custom_meta *in, kiln_custom_meta *out, void *user) {
    (void)user;
    for (int i = 1; i < n; i++) {
        bool same = in[i].ndim == in[0].ndim && in[i].dtype == in[0].dtype;
        for (int d = 0; same && d < in[0].ndim; d++) same = in[i].shape[d] == in[0].shape[d];
        if (!same) return kiln_custom_op_error("input %d differs from input 0 in shape or dtype", i);
    }
    if (in[0].dtype != KILN_F32 && in[0].dtype != KILN_F64) return kiln_custom_op_error("f32 or f64 only");
    *out = in[0];
    return KILN_OK;
}

/* Element i (row-major over shape) of operand o. */
static double load(const kiln_custom_operand *o, int64_t i) {
    int64_t off = 0;
    for (int d = o->ndim - 1; d >= 0; d--) {
        off += (i % o->shape[d]) * o->strides[d];
        i /= o->shape[d];
    }
    return o->dtype == KILN_F32 ? ((const float *)o->data)[off] : ((const double *)o->data)[off];
}

static int64_t numel_of(const kiln_custom_operand *o) {
    int64_t n = 1;
    for (int d = 0; d < o->ndim; d++) n *= o->shape[d];
    return n;
}

static kiln_status square_mul_cpu(int n, const kiln_custom_operand *in, const kiln_custom_operand *out, int threads,
                                  void *user) {
    (void)n, (void)user;
    atomic_store(&seen_threads, threads);
    atomic_fetch_add(&kernel_runs, 1);
    for (int64_t i = 0; i < numel_of(out); i++) { /* in place: element i is read before it is written */
        double a = load(&in[0], i), b = load(&in[1], i);
        if (out->dtype == KILN_F32) ((float *)out->data)[i] = (float)(a * a * b);
        else ((double *)out->data)[i] = a * a * b;
    }
    return KILN_OK;
}

static kiln_status square_mul_backward(int n, const kiln_tensor *in, kiln_tensor out, kiln_tensor g, kiln_tensor *gin,
                                       void *user) {
    (void)n, (void)out, (void)user;
    gin[0] = kiln_mul(kiln_mul_scalar(kiln_mul(kiln_ref(in[0]), kiln_ref(in[1])), 2.0), kiln_ref(g));
    gin[1] = kiln_mul(kiln_mul(kiln_ref(in[0]), kiln_ref(in[0])), kiln_ref(g));
    return KILN_OK;
}

static kiln_custom_op *square_mul(void) {
    static kiln_custom_op *op;
    if (!op) {
        kiln_custom_op_def def = {.name = "square_mul", .n_inputs = 2, .shape = same_shape_rule,
                                  .cpu_kernel = square_mul_cpu, .in_place = true, .backward = square_mul_backward};
        KT_CHECK(kiln_custom_op_register(&def, &op) == KILN_OK);
    }
    return op;
}

static kiln_tensor call2(kiln_custom_op *op, kiln_tensor a, kiln_tensor b) {
    kiln_tensor in[2] = {a, b};
    return kiln_custom_op_call(op, 2, in);
}

static void read_f64(kiln_tensor t, double *out, size_t n) {
    KT_CHECK(kiln_into_data(kiln_cast(t, KILN_F64), out, n * sizeof(double)) == KILN_OK);
}

KT_TEST(values_match_the_composition) {
    kt_mem_begin();
    for (int k = 0; k < 2; k++) {
        kiln_dtype dt = k ? KILN_F64 : KILN_F32;
        kiln_tensor a = kiln_randn(KILN_CPU, dt, KILN_SHAPE(5, 3), 1);
        kiln_tensor b = kiln_transpose(kiln_randn(KILN_CPU, dt, KILN_SHAPE(3, 5), 2), 0, 1); /* strided */
        kiln_tensor ref = kiln_mul(kiln_mul(kiln_ref(a), kiln_ref(a)), kiln_ref(b));
        kiln_tensor y = call2(square_mul(), kiln_ref(a), kiln_ref(b));
        KT_CHECK(kiln_tensor_ndim(y) == 2 && kiln_tensor_dim(y, 0) == 5 && kiln_tensor_dim(y, 1) == 3);
        double got[15], want[15], av[15], bv[15];
        read_f64(y, got, 15);
        read_f64(ref, want, 15);
        read_f64(a, av, 15);
        read_f64(b, bv, 15);
        for (int i = 0; i < 15; i++) {
            KT_NEAR(got[i], want[i], 1e-6);
            KT_NEAR(got[i], av[i] * av[i] * bv[i], k ? 1e-12 : 1e-5); /* the double reference */
        }
    }
    KT_MEM_CHECK();
}

/* A chain of custom ops fed by queued built-in ops, read once at the end: each waits for its
 * producer on the stream. */
KT_TEST(chain_waits_for_its_producers) {
    kt_mem_begin();
    kiln_tensor x = kiln_add_scalar(kiln_arange(KILN_CPU, KILN_F64, 0, 64, 1), 1.0);
    kiln_tensor y = x;
    for (int i = 0; i < 3; i++) y = call2(square_mul(), y, kiln_full(KILN_CPU, KILN_F64, KILN_SHAPE(64), 0.5));
    double got[64];
    read_f64(y, got, 64);
    for (int i = 0; i < 64; i++) {
        double v = i + 1.0;
        for (int k = 0; k < 3; k++) v = v * v * 0.5;
        KT_NEAR(got[i], v, 1e-12);
    }
    KT_MEM_CHECK();
}

static kiln__storage *storage_of(kiln_tensor t) {
    kiln__error *err = NULL;
    kiln__tensor *p = kiln__handle_peek(t, "test", &err);
    if (!p) kiln__error_unref(err);
    return p ? p->storage : NULL;
}

KT_TEST(in_place_when_the_input_has_one_owner) {
    kt_mem_begin();
    kiln_tensor a = kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(8), 3.0);
    kiln_sync();
    kiln__storage *sa = storage_of(a);
    kiln_memory_stats s0 = kiln_memory_stats_get(KILN_CPU);
    kiln_tensor y = call2(square_mul(), a, kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(8), 2.0));
    KT_CHECK(storage_of(y) == sa);
    KT_CHECK(kiln_memory_stats_get(KILN_CPU).inplace_reuses == s0.inplace_reuses + 1);
    double got[8];
    read_f64(y, got, 8);
    for (int i = 0; i < 8; i++) KT_NEAR(got[i], 18.0, 1e-12);

    /* shared: the caller still holds a, so a new buffer, and a keeps its values */
    a = kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(8), 3.0);
    y = call2(square_mul(), kiln_ref(a), kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(8), 2.0));
    KT_CHECK(storage_of(y) != storage_of(a));
    read_f64(y, got, 8);
    KT_NEAR(got[7], 18.0, 1e-12);
    read_f64(a, got, 8);
    KT_NEAR(got[7], 3.0, 1e-12);
    KT_MEM_CHECK();
}

static double loss_at(const double *a, const double *b) {
    kiln_tensor y = call2(square_mul(), kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(2, 3), a),
                          kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(2, 3), b));
    double v = 0;
    KT_CHECK(kiln_into_scalar_f64(kiln_sum(kiln_sin(y)), &v) == KILN_OK);
    return v;
}

KT_TEST(gradient_matches_finite_differences) {
    kt_mem_begin();
    double a[6] = {0.3, -1.2, 0.8, 1.5, -0.4, 0.9}, b[6] = {1.1, 0.2, -0.7, 0.5, 1.3, -0.6};
    kiln_tensor ta = kiln_leaf(kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(2, 3), a));
    kiln_tensor tb = kiln_leaf(kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(2, 3), b));
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_sum(kiln_sin(call2(square_mul(), kiln_ref(ta), kiln_ref(tb)))), &g) == KILN_OK);
    double ga[6], gb[6];
    read_f64(kiln_grad(g, ta), ga, 6);
    read_f64(kiln_grad(g, tb), gb, 6);
    kiln_grads_free(g);
    const double h = 1e-6;
    for (int i = 0; i < 6; i++) {
        double ap[6], am[6], bp[6], bm[6];
        memcpy(ap, a, sizeof a), memcpy(am, a, sizeof a), memcpy(bp, b, sizeof b), memcpy(bm, b, sizeof b);
        ap[i] += h, am[i] -= h, bp[i] += h, bm[i] -= h;
        KT_NEAR(ga[i], (loss_at(ap, b) - loss_at(am, b)) / (2 * h), 1e-6);
        KT_NEAR(gb[i], (loss_at(a, bp) - loss_at(a, bm)) / (2 * h), 1e-6);
    }
    kiln_release(ta);
    kiln_release(tb);
    KT_MEM_CHECK();
}

KT_TEST(backward_without_a_rule_fails_naming_the_op) {
    static kiln_custom_op *op;
    kiln_custom_op_def def = {.name = "square_mul_nograd", .n_inputs = 2, .shape = same_shape_rule,
                              .cpu_kernel = square_mul_cpu};
    KT_CHECK(kiln_custom_op_register(&def, &op) == KILN_OK);
    kt_mem_begin();
    kiln_tensor a = kiln_leaf(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)));
    kiln_tensor y = call2(op, kiln_ref(a), kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)));
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_sum(y), &g) == KILN_ERR_UNSUPPORTED);
    KT_CHECK(strstr(kiln_last_error(), "square_mul_nograd") != NULL);
    kiln_grads_free(g);
    kiln_release(a);
    KT_MEM_CHECK();
}

KT_TEST(kernel_is_told_the_thread_count) {
    int before = kiln_num_threads();
    for (int n = 1; n <= 2; n++) {
        kiln_set_num_threads(n);
        kiln_tensor y = call2(square_mul(), kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2)),
                              kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2)));
        kiln_release(y);
        kiln_sync();
        KT_CHECK(atomic_load(&seen_threads) == n);
    }
    kiln_set_num_threads(before);
}

/* ---- failures ------------------------------------------------------------------------------ */

static kiln_status refuse_negative_cpu(int n, const kiln_custom_operand *in, const kiln_custom_operand *out,
                                       int threads, void *user) {
    (void)n, (void)threads, (void)user;
    for (int64_t i = 0; i < numel_of(out); i++) {
        double v = load(&in[0], i);
        if (v < 0) return kiln_custom_op_error("element %lld is negative (%g)", (long long)i, v);
        ((float *)out->data)[i] = (float)sqrt(v);
    }
    return KILN_OK;
}

KT_TEST(failing_kernel_poisons_the_result_at_the_read) {
    static kiln_custom_op *op;
    kiln_custom_op_def def = {.name = "checked_sqrt", .n_inputs = 1, .shape = same_shape_rule,
                              .cpu_kernel = refuse_negative_cpu};
    KT_CHECK(kiln_custom_op_register(&def, &op) == KILN_OK);
    kt_mem_begin();
    float v[3] = {4, -1, 9};
    kiln_tensor x = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(3), v);
    int line = __LINE__ + 1;
    kiln_tensor y = kiln_custom_op_call(op, 1, &x);
    kiln_tensor z = kiln_add_scalar(y, 1.0); /* the poison travels on */
    KT_READ_ERROR(z, KILN_ERR_INVALID_ARGUMENT, "checked_sqrt");
    char site[64];
    snprintf(site, sizeof site, "test_custom_op.c:%d", line);
    KT_CHECK_MSG(strstr(kiln_last_error(), site) && strstr(kiln_last_error(), "element 1 is negative"), "%s",
                 kiln_last_error());
    kiln_sync(); /* delivered by the read: nothing left to report */
    KT_CHECK(kiln_last_status() == KILN_OK || strstr(kiln_last_error(), "checked_sqrt"));
    KT_MEM_CHECK();
}

KT_TEST(failing_shape_rule_poisons_the_result) {
    kt_mem_begin();
    kiln_tensor in[2] = {kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)), kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(4))};
    int line = __LINE__ + 1;
    kiln_tensor y = kiln_custom_op_call(square_mul(), 2, in);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "differs from input 0", line);
    KT_CHECK(strstr(kiln_last_error(), "square_mul") != NULL);
    KT_READ_ERROR(y, KILN_ERR_INVALID_ARGUMENT, "shape rule failed");
    y = call2(square_mul(), kiln_ones(KILN_CPU, KILN_I32, KILN_SHAPE(3)), kiln_ones(KILN_CPU, KILN_I32, KILN_SHAPE(3)));
    KT_READ_ERROR(y, KILN_ERR_INVALID_ARGUMENT, "f32 or f64 only");
    KT_MEM_CHECK();
}

KT_TEST(bad_calls_are_reported) {
    kt_mem_begin();
    kiln_tensor one[1] = {kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3))};
    int line = __LINE__ + 1;
    kiln_tensor y = kiln_custom_op_call(square_mul(), 1, one); /* takes 2 */
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "takes 2 inputs, got 1", line);
    KT_READ_ERROR(y, KILN_ERR_INVALID_ARGUMENT, "square_mul");
    one[0] = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3));
    y = kiln_custom_op_call(NULL, 1, one);
    KT_READ_ERROR(y, KILN_ERR_INVALID_ARGUMENT, "op is NULL");
    y = kiln_custom_op_call(square_mul(), 2, NULL);
    KT_READ_ERROR(y, KILN_ERR_INVALID_ARGUMENT, "inputs is NULL");
    kiln_tensor stale = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3));
    kiln_release(stale);
    y = call2(square_mul(), stale, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)));
    KT_READ_ERROR(y, KILN_ERR_STALE_HANDLE, "square_mul");
    KT_MEM_CHECK();
}

KT_TEST(bad_registrations_are_refused) {
    kiln_custom_op *op = (kiln_custom_op *)1;
    kiln_custom_op_def ok = {.name = "fine", .n_inputs = 1, .shape = same_shape_rule, .cpu_kernel = refuse_negative_cpu};
    kiln_custom_op_def d = ok;
    d.cpu_kernel = NULL;
    int line = __LINE__ + 1;
    KT_CHECK(kiln_custom_op_register(&d, &op) == KILN_ERR_INVALID_ARGUMENT && op == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "op fine has no CPU kernel", line);
    d = ok, d.shape = NULL;
    KT_CHECK(kiln_custom_op_register(&d, &op) == KILN_ERR_INVALID_ARGUMENT);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "op fine has no shape rule", 0);
    d = ok, d.name = "";
    KT_CHECK(kiln_custom_op_register(&d, &op) == KILN_ERR_INVALID_ARGUMENT);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "non-empty name", 0);
    d = ok, d.name = NULL;
    KT_CHECK(kiln_custom_op_register(&d, &op) == KILN_ERR_INVALID_ARGUMENT);
    d = ok, d.n_inputs = 4;
    KT_CHECK(kiln_custom_op_register(&d, &op) == KILN_ERR_INVALID_ARGUMENT);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "n_inputs 4 is out of range", 0);
    d = ok, d.n_inputs = 0;
    KT_CHECK(kiln_custom_op_register(&d, &op) == KILN_ERR_INVALID_ARGUMENT);
    KT_CHECK(kiln_custom_op_register(NULL, &op) == KILN_ERR_INVALID_ARGUMENT);
    KT_CHECK(kiln_custom_op_register(&ok, NULL) == KILN_ERR_INVALID_ARGUMENT);
    KT_CHECK(kiln_custom_op_find("fine") == NULL); /* nothing was registered */
    KT_CHECK(kiln_custom_op_register(&ok, &op) == KILN_OK && kiln_custom_op_find("fine") == op);
    kiln_custom_op *again = NULL;
    KT_CHECK(kiln_custom_op_register(&ok, &again) == KILN_ERR_INVALID_ARGUMENT && again == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "an op named fine is registered already", 0);
    KT_CHECK(kiln_custom_op_find(NULL) == NULL && kiln_custom_op_find("nope") == NULL);
}

KT_TEST(profiler_shows_the_registered_name) {
    kiln_profiler_start();
    kiln_release(call2(square_mul(), kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(4)), kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(4))));
    kiln_profiler_stop();
    kiln_profile_event ev[64];
    size_t n = kiln_profiler_events(ev, 64);
    int found = 0;
    for (size_t i = 0; i < n && i < 64; i++)
        found += strcmp(ev[i].op, "square_mul") == 0 && strcmp(ev[i].kernel, "CUSTOM") == 0;
    KT_CHECK(found == 1);
}


/* A poisoned input (a failure still queued) is not given to the kernel: the result carries the
 * first failure on. */
KT_TEST(poisoned_input_skips_the_kernel) {
    kt_mem_begin();
    kiln_custom_op *checked = kiln_custom_op_find("checked_sqrt");
    KT_CHECK(checked != NULL);
    kiln_tensor x = kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(2), -1.0);
    kiln_tensor y = kiln_custom_op_call(checked, 1, &x);
    kiln_sync(); /* y's failure is reported here; y stays poisoned */
    int runs = atomic_load(&kernel_runs);
    kiln_tensor z = call2(square_mul(), y, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2)));
    KT_READ_ERROR(z, KILN_ERR_INVALID_ARGUMENT, "checked_sqrt");
    KT_CHECK(atomic_load(&kernel_runs) == runs);
    KT_MEM_CHECK();
}

static kiln_status hostile_rule(int n, const kiln_custom_meta *in, kiln_custom_meta *out, void *user) {
    (void)n, (void)in;
    int kind = *(const int *)user;
    *out = in[0];
    if (kind == 0) out->ndim = KILN_MAX_DIMS + 1;
    if (kind == 1) out->dtype = (kiln_dtype)1000;
    if (kind == 2) out->ndim = 2, out->shape[0] = out->shape[1] = INT64_MAX / 2;
    if (kind == 3) out->ndim = 1, out->shape[0] = -5;
    return KILN_OK;
}

KT_TEST(hostile_shape_rules_are_caught) {
    static const int kinds[4] = {0, 1, 2, 3};
    static const kiln_status want[4] = {KILN_ERR_SHAPE, KILN_ERR_DTYPE, KILN_ERR_OUT_OF_MEMORY, KILN_ERR_SHAPE};
    static const char *const names[4] = {"hostile0", "hostile1", "hostile2", "hostile3"};
    kt_mem_begin();
    for (int k = 0; k < 4; k++) {
        kiln_custom_op *op = NULL;
        kiln_custom_op_def def = {.name = names[k], .n_inputs = 1, .shape = hostile_rule,
                                  .cpu_kernel = refuse_negative_cpu, .user_data = (void *)&kinds[k]};
        KT_CHECK(kiln_custom_op_register(&def, &op) == KILN_OK);
        kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3));
        kiln_tensor y = kiln_custom_op_call(op, 1, &x);
        KT_CHECK_MSG(kiln_last_status() == want[k] && strstr(kiln_last_error(), names[k]), "%d: %s", k, kiln_last_error());
        kiln_release(y);
    }
    kiln_sync();
    KT_MEM_CHECK();
}

/* Backwards that fail, or give a gradient of the wrong shape: kiln_backward reports it. */
static kiln_status failing_backward(int n, const kiln_tensor *in, kiln_tensor out, kiln_tensor g, kiln_tensor *gin,
                                    void *user) {
    (void)n, (void)in, (void)out, (void)g, (void)gin, (void)user;
    return kiln_custom_op_error("no gradient today");
}
static kiln_status wrong_shape_backward(int n, const kiln_tensor *in, kiln_tensor out, kiln_tensor g,
                                        kiln_tensor *gin, void *user) {
    (void)n, (void)in, (void)out, (void)g, (void)user;
    gin[0] = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(7));
    return KILN_OK;
}

KT_TEST(bad_backwards_are_reported) {
    kiln_custom_op_def def = {.name = "bad_backward", .n_inputs = 1, .shape = same_shape_rule,
                              .cpu_kernel = refuse_negative_cpu, .backward = failing_backward};
    kiln_custom_op *fails = NULL, *wrong = NULL;
    KT_CHECK(kiln_custom_op_register(&def, &fails) == KILN_OK);
    def.name = "wrong_shape_backward", def.backward = wrong_shape_backward;
    KT_CHECK(kiln_custom_op_register(&def, &wrong) == KILN_OK);
    kt_mem_begin();
    for (int k = 0; k < 2; k++) {
        kiln_tensor a = kiln_leaf(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)));
        kiln_tensor in = kiln_ref(a);
        kiln_grads *g = NULL;
        kiln_status st = kiln_backward(kiln_sum(kiln_custom_op_call(k ? wrong : fails, 1, &in)), &g);
        const char *want = k ? "backward of op wrong_shape_backward gave a gradient of shape [7] for input 0 of shape [3]"
                             : "backward of op bad_backward failed: no gradient today";
        KT_CHECK_MSG(st != KILN_OK && strstr(kiln_last_error(), want), "%d: %s", k, kiln_last_error());
        kiln_grads_free(g);
        kiln_release(a);
    }
    KT_MEM_CHECK();
}


/* y = x; its backward returns the borrowed grad itself, as a PyTorch backward returns grad. */
static kiln_status copy_cpu(int n, const kiln_custom_operand *in, const kiln_custom_operand *out, int threads,
                            void *user) {
    (void)n, (void)threads, (void)user;
    for (int64_t i = 0; i < numel_of(out); i++) ((float *)out->data)[i] = (float)load(&in[0], i);
    return KILN_OK;
}
static kiln_status pass_grad_backward(int n, const kiln_tensor *in, kiln_tensor out, kiln_tensor g, kiln_tensor *gin,
                                      void *user) {
    (void)n, (void)in, (void)out, (void)user;
    gin[0] = g;
    return KILN_OK;
}

KT_TEST(backward_may_return_the_grad_it_was_lent) {
    kiln_custom_op_def def = {.name = "copy_op", .n_inputs = 1, .shape = same_shape_rule, .cpu_kernel = copy_cpu,
                              .backward = pass_grad_backward};
    kiln_custom_op *op = NULL;
    KT_CHECK(kiln_custom_op_register(&def, &op) == KILN_OK);
    kt_mem_begin();
    kiln_tensor a = kiln_leaf(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)));
    kiln_tensor in = kiln_ref(a);
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_sum(kiln_mul_scalar(kiln_custom_op_call(op, 1, &in), 3.0)), &g) == KILN_OK);
    double ga[3];
    read_f64(kiln_grad(g, a), ga, 3);
    for (int i = 0; i < 3; i++) KT_NEAR(ga[i], 3.0, 1e-12);
    kiln_grads_free(g);
    kiln_release(a);
    KT_MEM_CHECK();
}


/* A kernel that splits its work over kiln's pool with kiln_parallel_for. */
typedef struct {
    const kiln_custom_operand *in, *out;
} scale_job;
static atomic_int ranges_run;
static void scale_range(void *ctx, int64_t begin, int64_t end) {
    const scale_job *j = ctx;
    atomic_fetch_add(&ranges_run, 1);
    for (int64_t i = begin; i < end; i++) ((double *)j->out->data)[i] = 3.0 * load(j->in, i);
}
static kiln_status scale_parallel_cpu(int n, const kiln_custom_operand *in, const kiln_custom_operand *out,
                                      int threads, void *user) {
    (void)n, (void)threads, (void)user;
    scale_job j = {in, out};
    kiln_parallel_for(numel_of(out), 1024, scale_range, &j);
    return KILN_OK;
}

KT_TEST(kernel_may_use_kiln_parallel_for) {
    kiln_custom_op_def def = {.name = "scale_parallel", .n_inputs = 1, .shape = same_shape_rule,
                              .cpu_kernel = scale_parallel_cpu, .in_place = true};
    kiln_custom_op *op = NULL;
    KT_CHECK(kiln_custom_op_register(&def, &op) == KILN_OK);
    kt_mem_begin();
    int before = kiln_num_threads();
    kiln_set_num_threads(2);
    enum { N = 100000 };
    kiln_tensor x = kiln_arange(KILN_CPU, KILN_F64, 0, N, 1);
    atomic_store(&ranges_run, 0);
    kiln_tensor y = kiln_custom_op_call(op, 1, &x);
    double *got = malloc(N * sizeof *got);
    read_f64(y, got, N);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += got[i] != 3.0 * i;
    KT_CHECK(bad == 0);
    KT_CHECK(atomic_load(&ranges_run) >= 2); /* split over the two threads */
    free(got);
    kiln_set_num_threads(before);
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(values_match_the_composition);
    KT_RUN(chain_waits_for_its_producers);
    KT_RUN(in_place_when_the_input_has_one_owner);
    KT_RUN(gradient_matches_finite_differences);
    KT_RUN(backward_without_a_rule_fails_naming_the_op);
    KT_RUN(kernel_is_told_the_thread_count);
    KT_RUN(failing_kernel_poisons_the_result_at_the_read);
    KT_RUN(failing_shape_rule_poisons_the_result);
    KT_RUN(bad_calls_are_reported);
    KT_RUN(bad_registrations_are_refused);
    KT_RUN(profiler_shows_the_registered_name);
    KT_RUN(poisoned_input_skips_the_kernel);
    KT_RUN(hostile_shape_rules_are_caught);
    KT_RUN(bad_backwards_are_reported);
    KT_RUN(backward_may_return_the_grad_it_was_lent);
    KT_RUN(kernel_may_use_kiln_parallel_for);
    return kt_finish();
}
