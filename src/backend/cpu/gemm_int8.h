/* Products of int8 matrices with int32 accumulation, rescaled to f32 (gemm_int8.c): the
 * kernel of kiln's dynamically quantized Linear (src/nn/linear_int8.c).
 *
 *   y[r * ldy + o] = sum over blocks b of xscale[r * nblk + b] * wscale(o, b) * D(r, o, b),
 *   D(r, o, b) = sum over i in block b of qx(r, i) * qw(o, i)   (exact, in int32)
 *
 * for every row r < rows and output o in [o_begin, o_end), over k values (a multiple of 4) in
 * blocks of KILN__S8_BLOCK (nblk = ceil(k / KILN__S8_BLOCK)), so that an input with outlier
 * channels loses precision in their block only (a scale per whole row made MiniLM's
 * embeddings drop to cosine 0.98), and each weight block of an output has its own scale too
 * (one scale per output over all of k put MiniLM at cosine 0.993 with its last linear of each
 * layer in int8, where quantizing that linear's activations twice, to ~14 bits, gained only
 * 0.0008: the weights' error was the larger). Values lie in [-127, 127].
 *
 * The layouts are the ones the AVX512-VNNI product (vpdpbusd: unsigned bytes times signed
 * bytes, four to an int32 lane, the signed operand a broadcast from memory) reads without
 * shuffling:
 *   - activations as signed bytes qx(r, i), rows k apart, with each block's sum xsum(r, b):
 *     the kernel takes the weights as unsigned bytes (w + 128, one xor a vector), so each
 *     block's sum comes out 128 * xsum(r, b) too large and starts from its negative;
 *   - weights packed by kiln__s8_pack_weight: outputs in groups of KILN__S8_GROUP, a group's
 *     four-byte pieces of k interleaved output by output, so that one 64-byte load holds four k
 *     values of each of 16 outputs; their scales [out, nblk] by kiln__s8_pack_scales, a group's
 *     16 outputs' scales for a block side by side.
 * Three paths, chosen at each call by the CPU and KILN_ISA (kiln__vmath_force_isa in tests):
 * "avx512-vnni", "avx2" (vpmaddubsw + vpmaddwd on |x| and w with x's sign) and "scalar"; their
 * block sums are the same integers, only the f32 sums over blocks may round in another order. */
#ifndef KILN_BACKEND_CPU_GEMM_INT8_H
#define KILN_BACKEND_CPU_GEMM_INT8_H

#include <stdint.h>

#define KILN__S8_BLOCK 32
#define KILN__S8_GROUP 16

/* What happens to y after the sum, while a group's outputs are still in L1: a Linear's bias
 * added, then its GELU (the erf form: kiln__vgelu_f32 on the AVX2 and scalar paths; on the VNNI
 * path a float form within 7.5e-8 |x|, on the sums in registers, see gemm_int8.c) applied. With a bias, wscale is packed
 * from [out, nblk + 1], the last column the bias (a bias is one more "block" of scales). Done in
 * the product so that a 16-token layer's bias add and GELU are not ops of their own: each op is
 * a hand-off between threads that costs more than the few thousand values it touches. */
typedef enum { KILN__S8_PLAIN, KILN__S8_BIAS, KILN__S8_BIAS_GELU } kiln__s8_epilogue;

/* o_begin must be a multiple of KILN__S8_GROUP, o_end one too or out. */
void kiln__gemm_s8_rescale(const int8_t *qx, const float *xscale, const int32_t *xsum, int64_t rows,
                           const int8_t *packed_w, const float *wscale, int64_t out, int64_t o_begin, int64_t o_end, int64_t k,
                           kiln__s8_epilogue epilogue, float *y, int64_t ldy);

/* packed[...] = qw [out, k] row-major (k a multiple of 4) in the layout above. */
void kiln__s8_pack_weight(const int8_t *qw, int64_t out, int64_t k, int8_t *packed);

/* packed = scales [out, cols] row-major in the group order above (cols: nblk, or nblk + 1 with
 * the bias as the last column). */
void kiln__s8_pack_scales(const float *scales, int64_t out, int64_t cols, float *packed);

/* Quantizes n values of x (read `stride` apart) into qx[0..k) (k >= n a multiple of 4: the
 * rest is zero), xscale[0..ceil(k / KILN__S8_BLOCK)), one symmetric scale per block (x ~ qx *
 * scale, round half to even), and xsum[b], the sum of block b's qx; a block with a non-finite
 * value gets scale NAN, one too small to invert scale 1, both zeros. The same values on every
 * path. */
void kiln__s8_quantize_row(const float *x, int64_t stride, int64_t n, int64_t k, int8_t *qx, float *xscale,
                           int32_t *xsum);

/* The symmetric scale of n values (amax / 127; NAN if one is not finite, 1 if all are zero or
 * too small to invert) and q[i] = round(x[i] / scale) in [-127, 127] (0 where the scale is
 * NAN or too small). */
float kiln__s8_quantize_values(const float *x, int64_t stride, int64_t n, int8_t *q);

/* The path kiln__gemm_s8_rescale takes now. */
const char *kiln__gemm_s8_path(void);

#endif
