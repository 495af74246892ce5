/* Small-M f32 products against a transposed weight, unpacked (gemm_small.c):
 *
 *   C[i, j] = sum_p A[i, p] * W[j, p]   (+ C[i, j] when accumulate), i < m, n0 <= j < n1
 *
 * A is m x k row-major (lda), W is n x k row-major (ldw): a linear layer's weight; C row-major
 * (ldc). Runs on the calling thread; callers split [0, n) across threads. AVX2+FMA when the
 * CPU has it (kiln__gemm_small_available), plain C otherwise. */
#ifndef KILN_BACKEND_CPU_GEMM_SMALL_H
#define KILN_BACKEND_CPU_GEMM_SMALL_H

#include <stdint.h>

/* linalg.c's MATMUL kernel takes this path for products of at most this many rows (whose
 * summation order differs from the BLAS's): fused_matmul.c's panels of a larger product keep
 * more rows than this, so each panel sums as the whole product does. */
#define KILN__GEMM_SMALL_MAX_M 32

int kiln__gemm_small_available(void);
void kiln__gemm_small_nt_f32(int64_t m, int64_t n0, int64_t n1, int64_t k, const float *a, int64_t lda, const float *w,
                             int64_t ldw, int accumulate, float *c, int64_t ldc);
/* How the kernel prefetches the next block of W while it works on one: `lines` (64-byte lines
 * of the next block) spread over the `steps` vector steps of all its passes over the current
 * block, the same number at each step, so the stream never comes in bursts. Returns the lines
 * per step; *first and *count: the lines from step0 (a pass's first step) on. Exposed for tests. */
int64_t kiln__gemm_small_prefetch_share(int64_t lines, int64_t steps, int64_t step0, int64_t *first, int64_t *count);
/* Tests: run kiln__gemm_small_nt_f32 on plain C (1), AVX2 at most (2), or the best the CPU has
 * (3, the default). */
void kiln__gemm_small_limit_isa(int level);

#endif
