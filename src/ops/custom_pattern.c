/* A registered op's pattern (kiln_custom_op_def.pattern): the public nodes turned into the
 * engine's (engine/substitute.h), and the builder that makes a matched composition one call of
 * the op, when its shape rule and `supports` accept what the composition reads. */
#include <stdio.h>
#include <string.h>

#include "engine/substitute.h"
#include "ops/custom_op-impl.h"

static bool opcode_of(kiln_pattern_op op, kiln__opcode *code, int *n_in, uint8_t *flags) {
    static const struct {
        kiln__opcode code;
        int8_t n_in;
        uint8_t flags;
    } table[] = {
        [KILN_PATTERN_ADD] = {KILN__OP_ADD, 2, 0},         [KILN_PATTERN_SUB] = {KILN__OP_SUB, 2, 0},
        [KILN_PATTERN_MUL] = {KILN__OP_MUL, 2, 0},         [KILN_PATTERN_DIV] = {KILN__OP_DIV, 2, 0},
        [KILN_PATTERN_NEG] = {KILN__OP_NEG, 1, 0},         [KILN_PATTERN_EXP] = {KILN__OP_EXP, 1, 0},
        [KILN_PATTERN_LOG] = {KILN__OP_LOG, 1, 0},         [KILN_PATTERN_SQRT] = {KILN__OP_SQRT, 1, 0},
        [KILN_PATTERN_RSQRT] = {KILN__OP_RSQRT, 1, 0},     [KILN_PATTERN_TANH] = {KILN__OP_TANH, 1, 0},
        [KILN_PATTERN_SIGMOID] = {KILN__OP_SIGMOID, 1, 0}, [KILN_PATTERN_RELU] = {KILN__OP_RELU, 1, 0},
        [KILN_PATTERN_MEAN_LAST] = {KILN__OP_MEAN, 1, KILN__PAT_LAST_DIM},
        [KILN_PATTERN_SUM_LAST] = {KILN__OP_SUM, 1, KILN__PAT_LAST_DIM},
        [KILN_PATTERN_MAX_LAST] = {KILN__OP_MAX, 1, KILN__PAT_LAST_DIM},
        [KILN_PATTERN_SOFTMAX_LAST] = {KILN__OP_SOFTMAX, 1, KILN__PAT_LAST_DIM},
        [KILN_PATTERN_MATMUL] = {KILN__OP_MATMUL, 2, 0},
    };
    if ((unsigned)op >= sizeof table / sizeof table[0] || table[op].n_in == 0) return false;
    *code = table[op].code, *n_in = table[op].n_in, *flags = table[op].flags;
    return true;
}

static bool build_custom(const kiln__subst_match *m, kiln__op *rep, const void *ctx) {
    const kiln_custom_op *op = ctx;
    const kiln__view *out = &m->root->out[0];
    int n = op->def.n_inputs;
    kiln_custom_meta metas[KILN_CUSTOM_MAX_INPUTS], meta = {.dtype = out->dtype, .ndim = -1};
    for (int i = 0; i < n; i++) {
        const kiln__view *v = &m->slot[i];
        if (!v->storage) { /* a number (KILN_PATTERN_NUMBER): run_cpu gives it as a 0-d f64 */
            metas[i] = (kiln_custom_meta){.dtype = KILN_F64, .ndim = 0};
            continue;
        }
        if (v->storage->device != KILN_CPU) return false;
        metas[i] = (kiln_custom_meta){.dtype = v->dtype, .ndim = v->ndim};
        memcpy(metas[i].shape, v->shape, sizeof metas[i].shape);
    }
    /* the op must give exactly the composition's result */
    if (op->def.shape(n, metas, &meta, op->def.user_data) != KILN_OK || meta.dtype != out->dtype || meta.ndim != out->ndim)
        return false;
    for (int d = 0; d < out->ndim; d++)
        if (meta.shape[d] != out->shape[d]) return false;
    if (!kiln__view_is_contiguous(out)) return false;
    if (op->def.supports && !op->def.supports(n, metas, op->def.user_data)) return false;
    rep->code = KILN__OP_CUSTOM;
    rep->name = op->name;
    rep->n_in = (int8_t)n;
    for (int i = 0; i < n; i++) rep->in[i] = m->slot[i];
    rep->p.i[0] = (int64_t)(uintptr_t)op;
    return true;
}

bool kiln__custom_pattern_make(const kiln_custom_op *op, kiln__pattern *p, char *why, size_t size) {
    const kiln_custom_op_def *def = &op->def;
    memset(p, 0, sizeof *p);
    p->name = op->name;
    p->build = build_custom;
    p->ctx = op;
    p->n_slots = def->n_inputs;
    p->in_place_slots = def->in_place ? 1u : 0u;
    if (def->pattern_len < 1 || def->pattern_len > KILN_PATTERN_MAX_NODES) {
        snprintf(why, size, "pattern of %s: %d nodes (1..%d allowed)", op->name, def->pattern_len, KILN_PATTERN_MAX_NODES);
        return false;
    }
    p->n_nodes = def->pattern_len;
    uint32_t tensor_slots = 0;
    for (int j = 0; j < def->pattern_len; j++) {
        const kiln_pattern_node *in = &def->pattern[j];
        kiln__pat_node *nd = &p->nodes[j];
        int n_in;
        if (!opcode_of(in->op, &nd->code, &n_in, &nd->flags)) {
            snprintf(why, size, "pattern of %s: node %d has an unknown op %d", op->name, j, (int)in->op);
            return false;
        }
        nd->n_in = (int8_t)n_in;
        for (int k = 0; k < n_in; k++) {
            int r = in->in[k];
            if (r == KILN_PATTERN_CONSTANT && k == 1) {
                nd->flags |= KILN__PAT_CONST;
                nd->constant = in->constant;
                continue;
            }
            int number = KILN_PATTERN_NUMBER(0) - r; /* the input a number becomes, if r is one */
            if (k == 1 && n_in == 2 && number >= 0 && number < KILN__PAT_MAX_SLOTS) {
                p->scalar_slots |= 1u << number;
                nd->in[k] = (int8_t)KILN__PAT_SLOT(number);
                continue;
            }
            if (r == KILN_PATTERN_CONSTANT || r < -KILN__PAT_MAX_SLOTS || r >= KILN__PAT_MAX_NODES) {
                snprintf(why, size, "pattern of %s: node %d's input %d is %d (an input, an earlier node, or a binary op's "
                         "second operand KILN_PATTERN_CONSTANT or KILN_PATTERN_NUMBER)", op->name, j, k, r);
                return false;
            }
            if (r < 0) tensor_slots |= 1u << (-1 - r);
            nd->in[k] = (int8_t)r;
        }
    }
    for (int k = 0; k < p->n_slots; k++)
        if ((p->scalar_slots & tensor_slots) >> k & 1) {
            snprintf(why, size, "pattern of %s: input %d is a number in one node (KILN_PATTERN_NUMBER) and a tensor in another",
                     op->name, k);
            return false;
        }
    return kiln__subst_check(p, why, size);
}
