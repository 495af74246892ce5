/* The fused kernel's register-chunk evaluator (fused_vec_body.h) for AVX-512F and DQ (xor and
 * andnot of floats), over vmath's AVX-512 vocabulary and exp, so a fused exp runs the very
 * function the unfused kernel runs. Called only on CPUs that have both (fused_vec.c). */
#include <string.h>

#include "backend/cpu/fused-impl.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "backend/cpu/vmath_avx512.h"
#include "backend/cpu/vmath_exp.h"

#define TARGET __attribute__((target("avx512f,avx512dq")))
#define V __m512
#define W 16
#define NAME(x) x##_avx512
#define EXT(x) kiln__fused_vec_##x##_avx512
#define VP(x) _mm512_##x
#define REG "v"
#define OR(a, b) ((__mmask16)((a) | (b)))
#define GT(a, b) _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ)
#define LT(a, b) _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ)
#define ISNAN(a) _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q)
#define SEL(a, b, m) _mm512_mask_blend_ps(m, a, b)
#include "backend/cpu/fused_vec_body.h"
#else
typedef int kiln__fused_vec_avx512_unused; /* not x86-64: nothing to build */
#endif
