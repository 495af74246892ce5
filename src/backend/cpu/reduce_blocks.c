/* SUM and MEAN over an input laid out as [outer, K, inner] blocks (reduced outer and inner, K
 * kept): a conv's bias gradient (dy [N, C, H, W] summed over N, H, W) and batch norm's
 * statistics. See reduce-impl.h for the contract; reduce.c picks this path.
 *
 * Why a path of its own: the general runs path folds one output at a time, so for dy
 * [128, 64, 14, 14] it read 8192 runs of 196 elements each 25 KB (bf16) from the last, in an
 * order no prefetcher follows: 0.41-0.45 ms on one thread for 3.2 MB, every run paying the
 * cache's latency. Here each task sums whole [K, inner] blocks in memory order into K partial
 * sums. The blocks are cut into pieces by size only (never by the thread count) and the pieces'
 * partial sums are added in order, so the result has the same bits on any number of threads. */
#include <stdlib.h>

#include "backend/cpu/reduce-impl.h"

/* Input elements per piece, at least: a task's worth (KILN__GRAIN_ELEMENTWISE). */
#define PIECE_ELEMENTS ((int64_t)32768)
/* Partial sums held at once: the pieces times K. */
#define MAX_PARTIALS ((int64_t)1 << 20)

typedef struct {
    const char *in;
    kiln_dtype dt;
    int64_t outer, outer_stride, k, k_stride, inner, per_piece;
    double *partials; /* [pieces][k] */
} blocks_job;

static double run_sum(kiln_dtype dt, const char *p, int64_t n) {
    switch (dt) {
    case KILN_F32: return kiln__rsum_f32((const float *)p, n);
    case KILN_F64: return kiln__rsum_f64((const double *)p, n);
    default: return kiln__rsum_bf16((const uint16_t *)p, n, 1);
    }
}

static void blocks_task(void *ctx, int64_t begin, int64_t end) {
    const blocks_job *j = ctx;
    int64_t es = (int64_t)kiln__elsize(j->dt);
    for (int64_t piece = begin; piece < end; piece++) {
        double *acc = j->partials + piece * j->k;
        int64_t o1 = (piece + 1) * j->per_piece < j->outer ? (piece + 1) * j->per_piece : j->outer;
        for (int64_t c = 0; c < j->k; c++) acc[c] = 0;
        for (int64_t o = piece * j->per_piece; o < o1; o++) {
            const char *block = j->in + o * j->outer_stride * es;
            for (int64_t c = 0; c < j->k; c++) acc[c] += run_sum(j->dt, block + c * j->k_stride * es, j->inner);
        }
    }
}

/* Runs of more than this many elements are long enough for the general path (which splits over
 * K, so it keeps more threads busy when outer is small). */
#define MAX_INNER ((int64_t)4096)

bool kiln__reduce_blocks_fits(kiln_dtype dt, int64_t outer, int64_t k, int64_t inner) {
    if ((dt != KILN_F32 && dt != KILN_F64 && dt != KILN_BF16) || outer < 2 || k < 1 || inner < 8 || inner > MAX_INNER)
        return false;
    int64_t per_piece = (PIECE_ELEMENTS + k * inner - 1) / (k * inner);
    return ((outer + per_piece - 1) / per_piece) * k <= MAX_PARTIALS;
}

kiln_status kiln__reduce_blocks_sum(const char *in, kiln_dtype dt, int64_t outer, int64_t outer_stride, int64_t k,
                                    int64_t k_stride, int64_t inner, char *out, kiln_dtype out_dt, int64_t out_stride,
                                    bool mean) {
    int64_t per_piece = (PIECE_ELEMENTS + k * inner - 1) / (k * inner);
    int64_t pieces = (outer + per_piece - 1) / per_piece;
    blocks_job j = {.in = in, .dt = dt, .outer = outer, .outer_stride = outer_stride, .k = k, .k_stride = k_stride,
                    .inner = inner, .per_piece = per_piece,
                    .partials = malloc(sizeof(double) * (size_t)(pieces * k))};
    if (!j.partials) {
        kiln__kernel_error("out of memory for reduction scratch");
        return KILN_ERR_OUT_OF_MEMORY;
    }
    kiln__parallel_for(pieces, 1, blocks_task, &j);
    double n = (double)outer * (double)inner;
    for (int64_t c = 0; c < k; c++) {
        double s = 0;
        for (int64_t p = 0; p < pieces; p++) s += j.partials[p * k + c];
        if (mean) s /= n;
        if (out_dt == KILN_F64) ((double *)out)[c * out_stride] = s;
        else ((float *)out)[c * out_stride] = (float)s;
    }
    free(j.partials);
    return KILN_OK;
}
