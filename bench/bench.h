/* Shared helpers for kiln's benchmarks: a clock, medians, peak RSS, and the one JSON line
 * each benchmark prints for bench/run. */
#ifndef KILN_BENCH_H
#define KILN_BENCH_H

#include <kiln.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static inline double bench_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* CPU time of every thread of the process (user + system): on a machine shared with other
 * work, a steadier measure of a kernel's cost than the wall clock. */
static inline double bench_cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v in place; returns the value at quantile q (0.5 = median). */
static inline double bench_quantile(double *v, int n, double q) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    int i = (int)(q * (n - 1) + 0.5);
    return v[i < 0 ? 0 : (i >= n ? n - 1 : i)];
}

static inline double bench_peak_rss_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0; /* Linux reports KiB */
}

static inline int bench_runs(int argc, char **argv, int fallback) {
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--runs") == 0) return atoi(argv[i + 1]);
    return fallback;
}

static inline bool bench_flag(int argc, char **argv, const char *flag) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], flag) == 0) return true;
    return false;
}

/* --device cpu|opencl|opencl:N (default cpu): where the workload's tensors live. */
static inline kiln_device bench_device(int argc, char **argv) {
    kiln_device d = KILN_CPU;
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--device") == 0 && kiln_device_parse(argv[i + 1], &d) != KILN_OK) {
            fprintf(stderr, "--device: %s\n", kiln_last_error());
            exit(2);
        }
    return d;
}

/* Prints {"name":..., "ms":..., "rss_mib":..., extra} where extra is "" or ",\"key\":value". */
static inline void bench_report(const char *name, double ms, const char *extra) {
    printf("{\"name\":\"%s\",\"side\":\"kiln\",\"ms\":%.4f,\"rss_mib\":%.1f%s}\n", name, ms, bench_peak_rss_mib(), extra ? extra : "");
    fflush(stdout);
}

static inline void bench_check(kiln_status st, const char *what) {
    if (st != KILN_OK) {
        fprintf(stderr, "%s failed: %s\n", what, kiln_last_error());
        exit(1);
    }
}

#endif
