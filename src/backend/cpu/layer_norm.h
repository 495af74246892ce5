/* The fused layer norm kernel the engine substitutes for the composed one (src/ops/layer_norm_pattern.c). */
#ifndef KILN_BACKEND_CPU_LAYER_NORM_H
#define KILN_BACKEND_CPU_LAYER_NORM_H

#include "ir/op.h"

/* out = (x - mean) / sqrt(var + eps) * w + b over the last dim, in one pass per row, for a
 * CUSTOM record: in[0] x, then w and b where pi[0] has bit 1 (weight) and bit 2 (bias); every
 * input has out's shape (any strides: broadcast weights have stride 0 on the rows); out dense,
 * possibly x's own memory (each row is read before it is written); eps p.f[1]. f32 or f64. */
kiln_status kiln__cpu_layer_norm(const kiln__op *op);

#endif
