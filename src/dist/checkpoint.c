/* Checkpoints under data parallelism: rank 0 writes (kiln_checkpoint_save: a temporary file,
 * then a rename) and every rank returns rank 0's status; loading reads the file on rank 0 only
 * and broadcasts its bytes, which every other rank loads from a private temporary file, so the
 * ranks need no shared file system and end with rank 0's parameters and optimizer state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/dist-impl.h"
#include "kiln/optim.h"

/* Rank 0's status on every rank (each rank passes its own; only rank 0's counts). */
static kiln_status agree_status(kiln_status mine) {
    int32_t v = (int32_t)mine;
    kiln_tensor t = kiln_dist_broadcast(kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(1), &v), 0);
    if (kiln_into_data(t, &v, sizeof v) != KILN_OK) return kiln_last_status();
    return (kiln_status)v;
}

kiln_status kiln_dist_checkpoint_save(const char *path, kiln_module *model, kiln_optimizer *opt) {
    if (kiln_dist_world_size() == 1) return kiln_checkpoint_save(path, model, opt);
    kiln_status mine = kiln_dist_rank() == 0 ? kiln_checkpoint_save(path, model, opt) : KILN_OK;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", kiln_last_error());
    kiln_status st = agree_status(mine);
    if (st != KILN_OK && kiln_dist_rank() != 0)
        return kiln__report(st, "kiln_dist_checkpoint_save", "rank 0 could not write %s", path ? path : "(null)");
    if (st != KILN_OK) return kiln__report(st, "kiln_dist_checkpoint_save", "%s", msg);
    return KILN_OK;
}

/* The file's bytes (rank 0) or NULL with *size -1 and a reported error. */
static char *read_all(const char *path, int64_t *size) {
    *size = -1;
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) return kiln__report(KILN_ERR_IO, "kiln_dist_checkpoint_load", "cannot open %s", path ? path : "(null)"), NULL;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 4)) != NULL) {
            if (fread(buf, 1, (size_t)n, f) == (size_t)n) {
                *size = n;
            } else {
                free(buf);
                buf = NULL;
            }
        }
    }
    fclose(f);
    if (!buf) kiln__report(KILN_ERR_IO, "kiln_dist_checkpoint_load", "cannot read %s", path);
    return buf;
}

kiln_status kiln_dist_checkpoint_load(const char *path, kiln_module *model, kiln_optimizer *opt) {
    if (kiln_dist_world_size() == 1) return kiln_checkpoint_load(path, model, opt);
    bool root = kiln_dist_rank() == 0;
    int64_t size = 0;
    char *bytes = root ? read_all(path, &size) : NULL;
    kiln_tensor n = kiln_dist_broadcast(kiln_from_data(KILN_CPU, KILN_I64, KILN_SHAPE(1), &size), 0);
    if (kiln_into_data(n, &size, sizeof size) != KILN_OK) return free(bytes), kiln_last_status();
    if (size < 0) {
        free(bytes);
        return root ? kiln_last_status()
                    : kiln__report(KILN_ERR_IO, "kiln_dist_checkpoint_load", "rank 0 could not read %s", path ? path : "(null)");
    }
    /* the bytes travel as i32 words (padded) */
    int64_t words = (size + 3) / 4;
    if (!root) bytes = calloc((size_t)words + 1, 4);
    if (!bytes) return kiln__report(KILN_ERR_OUT_OF_MEMORY, "kiln_dist_checkpoint_load", "no memory for %lld bytes", (long long)size);
    kiln_tensor t = root ? kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(words), bytes)
                         : kiln_zeros(KILN_CPU, KILN_I32, KILN_SHAPE(words));
    kiln_status st = kiln_into_data(kiln_dist_broadcast(t, 0), bytes, (size_t)words * 4);
    if (st == KILN_OK && root) st = kiln_checkpoint_load(path, model, opt);
    if (st == KILN_OK && !root) {
        const char *dir = getenv("TMPDIR");
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s/kiln-checkpoint-XXXXXX", dir && *dir ? dir : "/tmp");
        int fd = mkstemp(tmp);
        bool ok = fd >= 0 && write(fd, bytes, (size_t)size) == (ssize_t)size;
        if (fd >= 0) ok = close(fd) == 0 && ok;
        st = ok ? kiln_checkpoint_load(tmp, model, opt)
                : kiln__report(KILN_ERR_IO, "kiln_dist_checkpoint_load", "rank %d cannot write a temporary copy in %s",
                               kiln_dist_rank(), tmp);
        if (fd >= 0) unlink(tmp);
    }
    free(bytes);
    return st;
}
