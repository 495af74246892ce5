/* The register-level evaluator of fused_vec.c, written once and included by fused_vec_avx2.c
 * and fused_vec_avx512.c after vmath's vocabulary for the ISA and vmath_exp.h, with these
 * defined: TARGET (the function attribute), V (the vector type), W (floats per vector), NAME(x)
 * (a per-ISA static name), EXT(x) (the exported kiln__fused_vec_x_isa), VP(x) (the ISA's
 * intrinsic _mm256_x or _mm512_x), REG (the asm constraint of a vector register), and the
 * compares and selects (GT, LT, ISNAN, OR of two masks; SEL(a, b, m): b where m is set, a
 * elsewhere). Each instruction runs over U vectors (one chunk); the values live in a register
 * file indexed by IR node, which the CPU keeps in L1 (a few KiB), so a chunk's whole
 * expression runs between its loads and its stores and the out-of-order core overlaps one
 * chunk's memory traffic with another's arithmetic. Every op is the same IEEE operation, with
 * the same NaN and signed-zero selects, as the f32 loop the unfused kernel runs; exp is vmath's
 * own vm_exp. */

#define U KILN__VEC_U
/* run_rows asks for each input's lines this many floats ahead (the next row, at 2048): the
 * composed softmax [128,128,2048] (bench_softmax CPU ms, medians, load 8-12): forward+backward
 * 74-84 without, 50-55 at 1024-4096 ahead; the block path's prefetch of a whole block at its
 * start was not enough once each chunk's loads and arithmetic overlap. */
#define PREFETCH 2048

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
/* vm_exp, its result opaque to the compiler: gcc contracts a multiply and a following add
 * into one FMA (-ffp-contract=fast), and exp ends in a multiply on AVX2, so an add after it
 * would otherwise round once where the unfused kernels round twice. */
static inline TARGET V NAME(exp)(V a) {
    V y = vm_exp(a);
    __asm__("" : "+" REG(y));
    return y;
}

/* Every instruction over the chunk at in[k] + o of each input k, then the stores to out[s] + o:
 * after every load, since an output may be an input's storage (in place). Operands are read
 * through src: a computed value's register, or a loaded one's input itself (a LOAD only points
 * there, so the chunk's inputs are not copied into the register file). */
static inline __attribute__((always_inline)) TARGET void NAME(chunk)(const kiln__fused_vec *v, V (*r)[U],
                                                                     const float **src, const float *const *in,
                                                                     float *const *out, int64_t o, bool stream) {
    const V zero = VP(set1_ps)(0.0f), sign = VP(set1_ps)(-0.0f);
    for (int j = 0; j < v->n_code; j++) {
        const kiln__vec_ins *c = &v->code[j];
        V *d = r[c->d];
        const float *a = src[c->a], *b = src[c->b];
#define A(u) VP(loadu_ps)(a + (u) * W)
#define B(u) VP(loadu_ps)(b + (u) * W)
        switch (c->op) {
        case KILN__VEC_LOAD: src[c->d] = in[c->a] + o; break;
        case KILN__VEC_ADD: for (int u = 0; u < U; u++) d[u] = NAME(add)(A(u), B(u)); break;
        case KILN__VEC_SUB: for (int u = 0; u < U; u++) d[u] = VP(sub_ps)(A(u), B(u)); break;
        case KILN__VEC_MUL: for (int u = 0; u < U; u++) d[u] = NAME(mul)(A(u), B(u)); break;
        case KILN__VEC_DIV: for (int u = 0; u < U; u++) d[u] = VP(div_ps)(A(u), B(u)); break;
        /* (x > y || x != x) ? x : y, and (x < y || x != x) ? x : y */
        case KILN__VEC_MAX: for (int u = 0; u < U; u++) d[u] = SEL(B(u), A(u), OR(GT(A(u), B(u)), ISNAN(A(u)))); break;
        case KILN__VEC_MIN: for (int u = 0; u < U; u++) d[u] = SEL(B(u), A(u), OR(LT(A(u), B(u)), ISNAN(A(u)))); break;
        /* y > 0 ? x : 0 */
        case KILN__VEC_RELU_BWD: for (int u = 0; u < U; u++) d[u] = SEL(zero, A(u), GT(B(u), zero)); break;
        case KILN__VEC_NEG: for (int u = 0; u < U; u++) d[u] = VP(xor_ps)(A(u), sign); break;
        case KILN__VEC_ABS: for (int u = 0; u < U; u++) d[u] = VP(andnot_ps)(sign, A(u)); break;
        /* x < 0 ? 0 : x */
        case KILN__VEC_RELU: for (int u = 0; u < U; u++) d[u] = SEL(A(u), zero, LT(A(u), zero)); break;
        case KILN__VEC_SQRT: for (int u = 0; u < U; u++) d[u] = VP(sqrt_ps)(A(u)); break;
        /* x < lo ? lo : (x > hi ? hi : x), lo and hi in registers b and c */
        case KILN__VEC_CLAMP: {
            const V *h = r[c->c], *l = r[c->b];
            for (int u = 0; u < U; u++) d[u] = SEL(SEL(A(u), h[u], GT(A(u), h[u])), l[u], LT(A(u), l[u]));
            break;
        }
        case KILN__VEC_EXP: for (int u = 0; u < U; u++) d[u] = NAME(exp)(A(u)); break;
        default: break;
        }
#undef A
#undef B
    }
    for (int s = 0; s < v->n_store; s++) {
        float *y = out[s] + o;
        const float *x = src[v->store_node[s]];
        if (stream && v->out[s])
            for (int u = 0; u < U; u++) VP(stream_ps)(y + u * W, VP(loadu_ps)(x + u * W));
        else
            for (int u = 0; u < U; u++) VP(storeu_ps)(y + u * W, VP(loadu_ps)(x + u * W));
    }
}

static inline TARGET void NAME(set_bcast)(const kiln__fused_vec *v, V (*r)[U], const float **src) {
    for (int k = 0; k < KILN__VEC_REGS; k++) src[k] = (const float *)r[k];
    for (int k = 0; k < v->n_bcast; k++)
        for (int u = 0; u < U; u++) r[v->bcast[k].node][u] = VP(set1_ps)(v->bcast[k].value);
}

/* The pointers of the chunk at element t; a store with no output goes to local[t - t0]. */
static inline TARGET void NAME(at)(const kiln__fused_vec *v, int64_t t, int64_t t0, float *local, const float **in,
                                   float **out) {
    for (int k = 0; k < v->n_in; k++) in[k] = v->in[k] ? v->in[k] + t : NULL;
    for (int s = 0; s < v->n_store; s++) out[s] = v->out[s] ? v->out[s] + t : local + (t - t0);
}

TARGET void EXT(run)(const kiln__fused_vec *v, int64_t t0, int64_t n) {
    V r[KILN__VEC_REGS][U];
    const float *src[KILN__VEC_REGS];
    const float *in[KILN__EXPR_MAX_INPUTS];
    float *out[KILN__EXPR_MAX_OUTPUTS + 1];
    NAME(set_bcast)(v, r, src);
    NAME(at)(v, t0, t0, NULL, in, out);
    for (int64_t o = 0; o + U * W <= n; o += U * W) NAME(chunk)(v, r, src, in, out, o, v->stream);
    if (v->stream) _mm_sfence(); /* streamed stores are visible before the task says it is done */
}

/* n < U W elements from t (a row's first ones before a line, or its last ones): inputs copied
 * into zero-filled chunks, outputs through chunks on the stack (lanes are independent, so the
 * padding changes no bits). */
static TARGET void NAME(tail)(const kiln__fused_vec *v, V (*r)[U], const float **src, int64_t t, int64_t n, int64_t t0, float *local) {
    _Alignas(64) float tin[KILN__EXPR_MAX_INPUTS][U * W], tout[KILN__EXPR_MAX_OUTPUTS + 1][U * W];
    const float *in[KILN__EXPR_MAX_INPUTS];
    float *out[KILN__EXPR_MAX_OUTPUTS + 1], *dst[KILN__EXPR_MAX_OUTPUTS + 1];
    NAME(at)(v, t, t0, local, in, dst);
    for (int k = 0; k < v->n_in; k++) {
        if (!in[k]) continue;
        memcpy(tin[k], in[k], sizeof(float) * (size_t)n);
        memset(tin[k] + n, 0, sizeof(float) * (size_t)(U * W - n));
        in[k] = tin[k];
    }
    for (int s = 0; s < v->n_store; s++) out[s] = tout[s];
    NAME(chunk)(v, r, src, in, out, 0, false);
    for (int s = 0; s < v->n_store; s++) memcpy(dst[s], tout[s], sizeof(float) * (size_t)n);
}

TARGET void EXT(run_rows)(const kiln__fused_vec *v, int64_t t0, int64_t m, char *const *rp, const int64_t *rst,
                   float *local) {
    V r[KILN__VEC_REGS][U];
    const float *src[KILN__VEC_REGS];
    const float *in[KILN__EXPR_MAX_INPUTS];
    float *out[KILN__EXPR_MAX_OUTPUTS + 1];
    NAME(set_bcast)(v, r, src);
    for (int64_t j = 0; j < m / v->row; j++) {
        for (int k = 0; k < v->n_rowb; k++) {
            int i = v->rowb[k];
            V x = VP(set1_ps)(*(const float *)(rp[i] + j * rst[i]));
            for (int u = 0; u < U; u++) r[i][u] = x;
        }
        int64_t t = t0 + j * v->row, end = t + v->row, o = 0;
        NAME(at)(v, t, t0, local, in, out);
        if (v->stream && (t & 15)) { /* streamed chunks start on a line (v->out[s] are) */
            o = 16 - (t & 15);
            NAME(tail)(v, r, src, t, o, t0, local);
        }
        for (; o + U * W <= v->row; o += U * W) {
            for (int k = 0; k < v->n_in; k++)
                for (int q = 0; in[k] && q < U * W; q += 16) _mm_prefetch((const char *)(in[k] + o + PREFETCH + q), _MM_HINT_T0);
            NAME(chunk)(v, r, src, in, out, o, v->stream);
        }
        t += o;
        if (t < end) NAME(tail)(v, r, src, t, end - t, t0, local);
    }
    if (v->stream) _mm_sfence();
}

#undef U
#undef PREFETCH
#undef TARGET
#undef V
#undef W
#undef NAME
#undef EXT
#undef VP
#undef REG
#undef OR
#undef GT
#undef LT
#undef ISNAN
#undef SEL
