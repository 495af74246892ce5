/* The register-level evaluator of fused_vec.c, written once and included by fused_vec_avx2.c
 * and fused_vec_avx512.c after vmath's vocabulary for the ISA and vmath_exp.h, with these
 * defined: TARGET (the function attribute), V (the vector type), W (floats per vector), NAME(x)
 * (a per-ISA static name), EXT(x) (the exported kiln__fused_vec_x_isa), VP(x) (the ISA's
 * intrinsic _mm256_x or _mm512_x), REG (the asm constraint of a vector register), and the
 * compares and selects (GT, LT, ISNAN, OR of two masks; SEL(a, b, m): b where m is set, a
 * elsewhere). Each instruction runs over U vectors (one chunk). The last result stays in an
 * accumulator of U vector registers, which the next instruction reads in place (fused_vec.c
 * marks which operands come from it): a chain x -> f(x) -> g(f(x)) runs in registers, with no
 * load or store per op. Values read later than by the next instruction (fan-out, a stored
 * intermediate) are spilled to a register file indexed by IR node, in L1 (a few KiB), and read
 * from there, as are the constants. A chunk's whole expression runs between its loads and its
 * stores, so the out-of-order core overlaps one chunk's memory traffic with another's
 * arithmetic. Every op is the same IEEE operation, with the same NaN and signed-zero selects,
 * as the f32 loop the unfused kernel runs; exp is vmath's own vm_exp.
 *
 * chain8 (bench_elementwise, eight ops on two 64M-float inputs, AVX-512, Zen 5, 2 threads):
 * each op loading its operands from the register file and storing its result there was L1
 * load/store bound at ~4 cycles a vector op (16.6 ms against one add's 11.2); see
 * BENCHMARKS.md for the accumulator's numbers. */

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
static inline TARGET V NAME(sub)(V a, V b) { return VP(sub_ps)(a, b); }
static inline TARGET V NAME(div)(V a, V b) { return VP(div_ps)(a, b); }
/* (x > y || x != x) ? x : y, and (x < y || x != x) ? x : y */
static inline TARGET V NAME(max)(V x, V y) { return SEL(y, x, OR(GT(x, y), ISNAN(x))); }
static inline TARGET V NAME(min)(V x, V y) { return SEL(y, x, OR(LT(x, y), ISNAN(x))); }
/* y > 0 ? x : 0 */
static inline TARGET V NAME(relu_bwd)(V x, V y) {
    const V zero = VP(setzero_ps)();
    return SEL(zero, x, GT(y, zero));
}
static inline TARGET V NAME(neg)(V x) { return VP(xor_ps)(x, VP(set1_ps)(-0.0f)); }
static inline TARGET V NAME(abs)(V x) { return VP(andnot_ps)(VP(set1_ps)(-0.0f), x); }
/* x < 0 ? 0 : x */
static inline TARGET V NAME(relu)(V x) {
    const V zero = VP(setzero_ps)();
    return SEL(x, zero, LT(x, zero));
}
static inline TARGET V NAME(sqrt)(V x) { return VP(sqrt_ps)(x); }
/* x < lo ? lo : (x > hi ? hi : x) */
static inline TARGET V NAME(clamp)(V x, V lo, V hi) { return SEL(SEL(x, hi, GT(x, hi)), lo, LT(x, lo)); }

/* Every instruction over the chunk at in[k] + o of each input k, then the stores to out[s] + o:
 * after every load, since an output may be an input's storage (in place). An operand is the
 * accumulator (the last instruction's result) or is read through src: a spilled value's
 * register, a constant's, or a loaded value's input itself (a LOAD only points there, so the
 * chunk's inputs are not copied). The U-fold loops are unrolled so that the accumulator's
 * vectors are scalars to the compiler, kept in registers across the instruction switch. */
#define EACH _Pragma("GCC unroll 8") for (int u = 0; u < U; u++)
#define MA(u) VP(loadu_ps)(a + (u) * W)
#define MB(u) VP(loadu_ps)(b + (u) * W)
#define BINARY(OPC, F)                                                                        \
    case OPC << 2: EACH acc[u] = NAME(F)(MA(u), MB(u)); break;                               \
    case OPC << 2 | KILN__VEC_A_ACC: EACH acc[u] = NAME(F)(acc[u], MB(u)); break;            \
    case OPC << 2 | KILN__VEC_B_ACC: EACH acc[u] = NAME(F)(MA(u), acc[u]); break;            \
    case OPC << 2 | KILN__VEC_A_ACC | KILN__VEC_B_ACC: EACH acc[u] = NAME(F)(acc[u], acc[u]); break;
#define UNARY(OPC, F)                                                                         \
    case OPC << 2: EACH acc[u] = NAME(F)(MA(u)); break;                                      \
    case OPC << 2 | KILN__VEC_A_ACC: EACH acc[u] = NAME(F)(acc[u]); break;
static inline __attribute__((always_inline)) TARGET void NAME(chunk)(const kiln__fused_vec *v, V (*r)[U],
                                                                     const float **src, const float *const *in,
                                                                     float *const *out, int64_t o, bool stream) {
    V acc[U];
    EACH acc[u] = VP(setzero_ps)();
    for (int j = 0; j < v->n_code; j++) {
        const kiln__vec_ins *c = &v->code[j];
        const float *a = src[c->a], *b = src[c->b];
        switch (c->op << 2 | c->form) {
        case KILN__VEC_LOAD << 2: src[c->d] = in[c->a] + o; break;
        BINARY(KILN__VEC_ADD, add)
        BINARY(KILN__VEC_SUB, sub)
        BINARY(KILN__VEC_MUL, mul)
        BINARY(KILN__VEC_DIV, div)
        BINARY(KILN__VEC_MAX, max)
        BINARY(KILN__VEC_MIN, min)
        BINARY(KILN__VEC_RELU_BWD, relu_bwd)
        UNARY(KILN__VEC_NEG, neg)
        UNARY(KILN__VEC_ABS, abs)
        UNARY(KILN__VEC_RELU, relu)
        UNARY(KILN__VEC_SQRT, sqrt)
        UNARY(KILN__VEC_EXP, exp)
        /* lo and hi in registers b and c */
        case KILN__VEC_CLAMP << 2: EACH acc[u] = NAME(clamp)(MA(u), r[c->b][u], r[c->c][u]); break;
        case KILN__VEC_CLAMP << 2 | KILN__VEC_A_ACC: EACH acc[u] = NAME(clamp)(acc[u], r[c->b][u], r[c->c][u]); break;
        default: break;
        }
        if (c->spill) EACH r[c->d][u] = acc[u];
    }
    for (int s = 0; s < v->n_store; s++) {
        float *y = out[s] + o;
        const float *x = src[v->store_node[s]];
        bool st = stream && v->out[s];
        if (v->store_acc[s] && st) EACH VP(stream_ps)(y + u * W, acc[u]);
        else if (v->store_acc[s]) EACH VP(storeu_ps)(y + u * W, acc[u]);
        else if (st) EACH VP(stream_ps)(y + u * W, VP(loadu_ps)(x + u * W));
        else EACH VP(storeu_ps)(y + u * W, VP(loadu_ps)(x + u * W));
    }
}
#undef EACH
#undef MA
#undef MB
#undef BINARY
#undef UNARY

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
