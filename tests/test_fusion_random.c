/* Random elementwise DAGs (shapes with broadcasting, f32/f64/i32, refs kept or dropped,
 * reductions over the last dim and ops after them) run with fusion on and off from the same
 * seed: every tensor left must match bit for bit. */
#include <kiln.h>

#include "engine/fusion.h"
#include "kiln_test.h"

#define SEEDS 60
#define STEPS 40
#define POOL 8

static uint64_t rng_state;
static uint32_t rnd(uint32_t n) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng_state >> 33) % n;
}

typedef struct {
    kiln_tensor t[POOL];
    int n;
} pool;

static kiln_tensor take(pool *p, int i, bool keep) {
    if (keep) return kiln_ref(p->t[i]);
    kiln_tensor t = p->t[i];
    p->t[i] = p->t[--p->n];
    return t;
}

static void put(pool *p, kiln_tensor t) {
    if (p->n < POOL) p->t[p->n++] = t;
    else kiln_release(t);
}

static kiln_tensor source(int64_t r, int64_t c, int shape_kind, kiln_dtype dt, uint64_t seed) {
    kiln_shape s = shape_kind == 0 ? KILN_SHAPE(r, c) : shape_kind == 1 ? KILN_SHAPE(1, c) : KILN_SHAPE(r, 1);
    kiln_tensor t = kiln_randn(KILN_CPU, KILN_F32, s, seed);
    if (dt == KILN_I32) return kiln_cast(kiln_mul_scalar(t, 8.0), KILN_I32);
    return dt == KILN_F32 ? t : kiln_cast(t, dt);
}

static kiln_tensor unary(kiln_tensor x, uint32_t k) {
    switch (k) {
    case 0: return kiln_exp(kiln_clamp(x, -4.0, 4.0));
    case 1: return kiln_tanh(x);
    case 2: return kiln_neg(x);
    case 3: return kiln_abs(x);
    case 4: return kiln_relu(x);
    case 5: return kiln_sigmoid(x);
    case 6: return kiln_clamp(x, -1.0, NAN);
    case 7: return kiln_cast(kiln_cast(x, KILN_F64), KILN_F32);
    default: return kiln_mul_scalar(kiln_add_scalar(x, 0.25), 3.0);
    }
}

static kiln_tensor binary(kiln_tensor a, kiln_tensor b, uint32_t k) {
    switch (k) {
    case 0: return kiln_add(a, b);
    case 1: return kiln_sub(a, b);
    case 2: return kiln_mul(a, b);
    case 3: return kiln_maximum(a, b);
    case 4: return kiln_minimum(a, b);
    default: {
        kiln_tensor m = kiln_gt(kiln_ref(a), kiln_ref(b));
        return kiln_where(m, a, b);
    }
    }
}

/* Runs one random program; writes every result's bytes (cast to f64) into out. */
static int run(uint64_t seed, double *out, int cap) {
    rng_state = seed;
    int64_t r = 1 + rnd(60), c = 1 + rnd(90);
    kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_I32};
    pool p = {.n = 0};
    for (int i = 0; i < 4; i++) put(&p, source(r, c, i < 2 ? 0 : (int)rnd(3), dts[rnd(3)], seed * 10 + (uint64_t)i));
    KT_CHECK(kiln_sync() == KILN_OK);
    for (int s = 0; s < STEPS && p.n > 0; s++) {
        bool keep = rnd(3) == 0;
        kiln_tensor a = take(&p, (int)rnd((uint32_t)p.n), keep);
        uint32_t kind = rnd(12);
        if (kind == 0) { /* a reduction over the last dim, maybe with an epilogue */
            bool has_ext = rnd(2) != 0;
            kiln_tensor ext = {0};
            if (has_ext) ext = source(r, c, 2, KILN_F32, seed * 100 + (uint64_t)s); /* [r, 1] */
            kiln_tensor f = kiln_cast(a, KILN_F32);
            switch (rnd(4)) {
            case 0: put(&p, kiln_sum_dims(f, KILN_DIMS(-1), true)); break;
            case 1: put(&p, kiln_max_dims(f, KILN_DIMS(-1), true)); break;
            case 2: put(&p, kiln_mean_dims(f, KILN_DIMS(-1), true)); break;
            default: put(&p, kiln_logsumexp_dims(kiln_tanh(f), KILN_DIMS(-1), true)); break;
            }
            if (rnd(2) && p.n > 1) { /* an epilogue: per row, then broadcast against a full tensor */
                kiln_tensor red = take(&p, p.n - 1, false);
                if (rnd(2)) red = unary(red, rnd(9));
                if (has_ext) red = binary(red, ext, rnd(6)), has_ext = false; /* per row, an [r, 1] input */
                kiln_tensor full = take(&p, (int)rnd((uint32_t)p.n), rnd(3) == 0);
                put(&p, rnd(2) ? binary(full, red, rnd(6)) : binary(red, full, rnd(6)));
            }
            if (has_ext) kiln_release(ext);
        } else if (kind < 6 || p.n == 0) {
            put(&p, unary(a, rnd(9)));
        } else {
            kiln_tensor b = rnd(4) == 0 ? kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(1), 0.5)
                                        : take(&p, (int)rnd((uint32_t)p.n), rnd(3) == 0);
            put(&p, binary(a, b, rnd(6)));
        }
    }
    int n = 0;
    for (int i = 0; i < p.n; i++) {
        kiln_tensor t = kiln_cast(p.t[i], KILN_F64);
        int64_t m = kiln_tensor_numel(t);
        if (n + m > cap) {
            kiln_release(t);
            continue;
        }
        KT_CHECK(kiln_into_data(t, out + n, (size_t)m * sizeof(double)) == KILN_OK);
        n += (int)m;
    }
    return n;
}

KT_TEST(random_dags_fused_match_unfused) {
    enum { CAP = 60 * 90 * POOL };
    static double on[CAP], off[CAP];
    bool was = kiln_fusion_enabled();
    kiln__fusion_stats_reset();
    for (uint64_t seed = 1; seed <= SEEDS; seed++) {
        kiln_fusion_set_enabled(false);
        int n_off = run(seed, off, CAP);
        kiln_fusion_set_enabled(true);
        int n_on = run(seed, on, CAP);
        KT_CHECK(n_on == n_off);
        KT_CHECK_MSG(memcmp(on, off, sizeof(double) * (size_t)n_on) == 0, "seed %llu differs", (unsigned long long)seed);
    }
    kiln__fusion_stats s = kiln__fusion_stats_get();
    if (kiln_engine_is_async()) {
        KT_CHECK_MSG(s.groups > SEEDS, "only %lld groups fused", (long long)s.groups);
        KT_CHECK_MSG(s.reductions > 0, "no group ended in a reduction");
        KT_CHECK_MSG(s.epilogues > 0, "no group had an epilogue");
    }
    kiln_fusion_set_enabled(was);
}

int main(void) {
    kt_mem_begin();
    KT_RUN(random_dags_fused_match_unfused);
    KT_MEM_CHECK();
    return kt_finish();
}
