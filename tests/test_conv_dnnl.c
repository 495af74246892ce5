/* conv2d through oneDNN (conv_dnnl.c) against the built-in im2col+GEMM kernel and a direct
 * double-precision reference: forward (with and without bias) and the input, weight and bias
 * gradients over a grid of stride, padding, dilation, groups, odd sizes, batch 1 and more;
 * each result within a tolerance of ulps scaled by the sum of |terms| of each output. Also: a
 * non-dense input (oneDNN takes only what it can, the rest runs built-in, results the same),
 * KILN_CONV=builtin|dnnl, two host threads running convs at once (the primitive cache and the
 * one-thread rule), and no leaks. Skipped (77) in a build without oneDNN. */
#include <float.h>
#include <math.h>
#include <pthread.h>

#include "backend/cpu/conv_dnnl.h"
#include "conv_grid.h"
#include "ew_util.h"
#include "kiln_test.h"

typedef struct {
    conv_case k;
    int64_t oh, ow, nx, nw, ny;
    double *x, *w, *b, *dy;              /* inputs, f32 values */
    double *y, *dx, *dw, *db;            /* reference results */
    double *ay, *adx, *adw, *adb;        /* sum of |terms| of each result */
    int64_t ty, tdx, tdw, tdb;           /* most terms in one result */
} conv_ref;

static double *zeros(int64_t n) { return calloc((size_t)n + 1, sizeof(double)); }

static double *f32_values(int64_t n) {
    double *v = malloc(sizeof(double) * (size_t)(n + 1));
    ew_values(v, n, KILN_F32, -1, 1);
    return v;
}

static conv_ref ref_make(conv_case k) {
    conv_ref r = {.k = k};
    r.oh = out_dim(k.h, k.kh, k.sh, k.ph, k.dh);
    r.ow = out_dim(k.w, k.kw, k.sw, k.pw, k.dw);
    int64_t cg = k.c / k.groups, og = k.o / k.groups, ohw = r.oh * r.ow;
    r.nx = k.n * k.c * k.h * k.w, r.nw = k.o * cg * k.kh * k.kw, r.ny = k.n * k.o * ohw;
    r.x = f32_values(r.nx), r.w = f32_values(r.nw), r.b = f32_values(k.o), r.dy = f32_values(r.ny);
    r.y = zeros(r.ny), r.dx = zeros(r.nx), r.dw = zeros(r.nw), r.db = zeros(k.o);
    r.ay = zeros(r.ny), r.adx = zeros(r.nx), r.adw = zeros(r.nw), r.adb = zeros(k.o);
    r.ty = cg * k.kh * k.kw + 1, r.tdx = og * k.kh * k.kw, r.tdw = k.n * ohw, r.tdb = k.n * ohw;
    for (int64_t n = 0; n < k.n; n++)
        for (int64_t o = 0; o < k.o; o++)
            for (int64_t q = 0; q < ohw; q++) {
                int64_t yi = (n * k.o + o) * ohw + q;
                if (k.bias) r.y[yi] = r.b[o], r.ay[yi] = fabs(r.b[o]);
                r.db[o] += r.dy[yi], r.adb[o] += fabs(r.dy[yi]);
            }
    for (int64_t n = 0; n < k.n; n++)
        for (int64_t o = 0; o < k.o; o++)
            for (int64_t oy = 0; oy < r.oh; oy++)
                for (int64_t ox = 0; ox < r.ow; ox++)
                    for (int64_t ci = 0; ci < cg; ci++)
                        for (int64_t i = 0; i < k.kh; i++)
                            for (int64_t j = 0; j < k.kw; j++) {
                                int64_t iy = oy * k.sh - k.ph + i * k.dh, ix = ox * k.sw - k.pw + j * k.dw;
                                if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
                                int64_t c = (o / og) * cg + ci;
                                int64_t yi = ((n * k.o + o) * r.oh + oy) * r.ow + ox;
                                int64_t xi = ((n * k.c + c) * k.h + iy) * k.w + ix;
                                int64_t wi = ((o * cg + ci) * k.kh + i) * k.kw + j;
                                r.y[yi] += r.x[xi] * r.w[wi], r.ay[yi] += fabs(r.x[xi] * r.w[wi]);
                                r.dx[xi] += r.dy[yi] * r.w[wi], r.adx[xi] += fabs(r.dy[yi] * r.w[wi]);
                                r.dw[wi] += r.dy[yi] * r.x[xi], r.adw[wi] += fabs(r.dy[yi] * r.x[xi]);
                            }
    return r;
}

static void ref_free(conv_ref *r) {
    double *all[] = {r->x, r->w, r->b, r->dy, r->y, r->dx, r->dw, r->db, r->ay, r->adx, r->adw, r->adb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

/* got (consumed) against ref: |got - ref| <= 4 ulps * sqrt(terms) of the sum of |terms|
 * (float rounding errors of a K-term sum grow about as sqrt(K) ulps of that sum). Returns the
 * values read (NULL on failure), for comparing the two paths with each other. */
static double *expect_near(kiln_tensor got, const double *ref, const double *abs_sum, int64_t n, int64_t terms,
                           const char *what) {
    double *g = ew_read(got, KILN_F32, n);
    if (!g) {
        KT_CHECK_MSG(false, "%s: no value", what);
        return NULL;
    }
    double scale = 4.0 * sqrt((double)terms + 1) * FLT_EPSILON;
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (!(fabs(g[i] - ref[i]) <= scale * abs_sum[i] + FLT_MIN)) bad++, first = first < 0 ? i : first;
    KT_CHECK_MSG(bad == 0, "%s: %lld of %lld off, first [%lld] %.9g want %.9g (|terms| %.3g)", what, (long long)bad,
                 (long long)n, (long long)first, first >= 0 ? g[first] : 0.0, first >= 0 ? ref[first] : 0.0,
                 first >= 0 ? abs_sum[first] : 0.0);
    return g;
}

/* x as a view that is not dense (a [N, C, W, H] tensor transposed), holding the same values. */
static kiln_tensor strided_x(const conv_ref *r) {
    const conv_case *k = &r->k;
    double *t = malloc(sizeof(double) * (size_t)(r->nx + 1));
    for (int64_t p = 0; p < k->n * k->c; p++)
        for (int64_t i = 0; i < k->h; i++)
            for (int64_t j = 0; j < k->w; j++) t[(p * k->w + j) * k->h + i] = r->x[(p * k->h + i) * k->w + j];
    kiln_tensor v = kiln_transpose(ew_tensor(KILN_F32, KILN_SHAPE(k->n, k->c, k->w, k->h), t), 2, 3);
    free(t);
    return v;
}

typedef struct {
    double *y, *dx, *dw, *db;
    long dnnl_calls; /* oneDNN calls this run made */
} conv_run;

/* Forward, then the three gradients of sum(y * dy), on the path `mode` (1 oneDNN, 0 built-in). */
static conv_run run_conv(const conv_ref *r, int mode, bool strided, const char *tag) {
    const conv_case *k = &r->k;
    kiln__conv_dnnl_force(mode);
    long before = kiln__conv_dnnl_calls();
    kiln_tensor tx = strided ? strided_x(r) : ew_tensor(KILN_F32, KILN_SHAPE(k->n, k->c, k->h, k->w), r->x);
    kiln_tensor tw = ew_tensor(KILN_F32, KILN_SHAPE(k->o, k->c / k->groups, k->kh, k->kw), r->w);
    kiln_tensor tb = k->bias ? ew_tensor(KILN_F32, KILN_SHAPE(k->o), r->b) : KILN_NONE;
    kiln_require_grad(tx), kiln_require_grad(tw);
    if (k->bias) kiln_require_grad(tb);
    kiln_tensor y = kiln_conv2d(kiln_ref(tx), kiln_ref(tw), k->bias ? kiln_ref(tb) : KILN_NONE, k->sh, k->sw, k->ph,
                                k->pw, k->dh, k->dw, k->groups);
    char what[200];
    int len = snprintf(what, sizeof what, "%s%s n%lld c%lld %lldx%lld o%lld k%lldx%lld s%d,%d p%d,%d d%d,%d g%d%s",
                       mode ? "dnnl" : "builtin", strided ? " strided" : "", (long long)k->n, (long long)k->c,
                       (long long)k->h, (long long)k->w, (long long)k->o, (long long)k->kh, (long long)k->kw, k->sh,
                       k->sw, k->ph, k->pw, k->dh, k->dw, k->groups, k->bias ? " bias" : "");
    conv_run out = {0};
    snprintf(what + len, sizeof what - (size_t)len, " %s y", tag);
    out.y = expect_near(kiln_ref(y), r->y, r->ay, r->ny, r->ty, what);
    kiln_grads *g = NULL;
    kiln_status st = kiln_backward_seed(y, ew_tensor(KILN_F32, KILN_SHAPE(k->n, k->o, r->oh, r->ow), r->dy), &g);
    KT_CHECK_MSG(st == KILN_OK, "%s: %s", what, kiln_last_error());
    snprintf(what + len, sizeof what - (size_t)len, " %s dx", tag);
    out.dx = expect_near(kiln_grad(g, tx), r->dx, r->adx, r->nx, r->tdx, what);
    snprintf(what + len, sizeof what - (size_t)len, " %s dw", tag);
    out.dw = expect_near(kiln_grad(g, tw), r->dw, r->adw, r->nw, r->tdw, what);
    if (k->bias) {
        snprintf(what + len, sizeof what - (size_t)len, " %s db", tag);
        out.db = expect_near(kiln_grad(g, tb), r->db, r->adb, k->o, r->tdb, what);
    }
    kiln_grads_free(g);
    kiln_release(tx), kiln_release(tw);
    if (k->bias) kiln_release(tb);
    KT_CHECK(kiln_sync() == KILN_OK);
    out.dnnl_calls = kiln__conv_dnnl_calls() - before;
    kiln__conv_dnnl_force(-1);
    return out;
}

static void run_free(conv_run *r) { free(r->y), free(r->dx), free(r->dw), free(r->db); }

/* The two paths agree within the sum of their tolerances (each was checked against the
 * reference); here the largest difference is printed for the record. */
static double max_diff(const double *a, const double *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; a && b && i < n; i++) m = fmax(m, fabs(a[i] - b[i]));
    return m;
}

/* conv_grid and the Fashion-MNIST CNN's two convs with fewer channels. */
static const conv_case cnn_cases[] = {
    /* n  c  h   w   o  kh kw sh sw ph pw dh dw g  bias */
    {5, 1, 28, 28, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},   /* conv1 */
    {3, 16, 14, 14, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, true}, /* conv2 */
};
#define N_CASES ((int)NGRID + 2)
static const conv_case *case_at(int i) { return i < (int)NGRID ? &conv_grid[i] : &cnn_cases[i - (int)NGRID]; }

KT_TEST(both_paths_against_reference) {
    kt_mem_begin();
    for (int i = 0; i < N_CASES; i++) {
        conv_ref r = ref_make(*case_at(i));
        conv_run d = run_conv(&r, 1, false, "");
        conv_run b = run_conv(&r, 0, false, "");
        KT_CHECK_MSG(d.dnnl_calls == 3, "case %d: oneDNN ran %ld of the 3 convs", i, d.dnnl_calls);
        KT_CHECK_MSG(b.dnnl_calls == 0, "case %d: oneDNN ran %ld convs on the built-in path", i, b.dnnl_calls);
        if (i == N_CASES - 1)
            printf("    dnnl - builtin, largest: y %.3g dx %.3g dw %.3g\n", max_diff(d.y, b.y, r.ny),
                   max_diff(d.dx, b.dx, r.nx), max_diff(d.dw, b.dw, r.nw));
        run_free(&d), run_free(&b);
        ref_free(&r);
    }
    KT_MEM_CHECK();
}

/* A transposed input: the forward and the weight gradient read x and fall back to the
 * built-in kernel; the input gradient writes a dense dx and runs through oneDNN. */
KT_TEST(strided_input) {
    kt_mem_begin();
    conv_ref r = ref_make(conv_grid[3]);
    conv_run d = run_conv(&r, 1, true, "");
    KT_CHECK_MSG(d.dnnl_calls == 1, "oneDNN ran %ld convs, want only the input gradient", d.dnnl_calls);
    run_free(&d);
    ref_free(&r);
    KT_MEM_CHECK();
}

/* KILN_CONV=builtin and =dnnl force the path for every conv; unset, oneDNN takes only the
 * convs with 8 or more input channels per group (3 channels: built-in; 16: oneDNN). */
KT_TEST(env_override) {
    conv_ref few = ref_make(conv_grid[1]), many = ref_make(cnn_cases[1]);
    const char *modes[] = {"builtin", "dnnl", NULL}, *names[] = {"builtin", "dnnl", "auto"};
    for (int i = 0; i < 3; i++) {
        if (modes[i])
            setenv("KILN_CONV", modes[i], 1);
        else
            unsetenv("KILN_CONV");
        kiln__conv_dnnl_force(-1); /* read KILN_CONV again */
        KT_CHECK(strcmp(kiln__conv_dnnl_mode(), names[i]) == 0);
        conv_run a = run_conv(&few, -1, false, names[i]), b = run_conv(&many, -1, false, names[i]);
        KT_CHECK_MSG(a.dnnl_calls == (i == 1 ? 3 : 0), "KILN_CONV=%s, 3 channels: oneDNN ran %ld convs", names[i],
                     a.dnnl_calls);
        KT_CHECK_MSG(b.dnnl_calls == (i == 0 ? 0 : 3), "KILN_CONV=%s, 16 channels: oneDNN ran %ld convs", names[i],
                     b.dnnl_calls);
        run_free(&a), run_free(&b);
    }
    unsetenv("KILN_CONV");
    kiln__conv_dnnl_force(-1);
    ref_free(&few), ref_free(&many);
}

/* Two host threads, each its own stream, run the same shapes at once: one shared cached
 * primitive per shape, the second conv on one OpenMP thread; every result as alone. */
static void *conv_thread(void *arg) {
    const conv_ref *r = arg;
    for (int i = 0; i < 4; i++) {
        kiln_tensor x = ew_tensor(KILN_F32, KILN_SHAPE(r->k.n, r->k.c, r->k.h, r->k.w), r->x);
        kiln_tensor w = ew_tensor(KILN_F32, KILN_SHAPE(r->k.o, r->k.c / r->k.groups, r->k.kh, r->k.kw), r->w);
        kiln_tensor b = ew_tensor(KILN_F32, KILN_SHAPE(r->k.o), r->b);
        kiln_tensor y = kiln_conv2d(x, w, b, r->k.sh, r->k.sw, r->k.ph, r->k.pw, r->k.dh, r->k.dw, r->k.groups);
        free(expect_near(y, r->y, r->ay, r->ny, r->ty, "concurrent forward"));
    }
    kiln_sync();
    return NULL;
}

KT_TEST(concurrent_callers) {
    kt_mem_begin();
    conv_ref r = ref_make(cnn_cases[1]);
    kiln__conv_dnnl_force(1);
    long before = kiln__conv_dnnl_calls();
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, conv_thread, &r);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    KT_CHECK(kiln__conv_dnnl_calls() - before == 8);
    kiln__conv_dnnl_force(-1);
    ref_free(&r);
    KT_MEM_CHECK();
}

int main(void) {
    if (!KILN_HAVE_DNNL) {
        printf("SKIP: built without oneDNN (KILN_USE_DNNL=OFF or no libdnnl-dev)\n");
        return 77;
    }
    KT_RUN(both_paths_against_reference);
    KT_RUN(strided_input);
    KT_RUN(env_override);
    KT_RUN(concurrent_callers);
    return kt_finish();
}
