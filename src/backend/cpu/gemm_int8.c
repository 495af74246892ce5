/* int8 x int8 -> int32 products over blocks of k, rescaled to f32, in three ISA paths, and the
 * quantization of activations and packing of weights they read (see gemm_int8.h).
 *
 * The VNNI path holds 16 outputs in the lanes of a register and up to 8 rows' sums in 8
 * registers: per block, each of a group's eight weight vectors is loaded (and made unsigned)
 * once for the tile's rows, and each row adds a vpdpbusd of its activations, broadcast from
 * memory inside the instruction, onto -128 * (the block's activation sum); then per row one
 * convert and one multiply-add by its block scale. No horizontal sums, no sign fixing: an
 * earlier form (a row times four outputs, reductions along k, w's signs flipped per row) spent
 * four times the instructions and was slower than f32. Until this form the activations were
 * the unsigned operand (+ 128, the weights' block sums taken back): each piece then took a
 * broadcast of its own and each group eight more vpdpbusd for those sums, and 16-row tiles
 * ran each row's eight dependent vpdpbusd back to back; MiniLM's 256-sentence run took 8% less
 * time with this one (1013-1037 ms against 1096-1132, 2 threads). */
#include "backend/cpu/gemm_int8.h"

#include <float.h>
#include <stdbool.h>
#include <math.h>
#include <string.h>

#include "backend/cpu/vmath.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "backend/cpu/vexp_avx512.h"
#define HAVE_X86 1
#define VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#define AVX2_TARGET __attribute__((target("avx2,fma")))
#define INLINE inline __attribute__((always_inline))
#else
#define HAVE_X86 0
#endif

#define BLK KILN__S8_BLOCK
#define GROUP KILN__S8_GROUP
#define PIECES (BLK / 4) /* four-byte pieces of k in a block */
#define QMAX 127
#ifndef PREFETCH_BLOCKS
#define PREFETCH_BLOCKS 8
#endif

typedef enum { PATH_SCALAR, PATH_AVX2, PATH_VNNI } s8_path;

static s8_path path_now(void) {
#if HAVE_X86
    const char *isa = kiln__vmath_isa(); /* KILN_ISA's choice, capped by the CPU */
    if (strcmp(isa, "avx512") == 0 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512vnni"))
        return PATH_VNNI;
    if (strcmp(isa, "scalar") != 0 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return PATH_AVX2;
#endif
    return PATH_SCALAR;
}

const char *kiln__gemm_s8_path(void) {
    static const char *const names[] = {"scalar", "avx2", "avx512-vnni"};
    return names[path_now()];
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---- weights and activations ---------------------------------------------------------------- */

void kiln__s8_pack_weight(const int8_t *qw, int64_t out, int64_t k, int8_t *packed) {
    int64_t pieces = k / 4;
    for (int64_t o0 = 0; o0 < out; o0 += GROUP) {
        int64_t gw = min64(GROUP, out - o0);
        int8_t *g = packed + o0 * k;
        for (int64_t c = 0; c < pieces; c++)
            for (int64_t j = 0; j < gw; j++) memcpy(g + (c * gw + j) * 4, qw + (o0 + j) * k + c * 4, 4);
    }
}

void kiln__s8_pack_scales(const float *scales, int64_t out, int64_t cols, float *packed) {
    for (int64_t o0 = 0; o0 < out; o0 += GROUP) {
        int64_t gw = min64(GROUP, out - o0);
        for (int64_t b = 0; b < cols; b++)
            for (int64_t j = 0; j < gw; j++) packed[o0 * cols + b * gw + j] = scales[(o0 + j) * cols + b];
    }
}

/* The scale for a block whose largest magnitude is amax (finite), and its inverse; false when
 * the scale is too small to invert (the block then quantizes to zeros with scale 1). */
static bool scale_for(float amax, float *scale, float *inv) {
    *scale = amax > 0.0f ? amax / QMAX : 1.0f;
    *inv = 1.0f / *scale;
    if (*inv <= FLT_MAX) return true;
    *scale = 1.0f;
    return false;
}

float kiln__s8_quantize_values(const float *x, int64_t stride, int64_t n, int8_t *q) {
    float amax = 0.0f, scale, inv;
    memset(q, 0, (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        float a = fabsf(x[i * stride]);
        if (!(a <= FLT_MAX)) return NAN; /* inf or NaN (fmaxf would skip a NaN) */
        amax = a > amax ? a : amax;
    }
    if (!scale_for(amax, &scale, &inv)) return scale;
    for (int64_t i = 0; i < n; i++) {
        float v = nearbyintf(x[i * stride] * inv);
        q[i] = (int8_t)(v > QMAX ? QMAX : v < -QMAX ? -QMAX : v);
    }
    return scale;
}

#if HAVE_X86
/* One block of n <= 32 contiguous values: the same arithmetic as kiln__s8_quantize_values (the
 * conversion rounds half to even, as nearbyintf in the default mode). The input mostly comes
 * from memory (the layer before wrote more than L2 holds): ask for it 2 KiB ahead. The bytes
 * are narrowed in registers and stored once (vpmovdb to memory is microcoded on AMD). */
VNNI_TARGET static float quantize_block_avx512(const float *x, int64_t n, int64_t width, int8_t *qx, int32_t *sum) {
    _mm_prefetch((const char *)(x + 512), _MM_HINT_T0);
    _mm_prefetch((const char *)(x + 512 + 16), _MM_HINT_T0);
    __mmask16 m0 = (__mmask16)(n >= 16 ? 0xFFFF : (1u << n) - 1), m1 = (__mmask16)(n >= 32 ? 0xFFFF : n > 16 ? (1u << (n - 16)) - 1 : 0);
    __m512 a = _mm512_maskz_loadu_ps(m0, x), b = _mm512_maskz_loadu_ps(m1, x + 16);
    __m512 aa = _mm512_abs_ps(a), ab = _mm512_abs_ps(b);
    const __m512 big = _mm512_set1_ps(FLT_MAX);
    *sum = 0;
    if (_mm512_cmp_ps_mask(aa, big, _CMP_NLE_UQ) | _mm512_cmp_ps_mask(ab, big, _CMP_NLE_UQ)) {
        memset(qx, 0, (size_t)width);
        return NAN;
    }
    float scale, inv;
    if (!scale_for(_mm512_reduce_max_ps(_mm512_max_ps(aa, ab)), &scale, &inv)) {
        memset(qx, 0, (size_t)width);
        return scale;
    }
    const __m512i lo = _mm512_set1_epi32(-QMAX), hi = _mm512_set1_epi32(QMAX);
    __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, _mm512_set1_ps(inv)));
    __m512i qb = _mm512_cvtps_epi32(_mm512_mul_ps(b, _mm512_set1_ps(inv)));
    qa = _mm512_min_epi32(_mm512_max_epi32(qa, lo), hi);
    qb = _mm512_min_epi32(_mm512_max_epi32(qb, lo), hi);
    *sum = _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb));
    __m256i bytes = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtepi32_epi8(qa)), _mm512_cvtepi32_epi8(qb), 1);
    if (width == BLK)
        _mm256_storeu_si256((__m256i *)qx, bytes);
    else
        _mm256_mask_storeu_epi8(qx, (__mmask32)((1ull << width) - 1), bytes);
    return scale;
}

/* r[i] = OP over the 16 lanes of v[i]: a transposing tree (the sixteen reductions share their
 * shuffles: 45 instructions where sixteen _mm512_reduce_* take ~130). Lane i of r holds v[ORDER[i]]'s
 * result for the v loaded in the order TREE_ORDER (which is its own inverse). */
#define TREE_REDUCE(OP, v, r)                                                                                   \
    do {                                                                                                       \
        __m512i w_[8], x_[4], y_[2];                                                                           \
        for (int i_ = 0; i_ < 8; i_++)                                                                         \
            w_[i_] = OP(_mm512_shuffle_i32x4(v[2 * i_], v[2 * i_ + 1], 0x44), _mm512_shuffle_i32x4(v[2 * i_], v[2 * i_ + 1], 0xEE)); \
        for (int i_ = 0; i_ < 4; i_++)                                                                         \
            x_[i_] = OP(_mm512_shuffle_i32x4(w_[2 * i_], w_[2 * i_ + 1], 0x88),                               \
                        _mm512_shuffle_i32x4(w_[2 * i_], w_[2 * i_ + 1], 0xDD));                              \
        for (int i_ = 0; i_ < 2; i_++)                                                                         \
            y_[i_] = OP(SHUF_PS(x_[2 * i_], x_[2 * i_ + 1], 0x88), SHUF_PS(x_[2 * i_], x_[2 * i_ + 1], 0xDD));   \
        r = OP(SHUF_PS(y_[0], y_[1], 0x88), SHUF_PS(y_[0], y_[1], 0xDD));                                      \
    } while (0)
#define SHUF_PS(a, b, imm) _mm512_castps_si512(_mm512_shuffle_ps(_mm512_castsi512_ps(a), _mm512_castsi512_ps(b), imm))
static const int TREE_ORDER[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};

/* A whole row of nblk full blocks, 16 blocks at a time: the same values as quantize_block_avx512
 * block by block (scale amax / 127, its inverse, round half to even; |x| * inverse stays below
 * 127.5, so no clamp), but each group's sixteen maxima and sums are reduced together and its
 * scales divided in one vector. Block by block, the horizontal reductions, scalar divisions and
 * narrowing took 17 cycles a block: at one sentence, 16 rows of 384 or 1536 values a linear,
 * that was some 8% of the embedding, on one thread. The maxima are taken on the bits of |x|
 * (integer order is float order there), so NaN and inf come out above every finite value. */
VNNI_TARGET static void quantize_row_blocks_avx512(const float *x, int64_t nblk, int8_t *qx, float *xscale, int32_t *xsum) {
    const __m512i abs_bits = _mm512_set1_epi32(0x7FFFFFFF), zero = _mm512_setzero_si512();
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t b0 = 0; b0 < nblk; b0 += 16) {
        int g = (int)min64(16, nblk - b0);
        const float *xg = x + b0 * BLK;
        __m512i v[16];
        for (int i = 0; i < 16; i++) {
            int j = TREE_ORDER[i];
            if (j >= g) {
                v[i] = zero;
                continue;
            }
            _mm_prefetch((const char *)(xg + j * BLK + 512), _MM_HINT_T0);
            _mm_prefetch((const char *)(xg + j * BLK + 512 + 16), _MM_HINT_T0);
            v[i] = _mm512_max_epi32(_mm512_and_si512(_mm512_loadu_si512(xg + j * BLK), abs_bits),
                                    _mm512_and_si512(_mm512_loadu_si512(xg + j * BLK + 16), abs_bits));
        }
        __m512i top;
        TREE_REDUCE(_mm512_max_epi32, v, top);
        __m512 amax = _mm512_castsi512_ps(top);
        __mmask16 live = (__mmask16)((1u << g) - 1);
        __mmask16 finite = _mm512_cmplt_epi32_mask(top, _mm512_set1_epi32(0x7F800000));
        /* scale_for, in lanes */
        __m512 scale = _mm512_mask_div_ps(one, _mm512_cmp_ps_mask(amax, _mm512_setzero_ps(), _CMP_GT_OQ), amax,
                                          _mm512_set1_ps((float)QMAX));
        __m512 inv = _mm512_div_ps(one, scale);
        __mmask16 invertible = _mm512_cmp_ps_mask(inv, _mm512_set1_ps(FLT_MAX), _CMP_LE_OQ);
        scale = _mm512_mask_blend_ps(finite, _mm512_set1_ps(NAN), _mm512_mask_blend_ps(invertible, one, scale));
        __mmask16 quantized = finite & invertible;
        _mm512_mask_storeu_ps(xscale + b0, live, scale);
        for (int i = 0; i < 16; i++) {
            int j = TREE_ORDER[i];
            v[i] = zero;
            if (j >= g) continue;
            int8_t *q = qx + (b0 + j) * BLK;
            if (!((quantized >> j) & 1)) {
                memset(q, 0, BLK);
                continue;
            }
            __m512 iv = _mm512_permutexvar_ps(_mm512_set1_epi32(j), inv);
            __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xg + j * BLK), iv));
            __m512i qb = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xg + j * BLK + 16), iv));
            v[i] = _mm512_add_epi32(qa, qb);
            _mm256_storeu_si256((__m256i *)q, _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtepi32_epi8(qa)),
                                                                      _mm512_cvtepi32_epi8(qb), 1));
        }
        __m512i sums;
        TREE_REDUCE(_mm512_add_epi32, v, sums);
        _mm512_mask_storeu_epi32(xsum + b0, live, sums);
    }
}
#undef TREE_REDUCE
#undef SHUF_PS
#endif

void kiln__s8_quantize_row(const float *x, int64_t stride, int64_t n, int64_t k, int8_t *qx, float *xscale,
                           int32_t *xsum) {
    bool vec = HAVE_X86 && stride == 1 && path_now() == PATH_VNNI;
#if HAVE_X86
    if (vec && n == k && k % BLK == 0) {
        quantize_row_blocks_avx512(x, k / BLK, qx, xscale, xsum);
        return;
    }
#endif
    for (int64_t k0 = 0, b = 0; k0 < k; k0 += BLK, b++) {
        int64_t width = min64(BLK, k - k0), len = n > k0 ? min64(width, n - k0) : 0;
#if HAVE_X86
        if (vec) {
            xscale[b] = quantize_block_avx512(x + k0, len, width, qx + k0, &xsum[b]);
            continue;
        }
#endif
        int8_t q[BLK] = {0};
        xscale[b] = len > 0 ? kiln__s8_quantize_values(x + k0 * stride, stride, len, q) : 1.0f;
        xsum[b] = 0;
        for (int64_t i = 0; i < width; i++) qx[k0 + i] = q[i], xsum[b] += q[i];
    }
}

/* ---- the products ----------------------------------------------------------------------------- */

/* y rows [0, rows) for one group of gw outputs (g: its packed weights, ws: its packed scales) */
static void group_scalar(const int8_t *qx, const float *xs, int64_t rows, const int8_t *g, int64_t gw,
                         const float *ws, int64_t k, float *y, int64_t ldy) {
    int64_t nblk = (k + BLK - 1) / BLK;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < gw; j++) {
            float acc = 0.0f;
            for (int64_t b = 0; b < nblk; b++) {
                int32_t d = 0;
                for (int64_t i = b * BLK; i < k && i < (b + 1) * BLK; i++)
                    d += (int32_t)qx[r * k + i] * (int32_t)g[((i / 4) * gw + j) * 4 + i % 4];
                acc += xs[r * nblk + b] * ws[b * gw + j] * (float)d;
            }
            y[r * ldy + j] = acc;
        }
}

#if HAVE_X86
static INLINE int32_t load4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* d + the four-byte products of the unsigned bytes of w and the signed bytes at p, broadcast
 * inside the instruction: gcc 12 does not fold _mm512_set1_epi32 of a load into vpdpbusd's
 * memory operand, and a separate vpbroadcastd per piece measured 8-10% slower (one thread,
 * [16, 384] x [384, 1152] and [16, 1536] x [1536, 384] in L2: 255 and 280 GMAC/s, 232 and 248) */
VNNI_TARGET static INLINE __m512i dpbusd_broadcast(__m512i d, __m512i w, const int8_t *p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(d) : "v"(w), "m"(*(const int32_t *)p));
    return d;
}

/* GELU (the erf form) of 16 lanes in registers, for the int8 product's epilogue: x Phi(x) with
 * Phi(-u) = erfc(u / sqrt2) / 2 by Abramowitz and Stegun 7.1.26 (erfc(z) = t P(t) e^(-z^2), t =
 * 1 / (1 + p z), within 1.5e-7 of erf): within 7.5e-8 |x| of the exact value. The int8 product's
 * own error is some 1e-3 of its sums, so the ulp-exact kiln__vgelu_f32 (double-precision
 * rational, two divisions per 8 lanes) bought nothing: it cost 1.1 cycles a value, a fifth of the
 * intermediate linear's time at 16 rows, where this is ~0.1 and runs on the sums in registers
 * (no store, reload and second pass). NaN stays NaN; below -16 (Phi < 1e-57) the result is the
 * one at -16, some -1e-34 (kiln__vexp_neg_avx512 holds its argument at -80: nothing subnormal). */
VNNI_TARGET static INLINE __m512 gelu_avx512(__m512 x) {
    const __m512 xc = _mm512_max_ps(_mm512_set1_ps(-16.0f), x); /* (x when x is NaN) */
    __m512 z = _mm512_mul_ps(_mm512_abs_ps(xc), _mm512_set1_ps(0.70710678118654752f));
    __m512 t = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_fmadd_ps(z, _mm512_set1_ps(0.3275911f), _mm512_set1_ps(1.0f)));
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.061405429f), t, _mm512_set1_ps(-1.453152027f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.421413741f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.284496736f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.254829592f));
    p = _mm512_mul_ps(p, t);
    /* half of erfc(|x| / sqrt2): Phi(-|x|) */
    __m512 tail = _mm512_mul_ps(_mm512_mul_ps(p, kiln__vexp_neg_avx512(_mm512_mul_ps(_mm512_sub_ps(_mm512_setzero_ps(), z), z))),
                                _mm512_set1_ps(0.5f));
    __mmask16 neg = _mm512_cmp_ps_mask(xc, _mm512_setzero_ps(), _CMP_LT_OQ);
    __m512 phi = _mm512_mask_blend_ps(neg, _mm512_sub_ps(_mm512_set1_ps(1.0f), tail), tail);
    return _mm512_mul_ps(xc, phi);
}

/* R <= 8 rows (a constant after inlining: the sums stay in registers) of one group. The pieces
 * go outermost in a block, rows inside: each row's eight vpdpbusd depend on one another (about
 * four cycles each), so a row at a time left the two VNNI pipes half idle waiting on its chain;
 * eight rows' chains interleaved keep both busy. (Sixteen rows would need 16 sums, 16
 * accumulators and 8 weight vectors: more than the 32 registers.) */
VNNI_TARGET static INLINE void tile_vnni(const int R, const int8_t *qx, const float *xs, const int32_t *xsum,
                                         const int8_t *g, __mmask16 lanes, int64_t gw, const float *ws, int64_t k,
                                         const float *bias, bool gelu, float *y, int64_t ldy) {
    int64_t nblk = (k + BLK - 1) / BLK, pieces = k / 4;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    /* the sums start from the bias (the epilogue's first step, here for free) */
    __m512 acc[8], start = bias ? _mm512_maskz_loadu_ps(lanes, bias) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) acc[r] = start;
    for (int64_t b = 0; b < nblk; b++) {
        int64_t c0 = b * PIECES, nc = min64(PIECES, pieces - c0);
        /* the weights stream from L3 or memory (a model's are larger than L2) and the hardware
         * prefetcher does not keep ahead of a 16-row tile's demand: ask PREFETCH_BLOCKS ahead
         * (past the group's end is the next group's start, past the matrix harmless) */
        const char *ahead = (const char *)(g + (c0 + PREFETCH_BLOCKS * PIECES) * gw * 4);
#pragma GCC unroll 8
        for (int c = 0; c < PIECES; c++) _mm_prefetch(ahead + c * 64, _MM_HINT_T0);
        /* the unsigned weights add 128 * (the block's activation sum): start from its negative */
        __m512i d[8];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) d[r] = _mm512_set1_epi32(-xsum[r * nblk + b] * 128);
        const int8_t *xb = qx + c0 * 4;
        if (nc == PIECES) {
#pragma GCC unroll 8
            for (int c = 0; c < PIECES; c++) {
                /* w + 128 as unsigned bytes (lanes past gw hold 128s, never stored) */
                __m512i w = _mm512_xor_si512(_mm512_maskz_loadu_epi32(lanes, g + (c0 + c) * gw * 4), flip);
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) d[r] = dpbusd_broadcast(d[r], w, xb + r * k + c * 4);
            }
        } else { /* the last block, short: only its pieces (the row's next bytes are not in it) */
            for (int c = 0; c < nc; c++) {
                __m512i w = _mm512_xor_si512(_mm512_maskz_loadu_epi32(lanes, g + (c0 + c) * gw * 4), flip);
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) d[r] = dpbusd_broadcast(d[r], w, xb + r * k + c * 4);
            }
        }
        __m512 wsb = _mm512_maskz_loadu_ps(lanes, ws + b * gw);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d[r]), _mm512_mul_ps(wsb, _mm512_set1_ps(xs[r * nblk + b])), acc[r]);
    }
    if (gelu) {
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) acc[r] = gelu_avx512(acc[r]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) _mm512_mask_storeu_ps(y + r * ldy, lanes, acc[r]);
}

/* One group's rows; with an epilogue, its bias (after the group's nblk blocks of scales) and
 * GELU are applied in the tile's registers. */
VNNI_TARGET static void group_vnni(const int8_t *qx, const float *xs, const int32_t *xsum, int64_t rows,
                                   const int8_t *g, int64_t gw, const float *ws, int64_t k, kiln__s8_epilogue epilogue,
                                   float *y, int64_t ldy) {
    __mmask16 lanes = (__mmask16)(gw >= 16 ? 0xFFFF : (1u << gw) - 1);
    int64_t nblk = (k + BLK - 1) / BLK, r = 0;
    const float *bias = epilogue != KILN__S8_PLAIN ? ws + nblk * gw : NULL;
    bool gelu = epilogue == KILN__S8_BIAS_GELU;
#define TILE(R) tile_vnni(R, qx + r * k, xs + r * nblk, xsum + r * nblk, g, lanes, gw, ws, k, bias, gelu, y + r * ldy, ldy)
    for (; r + 8 <= rows; r += 8) TILE(8);
    if (rows - r >= 4) TILE(4), r += 4;
    if (rows - r >= 2) TILE(2), r += 2;
    if (rows - r >= 1) TILE(1);
#undef TILE
}

/* AVX2: a row at a time, the group's 16 lanes as two halves of 8; the signed activation's
 * magnitude times the weight with its sign (pairs sum to at most 2 * 127 * 127: no saturation) */
AVX2_TARGET static void group_avx2(const int8_t *qx, const float *xs, int64_t rows, const int8_t *g, int64_t gw,
                                   const float *ws, int64_t k, float *y, int64_t ldy) {
    int64_t nblk = (k + BLK - 1) / BLK, pieces = k / 4;
    __m256i lanes[2];
    for (int h = 0; h < 2; h++) {
        int64_t n = gw - 8 * h;
        lanes[h] = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n < 0 ? 0 : n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    }
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t r = 0; r < rows; r++) {
        __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int64_t b = 0; b < nblk; b++) {
            __m256i d[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
            for (int64_t c = b * PIECES; c < pieces && c < (b + 1) * PIECES; c++) {
                __m256i x = _mm256_set1_epi32(load4(qx + r * k + c * 4));
                __m256i ax = _mm256_abs_epi8(x);
                for (int h = 0; h < 2 && 8 * h < gw; h++) {
                    __m256i w = _mm256_maskload_epi32((const int *)(g + (c * gw + 8 * h) * 4), lanes[h]);
                    w = _mm256_sign_epi8(w, x);
                    d[h] = _mm256_add_epi32(d[h], _mm256_madd_epi16(_mm256_maddubs_epi16(ax, w), ones));
                }
            }
            __m256 sc = _mm256_set1_ps(xs[r * nblk + b]);
            for (int h = 0; h < 2 && 8 * h < gw; h++) {
                __m256 wsb = _mm256_maskload_ps(ws + b * gw + 8 * h, lanes[h]);
                acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d[h]), _mm256_mul_ps(wsb, sc), acc[h]);
            }
        }
        for (int h = 0; h < 2 && 8 * h < gw; h++) {
            _mm256_maskstore_ps(y + r * ldy + 8 * h, lanes[h], acc[h]);
        }
    }
}
#endif

/* The epilogue over outputs [o_begin, o_end) of every row, once all their groups are done: the
 * bias (each group's gw biases after its nblk blocks of scales), then GELU over the row's whole
 * span in one call. Run per group right after its product, the same work took twice the
 * product's time: the loads of just-stored (masked) sums do not forward from the stores, and
 * sixteen values a call leave GELU's long dependency chains nothing to overlap with. */
static void epilogue_rows(float *y, int64_t ldy, int64_t rows, const float *wscale, int64_t out, int64_t o_begin,
                          int64_t o_end, int64_t nblk, kiln__vmath_f32_fn gelu) {
    for (int64_t r = 0; r < rows; r++) {
        float *yr = y + r * ldy;
        for (int64_t o0 = o_begin; o0 < o_end; o0 += GROUP) {
            int64_t gw = min64(GROUP, out - o0);
            const float *bias = wscale + o0 * (nblk + 1) + nblk * gw;
            for (int64_t j = 0; j < gw; j++) yr[o0 + j] += bias[j];
        }
        if (gelu) gelu(yr + o_begin, yr + o_begin, min64(o_end, out) - o_begin);
    }
}

void kiln__gemm_s8_rescale(const int8_t *qx, const float *xscale, const int32_t *xsum, int64_t rows,
                           const int8_t *packed_w, const float *wscale, int64_t out, int64_t o_begin, int64_t o_end, int64_t k,
                           kiln__s8_epilogue epilogue, float *y, int64_t ldy) {
    s8_path path = path_now();
    int64_t nblk = (k + BLK - 1) / BLK, cols = nblk + (epilogue != KILN__S8_PLAIN);
    for (int64_t o0 = o_begin; o0 < o_end; o0 += GROUP) {
        int64_t gw = min64(GROUP, out - o0);
        const int8_t *g = packed_w + o0 * k;
        const float *ws = wscale + o0 * cols;
#if HAVE_X86
        if (path == PATH_VNNI)
            group_vnni(qx, xscale, xsum, rows, g, gw, ws, k, epilogue, y + o0, ldy);
        else if (path == PATH_AVX2)
            group_avx2(qx, xscale, rows, g, gw, ws, k, y + o0, ldy);
        else
#endif
            group_scalar(qx, xscale, rows, g, gw, ws, k, y + o0, ldy);
    }
    if (epilogue != KILN__S8_PLAIN && o_begin < o_end && path != PATH_VNNI) /* (VNNI: done in its tiles) */
        epilogue_rows(y, ldy, rows, wscale, out, o_begin, o_end, nblk,
                      epilogue == KILN__S8_BIAS_GELU ? kiln__vmath_f32_kernel(KILN_VMATH_GELU) : NULL);
}
