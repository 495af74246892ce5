/* The vector vocabulary of vmath_simd.h for AVX-512F on 512-bit registers and mask registers
 * (see the list atop vmath_simd.h): all static inline, built for the ISA by target attribute,
 * so only the functions that use them need a CPU that has it. Included by vmath_avx512.c (the
 * array kernels) and fused_vec_avx512.c (the fused kernel's register chunks), so both run one
 * definition of each function. x86-64 only. */
#ifndef KILN_BACKEND_CPU_VMATH_AVX512_H
#define KILN_BACKEND_CPU_VMATH_AVX512_H

#include <immintrin.h>

#define VM_TARGET __attribute__((target("avx512f")))
#define VM_W 16

typedef __m512 vf;
typedef __m512i vi;
typedef __mmask16 vmask;

static inline VM_TARGET vf v_set(float c) { return _mm512_set1_ps(c); }
static inline VM_TARGET vf v_load(const float *p) { return _mm512_loadu_ps(p); }
static inline VM_TARGET void v_store(float *p, vf a) { _mm512_storeu_ps(p, a); }
static inline VM_TARGET vf v_add(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline VM_TARGET vf v_sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
static inline VM_TARGET vf v_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline VM_TARGET vf v_div(vf a, vf b) { return _mm512_div_ps(a, b); }
static inline VM_TARGET vf v_sqrt(vf a) { return _mm512_sqrt_ps(a); }
static inline VM_TARGET vf v_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline VM_TARGET vf v_fnma(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); }
static inline VM_TARGET vf v_fms(vf a, vf b, vf c) { return _mm512_fmsub_ps(a, b, c); }
static inline VM_TARGET vf v_min(vf a, vf b) { return _mm512_min_ps(a, b); }
static inline VM_TARGET vf v_max(vf a, vf b) { return _mm512_max_ps(a, b); }

/* Float bitwise ops are AVX-512DQ; the integer ones are in F. */
static inline VM_TARGET vf v_and(vf a, vf b)
{
    return _mm512_castsi512_ps(_mm512_and_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}
static inline VM_TARGET vf v_or(vf a, vf b)
{
    return _mm512_castsi512_ps(_mm512_or_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}
static inline VM_TARGET vf v_xor(vf a, vf b)
{
    return _mm512_castsi512_ps(_mm512_xor_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}
static inline VM_TARGET vf v_andnot(vf a, vf b)
{
    return _mm512_castsi512_ps(
        _mm512_andnot_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}
static inline VM_TARGET vf v_rint(vf a)
{
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

static inline VM_TARGET vmask m_lt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
static inline VM_TARGET vmask m_gt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
static inline VM_TARGET vmask m_eq(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
static inline VM_TARGET vmask m_nan(vf a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
static inline VM_TARGET int m_all(vmask m) { return m == 0xffff; }
static inline VM_TARGET vf v_sel(vmask m, vf a, vf b) { return _mm512_mask_blend_ps(m, b, a); }

static inline VM_TARGET vi v_asint(vf a) { return _mm512_castps_si512(a); }
static inline VM_TARGET vf i_asfloat(vi a) { return _mm512_castsi512_ps(a); }
static inline VM_TARGET vi i_set(int c) { return _mm512_set1_epi32(c); }
static inline VM_TARGET vi i_add(vi a, vi b) { return _mm512_add_epi32(a, b); }
static inline VM_TARGET vi i_sub(vi a, vi b) { return _mm512_sub_epi32(a, b); }
static inline VM_TARGET vi i_and(vi a, vi b) { return _mm512_and_epi32(a, b); }
#define i_sra(a, k) _mm512_srai_epi32((a), (k))
static inline VM_TARGET vf i_cvt(vi a) { return _mm512_cvtepi32_ps(a); }
static inline VM_TARGET vi v_cvt_int(vf a) { return _mm512_cvttps_epi32(a); }
static inline VM_TARGET vmask m_ibit(vi a, int bit)
{
    return _mm512_test_epi32_mask(a, _mm512_set1_epi32(bit));
}

typedef __m512d vd; /* half a vf, in double */
static inline VM_TARGET vd d_set(double c) { return _mm512_set1_pd(c); }
static inline VM_TARGET vd d_fma(vd a, vd b, vd c) { return _mm512_fmadd_pd(a, b, c); }
static inline VM_TARGET vd d_div(vd a, vd b) { return _mm512_div_pd(a, b); }
static inline VM_TARGET vd v_widen_lo(vf a) { return _mm512_cvtps_pd(_mm512_castps512_ps256(a)); }
static inline VM_TARGET vd v_widen_hi(vf a)
{
    return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
}
static inline VM_TARGET vf v_narrow(vd lo, vd hi)
{
    __m512d low_half = _mm512_castps_pd(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)));
    return _mm512_castpd_ps(
        _mm512_insertf64x4(low_half, _mm256_castps_pd(_mm512_cvtpd_ps(hi)), 1));
}

/* scalef computes a 2^floor(n) over the whole range, denormals included, rounding once. */
static inline VM_TARGET vf v_pow2(vf n) { return _mm512_scalef_ps(_mm512_set1_ps(1.0f), n); }
static inline VM_TARGET vf v_ldexp(vf a, vf n) { return _mm512_scalef_ps(a, n); }

#endif
