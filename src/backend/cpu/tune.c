/* Speed decisions measured once and cached per CPU model (see tune.h).
 *
 * The measurement: for each size class, an s x s x s product up to 512; above, s x s with 128
 * rows per pool thread (at least 256), which keeps oneDNN's 256-row tiles and OpenBLAS's
 * threads busy at a fraction of the time. Each provider the build has runs once to warm up
 * (oneDNN compiles its kernels on a shape's first call), then TUNE_ROUNDS rounds time each in
 * turn, and another provider replaces the rule's only where it was faster in every round (see
 * measure()). The whole took 0.6-0.9 s on 2 loaded cores (AMD EPYC, Zen 5, two timed runs each),
 * and stops at TUNE_BUDGET_NS on a machine so loaded that it would take longer (at load 22 there,
 * 2 s for three classes): the classes left unmeasured keep the rule, and nothing is written, so
 * the next run measures again. Nor is anything written when the load average was above the core
 * count: the decisions hold for that run only.
 *
 * With them, the intra-op pool's poll (pool_poll.c): what a wake-up costs here, measured after the
 * products (1-3 ms), and the poll derived from it. A machine too loaded to measure it (its two
 * threads did not get a core each) keeps the rule for this run and writes 0, "not measured": the
 * next run reads the products' decisions and measures the wake-up alone.
 *
 * The file is read whole (at most FILE_MAX bytes) and must match line by line: the header, the
 * key, the pool's poll, one line per class naming a provider the build has, and `end` (a
 * truncated file lacks it). The one number in it, the poll, must be at most 9 digits and 0 or
 * within the bounds a measurement can give, so no value in it can be out of range. It is written to a
 * temporary name and renamed, so a reader never sees half a file. */
#include "backend/cpu/tune.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend/cpu/pool_poll.h"
#include "backend/cpu/threadpool.h"
#include "core/core-impl.h"
#include "core/machine.h"

#define TUNE_VERSION 3 /* 2: the pool's poll; 3: a provider other than the rule's only if faster in every round, nothing written under load */
/* A provider other than the rule's must take at most this share of the rule's time. */
#define TUNE_MARGIN 0.95
#define TUNE_BUDGET_NS 1500000000ull
#define TUNE_ROUNDS 3
#define FILE_MAX 4096
#define PATH_CAP 1024

static const int64_t class_sizes[KILN__TUNE_GEMM_CLASSES] = {128, 256, 512, 1024, 2048};

static struct {
    pthread_mutex_t lock;
    atomic_bool ready;
    kiln__gemm_provider gemm[KILN__TUNE_GEMM_CLASSES];
    int64_t pool_poll_ns; /* 0: the rule */
} tuned = {.lock = PTHREAD_MUTEX_INITIALIZER};

int kiln__tune_gemm_class(int64_t n, int64_t k) {
    double s = sqrt((double)(n > 0 ? n : 1) * (double)(k > 0 ? k : 1));
    for (int c = 0; c + 1 < KILN__TUNE_GEMM_CLASSES; c++)
        if (s < (double)class_sizes[c] * 1.4142135623730951) return c;
    return KILN__TUNE_GEMM_CLASSES - 1;
}

int64_t kiln__tune_gemm_class_size(int cls) {
    return cls >= 0 && cls < KILN__TUNE_GEMM_CLASSES ? class_sizes[cls] : 0;
}

const char *kiln__gemm_provider_name(kiln__gemm_provider p) {
    switch (p) {
    case KILN__GEMM_DNNL: return "dnnl";
    case KILN__GEMM_BLAS: return "blas";
    case KILN__GEMM_BUILTIN: return "builtin";
    default: return "rule";
    }
}

void kiln__tune_say(const char *fmt, ...) {
    if (!kiln__env_flag("KILN_VERBOSE", false)) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("kiln: tune: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
#define say kiln__tune_say

/* ---- the cache file ----------------------------------------------------------------------- */

/* What the decisions depend on: the CPU, the threads they were timed with, the libraries. */
static void make_key(unsigned available, char *out, size_t cap) {
    const kiln__machine *mc = kiln__machine_facts();
    char providers[64] = "";
    for (int p = 1; p < KILN__GEMM_PROVIDER_COUNT; p++)
        if (available >> p & 1u) {
            strcat(providers, " ");
            strcat(providers, kiln__gemm_provider_name((kiln__gemm_provider)p));
        }
    snprintf(out, cap, "%s|family %d model %d|cores %d threads %d|providers%s|tune %d", mc->model_name, mc->family,
             mc->model, mc->cores, kiln__pool_threads(), providers, TUNE_VERSION);
}

static bool cache_dir(char *out, size_t cap) {
    const char *d = getenv("KILN_TUNE_CACHE");
    int n = -1;
    if (d && *d) n = snprintf(out, cap, "%s", d);
    else if ((d = getenv("XDG_CACHE_HOME")) && d[0] == '/') n = snprintf(out, cap, "%s/kiln", d);
    else if ((d = getenv("HOME")) && *d) n = snprintf(out, cap, "%s/.cache/kiln", d);
    return n > 0 && (size_t)n < cap;
}

void kiln__tune_key(unsigned available, char *out, size_t cap) { make_key(available, out, cap); }

bool kiln__tune_file_path(const char *kind, unsigned available, char *out, size_t cap) {
    char dir[PATH_CAP], key[256];
    if (!cache_dir(dir, sizeof dir)) return false;
    make_key(available, key, sizeof key);
    uint64_t h = 14695981039346656037ull; /* FNV-1a: one file per key, side by side */
    for (const char *p = key; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    int n = snprintf(out, cap, "%s/%s-%016llx.txt", dir, kind, (unsigned long long)h);
    return n > 0 && (size_t)n < cap;
}

bool kiln__tune_cache_path(unsigned available, char *out, size_t cap) {
    return kiln__tune_file_path("tune", available, out, cap);
}

/* The next line of *cursor (NUL-terminated in place), or NULL at the end. */
static char *next_line(char **cursor) {
    char *line = *cursor;
    if (!line || !*line) return NULL;
    char *nl = strchr(line, '\n');
    if (nl) *nl = '\0', *cursor = nl + 1;
    else *cursor = line + strlen(line);
    return line;
}

const char *kiln__tune_read_file(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return errno == ENOENT ? "" : "cannot be opened";
    size_t n = fread(buf, 1, cap, f);
    bool failed = ferror(f);
    fclose(f);
    if (failed) return "cannot be read";
    if (n >= cap) return "is too large";
    buf[n] = '\0';
    if (strlen(buf) != n) return "holds a NUL byte";
    return NULL;
}

char *kiln__tune_next_line(char **cursor) { return next_line(cursor); }

/* Reads the decisions for key from path: NULL when read; "" when there is no file; else why the
 * file was not used. */
static const char *load(const char *path, const char *key, unsigned available,
                        kiln__gemm_provider out[KILN__TUNE_GEMM_CLASSES], int64_t *poll_ns) {
    static char buf[FILE_MAX + 1]; /* (under tuned.lock) */
    const char *why = kiln__tune_read_file(path, buf, sizeof buf);
    if (why) return why;
    char *cursor = buf, *line, want[300];
    snprintf(want, sizeof want, "kiln-tune %d", TUNE_VERSION);
    if (!(line = next_line(&cursor)) || strcmp(line, want) != 0) return "has another header";
    snprintf(want, sizeof want, "key %s", key);
    if (!(line = next_line(&cursor)) || strcmp(line, want) != 0) return "is for another machine";
    if (!(line = next_line(&cursor)) || strncmp(line, "pool_poll_ns ", 13) != 0) return "is corrupt";
    const char *digits = line + 13;
    size_t n_digits = strspn(digits, "0123456789");
    if (n_digits == 0 || n_digits > 9 || digits[n_digits] != '\0') return "is corrupt";
    *poll_ns = strtoll(digits, NULL, 10);
    if (*poll_ns != 0 && (*poll_ns < KILN__POOL_POLL_MIN_NS || *poll_ns > KILN__POOL_POLL_MAX_NS)) return "is corrupt";
    for (int c = 0; c < KILN__TUNE_GEMM_CLASSES; c++) {
        int prefix = snprintf(want, sizeof want, "gemm_f32 %lld ", (long long)class_sizes[c]);
        if (!(line = next_line(&cursor)) || strncmp(line, want, (size_t)prefix) != 0) return "is corrupt";
        out[c] = KILN__GEMM_PROVIDER_COUNT;
        for (int p = 0; p < KILN__GEMM_PROVIDER_COUNT; p++)
            if (strcmp(line + prefix, kiln__gemm_provider_name((kiln__gemm_provider)p)) == 0 &&
                (p == KILN__GEMM_BY_RULE || available >> p & 1u))
                out[c] = (kiln__gemm_provider)p;
        if (out[c] == KILN__GEMM_PROVIDER_COUNT) return "names a provider this build lacks";
    }
    if (!(line = next_line(&cursor)) || strcmp(line, "end") != 0 || next_line(&cursor)) return "is truncated or corrupt";
    return NULL;
}

/* mkdir -p, private to the user as XDG asks */
static bool make_dirs(const char *dir) {
    char p[PATH_CAP];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = '\0';
        if (mkdir(p, 0700) != 0 && errno != EEXIST) return false;
        *s = '/';
    }
    if (mkdir(p, 0700) != 0 && errno != EEXIST) return false;
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

const char *kiln__tune_write_file(const char *path, const char *text) {
    char dir[PATH_CAP], tmp[PATH_CAP + 32];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) *slash = '\0';
    if (slash && !make_dirs(dir)) return "its directory cannot be made";
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return "a file cannot be made there";
    fputs(text, f);
    bool failed = ferror(f) != 0;
    if (fclose(f) != 0) failed = true;
    if (failed || rename(tmp, path) != 0) {
        remove(tmp);
        return failed ? "writing failed" : "it cannot be replaced";
    }
    return NULL;
}

/* Writes the decisions: NULL, or why not. */
static const char *store(const char *path, const char *key, const kiln__gemm_provider d[KILN__TUNE_GEMM_CLASSES],
                         int64_t poll_ns) {
    char text[FILE_MAX + 1];
    int n = snprintf(text, sizeof text, "kiln-tune %d\nkey %s\npool_poll_ns %lld\n", TUNE_VERSION, key,
                     (long long)poll_ns);
    for (int c = 0; c < KILN__TUNE_GEMM_CLASSES && n > 0 && (size_t)n < sizeof text; c++)
        n += snprintf(text + n, sizeof text - (size_t)n, "gemm_f32 %lld %s\n", (long long)class_sizes[c],
                      kiln__gemm_provider_name(d[c]));
    if (n > 0 && (size_t)n < sizeof text) n += snprintf(text + n, sizeof text - (size_t)n, "end\n");
    if (n <= 0 || (size_t)n >= sizeof text) return "the decisions do not fit a file"; /* (a key past FILE_MAX) */
    return kiln__tune_write_file(path, text);
}

/* ---- the measurement ---------------------------------------------------------------------- */

static uint64_t monotonic_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static uint64_t (*_Atomic clock_fn)(void) = monotonic_ns;

void kiln__tune_use_clock(uint64_t (*now)(void)) { atomic_store(&clock_fn, now ? now : monotonic_ns); }

static uint64_t now_ns(void) { return atomic_load_explicit(&clock_fn, memory_order_relaxed)(); }

static int64_t (*_Atomic wake_fn)(void) = kiln__pool_measure_wake_ns;

void kiln__tune_use_wake_measure(int64_t (*measure)(void)) {
    atomic_store(&wake_fn, measure ? measure : kiln__pool_measure_wake_ns);
}

/* The pool's poll from a wake-up's measured cost; 0 when the machine was too loaded to say. */
static int64_t measure_pool_poll(void) {
    int64_t wake = atomic_load(&wake_fn)();
    if (wake <= 0) {
        say("a wake-up could not be measured (a loaded machine?); the pool polls %d ns (the rule), and the next run "
            "measures again", KILN__POOL_POLL_RULE_NS);
        return 0;
    }
    int64_t poll = kiln__pool_poll_from_wake(wake);
    say("a wake-up costs %lld ns more than a spinning hand-off: the pool polls %lld ns", (long long)wake,
        (long long)poll);
    return poll;
}

/* What the machine's other work weighs now: the 1-minute load average (tests: a fixed one). */
static double system_load(void) {
    double l[1];
    return getloadavg(l, 1) == 1 ? l[0] : 0.0;
}

static double (*_Atomic load_fn)(void) = system_load;

void kiln__tune_use_load(double (*fn)(void)) { atomic_store(&load_fn, fn ? fn : system_load); }

bool kiln__tune_machine_quiet(void) { return atomic_load(&load_fn)() <= (double)kiln__machine_facts()->cores; }

/* Fills out; false when the decisions must not be written: the time ran out first (a machine that
 * loaded measures nothing worth keeping: the classes left keep the rule for this run, and the next
 * run measures again), or the machine was busier than its cores (what was measured holds for this
 * run only). Each provider runs once to warm up (oneDNN compiles its kernels on a shape's first
 * call), then TUNE_ROUNDS rounds time every provider in turn, so a burst of other work falls on all
 * of them alike; a provider replaces the rule's only if it was at least 1 - TUNE_MARGIN faster in
 * every round (a provider chosen on a loaded minute stayed in the cache for good: 1024 and 2048 to
 * OpenBLAS, at half oneDNN's speed, measured at load 8 beside other sessions' compilers). */
static bool measure(kiln__tune_gemm_runner run, unsigned available, kiln__gemm_provider rule,
                    kiln__gemm_provider out[KILN__TUNE_GEMM_CLASSES]) {
    for (int c = 0; c < KILN__TUNE_GEMM_CLASSES; c++) out[c] = KILN__GEMM_BY_RULE;
    int64_t big = class_sizes[KILN__TUNE_GEMM_CLASSES - 1], tall = 128 * (int64_t)kiln__pool_threads();
    if (tall < 256) tall = 256;
    float *a = malloc(sizeof(float) * (size_t)(big * big)), *b = malloc(sizeof(float) * (size_t)(big * big));
    float *c = malloc(sizeof(float) * (size_t)(big * big));
    if (!a || !b || !c) {
        say("no memory to measure in; the rules decide");
        free(a), free(b), free(c);
        return false;
    }
    for (int64_t i = 0; i < big * big; i++) a[i] = (float)(i % 7 - 3) * 0.125f, b[i] = (float)(i % 5 - 2) * 0.25f;
    uint64_t start = now_ns();
    for (int cls = 0; cls < KILN__TUNE_GEMM_CLASSES; cls++) {
        int64_t s = class_sizes[cls], m = s <= 512 ? s : (tall < s ? tall : s);
        double t[TUNE_ROUNDS][KILN__GEMM_PROVIDER_COUNT] = {{0}}, best[KILN__GEMM_PROVIDER_COUNT] = {0};
        bool late = false;
        for (int p = 1; p < KILN__GEMM_PROVIDER_COUNT && !late; p++) {
            if (!(available >> p & 1u)) continue;
            if (!(late = now_ns() - start > TUNE_BUDGET_NS)) run((kiln__gemm_provider)p, m, s, s, a, b, c);
        }
        for (int r = 0; r < TUNE_ROUNDS && !late; r++) {
            for (int p = 1; p < KILN__GEMM_PROVIDER_COUNT && !late; p++) {
                if (!(available >> p & 1u)) continue;
                if ((late = now_ns() - start > TUNE_BUDGET_NS)) break;
                uint64_t t0 = now_ns();
                run((kiln__gemm_provider)p, m, s, s, a, b, c);
                double dt = (double)(now_ns() - t0);
                t[r][p] = dt > 1 ? dt : 1;
                if (best[p] == 0 || t[r][p] < best[p]) best[p] = t[r][p];
            }
        }
        char line[200];
        int len = snprintf(line, sizeof line, "gemm f32 %lld x %lld x %lld:", (long long)m, (long long)s, (long long)s);
        for (int p = 1; p < KILN__GEMM_PROVIDER_COUNT; p++)
            if (best[p] > 0 && len > 0 && (size_t)len < sizeof line)
                len += snprintf(line + len, sizeof line - (size_t)len, " %s %.1f", kiln__gemm_provider_name(p),
                                2.0 * (double)m * (double)s * (double)s / best[p]);
        if (late) {
            say("%s out of time (a loaded machine?); the rule decides from here, and nothing is written", line);
            free(a), free(b), free(c);
            return false;
        }
        kiln__gemm_provider win = KILN__GEMM_BY_RULE;
        for (int p = 1; p < KILN__GEMM_PROVIDER_COUNT; p++) {
            if (best[p] > 0 && (win == KILN__GEMM_BY_RULE || best[p] < best[win])) win = (kiln__gemm_provider)p;
        }
        /* the rule's choice stays unless the winner was clearly faster in every round */
        for (int r = 0; r < TUNE_ROUNDS && best[rule] > 0 && win != rule; r++)
            if (t[r][win] > TUNE_MARGIN * t[r][rule]) win = rule;
        out[cls] = win;
        say("%s GFLOP/s -> %s", line, kiln__gemm_provider_name(win));
    }
    double ms = (double)(now_ns() - start) / 1e6;
    free(a), free(b), free(c);
    bool in_time = ms <= 1e-6 * (double)TUNE_BUDGET_NS;
    bool quiet = kiln__tune_machine_quiet();
    say("measured in %.0f ms%s", ms,
        !in_time ? ": too long (a loaded machine?), not written"
        : !quiet ? ": the machine is busier than its cores (load average above them), not written"
                 : "");
    return in_time && quiet;
}

void kiln__tune_mode(bool *off, bool *refresh) {
    const char *v = getenv("KILN_TUNE");
    *refresh = v && strcasecmp(v, "refresh") == 0;
    *off = !*refresh && !kiln__env_flag("KILN_TUNE", true);
}

static void decide(kiln__tune_gemm_runner run, unsigned available, kiln__gemm_provider rule) {
    for (int c = 0; c < KILN__TUNE_GEMM_CLASSES; c++) tuned.gemm[c] = KILN__GEMM_BY_RULE;
    tuned.pool_poll_ns = 0;
    bool off, refresh;
    kiln__tune_mode(&off, &refresh);
    if (off || !run) {
        say("KILN_TUNE=0: the rules decide");
        return;
    }
    char path[PATH_CAP], key[256];
    make_key(available, key, sizeof key);
    bool have_path = kiln__tune_cache_path(available, path, sizeof path);
    if (have_path && !refresh) {
        int64_t poll_ns = 0;
        const char *why = load(path, key, available, tuned.gemm, &poll_ns);
        if (!why) {
            tuned.pool_poll_ns = poll_ns; /* (a file refused after its poll line does not set it) */
            say("decisions from %s", path);
            if (poll_ns || !(tuned.pool_poll_ns = measure_pool_poll())) return;
            why = store(path, key, tuned.gemm, tuned.pool_poll_ns); /* the poll it lacked */
            if (why) say("cannot write %s: %s; the poll kept for this run", path, why);
            return;
        }
        if (*why) say("%s %s; measuring again", path, why);
    }
    if (!measure(run, available, rule, tuned.gemm)) return;
    tuned.pool_poll_ns = measure_pool_poll(); /* (0, the rule, is written as "not measured") */
    if (!have_path) {
        say("no cache directory (KILN_TUNE_CACHE, XDG_CACHE_HOME, HOME); decisions kept for this run");
        return;
    }
    const char *why = store(path, key, tuned.gemm, tuned.pool_poll_ns);
    if (why) say("cannot write %s: %s; decisions kept for this run", path, why);
    else say("decisions written to %s", path);
}

kiln__gemm_provider kiln__tune_gemm_f32(int64_t n, int64_t k, kiln__tune_gemm_runner run, unsigned available,
                                        kiln__gemm_provider rule, bool may_measure) {
    int cls = kiln__tune_gemm_class(n, k);
    if (!atomic_load_explicit(&tuned.ready, memory_order_acquire)) {
        if (!may_measure) return KILN__GEMM_BY_RULE;
        pthread_mutex_lock(&tuned.lock);
        if (!atomic_load_explicit(&tuned.ready, memory_order_relaxed)) {
            decide(run, available, rule);
            kiln__pool_set_poll_ns(tuned.pool_poll_ns); /* (0: the rule) */
            atomic_store_explicit(&tuned.ready, true, memory_order_release);
        }
        pthread_mutex_unlock(&tuned.lock);
    }
    return tuned.gemm[cls];
}

void kiln__tune_forget(void) {
    pthread_mutex_lock(&tuned.lock);
    atomic_store(&tuned.ready, false);
    pthread_mutex_unlock(&tuned.lock);
}

int64_t kiln__tune_pool_poll_ns(void) {
    pthread_mutex_lock(&tuned.lock);
    int64_t ns = atomic_load(&tuned.ready) ? tuned.pool_poll_ns : 0;
    pthread_mutex_unlock(&tuned.lock);
    return ns;
}
