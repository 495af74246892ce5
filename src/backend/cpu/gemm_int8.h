/* Products of int8 matrices with int32 accumulation, rescaled to f32 (gemm_int8.c): the
 * kernel of kiln's dynamically quantized Linear (src/nn/linear_int8.c).
 *
 *   y[r * ldy + o] = (sum over k of qx[r * k + i] * qw[o * k + i]) * xscale[r] * wscale[o]
 *
 * for every row r < rows and output o in [o_begin, o_end): qx [rows, k] and qw [out, k]
 * row-major. Values must lie in [-127, 127] (never -128: the SIMD paths multiply |x| by w with
 * x's sign, and |-128| does not fit); k up to 133k keeps the int32 sums exact. Every path gives
 * the same bits (the sums are exact integers). Three paths, chosen at each call by the CPU and
 * KILN_ISA (kiln__vmath_force_isa in tests): "avx512-vnni" (vpdpbusd: four byte products a
 * lane), "avx2" (vpmaddubsw + vpmaddwd) and "scalar" (plain C). */
#ifndef KILN_BACKEND_CPU_GEMM_INT8_H
#define KILN_BACKEND_CPU_GEMM_INT8_H

#include <stdint.h>

void kiln__gemm_s8_rescale(const int8_t *qx, const float *xscale, int64_t rows, const int8_t *qw,
                           const float *wscale, int64_t o_begin, int64_t o_end, int64_t k, float *y, int64_t ldy);

/* The path kiln__gemm_s8_rescale takes now. */
const char *kiln__gemm_s8_path(void);

#endif
