/* The register-level evaluator of fused_vec.c, written once and included once per ISA (AVX2,
 * AVX-512) with these defined: TARGET (the function attribute), V (the vector type), W (floats
 * per vector), U (vectors per chunk), NAME(x) (a per-ISA name), VP(x) (the ISA's intrinsic
 * _mm256_x or _mm512_x), REG (the asm constraint of a vector register), and the compares and
 * selects (GT, LT, ISNAN, OR of two masks; SEL(a, b, m): b where m is set, a elsewhere). Each instruction runs over U vectors (one chunk); the values live in a
 * register file indexed by IR node, which the CPU keeps in L1 (a few KiB), so a chunk's whole
 * expression runs between its loads and its stores and the out-of-order core overlaps one
 * chunk's memory traffic with another's arithmetic. Every op is the same IEEE operation, with
 * the same NaN and signed-zero selects, as the f32 loop the unfused kernel runs. */

/* a + b and a * b with a as the instruction's first source: when both are NaN, x86 returns
 * the first source's payload, and the unfused loops compute x + y with x first. The plain
 * intrinsics let gcc swap the operands of a commutative op (it does, to fold a load from the
 * register file), which flipped the sign of a NaN sum. */
static inline TARGET V NAME(add)(V a, V b) {
    V r;
    __asm__("vaddps %2, %1, %0" : "=" REG(r) : REG(a), REG "m"(b));
    return r;
}
static inline TARGET V NAME(mul)(V a, V b) {
    V r;
    __asm__("vmulps %2, %1, %0" : "=" REG(r) : REG(a), REG "m"(b));
    return r;
}

static TARGET void NAME(run)(const kiln__fused_vec *v, int64_t t0, int64_t n) {
    V r[KILN__VEC_REGS][U];
    for (int k = 0; k < v->n_bcast; k++)
        for (int u = 0; u < U; u++) r[v->bcast[k].node][u] = VP(set1_ps)(v->bcast[k].value);
    const V zero = VP(set1_ps)(0.0f), sign = VP(set1_ps)(-0.0f);
    for (int64_t t = t0; t + U * W <= t0 + n; t += U * W) {
        for (int j = 0; j < v->n_code; j++) {
            const kiln__vec_ins *c = &v->code[j];
            V *d = r[c->d], *a = r[c->a], *b = r[c->b];
            switch (c->op) {
            case KILN__VEC_LOAD: {
                const float *s = v->in[c->a] + t;
                for (int u = 0; u < U; u++) d[u] = VP(loadu_ps)(s + u * W);
                break;
            }
            case KILN__VEC_ADD: for (int u = 0; u < U; u++) d[u] = NAME(add)(a[u], b[u]); break;
            case KILN__VEC_SUB: for (int u = 0; u < U; u++) d[u] = VP(sub_ps)(a[u], b[u]); break;
            case KILN__VEC_MUL: for (int u = 0; u < U; u++) d[u] = NAME(mul)(a[u], b[u]); break;
            case KILN__VEC_DIV: for (int u = 0; u < U; u++) d[u] = VP(div_ps)(a[u], b[u]); break;
            /* (x > y || x != x) ? x : y, and (x < y || x != x) ? x : y */
            case KILN__VEC_MAX: for (int u = 0; u < U; u++) d[u] = SEL(b[u], a[u], OR(GT(a[u], b[u]), ISNAN(a[u]))); break;
            case KILN__VEC_MIN: for (int u = 0; u < U; u++) d[u] = SEL(b[u], a[u], OR(LT(a[u], b[u]), ISNAN(a[u]))); break;
            /* y > 0 ? x : 0 */
            case KILN__VEC_RELU_BWD: for (int u = 0; u < U; u++) d[u] = SEL(zero, a[u], GT(b[u], zero)); break;
            case KILN__VEC_NEG: for (int u = 0; u < U; u++) d[u] = VP(xor_ps)(a[u], sign); break;
            case KILN__VEC_ABS: for (int u = 0; u < U; u++) d[u] = VP(andnot_ps)(sign, a[u]); break;
            /* x < 0 ? 0 : x */
            case KILN__VEC_RELU: for (int u = 0; u < U; u++) d[u] = SEL(a[u], zero, LT(a[u], zero)); break;
            case KILN__VEC_SQRT: for (int u = 0; u < U; u++) d[u] = VP(sqrt_ps)(a[u]); break;
            /* x < lo ? lo : (x > hi ? hi : x), lo and hi in registers b and c */
            case KILN__VEC_CLAMP: {
                const V *h = r[c->c];
                for (int u = 0; u < U; u++) d[u] = SEL(SEL(a[u], h[u], GT(a[u], h[u])), b[u], LT(a[u], b[u]));
                break;
            }
            default: break;
            }
        }
        /* after every load of the chunk: an output may be an input's storage (in place) */
        for (int s = 0; s < v->n_store; s++) {
            float *o = v->out[s] + t;
            const V *x = r[v->store_node[s]];
            if (v->stream)
                for (int u = 0; u < U; u++) VP(stream_ps)(o + u * W, x[u]);
            else
                for (int u = 0; u < U; u++) VP(storeu_ps)(o + u * W, x[u]);
        }
    }
    if (v->stream) _mm_sfence(); /* streamed stores are visible before the task says it is done */
}

#undef TARGET
#undef V
#undef W
#undef NAME
#undef VP
#undef REG
#undef OR
#undef GT
#undef LT
#undef ISNAN
#undef SEL
