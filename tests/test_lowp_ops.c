/* bf16 and f16 through the ops that take them, against double references with dtype-fit
 * tolerances: casts f32 <-> bf16 bit for bit against kiln__f32_to_bf16 (ties, NaN, infinities,
 * subnormals; dense and strided); elementwise chains (which fusion runs as one pass, loading bf16
 * and storing bf16 with f32 math inside); reductions, softmax, log_softmax, layer_norm and
 * cross entropy, which accumulate in f32 (a bf16 sum of 4096 ones would stop at 256); and their
 * gradients against f32 ones; the OpenCL device's bf16 results against the CPU's. Run with
 * fusion on and off, and under KILN_ISA=avx2. */
#include <math.h>

#include "ew_util.h"

static const uint32_t special[] = {
    0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00400000u, /* zeros, subnormals */
    0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x3f7fffffu,              /* ties to even, near 1 */
    0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u,                           /* max: rounds to inf */
    0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffbfffffu, /* inf, NaNs (signalling too) */
};
#define N_SPECIAL ((int)(sizeof special / sizeof special[0]))

KT_TEST(casts_round_bit_for_bit) {
    kt_mem_begin();
    int64_t n = 4096 + 2 * N_SPECIAL; /* even: two columns */
    float *f = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = i < N_SPECIAL ? special[i] : (uint32_t)(ew_uniform(0, 1) * 4294967295.0);
        memcpy(&f[i], &u, 4);
    }
    for (int strided = 0; strided < 2; strided++) {
        kiln_tensor x = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(n / 2, 2), f);
        if (strided) x = kiln_transpose(x, 0, 1); /* read with stride 2 */
        kiln_tensor h = kiln_cast(kiln_ref(x), KILN_BF16);
        uint16_t *got = malloc(sizeof(uint16_t) * (size_t)n);
        KT_CHECK_MSG(kiln_into_data(kiln_contiguous(kiln_ref(h)), got, sizeof(uint16_t) * (size_t)n) == KILN_OK, "%s",
                     kiln_last_error());
        int bad = 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t src = strided ? (i % (n / 2)) * 2 + i / (n / 2) : i;
            uint32_t bits;
            memcpy(&bits, &f[src], 4);
            if (got[i] != kiln__f32_to_bf16(f[src]) && bad++ < 3)
                KT_CHECK_MSG(false, "strided %d: %08x -> %04x, want %04x", strided, (unsigned)bits, got[i],
                             kiln__f32_to_bf16(f[src]));
        }
        /* and back: every bf16 is an f32, exactly */
        float *back = malloc(sizeof(float) * (size_t)n);
        KT_CHECK(kiln_into_data(kiln_cast(kiln_contiguous(h), KILN_F32), back, sizeof(float) * (size_t)n) == KILN_OK);
        for (int64_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &back[i], 4);
            if (u != (uint32_t)got[i] << 16 && bad++ < 3) KT_CHECK_MSG(false, "back: %08x from %04x", u, got[i]);
        }
        KT_CHECK(bad == 0);
        free(got), free(back);
        kiln_release(x);
    }
    free(f);
    KT_MEM_CHECK();
}

/* max |got - want| / (|want| tolerance + absolute floor), got cast to f32 and read */
static void expect_close(kiln_tensor got, const double *want, int64_t n, double rtol, double atol, const char *what) {
    float *g = malloc(sizeof(float) * (size_t)(n + 1));
    kiln_status st = kiln_into_data(kiln_cast(got, KILN_F32), g, sizeof(float) * (size_t)n);
    KT_CHECK_MSG(st == KILN_OK, "%s: %s", what, kiln_last_error());
    int bad = 0;
    for (int64_t i = 0; st == KILN_OK && i < n; i++)
        if (!(fabs(g[i] - want[i]) <= rtol * fabs(want[i]) + atol) && bad++ < 3)
            KT_CHECK_MSG(false, "%s[%lld]: %.6g, want %.6g", what, (long long)i, g[i], want[i]);
    free(g);
}

/* The reference works on the values the low-precision input holds. */
static double *held(kiln_dtype dt, const double *v, int64_t n) {
    double *r = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) r[i] = ew_round(dt, v[i]);
    return r;
}

static void ops_in(kiln_dtype dt) {
    double rtol = dt == KILN_BF16 ? 0x1p-8 * 2 : 0x1p-11 * 2; /* one rounding of the result, and slack */
    int64_t rows = 16, cols = 257, n = rows * cols;
    double *v = malloc(sizeof(double) * (size_t)n), *w = malloc(sizeof(double) * (size_t)n);
    ew_values(v, n, KILN_F32, -3, 3);
    double *x = held(dt, v, n), *ref = malloc(sizeof(double) * (size_t)n);
    kiln_tensor t = ew_tensor(dt, KILN_SHAPE(rows, cols), v);

    /* a chain fusion runs as one pass: relu(x * 2 + 1) * exp(-x^2) */
    for (int64_t i = 0; i < n; i++) {
        double a = ew_round(dt, x[i] * 2), b = ew_round(dt, a + 1), r = ew_round(dt, b > 0 ? b : 0);
        double e = ew_round(dt, exp(-ew_round(dt, x[i] * x[i])));
        ref[i] = r * e;
    }
    kiln_tensor chain = kiln_mul(kiln_relu(kiln_add_scalar(kiln_mul_scalar(kiln_ref(t), 2), 1)),
                                 kiln_exp(kiln_neg(kiln_mul(kiln_ref(t), kiln_ref(t)))));
    KT_CHECK(kiln_tensor_dtype(chain) == dt);
    expect_close(chain, ref, n, 2 * rtol, 1e-6, "chain");

    /* softmax and log_softmax over rows: f32 sums inside, one rounding out */
    for (int64_t r = 0; r < rows; r++) {
        double mx = -INFINITY, s = 0;
        for (int64_t j = 0; j < cols; j++) mx = fmax(mx, x[r * cols + j]);
        for (int64_t j = 0; j < cols; j++) s += exp(x[r * cols + j] - mx);
        for (int64_t j = 0; j < cols; j++) ref[r * cols + j] = exp(x[r * cols + j] - mx) / s;
        for (int64_t j = 0; j < cols; j++) w[r * cols + j] = x[r * cols + j] - mx - log(s);
    }
    expect_close(kiln_softmax(kiln_ref(t), -1), ref, n, rtol, 1e-7, "softmax");
    expect_close(kiln_log_softmax(kiln_ref(t), -1), w, n, rtol, 1e-3, "log_softmax");

    /* layer_norm over the last dim */
    for (int64_t r = 0; r < rows; r++) {
        double m = 0, var = 0;
        for (int64_t j = 0; j < cols; j++) m += x[r * cols + j] / (double)cols;
        for (int64_t j = 0; j < cols; j++) var += pow(x[r * cols + j] - m, 2) / (double)cols;
        for (int64_t j = 0; j < cols; j++) ref[r * cols + j] = (x[r * cols + j] - m) / sqrt(var + 1e-5);
    }
    expect_close(kiln_layer_norm(kiln_ref(t), KILN_SHAPE(cols), KILN_NONE, KILN_NONE, 1e-5), ref, n, 2 * rtol, 1e-2,
                 "layer_norm");

    /* sums accumulate in f32: 4096 ones */
    double big = 4096;
    expect_close(kiln_sum(kiln_ones(KILN_CPU, dt, KILN_SHAPE(64, 64))), &big, 1, 0, 0, "sum of ones");
    double mean = 0;
    for (int64_t i = 0; i < n; i++) mean += x[i] / (double)n;
    expect_close(kiln_mean(kiln_ref(t)), &mean, 1, rtol, 1e-3, "mean");

    /* cross entropy of bf16 logits, and its gradient against f32's */
    int32_t labels[16];
    for (int i = 0; i < 16; i++) labels[i] = (i * 37) % (int)cols;
    kiln_tensor y = kiln_from_data(KILN_CPU, KILN_I32, KILN_SHAPE(16), labels);
    double ce = 0;
    for (int64_t r = 0; r < rows; r++) ce -= w[r * cols + labels[r]] / (double)rows;
    kiln_tensor leaf = kiln_leaf(kiln_clone(kiln_ref(t)));
    kiln_tensor loss = kiln_cross_entropy(kiln_ref(leaf), kiln_ref(y), kiln_cross_entropy_defaults());
    expect_close(kiln_ref(loss), &ce, 1, rtol, 1e-3, "cross_entropy");
    kiln_grads *g = NULL;
    KT_CHECK(kiln_backward(kiln_cast(loss, KILN_F32), &g) == KILN_OK);
    kiln_tensor dx = kiln_grad(g, leaf);
    kiln_grads_free(g);
    KT_CHECK(kiln_tensor_dtype(dx) == dt);
    for (int64_t r = 0; r < rows; r++) /* (softmax - onehot) / rows */
        for (int64_t j = 0; j < cols; j++)
            ref[r * cols + j] = (exp(w[r * cols + j]) - (j == labels[r])) / (double)rows;
    expect_close(dx, ref, n, 2 * rtol, 1e-5, "d cross_entropy");
    kiln_release(leaf), kiln_release(y), kiln_release(t);
    free(v), free(w), free(x), free(ref);
}

KT_TEST(ops_in_bf16) {
    kt_mem_begin();
    ops_in(KILN_BF16);
    KT_MEM_CHECK();
}

KT_TEST(ops_in_f16) {
    kt_mem_begin();
    ops_in(KILN_F16);
    KT_MEM_CHECK();
}

/* The OpenCL device computes bf16 in f32 inside its kernels: the same ops against the CPU's. */
static kiln_tensor device_ops(kiln_device dev, kiln_tensor x, kiln_tensor w, int which) {
    x = kiln_to_device(x, dev), w = kiln_to_device(w, dev);
    kiln_tensor y;
    switch (which) {
    case 0: y = kiln_mul(kiln_relu(kiln_add_scalar(kiln_ref(x), 0.5)), kiln_exp(kiln_neg(kiln_ref(x)))); break;
    case 1: y = kiln_softmax(kiln_ref(x), -1); break;
    case 2: y = kiln_sum_dims(kiln_ref(x), KILN_DIMS(-1), false); break;
    default: y = kiln_matmul(kiln_ref(x), kiln_transpose(kiln_ref(w), 0, 1)); break;
    }
    kiln_release(x), kiln_release(w);
    return kiln_cast(kiln_to_device(y, KILN_CPU), KILN_F32);
}

KT_TEST(opencl_against_cpu) {
    if (kiln_device_count(KILN_KIND_OPENCL) == 0) {
        printf("  no OpenCL device: skipped\n");
        return;
    }
    kt_mem_begin();
    kiln_tensor x = kiln_cast(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(8, 96), 3), KILN_BF16);
    kiln_tensor w = kiln_cast(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(24, 96), 4), KILN_BF16);
    const char *names[4] = {"chain", "softmax", "row sums", "matmul"};
    for (int which = 0; which < 4; which++) {
        kiln_tensor want = device_ops(KILN_CPU, kiln_ref(x), kiln_ref(w), which);
        kiln_tensor got = device_ops(KILN_OPENCL, kiln_ref(x), kiln_ref(w), which);
        KT_CHECK(kiln_tensor_dtype(got) == KILN_F32);
        /* each side rounds its f32 result to bf16 once; sums may round differently in between */
        kiln_tensor d = kiln_max(kiln_abs(kiln_sub(kiln_ref(got), kiln_ref(want))));
        kiln_tensor s = kiln_max(kiln_abs(want));
        float fd = 1, fs = 0;
        KT_CHECK_MSG(kiln_into_scalar(d, &fd) == KILN_OK && kiln_into_scalar(s, &fs) == KILN_OK, "%s: %s",
                     names[which], kiln_last_error());
        KT_CHECK_MSG(fd <= 0x1p-7 * fs, "%s: OpenCL off the CPU by %g of %g", names[which], fd, fs);
        kiln_release(got);
    }
    kiln_release(x), kiln_release(w);
    KT_MEM_CHECK();
}

/* relu's gradient in bf16 and f16 (f32 between casts, one fused pass): dy where x > 0, else 0
 * (at 0 too, as PyTorch), exactly, for values of either sign, zeros and a NaN-free mix. */
KT_TEST(relu_backward_lowp) {
    kt_mem_begin();
    kiln_dtype dts[2] = {KILN_BF16, KILN_F16};
    for (int d = 0; d < 2; d++) {
        int64_t n = 4099;
        double *x = malloc(sizeof(double) * (size_t)n), *dy = malloc(sizeof(double) * (size_t)n);
        ew_values(x, n, dts[d], -2, 2);
        ew_values(dy, n, dts[d], -3, 3);
        for (int64_t i = 0; i < n; i += 7) x[i] = 0;
        kiln_tensor tx = ew_tensor(dts[d], KILN_SHAPE(n), x);
        kiln_require_grad(tx);
        kiln_grads *g = NULL;
        KT_CHECK(kiln_backward_seed(kiln_relu(kiln_ref(tx)), ew_tensor(dts[d], KILN_SHAPE(n), dy), &g) == KILN_OK);
        kiln_tensor dx = kiln_grad(g, tx);
        KT_CHECK(kiln_tensor_dtype(dx) == dts[d]);
        double *got = ew_read(kiln_cast(dx, KILN_F64), KILN_F64, n);
        int bad = 0;
        for (int64_t i = 0; got && i < n; i++)
            if (got[i] != (x[i] > 0 ? dy[i] : 0) && bad++ < 3)
                KT_CHECK_MSG(false, "%s [%lld]: x %g dy %g: %g", kiln_dtype_name(dts[d]), (long long)i, x[i], dy[i],
                             got[i]);
        KT_CHECK(got && bad == 0);
        free(got), free(x), free(dy);
        kiln_grads_free(g);
        kiln_release(tx);
    }
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(casts_round_bit_for_bit);
    KT_RUN(ops_in_bf16);
    KT_RUN(ops_in_f16);
    KT_RUN(opencl_against_cpu);
    KT_RUN(relu_backward_lowp);
    return kt_finish();
}
