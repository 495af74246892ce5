/* Machine facts and measured decisions (src/core/machine.c, src/backend/cpu/tune.c): the facts
 * are sane; size classes; the cache file round-trips (a second run reads it and measures
 * nothing), KILN_TUNE=0 measures nothing and writes nothing, KILN_TUNE=refresh measures again;
 * empty, garbage, truncated, oversized, NUL-holding, huge-number and foreign-provider files, a
 * directory in the file's place, an unmakeable directory and no directory at all each give valid
 * decisions without a crash; the user's KILN_GEMM_DNNL (kiln__gemm_dnnl_force) and a capped ISA
 * win over a decision; and a real measurement's choice computes the products every provider
 * computes, against double. The fake measurements run on a fake clock, so the winners are known.
 * The pool's poll rides in the same file: derived from a (fake) wake-up's cost within its bounds,
 * read back, refused when out of range, the rule without a measurement; the real measurement of
 * a wake-up gives a sane number. A loaded machine's measurement is not written; a provider must
 * beat the rule's in every round to replace it. */
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_dnnl.h"
#include "backend/cpu/pool_poll.h"
#include "backend/cpu/threadpool.h"
#include "backend/cpu/tune.h"
#include "backend/cpu/vmath.h"
#include "core/machine.h"
#include "kiln/core.h"
#include "kiln_test.h"

static const unsigned all_providers = 1u << KILN__GEMM_DNNL | 1u << KILN__GEMM_BLAS | 1u << KILN__GEMM_BUILTIN;
static char dir[64];
static int runs; /* calls of a fake runner */

/* The fake providers' clock: each run moves it by the provider's time, so the winners are
 * known whatever the machine's load. */
static uint64_t fake_ns;
static uint64_t fake_clock(void) { return fake_ns; }

/* oneDNN fastest up to 256, the BLAS above, ours always slowest */
static void fake_runner(kiln__gemm_provider p, int64_t m, int64_t n, int64_t k, const float *a, const float *b,
                        float *c) {
    (void)m, (void)k, (void)a, (void)b, (void)c;
    runs++;
    fake_ns += p == KILN__GEMM_BUILTIN ? 3000000 : p == KILN__GEMM_BLAS ? 1000000 : n <= 256 ? 300000 : 2000000;
}

/* A wake-up that costs 7 us more than a spinning hand-off: the pool then polls 28 us. */
static int64_t fake_wake(void) { return 7000; }
#define FAKE_POLL_NS 28000
/* A machine too loaded to measure a wake-up. */
static int64_t no_wake(void) { return 0; }

/* KILN_TUNE=1 with the test's cache directory, and path: the file for `available` there,
 * removed. */
static void fresh_cache(unsigned available, char *path, size_t cap) {
    setenv("KILN_TUNE_CACHE", dir, 1);
    setenv("KILN_TUNE", "1", 1);
    KT_CHECK(kiln__tune_cache_path(available, path, cap));
    unlink(path);
}

static kiln__gemm_provider decide_all(unsigned available, kiln__gemm_provider out[KILN__TUNE_GEMM_CLASSES]) {
    kiln__tune_forget();
    for (int c = 0; c < KILN__TUNE_GEMM_CLASSES; c++) {
        int64_t s = kiln__tune_gemm_class_size(c);
        out[c] = kiln__tune_gemm_f32(s, s, fake_runner, available, KILN__GEMM_BLAS, true);
    }
    return out[0];
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char *buf = calloc(1, 8192);
    size_t n = fread(buf, 1, 8191, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void spit(const char *path, const char *text, size_t len) {
    FILE *f = fopen(path, "w");
    if (!f) return;
    fwrite(text, 1, len, f);
    fclose(f);
}

/* src with its line that starts with prefix replaced by line */
static void replace_line(char *out, size_t cap, const char *src, const char *prefix, const char *line) {
    const char *at = strstr(src, prefix);
    if (!at) {
        snprintf(out, cap, "%s", src);
        return;
    }
    const char *end = strchr(at, '\n');
    snprintf(out, cap, "%.*s%s%s", (int)(at - src), src, line, end ? end : "");
}

KT_TEST(facts_are_sane) {
    const kiln__machine *mc = kiln__machine_facts();
    KT_CHECK(mc == kiln__machine_facts());
    int64_t sizes[3] = {mc->l1d_bytes, mc->l2_bytes, mc->l3_bytes};
    for (int i = 0; i < 3; i++) {
        KT_CHECK_MSG(sizes[i] >= 4096 && sizes[i] <= ((int64_t)1 << 32), "level %d: %lld bytes", i + 1,
                     (long long)sizes[i]);
        KT_CHECK_MSG(sizes[i] % 1024 == 0, "level %d: %lld bytes, not whole KiB", i + 1, (long long)sizes[i]);
    }
    KT_CHECK(mc->l1d_bytes <= mc->l2_bytes);
    KT_CHECK(mc->cores >= 1);
    KT_CHECK(mc->model_name[0] != '\0');
    for (const char *p = mc->model_name; *p; p++) KT_CHECK(*p >= 32 && *p <= 126);
#if defined(__x86_64__)
    KT_CHECK(mc->family > 0);
    KT_CHECK(mc->vendor[0] != '\0');
    KT_CHECK(!mc->avx512bw || mc->avx512f);
    KT_CHECK(!mc->avx512_bf16 || mc->avx512f);
#endif
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (online > 0) KT_CHECK(mc->cores == online);
    fprintf(stderr, "  %s (family %d model %d stepping %d), %d cores, L1d %lld (%s) L2 %lld (%s) L3 %lld (%s)\n",
            mc->model_name, mc->family, mc->model, mc->stepping, mc->cores, (long long)mc->l1d_bytes,
            kiln__fact_source_name(mc->l1d_from), (long long)mc->l2_bytes, kiln__fact_source_name(mc->l2_from),
            (long long)mc->l3_bytes, kiln__fact_source_name(mc->l3_from));
}

KT_TEST(sizes_parse_strictly) {
    KT_CHECK(kiln__machine_parse_size("48K") == 48 << 10);
    KT_CHECK(kiln__machine_parse_size("32768K\n") == (int64_t)32 << 20);
    KT_CHECK(kiln__machine_parse_size("1M") == 1 << 20);
    KT_CHECK(kiln__machine_parse_size("512") == 512);
    const char *bad[] = {"", "K", "12X", "-4K", "4K4", " 4K", "99999999999999999999K", "2000G", "4K\n\n"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        KT_CHECK_MSG(kiln__machine_parse_size(bad[i]) == 0, "\"%s\"", bad[i]);
    KT_CHECK(kiln__machine_parse_size(NULL) == 0);
}

KT_TEST(size_classes) {
    KT_CHECK(kiln__tune_gemm_class(1, 1) == 0);
    KT_CHECK(kiln__tune_gemm_class(128, 128) == 0);
    KT_CHECK(kiln__tune_gemm_class(256, 256) == 1);
    KT_CHECK(kiln__tune_gemm_class(512, 512) == 2);
    KT_CHECK(kiln__tune_gemm_class(1024, 1024) == 3);
    KT_CHECK(kiln__tune_gemm_class(2048, 2048) == 4);
    KT_CHECK(kiln__tune_gemm_class(INT64_MAX, INT64_MAX) == 4);
    KT_CHECK(kiln__tune_gemm_class(0, -5) == 0);
    KT_CHECK(kiln__tune_gemm_class(2048, 32) == 1); /* sqrt(n k) = 256 */
    KT_CHECK(kiln__tune_gemm_class_size(5) == 0 && kiln__tune_gemm_class_size(-1) == 0);
}

KT_TEST(cache_round_trips) {
    char path[1024];
    fresh_cache(all_providers, path, sizeof path);
    KT_CHECK(strncmp(path, dir, strlen(dir)) == 0);
    kiln__gemm_provider first[KILN__TUNE_GEMM_CLASSES], again[KILN__TUNE_GEMM_CLASSES];
    runs = 0;
    decide_all(all_providers, first);
    KT_CHECK(runs > 0);
    KT_CHECK(first[0] == KILN__GEMM_DNNL && first[1] == KILN__GEMM_DNNL);
    for (int c = 2; c < KILN__TUNE_GEMM_CLASSES; c++) KT_CHECK_MSG(first[c] == KILN__GEMM_BLAS, "class %d", c);
    char *text = slurp(path);
    KT_CHECK(text && strstr(text, "gemm_f32 128 dnnl\n") && strstr(text, "gemm_f32 2048 blas\nend\n"));
    KT_CHECK(text && strstr(text, "\npool_poll_ns 28000\n"));
    free(text);
    KT_CHECK(kiln__tune_pool_poll_ns() == FAKE_POLL_NS);
    if (!getenv("KILN_POOL_POLL_NS")) KT_CHECK(kiln__pool_poll_ns() == FAKE_POLL_NS);
    runs = 0;
    kiln__tune_use_wake_measure(no_wake); /* (read from the file: not measured) */
    decide_all(all_providers, again);
    kiln__tune_use_wake_measure(fake_wake);
    KT_CHECK_MSG(runs == 0, "measured %d times with a cache", runs);
    KT_CHECK(memcmp(first, again, sizeof first) == 0);
    KT_CHECK(kiln__tune_pool_poll_ns() == FAKE_POLL_NS);
    /* another set of libraries is another machine: its own file */
    char other[1024];
    KT_CHECK(kiln__tune_cache_path(1u << KILN__GEMM_BUILTIN, other, sizeof other) && strcmp(other, path) != 0);
    /* refresh measures again */
    setenv("KILN_TUNE", "refresh", 1);
    runs = 0;
    decide_all(all_providers, again);
    KT_CHECK(runs > 0);
    setenv("KILN_TUNE", "1", 1);
    unlink(path);
}

KT_TEST(off_measures_nothing_and_writes_nothing) {
    char path[1024];
    fresh_cache(all_providers, path, sizeof path);
    setenv("KILN_TUNE", "0", 1);
    kiln__gemm_provider d[KILN__TUNE_GEMM_CLASSES];
    runs = 0;
    decide_all(all_providers, d);
    KT_CHECK(runs == 0);
    for (int c = 0; c < KILN__TUNE_GEMM_CLASSES; c++) KT_CHECK(d[c] == KILN__GEMM_BY_RULE);
    KT_CHECK(access(path, F_OK) != 0);
    KT_CHECK(kiln__tune_pool_poll_ns() == 0);
    if (!getenv("KILN_POOL_POLL_NS")) KT_CHECK(kiln__pool_poll_ns() == KILN__POOL_POLL_RULE_NS);
    setenv("KILN_TUNE", "1", 1);
}

/* a provider that takes 0.4 s a run: the measurement runs out of time, keeps the rules and
 * writes nothing, so that a loaded machine's timings are not kept */
static void slow_runner(kiln__gemm_provider p, int64_t m, int64_t n, int64_t k, const float *a, const float *b,
                        float *c) {
    (void)p, (void)m, (void)n, (void)k, (void)a, (void)b, (void)c;
    runs++;
    fake_ns += 400000000;
}

KT_TEST(out_of_time_writes_nothing) {
    char path[1024];
    fresh_cache(all_providers, path, sizeof path);
    kiln__tune_forget();
    runs = 0;
    for (int c = 0; c < KILN__TUNE_GEMM_CLASSES; c++) {
        int64_t s = kiln__tune_gemm_class_size(c);
        KT_CHECK(kiln__tune_gemm_f32(s, s, slow_runner, all_providers, KILN__GEMM_BLAS, true) == KILN__GEMM_BY_RULE);
    }
    KT_CHECK(runs > 0 && runs <= 9);
    KT_CHECK(access(path, F_OK) != 0);
    kiln__tune_forget();
}

/* the products measured, a wake-up not (a loaded machine): the pool polls by the rule, the file
 * says "not measured", and the next run reads the products' decisions and measures the wake-up
 * alone */
KT_TEST(unmeasured_wake_keeps_the_rule_and_is_measured_next_run) {
    char path[1024];
    fresh_cache(all_providers, path, sizeof path);
    kiln__gemm_provider d[KILN__TUNE_GEMM_CLASSES];
    kiln__tune_use_wake_measure(no_wake);
    decide_all(all_providers, d);
    kiln__tune_use_wake_measure(fake_wake);
    KT_CHECK(d[0] == KILN__GEMM_DNNL && d[4] == KILN__GEMM_BLAS);
    KT_CHECK(kiln__tune_pool_poll_ns() == 0);
    if (!getenv("KILN_POOL_POLL_NS")) KT_CHECK(kiln__pool_poll_ns() == KILN__POOL_POLL_RULE_NS);
    char *text = slurp(path);
    KT_CHECK(text && strstr(text, "\npool_poll_ns 0\n"));
    free(text);
    runs = 0;
    decide_all(all_providers, d);
    KT_CHECK_MSG(runs == 0, "the products measured again (%d runs)", runs);
    KT_CHECK(d[0] == KILN__GEMM_DNNL && d[4] == KILN__GEMM_BLAS);
    KT_CHECK(kiln__tune_pool_poll_ns() == FAKE_POLL_NS);
    text = slurp(path);
    KT_CHECK(text && strstr(text, "\npool_poll_ns 28000\n") && strstr(text, "gemm_f32 2048 blas\nend\n"));
    free(text);
    unlink(path);
    kiln__tune_forget();
}

/* A machine busier than its cores: the decisions hold for the run, nothing is written, and the
 * next (quiet) run measures again. */
static double busy_load(void) { return 1000.0; }
static double quiet_load(void) { return 0.0; }

KT_TEST(loaded_machine_writes_nothing) {
    char path[1024];
    fresh_cache(all_providers, path, sizeof path);
    kiln__gemm_provider d[KILN__TUNE_GEMM_CLASSES];
    kiln__tune_use_load(busy_load);
    runs = 0;
    decide_all(all_providers, d);
    KT_CHECK(runs > 0 && d[0] == KILN__GEMM_DNNL && d[4] == KILN__GEMM_BLAS);
    KT_CHECK(access(path, F_OK) != 0);
    kiln__tune_use_load(quiet_load);
    runs = 0;
    decide_all(all_providers, d);
    KT_CHECK(runs > 0 && access(path, F_OK) == 0);
    unlink(path);
    kiln__tune_forget();
}

/* A provider faster than the rule's in some rounds only (a burst of other work on two of the
 * rule's turns) does not replace it. */
static void bursty_runner(kiln__gemm_provider p, int64_t m, int64_t n, int64_t k, const float *a, const float *b,
                          float *c) {
    (void)m, (void)n, (void)k, (void)a, (void)b, (void)c;
    runs++;
    /* the rule (oneDNN) takes 1 ms, 5 ms on its 2nd and 3rd runs; the BLAS 2 ms; ours 3 ms */
    static int dnnl_runs;
    int r = p == KILN__GEMM_DNNL ? ++dnnl_runs : 0;
    fake_ns += p == KILN__GEMM_BUILTIN ? 3000000 : p == KILN__GEMM_BLAS ? 2000000 : r == 2 || r == 3 ? 5000000 : 1000000;
}

KT_TEST(a_provider_must_win_every_round) {
    char path[1024];
    fresh_cache(all_providers, path, sizeof path);
    kiln__tune_forget();
    int64_t s = kiln__tune_gemm_class_size(0);
    KT_CHECK(kiln__tune_gemm_f32(s, s, bursty_runner, all_providers, KILN__GEMM_DNNL, true) == KILN__GEMM_DNNL);
    unlink(path);
    kiln__tune_forget();
}

KT_TEST(poll_from_wake_stays_in_bounds) {
    KT_CHECK(kiln__pool_poll_from_wake(0) == KILN__POOL_POLL_RULE_NS);
    KT_CHECK(kiln__pool_poll_from_wake(-3) == KILN__POOL_POLL_RULE_NS);
    KT_CHECK(kiln__pool_poll_from_wake(1) == KILN__POOL_POLL_MIN_NS);
    KT_CHECK(kiln__pool_poll_from_wake(7000) == FAKE_POLL_NS);
    KT_CHECK(kiln__pool_poll_from_wake(INT64_MAX) == KILN__POOL_POLL_MAX_NS);
    KT_CHECK(kiln__pool_poll_from_wake(KILN__POOL_POLL_MAX_NS / 2) == KILN__POOL_POLL_MAX_NS);
    /* the real measurement: 0 (too loaded to say) or a wake-up between 10 ns and 10 ms */
    int64_t wake = kiln__pool_measure_wake_ns();
    KT_CHECK_MSG(wake == 0 || (wake >= 1 && wake <= 10000000), "a wake-up costs %lld ns", (long long)wake);
    fprintf(stderr, "  a wake-up costs %lld ns more than a spinning hand-off here: the pool would poll %lld ns\n",
            (long long)wake, (long long)kiln__pool_poll_from_wake(wake));
}

/* each file is refused, measured again, and replaced by a good one */
KT_TEST(hostile_cache_files_are_measured_again) {
    unsigned available = 1u << KILN__GEMM_BLAS | 1u << KILN__GEMM_BUILTIN;
    char path[1024], good[512];
    fresh_cache(available, path, sizeof path);
    kiln__gemm_provider d[KILN__TUNE_GEMM_CLASSES];
    decide_all(available, d);
    char *text = slurp(path);
    KT_CHECK(text != NULL);
    snprintf(good, sizeof good, "%s", text ? text : "");
    free(text);
    size_t good_len = strlen(good);
    char huge[512], foreign[512], truncated[512], nul[512], poll_huge[512], poll_low[512], poll_sign[512],
        poll_junk[512], poll_none[512];
    snprintf(truncated, sizeof truncated, "%.*s", (int)(good_len - 4), good); /* no "end" */
    replace_line(huge, sizeof huge, good, "gemm_f32 256 ", "gemm_f32 99999999999999999999999 blas");
    replace_line(foreign, sizeof foreign, good, "gemm_f32 512 ", "gemm_f32 512 dnnl"); /* not in this build */
    replace_line(poll_huge, sizeof poll_huge, good, "pool_poll_ns ", "pool_poll_ns 99999999999999999999999");
    replace_line(poll_low, sizeof poll_low, good, "pool_poll_ns ", "pool_poll_ns 1"); /* below the bounds */
    replace_line(poll_sign, sizeof poll_sign, good, "pool_poll_ns ", "pool_poll_ns -28000");
    replace_line(poll_junk, sizeof poll_junk, good, "pool_poll_ns ", "pool_poll_ns 28000us");
    replace_line(poll_none, sizeof poll_none, good, "pool_poll_ns ", "gemm_f32 128 blas"); /* no poll line */
    memcpy(nul, good, good_len);
    nul[20] = '\0';
    char *big = malloc(10000);
    memset(big, 'x', 10000);
    struct {
        const char *text;
        size_t len;
    } cases[] = {{"", 0}, {"garbage\n", 8}, {"kiln-tune 1\n", 12}, {truncated, strlen(truncated)},
                 {huge, strlen(huge)}, {foreign, strlen(foreign)}, {nul, good_len}, {big, 10000},
                 {"kiln-tune 99\n", 13}, {poll_huge, strlen(poll_huge)}, {poll_low, strlen(poll_low)},
                 {poll_sign, strlen(poll_sign)}, {poll_junk, strlen(poll_junk)}, {poll_none, strlen(poll_none)}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        spit(path, cases[i].text, cases[i].len);
        runs = 0;
        decide_all(available, d);
        KT_CHECK_MSG(runs > 0, "case %zu was read as good", i);
        for (int c = 0; c < KILN__TUNE_GEMM_CLASSES; c++)
            KT_CHECK_MSG(d[c] == KILN__GEMM_BLAS || d[c] == KILN__GEMM_BUILTIN, "case %zu class %d: %d", i, c, d[c]);
        KT_CHECK_MSG(kiln__tune_pool_poll_ns() == FAKE_POLL_NS, "case %zu: poll %lld", i,
                     (long long)kiln__tune_pool_poll_ns());
        text = slurp(path);
        KT_CHECK_MSG(text && strcmp(text, good) == 0, "case %zu: not rewritten: %s", i, text ? text : "(none)");
        free(text);
    }
    free(big);
    unlink(path);
}

KT_TEST(unusable_places_keep_decisions_in_memory) {
    char path[1024], file[128], below[160];
    kiln__gemm_provider d[KILN__TUNE_GEMM_CLASSES];
    /* a directory where the file goes */
    fresh_cache(all_providers, path, sizeof path);
    KT_CHECK(mkdir(path, 0700) == 0);
    runs = 0;
    decide_all(all_providers, d);
    KT_CHECK(runs > 0 && d[0] == KILN__GEMM_DNNL && d[4] == KILN__GEMM_BLAS);
    struct stat st;
    KT_CHECK(stat(path, &st) == 0 && S_ISDIR(st.st_mode));
    rmdir(path);
    /* a directory that cannot be made (below a plain file) */
    snprintf(file, sizeof file, "%s/plain", dir);
    spit(file, "x", 1);
    snprintf(below, sizeof below, "%s/sub/deeper", file);
    setenv("KILN_TUNE_CACHE", below, 1);
    runs = 0;
    decide_all(all_providers, d);
    KT_CHECK(runs > 0 && d[0] == KILN__GEMM_DNNL);
    unlink(file);
    /* no directory known at all */
    unsetenv("KILN_TUNE_CACHE");
    char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL, *xdg = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
    unsetenv("HOME");
    unsetenv("XDG_CACHE_HOME");
    KT_CHECK(!kiln__tune_cache_path(all_providers, path, sizeof path));
    runs = 0;
    decide_all(all_providers, d);
    KT_CHECK(runs > 0 && d[1] == KILN__GEMM_DNNL);
    /* XDG_CACHE_HOME then HOME */
    setenv("XDG_CACHE_HOME", "/nonexistent-xdg", 1);
    KT_CHECK(kiln__tune_cache_path(all_providers, path, sizeof path) && strncmp(path, "/nonexistent-xdg/kiln/tune-", 27) == 0);
    setenv("XDG_CACHE_HOME", "relative/is/ignored", 1);
    setenv("HOME", "/nonexistent-home", 1);
    KT_CHECK(kiln__tune_cache_path(all_providers, path, sizeof path) &&
             strncmp(path, "/nonexistent-home/.cache/kiln/tune-", 35) == 0);
    if (home) setenv("HOME", home, 1);
    else unsetenv("HOME");
    if (xdg) setenv("XDG_CACHE_HOME", xdg, 1);
    else unsetenv("XDG_CACHE_HOME");
    free(home), free(xdg);
    setenv("KILN_TUNE_CACHE", dir, 1);
}

/* The real providers of this build, as gemm.c names them. */
static unsigned build_providers(void) {
    return 1u << KILN__GEMM_BUILTIN | (KILN_HAVE_CBLAS ? 1u << KILN__GEMM_BLAS : 0u) |
           (KILN_HAVE_DNNL ? 1u << KILN__GEMM_DNNL : 0u);
}

KT_TEST(user_overrides_win) {
    const char *user = getenv("KILN_GEMM_DNNL");
    if (user && *user) return; /* the user's word is the rule here */
    char path[1024];
    fresh_cache(build_providers(), path, sizeof path);
    /* a file that says: our own kernel everywhere */
    char key_file[2048];
    kiln__gemm_provider d[KILN__TUNE_GEMM_CLASSES];
    decide_all(build_providers(), d); /* fake timings, written for the build's providers */
    char *text = slurp(path);
    KT_CHECK(text != NULL);
    if (!text) return;
    char *p = key_file;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "gemm_f32 ", 9) == 0) *strrchr(line, ' ') = '\0', p += sprintf(p, "%s builtin\n", line);
        else p += sprintf(p, "%s\n", line);
    }
    free(text);
    spit(path, key_file, strlen(key_file));
    kiln__tune_forget();
    /* (KILN_ISA below the CPU's best: the rule decides, not the file, and the rows are its provider's) */
    if (strcmp(kiln__vmath_isa(), kiln__machine_facts()->avx512f ? "avx512" : "avx2") == 0 ||
        !kiln__machine_facts()->avx2) {
        KT_CHECK(kiln__gemm_f32_provider(1024, 1024) == KILN__GEMM_BUILTIN);
        KT_CHECK(kiln__gemm_f32_tile_rows(1024, 1024) == 0);
    }
    if (KILN_HAVE_DNNL) {
        kiln__gemm_dnnl_force(1);
        KT_CHECK(kiln__gemm_f32_provider(1024, 1024) == KILN__GEMM_DNNL);
        KT_CHECK(kiln__gemm_f32_tile_rows(1024, 1024) == kiln__gemm_dnnl_tile_rows(1024, 1024));
        kiln__gemm_dnnl_force(0);
        KT_CHECK(kiln__gemm_f32_provider(1024, 1024) == (KILN_HAVE_CBLAS ? KILN__GEMM_BLAS : KILN__GEMM_BUILTIN));
        kiln__gemm_dnnl_force(-1);
    }
    /* kiln's vector code capped below the CPU's best: the rule, not the measurement */
    if (kiln__machine_facts()->avx2 && kiln__vmath_force_isa("scalar") == 0) {
        KT_CHECK(kiln__gemm_f32_provider(1024, 1024) != KILN__GEMM_BUILTIN || !KILN_HAVE_CBLAS);
        kiln__vmath_force_isa(NULL);
    }
    unlink(path);
    kiln__tune_forget();
}

static float *filled(int64_t n, unsigned seed) {
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = (float)((int)((i * 2654435761u + seed) % 17) - 8) / 8.0f;
    return x;
}

/* The decision a real measurement makes, against every provider and a double reference. */
KT_TEST(measured_choice_computes_what_every_provider_does) {
    kiln__tune_use_clock(NULL);
    kiln__tune_use_wake_measure(NULL);
    setenv("KILN_TUNE_CACHE", dir, 1);
    setenv("KILN_TUNE", "refresh", 1);
    kiln__tune_forget();
    const int64_t shapes[][3] = {{100, 130, 70}, {300, 600, 400}, {64, 1100, 1000}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        float *a = filled(m * k, 1), *b = filled(k * n, 2), *c = calloc((size_t)(m * n), sizeof(float));
        float *other = calloc((size_t)(m * n), sizeof(float));
        double *want = calloc((size_t)(m * n), sizeof(double));
        for (int64_t i = 0; i < m; i++)
            for (int64_t p = 0; p < k; p++)
                for (int64_t j = 0; j < n; j++) want[i * n + j] += (double)a[i * k + p] * (double)b[p * n + j];
        kiln__gemm_f32(0, 0, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
        kiln__gemm_provider chosen = kiln__gemm_f32_provider(n, k);
        KT_CHECK(chosen > KILN__GEMM_BY_RULE && chosen < KILN__GEMM_PROVIDER_COUNT &&
                 (build_providers() >> chosen & 1u));
        double worst = 0;
        for (int64_t i = 0; i < m * n; i++) worst = fmax(worst, fabs((double)c[i] - want[i]));
        KT_CHECK_MSG(worst <= 1e-6 * (double)k, "%lld x %lld x %lld by %s: off by %g", (long long)m, (long long)n,
                     (long long)k, kiln__gemm_provider_name(chosen), worst);
        for (int p = 1; p < KILN__GEMM_PROVIDER_COUNT; p++) {
            if (!(build_providers() >> p & 1u)) continue;
            kiln__gemm_f32_with((kiln__gemm_provider)p, 0, 0, m, n, k, 1.0f, a, k, b, n, 0.0f, other, n);
            double diff = 0;
            for (int64_t i = 0; i < m * n; i++) diff = fmax(diff, fabs((double)c[i] - (double)other[i]));
            KT_CHECK_MSG(diff <= 2e-6 * (double)k, "%s differs from %s by %g", kiln__gemm_provider_name(p),
                         kiln__gemm_provider_name(chosen), diff);
        }
        free(a), free(b), free(c), free(other), free(want);
    }
    char path[1024];
    /* (written, unless the machine was too loaded to measure in time) */
    if (kiln__tune_cache_path(build_providers(), path, sizeof path)) unlink(path);
    setenv("KILN_TUNE", "0", 1);
    kiln__tune_forget();
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/kiln-tune-test-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    kiln__tune_use_clock(fake_clock);
    kiln__tune_use_wake_measure(fake_wake);
    kiln__tune_use_load(quiet_load); /* (the shared machine's load would keep every file unwritten) */
    KT_RUN(facts_are_sane);
    KT_RUN(sizes_parse_strictly);
    KT_RUN(size_classes);
    KT_RUN(cache_round_trips);
    KT_RUN(off_measures_nothing_and_writes_nothing);
    KT_RUN(out_of_time_writes_nothing);
    KT_RUN(unmeasured_wake_keeps_the_rule_and_is_measured_next_run);
    KT_RUN(poll_from_wake_stays_in_bounds);
    KT_RUN(loaded_machine_writes_nothing);
    KT_RUN(a_provider_must_win_every_round);
    KT_RUN(hostile_cache_files_are_measured_again);
    KT_RUN(unusable_places_keep_decisions_in_memory);
    KT_RUN(user_overrides_win);
    KT_RUN(measured_choice_computes_what_every_provider_does);
    rmdir(dir);
    return kt_finish();
}
