/* The streaming-store threshold measured once per machine (src/backend/cpu/stream_probe.c): the
 * measurement returns the first size, smallest up, at which streaming stores were not slower,
 * and never fills a buffer larger than that; 0 when plain stores win everywhere; the file
 * round-trips (a second decision reads it and measures nothing); KILN_TUNE=0 measures nothing,
 * writes nothing and gives the rule (half the L3); KILN_TUNE=refresh measures again; a loaded
 * machine's measurement is not written; garbage, out-of-bounds, huge-number and truncated files
 * are measured again; the fused kernel reads its threshold from it; the real pass measures a
 * sane size. The fake passes give known times, so the answers are known whatever the load. */
#include <kiln.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/fused-impl.h"
#include "backend/cpu/stream_probe.h"
#include "backend/cpu/tune.h"
#include "kiln_test.h"

static char dir[64];
static int passes;            /* calls of a fake pass */
static int64_t fake_cache;    /* the fake machine's cache: plain stores win below it */
static int64_t largest;       /* the largest buffer a fake pass was given */

static double fake_pass(float *buf, int64_t bytes, bool stream) {
    KT_CHECK(buf != NULL && bytes % 64 == 0);
    passes++;
    if (bytes > largest) largest = bytes;
    double plain = bytes < fake_cache ? (double)bytes * 0.1 : (double)bytes * 2.0;
    return stream ? (double)bytes * 1.2 : plain;
}

static double quiet_load(void) { return 0.0; }
static double busy_load(void) { return 1000.0; }

static void fresh_cache(char *path, size_t cap) {
    setenv("KILN_TUNE_CACHE", dir, 1);
    setenv("KILN_TUNE", "1", 1);
    KT_CHECK(kiln__tune_file_path("stream", 0, path, cap));
    unlink(path);
    kiln__stream_forget();
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char *buf = calloc(1, 4096);
    size_t n = fread(buf, 1, 4095, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static void spit(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

KT_TEST(measure_finds_the_first_size_streaming_wins) {
    const int64_t top = (int64_t)64 << 20, bottom = (int64_t)2 << 20;
    fake_cache = (int64_t)10 << 20, largest = 0, passes = 0;
    KT_CHECK(kiln__stream_measure(top, bottom, fake_pass) == (int64_t)16 << 20); /* 2, 4, 8: plain wins */
    KT_CHECK_MSG(largest == (int64_t)16 << 20, "largest buffer %lld", (long long)largest);
    KT_CHECK(passes > 0);
    fake_cache = top * 2; /* the cache holds every size: the rule */
    KT_CHECK(kiln__stream_measure(top, bottom, fake_pass) == 0);
    fake_cache = 0; /* streaming wins at once */
    KT_CHECK(kiln__stream_measure(top, bottom, fake_pass) == bottom);
    KT_CHECK(kiln__stream_measure(top, top * 2, fake_pass) == 0); /* no sizes: nothing measured */
    KT_CHECK(kiln__stream_measure(0, 0, fake_pass) == 0);
}

KT_TEST(bounds_are_sane) {
    int64_t top = kiln__stream_probe_top(), bottom = kiln__stream_probe_bottom();
    KT_CHECK(top >= 64 && top % 64 == 0 && bottom > 0 && bottom <= top);
}

KT_TEST(cache_round_trips) {
    char path[1024];
    fresh_cache(path, sizeof path);
    fake_cache = kiln__stream_probe_bottom() + 1, passes = 0;
    int64_t first = kiln__stream_bytes();
    KT_CHECK(passes > 0);
    KT_CHECK(first >= kiln__stream_probe_bottom() && first <= kiln__stream_probe_top());
    char *text = slurp(path), want[64];
    snprintf(want, sizeof want, "\nstream_bytes %lld\nend\n", (long long)first);
    KT_CHECK(text && strncmp(text, "kiln-stream 1\nkey ", 18) == 0 && strstr(text, want));
    free(text);
    kiln__stream_forget();
    fake_cache = INT64_MAX, passes = 0; /* (a measurement now would give the rule) */
    KT_CHECK(kiln__stream_bytes() == first);
    KT_CHECK_MSG(passes == 0, "measured %d passes with a file", passes);
    setenv("KILN_TUNE", "refresh", 1);
    kiln__stream_forget();
    KT_CHECK(kiln__stream_bytes() == kiln__stream_probe_top() && passes > 0);
    setenv("KILN_TUNE", "1", 1);
    unlink(path);
}

KT_TEST(off_measures_nothing_and_writes_nothing) {
    char path[1024];
    fresh_cache(path, sizeof path);
    setenv("KILN_TUNE", "0", 1);
    fake_cache = 0, passes = 0;
    KT_CHECK(kiln__stream_bytes() == kiln__stream_probe_top());
    KT_CHECK(passes == 0 && access(path, F_OK) != 0);
    setenv("KILN_TUNE", "1", 1);
}

KT_TEST(loaded_machine_writes_nothing) {
    char path[1024];
    fresh_cache(path, sizeof path);
    kiln__tune_use_load(busy_load);
    fake_cache = 0, passes = 0;
    int64_t b = kiln__stream_bytes(), bottom = kiln__stream_probe_bottom(); /* (the smallest size: top / 2^k) */
    KT_CHECK(b >= bottom && b < 2 * bottom && passes > 0);
    KT_CHECK(access(path, F_OK) != 0);
    kiln__tune_use_load(quiet_load);
}

KT_TEST(hostile_files_are_measured_again) {
    char path[1024], key[256], text[1024];
    int64_t top = kiln__stream_probe_top(), bottom = kiln__stream_probe_bottom();
    fresh_cache(path, sizeof path);
    kiln__tune_key(0, key, sizeof key);
    const char *bodies[] = {"", "garbage\n", "kiln-stream 1\nkey other\nstream_bytes %lld\nend\n",
                            "kiln-stream 2\nkey %s\nstream_bytes %lld\nend\n", "kiln-stream 1\nkey %s\nstream_bytes %lld\n",
                            "kiln-stream 1\nkey %s\nstream_bytes %lld\nend\nmore\n"};
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        if (strstr(bodies[i], "%s")) snprintf(text, sizeof text, bodies[i], key, (long long)bottom);
        else snprintf(text, sizeof text, bodies[i], (long long)bottom);
        spit(path, text);
        kiln__stream_forget();
        fake_cache = INT64_MAX, passes = 0;
        KT_CHECK_MSG(kiln__stream_bytes() == top && passes > 0, "file %zu", i);
    }
    const int64_t numbers[] = {top + 64, bottom - 1, 0};
    for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++) {
        snprintf(text, sizeof text, "kiln-stream 1\nkey %s\nstream_bytes %lld\nend\n", key, (long long)numbers[i]);
        spit(path, text);
        kiln__stream_forget();
        fake_cache = INT64_MAX, passes = 0;
        KT_CHECK_MSG(kiln__stream_bytes() == top && passes > 0, "number %lld", (long long)numbers[i]);
    }
    snprintf(text, sizeof text, "kiln-stream 1\nkey %s\nstream_bytes 99999999999999999999\nend\n", key);
    spit(path, text);
    kiln__stream_forget();
    passes = 0;
    KT_CHECK(kiln__stream_bytes() == top && passes > 0);
    unlink(path);
}

/* The fused kernel's threshold, undecided, comes from here (a file's value) when a group is
 * compiled. */
KT_TEST(fused_kernel_reads_the_threshold) {
    if (!kiln_engine_is_async()) { /* KILN_SYNC=1 runs each op at once: nothing groups, no fused kernel */
        printf("    synchronous engine: no group to compile, skipped\n");
        return;
    }
    char path[1024], key[256], text[1024];
    fresh_cache(path, sizeof path);
    kiln__tune_key(0, key, sizeof key);
    int64_t want = kiln__stream_probe_bottom();
    snprintf(text, sizeof text, "kiln-stream 1\nkey %s\nstream_bytes %lld\nend\n", key, (long long)want);
    spit(path, text);
    int64_t was = atomic_load(&kiln__fused_stream_bytes);
    atomic_store(&kiln__fused_stream_bytes, 0);
    bool fused = kiln_fusion_enabled();
    kiln_fusion_set_enabled(true);
    kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1 << 16));
    kiln_tensor y = kiln_add_scalar(kiln_mul_scalar(kiln_add_scalar(x, 1.0), 0.5), 2.0);
    float *out = malloc(sizeof(float) << 16);
    KT_CHECK(out && kiln_into_data(y, out, sizeof(float) << 16) == KILN_OK && out[0] == 3.0f && out[65535] == 3.0f);
    free(out);
    KT_CHECK_MSG(atomic_load(&kiln__fused_stream_bytes) == want, "threshold %lld",
                 (long long)atomic_load(&kiln__fused_stream_bytes));
    atomic_store(&kiln__fused_stream_bytes, was);
    kiln_fusion_set_enabled(fused);
    unlink(path);
}

/* The real passes on this machine: a size within the bounds, or the rule. */
KT_TEST(real_measurement_is_sane) {
    int64_t bottom = kiln__stream_probe_bottom(), top = bottom * 4 < kiln__stream_probe_top() ? bottom * 4 : kiln__stream_probe_top();
    int64_t s = kiln__stream_measure(top, bottom, NULL);
    KT_CHECK_MSG(s == 0 || (s >= bottom && s <= top), "measured %lld", (long long)s);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/kiln-stream-test-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    kiln__stream_use_pass(fake_pass);
    kiln__tune_use_load(quiet_load); /* (the shared machine's load would keep every file unwritten) */
    KT_RUN(measure_finds_the_first_size_streaming_wins);
    KT_RUN(bounds_are_sane);
    KT_RUN(cache_round_trips);
    KT_RUN(off_measures_nothing_and_writes_nothing);
    KT_RUN(loaded_machine_writes_nothing);
    KT_RUN(hostile_files_are_measured_again);
    KT_RUN(fused_kernel_reads_the_threshold);
    kiln__stream_use_pass(NULL);
    KT_RUN(real_measurement_is_sane);
    rmdir(dir);
    return kt_finish();
}
