/* The buffer a bf16 product packs B into (gemm_lowp_buf.c): one kept for the next product, taken
 * by one product at a time, on 2 MiB pages when it spans one.
 *
 *   void *packed = kiln__lowp_packed_take(bytes);   // NULL: out of memory
 *   ...                                              // B packed, the row tiles run
 *   kiln__lowp_packed_give(packed);
 */
#ifndef KILN_BACKEND_CPU_GEMM_LOWP_BUF_H
#define KILN_BACKEND_CPU_GEMM_LOWP_BUF_H

#include <stddef.h>

/* A buffer of at least size bytes, 64-byte aligned (2 MiB aligned and advised MADV_HUGEPAGE
 * from 2 MiB on): the kept one when free and large enough, else a new one. */
void *kiln__lowp_packed_take(size_t size);

/* Back from a product: the kept buffer becomes free again, any other is freed. */
void kiln__lowp_packed_give(void *p);

/* The kept buffer freed, unless a product holds it (at exit). */
void kiln__lowp_packed_free_spare(void);

/* Tests: the kept buffer (NULL when none) and its size in *size. */
const void *kiln__gemm_lowp_spare(size_t *size);

#endif
