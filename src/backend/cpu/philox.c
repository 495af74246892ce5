/* Philox4x32-10 and the distributions built on it.
 *
 * Every fill is a loop over counter blocks. The pool splits that loop at block
 * boundaries, and each block is computed from (seed, block index) alone, so the thread
 * count cannot change a single value. Blocks are generated RAND_LANES at a time with the
 * lanes innermost, so the compiler turns the Philox rounds and the float transforms into
 * vector code; the Box-Muller logarithm and sine/cosine are our own polynomials for the
 * same reason (libm calls would keep every lane scalar). */
#include "backend/cpu/philox.h"

#include <math.h>
#include <string.h>

#include "backend/cpu/threadpool.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define RAND_HAVE_AVX2_CLONE 1
#else
#define RAND_HAVE_AVX2_CLONE 0
#endif
#if defined(__GNUC__) || defined(__clang__)
#define RAND_ALWAYS_INLINE __attribute__((always_inline))
#else
#define RAND_ALWAYS_INLINE
#endif

/* Multipliers and Weyl key increments from the Philox paper. */
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

enum {
    RAND_LANES = 8,               /* counter blocks generated together */
    RAND_WORDS = 4 * RAND_LANES,  /* 32-bit words per batch */
    RAND_BLOCKS_PER_TASK = 4096,  /* ~20-50 us of work per pool chunk */
};

void kiln__philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t x0 = counter[0], x1 = counter[1], x2 = counter[2], x3 = counter[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * x0, p1 = (uint64_t)PHILOX_M1 * x2;
        uint32_t y0 = (uint32_t)(p1 >> 32) ^ x1 ^ k0, y2 = (uint32_t)(p0 >> 32) ^ x3 ^ k1;
        x0 = y0, x1 = (uint32_t)p1, x2 = y2, x3 = (uint32_t)p0;
        k0 += PHILOX_W0, k1 += PHILOX_W1; /* the bump after the last round is unused */
    }
    out[0] = x0, out[1] = x1, out[2] = x2, out[3] = x3;
}

/* Blocks first_block .. first_block + RAND_LANES - 1 under key `seed`; block l's four
 * words land at words[4l .. 4l+3], the same values kiln__philox4x32_10 gives. */
static inline RAND_ALWAYS_INLINE void rand_philox_batch(uint64_t seed, uint64_t first_block, uint32_t words[RAND_WORDS]) {
    uint32_t x0[RAND_LANES], x1[RAND_LANES], x2[RAND_LANES], x3[RAND_LANES];
    for (int l = 0; l < RAND_LANES; l++) {
        uint64_t block = first_block + (uint64_t)l;
        x0[l] = (uint32_t)block, x1[l] = (uint32_t)(block >> 32), x2[l] = 0, x3[l] = 0;
    }
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        for (int l = 0; l < RAND_LANES; l++) {
            uint64_t p0 = (uint64_t)PHILOX_M0 * x0[l], p1 = (uint64_t)PHILOX_M1 * x2[l];
            uint32_t y0 = (uint32_t)(p1 >> 32) ^ x1[l] ^ k0, y2 = (uint32_t)(p0 >> 32) ^ x3[l] ^ k1;
            x0[l] = y0, x1[l] = (uint32_t)p1, x2[l] = y2, x3[l] = (uint32_t)p0;
        }
        k0 += PHILOX_W0, k1 += PHILOX_W1;
    }
    for (int l = 0; l < RAND_LANES; l++) {
        words[4 * l] = x0[l], words[4 * l + 1] = x1[l], words[4 * l + 2] = x2[l], words[4 * l + 3] = x3[l];
    }
}

/* ---- Scalar building blocks ------------------------------------------------------- */

/* [0, 1) with 24 or 53 random bits; the "open" forms are (0, 1], safe for log(). */
/* Through int32_t: the conversion from signed ints is one vector instruction. */
static float rand_unit_f32(uint32_t w) { return (float)(int32_t)(w >> 8) * 0x1.0p-24f; }
static float rand_unit_open_f32(uint32_t w) { return (float)(int32_t)((w >> 8) + 1) * 0x1.0p-24f; }
static uint64_t rand_join(uint32_t hi, uint32_t lo) { return (uint64_t)hi << 32 | lo; }
static double rand_unit_f64(uint64_t w) { return (double)(w >> 11) * 0x1.0p-53; }
static double rand_unit_open_f64(uint64_t w) { return (double)((w >> 11) + 1) * 0x1.0p-53; }

/* Bit views of a float, for the exponent split in the logarithm. */
typedef union rand_pun {
    float f;
    uint32_t u;
} rand_pun;

static uint32_t rand_bits_of(float x) { return (rand_pun){.f = x}.u; }
static float rand_float_of(uint32_t bits) { return (rand_pun){.u = bits}.f; }

/* -2 ln(u) for u in (0, 1], accurate to a few float ulps. u = m * 2^e with m in
 * [sqrt(1/2), sqrt(2)); ln(m) = 2 atanh(s), s = (m-1)/(m+1), |s| < 0.172, whose series
 * converges to float precision by the s^9 term. */
static inline RAND_ALWAYS_INLINE float rand_neg2log_f32(float u) {
    uint32_t bits = rand_bits_of(u), mantissa = bits & 0x7fffffu;
    int32_t exponent = (int32_t)(bits >> 23) - 127;
    /* m above sqrt(2) (mantissa bits of 1.41421356f) is halved by taking exponent -1;
     * integer selects, since a floating-point one would keep the loop scalar */
    int32_t above = mantissa > 0x3504f3u;
    float m = rand_float_of(mantissa | (0x3f800000u - ((uint32_t)above << 23)));
    exponent += above;
    float s = (m - 1.0f) / (m + 1.0f), s2 = s * s;
    float series = 1.0f + s2 * (1.0f / 3 + s2 * (1.0f / 5 + s2 * (1.0f / 7 + s2 * (1.0f / 9))));
    float e = (float)exponent;
    /* ln 2 split so that e * ln2_hi is exact for |e| <= 24 */
    float ln_u = e * 0.693145752f + (e * 1.42860677e-06f + 2.0f * s * series);
    return -2.0f * ln_u;
}

/* sin and cos of 2 pi t for t in [0, 1): t is cut to within 1/8 of a quarter turn (exact
 * in float, since t has 24 bits), the Taylor series of the remainder x (|x| <= pi/4) are
 * within float precision, and the quarter turns are put back by swapping and negating. */
static inline RAND_ALWAYS_INLINE void rand_sincos_turn_f32(float t, float *sin_out, float *cos_out) {
    int quarter = (int)(4.0f * t + 0.5f);
    float x = (t - 0.25f * (float)quarter) * 6.28318531f, x2 = x * x;
    float s = x * (1.0f + x2 * (-1.0f / 6 + x2 * (1.0f / 120 + x2 * (-1.0f / 5040 + x2 * (1.0f / 362880)))));
    float c = 1.0f + x2 * (-0.5f + x2 * (1.0f / 24 + x2 * (-1.0f / 720 + x2 * (1.0f / 40320))));
    /* Swaps and signs as exact multiplications by 0, 1 and -1 rather than selects: with
     * -ftrapping-math (the default) a floating-point select keeps the loop scalar. */
    float swap = (float)(quarter & 1), keep = 1.0f - swap;
    float sin_sign = 1.0f - (float)(quarter & 2), cos_sign = 1.0f - (float)((quarter + 1) & 2);
    *sin_out = sin_sign * (s * keep + c * swap);
    *cos_out = cos_sign * (c * keep + s * swap);
}

/* lo + (hi - lo) * u can round up to hi; below_hi is the value to use then. A width that
 * overflows is taken as the weighted sum instead. */
static double rand_scale_f64(double u, double lo, double hi, double below_hi) {
    double width = hi - lo;
    double r = isfinite(width) ? lo + width * u : lo * (1.0 - u) + hi * u;
    return r >= hi && lo < hi ? below_hi : r;
}

/* ---- One batch of RAND_LANES blocks per distribution ------------------------------ */

typedef enum rand_kind {
    RAND_UNIFORM_F32,
    RAND_UNIFORM_F64,
    RAND_NORMAL_F32,
    RAND_NORMAL_F64,
    RAND_BERNOULLI_F32,
} rand_kind;

typedef struct rand_job {
    rand_kind kind;
    uint64_t per_block; /* elements per counter block: 4 (f32) or 2 (f64) */
    uint64_t seed, offset, first_block;
    int64_t n;
    void *out;
    double a, b;     /* lo/hi, mean/std or p */
    double below_hi; /* largest value under hi, in the output's precision */
} rand_job;

static inline RAND_ALWAYS_INLINE void rand_batch_f32(const rand_job *job, const uint32_t *words, float *values) {
    switch (job->kind) {
    case RAND_UNIFORM_F32: {
        /* In double so that hi - lo cannot overflow; the rounding to float may reach hi. */
        double lo = job->a, hi = job->b, width = hi - lo;
        float hi_f = (float)hi, below_hi = (float)job->below_hi;
        int has_width = lo < hi;
        for (int i = 0; i < RAND_WORDS; i++) {
            float r = (float)(lo + width * (double)rand_unit_f32(words[i]));
            values[i] = r >= hi_f && has_width ? below_hi : r;
        }
        if (!isfinite(width)) { /* only for ranges near +-FLT_MAX * 2 */
            for (int i = 0; i < RAND_WORDS; i++)
                values[i] = (float)rand_scale_f64(rand_unit_f32(words[i]), lo, hi, job->below_hi);
        }
        break;
    }
    case RAND_NORMAL_F32: {
        enum { PAIRS = RAND_WORDS / 2 };
        float mean = (float)job->a, std = (float)job->b;
        float radius[PAIRS], turn[PAIRS], sin_v[PAIRS], cos_v[PAIRS];
        for (int i = 0; i < PAIRS; i++) { /* both words of a pair in one loop: no gaps */
            radius[i] = rand_neg2log_f32(rand_unit_open_f32(words[2 * i]));
            turn[i] = rand_unit_f32(words[2 * i + 1]);
        }
        for (int i = 0; i < PAIRS; i++) radius[i] = sqrtf(radius[i]); /* scalar: errno rules */
        for (int i = 0; i < PAIRS; i++) rand_sincos_turn_f32(turn[i], &sin_v[i], &cos_v[i]);
        for (int i = 0; i < PAIRS; i++) {
            values[2 * i] = mean + std * (radius[i] * cos_v[i]);
            values[2 * i + 1] = mean + std * (radius[i] * sin_v[i]);
        }
        break;
    }
    default: { /* RAND_BERNOULLI_F32: a 32-bit uniform against p */
        double p = job->b;
        for (int i = 0; i < RAND_WORDS; i++) values[i] = (double)words[i] * 0x1.0p-32 < p ? 1.0f : 0.0f;
        break;
    }
    }
}

static inline RAND_ALWAYS_INLINE void rand_batch_f64(const rand_job *job, const uint32_t *words, double *values) {
    if (job->kind == RAND_UNIFORM_F64) {
        for (int i = 0; i < RAND_WORDS / 2; i++) {
            double u = rand_unit_f64(rand_join(words[2 * i], words[2 * i + 1]));
            values[i] = rand_scale_f64(u, job->a, job->b, job->below_hi);
        }
        return;
    }
    for (int l = 0; l < RAND_LANES; l++) { /* RAND_NORMAL_F64: one pair per block */
        const uint32_t *w = words + 4 * l;
        double radius = sqrt(-2.0 * log(rand_unit_open_f64(rand_join(w[0], w[1]))));
        double angle = 6.28318530717958647692 * rand_unit_f64(rand_join(w[2], w[3]));
        values[2 * l] = job->a + job->b * (radius * cos(angle));
        values[2 * l + 1] = job->a + job->b * (radius * sin(angle));
    }
}

/* Pool task: counter blocks [begin, end) relative to first_block, RAND_LANES at a time.
 * Each batch's elements form one contiguous run; the part inside [offset, offset + n)
 * is copied out, which trims the partial blocks at either end of the fill. */
static inline RAND_ALWAYS_INLINE void rand_fill_blocks(void *ctx, int64_t begin, int64_t end) {
    const rand_job *job = ctx;
    int is_f64 = job->kind == RAND_UNIFORM_F64 || job->kind == RAND_NORMAL_F64;
    size_t element_size = is_f64 ? sizeof(double) : sizeof(float);
    uint64_t stop = job->offset + (uint64_t)job->n;
    for (int64_t batch = begin; batch < end; batch += RAND_LANES) {
        uint64_t first = job->first_block + (uint64_t)batch;
        uint32_t words[RAND_WORDS];
        rand_philox_batch(job->seed, first, words);
        union {
            float f32[RAND_WORDS];
            double f64[RAND_WORDS / 2];
        } values;
        if (is_f64) {
            rand_batch_f64(job, words, values.f64);
        } else {
            rand_batch_f32(job, words, values.f32);
        }
        int64_t blocks = end - batch < RAND_LANES ? end - batch : RAND_LANES;
        uint64_t run_begin = first * job->per_block, run_end = run_begin + (uint64_t)blocks * job->per_block;
        uint64_t copy_begin = run_begin > job->offset ? run_begin : job->offset;
        uint64_t copy_end = run_end < stop ? run_end : stop;
        if (copy_begin >= copy_end) continue;
        memcpy((char *)job->out + (copy_begin - job->offset) * element_size,
               (const char *)&values + (copy_begin - run_begin) * element_size,
               (size_t)(copy_end - copy_begin) * element_size);
    }
}

static void rand_fill_blocks_baseline(void *ctx, int64_t begin, int64_t end) {
    rand_fill_blocks(ctx, begin, end);
}

#if RAND_HAVE_AVX2_CLONE
/* The same code compiled for AVX2's wider integer and float vectors. FMA is left out on
 * purpose: without contraction both versions round identically, so the values do not
 * depend on the CPU either. */
__attribute__((target("avx2"))) static void rand_fill_blocks_avx2(void *ctx, int64_t begin,
                                                                  int64_t end) {
    rand_fill_blocks(ctx, begin, end);
}
#endif

static kiln__range_fn rand_pick_fill(void) {
#if RAND_HAVE_AVX2_CLONE
    if (__builtin_cpu_supports("avx2")) return rand_fill_blocks_avx2;
#endif
    return rand_fill_blocks_baseline;
}

static void rand_fill(rand_kind kind, uint64_t seed, uint64_t offset, void *out, int64_t n,
                      double a, double b) {
    if (n <= 0) return;
    uint64_t per_block = kind == RAND_UNIFORM_F64 || kind == RAND_NORMAL_F64 ? 2 : 4;
    uint64_t first_block = offset / per_block, last_block = (offset + (uint64_t)n - 1) / per_block;
    double below_hi = kind == RAND_UNIFORM_F32 ? (double)nextafterf((float)b, (float)a) : nextafter(b, a);
    rand_job job = {.kind = kind, .per_block = per_block, .seed = seed, .offset = offset,
                    .first_block = first_block, .n = n, .out = out, .a = a, .b = b,
                    .below_hi = below_hi};
    /* Batches inside a chunk may start on any block: a block's values depend on its index
     * only, so chunk boundaries cannot change them. */
    kiln__parallel_for((int64_t)(last_block - first_block + 1), RAND_BLOCKS_PER_TASK,
                       rand_pick_fill(), &job);
}

void kiln__rand_uniform_f32(uint64_t seed, uint64_t offset, float *out, int64_t n, float lo, float hi) {
    rand_fill(RAND_UNIFORM_F32, seed, offset, out, n, lo, hi);
}

void kiln__rand_uniform_f64(uint64_t seed, uint64_t offset, double *out, int64_t n, double lo,
                            double hi) {
    rand_fill(RAND_UNIFORM_F64, seed, offset, out, n, lo, hi);
}

void kiln__rand_normal_f32(uint64_t seed, uint64_t offset, float *out, int64_t n, float mean,
                           float std) {
    rand_fill(RAND_NORMAL_F32, seed, offset, out, n, mean, std);
}

void kiln__rand_normal_f64(uint64_t seed, uint64_t offset, double *out, int64_t n, double mean,
                           double std) {
    rand_fill(RAND_NORMAL_F64, seed, offset, out, n, mean, std);
}

void kiln__rand_bernoulli_f32(uint64_t seed, uint64_t offset, float *out, int64_t n, double p) {
    rand_fill(RAND_BERNOULLI_F32, seed, offset, out, n, 0.0, p);
}
