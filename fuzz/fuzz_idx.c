/* libFuzzer target for the IDX reader: each input is written to an in-memory file (memfd)
 * and loaded through kiln_idx_dataset_new by path, once as the images and once as the labels
 * beside a valid partner, so the real open, gzip and header code runs unchanged. */
#define _GNU_SOURCE
#include <kiln.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An in-memory file holding n bytes; its path in path. -1 on failure. */
static int memfile(const void *bytes, size_t n, char *path, size_t path_size) {
    int fd = memfd_create("kiln-fuzz", MFD_CLOEXEC);
    if (fd < 0) return -1;
    if (n && write(fd, bytes, n) != (ssize_t)n) {
        close(fd);
        return -1;
    }
    snprintf(path, path_size, "/proc/self/fd/%d", fd);
    return fd;
}

/* Builds the dataset, reads its last sample (the one whose bounds a bad header would break). */
static void load(const char *images, const char *labels) {
    kiln_dataset *ds = kiln_idx_dataset_new(images, labels);
    int64_t n = kiln_dataset_length(ds);
    if (ds && n > 0) {
        kiln_tensor x, y;
        if (kiln_dataset_get(ds, n - 1, &x, &y) == KILN_OK) kiln_release(x), kiln_release(y);
    }
    kiln_dataset_free(ds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* one 2x2 image and its label: a valid partner for either side */
    static const uint8_t images[] = {0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 2, 1, 2, 3, 4};
    static const uint8_t labels[] = {0, 0, 8, 1, 0, 0, 0, 1, 7};
    char in_path[64], img_path[64], lbl_path[64];
    int in = memfile(data, size, in_path, sizeof in_path);
    int img = memfile(images, sizeof images, img_path, sizeof img_path);
    int lbl = memfile(labels, sizeof labels, lbl_path, sizeof lbl_path);
    if (in >= 0 && img >= 0 && lbl >= 0) {
        load(in_path, lbl_path);
        load(img_path, in_path);
    }
    if (in >= 0) close(in);
    if (img >= 0) close(img);
    if (lbl >= 0) close(lbl);
    return 0;
}
