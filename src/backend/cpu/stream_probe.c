/* The streaming-store threshold from a measurement (see stream_probe.h).
 *
 * What is timed is the question the threshold answers: a buffer written and then read back,
 * once with plain stores and once with streaming ones. While the buffer fits in the cache this
 * core gets, the plain pass writes and reads cache and wins by far (8x at 1 MiB on the Xeon
 * above); once it does not, each plain store first reads its line from memory and later writes
 * it back, the reread misses anyway, and the streaming pass (a write without the read) wins
 * (0.62x at 150 MiB there). On the sizes the rule's threshold (half the L3) halved down to one
 * L2 per core, the first at which streaming wins is the threshold (smallest first, so the buffer is
 * never larger than the answer, and the process's peak memory grows by it only on a machine whose
 * cache holds that much). Timed on the thread's own CPU
 * clock, best of ROUNDS alternated rounds, so other processes' time slices do not count (their
 * use of the shared cache does: that is part of what this core gets).
 *
 * The file is read whole and must match line by line, its one number within [bottom, top] of
 * this machine; anything else is measured again. */
#include "backend/cpu/stream_probe.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/tune.h"
#include "core/core-impl.h"
#include "core/machine.h"

#if defined(__x86_64__) || defined(__i386__)
#include <emmintrin.h>
#define HAVE_STREAM 1
#else
#define HAVE_STREAM 0
#endif

#define ROUNDS 3
#define FILE_VERSION 1

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int64_t decided; /* 0: not yet */
static kiln__stream_pass _Atomic pass_fn;

int64_t kiln__stream_probe_top(void) {
    int64_t top = kiln__machine_facts()->l3_bytes / 2;
    return top < 64 ? 64 : top & ~(int64_t)63;
}

int64_t kiln__stream_probe_bottom(void) {
    const kiln__machine *mc = kiln__machine_facts();
    int64_t bottom = mc->l2_bytes * mc->cores, top = kiln__stream_probe_top();
    return bottom > top ? top : bottom;
}

static double thread_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static volatile float sink;

static double real_pass(float *buf, int64_t bytes, bool stream) {
    double t0 = thread_ns();
#if HAVE_STREAM
    int64_t n = bytes / 4;
    __m128 v = _mm_set1_ps(1.0f), s0 = _mm_setzero_ps(), s1 = _mm_setzero_ps();
    if (stream) {
        for (int64_t i = 0; i < n; i += 4) _mm_stream_ps(buf + i, v);
        _mm_sfence();
    } else {
        for (int64_t i = 0; i < n; i += 4) _mm_store_ps(buf + i, v);
    }
    for (int64_t i = 0; i < n; i += 8)
        s0 = _mm_add_ps(s0, _mm_load_ps(buf + i)), s1 = _mm_add_ps(s1, _mm_load_ps(buf + i + 4));
    float out[4];
    _mm_storeu_ps(out, _mm_add_ps(s0, s1));
    sink = out[0];
#else
    (void)buf, (void)bytes, (void)stream;
#endif
    return thread_ns() - t0;
}

int64_t kiln__stream_measure(int64_t top, int64_t bottom, kiln__stream_pass pass) {
    if (!pass) pass = real_pass;
    top &= ~(int64_t)63;
    if (top < 64 || bottom < 64 || bottom > top) return 0;
    int64_t sizes[64];
    int n = 0;
    for (int64_t s = top; s >= bottom && s >= 64 && n < 64; s = (s / 2) & ~(int64_t)63) sizes[n++] = s;
    for (int i = n - 1; i >= 0; i--) { /* smallest first: the buffer is never larger than the answer */
        int64_t s = sizes[i];
        float *buf = aligned_alloc(64, (size_t)s);
        if (!buf) return 0;
        pass(buf, s, false); /* (the pages' first touch, untimed) */
        double plain = 0, streamed = 0;
        for (int r = 0; r < ROUNDS; r++) {
            double p = pass(buf, s, false), q = pass(buf, s, true);
            if (r == 0 || p < plain) plain = p;
            if (r == 0 || q < streamed) streamed = q;
        }
        free(buf);
        kiln__tune_say("a %lld-byte write and reread: plain stores %.0f us, streaming %.0f us", (long long)s,
                       plain / 1e3, streamed / 1e3);
        if (streamed <= plain) return s; /* the cache no longer holds s */
    }
    return 0;
}

/* The file's threshold: > 0 when read and within bounds. */
static int64_t load(const char *path, const char *key) {
    char buf[1024], want[320];
    const char *why = kiln__tune_read_file(path, buf, sizeof buf);
    if (why) {
        if (*why) kiln__tune_say("%s %s; measuring again", path, why);
        return 0;
    }
    char *cursor = buf, *line;
    snprintf(want, sizeof want, "kiln-stream %d", FILE_VERSION);
    if (!(line = kiln__tune_next_line(&cursor)) || strcmp(line, want) != 0) return 0;
    snprintf(want, sizeof want, "key %s", key);
    if (!(line = kiln__tune_next_line(&cursor)) || strcmp(line, want) != 0) return 0;
    if (!(line = kiln__tune_next_line(&cursor)) || strncmp(line, "stream_bytes ", 13) != 0) return 0;
    const char *digits = line + 13;
    size_t n = strspn(digits, "0123456789");
    if (n == 0 || n > 15 || digits[n] != '\0') return 0;
    int64_t bytes = strtoll(digits, NULL, 10);
    if (bytes < kiln__stream_probe_bottom() || bytes > kiln__stream_probe_top()) return 0;
    if (!(line = kiln__tune_next_line(&cursor)) || strcmp(line, "end") != 0 || kiln__tune_next_line(&cursor)) return 0;
    return bytes;
}

static int64_t decide(void) {
    int64_t rule = kiln__stream_probe_top();
    bool off, refresh;
    kiln__tune_mode(&off, &refresh);
    if (!HAVE_STREAM || off) return rule;
    char path[1024], key[256];
    kiln__tune_key(0, key, sizeof key);
    bool have_path = kiln__tune_file_path("stream", 0, path, sizeof path);
    int64_t bytes = have_path && !refresh ? load(path, key) : 0;
    if (bytes > 0) return bytes;
    int64_t measured = kiln__stream_measure(rule, kiln__stream_probe_bottom(), atomic_load(&pass_fn));
    bytes = measured > 0 ? measured : rule;
    kiln__tune_say("outputs of %lld bytes or more are streamed (%s)", (long long)bytes,
                   measured > 0 ? "measured" : "the rule: half the L3");
    if (!have_path || !kiln__tune_machine_quiet()) return bytes; /* (this run only) */
    char text[512];
    snprintf(text, sizeof text, "kiln-stream %d\nkey %s\nstream_bytes %lld\nend\n", FILE_VERSION, key,
             (long long)bytes);
    const char *why = kiln__tune_write_file(path, text);
    if (why) kiln__tune_say("cannot write %s: %s; the threshold kept for this run", path, why);
    return bytes;
}

int64_t kiln__stream_bytes(void) {
    int64_t b = atomic_load_explicit(&decided, memory_order_acquire);
    if (b > 0) return b;
    pthread_mutex_lock(&lock);
    if ((b = atomic_load(&decided)) <= 0) atomic_store_explicit(&decided, b = decide(), memory_order_release);
    pthread_mutex_unlock(&lock);
    return b;
}

void kiln__stream_use_pass(kiln__stream_pass pass) { atomic_store(&pass_fn, pass); }

void kiln__stream_forget(void) {
    pthread_mutex_lock(&lock);
    atomic_store(&decided, 0);
    pthread_mutex_unlock(&lock);
}
