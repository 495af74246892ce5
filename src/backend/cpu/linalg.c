/* MATMUL: a batch of GEMMs over strided views (f32, f64; bf16 or f16 operands into f32).
 *
 * in[0] [..., M, K] and in[1] [..., K, N] come broadcast to out's batch dims; an optional
 * in[2] broadcast to out's shape is added (the GEMM starts from it with beta = 1). An operand
 * whose matrix dims are row-contiguous goes to GEMM as it is, a column-contiguous one
 * (a transposed view) as a transpose flag; only an operand that is neither is copied, and then
 * once per distinct matrix: batch dims of stride 0 stay shared, never copied per batch. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu-impl.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_lowp.h"
#include "backend/cpu/gemm_small.h"

/* A batch of products runs one single-threaded GEMM per task across the pool (attention's
 * batch x heads of 128 x 128 x 32: measured 3-5 ms for 384 of them against 7-25 ms with each
 * GEMM on two OpenBLAS threads in turn, whose wake-ups cost more than the product) when it
 * is small, or when the batch is at least two per thread and a single-threaded GEMM keeps
 * BLAS speed at this shape. Otherwise the batches run in turn, each GEMM using every thread. */
#define SMALL_GEMM ((int64_t)1 << 18) /* M*N*K */
/* A linear layer over at most this many rows (a sentence's tokens) skips BLAS for the unpacked
 * small-M kernel (gemm_small.c), its columns split across the pool in pieces of at least
 * SMALL_M_TASK multiply-adds (5-10 us): MiniLM's [16, 384] x [384, 384] is 2.4M of them, four
 * pieces; [16, 384] x [384, 1152] eight, the pool's most for two threads. Pieces of 2M left
 * that one on a single thread and split the 1152 columns in three, one thread doing two. */
#define SMALL_M KILN__GEMM_SMALL_MAX_M
#define SMALL_M_TASK ((int64_t)1 << 19)

typedef struct {
    const char *base;
    int64_t bst[KILN_MAX_DIMS]; /* batch strides, elements */
    int64_t rs, cs;             /* matrix strides, elements */
    int trans;
    int64_t ld;
    void *scratch;
} operand;

/* How a rows x cols matrix with strides (rs, cs) reaches GEMM: 0 row-major, 1 transposed
 * (column-major), -1 neither. Strides of size-1 dims do not matter and are normalised first. */
static int gemm_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, int64_t *ld) {
    int64_t rmin = rows > 1 ? rows : 1, cmin = cols > 1 ? cols : 1;
    if (cols == 1) cs = 1;
    if (rows == 1) rs = cs == 1 ? cmin : 1;
    if (cs == 1 && rs >= cmin) {
        *ld = rs;
        return 0;
    }
    if (rs == 1 && cs >= rmin) {
        *ld = cs;
        return 1;
    }
    return -1;
}

/* dst[i, j] = src[i, j] over a rows x cols matrix, strides in elements. */
static void copy_matrix(size_t es, char *dst, int64_t drs, int64_t dcs, const char *src, int64_t srs, int64_t scs,
                        int64_t rows, int64_t cols) {
    for (int64_t i = 0; i < rows; i++) {
        if (dcs == 1 && scs == 1) { /* a bias row into each row of C: one vector copy */
            memcpy(dst + i * drs * (int64_t)es, src + i * srs * (int64_t)es, (size_t)cols * es);
        } else if (es == 2) {
            uint16_t *d = (uint16_t *)dst + i * drs;
            const uint16_t *s = (const uint16_t *)src + i * srs;
            for (int64_t j = 0; j < cols; j++) d[j * dcs] = s[j * scs];
        } else if (es == 4) {
            float *d = (float *)dst + i * drs;
            const float *s = (const float *)src + i * srs;
            for (int64_t j = 0; j < cols; j++) d[j * dcs] = s[j * scs];
        } else {
            double *d = (double *)dst + i * drs;
            const double *s = (const double *)src + i * srs;
            for (int64_t j = 0; j < cols; j++) d[j * dcs] = s[j * scs];
        }
    }
}

/* Element offset of batch b (flat over out's batch dims) in a view with batch strides bst. */
static int64_t batch_offset(int nb, const int64_t *shape, const int64_t *bst, int64_t b) {
    int64_t off = 0;
    for (int d = nb - 1; d >= 0; d--) {
        off += (b % shape[d]) * bst[d];
        b /= shape[d];
    }
    return off;
}

static kiln_status operand_prepare(operand *o, const kiln__view *v, int nb, const int64_t *bshape) {
    size_t es = kiln__elsize(v->dtype);
    int64_t rows = v->shape[nb], cols = v->shape[nb + 1];
    o->base = kiln__view_ptr(v);
    o->rs = v->strides[nb];
    o->cs = v->strides[nb + 1];
    o->scratch = NULL;
    memcpy(o->bst, v->strides, sizeof(int64_t) * (size_t)nb);
    int layout = gemm_layout(rows, cols, o->rs, o->cs, &o->ld);
    if (layout >= 0) {
        o->trans = layout;
        return KILN_OK;
    }
    /* compact copy: distinct matrices only, row-major */
    int64_t count = 1, cshape[KILN_MAX_DIMS], cst[KILN_MAX_DIMS];
    for (int d = nb - 1; d >= 0; d--) {
        bool shared = v->strides[d] == 0 || bshape[d] == 1;
        cshape[d] = shared ? 1 : bshape[d];
        cst[d] = shared ? 0 : count * rows * cols;
        count *= cshape[d];
    }
    o->scratch = malloc((size_t)(count * rows * cols) * es + 1);
    if (!o->scratch) {
        kiln__kernel_error("out of memory copying a %lld x %lld strided matmul operand", (long long)rows,
                           (long long)cols);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    for (int64_t b = 0; b < count; b++) {
        int64_t src = batch_offset(nb, cshape, v->strides, b), dst = batch_offset(nb, cshape, cst, b);
        copy_matrix(es, (char *)o->scratch + dst * (int64_t)es, cols, 1, o->base + src * (int64_t)es, o->rs, o->cs,
                    rows, cols);
    }
    o->base = o->scratch;
    memcpy(o->bst, cst, sizeof(int64_t) * (size_t)nb);
    o->rs = cols;
    o->cs = 1;
    o->trans = 0;
    o->ld = cols > 1 ? cols : 1;
    return KILN_OK;
}

typedef struct {
    kiln_dtype dt, in_dt; /* out's (and the addend's); the operands' */
    bool lowp;            /* bf16/f16 operands, summed in f32 into f32 or their own dtype */
    int nb;
    int64_t m, n, k;
    const int64_t *bshape;
    operand a, b;
    const kiln__view *addend; /* NULL without in[2] */
    char *c;                  /* out (or a dense stand-in) */
    int64_t cbst[KILN_MAX_DIMS], ldc;
    bool serial; /* batches side by side, each GEMM on one thread */
    _Atomic kiln_status *status; /* a low-precision product's failure */
} mm_job;

static void mm_task(void *ctx, int64_t begin, int64_t end) {
    const mm_job *j = ctx;
    size_t es = kiln__elsize(j->dt), ies = kiln__elsize(j->in_dt);
    for (int64_t bi = begin; bi < end; bi++) {
        const char *a = j->a.base + batch_offset(j->nb, j->bshape, j->a.bst, bi) * (int64_t)ies;
        const char *b = j->b.base + batch_offset(j->nb, j->bshape, j->b.bst, bi) * (int64_t)ies;
        char *c = j->c + batch_offset(j->nb, j->bshape, j->cbst, bi) * (int64_t)es;
        if (j->addend) {
            const kiln__view *v = j->addend;
            const char *src = kiln__view_ptr(v) + batch_offset(j->nb, j->bshape, v->strides, bi) * (int64_t)es;
            copy_matrix(es, c, j->ldc, 1, src, v->strides[j->nb], v->strides[j->nb + 1], j->m, j->n);
        }
        if (j->k == 0) {
            if (!j->addend)
                for (int64_t i = 0; i < j->m; i++) memset(c + i * j->ldc * (int64_t)es, 0, (size_t)j->n * es);
            continue;
        }
        if (j->lowp) { /* a failure leaves its message; the first one is reported */
            kiln_status st = kiln__gemm_lowp(j->in_dt, j->a.trans, j->b.trans, j->m, j->n, j->k,
                                             (const uint16_t *)a, j->a.ld, (const uint16_t *)b, j->b.ld,
                                             j->addend != NULL, j->dt, c, j->ldc);
            if (st != KILN_OK) {
                kiln_status ok = KILN_OK;
                atomic_compare_exchange_strong(j->status, &ok, st);
            }
        } else if (j->serial && j->dt == KILN_F32)
            kiln__gemm_serial_f32(j->a.trans, j->b.trans, j->m, j->n, j->k, 1.0f, (const float *)a, j->a.ld,
                                  (const float *)b, j->b.ld, j->addend ? 1.0f : 0.0f, (float *)c, j->ldc);
        else if (j->serial)
            kiln__gemm_serial_f64(j->a.trans, j->b.trans, j->m, j->n, j->k, 1.0, (const double *)a, j->a.ld,
                                  (const double *)b, j->b.ld, j->addend ? 1.0 : 0.0, (double *)c, j->ldc);
        else if (j->dt == KILN_F32)
            kiln__gemm_f32(j->a.trans, j->b.trans, j->m, j->n, j->k, 1.0f, (const float *)a, j->a.ld,
                           (const float *)b, j->b.ld, j->addend ? 1.0f : 0.0f, (float *)c, j->ldc);
        else
            kiln__gemm_f64(j->a.trans, j->b.trans, j->m, j->n, j->k, 1.0, (const double *)a, j->a.ld,
                           (const double *)b, j->b.ld, j->addend ? 1.0 : 0.0, (double *)c, j->ldc);
    }
}

/* Columns [begin, end) of a small-M product: the addend's columns first, then A W^T added. */
static void small_m_task(void *ctx, int64_t begin, int64_t end) {
    const mm_job *j = ctx;
    float *c = (float *)j->c;
    if (j->addend) {
        const kiln__view *v = j->addend;
        const float *src = (const float *)kiln__view_ptr(v);
        for (int64_t i = 0; i < j->m; i++)
            for (int64_t q = begin; q < end; q++) c[i * j->ldc + q] = src[i * v->strides[j->nb] + q * v->strides[j->nb + 1]];
    }
    kiln__gemm_small_nt_f32(j->m, begin, end, j->k, (const float *)j->a.base, j->a.ld, (const float *)j->b.base, j->b.ld,
                            j->addend != NULL, c, j->ldc);
}

static bool small_m_fits(const mm_job *j, int64_t nbatch) {
    return j->dt == KILN_F32 && !j->lowp && nbatch == 1 && j->m <= SMALL_M && j->k > 0 &&
           j->a.trans == 0 && j->b.trans == 1 &&
           kiln__gemm_small_available();
}

static kiln_status kernel_matmul(const kiln__op *op) {
    const kiln__view *out = &op->out[0];
    kiln_dtype in_dt = op->in[0].dtype;
    /* low precision: into f32 (the addend f32), or into the operands' dtype with no addend */
    bool lowp = (in_dt == KILN_BF16 || in_dt == KILN_F16) && op->in[1].dtype == in_dt &&
                (out->dtype == KILN_F32 || (out->dtype == in_dt && op->n_in == 2));
    for (int i = 0; i < op->n_in; i++) {
        if ((out->dtype == KILN_F32 || out->dtype == KILN_F64) && op->in[i].dtype == out->dtype) continue;
        if (lowp && (i < 2 || op->in[i].dtype == KILN_F32)) continue;
        kiln__kernel_error("no CPU MATMUL kernel for %s operands into %s", kiln_dtype_name(op->in[i].dtype),
                           kiln_dtype_name(out->dtype));
        return KILN_ERR_DTYPE;
    }
    int nb = out->ndim - 2;
    _Atomic kiln_status status = KILN_OK;
    mm_job j = {.dt = out->dtype, .in_dt = in_dt, .lowp = lowp, .status = &status, .nb = nb,
                .bshape = out->shape, .addend = op->n_in > 2 ? &op->in[2] : NULL};
    j.m = out->shape[nb];
    j.n = out->shape[nb + 1];
    j.k = op->in[0].shape[nb + 1];
    int64_t nbatch = 1;
    for (int d = 0; d < nb; d++) nbatch *= out->shape[d];
    if (j.m == 0 || j.n == 0 || nbatch == 0) return KILN_OK;
    size_t es = kiln__elsize(j.dt);

    /* out is dense in practice; any other layout is computed aside and copied in */
    void *dense = NULL;
    int64_t ldc;
    if (gemm_layout(j.m, j.n, out->strides[nb], out->strides[nb + 1], &ldc) == 0) {
        j.c = kiln__view_ptr(out);
        j.ldc = ldc;
        memcpy(j.cbst, out->strides, sizeof(int64_t) * (size_t)nb);
    } else {
        dense = malloc((size_t)(nbatch * j.m * j.n) * es);
        if (!dense) {
            kiln__kernel_error("out of memory for a matmul result");
            return KILN_ERR_OUT_OF_MEMORY;
        }
        j.c = dense;
        j.ldc = j.n;
        int64_t step = j.m * j.n;
        for (int d = nb - 1; d >= 0; d--) j.cbst[d] = step, step *= out->shape[d];
    }
    kiln_status st = operand_prepare(&j.a, &op->in[0], nb, out->shape);
    if (st == KILN_OK) st = operand_prepare(&j.b, &op->in[1], nb, out->shape);
    if (st == KILN_OK) {
        int64_t work = j.m * j.n * (j.k ? j.k : 1), threads = kiln__pool_threads();
        j.serial = nbatch > 1 && (work < SMALL_GEMM || (nbatch >= 2 * threads && kiln__gemm_serial_is_fast(j.m, j.n, j.k)));
        if (small_m_fits(&j, nbatch))
            kiln__parallel_for(j.n, SMALL_M_TASK / (j.m * j.k) + 1, small_m_task, &j);
        else if (j.serial)
            kiln__parallel_for(nbatch, work < SMALL_GEMM ? SMALL_GEMM / 2 / work + 1 : 1, mm_task, &j);
        else
            mm_task(&j, 0, nbatch);
        st = atomic_load(&status);
        if (dense && st == KILN_OK) {
            for (int64_t b = 0; b < nbatch; b++)
                copy_matrix(es, kiln__view_ptr(out) + batch_offset(nb, out->shape, out->strides, b) * (int64_t)es,
                            out->strides[nb], out->strides[nb + 1], (char *)dense + b * j.m * j.n * (int64_t)es, j.n,
                            1, j.m, j.n);
        }
    }
    free(j.a.scratch);
    free(j.b.scratch);
    free(dense);
    return st;
}

void kiln__cpu_register_linalg(kiln__kernel_fn *table) { table[KILN__OP_MATMUL] = kernel_matmul; }
