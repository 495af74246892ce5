/* kiln's own layer norm as a substitution (engine/substitute.h): the composition kiln_layer_norm
 * queues when untracked (src/nn/norm.c), and the same written by hand, is replaced by one fused
 * kernel (src/backend/cpu/layer_norm.c), named fused_layer_norm in the profiler:
 *
 *   mean = mean(x, last)  xc = x - mean  var = mean(xc * xc, last)  y = xc * rsqrt(var + eps)
 *   [y = y * weight]  [y = y + bias]
 *
 * Registered with attention's by the first mean or matmul (ops/builtin_patterns.c). */
#include <math.h>

#include "backend/cpu/layer_norm.h"
#include "engine/substitute.h"
#include "ir/custom.h"
#include "ops/ops-impl.h"

enum { X, EPS, WEIGHT, BIAS };

static kiln_status run_fused_layer_norm(const kiln__op *op, int threads) {
    (void)threads; /* (the kernel splits rows over kiln's pool itself) */
    return kiln__cpu_layer_norm(op);
}

static const kiln__custom_head fused_layer_norm_head = {.run_cpu = run_fused_layer_norm};

static bool same_shape(const kiln__view *a, const kiln__view *b) {
    if (a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

/* ctx: the number of affine inputs (0, 1 weight, 2 weight and bias) */
static bool build(const kiln__subst_match *m, kiln__op *rep, const void *ctx) {
    int affine = (int)(intptr_t)ctx;
    const kiln__view *out = &m->root->out[0], *x = &m->slot[X];
    double eps = m->slot[EPS].scalar;
    if ((out->dtype != KILN_F32 && out->dtype != KILN_F64) || out->ndim < 1 || !kiln__view_is_contiguous(out)) return false;
    if (!(eps >= 0 && isfinite(eps))) return false;
    rep->n_in = (int8_t)(1 + affine);
    for (int i = 0; i < rep->n_in; i++) {
        const kiln__view *v = i == 0 ? x : &m->slot[i == 1 ? WEIGHT : BIAS];
        if (v->dtype != out->dtype || !same_shape(v, out) || v->storage->device != KILN_CPU) return false;
        rep->in[i] = *v;
    }
    rep->code = KILN__OP_CUSTOM;
    rep->name = "fused_layer_norm";
    rep->p.i[0] = (int64_t)(uintptr_t)&fused_layer_norm_head;
    rep->p.f[1] = eps;
    rep->pi[0] = affine; /* bit 1 weight, bit 2 bias: 0, 1, 3 */
    if (affine == 2) rep->pi[0] = 3;
    return true;
}

#define SLOT KILN__PAT_SLOT
static const kiln__pat_node core[] = {
    {KILN__OP_MEAN, 1, {SLOT(X)}, KILN__PAT_LAST_DIM, 0},
    {KILN__OP_SUB, 2, {SLOT(X), 0}, 0, 0},
    {KILN__OP_MUL, 2, {1, 1}, 0, 0},
    {KILN__OP_MEAN, 1, {2}, KILN__PAT_LAST_DIM, 0},
    {KILN__OP_ADD, 2, {3, SLOT(EPS)}, 0, 0},
    {KILN__OP_RSQRT, 1, {4}, 0, 0},
    {KILN__OP_MUL, 2, {1, 5}, 0, 0},
    {KILN__OP_MUL, 2, {6, SLOT(WEIGHT)}, 0, 0},
    {KILN__OP_ADD, 2, {7, SLOT(BIAS)}, 0, 0},
};

void kiln__layer_norm_patterns_register(void) {
    for (int affine = 0; affine <= 2; affine++) {
        kiln__pattern p = {.name = "fused_layer_norm", .n_nodes = 7 + affine, .n_slots = 2 + affine,
                           .scalar_slots = 1u << EPS, .in_place_slots = 1u << X, .build = build,
                           .ctx = (const void *)(intptr_t)affine};
        for (int j = 0; j < p.n_nodes; j++) p.nodes[j] = core[j];
        char why[256];
        /* (a static pattern fails only out of memory, and then kiln runs what was written) */
        if (!ALWAYS(kiln__subst_register(&p, why, sizeof why))) break;
    }
}
