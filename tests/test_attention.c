/* scaled_dot_product_attention against a double reference written out here: f32 and f64,
 * odd sizes, batch and head dims that broadcast (and the batched matmul shapes attention
 * uses), permuted and strided inputs, bool masks (true = attend) and float masks (added) that
 * broadcast, causal masks with L < S, L = S and L > S, the default and explicit scales, large
 * scores (the softmax subtracts the max), rows the mask hides entirely (zeros and zero
 * gradients, as PyTorch >= 2.5), finite-difference gradients of q, k, v and a float mask,
 * bad input, leaks. Untracked inputs run the fused ATTENTION kernel, tracked ones the composed
 * ops: the reference cases run both ways through kiln_leaf in attention_fused_kv_views. */
#include "gradcheck.h"
#include "nd_layout.h"

typedef enum { MASK_NONE, MASK_BOOL, MASK_FLOAT } mask_kind;

typedef struct {
    kiln_shape q, k, v, mask;
    mask_kind kind;
    bool causal;
    double scale; /* as passed: <= 0 or NaN means 1/sqrt(E) */
} attn_case;

/* the shape that `batch` dims followed by (a, b) make */
static kiln_shape with_tail(kiln_shape batch, int64_t a, int64_t b) {
    kiln_shape s = batch;
    s.dims[s.ndim++] = a;
    s.dims[s.ndim++] = b;
    return s;
}

static kiln_shape batch_of(kiln_shape s) {
    s.ndim -= 2;
    return s;
}

/* out [batch..., L, Ev] from q, k, v (row-major, their own shapes) in double */
static void reference(const attn_case *ac, const double *q, const double *k, const double *v, const double *mask,
                      double *out) {
    int64_t L = ac->q.dims[ac->q.ndim - 2], E = ac->q.dims[ac->q.ndim - 1];
    int64_t S = ac->k.dims[ac->k.ndim - 2], Ev = ac->v.dims[ac->v.ndim - 1];
    kiln_shape batch = ew_broadcast(ew_broadcast(batch_of(ac->q), batch_of(ac->k)), batch_of(ac->v));
    kiln_shape fq = with_tail(batch, L, E), fk = with_tail(batch, S, E), fv = with_tail(batch, S, Ev);
    kiln_shape fs = with_tail(batch, L, S);
    double scale = ac->scale > 0 ? ac->scale : 1 / sqrt((double)E);
    int64_t nbatch = kiln_shape_numel(batch);
    double *row = malloc(sizeof(double) * (size_t)(S + 1));
    for (int64_t b = 0; b < nbatch; b++)
        for (int64_t i = 0; i < L; i++) {
            double top = -INFINITY;
            for (int64_t j = 0; j < S; j++) {
                double dot = 0;
                for (int64_t e = 0; e < E; e++)
                    dot += q[ew_source_index(ac->q, fq, (b * L + i) * E + e)] * k[ew_source_index(ac->k, fk, (b * S + j) * E + e)];
                double sc = dot * scale;
                if (ac->kind != MASK_NONE) {
                    double m = mask[ew_source_index(ac->mask, fs, (b * L + i) * S + j)];
                    sc = ac->kind == MASK_BOOL ? (m != 0 ? sc : -INFINITY) : sc + m;
                }
                if (ac->causal && j > i) sc = -INFINITY;
                row[j] = sc;
                top = fmax(top, sc);
            }
            double sum = 0;
            for (int64_t j = 0; j < S; j++) sum += (row[j] = top == -INFINITY ? 0 : exp(row[j] - top));
            for (int64_t c = 0; c < Ev; c++) {
                double acc = 0;
                for (int64_t j = 0; j < S; j++) acc += row[j] * v[ew_source_index(ac->v, fv, (b * S + j) * Ev + c)];
                out[(b * L + i) * Ev + c] = sum > 0 ? acc / sum : 0.0; /* a fully masked row gives zeros */
            }
        }
    free(row);
}

/* mask values: bool 0/1 with about 1 in 4 hidden and row 0 of every mask matrix hidden
 * entirely; float in [-2, 2] with some -inf and, likewise, row 0 all -inf */
static void mask_values(const attn_case *ac, double *m, int64_t n) {
    int64_t cols = ac->mask.ndim ? ac->mask.dims[ac->mask.ndim - 1] : 1;
    int64_t rows = ac->mask.ndim > 1 ? ac->mask.dims[ac->mask.ndim - 2] : 1;
    for (int64_t i = 0; i < n; i++) {
        bool hidden = ew_uniform(0, 1) < 0.25 || (rows > 1 && (i / cols) % rows == 0);
        if (ac->kind == MASK_BOOL)
            m[i] = !hidden;
        else
            m[i] = hidden ? -INFINITY : ew_round(KILN_F32, ew_uniform(-2, 2));
    }
}

static void check_attention(const attn_case *ac, kiln_dtype dt, nd_layout layout, double spread) {
    int64_t nq = kiln_shape_numel(ac->q), nk = kiln_shape_numel(ac->k), nv = kiln_shape_numel(ac->v);
    int64_t nm = ac->kind != MASK_NONE ? kiln_shape_numel(ac->mask) : 0;
    kiln_shape batch = ew_broadcast(ew_broadcast(batch_of(ac->q), batch_of(ac->k)), batch_of(ac->v));
    kiln_shape so = with_tail(batch, ac->q.dims[ac->q.ndim - 2], ac->v.dims[ac->v.ndim - 1]);
    int64_t no = kiln_shape_numel(so);
    double *q = malloc(sizeof(double) * (size_t)(nq + 1)), *k = malloc(sizeof(double) * (size_t)(nk + 1));
    double *v = malloc(sizeof(double) * (size_t)(nv + 1)), *m = malloc(sizeof(double) * (size_t)(nm + 1));
    double *want = malloc(sizeof(double) * (size_t)(no + 1));
    ew_values(q, nq, dt, -spread, spread);
    ew_values(k, nk, dt, -1, 1);
    ew_values(v, nv, dt, -1, 1);
    mask_values(ac, m, nm);
    reference(ac, q, k, v, m, want);
    kiln_tensor mask = ac->kind == MASK_NONE ? KILN_NONE : ew_tensor(ac->kind == MASK_BOOL ? KILN_BOOL : dt, ac->mask, m);
    kiln_tensor y = kiln_scaled_dot_product_attention(nd_make(dt, ac->q, q, layout), nd_make(dt, ac->k, k, layout),
                                                      nd_make(dt, ac->v, v, layout), mask, ac->causal, ac->scale);
    kiln_shape ys = kiln_tensor_shape(y);
    KT_CHECK(ys.ndim == so.ndim && memcmp(ys.dims, so.dims, sizeof(int64_t) * (size_t)so.ndim) == 0);
    double *got = ew_read(y, dt, no);
    char label[160];
    snprintf(label, sizeof label, "sdpa %s[%s] q%d-d k%d-d v%d-d mask %d%s scale %g spread %g", kiln_dtype_name(dt),
             nd_layout_names[layout], ac->q.ndim, ac->k.ndim, ac->v.ndim, (int)ac->kind, ac->causal ? " causal" : "",
             ac->scale, spread);
    double tol = dt == KILN_F64 ? 1e-12 : 2e-5 * spread;
    if (got) EW_EXPECT_CLOSE(label, got, want, no, tol, tol);
    free(got);
    free(q);
    free(k);
    free(v);
    free(m);
    free(want);
}

KT_TEST(attention_matches_reference) {
    kt_mem_begin();
    const attn_case cases[] = {
        {KILN_SHAPE(2, 3, 5, 4), KILN_SHAPE(2, 3, 7, 4), KILN_SHAPE(2, 3, 7, 6), {0}, MASK_NONE, false, 0},
        {KILN_SHAPE(5, 4), KILN_SHAPE(7, 4), KILN_SHAPE(7, 3), {0}, MASK_NONE, false, 0.3},
        {KILN_SHAPE(1, 1), KILN_SHAPE(1, 1), KILN_SHAPE(1, 1), {0}, MASK_NONE, false, NAN},
        /* broadcast batch and head dims, as kiln_matmul sees them */
        {KILN_SHAPE(2, 3, 5, 4), KILN_SHAPE(1, 3, 7, 4), KILN_SHAPE(3, 7, 6), {0}, MASK_NONE, false, -1},
        {KILN_SHAPE(5, 4), KILN_SHAPE(2, 3, 7, 4), KILN_SHAPE(2, 1, 7, 2), {0}, MASK_NONE, false, 0},
        /* bool masks: full, a [B, 1, 1, S] padding mask, one [S] row, a 0-d mask */
        {KILN_SHAPE(2, 3, 5, 4), KILN_SHAPE(2, 3, 7, 4), KILN_SHAPE(2, 3, 7, 6), KILN_SHAPE(2, 3, 5, 7), MASK_BOOL, false, 0},
        {KILN_SHAPE(2, 3, 5, 4), KILN_SHAPE(2, 3, 7, 4), KILN_SHAPE(2, 3, 7, 6), KILN_SHAPE(2, 1, 1, 7), MASK_BOOL, false, 0},
        {KILN_SHAPE(3, 5, 4), KILN_SHAPE(3, 7, 4), KILN_SHAPE(3, 7, 2), KILN_SHAPE(5, 7), MASK_BOOL, false, 0},
        {KILN_SHAPE(3, 5, 4), KILN_SHAPE(3, 7, 4), KILN_SHAPE(3, 7, 2), KILN_SHAPE(7), MASK_BOOL, false, 0},
        {KILN_SHAPE(3, 5, 4), KILN_SHAPE(3, 7, 4), KILN_SHAPE(3, 7, 2), KILN_SCALAR_SHAPE, MASK_BOOL, false, 0},
        /* float masks (added), -inf included */
        {KILN_SHAPE(2, 3, 5, 4), KILN_SHAPE(2, 3, 7, 4), KILN_SHAPE(2, 3, 7, 6), KILN_SHAPE(2, 3, 5, 7), MASK_FLOAT, false, 0},
        {KILN_SHAPE(2, 3, 5, 4), KILN_SHAPE(2, 3, 7, 4), KILN_SHAPE(2, 3, 7, 6), KILN_SHAPE(2, 1, 5, 1), MASK_FLOAT, false, 0},
        {KILN_SHAPE(4, 9), KILN_SHAPE(4, 9), KILN_SHAPE(4, 5), KILN_SHAPE(4, 4), MASK_FLOAT, false, 0.5},
        /* causal, top-left aligned */
        {KILN_SHAPE(2, 3, 5, 4), KILN_SHAPE(2, 3, 7, 4), KILN_SHAPE(2, 3, 7, 6), {0}, MASK_NONE, true, 0},
        {KILN_SHAPE(2, 7, 4), KILN_SHAPE(2, 5, 4), KILN_SHAPE(2, 5, 3), {0}, MASK_NONE, true, 0},
        {KILN_SHAPE(6, 8), KILN_SHAPE(6, 8), KILN_SHAPE(6, 8), {0}, MASK_NONE, true, 0.2},
        /* larger rows, the shapes of one BERT head */
        {KILN_SHAPE(1, 2, 33, 16), KILN_SHAPE(1, 2, 33, 16), KILN_SHAPE(1, 2, 33, 16), KILN_SHAPE(1, 1, 1, 33), MASK_BOOL, false, 0},
    };
    const kiln_dtype dts[] = {KILN_F32, KILN_F64};
    for (int c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++)
        for (int t = 0; t < 2; t++)
            for (int l = 0; l < ND_NLAYOUTS; l++) check_attention(&cases[c], dts[t], (nd_layout)l, 1.0);
    /* scores in the hundreds: exp would overflow without the max subtracted */
    for (int t = 0; t < 2; t++) {
        check_attention(&cases[0], dts[t], ND_DENSE, 60.0);
        check_attention(&cases[5], dts[t], ND_PERMUTED, 60.0);
    }
    KT_MEM_CHECK();
}

/* one head's q [L, E] and k [S, E] as the matmul attention runs: [B, H, L, E] @ [B, H, E, S] */
KT_TEST(batched_matmul_attention_shapes) {
    kt_mem_begin();
    const struct {
        kiln_shape a, b;
    } cases[] = {
        {KILN_SHAPE(2, 3, 5, 4), KILN_SHAPE(2, 3, 4, 7)}, {KILN_SHAPE(2, 3, 5, 4), KILN_SHAPE(1, 3, 4, 7)},
        {KILN_SHAPE(5, 4), KILN_SHAPE(2, 3, 4, 7)},       {KILN_SHAPE(2, 1, 5, 4), KILN_SHAPE(3, 4, 7)},
    };
    for (int c = 0; c < 4; c++) {
        kiln_shape a = cases[c].a, b = cases[c].b;
        int64_t M = a.dims[a.ndim - 2], K = a.dims[a.ndim - 1], N = b.dims[b.ndim - 1];
        kiln_shape batch = ew_broadcast(batch_of(a), batch_of(b)), so = with_tail(batch, M, N);
        int64_t na = kiln_shape_numel(a), nb = kiln_shape_numel(b), no = kiln_shape_numel(so);
        double *va = malloc(sizeof(double) * (size_t)na), *vb = malloc(sizeof(double) * (size_t)nb);
        double *want = malloc(sizeof(double) * (size_t)no);
        ew_values(va, na, KILN_F64, -1, 1);
        ew_values(vb, nb, KILN_F64, -1, 1);
        kiln_shape fa = with_tail(batch, M, K), fb = with_tail(batch, K, N);
        for (int64_t o = 0; o < no; o++) {
            int64_t j = o % N, i = (o / N) % M, bt = o / (M * N);
            double acc = 0;
            for (int64_t e = 0; e < K; e++)
                acc += va[ew_source_index(a, fa, (bt * M + i) * K + e)] * vb[ew_source_index(b, fb, (bt * K + e) * N + j)];
            want[o] = acc;
        }
        double *got = ew_read(kiln_matmul(ew_tensor(KILN_F64, a, va), ew_tensor(KILN_F64, b, vb)), KILN_F64, no);
        if (got) EW_EXPECT_CLOSE("batched matmul", got, want, no, 1e-13, 1e-13);
        free(got);
        free(va);
        free(vb);
        free(want);
    }
    KT_MEM_CHECK();
}

/* ---- the fused inference kernel with a mask: k and v as views of one projection ---------- */

/* Inference (nothing tracked) with k and v in one storage runs the fused ATTENTION op with
 * its mask; a tracked run of the same inputs takes the composed ops. Both must match the
 * double reference: q, k, v as [B, H, S, E] views of a joint [B, S, 3, H, E] projection
 * (BERT's layout), float masks [B, 1, 1, S] and [B, 1, L, S] (row 0 all -inf: zeros) and a
 * bool mask, and the result's heads merged back by a permute and a reshape. */
KT_TEST(attention_fused_kv_views) {
    kt_mem_begin();
    enum { B = 2, H = 3, L = 5, E = 4 };
    const struct {
        kiln_shape mask;
        mask_kind kind;
    } masks[] = {{KILN_SHAPE(B, 1, 1, L), MASK_FLOAT}, {KILN_SHAPE(B, 1, L, L), MASK_FLOAT}, {KILN_SHAPE(B, 1, L, L), MASK_BOOL}};
    const kiln_dtype dts[] = {KILN_F32, KILN_F64};
    for (int t = 0; t < 2; t++)
        for (int mi = 0; mi < 3; mi++)
            for (int tracked = 0; tracked < 2; tracked++) {
                kiln_dtype dt = dts[t];
                int64_t n = B * L * 3 * H * E, nm = kiln_shape_numel(masks[mi].mask), no = B * H * L * E;
                double *qkv = malloc(sizeof(double) * (size_t)n), *m = malloc(sizeof(double) * (size_t)nm);
                double *q = malloc(sizeof(double) * (size_t)no), *k = malloc(sizeof(double) * (size_t)no);
                double *v = malloc(sizeof(double) * (size_t)no), *want = malloc(sizeof(double) * (size_t)no);
                ew_values(qkv, n, dt, -1.5, 1.5);
                attn_case ac = {KILN_SHAPE(B, H, L, E), KILN_SHAPE(B, H, L, E), KILN_SHAPE(B, H, L, E), masks[mi].mask,
                                masks[mi].kind, false, 0};
                mask_values(&ac, m, nm);
                for (int64_t b = 0; b < B; b++) /* the dense q, k, v the views show */
                    for (int64_t h = 0; h < H; h++)
                        for (int64_t s = 0; s < L; s++)
                            for (int64_t e = 0; e < E; e++) {
                                int64_t src = (((b * L + s) * 3) * H + h) * E + e, dst = ((b * H + h) * L + s) * E + e;
                                q[dst] = qkv[src], k[dst] = qkv[src + H * E], v[dst] = qkv[src + 2 * H * E];
                            }
                reference(&ac, q, k, v, m, want);
                kiln_tensor joint = ew_tensor(dt, KILN_SHAPE(B, L, 3, H, E), qkv);
                if (tracked) joint = kiln_leaf(joint);
                kiln_tensor part[3];
                for (int i = 0; i < 3; i++)
                    part[i] = kiln_permute(kiln_squeeze(kiln_narrow(kiln_ref(joint), 2, i, 1), 2), KILN_DIMS(0, 2, 1, 3));
                kiln_tensor mask = ew_tensor(masks[mi].kind == MASK_BOOL ? KILN_BOOL : dt, masks[mi].mask, m);
                kiln_tensor y = kiln_scaled_dot_product_attention(part[0], part[1], part[2], mask, false, 0);
                KT_CHECK(kiln_requires_grad(y) == (tracked != 0));
                kiln_tensor merged = kiln_reshape(kiln_permute(kiln_detach(y), KILN_DIMS(0, 2, 1, 3)), KILN_SHAPE(B, L, H * E));
                double *got = ew_read(merged, dt, no), *back = malloc(sizeof(double) * (size_t)no);
                for (int64_t b = 0; b < B && got; b++) /* [B, L, H, E] back to [B, H, L, E] */
                    for (int64_t s = 0; s < L; s++)
                        for (int64_t h = 0; h < H; h++)
                            for (int64_t e = 0; e < E; e++) back[((b * H + h) * L + s) * E + e] = got[((b * L + s) * H + h) * E + e];
                char label[96];
                snprintf(label, sizeof label, "sdpa kv views %s mask %d %s", kiln_dtype_name(dt), mi, tracked ? "tracked" : "fused");
                double tol = dt == KILN_F64 ? 1e-12 : 3e-6;
                if (got) EW_EXPECT_CLOSE(label, back, want, no, tol, tol);
                free(got), free(back), free(qkv), free(m), free(q), free(k), free(v), free(want);
                kiln_release(joint);
            }
    KT_MEM_CHECK();
}

/* ---- rows with every key masked --------------------------------------------------------- */

static bool all_finite(const double *v, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i])) return false;
    return true;
}

/* PyTorch's math backend gave NaN for such rows until 2.5; its _safe_softmax now gives zeros,
 * and so does kiln: the output row and the gradients that flow from it are 0, never NaN. */
KT_TEST(attention_fully_masked_rows_give_zeros) {
    kt_mem_begin();
    enum { L = 3, S = 4, E = 2 };
    double qv[L * E], kv[S * E], vv[S * E], out[L * E], gq[L * E], gk[S * E], gv[S * E];
    ew_values(qv, L * E, KILN_F64, -1, 1);
    ew_values(kv, S * E, KILN_F64, -1, 1);
    ew_values(vv, S * E, KILN_F64, -1, 1);
    const uint8_t bm[L * S] = {1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 0}; /* row 1 hidden entirely */
    const double fm[L * S] = {0, -1, 0.5, 0, -INFINITY, -INFINITY, -INFINITY, -INFINITY, 0, 0, 0, -INFINITY};
    for (int kind = 0; kind < 2; kind++) {
        kiln_tensor q = kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(L, E), qv);
        kiln_tensor k = kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(S, E), kv);
        kiln_tensor v = kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(S, E), vv);
        kiln_tensor mask = kind ? kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(L, S), fm)
                                : kiln_from_data(KILN_CPU, KILN_BOOL, KILN_SHAPE(L, S), bm);
        kiln_require_grad(q), kiln_require_grad(k), kiln_require_grad(v);
        kiln_tensor y = kiln_scaled_dot_product_attention(kiln_ref(q), kiln_ref(k), kiln_ref(v), mask, false, 0);
        KT_CHECK(kiln_into_data(kiln_detach(kiln_ref(y)), out, sizeof out) == KILN_OK);
        KT_CHECK(out[2] == 0 && out[3] == 0 && all_finite(out, L * E));
        kiln_grads *g = NULL;
        KT_CHECK(kiln_backward(kiln_sum(kiln_mul(y, kiln_full(KILN_CPU, KILN_F64, KILN_SHAPE(L, E), 1.5))), &g) == KILN_OK);
        KT_CHECK(kiln_into_data(kiln_grad(g, q), gq, sizeof gq) == KILN_OK);
        KT_CHECK(kiln_into_data(kiln_grad(g, k), gk, sizeof gk) == KILN_OK);
        KT_CHECK(kiln_into_data(kiln_grad(g, v), gv, sizeof gv) == KILN_OK);
        KT_CHECK(gq[2] == 0 && gq[3] == 0);
        KT_CHECK_MSG(all_finite(gq, L * E) && all_finite(gk, S * E) && all_finite(gv, S * E), "%s mask",
                     kind ? "float" : "bool");
        kiln_grads_free(g);
        kiln_release(q), kiln_release(k), kiln_release(v);
    }
    KT_MEM_CHECK();
}

/* ---- gradients -------------------------------------------------------------------------------- */

typedef struct {
    mask_kind kind;
    kiln_shape mask;
    bool causal, permute; /* permute: q, k, v arrive as [B, L, H, E] viewed as [B, H, L, E] */
} grad_case;

static kiln_tensor attn_fn(kiln_tensor *in, void *ctx) {
    const grad_case *gc = ctx;
    kiln_tensor q = in[0], k = in[1], v = in[2], mask = KILN_NONE;
    if (gc->permute) {
        q = kiln_transpose(q, 1, 2), k = kiln_transpose(k, 1, 2), v = kiln_transpose(v, 1, 2);
    }
    if (gc->kind == MASK_BOOL) /* a fixed mask with row 0 hidden: rows 1.. keep some keys */
        mask = kiln_logical_and(kiln_lt_scalar(kiln_rand(KILN_CPU, KILN_F32, gc->mask, 5), 0.7),
                                kiln_gt_scalar(kiln_reshape(kiln_arange(KILN_CPU, KILN_F32, 0, (double)gc->mask.dims[0], 1),
                                                            KILN_SHAPE(gc->mask.dims[0], 1)),
                                               0.5));
    if (gc->kind == MASK_FLOAT) mask = in[3];
    return kiln_scaled_dot_product_attention(q, k, v, mask, gc->causal, 0);
}

KT_TEST(attention_gradient) {
    kt_mem_begin();
    grad_case plain = {MASK_NONE, {0}, false, false}, causal = {MASK_NONE, {0}, true, false};
    grad_case boolean = {MASK_BOOL, KILN_SHAPE(3, 4), false, false}, added = {MASK_FLOAT, KILN_SHAPE(2, 1, 3, 4), false, false};
    grad_case heads = {MASK_NONE, {0}, true, true};
    GC_CHECK("sdpa", attn_fn, &plain, 3, ((kiln_shape[]){KILN_SHAPE(2, 3, 2), KILN_SHAPE(2, 4, 2), KILN_SHAPE(2, 4, 3)}), 1e-6);
    GC_CHECK("sdpa causal", attn_fn, &causal, 3, ((kiln_shape[]){KILN_SHAPE(4, 3), KILN_SHAPE(3, 3), KILN_SHAPE(3, 2)}), 1e-6);
    GC_CHECK("sdpa broadcast batch", attn_fn, &plain, 3,
             ((kiln_shape[]){KILN_SHAPE(2, 2, 3, 2), KILN_SHAPE(1, 2, 4, 2), KILN_SHAPE(4, 3)}), 1e-6);
    kiln_shape bs[3] = {KILN_SHAPE(2, 1, 3, 2), KILN_SHAPE(2, 1, 4, 2), KILN_SHAPE(2, 1, 4, 2)};
    GC_CHECK("sdpa bool mask", attn_fn, &boolean, 3, bs, 1e-6);
    GC_CHECK("sdpa float mask", attn_fn, &added, 4,
             ((kiln_shape[]){KILN_SHAPE(2, 2, 3, 2), KILN_SHAPE(2, 2, 4, 2), KILN_SHAPE(2, 2, 4, 3), KILN_SHAPE(2, 1, 3, 4)}), 1e-6);
    GC_CHECK("sdpa heads permuted", attn_fn, &heads, 3,
             ((kiln_shape[]){KILN_SHAPE(1, 3, 2, 2), KILN_SHAPE(1, 3, 2, 2), KILN_SHAPE(1, 3, 2, 2)}), 1e-6);
    KT_MEM_CHECK();
}

/* Tracked attention without a mask runs fused and recomputes its weights in backward a few batch
 * rows at a time (src/autodiff/rules_attention.c). At [3, 1, 512, 4] f64 each batch row's
 * weights are 2 MiB, so the backward takes rows {0, 1} then {2}; its gradients equal the composed
 * ops' (a float mask, of zeros or the causal triangle, takes those) to rounding, causal or not. */
static void attention_grads(bool composed, bool causal, const double *const *in, double *const *out, int64_t n) {
    kiln_shape s = KILN_SHAPE(3, 1, 512, 4);
    kiln_tensor t[3];
    for (int i = 0; i < 3; i++) t[i] = kiln_leaf(kiln_from_data(KILN_CPU, KILN_F64, s, in[i]));
    kiln_tensor mask = KILN_NONE; /* a mask and is_causal do not combine: the triangle goes into the mask */
    if (composed) mask = kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE(512, 512));
    if (composed && causal) mask = kiln_masked_fill(mask, kiln_triu(kiln_ones(KILN_CPU, KILN_BOOL, KILN_SHAPE(512, 512)), 1), -INFINITY);
    kiln_tensor y = kiln_scaled_dot_product_attention(kiln_ref(t[0]), kiln_ref(t[1]), kiln_ref(t[2]), mask,
                                                      causal && !composed, 0);
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_sum(kiln_mul(y, kiln_from_data(KILN_CPU, KILN_F64, s, in[0]))), &g) == KILN_OK);
    for (int i = 0; i < 3; i++) {
        KT_CHECK(kiln_into_data(kiln_grad(g, t[i]), out[i], sizeof(double) * (size_t)n) == KILN_OK);
        kiln_release(t[i]);
    }
    kiln_grads_free(g);
}

KT_TEST(attention_gradient_in_chunks) {
    kt_mem_begin();
    enum { N = 3 * 512 * 4 };
    double *buf = calloc(9 * N, sizeof *buf);
    KT_CHECK(buf != NULL);
    if (!buf) return;
    const double *in[3] = {buf, buf + N, buf + 2 * N};
    double *fused[3] = {buf + 3 * N, buf + 4 * N, buf + 5 * N}, *composed[3] = {buf + 6 * N, buf + 7 * N, buf + 8 * N};
    for (int i = 0; i < 3; i++) ew_values(buf + i * N, N, KILN_F64, -2, 2);
    for (int causal = 0; causal < 2; causal++) {
        attention_grads(false, causal, in, fused, N);
        attention_grads(true, causal, in, composed, N);
        double worst = 0;
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < N; j++) worst = fmax(worst, fabs(fused[i][j] - composed[i][j]) / (1 + fabs(composed[i][j])));
        KT_CHECK_MSG(worst < 1e-12, "%s: fused and composed gradients differ by %g", causal ? "causal" : "full", worst);
    }
    free(buf);
    KT_MEM_CHECK();
}

/* ---- bad input -------------------------------------------------------------------------------- */

static kiln_tensor t32(kiln_shape s) { return kiln_ones(KILN_CPU, KILN_F32, s); }

#define SDPA(q, k, v, mask, causal, scale) kiln_scaled_dot_product_attention(q, k, v, mask, causal, scale)

KT_TEST(attention_bad_input) {
    kt_mem_begin();
    const char *op = "kiln_scaled_dot_product_attention";
    kiln_shape q = KILN_SHAPE(2, 5, 4), k = KILN_SHAPE(2, 7, 4), v = KILN_SHAPE(2, 7, 3);
    int line;
    kiln_tensor y, bad;
    y = SDPA(t32(q), t32(k), t32(v), kiln_ones(KILN_CPU, KILN_I32, KILN_SHAPE(5, 7)), false, 0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_DTYPE, op, line);
    y = SDPA(t32(q), t32(k), t32(v), kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE(5, 7)), false, 0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_DTYPE, op, line);
    y = SDPA(kiln_ones(KILN_CPU, KILN_I64, q), t32(k), t32(v), KILN_NONE, false, 0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_DTYPE, op, line);
    y = SDPA(t32(q), kiln_ones(KILN_CPU, KILN_F64, k), t32(v), KILN_NONE, false, 0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_DTYPE, op, line);
    y = SDPA(t32(q), t32(KILN_SHAPE(2, 7, 5)), t32(v), KILN_NONE, false, 0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_SHAPE, op, line);
    y = SDPA(t32(q), t32(k), t32(KILN_SHAPE(2, 6, 3)), KILN_NONE, false, 0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_SHAPE, op, line);
    y = SDPA(t32(KILN_SHAPE(4)), t32(k), t32(v), KILN_NONE, false, 0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_SHAPE, op, line);
    y = SDPA(t32(KILN_SHAPE(3, 5, 4)), t32(k), t32(v), KILN_NONE, false, 0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_SHAPE, op, line);
    y = SDPA(t32(q), t32(k), t32(v), kiln_ones(KILN_CPU, KILN_BOOL, KILN_SHAPE(5, 8)), false, 0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_SHAPE, op, line);
    y = SDPA(t32(q), t32(k), t32(v), kiln_ones(KILN_CPU, KILN_BOOL, KILN_SHAPE(3, 2, 5, 7)), false, 0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_SHAPE, op, line);
    y = SDPA(t32(q), t32(k), t32(v), kiln_ones(KILN_CPU, KILN_BOOL, KILN_SHAPE(5, 7)), true, 0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_INVALID_ARGUMENT, op, line);
    y = SDPA(t32(q), t32(k), t32(v), KILN_NONE, false, INFINITY), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_INVALID_ARGUMENT, op, line);
    y = SDPA(ew_stale(), t32(k), t32(v), KILN_NONE, false, 0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_STALE_HANDLE, op, line);
    y = SDPA(t32(q), t32(k), t32(v), ew_stale(), false, 0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_STALE_HANDLE, op, line);
    y = SDPA(KILN_NONE, t32(k), t32(v), KILN_NONE, false, 0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_NULL, op, line);
    y = SDPA(t32(q), t32(k), KILN_NONE, KILN_NONE, true, 0), line = __LINE__;
    EW_EXPECT_ERROR(y, KILN_ERR_NULL, op, line);
    bad = EW_POISONED();
    line = __LINE__ - 1;
    y = SDPA(t32(q), t32(k), bad, KILN_NONE, false, 0);
    EW_EXPECT_ERROR(y, KILN_ERR_SHAPE, "kiln_reshape", line);
    kiln_sync();
    kiln_clear_error();
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(attention_matches_reference);
    KT_RUN(batched_matmul_attention_shapes);
    KT_RUN(attention_fused_kv_views);
    KT_RUN(attention_fully_masked_rows_give_zeros);
    KT_RUN(attention_gradient);
    KT_RUN(attention_gradient_in_chunks);
    KT_RUN(attention_bad_input);
    return kt_finish();
}
