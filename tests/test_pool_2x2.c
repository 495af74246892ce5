/* The AVX2 kernel of the 2x2, stride-2 f32 max pool (backend/cpu/pool_avx2.c) against the
 * generic sweep (KILN_ISA=scalar's path, pool.c) bit for bit, values and the indices its
 * gradient scatters through, on data full of ties, NaNs and infinities: widths with and
 * without a tail past the last block of 8 outputs, odd sizes (a last row and column no
 * window reads), an input that is a column slice of a wider one (row stride > width) and a
 * permuted one (the generic path); and the values against a double-precision reference. */
#include <math.h>

#include <kiln.h>

#include "backend/cpu/vmath.h"
#include "kiln_test.h"

static uint64_t lcg = 1;

/* Mostly small integers (many ties), with NaN, +-inf and -0.0 sprinkled in. */
static float next_value(void) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    unsigned r = (unsigned)(lcg >> 33) % 64;
    if (r == 0) return NAN;
    if (r == 1) return INFINITY;
    if (r == 2) return -INFINITY;
    if (r == 3) return -0.0f;
    return (float)((int)(r % 7) - 3);
}

typedef struct {
    int64_t n, c, h, w;
    int64_t slice_w; /* > w: x is columns [1, w + 1) of a wider tensor */
    bool permuted;   /* x made as [N, H, W, C] and permuted */
} pool_shape;

/* y = max_pool2d(x, 2, 2) and dx = d/dleaf sum(y * weights), weights distinct per output, for
 * x a view of the leaf made from data (itself, a column slice or a permutation). */
static void run(const pool_shape *s, const float *data, float *y, float *dx) {
    int64_t wide = s->slice_w ? s->slice_w : s->w, total = s->n * s->c * s->h * wide;
    kiln_tensor leaf = s->permuted ? kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(s->n, s->h, s->w, s->c), data)
                                   : kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(s->n, s->c, s->h, wide), data);
    KT_CHECK(kiln_require_grad(leaf) == KILN_OK);
    kiln_tensor x = kiln_ref(leaf);
    if (s->permuted) x = kiln_permute(x, KILN_DIMS(0, 3, 1, 2));
    if (s->slice_w) x = kiln_slice(x, 3, 1, s->w + 1, 1);
    kiln_tensor out = kiln_max_pool2d(x, 2, 2, 2, 2, 0, 0);
    int64_t oh = s->h / 2, ow = s->w / 2, m = s->n * s->c * oh * ow;
    kiln_tensor weights =
        kiln_reshape(kiln_arange(KILN_CPU, KILN_F32, 1, (double)m + 1, 1), KILN_SHAPE(s->n, s->c, oh, ow));
    KT_CHECK(kiln_into_data(kiln_ref(out), y, sizeof(float) * (size_t)m) == KILN_OK);
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_sum(kiln_mul(out, weights)), &g) == KILN_OK);
    KT_CHECK(kiln_into_data(kiln_grad(g, leaf), dx, sizeof(float) * (size_t)total) == KILN_OK);
    kiln_grads_free(g);
    kiln_release(leaf);
}

static void check(const pool_shape *s) {
    int64_t wide = s->slice_w ? s->slice_w : s->w, total = s->n * s->c * s->h * wide;
    int64_t m = s->n * s->c * (s->h / 2) * (s->w / 2), in = total;
    float *data = malloc(sizeof(float) * (size_t)total);
    for (int64_t i = 0; i < total; i++) data[i] = next_value();
    float *y = malloc(sizeof(float) * (size_t)m), *y_ref = malloc(sizeof(float) * (size_t)m);
    float *dx = malloc(sizeof(float) * (size_t)in), *dx_ref = malloc(sizeof(float) * (size_t)in);
    run(s, data, y, dx);
    KT_CHECK(kiln__vmath_force_isa("scalar") == 0);
    run(s, data, y_ref, dx_ref);
    KT_CHECK(kiln__vmath_force_isa(NULL) == 0);
    KT_CHECK_MSG(memcmp(y, y_ref, sizeof(float) * (size_t)m) == 0, "%lldx%lldx%lldx%lld: values differ",
                 (long long)s->n, (long long)s->c, (long long)s->h, (long long)s->w);
    KT_CHECK_MSG(memcmp(dx, dx_ref, sizeof(float) * (size_t)in) == 0, "%lldx%lldx%lldx%lld: indices differ",
                 (long long)s->n, (long long)s->c, (long long)s->h, (long long)s->w);
    /* values against double: the first maximum of each window, NaN winning */
    if (!s->slice_w && !s->permuted) {
        int64_t oh = s->h / 2, ow = s->w / 2, bad = 0;
        for (int64_t pl = 0; pl < s->n * s->c; pl++)
            for (int64_t oy = 0; oy < oh; oy++)
                for (int64_t ox = 0; ox < ow; ox++) {
                    double best = -INFINITY;
                    for (int dy = 0; dy < 2; dy++)
                        for (int dxx = 0; dxx < 2; dxx++) {
                            double v = data[(pl * s->h + 2 * oy + dy) * s->w + 2 * ox + dxx];
                            if (v > best || isnan(v)) best = v;
                        }
                    float got = y[(pl * oh + oy) * ow + ox];
                    bad += isnan(best) ? !isnan(got) : (double)got != best;
                }
        KT_CHECK_MSG(bad == 0, "%lld values off the reference", (long long)bad);
    }
    free(data), free(y), free(y_ref), free(dx), free(dx_ref);
}

KT_TEST(matches_the_generic_kernel) {
    const pool_shape shapes[] = {
        {.n = 2, .c = 3, .h = 28, .w = 28},               /* the CNN's: 14 outputs, a block and a tail */
        {.n = 1, .c = 2, .h = 32, .w = 32},               /* two whole blocks */
        {.n = 1, .c = 1, .h = 9, .w = 37},                /* odd: last row and column unread */
        {.n = 3, .c = 2, .h = 4, .w = 6},                 /* narrower than one block */
        {.n = 1, .c = 2, .h = 14, .w = 50, .slice_w = 53}, /* row stride > width */
        {.n = 2, .c = 5, .h = 12, .w = 20, .permuted = true},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) check(&shapes[i]);
}

int main(void) {
    kt_mem_begin();
    KT_RUN(matches_the_generic_kernel);
    KT_MEM_CHECK();
    return kt_finish();
}
