/* OpenBLAS's helper threads after kiln starts (backend/cpu/blas_startup.c, #29): the pthread
 * build starts them when the library loads and each spins for about 0.1 s; kiln stops them
 * when its CPU backend starts (checked through OpenBLAS's own flag, blas_server_avail), so an
 * idle kiln program burns no CPU in its first 0.1 s, and a product OpenBLAS runs on several
 * threads afterwards starts them again and is right. Where the build has no OpenBLAS, or its
 * serial or OpenMP build, or one thread, there are no such helpers: the checks of the flag are
 * skipped and the rest still runs. */
#include <kiln.h>
#include <time.h>

#include "kiln_test.h"

#if KILN_HAVE_CBLAS
int openblas_get_parallel(void);
int openblas_get_num_threads(void);
extern int blas_server_avail; /* OpenBLAS's pthread build: its helper threads are up */
#pragma weak openblas_get_parallel
#pragma weak openblas_get_num_threads
#pragma weak blas_server_avail
#endif

static double clock_ms(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Whether OpenBLAS's pthread build with helper threads is linked in. */
static bool openblas_has_helpers(void) {
#if KILN_HAVE_CBLAS
    return openblas_get_parallel && openblas_get_num_threads && openblas_get_parallel() == 1 &&
           openblas_get_num_threads() > 1;
#else
    return false;
#endif
}

/* Whether OpenBLAS's helper threads are up (-1: not known in this build). */
static int openblas_helpers_up(void) {
#if KILN_HAVE_CBLAS
    if (openblas_has_helpers() && &blas_server_avail) return *(volatile int *)&blas_server_avail != 0;
#endif
    return -1;
}

/* Right after kiln's first op the helpers OpenBLAS started at load are down. */
KT_TEST(helpers_stopped_at_start) {
    kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2));
    KT_CHECK(kiln_sync() == KILN_OK);
    KT_CHECK(openblas_helpers_up() != 1);
    kiln_release(x);
}

/* The CPU time the process's other threads take while this one sleeps 40 ms, right after
 * kiln's first op: the helpers, had they been left spinning, take most of a core (30-40 ms)
 * on an otherwise idle machine (on a busy one they yield it to the other work);
 * kiln's own workers poll for microseconds after their last op, then sleep. */
KT_TEST(idle_after_start_burns_no_cpu) {
    kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(4));
    float v = 0;
    KT_CHECK(kiln_into_scalar(kiln_sum(x), &v) == KILN_OK);
    KT_NEAR(v, 4.0, 0.0);
    double others0 = clock_ms(CLOCK_PROCESS_CPUTIME_ID) - clock_ms(CLOCK_THREAD_CPUTIME_ID);
    struct timespec nap = {0, 40 * 1000 * 1000};
    nanosleep(&nap, NULL);
    double others = clock_ms(CLOCK_PROCESS_CPUTIME_ID) - clock_ms(CLOCK_THREAD_CPUTIME_ID) - others0;
    if (getenv("KILN_TEST_VERBOSE")) fprintf(stderr, "others: %.2f ms\n", others);
    KT_CHECK_MSG(others < 10.0, "other threads took %.1f ms of CPU in a 40 ms idle sleep (OpenBLAS helpers: %s)",
                 others, openblas_has_helpers() ? "yes" : "none");
}

/* A product large enough for OpenBLAS's threads (f64: kiln sends it to cblas_dgemm with the
 * pool's threads) after the helpers were stopped: OpenBLAS starts them again, the result is
 * right (against a double reference) and nothing hangs. */
KT_TEST(threaded_product_after_stop) {
    enum { M = 256, K = 1024, N = 1024 }; /* 2 M K N = 5.4e8 flops: over gemm.c's one-thread size */
    double *a = malloc(sizeof(double) * M * K), *b = malloc(sizeof(double) * K * N), *c = malloc(sizeof(double) * M * N);
    KT_CHECK(a && b && c);
    if (!a || !b || !c) {
        free(a), free(b), free(c);
        return;
    }
    for (int i = 0; i < M * K; i++) a[i] = (double)(i % 7) - 3.0;
    for (int i = 0; i < K * N; i++) b[i] = (double)(i % 5) * 0.5 - 1.0;
    kiln_tensor ta = kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(M, K), a);
    kiln_tensor tb = kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(K, N), b);
    KT_CHECK(kiln_into_data(kiln_matmul(ta, tb), c, sizeof(double) * M * N) == KILN_OK);
    double worst = 0;
    for (int i = 0; i < M; i += 37)
        for (int j = 0; j < N; j += 41) {
            double ref = 0;
            for (int k = 0; k < K; k++) ref += a[i * K + k] * b[k * N + j];
            double err = fabs(c[i * N + j] - ref);
            worst = err > worst ? err : worst;
        }
    KT_CHECK_MSG(worst < 1e-9, "largest error %g", worst);
    KT_CHECK(openblas_helpers_up() != 0); /* OpenBLAS started them again for this product */
    free(a), free(b), free(c);
}

int main(void) {
    KT_RUN(helpers_stopped_at_start);
    KT_RUN(idle_after_start_burns_no_cpu);
    KT_RUN(threaded_product_after_stop);
    return kt_finish();
}
