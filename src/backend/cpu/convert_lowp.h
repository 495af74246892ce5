/* Fast f32 <-> bf16 conversion loops for COPY (casts, alone or in a fused group): dense runs
 * converted by branch-free integer code the compiler vectorises, bit for bit what
 * kiln__f32_to_bf16 / kiln__bf16_to_f32 give (round to nearest even, NaN kept quiet, subnormals
 * kept: no AVX512-BF16 vcvtneps2bf16, which flushes them). */
#ifndef KILN_BACKEND_CPU_CONVERT_LOWP_H
#define KILN_BACKEND_CPU_CONVERT_LOWP_H

#include "backend/cpu/cpu-impl.h"

/* The COPY inner loop from src to dst when one is here (f32 -> bf16, bf16 -> f32), else NULL. */
kiln__loop_fn kiln__cpu_convert_lowp_loop(kiln_dtype src, kiln_dtype dst);

/* dst[i * dst_stride] = src[i * src_stride] rounded to bf16 for i < n (strides in elements),
 * as the COPY loop rounds: an optimizer update rewriting autocast's bf16 copy (optim.c). */
void kiln__cpu_store_bf16(int64_t n, const float *src, int64_t src_stride, uint16_t *dst, int64_t dst_stride);

#endif
