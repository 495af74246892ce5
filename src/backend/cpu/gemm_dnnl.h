/* f32 products through oneDNN's sgemm, in fixed tiles (gemm_dnnl.c):
 *
 *   C = alpha * op(A) * op(B) + beta * C   (row-major, as kiln__gemm_f32)
 *
 * for every f32 product kiln__gemm_f32 runs (the MATMUL kernel's products of more than
 * KILN__GEMM_SMALL_MAX_M rows among them) on CPUs where oneDNN runs AVX-512 kernels and
 * Debian's OpenBLAS 0.3.21 does not (it takes a Zen 5 for a Haswell). */
#ifndef KILN_BACKEND_CPU_GEMM_DNNL_H
#define KILN_BACKEND_CPU_GEMM_DNNL_H

#include <stdbool.h>
#include <stdint.h>

#include "kiln/core.h"

/* oneDNN's shortest tile (gemm_dnnl.c): products whose right operand fits in cache */
#define KILN__GEMM_DNNL_TILE_ROWS 256

/* Rows per tile of a product of n columns over k: a function of n, k and the machine's facts
 * (core/machine.h) alone, never of the row count m or the pool's thread count. Every product
 * runs as tiles of this many rows (the last one shorter) starting at its row 0, each one oneDNN
 * call: a caller that splits a product into row panels whose starts are multiples of it
 * (fused_matmul.c) gets the bits of the whole product. KILN_GEMM_DNNL_ROWS (16..65536) sets it
 * for every shape, for measuring. */
int64_t kiln__gemm_dnnl_tile_rows(int64_t n, int64_t k);

/* Columns per call of a tile of `rows` rows (of tile_rows, the height above) of a product of n
 * columns over k: n, or two tiles from 256 columns, and a short tile of one column tile split in
 * two halves when it is large enough (gemm_dnnl.c). A function of n, k and the tile's rows only,
 * so a tile-aligned row panel keeps the whole product's bits. */
int64_t kiln__gemm_dnnl_tile_cols(int64_t n, int64_t k, int64_t rows, int64_t tile_rows);

/* kiln__gemm_dnnl_tile_rows(n, k) when the oneDNN path is on (KILN_GEMM_DNNL, or the CPU's
 * default), else 0. */
int64_t kiln__gemm_dnnl_rows(int64_t n, int64_t k);

/* Whether kiln__gemm_dnnl_f32 takes this product: the path is on, sizes are positive and each
 * leading dimension is at least its stored row's width. Otherwise the caller runs it another
 * way. */
bool kiln__gemm_dnnl_takes(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                           int64_t ldc);

/* The same test without the first condition: whether oneDNN could take the product (the build
 * has it, the layout suits it), for a caller that chose oneDNN by measurement (gemm.c, tune.h). */
bool kiln__gemm_dnnl_fits(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                          int64_t ldc);

/* What the user said: 1 (kiln__gemm_dnnl_force(1) or KILN_GEMM_DNNL=1), 0 (off), or -1 (nothing
 * said: the measured decision or the rule; always -1 in a build without oneDNN). */
int kiln__gemm_dnnl_user_mode(void);
/* The fixed rule: the user's word, else on where the CPU has AVX-512 and KILN_ISA leaves kiln's
 * own AVX-512 code on. */
bool kiln__gemm_dnnl_by_rule(void);

/* Runs a product kiln__gemm_dnnl_takes took, its tiles spread over kiln's pool (inline on the
 * caller when another op holds it): KILN_OK; a tile oneDNN refuses runs on the built-in kernel.
 * KILN_ERR_UNSUPPORTED only in a build without oneDNN, where kiln__gemm_dnnl_takes is false. */
kiln_status kiln__gemm_dnnl_f32(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                         int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

/* The same tiles on the calling thread alone, in turn, one OpenMP thread (kiln__gemm_serial_f32:
 * a product among many side by side). The same bits as kiln__gemm_dnnl_f32. */
void kiln__gemm_dnnl_serial_f32(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                                int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

/* Sets oneDNN's OpenMP thread count (libgomp's, a per-thread setting) for the calling thread;
 * nothing where libgomp is not loaded. For this file's products and conv_dnnl.c's convs. Only in
 * a build with oneDNN. */
void kiln__dnnl_omp_threads(int n);

/* Tests: 1 on, 0 off, -1 back to KILN_GEMM_DNNL / the CPU's default. */
void kiln__gemm_dnnl_force(int mode);

#endif
