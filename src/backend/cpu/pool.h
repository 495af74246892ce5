/* The CPU pooling kernels (pool.c): what tests may ask of them. */
#ifndef KILN_BACKEND_CPU_POOL_H
#define KILN_BACKEND_CPU_POOL_H

/* How many pooling ops (forward or backward) have run on bf16 tensors as they are, in this
 * process: a bf16 tensor the op layer cast to f32 first does not count. */
long kiln__cpu_pool_bf16_calls(void);

#endif
