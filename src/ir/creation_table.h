/* The creation table: the kernels that write a new tensor from parameters alone, no tensor
 * read (fills, ranges, the identity, random numbers), with the public functions that run each.
 * Those functions (kiln_zeros ... kiln_randint, kiln_*_like, kiln_rand_gen ...) stay declared by
 * hand in kiln/tensor.h: they take a device, a dtype and a shape rather than tensors, so the
 * shape table's test (a row's example over two [3, 4, 5] tensors) and its generated callers do
 * not fit them; tests/test_creation.c and tests/test_random.c run them. ir/opcodes.h expands
 * KILN__CREATION_KERNELS into KILN__OPCODES, so these opcodes come from here. DESIGN.md, section 7.
 *
 * X(NAME, functions, params): the kernel, the public functions that run it, the op record's
 * parameters. RAND_* draw counter-based numbers (Philox): element i of the output takes counter
 * offset + i, so a tensor's values do not depend on its layout or on the device. */
#ifndef KILN_IR_CREATION_TABLE_H
#define KILN_IR_CREATION_TABLE_H

/* clang-format off */
#define KILN__CREATION_KERNELS(X) \
    X(FILL,           "zeros, ones, full, *_like, masks",  "out = p.f[0]") \
    X(ARANGE,         "arange",                           "out[i] = p.f[0] + i * p.f[1] (dense 1-d out)") \
    X(LINSPACE,       "linspace",                         "start p.f[0], end p.f[1], steps pi[0] (out dense 1-d)") \
    X(EYE,            "eye",                              "out 2-d: 1 on the diagonal") \
    X(RAND_UNIFORM,   "rand, uniform, randint, rand_like", "seed pi[0], offset pi[1], lo p.f[0], hi p.f[1]") \
    X(RAND_NORMAL,    "randn, normal, randn_like",        "seed pi[0], offset pi[1], mean p.f[0], std p.f[1]") \
    X(RAND_BERNOULLI, "bernoulli",                        "seed pi[0], offset pi[1], prob p.f[0]")
/* clang-format on */

#endif
