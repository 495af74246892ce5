/* Fashion-MNIST with kiln.
 *
 * For now this loads the dataset (Debian's dataset-fashion-mnist) into kiln tensors and
 * reports its statistics through kiln ops; training (an MLP and a small CNN) arrives with
 * the nn/optim/data layers. */
#include <kiln.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if KILN_HAVE_ZLIB
#include <zlib.h>
#endif

#define DATA_DIR "/usr/share/datasets/fashion-mnist"

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads a gzip'd IDX file of unsigned bytes; returns the payload and its dims. */
static unsigned char *read_idx(const char *path, int *ndim, uint32_t dims[3], size_t *count) {
#if KILN_HAVE_ZLIB
    gzFile f = gzopen(path, "rb");
    if (!f) return NULL;
    unsigned char head[16];
    if (gzread(f, head, 4) != 4 || head[0] || head[1] || head[2] != 0x08 || head[3] < 1 || head[3] > 3) {
        gzclose(f);
        return NULL;
    }
    *ndim = head[3];
    size_t n = 1;
    for (int d = 0; d < *ndim; d++) {
        unsigned char b[4];
        if (gzread(f, b, 4) != 4) {
            gzclose(f);
            return NULL;
        }
        dims[d] = be32(b);
        n *= dims[d];
    }
    unsigned char *data = malloc(n ? n : 1);
    if (!data || gzread(f, data, (unsigned)n) != (int)n) {
        free(data);
        gzclose(f);
        return NULL;
    }
    gzclose(f);
    *count = n;
    return data;
#else
    (void)path, (void)ndim, (void)dims, (void)count;
    return NULL;
#endif
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : DATA_DIR;
    char path[512];
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", dir);
    int ndim = 0;
    uint32_t dims[3] = {0};
    size_t n = 0;
    unsigned char *pixels = read_idx(path, &ndim, dims, &n);
    if (!pixels || ndim != 3) {
        fprintf(stderr, "cannot read %s (install dataset-fashion-mnist; built with zlib?)\n", path);
        return 1;
    }
    float *host = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) host[i] = pixels[i];
    free(pixels);

    kiln_tensor x = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(dims[0], (int64_t)dims[1] * dims[2]), host);
    free(host);
    x = kiln_div_scalar(x, 255.0); /* x has one owner: scaled in place */
    kiln_tensor mean = kiln_mean(kiln_ref(x));
    kiln_tensor std = kiln_std_dims(x, KILN_ALL_DIMS, 1, false);
    float m, s;
    if (kiln_into_scalar(mean, &m) != KILN_OK || kiln_into_scalar(std, &s) != KILN_OK) {
        fprintf(stderr, "%s\n", kiln_last_error());
        return 1;
    }
    printf("Fashion-MNIST train: %u images of %ux%u, pixel mean %.4f std %.4f\n", dims[0], dims[1], dims[2], m, s);
    printf("(training lands with kiln's nn/optim/data layers)\n");
    return 0;
}
