/* vmath's f32 kernels for AVX-512F: vmath_simd.h over the vocabulary of vmath_avx512.h (512-bit
 * registers and mask registers). Compiled with the project's common flags; only these
 * functions are built for AVX-512F (target attribute), and vmath.c calls them only on CPUs
 * that have it. Only AVX-512F instructions are used (no DQ/BW/VL). */
#include "backend/cpu/vmath.h"

#if defined(__x86_64__)
#include "backend/cpu/vmath_avx512.h"

#define VM_TABLE kiln__vmath_avx512_kernels

#include "backend/cpu/vmath_simd.h"

#else
typedef int kiln__vmath_avx512_unused; /* not x86-64: nothing to build */
#endif
