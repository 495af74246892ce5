/* Speed decisions measured once on this machine and cached per CPU model (tune.c; issue #29).
 *
 * Which library runs an f32 matrix product depends on the CPU and on the libraries' builds
 * (Debian's OpenBLAS 0.3.21 runs Haswell kernels on a Zen 5, where oneDNN runs AVX-512 ones),
 * so a rule tuned on one machine ("oneDNN wherever the CPU has AVX-512") is a guess on the
 * next. The first product that needs the decision times each provider on square-ish products
 * of a few sizes (well under a second), keeps the winners in memory and writes them to a
 * small text file in the user's cache directory, so later runs read them instead:
 *
 *   $KILN_TUNE_CACHE, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln
 *       tune-<hash of the key>.txt:  kiln-tune 2 / key <CPU, cores, threads, libraries> /
 *                                     pool_poll_ns <ns> / gemm_f32 <size> <provider> ... / end
 *
 * KILN_TUNE=0 uses the rules alone (no measuring, no file): the test suite runs so.
 * KILN_TUNE=refresh measures again and rewrites the file. KILN_VERBOSE=1 says what was
 * decided and why a file was not used. A file that cannot be read, is corrupt or hostile, or
 * cannot be written never fails an op: the decisions are measured again, or the rules used. */
#ifndef KILN_BACKEND_CPU_TUNE_H
#define KILN_BACKEND_CPU_TUNE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Who runs an f32 product. BY_RULE: the tuner has no decision (KILN_TUNE=0, not measured). */
typedef enum kiln__gemm_provider {
    KILN__GEMM_BY_RULE = 0,
    KILN__GEMM_DNNL,    /* oneDNN's sgemm in fixed tiles (gemm_dnnl.c) */
    KILN__GEMM_BLAS,    /* CBLAS (OpenBLAS) */
    KILN__GEMM_BUILTIN, /* kiln's blocked kernel (gemm.c) */
    KILN__GEMM_PROVIDER_COUNT
} kiln__gemm_provider;

/* Size classes of f32 products, by the geometric mean of n and k (the right operand's size):
 * 128 (and below), 256, 512, 1024, 2048 (and above). The row count m is left out on purpose:
 * a fused product runs in row panels (fused_matmul.c), and each panel must go to the same
 * provider as the whole product to give its bits. */
enum { KILN__TUNE_GEMM_CLASSES = 5 };
int kiln__tune_gemm_class(int64_t n, int64_t k);
int64_t kiln__tune_gemm_class_size(int cls);

/* Runs one m x n x k product (C = A B, row-major, dense) with the given provider: the caller
 * (gemm.c) passes its own, so that what is timed is what it will run. */
typedef void (*kiln__tune_gemm_runner)(kiln__gemm_provider p, int64_t m, int64_t n, int64_t k, const float *a,
                                       const float *b, float *c);

/* Which provider to use for an f32 product of n columns over k. `available` has bit p set for
 * each provider the build has; `rule` is the one the fixed rule picks (the measurement keeps it
 * unless another is at least 5% faster: a noisy timing never moves a decision by a hair).
 * Loads or measures on the first call that has may_measure (a caller inside a pool task
 * would time products with no pool; it gets BY_RULE until then). Thread-safe. */
kiln__gemm_provider kiln__tune_gemm_f32(int64_t n, int64_t k, kiln__tune_gemm_runner run, unsigned available,
                                        kiln__gemm_provider rule, bool may_measure);

/* "dnnl", "openblas" (the CBLAS), "builtin", "rule". */
const char *kiln__gemm_provider_name(kiln__gemm_provider p);

/* The cache file kiln would use now (KILN_TUNE_CACHE, XDG_CACHE_HOME, HOME; key from
 * core/machine.h and the given providers): false when no directory is known. For tests. */
bool kiln__tune_cache_path(unsigned available, char *out, size_t cap);

/* Tests: time the measurement with another clock (ns; NULL: CLOCK_MONOTONIC again), so that
 * fake providers can take exact times whatever the load. */
void kiln__tune_use_clock(uint64_t (*now)(void));

/* For the other measured decisions kept beside these (stream_probe.c): the file for `kind`
 * ("<dir>/<kind>-<hash of the key>.txt"; false when no directory is known), the key (the CPU,
 * cores, threads, the providers in `available`), reading a whole file of at most cap - 1 bytes
 * into buf (NULL when read; "" when there is no file; else why not), its next line (NULL at the
 * end), writing one (made under a temporary name and renamed; NULL, or why not), whether the
 * load average is within the core count (a measurement made above it is not written), and the
 * KILN_VERBOSE messages. */
bool kiln__tune_file_path(const char *kind, unsigned available, char *out, size_t cap);
void kiln__tune_key(unsigned available, char *out, size_t cap);
const char *kiln__tune_read_file(const char *path, char *buf, size_t cap);
char *kiln__tune_next_line(char **cursor);
const char *kiln__tune_write_file(const char *path, const char *text);
bool kiln__tune_machine_quiet(void);
/* KILN_TUNE: off (0, false, ...: the rules, nothing measured or read) or refresh (measure again and
 * overwrite the file), for every measured decision alike. */
void kiln__tune_mode(bool *off, bool *refresh);
void kiln__tune_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Tests: read the machine's load with another function (NULL: getloadavg's 1-minute average). A
 * measurement made while it is above the core count holds for its run and is not written. */
void kiln__tune_use_load(double (*fn)(void));

/* Tests: measure what a wake-up costs with another function (ns; 0: not measured; NULL: the
 * real measurement, pool_poll.c), so that the poll written is known. */
void kiln__tune_use_wake_measure(int64_t (*measure)(void));

/* The intra-op pool's poll is decided with the products' providers (the first call above that
 * may measure): read from the file's `pool_poll_ns` line, or derived from a wake-up's measured
 * cost (pool_poll.h) and written there, and handed to the pool (kiln__pool_set_poll_ns). Until
 * then, under KILN_TUNE=0, or on a machine too loaded to measure it, the pool polls by the rule
 * (such a machine writes 0: the next run measures the wake-up again, and only it).
 * The poll the decisions gave (0: the rule); for tests. */
int64_t kiln__tune_pool_poll_ns(void);

/* Tests: forget every decision; the next call reads the environment and the cache again. */
void kiln__tune_forget(void);

#endif
