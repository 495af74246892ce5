/* B of a bf16 product moved into oneDNN's pair-interleaved layout (gemm_lowp_pack.c), in place
 * of oneDNN's own reorder for the packed products of gemm_lowp.c.
 *
 * The layout (oneDNN's BA16a64b2a and its kin, for B = [k, n]): column blocks of n_block columns
 * n_stride elements apart, in each one row blocks of k_block rows k_stride apart, and in a row
 * block the rows in pairs: pair p holds its two rows' values of each column side by side (one
 * 32-bit lane per column, the even row low). Element (r, c) is at
 *   (c / n_block) * n_stride + (r / k_block) * k_stride + (r % k_block / 2) * 2 * n_block
 *   + (c % n_block) * 2 + r % 2
 *
 *   kiln__bf16_pairs l = {.k_block = 32, .n_block = 64, .k_stride = 32 * 64, .n_stride = k_pad * 64};
 *   if (kiln__gemm_bf16_pack_ok(&l)) kiln__gemm_bf16_pack_pairs(b, ldb, k, 0, n, packed, &l);   // all of B
 */
#ifndef KILN_BACKEND_CPU_GEMM_LOWP_PACK_H
#define KILN_BACKEND_CPU_GEMM_LOWP_PACK_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    int64_t k_block, n_block, k_stride, n_stride; /* in elements */
} kiln__bf16_pairs;

/* The CPU runs the vector version (AVX-512F), and the layout is one it writes (even k_block,
 * n_block a multiple of 16). */
bool kiln__gemm_bf16_pack_ok(const kiln__bf16_pairs *layout);

/* Columns [j0, j0 + cols) of B (k x n, row-major, leading dim ldb; j0 a multiple of n_block) into
 * packed, the whole layout's buffer. Bits are moved, never converted; the padding of an odd k's
 * last pair is written as zero, other padding is left as it is. */
void kiln__gemm_bf16_pack_pairs(const uint16_t *b, int64_t ldb, int64_t k, int64_t j0, int64_t cols, uint16_t *packed,
                                const kiln__bf16_pairs *layout);

/* Tests and measuring: 0 leaves packing to oneDNN's reorder, -1 back to the automatic choice. */
void kiln__gemm_bf16_pack_force(int mode);
bool kiln__gemm_bf16_pack_forced_off(void);

#endif
