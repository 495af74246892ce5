/* Random tensors: the same seed gives the same bits whatever the thread count, different
 * seeds differ, moments and ranges match the distributions, every float dtype, counter
 * offsets and strided outputs in the kernel, random integers (kiln_randint), and bad input
 * (no leaks). */
#include <kiln.h>

#include "backend/backend-impl.h"
#include "engine/engine-impl.h"
#include "kiln_test.h"

static const kiln_dtype float_dtypes[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16};
enum { N_FLOAT = 4, BIG = 200000 };


enum dist { UNIFORM, NORMAL, BERNOULLI, RAND, RANDN };

static kiln_tensor draw(enum dist d, kiln_dtype dt, kiln_shape shape, double a, double b, uint64_t seed) {
    switch (d) {
    case UNIFORM: return kiln_uniform(KILN_CPU, dt, shape, a, b, seed);
    case NORMAL: return kiln_normal(KILN_CPU, dt, shape, a, b, seed);
    case BERNOULLI: return kiln_bernoulli(KILN_CPU, dt, shape, a, seed);
    case RAND: return kiln_rand(KILN_CPU, dt, shape, seed);
    default: return kiln_randn(KILN_CPU, dt, shape, seed);
    }
}

/* Raw bytes of t (consumed) into buf of `bytes`. */
static kiln_status raw(kiln_tensor t, void *buf, size_t bytes) { return kiln_into_data(t, buf, bytes); }

static kiln_status as_f64(kiln_tensor t, double *out, int64_t n) {
    return kiln_into_data(kiln_cast(t, KILN_F64), out, sizeof(double) * (size_t)n);
}

KT_TEST(same_seed_same_bits_any_thread_count) {
    kt_mem_begin();
    static unsigned char one[BIG * 8], two[BIG * 8];
    int saved = kiln_num_threads();
    for (int k = 0; k < N_FLOAT; k++) {
        kiln_dtype dt = float_dtypes[k];
        size_t bytes = (size_t)BIG * kiln_dtype_size(dt);
        for (enum dist d = UNIFORM; d <= RANDN; d++) {
            kiln_set_num_threads(1);
            KT_CHECK(raw(draw(d, dt, KILN_SHAPE(BIG / 100, 100), 0.25, 2, 42), one, bytes) == KILN_OK);
            kiln_set_num_threads(2);
            KT_CHECK(raw(draw(d, dt, KILN_SHAPE(BIG / 100, 100), 0.25, 2, 42), two, bytes) == KILN_OK);
            KT_CHECK_MSG(memcmp(one, two, bytes) == 0, "%s dist %d differs between 1 and 2 threads", kiln_dtype_name(dt), d);
            /* the shape does not matter either: element i is counter i */
            KT_CHECK(raw(draw(d, dt, KILN_SHAPE(BIG), 0.25, 2, 42), two, bytes) == KILN_OK);
            KT_CHECK(memcmp(one, two, bytes) == 0);
        }
    }
    kiln_set_num_threads(saved);
    KT_MEM_CHECK();
}

KT_TEST(different_seeds_differ) {
    kt_mem_begin();
    enum { N = 4096 };
    static double a[N], b[N];
    for (int k = 0; k < N_FLOAT; k++) {
        for (enum dist d = UNIFORM; d <= RANDN; d++) {
            if (d == BERNOULLI) continue;
            KT_CHECK(as_f64(draw(d, float_dtypes[k], KILN_SHAPE(N), -1, 3, 1), a, N) == KILN_OK);
            KT_CHECK(as_f64(draw(d, float_dtypes[k], KILN_SHAPE(N), -1, 3, 2), b, N) == KILN_OK);
            int same = 0;
            for (int i = 0; i < N; i++) same += a[i] == b[i];
            KT_CHECK_MSG(same < N / 20, "%d of %d equal", same, N); /* coarse dtypes collide a little */
            /* and values within one tensor are not all alike */
            int repeats = 0;
            for (int i = 1; i < N; i++) repeats += a[i] == a[i - 1];
            KT_CHECK(repeats < N / 20);
        }
        /* seeds that differ only in the high bits */
        KT_CHECK(as_f64(kiln_rand(KILN_CPU, float_dtypes[k], KILN_SHAPE(N), 5), a, N) == KILN_OK);
        KT_CHECK(as_f64(kiln_rand(KILN_CPU, float_dtypes[k], KILN_SHAPE(N), 5 | (1ull << 63)), b, N) == KILN_OK);
        int same = 0;
        for (int i = 0; i < N; i++) same += a[i] == b[i];
        KT_CHECK(same < N / 20);
    }
    KT_MEM_CHECK();
}

static void moments(const double *v, int64_t n, double *mean, double *sd) {
    double s = 0, q = 0;
    for (int64_t i = 0; i < n; i++) s += v[i];
    *mean = s / (double)n;
    for (int64_t i = 0; i < n; i++) q += (v[i] - *mean) * (v[i] - *mean);
    *sd = sqrt(q / (double)(n - 1));
}

/* Bounds are several standard errors wide (n = 200000: the mean's standard error is about
 * 0.0022 * sd), plus the rounding of f16/bf16. */
KT_TEST(uniform_moments_and_range) {
    kt_mem_begin();
    static double v[BIG];
    const double bounds[][2] = {{0, 1}, {-2, 3}, {10, 10.5}, {-1e-3, 1e-3}};
    for (int k = 0; k < N_FLOAT; k++) {
        kiln_dtype dt = float_dtypes[k];
        double coarse = dt == KILN_BF16 ? 8e-3 : dt == KILN_F16 ? 1e-3 : 0;
        for (int b = 0; b < 4; b++) {
            double lo = bounds[b][0], hi = bounds[b][1], w = hi - lo;
            kiln_tensor t = b == 0 ? kiln_rand(KILN_CPU, dt, KILN_SHAPE(BIG), 7) : kiln_uniform(KILN_CPU, dt, KILN_SHAPE(BIG), lo, hi, 7);
            KT_CHECK(as_f64(t, v, BIG) == KILN_OK);
            double mean, sd, mn = INFINITY, mx = -INFINITY;
            moments(v, BIG, &mean, &sd);
            for (int i = 0; i < BIG; i++) mn = fmin(mn, v[i]), mx = fmax(mx, v[i]);
            double slack = coarse * fmax(fabs(lo), fabs(hi));
            KT_CHECK_MSG(mn >= lo - slack && mx <= hi + slack, "%s [%g, %g]: min %g max %g", kiln_dtype_name(dt), lo, hi, mn, mx);
            if (dt == KILN_F64 || (dt == KILN_F32 && b == 0)) KT_CHECK(mx < hi); /* half-open where representable */
            KT_CHECK(mn < lo + 0.01 * w && mx > hi - 0.01 * w);
            KT_CHECK_MSG(fabs(mean - (lo + hi) / 2) < 0.005 * w + slack, "%s mean %g", kiln_dtype_name(dt), mean);
            KT_CHECK_MSG(fabs(sd - w / sqrt(12.0)) < 0.005 * w + slack, "%s sd %g", kiln_dtype_name(dt), sd);
        }
    }
    /* lo == hi gives that value */
    double g[3];
    KT_CHECK(as_f64(kiln_uniform(KILN_CPU, KILN_F64, KILN_SHAPE(3), 4, 4, 1), g, 3) == KILN_OK);
    KT_CHECK(g[0] == 4 && g[2] == 4);
    KT_MEM_CHECK();
}

KT_TEST(normal_moments) {
    kt_mem_begin();
    static double v[BIG];
    const double params[][2] = {{0, 1}, {5, 2}, {-3, 0.1}};
    for (int k = 0; k < N_FLOAT; k++) {
        kiln_dtype dt = float_dtypes[k];
        double coarse = dt == KILN_BF16 ? 8e-3 : dt == KILN_F16 ? 1e-3 : 0;
        for (int p = 0; p < 3; p++) {
            double mu = params[p][0], sigma = params[p][1];
            kiln_tensor t = p == 0 ? kiln_randn(KILN_CPU, dt, KILN_SHAPE(BIG), 11) : kiln_normal(KILN_CPU, dt, KILN_SHAPE(BIG), mu, sigma, 11);
            KT_CHECK(as_f64(t, v, BIG) == KILN_OK);
            double mean, sd;
            moments(v, BIG, &mean, &sd);
            double slack = coarse * (fabs(mu) + 3 * sigma);
            KT_CHECK_MSG(fabs(mean - mu) < 0.012 * sigma + slack, "%s mean %g want %g", kiln_dtype_name(dt), mean, mu);
            KT_CHECK_MSG(fabs(sd - sigma) < 0.012 * sigma + slack, "%s sd %g want %g", kiln_dtype_name(dt), sd, sigma);
            /* the shape: about 68.3% within one sigma, 95.4% within two */
            int in1 = 0, in2 = 0;
            for (int i = 0; i < BIG; i++) {
                double z = fabs(v[i] - mu) / sigma;
                in1 += z < 1;
                in2 += z < 2;
            }
            KT_CHECK_MSG(fabs(in1 / (double)BIG - 0.6827) < 0.01, "%s within 1 sd: %g", kiln_dtype_name(dt), in1 / (double)BIG);
            KT_CHECK_MSG(fabs(in2 / (double)BIG - 0.9545) < 0.01, "%s within 2 sd: %g", kiln_dtype_name(dt), in2 / (double)BIG);
        }
    }
    /* std 0 gives the mean */
    double g[3];
    KT_CHECK(as_f64(kiln_normal(KILN_CPU, KILN_F32, KILN_SHAPE(3), 1.5, 0, 3), g, 3) == KILN_OK);
    KT_CHECK(g[0] == 1.5 && g[1] == 1.5 && g[2] == 1.5);
    KT_MEM_CHECK();
}

KT_TEST(bernoulli_fraction) {
    kt_mem_begin();
    static double v[BIG];
    const double ps[] = {0, 0.05, 0.3, 0.5, 0.9, 1};
    for (int k = 0; k < N_FLOAT; k++) {
        for (int p = 0; p < 6; p++) {
            KT_CHECK(as_f64(kiln_bernoulli(KILN_CPU, float_dtypes[k], KILN_SHAPE(BIG), ps[p], 99), v, BIG) == KILN_OK);
            int64_t ones = 0, other = 0;
            for (int i = 0; i < BIG; i++) {
                ones += v[i] == 1;
                other += v[i] != 0 && v[i] != 1;
            }
            KT_CHECK(other == 0);
            double frac = (double)ones / BIG;
            /* standard error <= 0.0012; exact at p = 0 and p = 1 */
            KT_CHECK_MSG(fabs(frac - ps[p]) < 0.006, "%s p=%g: fraction %g", kiln_dtype_name(float_dtypes[k]), ps[p], frac);
            if (ps[p] == 0 || ps[p] == 1) KT_CHECK(frac == ps[p]);
        }
    }
    KT_MEM_CHECK();
}

KT_TEST(shapes_empty_and_scalar) {
    kt_mem_begin();
    double g[1];
    KT_CHECK(as_f64(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(0, 5), 1), g, 0) == KILN_OK);
    KT_CHECK(as_f64(kiln_rand(KILN_CPU, KILN_F64, KILN_SCALAR_SHAPE, 1), g, 1) == KILN_OK);
    KT_CHECK(g[0] >= 0 && g[0] < 1);
    kiln_tensor t = kiln_bernoulli(KILN_CPU, KILN_BF16, KILN_SHAPE(1, 1, 1), 1, 4);
    KT_CHECK(kiln_tensor_dtype(t) == KILN_BF16 && kiln_tensor_ndim(t) == 3);
    KT_CHECK(as_f64(t, g, 1) == KILN_OK && g[0] == 1);
    KT_MEM_CHECK();
}

/* ---- the kernel itself, through the backend table: counter offsets and strided outputs --- */

/* Runs op code over `out` (a view built by the caller on a live tensor's storage). */
static kiln_status run_kernel(kiln__opcode code, kiln__view out, uint64_t seed, uint64_t offset) {
    kiln__op op;
    kiln__op_init(&op, code, "test_kernel");
    op.out[0] = out;
    op.n_out = 1;
    op.pi[0] = (int64_t)seed;
    op.pi[1] = (int64_t)offset;
    op.p.f[0] = 0;
    op.p.f[1] = 1;
    return kiln__cpu_backend()->kernels[code](&op);
}

KT_TEST(kernel_offsets_and_strides) {
    kt_mem_begin();
    enum { R = 50, C = 40, N = R * C };
    float dense[N], part[N];
    kiln_tensor a = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(N));
    kiln_tensor b = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(N));
    KT_CHECK(kiln_sync() == KILN_OK);
    kiln__tensor *ta = kiln__handle_peek(a, "test", NULL), *tb = kiln__handle_peek(b, "test", NULL);
    const kiln__opcode codes[] = {KILN__OP_RAND_UNIFORM, KILN__OP_RAND_NORMAL};
    for (int k = 0; k < 2; k++) {
        kiln__opcode code = codes[k];
        /* counter offset k: element i takes counter k + i */
        KT_CHECK(run_kernel(code, kiln__view_of(ta), 5, 0) == KILN_OK);
        kiln__view tail = kiln__view_of(tb);
        tail.shape[0] = N - 700;
        KT_CHECK(run_kernel(code, tail, 5, 700) == KILN_OK);
        memcpy(dense, ta->storage->data, sizeof dense);
        memcpy(part, tb->storage->data, sizeof part);
        KT_CHECK(memcmp(part, dense + 700, sizeof(float) * (N - 700)) == 0);
        /* a transposed output: its row-major element (i, j) takes counter i * R + j */
        kiln__view tr = kiln__view_of(tb);
        tr.ndim = 2;
        tr.shape[0] = C;
        tr.shape[1] = R;
        tr.strides[0] = 1;
        tr.strides[1] = C;
        KT_CHECK(run_kernel(code, tr, 5, 0) == KILN_OK);
        memcpy(part, tb->storage->data, sizeof part);
        int bad = 0;
        for (int i = 0; i < C; i++)
            for (int j = 0; j < R; j++) bad += part[j * C + i] != dense[i * R + j];
        KT_CHECK(bad == 0);
    }
    kiln_release(a);
    kiln_release(b);
    KT_MEM_CHECK();
}

/* kiln_randint: every value of [low, high) about equally often (a chi-square bound over 200k
 * draws), none outside, in every dtype that holds the span; the same seed (or generator seed)
 * gives the same values; bad bounds and dtypes are errors naming the call. */
KT_TEST(randint_counts_and_errors) {
    kt_mem_begin();
    enum { LOW = -3, HIGH = 7, SPAN = HIGH - LOW };
    static int64_t v[BIG];
    KT_CHECK(kiln_into_data(kiln_randint(KILN_CPU, KILN_I64, KILN_SHAPE(BIG), LOW, HIGH, 5), v, sizeof v) == KILN_OK);
    int64_t count[SPAN] = {0};
    int outside = 0;
    for (int i = 0; i < BIG; i++) {
        if (v[i] < LOW || v[i] >= HIGH) outside++;
        else count[v[i] - LOW]++;
    }
    KT_CHECK_MSG(outside == 0, "%d values outside [%d, %d)", outside, LOW, HIGH);
    double expect = (double)BIG / SPAN, chi2 = 0;
    for (int k = 0; k < SPAN; k++) chi2 += (count[k] - expect) * (count[k] - expect) / expect;
    KT_CHECK_MSG(chi2 < 27.9, "chi-square %g over %d values (9 degrees of freedom: p = 0.001 at 27.9)", chi2, SPAN);
    static int64_t again[BIG];
    KT_CHECK(kiln_into_data(kiln_randint(KILN_CPU, KILN_I64, KILN_SHAPE(BIG), LOW, HIGH, 5), again, sizeof again) == KILN_OK);
    KT_CHECK(memcmp(v, again, sizeof v) == 0);
    /* other dtypes: the same integers */
    const kiln_dtype dts[] = {KILN_I32, KILN_F32, KILN_F64, KILN_F16, KILN_BF16};
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
        double got[64];
        KT_CHECK(as_f64(kiln_randint(KILN_CPU, dts[d], KILN_SHAPE(64), LOW, HIGH, 5), got, 64) == KILN_OK);
        for (int i = 0; i < 64; i++) KT_CHECK_MSG(got[i] == (double)v[i], "%s [%d]: %g, %lld", kiln_dtype_name(dts[d]), i, got[i], (long long)v[i]);
    }
    /* a span near 2^53, and the largest i64 bounds it allows */
    int64_t wide[4];
    KT_CHECK(kiln_into_data(kiln_randint(KILN_CPU, KILN_I64, KILN_SHAPE(4), -((int64_t)1 << 52), (int64_t)1 << 52, 9), wide, sizeof wide) == KILN_OK);
    for (int i = 0; i < 4; i++) KT_CHECK(wide[i] >= -((int64_t)1 << 52) && wide[i] < ((int64_t)1 << 52));
    /* generators replay */
    kiln_generator *g = kiln_generator_new(3);
    int64_t a[8], b[8];
    KT_CHECK(kiln_into_data(kiln_randint_gen(g, KILN_CPU, KILN_I64, KILN_SHAPE(8), 0, 100), a, sizeof a) == KILN_OK);
    kiln_generator_manual_seed(g, 3);
    KT_CHECK(kiln_into_data(kiln_randint_gen(g, KILN_CPU, KILN_I64, KILN_SHAPE(8), 0, 100), b, sizeof b) == KILN_OK);
    KT_CHECK(memcmp(a, b, sizeof a) == 0);
    kiln_generator_free(g);
    KT_READ_ERROR(kiln_randint_gen(g, KILN_CPU, KILN_I64, KILN_SHAPE(8), 0, 100), KILN_ERR_STALE_HANDLE, "kiln_randint_gen");
    struct {
        kiln_tensor t;
        kiln_status st;
    } bad[] = {
        {kiln_randint(KILN_CPU, KILN_I64, KILN_SHAPE(2), 5, 5, 1), KILN_ERR_INVALID_ARGUMENT},
        {kiln_randint(KILN_CPU, KILN_I64, KILN_SHAPE(2), 6, 5, 1), KILN_ERR_INVALID_ARGUMENT},
        {kiln_randint(KILN_CPU, KILN_BOOL, KILN_SHAPE(2), 0, 2, 1), KILN_ERR_DTYPE},
        {kiln_randint(KILN_CPU, (kiln_dtype)77, KILN_SHAPE(2), 0, 2, 1), KILN_ERR_DTYPE},
        {kiln_randint(KILN_CPU, KILN_I32, KILN_SHAPE(2), 0, (int64_t)1 << 40, 1), KILN_ERR_INVALID_ARGUMENT},
        {kiln_randint(KILN_CPU, KILN_BF16, KILN_SHAPE(2), 0, 1000, 1), KILN_ERR_INVALID_ARGUMENT},
        {kiln_randint(KILN_CPU, KILN_I64, KILN_SHAPE(2), INT64_MIN, INT64_MAX, 1), KILN_ERR_INVALID_ARGUMENT},
        {kiln_randint(KILN_CPU, KILN_I64, KILN_SHAPE(-1), 0, 2, 1), KILN_ERR_SHAPE},
        {kiln_randint(KILN_CUDA, KILN_I64, KILN_SHAPE(2), 0, 2, 1), KILN_ERR_DEVICE},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        kiln_status got = kiln_into_data(bad[i].t, NULL, 0);
        const char *msg = kiln_last_error();
        KT_CHECK_MSG(got == bad[i].st, "case %zu: %s (%s)", i, kiln_status_str(got), msg);
        KT_CHECK_MSG(strstr(msg, "kiln_randint") && strstr(msg, "test_random.c"), "case %zu: '%s'", i, msg);
    }
    KT_MEM_CHECK();
}

KT_TEST(random_bad_input) {
    kt_mem_begin();
    struct {
        kiln_tensor t;
        kiln_status st;
        const char *op;
    } cases[] = {
        {kiln_rand(KILN_CPU, KILN_I32, KILN_SHAPE(2), 1), KILN_ERR_DTYPE, "kiln_rand"},
        {kiln_randn(KILN_CPU, KILN_BOOL, KILN_SHAPE(2), 1), KILN_ERR_DTYPE, "kiln_randn"},
        {kiln_bernoulli(KILN_CPU, KILN_I64, KILN_SHAPE(2), 0.5, 1), KILN_ERR_DTYPE, "kiln_bernoulli"},
        {kiln_rand(KILN_CPU, (kiln_dtype)77, KILN_SHAPE(2), 1), KILN_ERR_DTYPE, "kiln_rand"},
        {kiln_rand(KILN_CPU, KILN_F32, KILN_SHAPE(-2), 1), KILN_ERR_SHAPE, "kiln_rand"},
        {kiln_randn(KILN_CUDA, KILN_F32, KILN_SHAPE(2), 1), KILN_ERR_DEVICE, "kiln_randn"},
        {kiln_uniform(KILN_CPU, KILN_F32, KILN_SHAPE(2), 3, 2, 1), KILN_ERR_INVALID_ARGUMENT, "kiln_uniform"},
        {kiln_uniform(KILN_CPU, KILN_F32, KILN_SHAPE(2), NAN, 2, 1), KILN_ERR_INVALID_ARGUMENT, "kiln_uniform"},
        {kiln_normal(KILN_CPU, KILN_F32, KILN_SHAPE(2), 0, -1, 1), KILN_ERR_INVALID_ARGUMENT, "kiln_normal"},
        {kiln_normal(KILN_CPU, KILN_F32, KILN_SHAPE(2), 0, NAN, 1), KILN_ERR_INVALID_ARGUMENT, "kiln_normal"},
        {kiln_normal(KILN_CPU, KILN_F32, KILN_SHAPE(2), NAN, 1, 1), KILN_ERR_INVALID_ARGUMENT, "kiln_normal"},
        {kiln_normal(KILN_CPU, KILN_F32, KILN_SHAPE(2), 0, INFINITY, 1), KILN_ERR_INVALID_ARGUMENT, "kiln_normal"},
        {kiln_uniform(KILN_CPU, KILN_F32, KILN_SHAPE(2), -INFINITY, 0, 1), KILN_ERR_INVALID_ARGUMENT, "kiln_uniform"},
        {kiln_bernoulli(KILN_CPU, KILN_F32, KILN_SHAPE(2), 1.5, 1), KILN_ERR_INVALID_ARGUMENT, "kiln_bernoulli"},
        {kiln_bernoulli(KILN_CPU, KILN_F32, KILN_SHAPE(2), -0.1, 1), KILN_ERR_INVALID_ARGUMENT, "kiln_bernoulli"},
        {kiln_bernoulli(KILN_CPU, KILN_F32, KILN_SHAPE(2), NAN, 1), KILN_ERR_INVALID_ARGUMENT, "kiln_bernoulli"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kiln_status got = kiln_into_data(cases[i].t, NULL, 0);
        const char *msg = kiln_last_error();
        KT_CHECK_MSG(got == cases[i].st, "case %zu: %s (%s)", i, kiln_status_str(got), msg);
        KT_CHECK_MSG(strstr(msg, cases[i].op) && strstr(msg, "test_random.c"), "case %zu: '%s'", i, msg);
    }
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(same_seed_same_bits_any_thread_count);
    KT_RUN(different_seeds_differ);
    KT_RUN(uniform_moments_and_range);
    KT_RUN(normal_moments);
    KT_RUN(bernoulli_fraction);
    KT_RUN(shapes_empty_and_scalar);
    KT_RUN(kernel_offsets_and_strides);
    KT_RUN(random_bad_input);
    KT_RUN(randint_counts_and_errors);
    return kt_finish();
}
