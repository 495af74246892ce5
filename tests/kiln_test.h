/* Minimal test harness: each tests/test_*.c is one program, one feature.
 *
 *   KT_TEST(name) { KT_CHECK(x == 1); KT_NEAR(a, b, 1e-6); }
 *   int main(void) { KT_RUN(name); return kt_finish(); }
 *
 * A failed check records file:line and continues; kt_finish() prints the tally in the form
 * "N passed, N failed" and returns non-zero when anything failed.
 *
 * One test of any program runs alone by name: KILN_TEST_FILTER=name ./tests/test_views (a
 * comma-separated list; a trailing * matches a prefix: KILN_TEST_FILTER='reshape*'). A filter
 * that matches no test of the program fails it, so a mistyped name is not a silent pass. */
#ifndef KILN_TEST_H
#define KILN_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int kt_checks_failed_in_test;
static int kt_tests_passed, kt_tests_failed;

#define KT_TEST(name) static void name(void)

#define KT_CHECK(cond)                                                                 \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "  %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            kt_checks_failed_in_test++;                                                \
        }                                                                              \
    } while (0)

#define KT_CHECK_MSG(cond, ...)                                             \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "  %s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
            kt_checks_failed_in_test++;                                     \
        }                                                                   \
    } while (0)

/* |a - b| <= tol * max(1, |b|): relative for large values, absolute near zero. */
#define KT_NEAR(a, b, tol)                                                                    \
    do {                                                                                      \
        double kt_a_ = (double)(a), kt_b_ = (double)(b);                                      \
        double kt_s_ = fabs(kt_b_) > 1.0 ? fabs(kt_b_) : 1.0;                                 \
        if (!(fabs(kt_a_ - kt_b_) <= (tol) * kt_s_) && !(isnan(kt_a_) && isnan(kt_b_)) &&     \
            !(isinf(kt_a_) && kt_a_ == kt_b_)) {                                              \
            fprintf(stderr, "  %s:%d: %s = %.9g, expected %s = %.9g (tol %g)\n", __FILE__,    \
                    __LINE__, #a, kt_a_, #b, kt_b_, (double)(tol));                           \
            kt_checks_failed_in_test++;                                                       \
        }                                                                                     \
    } while (0)

static int kt_tests_selected;

/* Whether KILN_TEST_FILTER (unset: every test) names this test. */
static inline int kt_selected(const char *name) {
    const char *f = getenv("KILN_TEST_FILTER");
    if (!f || !*f) return 1;
    size_t n = strlen(name);
    while (*f) {
        size_t len = strcspn(f, ",");
        if (len && f[len - 1] == '*' ? strncmp(f, name, len - 1) == 0 : len == n && strncmp(f, name, n) == 0) {
            kt_tests_selected++;
            return 1;
        }
        f += len + (f[len] == ',');
    }
    return 0;
}

#define KT_RUN(name)                                                       \
    do {                                                                   \
        if (!kt_selected(#name)) break;                                    \
        kt_checks_failed_in_test = 0;                                      \
        name();                                                            \
        if (kt_checks_failed_in_test) {                                    \
            fprintf(stderr, "FAIL %s (%d checks)\n", #name, kt_checks_failed_in_test); \
            kt_tests_failed++;                                             \
        } else {                                                           \
            fprintf(stderr, "ok   %s\n", #name);                           \
            kt_tests_passed++;                                             \
        }                                                                  \
    } while (0)

static inline int kt_finish(void) {
    const char *f = getenv("KILN_TEST_FILTER");
    if (f && *f && !kt_tests_selected) {
        printf("KILN_TEST_FILTER=%s names no test of this program\n", f);
        return 1;
    }
    printf("%d passed, %d failed\n", kt_tests_passed, kt_tests_failed);
    return kt_tests_failed ? 1 : 0;
}

/* An OpenCL test's first step in main: non-zero (the caller returns 77, skipped) with a line
 * saying why when this build or machine has no OpenCL device. */
static inline int kt_opencl_missing(void) {
#if !KILN_HAVE_OPENCL || !defined(KILN_API)
    printf("built without OpenCL: skipped\n");
    return 1;
#else
    if (kiln_device_count(KILN_KIND_OPENCL) > 0) return 0;
    printf("no OpenCL device: skipped\n");
    return 1;
#endif
}

/* ---- hostile files --------------------------------------------------------------------- */
#if defined(__unix__)
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

/* The process's peak resident memory so far, in MiB: a reader that allocates what a hostile
 * header claims shows up here even when it later fails. */
static inline double kt_peak_rss_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

/* Writes head (n bytes) at the start of a sparse file of `size` bytes: gigabytes on paper,
 * no disk, and all zeros to a reader that reads it whole. */
static inline int kt_write_sparse(const char *path, const void *head, size_t n, long long size) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return -1;
    int ok = write(fd, head, n) == (ssize_t)n && ftruncate(fd, (off_t)size) == 0;
    return close(fd) == 0 && ok ? 0 : -1;
}
#endif

/* ---- kiln-specific helpers (when <kiln.h> was included first) ------------------------- */
#ifdef KILN_H
static const kiln_dtype kt_all_dtypes[] = {KILN_F32, KILN_F64, KILN_I32, KILN_I64, KILN_BOOL, KILN_F16, KILN_BF16};
#define KT_N_DTYPES ((int)(sizeof kt_all_dtypes / sizeof kt_all_dtypes[0]))

/* Leak check: kt_mem_begin() marks live tensors and bytes in use; KT_MEM_CHECK() checks that
 * both are back to the mark (stats wait for queued work, frees included). */
static kiln_memory_stats kt_mem_mark;

static inline void kt_mem_begin(void) {
    kiln_sync();
    kt_mem_mark = kiln_memory_stats_get(KILN_CPU);
}

#define KT_MEM_CHECK()                                                                                 \
    do {                                                                                               \
        kiln_sync();                                                                                   \
        kiln_memory_stats kt_now_ = kiln_memory_stats_get(KILN_CPU);                                   \
        KT_CHECK_MSG(kt_now_.live_tensors == kt_mem_mark.live_tensors, "live tensors %llu, was %llu",  \
                     (unsigned long long)kt_now_.live_tensors, (unsigned long long)kt_mem_mark.live_tensors); \
        KT_CHECK_MSG(kt_now_.bytes_in_use == kt_mem_mark.bytes_in_use, "bytes in use %llu, was %llu",  \
                     (unsigned long long)kt_now_.bytes_in_use, (unsigned long long)kt_mem_mark.bytes_in_use); \
    } while (0)

/* The last error has status st, names `what`, and (unless line is 0) the caller's
 * file:line in this test file. */
static inline void kt_expect_error_at(kiln_status st, const char *what, const char *file, int line, int here) {
    const char *msg = kiln_last_error();
    const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
    KT_CHECK_MSG(kiln_last_status() == st, "line %d: status %s, expected %s (%s)", here,
                 kiln_status_str(kiln_last_status()), kiln_status_str(st), msg);
    KT_CHECK_MSG(strstr(msg, what) != NULL, "line %d: message '%s' does not name '%s'", here, msg, what);
    char site[128];
    snprintf(site, sizeof site, "%s:%d", base, line);
    KT_CHECK_MSG(line == 0 || strstr(msg, site) != NULL, "line %d: message '%s' lacks call site %s", here, msg, site);
}
#define KT_EXPECT_ERROR(st, what, line) kt_expect_error_at((st), (what), __FILE__, (line), __LINE__)

/* Reads t (consumed; its shape must be valid): the read must fail with st, and the message
 * name op and this test file (the call site of the public call that failed). */
static inline void kt_read_error_in(kiln_tensor t, kiln_status st, const char *op, const char *file) {
    int64_t n = kiln_tensor_numel(t);
    size_t bytes = n > 0 ? (size_t)n * kiln_dtype_size(kiln_tensor_dtype(t)) : 0;
    void *buf = bytes ? malloc(bytes) : NULL;
    kiln_status got = kiln_into_data(t, buf, bytes);
    free(buf);
    const char *msg = kiln_last_error();
    const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
    KT_CHECK_MSG(got == st, "status %s, expected %s (%s)", kiln_status_str(got), kiln_status_str(st), msg);
    KT_CHECK_MSG(strstr(msg, op) != NULL, "message '%s' does not name %s", msg, op);
    KT_CHECK_MSG(strstr(msg, base) != NULL, "message '%s' has no call site in %s", msg, base);
}
#define KT_READ_ERROR(t, st, op) kt_read_error_in((t), (st), (op), __FILE__)
#endif

#endif
