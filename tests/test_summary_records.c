/* The summary writer's record path as the writer thread runs it: CRC-32C by SSE4.2's crc32
 * instruction and by table (the same values, on known vectors and random unaligned buffers), a
 * step's scalar event encoded straight into its buffer (nested lengths right for every tag
 * length), and a close or a free with events still queued (large ones among them) writing every
 * one of them. */
#include <kiln.h>
#include <stdint.h>
#include <unistd.h>

#include "kiln_test.h"
#include "train/summary-impl.h"

static char tmp_root[256];

static const char *tmp_dir(const char *name) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmp_root, name);
    return path;
}

/* Every record of a file (-1: unreadable); *corrupt when one failed its CRCs. */
static int count_records(const char *path, bool *corrupt) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    int n = 0, r;
    uint8_t *data;
    size_t len;
    while ((r = kiln__record_read(f, &data, &len)) == 1) n++, free(data);
    *corrupt = r < 0;
    fclose(f);
    return n;
}

KT_TEST(crc_by_instruction_equals_by_table) {
    /* RFC 3720 B.4's vectors, and "123456789" */
    uint8_t zeros[32] = {0}, ones[32], up[32], down[32];
    for (int i = 0; i < 32; i++) ones[i] = 0xFF, up[i] = (uint8_t)i, down[i] = (uint8_t)(31 - i);
    const struct {
        const void *data;
        size_t n;
        uint32_t crc;
    } known[] = {{"123456789", 9, 0xE3069283u}, {"", 0, 0}, {zeros, 32, 0x8A9136AAu},
                 {ones, 32, 0x62A8AB43u},       {up, 32, 0x46DD794Eu}, {down, 32, 0x113FDB5Cu}};
    bool have = kiln__crc32c_by_instruction("", 0, &(uint32_t){0});
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) {
        KT_CHECK_MSG(kiln__crc32c_by_table(known[k].data, known[k].n) == known[k].crc, "table, vector %zu", k);
        KT_CHECK_MSG(kiln__crc32c(known[k].data, known[k].n) == known[k].crc, "chosen way, vector %zu", k);
        uint32_t c = 0;
        if (have) KT_CHECK_MSG(kiln__crc32c_by_instruction(known[k].data, known[k].n, &c) && c == known[k].crc, "vector %zu", k);
    }
#if defined(__x86_64__)
    __builtin_cpu_init();
    KT_CHECK(have == (bool)__builtin_cpu_supports("sse4.2")); /* used wherever the CPU has it */
#endif
    if (!have) printf("   (this CPU has no SSE4.2: only the table is checked)\n");
    /* random lengths at every alignment: the 8-byte loop, its byte tail and unaligned loads */
    uint8_t buf[4096 + 8];
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < sizeof buf; i++) s = s * 6364136223846793005ull + 1442695040888963407ull, buf[i] = (uint8_t)(s >> 56);
    int mismatches = 0;
    for (int trial = 0; trial < 2000; trial++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        size_t off = (size_t)(s >> 61), n = trial < 64 ? (size_t)trial : (size_t)(s >> 20) % 4097;
        uint32_t table = kiln__crc32c_by_table(buf + off, n), c = table;
        if (kiln__crc32c(buf + off, n) != table) mismatches++;
        if (have && (!kiln__crc32c_by_instruction(buf + off, n, &c) || c != table)) mismatches++;
    }
    KT_CHECK_MSG(mismatches == 0, "%d mismatches", mismatches);
}

/* A varint at *p (advanced); false past end. */
static bool varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    *v = 0;
    for (int shift = 0; *p < end && shift < 64; shift += 7) {
        uint8_t b = *(*p)++;
        *v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) return true;
    }
    return false;
}

/* A length-delimited field `field` at *p: its bytes in [*in, *in_end), *p past it. */
static bool nested(const uint8_t **p, const uint8_t *end, int field, const uint8_t **in, const uint8_t **in_end) {
    uint64_t key, len;
    if (!varint(p, end, &key) || key != ((uint64_t)field << 3 | 2) || !varint(p, end, &len) || len > (uint64_t)(end - *p))
        return false;
    *in = *p;
    *in_end = *p + len;
    *p += len;
    return true;
}

/* Decodes Event{wall_time, step, summary{value{tag, simple_value}}} field by field: every
 * length must end exactly where its message does. */
static bool decode_scalar(const kiln__text *b, double *wall, int64_t *step, char *tag, size_t tag_cap, float *value) {
    const uint8_t *p = (const uint8_t *)b->s, *end = p + b->len, *s, *s_end, *v, *v_end, *t, *t_end;
    uint64_t key, u;
    if (!varint(&p, end, &key) || key != (1 << 3 | 1) || end - p < 8) return false;
    memcpy(wall, p, 8), p += 8;
    *step = 0;
    const uint8_t *q = p;
    if (varint(&q, end, &key) && key == (2 << 3 | 0)) {
        if (!varint(&q, end, &u)) return false;
        *step = (int64_t)u, p = q;
    }
    if (!nested(&p, end, 5, &s, &s_end) || p != end) return false;
    if (!nested(&s, s_end, 1, &v, &v_end) || s != s_end) return false;
    if (!nested(&v, v_end, 1, &t, &t_end) || (size_t)(t_end - t) >= tag_cap) return false;
    memcpy(tag, t, (size_t)(t_end - t));
    tag[t_end - t] = '\0';
    if (!varint(&v, v_end, &key) || key != (2 << 3 | 5) || v_end - v != 4) return false;
    memcpy(value, v, 4);
    return true;
}

KT_TEST(scalar_event_lengths_hold_for_every_tag_length) {
    /* tag lengths around the varints' 1/2-byte boundaries (value and summary lengths too) */
    const size_t lengths[] = {1, 10, 115, 116, 117, 118, 120, 126, 127, 128, 129, 200, 16383, 16384, 70000};
    char *tag = malloc(70001), *got = malloc(70001);
    kiln__text b = {0};
    KT_CHECK(tag && got);
    if (!tag || !got) return free(tag), free(got);
    const int64_t steps[] = {0, 1, 127, 128, (int64_t)1 << 40};
    for (size_t k = 0; k < sizeof lengths / sizeof lengths[0]; k++) {
        for (size_t i = 0; i < lengths[k]; i++) tag[i] = (char)('a' + (i * 7 + k) % 26);
        tag[lengths[k]] = '\0';
        int64_t step_in = steps[k % 5], step_out = -1;
        kiln__text_clear(&b); /* reused, as the writer thread does */
        kiln__event_scalar(&b, 1234.5, step_in, tag, -0.25f);
        double wall = 0;
        float value = 0;
        KT_CHECK_MSG(!b.oom && decode_scalar(&b, &wall, &step_out, got, 70001, &value), "tag of %zu bytes", lengths[k]);
        KT_CHECK_MSG(wall == 1234.5 && step_out == step_in && value == -0.25f && !strcmp(got, tag), "tag of %zu bytes",
                     lengths[k]);
    }
    kiln__text_free(&b);
    free(tag), free(got);
}

/* Events still queued when the writer is closed (or freed without a close) are all written: many
 * steps' scalars, tensors not yet computed, histograms, and a text larger than the writer's
 * output buffer. flush_secs is long, so nothing is written before the close asks. */
static void pending_at_close(const char *dir, bool by_free) {
    kiln_summary_writer_options o = kiln_summary_writer_defaults();
    o.flush_secs = 1000;
    kiln_summary_writer *w = kiln_summary_writer_open_ex(dir, o);
    KT_CHECK(w != NULL);
    if (!w) return;
    char path[600];
    snprintf(path, sizeof path, "%s", kiln_summary_writer_path(w));
    int events = 1; /* the file version */
    kiln_tensor big = kiln_rand(KILN_CPU, KILN_F32, KILN_SHAPE(512, 512), 7);
    for (int step = 0; step < 3000; step++, events += 2) {
        KT_CHECK(kiln_summary_writer_add_scalar(w, "lr", 0.001 * step, step) == KILN_OK);
        /* a loss still being computed: a sum over 256k values queued just before */
        KT_CHECK(kiln_summary_writer_add_scalar_tensor(w, "loss", kiln_sum(kiln_ref(big)), step) == KILN_OK);
    }
    for (int i = 0; i < 3; i++, events++) KT_CHECK(kiln_summary_writer_add_histogram(w, "w", kiln_ref(big), i) == KILN_OK);
    size_t n = 600 * 1024; /* more than one write of the writer's buffer */
    char *text = malloc(n + 1);
    KT_CHECK(text != NULL);
    if (text) {
        memset(text, 'k', n);
        text[n] = '\0';
        KT_CHECK(kiln_summary_writer_add_text(w, "notes", text, 1) == KILN_OK);
        events++;
        free(text);
    }
    kiln_release(big);
    bool corrupt;
    if (by_free) {
        kiln_summary_writer_free(w); /* closes first */
    } else {
        KT_CHECK(kiln_summary_writer_close(w) == KILN_OK);
        KT_CHECK(count_records(path, &corrupt) == events && !corrupt); /* before the free, too */
        kiln_summary_writer_free(w);
    }
    int got = count_records(path, &corrupt);
    KT_CHECK_MSG(got == events && !corrupt, "%d of %d records%s", got, events, corrupt ? ", corrupt" : "");
}

KT_TEST(close_writes_every_pending_event) {
    kt_mem_begin();
    pending_at_close(tmp_dir("close"), false);
    KT_MEM_CHECK();
}

KT_TEST(free_without_close_writes_every_pending_event) {
    kt_mem_begin();
    pending_at_close(tmp_dir("free"), true);
    KT_MEM_CHECK();
}

int main(void) {
    snprintf(tmp_root, sizeof tmp_root, "%s/kiln_summary_records_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmp_root)) {
        perror("mkdtemp");
        return 1;
    }
    KT_RUN(crc_by_instruction_equals_by_table);
    KT_RUN(scalar_event_lengths_hold_for_every_tag_length);
    KT_RUN(close_writes_every_pending_event);
    KT_RUN(free_without_close_writes_every_pending_event);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_root);
    return kt_finish();
}
