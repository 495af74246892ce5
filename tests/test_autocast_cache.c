/* Autocast's cast cache (src/api/autocast_cache.c): a parameter's bf16 copy is reused while
 * the parameter is unchanged, and never once something wrote it: an optimizer step, a
 * checkpoint loaded into it, user memory under a borrowed tensor or handed out through DLPack. Each case compares the
 * autocast result with the same product over a fresh cast of the parameter's current values
 * (bit for bit: the same kernel on the same bf16 operands), in the default asynchronous mode
 * with nothing waited on between the write and the next use (ctest runs it with KILN_SYNC=1
 * too); gradients through a kept copy equal those through a fresh cast; and the copies go with
 * their parameters (the leak check). An SGD step rewrites the copy as it updates the parameter:
 * after every step the copy holds exactly a fresh cast's bits; a copy something else still
 * holds, or another optimizer's step, leaves it to be made again. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dlpack/dlpack.h>

#include "kiln.h"
#include "kiln/dlpack.h"
#include "kiln_test.h"
#include "api/autocast-impl.h"
#include "core/core-impl.h"

static kiln_tensor rnd(kiln_shape s, uint64_t seed) { return kiln_randn(KILN_CPU, KILN_F32, s, seed); }

/* linear(x, w, b) under bf16 autocast (cast to f32 for reading). */
static kiln_tensor autocast_linear(kiln_tensor x, kiln_tensor w, kiln_tensor b) {
    kiln_autocast_begin(KILN_BF16);
    kiln_tensor y = kiln_linear(kiln_ref(x), kiln_ref(w), kiln_ref(b));
    kiln_autocast_end();
    return kiln_cast(y, KILN_F32);
}

/* The same product over fresh bf16 casts of the parameters' values now. */
static kiln_tensor fresh_linear(kiln_tensor x, kiln_tensor w, kiln_tensor b) {
    kiln_no_grad_begin();
    kiln_tensor y = kiln_linear(kiln_cast(kiln_ref(x), KILN_BF16), kiln_cast(kiln_detach(kiln_ref(w)), KILN_BF16),
                                kiln_cast(kiln_detach(kiln_ref(b)), KILN_BF16));
    kiln_no_grad_end();
    return kiln_cast(y, KILN_F32);
}

/* The largest |a - b|, both consumed (a read: the one wait). */
static float max_diff(kiln_tensor a, kiln_tensor b) {
    float d = -1;
    KT_CHECK_MSG(kiln_into_scalar(kiln_max(kiln_abs(kiln_sub(a, b))), &d) == KILN_OK, "%s", kiln_last_error());
    return d;
}

KT_TEST(a_kept_copy_is_reused_until_an_optimizer_step) {
    kt_mem_begin();
    kiln_tensor w = kiln_leaf(kiln_mul_scalar(rnd(KILN_SHAPE(24, 40), 1), 0.2));
    kiln_tensor b = kiln_leaf(kiln_mul_scalar(rnd(KILN_SHAPE(24), 2), 0.2));
    kiln_tensor x = rnd(KILN_SHAPE(16, 40), 3);
    kiln_optimizer *opt = kiln_sgd_new_params(2, (kiln_tensor[]){w, b}, (kiln_sgd_options){.lr = 0.5});
    int64_t h0 = kiln__autocast_cache_hits();
    kiln_tensor y1 = autocast_linear(x, w, b); /* makes the copies */
    KT_CHECK(kiln__autocast_cache_hits() == h0);
    kiln_tensor y2 = autocast_linear(x, w, b); /* uses them */
    KT_CHECK(kiln__autocast_cache_hits() == h0 + 2);
    KT_CHECK(max_diff(kiln_ref(y1), fresh_linear(x, w, b)) == 0);
    /* a step, queued: the next autocast product must read the updated weights */
    kiln_grads *g = NULL;
    KT_CHECK_MSG(kiln_backward(kiln_sum(kiln_mul(y2, kiln_ref(y2))), &g) == KILN_OK, "%s", kiln_last_error());
    KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
    kiln_grads_free(g);
    int64_t h1 = kiln__autocast_cache_hits();
    kiln_tensor y3 = autocast_linear(x, w, b);
    KT_CHECK(kiln__autocast_cache_hits() == h1 + 2); /* both copies rewritten by the step */
    kiln_tensor y4 = autocast_linear(x, w, b);
    KT_CHECK(kiln__autocast_cache_hits() == h1 + 4);
    KT_CHECK(max_diff(kiln_ref(y3), fresh_linear(x, w, b)) == 0);
    KT_CHECK(max_diff(y4, fresh_linear(x, w, b)) == 0);
    KT_CHECK(max_diff(y3, y1) > 0.01f); /* the step did change them: a stale copy would show */
    kiln_optimizer_free(opt);
    kiln_release(w), kiln_release(b), kiln_release(x);
    KT_MEM_CHECK();
}

/* Whether w's kept bf16 copy is current and holds exactly the bits of a fresh cast of w (waits). */
static bool copy_is_fresh_cast(kiln_tensor w) {
    KT_CHECK_MSG(kiln_sync() == KILN_OK, "%s", kiln_last_error());
    kiln__error *err = NULL;
    kiln__tensor *t = kiln__handle_peek(w, "copy_is_fresh_cast", &err);
    kiln__error_unref(err);
    kiln__storage *s = t ? t->storage : NULL, *copy = s ? atomic_load(&s->cast_copy) : NULL;
    if (!copy || s->cast_version != kiln__storage_last_write(s)) return false;
    size_t bytes = (size_t)kiln_tensor_numel(w) * 2;
    uint16_t *fresh = malloc(bytes);
    bool same = fresh && kiln_into_data(kiln_cast(kiln_detach(kiln_ref(w)), KILN_BF16), fresh, bytes) == KILN_OK &&
                copy->nbytes == bytes && memcmp(fresh, copy->data, bytes) == 0;
    free(fresh);
    return same;
}

/* steps of opt on (w, b) under autocast, nothing waited on between them; after each, both copies
 * are the fresh casts' bits and the next forward pass takes them from the cache. */
static void steps_keep_the_copies(kiln_optimizer *opt, kiln_tensor w, kiln_tensor b, kiln_tensor x, int steps,
                                  bool rewritten) {
    for (int s = 0; s < steps; s++) {
        int64_t h0 = kiln__autocast_cache_hits();
        kiln_tensor y = autocast_linear(x, w, b);
        if (s > 0) KT_CHECK_MSG(kiln__autocast_cache_hits() == h0 + (rewritten ? 2 : 0), "step %d", s);
        kiln_grads *g = NULL;
        KT_CHECK_MSG(kiln_backward(kiln_sum(kiln_mul(kiln_ref(y), y)), &g) == KILN_OK, "%s", kiln_last_error());
        KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
        kiln_grads_free(g);
    }
    KT_CHECK(copy_is_fresh_cast(w) == rewritten && copy_is_fresh_cast(b) == rewritten);
    KT_CHECK(max_diff(autocast_linear(x, w, b), fresh_linear(x, w, b)) == 0);
}

KT_TEST(sgd_steps_rewrite_the_copy_bit_for_bit) {
    kt_mem_begin();
    kiln_tensor x = rnd(KILN_SHAPE(16, 300), 20);
    for (int kind = 0; kind < 2; kind++) {
        /* 300 x 300: past one block of the kernel, and past one task of the pool */
        kiln_tensor w = kiln_leaf(kiln_mul_scalar(rnd(KILN_SHAPE(300, 300), 21 + kind), 0.05));
        kiln_tensor b = kiln_leaf(kiln_mul_scalar(rnd(KILN_SHAPE(300), 31 + kind), 0.05));
        kiln_sgd_options o = {.lr = 0.01};
        if (kind == 1) o = (kiln_sgd_options){.lr = 0.01, .momentum = 0.9, .weight_decay = 0.1, .nesterov = true};
        kiln_optimizer *opt = kiln_sgd_new_params(2, (kiln_tensor[]){w, b}, o);
        steps_keep_the_copies(opt, w, b, x, 4, true);
        kiln_optimizer_free(opt);
        kiln_release(w), kiln_release(b);
    }
    kiln_release(x);
    KT_MEM_CHECK();
}

KT_TEST(a_copy_held_elsewhere_or_another_optimizer_leaves_it_to_be_made_again) {
    kt_mem_begin();
    kiln_tensor w = kiln_leaf(kiln_mul_scalar(rnd(KILN_SHAPE(24, 40), 40), 0.2));
    kiln_tensor b = kiln_leaf(kiln_mul_scalar(rnd(KILN_SHAPE(24), 41), 0.2));
    kiln_tensor x = rnd(KILN_SHAPE(16, 40), 42);
    /* Adam's and RMSprop's updates do not write copies: the next cast makes them again */
    kiln_optimizer *adam = kiln_adam_new_params(2, (kiln_tensor[]){w, b}, (kiln_adam_options){.lr = 0.01});
    steps_keep_the_copies(adam, w, b, x, 3, false);
    kiln_optimizer_free(adam);
    kiln_optimizer *rms = kiln_rmsprop_new_params(2, (kiln_tensor[]){w, b}, (kiln_rmsprop_options){.lr = 0.01});
    steps_keep_the_copies(rms, w, b, x, 3, false);
    kiln_optimizer_free(rms);
    /* a graph whose x wants a gradient keeps w's bf16 copy (dx reads it): the step must not
     * rewrite what that graph will read */
    kiln_optimizer *sgd = kiln_sgd_new_params(2, (kiln_tensor[]){w, b}, (kiln_sgd_options){.lr = 0.5});
    kiln_tensor xl = kiln_leaf(kiln_ref(x));
    kiln_autocast_begin(KILN_BF16);
    kiln_tensor held = kiln_linear(kiln_ref(xl), kiln_ref(w), kiln_ref(b));
    kiln_autocast_end();
    /* d sum(x w^T)/dx: w's column sums, of its bf16 values at the forward pass */
    kiln_tensor want = kiln_expand(kiln_sum_dims(kiln_cast(kiln_cast(kiln_detach(kiln_ref(w)), KILN_BF16), KILN_F32),
                                                 KILN_DIMS(0), true),
                                   KILN_SHAPE(16, 40));
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_sum(kiln_cast(autocast_linear(x, w, b), KILN_F32)), &g) == KILN_OK);
    KT_CHECK(kiln_optimizer_step(sgd, g) == KILN_OK);
    kiln_grads_free(g);
    KT_CHECK(!copy_is_fresh_cast(w)); /* held: left, to be made again */
    KT_CHECK(copy_is_fresh_cast(b));  /* (b's copy is not saved by that graph) */
    KT_CHECK(max_diff(autocast_linear(x, w, b), fresh_linear(x, w, b)) == 0);
    /* the held graph's gradient still reads the weights of its forward pass */
    g = NULL;
    KT_CHECK(kiln_backward(kiln_sum(kiln_cast(held, KILN_F32)), &g) == KILN_OK);
    kiln_tensor gx = kiln_grad(g, xl);
    kiln_grads_free(g);
    KT_CHECK(max_diff(gx, want) < 1e-4f); /* (a step of lr 0.5 moved w's entries by ~1: a rewrite would show) */
    kiln_optimizer_free(sgd);
    kiln_release(w), kiln_release(b), kiln_release(x), kiln_release(xl);
    KT_MEM_CHECK();
}

/* One step's gradients of (w, b) under autocast, as f32. */
static void grads_of(kiln_tensor x, kiln_tensor w, kiln_tensor b, kiln_tensor *gw, kiln_tensor *gb) {
    kiln_autocast_begin(KILN_BF16);
    kiln_tensor h = kiln_relu(kiln_linear(kiln_ref(x), kiln_ref(w), kiln_ref(b)));
    kiln_tensor y = kiln_linear(h, kiln_ref(w), kiln_ref(b)); /* w used twice: two casts, one copy */
    kiln_autocast_end();
    kiln_grads *g = NULL;
    KT_CHECK_MSG(kiln_backward(kiln_sum(kiln_cast(y, KILN_F32)), &g) == KILN_OK, "%s", kiln_last_error());
    *gw = kiln_grad(g, w);
    *gb = kiln_grad(g, b);
    kiln_grads_free(g);
}

KT_TEST(gradients_through_a_kept_copy_are_the_fresh_casts) {
    kt_mem_begin();
    kiln_tensor w = kiln_leaf(kiln_mul_scalar(rnd(KILN_SHAPE(32, 32), 4), 0.2));
    kiln_tensor b = kiln_leaf(kiln_mul_scalar(rnd(KILN_SHAPE(32), 5), 0.2));
    kiln_tensor x = rnd(KILN_SHAPE(8, 32), 6);
    int64_t h0 = kiln__autocast_cache_hits();
    kiln_tensor gw1, gb1, gw2, gb2;
    grads_of(x, w, b, &gw1, &gb1); /* the first cast of each makes the copy, the second uses it */
    KT_CHECK(kiln__autocast_cache_hits() == h0 + 2);
    grads_of(x, w, b, &gw2, &gb2); /* all four from the copies */
    KT_CHECK(kiln__autocast_cache_hits() == h0 + 6);
    KT_CHECK(kiln_tensor_dtype(gw2) == KILN_F32 && kiln_tensor_dtype(gb2) == KILN_F32);
    KT_CHECK(max_diff(gw1, gw2) == 0);
    KT_CHECK(max_diff(gb1, gb2) == 0);
    kiln_release(w), kiln_release(b), kiln_release(x);
    KT_MEM_CHECK();
}

KT_TEST(a_checkpoint_loaded_into_the_parameters) {
    kt_mem_begin();
    char path[64];
    snprintf(path, sizeof path, "/tmp/kiln_autocast_cache_%d.safetensors", (int)getpid());
    kiln_module *m = kiln_linear_new(40, 24, true, 7);
    KT_CHECK(kiln_module_set_autocast(m, KILN_BF16) == KILN_OK);
    kiln_tensor x = rnd(KILN_SHAPE(16, 40), 8);
    KT_CHECK_MSG(kiln_checkpoint_save(path, m, NULL) == KILN_OK, "%s", kiln_last_error());
    kiln_tensor before = kiln_cast(kiln_module_forward(m, kiln_ref(x)), KILN_F32);
    kiln_optimizer *opt = kiln_sgd_new(m, (kiln_sgd_options){.lr = 0.5});
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_sum(kiln_cast(kiln_module_forward(m, kiln_ref(x)), KILN_F32)), &g) == KILN_OK);
    KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
    kiln_grads_free(g);
    kiln_tensor stepped = kiln_cast(kiln_module_forward(m, kiln_ref(x)), KILN_F32); /* copies of the stepped weights */
    int64_t h0 = kiln__autocast_cache_hits();
    kiln_tensor again = kiln_cast(kiln_module_forward(m, kiln_ref(x)), KILN_F32);
    KT_CHECK(kiln__autocast_cache_hits() == h0 + 2);
    KT_CHECK(max_diff(kiln_ref(stepped), again) == 0);
    KT_CHECK_MSG(kiln_checkpoint_load(path, m, NULL) == KILN_OK, "%s", kiln_last_error());
    kiln_tensor loaded = kiln_cast(kiln_module_forward(m, kiln_ref(x)), KILN_F32);
    KT_CHECK(max_diff(kiln_ref(before), kiln_ref(loaded)) == 0);
    KT_CHECK(max_diff(stepped, before) > 0); /* the step had changed the output */
    kiln_release(loaded);
    kiln_optimizer_free(opt);
    kiln_module_free(m);
    kiln_release(x);
    remove(path);
    KT_MEM_CHECK();
}

static void nothing(void *ctx) { (void)ctx; }

KT_TEST(user_memory_is_never_cached) {
    kt_mem_begin();
    static float wv[8 * 12], bv[8];
    for (int i = 0; i < 8 * 12; i++) wv[i] = (float)((i * 37) % 11 - 5) / 8;
    for (int i = 0; i < 8; i++) bv[i] = (float)i / 4;
    kiln_tensor w = kiln_leaf(kiln_from_borrowed(KILN_F32, KILN_SHAPE(8, 12), wv, nothing, NULL));
    kiln_tensor b = kiln_leaf(kiln_from_borrowed(KILN_F32, KILN_SHAPE(8), bv, nothing, NULL));
    kiln_tensor x = rnd(KILN_SHAPE(4, 12), 9);
    int64_t h0 = kiln__autocast_cache_hits();
    KT_CHECK(max_diff(autocast_linear(x, w, b), fresh_linear(x, w, b)) == 0); /* (waits: wv is free to change) */
    for (int i = 0; i < 8 * 12; i++) wv[i] = -wv[i] + 1;
    KT_CHECK(max_diff(autocast_linear(x, w, b), fresh_linear(x, w, b)) == 0);
    KT_CHECK(kiln__autocast_cache_hits() == h0);
    kiln_release(w), kiln_release(b), kiln_release(x);
    KT_CHECK(kiln_sync() == KILN_OK);
    KT_MEM_CHECK();
}

KT_TEST(a_buffer_handed_out_through_dlpack_is_never_cached) {
    kt_mem_begin();
    kiln_tensor w = kiln_leaf(kiln_mul_scalar(rnd(KILN_SHAPE(8, 12), 13), 0.3)), b = kiln_leaf(rnd(KILN_SHAPE(8), 14));
    kiln_tensor x = rnd(KILN_SHAPE(4, 12), 15);
    DLManagedTensor *m = NULL;
    KT_CHECK(kiln_to_dlpack(kiln_ref(w), &m) == KILN_OK);
    int64_t h0 = kiln__autocast_cache_hits();
    KT_CHECK(max_diff(autocast_linear(x, w, b), fresh_linear(x, w, b)) == 0); /* (waits: the consumer may write) */
    float *p = (float *)((char *)m->dl_tensor.data + m->dl_tensor.byte_offset);
    for (int i = 0; i < 8 * 12; i++) p[i] = -p[i] + 1; /* behind the engine's back, as a NumPy view may */
    KT_CHECK(max_diff(autocast_linear(x, w, b), fresh_linear(x, w, b)) == 0);
    KT_CHECK(kiln__autocast_cache_hits() == h0 + 1); /* b's copy reused, never w's */
    m->deleter(m);
    kiln_release(w), kiln_release(b), kiln_release(x);
    KT_MEM_CHECK();
}

/* Not parameters: activations and untracked weights are cast each time, as PyTorch's. */
KT_TEST(only_parameters_are_kept) {
    kt_mem_begin();
    kiln_tensor w = kiln_mul_scalar(rnd(KILN_SHAPE(8, 12), 10), 0.3), b = rnd(KILN_SHAPE(8), 11);
    kiln_tensor x = rnd(KILN_SHAPE(4, 12), 12);
    int64_t h0 = kiln__autocast_cache_hits();
    kiln_release(autocast_linear(x, w, b));
    kiln_release(autocast_linear(x, w, b));
    KT_CHECK(kiln__autocast_cache_hits() == h0);
    kiln_release(w), kiln_release(b), kiln_release(x);
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(a_kept_copy_is_reused_until_an_optimizer_step);
    KT_RUN(gradients_through_a_kept_copy_are_the_fresh_casts);
    KT_RUN(sgd_steps_rewrite_the_copy_bit_for_bit);
    KT_RUN(a_copy_held_elsewhere_or_another_optimizer_leaves_it_to_be_made_again);
    KT_RUN(a_checkpoint_loaded_into_the_parameters);
    KT_RUN(user_memory_is_never_cached);
    KT_RUN(a_buffer_handed_out_through_dlpack_is_never_cached);
    KT_RUN(only_parameters_are_kept);
    return kt_finish();
}
