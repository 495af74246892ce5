/* conv2d with bf16 (and f16) operands: forward and the input, weight and bias gradients against
 * kiln's f64 conv (itself checked against a direct double loop in test_conv) on the values the
 * bf16 tensors hold, over conv_grid's strides, padding, dilation and groups and the
 * Fashion-MNIST CNN's conv2, on each path: the default rule, oneDNN's bf16 conv forced
 * (taken where the CPU has AVX512-BF16 and KILN_ISA allows it) and the widened f32 path
 * forced. The error allowed is one bf16 rounding of the result plus f32 summation (2^-16 of
 * the sum of |terms|): the sums are f32, only the result is rounded. Also: the results' dtype
 * (bf16, as PyTorch's), mixed dtypes refused as matmul refuses them, gradients of f32
 * parameters under bf16 autocast against the f32 ones, no leaks. CI runs it
 * under KILN_ISA=avx2 too (scripts/test.sh), where no oneDNN bf16 conv may run. */
#include <math.h>
#include <string.h>

#include "backend/cpu/conv_dnnl.h"
#include "backend/cpu/conv_reorder.h"
#include "backend/cpu/gemm_lowp.h"
#include "conv_grid.h"
#include "ew_util.h"
#include "kiln_test.h"

typedef struct {
    kiln_tensor y, dx, dw, db;
} conv_out;

/* conv2d of x, w (and b) in dtype dt with |.| of each when absolute, and the gradients of
 * sum(y * dy). */
static conv_out run(const conv_case *k, kiln_dtype dt, const double *x, const double *w, const double *b,
                    const double *dy, int64_t oh, int64_t ow) {
    kiln_tensor tx = ew_tensor(dt, KILN_SHAPE(k->n, k->c, k->h, k->w), x);
    kiln_tensor tw = ew_tensor(dt, KILN_SHAPE(k->o, k->c / k->groups, k->kh, k->kw), w);
    kiln_tensor tb = k->bias ? ew_tensor(dt, KILN_SHAPE(k->o), b) : KILN_NONE;
    kiln_require_grad(tx), kiln_require_grad(tw);
    if (k->bias) kiln_require_grad(tb);
    kiln_tensor y = kiln_conv2d(kiln_ref(tx), kiln_ref(tw), k->bias ? kiln_ref(tb) : KILN_NONE, k->sh, k->sw, k->ph,
                                k->pw, k->dh, k->dw, k->groups);
    kiln_grads *g = NULL;
    kiln_status st = kiln_backward_seed(kiln_ref(y), ew_tensor(dt, KILN_SHAPE(k->n, k->o, oh, ow), dy), &g);
    KT_CHECK_MSG(st == KILN_OK, "%s", kiln_last_error());
    conv_out o = {y, kiln_grad(g, tx), kiln_grad(g, tw),
                  k->bias ? kiln_grad(g, tb) : KILN_NONE};
    kiln_grads_free(g);
    kiln_release(tx), kiln_release(tw);
    if (k->bias) kiln_release(tb);
    return o;
}

static void out_free(conv_out *o) {
    kiln_release(o->y), kiln_release(o->dx), kiln_release(o->dw);
    if (o->db.id != KILN_NONE.id) kiln_release(o->db);
}

static void fabs_all(double *v, int64_t n) {
    for (int64_t i = 0; i < n; i++) v[i] = fabs(v[i]);
}

/* got (dtype dt) against ref: one rounding into dt of the result, and f32 sums. */
static void expect(kiln_tensor got, kiln_dtype dt, kiln_tensor ref, kiln_tensor abs_sum, int64_t n, const char *what,
                   const char *tag) {
    KT_CHECK_MSG(kiln_tensor_dtype(got) == dt, "%s %s: dtype %s", tag, what, kiln_dtype_name(kiln_tensor_dtype(got)));
    double *g = ew_read(kiln_cast(kiln_ref(got), KILN_F64), KILN_F64, n), *r = ew_read(kiln_ref(ref), KILN_F64, n);
    double *a = ew_read(kiln_ref(abs_sum), KILN_F64, n);
    double unit = dt == KILN_BF16 ? 0x1p-8 : 0x1p-11;
    /* a result below dt's smallest normal is rounded to a step of fixed size (f16: 2^-24) */
    double step = dt == KILN_BF16 ? 0x1p-133 : 0x1p-24;
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; g && r && a && i < n; i++)
        if (!(fabs(g[i] - r[i]) <= unit * fabs(r[i]) + 0x1p-16 * a[i] + step)) bad++, first = first < 0 ? i : first;
    KT_CHECK_MSG(g && r && a, "%s %s: no value (%s)", tag, what, kiln_last_error());
    KT_CHECK_MSG(bad == 0, "%s %s: %lld of %lld off, first [%lld] %.6g want %.6g (|terms| %.3g)", tag, what,
                 (long long)bad, (long long)n, (long long)first, first >= 0 ? g[first] : 0.0,
                 first >= 0 ? r[first] : 0.0, first >= 0 ? a[first] : 0.0);
    free(g), free(r), free(a);
}

/* One case on the current path: returns how many bf16 convs oneDNN ran for it. */
static long check_case(const conv_case *k, kiln_dtype dt, const char *path) {
    int64_t oh = out_dim(k->h, k->kh, k->sh, k->ph, k->dh), ow = out_dim(k->w, k->kw, k->sw, k->pw, k->dw);
    int64_t nx = k->n * k->c * k->h * k->w, nw = k->o * (k->c / k->groups) * k->kh * k->kw, ny = k->n * k->o * oh * ow;
    double *v[4];
    int64_t sizes[4] = {nx, nw, k->o, ny};
    for (int i = 0; i < 4; i++) v[i] = malloc(sizeof(double) * (size_t)(sizes[i] + 1)), ew_values(v[i], sizes[i], dt, -1, 1);
    long before = kiln__conv_dnnl_bf16_calls();
    conv_out lo = run(k, dt, v[0], v[1], v[2], v[3], oh, ow);
    KT_CHECK(kiln_sync() == KILN_OK);
    long dnnl = kiln__conv_dnnl_bf16_calls() - before;
    kiln__conv_dnnl_force(0); /* the f64 references run built-in, which takes f64 */
    conv_out ref = run(k, KILN_F64, v[0], v[1], v[2], v[3], oh, ow);
    for (int i = 0; i < 4; i++) fabs_all(v[i], sizes[i]);
    conv_out abs = run(k, KILN_F64, v[0], v[1], v[2], v[3], oh, ow);
    char tag[160];
    snprintf(tag, sizeof tag, "%s %s n%lld c%lld %lldx%lld o%lld k%lldx%lld s%d,%d p%d,%d d%d,%d g%d%s", path,
             kiln_dtype_name(dt), (long long)k->n, (long long)k->c, (long long)k->h, (long long)k->w,
             (long long)k->o, (long long)k->kh, (long long)k->kw, k->sh, k->sw, k->ph, k->pw, k->dh, k->dw,
             k->groups, k->bias ? " bias" : "");
    expect(lo.y, dt, ref.y, abs.y, ny, "y", tag);
    expect(lo.dx, dt, ref.dx, abs.dx, nx, "dx", tag);
    expect(lo.dw, dt, ref.dw, abs.dw, nw, "dw", tag);
    if (k->bias) expect(lo.db, dt, ref.db, abs.db, k->o, "db", tag);
    out_free(&lo), out_free(&ref), out_free(&abs);
    for (int i = 0; i < 4; i++) free(v[i]);
    return dnnl;
}

static const conv_case cnn_conv2 = {3, 16, 14, 14, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, true};
/* two blocks of 16 channels in, one out, an odd plane: kiln's transposes (conv_reorder.h) */
static const conv_case two_blocks = {2, 32, 7, 5, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, true};

/* path: 0 the default rule, 1 oneDNN forced, 2 the widened path forced. */
static long check_path(kiln_dtype dt, int path) {
    static const char *names[] = {"default", "dnnl", "widened"};
    long dnnl = 0;
    for (int i = 0; i <= (int)NGRID + 1; i++) {
        kiln__conv_dnnl_force(path == 1 ? 1 : -1);
        kiln__gemm_lowp_force(path == 2 ? 0 : -1);
        const conv_case *k = i < (int)NGRID ? &conv_grid[i] : i == (int)NGRID ? &cnn_conv2 : &two_blocks;
        dnnl += check_case(k, dt, names[path]);
    }
    kiln__conv_dnnl_force(-1);
    kiln__gemm_lowp_force(-1);
    return dnnl;
}

KT_TEST(bf16_on_every_path) {
    kt_mem_begin();
    bool native = strcmp(kiln__gemm_lowp_path(KILN_BF16), "dnnl-bf16") == 0;
    printf("    bf16 products: %s\n", kiln__gemm_lowp_path(KILN_BF16));
    long moved = kiln__conv_dnnl_kiln_reorders(), blocked = kiln__conv_dnnl_blocked_bf16_activations();
    long d0 = check_path(KILN_BF16, 0), d1 = check_path(KILN_BF16, 1), d2 = check_path(KILN_BF16, 2);
    moved = kiln__conv_dnnl_kiln_reorders() - moved;
    blocked = kiln__conv_dnnl_blocked_bf16_activations() - blocked;
    /* the native path: conv2 and two_blocks (16 and 32 channels) by the default rule, every
     * case when forced. oneDNN picks each conv's activation layout for this CPU: nChw16c for its
     * AVX-512 convs (3 a pass on the cases with whole blocks of 16 channels), nhwc for its AMX
     * ones (Intel Xeon 6/207: none). Every nChw16c activation is moved by kiln's transposes
     * where the CPU has their instructions, by oneDNN's reorders elsewhere. */
    if (native && strcmp(kiln__conv_dnnl_mode(), "builtin") != 0) {
        KT_CHECK_MSG(d0 >= 6, "default rule: oneDNN ran %ld bf16 convs, want those of conv2 and two_blocks", d0);
        KT_CHECK_MSG(d1 >= 3 * ((long)NGRID + 2) - 6, "forced: oneDNN ran %ld of %ld bf16 convs", d1,
                     3 * ((long)NGRID + 2));
        printf("    bf16 activations in nChw16c: %ld, moved by kiln's transposes: %ld\n", blocked, moved);
        KT_CHECK_MSG(moved == (kiln__conv_reorder_bf16_ok(16) ? blocked : 0),
                     "kiln transposed %ld of %ld bf16 activations in nChw16c", moved, blocked);
    } else {
        KT_CHECK_MSG(d0 + d1 == 0, "oneDNN ran %ld bf16 convs without the bf16 path", d0 + d1);
    }
    KT_CHECK_MSG(d2 == 0, "widened path forced: oneDNN ran %ld bf16 convs", d2);
    KT_MEM_CHECK();
}

/* kiln's bf16 transposes against the layouts' definitions: NCHW element (n, c, p) is nChw16c
 * element ((n * C/16 + c/16) * HW + p) * 16 + c%16, and back, bit for bit (NaN patterns too). */
KT_TEST(bf16_transposes) {
    if (!kiln__conv_reorder_bf16_ok(16)) {
        printf("    no AVX-512BW here: oneDNN's reorders run instead\n");
        return;
    }
    KT_CHECK(!kiln__conv_reorder_bf16_ok(24) && !kiln__conv_reorder_bf16_ok(0));
    const int64_t n = 3, c = 48, hw = 69, total = n * c * hw;
    uint16_t *plain = malloc(total * 2), *blocked = malloc(total * 2), *back = malloc(total * 2);
    KT_CHECK(plain && blocked && back);
    for (int64_t i = 0; plain && i < total; i++) plain[i] = (uint16_t)(i * 40503u + 0x7fc1u);
    if (plain && blocked && back) {
        kiln__conv_bf16_to_blocked(plain, blocked, n, c, hw);
        kiln__conv_bf16_from_blocked(blocked, back, n, c, hw);
        long wrong = 0;
        for (int64_t b = 0; b < n; b++)
            for (int64_t ch = 0; ch < c; ch++)
                for (int64_t p = 0; p < hw; p++)
                    wrong += blocked[((b * (c / 16) + ch / 16) * hw + p) * 16 + ch % 16] !=
                             plain[(b * c + ch) * hw + p];
        KT_CHECK_MSG(wrong == 0, "%ld elements misplaced in nChw16c", wrong);
        KT_CHECK(memcmp(plain, back, (size_t)total * 2) == 0);
    }
    free(plain), free(blocked), free(back);
}

KT_TEST(f16_widened) { /* no f16 conv instructions here: always widened, exact products */
    kt_mem_begin();
    KT_CHECK(check_path(KILN_F16, 0) == 0);
    KT_MEM_CHECK();
}

KT_TEST(mixed_dtypes_refused) { /* as kiln_matmul refuses them: no silent promotion */
    kt_mem_begin();
    double v[2 * 3 * 3];
    ew_values(v, 18, KILN_BF16, -1, 1);
    kiln_tensor x = ew_tensor(KILN_BF16, KILN_SHAPE(1, 2, 3, 3), v), w = ew_tensor(KILN_F32, KILN_SHAPE(1, 2, 3, 3), v);
    KT_READ_ERROR(kiln_conv2d(kiln_ref(x), kiln_ref(w), KILN_NONE, 1, 1, 0, 0, 1, 1, 1), KILN_ERR_DTYPE, "kiln_conv2d");
    kiln_tensor b = ew_tensor(KILN_F32, KILN_SHAPE(1), v);
    KT_READ_ERROR(kiln_conv2d(kiln_ref(x), kiln_cast(kiln_ref(w), KILN_BF16), b, 1, 1, 0, 0, 1, 1, 1), KILN_ERR_DTYPE,
                  "kiln_conv2d");
    kiln_release(x), kiln_release(w);
    kiln_clear_error();
    KT_MEM_CHECK();
}

/* Under bf16 autocast with f32 parameters (as a CNN trains): y is bf16, the input, weight and
 * bias gradients come back f32 and within bf16 tolerance of the f32 ones (norm of the error
 * under 2^-6 of the gradient's norm: x, w and dy each rounded to bf16, 2^-9 apiece, f32 sums). */
KT_TEST(autocast_gradients_near_f32) {
    kt_mem_begin();
    const conv_case *k = &cnn_conv2;
    kiln_tensor x = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(k->n, k->c, k->h, k->w), 11);
    kiln_tensor w = kiln_uniform(KILN_CPU, KILN_F32, KILN_SHAPE(k->o, k->c, 3, 3), -0.2, 0.2, 12);
    kiln_tensor b = kiln_uniform(KILN_CPU, KILN_F32, KILN_SHAPE(k->o), -0.2, 0.2, 13);
    kiln_tensor dy = kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(k->n, k->o, k->h, k->w), 14);
    kiln_tensor t[3] = {x, w, b}, grads[2][3];
    for (int i = 0; i < 3; i++) kiln_require_grad(t[i]);
    for (int ac = 0; ac < 2; ac++) {
        if (ac) KT_CHECK(kiln_autocast_begin(KILN_BF16) == KILN_OK);
        kiln_tensor y = kiln_conv2d(kiln_ref(x), kiln_ref(w), kiln_ref(b), 1, 1, 1, 1, 1, 1, 1);
        if (ac) KT_CHECK(kiln_autocast_end() == KILN_OK);
        KT_CHECK(kiln_tensor_dtype(y) == (ac ? KILN_BF16 : KILN_F32));
        kiln_grads *g = NULL;
        KT_CHECK_MSG(kiln_backward_seed(kiln_cast(y, KILN_F32), kiln_ref(dy), &g) == KILN_OK, "%s", kiln_last_error());
        for (int i = 0; i < 3; i++) grads[ac][i] = kiln_grad(g, t[i]);
        kiln_grads_free(g);
    }
    for (int i = 0; i < 3; i++) {
        KT_CHECK(kiln_tensor_dtype(grads[1][i]) == KILN_F32);
        int64_t n = kiln_tensor_numel(grads[0][i]);
        double *g32 = ew_read(grads[0][i], KILN_F32, n), *gac = ew_read(grads[1][i], KILN_F32, n), err = 0, norm = 0;
        for (int64_t e = 0; g32 && gac && e < n; e++) err += pow(gac[e] - g32[e], 2), norm += g32[e] * g32[e];
        KT_CHECK_MSG(g32 && gac && sqrt(err) <= 0x1p-6 * sqrt(norm), "gradient %d: error %g of norm %g", i, sqrt(err),
                     sqrt(norm));
        free(g32), free(gac);
    }
    kiln_release(x), kiln_release(w), kiln_release(b), kiln_release(dy);
    KT_MEM_CHECK();
}

/* Finite differences under bf16 autocast, exact: with x, w and dy in {-1, 0, 1}, 16 channels
 * (oneDNN's bf16 conv and kiln's transposes where the CPU has them) and a 3x3 kernel, every
 * output is an integer of at most 145 in magnitude even with one weight moved by 1, so bf16
 * holds it exactly and L = sum(y * dy) is exact in f32. L is linear in each of x, w and b, so
 * (L(v + 1) - L(v - 1)) / 2 at any element is its gradient, and the f32 gradients autocast
 * returns (the input, weight and bias gradients' passes) must equal it. */
enum { FD_N = 2, FD_C = 16, FD_H = 6, FD_W = 5, FD_O = 16 };

static double fd_loss(const float *x, const float *w, const float *b, kiln_tensor dy) {
    KT_CHECK(kiln_autocast_begin(KILN_BF16) == KILN_OK);
    kiln_tensor y = kiln_conv2d(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(FD_N, FD_C, FD_H, FD_W), x),
                                kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(FD_O, FD_C, 3, 3), w),
                                kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(FD_O), b), 1, 1, 1, 1, 1, 1, 1);
    KT_CHECK(kiln_autocast_end() == KILN_OK);
    float l = NAN;
    KT_CHECK_MSG(kiln_into_data(kiln_sum(kiln_mul(kiln_cast(y, KILN_F32), kiln_ref(dy))), &l, sizeof l) == KILN_OK,
                 "%s", kiln_last_error());
    return l;
}

KT_TEST(autocast_finite_differences_exact) {
    kt_mem_begin();
    enum { NX = FD_N * FD_C * FD_H * FD_W, NW = FD_O * FD_C * 9, NY = FD_N * FD_O * FD_H * FD_W };
    static float x[NX], w[NW], b[FD_O], dy[NY], g[3][NW > NX ? NW : NX];
    uint64_t r = 12345;
    float *fill[3] = {x, w, dy};
    int n[3] = {NX, NW, NY};
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < n[t]; i++) {
            r = r * 6364136223846793005u + 1442695040888963407u;
            fill[t][i] = (float)((int)(r >> 62) % 3 - 1);
        }
    for (int i = 0; i < FD_O; i++) b[i] = (float)(i % 3 - 1);
    kiln_tensor tdy = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(FD_N, FD_O, FD_H, FD_W), dy);
    kiln_tensor leaf[3] = {kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(FD_N, FD_C, FD_H, FD_W), x),
                           kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(FD_O, FD_C, 3, 3), w),
                           kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(FD_O), b)};
    for (int i = 0; i < 3; i++) kiln_require_grad(leaf[i]);
    long before = kiln__conv_dnnl_bf16_calls();
    KT_CHECK(kiln_autocast_begin(KILN_BF16) == KILN_OK);
    kiln_tensor y = kiln_conv2d(kiln_ref(leaf[0]), kiln_ref(leaf[1]), kiln_ref(leaf[2]), 1, 1, 1, 1, 1, 1, 1);
    KT_CHECK(kiln_autocast_end() == KILN_OK);
    kiln_grads *gr = NULL;
    KT_CHECK_MSG(kiln_backward(kiln_sum(kiln_mul(kiln_cast(y, KILN_F32), kiln_ref(tdy))), &gr) == KILN_OK, "%s",
                 kiln_last_error());
    int sizes[3] = {NX, NW, FD_O};
    for (int i = 0; i < 3; i++) {
        kiln_tensor gi = kiln_grad(gr, leaf[i]);
        KT_CHECK(kiln_tensor_dtype(gi) == KILN_F32);
        KT_CHECK(kiln_into_data(gi, g[i], (size_t)sizes[i] * sizeof(float)) == KILN_OK);
    }
    kiln_grads_free(gr);
    KT_CHECK(kiln_sync() == KILN_OK); /* the forward too: no gradient read waits for y */
    bool native =
        strcmp(kiln__gemm_lowp_path(KILN_BF16), "dnnl-bf16") == 0 && strcmp(kiln__conv_dnnl_mode(), "builtin");
    KT_CHECK_MSG(!native || kiln__conv_dnnl_bf16_calls() - before == 3, "oneDNN ran %ld bf16 passes, want 3",
                 kiln__conv_dnnl_bf16_calls() - before);
    float *v[3] = {x, w, b};
    long wrong = 0, checked = 0;
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < sizes[t]; i += t == 2 ? 5 : 97) { /* a spread of elements of each */
            float keep = v[t][i];
            v[t][i] = keep + 1;
            double up = fd_loss(x, w, b, tdy);
            v[t][i] = keep - 1;
            double down = fd_loss(x, w, b, tdy);
            v[t][i] = keep;
            checked++;
            if ((up - down) / 2 != g[t][i]) {
                if (!wrong)
                    printf("    %s[%d]: finite difference %g, gradient %g\n", t == 0 ? "x" : t == 1 ? "w" : "b", i,
                           (up - down) / 2, g[t][i]);
                wrong++;
            }
        }
    KT_CHECK_MSG(wrong == 0, "%ld of %ld gradient elements differ from their finite differences", wrong, checked);
    for (int i = 0; i < 3; i++) kiln_release(leaf[i]);
    kiln_release(tdy);
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(bf16_on_every_path);
    KT_RUN(bf16_transposes);
    KT_RUN(f16_widened);
    KT_RUN(mixed_dtypes_refused);
    KT_RUN(autocast_gradients_near_f32);
    KT_RUN(autocast_finite_differences_exact);
    return kt_finish();
}
