/* Substitution of queued compositions (engine/substitute.h, kiln/custom_op.h's patterns): the
 * composed layer norm (by hand and kiln_layer_norm) and the composed attention run as kiln's
 * fused kernels with the same
 * values as the composition (against a double-precision reference and against KILN_SUBSTITUTE
 * off), exactly when the whole pattern is queued and no intermediate is read elsewhere (a held
 * handle, another queued op, autodiff's saved tensors), and a user's op with a pattern likewise,
 * its `supports` and constants respected; bad patterns are refused with clear messages. With
 * KILN_SYNC=1 nothing is queued, so nothing is substituted: the tests then expect the count 0
 * and the same values. ctest runs it as is, with KILN_SYNC=1, and with KILN_FUSION=0. */
#include <kiln.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "engine/substitute.h"
#include "ops/ops-impl.h"
#include "kiln_test.h"

enum { ROWS = 37, D = 48 };

/* 1 when ops are queued (so a complete pattern is substituted), 0 with KILN_SYNC=1 */
static int64_t expect_one(void) { return kiln_engine_is_async() ? 1 : 0; }

static void read_f32(kiln_tensor t, float *out, size_t n) {
    KT_CHECK(kiln_into_data(t, out, n * sizeof *out) == KILN_OK);
}

static kiln_tensor randn(int64_t rows, int64_t d, uint64_t seed) {
    return kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(rows, d), seed);
}

/* x - mean(x) and (in *var) its mean square over dim, dims kept; consumes x. */
static kiln_tensor centred(kiln_tensor x, int dim, kiln_tensor *var) {
    kiln_tensor mean = kiln_mean_dims(kiln_ref(x), (kiln_dims){1, {dim}}, true);
    kiln_tensor xc = kiln_sub(x, mean);
    *var = kiln_mean_dims(kiln_mul(kiln_ref(xc), kiln_ref(xc)), (kiln_dims){1, {dim}}, true);
    return xc;
}

/* The layer norm a user writes in C: every op consumes, so the intermediates' handles are gone
 * by the time the result is read. */
static kiln_tensor composed_layer_norm(kiln_tensor x, kiln_tensor w, kiln_tensor b, double eps) {
    kiln_tensor var, xc = centred(x, -1, &var);
    kiln_tensor y = kiln_mul(xc, kiln_rsqrt(kiln_add_scalar(var, eps)));
    if (w.id != KILN_NONE.id) y = kiln_mul(y, w);
    return b.id != KILN_NONE.id ? kiln_add(y, b) : y;
}

/* Layer norm of each row of x [rows, d] in double. */
static void reference(const float *x, const float *w, const float *b, double eps, int64_t rows, int64_t d, double *y) {
    for (int64_t r = 0; r < rows; r++) {
        double m = 0, v = 0;
        for (int64_t j = 0; j < d; j++) m += x[r * d + j];
        m /= (double)d;
        for (int64_t j = 0; j < d; j++) v += (x[r * d + j] - m) * (x[r * d + j] - m);
        double rstd = 1 / sqrt(v / (double)d + eps);
        for (int64_t j = 0; j < d; j++)
            y[r * d + j] = (x[r * d + j] - m) * rstd * (w ? w[j] : 1.0) + (b ? b[j] : 0.0);
    }
}

static int64_t substituted(void) { return kiln__subst_stats_get().substituted; }

static bool profiled(const char *op_name) {
    kiln_profile_event ev[256];
    size_t n = kiln_profiler_events(ev, 256);
    for (size_t i = 0; i < n && i < 256; i++)
        if (strcmp(ev[i].op, op_name) == 0) return true;
    return false;
}

/* ---- kiln's own layer norm ------------------------------------------------------------------ */

/* With weight and bias, without bias, without either: the composition is one fused kernel whose
 * values match the double reference and the composition run as written. */
KT_TEST(composed_layer_norm_runs_fused) {
    kt_mem_begin();
    float x[ROWS * D], w[D], b[D], got[ROWS * D], plain[ROWS * D];
    read_f32(randn(ROWS, D, 1), x, ROWS * D);
    read_f32(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(D), 2), w, D);
    read_f32(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(D), 3), b, D);
    static double want[ROWS * D];
    for (int affine = 0; affine <= 2; affine++) {
        const float *wp = affine >= 1 ? w : NULL, *bp = affine == 2 ? b : NULL;
        reference(x, wp, bp, 1e-5, ROWS, D, want);
        for (int on = 1; on >= 0; on--) {
            kiln__subst_set_enabled(on);
            kiln__subst_stats_reset();
            kiln_profiler_start();
            kiln_tensor tw = wp ? kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(D), w) : KILN_NONE;
            kiln_tensor tb = bp ? kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(D), b) : KILN_NONE;
            kiln_tensor y = composed_layer_norm(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(ROWS, D), x), tw, tb, 1e-5);
            read_f32(y, on ? got : plain, ROWS * D);
            kiln_profiler_stop();
            KT_CHECK_MSG(substituted() == (on ? expect_one() : 0), "affine %d, on %d: %lld substituted", affine, on,
                         (long long)substituted());
            KT_CHECK(profiled("fused_layer_norm") == (on && expect_one()));
        }
        for (int i = 0; i < ROWS * D; i++) {
            KT_NEAR(got[i], want[i], 1e-4);
            KT_NEAR(got[i], plain[i], 1e-4);
        }
    }
    kiln__subst_set_enabled(true);
    KT_MEM_CHECK();
}

/* kiln_layer_norm (untracked) queues the same composition: f64 and a 3-d input too. */
KT_TEST(kiln_layer_norm_runs_fused) {
    kt_mem_begin();
    kiln__subst_stats_reset();
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F64, KILN_SHAPE(3, 5, 16), 4);
    double xv[240], got[240], want[240];
    KT_CHECK(kiln_into_data(kiln_ref(x), xv, sizeof xv) == KILN_OK);
    kiln_tensor w = kiln_full(KILN_CPU, KILN_F64, KILN_SHAPE(16), 1.5), b = kiln_full(KILN_CPU, KILN_F64, KILN_SHAPE(16), -0.25);
    kiln_tensor y = kiln_layer_norm(x, KILN_SHAPE(16), w, b, 1e-12);
    KT_CHECK(kiln_into_data(y, got, sizeof got) == KILN_OK);
    float xf[240], wf[16], bf[16];
    for (int i = 0; i < 240; i++) xf[i] = (float)xv[i];
    for (int j = 0; j < 16; j++) wf[j] = 1.5f, bf[j] = -0.25f;
    reference(xf, wf, bf, 1e-12, 15, 16, want);
    for (int i = 0; i < 240; i++) KT_NEAR(got[i], want[i], 1e-5); /* (the reference read x as f32) */
    KT_CHECK(substituted() == expect_one());
    KT_MEM_CHECK();
}

/* A handle to an intermediate (x - mean) kept until after the result is read: the composition
 * runs as written, and the intermediate reads right. */
KT_TEST(held_intermediate_is_not_replaced) {
    kt_mem_begin();
    kiln__subst_stats_reset();
    kiln_tensor var, xc = centred(randn(ROWS, D, 5), -1, &var);
    kiln_tensor kept = kiln_ref(xc);
    kiln_tensor y = kiln_mul(xc, kiln_rsqrt(kiln_add_scalar(var, 1e-5)));
    float row_sum;
    KT_CHECK(kiln_into_scalar(kiln_sum(kiln_mean_dims(kept, (kiln_dims){1, {-1}}, false)), &row_sum) == KILN_OK);
    KT_NEAR(row_sum, 0.0, 1e-4); /* x - mean, as written */
    float v[ROWS * D];
    read_f32(y, v, ROWS * D);
    KT_CHECK(substituted() == 0);
    KT_CHECK(kiln__subst_stats_get().refused_consumer == expect_one());
    KT_MEM_CHECK();
}

/* Another queued op reads an intermediate (var + 1, a pattern op itself): not replaced. */
KT_TEST(queued_reader_of_an_intermediate_blocks) {
    kt_mem_begin();
    kiln__subst_stats_reset();
    kiln_tensor var, xc = centred(randn(ROWS, D, 6), -1, &var);
    kiln_tensor other = kiln_add_scalar(kiln_ref(var), 1.0);
    kiln_tensor y = kiln_mul(xc, kiln_rsqrt(kiln_add_scalar(var, 1e-5)));
    float v[ROWS * D], o[ROWS];
    read_f32(y, v, ROWS * D);
    read_f32(other, o, ROWS);
    for (int r = 0; r < ROWS; r++) KT_CHECK(o[r] > 1.0f);
    KT_CHECK(substituted() == 0);
    KT_MEM_CHECK();
}

/* Part of the pattern (no rsqrt: sqrt and a division) and a reduction over another dim are
 * not layer norm. */
KT_TEST(partial_or_different_pattern_is_not_replaced) {
    kt_mem_begin();
    kiln__subst_stats_reset();
    kiln_tensor var, xc = centred(randn(ROWS, D, 7), -1, &var);
    kiln_tensor y = kiln_div(xc, kiln_sqrt(kiln_add_scalar(var, 1e-5)));
    float v[ROWS * D];
    read_f32(y, v, ROWS * D);
    xc = centred(randn(ROWS, D, 8), 0, &var); /* normalised over dim 0 */
    read_f32(kiln_mul(xc, kiln_rsqrt(kiln_add_scalar(var, 1e-5))), v, ROWS * D);
    KT_CHECK(substituted() == 0);
    KT_MEM_CHECK();
}

/* Recorded by autodiff: the tape keeps x - mean and 1/std (handles), so the composition runs as
 * written and the gradient is the composition's. */
KT_TEST(recorded_composition_is_not_replaced) {
    kt_mem_begin();
    float gx[2][ROWS * D];
    for (int on = 1; on >= 0; on--) {
        kiln__subst_set_enabled(on);
        kiln__subst_stats_reset();
        kiln_tensor x = kiln_leaf(randn(ROWS, D, 9));
        kiln_tensor w = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(D), 10);
        kiln_tensor y = composed_layer_norm(kiln_ref(x), w, KILN_NONE, 1e-5);
        kiln_tensor loss = kiln_sum(kiln_mul(y, kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(ROWS, D), 11)));
        kiln_grads *g = NULL;
        KT_CHECK(kiln_backward(loss, &g) == KILN_OK);
        read_f32(kiln_grad(g, x), gx[on], ROWS * D);
        kiln_grads_free(g);
        kiln_release(x);
        KT_CHECK(substituted() == 0);
    }
    kiln__subst_set_enabled(true);
    for (int i = 0; i < ROWS * D; i++) KT_NEAR(gx[1][i], gx[0][i], 1e-5);
    KT_MEM_CHECK();
}

/* The result's memory may be the input's (every op consumed its only handle): the fused kernel
 * then works in place; and four layer norms in a row (more ops than the hold keeps) are four
 * replacements, each let go when the next one starts. */
KT_TEST(in_a_row_and_in_place) {
    kt_mem_begin();
    kiln__subst_stats_reset();
    kiln_tensor y = randn(ROWS, D, 12);
    for (int i = 0; i < 4; i++) y = composed_layer_norm(y, KILN_NONE, KILN_NONE, 1e-5); /* (of a layer norm: the same) */
    float v[ROWS * D], x[ROWS * D];
    read_f32(y, v, ROWS * D);
    read_f32(randn(ROWS, D, 12), x, ROWS * D);
    static double want[ROWS * D];
    reference(x, NULL, NULL, 1e-5, ROWS, D, want);
    for (int i = 0; i < ROWS * D; i++) KT_NEAR(v[i], want[i], 1e-3);
    KT_CHECK(substituted() == 4 * expect_one());
    KT_MEM_CHECK();
}

/* x read through a transpose (its rows strided): the kernel's general path, same values. */
KT_TEST(strided_input_runs_fused) {
    kt_mem_begin();
    kiln__subst_stats_reset();
    kiln_tensor xt = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(D, ROWS), 17);
    float x[ROWS * D], t[ROWS * D], got[ROWS * D];
    read_f32(kiln_ref(xt), t, ROWS * D);
    for (int r = 0; r < ROWS; r++)
        for (int j = 0; j < D; j++) x[r * D + j] = t[j * ROWS + r];
    kiln_tensor w = kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(D), 2.0);
    read_f32(composed_layer_norm(kiln_transpose(xt, 0, 1), w, KILN_NONE, 1e-5), got, ROWS * D);
    float w2[D];
    for (int j = 0; j < D; j++) w2[j] = 2.0f;
    static double want[ROWS * D];
    reference(x, w2, NULL, 1e-5, ROWS, D, want);
    for (int i = 0; i < ROWS * D; i++) KT_NEAR(got[i], want[i], 2e-4);
    KT_CHECK(substituted() == expect_one());
    KT_MEM_CHECK();
}

typedef struct {
    kiln_tensor y;
    float v[ROWS * D];
    kiln_status st;
} reader_job;

static void *read_on_another_thread(void *arg) {
    reader_job *j = arg;
    j->st = kiln_into_data(j->y, j->v, sizeof j->v);
    return NULL;
}

/* Another thread reads the result while the composition is still held on this thread's stream:
 * that read lets go of the hold (replacing the composition there), and both threads read the
 * same values. */
KT_TEST(another_threads_read_lets_go_of_the_hold) {
    kt_mem_begin();
    kiln__subst_stats_reset();
    float x[ROWS * D], mine[ROWS * D];
    read_f32(randn(ROWS, D, 16), x, ROWS * D);
    kiln_tensor y = composed_layer_norm(randn(ROWS, D, 16), KILN_NONE, KILN_NONE, 1e-5);
    reader_job job = {.y = kiln_ref(y)};
    pthread_t t;
    KT_CHECK(pthread_create(&t, NULL, read_on_another_thread, &job) == 0);
    pthread_join(t, NULL);
    KT_CHECK(job.st == KILN_OK);
    read_f32(y, mine, ROWS * D);
    static double want[ROWS * D];
    reference(x, NULL, NULL, 1e-5, ROWS, D, want);
    for (int i = 0; i < ROWS * D; i++) {
        KT_NEAR(job.v[i], want[i], 1e-4);
        KT_CHECK(job.v[i] == mine[i]);
    }
    KT_CHECK(substituted() == expect_one());
    KT_MEM_CHECK();
}

/* ---- kiln's own attention ------------------------------------------------------------------ */

enum { B = 2, H = 3, L = 5, S = 7, E = 8, EV = 4 };

/* softmax(q k^T * scale) v per batch and head, in double */
static void attention_reference(const float *q, const float *k, const float *v, double scale, double *o) {
    for (int bh = 0; bh < B * H; bh++)
        for (int i = 0; i < L; i++) {
            double sc[S], mx = -INFINITY, z = 0;
            for (int j = 0; j < S; j++) {
                sc[j] = 0;
                for (int e = 0; e < E; e++) sc[j] += (double)q[(bh * L + i) * E + e] * k[(bh * S + j) * E + e];
                sc[j] *= scale;
                mx = sc[j] > mx ? sc[j] : mx;
            }
            for (int j = 0; j < S; j++) z += sc[j] = exp(sc[j] - mx);
            for (int c = 0; c < EV; c++) {
                double acc = 0;
                for (int j = 0; j < S; j++) acc += sc[j] / z * v[(bh * S + j) * EV + c];
                o[(bh * L + i) * EV + c] = acc;
            }
        }
}

/* How many of the profiler's events are op_name's. */
static int profiled_count(const char *op_name) {
    kiln_profile_event ev[256];
    size_t n = kiln_profiler_events(ev, 256);
    int count = 0;
    for (size_t i = 0; i < n && i < 256; i++) count += strcmp(ev[i].op, op_name) == 0;
    return count;
}

/* Composed attention is replaced by default; KILN_SUBSTITUTE_ATTENTION=0 (ctest's
 * test_substitute_attention_off) keeps it as written. */
static int64_t expect_attention(void) { return kiln__env_flag("KILN_SUBSTITUTE_ATTENTION", true) ? expect_one() : 0; }

enum { ROUNDS = 3 };

/* The composed attention (scale as a product or a division) runs as the fused kernel with the
 * composition's values, ROUNDS times in a row; as written when the weights are read elsewhere
 * too: a handle kept on them, another op reading them before the last product or after it. */
KT_TEST(composed_attention_runs_fused) {
    kt_mem_begin();
    float q[B * H * L * E], k[B * H * S * E], v[B * H * S * EV], got[B * H * L * EV];
    read_f32(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(B, H, L, E), 20), q, B * H * L * E);
    read_f32(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(B, H, S, E), 21), k, B * H * S * E);
    read_f32(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(B, H, S, EV), 22), v, B * H * S * EV);
    static double want[B * H * L * EV];
    attention_reference(q, k, v, 1 / sqrt((double)E), want);
    /* 0: * scale, 1: / sqrt(E), 2: a handle kept on the weights, 3: their sum taken before the
     * last product, 4: their sum taken after it */
    for (int way = 0; way < 5; way++) {
        kiln__subst_stats_reset();
        kiln_profiler_start();
        kiln_tensor sums[ROUNDS];
        for (int round = 0; round < ROUNDS; round++) {
            kiln_tensor tq = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(B, H, L, E), q);
            kiln_tensor tk = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(B, H, S, E), k);
            kiln_tensor tv = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(B, H, S, EV), v);
            kiln_tensor sc = kiln_matmul(tq, kiln_transpose(tk, -2, -1));
            sc = way == 1 ? kiln_div_scalar(sc, sqrt((double)E)) : kiln_mul_scalar(sc, 1 / sqrt((double)E));
            kiln_tensor p = kiln_softmax(sc, -1);
            kiln_tensor kept = way == 2 ? kiln_ref(p) : KILN_NONE;
            sums[round] = way == 3 ? kiln_sum(kiln_ref(p)) : KILN_NONE;
            kiln_tensor pv = way == 4 ? kiln_ref(p) : KILN_NONE;
            kiln_tensor o = kiln_matmul(p, tv);
            if (way == 4) sums[round] = kiln_sum(pv);
            read_f32(o, got, B * H * L * EV);
            kiln_release(kept);
            for (int i = 0; i < B * H * L * EV; i++) KT_NEAR(got[i], want[i], 1e-4);
        }
        kiln_profiler_stop();
        for (int round = 0; round < ROUNDS; round++) {
            if (way < 3) continue;
            float total; /* the weights' rows sum to 1 */
            read_f32(sums[round], &total, 1);
            KT_NEAR(total, B * H * L, 1e-3);
        }
        int64_t want_n = way < 2 ? ROUNDS * expect_attention() : 0;
        KT_CHECK_MSG(substituted() == want_n, "way %d: %lld", way, (long long)substituted());
        KT_CHECK_MSG(profiled_count("fused_attention") == want_n, "way %d: %d", way, profiled_count("fused_attention"));
        KT_CHECK_MSG(profiled_count("kiln_softmax") == ROUNDS - want_n, "way %d: %d", way, profiled_count("kiln_softmax"));
    }
    KT_MEM_CHECK();
}

/* ---- a user's op with a pattern -------------------------------------------------------------- */

static atomic_int swish_runs;
static atomic_bool swish_fails;

static kiln_status swish_shape(int n, const kiln_custom_meta *in, kiln_custom_meta *out, void *user) {
    (void)n, (void)user;
    if (in[0].dtype != KILN_F32) return kiln_custom_op_error("f32 only");
    *out = in[0];
    return KILN_OK;
}

static kiln_status swish_cpu(int n, const kiln_custom_operand *in, const kiln_custom_operand *out, int threads, void *user) {
    (void)n, (void)threads;
    atomic_fetch_add(&swish_runs, 1);
    if (atomic_load(&swish_fails)) return kiln_custom_op_error("swish kernel failed on purpose");
    double scale = user ? *(const double *)user : 1.0;
    int64_t numel = 1;
    for (int d = 0; d < out->ndim; d++) numel *= out->shape[d];
    int64_t d_last = out->ndim ? out->shape[out->ndim - 1] : 1;
    const float *x = in[0].data;
    float *y = out->data;
    for (int64_t i = 0; i < numel; i++) { /* x is dense here or a row-broadcast is not used */
        int64_t off = out->ndim >= 2 ? (i / d_last) * in[0].strides[0] + (i % d_last) * in[0].strides[1]
                                     : i * (out->ndim ? in[0].strides[0] : 0);
        float v = x[off];
        y[i] = (float)(scale * v / (1.0 + exp(-(double)v)));
    }
    return KILN_OK;
}

/* Refuses rows longer than 64: the composition runs instead. */
static bool swish_supports(int n, const kiln_custom_meta *in, void *user) {
    (void)n, (void)user;
    return in[0].ndim == 2 && in[0].shape[1] <= 64;
}

static kiln_custom_op *swish_op(void) {
    static kiln_custom_op *op;
    if (op) return op;
    static const kiln_pattern_node pattern[] = {
        {KILN_PATTERN_SIGMOID, {KILN_PATTERN_INPUT(0)}, 0},
        {KILN_PATTERN_MUL, {KILN_PATTERN_INPUT(0), 0}, 0},
    };
    kiln_custom_op_def def = {.name = "user_swish", .n_inputs = 1, .shape = swish_shape, .cpu_kernel = swish_cpu,
                              .pattern = pattern, .pattern_len = 2, .supports = swish_supports};
    KT_CHECK(kiln_custom_op_register(&def, &op) == KILN_OK);
    return op;
}

static kiln_tensor composed_swish(kiln_tensor x) {
    kiln_tensor s = kiln_sigmoid(kiln_ref(x));
    return kiln_mul(s, x); /* (either order: mul commutes) */
}

KT_TEST(user_pattern_runs_the_users_kernel) {
    kt_mem_begin();
    swish_op();
    for (int wide = 0; wide <= 1; wide++) {
        kiln__subst_stats_reset();
        int runs = atomic_load(&swish_runs);
        int64_t cols = wide ? 80 : 40;
        kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(8, cols), 13);
        float xv[8 * 80], got[8 * 80];
        KT_CHECK(kiln_into_data(kiln_ref(x), xv, (size_t)(8 * cols) * sizeof(float)) == KILN_OK);
        kiln_profiler_start();
        read_f32(composed_swish(x), got, (size_t)(8 * cols));
        kiln_profiler_stop();
        for (int i = 0; i < 8 * cols; i++) KT_NEAR(got[i], xv[i] / (1.0 + exp(-(double)xv[i])), 1e-5);
        int64_t want = wide ? 0 : expect_one(); /* 80 columns: supports says no */
        KT_CHECK(substituted() == want);
        KT_CHECK(atomic_load(&swish_runs) - runs == want);
        KT_CHECK(profiled("user_swish") == (want == 1));
        KT_CHECK(kiln__subst_stats_get().refused_shape == (wide ? expect_one() : 0));
    }
    KT_MEM_CHECK();
}

/* The user's kernel fails inside a replacement: the result is poisoned naming the op, at the
 * line of the composition's last op (the one whose result the caller holds). */
KT_TEST(failing_replacement_names_the_op_and_the_line) {
    if (!kiln_engine_is_async()) return; /* (nothing is replaced with KILN_SYNC=1) */
    kt_mem_begin();
    swish_op();
    atomic_store(&swish_fails, true);
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(4, 8), 14);
    kiln_tensor s = kiln_sigmoid(kiln_ref(x));
    kiln_tensor y = kiln_mul(s, x);
    int line = __LINE__ - 1;
    float v[32];
    KT_CHECK(kiln_into_data(y, v, sizeof v) != KILN_OK);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "user_swish", line);
    KT_CHECK(strstr(kiln_last_error(), "on purpose") != NULL);
    atomic_store(&swish_fails, false);
    kiln_sync();
    KT_MEM_CHECK();
}

/* A constant in the pattern matches only that value: tanh(x) * 2 is replaced, tanh(x) * 3 not. */
static kiln_status twice_tanh_cpu(int n, const kiln_custom_operand *in, const kiln_custom_operand *out, int threads,
                                  void *user) {
    (void)n, (void)threads, (void)user;
    int64_t numel = out->shape[0];
    for (int64_t i = 0; i < numel; i++) ((float *)out->data)[i] = 2.0f * tanhf(((const float *)in[0].data)[i * in[0].strides[0]]);
    return KILN_OK;
}

KT_TEST(pattern_constants_must_match) {
    kt_mem_begin();
    static const kiln_pattern_node pattern[] = {
        {KILN_PATTERN_TANH, {KILN_PATTERN_INPUT(0)}, 0},
        {KILN_PATTERN_MUL, {0, KILN_PATTERN_CONSTANT}, 2.0},
    };
    /* in_place: tanh and the product each write over their only input, so the composition's
     * result is x's memory; without it the op could not replace them */
    kiln_custom_op_def def = {.name = "twice_tanh", .n_inputs = 1, .shape = swish_shape, .cpu_kernel = twice_tanh_cpu,
                              .pattern = pattern, .pattern_len = 2, .in_place = true};
    kiln_custom_op *op;
    KT_CHECK(kiln_custom_op_register(&def, &op) == KILN_OK);
    for (int k = 2; k <= 3; k++) {
        kiln__subst_stats_reset();
        float x[16], got[16];
        for (int i = 0; i < 16; i++) x[i] = (float)(i - 8) / 5.0f;
        kiln_tensor y = kiln_mul_scalar(kiln_tanh(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(16), x)), k);
        read_f32(y, got, 16);
        for (int i = 0; i < 16; i++) KT_NEAR(got[i], k * tanh(x[i]), 1e-5);
        KT_CHECK(substituted() == (k == 2 ? expect_one() : 0));
    }
    KT_MEM_CHECK();
}

/* ---- bad patterns ------------------------------------------------------------------------- */

static void expect_refused(const kiln_pattern_node *nodes, int len, int n_inputs, const char *what) {
    kiln_custom_op_def def = {.name = "bad_pattern_op", .n_inputs = n_inputs, .shape = swish_shape,
                              .cpu_kernel = swish_cpu, .pattern = nodes, .pattern_len = len};
    kiln_custom_op *op = (kiln_custom_op *)1;
    KT_CHECK(kiln_custom_op_register(&def, &op) == KILN_ERR_INVALID_ARGUMENT);
    KT_CHECK(op == NULL);
    KT_CHECK_MSG(strstr(kiln_last_error(), what) != NULL, "'%s' lacks '%s'", kiln_last_error(), what);
    KT_CHECK(strstr(kiln_last_error(), "bad_pattern_op") != NULL);
    KT_CHECK(kiln_custom_op_find("bad_pattern_op") == NULL); /* not registered half-way */
}

KT_TEST(bad_patterns_are_refused) {
    const int IN0 = KILN_PATTERN_INPUT(0), IN1 = KILN_PATTERN_INPUT(1);
    expect_refused((kiln_pattern_node[]){{KILN_PATTERN_MUL, {1, IN0}, 0}, {KILN_PATTERN_EXP, {IN0}, 0}}, 2, 1,
                   "not an earlier one");
    expect_refused((kiln_pattern_node[]){{KILN_PATTERN_EXP, {IN1}, 0}}, 1, 1, "past the pattern's inputs");
    expect_refused((kiln_pattern_node[]){{KILN_PATTERN_EXP, {IN0}, 0}}, 1, 2, "input 1 is read by no node");
    expect_refused((kiln_pattern_node[]){{KILN_PATTERN_EXP, {IN0}, 0}, {KILN_PATTERN_LOG, {IN0}, 0}}, 2, 1,
                   "node 0 is read by no later node");
    expect_refused((kiln_pattern_node[]){{(kiln_pattern_op)99, {IN0}, 0}}, 1, 1, "unknown op 99");
    expect_refused((kiln_pattern_node[]){{KILN_PATTERN_MUL, {KILN_PATTERN_CONSTANT, IN0}, 2}}, 1, 1,
                   "KILN_PATTERN_CONSTANT");
    expect_refused((kiln_pattern_node[]){{KILN_PATTERN_EXP, {IN0}, 0}}, 0, 1, "0 nodes");
    expect_refused((kiln_pattern_node[]){{KILN_PATTERN_EXP, {IN0}, 0}}, KILN_PATTERN_MAX_NODES + 1, 1, "13 nodes");
    kiln_custom_op_def def = {.name = "bad_pattern_op", .n_inputs = 1, .shape = swish_shape, .cpu_kernel = swish_cpu,
                              .pattern_len = 2};
    kiln_custom_op *op;
    KT_CHECK(kiln_custom_op_register(&def, &op) == KILN_ERR_INVALID_ARGUMENT);
    KT_CHECK(strstr(kiln_last_error(), "no pattern") != NULL);
}

/* The off switch, and other threads' ops on a held storage (which flush the hold first). */
KT_TEST(switched_off_nothing_is_replaced) {
    kt_mem_begin();
    kiln__subst_set_enabled(false);
    kiln__subst_stats_reset();
    float v[ROWS * D];
    read_f32(composed_layer_norm(randn(ROWS, D, 15), KILN_NONE, KILN_NONE, 1e-5), v, ROWS * D);
    KT_CHECK(substituted() == 0);
    kiln__subst_set_enabled(true);
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(composed_layer_norm_runs_fused);
    KT_RUN(kiln_layer_norm_runs_fused);
    KT_RUN(held_intermediate_is_not_replaced);
    KT_RUN(queued_reader_of_an_intermediate_blocks);
    KT_RUN(partial_or_different_pattern_is_not_replaced);
    KT_RUN(recorded_composition_is_not_replaced);
    KT_RUN(in_a_row_and_in_place);
    KT_RUN(strided_input_runs_fused);
    KT_RUN(another_threads_read_lets_go_of_the_hold);
    KT_RUN(composed_attention_runs_fused);
    KT_RUN(user_pattern_runs_the_users_kernel);
    KT_RUN(failing_replacement_names_the_op_and_the_line);
    KT_RUN(pattern_constants_must_match);
    KT_RUN(bad_patterns_are_refused);
    KT_RUN(switched_off_nothing_is_replaced);
    return kt_finish();
}
