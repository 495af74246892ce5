/* f32 <-> bf16 COPY loops (see convert_lowp.h). Why: the generic conversion goes through
 * double and a function call per element; a 2048 x 2048 weight cast to bf16 under autocast
 * took 7 ms that way (1.7 ns per element), the products it feeds 3 ms. */
#include "backend/cpu/convert_lowp.h"

#include <string.h>

static inline uint16_t round_bf16(uint32_t u) {
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

static void f32_to_bf16(void *ctx, int64_t n, char **p, const int64_t *st) {
    (void)ctx;
    if (st[0] == 2 && st[1] == 4) { /* dense: vectorised */
        uint16_t *restrict dst = (uint16_t *)p[0];
        const uint32_t *restrict src = (const uint32_t *)p[1];
        for (int64_t i = 0; i < n; i++) dst[i] = round_bf16(src[i]);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, p[1] + i * st[1], 4);
        uint16_t h = round_bf16(u);
        memcpy(p[0] + i * st[0], &h, 2);
    }
}

static void bf16_to_f32(void *ctx, int64_t n, char **p, const int64_t *st) {
    (void)ctx;
    if (st[0] == 4 && st[1] == 2) {
        uint32_t *restrict dst = (uint32_t *)p[0];
        const uint16_t *restrict src = (const uint16_t *)p[1];
        for (int64_t i = 0; i < n; i++) dst[i] = (uint32_t)src[i] << 16;
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p[1] + i * st[1], 2);
        uint32_t u = (uint32_t)h << 16;
        memcpy(p[0] + i * st[0], &u, 4);
    }
}

void kiln__cpu_store_bf16(int64_t n, const float *src, int64_t src_stride, uint16_t *dst, int64_t dst_stride) {
    int64_t st[2] = {dst_stride * 2, src_stride * 4};
    f32_to_bf16(NULL, n, (char *[]){(char *)dst, (char *)src}, st);
}

kiln__loop_fn kiln__cpu_convert_lowp_loop(kiln_dtype src, kiln_dtype dst) {
    if (src == KILN_F32 && dst == KILN_BF16) return f32_to_bf16;
    if (src == KILN_BF16 && dst == KILN_F32) return bf16_to_f32;
    return NULL;
}
