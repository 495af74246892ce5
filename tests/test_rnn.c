/* LSTM and GRU against double-precision loops written here with PyTorch's equations and gate
 * order (LSTM i, f, g, o; GRU r, z, n with b_hn inside r * (...)): one and several layers,
 * given or zero initial states, batch_first, without bias; finite-difference gradients of the
 * input, the states and the parameters; PyTorch's parameter names, shapes and initial bounds;
 * bad input naming kiln_lstm / kiln_gru and the caller's line; leaks. */
#include "gradcheck.h"
#include "ew_util.h"
#include "nn_util.h"

/* n random doubles in [-1, 1] (freed by the caller). */
static double *nr_rand(int64_t n) {
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    ew_values(v, n, KILN_F64, -1, 1);
    return v;
}

static double sigm(double x) { return 1 / (1 + exp(-x)); }

typedef struct {
    bool lstm;
    int64_t t, n, in, h;
    int layers;
    bool bias, batch_first, given_states, bidir;
} rcase;

typedef struct {
    double *w[64][4]; /* per layer and direction: w_ih, w_hh, b_ih, b_hh */
} rparams;

static int dirs_of(const rcase *k) { return k->bidir ? 2 : 1; }

/* Reference: x [T, N, in] (time-major), h0/c0 [layers * dirs, N, H]; y [T, N, dirs * H],
 * hn/cn [layers * dirs, N, H]. */
static void ref_rnn(const rcase *k, const rparams *p, const double *x, const double *h0, const double *c0, double *y,
                    double *hn, double *cn) {
    int64_t g = (k->lstm ? 4 : 3) * k->h, H = k->h, D = dirs_of(k), width = D * H > k->in ? D * H : k->in;
    double *cur = malloc(sizeof(double) * (size_t)(k->t * k->n * width));
    memcpy(cur, x, sizeof(double) * (size_t)(k->t * k->n * k->in));
    double *gi = malloc(sizeof(double) * (size_t)(k->n * g)), *gh = malloc(sizeof(double) * (size_t)(k->n * g));
    double *h = malloc(sizeof(double) * (size_t)(k->n * H)), *c = malloc(sizeof(double) * (size_t)(k->n * H));
    for (int l = 0; l < k->layers; l++) {
        int64_t in = l ? D * H : k->in;
        for (int dir = 0; dir < D; dir++) {
            int ld = l * (int)D + dir;
            for (int64_t i = 0; i < k->n * H; i++) {
                h[i] = h0 ? h0[ld * k->n * H + i] : 0;
                c[i] = c0 ? c0[ld * k->n * H + i] : 0;
            }
            for (int64_t s = 0; s < k->t; s++) {
                int64_t t = dir ? k->t - 1 - s : s;
                linear_ref(cur + t * k->n * in, p->w[ld][0], k->bias ? p->w[ld][2] : NULL, k->n, in, g, gi);
                linear_ref(h, p->w[ld][1], k->bias ? p->w[ld][3] : NULL, k->n, H, g, gh);
                for (int64_t n = 0; n < k->n; n++)
                    for (int64_t j = 0; j < H; j++) {
                        const double *a = gi + n * g, *b = gh + n * g;
                        if (k->lstm) {
                            double ig = sigm(a[j] + b[j]), fg = sigm(a[H + j] + b[H + j]);
                            double gg = tanh(a[2 * H + j] + b[2 * H + j]), og = sigm(a[3 * H + j] + b[3 * H + j]);
                            c[n * H + j] = fg * c[n * H + j] + ig * gg;
                            h[n * H + j] = og * tanh(c[n * H + j]);
                        } else {
                            double r = sigm(a[j] + b[j]), z = sigm(a[H + j] + b[H + j]);
                            double nn = tanh(a[2 * H + j] + r * b[2 * H + j]);
                            h[n * H + j] = (1 - z) * nn + z * h[n * H + j];
                        }
                        y[(t * k->n + n) * D * H + dir * H + j] = h[n * H + j];
                    }
            }
            memcpy(hn + ld * k->n * H, h, sizeof(double) * (size_t)(k->n * H));
            memcpy(cn + ld * k->n * H, c, sizeof(double) * (size_t)(k->n * H));
        }
        memcpy(cur, y, sizeof(double) * (size_t)(k->t * k->n * D * H));
    }
    free(cur), free(gi), free(gh), free(h), free(c);
}

static const char *const kinds[4] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};

/* With dropout between layers, which eval mode (the reference's) turns off. */
static kiln_module *make(const rcase *k, uint64_t seed) {
    kiln_rnn_options o = kiln_rnn_defaults(k->in, k->h);
    o.dropout = 0.25;
    o.num_layers = k->layers, o.bias = k->bias, o.batch_first = k->batch_first, o.bidirectional = k->bidir;
    kiln_module *m = k->lstm ? kiln_lstm_new(o, seed) : kiln_gru_new(o, seed);
    kiln_module_train(m, false);
    return m;
}

/* The name of parameter i of layer-and-direction ld. */
static void param_name(char *buf, size_t size, const rcase *k, int ld, int i) {
    snprintf(buf, size, "%s_l%d%s", kinds[i], ld / dirs_of(k), ld % dirs_of(k) ? "_reverse" : "");
}

/* Random f64 parameters, set into m and kept in p. */
static void set_params(kiln_module *m, const rcase *k, rparams *p) {
    int64_t g = (k->lstm ? 4 : 3) * k->h;
    for (int ld = 0; ld < k->layers * dirs_of(k); ld++)
        for (int i = 0; i < (k->bias ? 4 : 2); i++) {
            int64_t in = ld / dirs_of(k) ? dirs_of(k) * k->h : k->in;
            kiln_shape s = i == 0 ? KILN_SHAPE(g, in) : i == 1 ? KILN_SHAPE(g, k->h) : KILN_SHAPE(g);
            p->w[ld][i] = nr_rand(kiln_shape_numel(s));
            char name[32];
            param_name(name, sizeof name, k, ld, i);
            set_param(m, name, kiln_from_data(KILN_CPU, KILN_F64, s, p->w[ld][i]));
        }
}

static void free_params(const rcase *k, rparams *p) {
    for (int ld = 0; ld < k->layers * dirs_of(k); ld++)
        for (int i = 0; i < (k->bias ? 4 : 2); i++) free(p->w[ld][i]);
}

static const rcase cases[] = {
    {true, 4, 2, 3, 5, 1, true, false, false, false},  {true, 3, 3, 4, 2, 2, true, true, true, false},
    {true, 5, 1, 2, 3, 3, false, false, true, false},  {false, 4, 2, 3, 5, 1, true, false, false, false},
    {false, 3, 3, 4, 2, 2, true, true, true, false},   {false, 6, 2, 1, 4, 2, false, false, true, false},
    {true, 4, 2, 3, 3, 2, true, false, true, true}, {false, 3, 2, 2, 3, 3, true, true, true, true},
    {true, 3, 1, 2, 2, 1, false, true, false, true},
};

KT_TEST(against_reference) {
    ew_mark mark = ew_mark_now();
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const rcase *k = &cases[c];
        kiln_module *m = make(k, 9);
        rparams p;
        set_params(m, k, &p);
        int64_t ny = k->t * k->n * dirs_of(k) * k->h, ns = k->layers * dirs_of(k) * k->n * k->h;
        double *x = nr_rand(k->t * k->n * k->in), *h0 = nr_rand(ns), *c0 = nr_rand(ns);
        double *y = malloc(sizeof(double) * (size_t)ny), *hn = malloc(sizeof(double) * (size_t)ns);
        double *cn = malloc(sizeof(double) * (size_t)ns);
        ref_rnn(k, &p, x, k->given_states ? h0 : NULL, k->given_states ? c0 : NULL, y, hn, cn);
        kiln_tensor xt = kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(k->t, k->n, k->in), x);
        if (k->batch_first) xt = kiln_contiguous(kiln_transpose(xt, 0, 1));
        kiln_shape ss = KILN_SHAPE(k->layers * dirs_of(k), k->n, k->h);
        kiln_tensor h0t = k->given_states ? kiln_from_data(KILN_CPU, KILN_F64, ss, h0) : KILN_NONE;
        kiln_tensor c0t = k->given_states && k->lstm ? kiln_from_data(KILN_CPU, KILN_F64, ss, c0) : KILN_NONE;
        kiln_tensor hnt, cnt = KILN_NONE;
        kiln_tensor yt = k->lstm ? kiln_lstm(m, xt, h0t, c0t, &hnt, &cnt) : kiln_gru(m, xt, h0t, &hnt);
        kiln_shape ys = kiln_tensor_shape(yt);
        KT_CHECK(ys.ndim == 3 && ys.dims[2] == dirs_of(k) * k->h && ys.dims[k->batch_first ? 1 : 0] == k->t);
        if (k->batch_first) yt = kiln_contiguous(kiln_transpose(yt, 0, 1));
        double *got = ew_read(yt, KILN_F64, ny), *got_h = ew_read(hnt, KILN_F64, ns);
        char what[64];
        snprintf(what, sizeof what, "case %zu output", c);
        if (got) EW_EXPECT_CLOSE(what, got, y, ny, 1e-12, 1e-12);
        snprintf(what, sizeof what, "case %zu h_n", c);
        if (got_h) EW_EXPECT_CLOSE(what, got_h, hn, ns, 1e-12, 1e-12);
        if (k->lstm) {
            double *got_c = ew_read(cnt, KILN_F64, ns);
            snprintf(what, sizeof what, "case %zu c_n", c);
            if (got_c) EW_EXPECT_CLOSE(what, got_c, cn, ns, 1e-12, 1e-12);
            free(got_c);
        }
        free(got), free(got_h), free(x), free(h0), free(c0), free(y), free(hn), free(cn);
        free_params(k, &p);
        kiln_module_free(m);
    }
    EW_NO_LEAKS(mark);
}

KT_TEST(modules) {
    ew_mark mark = ew_mark_now();
    kiln_rnn_options o = kiln_rnn_defaults(3, 4);
    o.num_layers = 2;
    kiln_module *m = kiln_lstm_new(o, 1);
    KT_CHECK(m && strcmp(kiln_module_type(m), "LSTM") == 0);
    kiln_param ps[16];
    KT_CHECK(kiln_module_params(m, ps, 16) == 8);
    const char *want[8] = {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
                           "weight_ih_l1", "weight_hh_l1", "bias_ih_l1", "bias_hh_l1"};
    for (int i = 0; i < 8; i++) KT_CHECK_MSG(strcmp(ps[i].name, want[i]) == 0, "%s", ps[i].name);
    kiln_shape s = kiln_tensor_shape(*ps[0].slot);
    KT_CHECK(s.ndim == 2 && s.dims[0] == 16 && s.dims[1] == 3);
    s = kiln_tensor_shape(*ps[4].slot);
    KT_CHECK(s.ndim == 2 && s.dims[0] == 16 && s.dims[1] == 4);
    double *v = ew_read(kiln_ref(*ps[1].slot), KILN_F32, 64);
    for (int i = 0; v && i < 64; i++) KT_CHECK(fabs(v[i]) <= 0.5); /* 1/sqrt(4) */
    free(v);
    kiln_tensor y = kiln_module_forward(m, kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(5, 2, 3), 3));
    s = kiln_tensor_shape(y);
    KT_CHECK(s.ndim == 3 && s.dims[0] == 5 && s.dims[1] == 2 && s.dims[2] == 4);
    float sink[40];
    KT_CHECK(kiln_into_data(y, sink, sizeof sink) == KILN_OK);
    kiln_module_free(m);
    o.bidirectional = true;
    m = kiln_lstm_new(o, 1);
    KT_CHECK(m && kiln_module_params(m, ps, 16) == 16);
    KT_CHECK(strcmp(ps[4].name, "weight_ih_l0_reverse") == 0 && strcmp(ps[15].name, "bias_hh_l1_reverse") == 0);
    s = kiln_tensor_shape(*ps[8].slot); /* weight_ih_l1 takes both directions' features */
    KT_CHECK(s.ndim == 2 && s.dims[0] == 16 && s.dims[1] == 8);
    kiln_tensor hn;
    y = kiln_lstm(m, kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(5, 2, 3), 3), KILN_NONE, KILN_NONE, &hn, NULL);
    s = kiln_tensor_shape(y);
    KT_CHECK(s.ndim == 3 && s.dims[2] == 8 && kiln_tensor_shape(hn).dims[0] == 4);
    kiln_release(y), kiln_release(hn);
    kiln_module_free(m);
    o.bias = false, o.num_layers = 1, o.bidirectional = false;
    m = kiln_gru_new(o, 2);
    KT_CHECK(m && strcmp(kiln_module_type(m), "GRU") == 0 && kiln_module_params(m, ps, 16) == 2);
    KT_CHECK(kiln_tensor_shape(*ps[0].slot).dims[0] == 12);
    kiln_module_free(m);
    EW_NO_LEAKS(mark);
}

typedef struct {
    kiln_module *m;
    const rcase *k;
    int ld; /* the layer-and-direction whose parameters in[] holds */
} gctx;

static kiln_tensor gc_rnn(kiln_tensor *in, void *ctx) {
    gctx *g = ctx;
    const rcase *k = g->k;
    int at = k->lstm ? 3 : 2;
    for (int i = 0; i < 4; i++) {
        char name[32];
        param_name(name, sizeof name, k, g->ld, i);
        set_param(g->m, name, in[at + i]);
    }
    kiln_tensor hn, cn = KILN_NONE;
    kiln_tensor y = k->lstm ? kiln_lstm(g->m, in[0], in[1], in[2], &hn, &cn) : kiln_gru(g->m, in[0], in[1], &hn);
    kiln_tensor parts[3] = {kiln_flatten(y, 0, -1), kiln_flatten(hn, 0, -1),
                            k->lstm ? kiln_flatten(cn, 0, -1) : KILN_NONE};
    return kiln_cat(parts, k->lstm ? 3 : 2, 0);
}

/* Input, states and the parameters of the last layer (its backward direction when
 * bidirectional); the other parameters are fixed f64 values. */
KT_TEST(gradients_finite_differences) {
    const rcase g_cases[] = {
        {true, 3, 2, 3, 2, 1, true, false, true, false},  {true, 3, 2, 2, 2, 2, true, true, true, false},
        {false, 3, 2, 3, 2, 1, true, false, true, false}, {false, 3, 2, 2, 2, 2, true, true, true, false},
        {true, 3, 2, 2, 2, 1, true, false, true, true},   {false, 3, 2, 2, 2, 2, true, true, true, true},
    };
    for (size_t c = 0; c < sizeof g_cases / sizeof g_cases[0]; c++) {
        const rcase *k = &g_cases[c];
        gctx g = {make(k, 4), k, k->layers * dirs_of(k) - 1};
        rparams p;
        set_params(g.m, k, &p);
        free_params(k, &p);
        int64_t gsz = (k->lstm ? 4 : 3) * k->h, in = k->layers > 1 ? dirs_of(k) * k->h : k->in;
        kiln_shape xs = k->batch_first ? KILN_SHAPE(k->n, k->t, k->in) : KILN_SHAPE(k->t, k->n, k->in);
        kiln_shape st = KILN_SHAPE(k->layers * dirs_of(k), k->n, k->h);
        kiln_shape shapes[7] = {xs, st, st, KILN_SHAPE(gsz, in), KILN_SHAPE(gsz, k->h), KILN_SHAPE(gsz), KILN_SHAPE(gsz)};
        if (!k->lstm) memmove(&shapes[2], &shapes[3], sizeof(kiln_shape) * 4);
        char name[48];
        snprintf(name, sizeof name, "%s case %zu", k->lstm ? "lstm" : "gru", c);
        GC_CHECK(name, gc_rnn, &g, k->lstm ? 7 : 6, shapes, 1e-6);
        kiln_module_free(g.m);
    }
}

/* Dropout acts between layers in training mode only: eval matches the reference (above, with
 * dropout set), training differs from it and from one call to the next, and a single layer
 * has nothing to drop. */
KT_TEST(dropout_between_layers) {
    ew_mark mark = ew_mark_now();
    kiln_rnn_options o = kiln_rnn_defaults(3, 4);
    o.num_layers = 2, o.dropout = 0.5;
    kiln_module *m = kiln_gru_new(o, 1);
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(5, 2, 3), 9);
    double *train1 = ew_read(kiln_module_forward(m, kiln_ref(x)), KILN_F32, 40);
    double *train2 = ew_read(kiln_module_forward(m, kiln_ref(x)), KILN_F32, 40);
    kiln_module_train(m, false);
    double *eval1 = ew_read(kiln_module_forward(m, kiln_ref(x)), KILN_F32, 40);
    double *eval2 = ew_read(kiln_module_forward(m, kiln_ref(x)), KILN_F32, 40);
    if (train1 && train2 && eval1 && eval2) {
        KT_CHECK(memcmp(eval1, eval2, 40 * sizeof(double)) == 0);
        KT_CHECK(memcmp(train1, eval1, 40 * sizeof(double)) != 0);
        KT_CHECK(memcmp(train1, train2, 40 * sizeof(double)) != 0);
    }
    free(train1), free(train2), free(eval1), free(eval2);
    kiln_module_free(m);
    o.num_layers = 1;
    m = kiln_lstm_new(o, 1);
    train1 = ew_read(kiln_module_forward(m, kiln_ref(x)), KILN_F32, 40);
    kiln_module_train(m, false);
    eval1 = ew_read(kiln_module_forward(m, kiln_ref(x)), KILN_F32, 40);
    if (train1 && eval1) KT_CHECK(memcmp(train1, eval1, 40 * sizeof(double)) == 0);
    free(train1), free(eval1);
    kiln_module_free(m);
    kiln_release(x);
    EW_NO_LEAKS(mark);
}

KT_TEST(bad_input) {
    ew_mark mark = ew_mark_now();
    kiln_rnn_options o = kiln_rnn_defaults(3, 4);
    o.num_layers = 2;
    kiln_module *lstm = kiln_lstm_new(o, 1), *gru = kiln_gru_new(o, 1);
    kiln_tensor x = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(5, 2, 3)), r, hn = KILN_NONE, cn = KILN_NONE;
    kiln_tensor s = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 2, 4));
    const char *L = "kiln_lstm", *G = "kiln_gru";
    int line;
    r = kiln_lstm(NULL, kiln_ref(x), KILN_NONE, KILN_NONE, &hn, &cn); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, L, line);
    KT_CHECK(hn.id == KILN_NONE.id && cn.id == KILN_NONE.id);
    r = kiln_lstm(gru, kiln_ref(x), KILN_NONE, KILN_NONE, NULL, NULL); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, L, line);
    r = kiln_gru(lstm, kiln_ref(x), KILN_NONE, NULL); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_INVALID_ARGUMENT, G, line);
    r = kiln_lstm(lstm, kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(5, 3)), KILN_NONE, KILN_NONE, NULL, NULL); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, L, line);
    r = kiln_lstm(lstm, kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(5, 2, 4)), KILN_NONE, KILN_NONE, NULL, NULL); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, L, line);
    KT_CHECK(strstr(kiln_last_error(), "input_size 3") != NULL);
    r = kiln_lstm(lstm, kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0, 2, 3)), KILN_NONE, KILN_NONE, NULL, NULL); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, L, line);
    r = kiln_lstm(lstm, kiln_ref(x), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(1, 2, 4)), KILN_NONE, NULL, NULL); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, L, line); /* h0 needs 2 layers */
    r = kiln_lstm(lstm, kiln_ref(x), kiln_ref(s), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3, 4)), NULL, NULL); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, L, line);
    r = kiln_gru(gru, kiln_ref(x), kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE(2, 2, 4)), NULL); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_DTYPE, G, line);
    r = kiln_gru(gru, kiln_zeros(KILN_CPU, KILN_I32, KILN_SHAPE(5, 2, 3)), KILN_NONE, NULL); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_DTYPE, G, line);
    r = kiln_gru(gru, KILN_NONE, KILN_NONE, &hn); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_NULL, G, line);
    r = kiln_gru(gru, ew_stale(), kiln_ref(s), &hn); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_STALE_HANDLE, G, line);
    line = __LINE__; r = kiln_gru(gru, kiln_ref(x), EW_POISONED(), &hn);
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, "kiln_reshape", line);
    KT_CHECK(hn.id == KILN_NONE.id);
    o.hidden_size = 0;
    kiln_module *bad = kiln_lstm_new(o, 1); line = __LINE__;
    KT_CHECK(bad == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_lstm_new", line);
    o.hidden_size = 4, o.num_layers = 0;
    bad = kiln_gru_new(o, 1); line = __LINE__;
    KT_CHECK(bad == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_gru_new", line);
    o.num_layers = 1, o.dropout = 1.0;
    bad = kiln_lstm_new(o, 1); line = __LINE__;
    KT_CHECK(bad == NULL);
    KT_EXPECT_ERROR(KILN_ERR_INVALID_ARGUMENT, "kiln_lstm_new", line);
    o.dropout = 0, o.bidirectional = true;
    bad = kiln_gru_new(o, 1);
    r = kiln_gru(bad, kiln_ref(x), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(1, 2, 4)), NULL); line = __LINE__;
    EW_EXPECT_ERROR(r, KILN_ERR_SHAPE, G, line); /* h0 needs 2 directions */
    KT_CHECK(strstr(kiln_last_error(), "[2, 2, 4]") != NULL);
    kiln_module_free(bad);
    kiln_release(x), kiln_release(s);
    kiln_module_free(lstm), kiln_module_free(gru);
    EW_NO_LEAKS(mark);
}

int main(void) {
    KT_RUN(against_reference);
    KT_RUN(modules);
    KT_RUN(gradients_finite_differences);
    KT_RUN(dropout_between_layers);
    KT_RUN(bad_input);
    return kt_finish();
}
