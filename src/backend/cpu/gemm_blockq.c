/* f32 x block-quantized (q8_0, q4_0) products in three ISA paths, with the quantization and
 * packing of the weights they read (see gemm_blockq.h).
 *
 * The AVX-512 path holds a group's 16 outputs in the lanes of a register and up to 16 rows'
 * sums in 16 registers: per input it loads the 16 weights of the group once (one 16-byte load,
 * widened to 16 int32, converted, times the block's scale: for q4_0 one load gives two inputs,
 * the low and high nibbles, and q * d - 8 d is one FMA), then each row adds one FMA whose
 * activation is broadcast from memory inside the instruction. The weights' conversion costs
 * three instructions an input, shared by the tile's rows: at 16 rows (a sentence of 16 tokens)
 * that is 3 for 16 FMAs; at one row the kernel is bound by it, as it is by the weights' bytes
 * (fewer of them than f32's: the point of the format). No horizontal sums. */
#include "backend/cpu/gemm_blockq.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <float.h>

#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_int8.h"
#include "backend/cpu/vmath.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_X86 1
#define AVX512_TARGET __attribute__((target("avx512f")))
#define AVX2_TARGET __attribute__((target("avx2,fma")))
#define INLINE inline __attribute__((always_inline))
#else
#define HAVE_X86 0
#endif

#define BLK KILN__BQ_BLOCK
#define GROUP KILN__BQ_GROUP
#ifndef BQ_PREFETCH_BLOCKS
#define BQ_PREFETCH_BLOCKS 4 /* weight blocks ahead of the one being read */
#endif

typedef enum { PATH_SCALAR, PATH_AVX2, PATH_AVX512 } bq_path;

static bq_path path_now(void) {
#if HAVE_X86
    const char *isa = kiln__vmath_isa(); /* KILN_ISA's choice, capped by the CPU */
    if (strcmp(isa, "avx512") == 0 && __builtin_cpu_supports("avx512f")) return PATH_AVX512;
    if (strcmp(isa, "scalar") != 0 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return PATH_AVX2;
#endif
    return PATH_SCALAR;
}

const char *kiln__gemm_bq_path(void) {
    static const char *const names[] = {"scalar", "avx2", "avx512"};
    return names[path_now()];
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

int kiln__bq_block_bytes(kiln__bq_format f) { return f == KILN__BQ_Q4_0 ? BLK / 2 : BLK; }

/* ---- weights ------------------------------------------------------------------------------- */

/* q4_0: the value of largest magnitude m maps to -8 exactly (d = m / -8), the others round to
 * [-8, 7] (a value of the other sign as large as m would be +8: it clamps to 7, an error of d). */
static float quantize_q4(const float *x, int64_t n, int8_t *q) {
    float m = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        if (!(fabsf(x[i]) <= FLT_MAX)) return NAN; /* inf or NaN */
        if (fabsf(x[i]) > fabsf(m)) m = x[i];
    }
    float d = m / -8.0f, inv = d != 0.0f ? 1.0f / d : INFINITY;
    if (!(fabsf(inv) <= FLT_MAX)) return 1.0f; /* zeros, or too small to invert */
    for (int64_t i = 0; i < n; i++) {
        float v = nearbyintf(x[i] * inv);
        q[i] = (int8_t)(v > 7.0f ? 7 : v < -8.0f ? -8 : v);
    }
    return d;
}

float kiln__bq_quantize_block(kiln__bq_format f, const float *x, int64_t n, int8_t q[KILN__BQ_BLOCK]) {
    memset(q, 0, BLK);
    n = n < BLK ? n : BLK;
    if (n <= 0) return 1.0f;
    return f == KILN__BQ_Q4_0 ? quantize_q4(x, n, q) : kiln__s8_quantize_values(x, 1, n, q);
}

/* The integer of input i of output j in one block of a group gw wide (the layout of the header). */
static inline int weight_at(bool q4, const uint8_t *blk, int64_t gw, int64_t i, int64_t j) {
    if (!q4) return (int8_t)blk[i * gw + j];
    uint8_t v = blk[(i / 2) * gw + j];
    return (i & 1 ? v >> 4 : v & 15) - 8;
}

void kiln__bq_pack_weight(kiln__bq_format f, const int8_t *q, int64_t out, int64_t nblk, uint8_t *packed) {
    bool q4 = f == KILN__BQ_Q4_0;
    int64_t bb = kiln__bq_block_bytes(f), kpad = nblk * BLK;
    for (int64_t o0 = 0; o0 < out; o0 += GROUP) {
        int64_t gw = min64(GROUP, out - o0);
        for (int64_t b = 0; b < nblk; b++) {
            uint8_t *blk = packed + o0 * nblk * bb + b * bb * gw;
            for (int64_t j = 0; j < gw; j++) {
                const int8_t *src = q + (o0 + j) * kpad + b * BLK;
                for (int64_t i = 0; i < BLK; i++) {
                    if (!q4)
                        blk[i * gw + j] = (uint8_t)src[i];
                    else if (i % 2 == 0)
                        blk[(i / 2) * gw + j] = (uint8_t)((src[i] + 8) | (src[i + 1] + 8) << 4);
                }
            }
        }
    }
}

void kiln__bq_dequantize(kiln__bq_format f, const uint8_t *packed, const float *pscales, int64_t cols, int64_t out,
                         int64_t o_begin, int64_t o_end, int64_t k, float *w, int64_t ldw) {
    bool q4 = f == KILN__BQ_Q4_0;
    int64_t bb = kiln__bq_block_bytes(f), nblk = (k + BLK - 1) / BLK;
    for (int64_t o0 = o_begin; o0 < o_end; o0 += GROUP) {
        int64_t gw = min64(GROUP, out - o0);
        for (int64_t b = 0; b < nblk; b++) {
            const uint8_t *blk = packed + o0 * nblk * bb + b * bb * gw;
            for (int64_t j = 0; j < gw; j++) {
                float d = pscales[o0 * cols + b * gw + j], *row = w + (o0 + j - o_begin) * ldw + b * BLK;
                for (int64_t i = 0; i < min64(BLK, k - b * BLK); i++) row[i] = (float)weight_at(q4, blk, gw, i, j) * d;
            }
        }
    }
}

/* ---- the activations ------------------------------------------------------------------------ */

/* The row tiles every path walks: 16 rows at a time, then 8, 4, 2 and 1 for the rest. */
static int64_t tile_rows(int64_t rows, int64_t r) {
    int64_t left = rows - r;
    return left >= 16 ? 16 : left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
}

void kiln__bq_pack_x(const float *x, int64_t ldx, int64_t rows, int64_t k, float *xp) {
    for (int64_t r0 = 0, R; r0 < rows; r0 += R) {
        R = tile_rows(rows, r0);
        float *t = xp + r0 * k;
        for (int64_t r = 0; r < R; r++)
            for (int64_t i = 0; i < k; i++) t[i * R + r] = x[(r0 + r) * ldx + i];
    }
}

/* ---- the products ----------------------------------------------------------------------------- */

/* Any group width, from the packed layout as it is: the reference the vector paths follow. */
static void group_scalar(bool q4, const float *xp, int64_t rows, const uint8_t *g, int64_t gw, const float *ws,
                         int64_t k, float *y, int64_t ldy) {
    int64_t nblk = (k + BLK - 1) / BLK, bb = q4 ? BLK / 2 : BLK;
    for (int64_t r0 = 0, R; r0 < rows; r0 += R) {
        R = tile_rows(rows, r0);
        const float *t = xp + r0 * k;
        for (int64_t r = 0; r < R; r++)
            for (int64_t j = 0; j < gw; j++) {
                float acc = 0.0f;
                for (int64_t b = 0; b < nblk; b++) {
                    const uint8_t *blk = g + b * bb * gw;
                    float d = ws[b * gw + j];
                    for (int64_t i = 0; i < min64(BLK, k - b * BLK); i++)
                        acc += t[(b * BLK + i) * R + r] * ((float)weight_at(q4, blk, gw, i, j) * d);
                }
                y[(r0 + r) * ldy + j] = acc;
            }
    }
}

#if HAVE_X86
/* R <= 16 rows (a constant after inlining) of one full-width group, from a tile of packed
 * activations t [k][R] (so each broadcast is one pointer and a constant offset: with a pointer
 * per row, 16 rows' pointers did not fit the registers and every FMA reloaded one from the
 * stack); lanes: the outputs stored. The weights come from L3 or memory (a model's are larger
 * than L2): ask for them a few blocks ahead (past the group's end is the next group's start,
 * past the matrix harmless). */
AVX512_TARGET static INLINE void tile_avx512(const int R, const bool q4, const float *t, const uint8_t *g,
                                             const float *ws, int64_t k, __mmask16 lanes, float *y, int64_t ldy) {
    const int64_t nblk = (k + BLK - 1) / BLK, bb = q4 ? BLK / 2 : BLK;
    __m512 acc[16];
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    const __m128i low4 = _mm_set1_epi8(0x0F);
    for (int64_t b = 0; b < nblk; b++) {
        const uint8_t *wb = g + b * bb * GROUP;
        const char *ahead = (const char *)(wb + BQ_PREFETCH_BLOCKS * bb * GROUP);
        for (int64_t c = 0; c < bb * GROUP; c += 64) _mm_prefetch(ahead + c, _MM_HINT_T0);
        const __m512 d = _mm512_loadu_ps(ws + b * GROUP);
        const float *xb = t + b * BLK * R;
        const int64_t n = min64(BLK, k - b * BLK);
        if (!q4) {
#pragma GCC unroll 4
            for (int64_t i = 0; i < n; i++) {
                __m512 w = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(wb + i * GROUP))));
                w = _mm512_mul_ps(w, d);
#pragma GCC unroll 16
                for (int r = 0; r < R; r++) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(xb[i * R + r]), w, acc[r]);
            }
        } else {
            const __m512 d8 = _mm512_mul_ps(d, _mm512_set1_ps(-8.0f));
#pragma GCC unroll 2
            for (int64_t p = 0; p < (n + 1) / 2; p++) {
                __m128i v = _mm_loadu_si128((const __m128i *)(wb + p * GROUP));
                __m512 w0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(v, low4))), d, d8);
#pragma GCC unroll 16
                for (int r = 0; r < R; r++) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(xb[2 * p * R + r]), w0, acc[r]);
                if (2 * p + 1 == n) break; /* an odd tail: x has no input 2p + 1 */
                __m512 w1 = _mm512_fmadd_ps(
                    _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(v, 4), low4))), d, d8);
#pragma GCC unroll 16
                for (int r = 0; r < R; r++) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(xb[(2 * p + 1) * R + r]), w1, acc[r]);
            }
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) _mm512_mask_storeu_ps(y + r * ldy, lanes, acc[r]);
}

#define GROUP_TILES(Q4)                                                                                           \
    for (int64_t r0 = 0, R; r0 < rows; r0 += R) {                                                                 \
        R = tile_rows(rows, r0);                                                                                  \
        const float *t = xp + r0 * k;                                                                             \
        float *yt = y + r0 * ldy;                                                                                 \
        switch (R) {                                                                                              \
        case 16: tile_avx512(16, Q4, t, g, ws, k, lanes, yt, ldy); break;                                         \
        case 8: tile_avx512(8, Q4, t, g, ws, k, lanes, yt, ldy); break;                                           \
        case 4: tile_avx512(4, Q4, t, g, ws, k, lanes, yt, ldy); break;                                           \
        case 2: tile_avx512(2, Q4, t, g, ws, k, lanes, yt, ldy); break;                                           \
        default: tile_avx512(1, Q4, t, g, ws, k, lanes, yt, ldy); break;                                          \
        }                                                                                                         \
    }

AVX512_TARGET static void group_avx512_q8(const float *xp, int64_t rows, const uint8_t *g, const float *ws, int64_t k,
                                          __mmask16 lanes, float *y, int64_t ldy) {
    GROUP_TILES(false)
}

AVX512_TARGET static void group_avx512_q4(const float *xp, int64_t rows, const uint8_t *g, const float *ws, int64_t k,
                                          __mmask16 lanes, float *y, int64_t ldy) {
    GROUP_TILES(true)
}

/* AVX2: the group's 16 outputs as two halves of 8, S <= 4 rows (16 registers) of a packed tile
 * whose inputs are T values apart. */
AVX2_TARGET static INLINE void fma_rows_avx2(const int S, __m256 acc[4][2], const float *xk, __m256 w0, __m256 w1) {
#pragma GCC unroll 4
    for (int r = 0; r < S; r++) {
        __m256 xr = _mm256_set1_ps(xk[r]);
        acc[r][0] = _mm256_fmadd_ps(xr, w0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(xr, w1, acc[r][1]);
    }
}

AVX2_TARGET static INLINE void tile_avx2(const int S, const bool q4, const float *t, int64_t T, const uint8_t *g,
                                         const float *ws, int64_t k, const __m256i *lanes, float *y, int64_t ldy) {
    const int64_t nblk = (k + BLK - 1) / BLK, bb = q4 ? BLK / 2 : BLK;
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int r = 0; r < S; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    const __m128i low4 = _mm_set1_epi8(0x0F);
    for (int64_t b = 0; b < nblk; b++) {
        const uint8_t *wb = g + b * bb * GROUP;
        const char *ahead = (const char *)(wb + BQ_PREFETCH_BLOCKS * bb * GROUP);
        for (int64_t c = 0; c < bb * GROUP; c += 64) _mm_prefetch(ahead + c, _MM_HINT_T0);
        const __m256 d0 = _mm256_loadu_ps(ws + b * GROUP), d1 = _mm256_loadu_ps(ws + b * GROUP + 8);
        const float *xb = t + b * BLK * T;
        const int64_t n = min64(BLK, k - b * BLK);
        if (!q4) {
            for (int64_t i = 0; i < n; i++) {
                __m128i v = _mm_loadu_si128((const __m128i *)(wb + i * GROUP));
                __m256 w0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), d0);
                __m256 w1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8))), d1);
                fma_rows_avx2(S, acc, xb + i * T, w0, w1);
            }
        } else {
            const __m256 e0 = _mm256_mul_ps(d0, _mm256_set1_ps(-8.0f)), e1 = _mm256_mul_ps(d1, _mm256_set1_ps(-8.0f));
            for (int64_t p = 0; p < (n + 1) / 2; p++) {
                __m128i v = _mm_loadu_si128((const __m128i *)(wb + p * GROUP));
                __m128i lo = _mm_and_si128(v, low4), hi = _mm_and_si128(_mm_srli_epi16(v, 4), low4);
                __m256 w0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)), d0, e0);
                __m256 w1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8))), d1, e1);
                fma_rows_avx2(S, acc, xb + 2 * p * T, w0, w1);
                if (2 * p + 1 == n) break; /* an odd tail */
                w0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi)), d0, e0);
                w1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8))), d1, e1);
                fma_rows_avx2(S, acc, xb + (2 * p + 1) * T, w0, w1);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < S; r++) {
        _mm256_maskstore_ps(y + r * ldy, lanes[0], acc[r][0]);
        _mm256_maskstore_ps(y + r * ldy + 8, lanes[1], acc[r][1]);
    }
}

AVX2_TARGET static void group_avx2(bool q4, const float *xp, int64_t rows, const uint8_t *g, const float *ws, int64_t k,
                                   int64_t gw, float *y, int64_t ldy) {
    __m256i lanes[2];
    for (int h = 0; h < 2; h++)
        lanes[h] = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(gw - 8 * h)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (int64_t r0 = 0, R; r0 < rows; r0 += R) {
        R = tile_rows(rows, r0);
        const float *t = xp + r0 * k;
        for (int64_t s0 = 0, S; s0 < R; s0 += S) { /* the tile in pieces of 4 rows (or 2, 1) */
            S = R - s0 >= 4 ? 4 : R - s0;
            float *ys = y + (r0 + s0) * ldy;
            if (q4)
                S == 4 ? tile_avx2(4, true, t + s0, R, g, ws, k, lanes, ys, ldy)
                : S == 2 ? tile_avx2(2, true, t + s0, R, g, ws, k, lanes, ys, ldy)
                         : tile_avx2(1, true, t + s0, R, g, ws, k, lanes, ys, ldy);
            else
                S == 4 ? tile_avx2(4, false, t + s0, R, g, ws, k, lanes, ys, ldy)
                : S == 2 ? tile_avx2(2, false, t + s0, R, g, ws, k, lanes, ys, ldy)
                         : tile_avx2(1, false, t + s0, R, g, ws, k, lanes, ys, ldy);
        }
    }
}
#endif

/* A group narrower than 16 (the last of an out that is not a multiple) copied to full width,
 * zeros beyond gw, so the vector paths read it as any other: false when out of memory. */
static bool pad_group(int64_t bb, int64_t nblk, int64_t cols, const uint8_t *g, const float *ws, int64_t gw,
                      uint8_t **wpad, float **spad) {
    *wpad = calloc((size_t)(nblk * bb * GROUP) + 1, 1);
    *spad = calloc((size_t)(cols * GROUP) + 1, sizeof **spad);
    if (!*wpad || !*spad) {
        free(*wpad), free(*spad);
        return false;
    }
    for (int64_t b = 0; b < nblk; b++)
        for (int64_t i = 0; i < bb; i++) memcpy(*wpad + (b * bb + i) * GROUP, g + b * bb * gw + i * gw, (size_t)gw);
    for (int64_t c = 0; c < cols; c++) memcpy(*spad + c * GROUP, ws + c * gw, (size_t)gw * sizeof **spad);
    return true;
}

void kiln__bq_epilogue_rows(kiln__bq_epilogue e, const float *pscales, int64_t out, int64_t o_begin, int64_t o_end,
                            int64_t nblk, float *y, int64_t ldy, int64_t rows) {
    if (e == KILN__BQ_PLAIN || o_begin >= o_end) return;
    kiln__vmath_f32_fn gelu = e == KILN__BQ_BIAS_GELU ? kiln__vmath_f32_kernel(KILN_VMATH_GELU) : NULL;
    for (int64_t r = 0; r < rows; r++) {
        float *yr = y + r * ldy;
        for (int64_t o0 = o_begin; o0 < o_end; o0 += GROUP) {
            int64_t gw = min64(GROUP, out - o0);
            const float *bias = pscales + o0 * (nblk + 1) + nblk * gw;
            for (int64_t j = 0; j < gw; j++) yr[o0 + j] += bias[j];
        }
        if (gelu) gelu(yr + o_begin, yr + o_begin, min64(o_end, out) - o_begin);
    }
}

void kiln__gemm_bq_packed(kiln__bq_format f, const float *xp, int64_t rows, const uint8_t *packed, const float *pscales,
                          int64_t out, int64_t o_begin, int64_t o_end, int64_t k, kiln__bq_epilogue e, float *y,
                          int64_t ldy) {
    bq_path path = path_now();
    bool q4 = f == KILN__BQ_Q4_0;
    int64_t nblk = (k + BLK - 1) / BLK, cols = nblk + (e != KILN__BQ_PLAIN), bb = kiln__bq_block_bytes(f);
    for (int64_t o0 = o_begin; o0 < o_end && o0 < out; o0 += GROUP) {
        int64_t gw = min64(GROUP, out - o0);
        const uint8_t *g = packed + o0 * nblk * bb;
        const float *ws = pscales + o0 * cols;
        uint8_t *wpad = NULL;
        float *spad = NULL;
        bool vec = path != PATH_SCALAR && (gw == GROUP || pad_group(bb, nblk, cols, g, ws, gw, &wpad, &spad));
        if (wpad) g = wpad, ws = spad;
#if HAVE_X86
        if (vec && path == PATH_AVX512) {
            __mmask16 lanes = (__mmask16)(gw >= GROUP ? 0xFFFF : (1u << gw) - 1);
            (q4 ? group_avx512_q4 : group_avx512_q8)(xp, rows, g, ws, k, lanes, y + o0, ldy);
        } else if (vec && path == PATH_AVX2) {
            group_avx2(q4, xp, rows, g, ws, k, gw, y + o0, ldy);
        } else
#endif
        {
            (void)vec;
            group_scalar(q4, xp, rows, g, gw, ws, k, y + o0, ldy);
        }
        free(wpad), free(spad);
    }
    kiln__bq_epilogue_rows(e, pscales, out, o_begin, min64(o_end, out), nblk, y, ldy, rows);
}

int kiln__gemm_bq(kiln__bq_format f, const float *x, int64_t ldx, int64_t rows, const uint8_t *packed,
                  const float *pscales, int64_t out, int64_t o_begin, int64_t o_end, int64_t k, kiln__bq_epilogue e,
                  float *y, int64_t ldy) {
    float *xp = malloc((size_t)(rows * k) * sizeof *xp + 1);
    if (!xp) return -1;
    kiln__bq_pack_x(x, ldx, rows, k, xp);
    kiln__gemm_bq_packed(f, xp, rows, packed, pscales, out, o_begin, o_end, k, e, y, ldy);
    free(xp);
    return 0;
}

void kiln__gemm_bq_dequantized(const float *x, int64_t rows, const float *wf, int64_t out, int64_t k, float *y) {
    kiln__gemm_f32(0, 1, rows, out, k, 1.0f, x, k, wf, k, 0.0f, y, out);
}
