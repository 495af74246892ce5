/* Products of f32 activations with weight-only block-quantized matrices, in the manner of
 * ggml's q8_0 and q4_0 (gemm_blockq.c): the kernel of kiln's q8_0/q4_0 Linear
 * (src/nn/linear_blockq.c).
 *
 *   y[r * ldy + o] = sum over i < k of x[r * ldx + i] * W(o, i),   W(o, i) = q(o, i) * d(o, i / 32)
 *
 * for every row r < rows and output o in [o_begin, o_end). Each output row of W is cut into
 * blocks of KILN__BQ_BLOCK inputs (nblk = ceil(k / 32)); a block has one f32 scale d and 32
 * integers q: q8_0 in [-127, 127] (d = amax / 127), q4_0 in [-8, 7] (d = m / -8, m the block's
 * value of largest magnitude, which so comes back exactly). The tail block of a k that is not a
 * multiple of 32 holds its k % 32 values and zeros after them; x is never read past k. The
 * activations stay f32: the kernel loads a weight block, turns it into f32 in registers and
 * multiplies, so a one-sentence product reads a quarter (q8_0) or an eighth (q4_0) of f32's
 * weight bytes and loses nothing to activation rounding.
 *
 * Layout (what the vector paths read without shuffling): outputs in groups of KILN__BQ_GROUP,
 * a group's blocks one after the other, each block's values input by input across the group:
 *   - q8_0: 32 rows of gw bytes (gw = min(16, out - o0)), byte j of row i = q(o0 + j, b*32 + i);
 *   - q4_0: 16 rows of gw bytes, byte j of row p = (q(o0+j, b*32+2p) + 8) | (q(o0+j, b*32+2p+1) + 8) << 4;
 * so one 16-byte load holds one input (two for q4_0) of all 16 outputs of a group; the scales
 * [out, cols] in the group order of kiln__s8_pack_scales (a group's gw scales of a column side
 * by side; cols = nblk, or nblk + 1 with a Linear's bias as the last column).
 * Three paths, chosen at each call by the CPU and KILN_ISA (kiln__vmath_force_isa in tests):
 * "avx512" (16 outputs in a register, up to 16 rows' sums), "avx2" (two halves of 8, up to 4
 * rows) and "scalar", all over activations packed in tiles of rows (kiln__bq_pack_x); they differ only in the order of f32 roundings. */
#ifndef KILN_BACKEND_CPU_GEMM_BLOCKQ_H
#define KILN_BACKEND_CPU_GEMM_BLOCKQ_H

#include <stdint.h>

#define KILN__BQ_BLOCK 32
#define KILN__BQ_GROUP 16

typedef enum { KILN__BQ_Q8_0, KILN__BQ_Q4_0 } kiln__bq_format;

/* What the product does to y after the sum: a Linear's bias added (the scales' last column),
 * then its GELU (the erf form), as kiln__s8_epilogue does for int8. */
typedef enum { KILN__BQ_PLAIN, KILN__BQ_BIAS, KILN__BQ_BIAS_GELU } kiln__bq_epilogue;

/* Bytes of one output's block: 32 (q8_0) or 16 (q4_0). */
int kiln__bq_block_bytes(kiln__bq_format f);

/* The scale of n <= 32 values of x and their integers q[0..32) (zero past n), round half to
 * even; NAN if a value is not finite; 1 (all q zero) if all are zero or the scale is too small
 * to invert. */
float kiln__bq_quantize_block(kiln__bq_format f, const float *x, int64_t n, int8_t q[KILN__BQ_BLOCK]);

/* packed = q [out, nblk * 32] row-major (the integers above) in the layout above:
 * out * nblk * kiln__bq_block_bytes(f) bytes. */
void kiln__bq_pack_weight(kiln__bq_format f, const int8_t *q, int64_t out, int64_t nblk, uint8_t *packed);

/* w[(o - o_begin) * ldw + i] = W(o, i) for o in [o_begin, o_end) (o_begin a multiple of the
 * group), i < k: the f32 weights the products stand for (cols: the scales' columns). */
void kiln__bq_dequantize(kiln__bq_format f, const uint8_t *packed, const float *pscales, int64_t cols, int64_t out,
                         int64_t o_begin, int64_t o_end, int64_t k, float *w, int64_t ldw);

/* xp [rows * k] = x's rows (ldx apart) in the tiles the products walk, 16 rows at a time, then
 * 8, 4, 2 and 1: the tile of R rows at row r0 holds x[r0 + r][i] at xp[r0 * k + i * R + r], so
 * that a tile's activations of one input are side by side (packed once a call, read by every
 * group). */
void kiln__bq_pack_x(const float *x, int64_t ldx, int64_t rows, int64_t k, float *xp);

/* The product above for outputs [o_begin, o_end) (o_begin a multiple of KILN__BQ_GROUP, o_end
 * one too or out) from packed activations, with its epilogue over those outputs. */
void kiln__gemm_bq_packed(kiln__bq_format f, const float *xp, int64_t rows, const uint8_t *packed, const float *pscales,
                          int64_t out, int64_t o_begin, int64_t o_end, int64_t k, kiln__bq_epilogue e, float *y,
                          int64_t ldy);

/* The same from row-major x (packed here): 0, or -1 when out of memory for the packing. */
int kiln__gemm_bq(kiln__bq_format f, const float *x, int64_t ldx, int64_t rows, const uint8_t *packed,
                  const float *pscales, int64_t out, int64_t o_begin, int64_t o_end, int64_t k, kiln__bq_epilogue e,
                  float *y, int64_t ldy);

/* The same product (no epilogue) for many rows, from wf [out, k], the weight
 * kiln__bq_dequantize gave: the f32 GEMM (OpenBLAS, oneDNN: gemm.h) on its threads. */
void kiln__gemm_bq_dequantized(const float *x, int64_t rows, const float *wf, int64_t out, int64_t k, float *y);

/* The epilogue alone, for y that another product (the f32 GEMM over dequantized weights)
 * wrote: rows [0, rows), outputs [o_begin, o_end). */
void kiln__bq_epilogue_rows(kiln__bq_epilogue e, const float *pscales, int64_t out, int64_t o_begin, int64_t o_end,
                            int64_t nblk, float *y, int64_t ldy, int64_t rows);

/* The path kiln__gemm_bq takes now: "avx512", "avx2" or "scalar". */
const char *kiln__gemm_bq_path(void);

#endif
