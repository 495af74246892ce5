/* TensorBoard's event files by hand (see tfevents.h). The messages are few and small: an Event
 * holds wall_time (1, double), step (2, int64) and either file_version (3, string) or a
 * Summary (5) of one Value: tag (1), and simple_value (2, float), histo (5, HistogramProto) or
 * metadata (9) + tensor (8) for text. Encoding them directly is ~100 lines with no dependency;
 * field numbers are those of tensorboard/compat/proto/{event,summary,tensor}.proto. */
#include "train/tfevents.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- CRC-32C ------------------------------------------------------------------------------
 * Every record is checksummed twice, on the writer's thread. Where the CPU has SSE4.2 its crc32
 * instruction (the same Castagnoli polynomial) does 8 bytes at a time; elsewhere one table, a
 * byte at a time. Chosen once, at the first call. */
static uint32_t crc_table[256];

static void crc_table_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1; /* reflected Castagnoli */
        crc_table[i] = c;
    }
}

static uint32_t crc_by_table(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KILN_CRC_HARDWARE 1
__attribute__((target("sse4.2"))) static uint32_t crc_by_instruction(const uint8_t *p, size_t n) {
    uint64_t c = 0xFFFFFFFFu;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t v;
        memcpy(&v, p, sizeof v); /* unaligned, little-endian as the byte order of the CRC */
        c = __builtin_ia32_crc32di(c, v);
    }
    uint32_t c32 = (uint32_t)c;
    for (; n; n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32 ^ 0xFFFFFFFFu;
}
#endif

static uint32_t (*crc_impl)(const uint8_t *, size_t) = crc_by_table;

static void crc_init(void) {
    crc_table_init();
#ifdef KILN_CRC_HARDWARE
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) crc_impl = crc_by_instruction;
#endif
}

static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

uint32_t kiln__crc32c(const void *data, size_t n) {
    pthread_once(&crc_once, crc_init);
    return crc_impl(data, n);
}

uint32_t kiln__crc32c_by_table(const void *data, size_t n) {
    pthread_once(&crc_once, crc_init);
    return crc_by_table(data, n);
}

bool kiln__crc32c_by_instruction(const void *data, size_t n, uint32_t *crc) {
    pthread_once(&crc_once, crc_init);
#ifdef KILN_CRC_HARDWARE
    if (crc_impl == crc_by_instruction) return *crc = crc_by_instruction(data, n), true;
#endif
    (void)data, (void)n, (void)crc;
    return false;
}

uint32_t kiln__crc32c_masked(const void *data, size_t n) {
    uint32_t c = kiln__crc32c(data, n);
    return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

/* ---- protocol-buffer encoding ------------------------------------------------------------- */
enum { VARINT = 0, FIXED64 = 1, BYTES = 2, FIXED32 = 5 };

static void put(kiln__text *b, const void *src, size_t n) { kiln__text_put(b, src, n); }

static void put_varint(kiln__text *b, uint64_t v) {
    uint8_t out[10];
    size_t n = 0;
    do {
        out[n++] = (uint8_t)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
        v >>= 7;
    } while (v);
    put(b, out, n);
}

static void put_key(kiln__text *b, int field, int wire) { put_varint(b, (uint64_t)field << 3 | (uint64_t)wire); }

static void put_le(kiln__text *b, uint64_t v, int bytes) {
    uint8_t out[8];
    for (int i = 0; i < bytes; i++) out[i] = (uint8_t)(v >> (8 * i));
    put(b, out, (size_t)bytes);
}

static void put_double(kiln__text *b, int field, double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    put_key(b, field, FIXED64);
    put_le(b, u, 8);
}

static void put_float(kiln__text *b, int field, float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    put_key(b, field, FIXED32);
    put_le(b, u, 4);
}

static void put_bytes(kiln__text *b, int field, const void *data, size_t n) {
    put_key(b, field, BYTES);
    put_varint(b, n);
    put(b, data, n);
}

/* A nested message: its bytes, then freed. */
static void put_message(kiln__text *b, int field, kiln__text *m) {
    if (m->oom) b->oom = true;
    put_bytes(b, field, m->s, m->len);
    kiln__text_free(m);
}

static void put_packed_doubles(kiln__text *b, int field, const double *v, size_t n) {
    put_key(b, field, BYTES);
    put_varint(b, n * 8);
    for (size_t i = 0; i < n; i++) {
        uint64_t u;
        memcpy(&u, &v[i], sizeof u);
        put_le(b, u, 8);
    }
}

static void event_head(kiln__text *b, double wall_time, int64_t step) {
    put_double(b, 1, wall_time);
    if (step) { /* proto3: a zero is left out, as protobuf's own encoder does */
        put_key(b, 2, VARINT);
        put_varint(b, (uint64_t)step);
    }
}

/* Event.summary = Summary{value: [v]} */
static void event_summary(kiln__text *b, kiln__text *value) {
    kiln__text summary = {0};
    put_message(&summary, 1, value);
    put_message(b, 5, &summary);
}

void kiln__event_file_version(kiln__text *b, double wall_time) {
    event_head(b, wall_time, 0);
    static const char version[] = "brain.Event:2";
    put_bytes(b, 3, version, sizeof version - 1);
}

static size_t varint_size(uint64_t v) {
    size_t n = 1;
    while (v > 0x7F) v >>= 7, n++;
    return n;
}

/* The one event of every step: written straight into b, its nested lengths computed first, so
 * that a reused b allocates nothing. The same bytes as event_summary's nesting. */
void kiln__event_scalar(kiln__text *b, double wall_time, int64_t step, const char *tag, float value) {
    event_head(b, wall_time, step);
    size_t tag_len = strlen(tag);
    size_t value_len = 1 + varint_size(tag_len) + tag_len + 1 + 4; /* tag (1), simple_value (2) */
    put_key(b, 5, BYTES);                                            /* Event.summary */
    put_varint(b, 1 + varint_size(value_len) + value_len);
    put_key(b, 1, BYTES); /* Summary.value */
    put_varint(b, value_len);
    put_bytes(b, 1, tag, tag_len);
    put_float(b, 2, value);
}

void kiln__event_histogram(kiln__text *b, double wall_time, int64_t step, const char *tag, const kiln__histogram_proto *h) {
    event_head(b, wall_time, step);
    kiln__text histo = {0};
    put_double(&histo, 1, h->min);
    put_double(&histo, 2, h->max);
    put_double(&histo, 3, h->num);
    put_double(&histo, 4, h->sum);
    put_double(&histo, 5, h->sum_squares);
    put_packed_doubles(&histo, 6, h->bucket_limit, h->buckets);
    put_packed_doubles(&histo, 7, h->bucket, h->buckets);
    kiln__text v = {0};
    put_bytes(&v, 1, tag, strlen(tag));
    put_message(&v, 5, &histo);
    event_summary(b, &v);
}

/* As torch.utils.tensorboard writes text: metadata naming the "text" plugin (its content an
 * empty TextPluginData), and a DT_STRING tensor of shape [1] holding the UTF-8 text. */
void kiln__event_text(kiln__text *b, double wall_time, int64_t step, const char *tag, const char *text) {
    event_head(b, wall_time, step);
    kiln__text plugin = {0}, metadata = {0}, dim = {0}, shape = {0}, tensor = {0}, v = {0};
    put_bytes(&plugin, 1, "text", 4);
    put_message(&metadata, 1, &plugin);
    put_key(&dim, 1, VARINT);
    put_varint(&dim, 1);
    put_message(&shape, 2, &dim);
    put_key(&tensor, 1, VARINT);
    put_varint(&tensor, 7); /* DT_STRING */
    put_message(&tensor, 2, &shape);
    put_bytes(&tensor, 8, text, strlen(text));
    put_bytes(&v, 1, tag, strlen(tag));
    put_message(&v, 9, &metadata);
    put_message(&v, 8, &tensor);
    event_summary(b, &v);
}

/* ---- records ------------------------------------------------------------------------------ */
static void le_bytes(uint8_t *out, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) out[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t le_value(const uint8_t *in, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)in[i] << (8 * i);
    return v;
}

void kiln__record_append(kiln__text *out, const void *data, size_t n) {
    uint8_t head[12], tail[4];
    le_bytes(head, n, 8);
    le_bytes(head + 8, kiln__crc32c_masked(head, 8), 4);
    le_bytes(tail, kiln__crc32c_masked(data, n), 4);
    put(out, head, sizeof head);
    put(out, data, n);
    put(out, tail, sizeof tail);
}

bool kiln__record_write(FILE *f, const void *data, size_t n) {
    kiln__text r = {0};
    kiln__record_append(&r, data, n);
    bool ok = !r.oom && fwrite(r.s, 1, r.len, f) == r.len;
    if (r.oom) errno = ENOMEM;
    kiln__text_free(&r);
    return ok;
}

int kiln__record_read(FILE *f, uint8_t **out, size_t *n) {
    *out = NULL;
    *n = 0;
    uint8_t head[12], tail[4];
    size_t got = fread(head, 1, sizeof head, f);
    if (got == 0) return 0;
    if (got != sizeof head || (uint32_t)le_value(head + 8, 4) != kiln__crc32c_masked(head, 8)) return -1;
    uint64_t len = le_value(head, 8);
    if (len > (uint64_t)1 << 30) return -2; /* its CRC holds, but no event of ours is this large */
    uint8_t *data = malloc(len ? (size_t)len : 1);
    if (!data) return -2;
    if (fread(data, 1, (size_t)len, f) != len || fread(tail, 1, 4, f) != 4 ||
        (uint32_t)le_value(tail, 4) != kiln__crc32c_masked(data, (size_t)len)) {
        free(data);
        return -1;
    }
    *out = data;
    *n = (size_t)len;
    return 1;
}
