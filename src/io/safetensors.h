/* The safetensors file format: an 8-byte little-endian header length N, N bytes of JSON
 *   {"__metadata__": {"key": "value", ...},
 *    "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
 * (padded with spaces), then the tensors' raw little-endian bytes; offsets are relative to
 * the end of the header and the tensors cover the data exactly, without holes or overlap.
 *
 * kiln writes one more metadata entry, "kiln.crc32": the CRC-32 of the whole file with that
 * value read as "00000000", so any damaged byte is caught on load. Files without it (written
 * by other programs) are read all the same.
 *
 *   kiln__st_file f;
 *   char why[256];
 *   kiln_status st = kiln__st_read("model.safetensors", &f, why, sizeof why);
 *   if (st == KILN_OK) {
 *       const kiln__st_tensor *w = kiln__st_find(&f, "0.weight");
 *       ... f.data + w->begin holds w->end - w->begin bytes ...
 *       kiln__st_free(&f);
 *   }
 */
#ifndef KILN_IO_SAFETENSORS_H
#define KILN_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/core.h"

typedef struct {
    const char *name;   /* decoded, NUL-terminated */
    const char *dtype;  /* "F32", ... (every safetensors dtype is accepted here) */
    int kiln_dtype;     /* its kiln dtype, or -1 when kiln has none */
    int ndim;
    int64_t shape[KILN_MAX_DIMS];
    uint64_t begin, end; /* bytes, relative to data */
} kiln__st_tensor;

typedef struct {
    const char *key, *value;
} kiln__st_meta;

typedef struct {
    unsigned char *bytes; /* the whole file */
    size_t size;
    const unsigned char *data; /* the tensors' bytes */
    size_t data_len;
    int n_tensors, n_meta;
    kiln__st_tensor *tensors;
    kiln__st_meta *meta;
    char *strings; /* decoded names and metadata */
    bool mapped;   /* bytes is a read-only mapping of the file (kiln__st_map) */
} kiln__st_file;

/* Reads and checks a file: header length against the file size, well-formed JSON of the
 * subset above, no duplicate names, known dtypes, sizes that match shapes, offsets that cover
 * the data exactly, and the CRC when present. Only a regular file is opened, and its data is
 * read only after the header checked out, so a hostile header costs no more than itself.
 * KILN_ERR_IO (cannot read, not a regular file), KILN_ERR_CORRUPT (malformed),
 * KILN_ERR_UNSUPPORTED (over 8 dims) or out of memory, with a reason in why. On success f
 * owns a copy of the file's bytes (kiln__st_free); tensors and metadata are sorted by name. */
kiln_status kiln__st_read(const char *path, kiln__st_file *f, char *why, size_t why_size);
/* kiln__st_read with the file mapped read-only (MAP_PRIVATE, pre-faulted) instead of copied,
 * falling back to reading it when mapping fails: the page cache's pages are used in place, so
 * a large checkpoint costs no fresh memory to fault in (all-MiniLM-L6-v2's 90 MB: 7-11 ms
 * against 40-90 ms read, measured here). As with any mapped weights (llama.cpp, safetensors'
 * safe_open), the file must not be truncated in place while mapped: its pages would be gone
 * (SIGBUS); replacing it (a new file renamed over it) is safe. */
kiln_status kiln__st_map(const char *path, kiln__st_file *f, char *why, size_t why_size);
/* Takes over a mapped file's bytes (f->data stays valid, kiln__st_free no longer unmaps):
 * returns the handle for kiln__st_unmap, which has the on_release shape of kiln_from_borrowed;
 * NULL (nothing taken) when f is not mapped or out of memory. */
void *kiln__st_take_mapping(kiln__st_file *f);
void kiln__st_unmap(void *mapping);
/* The same checks on a file's bytes already in memory (copied into f): the fuzzers' entry. */
kiln_status kiln__st_parse(const void *bytes, size_t size, kiln__st_file *f, char *why, size_t why_size);
void kiln__st_free(kiln__st_file *f);
const kiln__st_tensor *kiln__st_find(const kiln__st_file *f, const char *name);
const char *kiln__st_meta_get(const kiln__st_file *f, const char *key);

typedef struct {
    const char *name;
    kiln_dtype dtype;
    int ndim;
    const int64_t *shape;
    const void *data; /* dense little-endian bytes */
    size_t nbytes;
} kiln__st_entry;

/* Replaceable for tests, as SQLite's test VFS: the fsync used for the file and its directory
 * (fault injection), and a call made after the header is written (a save killed mid-write). */
extern int (*kiln__st_fsync)(int fd);
extern void (*kiln__st_mid_write)(const char *tmp_path);

/* Writes entries (sorted here by element size then name, each aligned to its element size)
 * and metadata to a temporary file "<path>.kiln-tmp-<pid>-<n>" beside path, syncs it, renames
 * it over path and syncs the directory, so a reader sees the old file or the new one, never a
 * mix, and the new one survives a power cut once this returns. Temporaries of earlier saves to
 * path whose process died are removed first. A path naming something other than a regular file
 * (a device, FIFO, socket or directory) is refused. KILN_ERR_IO or out of memory, with why. */
kiln_status kiln__st_write(const char *path, kiln__st_entry *entries, int n, const kiln__st_meta *meta, int n_meta,
                           char *why, size_t why_size);

#endif
