/* Adam's f32 update on dense runs with AVX2 (optim_avx2.c), for optim.c. */
#ifndef KILN_BACKEND_CPU_OPTIM_AVX2_H
#define KILN_BACKEND_CPU_OPTIM_AVX2_H

#include <stdbool.h>
#include <stdint.h>

/* Adam's constants in f32, as optim.c's loop rounds them. */
typedef struct {
    float step, w1, b2, w2, eps, bc2, k;
} kiln__adam_f32_consts;

/* Whether the kernel may run: the CPU has AVX2 and KILN_ISA allows it. */
bool kiln__adam_f32_avx2_ok(void);

/* n dense elements of p, m, v (updated in place) and g, decay 0 none, 1 L2, 2 decoupled; first:
 * the moments start from zero. The bits of optim.c's portable loop. */
void kiln__adam_f32_avx2(int64_t n, float *p, float *m, float *v, const float *g, const kiln__adam_f32_consts *c,
                         int decay, bool first);

#endif
