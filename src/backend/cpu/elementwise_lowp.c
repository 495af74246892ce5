/* RELU and RELU_BACKWARD on bf16 tensors as they are stored, for the op layer's bf16 relus on
 * the CPU (ops/elementwise.c).
 *
 * Why: under autocast a CNN's conv outputs and their gradients are bf16, and each relu ran as a
 * cast to f32, the f32 kernel and a cast back (three passes, and five for the gradient: g and y
 * cast up, the result cast down; 1.0 ms of the Fashion-MNIST CNN's step on conv2 alone, with
 * KILN_SYNC=1). A relu needs no arithmetic: it keeps or zeroes each value, so these loops work on
 * the bits, and give the bits of the route they replace: f32 relu is x < 0 ? 0 : x (-0 kept),
 * its gradient y > 0 ? g : 0, and a NaN comes back from the f32 -> bf16 cast quiet. */
#include "backend/cpu/elementwise-impl.h"

static inline uint16_t quiet(uint16_t v) { return (v & 0x7fffu) > 0x7f80u ? (uint16_t)(v | 0x40u) : v; }

static inline uint16_t relu_bits(uint16_t x) {
    bool negative = (x & 0x8000u) && x != 0x8000u && (x & 0x7fffu) <= 0x7f80u; /* below 0: not -0, not NaN */
    return negative ? 0 : quiet(x);
}

static inline uint16_t relu_backward_bits(uint16_t g, uint16_t y) {
    bool positive = !(y & 0x8000u) && y != 0 && y <= 0x7f80u; /* y > 0, +inf included, NaN not */
    return positive ? quiet(g) : 0;
}

static void relu_bf16(void *ctx, int64_t n, char **p, const int64_t *st) {
    (void)ctx;
    uint16_t *restrict out = (uint16_t *)p[0];
    const uint16_t *restrict x = (const uint16_t *)p[1];
    if (st[0] == 2 && st[1] == 2) { /* dense: the compiler vectorises it */
        for (int64_t i = 0; i < n; i++) out[i] = relu_bits(x[i]);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        *(uint16_t *)(p[0] + i * st[0]) = relu_bits(*(const uint16_t *)(p[1] + i * st[1]));
}

static void relu_backward_bf16(void *ctx, int64_t n, char **p, const int64_t *st) {
    (void)ctx;
    if (st[0] == 2 && st[1] == 2 && st[2] == 2) {
        uint16_t *restrict out = (uint16_t *)p[0];
        const uint16_t *restrict g = (const uint16_t *)p[1], *restrict y = (const uint16_t *)p[2];
        for (int64_t i = 0; i < n; i++) out[i] = relu_backward_bits(g[i], y[i]);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        *(uint16_t *)(p[0] + i * st[0]) =
            relu_backward_bits(*(const uint16_t *)(p[1] + i * st[1]), *(const uint16_t *)(p[2] + i * st[2]));
}

kiln__loop_fn kiln__ew_bf16_loop(kiln__opcode code) {
    return code == KILN__OP_RELU ? relu_bf16 : code == KILN__OP_RELU_BACKWARD ? relu_backward_bf16 : NULL;
}
