/* Opening files that kiln reads (checkpoints, datasets, vocabularies, configs): only regular
 * files, so a FIFO, a device or a directory is an error instead of a read that blocks forever;
 * small text files are read whole, within a size bound, before any of it is trusted. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core-impl.h"

int kiln__open_regular(const char *path, uint64_t *size, const char **why) {
    /* O_NONBLOCK keeps open() itself from waiting for a FIFO's writer */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        *why = strerror(errno);
        return -1;
    }
    struct stat sb;
    int flags;
    if (fstat(fd, &sb) != 0) {
        *why = strerror(errno);
    } else if (!S_ISREG(sb.st_mode)) {
        *why = "not a regular file";
    } else if ((flags = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        *why = strerror(errno);
    } else {
        *size = (uint64_t)sb.st_size;
        return fd;
    }
    close(fd);
    return -1;
}

char *kiln__read_small_file(const char *path, uint64_t max_bytes, const char *what, const char *op, size_t *size) {
    const char *why = NULL;
    uint64_t file_size = 0;
    int fd = kiln__open_regular(path, &file_size, &why);
    if (fd < 0) {
        kiln__report(KILN_ERR_IO, op, "%s: cannot open: %s", path, why);
        return NULL;
    }
    if (file_size > max_bytes) {
        kiln__report(KILN_ERR_CORRUPT, op, "%s: %llu bytes, more than %s's %llu KiB at most", path,
                     (unsigned long long)file_size, what, (unsigned long long)(max_bytes >> 10));
        close(fd);
        return NULL;
    }
    size_t n = (size_t)file_size, got = 0;
    char *buf = malloc(n + 1);
    if (!buf) {
        kiln__report(KILN_ERR_OUT_OF_MEMORY, op, "%s: out of memory for %zu bytes", path, n + 1);
        close(fd);
        return NULL;
    }
    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            kiln__report(KILN_ERR_IO, op, "%s: read failed after %zu of %zu bytes: %s", path, got, n,
                         r < 0 ? strerror(errno) : "the file shrank");
            free(buf), close(fd);
            return NULL;
        }
        got += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    *size = n;
    return buf;
}
