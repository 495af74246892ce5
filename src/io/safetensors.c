/* Reading safetensors files (the format: safetensors.h): the file is read whole or mapped,
 * its header parsed (safetensors_format.c) and every tensor checked against the data the file
 * holds before any of that data is used, and kiln's checksum, when present, verified. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core-impl.h"
#include "io/safetensors-impl.h"

#define MAX_HEADER ((uint64_t)100 << 20) /* the reference implementation's limit */

/* ---- checks after parsing --------------------------------------------------------------- */

static int cmp_names(const void *a, const void *b) {
    return strcmp(((const kiln__st_tensor *)a)->name, ((const kiln__st_tensor *)b)->name);
}

static int cmp_keys(const void *a, const void *b) {
    return strcmp(((const kiln__st_meta *)a)->key, ((const kiln__st_meta *)b)->key);
}

/* Sorts tensors and metadata by name (so lookups can bisect) and rejects repeated names:
 * O(n log n), where comparing each new key with all before it took minutes on 100k keys. */
static kiln_status sort_names(kiln__st_file *f, char *why, size_t why_size) {
    if (f->n_tensors > 1) qsort(f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, cmp_names);
    if (f->n_meta > 1) qsort(f->meta, (size_t)f->n_meta, sizeof *f->meta, cmp_keys);
    for (int i = 1; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i - 1].name, f->tensors[i].name) == 0)
            return kiln__st_fail(KILN_ERR_CORRUPT, why, why_size, "tensor '%s' appears twice", f->tensors[i].name);
    for (int i = 1; i < f->n_meta; i++)
        if (strcmp(f->meta[i - 1].key, f->meta[i].key) == 0)
            return kiln__st_fail(KILN_ERR_CORRUPT, why, why_size, "metadata key '%s' appears twice", f->meta[i].key);
    return KILN_OK;
}

static int cmp_offsets(const void *a, const void *b) {
    const kiln__st_tensor *x = *(const kiln__st_tensor *const *)a, *y = *(const kiln__st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static kiln_status check_tensors(kiln__st_file *f, char *why, size_t why_size) {
    for (int i = 0; i < f->n_tensors; i++) {
        kiln__st_tensor *t = &f->tensors[i];
        unsigned es = kiln__st_dtype_size(t->dtype, &t->kiln_dtype);
        if (!es) return kiln__st_fail(KILN_ERR_CORRUPT, why, why_size, "tensor '%s' has unknown dtype '%s'", t->name, t->dtype);
        if (t->ndim > KILN_MAX_DIMS)
            return kiln__st_fail(KILN_ERR_UNSUPPORTED, why, why_size, "tensor '%s' has more than %d dims", t->name, KILN_MAX_DIMS);
        uint64_t bytes = es;
        for (int d = 0; d < t->ndim; d++) {
            uint64_t dim = (uint64_t)t->shape[d];
            if (dim && bytes > (uint64_t)INT64_MAX / dim)
                return kiln__st_fail(KILN_ERR_CORRUPT, why, why_size, "tensor '%s' is impossibly large", t->name);
            bytes *= dim;
        }
        if (t->end < t->begin || t->end - t->begin != bytes)
            return kiln__st_fail(KILN_ERR_CORRUPT, why, why_size, "tensor '%s' has %llu bytes of data, its dtype and shape need %llu",
                        t->name, (unsigned long long)(t->end - t->begin), (unsigned long long)bytes);
    }
    kiln_status st = sort_names(f, why, why_size);
    if (st != KILN_OK) return st;
    const kiln__st_tensor **order = malloc(sizeof *order * (size_t)(f->n_tensors ? f->n_tensors : 1));
    if (!order) return kiln__st_fail(KILN_ERR_OUT_OF_MEMORY, why, why_size, "cannot allocate the tensor index");
    for (int i = 0; i < f->n_tensors; i++) order[i] = &f->tensors[i];
    qsort(order, (size_t)f->n_tensors, sizeof *order, cmp_offsets);
    uint64_t at = 0;
    for (int i = 0; i < f->n_tensors && st == KILN_OK; i++) {
        if (order[i]->begin != at)
            st = kiln__st_fail(KILN_ERR_CORRUPT, why, why_size, "tensor '%s' starts at byte %llu of the data, expected %llu",
                      order[i]->name, (unsigned long long)order[i]->begin, (unsigned long long)at);
        at = order[i]->end;
    }
    if (st == KILN_OK && at != f->data_len)
        st = kiln__st_fail(KILN_ERR_CORRUPT, why, why_size, "tensors cover %llu bytes of data, the file holds %zu",
                  (unsigned long long)at, f->data_len);
    free(order);
    return st;
}

/* The header length from the first 8 bytes, checked against the file's size and the limit. */
static kiln_status header_length(const unsigned char *first, uint64_t file_size, uint64_t *n, char *why, size_t why_size) {
    if (file_size < 8)
        return kiln__st_fail(KILN_ERR_CORRUPT, why, why_size, "file has %llu bytes, fewer than the 8 of the header length",
                    (unsigned long long)file_size);
    *n = 0;
    for (int i = 7; i >= 0; i--) *n = *n << 8 | first[i];
    if (*n > file_size - 8 || *n > MAX_HEADER)
        return kiln__st_fail(KILN_ERR_CORRUPT, why, why_size, "header length %llu does not fit a file of %llu bytes",
                    (unsigned long long)*n, (unsigned long long)file_size);
    return KILN_OK;
}

/* Parses the n header bytes at hdr (file position 8) and checks every tensor against the
 * data a file of file_size bytes holds, before any of that data is read. */
static kiln_status parse_checked(kiln__st_file *f, const unsigned char *hdr, size_t n, uint64_t file_size,
                                 size_t *crc_at, char *why, size_t why_size) {
    f->data_len = (size_t)(file_size - 8 - n);
    f->strings = malloc(n + 1);
    if (!f->strings) return kiln__st_fail(KILN_ERR_OUT_OF_MEMORY, why, why_size, "cannot allocate the header");
    kiln_status st = kiln__st_parse_header(hdr, n, f, crc_at, why, why_size);
    if (st == KILN_ERR_OUT_OF_MEMORY) kiln__st_fail(st, why, why_size, "cannot allocate the header index");
    if (st == KILN_OK) st = check_tensors(f, why, why_size);
    return st;
}


static bool read_at(int fd, unsigned char *buf, size_t n, uint64_t at) {
    while (n > 0) {
        ssize_t got = pread(fd, buf, n > ((size_t)1 << 30) ? (size_t)1 << 30 : n, (off_t)at);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return false;
        buf += got, n -= (size_t)got, at += (uint64_t)got;
    }
    return true;
}

static kiln_status open_regular(const char *path, int *fd, uint64_t *size, char *why, size_t why_size) {
    const char *what = NULL;
    *fd = kiln__open_regular(path, size, &what);
    return *fd >= 0 ? KILN_OK : kiln__st_fail(KILN_ERR_IO, why, why_size, "cannot open '%s': %s", path, what);
}

/* The whole file mapped read-only in place of the copy that f->bytes holds so far (its header,
 * already checked): true, or false with f unchanged. */
static bool map_file(int fd, uint64_t size, kiln__st_file *f) {
    void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (m == MAP_FAILED) return false;
    free(f->bytes);
    f->bytes = m;
    f->size = (size_t)size;
    f->mapped = true;
    return true;
}

static kiln_status st_read(const char *path, kiln__st_file *f, bool map, char *why, size_t why_size) {
    memset(f, 0, sizeof *f);
    int fd = -1;
    uint64_t size = 0, n = 0;
    size_t crc_at = 0;
    kiln_status st = open_regular(path, &fd, &size, why, why_size);
    if (st != KILN_OK) return st;
    unsigned char first[8] = {0};
    if (size >= 8 && !read_at(fd, first, 8, 0)) st = kiln__st_fail(KILN_ERR_IO, why, why_size, "cannot read '%s'", path);
    if (st == KILN_OK) st = header_length(first, size, &n, why, why_size);
    if (st == KILN_OK && size > SIZE_MAX / 2)
        st = kiln__st_fail(KILN_ERR_OUT_OF_MEMORY, why, why_size, "'%s' is too large to load", path);
    /* the header first: the data is read only once every tensor in it is known to fit */
    if (st == KILN_OK && !(f->bytes = malloc(8 + (size_t)n)))
        st = kiln__st_fail(KILN_ERR_OUT_OF_MEMORY, why, why_size, "cannot allocate the header");
    if (st == KILN_OK && !read_at(fd, f->bytes + 8, (size_t)n, 8))
        st = kiln__st_fail(KILN_ERR_IO, why, why_size, "cannot read '%s'", path);
    if (st == KILN_OK) {
        memcpy(f->bytes, first, 8);
        st = parse_checked(f, f->bytes + 8, (size_t)n, size, &crc_at, why, why_size);
    }
    if (st == KILN_OK && map && size > 0 && map_file(fd, size, f)) {
        /* mapped: the data is the page cache's, read in place */
    } else if (st == KILN_OK) {
        unsigned char *all = realloc(f->bytes, size ? (size_t)size : 1);
        if (!all) st = kiln__st_fail(KILN_ERR_OUT_OF_MEMORY, why, why_size, "cannot allocate %llu bytes for '%s'",
                            (unsigned long long)size, path);
        else f->bytes = all;
        if (st == KILN_OK && !read_at(fd, f->bytes + 8 + n, (size_t)(size - 8 - n), 8 + n))
            st = kiln__st_fail(KILN_ERR_IO, why, why_size, "cannot read '%s': it changed size while being read", path);
    }
    struct stat sb;
    if (st == KILN_OK && (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size != size))
        st = kiln__st_fail(KILN_ERR_IO, why, why_size, "cannot read '%s': it changed size while being read", path);
    close(fd);
    if (st == KILN_OK) {
        f->size = (size_t)size;
        f->data = f->bytes + 8 + n;
        st = kiln__st_check_crc(f, crc_at, why, why_size);
    }
    if (st != KILN_OK) kiln__st_free(f);
    return st;
}

kiln_status kiln__st_read(const char *path, kiln__st_file *f, char *why, size_t why_size) {
    return st_read(path, f, false, why, why_size);
}

kiln_status kiln__st_map(const char *path, kiln__st_file *f, char *why, size_t why_size) {
    return st_read(path, f, true, why, why_size);
}

typedef struct {
    void *addr;
    size_t len;
} st_mapping;

void *kiln__st_take_mapping(kiln__st_file *f) {
    st_mapping *m = f->mapped ? malloc(sizeof *m) : NULL;
    if (!m) return NULL;
    m->addr = f->bytes, m->len = f->size;
    f->mapped = false;
    f->bytes = NULL; /* kiln__st_free leaves it alone now; f->data stays valid */
    return m;
}

void kiln__st_unmap(void *mapping) {
    st_mapping *m = mapping;
    if (!m) return;
    munmap(m->addr, m->len);
    free(m);
}

kiln_status kiln__st_parse(const void *bytes, size_t size, kiln__st_file *f, char *why, size_t why_size) {
    memset(f, 0, sizeof *f);
    uint64_t n = 0;
    size_t crc_at = 0;
    kiln_status st = header_length(bytes, size, &n, why, why_size);
    if (st == KILN_OK && !(f->bytes = malloc(size)))
        st = kiln__st_fail(KILN_ERR_OUT_OF_MEMORY, why, why_size, "cannot allocate %zu bytes", size);
    if (st == KILN_OK) {
        memcpy(f->bytes, bytes, size);
        f->size = size;
        f->data = f->bytes + 8 + n;
        st = parse_checked(f, f->bytes + 8, (size_t)n, size, &crc_at, why, why_size);
    }
    if (st == KILN_OK) st = kiln__st_check_crc(f, crc_at, why, why_size);
    if (st != KILN_OK) kiln__st_free(f);
    return st;
}

void kiln__st_free(kiln__st_file *f) {
    if (f->mapped)
        munmap(f->bytes, f->size);
    else
        free(f->bytes);
    free(f->tensors);
    free(f->meta);
    free(f->strings);
    memset(f, 0, sizeof *f);
}

const kiln__st_tensor *kiln__st_find(const kiln__st_file *f, const char *name) {
    kiln__st_tensor key = {.name = name};
    return f->n_tensors ? bsearch(&key, f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, cmp_names) : NULL;
}

const char *kiln__st_meta_get(const kiln__st_file *f, const char *key) {
    kiln__st_meta want = {.key = key};
    const kiln__st_meta *m = f->n_meta ? bsearch(&want, f->meta, (size_t)f->n_meta, sizeof *f->meta, cmp_keys) : NULL;
    return m ? m->value : NULL;
}

