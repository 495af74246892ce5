/* vmath's f32 kernels for AVX2 + FMA: vmath_simd.h over the vocabulary of vmath_avx2.h (256-bit
 * registers). Compiled with the project's common flags; only these functions are built for
 * AVX2 (target attribute), and vmath.c calls them only on CPUs that have it. */
#include "backend/cpu/vmath.h"

#if defined(__x86_64__)
#include "backend/cpu/vmath_avx2.h"

#define VM_TABLE kiln__vmath_avx2_kernels

#include "backend/cpu/vmath_simd.h"

#else
typedef int kiln__vmath_avx2_unused; /* not x86-64: nothing to build */
#endif
