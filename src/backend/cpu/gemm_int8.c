/* int8 x int8 -> int32 products over blocks of k, rescaled to f32, in three ISA paths (see
 * gemm_int8.h). The SIMD paths take the unsigned-times-signed byte products the instructions
 * have: |x| times w with x's sign moved onto w, exact because |x| <= 127. Four outputs at a
 * time share an input row's loads, signs and block scales. */
#include "backend/cpu/gemm_int8.h"

#include <string.h>

#include "backend/cpu/vmath.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_X86 1
#define VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vnni")))
#define AVX2_TARGET __attribute__((target("avx2,fma")))
#else
#define HAVE_X86 0
#endif

#define BLK KILN__S8_BLOCK

typedef enum { PATH_SCALAR, PATH_AVX2, PATH_VNNI } s8_path;

static s8_path path_now(void) {
#if HAVE_X86
    const char *isa = kiln__vmath_isa(); /* KILN_ISA's choice, capped by the CPU */
    if (strcmp(isa, "avx512") == 0 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni"))
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

static int32_t dot_scalar(const int8_t *a, const int8_t *b, int64_t n) {
    int32_t acc = 0;
    for (int64_t i = 0; i < n; i++) acc += (int32_t)a[i] * (int32_t)b[i];
    return acc;
}

/* sum over blocks of xs[b] * (a . w over block b), from block b0 on */
static float blocks_scalar(const int8_t *a, const int8_t *w, const float *xs, int64_t b0, int64_t k) {
    float acc = 0.0f;
    for (int64_t i = b0 * BLK; i < k; i += BLK)
        acc += xs[i / BLK] * (float)dot_scalar(a + i, w + i, k - i < BLK ? k - i : BLK);
    return acc;
}

#if HAVE_X86
/* out[j] = blocks(a, w[j]) for j < 4 (rows of w ldw apart); 64 bytes (two blocks) a step, the
 * 16 int32 lanes of a step holding block 2s in lanes 0-7 and 2s+1 in lanes 8-15 */
VNNI_TARGET static void dot4_vnni(const int8_t *a, const int8_t *w, int64_t ldw, int64_t k, const float *xs,
                                  float out[4]) {
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    int64_t nblk = (k + BLK - 1) / BLK;
    for (int64_t i = 0; i < k; i += 2 * BLK) {
        __mmask64 m = k - i >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (k - i)) - 1);
        __m512i x = _mm512_maskz_loadu_epi8(m, a + i);
        __mmask64 neg = _mm512_movepi8_mask(x);
        __m512i ux = _mm512_abs_epi8(x);
        int64_t b = i / BLK;
        __m512 sc = _mm512_mask_mov_ps(_mm512_set1_ps(xs[b]), 0xFF00, _mm512_set1_ps(b + 1 < nblk ? xs[b + 1] : 0.0f));
        for (int j = 0; j < 4; j++) {
            __m512i v = _mm512_maskz_loadu_epi8(m, w + j * ldw + i);
            v = _mm512_mask_sub_epi8(v, neg, _mm512_setzero_si512(), v);
            __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ux, v);
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), sc, acc[j]);
        }
    }
    for (int j = 0; j < 4; j++) out[j] = _mm512_reduce_add_ps(acc[j]);
}

/* the same, one 32-byte block a step; a last partial block in plain C */
AVX2_TARGET static void dot4_avx2(const int8_t *a, const int8_t *w, int64_t ldw, int64_t k, const float *xs,
                                  float out[4]) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    const __m256i ones = _mm256_set1_epi16(1);
    int64_t i = 0;
    for (; i + BLK <= k; i += BLK) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(a + i));
        __m256i ux = _mm256_abs_epi8(x);
        __m256 sc = _mm256_set1_ps(xs[i / BLK]);
        for (int j = 0; j < 4; j++) {
            __m256i v = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(w + j * ldw + i)), x);
            /* pairs of |x| * w sum to at most 2 * 127 * 127 < 32767: no saturation */
            __m256i d = _mm256_madd_epi16(_mm256_maddubs_epi16(ux, v), ones);
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), sc, acc[j]);
        }
    }
    for (int j = 0; j < 4; j++) {
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc[j]), _mm256_extractf128_ps(acc[j], 1));
        s = _mm_hadd_ps(s, s);
        s = _mm_hadd_ps(s, s);
        out[j] = _mm_cvtss_f32(s) + blocks_scalar(a, w + j * ldw, xs, i / BLK, k);
    }
}
#endif

void kiln__gemm_s8_rescale(const int8_t *qx, const float *xscale, int64_t rows, const int8_t *qw,
                           const float *wscale, int64_t o_begin, int64_t o_end, int64_t k, float *y, int64_t ldy) {
    s8_path path = path_now();
    int64_t nblk = (k + BLK - 1) / BLK;
    int64_t o = o_begin;
#if HAVE_X86
    /* four outputs' weights (4 k bytes) stay in L1 while every row passes over them */
    if (path != PATH_SCALAR)
        for (; o + 4 <= o_end; o += 4)
            for (int64_t r = 0; r < rows; r++) {
                float d[4];
                if (path == PATH_VNNI)
                    dot4_vnni(qx + r * k, qw + o * k, k, k, xscale + r * nblk, d);
                else
                    dot4_avx2(qx + r * k, qw + o * k, k, k, xscale + r * nblk, d);
                for (int j = 0; j < 4; j++) y[r * ldy + o + j] = d[j] * wscale[o + j];
            }
#endif
    for (; o < o_end; o++)
        for (int64_t r = 0; r < rows; r++)
            y[r * ldy + o] = blocks_scalar(qx + r * k, qw + o * k, xscale + r * nblk, 0, k) * wscale[o];
}
