/* B moved into oneDNN's pair-interleaved bf16 layout (see gemm_lowp_pack.h).
 *
 * Why: a packed bf16 product (gemm_lowp.c) reorders all of B once before its row tiles run, and
 * oneDNN 2.6's reorder into that layout is its generic one (jit:uni): 0.30 ms for a 2048 x 512
 * slice in cache, 1.2 ms cold, about 13 GB/s, so 3-4% of a 2048 x 2048 x 2048 product's 18-19 ms
 * on two threads (AMD EPYC Zen 5, ONEDNN_VERBOSE=1, 2026-11-30), which the bf16 goal of #27
 * (1.9x the f32 GFLOP/s) has no room for. A pair of rows interleaved is one widening of each
 * row's 16 values to 32-bit lanes, a shift and an or: the loop streams at memory speed. Rows
 * outer, so B is read in order, each pair's lanes written where their column block wants them. */
#include "backend/cpu/gemm_lowp_pack.h"

#include <stdatomic.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define PACK_HAVE_AVX512 1
#define PACK_TARGET __attribute__((target("avx512f")))
#else
#define PACK_HAVE_AVX512 0
#endif

static atomic_int forced = -1;

void kiln__gemm_bf16_pack_force(int mode) { atomic_store(&forced, mode < 0 ? -1 : mode != 0); }

bool kiln__gemm_bf16_pack_forced_off(void) { return atomic_load_explicit(&forced, memory_order_relaxed) == 0; }

bool kiln__gemm_bf16_pack_ok(const kiln__bf16_pairs *l) {
#if PACK_HAVE_AVX512
    return !kiln__gemm_bf16_pack_forced_off() && __builtin_cpu_supports("avx512f") && l->k_block > 0 &&
           l->k_block % 2 == 0 && l->n_block > 0 && l->n_block % 16 == 0 && l->k_stride > 0 && l->n_stride > 0;
#else
    (void)l;
    return false;
#endif
}

#if PACK_HAVE_AVX512

/* Rows r and r + 1 (odd: none, zeros) of columns [c0, c1) into their pair's lanes. */
PACK_TARGET static void pack_pair(const uint16_t *row0, const uint16_t *row1, int64_t c0, int64_t c1, uint32_t *pair,
                                  const kiln__bf16_pairs *l) {
    int64_t c = c0;
    for (; c + 16 <= c1; c += 16) { /* 16 columns within one column block (n_block % 16 == 0) */
        __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(row0 + c)));
        __m512i hi = row1 ? _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(row1 + c))) : _mm512_setzero_si512();
        uint32_t *to = pair + (c / l->n_block) * (l->n_stride / 2) + c % l->n_block;
        _mm512_storeu_si512(to, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
    for (; c < c1; c++)
        pair[(c / l->n_block) * (l->n_stride / 2) + c % l->n_block] = row0[c] | (uint32_t)(row1 ? row1[c] : 0) << 16;
}

PACK_TARGET void kiln__gemm_bf16_pack_pairs(const uint16_t *b, int64_t ldb, int64_t k, int64_t j0, int64_t cols,
                                            uint16_t *packed, const kiln__bf16_pairs *l) {
    for (int64_t r = 0; r < k; r += 2) {
        /* the pair's lanes for column 0 of every column block, as 32-bit words */
        uint32_t *pair = (uint32_t *)(packed + (r / l->k_block) * l->k_stride) + (r % l->k_block) / 2 * l->n_block;
        pack_pair(b + r * ldb, r + 1 < k ? b + (r + 1) * ldb : NULL, j0, j0 + cols, pair, l);
    }
}

#else

void kiln__gemm_bf16_pack_pairs(const uint16_t *b, int64_t ldb, int64_t k, int64_t j0, int64_t cols, uint16_t *packed,
                                const kiln__bf16_pairs *l) {
    (void)b, (void)ldb, (void)k, (void)j0, (void)cols, (void)packed, (void)l;
}

#endif
