/* bf16 and f16 products accumulated in f32 (src/backend/cpu/gemm_lowp.c): every transpose
 * combination, accumulate on and off, padded leading dims and k = 0 against a double reference
 * of the same (exactly representable) operands, on both paths (oneDNN's bf16 matmul where the
 * CPU has AVX512-BF16, and the widening one, forced), into f32 and into the operands' own
 * dtype (rounded once, padding untouched); kiln_matmul / kiln_linear / batched matmul in bf16 keep f32 accumulation (a sum
 * whose bf16 accumulation would lose it) and their gradients match f32 ones within bf16
 * tolerance. Run under KILN_ISA=avx2 too (scripts/test.sh), where only the widening path runs. */
#include <math.h>

#include "backend/cpu/gemm_lowp.h"
#include "backend/cpu/gemm_lowp_buf.h"
#include "backend/cpu/gemm_lowp_pack.h"
#include "ew_util.h"

static uint16_t *filled(kiln_dtype dt, int64_t n, double *ref) {
    uint16_t *x = malloc(sizeof(uint16_t) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++) {
        float v = (float)ew_uniform(-1, 1);
        x[i] = dt == KILN_BF16 ? kiln__f32_to_bf16(v) : kiln__f32_to_f16(v);
        ref[i] = dt == KILN_BF16 ? kiln__bf16_to_f32(x[i]) : kiln__f16_to_f32(x[i]);
    }
    return x;
}

static void check_product(kiln_dtype dt, int ta, int tb, int64_t m, int64_t n, int64_t k, int accumulate) {
    int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
    int64_t na = (ta ? k : m) * lda, nb = (tb ? n : k) * ldb;
    double *ra = malloc(sizeof(double) * (size_t)(na + 1)), *rb = malloc(sizeof(double) * (size_t)(nb + 1));
    uint16_t *a = filled(dt, na, ra), *b = filled(dt, nb, rb);
    float *c = malloc(sizeof(float) * (size_t)(m * ldc + 1));
    double *want = malloc(sizeof(double) * (size_t)(m * ldc + 1));
    for (int64_t i = 0; i < m * ldc; i++) c[i] = (float)ew_uniform(-1, 1);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = accumulate ? c[i * ldc + j] : 0;
            for (int64_t p = 0; p < k; p++)
                s += (ta ? ra[p * lda + i] : ra[i * lda + p]) * (tb ? rb[j * ldb + p] : rb[p * ldb + j]);
            want[i * ldc + j] = s;
        }
    for (int64_t i = 0; i < m; i++) want[i * ldc + n] = c[i * ldc + n]; /* padding stays */
    KT_CHECK(kiln__gemm_lowp(dt, ta, tb, m, n, k, a, lda, b, ldb, accumulate, KILN_F32, c, ldc) == KILN_OK);
    double worst = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j <= n; j++) {
            /* f32 accumulation of k products of magnitude <= 1: a few ulps of the sum's scale */
            double err = fabs(c[i * ldc + j] - want[i * ldc + j]) / (1 + sqrt((double)k));
            if (err > worst) worst = err;
        }
    KT_CHECK_MSG(worst < 1e-5, "%s %s ta=%d tb=%d %lldx%lldx%lld acc=%d: scaled error %g", kiln_dtype_name(dt),
                 kiln__gemm_lowp_path(dt), ta, tb, (long long)m, (long long)n, (long long)k, accumulate, worst);
    if (!accumulate) { /* into the operands' dtype: the f32 sum rounded once */
        uint16_t *h = malloc(sizeof(uint16_t) * (size_t)(m * ldc + 1));
        for (int64_t i = 0; i < m * ldc; i++) h[i] = 0x7fc0; /* a NaN in the padding must stay there */
        KT_CHECK(kiln__gemm_lowp(dt, ta, tb, m, n, k, a, lda, b, ldb, 0, dt, h, ldc) == KILN_OK);
        double worst_h = 0;
        for (int64_t i = 0; i < m; i++) {
            KT_CHECK(h[i * ldc + n] == 0x7fc0);
            for (int64_t j = 0; j < n; j++) {
                double got = dt == KILN_BF16 ? kiln__bf16_to_f32(h[i * ldc + j]) : kiln__f16_to_f32(h[i * ldc + j]);
                double w = want[i * ldc + j], ulp = fabs(w) * (dt == KILN_BF16 ? 0x1p-8 : 0x1p-11);
                double err = fabs(got - w) / (ulp + 1e-5 * (1 + sqrt((double)k)));
                if (err > worst_h) worst_h = err;
            }
        }
        KT_CHECK_MSG(worst_h <= 1.0, "%s into %s ta=%d tb=%d %lldx%lldx%lld: error %g of half an ulp",
                     kiln_dtype_name(dt), kiln_dtype_name(dt), ta, tb, (long long)m, (long long)n, (long long)k,
                     worst_h);
        free(h);
    }
    free(a), free(b), free(ra), free(rb), free(c), free(want);
}

static void sweep(kiln_dtype dt) {
    static const int64_t sizes[][3] = {{1, 1, 1}, {7, 5, 3}, {33, 17, 64}, {130, 70, 257}, {4, 300, 0}};
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int s = 0; s < 5; s++)
                for (int acc = 0; acc < 2; acc++) check_product(dt, ta, tb, sizes[s][0], sizes[s][1], sizes[s][2], acc);
}

KT_TEST(products_on_the_default_path) {
    printf("  bf16 path: %s, f16 path: %s\n", kiln__gemm_lowp_path(KILN_BF16), kiln__gemm_lowp_path(KILN_F16));
    sweep(KILN_BF16);
    sweep(KILN_F16);
}

/* Products split in column tiles (n of 512 and more: up to two per pool thread, B's slices
 * packed once each) and in taller row tiles, with row counts around the tile edges, both pool
 * sizes. */
KT_TEST(products_in_column_and_row_tiles) {
    int saved = kiln_num_threads();
    static const int64_t sizes[][3] = {{300, 1030, 96}, {1, 515, 40}, {257, 640, 33}, {1100, 768, 64}};
    for (int threads = 1; threads <= 2; threads++) {
        kiln_set_num_threads(threads);
        for (int s = 0; s < 4; s++)
            for (int t = 0; t < 4; t++)
                check_product(KILN_BF16, t & 1, t >> 1, sizes[s][0], sizes[s][1], sizes[s][2], t == 3);
    }
    kiln_set_num_threads(saved);
}

KT_TEST(products_widened_to_f32) {
    kiln__gemm_lowp_force(0);
    KT_CHECK(strcmp(kiln__gemm_lowp_path(KILN_BF16), "convert-f32") == 0);
    sweep(KILN_BF16);
    kiln__gemm_lowp_force(-1);
}

/* B packed once by kiln's own pair interleaving (gemm_lowp_pack.c) gives oneDNN's reorder's
 * product bit for bit: odd k (a half-empty last pair), k past a row block, n past a column block
 * (padding), a leading dim wider than n, into f32 and bf16. */
KT_TEST(packed_b_matches_onednns_reorder) {
    static const int64_t sizes[][3] = {{300, 1030, 97}, {256, 256, 64}, {520, 700, 33}};
    for (int s = 0; s < 3; s++) {
        int64_t m = sizes[s][0], n = sizes[s][1], k = sizes[s][2], ldb = n + 5;
        double *ra = malloc(sizeof(double) * (size_t)(m * k)), *rb = malloc(sizeof(double) * (size_t)(k * ldb));
        uint16_t *a = filled(KILN_BF16, m * k, ra), *b = filled(KILN_BF16, k * ldb, rb);
        for (int c_bf16 = 0; c_bf16 < 2; c_bf16++) {
            size_t es = c_bf16 ? 2 : 4, bytes = (size_t)(m * n) * es;
            char *got = calloc(1, bytes), *want = calloc(1, bytes);
            kiln_dtype c_dt = c_bf16 ? KILN_BF16 : KILN_F32;
            KT_CHECK(kiln__gemm_lowp(KILN_BF16, 0, 0, m, n, k, a, k, b, ldb, 0, c_dt, got, n) == KILN_OK);
            kiln__gemm_bf16_pack_force(0);
            KT_CHECK(kiln__gemm_lowp(KILN_BF16, 0, 0, m, n, k, a, k, b, ldb, 0, c_dt, want, n) == KILN_OK);
            kiln__gemm_bf16_pack_force(-1);
            KT_CHECK_MSG(memcmp(got, want, bytes) == 0, "%lldx%lldx%lld into %s: kiln's packing differs (path %s)",
                         (long long)m, (long long)n, (long long)k, kiln_dtype_name(c_dt), kiln__gemm_lowp_path(KILN_BF16));
            free(got), free(want);
        }
        free(a), free(b), free(ra), free(rb);
    }
}

/* The madvise flags ("hg": MADV_HUGEPAGE) of the mapping holding p, from /proc/self/smaps;
 * false when none is found. */
static bool mapping_advised_huge(const void *p) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return false;
    char line[512];
    bool inside = false, huge = false;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
            huge = strstr(line, " hg") != NULL;
            break;
        }
    }
    fclose(f);
    return huge;
}

/* B packed once into a buffer of 2 MiB pages (gemm_lowp_buf.c, DESIGN.md section 3): the buffer kept
 * after a 1024 x 1024 x 1024 product starts on a 2 MiB boundary and is advised MADV_HUGEPAGE
 * where the kernel has transparent huge pages; the widening path keeps no buffer. */
KT_TEST(packed_b_on_huge_pages) {
    int64_t n = 1024, m = kiln_num_threads() * 128 > n ? kiln_num_threads() * 128 : n; /* B packed once */
    double *r = malloc(sizeof(double) * (size_t)(m * n));
    uint16_t *a = filled(KILN_BF16, m * n, r), *b = filled(KILN_BF16, n * n, r);
    float *c = malloc(sizeof(float) * (size_t)(m * n));
    KT_CHECK(kiln__gemm_lowp(KILN_BF16, 0, 0, m, n, n, a, n, b, n, 0, KILN_F32, c, n) == KILN_OK);
    size_t size;
    const void *spare = kiln__gemm_lowp_spare(&size);
    if (strcmp(kiln__gemm_lowp_path(KILN_BF16), "dnnl-bf16") != 0) {
        KT_CHECK_MSG(spare == NULL, "path %s kept a packed B", kiln__gemm_lowp_path(KILN_BF16));
    } else {
        KT_CHECK_MSG(spare != NULL && size >= (size_t)(n * n) * 2, "no packed B kept (%zu bytes)", size);
        KT_CHECK_MSG((uintptr_t)spare % (2u << 20) == 0, "packed B at %p: not on a 2 MiB boundary", spare);
        FILE *thp = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
        if (thp) {
            fclose(thp);
            KT_CHECK_MSG(mapping_advised_huge(spare), "packed B at %p not advised MADV_HUGEPAGE", spare);
        }
    }
    free(a), free(b), free(c), free(r);
}

/* The sum of 4096 ones plus small terms: bf16 accumulation would stop at 256. */
KT_TEST(matmul_accumulates_in_f32) {
    kt_mem_begin();
    int64_t k = 4096;
    kiln_tensor a = kiln_ones(KILN_CPU, KILN_BF16, KILN_SHAPE(3, k));
    kiln_tensor b = kiln_ones(KILN_CPU, KILN_BF16, KILN_SHAPE(k, 2));
    kiln_tensor y = kiln_matmul(a, b);
    KT_CHECK(kiln_tensor_dtype(y) == KILN_BF16);
    kiln_tensor y32 = kiln_cast(y, KILN_F32);
    float out[6];
    KT_CHECK(kiln_into_data(y32, out, sizeof out) == KILN_OK);
    for (int i = 0; i < 6; i++) KT_NEAR(out[i], 4096.0, 0);
    KT_MEM_CHECK();
}

/* bf16 operands, the same values in f32: linear (bias), batched matmul, and their gradients. */
static kiln_tensor rounded(kiln_tensor t) { return kiln_cast(kiln_cast(t, KILN_BF16), KILN_F32); }

static void max_rel(kiln_tensor got, kiln_tensor want, double tol, const char *what) {
    kiln_tensor d = kiln_max(kiln_abs(kiln_sub(kiln_cast(got, KILN_F32), kiln_ref(want))));
    kiln_tensor s = kiln_max(kiln_abs(want));
    float fd = 1, fs = 0;
    KT_CHECK(kiln_into_scalar(d, &fd) == KILN_OK && kiln_into_scalar(s, &fs) == KILN_OK);
    KT_CHECK_MSG(fd <= tol * fs, "%s: max error %g of scale %g", what, fd, fs);
}

KT_TEST(linear_and_bmm_with_gradients) {
    kt_mem_begin();
    kiln_tensor x = rounded(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(4, 40, 96), 1));
    kiln_tensor w = rounded(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(64, 96), 2));
    kiln_tensor bias = rounded(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(64), 3));
    kiln_tensor v = rounded(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(4, 64, 24), 4));
    kiln_tensor leaf[2][4], grads[2][3], outs[2];
    for (int lp = 0; lp < 2; lp++) {
        kiln_dtype dt = lp ? KILN_BF16 : KILN_F32;
        leaf[lp][0] = kiln_leaf(kiln_clone(kiln_cast(kiln_ref(x), dt)));
        leaf[lp][1] = kiln_leaf(kiln_clone(kiln_cast(kiln_ref(w), dt)));
        leaf[lp][2] = kiln_leaf(kiln_clone(kiln_cast(kiln_ref(bias), dt)));
        leaf[lp][3] = kiln_cast(kiln_ref(v), dt);
        kiln_tensor h = kiln_linear(kiln_ref(leaf[lp][0]), kiln_ref(leaf[lp][1]), kiln_ref(leaf[lp][2]));
        kiln_tensor y = kiln_matmul(h, kiln_ref(leaf[lp][3]));
        outs[lp] = kiln_cast(kiln_ref(y), KILN_F32);
        kiln_grads *g = NULL;
        KT_CHECK_MSG(kiln_backward(kiln_sum(kiln_cast(y, KILN_F32)), &g) == KILN_OK, "%s", kiln_last_error());
        for (int i = 0; i < 3; i++) grads[lp][i] = kiln_grad(g, leaf[lp][i]);
        kiln_grads_free(g);
    }
    max_rel(outs[1], outs[0], 2e-2, "forward");
    const char *names[3] = {"dx", "dw", "dbias"};
    for (int i = 0; i < 3; i++) {
        KT_CHECK(kiln_tensor_dtype(grads[1][i]) == KILN_BF16);
        max_rel(grads[1][i], grads[0][i], 2e-2, names[i]);
        kiln_release(grads[0][i]);
    }
    kiln_release(outs[0]);
    for (int lp = 0; lp < 2; lp++)
        for (int i = 0; i < 4; i++) kiln_release(leaf[lp][i]);
    kiln_release(x), kiln_release(w), kiln_release(bias), kiln_release(v);
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(products_on_the_default_path);
    KT_RUN(products_in_column_and_row_tiles);
    KT_RUN(products_widened_to_f32);
    KT_RUN(packed_b_matches_onednns_reorder);
    KT_RUN(packed_b_on_huge_pages);
    KT_RUN(matmul_accumulates_in_f32);
    KT_RUN(linear_and_bmm_with_gradients);
    return kt_finish();
}
