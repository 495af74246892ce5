/* Fast f32 <-> bf16 conversion loops for COPY (casts, alone or in a fused group): dense runs
 * converted by branch-free integer code the compiler vectorises, bit for bit what
 * kiln__f32_to_bf16 / kiln__bf16_to_f32 give (round to nearest even, NaN kept quiet, subnormals
 * kept: no AVX512-BF16 vcvtneps2bf16, which flushes them). */
#ifndef KILN_BACKEND_CPU_CONVERT_LOWP_H
#define KILN_BACKEND_CPU_CONVERT_LOWP_H

#include "backend/cpu/cpu-impl.h"

/* The COPY inner loop from src to dst when one is here (f32 -> bf16, bf16 -> f32), else NULL. */
kiln__loop_fn kiln__cpu_convert_lowp_loop(kiln_dtype src, kiln_dtype dst);

#endif
