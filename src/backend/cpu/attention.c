/* ATTENTION: softmax(q k^T * scale + mask) v in one kernel (f32, f64), for inference.
 *
 * One task per (batch..., head) matrix: the scores [L, S] of that head go to a scratch block
 * (one GEMM, the scale as its alpha), each row gets the mask and the causal triangle, then the
 * max-subtracted softmax in place (the same vector passes as the SOFTMAX kernel), and a second
 * GEMM writes p v straight into the output view. The [batch, heads, L, S] scores never exist as
 * a tensor, and the four ops (matmul, add, softmax, matmul) of the composed form are one.
 *
 * Operands (the op layer builds them, src/ops/attention.c):
 *   without a mask: in[0] q [..., L, E], in[1] k [..., S, E], in[2] v [..., S, Ev]
 *   with a mask:    in[0] q, in[1] k and v as one view [2, ..., S, E] (index pi[1] - 1 is k,
 *                   the other v: two views of one storage with one layout), in[2] the mask
 *                   [..., L, S]: bool (true = attend) or q's dtype (added)
 * Batch dims come broadcast (stride 0) to out's; any strides. p.f[0] scale, pi[0] causal
 * (top-left aligned: query i sees keys 0..i), pi[1] the mask form above (0 = no mask).
 * A row whose every score is -inf (all keys hidden) gives zeros, as the composed form does. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/gemm.h"
#include "backend/cpu/reduce-impl.h"
#include "backend/cpu/vmath.h"

/* Below this many multiply-adds (all heads together) the heads run on the calling thread
 * alone: at a 16-token sentence the wake-up of a pool thread costs more than the work. */
#define SMALL_WORK ((int64_t)1 << 18)

typedef struct {
    const char *base;
    size_t es;                  /* element size (a bool mask's is 1) */
    int64_t bst[KILN_MAX_DIMS]; /* batch strides, elements */
    int64_t rs, cs;
} mat;

typedef struct {
    kiln_dtype dt;
    size_t es;
    int nb;
    const int64_t *bshape;
    int64_t L, S, E, Ev;
    double scale;
    bool causal;
    mat q, k, v, mask, out;
    bool has_mask, bool_mask;
    atomic_int status; /* KILN_OK, or the error of a failing task */
} att_job;

static mat mat_of(const kiln__view *v, int lead, int nb) {
    mat m = {.base = kiln__view_ptr(v), .es = kiln__elsize(v->dtype), .rs = v->strides[lead + nb], .cs = v->strides[lead + nb + 1]};
    memcpy(m.bst, v->strides + lead, sizeof(int64_t) * (size_t)nb);
    return m;
}

static const char *mat_at(const att_job *j, const mat *m, int64_t b) {
    int64_t off = 0;
    for (int d = j->nb - 1; d >= 0; d--) {
        off += (b % j->bshape[d]) * m->bst[d];
        b /= j->bshape[d];
    }
    return m->base + off * (int64_t)m->es;
}

/* How a rows x cols matrix with strides (rs, cs) reaches GEMM: 0 row-major, 1 transposed, -1
 * neither (then it is copied into a dense block first). */
static int layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, int64_t *ld) {
    if (cols == 1) cs = 1;
    if (rows == 1) rs = cols > 1 ? cols : 1;
    if (cs == 1 && rs >= (cols > 1 ? cols : 1)) return *ld = rs, 0;
    if (rs == 1 && cs >= (rows > 1 ? rows : 1)) return *ld = cs, 1;
    return -1;
}

/* A matrix as GEMM takes it: its pointer, leading dim and transpose flag, copied densely into
 * spare (rows x cols elements) when its strides allow neither. */
static const char *gemm_operand(const att_job *j, const char *p, int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                                char *spare, int64_t *ld, int *trans) {
    int l = layout(rows, cols, rs, cs, ld);
    if (l >= 0) return *trans = l, p;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            memcpy(spare + (r * cols + c) * (int64_t)j->es, p + (r * rs + c * cs) * (int64_t)j->es, j->es);
    *ld = cols > 1 ? cols : 1;
    *trans = 0;
    return spare;
}

/* Adds the mask and the causal triangle to row i of the scores, then its softmax in place. */
static void row_f32(const att_job *j, float *row, int64_t i, const char *mrow) {
    int64_t S = j->S, visible = j->causal ? (i + 1 < S ? i + 1 : S) : S;
    if (j->has_mask && j->bool_mask) {
        const char *m = mrow;
        for (int64_t c = 0; c < visible; c++) row[c] = m[c * j->mask.cs] ? row[c] : -INFINITY;
    } else if (j->has_mask) {
        const float *m = (const float *)mrow;
        if (j->mask.cs == 1)
            for (int64_t c = 0; c < visible; c++) row[c] += m[c];
        else
            for (int64_t c = 0; c < visible; c++) row[c] += m[c * j->mask.cs];
    }
    float top = kiln__rmax_f32(row, visible);
    if (top == -INFINITY) {
        memset(row, 0, sizeof(float) * (size_t)S);
        return;
    }
    kiln__rsub_f32(row, row, top, 0, visible);
    kiln__vexp_f32(row, row, visible);
    kiln__rscale_f32(row, (float)(1.0 / kiln__rsum_f32(row, visible)), visible);
    for (int64_t c = visible; c < S; c++) row[c] = 0;
}

static void row_f64(const att_job *j, double *row, int64_t i, const char *mrow) {
    int64_t S = j->S, visible = j->causal ? (i + 1 < S ? i + 1 : S) : S;
    for (int64_t c = 0; c < visible && j->has_mask; c++) {
        if (j->bool_mask)
            row[c] = mrow[c * j->mask.cs] ? row[c] : -INFINITY;
        else
            row[c] += ((const double *)mrow)[c * j->mask.cs];
    }
    double top = kiln__rmax_f64(row, visible);
    if (top == -INFINITY) {
        memset(row, 0, sizeof(double) * (size_t)S);
        return;
    }
    for (int64_t c = 0; c < visible; c++) row[c] -= top;
    kiln__vexp_f64(row, row, visible);
    double sum = kiln__rsum_f64(row, visible);
    for (int64_t c = 0; c < visible; c++) row[c] /= sum;
    for (int64_t c = visible; c < S; c++) row[c] = 0;
}

static void gemm(const att_job *j, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha, const char *a,
                 int64_t lda, const char *b, int64_t ldb, char *c, int64_t ldc) {
    if (j->dt == KILN_F32)
        kiln__gemm_serial_f32(ta, tb, m, n, k, (float)alpha, (const float *)a, lda, (const float *)b, ldb, 0.0f,
                              (float *)c, ldc);
    else
        kiln__gemm_serial_f64(ta, tb, m, n, k, alpha, (const double *)a, lda, (const double *)b, ldb, 0.0,
                              (double *)c, ldc);
}

/* Scratch per task: the scores [L, S], then room for dense copies of q, k, v and the output
 * when their strides suit no GEMM. */
static size_t scratch_elems(const att_job *j) {
    return (size_t)(j->L * j->S + j->L * j->E + j->S * j->E + j->S * j->Ev + j->L * j->Ev);
}

static void att_task(void *ctx, int64_t begin, int64_t end) {
    att_job *j = ctx;
    size_t es = j->es;
    char *scratch = malloc(scratch_elems(j) * es + 1);
    if (!scratch) {
        atomic_store(&j->status, KILN_ERR_OUT_OF_MEMORY);
        return;
    }
    char *sc = scratch, *sq = sc + j->L * j->S * (int64_t)es, *sk = sq + j->L * j->E * (int64_t)es;
    char *sv = sk + j->S * j->E * (int64_t)es, *so = sv + j->S * j->Ev * (int64_t)es;
    for (int64_t b = begin; b < end; b++) {
        int64_t lq, lk, lv, lo;
        int tq, tk, tv;
        const char *q = gemm_operand(j, mat_at(j, &j->q, b), j->L, j->E, j->q.rs, j->q.cs, sq, &lq, &tq);
        const char *k = gemm_operand(j, mat_at(j, &j->k, b), j->S, j->E, j->k.rs, j->k.cs, sk, &lk, &tk);
        const char *v = gemm_operand(j, mat_at(j, &j->v, b), j->S, j->Ev, j->v.rs, j->v.cs, sv, &lv, &tv);
        if (j->E > 0)
            gemm(j, tq, !tk, j->L, j->S, j->E, j->scale, q, lq, k, lk, sc, j->S); /* q k^T: k [S, E] read transposed */
        else
            memset(sc, 0, (size_t)(j->L * j->S) * es);
        const char *mask = j->has_mask ? mat_at(j, &j->mask, b) : NULL;
        for (int64_t i = 0; i < j->L; i++) {
            const char *mrow = mask ? mask + i * j->mask.rs * (int64_t)j->mask.es : NULL;
            if (j->dt == KILN_F32)
                row_f32(j, (float *)sc + i * j->S, i, mrow);
            else
                row_f64(j, (double *)sc + i * j->S, i, mrow);
        }
        char *out = (char *)mat_at(j, &j->out, b);
        bool direct = layout(j->L, j->Ev, j->out.rs, j->out.cs, &lo) == 0;
        if (!direct) lo = j->Ev;
        gemm(j, 0, tv, j->L, j->Ev, j->S, 1.0, sc, j->S, v, lv, direct ? out : so, lo);
        for (int64_t r = 0; !direct && r < j->L; r++)
            for (int64_t c = 0; c < j->Ev; c++)
                memcpy(out + (r * j->out.rs + c * j->out.cs) * (int64_t)es, so + (r * j->Ev + c) * (int64_t)es, es);
    }
    free(scratch);
}

static kiln_status kernel_attention(const kiln__op *op) {
    const kiln__view *out = &op->out[0], *q = &op->in[0];
    int form = (int)op->pi[1];
    if ((out->dtype != KILN_F32 && out->dtype != KILN_F64) || q->dtype != out->dtype) {
        kiln__kernel_error("no CPU ATTENTION kernel for %s into %s", kiln_dtype_name(q->dtype), kiln_dtype_name(out->dtype));
        return KILN_ERR_DTYPE;
    }
    int nb = out->ndim - 2;
    att_job j = {.dt = out->dtype, .es = kiln__elsize(out->dtype), .nb = nb, .bshape = out->shape, .scale = op->p.f[0],
                 .causal = op->pi[0] != 0, .has_mask = form != 0};
    j.L = out->shape[nb];
    j.Ev = out->shape[nb + 1];
    j.E = q->shape[nb + 1];
    j.q = mat_of(q, 0, nb);
    j.out = mat_of(out, 0, nb);
    if (form == 0) {
        j.S = op->in[1].shape[nb];
        j.k = mat_of(&op->in[1], 0, nb);
        j.v = mat_of(&op->in[2], 0, nb);
    } else { /* k and v as one [2, ...] view */
        const kiln__view *kv = &op->in[1];
        j.S = kv->shape[nb + 1];
        mat first = mat_of(kv, 1, nb), second = first;
        second.base += kv->strides[0] * (int64_t)j.es;
        j.k = form == 1 ? first : second;
        j.v = form == 1 ? second : first;
        j.mask = mat_of(&op->in[2], 0, nb);
        j.bool_mask = op->in[2].dtype == KILN_BOOL;
    }
    int64_t nbatch = 1;
    for (int d = 0; d < nb; d++) nbatch *= out->shape[d];
    if (nbatch == 0 || j.L == 0 || j.Ev == 0) return KILN_OK;
    if (j.S == 0) { /* nothing to attend to: the composed form's p v over no keys is 0 */
        for (int64_t b = 0; b < nbatch; b++)
            for (int64_t r = 0; r < j.L; r++)
                for (int64_t c = 0; c < j.Ev; c++)
                    memset((char *)mat_at(&j, &j.out, b) + (r * j.out.rs + c * j.out.cs) * (int64_t)j.es, 0, j.es);
        return KILN_OK;
    }
    int64_t work = j.L * j.S * (j.E + j.Ev) + 1;
    kiln__parallel_for(nbatch, work * nbatch < SMALL_WORK ? nbatch : SMALL_WORK / 4 / work + 1, att_task, &j);
    if (atomic_load(&j.status) != KILN_OK) {
        kiln__kernel_error("out of memory for the attention scores of %lld x %lld", (long long)j.L, (long long)j.S);
        return (kiln_status)atomic_load(&j.status);
    }
    return KILN_OK;
}

void kiln__cpu_register_attention(kiln__kernel_fn *table) { table[KILN__OP_ATTENTION] = kernel_attention; }
