/* The f32 weight gradient of a 3x3, stride-1 conv of one input channel (an image network's
 * first conv: the Fashion-MNIST CNN's conv1) with AVX2 (conv_direct.c). conv.c asks here before
 * its im2col + GEMM path:
 *
 *   if (kiln__conv_direct_ok(&shape, kh, kw, sh, sw, dh, dw, groups, cg))
 *       return kiln__conv_direct_weight(&shape, x, dy, dw);
 *
 * KILN_CONV_DIRECT=0 leaves these convs to the im2col path, for measuring. */
#ifndef KILN_BACKEND_CPU_CONV_DIRECT_H
#define KILN_BACKEND_CPU_CONV_DIRECT_H

#include <stdbool.h>
#include <stdint.h>

#include "kiln/core.h"

typedef struct {
    int64_t n, h, w;   /* input [n, 1, h, w], rows and images xs[2], xs[0] elements apart, columns dense */
    int64_t xs[4];
    int64_t o;         /* output channels; weight [o, 1, 3, 3] dense */
    int64_t oh, ow;    /* output (and dy) [n, o, oh, ow], dense */
    int64_t ph, pw;    /* zero padding */
} kiln__conv_direct_shape;

/* Whether the direct kernel takes a conv of kernel kh x kw, stride sh, sw, dilation dh, dw,
 * groups and cg input channels per group, of shape s: the CPU has AVX2 (and KILN_ISA allows
 * it), the conv is 3x3, stride 1, dilation 1, one input channel, one group, padding at most 2. */
bool kiln__conv_direct_ok(const kiln__conv_direct_shape *s, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t dh,
                          int64_t dw, int64_t groups, int64_t cg);

/* dw [o, 1, 3, 3] = sum over images and positions of dy * x (the weight gradient), summed in
 * an order that does not depend on the thread count. Threads over output channels. */
kiln_status kiln__conv_direct_weight(const kiln__conv_direct_shape *s, const float *x, const float *dy, float *dw);

/* How many weight gradients the direct kernel has run in this process (for tests). */
long kiln__conv_direct_calls(void);

#endif
