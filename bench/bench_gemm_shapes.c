/* The BLAS alone on the training workloads' GEMM shapes: cblas_sgemm on 1 and on 2 OpenBLAS
 * threads, median time and GFLOP/s per shape, one line each. The yardstick for kiln's own
 * per-op GEMM times (KILN_PROFILE), and for choosing how many threads a shape should get
 * (gemm.c's thread budget). Prints a note and exits 0 in a build without CBLAS.
 *
 *   bench_gemm_shapes [--runs-scale X]   (X multiplies the repetitions; default 1) */
#include "bench.h"

#if KILN_HAVE_CBLAS
#include <cblas.h>

typedef struct {
    const char *name;
    int trans_a, trans_b, m, n, k;
} gemm_shape;

static const gemm_shape shapes[] = {
    {"mlp2048 forward x.W^T", 0, 1, 128, 2048, 2048},
    {"mlp2048 input grad dY.W", 0, 0, 128, 2048, 2048},
    {"mlp2048 weight grad dY^T.X", 1, 0, 2048, 2048, 128},
    {"fmnist-mlp fc1 forward", 0, 1, 128, 256, 784},
    {"fmnist-mlp fc1 weight grad", 1, 0, 256, 784, 128},
    {"fmnist-mlp fc2 forward", 0, 1, 128, 128, 256},
    {"fmnist-mlp fc2 input grad", 0, 0, 128, 256, 128},
    {"fmnist-mlp fc2 weight grad", 1, 0, 128, 256, 128},
    {"fmnist-mlp fc3 forward", 0, 1, 128, 10, 128},
    {"fmnist-cnn fc1 forward", 0, 1, 128, 128, 3136},
    {"fmnist-cnn fc1 weight grad", 1, 0, 128, 3136, 128},
};

int main(int argc, char **argv) {
    double scale = 1.0;
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--runs-scale") == 0) scale = atof(argv[i + 1]);
    size_t cap = (size_t)1 << 22; /* floats: the largest operand, 2048 x 2048 */
    float *a = malloc(cap * sizeof(float)), *b = malloc(cap * sizeof(float)), *c = malloc(cap * sizeof(float));
    if (!a || !b || !c) return 1;
    for (size_t i = 0; i < cap; i++) a[i] = b[i] = c[i] = (float)(i % 7) * 0.1f;
    for (int threads = 1; threads <= 2; threads++) {
        openblas_set_num_threads(threads);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            gemm_shape x = shapes[s];
            double flops = 2.0 * x.m * x.n * x.k;
            int reps = (int)(scale * 2e9 / flops);
            reps = reps < 5 ? 5 : reps > 2000 ? 2000 : reps;
            double *ms = malloc(sizeof(double) * (size_t)reps);
            int lda = x.trans_a ? x.m : x.k, ldb = x.trans_b ? x.k : x.n;
            for (int r = -2; r < reps; r++) {
                double t0 = bench_now_ms();
                cblas_sgemm(CblasRowMajor, x.trans_a ? CblasTrans : CblasNoTrans, x.trans_b ? CblasTrans : CblasNoTrans,
                            x.m, x.n, x.k, 1.0f, a, lda, b, ldb, 0.0f, c, x.n);
                if (r >= 0) ms[r] = bench_now_ms() - t0;
            }
            double p50 = bench_quantile(ms, reps, 0.5);
            printf("{\"name\":\"gemm %s\",\"m\":%d,\"n\":%d,\"k\":%d,\"blas_threads\":%d,\"ms\":%.4f,\"gflops\":%.1f}\n",
                   x.name, x.m, x.n, x.k, threads, p50, flops / p50 / 1e6);
            free(ms);
        }
    }
    free(a), free(b), free(c);
    return 0;
}
#else
int main(void) {
    printf("bench_gemm_shapes: built without CBLAS, nothing to measure\n");
    return 0;
}
#endif
