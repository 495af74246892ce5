/* Checkpointed regions (kiln_checkpoint, kiln_module_set_checkpoint): gradients equal the plain
 * model's (bit for bit under KILN_SYNC=1 or KILN_FUSION=0, to float tolerance with fusion), for
 * functions and checkpointed modules, through kiln_train_step; dropout masks replayed and the
 * generators left as the plain run leaves them; nested regions; an error in the recomputation
 * reported once at the user's line; bad arguments; a model freed before its checkpointed backward
 * is an error, an optimizer freed then is harmless; the peak memory of a deep model measured
 * through kiln_memory_stats_get, and that tracked attention keeps no attention weights and its
 * backward holds a chunk of them at a time, and that layer norm keeps one tensor of its input's
 * size; no leaks. */
#include <kiln.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_test.h"
#include "ew_util.h"

#define WIDTH 16
#define BATCH 8
#define DEPTH 6

/* bit-identical when every op runs alone; fused groups may round differently */
static bool exact_mode(void) {
    const char *s = getenv("KILN_SYNC"), *f = getenv("KILN_FUSION");
    return (s && strcmp(s, "1") == 0) || (f && strcmp(f, "0") == 0);
}

static void expect_same(const float *a, const float *b, int n) {
    if (exact_mode()) {
        KT_CHECK_MSG(memcmp(a, b, sizeof(float) * (size_t)n) == 0, "gradients differ bitwise (%g vs %g)", a[0], b[0]);
        return;
    }
    for (int i = 0; i < n; i++) KT_NEAR(a[i], b[i], 1e-5 * (1 + fabs(b[i])));
}

/* DEPTH blocks of Linear + GELU (+ Dropout when p > 0), each a sequential child. */
static kiln_module *model_new(bool checkpoint, double p) {
    kiln_module *blocks[DEPTH];
    for (int i = 0; i < DEPTH; i++) {
        kiln_module *parts[3] = {kiln_linear_new(WIDTH, WIDTH, true, 10 + (uint64_t)i), kiln_gelu_new(),
                                 kiln_dropout_new(p, 100 + (uint64_t)i)};
        blocks[i] = kiln_sequential_new(p > 0 ? 3 : 2, parts);
        if (p == 0) kiln_module_free(parts[2]);
        if (checkpoint) KT_CHECK(kiln_module_set_checkpoint(blocks[i], true) == KILN_OK);
    }
    return kiln_sequential_new(DEPTH, blocks);
}

static kiln_tensor input(void) { return kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(BATCH, WIDTH), 3); }

/* Every parameter's gradient, concatenated into out (n floats at most); returns how many. */
static int grads_of(kiln_module *m, kiln_grads *g, float *out, int n) {
    kiln_param ps[64];
    int np = kiln_module_params(m, ps, 64), at = 0;
    for (int i = 0; i < np && i < 64; i++) {
        kiln_tensor d = kiln_grad(g, *ps[i].slot);
        int64_t k = kiln_tensor_numel(d);
        KT_CHECK(at + k <= n);
        if (at + k > n) {
            kiln_release(d);
            break;
        }
        KT_CHECK(kiln_into_data(d, out + at, sizeof(float) * (size_t)k) == KILN_OK);
        at += (int)k;
    }
    return at;
}

#define NGRAD (DEPTH * (WIDTH * WIDTH + WIDTH))

static int model_grads(bool checkpoint, double p, float *out) {
    kiln_module *m = model_new(checkpoint, p);
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_sum(kiln_module_forward(m, input())), &g) == KILN_OK);
    int n = g ? grads_of(m, g, out, NGRAD) : 0;
    kiln_grads_free(g);
    kiln_module_free(m);
    return n;
}

KT_TEST(module_gradients_match_plain) {
    ew_mark mark = ew_mark_now();
    static float plain[NGRAD], ckpt[NGRAD];
    int n0 = model_grads(false, 0, plain), n1 = model_grads(true, 0, ckpt);
    KT_CHECK(n0 == NGRAD && n1 == NGRAD);
    expect_same(ckpt, plain, NGRAD);
    EW_NO_LEAKS(mark);
}

/* The automatic policy: the same gradients (GELU's outputs, which the Linear layers saved, are
 * recomputed from the Linear outputs GELU saved); a policy that is no policy is refused. */
KT_TEST(automatic_policy_gradients_match_plain) {
    ew_mark mark = ew_mark_now();
    static float plain[NGRAD], autop[NGRAD];
    kiln_checkpoint_policy before = kiln_checkpoint_policy_get();
    for (int with_dropout = 0; with_dropout < 2; with_dropout++) {
        kiln_checkpoint_policy_set(KILN_CHECKPOINT_NONE);
        int n0 = model_grads(false, with_dropout ? 0.3 : 0, plain);
        KT_CHECK(kiln_checkpoint_policy_set(KILN_CHECKPOINT_AUTO) == KILN_CHECKPOINT_NONE);
        int n1 = model_grads(false, with_dropout ? 0.3 : 0, autop);
        KT_CHECK(kiln_checkpoint_policy_get() == KILN_CHECKPOINT_AUTO);
        KT_CHECK(n0 == NGRAD && n1 == NGRAD);
        expect_same(autop, plain, NGRAD);
    }
    KT_CHECK(kiln_checkpoint_policy_set((kiln_checkpoint_policy)7) == KILN_CHECKPOINT_AUTO);
    KT_CHECK(kiln_last_status() == KILN_ERR_INVALID_ARGUMENT && kiln_checkpoint_policy_get() == KILN_CHECKPOINT_AUTO);
    kiln_checkpoint_policy_set(before);
    EW_NO_LEAKS(mark);
}

KT_TEST(dropout_replays_its_masks) {
    ew_mark mark = ew_mark_now();
    static float plain[NGRAD], ckpt[NGRAD];
    int n0 = model_grads(false, 0.4, plain), n1 = model_grads(true, 0.4, ckpt);
    KT_CHECK(n0 == NGRAD && n1 == NGRAD);
    expect_same(ckpt, plain, NGRAD);
    EW_NO_LEAKS(mark);
}

/* y = dropout_gen(x * w) with a generator: the gradient and the generator's next draw after the
 * backward pass are the plain run's. */
static kiln_tensor gen_region(void *ctx, int n, kiln_tensor *in) {
    KT_CHECK(n == 2);
    return kiln_dropout_gen(kiln_mul(in[0], in[1]), 0.5, ctx);
}

static void gen_run(bool checkpoint, float *dx, float *next) {
    kiln_generator *gen = kiln_generator_new(42);
    kiln_tensor x = kiln_leaf(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(64), 1));
    kiln_tensor w = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(64), 2);
    kiln_tensor in[2] = {kiln_ref(x), w};
    kiln_tensor y = checkpoint ? kiln_checkpoint(gen_region, gen, 2, in) : gen_region(gen, 2, in);
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_sum(y), &g) == KILN_OK);
    KT_CHECK(kiln_into_data(kiln_grad(g, x), dx, 64 * sizeof(float)) == KILN_OK);
    KT_CHECK(kiln_into_data(kiln_rand_gen(gen, KILN_CPU, KILN_F32, KILN_SHAPE(4)), next, 4 * sizeof(float)) == KILN_OK);
    kiln_grads_free(g);
    kiln_release(x);
    kiln_generator_free(gen);
}

KT_TEST(generator_draws_replay) {
    ew_mark mark = ew_mark_now();
    float dx0[64], dx1[64], next0[4], next1[4];
    gen_run(false, dx0, next0);
    gen_run(true, dx1, next1);
    KT_CHECK(memcmp(dx0, dx1, sizeof dx0) == 0); /* one multiply each: no rounding can differ */
    KT_CHECK(memcmp(next0, next1, sizeof next0) == 0);
    int zeros = 0;
    for (int i = 0; i < 64; i++) zeros += dx0[i] == 0;
    KT_CHECK(zeros > 10 && zeros < 54); /* the mask is real */
    EW_NO_LEAKS(mark);
}

/* Nested regions: an outer region of two inner ones, each a Linear + GELU read through ctx. */
typedef struct {
    kiln_module *lin[2];
} pair;

static kiln_tensor inner(void *ctx, int n, kiln_tensor *in) {
    (void)n;
    return kiln_gelu(kiln_module_forward(ctx, in[0]));
}

static kiln_tensor outer(void *ctx, int n, kiln_tensor *in) {
    (void)n;
    pair *p = ctx;
    kiln_tensor x = kiln_checkpoint(inner, p->lin[0], 1, &in[0]);
    kiln_tensor y = kiln_checkpoint(inner, p->lin[1], 1, &x);
    return kiln_add(y, in[1]); /* a second input, tracked */
}

static void nested_run(int mode, float *out) {
    pair p = {{kiln_linear_new(WIDTH, WIDTH, true, 1), kiln_linear_new(WIDTH, WIDTH, true, 2)}};
    kiln_tensor x = kiln_leaf(input());
    kiln_tensor b = kiln_leaf(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(BATCH, WIDTH), 9));
    kiln_tensor in[2] = {kiln_mul_scalar(kiln_ref(x), 2.0), kiln_ref(b)};
    kiln_tensor y;
    if (mode == 0) {
        kiln_tensor h = kiln_gelu(kiln_module_forward(p.lin[0], in[0]));
        y = kiln_add(kiln_gelu(kiln_module_forward(p.lin[1], h)), in[1]);
    } else {
        y = kiln_checkpoint(outer, &p, 2, in);
    }
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_sum(kiln_mul(y, kiln_ref(y))), &g) == KILN_OK);
    kiln_tensor ts[6] = {x, b};
    kiln_param ps[2];
    for (int i = 0; i < 2; i++) {
        kiln_module_params(p.lin[i], ps, 2);
        ts[2 + 2 * i] = *ps[0].slot, ts[3 + 2 * i] = *ps[1].slot;
    }
    int at = 0;
    for (int i = 0; i < 6; i++) {
        kiln_tensor d = kiln_grad(g, ts[i]);
        int64_t k = kiln_tensor_numel(d);
        KT_CHECK(kiln_into_data(d, out + at, sizeof(float) * (size_t)k) == KILN_OK);
        at += (int)k;
    }
    kiln_grads_free(g);
    kiln_release(x), kiln_release(b);
    kiln_module_free(p.lin[0]), kiln_module_free(p.lin[1]);
}

#define NNEST (2 * BATCH * WIDTH + 2 * (WIDTH * WIDTH + WIDTH))

KT_TEST(nested_regions) {
    ew_mark mark = ew_mark_now();
    static float plain[NNEST], ckpt[NNEST];
    nested_run(0, plain);
    nested_run(1, ckpt);
    expect_same(ckpt, plain, NNEST);
    EW_NO_LEAKS(mark);
}

/* The train helpers: five kiln_train_step calls on a checkpointed model leave the plain model's
 * parameters. */
KT_TEST(train_step_with_checkpointed_blocks) {
    ew_mark mark = ew_mark_now();
    kiln_module *a = model_new(false, 0.2), *b = model_new(true, 0.2);
    kiln_optimizer *oa = kiln_sgd_new(a, kiln_sgd_defaults()), *ob = kiln_sgd_new(b, kiln_sgd_defaults());
    for (int step = 0; step < 5; step++) {
        double la = 0, lb = 0;
        KT_CHECK(kiln_train_step(oa, kiln_mean(kiln_module_forward(a, input())), &la) == KILN_OK);
        KT_CHECK(kiln_train_step(ob, kiln_mean(kiln_module_forward(b, input())), &lb) == KILN_OK);
        KT_CHECK(exact_mode() ? la == lb : fabs(la - lb) < 1e-5);
    }
    kiln_param pa[1], pb[1];
    kiln_module_params(a, pa, 1), kiln_module_params(b, pb, 1);
    float wa[WIDTH * WIDTH], wb[WIDTH * WIDTH];
    KT_CHECK(kiln_into_data(kiln_ref(*pa[0].slot), wa, sizeof wa) == KILN_OK);
    KT_CHECK(kiln_into_data(kiln_ref(*pb[0].slot), wb, sizeof wb) == KILN_OK);
    expect_same(wb, wa, WIDTH * WIDTH);
    kiln_optimizer_free(oa), kiln_optimizer_free(ob);
    kiln_module_free(a), kiln_module_free(b);
    EW_NO_LEAKS(mark);
}

/* The second run (the recomputation) multiplies shapes that do not fit. */
static int calls, bad_line;
static kiln_tensor flaky(void *ctx, int n, kiln_tensor *in) {
    (void)ctx, (void)n;
    kiln_tensor w = kiln_ones(KILN_CPU, KILN_F32, calls++ == 0 ? KILN_SHAPE(WIDTH, 4) : KILN_SHAPE(3, 4));
    bad_line = __LINE__ + 1;
    return kiln_matmul(in[0], w);
}

static kiln_tensor reshaper(void *ctx, int n, kiln_tensor *in) {
    (void)ctx, (void)n;
    return calls++ == 0 ? in[0] : kiln_reshape(in[0], KILN_SHAPE(WIDTH, BATCH));
}

KT_TEST(error_in_recomputation_reported_once) {
    ew_mark mark = ew_mark_now();
    kiln_tensor x = kiln_leaf(input());
    calls = 0;
    kiln_tensor in = kiln_ref(x);
    kiln_tensor y = kiln_checkpoint(flaky, NULL, 1, &in);
    KT_CHECK(kiln_tensor_status(y) == KILN_OK);
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_sum(y), &g) == KILN_ERR_SHAPE && g == NULL);
    KT_EXPECT_ERROR(KILN_ERR_SHAPE, "kiln_matmul", bad_line);
    KT_CHECK(kiln_sync() == KILN_OK); /* reported once: no later call reports it again */

    calls = 0;
    in = kiln_ref(x);
    int line = __LINE__ + 1;
    y = kiln_checkpoint(reshaper, NULL, 1, &in);
    KT_CHECK(kiln_backward(kiln_sum(y), &g) == KILN_ERR_SHAPE);
    KT_EXPECT_ERROR(KILN_ERR_SHAPE, "kiln_checkpoint", line);
    KT_CHECK(strstr(kiln_last_error(), "recomputed") != NULL);
    KT_CHECK(kiln_sync() == KILN_OK);
    kiln_release(x);
    EW_NO_LEAKS(mark);
}

static kiln_tensor twice(void *ctx, int n, kiln_tensor *in) {
    (void)ctx, (void)n;
    return kiln_mul_scalar(in[0], 2.0);
}

KT_TEST(bad_arguments) {
    ew_mark mark = ew_mark_now();
    kiln_tensor in = kiln_leaf(input());
    int line = __LINE__ + 1;
    kiln_tensor y = kiln_checkpoint(NULL, NULL, 1, &in);
    KT_READ_ERROR(y, KILN_ERR_NULL, "kiln_checkpoint");
    KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_checkpoint", line);
    in = input();
    y = kiln_checkpoint(twice, NULL, KILN_CHECKPOINT_MAX_INPUTS + 1, &in);
    KT_READ_ERROR(y, KILN_ERR_INVALID_ARGUMENT, "kiln_checkpoint");
    kiln_release(in); /* an n_inputs out of range consumes nothing: it cannot know the array's size */
    y = kiln_checkpoint(twice, NULL, 1, NULL);
    KT_READ_ERROR(y, KILN_ERR_NULL, "kiln_checkpoint");
    /* a poisoned input: its own error comes back, with its line */
    line = __LINE__ + 1;
    in = kiln_reshape(input(), KILN_SHAPE(7));
    y = kiln_checkpoint(twice, NULL, 1, &in);
    KT_READ_ERROR(y, KILN_ERR_SHAPE, "kiln_reshape");
    KT_EXPECT_ERROR(KILN_ERR_SHAPE, "kiln_reshape", line);
    /* a stale handle */
    in = input();
    kiln_tensor stale = in;
    kiln_release(in);
    y = kiln_checkpoint(twice, NULL, 1, &stale);
    KT_CHECK(kiln_tensor_status(y) != KILN_OK);
    kiln_release(y);
    /* no grad: a plain call */
    kiln_no_grad_begin();
    in = kiln_leaf(input());
    kiln_tensor keep = kiln_ref(in);
    y = kiln_checkpoint(twice, NULL, 1, &in);
    KT_CHECK(!kiln_requires_grad(y));
    kiln_no_grad_end();
    kiln_release(y), kiln_release(keep);
    KT_CHECK(kiln_module_set_checkpoint(NULL, true) == KILN_ERR_NULL);
    EW_NO_LEAKS(mark);
}

KT_TEST(freed_model_before_backward_is_an_error) {
    ew_mark mark = ew_mark_now();
    kiln_module *m = model_new(true, 0);
    kiln_optimizer *opt = kiln_sgd_new(m, kiln_sgd_defaults());
    kiln_tensor loss = kiln_sum(kiln_module_forward(m, input()));
    kiln_optimizer_free(opt); /* the backward pass does not use the optimizer */
    kiln_module_free(m);
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(loss, &g) == KILN_ERR_INVALID_ARGUMENT && g == NULL);
    KT_CHECK(strstr(kiln_last_error(), "was freed") != NULL);
    KT_CHECK(strstr(kiln_last_error(), "Sequential") != NULL);

    m = model_new(true, 0);
    opt = kiln_sgd_new(m, kiln_sgd_defaults());
    loss = kiln_sum(kiln_module_forward(m, input()));
    kiln_optimizer_free(opt);
    KT_CHECK(kiln_backward(loss, &g) == KILN_OK);
    kiln_grads_free(g);
    kiln_module_free(m);
    EW_NO_LEAKS(mark);
}

/* Out of memory at every allocation of a checkpointed step in turn (the region's record, its
 * node, the capture, the seeds' log, the recomputation): a status, never a crash, no leak. */
KT_TEST(out_of_memory_anywhere) {
    ew_mark mark = ew_mark_now();
    kiln_module *m = model_new(true, 0.2);
    kiln_checkpoint_policy before = kiln_checkpoint_policy_set(KILN_CHECKPOINT_AUTO);
    int failed = 0, ok = 0;
    for (int n = 1; n <= 400; n++) {
        kiln_tensor x = input();
        kiln_sync();
        kiln_debug_fail_alloc_after(n);
        kiln_grads *g = NULL;
        kiln_status st = kiln_backward(kiln_sum(kiln_module_forward(m, x)), &g);
        kiln_status st2 = kiln_sync();
        kiln_debug_fail_alloc_after(0);
        KT_CHECK_MSG(st == KILN_OK || st == KILN_ERR_OUT_OF_MEMORY, "allocation %d: %s", n, kiln_last_error());
        KT_CHECK(st2 == KILN_OK || st2 == KILN_ERR_OUT_OF_MEMORY);
        kiln_grads_free(g);
        if (st == KILN_OK && st2 == KILN_OK) ok++;
        else failed++;
    }
    kiln_sync();
    KT_CHECK_MSG(failed > 20 && ok > 0, "%d failed, %d succeeded", failed, ok);
    kiln_checkpoint_policy_set(before);
    kiln_module_free(m);
    EW_NO_LEAKS(mark);
}

/* Peak bytes of one forward + backward of a deep model with large activations: checkpointing
 * every block keeps one activation per block (its input) instead of two (Linear's input and
 * GELU's). main bounds the engine's run-ahead (KILN_MAX_PENDING_MB=1): with the default 64 MiB
 * this whole model fits in the queue, and the peak is the queue's, not the graph's. */
static uint64_t peak_of(bool checkpoint, kiln_checkpoint_policy policy) {
    kiln_checkpoint_policy before = kiln_checkpoint_policy_set(policy);
    enum { W = 128, B = 1024, D = 12 };
    kiln_module *blocks[D];
    for (int i = 0; i < D; i++) {
        kiln_module *parts[2] = {kiln_linear_new(W, W, true, (uint64_t)i), kiln_gelu_new()};
        blocks[i] = kiln_sequential_new(2, parts);
        if (checkpoint) kiln_module_set_checkpoint(blocks[i], true);
    }
    kiln_module *m = kiln_sequential_new(D, blocks);
    kiln_sync();
    kiln_memory_reset_peak(KILN_CPU);
    uint64_t base = kiln_memory_stats_get(KILN_CPU).bytes_in_use;
    kiln_grads *g = NULL;
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(B, W), 5);
    KT_CHECK(kiln_backward(kiln_sum(kiln_module_forward(m, x)), &g) == KILN_OK);
    kiln_grads_free(g);
    uint64_t peak = kiln_memory_stats_get(KILN_CPU).peak_bytes - base;
    kiln_module_free(m);
    kiln_checkpoint_policy_set(before);
    return peak;
}

KT_TEST(peak_memory_falls) {
    ew_mark mark = ew_mark_now();
    uint64_t plain = peak_of(false, KILN_CHECKPOINT_NONE), ckpt = peak_of(true, KILN_CHECKPOINT_NONE);
    uint64_t autop = peak_of(false, KILN_CHECKPOINT_AUTO);
    printf("  peak above the parameters: plain %.2f MiB, checkpointed %.2f MiB (%.2fx), automatic policy %.2f MiB "
           "(%.2fx)\n", plain / 1048576.0, ckpt / 1048576.0, (double)ckpt / (double)plain, autop / 1048576.0,
           (double)autop / (double)plain);
    KT_CHECK(ckpt < plain * 7 / 10);
    KT_CHECK(autop < plain * 75 / 100);
    EW_NO_LEAKS(mark);
}

/* Self-attention over x [N, H, L, E] (tracked), summed and differentiated: what the forward pass
 * keeps (bytes in use once it ran) and the peak of the whole pass, above what was in use before.
 * with_mask adds a float mask of zeros, which takes the composed ops (the weights kept). */
static void attention_memory(bool with_mask, uint64_t *kept, uint64_t *peak) {
    enum { N = 4, H = 2, L = 512, E = 16 };
    kiln_tensor x = kiln_leaf(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(N, H, L, E), 9));
    kiln_tensor mask = with_mask ? kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(L, L)) : KILN_NONE;
    KT_CHECK(kiln_sync() == KILN_OK);
    kiln_memory_reset_peak(KILN_CPU);
    uint64_t base = kiln_memory_stats_get(KILN_CPU).bytes_in_use;
    kiln_tensor y = kiln_sum(kiln_scaled_dot_product_attention(kiln_ref(x), kiln_ref(x), kiln_ref(x), mask, false, 0));
    KT_CHECK(kiln_sync() == KILN_OK);
    *kept = kiln_memory_stats_get(KILN_CPU).bytes_in_use - base;
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(y, &g) == KILN_OK);
    kiln_grads_free(g);
    *peak = kiln_memory_stats_get(KILN_CPU).peak_bytes - base;
    kiln_release(x);
}

KT_TEST(attention_keeps_no_weights) {
    ew_mark mark = ew_mark_now();
    uint64_t kept, peak, kept_c, peak_c, weights = 4 * 2 * 512 * 512 * sizeof(float); /* 8 MiB */
    attention_memory(false, &kept, &peak);
    attention_memory(true, &kept_c, &peak_c);
    printf("  attention [4, 2, 512, 16]: forward keeps %.2f MiB (composed ops: %.2f), peak %.2f MiB (composed: %.2f); "
           "weights %.0f MiB\n", kept / 1048576.0, kept_c / 1048576.0, peak / 1048576.0, peak_c / 1048576.0,
           weights / 1048576.0);
    KT_CHECK(kept_c >= weights);    /* the composed ops keep softmax's output */
    KT_CHECK(kept < weights / 8);   /* the fused op keeps its output only (q, k, v are x) */
    /* backward recomputes 2 of the 4 batch rows at a time (4 MiB of weights), holding the chunk's
     * weights, their gradient and one product at most; the composed ops hold the whole batch's */
    KT_CHECK(peak * 3 < peak_c * 2);
    KT_CHECK(peak < weights * 2);
    /* 12.5 MiB, substitution on or off: the substitution hold keeping one chunk's products and
     * scores while the next chunk's were made raised it to 20.5 (engine/substitute.c) */
    KT_CHECK_MSG(peak < weights * 7 / 4, "peak %.2f MiB", peak / 1048576.0);
    EW_NO_LEAKS(mark);
}

/* Tracked layer norm keeps the normalised input and 1/std: one tensor of the input's size, not the
 * centred input as well (the composed ops' two). */
KT_TEST(layer_norm_keeps_one_tensor) {
    ew_mark mark = ew_mark_now();
    enum { ROWS = 1024, D = 256 };
    uint64_t input = ROWS * D * sizeof(float); /* 1 MiB */
    kiln_tensor x = kiln_leaf(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(ROWS, D), 4));
    kiln_tensor w = kiln_leaf(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(D))), b = kiln_leaf(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(D)));
    KT_CHECK(kiln_sync() == KILN_OK);
    uint64_t base = kiln_memory_stats_get(KILN_CPU).bytes_in_use;
    kiln_tensor y = kiln_sum(kiln_layer_norm(kiln_ref(x), KILN_SHAPE(D), kiln_ref(w), kiln_ref(b), 1e-5));
    KT_CHECK(kiln_sync() == KILN_OK);
    uint64_t kept = kiln_memory_stats_get(KILN_CPU).bytes_in_use - base;
    printf("  layer norm [1024, 256]: the forward keeps %.2f MiB (input 1 MiB)\n", kept / 1048576.0);
    KT_CHECK(kept >= input && kept < input * 3 / 2);
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(y, &g) == KILN_OK);
    kiln_grads_free(g);
    kiln_release(x), kiln_release(w), kiln_release(b);
    EW_NO_LEAKS(mark);
}

int main(void) {
    setenv("KILN_MAX_PENDING_MB", "1", 0); /* before the engine starts: see peak_of */
    KT_RUN(module_gradients_match_plain);
    KT_RUN(automatic_policy_gradients_match_plain);
    KT_RUN(dropout_replays_its_masks);
    KT_RUN(generator_draws_replay);
    KT_RUN(nested_regions);
    KT_RUN(train_step_with_checkpointed_blocks);
    KT_RUN(error_in_recomputation_reported_once);
    KT_RUN(bad_arguments);
    KT_RUN(freed_model_before_backward_is_an_error);
    KT_RUN(out_of_memory_anywhere);
    KT_RUN(peak_memory_falls);
    KT_RUN(attention_keeps_no_weights);
    KT_RUN(layer_norm_keeps_one_tensor);
    return kt_finish();
}
