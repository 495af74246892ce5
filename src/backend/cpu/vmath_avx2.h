/* The vector vocabulary of vmath_simd.h for AVX2 + FMA on 256-bit registers
 * (see the list atop vmath_simd.h): all static inline, built for the ISA by target attribute,
 * so only the functions that use them need a CPU that has it. Included by vmath_avx2.c (the
 * array kernels) and fused_vec_avx2.c (the fused kernel's register chunks), so both run one
 * definition of each function. x86-64 only. */
#ifndef KILN_BACKEND_CPU_VMATH_AVX2_H
#define KILN_BACKEND_CPU_VMATH_AVX2_H

#include <immintrin.h>

#define VM_TARGET __attribute__((target("avx2,fma")))
#define VM_W 8

typedef __m256 vf;
typedef __m256i vi;
typedef __m256 vmask; /* all-ones lanes where true */

static inline VM_TARGET vf v_set(float c) { return _mm256_set1_ps(c); }
static inline VM_TARGET vf v_load(const float *p) { return _mm256_loadu_ps(p); }
static inline VM_TARGET void v_store(float *p, vf a) { _mm256_storeu_ps(p, a); }
static inline VM_TARGET vf v_add(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline VM_TARGET vf v_sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
static inline VM_TARGET vf v_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline VM_TARGET vf v_div(vf a, vf b) { return _mm256_div_ps(a, b); }
static inline VM_TARGET vf v_sqrt(vf a) { return _mm256_sqrt_ps(a); }
static inline VM_TARGET vf v_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline VM_TARGET vf v_fnma(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); }
static inline VM_TARGET vf v_fms(vf a, vf b, vf c) { return _mm256_fmsub_ps(a, b, c); }
static inline VM_TARGET vf v_min(vf a, vf b) { return _mm256_min_ps(a, b); }
static inline VM_TARGET vf v_max(vf a, vf b) { return _mm256_max_ps(a, b); }
static inline VM_TARGET vf v_and(vf a, vf b) { return _mm256_and_ps(a, b); }
static inline VM_TARGET vf v_or(vf a, vf b) { return _mm256_or_ps(a, b); }
static inline VM_TARGET vf v_xor(vf a, vf b) { return _mm256_xor_ps(a, b); }
static inline VM_TARGET vf v_andnot(vf a, vf b) { return _mm256_andnot_ps(a, b); }
static inline VM_TARGET vf v_rint(vf a)
{
    return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

static inline VM_TARGET vmask m_lt(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
static inline VM_TARGET vmask m_gt(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
static inline VM_TARGET vmask m_eq(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
static inline VM_TARGET vmask m_nan(vf a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
static inline VM_TARGET int m_all(vmask m) { return _mm256_movemask_ps(m) == 0xff; }
static inline VM_TARGET vf v_sel(vmask m, vf a, vf b) { return _mm256_blendv_ps(b, a, m); }

static inline VM_TARGET vi v_asint(vf a) { return _mm256_castps_si256(a); }
static inline VM_TARGET vf i_asfloat(vi a) { return _mm256_castsi256_ps(a); }
static inline VM_TARGET vi i_set(int c) { return _mm256_set1_epi32(c); }
static inline VM_TARGET vi i_add(vi a, vi b) { return _mm256_add_epi32(a, b); }
static inline VM_TARGET vi i_sub(vi a, vi b) { return _mm256_sub_epi32(a, b); }
static inline VM_TARGET vi i_and(vi a, vi b) { return _mm256_and_si256(a, b); }
#define i_sra(a, k) _mm256_srai_epi32((a), (k))
static inline VM_TARGET vf i_cvt(vi a) { return _mm256_cvtepi32_ps(a); }
static inline VM_TARGET vi v_cvt_int(vf a) { return _mm256_cvttps_epi32(a); }
static inline VM_TARGET vmask m_ibit(vi a, int bit)
{
    vi b = _mm256_set1_epi32(bit);
    return _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(a, b), b));
}

typedef __m256d vd; /* half a vf, in double */
static inline VM_TARGET vd d_set(double c) { return _mm256_set1_pd(c); }
static inline VM_TARGET vd d_fma(vd a, vd b, vd c) { return _mm256_fmadd_pd(a, b, c); }
static inline VM_TARGET vd d_div(vd a, vd b) { return _mm256_div_pd(a, b); }
static inline VM_TARGET vd v_widen_lo(vf a) { return _mm256_cvtps_pd(_mm256_castps256_ps128(a)); }
static inline VM_TARGET vd v_widen_hi(vf a) { return _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)); }
static inline VM_TARGET vf v_narrow(vd lo, vd hi)
{
    __m256 low_half = _mm256_castps128_ps256(_mm256_cvtpd_ps(lo));
    return _mm256_insertf128_ps(low_half, _mm256_cvtpd_ps(hi), 1);
}

/* 2^n for integral n in [-126, 127]: adding 1.5 * 2^23 + 127 leaves n + 127 in the low
 * mantissa bits, and a shift moves it into the exponent field. */
static inline VM_TARGET vf v_pow2(vf n)
{
    vf biased = _mm256_add_ps(n, _mm256_set1_ps(12583039.0f));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(biased), 23));
}

/* a 2^n for integral n in [-250, 250]. Mostly one multiply; where some |n| > 126 it takes two
 * (2^n itself would not be a normal float), the first exact, so the result is rounded once. */
static inline VM_TARGET vf v_ldexp(vf a, vf n)
{
    vf abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
    if (__builtin_expect(!_mm256_movemask_ps(m_gt(abs_n, _mm256_set1_ps(126.0f))), 1))
        return _mm256_mul_ps(a, v_pow2(n));
    vf n1 = _mm256_round_ps(_mm256_mul_ps(n, _mm256_set1_ps(0.5f)),
                            _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    return _mm256_mul_ps(_mm256_mul_ps(a, v_pow2(n1)), v_pow2(_mm256_sub_ps(n, n1)));
}

#endif
