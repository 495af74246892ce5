/* Initialisation: kiln_init's Kaiming and Xavier distributions (bounds, standard deviations,
 * shape of the distribution), seeds, dtypes, parameters staying parameters; the default
 * initialisation of Linear (PyTorch's) and Embedding; bad input (no leaks). */
#include "nn_util.h"

typedef struct {
    double mean, std, max_abs, beyond; /* beyond: fraction with |v| > 2 * expected std */
} sample_stats;

static sample_stats stats_of(kiln_tensor t, double expected_std) {
    int64_t n = kiln_tensor_numel(t);
    double *v = malloc(sizeof(double) * (size_t)n);
    sample_stats s = {0, 0, 0, 0};
    if (read_f64(t, v, n)) {
        for (int64_t i = 0; i < n; i++) s.mean += v[i] / (double)n;
        for (int64_t i = 0; i < n; i++) {
            s.std += (v[i] - s.mean) * (v[i] - s.mean) / (double)n;
            s.max_abs = fmax(s.max_abs, fabs(v[i]));
            s.beyond += fabs(v[i]) > 2 * expected_std;
        }
        s.std = sqrt(s.std);
        s.beyond /= (double)n;
    }
    free(v);
    return s;
}

/* n samples: the sample std is within 2% (about 5 standard errors for these sizes) and the
 * mean within 5 standard errors. Uniform samples fill [-sqrt(3) std, sqrt(3) std] and have
 * nothing beyond 2 std; normal ones have 4.55% of their mass there. */
static void check_distribution(kiln_tensor t, double std, bool uniform, const char *what) {
    int64_t n = kiln_tensor_numel(t);
    sample_stats s = stats_of(t, std);
    KT_CHECK_MSG(fabs(s.std / std - 1) < 0.02, "%s: std %g, expected %g", what, s.std, std);
    KT_CHECK_MSG(fabs(s.mean) < 5 * std / sqrt((double)n), "%s: mean %g", what, s.mean);
    if (uniform) {
        KT_CHECK_MSG(s.max_abs <= sqrt(3.0) * std * (1 + 1e-6), "%s: |v| up to %g, bound %g", what, s.max_abs,
                     sqrt(3.0) * std);
        KT_CHECK_MSG(s.max_abs > 0.99 * sqrt(3.0) * std, "%s: |v| only up to %g", what, s.max_abs);
        KT_CHECK(s.beyond == 0);
    } else {
        KT_CHECK_MSG(fabs(s.beyond - 0.0455) < 0.005, "%s: %g beyond 2 std", what, s.beyond);
    }
}

KT_TEST(kaiming_and_xavier) {
    kt_mem_begin();
    const struct {
        kiln_init_kind kind;
        kiln_shape shape;
        double std;
        bool uniform;
        const char *name;
    } cases[] = {
        {KILN_INIT_KAIMING_UNIFORM, KILN_SHAPE(256, 128), 0.125, true, "kaiming_uniform"},       /* sqrt(2/128) */
        {KILN_INIT_KAIMING_NORMAL, KILN_SHAPE(64, 32, 3, 3), 1.0 / 12, false, "kaiming_normal"}, /* sqrt(2/288) */
        {KILN_INIT_XAVIER_UNIFORM, KILN_SHAPE(300, 200), 0.063245553203367589, true,
         "xavier_uniform"}, /* sqrt(2/500) */
        {KILN_INIT_XAVIER_NORMAL, KILN_SHAPE(200, 100, 2), 0.057735026918962576, false,
         "xavier_normal"}, /* sqrt(2/600) */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int dt = 0; dt < 2; dt++) {
            kiln_dtype fdt = dt ? KILN_F64 : KILN_F32;
            kiln_tensor t = kiln_full(KILN_CPU, fdt, cases[i].shape, 7.0);
            KT_CHECK(kiln_init(&t, cases[i].kind, 42 + i) == KILN_OK);
            KT_CHECK(has_shape(t, cases[i].shape) && kiln_tensor_dtype(t) == fdt);
            KT_CHECK(!kiln_requires_grad(t));
            check_distribution(t, cases[i].std, cases[i].uniform, cases[i].name);
        }
    /* the seed picks the values */
    kiln_tensor a = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(8, 8)),
                b = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(8, 8)),
                c = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(8, 8));
    kiln_init(&a, KILN_INIT_XAVIER_NORMAL, 5);
    kiln_init(&b, KILN_INIT_XAVIER_NORMAL, 5);
    kiln_init(&c, KILN_INIT_XAVIER_NORMAL, 6);
    double va[64], vb[64], vc[64];
    read_f64(a, va, 64);
    read_f64(b, vb, 64);
    read_f64(c, vc, 64);
    int same = 0, differ = 0;
    for (int i = 0; i < 64; i++) same += va[i] == vb[i], differ += va[i] != vc[i];
    KT_CHECK(same == 64 && differ == 64);
    KT_MEM_CHECK();
}

KT_TEST(init_keeps_a_parameter_trainable) {
    kt_mem_begin();
    kiln_module *m = kiln_linear_new(3, 2, true, 1);
    kiln_tensor *w = param_slot(m, "weight");
    KT_CHECK(kiln_init(w, KILN_INIT_KAIMING_UNIFORM, 9) == KILN_OK);
    KT_CHECK(kiln_requires_grad(*w) && w == param_slot(m, "weight"));
    double wv[6], b[2], x[3] = {1, -2, 0.5}, y[2];
    read_param(m, "weight", wv, 6);
    read_param(m, "bias", b, 2);
    for (int i = 0; i < 6; i++) KT_CHECK(fabs(wv[i]) <= sqrt(2.0)); /* sqrt(3) * sqrt(2 / fan_in 3) */
    /* the module computes with the new values and differentiates them */
    kiln_tensor out = kiln_module_forward(m, tensor_of(KILN_F32, KILN_SHAPE(3), x));
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_sum(kiln_ref(out)), &g) == KILN_OK);
    read_f64(out, y, 2);
    for (int o = 0; o < 2; o++)
        KT_NEAR(y[o], wv[o * 3] * x[0] + wv[o * 3 + 1] * x[1] + wv[o * 3 + 2] * x[2] + b[o], 1e-6);
    double gw[6];
    read_f64(kiln_grad(g, *w), gw, 6);
    for (int i = 0; i < 6; i++) KT_NEAR(gw[i], x[i % 3], 1e-7);
    kiln_grads_free(g);
    kiln_module_free(m);
    KT_MEM_CHECK();
}

KT_TEST(default_layer_init) {
    kt_mem_begin();
    /* Linear: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias, as torch */
    kiln_module *m = kiln_linear_new(400, 300, true, 3);
    check_distribution(kiln_ref(*param_slot(m, "weight")), 0.05 / sqrt(3.0), true, "linear weight");
    double b[300], w[300];
    read_param(m, "bias", b, 300);
    read_f64(kiln_slice(kiln_reshape(kiln_ref(*param_slot(m, "weight")), KILN_SHAPE(-1)), 0, 0, 300, 1), w, 300);
    int differ = 0;
    double max_b = 0;
    for (int i = 0; i < 300; i++) differ += b[i] != w[i], max_b = fmax(max_b, fabs(b[i]));
    KT_CHECK(differ == 300); /* separate streams */
    KT_CHECK(max_b <= 0.05 && max_b > 0.045);
    /* another seed, other values; the same seed, the same */
    kiln_module *m2 = kiln_linear_new(400, 300, true, 4), *m3 = kiln_linear_new(400, 300, true, 3);
    double b2[300], b3[300];
    read_param(m2, "bias", b2, 300);
    read_param(m3, "bias", b3, 300);
    int same3 = 0, same2 = 0;
    for (int i = 0; i < 300; i++) same3 += b3[i] == b[i], same2 += b2[i] == b[i];
    KT_CHECK(same3 == 300 && same2 == 0);
    kiln_module_free(m);
    kiln_module_free(m2);
    kiln_module_free(m3);

    /* Embedding: N(0, 1) */
    kiln_module *e = kiln_embedding_new(500, 64, 8);
    check_distribution(kiln_ref(*param_slot(e, "weight")), 1.0, false, "embedding");
    kiln_module_free(e);
    KT_MEM_CHECK();
}

KT_TEST(bad_init_input) {
    kt_mem_begin();
    KT_CHECK(kiln_init(NULL, KILN_INIT_KAIMING_UNIFORM, 1) == KILN_ERR_NULL);
    KT_CHECK(strstr(kiln_last_error(), "kiln_init") != NULL);
    const struct {
        kiln_tensor t;
        kiln_init_kind kind;
        kiln_status st;
    } cases[] = {
        {kiln_zeros(KILN_CPU, KILN_I32, KILN_SHAPE(3, 3)), KILN_INIT_KAIMING_UNIFORM, KILN_ERR_DTYPE},
        {kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(5)), KILN_INIT_XAVIER_UNIFORM, KILN_ERR_SHAPE},
        {kiln_zeros(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE), KILN_INIT_XAVIER_NORMAL, KILN_ERR_SHAPE},
        {kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3, 3)), (kiln_init_kind)17, KILN_ERR_INVALID_ARGUMENT},
        {kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3, 3)), (kiln_init_kind)-1, KILN_ERR_INVALID_ARGUMENT},
        {kiln_reshape(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3, 3)), KILN_SHAPE(4)), KILN_INIT_KAIMING_NORMAL,
         KILN_ERR_SHAPE}, /* poisoned: its own error */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kiln_tensor t = cases[i].t;
        kiln_status st = kiln_init(&t, cases[i].kind, 1);
        KT_CHECK_MSG(st == cases[i].st, "case %zu: %s", i, kiln_status_str(st));
        const char *want_op = i == 5 ? "kiln_reshape" : "kiln_init";
        KT_CHECK_MSG(strstr(kiln_last_error(), want_op) != NULL, "case %zu: %s", i, kiln_last_error());
        KT_CHECK(t.id == cases[i].t.id && kiln_is_valid(t)); /* untouched */
        kiln_release(t);
    }
    kiln_tensor gone = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3, 3));
    kiln_release(gone);
    KT_CHECK(kiln_init(&gone, KILN_INIT_KAIMING_UNIFORM, 1) == KILN_ERR_STALE_HANDLE);
    KT_CHECK(strstr(kiln_last_error(), "kiln_init") != NULL);
    kiln_tensor none = KILN_NONE;
    KT_CHECK(kiln_init(&none, KILN_INIT_KAIMING_UNIFORM, 1) == KILN_ERR_NULL);
    /* no elements: nothing to do */
    kiln_tensor empty = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(0, 5, 3));
    KT_CHECK(kiln_init(&empty, KILN_INIT_KAIMING_NORMAL, 1) == KILN_OK && has_shape(empty, KILN_SHAPE(0, 5, 3)));
    kiln_release(empty);
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(kaiming_and_xavier);
    KT_RUN(init_keeps_a_parameter_trainable);
    KT_RUN(default_layer_init);
    KT_RUN(bad_init_input);
    return kt_finish();
}
