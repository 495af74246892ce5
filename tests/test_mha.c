/* MultiheadAttention against a double-precision loop written here (projections, heads, bool and
 * float attn_mask of both shapes, key_padding_mask, both combined, L != S, batch_first or not,
 * the head-averaged weights); PyTorch's parameter names and initial values; finite-difference
 * gradients of the inputs and every parameter; bad input naming kiln_multihead_attention and
 * the caller's line; leaks. */
#include "gradcheck.h"
#include "ew_util.h"
#include "nn_util.h"

/* n random doubles in [-1, 1] (freed by the caller). */
static double *nr_rand(int64_t n) {
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    ew_values(v, n, KILN_F64, -1, 1);
    return v;
}

typedef struct {
    int64_t n, l, s, e, h;
    bool batch_first, bias;
    int am;  /* attn_mask: 0 none, 1 bool [L, S], 2 float [N H, L, S] */
    int kpm; /* key_padding_mask: 0 none, 1 bool, 2 float */
} mcase;

/* Reference over [N, L, E] / [N, S, E] layouts. mask values: am [L,S] or [NH,L,S], kpm [N,S]
 * (bool masks as 0/1 with 1 = hidden). */
static void ref_mha(const mcase *k, const double *q, const double *kv_k, const double *kv_v, const double *win,
                    const double *bin, const double *wout, const double *bout, const double *am, const double *kpm,
                    double *y, double *wts) {
    int64_t e = k->e, d = e / k->h;
    double *pq = malloc(sizeof(double) * (size_t)(k->l * e)), *pk = malloc(sizeof(double) * (size_t)(k->s * e));
    double *pv = malloc(sizeof(double) * (size_t)(k->s * e)), *o = malloc(sizeof(double) * (size_t)(k->l * e));
    double *sc = malloc(sizeof(double) * (size_t)k->s);
    for (int64_t n = 0; n < k->n; n++) {
        linear_ref(q + n * k->l * e, win, bin, k->l, e, e, pq);
        linear_ref(kv_k + n * k->s * e, win + e * e, bin ? bin + e : NULL, k->s, e, e, pk);
        linear_ref(kv_v + n * k->s * e, win + 2 * e * e, bin ? bin + 2 * e : NULL, k->s, e, e, pv);
        for (int64_t i = 0; i < k->l * k->s; i++) wts[n * k->l * k->s + i] = 0;
        for (int64_t hh = 0; hh < k->h; hh++)
            for (int64_t i = 0; i < k->l; i++) {
                double mx = -INFINITY;
                for (int64_t j = 0; j < k->s; j++) {
                    double s = 0;
                    for (int64_t c = 0; c < d; c++) s += pq[i * e + hh * d + c] * pk[j * e + hh * d + c];
                    s /= sqrt((double)d);
                    if (k->am == 1 && am[i * k->s + j] != 0) s = -INFINITY;
                    if (k->am == 2) s += am[((n * k->h + hh) * k->l + i) * k->s + j];
                    if (k->kpm == 1 && kpm[n * k->s + j] != 0) s = -INFINITY;
                    if (k->kpm == 2) s += kpm[n * k->s + j];
                    sc[j] = s;
                    if (s > mx) mx = s;
                }
                double z = 0;
                for (int64_t j = 0; j < k->s; j++) z += sc[j] = exp(sc[j] - mx);
                for (int64_t c = 0; c < d; c++) {
                    double acc = 0;
                    for (int64_t j = 0; j < k->s; j++) acc += sc[j] / z * pv[j * e + hh * d + c];
                    o[i * e + hh * d + c] = acc;
                }
                for (int64_t j = 0; j < k->s; j++) wts[(n * k->l + i) * k->s + j] += sc[j] / z / (double)k->h;
            }
        linear_ref(o, wout, bout, k->l, e, e, y + n * k->l * e);
    }
    free(pq), free(pk), free(pv), free(o), free(sc);
}

/* [N, R, E] values as a tensor in the case's layout ([R, N, E] unless batch_first). */
static kiln_tensor laid_out(const mcase *k, const double *v, int64_t r) {
    kiln_tensor t = kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(k->n, r, k->e), v);
    return k->batch_first ? t : kiln_contiguous(kiln_transpose(t, 0, 1));
}

static kiln_tensor mask_tensor(int kind, kiln_shape s, const double *v) {
    kiln_tensor t = kiln_from_data(KILN_CPU, KILN_F64, s, v);
    return kind == 1 ? kiln_ne_scalar(t, 0.0) : t;
}

static const mcase cases[] = {
    {2, 3, 3, 8, 2, true, true, 0, 0},  {2, 4, 3, 8, 4, false, true, 1, 0}, {1, 3, 5, 6, 3, true, false, 2, 0},
    {3, 2, 4, 4, 1, false, true, 0, 1}, {2, 3, 4, 8, 2, true, true, 1, 2},  {2, 3, 4, 8, 2, false, true, 2, 1},
};

KT_TEST(against_reference) {
    ew_mark mark = ew_mark_now();
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const mcase *k = &cases[t];
        kiln_multihead_attention_options o = kiln_multihead_attention_defaults(k->e, k->h);
        o.batch_first = k->batch_first, o.bias = k->bias;
        kiln_module *m = kiln_multihead_attention_new(o, 5);
        int64_t e = k->e;
        double *q = nr_rand(k->n * k->l * e), *kk = nr_rand(k->n * k->s * e), *vv = nr_rand(k->n * k->s * e);
        double *win = nr_rand(3 * e * e), *bin = nr_rand(3 * e), *wout = nr_rand(e * e), *bout = nr_rand(e);
        int64_t nam = k->am == 2 ? k->n * k->h * k->l * k->s : k->l * k->s;
        double *am = nr_rand(nam), *kpm = nr_rand(k->n * k->s);
        if (k->am == 1) /* hide about a third, never a whole row */
            for (int64_t i = 0; i < nam; i++) am[i] = (i % k->s) != 0 && am[i] > 0.3;
        if (k->kpm == 1)
            for (int64_t i = 0; i < k->n * k->s; i++) kpm[i] = (i % k->s) == k->s - 1;
        set_param(m, "in_proj_weight", kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(3 * e, e), win));
        set_param(m, "out_proj.weight", kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(e, e), wout));
        if (k->bias) {
            set_param(m, "in_proj_bias", kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(3 * e), bin));
            set_param(m, "out_proj.bias", kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(e), bout));
        }
        double *want = malloc(sizeof(double) * (size_t)(k->n * k->l * e));
        double *want_w = malloc(sizeof(double) * (size_t)(k->n * k->l * k->s));
        ref_mha(k, q, kk, vv, win, k->bias ? bin : NULL, wout, k->bias ? bout : NULL, am, kpm, want, want_w);
        kiln_tensor amt = k->am == 0   ? KILN_NONE
                          : k->am == 1 ? mask_tensor(1, KILN_SHAPE(k->l, k->s), am)
                                       : mask_tensor(2, KILN_SHAPE(k->n * k->h, k->l, k->s), am);
        kiln_tensor kpt = k->kpm ? mask_tensor(k->kpm, KILN_SHAPE(k->n, k->s), kpm) : KILN_NONE;
        kiln_tensor w;
        kiln_tensor y = kiln_multihead_attention(m, laid_out(k, q, k->l), laid_out(k, kk, k->s), laid_out(k, vv, k->s),
                                                 kpt, amt, &w);
        if (!k->batch_first) y = kiln_transpose(y, 0, 1);
        double *got = ew_read(kiln_contiguous(y), KILN_F64, k->n * k->l * e);
        double *got_w = ew_read(w, KILN_F64, k->n * k->l * k->s);
        char what[64];
        snprintf(what, sizeof what, "mha case %zu output", t);
        if (got) EW_EXPECT_CLOSE(what, got, want, k->n * k->l * e, 1e-12, 1e-12);
        snprintf(what, sizeof what, "mha case %zu weights", t);
        if (got_w) EW_EXPECT_CLOSE(what, got_w, want_w, k->n * k->l * k->s, 1e-12, 1e-12);
        free(got), free(got_w), free(want), free(want_w), free(q), free(kk), free(vv), free(win), free(bin);
        free(wout), free(bout), free(am), free(kpm);
        kiln_module_free(m);
    }
    EW_NO_LEAKS(mark);
}

KT_TEST(module_parameters) {
    ew_mark mark = ew_mark_now();
    kiln_module *m = kiln_multihead_attention_new(kiln_multihead_attention_defaults(8, 2), 1);
    KT_CHECK(m && strcmp(kiln_module_type(m), "MultiheadAttention") == 0);
    kiln_param ps[8];
    int n = kiln_module_params(m, ps, 8);
    const char *names[4] = {"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"};
    KT_CHECK(n == 4);
    for (int i = 0; i < 4 && i < n; i++) KT_CHECK_MSG(strcmp(ps[i].name, names[i]) == 0, "%s", ps[i].name);
    double *w = ew_read(kiln_ref(*param_slot(m, "in_proj_weight")), KILN_F32, 24 * 8);
    double bound = sqrt(6.0 / 32.0), mx = 0;
    for (int i = 0; w && i < 24 * 8; i++) mx = fmax(mx, fabs(w[i]));
    KT_CHECK(mx <= bound && mx > 0.5 * bound);
    free(w);
    double *b = ew_read(kiln_ref(*param_slot(m, "out_proj.bias")), KILN_F32, 8);
    for (int i = 0; b && i < 8; i++) KT_CHECK(b[i] == 0);
    free(b);
    kiln_tensor y = kiln_module_forward(m, kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(5, 3, 8), 2));
    kiln_shape s = kiln_tensor_shape(y);
    KT_CHECK(s.ndim == 3 && s.dims[0] == 5 && s.dims[1] == 3 && s.dims[2] == 8);
    float sink[120];
    KT_CHECK(kiln_into_data(y, sink, sizeof sink) == KILN_OK);
    kiln_module_free(m);
    EW_NO_LEAKS(mark);
}

typedef struct {
    kiln_module *m;
    bool mask;
} gctx;

static kiln_tensor gc_mha(kiln_tensor *in, void *ctx) {
    gctx *g = ctx;
    set_param(g->m, "in_proj_weight", in[2]);
    set_param(g->m, "in_proj_bias", in[3]);
    set_param(g->m, "out_proj.weight", in[4]);
    set_param(g->m, "out_proj.bias", in[5]);
    kiln_tensor am = g->mask ? kiln_triu(kiln_ones(KILN_CPU, KILN_BOOL, KILN_SHAPE(3, 2)), 1) : KILN_NONE;
    kiln_tensor w = KILN_NONE;
    kiln_tensor y = kiln_multihead_attention(g->m, in[0], kiln_ref(in[1]), in[1], KILN_NONE, am,
                                             g->mask ? &w : NULL);
    if (!g->mask) return y;
    return kiln_add(kiln_sum(y), kiln_sum(w)); /* the weights are differentiable too */
}

KT_TEST(gradients_finite_differences) {
    for (int mask = 0; mask < 2; mask++) {
        kiln_multihead_attention_options o = kiln_multihead_attention_defaults(4, 2);
        o.batch_first = mask;
        gctx g = {kiln_multihead_attention_new(o, 3), mask};
        kiln_shape shapes[6] = {mask ? KILN_SHAPE(2, 3, 4) : KILN_SHAPE(3, 2, 4), mask ? KILN_SHAPE(2, 2, 4) : KILN_SHAPE(2, 2, 4),
                                KILN_SHAPE(12, 4), KILN_SHAPE(12), KILN_SHAPE(4, 4), KILN_SHAPE(4)};
        GC_CHECK(mask ? "mha masked, weights" : "mha", gc_mha, &g, 6, shapes, 1e-6);
        kiln_module_free(g.m);
    }
}

KT_TEST(bad_input) {
    ew_mark mark = ew_mark_now();
    kiln_module *m = kiln_multihead_attention_new(kiln_multihead_attention_defaults(8, 2), 1);
    kiln_module *lin = kiln_linear_new(8, 8, true, 1);
    const char *M = "kiln_multihead_attention";
    kiln_tensor x = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(5, 3, 8)), r, w = KILN_NONE;
    int line;
#define MHA(mod, q, k, v, kp, am) kiln_multihead_attention(mod, q, k, v, kp, am, &w)
    r = MHA(NULL, kiln_ref(x), kiln_ref(x), kiln_ref(x), KILN_NONE, KILN_NONE); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, M, line);
    KT_CHECK(w.id == KILN_NONE.id);
    r = MHA(lin, kiln_ref(x), kiln_ref(x), kiln_ref(x), KILN_NONE, KILN_NONE); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, M, line);
    r = MHA(m, kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(5, 8)), kiln_ref(x), kiln_ref(x), KILN_NONE, KILN_NONE); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, M, line);
    r = MHA(m, kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(5, 3, 6)), kiln_ref(x), kiln_ref(x), KILN_NONE, KILN_NONE); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, M, line);
    KT_CHECK(strstr(kiln_last_error(), "embed_dim 8") != NULL);
    r = MHA(m, kiln_ref(x), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(5, 2, 8)), kiln_ref(x), KILN_NONE, KILN_NONE); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, M, line); /* batch 2 against 3 */
    r = MHA(m, kiln_ref(x), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4, 3, 8)), kiln_ref(x), KILN_NONE, KILN_NONE); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, M, line); /* key S 4, value S 5 */
    r = MHA(m, kiln_ref(x), kiln_ref(x), kiln_ref(x), kiln_zeros(KILN_CPU, KILN_BOOL, KILN_SHAPE(5, 3)), KILN_NONE); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, M, line); /* key_padding_mask is [N, S] = [3, 5] */
    r = MHA(m, kiln_ref(x), kiln_ref(x), kiln_ref(x), KILN_NONE, kiln_zeros(KILN_CPU, KILN_BOOL, KILN_SHAPE(5, 4))); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, M, line);
    r = MHA(m, kiln_ref(x), kiln_ref(x), kiln_ref(x), KILN_NONE, kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3, 5, 5))); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, M, line); /* needs N * heads = 6 */
    r = MHA(m, kiln_ref(x), kiln_ref(x), kiln_ref(x), KILN_NONE, kiln_zeros(KILN_CPU, KILN_I32, KILN_SHAPE(5, 5))); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_DTYPE, M, line);
    r = MHA(m, kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(5, 3, 8)), kiln_ref(x), kiln_ref(x), KILN_NONE, KILN_NONE); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_DTYPE, M, line);
    r = MHA(m, kiln_ref(x), kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE(5, 3, 8)), kiln_ref(x), KILN_NONE, KILN_NONE); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_DTYPE, M, line);
    r = MHA(m, KILN_NONE, kiln_ref(x), kiln_ref(x), KILN_NONE, KILN_NONE); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, M, line);
    r = MHA(m, kiln_ref(x), ew_stale(), kiln_ref(x), KILN_NONE, KILN_NONE); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, M, line);
    line = __LINE__; r = MHA(m, kiln_ref(x), kiln_ref(x), kiln_ref(x), EW_POISONED(), KILN_NONE);
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_reshape", line);
    KT_CHECK(w.id == KILN_NONE.id);
#undef MHA
    kiln_module *bad = kiln_multihead_attention_new(kiln_multihead_attention_defaults(8, 3), 1); line = __LINE__;
    KT_CHECK(bad == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_multihead_attention_new", line);
    bad = kiln_multihead_attention_new(kiln_multihead_attention_defaults(0, 1), 1); line = __LINE__;
    KT_CHECK(bad == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_multihead_attention_new", line);
    kiln_release(x);
    kiln_module_free(m);
    kiln_module_free(lin);
    EW_NO_LEAKS(mark);
}

int main(void) {
    KT_RUN(against_reference);
    KT_RUN(module_parameters);
    KT_RUN(gradients_finite_differences);
    KT_RUN(bad_input);
    return kt_finish();
}
