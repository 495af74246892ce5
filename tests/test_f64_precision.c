/* f64 stays f64 all the way: the unary ops and their gradients in double against long-double
 * references, to about 1e-14 (relative, with a 1e-15 floor where a derivative cancels, as
 * 1 - tanh^2 does, in PyTorch too). The softplus gradient was sigmoid(x) above the threshold
 * where softplus is x itself, 1.3e-9 away from PyTorch's 1 (an f32-sized error in f64). */
#include <kiln.h>
#include <math.h>

#include "kiln_test.h"

#define NX 17
static const double xs[NX] = {-6.0, -3.5, -2.0, -1.25, -0.7, -0.3, -0.05, 0.0, 0.02, 0.4, 0.9, 1.5, 2.75, 4.0, 6.5,
                              20.5, 31.0};

typedef long double ld;
static ld sig(ld x) { return 1.0L / (1.0L + expl(-x)); }
static ld softplus_ref(ld x) { return x > 20 ? x : log1pl(expl(x)); }

typedef struct {
    const char *name;
    kiln_tensor (*op)(kiln_tensor);
    ld (*f)(ld);
    ld (*df)(ld);
    double lo; /* the domain: x >= lo */
    double hi; /* x <= hi */
} unary_case;

static ld d_exp(ld x) { return expl(x); }
static ld d_log(ld x) { return 1 / x; }
static ld d_log1p(ld x) { return 1 / (1 + x); }
static ld d_sqrt(ld x) { return 0.5L / sqrtl(x); }
static ld f_rsqrt(ld x) { return 1 / sqrtl(x); }
static ld d_rsqrt(ld x) { return -0.5L / (x * sqrtl(x)); }
static ld d_sin(ld x) { return cosl(x); }
static ld d_cos(ld x) { return -sinl(x); }
static ld d_tanh(ld x) { return 1 - tanhl(x) * tanhl(x); }
static ld d_sig(ld x) { return sig(x) * (1 - sig(x)); }
static ld d_softplus(ld x) { return x > 20 ? 1 : sig(x); } /* PyTorch's threshold, in backward too */
static ld f_silu(ld x) { return x * sig(x); }
static ld d_silu(ld x) { return sig(x) * (1 + x * (1 - sig(x))); }
static ld f_gelu(ld x) { return 0.5L * x * erfcl(-x / sqrtl(2)); }
static ld d_gelu(ld x) { return 0.5L * erfcl(-x / sqrtl(2)) + x * expl(-x * x / 2) / sqrtl(2 * acosl(-1)); }
static ld d_erf(ld x) { return 2 / sqrtl(acosl(-1)) * expl(-x * x); }
static ld d_atan(ld x) { return 1 / (1 + x * x); }
static ld f_log_sigmoid(ld x) { return -log1pl(expl(-x)); }
static ld d_log_sigmoid(ld x) { return sig(-x); }
static ld f_softsign(ld x) { return x / (1 + fabsl(x)); }
static ld d_softsign(ld x) { return 1 / ((1 + fabsl(x)) * (1 + fabsl(x))); }
static ld f_mish(ld x) { return x * tanhl(softplus_ref(x)); }
static ld d_mish(ld x) {
    ld t = tanhl(softplus_ref(x));
    return t + x * sig(x) * (1 - t * t);
}

static const unary_case cases[] = {
    {"exp", kiln_exp, expl, d_exp, -30, 30},
    {"log", kiln_log, logl, d_log, 1e-3, 1e9},
    {"log1p", kiln_log1p, log1pl, d_log1p, -0.9, 1e9},
    {"expm1", kiln_expm1, expm1l, d_exp, -30, 30},
    {"sqrt", kiln_sqrt, sqrtl, d_sqrt, 1e-3, 1e9},
    {"rsqrt", kiln_rsqrt, f_rsqrt, d_rsqrt, 1e-3, 1e9},
    {"sin", kiln_sin, sinl, d_sin, -30, 30},
    {"cos", kiln_cos, cosl, d_cos, -30, 30},
    {"tanh", kiln_tanh, tanhl, d_tanh, -30, 30},
    {"sigmoid", kiln_sigmoid, sig, d_sig, -30, 30},
    {"softplus", kiln_softplus, softplus_ref, d_softplus, -30, 40},
    {"silu", kiln_silu, f_silu, d_silu, -30, 30},
    {"gelu", kiln_gelu, f_gelu, d_gelu, -30, 30},
    {"erf", kiln_erf, erfl, d_erf, -30, 30},
    {"atan", kiln_atan, atanl, d_atan, -30, 40},
    {"log_sigmoid", kiln_log_sigmoid, f_log_sigmoid, d_log_sigmoid, -30, 40},
    {"softsign", kiln_softsign, f_softsign, d_softsign, -30, 40},
    {"mish", kiln_mish, f_mish, d_mish, -30, 40},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

static bool close_to(double got, ld want) {
    return fabsl((ld)got - want) <= 1e-14L * fabsl(want) + 1e-15L;
}

/* The inputs of c's domain; their count. */
static int inputs(const unary_case *c, double *x) {
    int n = 0;
    for (int i = 0; i < NX; i++)
        if (xs[i] >= c->lo && xs[i] <= c->hi) x[n++] = xs[i];
    return n;
}

KT_TEST(forward_in_double) {
    for (int k = 0; k < N_CASES; k++) {
        const unary_case *c = &cases[k];
        double x[NX], y[NX];
        int n = inputs(c, x);
        kiln_tensor t = kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(n), x);
        KT_CHECK(kiln_into_data(c->op(t), y, sizeof(double) * (size_t)n) == KILN_OK);
        for (int i = 0; i < n; i++)
            KT_CHECK_MSG(close_to(y[i], c->f(x[i])), "%s(%.17g) = %.17g, long double %.17Lg", c->name, x[i], y[i],
                         c->f(x[i]));
    }
}

KT_TEST(gradients_in_double) {
    kt_mem_begin();
    for (int k = 0; k < N_CASES; k++) {
        const unary_case *c = &cases[k];
        double x[NX], g[NX];
        int n = inputs(c, x);
        kiln_tensor t = kiln_leaf(kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(n), x));
        kiln_grads *gs = NULL;
        KT_CHECK(kiln_backward(kiln_sum(c->op(kiln_ref(t))), &gs) == KILN_OK);
        KT_CHECK(kiln_into_data(kiln_grad(gs, t), g, sizeof(double) * (size_t)n) == KILN_OK);
        for (int i = 0; i < n; i++)
            KT_CHECK_MSG(close_to(g[i], c->df(x[i])), "d%s(%.17g) = %.17g, long double %.17Lg", c->name, x[i], g[i],
                         c->df(x[i]));
        kiln_grads_free(gs);
        kiln_release(t);
    }
    KT_MEM_CHECK();
}

/* A chain that fusion runs as one pass: still double throughout. */
KT_TEST(fused_chain_in_double) {
    double x[NX], y[NX];
    int n = 0;
    for (int i = 0; i < NX; i++)
        if (fabs(xs[i]) < 10) x[n++] = xs[i];
    kiln_tensor t = kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(n), x);
    kiln_tensor r = kiln_mul_scalar(kiln_softplus(kiln_tanh(kiln_add_scalar(t, 0.1))), 3.0);
    KT_CHECK(kiln_into_data(r, y, sizeof(double) * (size_t)n) == KILN_OK);
    for (int i = 0; i < n; i++) {
        ld want = 3 * softplus_ref(tanhl((ld)x[i] + 0.1L));
        KT_CHECK_MSG(close_to(y[i], want), "chain(%g) = %.17g, long double %.17Lg", x[i], y[i], want);
    }
}

int main(void) {
    KT_RUN(forward_in_double);
    KT_RUN(gradients_in_double);
    KT_RUN(fused_chain_in_double);
    return kt_finish();
}
