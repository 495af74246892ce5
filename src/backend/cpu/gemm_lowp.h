/* Products of bf16 or f16 matrices accumulated in f32 (gemm_lowp.c):
 *
 *   C = op(A) * op(B) (+ C when accumulate),  A, B bf16 or f16 (one dtype), C f32 or A's dtype
 *
 * A C of A's dtype gets the f32 sums rounded once (no f32 C written and cast after: the
 * product's output traffic halves); accumulate only into an f32 C.
 * row-major with leading dimensions and transpose flags as kiln__gemm_f32 (gemm.h). The MATMUL
 * kernel (linalg.c) runs every low-precision product here. Two paths, chosen at run time:
 *  - "dnnl-bf16": oneDNN's bf16 matmul primitive (vdpbf16ps: two bf16 products per f32 lane),
 *    where kiln has oneDNN, the CPU has AVX512-BF16 and KILN_ISA leaves AVX-512 on;
 *  - "convert-f32": both operands widened to f32 (exact: every bf16 and f16 is an f32) and
 *    one f32 GEMM. Every other case, f16 always (no AVX512-FP16 here): as exact as the first,
 *    slower than f32 by the conversion.
 *
 *   uint16_t a[2 * 3], b[3 * 4];  float c[2 * 4];   // a, b hold bf16 bits
 *   kiln__gemm_lowp(KILN_BF16, 0, 0, 2, 4, 3, a, 3, b, 4, 0, KILN_F32, c, 4);   // c = a @ b
 */
#ifndef KILN_BACKEND_CPU_GEMM_LOWP_H
#define KILN_BACKEND_CPU_GEMM_LOWP_H

#include <stdint.h>

#include "kiln/core.h"

/* KILN_OK, or KILN_ERR_OUT_OF_MEMORY / KILN_ERR_KERNEL with the kernel error set. */
kiln_status kiln__gemm_lowp(kiln_dtype dt, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, const uint16_t *a,
                            int64_t lda, const uint16_t *b, int64_t ldb, int accumulate, kiln_dtype c_dt, void *c,
                            int64_t ldc);

/* The path products of dtype dt take now: "dnnl-bf16" or "convert-f32". */
const char *kiln__gemm_lowp_path(kiln_dtype dt);

/* Tests: 0 forces the conversion path, -1 goes back to the automatic choice. */
void kiln__gemm_lowp_force(int mode);

#endif
