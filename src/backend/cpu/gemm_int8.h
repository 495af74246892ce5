/* Products of int8 matrices with int32 accumulation, rescaled to f32 (gemm_int8.c): the
 * kernel of kiln's dynamically quantized Linear (src/nn/linear_int8.c).
 *
 *   y[r * ldy + o] = wscale[o] * sum over blocks b of xscale[r * nblk + b] * D(r, o, b),
 *   D(r, o, b) = sum over i in block b of qx[r * k + i] * qw[o * k + i]   (exact, in int32)
 *
 * for every row r < rows and output o in [o_begin, o_end): qx [rows, k] and qw [out, k]
 * row-major, k a multiple of 4, the blocks KILN__S8_BLOCK values of k each (nblk = ceil(k /
 * KILN__S8_BLOCK)), so that an input with outlier channels loses precision in their block
 * only (a scale per whole row made MiniLM's embeddings drop to cosine 0.98). Values must lie
 * in [-127, 127] (never -128: the SIMD paths multiply |x| by w with x's sign, and |-128| does
 * not fit in a signed byte). Three paths, chosen at each call by the CPU and KILN_ISA
 * (kiln__vmath_force_isa in tests): "avx512-vnni" (vpdpbusd: four byte products a lane),
 * "avx2" (vpmaddubsw + vpmaddwd) and "scalar"; their block sums are the same integers, only the
 * f32 sums over blocks may round in another order. */
#ifndef KILN_BACKEND_CPU_GEMM_INT8_H
#define KILN_BACKEND_CPU_GEMM_INT8_H

#include <stdint.h>

#define KILN__S8_BLOCK 32

void kiln__gemm_s8_rescale(const int8_t *qx, const float *xscale, int64_t rows, const int8_t *qw,
                           const float *wscale, int64_t o_begin, int64_t o_end, int64_t k, float *y, int64_t ldy);

/* The path kiln__gemm_s8_rescale takes now. */
const char *kiln__gemm_s8_path(void);

#endif
