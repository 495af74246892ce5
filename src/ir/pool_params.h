/* How a pooling op record (MAX_POOL2D, AVG_POOL2D and their backward ops) carries its
 * windows: p.i[0..3] the kernel's height and width and the strides, pi[0..1] the padding, pi[2]
 * the window mode below; the output's (or dy's) shape gives the window count. The one
 * definition that ops/pool.c encodes and every backend's pooling kernels decode. */
#ifndef KILN_IR_POOL_PARAMS_H
#define KILN_IR_POOL_PARAMS_H

/* Windows that count the padding in an average's divisor (PyTorch's default); adaptive windows
 * (output i spans [floor(i*H/OH), ceil((i+1)*H/OH))); or windows whose average divides by the
 * count of input elements inside (count_include_pad=False). */
enum { KILN__POOL_WINDOWS = 0, KILN__POOL_ADAPTIVE = 1, KILN__POOL_WINDOWS_EXCLUDE_PAD = 2 };

#endif
