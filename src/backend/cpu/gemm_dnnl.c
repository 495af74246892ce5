/* f32 products on one thread through oneDNN's dnnl_sgemm (row-major, its JIT kernels for the
 * CPU it finds: AVX-512 where the CPU has it, whatever OPENBLAS_CORETYPE says).
 *
 * gemm.c sends here the products it runs on its caller alone (those under its size rule, and
 * those that start while another op holds kiln's pool). Measured on an AMD EPYC Zen 5 under
 * the shared machine's load (/tmp program timing cblas_sgemm and dnnl_sgemm alternately, one
 * thread, median; this machine's environment sets OPENBLAS_CORETYPE=Haswell, which the
 * second column drops so that OpenBLAS picks its AVX-512 "Cooperlake" kernels):
 *
 *   shape m x n x k (op)               OpenBLAS Haswell   OpenBLAS Cooperlake   dnnl_sgemm
 *   128x256x784   x.W^T (F-MNIST fc1)      0.434 ms            0.270 ms           0.247 ms
 *   256x784x128   dY^T.X (its dW)          0.423               0.234              0.205
 *   128x128x256   x.W^T (fc2)              0.072               0.042              0.037
 *   128x128x3136  x.W^T (CNN fc1)          0.895               0.548              0.557
 *   128x3136x128  dY^T.X (its dW)          0.857               0.457              0.403
 *   128x2048x2048 dY.W (MLP input grad)    17.5                11.6               6.9-13.4
 *
 * so oneDNN is never slower on these shapes and twice as fast as the AVX2 kernels. Products
 * large enough for both cores stay with OpenBLAS and its threads (gemm.c).
 *
 * oneDNN runs on OpenMP here; omp_set_num_threads(1) (a per-thread setting in libgomp) before
 * each call keeps it on the caller, so engine workers may call this side by side. beta == 0
 * never reads C (test_gemm's NaN case). For A/B, KILN_GEMM_DNNL=0 turns this path off and
 * KILN_GEMM_DNNL=1 keeps it to the one-thread products (OpenBLAS's threads take the rest). */
#include "backend/cpu/gemm.h"

#include <stdatomic.h>
#include <stdlib.h>

#ifndef KILN_HAVE_DNNL
#define KILN_HAVE_DNNL 0
#endif

#if KILN_HAVE_DNNL
#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>

#include "backend/cpu/threadpool.h"

static pthread_once_t gemm_dnnl_once = PTHREAD_ONCE_INIT;
static void (*gemm_dnnl_omp_set_threads)(int); /* libgomp's, loaded with oneDNN */
static int gemm_dnnl_mode_read;

static void gemm_dnnl_init(void) {
    const char *e = getenv("KILN_GEMM_DNNL");
    *(void **)&gemm_dnnl_omp_set_threads = dlsym(RTLD_DEFAULT, "omp_set_num_threads");
    /* without the setter oneDNN would start a team of every core from each caller */
    gemm_dnnl_mode_read = !gemm_dnnl_omp_set_threads ? 0 : e && (e[0] == '0' || e[0] == '1') ? e[0] - '0' : 2;
}

int kiln__gemm_dnnl_mode(void) {
    pthread_once(&gemm_dnnl_once, gemm_dnnl_init);
    return gemm_dnnl_mode_read;
}

int kiln__gemm_dnnl_f32(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                        const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                        float *c, int64_t ldc) {
    /* k == 0 or alpha == 0 leaves C = beta * C, which oneDNN skips when beta is 0: not taken */
    if (!kiln__gemm_dnnl_mode() || k <= 0 || alpha == 0.0f) return 0;
    gemm_dnnl_omp_set_threads(1);
    return dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb,
                      beta, c, ldc) == dnnl_success;
}

/* A product for every core: C cut into one block of whole columns (or rows, when C is taller
 * than wide) per pool thread, 16-aligned, each block one one-thread sgemm on kiln's pool. A
 * pool busy with another caller runs the blocks one after another on this thread. */
typedef struct {
    int trans_a, trans_b, by_rows;
    int64_t m, n, k, lda, ldb, ldc, block;
    float alpha, beta;
    const float *a, *b;
    float *c;
} gemm_dnnl_job;

static void gemm_dnnl_blocks(void *ctx, int64_t begin, int64_t end) {
    gemm_dnnl_job *j = ctx;
    for (int64_t i = begin; i < end; i++) {
        int64_t lo = i * j->block, hi = lo + j->block < (j->by_rows ? j->m : j->n) ? lo + j->block : (j->by_rows ? j->m : j->n);
        if (lo >= hi) continue;
        const float *a = j->a, *b = j->b;
        float *c = j->c + (j->by_rows ? lo * j->ldc : lo);
        if (j->by_rows) a += j->trans_a ? lo : lo * j->lda; /* op(A)'s rows from lo */
        else b += j->trans_b ? lo * j->ldb : lo;            /* op(B)'s columns from lo */
        int64_t m = j->by_rows ? hi - lo : j->m, n = j->by_rows ? j->n : hi - lo;
        if (!kiln__gemm_dnnl_f32(j->trans_a, j->trans_b, m, n, j->k, j->alpha, a, j->lda, b, j->ldb, j->beta, c,
                                 j->ldc)) /* oneDNN refused before computing (out of memory) */
            kiln__gemm_serial_f32(j->trans_a, j->trans_b, m, n, j->k, j->alpha, a, j->lda, b, j->ldb, j->beta, c,
                                  j->ldc);
    }
}

int kiln__gemm_dnnl_f32_pool(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                             const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                             float *c, int64_t ldc) {
    if (!kiln__gemm_dnnl_mode() || k <= 0 || alpha == 0.0f) return 0;
    int64_t parts = kiln__pool_threads(), by_rows = m > n, len = by_rows ? m : n;
    int64_t block = ((len + parts - 1) / parts + 15) / 16 * 16;
    if (m <= 0 || n <= 0) return 1; /* C is empty */
    gemm_dnnl_job j = {.trans_a = trans_a, .trans_b = trans_b, .by_rows = (int)by_rows, .m = m, .n = n, .k = k,
                       .lda = lda, .ldb = ldb, .ldc = ldc, .block = block, .alpha = alpha, .beta = beta,
                       .a = a, .b = b, .c = c};
    kiln__parallel_for((len + block - 1) / block, 1, gemm_dnnl_blocks, &j);
    return 1;
}
#else
int kiln__gemm_dnnl_mode(void) { return 0; }

int kiln__gemm_dnnl_f32_pool(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                             const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                             float *c, int64_t ldc) {
    return kiln__gemm_dnnl_f32(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

int kiln__gemm_dnnl_f32(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                        const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                        float *c, int64_t ldc) {
    (void)trans_a, (void)trans_b, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda;
    (void)b, (void)ldb, (void)beta, (void)c, (void)ldc;
    return 0;
}
#endif
