/* The memory floor of a row-wise pass (bench_softmax --floor): the bytes softmax must move, moved
 * by plain C on the same number of threads, in the same process: each row of `cols` f32 is read
 * (a sum), read again from cache and written with streaming stores (x - sum), the least traffic
 * any softmax has (its input read once, its output written once). No exp: what is left of
 * kiln's time above this is arithmetic or extra traffic. x86 (SSE2) only; 0 elsewhere. */
#ifndef KILN_BENCH_SOFTMAX_FLOOR_H
#define KILN_BENCH_SOFTMAX_FLOOR_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

typedef struct floor_job {
    const float *x;
    float *y;
    int64_t row0, rows, cols;
    double cpu_ms; /* the thread's CPU time in the pass */
} floor_job;

static double floor_thread_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void *floor_rows(void *arg) {
    floor_job *j = arg;
    double c0 = floor_thread_ms();
#if defined(__x86_64__)
    for (int64_t r = j->row0; r < j->row0 + j->rows; r++) {
        const float *x = j->x + r * j->cols;
        float *y = j->y + r * j->cols;
        __m128 s = _mm_setzero_ps();
        for (int64_t i = 0; i < j->cols; i += 4) s = _mm_add_ps(s, _mm_load_ps(x + i));
        for (int64_t i = 0; i < j->cols; i += 4) _mm_stream_ps(y + i, _mm_sub_ps(_mm_load_ps(x + i), s));
    }
    _mm_sfence();
#else
    (void)j;
#endif
    j->cpu_ms = floor_thread_ms() - c0;
    return NULL;
}

/* One pass of rows x cols (cols a multiple of 4, x and y 16-byte aligned) on `threads` threads;
 * wall ms, and the threads' CPU ms in *cpu_ms (not counting time slices lost to other work). */
static inline double softmax_floor_pass(const float *x, float *y, int64_t rows, int64_t cols, int threads,
                                        double *cpu_ms) {
    floor_job jobs[16];
    pthread_t t[16];
    if (threads > 16) threads = 16;
    double t0 = bench_now_ms();
    for (int i = 0; i < threads; i++) {
        jobs[i] = (floor_job){x, y, rows * i / threads, rows * (i + 1) / threads - rows * i / threads, cols, 0};
        if (i > 0) pthread_create(&t[i], NULL, floor_rows, &jobs[i]);
    }
    floor_rows(&jobs[0]);
    for (int i = 1; i < threads; i++) pthread_join(t[i], NULL);
    double wall = bench_now_ms() - t0;
    *cpu_ms = 0;
    for (int i = 0; i < threads; i++) *cpu_ms += jobs[i].cpu_ms;
    return wall;
}

#endif
