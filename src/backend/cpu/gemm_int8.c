/* int8 x int8 -> int32 products rescaled to f32, in three ISA paths (see gemm_int8.h). The
 * SIMD paths take the unsigned-times-signed byte products the instructions have: |x| times w
 * with x's sign moved onto w, exact because |x| <= 127. Four outputs at a time share the loads
 * and sign mask of an input row. */
#include "backend/cpu/gemm_int8.h"

#include <string.h>

#include "backend/cpu/vmath.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_X86 1
#define VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vnni")))
#define AVX2_TARGET __attribute__((target("avx2")))
#else
#define HAVE_X86 0
#endif

typedef enum { PATH_SCALAR, PATH_AVX2, PATH_VNNI } s8_path;

static s8_path path_now(void) {
#if HAVE_X86
    const char *isa = kiln__vmath_isa(); /* KILN_ISA's choice, capped by the CPU */
    if (strcmp(isa, "avx512") == 0 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni"))
        return PATH_VNNI;
    if (strcmp(isa, "scalar") != 0 && __builtin_cpu_supports("avx2")) return PATH_AVX2;
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

#if HAVE_X86
/* out[j] = a . w[j] for j < 4 (rows of w ldw apart) */
VNNI_TARGET static void dot4_vnni(const int8_t *a, const int8_t *w, int64_t ldw, int64_t n, int32_t out[4]) {
    __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
    for (int64_t i = 0; i < n; i += 64) {
        __mmask64 m = n - i >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (n - i)) - 1);
        __m512i x = _mm512_maskz_loadu_epi8(m, a + i);
        __mmask64 neg = _mm512_movepi8_mask(x);
        __m512i ux = _mm512_abs_epi8(x);
        for (int j = 0; j < 4; j++) {
            __m512i b = _mm512_maskz_loadu_epi8(m, w + j * ldw + i);
            b = _mm512_mask_sub_epi8(b, neg, _mm512_setzero_si512(), b);
            acc[j] = _mm512_dpbusd_epi32(acc[j], ux, b);
        }
    }
    for (int j = 0; j < 4; j++) out[j] = _mm512_reduce_add_epi32(acc[j]);
}

AVX2_TARGET static void dot4_avx2(const int8_t *a, const int8_t *w, int64_t ldw, int64_t n, int32_t out[4]) {
    __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    const __m256i ones = _mm256_set1_epi16(1);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(a + i));
        __m256i ux = _mm256_abs_epi8(x);
        for (int j = 0; j < 4; j++) {
            __m256i b = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(w + j * ldw + i)), x);
            /* pairs of |x| * w sum to at most 2 * 127 * 127 < 32767: no saturation */
            acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(_mm256_maddubs_epi16(ux, b), ones));
        }
    }
    for (int j = 0; j < 4; j++) {
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc[j]), _mm256_extracti128_si256(acc[j], 1));
        s = _mm_hadd_epi32(s, s);
        s = _mm_hadd_epi32(s, s);
        out[j] = _mm_cvtsi128_si32(s) + dot_scalar(a + i, w + j * ldw + i, n - i);
    }
}
#endif

void kiln__gemm_s8_rescale(const int8_t *qx, const float *xscale, int64_t rows, const int8_t *qw,
                           const float *wscale, int64_t o_begin, int64_t o_end, int64_t k, float *y, int64_t ldy) {
    s8_path path = path_now();
    for (int64_t r = 0; r < rows; r++) {
        const int8_t *a = qx + r * k;
        int64_t o = o_begin;
#if HAVE_X86
        if (path != PATH_SCALAR)
            for (; o + 4 <= o_end; o += 4) {
                int32_t d[4];
                if (path == PATH_VNNI)
                    dot4_vnni(a, qw + o * k, k, k, d);
                else
                    dot4_avx2(a, qw + o * k, k, k, d);
                for (int j = 0; j < 4; j++) y[r * ldy + o + j] = (float)d[j] * xscale[r] * wscale[o + j];
            }
#endif
        for (; o < o_end; o++) y[r * ldy + o] = (float)dot_scalar(a, qw + o * k, k) * xscale[r] * wscale[o];
    }
}
