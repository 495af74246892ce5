/* Matmul epilogues (ir/expr.h, backend/cpu/fused_matmul.c): a matrix product followed by its
 * bias, an activation and an elementwise chain runs as one fused group, the GEMM a panel of
 * rows at a time and the chain over each panel right after it. Fused results equal the
 * KILN_FUSION=0 ones bit for bit (each panel's GEMM computes every element as the whole GEMM
 * does) and a double-precision reference within f32 rounding; a product the user kept is
 * written with its value; gradients through the group pass a finite-difference check; a
 * poisoned input or a failing product names the original op and line. */
#include <math.h>

#include <kiln.h>

#include "engine/fusion.h"
#include "gradcheck.h"
#include "kiln_test.h"

static uint64_t lcg_state;

static float next_value(void) {
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(lcg_state >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static float *random_floats(int64_t n, uint64_t seed) {
    float *v = malloc(sizeof *v * (size_t)(n + 1));
    lcg_state = seed;
    for (int64_t i = 0; i < n; i++) v[i] = next_value();
    return v;
}

typedef enum { ACT_RELU, ACT_GELU, ACT_SIGMOID, ACT_TANH } act_kind;

static kiln_tensor activate(kiln_tensor t, act_kind a) {
    switch (a) {
    case ACT_RELU: return kiln_relu(t);
    case ACT_GELU: return kiln_gelu(t);
    case ACT_SIGMOID: return kiln_sigmoid(t);
    default: return kiln_tanh(t);
    }
}

static double activate_ref(double v, act_kind a) {
    switch (a) {
    case ACT_RELU: return v > 0 ? v : 0;
    case ACT_GELU: return 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
    case ACT_SIGMOID: return 1.0 / (1.0 + exp(-v));
    default: return tanh(v);
    }
}

/* One case: y = act(x @ w^T + b) * 0.5 + r (r broadcast [n] when row_add), x [m,k] (or k x m
 * transposed when trans_x), w [n,k]. Writes y and, when keep, the pre-activation product. */
typedef struct {
    int64_t m, k, n;
    act_kind act;
    bool trans_x, keep, row_add;
} mm_case;

static void run_case(const mm_case *c, const float *x, const float *w, const float *b, const float *r, float *y,
                     float *pre) {
    kiln_tensor tx = c->trans_x ? kiln_transpose(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(c->k, c->m), x), 0, 1)
                                : kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(c->m, c->k), x);
    kiln_tensor tw = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(c->n, c->k), w);
    kiln_tensor tb = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(c->n), b);
    kiln_tensor tr = c->row_add ? kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(c->n), r)
                                : kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(c->m, c->n), r);
    KT_CHECK(kiln_sync() == KILN_OK); /* inputs made: what follows is one group */
    kiln_tensor p = kiln_linear(tx, tw, tb);
    kiln_tensor kept = c->keep ? kiln_ref(p) : (kiln_tensor){0};
    kiln_tensor t = kiln_add(kiln_mul_scalar(activate(p, c->act), 0.5), tr);
    size_t bytes = sizeof(float) * (size_t)(c->m * c->n);
    KT_CHECK(kiln_into_data(t, y, bytes) == KILN_OK);
    if (c->keep) KT_CHECK(kiln_into_data(kept, pre, bytes) == KILN_OK);
}

static void check_case(const mm_case *c) {
    int64_t mk = c->m * c->k, mn = c->m * c->n;
    float *x = random_floats(mk, 1), *w = random_floats(c->n * c->k, 2), *b = random_floats(c->n, 3);
    float *r = random_floats(c->row_add ? c->n : mn, 4);
    float *on = calloc((size_t)mn, 4), *off = calloc((size_t)mn, 4), *pre_on = calloc((size_t)mn, 4),
          *pre_off = calloc((size_t)mn, 4);
    bool was = kiln_fusion_enabled();
    kiln_fusion_set_enabled(false);
    run_case(c, x, w, b, r, off, pre_off);
    kiln_fusion_set_enabled(true);
    kiln__fusion_stats_reset();
    run_case(c, x, w, b, r, on, pre_on);
    kiln__fusion_stats s = kiln__fusion_stats_get();
    kiln_fusion_set_enabled(was);
    if (kiln_engine_is_async() && was)
        KT_CHECK_MSG(s.groups == 1 && s.ops_fused == (c->k ? 4 : 3), "m %lld k %lld n %lld: groups %lld ops %lld",
                     (long long)c->m, (long long)c->k, (long long)c->n, (long long)s.groups, (long long)s.ops_fused);
    KT_CHECK_MSG(memcmp(on, off, sizeof(float) * (size_t)mn) == 0, "m %lld k %lld n %lld: fused != unfused",
                 (long long)c->m, (long long)c->k, (long long)c->n);
    if (c->keep) KT_CHECK(memcmp(pre_on, pre_off, sizeof(float) * (size_t)mn) == 0);
    double worst = 0, worst_pre = 0;
    for (int64_t i = 0; i < c->m; i++) {
        for (int64_t j = 0; j < c->n; j++) {
            double acc = b[j], mag = fabs(b[j]);
            for (int64_t q = 0; q < c->k; q++) {
                double xv = c->trans_x ? x[q * c->m + i] : x[i * c->k + q];
                acc += xv * w[j * c->k + q];
                mag += fabs(xv * w[j * c->k + q]);
            }
            double want = activate_ref(acc, c->act) * 0.5 + r[c->row_add ? j : i * c->n + j];
            double err = fabs(on[i * c->n + j] - want) / (mag + 1.0);
            if (err > worst) worst = err;
            if (c->keep && fabs(pre_on[i * c->n + j] - acc) / (mag + 1.0) > worst_pre)
                worst_pre = fabs(pre_on[i * c->n + j] - acc) / (mag + 1.0);
        }
    }
    KT_CHECK_MSG(worst < 1e-5 && worst_pre < 1e-5, "m %lld: error %g (kept product %g) against double",
                 (long long)c->m, worst, worst_pre);
    free(x), free(w), free(b), free(r), free(on), free(off), free(pre_on), free(pre_off);
}

KT_TEST(linear_activation_chain_is_bit_identical) {
    const mm_case cases[] = {
        {.m = 37, .k = 19, .n = 45, .act = ACT_RELU, .row_add = true},
        {.m = 37, .k = 19, .n = 45, .act = ACT_GELU},
        {.m = 1, .k = 64, .n = 300, .act = ACT_SIGMOID, .row_add = true}, /* one row */
        {.m = 50, .k = 7, .n = 33, .act = ACT_TANH, .trans_x = true},     /* x a transposed view */
        {.m = 50, .k = 7, .n = 33, .act = ACT_RELU, .keep = true},        /* the product kept */
        /* more rows than one panel (L2 / 2), panels of a row count whose end splits a block */
        {.m = 2500, .k = 24, .n = 333, .act = ACT_GELU, .row_add = true},
        {.m = 2500, .k = 24, .n = 333, .act = ACT_RELU, .keep = true, .trans_x = true},
        /* panels of 64, 128 or 256 rows of 2048 (L2 of 0.5, 1 or 2 MiB) and 20 rows over: a
         * panel of 32 rows or fewer would take the small-M kernel the whole product does not */
        {.m = 84, .k = 16, .n = 2048, .act = ACT_RELU},
        {.m = 148, .k = 16, .n = 2048, .act = ACT_RELU},
        {.m = 276, .k = 16, .n = 2048, .act = ACT_GELU},
        {.m = 532, .k = 16, .n = 2048, .act = ACT_RELU, .row_add = true},
        /* a longer k over several panels: a BLAS whose sums depend on the rows of its call (oneDNN's
         * sgemm does) must still see the unfused call */
        {.m = 600, .k = 784, .n = 1024, .act = ACT_RELU},
        {.m = 300, .k = 256, .n = 4096, .act = ACT_GELU, .row_add = true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i]);
}

/* Random shapes, activations and layouts, the same checks (one seed: reproducible). */
KT_TEST(random_cases) {
    uint64_t saved = lcg_state;
    lcg_state = 77;
    mm_case cases[24];
    for (int i = 0; i < 24; i++) {
        double u[6];
        for (int j = 0; j < 6; j++) u[j] = (next_value() + 1) / 2;
        cases[i] = (mm_case){.m = 1 + (int64_t)(u[0] * 400), .k = (int64_t)(u[1] * 40), .n = 1 + (int64_t)(u[2] * 300),
                             .act = (act_kind)(int)(u[3] * 4), .trans_x = u[4] < 0.4, .keep = u[5] < 0.3,
                             .row_add = u[5] > 0.5};
    }
    cases[0].k = 0; /* an empty inner dim: the product is the bias (run unfused) */
    lcg_state = saved;
    for (int i = 0; i < 24; i++) check_case(&cases[i]);
}

/* matmul (no bias op inside) then a bias added as a broadcast [n] row, in f64. */
KT_TEST(matmul_then_bias_add_f64) {
    double a[6] = {1, 2, 3, 4, 5, 6}, bm[6] = {1, -1, 0.5, 2, -2, 0.25}, bias[2] = {0.5, -10}, on[6], off[6];
    for (int pass = 0; pass < 2; pass++) {
        bool was = kiln_fusion_enabled();
        kiln_fusion_set_enabled(pass == 1);
        kiln_tensor p = kiln_matmul(kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(3, 2), a),
                                    kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(2, 3), bm));
        p = kiln_transpose(p, 0, 1); /* [3,3] transposed: its own group (a view) */
        kiln_tensor q = kiln_matmul(kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(3, 2), a),
                                    kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(2, 2), bm));
        q = kiln_relu(kiln_add(q, kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(2), bias)));
        KT_CHECK(kiln_into_data(q, pass ? on : off, sizeof on) == KILN_OK);
        kiln_release(p);
        kiln_fusion_set_enabled(was);
    }
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) {
            double v = a[i * 2] * bm[j] + a[i * 2 + 1] * bm[2 + j] + bias[j];
            KT_CHECK(on[i * 2 + j] == (v > 0 ? v : 0) && off[i * 2 + j] == on[i * 2 + j]);
        }
}

/* Gradients through a fused product and its epilogue: central differences (gradcheck.h, the
 * forward fused), and the same bits as with fusion off. */
static kiln_tensor linear_gelu_chain(kiln_tensor *in, void *ctx) {
    (void)ctx;
    return kiln_add_scalar(kiln_mul_scalar(kiln_gelu(kiln_linear(in[0], in[1], in[2])), 1.5), 0.25);
}

static kiln_tensor matmul_tanh(kiln_tensor *in, void *ctx) {
    (void)ctx;
    return kiln_tanh(kiln_matmul(kiln_transpose(in[0], 0, 1), in[1])); /* a transposed left operand */
}

static void grads_of_linear(bool fused, double *out) {
    bool was = kiln_fusion_enabled();
    kiln_fusion_set_enabled(fused);
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(70, 9), 21);
    kiln_tensor w = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(6, 9), 22);
    kiln_tensor b = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(6), 23);
    KT_CHECK(kiln_require_grad(x) == KILN_OK && kiln_require_grad(w) == KILN_OK && kiln_require_grad(b) == KILN_OK);
    kiln_tensor y = kiln_relu(kiln_linear(kiln_ref(x), kiln_ref(w), kiln_ref(b)));
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_sum(kiln_mul(kiln_ref(y), y)), &g) == KILN_OK);
    float v[70 * 9 + 6 * 9 + 6];
    KT_CHECK(kiln_into_data(kiln_grad(g, x), v, sizeof(float) * 70 * 9) == KILN_OK);
    KT_CHECK(kiln_into_data(kiln_grad(g, w), v + 70 * 9, sizeof(float) * 6 * 9) == KILN_OK);
    KT_CHECK(kiln_into_data(kiln_grad(g, b), v + 70 * 9 + 6 * 9, sizeof(float) * 6) == KILN_OK);
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) out[i] = v[i];
    kiln_grads_free(g);
    kiln_release(x), kiln_release(w), kiln_release(b);
    kiln_fusion_set_enabled(was);
}

KT_TEST(gradient_through_the_group) {
    GC_CHECK("linear_gelu_chain", linear_gelu_chain, NULL, 3, ((kiln_shape[]){KILN_SHAPE(5, 4), KILN_SHAPE(3, 4), KILN_SHAPE(3)}), 1e-6);
    GC_CHECK("matmul_tanh", matmul_tanh, NULL, 2, ((kiln_shape[]){KILN_SHAPE(4, 5), KILN_SHAPE(4, 3)}), 1e-6);
    static double on[70 * 9 + 6 * 9 + 6], off[70 * 9 + 6 * 9 + 6];
    grads_of_linear(true, on);
    grads_of_linear(false, off);
    KT_CHECK(memcmp(on, off, sizeof on) == 0);
}

/* x = exp(ones) poisoned (fail_exp) or the product itself failing: reading the epilogue's
 * result reports the op that failed, at its line. */
static void expect_failure_named(const char *op, bool fail_exp) {
    kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(8, 16));
    kiln_tensor w = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(4, 16));
    KT_CHECK(kiln_sync() == KILN_OK);
    kiln__debug_fail_next_kernel(op);
    int line = __LINE__ + 1;
    if (fail_exp) x = kiln_exp(x);
    int line_linear = __LINE__ + 1;
    kiln_tensor y = kiln_linear(x, w, kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4)));
    y = kiln_mul_scalar(kiln_relu(y), 2);
    float v[32];
    KT_CHECK(kiln_into_data(y, v, sizeof v) == KILN_ERR_KERNEL);
    KT_EXPECT_ERROR(KILN_ERR_KERNEL, op, fail_exp ? line : line_linear);
    KT_CHECK(kiln_sync() == KILN_OK);
}

KT_TEST(poisoned_input_names_the_original_op) { expect_failure_named("kiln_exp", true); }

KT_TEST(failing_product_names_its_line) { expect_failure_named("kiln_linear", false); }

/* True when the profiler recorded an event of the FUSED kernel named `want`. */
static bool fused_event_named(const char *want) {
    size_t n = kiln_profiler_events(NULL, 0), found = 0;
    kiln_profile_event *ev = calloc(n ? n : 1, sizeof *ev);
    n = kiln_profiler_events(ev, n);
    while (found < n && !(strcmp(ev[found].op, want) == 0 && strcmp(ev[found].kernel, "FUSED") == 0)) found++;
    free(ev);
    return found < n;
}

KT_TEST(profiler_names_the_product_and_its_epilogue) {
    if (!kiln_engine_is_async() || !kiln_fusion_enabled()) return;
    kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(16, 8)), w = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(8, 8));
    KT_CHECK(kiln_sync() == KILN_OK);
    kiln_profiler_start();
    int line = __LINE__ + 1;
    kiln_release(kiln_relu(kiln_matmul(x, w)));
    KT_CHECK(kiln_sync() == KILN_OK);
    kiln_profiler_stop();
    char want[128];
    snprintf(want, sizeof want, "fused[kiln_matmul@test_fusion_matmul.c:%d kiln_relu@test_fusion_matmul.c:%d]", line,
             line);
    KT_CHECK_MSG(fused_event_named(want), "no event named %s", want);
}

int main(void) {
    kt_mem_begin();
    kiln__fusion_set_matmul_min_bytes(0); /* small products too (the size rule: test_fusion_matmul_size.c) */
    KT_RUN(linear_activation_chain_is_bit_identical);
    KT_RUN(random_cases);
    KT_RUN(matmul_then_bias_add_f64);
    KT_RUN(gradient_through_the_group);
    KT_RUN(poisoned_input_names_the_original_op);
    KT_RUN(failing_product_names_its_line);
    KT_RUN(profiler_names_the_product_and_its_epilogue);
    KT_MEM_CHECK();
    return kt_finish();
}
