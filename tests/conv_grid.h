/* The convolution cases test_conv and test_conv_dnnl share: a grid of stride, padding,
 * dilation and groups (depthwise included), odd sizes, batch 1 and more. */
#ifndef KILN_TEST_CONV_GRID_H
#define KILN_TEST_CONV_GRID_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    int64_t n, c, h, w, o, kh, kw;
    int sh, sw, ph, pw, dh, dw, groups;
    bool bias;
} conv_case;

static int64_t out_dim(int64_t in, int64_t k, int s, int p, int d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

static const conv_case conv_grid[] = {
    /* n  c  h  w   o kh kw sh sw ph pw dh dw g  bias */
    {1, 1, 5, 5, 1, 3, 3, 1, 1, 0, 0, 1, 1, 1, true},
    {2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    {3, 2, 9, 8, 5, 3, 2, 2, 1, 1, 0, 1, 1, 1, false},
    {2, 4, 11, 9, 6, 3, 3, 2, 3, 2, 1, 2, 1, 2, true},   /* dilation, groups 2 */
    {2, 6, 8, 7, 6, 3, 3, 1, 1, 1, 1, 1, 1, 6, true},    /* depthwise */
    {3, 4, 6, 5, 8, 5, 3, 1, 2, 2, 1, 1, 2, 4, true},    /* depthwise x2 multiplier */
    {4, 5, 6, 7, 3, 1, 1, 1, 1, 0, 0, 1, 1, 1, true},    /* 1x1: direct */
    {2, 6, 5, 5, 4, 1, 1, 2, 2, 1, 0, 1, 1, 2, false},   /* 1x1 strided, padded, grouped */
    {1, 3, 4, 4, 2, 4, 4, 1, 1, 0, 0, 1, 1, 1, true},    /* kernel = input: 1x1 output */
    {5, 2, 3, 13, 3, 3, 5, 3, 2, 1, 2, 1, 3, 1, true},   /* wide, batch > threads, odd */
    {2, 3, 2, 2, 2, 3, 3, 1, 1, 2, 2, 1, 1, 1, true},    /* padding larger than the input */
    {1, 2, 17, 19, 3, 7, 7, 3, 3, 3, 3, 1, 1, 1, true},  /* big kernel */
};
#define NGRID (sizeof conv_grid / sizeof conv_grid[0])

#endif
