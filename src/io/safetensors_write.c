/* Writing safetensors files: the header (tensors widest dtype first, so every tensor stays
 * aligned, and kiln's CRC-32 entry), written to a temporary beside the target, synced, and
 * renamed over it, so a crash mid-save never leaves a half-written file under the target's name. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core-impl.h"
#include "core/text.h"
#include "io/safetensors-impl.h"

static void put_json_string(kiln__text *t, const char *s) {
    kiln__text_printf(t, "\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') kiln__text_printf(t, "\\%c", *c);
        else if (*c < 0x20) kiln__text_printf(t, "\\u%04x", *c);
        else kiln__text_printf(t, "%c", *c);
    }
    kiln__text_printf(t, "\"");
}

static int cmp_entries(const void *a, const void *b) {
    const kiln__st_entry *x = a, *y = b;
    size_t ex = kiln__elsize(x->dtype), ey = kiln__elsize(y->dtype);
    if (ex != ey) return ex > ey ? -1 : 1; /* widest first: every tensor stays aligned */
    return strcmp(x->name, y->name);
}

static bool write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

int (*kiln__st_fsync)(int fd) = fsync;
void (*kiln__st_mid_write)(const char *tmp_path);

#define TMP_TAG ".kiln-tmp-"

/* path's directory into dir (at least 2 bytes more than path) and its last part. */
static const char *split_path(const char *path, char *dir) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strcpy(dir, "."), path;
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    memcpy(dir, path, n);
    dir[n] = '\0';
    return slash + 1;
}

/* Removes "<base>.kiln-tmp-<pid>-<n>" files left in dir by saves to the same target whose
 * process is gone (killed mid-write); a live saver's temporaries are left alone. Best effort:
 * a file that cannot be removed only wastes space. */
static void remove_stale_temporaries(const char *dir, const char *base) {
    DIR *d = opendir(dir);
    if (!d) return;
    size_t blen = strlen(base), tlen = strlen(TMP_TAG);
    for (struct dirent *e; (e = readdir(d));) {
        const char *name = e->d_name;
        if (strncmp(name, base, blen) != 0 || strncmp(name + blen, TMP_TAG, tlen) != 0) continue;
        char *end;
        errno = 0;
        long pid = strtol(name + blen + tlen, &end, 10);
        if (errno || pid <= 0 || pid != (pid_t)pid || *end != '-' || pid == (long)getpid()) continue;
        const char *counter = end + 1;
        if (!*counter || strspn(counter, "0123456789") != strlen(counter)) continue;
        if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) unlinkat(dirfd(d), name, 0);
    }
    closedir(d);
}

/* Makes a rename in dir durable: the directory entry itself must reach the disk. */
static int sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return errno;
    int err = kiln__st_fsync(fd) == 0 ? 0 : errno;
    close(fd);
    return err == EINVAL ? 0 : err; /* a file system that cannot sync directories has nothing to lose */
}

kiln_status kiln__st_write(const char *path, kiln__st_entry *entries, int n, const kiln__st_meta *meta, int n_meta,
                           char *why, size_t why_size) {
    for (int i = 0; i < n; i++)
        if (!kiln__st_dtype_tag(entries[i].dtype))
            return kiln__st_fail(KILN_ERR_DTYPE, why, why_size, "no safetensors dtype for %s", kiln_dtype_name(entries[i].dtype));
    /* the rename below would put a regular file where a device, FIFO or socket was (/dev/null
     * replaced for every program on the machine), so only a regular file or a new name is written */
    struct stat target;
    if (stat(path, &target) == 0 && !S_ISREG(target.st_mode))
        return kiln__st_fail(KILN_ERR_IO, why, why_size, "cannot save to '%s': not a regular file", path);
    qsort(entries, (size_t)n, sizeof *entries, cmp_entries);
    kiln__text h = {0};
    kiln__text_printf(&h, "{\"__metadata__\":{\"" KILN__ST_CRC_KEY "\":\"");
    size_t crc_at = 8 + h.len;
    kiln__text_printf(&h, "00000000\"");
    for (int i = 0; i < n_meta; i++) {
        kiln__text_printf(&h, ",");
        put_json_string(&h, meta[i].key);
        kiln__text_printf(&h, ":");
        put_json_string(&h, meta[i].value);
    }
    kiln__text_printf(&h, "}");
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        kiln__text_printf(&h, ",");
        put_json_string(&h, entries[i].name);
        kiln__text_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", kiln__st_dtype_tag(entries[i].dtype));
        for (int d = 0; d < entries[i].ndim; d++) kiln__text_printf(&h, d ? ",%lld" : "%lld", (long long)entries[i].shape[d]);
        kiln__text_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at, (unsigned long long)(at + entries[i].nbytes));
        at += entries[i].nbytes;
    }
    kiln__text_printf(&h, "}");
    while ((8 + h.len) % 8) kiln__text_printf(&h, " "); /* the data starts 8-byte aligned */
    const unsigned char **parts = malloc(sizeof *parts * (size_t)(n ? n : 1));
    size_t *sizes = malloc(sizeof *sizes * (size_t)(n ? n : 1));
    unsigned char *head = malloc(8 + h.len);
    if (h.oom || !parts || !sizes || !head) {
        free(h.s), free(parts), free(sizes), free(head);
        return kiln__st_fail(KILN_ERR_OUT_OF_MEMORY, why, why_size, "cannot allocate the header");
    }
    for (int i = 0; i < 8; i++) head[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    memcpy(head + 8, h.s, h.len);
    free(h.s);
    for (int i = 0; i < n; i++) {
        parts[i] = entries[i].data;
        sizes[i] = entries[i].nbytes;
    }
    char hexd[9];
    snprintf(hexd, sizeof hexd, "%08x", (unsigned)kiln__st_file_crc(head, 8 + h.len, crc_at, parts, sizes, n));
    memcpy(head + crc_at, hexd, 8);

    static atomic_uint counter;
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 64), *dir = malloc(plen + 2);
    kiln_status st = KILN_OK;
    if (!tmp || !dir) {
        st = kiln__st_fail(KILN_ERR_OUT_OF_MEMORY, why, why_size, "cannot allocate a path");
    } else {
        const char *base = split_path(path, dir);
        remove_stale_temporaries(dir, base);
        snprintf(tmp, plen + 64, "%s" TMP_TAG "%ld-%u", path, (long)getpid(), atomic_fetch_add(&counter, 1));
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0) {
            st = kiln__st_fail(KILN_ERR_IO, why, why_size, "cannot create '%s': %s", tmp, strerror(errno));
        } else {
            bool ok = write_all(fd, head, 8 + h.len);
            if (ok && kiln__st_mid_write) kiln__st_mid_write(tmp);
            for (int i = 0; ok && i < n; i++) ok = write_all(fd, parts[i], sizes[i]);
            ok = ok && kiln__st_fsync(fd) == 0;
            int saved = errno;
            ok = close(fd) == 0 && ok;
            if (ok && rename(tmp, path) != 0) ok = false, saved = errno;
            if (!ok) {
                st = kiln__st_fail(KILN_ERR_IO, why, why_size, "cannot write '%s': %s", path, strerror(saved ? saved : EIO));
                unlink(tmp);
            } else if ((saved = sync_dir(dir)) != 0) {
                st = kiln__st_fail(KILN_ERR_IO, why, why_size, "wrote '%s' but cannot sync its directory '%s': %s", path, dir,
                          strerror(saved));
            }
        }
    }
    free(dir);
    free(tmp), free(parts), free(sizes), free(head);
    return st;
}
