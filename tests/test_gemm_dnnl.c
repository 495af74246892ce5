/* f32 products through oneDNN in fixed tiles (src/backend/cpu/gemm_dnnl.c): every transpose
 * combination, beta 0 and 1, padded leading dims and sizes around the 256-row and 64-column
 * tile edges against a double reference, on one pool thread and on two; row panels starting
 * at multiples of the tile height give the whole product's bits (k = 1000 included, where
 * oneDNN's sums depend on the call's row count), and for a right operand past the caches, whose
 * tiles are taller; the height the same at every thread count, and so the bits; tall tiles and
 * row counts around their edges (1 to 4097) against double on sampled rows; layouts it refuses;
 * kiln_linear over more than 32 rows through the MATMUL kernel with the path on and off; a short
 * tile's column halves; a serial product (one of many side by side, as attention's heads run) in
 * oneDNN's bits.
 * Skipped (77) in a build without oneDNN. */
#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_dnnl.h"
#include "backend/cpu/vmath.h"
#include "core/machine.h"
#include "ew_util.h"

/* C = alpha op(A) op(B) + beta C0 in double */
static void reference(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                      const float *b, int64_t ldb, float beta, const float *c0, double *c, int64_t ldc) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t p = 0; p < k; p++)
                s += (double)(ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
            c[i * ldc + j] = alpha * s + (beta != 0 ? beta * (double)c0[i * ldc + j] : 0);
        }
}

static float *filled(int64_t n) {
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = (float)ew_uniform(-1, 1);
    return x;
}

/* values that f32 holds exactly, in double: kiln_linear's operands */
static double *filled_f64(int64_t n) {
    double *x = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = (float)ew_uniform(-1, 1);
    return x;
}

static void check_product(int ta, int tb, int64_t m, int64_t n, int64_t k, float beta) {
    int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
    float *a = filled((ta ? k : m) * lda), *b = filled((tb ? n : k) * ldb), *c = filled(m * ldc);
    float *c0 = malloc(sizeof(float) * (size_t)(m * ldc));
    double *want = malloc(sizeof(double) * (size_t)(m * ldc));
    memcpy(c0, c, sizeof(float) * (size_t)(m * ldc));
    reference(ta, tb, m, n, k, 0.75f, a, lda, b, ldb, beta, c0, want, ldc);
    KT_CHECK(kiln__gemm_dnnl_takes(ta, tb, m, n, k, lda, ldb, ldc));
    KT_CHECK(kiln__gemm_dnnl_f32(ta, tb, m, n, k, 0.75f, a, lda, b, ldb, beta, c, ldc) == KILN_OK);
    double worst = 0;
    bool pad_kept = true;
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            double e = fabs(c[i * ldc + j] - want[i * ldc + j]);
            worst = e > worst ? e : worst;
        }
        pad_kept &= c[i * ldc + n] == c0[i * ldc + n] && c[i * ldc + n + 1] == c0[i * ldc + n + 1];
    }
    KT_CHECK_MSG(worst <= 1e-6 * (double)(k + 2), "ta %d tb %d m %lld n %lld k %lld beta %g: off by %g", ta, tb,
                 (long long)m, (long long)n, (long long)k, beta, worst);
    KT_CHECK_MSG(pad_kept, "m %lld n %lld: wrote into C's padding", (long long)m, (long long)n);
    free(a), free(b), free(c), free(c0), free(want);
}

KT_TEST(products_match_reference) {
    kiln__gemm_dnnl_force(1);
    int saved = kiln_num_threads();
    const int64_t ms[] = {1, 33, 255, 256, 257, 530}, ns[] = {1, 7, 255, 256, 300}, ks[] = {1, 13, 384};
    for (int threads = 1; threads <= 2; threads++) {
        kiln_set_num_threads(threads);
        for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
            for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
                for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
                    for (int t = 0; t < 4; t++) check_product(t & 1, t >> 1, ms[mi], ns[ni], ks[ki], t == 3 ? 1.0f : 0.0f);
    }
    kiln_set_num_threads(saved);
    kiln__gemm_dnnl_force(-1);
}

/* Rows [r0, r1) of C computed alone equal the whole product's when r0 is a tile edge. */
static void check_tile_aligned_panels(int64_t n, const int64_t *ks, size_t count) {
    for (size_t ki = 0; ki < count; ki++)
        for (int tb = 0; tb < 2; tb++) {
            int64_t tile = kiln__gemm_dnnl_rows(n, ks[ki]), m = 2 * tile + 37, k = ks[ki];
            KT_CHECK(tile >= KILN__GEMM_DNNL_TILE_ROWS);
            float *a = filled(m * k), *b = filled(n * k), *whole = calloc((size_t)(m * n), 4), *parts = calloc((size_t)(m * n), 4);
            int64_t ldb = tb ? k : n;
            KT_CHECK(kiln__gemm_dnnl_f32(0, tb, m, n, k, 1.0f, a, k, b, ldb, 0.0f, whole, n) == KILN_OK);
            const int64_t cuts[] = {0, tile, 2 * tile, m};
            for (int p = 0; p < 3; p++)
                KT_CHECK(kiln__gemm_dnnl_f32(0, tb, cuts[p + 1] - cuts[p], n, k, 1.0f, a + cuts[p] * k, k, b, ldb, 0.0f,
                                             parts + cuts[p] * n, n) == KILN_OK);
            KT_CHECK_MSG(memcmp(whole, parts, sizeof(float) * (size_t)(m * n)) == 0, "k %lld tb %d: panels differ",
                         (long long)k, tb);
            free(a), free(b), free(whole), free(parts);
        }
}

KT_TEST(tile_aligned_panels_are_bit_identical) {
    kiln__gemm_dnnl_force(1);
    const int64_t ks[] = {384, 1000, 1536};
    check_tile_aligned_panels(389, ks, sizeof ks / sizeof *ks);
    /* a right operand past the caches: taller tiles (512 rows with a 1 MiB L2 and 2 cores) */
    const int64_t big_k[] = {2048};
    check_tile_aligned_panels(2048, big_k, 1);
    kiln__gemm_dnnl_force(-1);
}

/* The height comes from n, k and the machine alone: the same at every thread count, never
 * under 256 rows, taller for a right operand far past the L2, and the whole product's bits
 * the same on one pool thread and on two. */
KT_TEST(tile_height_from_shape_not_threads) {
    kiln__gemm_dnnl_force(1);
    int saved = kiln_num_threads();
    const kiln__machine *mc = kiln__machine_facts();
    int64_t small = kiln__gemm_dnnl_rows(512, 512), big = kiln__gemm_dnnl_rows(4096, 4096);
    KT_CHECK(small == KILN__GEMM_DNNL_TILE_ROWS);
    KT_CHECK(big >= small && big <= 4096);
    /* 4096 x 2048 floats of B per tile: 32 MiB, past two L2s of any CPU with a small L2 */
    if (mc->l2_bytes <= (int64_t)2 << 20 && mc->cores <= 8) KT_CHECK(big > small);
    int64_t n = 2048, k = 2048, m = kiln__gemm_dnnl_rows(n, k) + 5;
    float *a = filled(m * k), *b = filled(k * n), *c1 = calloc((size_t)(m * n), 4), *c2 = calloc((size_t)(m * n), 4);
    kiln_set_num_threads(1);
    int64_t rows1 = kiln__gemm_dnnl_rows(n, k);
    KT_CHECK(kiln__gemm_dnnl_f32(0, 0, m, n, k, 1.0f, a, k, b, n, 0.0f, c1, n) == KILN_OK);
    kiln_set_num_threads(2);
    KT_CHECK(kiln__gemm_dnnl_rows(n, k) == rows1);
    KT_CHECK(kiln__gemm_dnnl_f32(0, 0, m, n, k, 1.0f, a, k, b, n, 0.0f, c2, n) == KILN_OK);
    KT_CHECK_MSG(memcmp(c1, c2, sizeof(float) * (size_t)(m * n)) == 0, "1 and 2 threads differ");
    free(a), free(b), free(c1), free(c2);
    kiln_set_num_threads(saved);
    kiln__gemm_dnnl_force(-1);
}

/* Tall tiles against double, on sampled rows (a whole reference would take seconds): row
 * counts around the tile edges (1, 255, 257, a height + 1, 4097) and every transpose. */
static void check_sampled(int ta, int tb, int64_t m, int64_t n, int64_t k) {
    int64_t lda = (ta ? m : k) + 1, ldb = tb ? k : n;
    float *a = filled((ta ? k : m) * lda), *b = filled((tb ? n : k) * ldb), *c = filled(m * n);
    KT_CHECK(kiln__gemm_dnnl_f32(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, n) == KILN_OK);
    int64_t tile = kiln__gemm_dnnl_rows(n, k);
    const int64_t rows[] = {0, 1, tile - 1, tile, tile + 1, m / 2, m - 2, m - 1};
    double worst = 0;
    for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
        int64_t i = rows[r];
        if (i < 0 || i >= m) continue;
        for (int64_t j = 0; j < n; j = j + 7 < n || j == n - 1 ? j + 7 : n - 1) { /* every 7th, and the last */
            double s = 0;
            for (int64_t p = 0; p < k; p++)
                s += (double)(ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
            double e = fabs(c[i * n + j] - s);
            worst = e > worst ? e : worst;
        }
    }
    KT_CHECK_MSG(worst <= 1e-6 * (double)(k + 2), "ta %d tb %d m %lld n %lld k %lld: off by %g", ta, tb, (long long)m,
                 (long long)n, (long long)k, worst);
    free(a), free(b), free(c);
}

KT_TEST(tall_tiles_match_reference) {
    kiln__gemm_dnnl_force(1);
    int64_t n = 2048, k = 2048, tile = kiln__gemm_dnnl_rows(n, k);
    check_sampled(0, 0, 1, n, k);
    check_sampled(0, 1, 255, n, k);
    for (int t = 0; t < 4; t++) check_sampled(t & 1, t >> 1, t < 2 ? 257 : tile + 1, n, k);
    check_sampled(0, 0, 4097, 515, 1024); /* many tiles, an odd n */
    check_sampled(1, 1, 4097, 515, 1024);
    kiln__gemm_dnnl_force(-1);
}

KT_TEST(refuses_what_it_cannot_take) {
    kiln__gemm_dnnl_force(1);
    KT_CHECK(!kiln__gemm_dnnl_takes(0, 1, 40, 8, 16, 15, 16, 8)); /* lda under k */
    KT_CHECK(!kiln__gemm_dnnl_takes(0, 0, 40, 8, 16, 16, 7, 8));  /* ldb under n */
    KT_CHECK(!kiln__gemm_dnnl_takes(1, 0, 40, 8, 16, 39, 8, 8));  /* A^T: lda under m */
    KT_CHECK(!kiln__gemm_dnnl_takes(0, 0, 40, 8, 16, 16, 8, 7));  /* ldc under n */
    KT_CHECK(!kiln__gemm_dnnl_takes(0, 0, 40, 8, 0, 1, 8, 8));    /* k = 0: the caller's */
    KT_CHECK(kiln__gemm_dnnl_takes(0, 0, 40, 8, 16, 16, 8, 8));
    kiln__gemm_dnnl_force(0);
    KT_CHECK(kiln__gemm_dnnl_rows(40, 8) == 0);
    KT_CHECK(!kiln__gemm_dnnl_takes(0, 0, 40, 8, 16, 16, 8, 8));
    /* by default, off where kiln's vector code is capped below AVX-512 (KILN_ISA) */
    kiln__gemm_dnnl_force(-1);
    const char *env = getenv("KILN_GEMM_DNNL");
    if (!(env && *env) && kiln__vmath_force_isa("avx2") == 0) {
        KT_CHECK(kiln__gemm_dnnl_rows(40, 8) == 0);
        KT_CHECK(!kiln__gemm_dnnl_takes(0, 0, 40, 8, 16, 16, 8, 8));
        kiln__vmath_force_isa(NULL);
    }
}

/* y = x W^T + b through the MATMUL kernel, oneDNN on and off, against double. */
static void check_linear(int64_t rows, int64_t in, int64_t out, int mode) {
    kiln__gemm_dnnl_force(mode);
    double *x = filled_f64(rows * in), *w = filled_f64(out * in), *b = filled_f64(out);
    double *want = malloc(sizeof(double) * (size_t)(rows * out));
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < out; j++) {
            double s = b[j];
            for (int64_t p = 0; p < in; p++) s += x[i * in + p] * w[j * in + p];
            want[i * out + j] = s;
        }
    kiln_tensor y = kiln_linear(ew_tensor(KILN_F32, KILN_SHAPE(rows, in), x), ew_tensor(KILN_F32, KILN_SHAPE(out, in), w),
                                ew_tensor(KILN_F32, KILN_SHAPE(out), b));
    double *got = ew_read(y, KILN_F32, rows * out);
    char label[64];
    snprintf(label, sizeof label, "linear %lld x %lld x %lld mode %d", (long long)rows, (long long)in, (long long)out, mode);
    KT_CHECK(got != NULL);
    if (got) EW_EXPECT_CLOSE(label, got, want, rows * out, 1e-5, 1e-6 * (double)(in + 2));
    free(x), free(w), free(b), free(got), free(want);
    kiln__gemm_dnnl_force(-1);
}

KT_TEST(linear_through_matmul_kernel) {
    kt_mem_begin();
    for (int mode = 0; mode < 2; mode++) {
        check_linear(33, 384, 1152, mode);
        check_linear(300, 37, 13, mode);
        check_linear(517, 384, 257, mode);
    }
    KT_MEM_CHECK();
}

/* relu(x W^T + b) fused (the product in row panels, fused_matmul.c) and unfused, bit for bit,
 * where the tiles are taller than 256 rows: panels cut at the taller height, the last one short. */
KT_TEST(fused_product_with_tall_tiles_keeps_bits) {
    kiln__gemm_dnnl_force(1);
    int64_t n = 2048, k = 2048, m = 2 * kiln__gemm_dnnl_rows(n, k) + 76;
    double *x = filled_f64(m * k), *w = filled_f64(n * k), *b = filled_f64(n);
    double *got[2] = {NULL, NULL};
    bool was = kiln_fusion_enabled();
    for (int fused = 0; fused < 2; fused++) {
        kiln_fusion_set_enabled(fused);
        kiln_tensor y = kiln_relu(kiln_linear(ew_tensor(KILN_F32, KILN_SHAPE(m, k), x),
                                              ew_tensor(KILN_F32, KILN_SHAPE(n, k), w), ew_tensor(KILN_F32, KILN_SHAPE(n), b)));
        got[fused] = ew_read(y, KILN_F32, m * n);
        KT_CHECK(got[fused] != NULL);
    }
    kiln_fusion_set_enabled(was);
    if (got[0] && got[1])
        KT_CHECK_MSG(memcmp(got[0], got[1], sizeof(double) * (size_t)(m * n)) == 0, "m %lld: fused != unfused",
                     (long long)m);
    free(x), free(w), free(b), free(got[0]), free(got[1]);
    kiln__gemm_dnnl_force(-1);
}

/* A short tile (a product's last, or all of one under the tile height) of one column tile, from
 * 128 columns and two smallest tasks of work up, runs as two column halves (gemm_dnnl.c): the
 * halves; products of such tiles against double at 1 and 2 threads; tile-aligned panels and the
 * fused product (row panels, the last one holding the short tile) keep the whole one's bits. */
KT_TEST(short_tile_splits_columns) {
    kiln__gemm_dnnl_force(1);
    KT_CHECK(kiln__gemm_dnnl_tile_cols(128, 3136, 128, 256) == 64);  /* a CNN's fc1 over 128 images */
    KT_CHECK(kiln__gemm_dnnl_tile_cols(200, 1000, 100, 256) == 112); /* halves in multiples of 16 */
    KT_CHECK(kiln__gemm_dnnl_tile_cols(128, 3136, 256, 256) == 128); /* a whole tile: one call */
    KT_CHECK(kiln__gemm_dnnl_tile_cols(128, 128, 128, 256) == 128);  /* 4.2 MFLOP: too small */
    KT_CHECK(kiln__gemm_dnnl_tile_cols(100, 3136, 100, 256) == 100); /* under 128 columns */
    KT_CHECK(kiln__gemm_dnnl_tile_cols(300, 3136, 100, 256) == 192); /* two column tiles already */
    int saved = kiln_num_threads();
    for (int threads = 1; threads <= 2; threads++) {
        kiln_set_num_threads(threads);
        for (int t = 0; t < 4; t++) {
            check_product(t & 1, t >> 1, 128, 128, 3136, t == 3 ? 1.0f : 0.0f);
            check_product(t & 1, t >> 1, 37, 200, 1000, t == 1 ? 1.0f : 0.0f);
        }
    }
    kiln_set_num_threads(saved);
    const int64_t k128[] = {3136}, k200[] = {1000};
    check_tile_aligned_panels(128, k128, 1);
    check_tile_aligned_panels(200, k200, 1);
    /* relu(x W^T + b), 4196 rows: 2.1 MB of output, fused in two panels of whole tiles, the
     * second ending in the 100-row tile that runs in halves */
    int64_t m = 4196, n = 128, k = 3136;
    double *x = filled_f64(m * k), *w = filled_f64(n * k), *b = filled_f64(n), *got[2] = {NULL, NULL};
    bool was = kiln_fusion_enabled();
    for (int fused = 0; fused < 2; fused++) {
        kiln_fusion_set_enabled(fused);
        kiln_tensor y = kiln_relu(kiln_linear(ew_tensor(KILN_F32, KILN_SHAPE(m, k), x),
                                              ew_tensor(KILN_F32, KILN_SHAPE(n, k), w), ew_tensor(KILN_F32, KILN_SHAPE(n), b)));
        KT_CHECK((got[fused] = ew_read(y, KILN_F32, m * n)) != NULL);
    }
    kiln_fusion_set_enabled(was);
    if (got[0] && got[1]) KT_CHECK_MSG(memcmp(got[0], got[1], sizeof(double) * (size_t)(m * n)) == 0, "fused != unfused");
    free(x), free(w), free(b), free(got[0]), free(got[1]);
    kiln__gemm_dnnl_force(-1);
}

/* A serial product goes where the pool's product of its size class goes: with oneDNN on, the
 * same tiles and bits as kiln__gemm_dnnl_f32, not the BLAS's (Debian's OpenBLAS runs SSE3
 * kernels on a CPU it does not know: 6x slower at attention's shapes on an Intel Xeon) */
KT_TEST(serial_products_in_onednn_bits) {
    kiln__gemm_dnnl_force(1);
    const int64_t shapes[][4] = {{128, 128, 32, 1}, {128, 32, 128, 0}, {16, 16, 32, 1}, {300, 40, 700, 0}}; /* m n k tb */
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2], tb = shapes[s][3], ldb = tb ? k : n;
        float *a = filled(m * k), *b = filled(n * k), *serial = filled(m * n), *pooled = filled(m * n);
        kiln__gemm_serial_f32(0, (int)tb, m, n, k, 0.5f, a, k, b, ldb, 0.0f, serial, n);
        KT_CHECK(kiln__gemm_dnnl_f32(0, (int)tb, m, n, k, 0.5f, a, k, b, ldb, 0.0f, pooled, n) == KILN_OK);
        KT_CHECK_MSG(memcmp(serial, pooled, sizeof(float) * (size_t)(m * n)) == 0,
                     "m %lld n %lld k %lld: the serial product's bits are not oneDNN's", (long long)m, (long long)n,
                     (long long)k);
        free(a), free(b), free(serial), free(pooled);
    }
    kiln__gemm_dnnl_force(-1);
}

int main(void) {
#if !KILN_HAVE_DNNL
    printf("built without oneDNN: skipped\n");
    return 77;
#endif
    KT_RUN(products_match_reference);
    KT_RUN(tile_aligned_panels_are_bit_identical);
    KT_RUN(tile_height_from_shape_not_threads);
    KT_RUN(tall_tiles_match_reference);
    KT_RUN(refuses_what_it_cannot_take);
    KT_RUN(fused_product_with_tall_tiles_keeps_bits);
    KT_RUN(linear_through_matmul_kernel);
    KT_RUN(short_tile_splits_columns);
    KT_RUN(serial_products_in_onednn_bits);
    return kt_finish();
}
