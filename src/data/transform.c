/* Transforms: datasets that wrap a base dataset (taking it) and change its inputs after
 * get(). Random ones draw from the per-sample seed only, so a sample looks the same for the
 * same loader seed, epoch and index, on any worker, and changes from epoch to epoch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/data-impl.h"

typedef enum { NORMALIZE, RANDOM_CROP, RANDOM_HFLIP } transform_kind;

typedef struct {
    transform_kind kind;
    kiln_dataset *base;
    int64_t planes, height, width; /* input viewed as [planes, H, W] (crop, flip) */
    int64_t per_plane;             /* elements per channel (normalize) */
    size_t elsize;
    int padding;
    double p;
    int n;          /* normalize: 1 or the channel count */
    double *mean, *inv_std;
} transform_ctx;

static int64_t transform_length(void *ctx) {
    transform_ctx *t = ctx;
    return t->base->desc.length(t->base->ctx);
}

static void transform_free(void *ctx) {
    transform_ctx *t = ctx;
    if (!t) return;
    kiln_dataset_free(t->base);
    free(t->mean);
    free(t);
}

static void normalize(const transform_ctx *t, kiln_dtype dtype, void *x) {
    int64_t channels = t->n == 1 ? 1 : t->n, per = t->n == 1 ? t->base->input_numel : t->per_plane;
    for (int64_t c = 0; c < channels; c++) {
        double m = t->mean[c], s = t->inv_std[c];
        int64_t lo = c * per, hi = lo + per;
        if (dtype == KILN_F32) {
            float *v = x, fm = (float)m, fs = (float)s;
            for (int64_t i = lo; i < hi; i++) v[i] = (v[i] - fm) * fs;
        } else if (dtype == KILN_F64) {
            double *v = x;
            for (int64_t i = lo; i < hi; i++) v[i] = (v[i] - m) * s;
        } else {
            for (int64_t i = lo; i < hi; i++) kiln__store_from_f64(x, dtype, i, (kiln__load_as_f64(x, dtype, i) - m) * s);
        }
    }
}

/* Moves each [H, W] plane by (dy, dx): out[y][x] = in[y + dy][x + dx], zero outside. In place:
 * rows are visited in the order that reads each source row before it is overwritten. */
static void shift_planes(const transform_ctx *t, unsigned char *x, int64_t dy, int64_t dx) {
    size_t es = t->elsize, row = (size_t)t->width * es;
    int64_t h = t->height, w = t->width;
    int64_t adx = dx < 0 ? -dx : dx;
    size_t keep = adx < w ? (size_t)(w - adx) * es : 0;
    for (int64_t p = 0; p < t->planes; p++) {
        unsigned char *plane = x + (size_t)p * (size_t)h * row;
        for (int64_t k = 0; k < h; k++) {
            int64_t y = dy > 0 ? k : h - 1 - k, sy = y + dy;
            unsigned char *dst = plane + (size_t)y * row;
            if (sy < 0 || sy >= h || !keep) {
                memset(dst, 0, row);
                continue;
            }
            const unsigned char *src = plane + (size_t)sy * row;
            if (dx >= 0) {
                memmove(dst, src + (size_t)dx * es, keep);
                memset(dst + keep, 0, row - keep);
            } else {
                memmove(dst + row - keep, src, keep);
                memset(dst, 0, row - keep);
            }
        }
    }
}

#define FLIP_ROWS(type)                                                       \
    for (int64_t r = 0; r < rows; r++) {                                      \
        type *a = (type *)x + r * w, *b = a + w - 1;                          \
        for (; a < b; a++, b--) {                                             \
            type tmp = *a;                                                    \
            *a = *b;                                                          \
            *b = tmp;                                                         \
        }                                                                     \
    }

static void flip_rows(const transform_ctx *t, void *x) {
    int64_t rows = t->planes * t->height, w = t->width;
    switch (t->elsize) { /* by element size: a flip only moves elements */
    case 1: FLIP_ROWS(uint8_t) break;
    case 2: FLIP_ROWS(uint16_t) break;
    case 4: FLIP_ROWS(uint32_t) break;
    default: FLIP_ROWS(uint64_t) break;
    }
}
#undef FLIP_ROWS

static kiln_status transform_get(void *ctx, int64_t index, void *input, void *target, uint64_t seed) {
    transform_ctx *t = ctx;
    /* the base draws from a seed of its own: stacked transforms of one kind stay independent */
    kiln_status st = t->base->desc.get(t->base->ctx, index, input, target, kiln__mix64(seed ^ 0x42415345ull));
    if (st != KILN_OK) return st;
    uint64_t r = kiln__mix64(seed ^ ((uint64_t)t->kind + 1) * 0x7472616e73ull);
    switch (t->kind) {
    case NORMALIZE:
        normalize(t, t->base->desc.input_dtype, input);
        break;
    case RANDOM_CROP: {
        uint64_t span = 2 * (uint64_t)t->padding + 1;
        int64_t dy = (int64_t)kiln__below(r, span) - t->padding;
        int64_t dx = (int64_t)kiln__below(kiln__mix64(r), span) - t->padding;
        if (dy || dx) shift_planes(t, input, dy, dx);
        break;
    }
    case RANDOM_HFLIP:
        if ((double)(r >> 11) * 0x1p-53 < t->p) flip_rows(t, input);
        break;
    }
    return KILN_OK;
}

/* A transform around base, or NULL (base freed) with the error reported for `op`. */
static kiln_dataset *wrap(const char *op, kiln_dataset *base, transform_ctx *t, kiln_status st, const char *why) {
    if (st == KILN_OK && !t) st = KILN_ERR_OUT_OF_MEMORY, why = "cannot allocate the transform";
    if (st != KILN_OK) {
        transform_free(t);
        if (!t) kiln_dataset_free(base);
        kiln__report(st, op, "%s", why);
        return NULL;
    }
    kiln_dataset_desc d = base->desc;
    d.length = transform_length;
    d.get = transform_get;
    d.free = transform_free;
    return kiln__dataset_make(op, d, t);
}

/* Shared checks of crop and flip: an input of >= 2 dims viewed as [planes, H, W]. */
static kiln_status image_layout(kiln_dataset *base, transform_ctx **out, transform_kind kind, const char **why) {
    *out = NULL;
    if (!base) return *why = "base dataset is NULL", KILN_ERR_NULL;
    kiln_shape s = base->desc.input_shape;
    if (s.ndim < 2) return *why = "input needs at least 2 dims (..., H, W)", KILN_ERR_SHAPE;
    transform_ctx *t = calloc(1, sizeof *t);
    if (!t) return *why = "cannot allocate the transform", KILN_ERR_OUT_OF_MEMORY;
    t->kind = kind;
    t->base = base;
    t->height = s.dims[s.ndim - 2];
    t->width = s.dims[s.ndim - 1];
    t->planes = t->height > 0 && t->width > 0 ? base->input_numel / (t->height * t->width) : 0;
    t->elsize = kiln__elsize(base->desc.input_dtype);
    *out = t;
    return KILN_OK;
}

kiln_dataset *kiln_transform_random_crop(kiln_dataset *base, int padding) {
    static const char op[] = "kiln_transform_random_crop";
    /* (a dead base is not freed: it may be gone already) */
    if (base) KILN__OBJECT_OR_RETURN(base, KILN__DATASET_KIND, op, NULL);
    const char *why = NULL;
    transform_ctx *t = NULL;
    kiln_status st = padding < 0 || padding > (1 << 20) ? (why = "padding must be in 0..2^20", KILN_ERR_INVALID_ARGUMENT)
                                                        : image_layout(base, &t, RANDOM_CROP, &why);
    if (t) t->padding = padding;
    return wrap(op, base, t, st, why);
}

kiln_dataset *kiln_transform_random_hflip(kiln_dataset *base, double p) {
    static const char op[] = "kiln_transform_random_hflip";
    /* (a dead base is not freed: it may be gone already) */
    if (base) KILN__OBJECT_OR_RETURN(base, KILN__DATASET_KIND, op, NULL);
    const char *why = NULL;
    transform_ctx *t = NULL;
    kiln_status st = !(p >= 0 && p <= 1) ? (why = "probability must be in [0, 1]", KILN_ERR_INVALID_ARGUMENT)
                                         : image_layout(base, &t, RANDOM_HFLIP, &why);
    if (t) t->p = p;
    return wrap(op, base, t, st, why);
}

kiln_dataset *kiln_transform_normalize(kiln_dataset *base, int n, const double *mean, const double *std) {
    static const char op[] = "kiln_transform_normalize";
    /* (a dead base is not freed: it may be gone already) */
    if (base) KILN__OBJECT_OR_RETURN(base, KILN__DATASET_KIND, op, NULL);
    const char *why = NULL;
    kiln_status st = KILN_OK;
    transform_ctx *t = NULL;
    if (!base || !mean || !std)
        st = KILN_ERR_NULL, why = "base dataset, mean or std is NULL";
    else if (!kiln__dtype_is_float(base->desc.input_dtype))
        st = KILN_ERR_DTYPE, why = "normalize needs float inputs";
    else if (n < 1 || (n > 1 && (base->desc.input_shape.ndim < 1 || base->desc.input_shape.dims[0] != n)))
        st = KILN_ERR_SHAPE, why = "n must be 1 or the size of the input's dim 0 (channels)";
    for (int c = 0; st == KILN_OK && c < n; c++)
        if (!isfinite(mean[c]) || !isfinite(std[c]) || std[c] == 0)
            st = KILN_ERR_INVALID_ARGUMENT, why = "mean and std must be finite, std non-zero";
    if (st == KILN_OK && (t = calloc(1, sizeof *t)) && (t->mean = malloc(2 * sizeof(double) * (size_t)n))) {
        t->kind = NORMALIZE;
        t->base = base;
        t->n = n;
        t->inv_std = t->mean + n;
        t->per_plane = n > 1 ? base->input_numel / n : base->input_numel;
        for (int c = 0; c < n; c++) t->mean[c] = mean[c], t->inv_std[c] = 1.0 / std[c];
    } else if (t) {
        free(t), t = NULL;
    }
    return wrap(op, base, t, st, why);
}
