/* e^a for 16 float lanes, a <= 0, for AVX-512 kernels that need a cheap exponential of
 * bounded accuracy: the int8 product's GELU epilogue (gemm_int8.c) and BERT's one-sentence
 * attention (src/models/bert_attention.c). a is held at -80 (e^-80 ~ 2e-35: for a sum of
 * terms at most 1, or a tail next to 1, it is 0), so no result is subnormal, whose arithmetic
 * takes a slow microcoded path. e^a = 2^n e^r, |r| <= ln2 / 2, e^r by Taylor to r^6:
 * relative error 2e-8 plus a few roundings. Include only from files compiled for x86-64;
 * the caller's function must carry an avx512f target (KILN__AVX512_TARGET). */
#ifndef KILN_BACKEND_CPU_VEXP_AVX512_H
#define KILN_BACKEND_CPU_VEXP_AVX512_H

#include <immintrin.h>

#define KILN__AVX512_TARGET __attribute__((target("avx512f")))

KILN__AVX512_TARGET static inline __attribute__((always_inline)) __m512 kiln__vexp_neg_avx512(__m512 a) {
    a = _mm512_max_ps(_mm512_set1_ps(-80.0f), a); /* (this order: a NaN lane stays NaN) */
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(a, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), a); /* ln2 as a pair */
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
    __m512 e = _mm512_fmadd_ps(_mm512_set1_ps(1.0f / 720), r, _mm512_set1_ps(1.0f / 120));
    e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f / 24));
    e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f / 6));
    e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(0.5f));
    e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f));
    e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(e, n);
}

#endif
