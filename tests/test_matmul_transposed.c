/* Batched matmul with transposed operands on odd shapes, against double-precision loops:
 * attention's layout (query, key and value as views of one fused projection, the key read
 * transposed) in f32 and f64, at sizes that take each of the CPU kernel's batch paths (small
 * products side by side; larger ones side by side on one thread each, through BLAS in row
 * blocks; products in turn), with 1, 2 and 3 pool threads; the single-threaded GEMM entry
 * point directly, every transpose and edge case; and the gradients of a transposed batched
 * product, checked by finite differences and, at a size above the small path, against
 * W B and A^T W in double. */
#include <math.h>

#include "backend/cpu/gemm.h"
#include "backend/cpu/threadpool.h"
#include "gradcheck.h"

/* Deterministic values in [-1, 1). */
static void fill(double *v, int64_t n, uint64_t seed) {
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (double)(seed >> 11) / 9007199254740992.0 * 2.0 - 1.0;
    }
}

/* Reads t (any float dtype) as n doubles; NULL with a failed check on error. */
static double *read_f64(kiln_tensor t, int64_t n) {
    double *v = malloc(sizeof(double) * (size_t)(n + 1));
    kiln_status st = kiln_into_data(kiln_cast(t, KILN_F64), v, sizeof(double) * (size_t)n);
    KT_CHECK_MSG(st == KILN_OK, "read: %s", kiln_last_error());
    if (st != KILN_OK) free(v), v = NULL;
    return v;
}

/* The worst |got - want| / (atol + rtol |want|) over n values; > 1 fails. */
static double worst(const double *got, const double *want, int64_t n, double atol, double rtol) {
    double w = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(got[i] - want[i]) / (atol + rtol * fabs(want[i]));
        if (!(e <= w)) w = e; /* NaN counts as the worst */
    }
    return w;
}

/* x [b, s, 3, h, d] as attention holds it after one fused projection. scores = q k^T over
 * [b, h, s, s] and ctx = scores v over [b, h, s, d], where q, k, v are parts 0, 1, 2; both
 * against loops in double. */
static void check_attention_layout(kiln_dtype dt, int64_t b, int64_t s, int64_t h, int64_t d, int threads) {
    int was = kiln__pool_threads();
    kiln__pool_set_threads(threads);
    int64_t n = b * s * 3 * h * d;
    double *x = malloc(sizeof(double) * (size_t)n);
    fill(x, n, (uint64_t)(b * 1000 + s * 10 + d));
#define X(bi, si, part, hi, di) x[((((bi) * s + (si)) * 3 + (part)) * h + (hi)) * d + (di)]
    double *sc = malloc(sizeof(double) * (size_t)(b * h * s * s)), *ctx = malloc(sizeof(double) * (size_t)(b * h * s * d));
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t hi = 0; hi < h; hi++) {
            double *S = sc + (bi * h + hi) * s * s, *C = ctx + (bi * h + hi) * s * d;
            for (int64_t i = 0; i < s; i++)
                for (int64_t j = 0; j < s; j++) {
                    double acc = 0;
                    for (int64_t p = 0; p < d; p++) acc += X(bi, i, 0, hi, p) * X(bi, j, 1, hi, p);
                    S[i * s + j] = acc;
                }
            for (int64_t i = 0; i < s; i++)
                for (int64_t p = 0; p < d; p++) {
                    double acc = 0;
                    for (int64_t j = 0; j < s; j++) acc += S[i * s + j] * X(bi, j, 2, hi, p);
                    C[i * d + p] = acc;
                }
        }
#undef X
    kiln_tensor t = kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(b, s, 3, h, d), x);
    t = kiln_cast(t, dt);
    kiln_tensor q = kiln_permute(kiln_squeeze(kiln_narrow(kiln_ref(t), 2, 0, 1), 2), KILN_DIMS(0, 2, 1, 3));
    kiln_tensor kt = kiln_permute(kiln_squeeze(kiln_narrow(kiln_ref(t), 2, 1, 1), 2), KILN_DIMS(0, 2, 3, 1));
    kiln_tensor v = kiln_permute(kiln_squeeze(kiln_narrow(t, 2, 2, 1), 2), KILN_DIMS(0, 2, 1, 3));
    kiln_tensor scores = kiln_matmul(q, kt);
    /* the scores stored transposed and read back through a transposed view: A's flag too */
    kiln_tensor st = kiln_transpose(kiln_contiguous(kiln_transpose(scores, -2, -1)), -2, -1);
    kiln_tensor out = kiln_matmul(st, v);
    double *got_ctx = read_f64(out, b * h * s * d);
    double rtol = dt == KILN_F32 ? 1e-5 : 1e-12, atol = rtol * (double)(s * d);
    if (got_ctx) {
        double w = worst(got_ctx, ctx, b * h * s * d, atol, rtol);
        KT_CHECK_MSG(w <= 1, "%s [%lld,%lld,%lld,%lld] with %d threads: error %.3g of the tolerance", kiln_dtype_name(dt),
                     (long long)b, (long long)h, (long long)s, (long long)d, threads, w);
    }
    free(got_ctx);
    free(x);
    free(sc);
    free(ctx);
    kiln__pool_set_threads(was);
}

KT_TEST(attention_layout_every_path) {
    for (int threads = 1; threads <= 3; threads++) {
        check_attention_layout(KILN_F32, 2, 7, 3, 5, threads);   /* small: side by side */
        check_attention_layout(KILN_F32, 3, 67, 4, 33, threads); /* 67 x 67 x 33 < 2^18: small too */
        check_attention_layout(KILN_F32, 2, 131, 4, 19, threads); /* 131 x 131 x 19 > 2^18: row blocks of 105 */
        check_attention_layout(KILN_F64, 2, 131, 4, 19, threads);
    }
    check_attention_layout(KILN_F32, 1, 1, 1, 1, 2);
    check_attention_layout(KILN_F32, 1, 301, 1, 7, 2); /* one product: in turn, all threads */
}

/* kiln__gemm_serial_* against a double loop, for every transpose pair. */
static void check_serial(int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha, double beta) {
    int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 1;
    int64_t ra = ta ? k : m, rb = tb ? n : k;
    double *a = malloc(sizeof(double) * (size_t)(ra * lda + 1)), *b = malloc(sizeof(double) * (size_t)(rb * ldb + 1));
    double *c0 = malloc(sizeof(double) * (size_t)(m * ldc + 1)), *want = malloc(sizeof(double) * (size_t)(m * ldc + 1));
    double *c64 = malloc(sizeof(double) * (size_t)(m * ldc + 1));
    float *af = malloc(sizeof(float) * (size_t)(ra * lda + 1)), *bf = malloc(sizeof(float) * (size_t)(rb * ldb + 1));
    float *cf = malloc(sizeof(float) * (size_t)(m * ldc + 1));
    fill(a, ra * lda, 11), fill(b, rb * ldb, 12), fill(c0, m * ldc, 13);
    for (int64_t i = 0; i < ra * lda; i++) a[i] = af[i] = (float)a[i];
    for (int64_t i = 0; i < rb * ldb; i++) b[i] = bf[i] = (float)b[i];
    for (int64_t i = 0; i < m * ldc; i++) c0[i] = cf[i] = (float)c0[i], c64[i] = c0[i];
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldc; j++) {
            if (j >= n) { /* the gap between rows stays as it was */
                want[i * ldc + j] = c0[i * ldc + j];
                continue;
            }
            double acc = 0;
            for (int64_t p = 0; p < k; p++) acc += (ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
            want[i * ldc + j] = alpha * acc + (beta == 0 ? 0 : beta * c0[i * ldc + j]);
        }
    kiln__gemm_serial_f32(ta, tb, m, n, k, (float)alpha, af, lda, bf, ldb, (float)beta, cf, ldc);
    kiln__gemm_serial_f64(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c64, ldc);
    double *gf = malloc(sizeof(double) * (size_t)(m * ldc + 1));
    for (int64_t i = 0; i < m * ldc; i++) gf[i] = cf[i];
    double w32 = worst(gf, want, m * ldc, 1e-5 * (double)(k + 1), 1e-5);
    double w64 = worst(c64, want, m * ldc, 1e-13 * (double)(k + 1), 1e-13);
    KT_CHECK_MSG(w32 <= 1 && w64 <= 1, "serial gemm %c%c %lldx%lldx%lld alpha %g beta %g: f32 %.3g, f64 %.3g of the tolerance",
                 ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)m, (long long)n, (long long)k, alpha, beta, w32, w64);
    free(a), free(b), free(c0), free(want), free(c64), free(af), free(bf), free(cf), free(gf);
}

KT_TEST(serial_gemm) {
    static const int64_t sizes[][3] = {{1, 1, 1}, {5, 3, 2}, {131, 97, 33}, {300, 40, 50}, {9, 1000, 300}, {257, 33, 0}};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        for (int t = 0; t < 4; t++) {
            check_serial(t & 1, t >> 1, sizes[i][0], sizes[i][1], sizes[i][2], 1.0, 0.0);
            check_serial(t & 1, t >> 1, sizes[i][0], sizes[i][1], sizes[i][2], -0.5, 1.5);
        }
    check_serial(0, 1, 40, 30, 20, 0.0, 2.0); /* alpha 0: beta C only */
    /* with BLAS, row blocks stay under OpenBLAS's single-thread size unless too short */
    KT_CHECK(kiln__gemm_serial_is_fast(128, 128, 32));
    KT_CHECK(kiln__gemm_serial_is_fast(1, 1, 1));
    if (strcmp(kiln__gemm_impl(), "builtin") != 0) KT_CHECK(!kiln__gemm_serial_is_fast(4096, 4096, 4096));
}

/* a [2, 3, 5, 4] @ b [2, 3, 6, 4]^T through views, b's transpose a flag for GEMM */
static kiln_tensor run_abt(kiln_tensor *in, void *ctx) {
    (void)ctx;
    return kiln_matmul(in[0], kiln_transpose(in[1], -2, -1));
}
/* a given as [2, 4, 5] and read transposed, against b [1, 4, 3] broadcast */
static kiln_tensor run_atb(kiln_tensor *in, void *ctx) {
    (void)ctx;
    return kiln_matmul(kiln_transpose(in[0], -2, -1), in[1]);
}
/* both transposed, from a fused [2, 5, 2, 3] the way attention slices q and k */
static kiln_tensor run_fused(kiln_tensor *in, void *ctx) {
    (void)ctx;
    kiln_tensor q = kiln_squeeze(kiln_narrow(kiln_ref(in[0]), 2, 0, 1), 2);
    kiln_tensor k = kiln_squeeze(kiln_narrow(in[0], 2, 1, 1), 2);
    return kiln_matmul(kiln_transpose(kiln_transpose(q, -2, -1), -2, -1), kiln_transpose(k, -2, -1));
}

KT_TEST(gradients_finite_differences) {
    kiln_shape s1[2] = {KILN_SHAPE(2, 3, 5, 4), KILN_SHAPE(2, 3, 6, 4)};
    GC_CHECK("a @ b^T batched", run_abt, NULL, 2, s1, 1e-6);
    kiln_shape s2[2] = {KILN_SHAPE(2, 4, 5), KILN_SHAPE(1, 4, 3)};
    GC_CHECK("a^T @ b broadcast", run_atb, NULL, 2, s2, 1e-6);
    kiln_shape s3[1] = {KILN_SHAPE(2, 5, 2, 3)};
    GC_CHECK("q k^T from one fused tensor", run_fused, NULL, 1, s3, 1e-6);
}

/* loss = sum((a @ b^T) * w) over [bt, m, k] x [bt, n, k]: da = w b, db = w^T a, at sizes above
 * the small path, so backward's batched GEMMs run on one thread each in row blocks. */
KT_TEST(gradients_large_batched) {
    const int64_t bt = 6, m = 131, n = 97, k = 33;
    double *a = malloc(sizeof(double) * (size_t)(bt * m * k)), *b = malloc(sizeof(double) * (size_t)(bt * n * k));
    double *w = malloc(sizeof(double) * (size_t)(bt * m * n));
    fill(a, bt * m * k, 1), fill(b, bt * n * k, 2), fill(w, bt * m * n, 3);
    kiln_tensor ta = kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(bt, m, k), a);
    kiln_tensor tb = kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(bt, n, k), b);
    kiln_require_grad(ta), kiln_require_grad(tb);
    kiln_tensor ka = kiln_ref(ta), kb = kiln_ref(tb);
    kiln_tensor c = kiln_matmul(ta, kiln_transpose(tb, -2, -1));
    kiln_tensor loss = kiln_sum(kiln_mul(c, kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(bt, m, n), w)));
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(loss, &g) == KILN_OK);
    double *ga = read_f64(kiln_grad(g, ka), bt * m * k), *gb = read_f64(kiln_grad(g, kb), bt * n * k);
    double *wa = calloc((size_t)(bt * m * k), sizeof(double)), *wb = calloc((size_t)(bt * n * k), sizeof(double));
    for (int64_t q = 0; q < bt; q++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double wij = w[(q * m + i) * n + j];
                for (int64_t p = 0; p < k; p++) {
                    wa[(q * m + i) * k + p] += wij * b[(q * n + j) * k + p];
                    wb[(q * n + j) * k + p] += wij * a[(q * m + i) * k + p];
                }
            }
    if (ga && gb) {
        KT_CHECK_MSG(worst(ga, wa, bt * m * k, 1e-12, 1e-12) <= 1, "d/da off");
        KT_CHECK_MSG(worst(gb, wb, bt * n * k, 1e-12, 1e-12) <= 1, "d/db off");
    }
    kiln_grads_free(g);
    kiln_release(ka), kiln_release(kb);
    free(a), free(b), free(w), free(ga), free(gb), free(wa), free(wb);
}

int main(void) {
    KT_RUN(attention_layout_every_path);
    KT_RUN(serial_gemm);
    KT_RUN(gradients_finite_differences);
    KT_RUN(gradients_large_batched);
    return kt_finish();
}
