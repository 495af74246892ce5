/* The 2x2, stride-2, unpadded f32 and bf16 max pools with AVX2 (pool_avx2.c), for pool.c. */
#ifndef KILN_BACKEND_CPU_POOL_AVX2_H
#define KILN_BACKEND_CPU_POOL_AVX2_H

#include <stdbool.h>
#include <stdint.h>

/* Whether the kernel may run on planes of h x w: the CPU has AVX2 and KILN_ISA allows it. */
bool kiln__max_pool_2x2_avx2_ok(int64_t h, int64_t w);

/* One plane: x's rows row_stride apart (columns dense), w its width; y (oh x ow, dense) the
 * maxima and idx (NULL: none) their indices into the plane's h * w, as pool.c's kernel. */
void kiln__max_pool_2x2_avx2(const float *x, int64_t row_stride, int64_t w, int64_t oh, int64_t ow, float *y,
                             int64_t *idx);

/* The same on a bf16 plane into bf16 maxima: the values of pooling between casts to f32 and back. */
void kiln__max_pool_2x2_bf16_avx2(const uint16_t *x, int64_t row_stride, int64_t w, int64_t oh, int64_t ow,
                                  uint16_t *y, int64_t *idx);

#endif
