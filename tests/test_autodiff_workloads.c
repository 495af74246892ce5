/* The two reference workloads of DESIGN.md §4 at small sizes, in f32, with gradients checked
 * against double-precision references computed here by plain loops:
 *   softmax as exp(log_softmax(x)), log_softmax(x) = x - log(sum(exp(x), -1, keepdim)), on
 *   [4,8,64] (and the same through kiln_log_softmax and kiln_softmax);
 *   a 12-layer MLP, 12 x (Linear(64,64) + ReLU) on an [8,64] input: every weight and bias
 *   gradient, and the input's. */
#include <kiln.h>

#include "kiln_test.h"

static kiln_memory_stats stats(void) {
    kiln_sync();
    return kiln_memory_stats_get(KILN_CPU);
}

static double *read_f64(kiln_tensor t, size_t n) {
    double *v = calloc(n, sizeof *v);
    if (kiln_into_data(kiln_cast(t, KILN_F64), v, n * sizeof *v) != KILN_OK)
        fprintf(stderr, "  reading failed: %s\n", kiln_last_error());
    return v;
}

/* |got - want| <= rtol (|want| + the largest |want|): relative to each entry, with the
 * tensor's own scale as the floor for entries near zero. Returns the mismatches. */
static int compare(const char *what, const double *got, const double *want, size_t n, double rtol) {
    double scale = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= rtol * (fabs(want[i]) + scale))) {
            if (bad++ < 3) fprintf(stderr, "  %s[%zu]: got %.9g, want %.9g\n", what, i, got[i], want[i]);
        }
    return bad;
}

/* ---- softmax via log_softmax ---------------------------------------------------------------- */

enum { ROWS = 4 * 8, COLS = 64 };

static kiln_tensor softmax_by_formula(kiln_tensor x) {
    kiln_tensor lse = kiln_log(kiln_sum_dims(kiln_exp(kiln_ref(x)), KILN_DIMS(-1), true));
    return kiln_exp(kiln_sub(x, lse));
}

static kiln_tensor softmax_by_log_softmax(kiln_tensor x) { return kiln_exp(kiln_log_softmax(x, -1)); }
static kiln_tensor softmax_direct(kiln_tensor x) { return kiln_softmax(x, -1); }

KT_TEST(softmax_via_log_softmax) {
    kiln_memory_stats base = stats();
    kiln_tensor (*forms[])(kiln_tensor) = {softmax_by_formula, softmax_by_log_softmax, softmax_direct};
    const char *names[] = {"exp(x - log(sum(exp(x))))", "exp(log_softmax(x))", "softmax(x)"};
    for (int f = 0; f < 3; f++) {
        kiln_tensor x = kiln_mul_scalar(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(4, 8, 64), 11), 2.0);
        kiln_tensor w = kiln_uniform(KILN_CPU, KILN_F32, KILN_SHAPE(4, 8, 64), -1, 1, 12);
        double *xd = read_f64(kiln_ref(x), ROWS * COLS), *wd = read_f64(kiln_ref(w), ROWS * COLS);
        kiln_require_grad(x);
        kiln_tensor y = forms[f](kiln_ref(x));
        double *yd = read_f64(kiln_ref(y), ROWS * COLS);
        kiln_grads *g = NULL;
        KT_CHECK(kiln_backward_seed(y, w, &g) == KILN_OK);
        double *dx = read_f64(kiln_grad(g, x), ROWS * COLS);
        /* reference: s = softmax(x); d(sum(w s))/dx = s (w - sum(w s)) */
        double *s = malloc(sizeof(double) * ROWS * COLS), *want = malloc(sizeof(double) * ROWS * COLS);
        for (int r = 0; r < ROWS; r++) {
            const double *xr = xd + r * COLS, *wr = wd + r * COLS;
            double *sr = s + r * COLS, mx = xr[0], total = 0, ws = 0;
            for (int j = 1; j < COLS; j++) mx = fmax(mx, xr[j]);
            for (int j = 0; j < COLS; j++) total += sr[j] = exp(xr[j] - mx);
            for (int j = 0; j < COLS; j++) ws += wr[j] * (sr[j] /= total);
            for (int j = 0; j < COLS; j++) want[r * COLS + j] = sr[j] * (wr[j] - ws);
        }
        KT_CHECK_MSG(compare("y", yd, s, ROWS * COLS, 1e-5) == 0, "%s forward", names[f]);
        KT_CHECK_MSG(compare("dx", dx, want, ROWS * COLS, 1e-4) == 0, "%s gradient", names[f]);
        free(xd), free(wd), free(yd), free(dx), free(s), free(want);
        kiln_grads_free(g);
        kiln_release(x);
    }
    KT_CHECK(stats().live_tensors == base.live_tensors);
    KT_CHECK(stats().bytes_in_use == base.bytes_in_use);
}

/* ---- 12-layer MLP ------------------------------------------------------------------------ */

enum { LAYERS = 12, BATCH = 8, WIDTH = 64 };

typedef struct {
    double w[LAYERS][WIDTH][WIDTH], b[LAYERS][WIDTH]; /* w[l][out][in] */
    double z[LAYERS][BATCH][WIDTH];                   /* pre-activations */
    double a[LAYERS + 1][BATCH][WIDTH];               /* a[0] the input, a[l+1] = relu(z[l]) */
    double dw[LAYERS][WIDTH][WIDTH], db[LAYERS][WIDTH], dx[BATCH][WIDTH];
} mlp_ref;

/* Forward, then backprop of sum(a[LAYERS] * seed), by hand. */
static void mlp_reference(mlp_ref *m, const double *seed) {
    for (int l = 0; l < LAYERS; l++)
        for (int i = 0; i < BATCH; i++)
            for (int o = 0; o < WIDTH; o++) {
                double acc = m->b[l][o];
                for (int k = 0; k < WIDTH; k++) acc += m->a[l][i][k] * m->w[l][o][k];
                m->z[l][i][o] = acc;
                m->a[l + 1][i][o] = acc > 0 ? acc : 0;
            }
    static double da[BATCH][WIDTH], dz[BATCH][WIDTH];
    memcpy(da, seed, sizeof da);
    for (int l = LAYERS - 1; l >= 0; l--) {
        for (int i = 0; i < BATCH; i++)
            for (int o = 0; o < WIDTH; o++) dz[i][o] = m->z[l][i][o] > 0 ? da[i][o] : 0;
        for (int o = 0; o < WIDTH; o++) {
            m->db[l][o] = 0;
            for (int i = 0; i < BATCH; i++) m->db[l][o] += dz[i][o];
            for (int k = 0; k < WIDTH; k++) {
                double acc = 0;
                for (int i = 0; i < BATCH; i++) acc += dz[i][o] * m->a[l][i][k];
                m->dw[l][o][k] = acc;
            }
        }
        for (int i = 0; i < BATCH; i++)
            for (int k = 0; k < WIDTH; k++) {
                double acc = 0;
                for (int o = 0; o < WIDTH; o++) acc += dz[i][o] * m->w[l][o][k];
                da[i][k] = acc;
            }
    }
    memcpy(m->dx, da, sizeof da);
}

static void read_into(kiln_tensor t, double *dst, size_t n) {
    double *v = read_f64(t, n);
    memcpy(dst, v, n * sizeof *v);
    free(v);
}

KT_TEST(mlp_12_layers) {
    kiln_memory_stats base = stats();
    mlp_ref *m = calloc(1, sizeof *m);
    const double bound = sqrt(6.0 / WIDTH); /* He-uniform: activations keep their scale */
    kiln_tensor w[LAYERS], b[LAYERS];
    for (int l = 0; l < LAYERS; l++) {
        w[l] = kiln_uniform(KILN_CPU, KILN_F32, KILN_SHAPE(WIDTH, WIDTH), -bound, bound, 100 + (uint64_t)l);
        b[l] = kiln_uniform(KILN_CPU, KILN_F32, KILN_SHAPE(WIDTH), -0.1, 0.1, 200 + (uint64_t)l);
        read_into(kiln_ref(w[l]), &m->w[l][0][0], WIDTH * WIDTH);
        read_into(kiln_ref(b[l]), m->b[l], WIDTH);
        kiln_require_grad(w[l]);
        kiln_require_grad(b[l]);
    }
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(BATCH, WIDTH), 7);
    kiln_tensor seed = kiln_uniform(KILN_CPU, KILN_F32, KILN_SHAPE(BATCH, WIDTH), -1, 1, 8);
    read_into(kiln_ref(x), &m->a[0][0][0], BATCH * WIDTH);
    double *seed_d = read_f64(kiln_ref(seed), BATCH * WIDTH);
    kiln_require_grad(x);

    kiln_tensor h = kiln_ref(x);
    for (int l = 0; l < LAYERS; l++) h = kiln_relu(kiln_linear(h, kiln_ref(w[l]), kiln_ref(b[l])));
    double *out = read_f64(kiln_ref(h), BATCH * WIDTH);
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward_seed(h, seed, &g) == KILN_OK);
    KT_CHECK(kiln_grads_count(g) == 2 * LAYERS + 1);

    mlp_reference(m, seed_d);
    KT_CHECK(compare("out", out, &m->a[LAYERS][0][0], BATCH * WIDTH, 1e-5) == 0);
    for (int l = 0; l < LAYERS; l++) {
        double *dw = read_f64(kiln_grad(g, w[l]), WIDTH * WIDTH), *db = read_f64(kiln_grad(g, b[l]), WIDTH);
        KT_CHECK_MSG(compare("dw", dw, &m->dw[l][0][0], WIDTH * WIDTH, 1e-4) == 0, "layer %d weight", l);
        KT_CHECK_MSG(compare("db", db, m->db[l], WIDTH, 1e-4) == 0, "layer %d bias", l);
        free(dw), free(db);
        kiln_release(w[l]);
        kiln_release(b[l]);
    }
    double *dx = read_f64(kiln_grad(g, x), BATCH * WIDTH);
    KT_CHECK(compare("dx", dx, &m->dx[0][0], BATCH * WIDTH, 1e-4) == 0);
    free(dx), free(out), free(seed_d), free(m);
    kiln_grads_free(g);
    kiln_release(x);
    KT_CHECK(stats().live_tensors == base.live_tensors);
    KT_CHECK(stats().bytes_in_use == base.bytes_in_use);
}

int main(void) {
    KT_RUN(softmax_via_log_softmax);
    KT_RUN(mlp_12_layers);
    return kt_finish();
}
