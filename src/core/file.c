/* Opening files that kiln reads (checkpoints, datasets, vocabularies): only regular files,
 * so a FIFO, a device or a directory is an error instead of a read that blocks forever. */
#include <errno.h>
#include <fcntl.h>
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
