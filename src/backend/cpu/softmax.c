/* SOFTMAX and LOG_SOFTMAX over dim p.i[0], f32 or f64, numerically stable: the slice's max is
 * subtracted before exp, so large inputs do not overflow; a slice of -inf (or holding NaN or
 * +inf) gives NaN, like torch.
 *
 * Three layouts:
 *  - rows: the dim is contiguous in and out: per row one vector pass for the max, one for
 *    exp(x - max) and its sum (vmath's exp), one to scale or shift.
 *  - tiles: another dim is contiguous: a tile of slices advances together along the dim,
 *    with whole vectors per step.
 *  - anything else: one slice at a time with strided scalar loops.
 * Every element of a slice is read before any of it is written, and softmax writes exp(x - max)
 * only where it read x, so the output may be the input's buffer. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/reduce-impl.h"
#include "backend/cpu/vmath.h"

#define MAX_TILE 4096
#define BLOCK 512

typedef struct {
    bool log;
    kiln_dtype dt;
    const char *in;
    char *out;
    int64_t n, sin, sout; /* length and strides (elements) along the softmax dim */
    int no;               /* the other dims, merged, innermost last */
    int64_t oshape[KILN_MAX_DIMS], oin[KILN_MAX_DIMS], oout[KILN_MAX_DIMS];
    int64_t n_slices;
    size_t es;
    int64_t tile;    /* tile path: slices per tile */
    atomic_bool oom; /* tile path: a task could not get its scratch */
} splan;

/* Element offsets of slice s (or of the first slice of a tile) in and out. */
static void slice_offsets(const splan *pl, int nd, int64_t s, int64_t *in_off, int64_t *out_off) {
    int64_t a = 0, b = 0;
    for (int d = nd - 1; d >= 0; d--) {
        int64_t i = s % pl->oshape[d];
        s /= pl->oshape[d];
        a += i * pl->oin[d];
        b += i * pl->oout[d];
    }
    *in_off = a;
    *out_off = b;
}

/* ---- rows -------------------------------------------------------------------------------- */

static void row_f32(bool log_out, float *y, const float *x, int64_t n) {
    float m = kiln__rmax_f32(x, n);
    if (!log_out) {
        kiln__rsub_f32(y, x, m, 0, n);
        kiln__vexp_f32(y, y, n);
        kiln__rscale_f32(y, (float)(1.0 / kiln__rsum_f32(y, n)), n);
        return;
    }
    float buf[BLOCK];
    double s = 0;
    for (int64_t i = 0; i < n; i += BLOCK) {
        int64_t k = n - i < BLOCK ? n - i : BLOCK;
        kiln__rsub_f32(buf, x + i, m, 0, k);
        kiln__vexp_f32(buf, buf, k);
        s += kiln__rsum_f32(buf, k);
    }
    kiln__rsub_f32(y, x, m, (float)log(s), n);
}

static void row_f64(bool log_out, double *y, const double *x, int64_t n) {
    double m = kiln__rmax_f64(x, n), s = 0;
    if (!log_out) {
        for (int64_t i = 0; i < n; i++) y[i] = x[i] - m;
        kiln__vexp_f64(y, y, n);
        s = kiln__rsum_f64(y, n);
        for (int64_t i = 0; i < n; i++) y[i] /= s;
        return;
    }
    double buf[BLOCK];
    for (int64_t i = 0; i < n; i += BLOCK) {
        int64_t k = n - i < BLOCK ? n - i : BLOCK;
        for (int64_t j = 0; j < k; j++) buf[j] = x[i + j] - m;
        kiln__vexp_f64(buf, buf, k);
        s += kiln__rsum_f64(buf, k);
    }
    double ls = log(s);
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] - m) - ls;
}


/* ---- tiles ------------------------------------------------------------------------------- */

/* w slices side by side (contiguous across the tile), n steps of sin / sout along the dim.
 * scratch holds w doubles and 3 * w floats. */
static void tile_f32(const splan *pl, const float *x, float *y, int64_t w, double *scratch) {
    double *sum = scratch;
    float *mx = (float *)(scratch + w), *buf = mx + w, *fac = buf + w;
    for (int64_t j = 0; j < w; j++) mx[j] = -INFINITY, sum[j] = 0;
    for (int64_t k = 0; k < pl->n; k++) kiln__rcol_max_f32(mx, x + k * pl->sin, w);
    for (int64_t k = 0; k < pl->n; k++) {
        kiln__rvsub_f32(buf, x + k * pl->sin, mx, w);
        kiln__vexp_f32(buf, buf, w);
        kiln__rcol_sum_f32(sum, buf, w);
        if (!pl->log) memcpy(y + k * pl->sout, buf, sizeof(float) * (size_t)w);
    }
    for (int64_t j = 0; j < w; j++) fac[j] = (float)(pl->log ? log(sum[j]) : 1.0 / sum[j]);
    for (int64_t k = 0; k < pl->n; k++) {
        float *yr = y + k * pl->sout;
        if (pl->log) {
            kiln__rvsub_f32(yr, x + k * pl->sin, mx, w);
            kiln__rvsub_f32(yr, yr, fac, w);
        } else {
            kiln__rvmul_f32(yr, fac, w);
        }
    }
}

/* scratch holds 3 * w doubles. */
static void tile_f64(const splan *pl, const double *x, double *y, int64_t w, double *scratch) {
    double *mx = scratch, *buf = scratch + w, *sum = scratch + 2 * w;
    for (int64_t j = 0; j < w; j++) mx[j] = -INFINITY, sum[j] = 0;
    for (int64_t k = 0; k < pl->n; k++) {
        const double *xr = x + k * pl->sin;
        for (int64_t j = 0; j < w; j++) mx[j] = xr[j] > mx[j] ? xr[j] : mx[j];
    }
    for (int64_t k = 0; k < pl->n; k++) {
        const double *xr = x + k * pl->sin;
        for (int64_t j = 0; j < w; j++) buf[j] = xr[j] - mx[j];
        kiln__vexp_f64(buf, buf, w);
        kiln__rcol_sum_f64(sum, buf, w);
        if (!pl->log) memcpy(y + k * pl->sout, buf, sizeof(double) * (size_t)w);
    }
    for (int64_t j = 0; j < w; j++) sum[j] = pl->log ? log(sum[j]) : 1.0 / sum[j];
    for (int64_t k = 0; k < pl->n; k++) {
        const double *xr = x + k * pl->sin;
        double *yr = y + k * pl->sout;
        if (pl->log)
            for (int64_t j = 0; j < w; j++) yr[j] = (xr[j] - mx[j]) - sum[j];
        else
            for (int64_t j = 0; j < w; j++) yr[j] *= sum[j];
    }
}

static void tiles_task(void *ctx, int64_t begin, int64_t end) {
    splan *pl = ctx;
    int64_t L = pl->oshape[pl->no - 1], tw = pl->tile, ntiles = (L + tw - 1) / tw;
    void *scratch = malloc((size_t)tw * 3 * sizeof(double));
    if (!scratch) {
        atomic_store(&pl->oom, true);
        return;
    }
    for (int64_t t = begin; t < end; t++) {
        int64_t outer = t / ntiles, j0 = (t % ntiles) * tw, w = L - j0 < tw ? L - j0 : tw, io, oo;
        slice_offsets(pl, pl->no, outer * L + j0, &io, &oo);
        const char *x = pl->in + io * (int64_t)pl->es;
        char *y = pl->out + oo * (int64_t)pl->es;
        if (pl->dt == KILN_F32) tile_f32(pl, (const float *)x, (float *)y, w, scratch);
        else tile_f64(pl, (const double *)x, (double *)y, w, scratch);
    }
    free(scratch);
}

/* ---- any strides ------------------------------------------------------------------------- */

static double ld(const splan *pl, const char *p, int64_t i) {
    return pl->dt == KILN_F32 ? ((const float *)p)[i] : ((const double *)p)[i];
}

static void strided_slice(const splan *pl, const char *x, char *y) {
    double m = -INFINITY, s = 0;
    for (int64_t k = 0; k < pl->n; k++) m = fmax(m, ld(pl, x, k * pl->sin));
    for (int64_t k = 0; k < pl->n; k++) s += exp(ld(pl, x, k * pl->sin) - m);
    double ls = log(s);
    for (int64_t k = 0; k < pl->n; k++) {
        double v = ld(pl, x, k * pl->sin) - m;
        v = pl->log ? v - ls : exp(v) / s;
        if (pl->dt == KILN_F32) ((float *)y)[k * pl->sout] = (float)v;
        else ((double *)y)[k * pl->sout] = v;
    }
}

/* One slice at a time: rows when the dim is contiguous, strided loops otherwise. */
static void slices_task(void *ctx, int64_t begin, int64_t end) {
    const splan *pl = ctx;
    bool rows = pl->sin == 1 && pl->sout == 1;
    for (int64_t r = begin; r < end; r++) {
        int64_t io, oo;
        slice_offsets(pl, pl->no, r, &io, &oo);
        const char *x = pl->in + io * (int64_t)pl->es;
        char *y = pl->out + oo * (int64_t)pl->es;
        if (!rows) strided_slice(pl, x, y);
        else if (pl->dt == KILN_F32) row_f32(pl->log, (float *)y, (const float *)x, pl->n);
        else row_f64(pl->log, (double *)y, (const double *)x, pl->n);
    }
}

/* ---- planning ---------------------------------------------------------------------------- */

static void plan_build(splan *pl, const kiln__op *op) {
    const kiln__view *in = &op->in[0], *out = &op->out[0];
    int dim = (int)op->p.i[0];
    memset(pl, 0, sizeof *pl);
    pl->log = op->code == KILN__OP_LOG_SOFTMAX;
    pl->dt = in->dtype;
    pl->es = kiln__elsize(in->dtype);
    pl->in = kiln__view_ptr(in);
    pl->out = kiln__view_ptr(out);
    pl->n = 1;
    pl->sin = pl->sout = 1;
    if (dim < in->ndim && in->shape[dim] != 1) {
        pl->n = in->shape[dim];
        pl->sin = in->strides[dim];
        pl->sout = out->strides[dim];
    }
    pl->n_slices = 1;
    for (int d = 0; d < in->ndim; d++) {
        if (d == dim || in->shape[d] == 1) continue;
        pl->oshape[pl->no] = in->shape[d];
        pl->oin[pl->no] = in->strides[d];
        pl->oout[pl->no++] = out->strides[d];
        pl->n_slices *= in->shape[d];
    }
    /* merge neighbours that step as one in both views */
    int m = 0;
    for (int d = 0; d < pl->no; d++) {
        if (m > 0 && pl->oin[m - 1] == pl->oin[d] * pl->oshape[d] && pl->oout[m - 1] == pl->oout[d] * pl->oshape[d]) {
            pl->oshape[m - 1] *= pl->oshape[d];
            pl->oin[m - 1] = pl->oin[d];
            pl->oout[m - 1] = pl->oout[d];
            continue;
        }
        pl->oshape[m] = pl->oshape[d];
        pl->oin[m] = pl->oin[d];
        pl->oout[m++] = pl->oout[d];
    }
    pl->no = m;
}

static kiln_status kernel_softmax(const kiln__op *op) {
    kiln_dtype dt = op->in[0].dtype;
    if ((dt != KILN_F32 && dt != KILN_F64) || op->out[0].dtype != dt) {
        kiln__kernel_error("no CPU %s kernel for %s", kiln__opcode_name(op->code), kiln_dtype_name(dt));
        return KILN_ERR_DTYPE;
    }
    splan pl;
    plan_build(&pl, op);
    if (pl.n_slices == 0 || pl.n == 0) return KILN_OK;
    int64_t grain = 32768 / pl.n;
    if (grain < 1) grain = 1;
    bool rows = pl.sin == 1 && pl.sout == 1;
    if (rows || pl.no == 0 || pl.oin[pl.no - 1] != 1 || pl.oout[pl.no - 1] != 1 || pl.oshape[pl.no - 1] < 8) {
        kiln__parallel_for(pl.n_slices, grain, slices_task, &pl);
        return KILN_OK;
    }
    /* Wide tiles: each step along the dim reads one long contiguous piece (the whole block
     * when the tile spans the contiguous dim), which the prefetchers stream far better than
     * many short pieces that would fit in L2. Narrower only to feed every thread. */
    int64_t L = pl.oshape[pl.no - 1], outer = pl.n_slices / L;
    pl.tile = L < MAX_TILE ? L : MAX_TILE;
    while (pl.tile > 256 && outer * ((L + pl.tile - 1) / pl.tile) < 4 * kiln__pool_threads())
        pl.tile = (pl.tile / 2 + 15) & ~(int64_t)15;
    int64_t tiles = outer * ((L + pl.tile - 1) / pl.tile), tgrain = grain / pl.tile;
    atomic_init(&pl.oom, false);
    kiln__parallel_for(tiles, tgrain < 1 ? 1 : tgrain, tiles_task, &pl);
    if (atomic_load(&pl.oom)) {
        kiln__kernel_error("out of memory for softmax scratch");
        return KILN_ERR_OUT_OF_MEMORY;
    }
    return KILN_OK;
}

void kiln__cpu_register_softmax(kiln__kernel_fn *table) {
    table[KILN__OP_SOFTMAX] = kernel_softmax;
    table[KILN__OP_LOG_SOFTMAX] = kernel_softmax;
}
