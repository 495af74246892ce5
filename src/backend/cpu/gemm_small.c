/* Small-M products against a transposed weight: C [m, n] = A [m, k] W^T (+ C), W stored
 * [n, k] row-major, as a linear layer over a few tokens runs it (one 16-token sentence through
 * BERT: [16, 384] x [384, 1152]).
 *
 * Why: BLAS packs all of W for every call, and at m = 16 packing costs as much memory traffic
 * as the product itself (W is read once either way), while the product is a few hundred
 * microseconds. Here each output is a dot product of two contiguous rows: a 4 x 3 block of
 * outputs keeps twelve vector accumulators, reads 4 rows of A (in L1: m x k is at most
 * 32 x 1536 floats here) and 3 rows of W straight from memory, with nothing packed. The
 * sums run 8 lanes wide in f32 then across lanes, so results differ from BLAS's order by
 * rounding only. */
#include <stdatomic.h>
#include <string.h>

#include "backend/cpu/gemm_small.h"
#include "backend/cpu/vmath.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SMALL_HAVE_AVX2 1
#define SMALL_TARGET __attribute__((target("avx2,fma")))
#else
#define SMALL_HAVE_AVX2 0
#endif

int64_t kiln__gemm_small_prefetch_share(int64_t lines, int64_t steps, int64_t step0, int64_t *first, int64_t *count) {
    int64_t per_step = steps > 0 ? (lines + steps - 1) / steps : 0;
    int64_t lo = step0 * per_step < lines ? step0 * per_step : lines;
    *first = lo;
    *count = lines - lo;
    return per_step;
}

static atomic_int small_isa_cap = 3; /* tests: 1 plain C, 2 AVX2, 3 whatever the CPU has */

/* The cap above, lowered by KILN_ISA as the vector math follows it (vmath.c). */
static int small_isa_level(void) {
    const char *isa = kiln__vmath_isa();
    int env = strcmp(isa, "scalar") == 0 ? 1 : strcmp(isa, "avx2") == 0 ? 2 : 3;
    int cap = atomic_load(&small_isa_cap);
    return env < cap ? env : cap;
}

void kiln__gemm_small_limit_isa(int level) { atomic_store(&small_isa_cap, level < 1 ? 3 : level); }

#if SMALL_HAVE_AVX2
#define SMALL_TARGET512 __attribute__((target("avx512f,avx2,fma")))
static int small_avx512(void) { return small_isa_level() >= 3 && __builtin_cpu_supports("avx512f"); }
#endif

int kiln__gemm_small_available(void) {
#if SMALL_HAVE_AVX2
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

#if SMALL_HAVE_AVX2
SMALL_TARGET static inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

SMALL_TARGET512 static inline float hsum512(__m512 v) { return _mm512_reduce_add_ps(v); }

/* Where the next block of W is prefetched from: its lines (64 bytes) in address order, `per_step`
 * of them at each vector step of the arithmetic (small_prefetch). The last pass may run past
 * the block's end by less than a step's share per step: a prefetch never faults. */
typedef struct {
    const char *at;
    int64_t per_step;
} small_pf;

/* The cursor for pass `pass` of `passes` over a block of k columns of W whose next block (nr
 * rows at next, NULL: none) is prefetched meanwhile: its lines spread evenly over every pass's
 * steps (kiln__gemm_small_prefetch_share). The rows' gaps (ldw > k) go along: a linear layer's
 * weight has none, and a line prefetched in vain costs less than a cursor that skips it. */
static small_pf small_prefetch(const float *next, int64_t nr, int64_t k, int64_t ldw, int64_t lanes, int64_t pass,
                               int64_t passes) {
    small_pf pf = {0};
    if (!next) return pf;
    int64_t first, count;
    pf.per_step = kiln__gemm_small_prefetch_share((nr * ldw + 15) / 16, passes * (k / lanes), pass * (k / lanes), &first,
                                                  &count);
    if (count == 0) pf.per_step = 0;
    pf.at = (const char *)next + 64 * first;
    return pf;
}

/* One kernel per vector width, from one text:
 *   block_S(MR, NR, ..., pf) out[i][j] = dot(a row i, w row j) for an MR x NR block (MR <= 4,
 *                         NR <= NRMAX; constants once inlined, so the accumulators stay in
 *                         registers: 4 x 3 of 8 floats with AVX2, 4 x 6 of 16 with AVX-512);
 *                         at each vector step it prefetches pf.per_step lines of the next block
 *   nt_S(...)             C's columns NRMAX at a time: each block of W rows is read against
 *                         every row of A while it is in L1 (4 rows at a time, then the rest
 *                         as a narrower block), and every one of those passes prefetches its
 *                         share of the next block's rows into L2; the last columns one at a time.
 * The W block order matters because W comes from memory (a 16-token sentence reads MiniLM's
 * 42 MB of weights once): the rows of A outer, as this was first, read all of W 4 times over
 * from L2/L3 and overlapped little of the stream with the arithmetic. The prefetch schedule
 * matters for the same reason: the first pass alone prefetching the whole next block into L1
 * (as this was until 2026-11-30) asked for 6 lines a step (one per row) for a quarter of the
 * time and none for the rest; spread over all passes, 1.5 lines a step at m = 16, into L2 (the
 * block is read a pass later, not at once), the stream overlaps the arithmetic throughout (a MiniLM pass of the 24 products, 16 rows, one thread: 4.1 ms
 * against 3.5, Intel Xeon family 6 model 207; BENCHMARKS.md). Each output is still the same
 * dot product in the same order, whatever the block shape. */
#define SMALL_KERNEL(S, TARGET, VEC, LANES, NRMAX, ZERO, LOAD, FMA, HSUM)                                           \
    TARGET __attribute__((always_inline)) static inline void block_##S(int MR, int NR, int64_t k, const float *a,     \
                                                                       int64_t lda, const float *w, int64_t ldw,      \
                                                                       small_pf pf, float out[4][NRMAX]) {            \
        VEC acc[4][NRMAX];                                                                                          \
        for (int i = 0; i < MR; i++)                                                                                \
            for (int j = 0; j < NR; j++) acc[i][j] = ZERO();                                                        \
        int64_t p = 0;                                                                                              \
        for (; p + LANES <= k; p += LANES) {                                                                        \
            VEC wv[NRMAX];                                                                                          \
            for (int64_t q = 0; q < pf.per_step; q++, pf.at += 64) _mm_prefetch(pf.at, _MM_HINT_T1);                \
            for (int j = 0; j < NR; j++) wv[j] = LOAD(w + j * ldw + p);                                             \
            for (int i = 0; i < MR; i++) {                                                                          \
                VEC av = LOAD(a + i * lda + p);                                                                     \
                for (int j = 0; j < NR; j++) acc[i][j] = FMA(av, wv[j], acc[i][j]);                                 \
            }                                                                                                       \
        }                                                                                                           \
        for (int i = 0; i < MR; i++)                                                                                \
            for (int j = 0; j < NR; j++) {                                                                          \
                float s = HSUM(acc[i][j]);                                                                          \
                for (int64_t q = p; q < k; q++) s += a[i * lda + q] * w[j * ldw + q];                               \
                out[i][j] = s;                                                                                      \
            }                                                                                                       \
    }                                                                                                               \
    TARGET __attribute__((always_inline)) static inline void store_##S(int MR, int NR, const float out[4][NRMAX],   \
                                                                       int accumulate, float *c, int64_t ldc) {       \
        for (int r = 0; r < MR; r++)                                                                                \
            for (int q = 0; q < NR; q++) {                                                                          \
                float *y = c + r * ldc + q;                                                                         \
                *y = accumulate ? *y + out[r][q] : out[r][q];                                                       \
            }                                                                                                       \
    }                                                                                                               \
    TARGET static void nt_##S(int64_t m, int64_t n0, int64_t n1, int64_t k, const float *a, int64_t lda,            \
                              const float *w, int64_t ldw, int accumulate, float *c, int64_t ldc) {                 \
        float out[4][NRMAX];                                                                                        \
        int64_t j = n0, passes = (m + 3) / 4;                                                                       \
        for (; j + NRMAX <= n1; j += NRMAX) {                                                                       \
            const float *wj = w + j * ldw, *next = j + 2 * NRMAX <= n1 ? wj + NRMAX * ldw : NULL;                   \
            int64_t i = 0;                                                                                          \
            for (; i + 4 <= m; i += 4) {                                                                            \
                block_##S(4, NRMAX, k, a + i * lda, lda, wj, ldw, small_prefetch(next, NRMAX, k, ldw, LANES, i / 4, passes), out); \
                store_##S(4, NRMAX, out, accumulate, c + i * ldc + j, ldc);                                         \
            }                                                                                                       \
            const float *ai = a + i * lda;                                                                          \
            small_pf pf = small_prefetch(next, NRMAX, k, ldw, LANES, i / 4, passes);                                \
            switch (m - i) { /* constant block shapes, so the accumulators stay in registers */                    \
            case 1: block_##S(1, NRMAX, k, ai, lda, wj, ldw, pf, out); break;                                      \
            case 2: block_##S(2, NRMAX, k, ai, lda, wj, ldw, pf, out); break;                                      \
            case 3: block_##S(3, NRMAX, k, ai, lda, wj, ldw, pf, out); break;                                      \
            default: break;                                                                                         \
            }                                                                                                       \
            if (m > i) store_##S((int)(m - i), NRMAX, out, accumulate, c + i * ldc + j, ldc);                       \
        }                                                                                                           \
        for (; j < n1; j++) /* the last columns, one output at a time */                                            \
            for (int64_t r = 0; r < m; r++) {                                                                       \
                block_##S(1, 1, k, a + r * lda, lda, w + j * ldw, ldw, (small_pf){0}, out);                          \
                store_##S(1, 1, out, accumulate, c + r * ldc + j, ldc);                                             \
            }                                                                                                       \
    }

SMALL_KERNEL(avx2, SMALL_TARGET, __m256, 8, 3, _mm256_setzero_ps, _mm256_loadu_ps, _mm256_fmadd_ps, hsum256)
SMALL_KERNEL(avx512, SMALL_TARGET512, __m512, 16, 6, _mm512_setzero_ps, _mm512_loadu_ps, _mm512_fmadd_ps, hsum512)
#endif

void kiln__gemm_small_nt_f32(int64_t m, int64_t n0, int64_t n1, int64_t k, const float *a, int64_t lda, const float *w,
                             int64_t ldw, int accumulate, float *c, int64_t ldc) {
#if SMALL_HAVE_AVX2
    if (kiln__gemm_small_available() && small_avx512()) {
        nt_avx512(m, n0, n1, k, a, lda, w, ldw, accumulate, c, ldc);
        return;
    }
    if (kiln__gemm_small_available() && small_isa_level() >= 2) {
        nt_avx2(m, n0, n1, k, a, lda, w, ldw, accumulate, c, ldc);
        return;
    }
#endif
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = n0; j < n1; j++) {
            float s = 0;
            for (int64_t p = 0; p < k; p++) s += a[i * lda + p] * w[j * ldw + p];
            c[i * ldc + j] = accumulate ? c[i * ldc + j] + s : s;
        }
}
