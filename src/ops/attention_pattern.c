/* kiln's fused attention (ATTENTION, src/backend/cpu/attention.c) as a substitution
 * (engine/substitute.h) for the composition users write, named fused_attention in the profiler:
 *
 *   s = matmul(q, transpose(k, -2, -1))  s = s * scale (or s / d)  p = softmax(s, -1)  o = matmul(p, v)
 *
 * without a mask (a masked one is kiln_scaled_dot_product_attention's), f32 or f64 on the CPU.
 * Registered with layer norm's by the first matmul or mean (ops/builtin_patterns.c). */
#include <math.h>

#include "engine/substitute.h"
#include "ops/ops-impl.h"

enum { Q, KT, SCALE, V };

/* ctx: 1 when the pattern divides by the scalar instead of multiplying */
static bool build(const kiln__subst_match *m, kiln__op *rep, const void *ctx) {
    const kiln__view *out = &m->root->out[0];
    int nd = out->ndim;
    double s = m->slot[SCALE].scalar;
    if (ctx) s = 1.0 / s;
    if ((out->dtype != KILN_F32 && out->dtype != KILN_F64) || nd < 2 || !isfinite(s)) return false;
    const int slots[3] = {Q, KT, V};
    for (int i = 0; i < 3; i++) {
        const kiln__view *v = &m->slot[slots[i]];
        if (v->dtype != out->dtype || v->ndim != nd || v->storage->device != KILN_CPU) return false;
        rep->in[i] = *v;
    }
    kiln__view *k = &rep->in[1]; /* k^T read as k: swap its last two dims back */
    int64_t t = k->shape[nd - 1];
    k->shape[nd - 1] = k->shape[nd - 2], k->shape[nd - 2] = t;
    t = k->strides[nd - 1];
    k->strides[nd - 1] = k->strides[nd - 2], k->strides[nd - 2] = t;
    rep->code = KILN__OP_ATTENTION;
    rep->name = "fused_attention";
    rep->n_in = 3;
    rep->p.f[0] = s;
    rep->pi[0] = 0; /* not causal */
    rep->pi[1] = 0; /* no mask */
    return true;
}

#define SLOT KILN__PAT_SLOT
void kiln__attention_patterns_register(void) {
    for (int divide = 0; divide <= 1; divide++) {
        kiln__pattern p = {.name = "fused_attention", .n_nodes = 4, .n_slots = 4, .scalar_slots = 1u << SCALE,
                           .build = build, .ctx = divide ? (const void *)1 : NULL,
                           .nodes = {
                               {KILN__OP_MATMUL, 2, {SLOT(Q), SLOT(KT)}, 0, 0},
                               {divide ? KILN__OP_DIV : KILN__OP_MUL, 2, {0, SLOT(SCALE)}, 0, 0},
                               {KILN__OP_SOFTMAX, 1, {1}, KILN__PAT_LAST_DIM, 0},
                               {KILN__OP_MATMUL, 2, {2, SLOT(V)}, 0, 0},
                           }};
        char why[256];
        /* (a static pattern fails only out of memory, and then kiln runs what was written) */
        if (!ALWAYS(kiln__subst_register(&p, why, sizeof why))) break;
    }
}
