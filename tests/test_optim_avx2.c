/* Adam's AVX2 f32 update (backend/cpu/optim_avx2.c) against the portable loop's expressions
 * bit for bit: lengths with and without a tail past the last block of 8, every decay mode
 * (none, L2, decoupled), the first step (moments from zero) and a later one, on values from
 * tiny to large; and the whole ADAM_UPDATE op through an optimizer step with KILN_ISA's
 * vector path against the same step forced to the portable path (kiln__vmath_force_isa). */
#include <math.h>
#include <string.h>

#include <kiln.h>

#include "backend/cpu/optim_avx2.h"
#include "backend/cpu/vmath.h"
#include "kiln_test.h"

static uint64_t lcg = 7;

/* Signed values spread over many binades, some exact zeros. */
static float next_value(void) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    unsigned r = (unsigned)(lcg >> 33);
    if (r % 17 == 0) return 0.0f;
    float mant = (float)(r % 100000) / 100000.0f + 0.5f;
    return ((r >> 20) & 1 ? -mant : mant) * ldexpf(1.0f, (int)((r >> 21) % 24) - 16);
}

/* optim.c's ADAM_MOMENTS and update (the portable loop), element by element, in float */
static void ref_adam(int64_t n, float *p, float *m, float *v, const float *g, const kiln__adam_f32_consts *c,
                     int decay, bool first) {
    for (int64_t i = 0; i < n; i++) {
        float x = p[i], d = g[i];
        if (decay == 1) d = d + c->k * x;
        if (decay == 2) x = x * c->k;
        float m0 = first ? 0.0f : m[i], v0 = first ? 0.0f : v[i];
        float m1 = m0 + c->w1 * (d - m0);
        float v1 = v0 * c->b2 + c->w2 * d * d;
        m[i] = m1;
        v[i] = v1;
        p[i] = x - c->step * (m1 / (sqrtf(v1) / c->bc2 + c->eps));
    }
}

KT_TEST(kernel_matches_the_portable_expressions) {
    if (!kiln__adam_f32_avx2_ok()) {
        printf("no AVX2 on this CPU (or KILN_ISA=scalar): the kernel is not called, nothing to compare\n");
        return;
    }
    enum { MAX_N = 203 };
    static const int64_t lengths[] = {1, 7, 8, 9, 64, 203};
    const kiln__adam_f32_consts consts[] = {
        {1e-3f, 0.1f, 0.999f, 0.001f, 1e-8f, 0.0316227766f, 0.0f},
        {0.05f, 0.2f, 0.9f, 0.1f, 1e-6f, 0.75f, 0.01f},
        {1e-3f, 0.1f, 0.999f, 0.001f, 1e-8f, 1.0f, 0.9999f},
    };
    float p[2][MAX_N], m[2][MAX_N], v[2][MAX_N], g[MAX_N];
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++)
        for (int decay = 0; decay < 3; decay++)
            for (int first = 0; first < 2; first++) {
                int64_t n = lengths[li];
                const kiln__adam_f32_consts *c = &consts[decay];
                for (int64_t i = 0; i < n; i++) {
                    p[0][i] = p[1][i] = next_value();
                    m[0][i] = m[1][i] = next_value() * 0.1f;
                    v[0][i] = v[1][i] = fabsf(next_value()) * 0.01f;
                    g[i] = next_value();
                }
                for (int step = 0; step < 3; step++) { /* the state carried over steps */
                    bool f = first && step == 0;
                    kiln__adam_f32_avx2(n, p[0], m[0], v[0], g, c, decay, f);
                    ref_adam(n, p[1], m[1], v[1], g, c, decay, f);
                }
                KT_CHECK_MSG(memcmp(p[0], p[1], sizeof(float) * (size_t)n) == 0 &&
                                 memcmp(m[0], m[1], sizeof(float) * (size_t)n) == 0 &&
                                 memcmp(v[0], v[1], sizeof(float) * (size_t)n) == 0,
                             "n %lld decay %d first %d: bits differ", (long long)n, decay, first);
            }
}

/* Three Adam (or AdamW) steps on w [29, 37] and b [29] (a tail past 8 in every run) with
 * gradients G: loss = sum(w * Gw) + sum(b * Gb), whose gradients are the G exactly whatever
 * the ISA (so only the update's path can differ); the parameters' bits after them. */
static void three_steps(kiln_adam_options o, float *w_out, float *b_out) {
    kiln_module *lin = kiln_linear_new(37, 29, true, 5);
    kiln_optimizer *opt = kiln_adam_new(lin, o);
    KT_CHECK(lin && opt);
    if (!lin || !opt) return;
    kiln_param params[2];
    KT_CHECK(kiln_module_params(lin, params, 2) == 2);
    for (int t = 0; t < 3; t++) {
        static float gw[29 * 37], gb[29];
        for (int i = 0; i < 29 * 37; i++) gw[i] = next_value();
        for (int i = 0; i < 29; i++) gb[i] = next_value();
        kiln_tensor lw = kiln_sum(kiln_mul(kiln_ref(*params[0].slot), kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(29, 37), gw)));
        kiln_tensor lb = kiln_sum(kiln_mul(kiln_ref(*params[1].slot), kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(29), gb)));
        kiln_grads *g = NULL;
        KT_CHECK(kiln_backward(kiln_add(lw, lb), &g) == KILN_OK);
        KT_CHECK(kiln_optimizer_step(opt, g) == KILN_OK);
        kiln_grads_free(g);
    }
    KT_CHECK(kiln_into_data(kiln_ref(*params[0].slot), w_out, sizeof(float) * 37 * 29) == KILN_OK);
    KT_CHECK(kiln_into_data(kiln_ref(*params[1].slot), b_out, sizeof(float) * 29) == KILN_OK);
    kiln_optimizer_free(opt);
    kiln_module_free(lin);
}

KT_TEST(the_op_gives_the_portable_paths_bits) {
    kiln_adam_options opts[3] = {kiln_adam_defaults(), kiln_adam_defaults(), kiln_adamw_defaults()};
    opts[1].weight_decay = 0.05;
    for (int k = 0; k < 3; k++) {
        static float w[2][37 * 29], b[2][29];
        uint64_t seed = lcg;
        three_steps(opts[k], w[0], b[0]);
        KT_CHECK(kiln__vmath_force_isa("scalar") == 0);
        lcg = seed; /* the same inputs */
        three_steps(opts[k], w[1], b[1]);
        KT_CHECK(kiln__vmath_force_isa(NULL) == 0);
        KT_CHECK_MSG(memcmp(w[0], w[1], sizeof w[0]) == 0 && memcmp(b[0], b[1], sizeof b[0]) == 0,
                     "options %d: the vector path's parameters differ from the portable path's", k);
    }
}

int main(void) {
    kt_mem_begin();
    KT_RUN(kernel_matches_the_portable_expressions);
    KT_RUN(the_op_gives_the_portable_paths_bits);
    KT_MEM_CHECK();
    return kt_finish();
}
