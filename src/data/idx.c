/* MNIST-format IDX files (gzip'd through zlib when the build has it): u8 images of dims
 * N, H, W (magic 0x00000803) and u8 labels of dim N (magic 0x00000801). The whole file is
 * decompressed into memory; pixels become f32 in [0, 1] as samples are read.
 *
 * The file is hostile until checked: only regular files are opened (a FIFO or a device would
 * block or never end), and the size the header claims is checked against what the file can
 * hold before any data is read, so a small file cannot make us inflate or allocate gigabytes. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/data-impl.h"

#ifndef KILN_HAVE_ZLIB
#define KILN_HAVE_ZLIB 0
#endif
#if KILN_HAVE_ZLIB
#include <zlib.h>
#endif

static const char OP[] = "kiln_idx_dataset_new";
#define CHUNK ((size_t)1 << 20)
/* deflate's best case: one 258-byte match per 2 bits (zlib's FAQ gives 1032:1) */
#define GZIP_MAX_RATIO 1032u

/* ---- a byte source: zlib reads gzip'd and plain files alike; stdio without zlib ---------- */
typedef struct {
    const char *path;
    uint64_t size;   /* of the file on disk */
    bool compressed; /* gzip magic at the start */
#if KILN_HAVE_ZLIB
    gzFile gz;
#else
    FILE *f;
#endif
} source;

/* Opens path for reading only if it is a regular file: O_NONBLOCK keeps open() itself from
 * waiting for a FIFO's writer; it is cleared again before reading. */
static bool source_open(source *s, const char *path) {
    memset(s, 0, sizeof *s);
    s->path = path;
    const char *why = NULL;
    int fd = kiln__open_regular(path, &s->size, &why);
    if (fd < 0) {
        kiln__report(KILN_ERR_IO, OP, "%s: cannot open: %s", path, why);
        return false;
    }
    unsigned char magic[2];
    s->compressed = pread(fd, magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
#if KILN_HAVE_ZLIB
    errno = 0;
    s->gz = gzdopen(fd, "rb");
    if (!s->gz) {
        kiln__report(KILN_ERR_IO, OP, "%s: cannot open: %s", path, errno ? strerror(errno) : "out of memory");
        close(fd);
        return false;
    }
#else
    if (s->compressed) {
        close(fd);
        kiln__report(KILN_ERR_UNSUPPORTED, OP, "%s: gzip-compressed, and kiln was built without zlib", path);
        return false;
    }
    s->f = fdopen(fd, "rb");
    if (!s->f) {
        kiln__report(KILN_ERR_IO, OP, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
        return false;
    }
#endif
    return true;
}

/* The most data bytes the file can hold after a header of head_bytes. */
static uint64_t source_capacity(const source *s, size_t head_bytes) {
    uint64_t cap;
    if (!s->compressed) return s->size > head_bytes ? s->size - head_bytes : 0;
    if (__builtin_mul_overflow(s->size, (uint64_t)GZIP_MAX_RATIO, &cap)) return UINT64_MAX;
    return cap;
}

static void source_close(source *s) {
#if KILN_HAVE_ZLIB
    gzclose(s->gz);
#else
    fclose(s->f);
#endif
}

/* Reads up to n bytes; returns how many (short only at the end of the data), or -1 after
 * reporting a read or decompression error. */
static int64_t source_read(source *s, void *buf, size_t n) {
    size_t done = 0;
    while (done < n) {
        size_t want = n - done < CHUNK ? n - done : CHUNK;
#if KILN_HAVE_ZLIB
        int got = gzread(s->gz, (char *)buf + done, (unsigned)want);
        int zerr = Z_OK;
        const char *msg = gzerror(s->gz, &zerr);
        if (got < 0 || (zerr != Z_OK && zerr != Z_BUF_ERROR)) {
            if (zerr == Z_ERRNO)
                kiln__report(KILN_ERR_IO, OP, "%s: read failed: %s", s->path, strerror(errno));
            else
                kiln__report(KILN_ERR_CORRUPT, OP, "%s: %s", s->path, msg && *msg ? msg : "read failed");
            return -1;
        }
#else
        size_t got = fread((char *)buf + done, 1, want, s->f);
        if (ferror(s->f)) {
            kiln__report(KILN_ERR_IO, OP, "%s: read failed: %s", s->path, strerror(errno));
            return -1;
        }
#endif
        if (got == 0) break;
        done += (size_t)got;
    }
    return (int64_t)done;
}

/* ---- one IDX file ------------------------------------------------------------------------ */
typedef struct {
    int64_t dims[3];
    unsigned char *data; /* prod(dims) bytes */
} idx_array;

/* Loads an IDX file of u8 data with `ndim` dims. The data buffer grows only as bytes actually
 * arrive, so a corrupt header cannot make us allocate what the file does not hold. */
static bool idx_load(const char *path, int ndim, idx_array *out) {
    memset(out, 0, sizeof *out);
    source s;
    if (!source_open(&s, path)) return false;
    const uint32_t want_magic = 0x0800u | (uint32_t)ndim;
    unsigned char head[16];
    size_t head_bytes = 4 + 4 * (size_t)ndim;
    int64_t got = source_read(&s, head, head_bytes);
    bool ok = false;
    unsigned char *buf = NULL;
    if (got < 0) goto done;
    uint32_t magic = got >= 4 ? (uint32_t)head[0] << 24 | (uint32_t)head[1] << 16 | head[2] << 8 | head[3] : 0;
    if (got >= 4 && magic != want_magic) {
        kiln__report(KILN_ERR_CORRUPT, OP, "%s: magic 0x%08x, expected 0x%08x (u8 %s)", path, magic, want_magic,
                     ndim == 3 ? "images: N, H, W" : "labels: N");
        goto done;
    }
    if ((size_t)got < head_bytes) {
        kiln__report(KILN_ERR_CORRUPT, OP, "%s: truncated header (%lld of %zu bytes)", path, (long long)got, head_bytes);
        goto done;
    }
    uint64_t total = 1;
    for (int d = 0; d < ndim; d++) {
        const unsigned char *p = head + 4 + 4 * d;
        out->dims[d] = (int64_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
        if (__builtin_mul_overflow(total, (uint64_t)out->dims[d], &total) || total > (UINT64_C(1) << 48)) {
            kiln__report(KILN_ERR_CORRUPT, OP, "%s: dims too large for any file", path);
            goto done;
        }
    }
    char shape[64];
    uint64_t room = source_capacity(&s, head_bytes);
    if (ndim == 3)
        snprintf(shape, sizeof shape, "%lld x %lld x %lld", (long long)out->dims[0], (long long)out->dims[1],
                 (long long)out->dims[2]);
    else
        snprintf(shape, sizeof shape, "%lld", (long long)out->dims[0]);
    if (ndim == 3 && (out->dims[1] == 0 || out->dims[2] == 0)) {
        kiln__report(KILN_ERR_CORRUPT, OP, "%s: images of size %s", path, shape);
        goto done;
    }
    if (total > room) {
        if (s.compressed)
            kiln__report(KILN_ERR_CORRUPT, OP,
                         "%s: truncated: dims %s need %llu bytes of data, a gzip file of %llu bytes holds at most %llu",
                         path, shape, (unsigned long long)total, (unsigned long long)s.size, (unsigned long long)room);
        else
            kiln__report(KILN_ERR_CORRUPT, OP, "%s: truncated: dims %s need %llu bytes of data, the file has %llu", path,
                         shape, (unsigned long long)total, (unsigned long long)room);
        goto done;
    }
    /* read in growing pieces up to the declared size, never trusting it for the allocation */
    size_t cap = 0, have = 0;
    while (have < total) {
        if (have == cap) {
            size_t next = cap ? cap * 2 : CHUNK;
            if (next > total) next = (size_t)total;
            unsigned char *grown = realloc(buf, next);
            if (!grown) {
                kiln__report(KILN_ERR_OUT_OF_MEMORY, OP, "%s: cannot allocate %zu bytes", path, next);
                goto done;
            }
            buf = grown, cap = next;
        }
        got = source_read(&s, buf + have, cap - have);
        if (got < 0) goto done;
        if (got == 0) break;
        have += (size_t)got;
    }
    if (have < total) {
        kiln__report(KILN_ERR_CORRUPT, OP, "%s: truncated: dims %s need %llu bytes of data, the file has %zu", path,
                     shape, (unsigned long long)total, have);
        goto done;
    }
    unsigned char extra;
    got = source_read(&s, &extra, 1);
    if (got != 0) {
        if (got > 0)
            kiln__report(KILN_ERR_CORRUPT, OP, "%s: more data than dims %s declare (%llu bytes)", path, shape,
                         (unsigned long long)total);
        goto done;
    }
    out->data = buf;
    buf = NULL;
    ok = true;
done:
    free(buf);
    source_close(&s);
    return ok;
}

/* ---- the dataset ------------------------------------------------------------------------- */
typedef struct {
    int64_t n, pixels; /* samples, pixels per image */
    unsigned char *images, *labels;
} idx_ctx;

static int64_t idx_length(void *ctx) { return ((idx_ctx *)ctx)->n; }

static kiln_status idx_get(void *ctx, int64_t index, void *input, void *target, uint64_t seed) {
    idx_ctx *m = ctx; /* index in range: kiln_dataset_get and the loader checked it */
    const unsigned char *src = m->images + (size_t)index * (size_t)m->pixels;
    float *dst = input;
    /* v / 255 rounded to float: a float division of two exact floats is that rounding, the value
     * (float)(v / 255.0) for every byte (tests/test_dataset.c reads all 256); the compiler
     * vectorises it, where a 256-entry table's lookups ran one byte at a time (60000 images:
     * 57 -> 41 ms on one core of an Intel Xeon, family 6 model 207) */
    for (int64_t i = 0; i < m->pixels; i++) dst[i] = (float)src[i] / 255.0f;
    *(int64_t *)target = m->labels[index];
    return KILN_OK;
}

static void idx_free(void *ctx) {
    idx_ctx *m = ctx;
    if (!m) return;
    free(m->images);
    free(m->labels);
    free(m);
}

kiln_dataset *kiln_idx_dataset_new(const char *images_path, const char *labels_path) {
    if (!images_path || !labels_path) {
        kiln__report(KILN_ERR_NULL, OP, "%s path is NULL", images_path ? "labels" : "images");
        return NULL;
    }
    idx_array im, lb = {0};
    if (!idx_load(images_path, 3, &im)) return NULL;
    if (!idx_load(labels_path, 1, &lb)) {
        free(im.data);
        return NULL;
    }
    if (im.dims[0] != lb.dims[0]) {
        kiln__report(KILN_ERR_CORRUPT, OP, "%s holds %lld images but %s holds %lld labels", images_path,
                     (long long)im.dims[0], labels_path, (long long)lb.dims[0]);
        free(im.data);
        free(lb.data);
        return NULL;
    }
    idx_ctx *m = calloc(1, sizeof *m);
    if (!m) {
        free(im.data);
        free(lb.data);
        kiln__report(KILN_ERR_OUT_OF_MEMORY, OP, "cannot allocate the dataset");
        return NULL;
    }
    m->n = im.dims[0];
    m->pixels = im.dims[1] * im.dims[2];
    m->images = im.data;
    m->labels = lb.data;
    kiln_dataset_desc d = {.input_dtype = KILN_F32,
                           .target_dtype = KILN_I64,
                           .input_shape = KILN_SHAPE(1, im.dims[1], im.dims[2]),
                           .target_shape = KILN_SCALAR_SHAPE,
                           .length = idx_length,
                           .get = idx_get,
                           .free = idx_free};
    return kiln__dataset_make(OP, d, m);
}
