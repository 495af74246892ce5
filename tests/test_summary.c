/* The TensorBoard summary writer (kiln/summary.h): CRC32C and the record framing, histograms
 * computed on the device against a double-precision count on the host, the event file's
 * records, a corrupted record caught by its CRC, and every bad input (NULL and closed writers,
 * unwritable directories, poisoned and wrong-sized tensors) as a clear error while logging
 * goes on.
 *
 *   test_summary              the tests
 *   test_summary --write DIR  writes the events that tests/test_summary_tensorboard.py reads
 *                             back with TensorBoard's own reader (and DIR/histogram.f64, the
 *                             histogram's values, for NumPy) */
#define _GNU_SOURCE /* memmem */
#include <kiln.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln_test.h"
#include "train/summary-impl.h"

static char tmp_root[256];

static const char *tmp_dir(const char *name) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmp_root, name);
    return path;
}

/* The only event file in dir (its path in out); false when there is not exactly one. */
static bool event_file(const char *dir, char *out, size_t cap) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "ls %s/events.out.tfevents.* 2>/dev/null", dir);
    FILE *p = popen(cmd, "r");
    if (!p) return false;
    int n = 0;
    char line[600];
    while (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = '\0';
        if (n++ == 0) snprintf(out, cap, "%s", line);
    }
    pclose(p);
    return n == 1;
}

/* Every record of a file: how many, whether all CRCs held, and whether `needle` is in one. */
static int count_records(const char *path, bool *corrupt, const char *needle, bool *found) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    int n = 0, r;
    uint8_t *data;
    size_t len;
    *corrupt = false;
    if (found) *found = false;
    while ((r = kiln__record_read(f, &data, &len)) == 1) {
        n++;
        if (found && len >= strlen(needle) && memmem(data, len, needle, strlen(needle))) *found = true;
        free(data);
    }
    if (r < 0) *corrupt = true;
    fclose(f);
    return n;
}

/* A varint at *p (advanced), within end. */
static uint64_t varint(const uint8_t **p, const uint8_t *end) {
    uint64_t v = 0;
    for (int shift = 0; *p < end && shift < 64; shift += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) break;
    }
    return v;
}

/* The simple_value of the scalar event (tag, step) in the file at path, decoding the layout the
 * writer uses (Event{1: wall_time, 2: step, 5: Summary{1: Value{1: tag, 2: float}}}); false if
 * there is none. */
static bool scalar_at(const char *path, const char *tag, int64_t step, float *value) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    uint8_t *data;
    size_t len;
    bool found = false;
    while (!found && kiln__record_read(f, &data, &len) == 1) {
        const uint8_t *p = data, *end = data + len;
        int64_t s = 0;
        if (p < end && *p == 0x09) p += 9;
        if (p < end && *p == 0x10) p++, s = (int64_t)varint(&p, end);
        if (p < end && *p == 0x2A && s == step) {
            p++, varint(&p, end);          /* Summary's length */
            if (p < end && *p++ == 0x0A) { /* one Value */
                varint(&p, end);
                if (p < end && *p++ == 0x0A) {
                    size_t n = (size_t)varint(&p, end);
                    if (n == strlen(tag) && p + n + 5 <= end && !memcmp(p, tag, n) && p[n] == 0x15) {
                        memcpy(value, p + n + 1, 4);
                        found = true;
                    }
                }
            }
        }
        free(data);
    }
    fclose(f);
    return found;
}

KT_TEST(crc32c_known_values) {
    KT_CHECK(kiln__crc32c("123456789", 9) == 0xE3069283u); /* RFC 3720's check value */
    KT_CHECK(kiln__crc32c("", 0) == 0);
    uint8_t zeros[32] = {0};
    KT_CHECK(kiln__crc32c(zeros, 32) == 0x8A9136AAu); /* RFC 3720 B.4: 32 bytes of zeros */
    uint32_t c = 0xE3069283u;
    KT_CHECK(kiln__crc32c_masked("123456789", 9) == ((c >> 15) | (c << 17)) + 0xA282EAD8u);
}

/* The bucket of v among the edges by bisection in double: numpy.histogram's rule (half-open
 * buckets, the last one closed), -1 outside. */
static int host_bucket(const double *e, int n, double v) {
    if (!(v >= e[0] && v <= e[n - 1])) return -1;
    if (v == e[n - 1]) return n - 2;
    int lo = 0, hi = n - 1; /* e[lo] <= v < e[hi] */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (v >= e[mid]) lo = mid;
        else hi = mid;
    }
    return lo;
}

KT_TEST(histogram_counts_match_the_host) {
    kt_mem_begin();
    const double *e;
    int n = kiln__histogram_edges(&e), buckets = n - 1;
    KT_CHECK(n == 1549 && e[774] == 0.0 && e[775] == 1e-12 && e[773] == -1e-12);
    enum { N = 3000 };
    static double v[N];
    uint64_t s = 12345;
    for (int i = 0; i < N; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(s >> 11) / 9007199254740992.0;
        v[i] = (u - 0.5) * pow(10.0, (double)(i % 40) - 20.0); /* 40 decades, both signs */
    }
    for (int i = 0; i < 200; i++) v[i] = e[(i * 7) % n]; /* exactly on edges: the off-by-one cases */
    v[200] = 0.0, v[201] = -0.0, v[202] = NAN, v[203] = INFINITY, v[204] = -INFINITY, v[205] = 1e30, v[206] = e[n - 1];
    v[207] = 5e-13, v[208] = -5e-13, v[209] = 1e-300;
    kiln_tensor t = kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(N), v);
    double *got = malloc((size_t)(buckets + 4) * sizeof *got);
    KT_CHECK(kiln_into_data(kiln__histogram_compute(t), got, (size_t)(buckets + 4) * sizeof *got) == KILN_OK);
    double *want = calloc((size_t)buckets, sizeof *want), sum = 0, sq = 0, mn = INFINITY, mx = -INFINITY;
    for (int i = 0; i < N; i++) {
        int b = host_bucket(e, n, v[i]);
        if (b >= 0) want[b]++;
    }
    int wrong = 0;
    for (int b = 0; b < buckets; b++) wrong += got[4 + b] != want[b];
    KT_CHECK_MSG(wrong == 0, "%d buckets differ", wrong);
    KT_CHECK(isnan(got[0]) || isnan(got[1])); /* a NaN among the values: min/max/sum are NaN, as NumPy */
    /* f32 values (counted in f32 against the f32 edges that stand for the f64 ones): each edge
     * rounded, and its f32 neighbours on both sides, against the host's count in double */
    static float f32v[3 * 1549 + 4];
    int nf = 0;
    for (int i = 0; i < n; i++) {
        float r = (float)e[i];
        f32v[nf++] = r, f32v[nf++] = nextafterf(r, INFINITY), f32v[nf++] = nextafterf(r, -INFINITY);
    }
    f32v[nf++] = NAN, f32v[nf++] = INFINITY, f32v[nf++] = 3e38f, f32v[nf++] = 1e-40f; /* a subnormal */
    kiln_tensor t32 = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(nf), f32v);
    KT_CHECK(kiln_into_data(kiln__histogram_compute(t32), got, (size_t)(buckets + 4) * sizeof *got) == KILN_OK);
    memset(want, 0, (size_t)buckets * sizeof *want);
    for (int i = 0; i < nf; i++) {
        int b = host_bucket(e, n, (double)f32v[i]);
        if (b >= 0) want[b]++;
    }
    wrong = 0;
    for (int b = 0; b < buckets; b++) wrong += got[4 + b] != want[b];
    KT_CHECK_MSG(wrong == 0, "f32: %d buckets differ", wrong);
    /* the statistics of finite values only, in f32 as a parameter would be */
    float f[5] = {-2.5f, 0.0f, 1e-13f, 3.0f, 1e-3f};
    kiln_tensor ft = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(5), f);
    KT_CHECK(kiln_into_data(kiln__histogram_compute(ft), got, (size_t)(buckets + 4) * sizeof *got) == KILN_OK);
    for (int i = 0; i < 5; i++) sum += f[i], sq += (double)f[i] * f[i], mn = fmin(mn, f[i]), mx = fmax(mx, f[i]);
    KT_NEAR(got[0], mn, 0);
    KT_NEAR(got[1], mx, 0);
    KT_NEAR(got[2], sum, 1e-15);
    KT_NEAR(got[3], sq, 1e-15);
    /* trimmed as torch writes it: from one empty bucket left of the first value to the last */
    double limits[1600], counts[1600];
    kiln__histogram_proto h;
    KT_CHECK(kiln__histogram_trim(got, 5, limits, counts, &h));
    int first = host_bucket(e, n, -2.5), last = host_bucket(e, n, 3.0);
    KT_CHECK(h.buckets == (size_t)(last - first + 2) && counts[0] == 0 && limits[0] == e[first]);
    KT_CHECK(limits[h.buckets - 1] == e[last + 1] && counts[h.buckets - 1] == 1 && h.num == 5);
    double total = 0;
    for (size_t i = 0; i < h.buckets; i++) total += counts[i];
    KT_CHECK(total == 5);
    free(got);
    free(want);
    KT_MEM_CHECK();
}

static kiln_status write_events(const char *dir, int64_t steps, char *path, size_t cap) {
    kiln_summary_writer *w = kiln_summary_writer_open(dir);
    if (!w) return kiln_last_status();
    snprintf(path, cap, "%s", kiln_summary_writer_path(w));
    kiln_status st = KILN_OK;
    for (int64_t i = 0; i < steps && st == KILN_OK; i++) {
        st = kiln_summary_writer_add_scalar(w, "train/lr", 0.1 / (double)(i + 1), i);
        kiln_tensor loss = kiln_full(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE, 2.0 - 0.125 * (double)i);
        if (st == KILN_OK) st = kiln_summary_writer_add_scalar_tensor(w, "train/loss", kiln_exp(kiln_log(loss)), i);
        kiln_tensor hits = kiln_full(KILN_CPU, KILN_I64, KILN_SHAPE(1, 1), (double)(i * 3));
        if (st == KILN_OK) st = kiln_summary_writer_add_scalar_tensor(w, "train/hits", hits, i);
    }
    /* a histogram of values whose bucket edges matter: written beside the events for NumPy */
    enum { N = 5000 };
    static double v[N];
    uint64_t s = 99;
    for (int i = 0; i < N; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = ((double)(s >> 11) / 9007199254740992.0 - 0.5) * (i % 3 ? 0.2 : 7.0);
    }
    kiln_tensor h = kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(50, 100), v);
    if (st == KILN_OK) st = kiln_summary_writer_add_histogram(w, "fc1/weight", kiln_ref(h), 3);
    kiln_tensor h32 = kiln_cast(h, KILN_F32);
    if (st == KILN_OK) st = kiln_summary_writer_add_histogram(w, "fc1/weight32", h32, 4);
    if (st == KILN_OK) st = kiln_summary_writer_add_text(w, "notes", "kiln **run** 1: lr 0.1, ünïcode", 2);
    kiln_status cl = kiln_summary_writer_close(w);
    kiln_summary_writer_free(w);
    char raw[600];
    snprintf(raw, sizeof raw, "%s/histogram.f64", dir);
    FILE *f = fopen(raw, "wb");
    if (!f || fwrite(v, sizeof v, 1, f) != 1) st = KILN_ERR_IO;
    if (f) fclose(f);
    return st != KILN_OK ? st : cl;
}

KT_TEST(events_written_and_read_back) {
    kt_mem_begin();
    char path[600], found_path[600];
    KT_CHECK(write_events(tmp_dir("run1/sub"), 10, path, sizeof path) == KILN_OK);
    KT_CHECK(event_file(tmp_dir("run1/sub"), found_path, sizeof found_path) && !strcmp(path, found_path));
    KT_CHECK(strstr(path, "events.out.tfevents.") != NULL);
    bool corrupt, found;
    /* file version + 10 x 3 scalars + 2 histograms + 1 text */
    KT_CHECK(count_records(path, &corrupt, "brain.Event:2", &found) == 34 && !corrupt && found);
    float v = 0;
    KT_CHECK(scalar_at(path, "train/hits", 4, &v) && v == 12.0f);
    KT_CHECK(scalar_at(path, "train/lr", 3, &v) && v == (float)(0.1 / 4));
    KT_CHECK(scalar_at(path, "train/loss", 0, &v) && fabsf(v - 2.0f) <= 4e-7f);
    count_records(path, &corrupt, "fc1/weight32", &found);
    KT_CHECK(found);
    count_records(path, &corrupt, "ünïcode", &found);
    KT_CHECK(found);
    /* a flipped bit anywhere is caught: in a length, in data */
    FILE *f = fopen(path, "r+b");
    KT_CHECK(f != NULL);
    if (f) {
        fseek(f, 40, SEEK_SET);
        int c = fgetc(f);
        fseek(f, 40, SEEK_SET);
        fputc(c ^ 0x10, f);
        fclose(f);
    }
    int n = count_records(path, &corrupt, "x", NULL);
    KT_CHECK(corrupt && n < 34);
    KT_MEM_CHECK();
}

KT_TEST(flush_makes_events_visible) {
    kt_mem_begin();
    kiln_summary_writer *w = kiln_summary_writer_open(tmp_dir("flush"));
    KT_CHECK(w != NULL);
    if (!w) return;
    bool corrupt;
    KT_CHECK(count_records(kiln_summary_writer_path(w), &corrupt, "", NULL) == 1); /* the version, at once */
    for (int i = 0; i < 5; i++) kiln_summary_writer_add_scalar_tensor(w, "x", kiln_full(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE, i), i);
    KT_CHECK(kiln_summary_writer_flush(w) == KILN_OK);
    KT_CHECK(count_records(kiln_summary_writer_path(w), &corrupt, "", NULL) == 6 && !corrupt);
    KT_CHECK(kiln_summary_writer_flush(w) == KILN_OK); /* nothing new: returns too */
    KT_CHECK(kiln_summary_writer_close(w) == KILN_OK);
    kiln_summary_writer_free(w);
    KT_MEM_CHECK();
}

KT_TEST(unwritable_directory_is_an_error_and_training_goes_on) {
    kt_mem_begin();
    /* a path through a regular file cannot become a directory (whoever runs the test) */
    const char *file = tmp_dir("plain_file");
    FILE *f = fopen(file, "w");
    if (f) fclose(f);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/logs", file);
    kiln_summary_writer *w = kiln_summary_writer_open(dir); int line = __LINE__;
    KT_CHECK(w == NULL);
    KT_EXPECT_ERROR(KILN_ERR_IO, "kiln_summary_writer_open", line);
    KT_CHECK(strstr(kiln_last_error(), "cannot create the log directory") != NULL);
    KT_CHECK(kiln_summary_writer_open("") == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_summary_writer_open", __LINE__ - 1);
    kiln_summary_writer_options o = kiln_summary_writer_defaults();
    o.max_queue = 0;
    KT_CHECK(kiln_summary_writer_open_ex(tmp_dir("bad"), o) == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_summary_writer_open", __LINE__ - 1);
    o = kiln_summary_writer_defaults();
    o.filename_suffix = "/../x";
    KT_CHECK(kiln_summary_writer_open_ex(tmp_dir("bad"), o) == NULL);
    /* the loop goes on with a NULL writer: each call says so, tensors are still released */
    kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE);
    KT_CHECK(kiln_summary_writer_add_scalar_tensor(w, "loss", kiln_mul_scalar(x, 2.0), 1) == KILN_ERR_NULL);
    KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_summary_writer_add_scalar_tensor", __LINE__ - 1);
    KT_CHECK(kiln_summary_writer_add_histogram(w, "w", kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)), 1) == KILN_ERR_NULL);
    KT_CHECK(kiln_summary_writer_add_scalar(w, "lr", 1, 1) == KILN_ERR_NULL);
    KT_CHECK(kiln_summary_writer_add_text(w, "t", "x", 1) == KILN_ERR_NULL);
    KT_CHECK(kiln_summary_writer_flush(w) == KILN_ERR_NULL);
    KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_summary_writer_flush", __LINE__ - 1);
    KT_CHECK(kiln_summary_writer_close(w) == KILN_ERR_NULL);
    kiln_summary_writer_free(NULL);
    KT_CHECK(kiln_summary_writer_path(NULL) == NULL);
    KT_MEM_CHECK();
}

KT_TEST(bad_events_are_errors_and_logging_goes_on) {
    kt_mem_begin();
    kiln_summary_writer *w = kiln_summary_writer_open(tmp_dir("bad_events"));
    KT_CHECK(w != NULL);
    if (!w) return;
    KT_CHECK(kiln_summary_writer_add_scalar(w, NULL, 1, 0) == KILN_ERR_NULL);
    KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_summary_writer_add_scalar", __LINE__ - 1);
    KT_CHECK(kiln_summary_writer_add_scalar(w, "", 1, 0) == KILN_ERR_INVALID_ARGUMENT);
    KT_CHECK(kiln_summary_writer_add_text(w, "t", NULL, 0) == KILN_ERR_NULL);
    KT_CHECK(kiln_summary_writer_add_scalar_tensor(w, "v", kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2)), 0) == KILN_ERR_SHAPE);
    KT_EXPECT_ERROR(KILN_ERR_SHAPE, "kiln_summary_writer_add_scalar_tensor", __LINE__ - 1);
    KT_CHECK(kiln_summary_writer_add_histogram(w, "h", kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(0)), 0) == KILN_ERR_SHAPE);
    KT_EXPECT_ERROR(KILN_ERR_SHAPE, "kiln_summary_writer_add_histogram", __LINE__ - 1);
    kiln_tensor gone = kiln_ones(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE);
    kiln_release(kiln_ref(gone));
    kiln_tensor stale = gone;
    kiln_release(gone);
    KT_CHECK(kiln_summary_writer_add_scalar_tensor(w, "v", stale, 0) == KILN_ERR_STALE_HANDLE);
    kiln_clear_error();
    /* a poisoned loss: the add returns at once; the error comes with one of the writer's next
     * calls (whichever follows the thread's read), naming the op that failed, its line and the
     * call that returned it; the other events of the step are still written */
    kiln_tensor bad = kiln_reshape(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3)), KILN_SHAPE(2)); int bad_line = __LINE__;
    KT_CHECK(kiln_summary_writer_add_scalar_tensor(w, "loss", bad, 7) == KILN_OK);
    kiln_status sts[3];
    char msgs[3][512];
    int lines[3];
    sts[0] = kiln_summary_writer_add_scalar(w, "lr", 0.5, 7); lines[0] = __LINE__;
    snprintf(msgs[0], sizeof msgs[0], "%s", kiln_last_error());
    sts[1] = kiln_summary_writer_add_scalar_tensor(w, "acc", kiln_full(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE, 0.75), 7); lines[1] = __LINE__;
    snprintf(msgs[1], sizeof msgs[1], "%s", kiln_last_error());
    sts[2] = kiln_summary_writer_flush(w); lines[2] = __LINE__;
    snprintf(msgs[2], sizeof msgs[2], "%s", kiln_last_error());
    int reported = 0;
    for (int i = 0; i < 3; i++) {
        if (sts[i] == KILN_OK) continue;
        reported++;
        char site[64], call_site[64];
        snprintf(site, sizeof site, "test_summary.c:%d", bad_line);
        snprintf(call_site, sizeof call_site, "test_summary.c:%d: an earlier event was not written", lines[i]);
        KT_CHECK(sts[i] == KILN_ERR_SHAPE);
        KT_CHECK_MSG(strstr(msgs[i], "kiln_reshape") && strstr(msgs[i], site) && strstr(msgs[i], "'loss', step 7") &&
                         strstr(msgs[i], call_site), "%s", msgs[i]);
    }
    KT_CHECK(reported == 1);
    KT_CHECK(kiln_summary_writer_flush(w) == KILN_OK); /* returned once */
    bool corrupt, found;
    KT_CHECK(count_records(kiln_summary_writer_path(w), &corrupt, "acc", &found) == 3 && found); /* version, lr, acc */
    /* a histogram of nothing countable: torch refuses it, so does the writer (later) */
    KT_CHECK(kiln_summary_writer_add_histogram(w, "nan", kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(4), NAN), 1) == KILN_OK);
    KT_CHECK(kiln_summary_writer_flush(w) == KILN_ERR_INVALID_ARGUMENT);
    KT_CHECK(strstr(kiln_last_error(), "nothing to count") != NULL);
    /* closed: an error naming where, never a crash; closing again is harmless */
    KT_CHECK(kiln_summary_writer_close(w) == KILN_OK); int close_line = __LINE__;
    KT_CHECK(kiln_summary_writer_close(w) == KILN_OK);
    KT_CHECK(kiln_summary_writer_add_scalar_tensor(w, "x", kiln_ones(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE), 1) ==
             KILN_ERR_INVALID_ARGUMENT);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_summary_writer_add_scalar_tensor", __LINE__ - 2);
    char site[600];
    snprintf(site, sizeof site, "closed at %s:%d", __FILE__, close_line);
    KT_CHECK_MSG(strstr(kiln_last_error(), site) != NULL, "%s", kiln_last_error());
    KT_CHECK(kiln_summary_writer_flush(w) == KILN_ERR_INVALID_ARGUMENT);
    KT_CHECK(kiln_summary_writer_add_text(w, "t", "x", 1) == KILN_ERR_INVALID_ARGUMENT);
    kiln_summary_writer_free(w);
    KT_MEM_CHECK();
}

/* kiln_metrics_log: the means of what was accumulated, handed over without a read, then reset. */
KT_TEST(metrics_log_writes_the_means) {
    kt_mem_begin();
    kiln_summary_writer *w = kiln_summary_writer_open(tmp_dir("metrics"));
    kiln_metrics *m = kiln_metrics_new();
    KT_CHECK(w && m);
    if (!w || !m) return;
    float logits[] = {1, 0, 0, 2, 3, 1, 0, 1}; /* argmax: 0 1 0 1 */
    int64_t labels[] = {0, 1, 1, 1};          /* 3 of 4 right */
    KT_CHECK(kiln_metrics_add(m, kiln_full(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE, 0.5),
                              kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(4, 2), logits),
                              kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(4), labels)) == KILN_OK);
    KT_CHECK(kiln_metrics_add(m, kiln_full(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE, 2.0), KILN_NONE,
                              kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(2), labels)) == KILN_OK);
    KT_CHECK(kiln_metrics_log(m, w, "train", 5) == KILN_OK);
    KT_CHECK(kiln_metrics_log(m, w, "train", 6) == KILN_OK); /* reset: nothing more to log */
    KT_CHECK(kiln_metrics_add(m, kiln_full(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE, 1.5), KILN_NONE,
                              kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(2), labels)) == KILN_OK);
    KT_CHECK(kiln_metrics_log(m, w, NULL, 7) == KILN_OK);
    KT_CHECK(kiln_metrics_log(NULL, w, NULL, 7) == KILN_ERR_NULL);
    KT_EXPECT_ERROR(KILN_ERR_NULL, "kiln_metrics_log", __LINE__ - 1);
    KT_CHECK(kiln_summary_writer_flush(w) == KILN_OK);
    float v = 0;
    const char *path = kiln_summary_writer_path(w);
    KT_CHECK(scalar_at(path, "train/loss", 5, &v) && v == (float)((0.5 * 4 + 2.0 * 2) / 6));
    KT_CHECK(scalar_at(path, "train/accuracy", 5, &v) && v == 0.75f);
    KT_CHECK(!scalar_at(path, "train/loss", 6, &v));
    KT_CHECK(scalar_at(path, "loss", 7, &v) && v == 1.5f && !scalar_at(path, "accuracy", 7, &v));
    /* a NULL writer: the metrics are still reset and the tensors released */
    KT_CHECK(kiln_metrics_add(m, kiln_full(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE, 1.5), KILN_NONE,
                              kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(2), labels)) == KILN_OK);
    KT_CHECK(kiln_metrics_log(m, NULL, "x", 8) == KILN_ERR_NULL);
    kiln_metrics_free(m);
    kiln_summary_writer_free(w);
    KT_MEM_CHECK();
}

/* Without a flush, events reach the file on their own: taken once they are about a second
 * old, written out at the next flush_secs. */
KT_TEST(events_reach_the_file_unasked) {
    kt_mem_begin();
    kiln_summary_writer_options o = kiln_summary_writer_defaults();
    o.flush_secs = 0.1;
    kiln_summary_writer *w = kiln_summary_writer_open_ex(tmp_dir("unasked"), o);
    KT_CHECK(w != NULL);
    if (!w) return;
    KT_CHECK(kiln_summary_writer_add_scalar_tensor(w, "x", kiln_full(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE, 1), 1) == KILN_OK);
    KT_CHECK(kiln_summary_writer_add_scalar(w, "y", 2, 1) == KILN_OK);
    bool corrupt;
    int records = 0;
    for (int i = 0; i < 60 && records != 3; i++) { /* up to 3 s on a loaded machine */
        usleep(50 * 1000);
        records = count_records(kiln_summary_writer_path(w), &corrupt, "", NULL);
    }
    KT_CHECK_MSG(records == 3, "%d records", records);
    KT_CHECK(kiln_summary_writer_close(w) == KILN_OK);
    kiln_summary_writer_free(w);
    KT_MEM_CHECK();
}

/* A small queue: adds wait for the writer instead of growing without bound, and nothing is lost. */
KT_TEST(bounded_queue_loses_nothing) {
    kt_mem_begin();
    kiln_summary_writer_options o = kiln_summary_writer_defaults();
    o.max_queue = 2;
    o.flush_secs = 0.01;
    o.filename_suffix = ".small";
    kiln_summary_writer *w = kiln_summary_writer_open_ex(tmp_dir("small"), o);
    KT_CHECK(w != NULL && strstr(kiln_summary_writer_path(w), ".small") != NULL);
    if (!w) return;
    for (int i = 0; i < 300; i++) {
        kiln_tensor x = kiln_full(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE, i);
        KT_CHECK(kiln_summary_writer_add_scalar_tensor(w, "x", kiln_mul_scalar(x, 2.0), i) == KILN_OK);
        KT_CHECK(kiln_summary_writer_add_histogram(w, "h", kiln_arange(KILN_CPU, KILN_F32, 0, i + 1, 1), i) == KILN_OK);
    }
    char path[600];
    snprintf(path, sizeof path, "%s", kiln_summary_writer_path(w));
    KT_CHECK(kiln_summary_writer_close(w) == KILN_OK);
    kiln_summary_writer_free(w);
    bool corrupt;
    KT_CHECK(count_records(path, &corrupt, "", NULL) == 601 && !corrupt);
    KT_MEM_CHECK();
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--write")) {
        char path[600];
        kiln_status st = write_events(argv[2], 10, path, sizeof path);
        if (st != KILN_OK) fprintf(stderr, "%s\n", kiln_last_error());
        else printf("%s\n", path);
        return st == KILN_OK ? 0 : 1;
    }
    snprintf(tmp_root, sizeof tmp_root, "%s/kiln_summary_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmp_root)) {
        perror("mkdtemp");
        return 1;
    }
    KT_RUN(crc32c_known_values);
    KT_RUN(histogram_counts_match_the_host);
    KT_RUN(events_written_and_read_back);
    KT_RUN(flush_makes_events_visible);
    KT_RUN(unwritable_directory_is_an_error_and_training_goes_on);
    KT_RUN(bad_events_are_errors_and_logging_goes_on);
    KT_RUN(bounded_queue_loses_nothing);
    KT_RUN(events_reach_the_file_unasked);
    KT_RUN(metrics_log_writes_the_means);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_root);
    return kt_finish();
}
