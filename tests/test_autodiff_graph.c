/* Autodiff mechanics: view gradients, graph lifetime (a dropped loss frees its graph at
 * once), memory during backward, accumulation into shared leaves, no-grad scopes, detach,
 * and bad input. */
#include "gradcheck.h"

static kiln_memory_stats stats(void) {
    kiln_sync();
    return kiln_memory_stats_get(KILN_CPU);
}

static kiln_tensor run_views(kiln_tensor *in, void *ctx) {
    kiln_tensor t = kiln_transpose(in[0], 0, 2);                 /* [4,3,2] */
    t = kiln_reshape(kiln_contiguous(t), KILN_SHAPE(4, 6));      /* copy, then view */
    t = kiln_slice(t, 1, 1, 6, 2);                               /* [4,3] */
    t = kiln_unsqueeze(kiln_narrow(t, 0, 1, 2), 1);              /* [2,1,3] */
    t = kiln_expand(t, KILN_SHAPE(2, 5, 3));
    t = kiln_permute(t, KILN_DIMS(2, 0, 1));                     /* [3,2,5] */
    return kiln_flatten(kiln_squeeze(kiln_unsqueeze(t, 0), 0), 0, 1);
}

KT_TEST(view_gradients) {
    kiln_shape s[1] = {KILN_SHAPE(2, 3, 4)};
    GC_CHECK("views", run_views, NULL, 1, s, 1e-6);
}

KT_TEST(shared_leaf_accumulates) {
    kiln_tensor x = kiln_full(KILN_CPU, KILN_F64, KILN_SHAPE(2), 3.0);
    kiln_require_grad(x);
    /* y = x*x + 2x + x: dy/dx = 2x + 3 = 9 */
    kiln_tensor y = kiln_add(kiln_add(kiln_mul(kiln_ref(x), kiln_ref(x)), kiln_mul_scalar(kiln_ref(x), 2.0)), kiln_ref(x));
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward_seed(y, kiln_ones(KILN_CPU, KILN_F64, KILN_SHAPE(2)), &g) == KILN_OK);
    double v[2];
    KT_CHECK(kiln_grads_count(g) == 1);
    KT_CHECK(kiln_into_data(kiln_grad(g, x), v, sizeof v) == KILN_OK);
    KT_NEAR(v[0], 9.0, 1e-12);
    KT_CHECK(kiln_grad(g, x).id == 0); /* taken already */
    kiln_grads_free(g);
    kiln_release(x);
}

KT_TEST(dropped_loss_frees_graph_at_once) {
    kiln_memory_stats base = stats();
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(256, 256), 1);
    kiln_require_grad(x);
    kiln_tensor y = kiln_ref(x);
    for (int i = 0; i < 20; i++) y = kiln_tanh(kiln_mul_scalar(y, 1.1));
    kiln_memory_stats mid = stats();
    KT_CHECK(mid.bytes_in_use > base.bytes_in_use + 20 * 256 * 256 * 4); /* saved outputs */
    kiln_release(y);
    kiln_memory_stats after = stats();
    KT_CHECK(after.bytes_in_use == base.bytes_in_use + 256 * 256 * 4); /* only x is left */
    kiln_release(x);
    KT_CHECK(stats().bytes_in_use == base.bytes_in_use);
    KT_CHECK(stats().live_tensors == base.live_tensors);
}

KT_TEST(untracked_ops_record_nothing) {
    kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1024));
    kiln_memory_stats s0 = stats();
    kiln_tensor y = kiln_exp(x); /* not tracked: in place, nothing saved */
    kiln_memory_stats s1 = stats();
    KT_CHECK(s1.alloc_count == s0.alloc_count);
    KT_CHECK(!kiln_requires_grad(y));
    kiln_release(y);
}

/* A 200-op elementwise chain on a large tensor: backward peaks close to the forward's
 * saved state, not at a second copy of the graph. (With the async engine, memory may run
 * ahead of execution by the stream's pending-bytes window, set small here.) */
KT_TEST(backward_memory_stays_near_saved_state) {
    const int64_t n = 1 << 18; /* 1 MiB of f32 */
    const int64_t window = 4 << 20;
    kiln_engine_set_limits(0, window);
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(n), 7);
    kiln_require_grad(x);
    kiln_tensor y = kiln_ref(x);
    for (int i = 0; i < 200; i++) y = (i % 2) ? kiln_tanh(y) : kiln_mul_scalar(y, 1.01);
    kiln_memory_stats fwd = stats(); /* x + 100 saved tanh outputs + y */
    kiln_memory_reset_peak(KILN_CPU);
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward_seed(y, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(n)), &g) == KILN_OK);
    kiln_memory_stats bwd = stats();
    double saved = (double)fwd.bytes_in_use;
    KT_CHECK_MSG((double)bwd.peak_bytes <= saved + (double)window + 6.0 * n * 4, "peak %.1f MiB vs forward state %.1f MiB",
                 (double)bwd.peak_bytes / 1048576, saved / 1048576);
    kiln_tensor dx = kiln_grad(g, x);
    KT_CHECK(kiln_tensor_numel(dx) == n);
    kiln_release(dx);
    kiln_grads_free(g);
    KT_CHECK(stats().bytes_in_use == (uint64_t)n * 4); /* the graph is gone: only x */
    kiln_release(x);
    kiln_engine_set_limits(0, 64 << 20);
}

KT_TEST(no_grad_and_detach) {
    kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3));
    kiln_require_grad(x);
    kiln_no_grad_begin();
    KT_CHECK(!kiln_grad_enabled());
    kiln_tensor y = kiln_exp(kiln_ref(x));
    kiln_no_grad_end();
    KT_CHECK(kiln_grad_enabled());
    KT_CHECK(!kiln_requires_grad(y));
    kiln_tensor d = kiln_detach(kiln_exp(kiln_ref(x)));
    KT_CHECK(!kiln_requires_grad(d));
    kiln_tensor z = kiln_add(kiln_ref(x), d);
    KT_CHECK(kiln_requires_grad(z));
    kiln_release(y);
    kiln_release(z);
    kiln_release(x);
    kiln_no_grad_end(); /* unmatched: reported, no effect */
    KT_CHECK(kiln_last_status() == KILN_ERR_INVALID_ARGUMENT && kiln_grad_enabled());
}

KT_TEST(bad_input) {
    uint64_t live = stats().live_tensors;
    kiln_grads *g = NULL;
    /* no graph */
    KT_CHECK(kiln_backward(kiln_ones(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE), &g) == KILN_ERR_NO_GRAPH);
    KT_CHECK(strstr(kiln_last_error(), "kiln_backward at") && strstr(kiln_last_error(), "test_autodiff_graph.c"));
    KT_CHECK(g == NULL);
    /* poisoned */
    kiln_tensor bad = kiln_reshape(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(4)), KILN_SHAPE(3));
    KT_CHECK(kiln_backward(bad, &g) == KILN_ERR_SHAPE);
    /* NULL out, stale handle, non-scalar without seed */
    kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2));
    kiln_require_grad(x);
    KT_CHECK(kiln_backward(kiln_exp(kiln_ref(x)), NULL) == KILN_ERR_NULL);
    KT_CHECK(kiln_backward(kiln_exp(kiln_ref(x)), &g) == KILN_ERR_SHAPE);
    kiln_tensor gone = kiln_exp(kiln_ref(x));
    kiln_release(gone);
    KT_CHECK(kiln_backward(gone, &g) == KILN_ERR_STALE_HANDLE);
    /* second backward of the same (ref'd) root */
    kiln_tensor y = kiln_mul_scalar(kiln_ref(x), 2.0);
    kiln_tensor keep = kiln_ref(y);
    KT_CHECK(kiln_backward_seed(y, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2)), &g) == KILN_OK);
    kiln_grads_free(g);
    KT_CHECK(kiln_backward_seed(keep, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2)), &g) == KILN_ERR_NO_GRAPH);
    KT_CHECK(strstr(kiln_last_error(), "already consumed") != NULL);
    /* seed of the wrong shape */
    KT_CHECK(kiln_backward_seed(kiln_exp(kiln_ref(x)), kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)), &g) == KILN_ERR_SHAPE);
    /* require_grad on ints, on a computed tensor; grad lookups */
    kiln_tensor i = kiln_zeros(KILN_CPU, KILN_I32, KILN_SHAPE(2));
    KT_CHECK(kiln_require_grad(i) == KILN_ERR_DTYPE);
    kiln_tensor e = kiln_exp(kiln_ref(x));
    KT_CHECK(kiln_require_grad(e) == KILN_ERR_INVALID_ARGUMENT);
    KT_CHECK(kiln_require_grad(gone) == KILN_ERR_STALE_HANDLE);
    KT_CHECK(kiln_grad(NULL, x).id == 0 && kiln_last_status() == KILN_ERR_NULL);
    kiln_release(i);
    kiln_release(e);
    kiln_release(x);
    kiln_grads_free(NULL);
    KT_CHECK(stats().live_tensors == live);
}

/* kiln_backward_value: the gradients and the loss's value from one call, consuming the loss. */
KT_TEST(backward_value) {
    kt_mem_begin();
    for (int d = 0; d < 2; d++) {
        kiln_dtype dt = d ? KILN_F64 : KILN_F32;
        kiln_tensor w = kiln_cast(kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(3), (double[]){0.5, -1.5, 2.25}), dt);
        kiln_require_grad(w);
        kiln_tensor loss = kiln_sum(kiln_mul(kiln_ref(w), kiln_ref(w)));
        kiln_grads *g = NULL;
        double v = 0;
        KT_CHECK(kiln_backward_value(loss, &g, &v) == KILN_OK);
        KT_CHECK(v == 0.25 + 2.25 + 5.0625);
        KT_CHECK(!kiln_is_valid(loss));
        double dw[3];
        KT_CHECK(kiln_into_data(kiln_cast(kiln_grad(g, w), KILN_F64), dw, sizeof dw) == KILN_OK);
        KT_CHECK(dw[0] == 1.0 && dw[1] == -3.0 && dw[2] == 4.5);
        KT_CHECK(kiln_is_valid(w)); /* neither kiln_require_grad nor kiln_grad consumed it */
        kiln_grads_free(g);
        kiln_release(w);
    }
    /* a loss that fails while computed (a target out of range): its error, NaN, and
     * gradients that carry the error */
    kiln_tensor logits = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3));
    kiln_require_grad(logits);
    kiln_tensor loss = kiln_cross_entropy(kiln_ref(logits), kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(2), (int64_t[]){1, 7}), kiln_cross_entropy_defaults()); int ce_line = __LINE__;
    kiln_grads *g = NULL;
    double v = 0;
    KT_CHECK(kiln_backward_value(loss, &g, &v) == KILN_ERR_INDEX);
    KT_EXPECT_ERROR(KILN_ERR_INDEX, "kiln_cross_entropy", ce_line);
    KT_CHECK(isnan(v));
    kiln_grads_free(g);
    kiln_release(logits);
    kiln_sync(); /* the error was delivered: nothing left to report */
    KT_CHECK(kiln_sync() == KILN_OK);
    KT_MEM_CHECK();
}

KT_TEST(backward_value_bad_input) {
    kt_mem_begin();
    kiln_tensor w = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2));
    kiln_require_grad(w);
    kiln_grads *g = NULL;
    double v = 1;
    kiln_tensor loss = kiln_sum(kiln_ref(w));
    KT_CHECK(kiln_backward_value(loss, &g, NULL) == KILN_ERR_NULL); KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_backward_value", __LINE__);
    KT_CHECK(!kiln_is_valid(loss) && g == NULL); /* consumed all the same */
    loss = kiln_sum(kiln_ref(w));
    KT_CHECK(kiln_backward_value(loss, NULL, &v) == KILN_ERR_NULL); KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_backward_value", __LINE__);
    KT_CHECK(isnan(v) && !kiln_is_valid(loss));
    KT_CHECK(kiln_backward_value(loss, &g, &v) == KILN_ERR_STALE_HANDLE); KT_EXPECT_ERROR(KILN_ERR_STALE_HANDLE, "kiln_backward_value", __LINE__);
    KT_CHECK(kiln_backward_value(KILN_NONE, &g, &v) != KILN_OK && g == NULL);
    KT_CHECK(kiln_backward_value(kiln_ones(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE), &g, &v) == KILN_ERR_NO_GRAPH); KT_EXPECT_ERROR(KILN_ERR_NO_GRAPH, "kiln_backward_value", __LINE__);
    KT_CHECK(kiln_backward_value(kiln_mul_scalar(kiln_ref(w), 2.0), &g, &v) == KILN_ERR_SHAPE); KT_EXPECT_ERROR(KILN_ERR_SHAPE, "kiln_backward_value", __LINE__);
    KT_CHECK(isnan(v) && g == NULL);
    kiln_release(w);
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(view_gradients);
    KT_RUN(backward_value);
    KT_RUN(backward_value_bad_input);
    KT_RUN(shared_leaf_accumulates);
    KT_RUN(dropped_loss_frees_graph_at_once);
    KT_RUN(untracked_ops_record_nothing);
    KT_RUN(backward_memory_stays_near_saved_state);
    KT_RUN(no_grad_and_detach);
    KT_RUN(bad_input);
    return kt_finish();
}
