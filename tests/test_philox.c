/* Counter-based random numbers: known answers, reproducibility across thread counts and
 * offsets, and the moments of each distribution. */
#include "backend/cpu/philox.h"

#include <float.h>
#include <stdint.h>

#include "backend/cpu/threadpool.h"
#include "kiln_test.h"

enum { SAMPLES = 1000000 };

/* From the kat_vectors file of the Random123 distribution: counter, key, expected. */
KT_TEST(philox_known_answers) {
    static const uint32_t cases[][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        uint32_t out[4];
        kiln__philox4x32_10(cases[c], cases[c] + 4, out);
        for (int i = 0; i < 4; i++) KT_CHECK_MSG(out[i] == cases[c][6 + i], "case %zu word %d: %08x", c, i, out[i]);
    }
}

/* The documented layout: element 4b + j of a float stream comes from word j of block b;
 * a normal pair is Box-Muller of (word 0, word 1) and (word 2, word 3). Checked against
 * double-precision libm, which also bounds the error of the float log and sine/cosine. */
KT_TEST(stream_layout_matches_philox_blocks) {
    enum { BLOCKS = 20000 };
    const uint64_t seed = 0x0123456789abcdefull;
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    float *uniform = malloc(4 * BLOCKS * sizeof *uniform), *normal = malloc(4 * BLOCKS * sizeof *normal);
    kiln__rand_uniform_f32(seed, 0, uniform, 4 * BLOCKS, 0.0f, 1.0f);
    kiln__rand_normal_f32(seed, 0, normal, 4 * BLOCKS, 0.0f, 1.0f);
    int64_t uniform_bad = 0, normal_bad = 0;
    double worst = 0;
    for (uint32_t block = 0; block < BLOCKS; block++) {
        uint32_t counter[4] = {block, 0, 0, 0}, w[4];
        kiln__philox4x32_10(counter, key, w);
        for (int j = 0; j < 4; j++) uniform_bad += uniform[4 * block + j] != (float)((w[j] >> 8) * 0x1.0p-24);
        for (int pair = 0; pair < 2; pair++) {
            double u = ((w[2 * pair] >> 8) + 1) * 0x1.0p-24, t = (w[2 * pair + 1] >> 8) * 0x1.0p-24;
            double radius = sqrt(-2.0 * log(u)), angle = 2.0 * 3.14159265358979323846 * t;
            double err0 = fabs(normal[4 * block + 2 * pair] - radius * cos(angle));
            double err1 = fabs(normal[4 * block + 2 * pair + 1] - radius * sin(angle));
            double err = err0 > err1 ? err0 : err1;
            worst = err > worst ? err : worst;
            normal_bad += !(err <= 4e-6 * (1.0 + radius));
        }
    }
    KT_CHECK(uniform_bad == 0);
    KT_CHECK_MSG(normal_bad == 0, "%lld pairs off, worst error %g", (long long)normal_bad, worst);
    free(uniform), free(normal);
}

/* Each fill under 1 and 2 threads, and with several offsets, must agree bit for bit. */
typedef void (*fill_f32_fn)(uint64_t seed, uint64_t offset, float *out, int64_t n);
typedef void (*fill_f64_fn)(uint64_t seed, uint64_t offset, double *out, int64_t n);

static void uniform_f32(uint64_t s, uint64_t o, float *x, int64_t n) { kiln__rand_uniform_f32(s, o, x, n, -2.0f, 3.0f); }
static void normal_f32(uint64_t s, uint64_t o, float *x, int64_t n) { kiln__rand_normal_f32(s, o, x, n, 1.0f, 2.0f); }
static void bernoulli_f32(uint64_t s, uint64_t o, float *x, int64_t n) { kiln__rand_bernoulli_f32(s, o, x, n, 0.3); }
static void uniform_f64(uint64_t s, uint64_t o, double *x, int64_t n) { kiln__rand_uniform_f64(s, o, x, n, -2.0, 3.0); }
static void normal_f64(uint64_t s, uint64_t o, double *x, int64_t n) { kiln__rand_normal_f64(s, o, x, n, 1.0, 2.0); }

static const fill_f32_fn fills_f32[] = {uniform_f32, normal_f32, bernoulli_f32};
static const fill_f64_fn fills_f64[] = {uniform_f64, normal_f64};

enum { REPRO_N = 300007 }; /* odd, and spans many pool chunks */

KT_TEST(same_seed_same_numbers_any_thread_count) {
    float *x1 = malloc(REPRO_N * sizeof *x1), *x2 = malloc(REPRO_N * sizeof *x2);
    double *y1 = malloc(REPRO_N * sizeof *y1), *y2 = malloc(REPRO_N * sizeof *y2);
    int threads = kiln__pool_threads();
    for (size_t f = 0; f < sizeof fills_f32 / sizeof *fills_f32; f++) {
        kiln__pool_set_threads(1);
        fills_f32[f](1234, 3, x1, REPRO_N);
        kiln__pool_set_threads(2);
        fills_f32[f](1234, 3, x2, REPRO_N);
        KT_CHECK_MSG(memcmp(x1, x2, REPRO_N * sizeof *x1) == 0, "f32 fill %zu", f);
        kiln__pool_set_threads(4);
        fills_f32[f](1234, 3, x2, REPRO_N);
        KT_CHECK_MSG(memcmp(x1, x2, REPRO_N * sizeof *x1) == 0, "f32 fill %zu", f);
    }
    for (size_t f = 0; f < sizeof fills_f64 / sizeof *fills_f64; f++) {
        kiln__pool_set_threads(1);
        fills_f64[f](99, 1, y1, REPRO_N);
        kiln__pool_set_threads(2);
        fills_f64[f](99, 1, y2, REPRO_N);
        KT_CHECK_MSG(memcmp(y1, y2, REPRO_N * sizeof *y1) == 0, "f64 fill %zu", f);
    }
    kiln__pool_set_threads(threads);
    free(x1), free(x2), free(y1), free(y2);
}

KT_TEST(different_seeds_differ) {
    float *x1 = malloc(1000 * sizeof *x1), *x2 = malloc(1000 * sizeof *x2);
    for (size_t f = 0; f < sizeof fills_f32 / sizeof *fills_f32; f++) {
        fills_f32[f](1, 0, x1, 1000);
        fills_f32[f](2, 0, x2, 1000);
        int same = 0;
        for (int i = 0; i < 1000; i++) same += x1[i] == x2[i];
        /* Bernoulli(0.3) agrees by chance on ~58% of elements; the others almost never. */
        KT_CHECK_MSG(same < (f == 2 ? 700 : 5), "fill %zu: %d equal", f, same);
    }
    /* A seed differing only in its high word must matter too. */
    kiln__rand_uniform_f32(1, 0, x1, 1000, 0, 1);
    kiln__rand_uniform_f32(1 | (1ull << 32), 0, x2, 1000, 0, 1);
    KT_CHECK(memcmp(x1, x2, 1000 * sizeof *x1) != 0);
    free(x1), free(x2);
}

/* Filling [0, n) equals filling [0, a) then [a, n), for every split point near block
 * boundaries and far into the stream. */
KT_TEST(offset_continues_the_stream) {
    enum { N = 20000 };
    float *whole = malloc(N * sizeof *whole), *parts = malloc(N * sizeof *parts);
    double *whole64 = malloc(N * sizeof *whole64), *parts64 = malloc(N * sizeof *parts64);
    static const int64_t splits[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 4095, 8193, 19999, N};
    for (size_t f = 0; f < sizeof fills_f32 / sizeof *fills_f32; f++) {
        fills_f32[f](77, 0, whole, N);
        for (size_t s = 0; s < sizeof splits / sizeof *splits; s++) {
            int64_t a = splits[s];
            memset(parts, 0, N * sizeof *parts);
            fills_f32[f](77, 0, parts, a);
            fills_f32[f](77, (uint64_t)a, parts + a, N - a);
            KT_CHECK_MSG(memcmp(whole, parts, N * sizeof *whole) == 0, "f32 fill %zu split %lld", f, (long long)a);
        }
        /* Element by element from a large offset. */
        fills_f32[f](77, 1000000007ull, whole, 64);
        for (int i = 0; i < 64; i++) fills_f32[f](77, 1000000007ull + (uint64_t)i, parts + i, 1);
        KT_CHECK(memcmp(whole, parts, 64 * sizeof *whole) == 0);
    }
    for (size_t f = 0; f < sizeof fills_f64 / sizeof *fills_f64; f++) {
        fills_f64[f](5, 0, whole64, N);
        for (size_t s = 0; s < sizeof splits / sizeof *splits; s++) {
            int64_t a = splits[s];
            fills_f64[f](5, 0, parts64, a);
            fills_f64[f](5, (uint64_t)a, parts64 + a, N - a);
            KT_CHECK_MSG(memcmp(whole64, parts64, N * sizeof *whole64) == 0, "f64 fill %zu split %lld", f, (long long)a);
        }
    }
    free(whole), free(parts), free(whole64), free(parts64);
}

typedef struct moments {
    double mean, var, min, max;
    int64_t non_finite;
} moments;

static moments moments_f32(const float *x, int64_t n) {
    moments m = {0, 0, INFINITY, -INFINITY, 0};
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) m.non_finite++;
        m.mean += x[i];
        m.min = x[i] < m.min ? x[i] : m.min;
        m.max = x[i] > m.max ? x[i] : m.max;
    }
    m.mean /= (double)n;
    for (int64_t i = 0; i < n; i++) m.var += (x[i] - m.mean) * (x[i] - m.mean);
    m.var /= (double)(n - 1);
    return m;
}

static moments moments_f64(const double *x, int64_t n) {
    moments m = {0, 0, INFINITY, -INFINITY, 0};
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) m.non_finite++;
        m.mean += x[i];
        m.min = x[i] < m.min ? x[i] : m.min;
        m.max = x[i] > m.max ? x[i] : m.max;
    }
    m.mean /= (double)n;
    for (int64_t i = 0; i < n; i++) m.var += (x[i] - m.mean) * (x[i] - m.mean);
    m.var /= (double)(n - 1);
    return m;
}

/* Bounds are five standard errors: a correct generator fails about once in 10^6 runs. */
KT_TEST(uniform_moments) {
    float *x = malloc(SAMPLES * sizeof *x);
    double *y = malloc(SAMPLES * sizeof *y);
    double se_mean = sqrt(1.0 / 12.0 / SAMPLES), se_var = sqrt((1.0 / 80 - 1.0 / 144) / SAMPLES);
    kiln__rand_uniform_f32(2024, 0, x, SAMPLES, 0.0f, 1.0f);
    moments m = moments_f32(x, SAMPLES);
    KT_NEAR(m.mean, 0.5, 5 * se_mean);
    KT_NEAR(m.var, 1.0 / 12.0, 5 * se_var);
    KT_CHECK(m.min >= 0.0 && m.max < 1.0 && m.non_finite == 0);

    kiln__rand_uniform_f64(2024, 0, y, SAMPLES, 0.0, 1.0);
    m = moments_f64(y, SAMPLES);
    KT_NEAR(m.mean, 0.5, 5 * se_mean);
    KT_NEAR(m.var, 1.0 / 12.0, 5 * se_var);
    KT_CHECK(m.min >= 0.0 && m.max < 1.0 && m.non_finite == 0);

    /* Scaled range: mean (lo + hi) / 2, variance (hi - lo)^2 / 12. */
    kiln__rand_uniform_f32(7, 0, x, SAMPLES, -3.0f, 5.0f);
    m = moments_f32(x, SAMPLES);
    KT_NEAR(m.mean, 1.0, 5 * 8 * se_mean);
    KT_NEAR(m.var, 64.0 / 12.0, 5 * 64 * se_var);
    KT_CHECK(m.min >= -3.0 && m.max < 5.0);
    free(x), free(y);
}

/* Ranges where lo + (hi - lo) * u rounds to hi for u close to 1. */
KT_TEST(uniform_never_reaches_hi) {
    float *x = malloc(SAMPLES * sizeof *x);
    double *y = malloc(SAMPLES * sizeof *y);
    static const float ranges[][2] = {{1.0f, 1.0000001f}, {100.0f, 100.00001f}, {-FLT_MAX, FLT_MAX},
                                      {16777216.0f, 16777220.0f}, {-1.0f, -0.99999994f}};
    for (size_t r = 0; r < sizeof ranges / sizeof *ranges; r++) {
        kiln__rand_uniform_f32(r, 0, x, SAMPLES, ranges[r][0], ranges[r][1]);
        int64_t bad = 0;
        for (int64_t i = 0; i < SAMPLES; i++) bad += !(x[i] >= ranges[r][0] && x[i] < ranges[r][1]);
        KT_CHECK_MSG(bad == 0, "range %zu: %lld out of [lo, hi)", r, (long long)bad);
    }
    static const double ranges64[][2] = {{1.0, 1.0000000000000002}, {-DBL_MAX, DBL_MAX}, {1e15, 1e15 + 2}};
    for (size_t r = 0; r < sizeof ranges64 / sizeof *ranges64; r++) {
        kiln__rand_uniform_f64(r, 0, y, SAMPLES, ranges64[r][0], ranges64[r][1]);
        int64_t bad = 0;
        for (int64_t i = 0; i < SAMPLES; i++) bad += !(y[i] >= ranges64[r][0] && y[i] < ranges64[r][1]);
        KT_CHECK_MSG(bad == 0, "f64 range %zu: %lld out of [lo, hi)", r, (long long)bad);
    }
    /* An empty range gives lo. */
    kiln__rand_uniform_f32(1, 0, x, 100, 2.5f, 2.5f);
    for (int i = 0; i < 100; i++) KT_CHECK(x[i] == 2.5f);
    free(x), free(y);
}

KT_TEST(normal_moments) {
    float *x = malloc(SAMPLES * sizeof *x);
    double *y = malloc(SAMPLES * sizeof *y);
    double se_mean = 1.0 / sqrt(SAMPLES), se_std = sqrt(1.0 / (2.0 * SAMPLES));
    kiln__rand_normal_f32(31337, 0, x, SAMPLES, 0.0f, 1.0f);
    moments m = moments_f32(x, SAMPLES);
    KT_NEAR(m.mean, 0.0, 5 * se_mean);
    KT_NEAR(sqrt(m.var), 1.0, 5 * se_std);
    KT_CHECK(m.non_finite == 0);
    KT_CHECK(m.min < -4.0 && m.max > 4.0); /* the tails are there */

    kiln__rand_normal_f64(31337, 0, y, SAMPLES, 0.0, 1.0);
    m = moments_f64(y, SAMPLES);
    KT_NEAR(m.mean, 0.0, 5 * se_mean);
    KT_NEAR(sqrt(m.var), 1.0, 5 * se_std);
    KT_CHECK(m.non_finite == 0);

    kiln__rand_normal_f32(8, 0, x, SAMPLES, 3.0f, 0.5f);
    m = moments_f32(x, SAMPLES);
    KT_NEAR(m.mean, 3.0, 5 * 0.5 * se_mean);
    KT_NEAR(sqrt(m.var), 0.5, 5 * 0.5 * se_std);

    /* Within one standard deviation: 68.27%. */
    kiln__rand_normal_f32(9, 0, x, SAMPLES, 0.0f, 1.0f);
    int64_t inside = 0;
    for (int64_t i = 0; i < SAMPLES; i++) inside += fabsf(x[i]) < 1.0f;
    KT_NEAR((double)inside / SAMPLES, 0.682689, 5 * sqrt(0.6827 * 0.3173 / SAMPLES));
    free(x), free(y);
}

/* The smallest uniform the Box-Muller radius sees must not be 0, whatever the words. */
KT_TEST(normal_is_finite_everywhere) {
    /* Find a block whose radius word has its top 24 bits all zero (about one block in
     * 8 million), where a naive (0, 1) mapping would take log(0). */
    uint32_t key[2] = {0, 0}, words[4];
    int64_t found = -1;
    for (uint32_t block = 0; block < (1u << 26) && found < 0; block++) {
        uint32_t counter[4] = {block, 0, 0, 0};
        kiln__philox4x32_10(counter, key, words);
        if (words[0] >> 8 == 0) found = 4 * (int64_t)block;
        if (words[2] >> 8 == 0) found = 4 * (int64_t)block + 2;
    }
    KT_CHECK(found >= 0);
    if (found >= 0) {
        float pair[2];
        kiln__rand_normal_f32(0, (uint64_t)found, pair, 2, 0.0f, 1.0f);
        KT_CHECK(isfinite(pair[0]) && isfinite(pair[1]));
        KT_CHECK(hypot(pair[0], pair[1]) > 5.7); /* the far tail: radius sqrt(-2 ln 2^-24) */
    }

    float *x = malloc(SAMPLES * sizeof *x);
    for (uint64_t seed = 0; seed < 4; seed++) {
        kiln__rand_normal_f32(seed, seed * 123456789ull, x, SAMPLES, 0.0f, 1.0f);
        int64_t bad = 0;
        for (int64_t i = 0; i < SAMPLES; i++) bad += !isfinite(x[i]);
        KT_CHECK(bad == 0);
    }
    free(x);
}

KT_TEST(bernoulli_values_and_rate) {
    float *x = malloc(SAMPLES * sizeof *x);
    kiln__rand_bernoulli_f32(11, 0, x, SAMPLES, 0.3);
    int64_t ones = 0, other = 0;
    for (int64_t i = 0; i < SAMPLES; i++) ones += x[i] == 1.0f, other += x[i] != 0.0f && x[i] != 1.0f;
    KT_CHECK(other == 0);
    KT_NEAR((double)ones / SAMPLES, 0.3, 5 * sqrt(0.21 / SAMPLES));
    kiln__rand_bernoulli_f32(11, 0, x, 10000, 0.0);
    for (int i = 0; i < 10000; i++) other += x[i] != 0.0f;
    kiln__rand_bernoulli_f32(11, 0, x, 10000, 1.0);
    for (int i = 0; i < 10000; i++) other += x[i] != 1.0f;
    kiln__rand_bernoulli_f32(11, 0, x, 10000, -0.5);
    for (int i = 0; i < 10000; i++) other += x[i] != 0.0f;
    kiln__rand_bernoulli_f32(11, 0, x, 10000, 7.0);
    for (int i = 0; i < 10000; i++) other += x[i] != 1.0f;
    KT_CHECK(other == 0);
    free(x);
}

KT_TEST(empty_fill_touches_nothing) {
    float x = 42.0f;
    kiln__rand_uniform_f32(1, 0, &x, 0, 0, 1);
    kiln__rand_normal_f32(1, 5, &x, -3, 0, 1);
    KT_CHECK(x == 42.0f);
}

int main(void) {
    KT_RUN(philox_known_answers);
    KT_RUN(stream_layout_matches_philox_blocks);
    KT_RUN(same_seed_same_numbers_any_thread_count);
    KT_RUN(different_seeds_differ);
    KT_RUN(offset_continues_the_stream);
    KT_RUN(uniform_moments);
    KT_RUN(uniform_never_reaches_hi);
    KT_RUN(normal_moments);
    KT_RUN(normal_is_finite_everywhere);
    KT_RUN(bernoulli_values_and_rate);
    KT_RUN(empty_fill_touches_nothing);
    kiln__pool_shutdown();
    return kt_finish();
}
