/* The fused kernel's fast path for f32 chains (see fused-impl.h): a group whose every value is
 * f32, whose inputs are dense or one value, and whose ops are among the simple ones below is
 * compiled to a short list of instructions over registers, evaluated a chunk of a few vectors
 * at a time (fused_vec_body.h, once per ISA). The block path ran each op over a 512-element
 * block in turn, so a block's loads from memory and its arithmetic took turns; here they
 * overlap, and outputs larger than the caches are written with streaming stores (no read of
 * the lines they overwrite). Bits are those of the block path: the same IEEE operation per op. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/fused-impl.h"
#include "backend/cpu/vmath.h"

_Atomic int64_t kiln__fused_stream_bytes;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

static int64_t stream_bytes(void) {
    int64_t b = atomic_load_explicit(&kiln__fused_stream_bytes, memory_order_relaxed);
    if (b > 0) return b;
#ifdef _SC_LEVEL3_CACHE_SIZE
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE); /* glibc: 0 when the kernel does not say */
#else
    long l3 = 0;
#endif
    b = l3 > 0 ? (int64_t)l3 / 2 : (int64_t)32 << 20;
    int64_t none = 0; /* a test's value wins over this one */
    atomic_compare_exchange_strong(&kiln__fused_stream_bytes, &none, b);
    return atomic_load_explicit(&kiln__fused_stream_bytes, memory_order_relaxed);
}

static int vec_op(kiln__opcode code) {
    switch (code) {
    case KILN__OP_ADD: return KILN__VEC_ADD;
    case KILN__OP_SUB: return KILN__VEC_SUB;
    case KILN__OP_MUL: return KILN__VEC_MUL;
    case KILN__OP_DIV: return KILN__VEC_DIV;
    case KILN__OP_MAXIMUM: return KILN__VEC_MAX;
    case KILN__OP_MINIMUM: return KILN__VEC_MIN;
    case KILN__OP_RELU_BACKWARD: return KILN__VEC_RELU_BWD;
    case KILN__OP_NEG: return KILN__VEC_NEG;
    case KILN__OP_ABS: return KILN__VEC_ABS;
    case KILN__OP_RELU: return KILN__VEC_RELU;
    case KILN__OP_SQRT: return KILN__VEC_SQRT;
    case KILN__OP_CLAMP: return KILN__VEC_CLAMP;
    default: return -1;
    }
}

/* A value broadcast to every lane, in its own register (a constant, a one-value input, a
 * clamp bound); false when the register file is full. */
static bool add_bcast(kiln__fused_vec *v, int reg, float value) {
    if (v->n_bcast >= KILN__EXPR_MAX_NODES) return false;
    v->bcast[v->n_bcast].node = (uint8_t)reg, v->bcast[v->n_bcast].value = value;
    v->n_bcast++;
    return true;
}

/* Registers past the IR's nodes hold the clamp bounds. */
static bool compile_op(kiln__fused_vec *v, const kiln__expr_node *n, int i, int *spare) {
    int op = vec_op(n->code);
    if (op < 0 || n->n_args != (op >= KILN__VEC_NEG ? 1 : 2)) return false;
    kiln__vec_ins c = {.op = (uint8_t)op, .d = (uint8_t)i, .a = (uint8_t)n->arg[0]};
    c.b = (uint8_t)(n->n_args > 1 ? n->arg[1] : n->arg[0]);
    if (op == KILN__VEC_CLAMP) { /* the portable loop's bounds: NaN means none */
        if (*spare + 2 > KILN__VEC_REGS) return false;
        c.b = (uint8_t)(*spare)++, c.c = (uint8_t)(*spare)++;
        if (!add_bcast(v, c.b, isnan(n->param[0]) ? -INFINITY : (float)n->param[0]) ||
            !add_bcast(v, c.c, isnan(n->param[1]) ? INFINITY : (float)n->param[1]))
            return false;
    }
    v->code[v->n_code++] = c;
    return true;
}

static bool compile(kiln__fused_vec *v, const kiln__fused_plan *p) {
    const kiln__fused *g = p->g;
    const kiln__expr *e = &g->expr;
    int spare = e->n_nodes;
    if (g->row > 0) return false; /* a reduction takes whole rows: the block path */
    for (int i = 0; i < e->n_nodes; i++) {
        const kiln__expr_node *n = &e->node[i];
        if (n->dtype != KILN_F32) return false;
        switch (n->kind) {
        case KILN__EXPR_CONST: {
            float f;
            memcpy(&f, p->konst[i], sizeof f);
            if (!add_bcast(v, i, f)) return false;
            break;
        }
        case KILN__EXPR_LOAD: {
            const kiln__view *in = &g->input[n->input];
            float *base = (float *)in->storage->data + in->offset;
            if (p->load_mode[n->input] == KILN__LOAD_SCALAR) {
                /* (read now, at planning: a matmul group's input 0 is written after that) */
                if ((g->matmul && n->input == 0) || !add_bcast(v, i, *base)) return false;
            } else if (p->load_mode[n->input] == KILN__LOAD_DENSE) {
                v->in[n->input] = base;
                v->code[v->n_code++] = (kiln__vec_ins){.op = KILN__VEC_LOAD, .d = (uint8_t)i, .a = (uint8_t)n->input};
            } else {
                return false;
            }
            break;
        }
        case KILN__EXPR_OP:
            if (!compile_op(v, n, i, &spare)) return false;
            break;
        default: return false;
        }
    }
    int64_t bytes = 0;
    uintptr_t align = 0;
    for (int s = 0; s < e->n_stores; s++) {
        const kiln__view *o = &g->output[e->store[s].output];
        v->out[s] = (float *)o->storage->data + o->offset;
        v->store_node[s] = (uint8_t)e->store[s].node;
        align |= (uintptr_t)v->out[s];
        bytes += p->numel * 4;
    }
    v->n_store = e->n_stores;
    v->stream = bytes >= stream_bytes() && align % 64 == 0;
    return true;
}

/* Vectors per chunk. chain8 (bench_elementwise, CPU ms, AVX-512, medians of 3 on a loaded
 * machine): 2 -> 80, 4 -> 71, 8 -> 68; a chunk's values (a few KiB) stay in L1. */
#define U 8

#define TARGET __attribute__((target("avx2")))
#define V __m256
#define W 8
#define NAME(x) x##_avx2
#define VP(x) _mm256_##x
#define REG "x"
#define OR _mm256_or_ps
#define GT(a, b) _mm256_cmp_ps(a, b, _CMP_GT_OQ)
#define LT(a, b) _mm256_cmp_ps(a, b, _CMP_LT_OQ)
#define ISNAN(a) _mm256_cmp_ps(a, a, _CMP_UNORD_Q)
#define SEL(a, b, m) _mm256_blendv_ps(a, b, m)
#include "backend/cpu/fused_vec_body.h"

#define TARGET __attribute__((target("avx512f,avx512dq")))
#define V __m512
#define W 16
#define NAME(x) x##_avx512
#define VP(x) _mm512_##x
#define REG "v"
#define OR(a, b) ((__mmask16)((a) | (b)))
#define GT(a, b) _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ)
#define LT(a, b) _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ)
#define ISNAN(a) _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q)
#define SEL(a, b, m) _mm512_mask_blend_ps(m, a, b)
#include "backend/cpu/fused_vec_body.h"

bool kiln__fused_vec_make(kiln__fused_vec *v, const kiln__fused_plan *p) {
    const char *isa = kiln__vmath_isa(); /* KILN_ISA=scalar: the block path's portable loops */
    memset(v, 0, sizeof *v);
    bool avx512 = strcmp(isa, "avx512") == 0;
    /* vmath's avx512 asks for AVX512F only; xor and andnot of floats are AVX512DQ's */
    if (avx512 && __builtin_cpu_supports("avx512dq")) v->run = run_avx512, v->chunk = U * 16;
    else if (avx512 || strcmp(isa, "avx2") == 0) v->run = run_avx2, v->chunk = U * 8;
    else return false;
    if (!compile(v, p)) {
        v->run = NULL;
        return false;
    }
    return true;
}
#else
bool kiln__fused_vec_make(kiln__fused_vec *v, const kiln__fused_plan *p) {
    (void)p;
    memset(v, 0, sizeof *v);
    return false;
}
#endif
