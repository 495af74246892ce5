/* The weight gradient of a 3x3, stride-1 conv of one input channel (conv_direct.h).
 *
 * Why: conv.c runs it as im2col and a GEMM per image, dy [o, oh*ow] @ col^T [oh*ow, 9], whose
 * 9-column output BLAS runs far below its speed: the Fashion-MNIST CNN's conv1 (batch 128,
 * 1 -> 32 channels, 28 x 28) took 1.4-1.5 ms on one thread, the same in f32 and under autocast
 * (conv1 stays f32 there: api/autocast.c). Here each image is copied once into a zero-padded
 * plane and, for each output channel, 8 columns of dy at a time are multiplied into 9 vector
 * accumulators, one per tap, by the 9 shifted rows of the plane; the accumulators are added
 * into double per image and channel, images in order (a task per block of channels: the sums
 * do not depend on the thread count). 0.9 ms there, bound by reading dy. dy's lanes past the
 * output width are masked to zero, so a row's last, shorter block needs no scalar tail. (The
 * forward pass written the same way was no faster than im2col's: both are bound by writing
 * the 12.8 MB output.) */
#include "backend/cpu/conv_direct.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu-impl.h"
#include "backend/cpu/vmath.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DIRECT_HAVE_AVX2 1
#include <immintrin.h>
#define AVX2 __attribute__((target("avx2,fma")))
#else
#define DIRECT_HAVE_AVX2 0
#endif

static atomic_int env_direct = -1; /* KILN_CONV_DIRECT, read once: 0 off */
static atomic_long direct_calls;

long kiln__conv_direct_calls(void) { return atomic_load(&direct_calls); }

bool kiln__conv_direct_ok(const kiln__conv_direct_shape *s, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t dh,
                          int64_t dw, int64_t groups, int64_t cg) {
#if DIRECT_HAVE_AVX2
    if (atomic_load(&env_direct) < 0) {
        const char *e = getenv("KILN_CONV_DIRECT");
        atomic_store(&env_direct, !(e && e[0] == '0'));
    }
    return atomic_load(&env_direct) && kh == 3 && kw == 3 && sh == 1 && sw == 1 && dh == 1 && dw == 1 && groups == 1 &&
           cg == 1 && s->xs[3] == 1 && s->ph >= 0 && s->ph <= 2 && s->pw >= 0 && s->pw <= 2 &&
           s->oh == s->h + 2 * s->ph - 2 && s->ow == s->w + 2 * s->pw - 2 && s->oh > 0 && s->ow > 0 && s->n > 0 &&
           s->o > 0 && s->ow <= ((int64_t)1 << 20) && kiln__vmath_isa()[0] == 'a';
#else
    (void)s, (void)kh, (void)kw, (void)sh, (void)sw, (void)dh, (void)dw, (void)groups, (void)cg;
    return false;
#endif
}

#if DIRECT_HAVE_AVX2

/* The padded plane: oh + 2 rows of xw floats, input pixel (r, c) at (r + ph, c + pw), zeros
 * elsewhere, xw covering every 8-lane load of the last block. */
static int64_t plane_width(const kiln__conv_direct_shape *s) { return ((s->ow + 7) / 8) * 8 + 8; }

static void pad_image(const kiln__conv_direct_shape *s, const float *x, float *p) {
    int64_t xw = plane_width(s);
    memset(p, 0, sizeof(float) * (size_t)((s->oh + 2) * xw));
    for (int64_t r = 0; r < s->h; r++)
        memcpy(p + (r + s->ph) * xw + s->pw, x + r * s->xs[2], sizeof(float) * (size_t)s->w);
}

AVX2 static inline __m256i lanes_below(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

typedef struct {
    const kiln__conv_direct_shape *s;
    const float *x, *dy;
    float *out;
    atomic_int oom;
} direct_job;

AVX2 static double hsum(__m256 v) {
    __m256d d = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(d), _mm256_extractf128_pd(d, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

/* Output channels [begin, end): every image in order, each padded once per task. */
AVX2 static void weight_task(void *ctx, int64_t begin, int64_t end) {
    direct_job *j = ctx;
    const kiln__conv_direct_shape *s = j->s;
    int64_t xw = plane_width(s), ohw = s->oh * s->ow, nch = end - begin;
    float *p = malloc(sizeof(float) * (size_t)((s->oh + 2) * xw));
    double *sums = calloc((size_t)(nch * 9), sizeof(double));
    if (!p || !sums) {
        free(p), free(sums);
        atomic_store(&j->oom, 1);
        return;
    }
    for (int64_t n = 0; n < s->n; n++) {
        pad_image(s, j->x + n * s->xs[0], p);
        for (int64_t o = begin; o < end; o++) {
            const float *dy = j->dy + (n * s->o + o) * ohw;
            __m256 k[9];
            for (int t = 0; t < 9; t++) k[t] = _mm256_setzero_ps();
            for (int64_t oy = 0; oy < s->oh; oy++)
                for (int64_t ox = 0; ox < s->ow; ox += 8) {
                    const float *r0 = p + oy * xw + ox, *r1 = r0 + xw, *r2 = r1 + xw, *g = dy + oy * s->ow + ox;
                    __m256 d = s->ow - ox >= 8 ? _mm256_loadu_ps(g) : _mm256_maskload_ps(g, lanes_below(s->ow - ox));
                    k[0] = _mm256_fmadd_ps(d, _mm256_loadu_ps(r0), k[0]);
                    k[1] = _mm256_fmadd_ps(d, _mm256_loadu_ps(r0 + 1), k[1]);
                    k[2] = _mm256_fmadd_ps(d, _mm256_loadu_ps(r0 + 2), k[2]);
                    k[3] = _mm256_fmadd_ps(d, _mm256_loadu_ps(r1), k[3]);
                    k[4] = _mm256_fmadd_ps(d, _mm256_loadu_ps(r1 + 1), k[4]);
                    k[5] = _mm256_fmadd_ps(d, _mm256_loadu_ps(r1 + 2), k[5]);
                    k[6] = _mm256_fmadd_ps(d, _mm256_loadu_ps(r2), k[6]);
                    k[7] = _mm256_fmadd_ps(d, _mm256_loadu_ps(r2 + 1), k[7]);
                    k[8] = _mm256_fmadd_ps(d, _mm256_loadu_ps(r2 + 2), k[8]);
                }
            for (int t = 0; t < 9; t++) sums[(o - begin) * 9 + t] += hsum(k[t]);
        }
    }
    for (int64_t i = 0; i < nch * 9; i++) j->out[begin * 9 + i] = (float)sums[i];
    free(p), free(sums);
}

static kiln_status finish(direct_job *j, const char *what) {
    if (!atomic_load(&j->oom)) return KILN_OK;
    kiln__kernel_error("out of memory for the direct conv's padded plane (%s)", what);
    return KILN_ERR_OUT_OF_MEMORY;
}

kiln_status kiln__conv_direct_weight(const kiln__conv_direct_shape *s, const float *x, const float *dy, float *dw) {
    direct_job j = {.s = s, .x = x, .dy = dy, .out = dw};
    atomic_init(&j.oom, 0);
    atomic_fetch_add(&direct_calls, 1);
    /* a block of channels per thread (each pads every image once); a channel's sum does not
     * depend on the blocks */
    int64_t threads = kiln__pool_threads() > 0 ? kiln__pool_threads() : 1;
    kiln__parallel_for(s->o, (s->o + threads - 1) / threads, weight_task, &j);
    return finish(&j, "weight gradient");
}

#else

kiln_status kiln__conv_direct_weight(const kiln__conv_direct_shape *s, const float *x, const float *dy, float *dw) {
    (void)s, (void)x, (void)dy, (void)dw;
    return KILN_ERR_INTERNAL; /* not reached: kiln__conv_direct_ok is false */
}

#endif
