/* The register-level evaluator of fused_vec.c, written once and included by fused_vec_avx2.c
 * and fused_vec_avx512.c after vmath's vocabulary for the ISA and vmath_exp.h, with these
 * defined: TARGET (the function attribute), V (the vector type), W (floats per vector), NAME(x)
 * (a per-ISA static name), EXT(x) (the exported kiln__fused_vec_x_isa), VP(x) (the ISA's
 * intrinsic _mm256_x or _mm512_x), REG (the asm constraint of a vector register), and the
 * compares and selects (GT, LT, ISNAN, OR of two masks; SEL(a, b, m): b where m is set, a
 * elsewhere). Each step runs over U vectors (one chunk). The last result stays in an
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
 * BENCHMARKS.md for the accumulator's numbers. A switch per instruction per chunk then cost
 * ~15 instructions a dispatch (decoding the instruction, its operands' registers, the jump
 * table's bounds), 5.44 instructions an element in all (callgrind, AVX2) against one add's
 * 0.75; the threaded steps below take 3.61. */

#define U KILN__VEC_U
/* Each chunk asks for its inputs' lines this many floats ahead (run_rows: the next row, at
 * 2048): the composed softmax [128,128,2048] (bench_softmax CPU ms, medians, load 8-12):
 * forward+backward 74-84 without, 50-55 at 1024-4096 ahead; the block path's prefetch of a
 * whole block at its start was not enough once each chunk's loads and arithmetic overlap.
 * chain8 (elementwise, run; CPU ms of 2 threads, 3 alternated rounds, load 7-9): none 29.8-31.0,
 * 512 22.5-23.4, 1024 22.1-22.5, 2048 21.1-23.2, 4096 21.3-23.1, 8192 23.8-27.7 (one add:
 * 23.2-23.6). The hardware prefetchers alone leave the chunk's loads waiting on memory. */
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

/* The steps of a run: each its code's address (labels as values, a GNU C extension) and the
 * slots of its operands, resolved once a call. */
typedef struct NAME(step) {
    const void *go;
    const float *const *a, *const *b, *const *c;
} NAME(step);

/* With n = 0, fills prog with v's steps (plain stores for streamed ones unless stream) over
 * the slots in slot. Else runs prog over n chunks, the first at element o of each input in[k]
 * and output out[s]: per chunk, the LOADed slots and the outputs' slots are set, then the steps
 * run from the first to END. An operand is the accumulator (the last op's result) or read
 * through its slot: a register (a constant, a spilled value) or a loaded input's chunk itself
 * (the inputs are not copied). Each step ends in an indirect jump to the next one's code
 * (threaded code), so a chunk costs a few instructions per step besides the U vectors' work;
 * the U-fold loops are unrolled so the accumulator's vectors stay in registers. pf > 0: each
 * input's lines pf floats ahead are asked for, a chunk at a time. One function for both (never
 * inlined or cloned): the code addresses in prog are this function's labels. */
#define EACH(...)                                                                             \
    do {                                                                                      \
        EACH_AT(0, __VA_ARGS__) EACH_AT(1, __VA_ARGS__) EACH_AT(2, __VA_ARGS__) EACH_AT(3, __VA_ARGS__) \
        EACH_AT(4, __VA_ARGS__) EACH_AT(5, __VA_ARGS__) EACH_AT(6, __VA_ARGS__) EACH_AT(7, __VA_ARGS__) \
    } while (0)
#define EACH_AT(k, ...) { const int u = k; __VA_ARGS__; }
/* (written out rather than a loop to unroll: clang unrolls no loop that an indirect jump
 * enters) */
_Static_assert(U == 8, "EACH writes out the U-fold loops, for U = 8");
#define MA(u) VP(loadu_ps)(a + (u) * W)
#define MB(u) VP(loadu_ps)(b + (u) * W)
#define NEXT                                                                                  \
    do {                                                                                      \
        s++;                                                                                  \
        a = *s->a, b = *s->b;                                                                 \
        goto *s->go;                                                                          \
    } while (0)
#define BINARY_GO(OPC, F)                                                                     \
    [OPC << 2] = &&F##_0, [OPC << 2 | KILN__VEC_A_ACC] = &&F##_a, [OPC << 2 | KILN__VEC_B_ACC] = &&F##_b, \
    [OPC << 2 | KILN__VEC_A_ACC | KILN__VEC_B_ACC] = &&F##_ab,
#define UNARY_GO(OPC, F) [OPC << 2] = &&F##_0, [OPC << 2 | KILN__VEC_A_ACC] = &&F##_a,
#define BINARY(OPC, F)                                                                        \
    F##_0 : EACH(acc[u] = NAME(F)(MA(u), MB(u)));                                             \
    NEXT;                                                                                     \
    F##_a : EACH(acc[u] = NAME(F)(acc[u], MB(u)));                                            \
    NEXT;                                                                                     \
    F##_b : EACH(acc[u] = NAME(F)(MA(u), acc[u]));                                            \
    NEXT;                                                                                     \
    F##_ab : EACH(acc[u] = NAME(F)(acc[u], acc[u]));                                          \
    NEXT;
#define UNARY(OPC, F)                                                                         \
    F##_0 : EACH(acc[u] = NAME(F)(MA(u)));                                                    \
    NEXT;                                                                                     \
    F##_a : EACH(acc[u] = NAME(F)(acc[u]));                                                   \
    NEXT;
#define BINARY_OPS(X)                                                                         \
    X(KILN__VEC_ADD, add) X(KILN__VEC_SUB, sub) X(KILN__VEC_MUL, mul) X(KILN__VEC_DIV, div)   \
    X(KILN__VEC_MAX, max) X(KILN__VEC_MIN, min) X(KILN__VEC_RELU_BWD, relu_bwd)
#define UNARY_OPS(X)                                                                          \
    X(KILN__VEC_NEG, neg) X(KILN__VEC_ABS, abs) X(KILN__VEC_RELU, relu) X(KILN__VEC_SQRT, sqrt) \
    X(KILN__VEC_EXP, exp)
#ifdef __clang__ /* (no noclone there; LLVM inlines and clones no function with an indirectbr) */
#define ONE_COPY __attribute__((noinline))
#else
#define ONE_COPY __attribute__((noinline, noclone))
#endif
static ONE_COPY TARGET void NAME(exec)(const kiln__fused_vec *v, NAME(step) *prog,
                                                                 const float **slot, const float *const *in,
                                                                 float *const *out, int64_t o, int64_t n,
                                                                 bool stream, int64_t pf) {
    static const void *const go[KILN__VEC_KINDS] = {
        BINARY_OPS(BINARY_GO) UNARY_OPS(UNARY_GO)
        [KILN__VEC_CLAMP << 2] = &&clamp_0, [KILN__VEC_CLAMP << 2 | KILN__VEC_A_ACC] = &&clamp_a,
        [KILN__VEC_SPILL] = &&spill, [KILN__VEC_STORE] = &&store, [KILN__VEC_STORE_ACC] = &&store_acc,
        [KILN__VEC_STREAM] = &&streamed, [KILN__VEC_STREAM_ACC] = &&streamed_acc, [KILN__VEC_END] = &&end,
    };
    if (n == 0) {
        for (int j = 0; j < v->n_step; j++) {
            const kiln__vec_step *t = &v->step[j];
            int kind = t->kind;
            if (!stream && (kind == KILN__VEC_STREAM || kind == KILN__VEC_STREAM_ACC))
                kind -= KILN__VEC_STREAM - KILN__VEC_STORE;
            prog[j] = (NAME(step)){go[kind], &slot[t->a], &slot[t->b], &slot[t->c]};
        }
        return;
    }
    const float *pa[KILN__EXPR_MAX_NODES];
    for (int k = 0; k < v->n_load; k++) pa[k] = in[v->load_input[k]];
    V acc[U];
    EACH(acc[u] = VP(setzero_ps)());
    const NAME(step) *s;
    const float *a, *b;
    int64_t end_o = o + n * (U * W);
chunk:
    for (int k = 0; k < v->n_load; k++) {
        slot[v->load_node[k]] = pa[k] + o;
        for (int q = 0; pf > 0 && q < U * W; q += 16) _mm_prefetch((const char *)(pa[k] + o + pf + q), _MM_HINT_T0);
    }
    for (int k = 0; k < v->n_store; k++) slot[KILN__VEC_REGS + k] = out[k] + o;
    s = prog;
    a = *s->a, b = *s->b;
    goto *s->go;
    BINARY_OPS(BINARY)
    UNARY_OPS(UNARY)
    /* lo and hi in slots b and c */
clamp_0:
    EACH(acc[u] = NAME(clamp)(MA(u), MB(u), VP(loadu_ps)(*s->c + u * W)));
    NEXT;
clamp_a:
    EACH(acc[u] = NAME(clamp)(acc[u], MB(u), VP(loadu_ps)(*s->c + u * W)));
    NEXT;
    /* a spill writes the accumulator to register a; a store writes slot b, an output */
#define WRITE(LABEL, INTO, ST, X)                                                             \
    LABEL : EACH(VP(ST)((float *)INTO + u * W, X));                                           \
    NEXT;
    WRITE(spill, a, storeu_ps, acc[u])
    WRITE(store, b, storeu_ps, MA(u))
    WRITE(store_acc, b, storeu_ps, acc[u])
    WRITE(streamed, b, stream_ps, MA(u))
    WRITE(streamed_acc, b, stream_ps, acc[u])
#undef WRITE
end:
    o += U * W;
    if (o < end_o) goto chunk;
}
#undef ONE_COPY
#undef EACH
#undef EACH_AT
#undef MA
#undef MB
#undef NEXT
#undef BINARY_GO
#undef UNARY_GO
#undef BINARY
#undef UNARY
#undef BINARY_OPS
#undef UNARY_OPS

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
    const float *src[KILN__VEC_SLOTS];
    const float *in[KILN__EXPR_MAX_INPUTS];
    float *out[KILN__EXPR_MAX_OUTPUTS + 1];
    NAME(step) prog[KILN__VEC_STEPS];
    NAME(set_bcast)(v, r, src);
    NAME(at)(v, t0, t0, NULL, in, out);
    NAME(exec)(v, prog, src, NULL, NULL, 0, 0, v->stream, 0);
    if (n >= U * W) NAME(exec)(v, prog, src, in, out, 0, n / (U * W), v->stream, PREFETCH);
    if (v->stream) _mm_sfence(); /* streamed stores are visible before the task says it is done */
}

/* n < U W elements from t (a row's first ones before a line, or its last ones): inputs copied
 * into zero-filled chunks, outputs through chunks on the stack (lanes are independent, so the
 * padding changes no bits). */
static TARGET void NAME(tail)(const kiln__fused_vec *v, NAME(step) *prog, const float **src, int64_t t, int64_t n,
                               int64_t t0, float *local) {
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
    NAME(exec)(v, prog, src, in, out, 0, 1, false, 0);
    for (int s = 0; s < v->n_store; s++) memcpy(dst[s], tout[s], sizeof(float) * (size_t)n);
}

TARGET void EXT(run_rows)(const kiln__fused_vec *v, int64_t t0, int64_t m, char *const *rp, const int64_t *rst,
                   float *local) {
    V r[KILN__VEC_REGS][U];
    const float *src[KILN__VEC_SLOTS];
    const float *in[KILN__EXPR_MAX_INPUTS];
    float *out[KILN__EXPR_MAX_OUTPUTS + 1];
    NAME(step) prog[KILN__VEC_STEPS], plain[KILN__VEC_STEPS]; /* plain: the tails' (stack chunks) */
    NAME(set_bcast)(v, r, src);
    NAME(exec)(v, prog, src, NULL, NULL, 0, 0, v->stream, 0);
    NAME(exec)(v, plain, src, NULL, NULL, 0, 0, false, 0);
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
            NAME(tail)(v, plain, src, t, o, t0, local);
        }
        int64_t chunks = (v->row - o) / (U * W);
        if (chunks > 0) NAME(exec)(v, prog, src, in, out, o, chunks, v->stream, PREFETCH);
        o += chunks * (U * W);
        t += o;
        if (t < end) NAME(tail)(v, plain, src, t, end - t, t0, local);
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
