/* The fused kernel's register-chunk evaluator (fused_vec_body.h) for AVX2 + FMA, over vmath's
 * AVX2 vocabulary and exp, so a fused exp runs the very function the unfused kernel runs. Called
 * only on CPUs that have AVX2 and FMA (fused_vec.c follows vmath's ISA choice). */
#include <string.h>

#include "backend/cpu/fused-impl.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "backend/cpu/vmath_avx2.h"
#include "backend/cpu/vmath_exp.h"

#define TARGET __attribute__((target("avx2,fma")))
#define V __m256
#define W 8
#define NAME(x) x##_avx2
#define EXT(x) kiln__fused_vec_##x##_avx2
#define VP(x) _mm256_##x
#define REG "x"
#define OR _mm256_or_ps
#define GT(a, b) _mm256_cmp_ps(a, b, _CMP_GT_OQ)
#define LT(a, b) _mm256_cmp_ps(a, b, _CMP_LT_OQ)
#define ISNAN(a) _mm256_cmp_ps(a, a, _CMP_UNORD_Q)
#define SEL(a, b, m) _mm256_blendv_ps(a, b, m)
#include "backend/cpu/fused_vec_body.h"
#else
typedef int kiln__fused_vec_avx2_unused; /* not x86-64: nothing to build */
#endif
