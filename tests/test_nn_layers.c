/* nn layers: forward values against double references computed here (Linear, BatchNorm2d in
 * training and eval with its running statistics, LayerNorm, Dropout statistics, Embedding,
 * Flatten, activations), finite-difference gradients through every layer w.r.t. its input and
 * each parameter, parameter names and counts, training/eval switching, and bad input (no
 * leaks). */
#include "gradcheck.h"
#include "nn_util.h"

/* ---- Linear -------------------------------------------------------------------------------- */

KT_TEST(linear_forward) {
    kt_mem_begin();
    kiln_module *m = kiln_linear_new(5, 4, true, 7);
    KT_CHECK(m && strcmp(kiln_module_type(m), "Linear") == 0);
    double w[20], b[4], x[30], got[24], want[24];
    read_param(m, "weight", w, 20);
    read_param(m, "bias", b, 4);
    fill(x, 30, -2, 2);

    kiln_tensor y = kiln_module_forward(m, tensor_of(KILN_F32, KILN_SHAPE(2, 3, 5), x));
    KT_CHECK(has_shape(y, KILN_SHAPE(2, 3, 4)) && kiln_tensor_dtype(y) == KILN_F32);
    read_f64(y, got, 24);
    linear_ref(x, w, b, 6, 5, 4, want);
    for (int i = 0; i < 24; i++) KT_NEAR(got[i], want[i], 1e-5);

    /* a transposed (non-contiguous) input */
    double xt[30];
    for (int r = 0; r < 6; r++)
        for (int i = 0; i < 5; i++) xt[i * 6 + r] = x[r * 5 + i];
    y = kiln_module_forward(m, kiln_transpose(tensor_of(KILN_F32, KILN_SHAPE(5, 6), xt), 0, 1));
    KT_CHECK(has_shape(y, KILN_SHAPE(6, 4)) && kiln_tensor_dtype(y) == KILN_F32);
    read_f64(y, got, 24);
    for (int i = 0; i < 24; i++) KT_NEAR(got[i], want[i], 1e-5);
    /* an f64 input to f32 parameters is refused, as torch.nn.Linear refuses it */
    KT_READ_ERROR(kiln_module_forward(m, tensor_of(KILN_F64, KILN_SHAPE(6, 5), x)), KILN_ERR_DTYPE, "kiln_linear");

    /* a single sample [in] gives [out] */
    y = kiln_module_forward(m, tensor_of(KILN_F32, KILN_SHAPE(5), x));
    KT_CHECK(has_shape(y, KILN_SHAPE(4)));
    read_f64(y, got, 4);
    for (int i = 0; i < 4; i++) KT_NEAR(got[i], want[i], 1e-5);

    /* without bias: one parameter, the same weight stream for the same seed */
    kiln_module *nb = kiln_linear_new(5, 4, false, 7);
    KT_CHECK(kiln_module_params(nb, NULL, 0) == 1 && kiln_module_num_parameters(nb) == 20);
    double w2[20];
    read_param(nb, "weight", w2, 20);
    for (int i = 0; i < 20; i++) KT_CHECK(w2[i] == w[i]);
    read_f64(kiln_module_forward(nb, tensor_of(KILN_F32, KILN_SHAPE(6, 5), x)), got, 24);
    linear_ref(x, w, NULL, 6, 5, 4, want);
    for (int i = 0; i < 24; i++) KT_NEAR(got[i], want[i], 1e-5);

    /* empty batch */
    y = kiln_module_forward(m, kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0, 5)));
    KT_CHECK(has_shape(y, KILN_SHAPE(0, 4)));
    KT_CHECK(kiln_into_data(y, NULL, 0) == KILN_OK);
    kiln_module_free(m);
    kiln_module_free(nb);
    KT_MEM_CHECK();
}

/* ---- activations and Flatten ---------------------------------------------------------------- */

static double ref_relu(double x) { return x > 0 ? x : 0; }
static double ref_gelu(double x) { return 0.5 * x * (1 + erf(x / sqrt(2.0))); }
static double ref_sigmoid(double x) { return 1 / (1 + exp(-x)); }
static double ref_silu(double x) { return x * ref_sigmoid(x); }

static const struct {
    kiln_module *(*make)(void);
    const char *type;
    double (*ref)(double);
} activations[] = {
    {kiln_relu_new, "ReLU", ref_relu},          {kiln_gelu_new, "GELU", ref_gelu}, {kiln_tanh_new, "Tanh", tanh},
    {kiln_sigmoid_new, "Sigmoid", ref_sigmoid}, {kiln_silu_new, "SiLU", ref_silu},
};
enum { N_ACTIVATIONS = sizeof activations / sizeof activations[0] };

KT_TEST(activations_and_flatten) {
    kt_mem_begin();
    double x[24], got[24];
    fill(x, 24, -4, 4);
    for (int a = 0; a < N_ACTIVATIONS; a++) {
        kiln_module *m = activations[a].make();
        KT_CHECK(m && strcmp(kiln_module_type(m), activations[a].type) == 0);
        KT_CHECK(kiln_module_params(m, NULL, 0) == 0 && kiln_module_num_parameters(m) == 0);
        read_f64(kiln_module_forward(m, tensor_of(KILN_F32, KILN_SHAPE(4, 6), x)), got, 24);
        for (int i = 0; i < 24; i++) KT_NEAR(got[i], activations[a].ref(x[i]), 2e-6);
        kiln_module_free(m);
    }

    kiln_module *f = kiln_flatten_new(1, -1);
    KT_CHECK(strcmp(kiln_module_type(f), "Flatten") == 0);
    kiln_tensor y = kiln_module_forward(f, tensor_of(KILN_F32, KILN_SHAPE(2, 3, 2, 2), x));
    KT_CHECK(has_shape(y, KILN_SHAPE(2, 12)));
    read_f64(y, got, 24);
    for (int i = 0; i < 24; i++) KT_CHECK(got[i] == x[i]);
    kiln_module_free(f);
    f = kiln_flatten_new(1, 2);
    y = kiln_module_forward(f, tensor_of(KILN_F32, KILN_SHAPE(2, 3, 2, 2), x));
    KT_CHECK(has_shape(y, KILN_SHAPE(2, 6, 2)));
    kiln_release(y);
    kiln_module_free(f);
    KT_MEM_CHECK();
}

/* ---- BatchNorm2d ---------------------------------------------------------------------------- */

enum { BN_N = 4, BN_C = 3, BN_H = 2, BN_W = 3, BN_SIZE = BN_N * BN_C * BN_H * BN_W, BN_PER = BN_N * BN_H * BN_W };

static void channel_stats(const double *x, int c, double *mean, double *var_biased) {
    double s = 0, ss = 0;
    for (int n = 0; n < BN_N; n++)
        for (int i = 0; i < BN_H * BN_W; i++) s += x[(n * BN_C + c) * BN_H * BN_W + i];
    *mean = s / BN_PER;
    for (int n = 0; n < BN_N; n++)
        for (int i = 0; i < BN_H * BN_W; i++) {
            double d = x[(n * BN_C + c) * BN_H * BN_W + i] - *mean;
            ss += d * d;
        }
    *var_biased = ss / BN_PER;
}

static void bn_ref(const double *x, const double *mean, const double *var, const double *w, const double *b, double eps,
                   double *y) {
    for (int n = 0; n < BN_N; n++)
        for (int c = 0; c < BN_C; c++)
            for (int i = 0; i < BN_H * BN_W; i++) {
                int at = (n * BN_C + c) * BN_H * BN_W + i;
                y[at] = (x[at] - mean[c]) / sqrt(var[c] + eps) * w[c] + b[c];
            }
}

KT_TEST(batch_norm_train_and_eval) {
    kt_mem_begin();
    const double eps = 1e-5, momentum = 0.1;
    kiln_module *m = kiln_batch_norm2d_new(BN_C, eps, momentum);
    KT_CHECK(m && strcmp(kiln_module_type(m), "BatchNorm2d") == 0 && kiln_module_is_training(m));
    double w[BN_C] = {1.5, -0.5, 2}, b[BN_C] = {0.25, 1, -1};
    set_param(m, "weight", tensor_of(KILN_F32, KILN_SHAPE(BN_C), w));
    set_param(m, "bias", tensor_of(KILN_F32, KILN_SHAPE(BN_C), b));
    kiln_require_grad(*param_slot(m, "weight"));
    kiln_require_grad(*param_slot(m, "bias"));

    double x1[BN_SIZE], x2[BN_SIZE], got[BN_SIZE], want[BN_SIZE];
    fill(x1, BN_SIZE, -3, 5);
    fill(x2, BN_SIZE, 0, 2);
    double rm[BN_C] = {0, 0, 0}, rv[BN_C] = {1, 1, 1};
    const double *batches[2] = {x1, x2};
    for (int step = 0; step < 2; step++) {
        kiln_tensor y = kiln_module_forward(m, tensor_of(KILN_F32, KILN_SHAPE(BN_N, BN_C, BN_H, BN_W), batches[step]));
        KT_CHECK(has_shape(y, KILN_SHAPE(BN_N, BN_C, BN_H, BN_W)));
        read_f64(y, got, BN_SIZE);
        double mean[BN_C], var[BN_C];
        for (int c = 0; c < BN_C; c++) {
            channel_stats(batches[step], c, &mean[c], &var[c]);
            rm[c] = (1 - momentum) * rm[c] + momentum * mean[c];
            rv[c] = (1 - momentum) * rv[c] + momentum * var[c] * BN_PER / (BN_PER - 1); /* unbiased */
        }
        bn_ref(batches[step], mean, var, w, b, eps, want);
        for (int i = 0; i < BN_SIZE; i++) KT_NEAR(got[i], want[i], 1e-5);
        double grm[BN_C], grv[BN_C];
        read_param(m, "running_mean", grm, BN_C);
        read_param(m, "running_var", grv, BN_C);
        for (int c = 0; c < BN_C; c++) {
            KT_NEAR(grm[c], rm[c], 1e-6);
            KT_NEAR(grv[c], rv[c], 1e-6);
        }
    }
    int64_t batches_seen = 0;
    KT_CHECK(kiln_into_data(kiln_ref(*param_slot(m, "num_batches_tracked")), &batches_seen, sizeof batches_seen) ==
             KILN_OK);
    KT_CHECK(batches_seen == 2);

    /* eval: the running statistics, and they stay put */
    kiln_module_train(m, false);
    KT_CHECK(!kiln_module_is_training(m));
    read_f64(kiln_module_forward(m, tensor_of(KILN_F32, KILN_SHAPE(BN_N, BN_C, BN_H, BN_W), x1)), got, BN_SIZE);
    bn_ref(x1, rm, rv, w, b, eps, want);
    for (int i = 0; i < BN_SIZE; i++) KT_NEAR(got[i], want[i], 1e-5);
    double grm[BN_C];
    read_param(m, "running_mean", grm, BN_C);
    for (int c = 0; c < BN_C; c++) KT_NEAR(grm[c], rm[c], 1e-6);
    /* eval accepts one value per channel; f64 input keeps the buffers in f32 */
    kiln_release(kiln_module_forward(m, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1, BN_C, 1, 1))));
    kiln_module_train(m, true);
    kiln_release(
        kiln_module_forward(m, kiln_transpose(tensor_of(KILN_F64, KILN_SHAPE(BN_N, BN_C, BN_W, BN_H), x1), 2, 3)));
    KT_CHECK(kiln_tensor_dtype(*param_slot(m, "running_mean")) == KILN_F32);
    KT_CHECK(kiln_tensor_dtype(*param_slot(m, "running_var")) == KILN_F32);
    /* an empty batch gives an empty output and leaves the statistics alone */
    kiln_tensor y = kiln_module_forward(m, kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0, BN_C, 2, 2)));
    KT_CHECK(has_shape(y, KILN_SHAPE(0, BN_C, 2, 2)) && kiln_into_data(y, NULL, 0) == KILN_OK);
    kiln_module_free(m);
    KT_MEM_CHECK();
}

/* ---- LayerNorm ------------------------------------------------------------------------------ */

KT_TEST(layer_norm_forward) {
    kt_mem_begin();
    enum { ROWS = 6, D = 5 };
    double x[ROWS * D], w[D], b[D], got[ROWS * D];
    fill(x, ROWS * D, -3, 3);
    fill(w, D, 0.5, 2);
    fill(b, D, -1, 1);
    kiln_module *m = kiln_layer_norm_new(D, 1e-5, true);
    KT_CHECK(m && strcmp(kiln_module_type(m), "LayerNorm") == 0 && kiln_module_num_parameters(m) == 2 * D);
    double w0[D], b0[D];
    read_param(m, "weight", w0, D);
    read_param(m, "bias", b0, D);
    for (int i = 0; i < D; i++) KT_CHECK(w0[i] == 1 && b0[i] == 0);
    set_param(m, "weight", tensor_of(KILN_F32, KILN_SHAPE(D), w));
    set_param(m, "bias", tensor_of(KILN_F32, KILN_SHAPE(D), b));
    kiln_module *plain = kiln_layer_norm_new(D, 1e-5, false);
    KT_CHECK(kiln_module_params(plain, NULL, 0) == 0);
    for (int affine = 0; affine < 2; affine++) {
        /* [2, 3, 5], and a transposed [5, 6] -> [6, 5] view */
        read_f64(kiln_module_forward(affine ? m : plain, tensor_of(KILN_F32, KILN_SHAPE(2, 3, D), x)), got, ROWS * D);
        double xt[ROWS * D], got_t[ROWS * D];
        for (int r = 0; r < ROWS; r++)
            for (int i = 0; i < D; i++) xt[i * ROWS + r] = x[r * D + i];
        read_f64(
            kiln_module_forward(affine ? m : plain, kiln_transpose(tensor_of(KILN_F64, KILN_SHAPE(D, ROWS), xt), 0, 1)),
            got_t, ROWS * D);
        for (int r = 0; r < ROWS; r++) {
            double mean = 0, var = 0;
            for (int i = 0; i < D; i++) mean += x[r * D + i] / D;
            for (int i = 0; i < D; i++) var += (x[r * D + i] - mean) * (x[r * D + i] - mean) / D;
            for (int i = 0; i < D; i++) {
                double v = (x[r * D + i] - mean) / sqrt(var + 1e-5);
                if (affine) v = v * w[i] + b[i];
                KT_NEAR(got[r * D + i], v, 1e-5);
                KT_NEAR(got_t[r * D + i], v, 1e-6);
            }
        }
    }
    kiln_module_free(m);
    kiln_module_free(plain);
    KT_MEM_CHECK();
}

/* ---- Dropout -------------------------------------------------------------------------------- */

/* Fraction of zeros in y (consumed); every kept value must equal scale. */
static double zero_fraction(kiln_tensor y, int64_t n, double scale) {
    double *v = malloc(sizeof(double) * (size_t)n);
    int64_t zeros = 0, wrong = 0;
    if (read_f64(y, v, n))
        for (int64_t i = 0; i < n; i++) {
            if (v[i] == 0)
                zeros++;
            else if (fabs(v[i] - scale) > 1e-6 * scale)
                wrong++;
        }
    free(v);
    KT_CHECK_MSG(wrong == 0, "%lld kept values differ from %g", (long long)wrong, scale);
    return (double)zeros / (double)n;
}

KT_TEST(dropout_statistics) {
    kt_mem_begin();
    enum { N = 200000 };
    /* std of the fraction is sqrt(p(1-p)/N) ~ 0.001: 0.006 is six of them */
    for (double p = 0.1; p < 0.95; p += 0.4) {
        double frac = zero_fraction(kiln_dropout(kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(N)), p, 3), N, 1 / (1 - p));
        KT_CHECK_MSG(fabs(frac - p) < 0.006, "p=%g zeroed %g", p, frac);
    }
    /* the same seed gives the same mask, another seed another one; f64 and strided inputs */
    double a[64], b[64], c[64];
    read_f64(kiln_dropout(kiln_ones(KILN_CPU, KILN_F64, KILN_SHAPE(8, 8)), 0.5, 11), a, 64);
    read_f64(kiln_dropout(kiln_transpose(kiln_ones(KILN_CPU, KILN_F64, KILN_SHAPE(8, 8)), 0, 1), 0.5, 11), b, 64);
    read_f64(kiln_dropout(kiln_ones(KILN_CPU, KILN_F64, KILN_SHAPE(8, 8)), 0.5, 12), c, 64);
    int same = 0, differ = 0;
    for (int i = 0; i < 64; i++) same += a[i] == b[i], differ += a[i] != c[i];
    KT_CHECK(same == 64 && differ > 10);
    /* p = 0 is the identity */
    double x[6] = {1, -2, 3, -4, 5, -6}, got[6];
    read_f64(kiln_dropout(tensor_of(KILN_F32, KILN_SHAPE(6), x), 0.0, 1), got, 6);
    for (int i = 0; i < 6; i++) KT_CHECK(got[i] == x[i]);

    /* the module: a new mask every training call, the identity in eval */
    kiln_module *m = kiln_dropout_new(0.25, 99);
    KT_CHECK(m && strcmp(kiln_module_type(m), "Dropout") == 0);
    enum { M = 40000 };
    double *m1 = malloc(sizeof(double) * M), *m2 = malloc(sizeof(double) * M);
    read_f64(kiln_module_forward(m, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(M))), m1, M);
    read_f64(kiln_module_forward(m, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(M))), m2, M);
    int64_t zeros1 = 0, both = 0;
    for (int i = 0; i < M; i++) zeros1 += m1[i] == 0, both += m1[i] == 0 && m2[i] == 0;
    KT_CHECK_MSG(fabs((double)zeros1 / M - 0.25) < 0.015, "zeroed %g", (double)zeros1 / M);
    /* independent masks overlap on p^2 of the elements, not p */
    KT_CHECK_MSG(fabs((double)both / M - 0.0625) < 0.01, "both zeroed %g", (double)both / M);
    free(m1);
    free(m2);
    kiln_module_train(m, false);
    read_f64(kiln_module_forward(m, tensor_of(KILN_F32, KILN_SHAPE(6), x)), got, 6);
    for (int i = 0; i < 6; i++) KT_CHECK(got[i] == x[i]);
    kiln_module_free(m);
    KT_MEM_CHECK();
}

/* ---- Embedding ------------------------------------------------------------------------------ */

KT_TEST(embedding_forward) {
    kt_mem_begin();
    enum { NUM = 10, DIM = 4 };
    kiln_module *m = kiln_embedding_new(NUM, DIM, 5);
    KT_CHECK(m && strcmp(kiln_module_type(m), "Embedding") == 0 && kiln_module_num_parameters(m) == NUM * DIM);
    double w[NUM * DIM], got[6 * DIM];
    read_param(m, "weight", w, NUM * DIM);
    double idx[6] = {3, 0, 9, 3, 7, 1};
    for (int dt = 0; dt < 2; dt++) {
        kiln_tensor y = kiln_module_forward(m, tensor_of(dt ? KILN_I32 : KILN_I64, KILN_SHAPE(2, 3), idx));
        KT_CHECK(has_shape(y, KILN_SHAPE(2, 3, DIM)));
        read_f64(y, got, 6 * DIM);
        for (int i = 0; i < 6; i++)
            for (int d = 0; d < DIM; d++) KT_CHECK(got[i * DIM + d] == w[(int)idx[i] * DIM + d]);
    }
    /* a strided index, a 0-d index and an empty one */
    kiln_tensor y = kiln_module_forward(m, kiln_slice(tensor_of(KILN_I64, KILN_SHAPE(6), idx), 0, 0, 6, 2));
    read_f64(y, got, 3 * DIM);
    for (int i = 0; i < 3; i++)
        for (int d = 0; d < DIM; d++) KT_CHECK(got[i * DIM + d] == w[(int)idx[2 * i] * DIM + d]);
    y = kiln_module_forward(m, tensor_of(KILN_I64, KILN_SCALAR_SHAPE, &idx[2]));
    KT_CHECK(has_shape(y, KILN_SHAPE(DIM)));
    read_f64(y, got, DIM);
    for (int d = 0; d < DIM; d++) KT_CHECK(got[d] == w[9 * DIM + d]);
    y = kiln_module_forward(m, kiln_zeros(KILN_CPU, KILN_I64, KILN_SHAPE(0, 2)));
    KT_CHECK(has_shape(y, KILN_SHAPE(0, 2, DIM)));
    kiln_release(y);
    /* indices out of range fail when the gather runs */
    double outside[2] = {NUM, -1};
    for (int i = 0; i < 2; i++) {
        kiln_tensor bad = tensor_of(KILN_I64, KILN_SHAPE(1), &outside[i]);
        KT_READ_ERROR(kiln_module_forward(m, bad), KILN_ERR_INDEX, "kiln_index_select");
    }
    kiln_module_free(m);
    KT_MEM_CHECK();
}

/* ---- half precision ------------------------------------------------------------------------- */

/* Each layer on f16 and bf16 input agrees with itself on f64 input, to the input's precision. */
KT_TEST(half_precision_inputs) {
    kt_mem_begin();
    kiln_module *layers[] = {kiln_linear_new(6, 5, true, 1), kiln_batch_norm2d_new(2, 1e-5, 0.1),
                             kiln_layer_norm_new(6, 1e-5, true), kiln_gelu_new(), kiln_dropout_new(0.5, 4)};
    kiln_shape shapes[] = {KILN_SHAPE(4, 6), KILN_SHAPE(3, 2, 2, 2), KILN_SHAPE(4, 6), KILN_SHAPE(4, 6),
                           KILN_SHAPE(4, 6)};
    double x[24], want[24], got[24];
    fill(x, 24, -2, 2);
    for (int l = 0; l < 5; l++)
        for (int h = 0; h < 2; h++) {
            kiln_dtype dt = h ? KILN_BF16 : KILN_F16;
            kiln_module_train(layers[l], l != 4); /* dropout compared in eval: the identity */
            if (l == 0) { /* a product takes one dtype, as torch.nn.Linear: f32 weights refuse f16 input */
                KT_READ_ERROR(kiln_module_forward(layers[l], tensor_of(dt, shapes[l], x)), KILN_ERR_DTYPE, "kiln_linear");
                continue;
            }
            kiln_tensor y = kiln_module_forward(layers[l], tensor_of(dt, shapes[l], x));
            /* with f32 parameters the result promotes to f32, as any kiln op does */
            kiln_dtype want_dt = l < 3 ? KILN_F32 : dt;
            KT_CHECK_MSG(kiln_tensor_dtype(y) == want_dt, "%s on %s", kiln_module_type(layers[l]), kiln_dtype_name(dt));
            int64_t n = kiln_tensor_numel(y);
            read_f64(y, got, n);
            read_f64(kiln_module_forward(layers[l], tensor_of(KILN_F64, shapes[l], x)), want, n);
            for (int64_t i = 0; i < n; i++) KT_NEAR(got[i], want[i], h ? 3e-2 : 5e-3);
        }
    for (int l = 0; l < 5; l++) kiln_module_free(layers[l]);
    KT_MEM_CHECK();
}

/* ---- names, counts, training mode ----------------------------------------------------------- */

KT_TEST(sequential_params_and_modes) {
    kt_mem_begin();
    kiln_module *layers[] = {kiln_batch_norm2d_new(3, 1e-5, 0.1),
                             kiln_flatten_new(1, -1),
                             kiln_linear_new(12, 4, true, 1),
                             kiln_relu_new(),
                             kiln_dropout_new(0.5, 2),
                             kiln_layer_norm_new(4, 1e-5, true),
                             kiln_linear_new(4, 2, false, 3)};
    kiln_module *model = kiln_sequential_new(7, layers);
    KT_CHECK(model && strcmp(kiln_module_type(model), "Sequential") == 0);
    static const struct {
        const char *name;
        bool buffer;
        int64_t numel;
    } want[] = {{"0.weight", false, 3},
                {"0.bias", false, 3},
                {"0.running_mean", true, 3},
                {"0.running_var", true, 3},
                {"0.num_batches_tracked", true, 1},
                {"2.weight", false, 48},
                {"2.bias", false, 4},
                {"5.weight", false, 4},
                {"5.bias", false, 4},
                {"6.weight", false, 8}};
    enum { N_WANT = sizeof want / sizeof want[0] };
    kiln_param ps[16];
    KT_CHECK(kiln_module_params(model, NULL, 0) == N_WANT);
    int n = kiln_module_params(model, ps, 16);
    KT_CHECK(n == N_WANT);
    for (int i = 0; i < n && i < N_WANT; i++) {
        KT_CHECK_MSG(strcmp(ps[i].name, want[i].name) == 0, "param %d is %s, expected %s", i, ps[i].name, want[i].name);
        KT_CHECK(ps[i].buffer == want[i].buffer);
        KT_CHECK(kiln_tensor_numel(*ps[i].slot) == want[i].numel);
        KT_CHECK(kiln_requires_grad(*ps[i].slot) == !want[i].buffer);
    }
    KT_CHECK(kiln_module_num_parameters(model) == 3 + 3 + 48 + 4 + 4 + 4 + 8);
    /* a short cap still counts them all */
    KT_CHECK(kiln_module_params(model, ps, 2) == N_WANT && strcmp(ps[1].name, "0.bias") == 0);

    kiln_tensor y = kiln_module_forward(model, kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(5, 3, 2, 2), 4));
    KT_CHECK(has_shape(y, KILN_SHAPE(5, 2)));
    kiln_release(y);
    kiln_module_train(model, false);
    for (int i = 0; i < 7; i++) KT_CHECK(!kiln_module_is_training(layers[i]));
    kiln_module_train(model, true);
    KT_CHECK(kiln_module_is_training(layers[4]));
    kiln_module_free(model);
    KT_MEM_CHECK();
}

/* ---- gradients ------------------------------------------------------------------------------ */

KT_TEST(linear_gradients) {
    kt_mem_begin();
    kiln_module *m = kiln_linear_new(5, 3, true, 1);
    gc_module g = {m, 2, {"weight", "bias"}};
    GC_CHECK("linear", gc_run_module, &g, 3, ((kiln_shape[]){KILN_SHAPE(4, 5), KILN_SHAPE(3, 5), KILN_SHAPE(3)}), 1e-6);
    GC_CHECK("linear 3-d", gc_run_module, &g, 3, ((kiln_shape[]){KILN_SHAPE(2, 2, 5), KILN_SHAPE(3, 5), KILN_SHAPE(3)}),
             1e-6);
    kiln_module_free(m);
    m = kiln_linear_new(5, 3, false, 1);
    g = (gc_module){m, 1, {"weight"}};
    GC_CHECK("linear no bias", gc_run_module, &g, 2, ((kiln_shape[]){KILN_SHAPE(4, 5), KILN_SHAPE(3, 5)}), 1e-6);
    kiln_module_free(m);
    KT_MEM_CHECK();
}

KT_TEST(norm_gradients) {
    kt_mem_begin();
    kiln_module *bn = kiln_batch_norm2d_new(3, 1e-5, 0.1);
    gc_module g = {bn, 2, {"weight", "bias"}};
    kiln_shape bs[3] = {KILN_SHAPE(4, 3, 2, 2), KILN_SHAPE(3), KILN_SHAPE(3)};
    GC_CHECK("batch_norm train", gc_run_module, &g, 3, bs, 1e-5);
    kiln_module_train(bn, false);
    GC_CHECK("batch_norm eval", gc_run_module, &g, 3, bs, 1e-6);
    kiln_module_free(bn);

    kiln_module *ln = kiln_layer_norm_new(5, 1e-5, true);
    g = (gc_module){ln, 2, {"weight", "bias"}};
    GC_CHECK("layer_norm", gc_run_module, &g, 3, ((kiln_shape[]){KILN_SHAPE(2, 3, 5), KILN_SHAPE(5), KILN_SHAPE(5)}),
             1e-5);
    kiln_module_free(ln);
    ln = kiln_layer_norm_new(4, 1e-5, false);
    g = (gc_module){ln, 0, {NULL}};
    GC_CHECK("layer_norm plain", gc_run_module, &g, 1, ((kiln_shape[]){KILN_SHAPE(3, 4)}), 1e-5);
    kiln_module_free(ln);
    KT_MEM_CHECK();
}

static kiln_tensor run_dropout(kiln_tensor *in, void *ctx) { return kiln_dropout(in[0], 0.4, 77); }

typedef struct {
    kiln_module *m;
    const double *idx;
} gc_embedding;

/* in[0] is the table; the indices (with repeats, so gradients accumulate) stay fixed */
static kiln_tensor run_embedding(kiln_tensor *in, void *ctx) {
    gc_embedding *e = ctx;
    set_param(e->m, "weight", in[0]);
    return kiln_module_forward(e->m, tensor_of(KILN_I64, KILN_SHAPE(2, 3), e->idx));
}

KT_TEST(other_layer_gradients) {
    kt_mem_begin();
    kiln_shape s[1] = {KILN_SHAPE(3, 4)};
    for (int a = 0; a < N_ACTIVATIONS; a++) {
        kiln_module *m = activations[a].make();
        gc_module g = {m, 0, {NULL}};
        GC_CHECK(activations[a].type, gc_run_module, &g, 1, s, 1e-6);
        kiln_module_free(m);
    }
    kiln_module *f = kiln_flatten_new(0, 1);
    gc_module g = {f, 0, {NULL}};
    GC_CHECK("flatten", gc_run_module, &g, 1, ((kiln_shape[]){KILN_SHAPE(2, 3, 2)}), 1e-6);
    kiln_module_free(f);
    GC_CHECK("dropout", run_dropout, NULL, 1, ((kiln_shape[]){KILN_SHAPE(5, 6)}), 1e-6);

    double idx[6] = {1, 4, 1, 0, 4, 4};
    gc_embedding e = {kiln_embedding_new(5, 3, 1), idx};
    GC_CHECK("embedding", run_embedding, &e, 1, ((kiln_shape[]){KILN_SHAPE(5, 3)}), 1e-6);
    kiln_module_free(e.m);

    /* a whole model: Linear -> Tanh -> Linear, w.r.t. the input and every parameter (all f64:
     * a product takes one dtype) */
    kiln_module *layers[] = {kiln_linear_new(4, 5, true, 1), kiln_tanh_new(), kiln_linear_new(5, 2, true, 2)};
    kiln_module *mlp = kiln_sequential_new(3, layers);
    g = (gc_module){mlp, 4, {"0.weight", "0.bias", "2.weight", "2.bias"}};
    GC_CHECK("mlp", gc_run_module, &g, 5,
             ((kiln_shape[]){KILN_SHAPE(3, 4), KILN_SHAPE(5, 4), KILN_SHAPE(5), KILN_SHAPE(2, 5), KILN_SHAPE(2)}), 1e-6);
    kiln_module_free(mlp);
    KT_MEM_CHECK();
}

/* Backward through a model's parameters (f32), then everything is freed. */
KT_TEST(backward_through_model_frees_everything) {
    kt_mem_begin();
    kiln_module *layers[] = {kiln_linear_new(6, 8, true, 1), kiln_relu_new(), kiln_dropout_new(0.2, 3),
                             kiln_layer_norm_new(8, 1e-5, true), kiln_linear_new(8, 3, true, 2)};
    kiln_module *model = kiln_sequential_new(5, layers);
    kiln_tensor loss = kiln_sum(kiln_module_forward(model, kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(4, 6), 9)));
    kiln_grads *grads = NULL;
    KT_CHECK(kiln_backward(loss, &grads) == KILN_OK);
    kiln_param ps[8];
    int n = kiln_module_params(model, ps, 8);
    KT_CHECK(n == 6);
    for (int i = 0; i < n && i < 8; i++) {
        kiln_tensor gi = kiln_grad(grads, *ps[i].slot);
        KT_CHECK_MSG(has_shape(gi, kiln_tensor_shape(*ps[i].slot)), "gradient of %s", ps[i].name);
        KT_CHECK(kiln_tensor_dtype(gi) == KILN_F32);
        kiln_release(gi);
    }
    kiln_grads_free(grads);
    kiln_module_free(model);
    KT_MEM_CHECK();
}

/* ---- bad input ------------------------------------------------------------------------------ */

KT_TEST(bad_forward_inputs) {
    kt_mem_begin();
    kiln_tensor x = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 5));
    KT_READ_ERROR(kiln_module_forward(NULL, kiln_ref(x)), KILN_ERR_NULL, "kiln_module_forward");

    kiln_module *lin = kiln_linear_new(4, 3, true, 1);
    KT_READ_ERROR(kiln_module_forward(lin, kiln_ref(x)), KILN_ERR_SHAPE, "Linear");
    KT_READ_ERROR(kiln_module_forward(lin, kiln_ones(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE)), KILN_ERR_SHAPE, "Linear");
    KT_READ_ERROR(kiln_module_forward(lin, kiln_ones(KILN_CPU, KILN_I32, KILN_SHAPE(2, 4))), KILN_ERR_DTYPE, "Linear");
    kiln_tensor gone = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 4));
    kiln_release(gone);
    KT_READ_ERROR(kiln_module_forward(lin, gone), KILN_ERR_STALE_HANDLE, "Linear");
    /* a poisoned input keeps its own error */
    KT_READ_ERROR(kiln_module_forward(lin, kiln_reshape(kiln_ref(x), KILN_SHAPE(7))), KILN_ERR_SHAPE, "kiln_reshape");
    KT_READ_ERROR(kiln_module_forward(lin, KILN_NONE), KILN_ERR_NULL, "Linear");

    kiln_module *bn = kiln_batch_norm2d_new(3, 1e-5, 0.1);
    KT_READ_ERROR(kiln_module_forward(bn, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3, 4))), KILN_ERR_SHAPE,
                 "BatchNorm2d");
    KT_READ_ERROR(kiln_module_forward(bn, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 4, 2, 2))), KILN_ERR_SHAPE,
                 "BatchNorm2d");
    KT_READ_ERROR(kiln_module_forward(bn, kiln_ones(KILN_CPU, KILN_I64, KILN_SHAPE(2, 3, 2, 2))), KILN_ERR_DTYPE,
                 "BatchNorm2d");
    KT_READ_ERROR(kiln_module_forward(bn, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1, 3, 1, 1))), KILN_ERR_SHAPE,
                 "more than 1 value per channel");
    /* a failed forward leaves the running statistics untouched */
    double rm[3];
    read_param(bn, "running_mean", rm, 3);
    KT_CHECK(rm[0] == 0 && rm[1] == 0 && rm[2] == 0);

    kiln_module *ln = kiln_layer_norm_new(5, 1e-5, true);
    KT_READ_ERROR(kiln_module_forward(ln, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(5, 4))), KILN_ERR_SHAPE, "LayerNorm");
    KT_READ_ERROR(kiln_module_forward(ln, kiln_ones(KILN_CPU, KILN_I32, KILN_SHAPE(4, 5))), KILN_ERR_DTYPE, "LayerNorm");

    kiln_module *emb = kiln_embedding_new(4, 2, 1);
    KT_READ_ERROR(kiln_module_forward(emb, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3))), KILN_ERR_DTYPE, "Embedding");
    kiln_module *fl = kiln_flatten_new(2, -1);
    KT_READ_ERROR(kiln_module_forward(fl, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(3))), KILN_ERR_INVALID_ARGUMENT,
                 "kiln_flatten");
    kiln_module *drop = kiln_dropout_new(0.5, 1);
    KT_READ_ERROR(kiln_module_forward(drop, kiln_ones(KILN_CPU, KILN_I32, KILN_SHAPE(3))), KILN_ERR_DTYPE,
                 "kiln_dropout");
    KT_READ_ERROR(kiln_dropout(kiln_ref(x), 1.0, 1), KILN_ERR_INVALID_ARGUMENT, "kiln_dropout");
    KT_READ_ERROR(kiln_dropout(kiln_ref(x), -0.1, 1), KILN_ERR_INVALID_ARGUMENT, "kiln_dropout");
    KT_READ_ERROR(kiln_dropout(kiln_ref(x), NAN, 1), KILN_ERR_INVALID_ARGUMENT, "kiln_dropout");
    KT_READ_ERROR(kiln_dropout(gone, 0.5, 1), KILN_ERR_STALE_HANDLE, "kiln_dropout");

    /* an error inside a model surfaces at the read, naming the layer that failed */
    kiln_module *layers[] = {kiln_flatten_new(1, -1), kiln_linear_new(6, 2, true, 1), kiln_relu_new()};
    kiln_module *model = kiln_sequential_new(3, layers);
    KT_READ_ERROR(kiln_module_forward(model, kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(2, 7))), KILN_ERR_SHAPE, "Linear");

    kiln_module *mods[] = {lin, bn, ln, emb, fl, drop, model};
    for (size_t i = 0; i < sizeof mods / sizeof mods[0]; i++) kiln_module_free(mods[i]);
    kiln_release(x);
    KT_MEM_CHECK();
}

KT_TEST(bad_constructor_arguments) {
    kt_mem_begin();
    EXPECT_BAD_NEW(kiln_linear_new(-1, 3, true, 1), "kiln_linear_new");
    EXPECT_BAD_NEW(kiln_linear_new(3, -2, false, 1), "kiln_linear_new");
    EXPECT_BAD_NEW(kiln_batch_norm2d_new(0, 1e-5, 0.1), "kiln_batch_norm2d_new");
    EXPECT_BAD_NEW(kiln_batch_norm2d_new(3, -1e-5, 0.1), "kiln_batch_norm2d_new");
    EXPECT_BAD_NEW(kiln_batch_norm2d_new(3, NAN, 0.1), "kiln_batch_norm2d_new");
    EXPECT_BAD_NEW(kiln_batch_norm2d_new(3, 1e-5, 1.5), "kiln_batch_norm2d_new");
    EXPECT_BAD_NEW(kiln_batch_norm2d_new(3, 1e-5, -0.1), "kiln_batch_norm2d_new");
    EXPECT_BAD_NEW(kiln_layer_norm_new(0, 1e-5, true), "kiln_layer_norm_new");
    EXPECT_BAD_NEW(kiln_layer_norm_new(4, INFINITY, true), "kiln_layer_norm_new");
    EXPECT_BAD_NEW(kiln_dropout_new(1.0, 1), "kiln_dropout_new");
    EXPECT_BAD_NEW(kiln_dropout_new(-0.5, 1), "kiln_dropout_new");
    EXPECT_BAD_NEW(kiln_dropout_new(NAN, 1), "kiln_dropout_new");
    EXPECT_BAD_NEW(kiln_embedding_new(0, 4, 1), "kiln_embedding_new");
    EXPECT_BAD_NEW(kiln_embedding_new(4, -1, 1), "kiln_embedding_new");
    EXPECT_BAD_NEW(kiln_flatten_new(9, -1), "kiln_flatten_new");
    EXPECT_BAD_NEW(kiln_flatten_new(0, -9), "kiln_flatten_new");
    /* zero-sized layers are legal, as in torch */
    kiln_module *empty = kiln_linear_new(0, 0, true, 1);
    KT_CHECK(empty && kiln_module_num_parameters(empty) == 0);
    kiln_module_free(empty);
    /* Sequential takes its children even when it fails */
    kiln_module *kids[] = {kiln_relu_new(), NULL, kiln_linear_new(2, 2, true, 1)};
    KT_CHECK(kiln_sequential_new(3, kids) == NULL && kiln_last_status() == KILN_ERR_NULL);
    /* NULL modules */
    KT_CHECK(kiln_module_params(NULL, NULL, 0) == 0 && kiln_last_status() == KILN_ERR_NULL);
    KT_CHECK(kiln_module_num_parameters(NULL) == 0);
    KT_CHECK(strcmp(kiln_module_type(NULL), "NULL") == 0 && !kiln_module_is_training(NULL));
    kiln_module_train(NULL, false);
    kiln_module_free(NULL);
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(linear_forward);
    KT_RUN(activations_and_flatten);
    KT_RUN(batch_norm_train_and_eval);
    KT_RUN(layer_norm_forward);
    KT_RUN(dropout_statistics);
    KT_RUN(embedding_forward);
    KT_RUN(half_precision_inputs);
    KT_RUN(sequential_params_and_modes);
    KT_RUN(linear_gradients);
    KT_RUN(norm_gradients);
    KT_RUN(other_layer_gradients);
    KT_RUN(backward_through_model_frees_everything);
    KT_RUN(bad_forward_inputs);
    KT_RUN(bad_constructor_arguments);
    return kt_finish();
}
