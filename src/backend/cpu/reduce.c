/* The reduction kernel of every KERNEL row of ir/reduce_table.h (SUM MEAN PROD MAX MIN VAR
 * LOGSUMEXP ARGMAX ARGMIN), driven by the row's fold (the combine step and its identity) and
 * finish (what is written from the accumulator): a new row with a known fold and finish needs
 * no edit here.
 *
 * The op layer hands over f32, f64 or i64 input (and bf16 for SUM and MEAN, into f32: read as
 * stored, see reduce-impl.h); out has in's ndim with the reduced dims of
 * size 1. The kernel sorts and merges dims into a kept list and a reduced list, then takes
 * one of two paths:
 *  - runs: each output folds its reduced elements as runs along the innermost reduced dim
 *    (vectorised when that dim is contiguous: row sums). When there are few outputs, their
 *    reduced range is cut into fixed pieces folded in parallel and merged in order, so a full
 *    reduction uses every thread and gives the same bits whatever the thread count.
 *  - columns: the innermost kept dim is contiguous, so a tile of outputs is folded with whole
 *    vectors of input per reduced index (column sums).
 * Sums and means over [outer, K, inner] blocks (outer and inner reduced: a conv's bias
 * gradient) go to reduce_blocks.c, which reads them in memory order.
 * Float inputs accumulate in double (f32 row sums in f32 blocks of 256 added into double);
 * i64 sums and products wrap like torch. The SQDEV and EXPSUM folds (VAR, LOGSUMEXP) take two
 * passes: the mean (or max) first, then the sum of squared deviations (or of exp(x - max)). */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/reduce-impl.h"
#include "backend/cpu/vmath.h"

/* The table's folds, by their short names here. */
enum {
    FOLD_SUM = KILN__RFOLD_SUM,
    FOLD_PROD = KILN__RFOLD_PROD,
    FOLD_MAX = KILN__RFOLD_MAX,
    FOLD_MIN = KILN__RFOLD_MIN,
    FOLD_SQDEV = KILN__RFOLD_SQDEV,
    FOLD_EXPSUM = KILN__RFOLD_EXPSUM
};

/* Reduced elements per parallel piece when a few outputs split their range. */
#define PIECE ((int64_t)32768)
#define MAX_PARTIALS 4096
/* Outputs per column tile, at most. */
#define MAX_TILE 16384

typedef struct {
    double f;    /* float inputs */
    int64_t i;   /* i64 inputs */
    int64_t idx; /* argmax/argmin: flat reduced position of the best value so far */
} racc;

typedef struct {
    kiln__opcode code;
    int fold;                   /* FOLD_ */
    kiln__reduce_finish finish; /* the row's */
    kiln_dtype dt, out_dt;
    int nk, nr;
    int64_t kshape[KILN_MAX_DIMS], kin[KILN_MAX_DIMS], kout[KILN_MAX_DIMS];
    int64_t rshape[KILN_MAX_DIMS], rin[KILN_MAX_DIMS];
    int64_t n_out, n_red;
    const char *in;
    char *out;
    size_t es, out_es;
    double divisor; /* VAR: max(0, n - correction) */
    int64_t tile;   /* column path: outputs per tile */
    bool take_sqrt;
} rplan;

/* ---- elementwise rules ------------------------------------------------------------------- */

/* NaN wins and stays: max and min propagate NaN like torch. */
static inline double fmax_nan(double a, double b) { return (b > a || isnan(b)) && !isnan(a) ? b : a; }
static inline double fmin_nan(double a, double b) { return (b < a || isnan(b)) && !isnan(a) ? b : a; }

/* SQDEV and EXPSUM fold against a statistic of their group, found by a first pass. */
static bool two_pass(const rplan *pl) { return pl->fold == FOLD_SQDEV || pl->fold == FOLD_EXPSUM; }
static int first_pass_fold(const rplan *pl) { return pl->fold == FOLD_EXPSUM ? FOLD_MAX : FOLD_SUM; }
static int main_fold(const rplan *pl) { return pl->fold; }
static bool is_arg(const rplan *pl) { return pl->finish == KILN__RFIN_INDEX; }

static racc identity(int fop) {
    racc a = {0, 0, 0};
    switch (fop) {
    case FOLD_PROD: a.f = 1; a.i = 1; break;
    case FOLD_MAX: a.f = -INFINITY; a.i = INT64_MIN; break;
    case FOLD_MIN: a.f = INFINITY; a.i = INT64_MAX; break;
    default: break;
    }
    a.idx = -1;
    return a;
}

/* Combines two partial results of the same fold (a before b in reduced order). */
static racc merge(int fop, bool arg, racc a, racc b) {
    switch (fop) {
    case FOLD_PROD:
        a.f *= b.f;
        a.i = (int64_t)((uint64_t)a.i * (uint64_t)b.i);
        return a;
    case FOLD_MAX:
    case FOLD_MIN: {
        bool better = fop == FOLD_MAX ? (b.f > a.f || b.i > a.i) : (b.f < a.f || b.i < a.i);
        if (isnan(a.f)) return a;
        if (isnan(b.f) || better || (arg && a.idx < 0)) return b;
        return a;
    }
    default:
        a.f += b.f;
        a.i = (int64_t)((uint64_t)a.i + (uint64_t)b.i);
        return a;
    }
}

/* The statistic pass 2 uses, from pass 1's accumulator. */
static double stat_of(const rplan *pl, racc a) {
    if (pl->fold == FOLD_SQDEV) return a.f / (double)pl->n_red;
    return isfinite(a.f) ? a.f : 0.0; /* LSE shift: +-inf and NaN rows shift by 0 */
}

static void store_final(const rplan *pl, char *o, racc a, double stat) {
    double v = a.f;
    switch (pl->finish) {
    case KILN__RFIN_MEAN: v = a.f / (double)pl->n_red; break;
    case KILN__RFIN_VAR:
        v = a.f / pl->divisor;
        if (pl->take_sqrt) v = sqrt(v);
        break;
    case KILN__RFIN_LSE: v = stat + log(a.f); break;
    case KILN__RFIN_INDEX: *(int64_t *)o = a.idx < 0 ? 0 : a.idx; return;
    default: break;
    }
    switch (pl->out_dt) {
    case KILN_F32: *(float *)o = (float)v; break;
    case KILN_F64: *(double *)o = v; break;
    default: *(int64_t *)o = a.i; break;
    }
}

/* ---- folding a strided run --------------------------------------------------------------- */

/* x - shift into a block buffer, exp'd by vmath, summed in double. */
static double expsum_f32(const float *x, int64_t n, int64_t st, double shift) {
    float buf[512];
    float s = (float)shift;
    double acc = 0;
    for (int64_t i0 = 0; i0 < n; i0 += 512) {
        int64_t m = n - i0 < 512 ? n - i0 : 512;
        if (st == 1) kiln__rsub_f32(buf, x + i0, s, 0, m);
        else
            for (int64_t i = 0; i < m; i++) buf[i] = x[(i0 + i) * st] - s;
        kiln__vexp_f32(buf, buf, m);
        acc += kiln__rsum_f32(buf, m);
    }
    return acc;
}

#define FOLD_FLOAT(T, SUF)                                                                      \
    static double fold_##SUF(int fop, const T *x, int64_t n, int64_t st, double stat, double acc) { \
        double a = acc;                                                                          \
        switch (fop) {                                                                           \
        case FOLD_SUM:                                                                           \
            if (st == 1) return a + kiln__rsum_##SUF(x, n);                                      \
            for (int64_t i = 0; i < n; i++) a += x[i * st];                                      \
            return a;                                                                            \
        case FOLD_PROD:                                                                          \
            for (int64_t i = 0; i < n; i++) a *= x[i * st];                                      \
            return a;                                                                            \
        case FOLD_MAX:                                                                           \
            if (st == 1) return fmax_nan(a, kiln__rmax_##SUF(x, n));                             \
            for (int64_t i = 0; i < n; i++) a = fmax_nan(a, x[i * st]);                          \
            return a;                                                                            \
        case FOLD_MIN:                                                                           \
            if (st == 1) return fmin_nan(a, kiln__rmin_##SUF(x, n));                             \
            for (int64_t i = 0; i < n; i++) a = fmin_nan(a, x[i * st]);                          \
            return a;                                                                            \
        case FOLD_SQDEV:                                                                         \
            if (st == 1) return a + kiln__rsqdev_##SUF(x, n, stat);                              \
            for (int64_t i = 0; i < n; i++) {                                                    \
                double d = (double)x[i * st] - stat;                                             \
                a += d * d;                                                                      \
            }                                                                                    \
            return a;                                                                            \
        default:                                                                                 \
            return a + expsum_##SUF(x, n, st, stat);                                             \
        }                                                                                        \
    }

static double expsum_f64(const double *x, int64_t n, int64_t st, double shift) {
    double acc = 0;
    for (int64_t i = 0; i < n; i++) acc += exp(x[i * st] - shift);
    return acc;
}

FOLD_FLOAT(float, f32)
FOLD_FLOAT(double, f64)

static int64_t fold_i64(int fop, const int64_t *x, int64_t n, int64_t st, int64_t acc) {
    uint64_t u = (uint64_t)acc;
    int64_t a = acc;
    switch (fop) {
    case FOLD_SUM:
        for (int64_t i = 0; i < n; i++) u += (uint64_t)x[i * st];
        return (int64_t)u;
    case FOLD_PROD:
        for (int64_t i = 0; i < n; i++) u *= (uint64_t)x[i * st];
        return (int64_t)u;
    case FOLD_MAX:
        for (int64_t i = 0; i < n; i++) a = x[i * st] > a ? x[i * st] : a;
        return a;
    default:
        for (int64_t i = 0; i < n; i++) a = x[i * st] < a ? x[i * st] : a;
        return a;
    }
}

/* First position in the run holding v (NaN matches NaN). */
static int64_t find_first(const rplan *pl, const char *p, int64_t n, int64_t st, racc v) {
    if (pl->dt == KILN_F32 && st == 1) return kiln__rfind_f32((const float *)p, n, (float)v.f);
    for (int64_t i = 0; i < n; i++) {
        const char *e = p + i * st * (int64_t)pl->es;
        switch (pl->dt) {
        case KILN_F32: {
            float x = *(const float *)e;
            if (x == (float)v.f || (isnan(x) && isnan(v.f))) return i;
            break;
        }
        case KILN_F64: {
            double x = *(const double *)e;
            if (x == v.f || (isnan(x) && isnan(v.f))) return i;
            break;
        }
        default:
            if (*(const int64_t *)e == v.i) return i;
            break;
        }
    }
    return 0; /* not reached: v came from this run */
}

/* Folds n elements at p (stride st elements) that sit at flat reduced position pos. */
static racc fold_run(const rplan *pl, int fop, const char *p, int64_t n, int64_t st, double stat, racc acc,
                     int64_t pos) {
    racc r = is_arg(pl) ? identity(fop) : acc;
    switch (pl->dt) {
    case KILN_F32: r.f = fold_f32(fop, (const float *)p, n, st, stat, r.f); break;
    case KILN_F64: r.f = fold_f64(fop, (const double *)p, n, st, stat, r.f); break;
    case KILN_BF16: r.f += kiln__rsum_bf16((const uint16_t *)p, n, st); break; /* sums only (kernel_reduce) */
    default: r.i = fold_i64(fop, (const int64_t *)p, n, st, r.i); break;
    }
    if (!is_arg(pl)) return r;
    if (n == 0) return acc;
    r.idx = pos + find_first(pl, p, n, st, r);
    return merge(fop, true, acc, r);
}

/* Folds flat reduced positions [r0, r1) of the output whose input starts at base. */
static racc fold_range(const rplan *pl, int fop, const char *base, int64_t r0, int64_t r1, double stat, racc acc) {
    int nr = pl->nr;
    if (r0 >= r1) return acc; /* also an empty reduced dim */
    if (nr == 0) return fold_run(pl, fop, base, 1, 1, stat, acc, 0);
    int64_t idx[KILN_MAX_DIMS], off = 0, rem = r0;
    for (int d = nr - 1; d >= 0; d--) {
        idx[d] = rem % pl->rshape[d];
        rem /= pl->rshape[d];
        off += idx[d] * pl->rin[d];
    }
    int64_t inner = pl->rshape[nr - 1], ist = pl->rin[nr - 1], es = (int64_t)pl->es;
    for (int64_t pos = r0; pos < r1;) {
        int64_t run = inner - idx[nr - 1];
        if (run > r1 - pos) run = r1 - pos;
        acc = fold_run(pl, fop, base + off * es, run, ist, stat, acc, pos);
        pos += run;
        idx[nr - 1] += run;
        off += run * ist;
        for (int d = nr - 1; d > 0 && idx[d] == pl->rshape[d]; d--) {
            idx[d] = 0;
            off -= pl->rshape[d] * pl->rin[d];
            idx[d - 1]++;
            off += pl->rin[d - 1];
        }
    }
    return acc;
}

/* ---- the runs path ----------------------------------------------------------------------- */

typedef struct {
    const rplan *pl;
    int64_t pieces;
    int fop;
    const double *stats; /* per output, for pass 2 when split */
    racc *partials;      /* [n_out * pieces] when split */
} runs_job;

/* Input and output element offsets of output o. */
static void kept_offsets(const rplan *pl, int64_t o, int64_t *in_off, int64_t *out_off) {
    int64_t a = 0, b = 0;
    for (int d = pl->nk - 1; d >= 0; d--) {
        int64_t i = o % pl->kshape[d];
        o /= pl->kshape[d];
        a += i * pl->kin[d];
        b += i * pl->kout[d];
    }
    *in_off = a;
    *out_off = b;
}

static void runs_task(void *ctx, int64_t begin, int64_t end) {
    const runs_job *job = ctx;
    const rplan *pl = job->pl;
    int64_t es = (int64_t)pl->es, oes = (int64_t)pl->out_es;
    for (int64_t t = begin; t < end; t++) {
        int64_t o = t / job->pieces, piece = t % job->pieces, in_off, out_off;
        kept_offsets(pl, o, &in_off, &out_off);
        const char *base = pl->in + in_off * es;
        if (job->pieces > 1) {
            int64_t r0 = pl->n_red * piece / job->pieces, r1 = pl->n_red * (piece + 1) / job->pieces;
            double stat = job->stats ? job->stats[o] : 0;
            job->partials[t] = fold_range(pl, job->fop, base, r0, r1, stat, identity(job->fop));
            continue;
        }
        double stat = 0;
        if (two_pass(pl)) {
            int f1 = first_pass_fold(pl);
            stat = stat_of(pl, fold_range(pl, f1, base, 0, pl->n_red, 0, identity(f1)));
        }
        racc a = fold_range(pl, job->fop, base, 0, pl->n_red, stat, identity(job->fop));
        store_final(pl, pl->out + out_off * oes, a, stat);
    }
}

/* Runs one split pass and merges each output's pieces in order into res[o]. */
static void runs_split_pass(runs_job *job, int fop, const double *stats, racc *res) {
    const rplan *pl = job->pl;
    job->fop = fop;
    job->stats = stats;
    kiln__parallel_for(pl->n_out * job->pieces, 1, runs_task, job);
    for (int64_t o = 0; o < pl->n_out; o++) {
        racc a = identity(fop);
        for (int64_t p = 0; p < job->pieces; p++) a = merge(fop, is_arg(pl), a, job->partials[o * job->pieces + p]);
        res[o] = a;
    }
}

static kiln_status reduce_runs(const rplan *pl) {
    runs_job job = {.pl = pl, .pieces = 1, .fop = main_fold(pl)};
    if (pl->n_out < 64 && pl->n_red >= 2 * PIECE) {
        job.pieces = (pl->n_red + PIECE - 1) / PIECE;
        if (job.pieces * pl->n_out > MAX_PARTIALS) job.pieces = MAX_PARTIALS / pl->n_out;
    }
    if (job.pieces == 1) {
        int64_t grain = PIECE / (pl->n_red ? pl->n_red : 1);
        kiln__parallel_for(pl->n_out, grain < 1 ? 1 : grain, runs_task, &job);
        return KILN_OK;
    }
    /* few outputs (< 64), so the scratch is small */
    racc *partials = malloc(sizeof(racc) * (size_t)(pl->n_out * job.pieces));
    racc res[64];
    double stats[64];
    if (!partials) {
        kiln__kernel_error("out of memory for reduction scratch");
        return KILN_ERR_OUT_OF_MEMORY;
    }
    job.partials = partials;
    if (two_pass(pl)) {
        runs_split_pass(&job, first_pass_fold(pl), NULL, res);
        for (int64_t o = 0; o < pl->n_out; o++) stats[o] = stat_of(pl, res[o]);
    }
    runs_split_pass(&job, main_fold(pl), two_pass(pl) ? stats : NULL, res);
    for (int64_t o = 0; o < pl->n_out; o++) {
        int64_t in_off, out_off;
        kept_offsets(pl, o, &in_off, &out_off);
        store_final(pl, pl->out + out_off * (int64_t)pl->out_es, res[o], two_pass(pl) ? stats[o] : 0);
    }
    free(partials);
    return KILN_OK;
}

/* ---- the columns path -------------------------------------------------------------------- */

/* A column task's accumulators (double for float input, int64 for i64), statistics of the
 * first pass, and exp scratch: one tile wide. */
typedef struct {
    union {
        double *f;
        int64_t *i;
    } acc;
    double *stat;
    float *ebuf;
} col_scratch;

/* acc[j] folds x[j] for j < n. */
static void col_fold(const rplan *pl, int fop, col_scratch *sc, const char *p, int64_t n) {
    if (pl->dt == KILN_I64) {
        int64_t *acc = sc->acc.i;
        const int64_t *x = (const int64_t *)p;
        switch (fop) {
        case FOLD_SUM: for (int64_t j = 0; j < n; j++) acc[j] = (int64_t)((uint64_t)acc[j] + (uint64_t)x[j]); break;
        case FOLD_PROD: for (int64_t j = 0; j < n; j++) acc[j] = (int64_t)((uint64_t)acc[j] * (uint64_t)x[j]); break;
        case FOLD_MAX: for (int64_t j = 0; j < n; j++) acc[j] = x[j] > acc[j] ? x[j] : acc[j]; break;
        default: for (int64_t j = 0; j < n; j++) acc[j] = x[j] < acc[j] ? x[j] : acc[j]; break;
        }
        return;
    }
    double *acc = sc->acc.f;
    const double *stat = sc->stat;
    if (fop == FOLD_SUM) {
        if (pl->dt == KILN_F32) kiln__rcol_sum_f32(acc, (const float *)p, n);
        else if (pl->dt == KILN_BF16) kiln__rcol_sum_bf16(acc, (const uint16_t *)p, n, sc->ebuf);
        else kiln__rcol_sum_f64(acc, (const double *)p, n);
        return;
    }
    if (fop == FOLD_EXPSUM && pl->dt == KILN_F32) {
        const float *x = (const float *)p;
        for (int64_t j = 0; j < n; j++) sc->ebuf[j] = x[j] - (float)stat[j];
        kiln__vexp_f32(sc->ebuf, sc->ebuf, n);
        for (int64_t j = 0; j < n; j++) acc[j] += sc->ebuf[j];
        return;
    }
    for (int64_t j = 0; j < n; j++) {
        double x = pl->dt == KILN_F32 ? ((const float *)p)[j] : ((const double *)p)[j];
        switch (fop) {
        case FOLD_PROD: acc[j] *= x; break;
        case FOLD_MAX: acc[j] = fmax_nan(acc[j], x); break;
        case FOLD_MIN: acc[j] = fmin_nan(acc[j], x); break;
        case FOLD_SQDEV: acc[j] += (x - stat[j]) * (x - stat[j]); break;
        default: acc[j] += exp(x - stat[j]); break;
        }
    }
}

/* Folds every reduced index into the accumulators of the tile of n starting at base. */
static void col_pass(const rplan *pl, int fop, const char *base, int64_t n, col_scratch *sc) {
    racc id = identity(fop);
    for (int64_t j = 0; j < n; j++) {
        if (pl->dt == KILN_I64) sc->acc.i[j] = id.i;
        else sc->acc.f[j] = id.f;
    }
    int nr = pl->nr;
    int64_t idx[KILN_MAX_DIMS] = {0}, off = 0, es = (int64_t)pl->es;
    bool batch = fop == FOLD_SUM && pl->dt == KILN_F32; /* f32 sums take 8 rows at a time */
    const float *rows[8];
    int nrows = 0;
    for (int64_t r = 0; r < pl->n_red; r++) {
        if (batch) {
            rows[nrows++] = (const float *)(base + off * es);
            if (nrows == 8 || r == pl->n_red - 1) kiln__rcol_sum_rows_f32(sc->acc.f, rows, nrows, n), nrows = 0;
        } else {
            col_fold(pl, fop, sc, base + off * es, n);
        }
        for (int d = nr - 1; d >= 0; d--) {
            off += pl->rin[d];
            if (++idx[d] < pl->rshape[d]) break;
            off -= pl->rshape[d] * pl->rin[d];
            idx[d] = 0;
        }
    }
}

typedef struct {
    const rplan *pl;
    atomic_bool oom;
} cols_job;

static void cols_task(void *ctx, int64_t begin, int64_t end) {
    cols_job *job = ctx;
    const rplan *pl = job->pl;
    int64_t L = pl->kshape[pl->nk - 1], w = pl->tile, ntiles = (L + w - 1) / w;
    int64_t es = (int64_t)pl->es, oes = (int64_t)pl->out_es, ost = pl->kout[pl->nk - 1];
    char *mem = malloc((size_t)w * (2 * sizeof(double) + sizeof(float)));
    if (!mem) {
        atomic_store(&job->oom, true);
        return;
    }
    col_scratch sc = {.acc.f = (double *)mem, .stat = (double *)mem + w, .ebuf = (float *)((double *)mem + 2 * w)};
    for (int64_t t = begin; t < end; t++) {
        int64_t outer = t / ntiles, j0 = (t % ntiles) * w, n = L - j0 < w ? L - j0 : w;
        int64_t in_off, out_off;
        kept_offsets(pl, outer * L + j0, &in_off, &out_off);
        const char *base = pl->in + in_off * es;
        if (two_pass(pl)) {
            col_pass(pl, first_pass_fold(pl), base, n, &sc);
            for (int64_t j = 0; j < n; j++) sc.stat[j] = stat_of(pl, (racc){sc.acc.f[j], 0, 0});
        }
        col_pass(pl, main_fold(pl), base, n, &sc);
        for (int64_t j = 0; j < n; j++) {
            racc a = {pl->dt == KILN_I64 ? 0 : sc.acc.f[j], pl->dt == KILN_I64 ? sc.acc.i[j] : 0, 0};
            store_final(pl, pl->out + (out_off + j * ost) * oes, a, two_pass(pl) ? sc.stat[j] : 0);
        }
    }
    free(mem);
}

/* Wide tiles read long contiguous pieces of each input row (power-of-two row strides defeat
 * the prefetchers on short ones) while the accumulators stay in L2; they narrow only to give
 * every thread work. Each output still folds its column in row order, so the width does not
 * change the result. A two-pass op narrows its tiles so that the tile's block of input stays
 * in L2 for the second pass. */
static kiln_status reduce_cols(rplan *pl) {
    int64_t L = pl->kshape[pl->nk - 1], outer = pl->n_out / L, w = MAX_TILE;
    if (two_pass(pl)) {
        w = ((int64_t)256 * 1024 / ((pl->n_red ? pl->n_red : 1) * (int64_t)pl->es)) & ~(int64_t)7;
        w = w < 64 ? 64 : w > MAX_TILE ? MAX_TILE : w;
    }
    while (w > 256 && outer * ((L + w - 1) / w) < 4 * kiln__pool_threads()) w /= 2;
    pl->tile = w;
    int64_t tasks = outer * ((L + w - 1) / w), work = pl->n_red * (L < w ? L : w);
    int64_t grain = PIECE / (work ? work : 1);
    cols_job job = {.pl = pl};
    atomic_init(&job.oom, false);
    kiln__parallel_for(tasks, grain < 1 ? 1 : grain, cols_task, &job);
    if (atomic_load(&job.oom)) {
        kiln__kernel_error("out of memory for reduction scratch");
        return KILN_ERR_OUT_OF_MEMORY;
    }
    return KILN_OK;
}

/* ---- planning ---------------------------------------------------------------------------- */

/* Outermost first: larger strides first, broadcast (stride 0) dims outside everything. */
static int64_t sort_key(int64_t stride) { return stride == 0 ? INT64_MAX : stride; }

static void sort_dims(int n, int64_t *shape, int64_t *s1, int64_t *s2) {
    for (int i = 1; i < n; i++) {
        for (int j = i; j > 0 && sort_key(s1[j - 1]) < sort_key(s1[j]); j--) {
            int64_t t = shape[j]; shape[j] = shape[j - 1]; shape[j - 1] = t;
            t = s1[j]; s1[j] = s1[j - 1]; s1[j - 1] = t;
            if (s2) t = s2[j], s2[j] = s2[j - 1], s2[j - 1] = t;
        }
    }
}

/* Merges neighbours that step as one dim; returns the new count. */
static int merge_dims(int n, int64_t *shape, int64_t *s1, int64_t *s2) {
    int m = 0;
    for (int d = 0; d < n; d++) {
        if (m > 0 && s1[m - 1] == s1[d] * shape[d] && (!s2 || s2[m - 1] == s2[d] * shape[d])) {
            shape[m - 1] *= shape[d];
            s1[m - 1] = s1[d];
            if (s2) s2[m - 1] = s2[d];
            continue;
        }
        shape[m] = shape[d];
        s1[m] = s1[d];
        if (s2) s2[m] = s2[d];
        m++;
    }
    return m;
}

static void plan_build(rplan *pl, const kiln__op *op) {
    const kiln__view *in = &op->in[0], *out = &op->out[0];
    memset(pl, 0, sizeof *pl);
    const kiln__reduce_info *row = kiln__reduce_info_of(op->code);
    pl->code = op->code;
    pl->fold = row->fold;
    pl->finish = row->finish;
    pl->dt = in->dtype;
    pl->out_dt = out->dtype;
    pl->es = kiln__elsize(in->dtype);
    pl->out_es = kiln__elsize(out->dtype);
    pl->in = kiln__view_ptr(in);
    pl->out = kiln__view_ptr(out);
    pl->n_out = pl->n_red = 1;
    for (int d = 0; d < in->ndim; d++) {
        if (in->shape[d] == 1) continue;
        if (out->shape[d] == 1) {
            pl->rshape[pl->nr] = in->shape[d];
            pl->rin[pl->nr++] = in->strides[d];
            pl->n_red *= in->shape[d];
        } else {
            pl->kshape[pl->nk] = in->shape[d];
            pl->kin[pl->nk] = in->strides[d];
            pl->kout[pl->nk++] = out->strides[d];
            pl->n_out *= in->shape[d];
        }
    }
    sort_dims(pl->nk, pl->kshape, pl->kin, pl->kout);
    sort_dims(pl->nr, pl->rshape, pl->rin, NULL);
    pl->nk = merge_dims(pl->nk, pl->kshape, pl->kin, pl->kout);
    pl->nr = merge_dims(pl->nr, pl->rshape, pl->rin, NULL);
    double div = (double)pl->n_red - (double)op->p.i[0];
    pl->divisor = div > 0 ? div : 0;
    pl->take_sqrt = op->p.i[1] != 0;
}

static kiln_status kernel_reduce(const kiln__op *op) {
    kiln_dtype in = op->in[0].dtype, out = op->out[0].dtype;
    kiln__reduce_finish finish = kiln__reduce_info_of(op->code)->finish;
    bool arg = finish == KILN__RFIN_INDEX;
    /* i64 input: only the finishes that write the accumulator or an index (sum, prod, max, min, argmax);
     * bf16 input: sums and means into f32 */
    bool bf16_sum = in == KILN_BF16 && out == KILN_F32 && kiln__reduce_info_of(op->code)->fold == KILN__RFOLD_SUM && !arg;
    if (!bf16_sum && ((in != KILN_F32 && in != KILN_F64 && in != KILN_I64) || (arg ? out != KILN_I64 : out != in) ||
                      (in == KILN_I64 && finish != KILN__RFIN_VALUE && !arg))) {
        kiln__kernel_error("no CPU %s kernel from %s to %s", kiln__opcode_name(op->code), kiln_dtype_name(in),
                           kiln_dtype_name(out));
        return KILN_ERR_DTYPE;
    }
    rplan pl;
    plan_build(&pl, op);
    if (pl.n_out == 0) return KILN_OK;
    if (pl.n_red == 0 && (pl.fold == FOLD_MAX || pl.fold == FOLD_MIN)) { /* no identity to write */
        kiln__kernel_error("%s over an empty dim", kiln__opcode_name(pl.code));
        return KILN_ERR_SHAPE;
    }
    /* [outer, K, inner] blocks (a conv's bias gradient): read in memory order (reduce_blocks.c) */
    if (pl.fold == FOLD_SUM && !is_arg(&pl) && pl.nk == 1 && pl.nr == 2 && pl.rin[1] == 1 &&
        pl.kin[0] == pl.rshape[1] && pl.rin[0] >= pl.kshape[0] * pl.kin[0] &&
        kiln__reduce_blocks_fits(pl.dt, pl.rshape[0], pl.kshape[0], pl.rshape[1]))
        return kiln__reduce_blocks_sum(pl.in, pl.dt, pl.rshape[0], pl.rin[0], pl.kshape[0], pl.kin[0], pl.rshape[1],
                                       pl.out, pl.out_dt, pl.kout[0], pl.finish == KILN__RFIN_MEAN);
    bool cols = pl.nk > 0 && pl.kin[pl.nk - 1] == 1 && pl.kshape[pl.nk - 1] >= 8 && !is_arg(&pl) &&
                (pl.nr == 0 || pl.rin[pl.nr - 1] != 1);
    return cols ? reduce_cols(&pl) : reduce_runs(&pl);
}

void kiln__cpu_register_reduce(kiln__kernel_fn *table) {
#define REGISTER(NAME, ...) table[KILN__OP_##NAME] = kernel_reduce;
    KILN__REDUCE_KERNELS(REGISTER)
#undef REGISTER
    kiln__cpu_register_softmax(table);
}
