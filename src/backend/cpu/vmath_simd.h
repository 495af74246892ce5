/* The f32 kernels of vmath, written once over a small vocabulary of vector primitives.
 *
 * Not an ordinary header: vmath_avx2.c and vmath_avx512.c each include the vocabulary for their
 * ISA (vmath_avx2.h, vmath_avx512.h) and then this file, which defines the kernels and the table VM_TABLE (e.g.
 * kiln__vmath_avx2_kernels). The vocabulary, all static inline and VM_TARGET:
 *
 *   vf, vi, vmask          VM_W floats; VM_W int32s; a lane mask
 *   v_set(c)  v_load(p)  v_store(p, a)                       (unaligned)
 *   v_add v_sub v_mul v_div v_sqrt
 *   v_fma(a, b, c) = a*b + c   v_fnma(a, b, c) = c - a*b   v_fms(a, b, c) = a*b - c  (one rounding)
 *   v_min(a, b) v_max(a, b)    b when either is NaN (the x86 rule); clamps lean on it
 *   v_and v_or v_xor, v_andnot(a, b) = ~a & b                 (bitwise)
 *   v_rint(a)                  nearest integer, ties to even
 *   v_pow2(n)                  2^n for integral n in [-126, 127]
 *   v_ldexp(a, n)              a 2^n for integral n in [-250, 250], rounded once (denormals too)
 *   m_lt m_gt m_eq(a, b)       ordered compares: false when either is NaN
 *   m_nan(a)  m_all(m)  v_sel(m, a, b) = m ? a : b
 *   v_asint(a) i_asfloat(i) i_set(c) i_add i_sub i_and i_sra(i, k) i_cvt(i) (int -> float)
 *   v_cvt_int(a)               float -> int for integral a
 *   m_ibit(i, bit)             lanes where (i & bit) != 0
 *   vd, d_set d_fma d_div      VM_W/2 doubles
 *   v_widen_lo(a) v_widen_hi(a) v_narrow(lo, hi)   the low and high halves of a vf as vd, and back
 *
 * How the functions are built, and why, is said at each. The polynomial coefficients are
 * Chebyshev fits made for kiln (mpmath), rounded to float; their fit error is far below the
 * rounding error of evaluating them. */

#include <math.h>
#include <string.h>

#include "backend/cpu/vmath_exp.h" /* vm_exp and the pieces the functions below share */

/* ---- constants ---------------------------------------------------------------------------- */

#define VM_2_OVER_PI 6.366197467e-01f
#define VM_PIO2_1 1.570796371e+00f /* pi/2 in three parts: the FMA reduction stays exact */
#define VM_PIO2_2 -4.371138829e-08f
#define VM_PIO2_3 -1.715124510e-15f
/* Above this |x|, sin and cos go to libm: the three-part reduction is verified up to here. */
#define VM_SINCOS_LIMIT 131072.0f
/* gelu_tanh's v = 2 sqrt(2/pi) (x + 0.044715 x^3) = x (C1 + C3 x^2), constants as pairs. */
#define VM_GT_C1_HI 1.595769167e+00f
#define VM_GT_C1_LO -4.534068054e-08f
#define VM_GT_C3_HI 7.135481387e-02f
#define VM_GT_C3_LO 2.398832466e-09f

/* ---- exp and its relatives ---------------------------------------------------------------- */

/* expm1 for x in [-30, 89]: 2^n (1 + q) - 1 = 2 (h q + (h - 1/2)) with h = 2^(n-1), where
 * h - 1/2 is exact whenever it matters, so small results keep their relative accuracy and
 * 2^128 (x near 88.7) still rounds once. */
static inline VM_TARGET vf vm_expm1_clamped(vf x)
{
    vf n, r = vm_exp_reduce(x, &n);
    vf q = vm_expm1_poly(r);
    vf h = v_pow2(v_sub(n, v_set(1.0f)));
    vf t = v_fma(h, q, v_sub(h, v_set(0.5f)));
    return v_add(t, t);
}

static inline VM_TARGET vf vm_expm1(vf x)
{
    vf y = vm_expm1_clamped(v_min(v_max(x, v_set(-30.0f)), v_set(89.0f)));
    y = v_sel(m_eq(x, v_set(0.0f)), x, y); /* keeps the sign of -0 */
    return v_sel(m_nan(x), x, y);
}

/* tanh |x|:
 *   |x| < 0.55:  |x| + |x|^3 P(x^2)
 *   above:       1 - w, w = 2 / (t + 2), t = expm1(2|x|), with w corrected by its exact residual
 *                (2 - w (t + 2)) w / 2, so only t's error is left, and that shrinks by w.
 * No overflow: tanh rounds to 1 from |x| = 9.01 on, so |x| is clamped there. */
static inline VM_TARGET vf vm_tanh(vf x)
{
    vf a = v_min(v_andnot(v_set(-0.0f), x), v_set(9.5f));
    vf u = v_mul(a, a);
    vf p = v_fma(v_set(2.526109107e-03f), u, v_set(-8.526140824e-03f));
    p = v_fma(p, u, v_set(2.181840315e-02f));
    p = v_fma(p, u, v_set(-5.396469682e-02f));
    p = v_fma(p, u, v_set(1.333332360e-01f));
    p = v_fma(p, u, v_set(-3.333333433e-01f));
    vf y_small = v_fma(v_mul(a, u), p, a);
    vf t = vm_expm1_clamped(v_add(a, a));
    vf big = v_max(t, v_set(2.0f)), small = v_min(t, v_set(2.0f));
    vf dh = v_add(big, small); /* t + 2 = dh + dl exactly */
    vf dl = v_sub(small, v_sub(dh, big));
    vf w = v_div(v_set(2.0f), dh);
    vf res = v_fnma(w, dl, v_fnma(w, dh, v_set(2.0f)));
    vf w_exact = v_fma(res, v_mul(w, v_set(0.5f)), w);
    vf y = v_sel(m_lt(a, v_set(0.55f)), y_small, v_sub(v_set(1.0f), w_exact));
    y = v_or(y, v_and(x, v_set(-0.0f)));
    return v_sel(m_nan(x), x, y);
}

/* xmul * sigmoid(v), given a = -|v| <= 0 as a pair ah + al and neg = lanes where v < 0:
 *   v >= 0:  xmul / (1 + e^a)
 *   v <  0:  xmul e^a / (1 + e^a), formed as (xmul p / (1 + e^a)) 2^n with e^a = p 2^n, so a
 *            result in the denormals (sigmoid(-100) = 3.7e-44) is rounded once, not twice.
 * 1 + e^a is kept as an exact pair and the quotient corrected by its residual: without that,
 * the roundings of 1 + e^a and of the division add up to 2.4 ulp. */
static inline VM_TARGET vf vm_mul_sigmoid(vf xmul, vf ah, vf al, vmask neg)
{
    vf n, r = vm_exp_reduce(v_max(ah, v_set(-126.0f)), &n);
    vf qp = vm_expm1_poly(v_add(r, al)); /* e^a = (1 + qp) 2^n, 1 + qp never rounded */
    /* Below 2^-126, e^a no longer changes 1 + e^a, so the cheap scaling may saturate there;
     * 1 + scale is exact wherever e^a matters. */
    vf scale = v_pow2(v_max(n, v_set(-126.0f)));
    vf one_scale = v_add(v_set(1.0f), scale);
    vf dh = v_fma(qp, scale, one_scale);
    vf dl = v_fma(qp, scale, v_sub(one_scale, dh));
    vf num = v_sel(neg, v_fma(xmul, qp, xmul), xmul);
    vf rcp = v_div(v_set(1.0f), dh);
    vf q = v_mul(num, rcp);
    vf res = v_fnma(q, dl, v_fnma(q, dh, num));
    return v_ldexp(v_fma(res, rcp, q), v_sel(neg, n, v_set(0.0f)));
}

static inline VM_TARGET vf vm_sigmoid(vf x)
{
    vf y = vm_mul_sigmoid(v_set(1.0f), v_or(x, v_set(-0.0f)), v_set(0.0f),
                          m_lt(x, v_set(0.0f)));
    return v_sel(m_nan(x), x, y);
}

static inline VM_TARGET vf vm_silu(vf x)
{
    vf xc = v_max(x, v_set(-200.0f)); /* silu(-inf) = -0, the limit */
    vf y = vm_mul_sigmoid(xc, v_or(xc, v_set(-0.0f)), v_set(0.0f), m_lt(x, v_set(0.0f)));
    /* The quotient's correction would turn +-0 and inf into +0 and NaN; those are x itself. */
    y = v_sel(m_eq(x, v_set(0.0f)), x, y);
    y = v_sel(m_eq(x, v_set(INFINITY)), x, y);
    return v_sel(m_nan(x), x, y);
}

/* ---- log and log1p ------------------------------------------------------------------------ */

/* Splits a positive normal x into x = m 2^e with m in [sqrt(1/2), sqrt(2)): returns m, e in *e. */
static inline VM_TARGET vf vm_split_mantissa(vf x, vf *e)
{
    vi bits = i_sub(v_asint(x), i_set(0x3f3504f3)); /* 0x3f3504f3 = sqrt(1/2) */
    *e = i_cvt(i_sra(bits, 23));
    return i_asfloat(i_add(i_and(bits, i_set(0x007fffff)), i_set(0x3f3504f3)));
}

/* e ln2 + log1p(f) + corr, for f = m - 1 in [-0.2929, 0.4142] and a small correction corr.
 * log1p(f) = f - f^2/2 + f^3 h(f); the small terms are summed first, f and e ln2_hi last. */
static inline VM_TARGET vf vm_log_parts(vf e, vf f, vf corr)
{
    vf h = v_fma(v_set(6.972518563e-02f), f, v_set(-1.148121208e-01f));
    h = v_fma(h, f, v_set(1.168578491e-01f));
    h = v_fma(h, f, v_set(-1.242552325e-01f));
    h = v_fma(h, f, v_set(1.424900740e-01f));
    h = v_fma(h, f, v_set(-1.666780710e-01f));
    h = v_fma(h, f, v_set(2.000071704e-01f));
    h = v_fma(h, f, v_set(-2.499999702e-01f));
    h = v_fma(h, f, v_set(3.333333135e-01f));
    vf f2 = v_mul(f, f);
    vf lo = v_fma(v_mul(f2, f), h, v_fma(e, v_set(VM_LN2_LO), corr));
    lo = v_fma(v_set(-0.5f), f2, lo);
    return v_fma(e, v_set(VM_LN2_HI), v_add(lo, f));
}

static inline VM_TARGET vf vm_log(vf x)
{
    /* Denormals are scaled into the normals first, so the exponent trick sees them right. */
    vmask tiny = m_lt(x, v_set(1.175494351e-38f));
    vf xs = v_sel(tiny, v_mul(x, v_set(8388608.0f)), x);
    vf e, m = vm_split_mantissa(xs, &e);
    e = v_sub(e, v_sel(tiny, v_set(23.0f), v_set(0.0f)));
    vf y = vm_log_parts(e, v_sub(m, v_set(1.0f)), v_set(0.0f));
    y = v_sel(m_eq(x, v_set(0.0f)), v_set(-INFINITY), y);
    y = v_sel(m_lt(x, v_set(0.0f)), v_set(NAN), y);
    y = v_sel(m_eq(x, v_set(INFINITY)), x, y);
    return v_sel(m_nan(x), x, y);
}

/* log1p for finite x >= -1: u = 1 + x rounded, c = (1 + x) - u exactly (Fast2Sum, the larger
 * of 1 and x first), and log1p(x) = log(u) + log1p(c/u) ~ log(u) + c/u. */
static inline VM_TARGET vf vm_log1p_core(vf x)
{
    vf u = v_add(x, v_set(1.0f));
    vf c = v_sub(v_min(x, v_set(1.0f)), v_sub(u, v_max(x, v_set(1.0f))));
    vf e, m = vm_split_mantissa(u, &e);
    return vm_log_parts(e, v_sub(m, v_set(1.0f)), v_div(c, u));
}

static inline VM_TARGET vf vm_log1p(vf x)
{
    vf y = vm_log1p_core(v_max(x, v_set(-1.0f)));
    y = v_sel(m_eq(x, v_set(-1.0f)), v_set(-INFINITY), y);
    y = v_sel(m_lt(x, v_set(-1.0f)), v_set(NAN), y);
    y = v_sel(m_eq(x, v_set(INFINITY)), x, y);
    y = v_sel(m_eq(x, v_set(0.0f)), x, y); /* keeps the sign of -0 */
    return v_sel(m_nan(x), x, y);
}

/* softplus = max(x, 0) + log1p(e^-|x|), and x itself above 20 (as asked of it). */
static inline VM_TARGET vf vm_softplus(vf x)
{
    vf a = v_max(v_or(x, v_set(-0.0f)), v_set(-104.0f)); /* -|x| */
    vf n, r = vm_exp_reduce(a, &n);
    vf e = v_ldexp(v_add(vm_expm1_poly(r), v_set(1.0f)), n); /* denormal for x < -87 */
    vf y = v_add(v_max(x, v_set(0.0f)), vm_log1p_core(e));
    y = v_sel(m_gt(x, v_set(20.0f)), x, y);
    return v_sel(m_nan(x), x, y);
}

/* ---- sin and cos -------------------------------------------------------------------------- */

/* Cold path: lanes beyond VM_SINCOS_LIMIT (or inf, NaN) are recomputed by libm. */
static void vm_sincos_libm_lanes(float *ys, const float *xs, int want_cos)
{
    for (int i = 0; i < VM_W; i++)
        if (!(fabsf(xs[i]) < VM_SINCOS_LIMIT))
            ys[i] = want_cos ? cosf(xs[i]) : sinf(xs[i]);
}

/* |x| = n pi/2 + r with |r| <= pi/4 (three-part Cody-Waite, exact first step), then by the
 * quadrant n mod 4 (plus one for cos): sin r, cos r, -sin r, -cos r. Odd sin works on |x| and
 * puts the sign back last, which also keeps sin(-0) = -0. */
static inline VM_TARGET vf vm_sin_cos(vf x, int want_cos)
{
    vf a = v_andnot(v_set(-0.0f), x);
    vf nf = v_rint(v_mul(a, v_set(VM_2_OVER_PI)));
    vf r = v_fnma(nf, v_set(VM_PIO2_1), a);
    r = v_fnma(nf, v_set(VM_PIO2_2), r);
    r = v_fnma(nf, v_set(VM_PIO2_3), r);
    vf u = v_mul(r, r);
    vf s = v_fma(v_set(2.724931392e-06f), u, v_set(-1.984008268e-04f));
    s = v_fma(s, u, v_set(8.333331905e-03f));
    s = v_fma(s, u, v_set(-1.666666716e-01f));
    s = v_fma(v_mul(r, u), s, r);
    vf c = v_fma(v_set(-2.730044741e-07f), u, v_set(2.480059629e-05f));
    c = v_fma(c, u, v_set(-1.388888806e-03f));
    c = v_fma(c, u, v_set(4.166666791e-02f));
    c = v_fma(v_mul(u, u), c, v_fnma(v_set(0.5f), u, v_set(1.0f)));
    vmask ok = m_lt(a, v_set(VM_SINCOS_LIMIT));
    vi q = v_cvt_int(v_sel(ok, nf, v_set(0.0f)));
    if (want_cos)
        q = i_add(q, i_set(1));
    vf y = v_sel(m_ibit(q, 1), c, s);
    y = v_xor(y, v_sel(m_ibit(q, 2), v_set(-0.0f), v_set(0.0f)));
    if (!want_cos)
        y = v_xor(y, v_and(x, v_set(-0.0f)));
    if (!m_all(ok)) {
        float xs[VM_W], ys[VM_W];
        v_store(xs, x);
        v_store(ys, y);
        vm_sincos_libm_lanes(ys, xs, want_cos);
        y = v_load(ys);
    }
    return y;
}

static inline VM_TARGET vf vm_sin(vf x) { return vm_sin_cos(x, 0); }
static inline VM_TARGET vf vm_cos(vf x) { return vm_sin_cos(x, 1); }

/* ---- erf and gelu ------------------------------------------------------------------------- */

/* erf(z) = z E(z^2) for |z| <= 0.51, E(u) = E0 + u P(u). E0 = 2/sqrt(pi) is carried as a pair,
 * since its float rounding alone would be a 0.5 ulp bias in every result. */
static inline VM_TARGET vf vm_erf_small(vf z)
{
    vf u = v_mul(z, z);
    vf p = v_fma(v_set(4.699867219e-03f), u, v_set(-2.674914524e-02f));
    p = v_fma(p, u, v_set(1.128271371e-01f));
    p = v_fma(p, u, v_set(-3.761260509e-01f));
    vf rest = v_fma(p, u, v_set(5.875945774e-08f)); /* E - E0_HI */
    return v_fma(z, v_set(1.128379107e+00f), v_mul(z, rest));
}

/* G(u) = Phi(-u) e^(u^2/2) = erfc(u/sqrt2) e^(u^2/2) / 2 for u in [0, 15]: smooth, from 1/2
 * down to ~1/(u sqrt(2 pi)), so a rational function fits it: N/D of degree 4/5, relative error
 * 1e-8, all coefficients positive (Horner does not cancel). Then the Gaussian tail
 * Phi(-u) = G(u) e^(-u^2/2) keeps its relative accuracy as far as it goes. */
static const double vm_g_num[5] = {5.00000004340122817e-01, 4.41793330327352740e-01,
                                   1.85875554371783824e-01, 4.15373921459179368e-02,
                                   4.25452366728060888e-03};
static const double vm_g_den[6] = {1.0, 1.68147180475396496e+00, 1.21336509203157328e+00,
                                   4.76453141997375651e-01, 1.04124264311160980e-01,
                                   1.06644125999939086e-02};

/* G in float: the nine roundings of the two Horner chains cost up to 4.7 ulp of G; fine where
 * only its absolute error counts (erf). */
static inline VM_TARGET vf vm_gauss_g_in_float(vf u)
{
    vf num = v_fma(v_set((float)vm_g_num[4]), u, v_set((float)vm_g_num[3]));
    num = v_fma(num, u, v_set((float)vm_g_num[2]));
    num = v_fma(num, u, v_set((float)vm_g_num[1]));
    num = v_fma(num, u, v_set((float)vm_g_num[0]));
    vf den = v_fma(v_set((float)vm_g_den[5]), u, v_set((float)vm_g_den[4]));
    den = v_fma(den, u, v_set((float)vm_g_den[3]));
    den = v_fma(den, u, v_set((float)vm_g_den[2]));
    den = v_fma(den, u, v_set((float)vm_g_den[1]));
    den = v_fma(den, u, v_set(1.0f));
    return v_div(num, den);
}

/* G in double, rounded once to float: for gelu's negative tail, where G's relative error is
 * the result's. */
static inline VM_TARGET vd vm_gauss_g_half_in_double(vd u)
{
    vd num = d_fma(d_set(vm_g_num[4]), u, d_set(vm_g_num[3]));
    num = d_fma(num, u, d_set(vm_g_num[2]));
    num = d_fma(num, u, d_set(vm_g_num[1]));
    num = d_fma(num, u, d_set(vm_g_num[0]));
    vd den = d_fma(d_set(vm_g_den[5]), u, d_set(vm_g_den[4]));
    den = d_fma(den, u, d_set(vm_g_den[3]));
    den = d_fma(den, u, d_set(vm_g_den[2]));
    den = d_fma(den, u, d_set(vm_g_den[1]));
    den = d_fma(den, u, d_set(1.0));
    return d_div(num, den);
}

static inline VM_TARGET vf vm_gauss_g_in_double(vf u)
{
    return v_narrow(vm_gauss_g_half_in_double(v_widen_lo(u)),
                    vm_gauss_g_half_in_double(v_widen_hi(u)));
}

/* erf(z) = 1 - erfc(z) = 1 - 2 G(sqrt2 z) e^(-z^2) for z >= 0.5 (where erf > 1/2: no
 * cancellation worth the name), the odd polynomial below that. erfc only has to be good to an
 * absolute 2^-26 here, so G in float and a plain z^2 do. */
static inline VM_TARGET vf vm_erf(vf x)
{
    vf z = v_andnot(v_set(-0.0f), x);
    vf small = vm_erf_small(z);
    /* erf rounds to 1 from z = 3.92 on; erfc(4) > 2^-27, so v_pow2 suffices. */
    vf zc = v_min(v_max(z, v_set(0.5f)), v_set(4.0f));
    vf g = vm_gauss_g_in_float(v_mul(zc, v_set(1.414213538e+00f)));
    vf two_g = v_add(g, g);
    vf n, r = vm_exp_reduce(v_mul(v_or(zc, v_set(-0.0f)), zc), &n); /* e^(-z^2) = (1 + q) 2^n */
    vf erfc_m = v_fma(two_g, vm_expm1_poly(r), two_g);
    vf tail = v_fnma(erfc_m, v_pow2(n), v_set(1.0f));
    vf y = v_sel(m_lt(z, v_set(0.5f)), small, tail);
    y = v_or(y, v_and(x, v_set(-0.0f)));
    return v_sel(m_nan(x), x, y);
}

/* gelu = x Phi(x), Phi the normal CDF, with u = |x| and Phi(-u) = G(u) e^(-u^2/2):
 *   x <  0:  x Phi(-u), scaled by 2^n last so a denormal result is rounded once
 *   x >= 0:  x - x Phi(-u)
 * G is computed in double and u^2 formed as an exact pair, since in the negative tail their
 * relative errors are the result's (the rounding of u^2 alone would cost 64 ulp at x = -12).
 * x itself above 15, where Phi(-x) < 2^-160. */
static inline VM_TARGET vf vm_gelu(vf x)
{
    vf xc = v_max(x, v_set(-16.0f)); /* gelu(x < -15) rounds to -0: the limit at -inf */
    vf u = v_min(v_andnot(v_set(-0.0f), xc), v_set(15.0f));
    vf g = vm_gauss_g_in_double(u);
    vf u2h = v_mul(u, u);
    vf u2l = v_fms(u, u, u2h);
    /* e^(-u^2/2): -u2h/2 is exact, and u2l joins after the exact first reduction step */
    vf ah = v_mul(u2h, v_set(-0.5f));
    vf k = v_rint(v_mul(ah, v_set(VM_LOG2E)));
    vf r = v_fnma(k, v_set(VM_LN2_HI), ah);
    r = v_fnma(v_set(0.5f), u2l, v_fnma(k, v_set(VM_LN2_LO), r));
    vf phi_m = v_fma(g, vm_expm1_poly(r), g); /* Phi(-u) = phi_m 2^k */
    vmask neg = m_lt(xc, v_set(0.0f));
    vf w = v_ldexp(v_sel(neg, v_mul(xc, phi_m), phi_m), k);
    vf y = v_sel(neg, w, v_fnma(xc, w, xc));
    y = v_sel(m_gt(x, v_set(15.0f)), x, y);
    y = v_sel(m_eq(x, v_set(0.0f)), x, y); /* keeps the sign of -0 */
    return v_sel(m_nan(x), x, y);
}

/* gelu_tanh = 0.5x (1 + tanh(v/2)) = x sigmoid(v), v = x (C1 + C3 x^2). Like gelu's u^2, v
 * enters an exponential, so it is formed as a pair vh + vl (the float rounding of v would cost
 * |v| 2^-24 relative in the negative tail: 50 ulp at x = -5). */
static inline VM_TARGET vf vm_gelu_tanh(vf x)
{
    vf xc = v_min(v_max(x, v_set(-30.0f)), v_set(30.0f));
    vf x2h = v_mul(xc, xc);
    vf x2l = v_fms(xc, xc, x2h);
    /* c3 x^2 = th + tl */
    vf th = v_mul(v_set(VM_GT_C3_HI), x2h);
    vf tl = v_fma(v_set(VM_GT_C3_HI), x2l, v_fms(v_set(VM_GT_C3_HI), x2h, th));
    tl = v_fma(v_set(VM_GT_C3_LO), x2h, tl);
    /* w = c1 + c3 x^2 = wh + wl (Fast2Sum would need th <= c1: TwoSum) */
    vf wh = v_add(v_set(VM_GT_C1_HI), th);
    vf bb = v_sub(wh, v_set(VM_GT_C1_HI));
    vf wl = v_add(v_sub(v_set(VM_GT_C1_HI), v_sub(wh, bb)), v_sub(th, bb));
    wl = v_add(wl, v_add(tl, v_set(VM_GT_C1_LO)));
    /* v = x w = vh + vl; then -|v| for the sigmoid, negating both parts where x >= 0 */
    vf vh = v_mul(xc, wh);
    vf vl = v_fma(xc, wl, v_fms(xc, wh, vh));
    vmask neg = m_lt(xc, v_set(0.0f));
    vf flip = v_sel(neg, v_set(0.0f), v_set(-0.0f));
    vf y = vm_mul_sigmoid(xc, v_xor(vh, flip), v_xor(vl, flip), neg);
    y = v_sel(m_gt(x, v_set(30.0f)), x, y); /* sigmoid(v) = 1 there; also x = inf */
    y = v_sel(m_eq(x, v_set(0.0f)), x, y);  /* keeps the sign of -0 */
    return v_sel(m_nan(x), x, y);
}

/* ---- sqrt, rsqrt -------------------------------------------------------------------------- */

static inline VM_TARGET vf vm_sqrt(vf x) { return v_sqrt(x); }

/* Two correctly rounded steps: under 1.5 ulp, and rsqrt(+-0) = +-inf, rsqrt(inf) = 0. */
static inline VM_TARGET vf vm_rsqrt(vf x) { return v_div(v_set(1.0f), v_sqrt(x)); }

/* ---- rounding: rint (ties to even) and a one-step correction ------------------------------ */

/* floor, ceil and trunc carry the sign of x (ceil(-0.5) = -0, floor(0.5) = +0): OR-ing it in
 * is right for every result, and NaN stays NaN. |x| >= 2^23 is integral and rint keeps it. */
static inline VM_TARGET vf vm_with_sign_of(vf y, vf x) { return v_or(y, v_and(x, v_set(-0.0f))); }

static inline VM_TARGET vf vm_floor(vf x)
{
    vf r = v_rint(x);
    return vm_with_sign_of(v_sel(m_gt(r, x), v_sub(r, v_set(1.0f)), r), x);
}

static inline VM_TARGET vf vm_ceil(vf x)
{
    vf r = v_rint(x);
    return vm_with_sign_of(v_sel(m_lt(r, x), v_add(r, v_set(1.0f)), r), x);
}

static inline VM_TARGET vf vm_round(vf x) { return v_rint(x); }

static inline VM_TARGET vf vm_trunc(vf x)
{
    vf a = v_andnot(v_set(-0.0f), x); /* |x|: floor of it, then x's sign back */
    vf r = v_rint(a);
    return vm_with_sign_of(v_sel(m_gt(r, a), v_sub(r, v_set(1.0f)), r), x);
}

/* ---- atan, log2, log10, exp2 -------------------------------------------------------------- */

/* Cephes' atanf: |x| reduced to [0, tan(pi/8)] by atan(x) = pi/2 - atan(1/x) above tan(3pi/8)
 * and pi/4 + atan((x-1)/(x+1)) above tan(pi/8), then an odd polynomial; x's sign put back. */
static inline VM_TARGET vf vm_atan(vf x)
{
    vf a = v_andnot(v_set(-0.0f), x);
    vmask big = m_gt(a, v_set(2.414213562373095f));
    vmask mid = m_gt(a, v_set(0.4142135623730950f));
    vf xr = v_sel(mid, v_div(v_sub(a, v_set(1.0f)), v_add(a, v_set(1.0f))), a);
    xr = v_sel(big, v_div(v_set(-1.0f), a), xr);
    vf y0 = v_sel(mid, v_set(0.7853981633974483f), v_set(0.0f));
    y0 = v_sel(big, v_set(1.5707963267948966f), y0);
    vf z = v_mul(xr, xr);
    vf p = v_fma(v_set(8.05374449538e-2f), z, v_set(-1.38776856032e-1f));
    p = v_fma(p, z, v_set(1.99777106478e-1f));
    p = v_fma(p, z, v_set(-3.33329491539e-1f));
    vf y = v_add(y0, v_fma(v_mul(p, z), xr, xr));
    y = v_xor(y, v_and(x, v_set(-0.0f)));
    return v_sel(m_nan(x), x, y);
}

static inline VM_TARGET vf vm_log2(vf x) { return v_mul(vm_log(x), v_set(1.4426950408889634f)); }
static inline VM_TARGET vf vm_log10(vf x) { return v_mul(vm_log(x), v_set(0.4342944819032518f)); }

/* 2^x = 2^n e^(r ln2), n = rint(x), r = x - n exact; r ln2 as a pair. Out of [-160, 130] the
 * result is 0 or inf anyway; the clamp keeps n in v_ldexp's range. */
static inline VM_TARGET vf vm_exp2(vf x)
{
    vf xc = v_min(v_max(x, v_set(-160.0f)), v_set(130.0f));
    vf n = v_rint(xc);
    vf r = v_sub(xc, n);
    vf rl = v_fma(r, v_set(VM_LN2_HI), v_mul(r, v_set(VM_LN2_LO)));
    vf y = v_ldexp(v_add(vm_expm1_poly(rl), v_set(1.0f)), n);
    return v_sel(m_nan(x), x, y);
}

/* ---- activations built on the above ------------------------------------------------------- */

/* -softplus(-x): below -20, where softplus returns -x, e^x is under half an ulp of x. */
static inline VM_TARGET vf vm_log_sigmoid(vf x) { return v_xor(vm_softplus(v_xor(x, v_set(-0.0f))), v_set(-0.0f)); }

/* x n / (n + 2), n = u (u + 2), u = e^x s, in double lanes (s as the pair sh + sl): only the
 * float exp's error is left. */
static inline VM_TARGET vd vm_mish_half(vd x, vd ue, vd sh, vd sl)
{
    vd u = d_fma(ue, sh, d_fma(ue, sl, d_set(0.0)));
    vd n = d_fma(u, u, d_fma(u, d_set(2.0), d_set(0.0)));
    return d_fma(x, d_div(n, d_fma(n, d_set(1.0), d_set(2.0))), d_set(0.0));
}

/* Below -64, e^x is taken as e^(x + 40) e^-40 (x + 40 is exact there), so it stays a normal
 * float with its full precision where mish is a denormal. */
static inline VM_TARGET vf vm_mish(vf x)
{
    vf xc = v_max(x, v_set(-200.0f));
    vmask low = m_lt(xc, v_set(-64.0f));
    vf ue = vm_exp(v_min(v_add(xc, v_sel(low, v_set(40.0f), v_set(0.0f))), v_set(20.0f)));
    vf sh = v_sel(low, v_set(4.248354131e-18f), v_set(1.0f)), sl = v_sel(low, v_set(1.241529261e-25f), v_set(0.0f));
    vf y = v_narrow(vm_mish_half(v_widen_lo(xc), v_widen_lo(ue), v_widen_lo(sh), v_widen_lo(sl)),
                    vm_mish_half(v_widen_hi(xc), v_widen_hi(ue), v_widen_hi(sh), v_widen_hi(sl)));
    y = v_sel(m_gt(x, v_set(20.0f)), x, y);
    y = vm_with_sign_of(y, x); /* the fma's +0 addend would make mish(-inf) = +0 */
    return v_sel(m_nan(x), x, y);
}

static inline VM_TARGET vf vm_softsign(vf x)
{
    vf a = v_andnot(v_set(-0.0f), x);
    vf y = v_div(x, v_add(a, v_set(1.0f)));
    vf one = v_or(v_set(1.0f), v_and(x, v_set(-0.0f)));
    return v_sel(m_eq(a, v_set(INFINITY)), one, y);
}

/* The ops written as expressions in the op table (ir/optable.h, KILN__OPEXPR): vm_expr_name(x),
 * in float, from the same vocabulary as the functions above (E_CALL(atan, a) is vm_atan(a)). */
#define E_X x
#define E_K(c) v_set((float)(c))
#define E_ADD(a, b) v_add(a, b)
#define E_SUB(a, b) v_sub(a, b)
#define E_MUL(a, b) v_mul(a, b)
#define E_DIV(a, b) v_div(a, b)
#define E_NEG(a) v_xor(a, v_set(-0.0f))
#define E_ABS(a) v_andnot(v_set(-0.0f), a)
#define E_EXP(a) vm_exp(a)
#define E_TANH(a) vm_tanh(a)
#define E_SIGMOID(a) vm_sigmoid(a)
#define E_MIN(a, b) v_min(a, b)
#define E_MAX(a, b) v_max(a, b)
#define E_LT(a, b) m_lt(a, b)
#define E_GT(a, b) m_gt(a, b)
#define E_WHERE(m, a, b) v_sel(m, a, b)
#define E_CALL(f, a) vm_##f(a)
#define KILN__OPEXPR_VM(NAME, name, forward, gradient) \
    static inline VM_TARGET vf vm_expr_##name(vf x) { return forward; }
KILN__OPEXPR(KILN__OPEXPR_VM)
#undef KILN__OPEXPR_VM
#include "ir/opexpr_end.h"

/* ---- the array kernels -------------------------------------------------------------------- */

/* y[i] = f(x[i]): whole vectors, then the tail through a zero-filled vector on the stack. Each
 * vector is loaded before it is stored, so y == x is fine. (Unrolling by two measured no faster:
 * out-of-order execution already overlaps the iterations, and the longer functions then spill.) */
#define VM_DEFINE_KERNEL(kernel, vec_fn)                                  \
    static VM_TARGET void kernel(float *y, const float *x, int64_t n)     \
    {                                                                     \
        int64_t i = 0;                                                    \
        for (; i + VM_W <= n; i += VM_W)                                  \
            v_store(y + i, vec_fn(v_load(x + i)));                        \
        if (i < n) {                                                      \
            float tail[VM_W] = {0};                                       \
            memcpy(tail, x + i, (size_t)(n - i) * sizeof(float));        \
            v_store(tail, vec_fn(v_load(tail)));                          \
            memcpy(y + i, tail, (size_t)(n - i) * sizeof(float));         \
        }                                                                 \
    }

VM_DEFINE_KERNEL(vm_exp_kernel, vm_exp)
VM_DEFINE_KERNEL(vm_log_kernel, vm_log)
VM_DEFINE_KERNEL(vm_log1p_kernel, vm_log1p)
VM_DEFINE_KERNEL(vm_expm1_kernel, vm_expm1)
VM_DEFINE_KERNEL(vm_sin_kernel, vm_sin)
VM_DEFINE_KERNEL(vm_cos_kernel, vm_cos)
VM_DEFINE_KERNEL(vm_erf_kernel, vm_erf)
VM_DEFINE_KERNEL(vm_sqrt_kernel, vm_sqrt)
VM_DEFINE_KERNEL(vm_rsqrt_kernel, vm_rsqrt)
VM_DEFINE_KERNEL(vm_gelu_kernel, vm_gelu)
VM_DEFINE_KERNEL(vm_gelu_tanh_kernel, vm_gelu_tanh)
VM_DEFINE_KERNEL(vm_silu_kernel, vm_silu)
VM_DEFINE_KERNEL(vm_softplus_kernel, vm_softplus)
VM_DEFINE_KERNEL(vm_floor_kernel, vm_floor)
VM_DEFINE_KERNEL(vm_ceil_kernel, vm_ceil)
VM_DEFINE_KERNEL(vm_round_kernel, vm_round)
VM_DEFINE_KERNEL(vm_trunc_kernel, vm_trunc)
VM_DEFINE_KERNEL(vm_log_sigmoid_kernel, vm_log_sigmoid)
VM_DEFINE_KERNEL(vm_mish_kernel, vm_mish)
VM_DEFINE_KERNEL(vm_softsign_kernel, vm_softsign)
#define KILN__OPEXPR_KERNEL(NAME, name, forward, gradient) VM_DEFINE_KERNEL(vm_##name##_kernel, vm_expr_##name)
KILN__OPEXPR(KILN__OPEXPR_KERNEL)
#undef KILN__OPEXPR_KERNEL

const kiln__vmath_f32_fn VM_TABLE[KILN_VMATH_OP_COUNT] = {
#define KILN__VMATH_X(OP, name) [KILN_VMATH_##OP] = vm_##name##_kernel,
    KILN__VMATH_OPS
#undef KILN__VMATH_X
};
