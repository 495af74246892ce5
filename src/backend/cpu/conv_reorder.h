/* bf16 activations between kiln's NCHW and oneDNN's nChw16c (aBcd16b: 16 channels innermost),
 * for conv_dnnl.c's bf16 convs. oneDNN 2.6 has a specialised reorder for f32 blocked layouts
 * but runs bf16 ones through its generic one, which took 0.4-1.1 ms for a [128, 64, 14, 14]
 * activation on 2 threads against 0.08-0.23 ms here on one (conv_reorder.c has the numbers).
 *
 *   if (kiln__conv_reorder_bf16_ok(c)) kiln__conv_bf16_to_blocked(x, xb, n, c, h * w);
 *
 * c must be a multiple of 16 (no padded channels); n * c * hw elements each side. */
#ifndef KILN_BACKEND_CPU_CONV_REORDER_H
#define KILN_BACKEND_CPU_CONV_REORDER_H

#include <stdbool.h>
#include <stdint.h>

/* Whether these two convert an activation of c channels. */
bool kiln__conv_reorder_bf16_ok(int64_t c);

/* NCHW src -> nChw16c dst. */
void kiln__conv_bf16_to_blocked(const uint16_t *src, uint16_t *dst, int64_t n, int64_t c, int64_t hw);

/* nChw16c src -> NCHW dst. */
void kiln__conv_bf16_from_blocked(const uint16_t *src, uint16_t *dst, int64_t n, int64_t c, int64_t hw);

#endif
