/* The automatic policy recomputing reductions (KILN_CHECKPOINT=auto, src/autodiff/recompute.c):
 * a normalisation composed of mean, x - mean, variance and rsqrt over a GELU of a product, and
 * layer norm's affine output, are made again in backward instead of kept. Gradients equal the
 * plain graph's (bit for bit under KILN_SYNC=1 or KILN_FUSION=0, to 1e-6 relative in f32 and
 * 1e-12 in f64 with fusion); the forward pass keeps fewer bytes (kiln_memory_stats_get); a chain
 * through dropout replays its mask; a short reduction is made again and a long one kept (the cost
 * bound); an out-of-memory
 * failure inside a recomputation names the forward line that made the tensor; no leaks. */
#include <kiln.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_test.h"
#include "ew_util.h"

#define B 64
#define D 256

static bool exact_mode(void) {
    const char *s = getenv("KILN_SYNC"), *f = getenv("KILN_FUSION");
    return (s && strcmp(s, "1") == 0) || (f && strcmp(f, "0") == 0);
}

static void expect_close(const double *a, const double *ref, int n, double rel, const char *what) {
    int bad = 0;
    for (int i = 0; i < n; i++) {
        double tol = exact_mode() ? 0 : rel * (fabs(ref[i]) + 1e-3);
        if (!(fabs(a[i] - ref[i]) <= tol) && bad++ < 3)
            KT_CHECK_MSG(false, "%s[%d]: %.17g against %.17g", what, i, a[i], ref[i]);
    }
}

static int chain_first, chain_last; /* the lines of norm_chain's ops */

/* A normalisation composed of ops over gelu(h): mean, centre, variance, rsqrt, scale. Consumes h.
 * With p > 0, dropout after the GELU. */
static kiln_tensor norm_chain(kiln_tensor h, double p) {
    chain_first = __LINE__ + 1;
    kiln_tensor a = kiln_gelu(h);
    if (p > 0) a = kiln_dropout(a, p, 77);
    kiln_tensor mu = kiln_mean_dims(kiln_ref(a), KILN_DIMS(-1), true);
    kiln_tensor ac = kiln_sub(a, mu);
    kiln_tensor var = kiln_mean_dims(kiln_mul(kiln_ref(ac), kiln_ref(ac)), KILN_DIMS(-1), true);
    kiln_tensor r = kiln_rsqrt(kiln_add_scalar(var, 1e-5));
    kiln_tensor y = kiln_mul(ac, r);
    chain_last = __LINE__ - 1;
    return y;
}

typedef struct {
    kiln_tensor x, w1, w2;
} params;

static params params_new(kiln_dtype dt) {
    params ps = {kiln_leaf(kiln_randn(KILN_CPU, dt, KILN_SHAPE(B, D), 1)),
                 kiln_leaf(kiln_mul_scalar(kiln_randn(KILN_CPU, dt, KILN_SHAPE(D, D), 2), 1.0 / 16)),
                 kiln_leaf(kiln_mul_scalar(kiln_randn(KILN_CPU, dt, KILN_SHAPE(D, D), 3), 1.0 / 16))};
    return ps;
}

static void params_free(params *ps) { kiln_release(ps->x), kiln_release(ps->w1), kiln_release(ps->w2); }

/* tanh(norm_chain(x w1) w2), summed */
static kiln_tensor forward(const params *ps, double p) {
    kiln_tensor y = norm_chain(kiln_matmul(kiln_ref(ps->x), kiln_ref(ps->w1)), p);
    return kiln_sum(kiln_tanh(kiln_matmul(y, kiln_ref(ps->w2))));
}

/* Under policy: the bytes the forward pass keeps and the gradients of x, w1, w2 as doubles. */
static uint64_t run(kiln_checkpoint_policy policy, kiln_dtype dt, double p, double *grads) {
    kiln_checkpoint_policy before = kiln_checkpoint_policy_set(policy);
    params ps = params_new(dt);
    KT_CHECK(kiln_sync() == KILN_OK);
    uint64_t base = kiln_memory_stats_get(KILN_CPU).bytes_in_use;
    kiln_tensor loss = forward(&ps, p);
    KT_CHECK(kiln_sync() == KILN_OK);
    uint64_t kept = kiln_memory_stats_get(KILN_CPU).bytes_in_use - base;
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(loss, &g) == KILN_OK);
    kiln_tensor leaves[3] = {ps.x, ps.w1, ps.w2};
    int64_t at = 0;
    for (int i = 0; i < 3 && g; i++) {
        kiln_tensor d = kiln_cast(kiln_grad(g, leaves[i]), KILN_F64);
        int64_t n = kiln_tensor_numel(d);
        KT_CHECK(kiln_into_data(d, grads + at, sizeof(double) * (size_t)n) == KILN_OK);
        at += n;
    }
    kiln_grads_free(g);
    params_free(&ps);
    kiln_checkpoint_policy_set(before);
    return kept;
}

#define NG (B * D + 2 * D * D)

KT_TEST(reductions_recomputed_gradients_match) {
    ew_mark mark = ew_mark_now();
    static double plain[NG], autop[NG];
    const uint64_t full = B * D * sizeof(float);
    uint64_t kept_plain = run(KILN_CHECKPOINT_NONE, KILN_F32, 0, plain);
    uint64_t kept_auto = run(KILN_CHECKPOINT_AUTO, KILN_F32, 0, autop);
    printf("  f32 chain: the forward keeps %.0f KiB plain, %.0f KiB under the policy (one tensor %.0f KiB)\n",
           kept_plain / 1024.0, kept_auto / 1024.0, full / 1024.0);
    /* plain keeps h (GELU's input), x - mean (the products'), the normalised y (the product's)
     * and tanh's output; the policy keeps h and tanh's output, and makes the other two again */
    KT_CHECK_MSG(kept_plain >= kept_auto + 2 * full, "plain %llu, auto %llu", (unsigned long long)kept_plain,
                 (unsigned long long)kept_auto);
    expect_close(autop, plain, NG, 1e-6, "f32 gradient");
    kept_plain = run(KILN_CHECKPOINT_NONE, KILN_F64, 0, plain);
    kept_auto = run(KILN_CHECKPOINT_AUTO, KILN_F64, 0, autop);
    KT_CHECK(kept_plain >= kept_auto + 4 * full);
    expect_close(autop, plain, NG, 1e-12, "f64 gradient");
    EW_NO_LEAKS(mark);
}

/* dropout inside the chain: its output is made again from the mask the product saved, so the
 * recomputed values are those of the forward pass (gradients equal the plain run's) */
KT_TEST(dropout_in_chain_replays_its_mask) {
    ew_mark mark = ew_mark_now();
    static double plain[NG], autop[NG];
    uint64_t kept_plain = run(KILN_CHECKPOINT_NONE, KILN_F64, 0.3, plain);
    uint64_t kept_auto = run(KILN_CHECKPOINT_AUTO, KILN_F64, 0.3, autop);
    KT_CHECK(kept_auto < kept_plain);
    expect_close(autop, plain, NG, 1e-12, "gradient with dropout");
    EW_NO_LEAKS(mark);
}

/* Layer norm's affine output, which the next Linear saves, is made again from x̂, w and b. */
static uint64_t layer_norm_run(kiln_checkpoint_policy policy, float *grads, int n) {
    kiln_checkpoint_policy before = kiln_checkpoint_policy_set(policy);
    kiln_module *parts[3] = {kiln_linear_new(D, D, true, 5), kiln_layer_norm_new(D, 1e-5, true),
                             kiln_linear_new(D, D, true, 6)};
    kiln_module *m = kiln_sequential_new(3, parts);
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(B, D), 4);
    KT_CHECK(kiln_sync() == KILN_OK);
    uint64_t base = kiln_memory_stats_get(KILN_CPU).bytes_in_use;
    kiln_tensor loss = kiln_sum(kiln_tanh(kiln_module_forward(m, x)));
    KT_CHECK(kiln_sync() == KILN_OK);
    uint64_t kept = kiln_memory_stats_get(KILN_CPU).bytes_in_use - base;
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(loss, &g) == KILN_OK);
    kiln_param ps[8];
    int np = kiln_module_params(m, ps, 8), at = 0;
    for (int i = 0; i < np && g; i++) {
        kiln_tensor d = kiln_grad(g, *ps[i].slot);
        int64_t k = kiln_tensor_numel(d);
        KT_CHECK(at + k <= n);
        KT_CHECK(at + k <= n && kiln_into_data(d, grads + at, sizeof(float) * (size_t)k) == KILN_OK);
        at += (int)k;
    }
    KT_CHECK(at == n);
    kiln_grads_free(g);
    kiln_module_free(m);
    kiln_checkpoint_policy_set(before);
    return kept;
}

#define NLN (2 * (D * D + D) + 2 * D)

KT_TEST(layer_norm_output_recomputed) {
    ew_mark mark = ew_mark_now();
    static float plain[NLN], autop[NLN];
    uint64_t kept_plain = layer_norm_run(KILN_CHECKPOINT_NONE, plain, NLN);
    uint64_t kept_auto = layer_norm_run(KILN_CHECKPOINT_AUTO, autop, NLN);
    KT_CHECK_MSG(kept_plain >= kept_auto + B * D * sizeof(float), "plain %llu, auto %llu",
                 (unsigned long long)kept_plain, (unsigned long long)kept_auto);
    for (int i = 0; i < NLN; i++)
        KT_CHECK_MSG(exact_mode() ? plain[i] == autop[i] : fabs(plain[i] - autop[i]) <= 1e-6 * (fabs(plain[i]) + 1e-3),
                     "[%d] %.9g against %.9g", i, autop[i], plain[i]);
    EW_NO_LEAKS(mark);
}

/* The cost bound, from the op records: loss = sum(e / sum(e) * w), e = exp(x * w) over rows of
 * `cols` values. The division saved the row sums; remaking one costs `cols` operations (exp saved
 * e), so with 16 columns the sums are dropped and made again, and with 4096 they are kept (a
 * value that costs 4096 operations is worth its 4 bytes). Returns the bytes the forward keeps
 * under the policy less those of the plain graph. */
static int64_t policy_saves(int64_t rows, int64_t cols) {
    uint64_t kept[2];
    for (int k = 0; k < 2; k++) {
        kiln_checkpoint_policy before = kiln_checkpoint_policy_set(k ? KILN_CHECKPOINT_AUTO : KILN_CHECKPOINT_NONE);
        kiln_tensor x = kiln_leaf(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(rows, cols), 1));
        kiln_tensor w = kiln_leaf(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(rows, cols), 2));
        KT_CHECK(kiln_sync() == KILN_OK);
        uint64_t base = kiln_memory_stats_get(KILN_CPU).bytes_in_use;
        kiln_tensor e = kiln_exp(kiln_mul(kiln_ref(x), kiln_ref(w)));
        kiln_tensor s = kiln_sum_dims(kiln_ref(e), KILN_DIMS(-1), true);
        kiln_tensor loss = kiln_sum(kiln_mul(kiln_div(e, s), kiln_ref(w)));
        KT_CHECK(kiln_sync() == KILN_OK);
        kept[k] = kiln_memory_stats_get(KILN_CPU).bytes_in_use - base;
        kiln_grads *g = NULL;
        KT_CHECK(kiln_backward(loss, &g) == KILN_OK);
        kiln_grads_free(g);
        kiln_release(x), kiln_release(w);
        kiln_checkpoint_policy_set(before);
    }
    return (int64_t)kept[0] - (int64_t)kept[1];
}

KT_TEST(short_reduction_recomputed_long_one_kept) {
    ew_mark mark = ew_mark_now();
    int64_t short_rows = policy_saves(4096, 16), long_rows = policy_saves(16, 4096);
    KT_CHECK_MSG(short_rows == 4096 * (int64_t)sizeof(float), "16 columns: %lld bytes fewer", (long long)short_rows);
    KT_CHECK_MSG(long_rows == 0, "4096 columns: %lld bytes fewer", (long long)long_rows);
    EW_NO_LEAKS(mark);
}

/* Out of memory at every allocation of the backward pass in turn: a status, never a crash; the
 * failures inside a recomputation name the line of the forward op that made the tensor, and the
 * recomputation. */
KT_TEST(error_in_recomputation_names_the_forward_line) {
    ew_mark mark = ew_mark_now();
    kiln_checkpoint_policy before = kiln_checkpoint_policy_set(KILN_CHECKPOINT_AUTO);
    params ps = params_new(KILN_F32);
    int named = 0, failed = 0;
    for (int n = 1; n <= 120; n++) {
        kiln_tensor loss = forward(&ps, 0);
        KT_CHECK(kiln_sync() == KILN_OK);
        kiln_debug_fail_alloc_after(n);
        kiln_grads *g = NULL;
        kiln_status st = kiln_backward(loss, &g);
        kiln_debug_fail_alloc_after(0);
        kiln_status st2 = kiln_sync();
        KT_CHECK_MSG(st == KILN_OK || st == KILN_ERR_OUT_OF_MEMORY, "allocation %d: %s", n, kiln_last_error());
        KT_CHECK(st2 == KILN_OK || st2 == KILN_ERR_OUT_OF_MEMORY);
        if (st != KILN_OK) {
            failed++;
            const char *msg = kiln_last_error(), *at = strstr(msg, "test_checkpoint_auto.c:");
            int line = at ? atoi(at + strlen("test_checkpoint_auto.c:")) : 0;
            if (line >= chain_first && line <= chain_last) {
                named++;
                KT_CHECK_MSG(strstr(msg, "recomputing") != NULL, "%s", msg);
            }
        }
        kiln_grads_free(g);
    }
    KT_CHECK_MSG(named > 0 && failed > named, "%d failures, %d naming the chain's lines", failed, named);
    params_free(&ps);
    kiln_checkpoint_policy_set(before);
    EW_NO_LEAKS(mark);
}

int main(void) {
    KT_RUN(reductions_recomputed_gradients_match);
    KT_RUN(dropout_in_chain_replays_its_mask);
    KT_RUN(layer_norm_output_recomputed);
    KT_RUN(short_reduction_recomputed_long_one_kept);
    KT_RUN(error_in_recomputation_names_the_forward_line);
    return kt_finish();
}
