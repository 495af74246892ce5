/* Fusion of elementwise chains: fused results are bit-identical to KILN_FUSION=0 (toggled
 * in-process), a tensor the user kept in the middle of a chain is written, a poisoned input
 * poisons the fused outputs with the original op's error, and fusion really happened. */
#include <kiln.h>

#include "engine/fusion.h"
#include "kiln_test.h"

#define R 37
#define C 101 /* R * C spans several tiles and ends mid-tile */

/* A chain with broadcasting, scalars, where, clamp and casts; returns the final tensor and
 * (in *kept) a ref'd tensor from its middle. */
static kiln_tensor chain(kiln_tensor *kept) {
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(R, C), 7);
    kiln_tensor row = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(1, C), 8);
    kiln_tensor col = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(R, 1), 9);
    KT_CHECK(kiln_sync() == KILN_OK); /* inputs made: what follows is the chain alone */
    kiln_tensor a = kiln_sub(kiln_mul_scalar(kiln_ref(x), 0.5), kiln_ref(row));
    a = kiln_add(kiln_exp(a), kiln_tanh(kiln_ref(col)));
    *kept = kiln_ref(a);
    a = kiln_sigmoid(kiln_clamp(a, 0.1, 2.5));
    kiln_tensor mask = kiln_gt(kiln_ref(x), kiln_ref(row));
    a = kiln_where(mask, a, kiln_neg(kiln_ref(x)));
    a = kiln_cast(kiln_add_scalar(kiln_cast(a, KILN_F64), 1.0 / 3.0), KILN_F32);
    a = kiln_maximum(kiln_mul(a, col), row);
    kiln_release(x);
    return a;
}

static void read_f32(kiln_tensor t, float *out) { KT_CHECK(kiln_into_data(t, out, sizeof(float) * R * C) == KILN_OK); }

KT_TEST(fused_chain_is_bit_identical) {
    static float on[R * C], off[R * C], kept_on[R * C], kept_off[R * C];
    bool was = kiln_fusion_enabled();
    kiln_tensor kept;
    kiln_fusion_set_enabled(false);
    kiln__fusion_stats_reset();
    kiln_tensor y = chain(&kept);
    read_f32(y, off);
    read_f32(kept, kept_off);
    KT_CHECK(kiln__fusion_stats_get().groups == 0);
    kiln_fusion_set_enabled(true);
    y = chain(&kept);
    read_f32(y, on);
    read_f32(kept, kept_on);
    kiln__fusion_stats s = kiln__fusion_stats_get();
    if (kiln_engine_is_async()) {
        KT_CHECK_MSG(s.groups >= 1 && s.ops_fused >= 10, "groups %lld ops %lld", (long long)s.groups,
                     (long long)s.ops_fused);
        KT_CHECK_MSG(s.stores_elided >= 1, "no intermediate was left unwritten");
    }
    KT_CHECK(memcmp(on, off, sizeof on) == 0);
    KT_CHECK(memcmp(kept_on, kept_off, sizeof kept_on) == 0); /* the kept tensor was written */
    kiln_fusion_set_enabled(was);
}

/* In place: exp, add, mul all write x's storage; a ref'd view keeps its value. */
KT_TEST(in_place_chain_and_kept_ref) {
    float a[64], b[64], k[64];
    for (int i = 0; i < 64; i++) a[i] = (float)i / 8 - 4;
    kiln_tensor x = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(64), a);
    x = kiln_exp(x);
    kiln_tensor kept = kiln_ref(x);
    x = kiln_mul_scalar(kiln_add_scalar(x, 1.0), 2.0);
    KT_CHECK(kiln_into_data(x, b, sizeof b) == KILN_OK);
    KT_CHECK(kiln_into_data(kept, k, sizeof k) == KILN_OK);
    for (int i = 0; i < 64; i++) {
        float e;
        kiln_tensor one = kiln_exp(kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(1), a[i]));
        KT_CHECK(kiln_into_data(one, &e, sizeof e) == KILN_OK);
        KT_CHECK(k[i] == e);
        KT_CHECK(b[i] == (e + 1.0f) * 2.0f);
    }
}

/* A storage read through a broadcast view and then overwritten in place must not fuse
 * wrongly: x[0] broadcast over x, written into x. */
KT_TEST(broadcast_read_of_written_storage) {
    float a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8];
    kiln_tensor x = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(8), a);
    x = kiln_add_scalar(x, 1.0);
    kiln_tensor first = kiln_expand(kiln_slice(kiln_ref(x), 0, 0, 1, 1), KILN_SHAPE(8));
    x = kiln_mul(x, first);
    KT_CHECK(kiln_into_data(x, out, sizeof out) == KILN_OK);
    for (int i = 0; i < 8; i++) KT_CHECK(out[i] == (a[i] + 1) * 2);
}

KT_TEST(poisoned_input_names_the_first_failure) {
    kiln_tensor m = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(16, 16));
    kiln__debug_fail_next_kernel("kiln_matmul");
    int line = __LINE__ + 1;
    kiln_tensor p = kiln_matmul(kiln_ref(m), m);
    kiln_tensor y = kiln_tanh(kiln_add_scalar(kiln_exp(p), 1.0));
    kiln_tensor z = kiln_mul_scalar(kiln_ref(y), 3.0);
    float v[256];
    KT_CHECK(kiln_into_data(y, v, sizeof v) == KILN_ERR_KERNEL);
    KT_EXPECT_ERROR(KILN_ERR_KERNEL, "kiln_matmul", line);
    KT_CHECK(kiln_into_data(z, v, sizeof v) == KILN_ERR_KERNEL);
    KT_CHECK(kiln_sync() == KILN_OK); /* reported once */
}

KT_TEST(kernel_failure_inside_a_group_names_its_op) {
    kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(300));
    x = kiln_exp(kiln_add_scalar(x, 1.0));
    kiln__debug_fail_next_kernel("kiln_tanh");
    int line = __LINE__ + 1;
    x = kiln_tanh(x);
    x = kiln_mul_scalar(x, 2.0);
    float v[300];
    KT_CHECK(kiln_into_data(x, v, sizeof v) == KILN_ERR_KERNEL);
    KT_EXPECT_ERROR(KILN_ERR_KERNEL, "kiln_tanh", line);
    KT_CHECK(kiln_sync() == KILN_OK);
}

/* Forward and backward of a tracked chain (autodiff saves some intermediates: those are
 * written): gradients with fusion on equal those with it off, bit for bit. */
static void grad_of_chain(float *dx, float *loss, int64_t *backward_groups) {
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(R, C), 11);
    kiln_tensor row = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(1, C), 12);
    KT_CHECK(kiln_require_grad(x) == KILN_OK);
    kiln_tensor y = kiln_tanh(kiln_mul(kiln_exp(kiln_mul_scalar(kiln_ref(x), 0.25)), row));
    y = kiln_sigmoid(kiln_add_scalar(kiln_mul(kiln_ref(y), y), 0.5));
    kiln_tensor l = kiln_sum(y);
    KT_CHECK(kiln_into_scalar(kiln_ref(l), loss) == KILN_OK);
    int64_t before = kiln__fusion_stats_get().groups;
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(l, &g) == KILN_OK);
    KT_CHECK(kiln_into_data(kiln_grad(g, x), dx, sizeof(float) * R * C) == KILN_OK);
    *backward_groups = kiln__fusion_stats_get().groups - before;
    kiln_grads_free(g);
    kiln_release(x);
}

KT_TEST(backward_is_bit_identical) {
    static float on[R * C], off[R * C];
    float l_on, l_off;
    bool was = kiln_fusion_enabled();
    kiln_fusion_set_enabled(false);
    int64_t groups;
    grad_of_chain(off, &l_off, &groups);
    KT_CHECK(groups == 0);
    kiln_fusion_set_enabled(true);
    grad_of_chain(on, &l_on, &groups);
    if (kiln_engine_is_async()) KT_CHECK_MSG(groups >= 1, "backward fused no group");
    KT_CHECK(memcmp(&l_on, &l_off, sizeof l_on) == 0);
    KT_CHECK(memcmp(on, off, sizeof on) == 0);
    kiln_fusion_set_enabled(was);
}

/* softmax and log_softmax composed from primitives: the exp prologue runs inside the sum's
 * pass, bit-identical to the unfused ops. */
static void softmaxes(int64_t r, int64_t c, float *sm, float *lsm) {
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(r, c), 21);
    kiln_tensor m = kiln_max_dims(kiln_ref(x), KILN_DIMS(-1), true);
    kiln_tensor e = kiln_exp(kiln_sub(kiln_ref(x), kiln_ref(m)));
    kiln_tensor s = kiln_sum_dims(kiln_ref(e), KILN_DIMS(-1), true);
    KT_CHECK(kiln_into_data(kiln_div(e, kiln_ref(s)), sm, sizeof(float) * (size_t)(r * c)) == KILN_OK);
    kiln_tensor lse = kiln_log(kiln_sum_dims(kiln_exp(kiln_sub(kiln_ref(x), kiln_ref(m))), KILN_DIMS(-1), true));
    KT_CHECK(kiln_into_data(kiln_sub(kiln_sub(x, m), lse), lsm, sizeof(float) * (size_t)(r * c)) == KILN_OK);
    kiln_release(s);
}

KT_TEST(reduction_prologue_is_bit_identical) {
    enum { MAXN = 3 * 5000 };
    static float sm_on[MAXN], sm_off[MAXN], lsm_on[MAXN], lsm_off[MAXN];
    const int64_t shapes[][2] = {{R, C}, {3, 5000} /* rows longer than a tile */};
    bool was = kiln_fusion_enabled();
    for (int k = 0; k < 2; k++) {
        int64_t r = shapes[k][0], c = shapes[k][1];
        kiln_fusion_set_enabled(false);
        softmaxes(r, c, sm_off, lsm_off);
        kiln_fusion_set_enabled(true);
        kiln__fusion_stats_reset();
        softmaxes(r, c, sm_on, lsm_on);
        if (kiln_engine_is_async()) {
            kiln__fusion_stats st = kiln__fusion_stats_get();
            KT_CHECK_MSG(st.reductions >= 2, "%lld groups ended in a reduction", (long long)st.reductions);
        }
        KT_CHECK(memcmp(sm_on, sm_off, sizeof(float) * (size_t)(r * c)) == 0);
        KT_CHECK(memcmp(lsm_on, lsm_off, sizeof(float) * (size_t)(r * c)) == 0);
    }
    kiln_fusion_set_enabled(was);
}

/* A long chain splits into full windows (16 ops), a change of shape ends a group, and
 * turning fusion off mid-chain hands the held ops over: the value is still right. */
KT_TEST(long_chain_and_toggle_mid_chain) {
    bool was = kiln_fusion_enabled();
    kiln_fusion_set_enabled(true);
    kiln__fusion_stats_reset();
    kiln_tensor x = kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE(4, 300));
    for (int i = 0; i < 40; i++) x = kiln_add_scalar(x, 1.0);
    kiln_fusion_set_enabled(false);
    for (int i = 0; i < 3; i++) x = kiln_add_scalar(x, 1.0);
    kiln_fusion_set_enabled(true);
    x = kiln_sum_dims(kiln_mul_scalar(x, 2.0), KILN_DIMS(-1), true); /* [4, 1] */
    x = kiln_add_scalar(kiln_mul_scalar(x, 0.5), 1.0);                /* a new shape: a new group */
    double v[4];
    KT_CHECK(kiln_into_data(x, v, sizeof v) == KILN_OK);
    for (int i = 0; i < 4; i++) KT_CHECK(v[i] == 43.0 * 300 + 1);
    if (kiln_engine_is_async()) {
        kiln__fusion_stats st = kiln__fusion_stats_get();
        KT_CHECK_MSG(st.groups >= 4 && st.ops_fused >= 44, "groups %lld, ops %lld", (long long)st.groups,
                     (long long)st.ops_fused);
    }
    kiln_fusion_set_enabled(was);
}

KT_TEST(profiler_names_the_fused_ops) {
    if (!kiln_engine_is_async() || !kiln_fusion_enabled()) return;
    kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(500));
    KT_CHECK(kiln_sync() == KILN_OK);
    kiln_profiler_start();
    int line = __LINE__ + 1;
    x = kiln_add_scalar(kiln_exp(x), 1.0);
    KT_CHECK(kiln_sync() == KILN_OK);
    kiln_release(x);
    kiln_profiler_stop();
    size_t n = kiln_profiler_events(NULL, 0);
    kiln_profile_event *ev = malloc(sizeof *ev * (n ? n : 1));
    kiln_profiler_events(ev, n);
    char want[128];
    snprintf(want, sizeof want, "fused[kiln_exp@test_fusion.c:%d kiln_add_scalar@test_fusion.c:%d]", line, line);
    bool found = false;
    for (size_t i = 0; i < n; i++) found |= strcmp(ev[i].op, want) == 0 && strcmp(ev[i].kernel, "FUSED") == 0;
    KT_CHECK_MSG(found, "no event named %s among %zu", want, n);
    free(ev);
}

int main(void) {
    kt_mem_begin();
    /* small tensors on an idle stream would run at dispatch, each alone: these tests are of groups */
    kiln__fusion_set_fuse_tiny(1);
    KT_RUN(fused_chain_is_bit_identical);
    KT_RUN(in_place_chain_and_kept_ref);
    KT_RUN(broadcast_read_of_written_storage);
    KT_RUN(poisoned_input_names_the_first_failure);
    KT_RUN(kernel_failure_inside_a_group_names_its_op);
    KT_RUN(backward_is_bit_identical);
    KT_RUN(reduction_prologue_is_bit_identical);
    KT_RUN(long_chain_and_toggle_mid_chain);
    KT_RUN(profiler_names_the_fused_ops);
    KT_MEM_CHECK();
    return kt_finish();
}
