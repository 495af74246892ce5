/* vmath's f32 exp over the vector vocabulary of vmath_simd.h (vmath_avx2.h or vmath_avx512.h,
 * included first): vm_exp, and the reduction and polynomial that expm1, tanh, sigmoid and the
 * others built on exp share. Its own header so that two users run one definition: vmath_simd.h
 * (the array kernel KILN_VMATH_EXP, and the functions built on these pieces) and
 * fused_vec_body.h (the fused kernel's register chunks, which must give exactly the unfused
 * exp's bits). Included once per ISA translation unit; no include guard on purpose. */

#define VM_LOG2E 1.442695022e+00f
#define VM_LN2_HI 6.931471825e-01f /* ln 2 = VM_LN2_HI + VM_LN2_LO to ~2^-48 */
#define VM_LN2_LO -1.904654212e-09f

/* e^r - 1 = r + r^2 g(r) for |r| <= 0.35. */
static inline VM_TARGET vf vm_expm1_poly(vf r)
{
    vf g = v_fma(v_set(1.392693957e-03f), r, v_set(8.363784291e-03f));
    g = v_fma(g, r, v_set(4.166654870e-02f));
    g = v_fma(g, r, v_set(1.666657329e-01f));
    g = v_fma(g, r, v_set(5.000000000e-01f));
    return v_fma(v_mul(r, r), g, r);
}

/* Writes x = n ln2 + r with |r| <= ln2/2: returns r, n (integral) in *n. With FMA the first
 * step is exact, so r is good to an ulp for any |x| up to ~2^20. */
static inline VM_TARGET vf vm_exp_reduce(vf x, vf *n)
{
    vf k = v_rint(v_mul(x, v_set(VM_LOG2E)));
    vf r = v_fnma(k, v_set(VM_LN2_HI), x);
    *n = k;
    return v_fnma(k, v_set(VM_LN2_LO), r);
}

static inline VM_TARGET vf vm_exp(vf x)
{
    /* Out of [-104, 89] the result is 0 or inf anyway; the clamp keeps n in v_ldexp's range. */
    vf xc = v_min(v_max(x, v_set(-104.0f)), v_set(89.0f));
    vf n, r = vm_exp_reduce(xc, &n);
    vf y = v_ldexp(v_add(vm_expm1_poly(r), v_set(1.0f)), n);
    return v_sel(m_nan(x), x, y);
}
