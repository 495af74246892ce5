/* Table-driven checks shared by the tests of issue #15's elementwise ops (test_math_rounding,
 * test_math_special, test_activations): one unary op against its double reference in every
 * dtype and memory layout, special values, a long dense run (threads and vector bodies), the
 * dtype rule, a finite-difference gradient check, and the bad-input statuses. */
#ifndef KILN_TEST_OP_CASES_H
#define KILN_TEST_OP_CASES_H

#include "ew_util.h"
#include "gradcheck.h"

typedef kiln_tensor (*oc_op1)(kiln_tensor);
typedef double (*oc_ref1)(double);

typedef enum {
    OC_KEEP,       /* the dtype is kept; integers unchanged; bool refused (floor, round, ...) */
    OC_FLOAT_MATH, /* integers and bool compute (and return) f32 (atan, log2, ...) */
    OC_FLOAT_ONLY, /* integers and bool refused (the activations) */
    OC_BOOL_OUT,   /* bool out for every dtype (isnan, ...) */
} oc_kind;

typedef struct {
    const char *name; /* the public name, e.g. "kiln_floor" */
    oc_op1 op;
    oc_ref1 ref;
    double lo, hi; /* input range */
    oc_kind kind;
} oc_unary;

static inline bool oc_accepts(const oc_unary *uc, kiln_dtype d) {
    if (d == KILN_BOOL) return uc->kind == OC_FLOAT_MATH || uc->kind == OC_BOOL_OUT;
    return uc->kind != OC_FLOAT_ONLY || ew_is_float(d);
}

static inline kiln_dtype oc_result_dtype(const oc_unary *uc, kiln_dtype in) {
    if (uc->kind == OC_BOOL_OUT) return KILN_BOOL;
    return uc->kind == OC_FLOAT_MATH && !ew_is_float(in) ? KILN_F32 : in;
}

/* vmath's few ulp in f32 (exact ops pass these too), libm in f64, one rounding in f16/bf16. */
static inline void oc_tolerance(kiln_dtype rd, double *rtol, double *atol) {
    *rtol = ew_rtol(rd);
    *atol = 0;
    switch (rd) {
    case KILN_F32: *rtol = 4e-6, *atol = 1e-7; break;
    case KILN_F64: *rtol = 1e-13, *atol = 1e-15; break;
    case KILN_F16: *atol = 1e-4; break;
    case KILN_BF16: *atol = 1e-3; break;
    default: break;
    }
}

/* y (consumed) is uc on in[0..n) of dtype dt: checks the dtype and every element. Signed
 * zeros must match where the reference is zero (ceil(-0.5) = -0). */
static inline void oc_check_result(const oc_unary *uc, kiln_tensor y, const double *in, int64_t n, kiln_dtype dt,
                                   const char *what) {
    kiln_dtype rd = oc_result_dtype(uc, dt);
    double *got = ew_read(y, rd, n);
    if (!got) return;
    double *want = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) want[i] = ew_round(rd, uc->ref(in[i]));
    double rtol, atol;
    oc_tolerance(rd, &rtol, &atol);
    char label[160];
    snprintf(label, sizeof label, "%s %s %s", uc->name, kiln_dtype_name(dt), what);
    EW_EXPECT_CLOSE(label, got, want, n, rtol, atol);
    int64_t zero_signs = 0;
    for (int64_t i = 0; i < n; i++)
        if (want[i] == 0 && got[i] == 0 && ew_is_float(rd) && !signbit(want[i]) != !signbit(got[i])) zero_signs++;
    KT_CHECK_MSG(zero_signs == 0, "%s: %lld zeros of the wrong sign", label, (long long)zero_signs);
    free(got);
    free(want);
}

/* Every accepted dtype in every layout, special values in f32 and f64, a long dense run, an
 * empty and a 0-d tensor, and in-place reuse of a single-owner f32 buffer. */
static inline void oc_check_unary(const oc_unary *uc, const double *specials, int n_specials) {
    ew_mark m = ew_mark_now();
    enum { R = 7, C = 19, N = 70001 };
    double in[R * C];
    for (int d = 0; d < EW_NDTYPES; d++) {
        kiln_dtype dt = ew_dtypes[d];
        if (!oc_accepts(uc, dt)) continue;
        ew_values(in, R * C, dt, uc->lo, uc->hi);
        for (int l = 0; l < EW_NLAYOUTS; l++)
            oc_check_result(uc, uc->op(ew_matrix(dt, R, C, in, (ew_layout)l)), in, R * C, dt, ew_layout_names[l]);
    }
    double *sp = malloc(sizeof(double) * (size_t)n_specials);
    for (int d = 0; d < 2; d++) {
        kiln_dtype dt = d ? KILN_F64 : KILN_F32;
        for (int i = 0; i < n_specials; i++) sp[i] = ew_round(dt, specials[i]);
        oc_check_result(uc, uc->op(ew_tensor(dt, KILN_SHAPE(n_specials), sp)), sp, n_specials, dt, "special");
    }
    free(sp);
    double *big = malloc(sizeof(double) * N);
    for (int d = 0; d < 2; d++) {
        kiln_dtype dt = d ? KILN_F64 : KILN_F32;
        ew_values(big, N, dt, uc->lo, uc->hi);
        oc_check_result(uc, uc->op(ew_tensor(dt, KILN_SHAPE(N), big)), big, N, dt, "large");
    }
    ew_values(big, 1, KILN_F32, uc->lo, uc->hi);
    oc_check_result(uc, uc->op(ew_tensor(KILN_F32, KILN_SHAPE(0), big)), big, 0, KILN_F32, "empty");
    oc_check_result(uc, uc->op(ew_tensor(KILN_F32, KILN_SCALAR_SHAPE, big)), big, 1, KILN_F32, "0-d");
    if (uc->kind != OC_BOOL_OUT) { /* a single owner is overwritten: no new buffer */
        ew_values(big, 1000, KILN_F32, uc->lo, uc->hi);
        kiln_tensor x = ew_tensor(KILN_F32, KILN_SHAPE(1000), big);
        kiln_memory_stats s0 = kiln_memory_stats_get(KILN_CPU);
        kiln_tensor y = uc->op(x);
        kiln_memory_stats s1 = kiln_memory_stats_get(KILN_CPU);
        KT_CHECK_MSG(s1.alloc_count == s0.alloc_count && s1.inplace_reuses == s0.inplace_reuses + 1, "%s in place",
                     uc->name);
        oc_check_result(uc, y, big, 1000, KILN_F32, "in place");
    }
    free(big);
    EW_NO_LEAKS(m);
}

/* The dtype rule: refused dtypes give KILN_ERR_DTYPE naming the op and this file's line;
 * KILN_NONE, a stale handle and a poisoned input give their statuses. */
static inline void oc_check_bad_input(const oc_unary *uc) {
    ew_mark m = ew_mark_now();
    int line;
    for (int d = 0; d < EW_NDTYPES; d++) {
        if (oc_accepts(uc, ew_dtypes[d])) continue;
        kiln_tensor x = kiln_ones(KILN_CPU, ew_dtypes[d], KILN_SHAPE(3));
        kiln_set_call_site(__FILE__, line = __LINE__);
        EW_EXPECT_ERROR(uc->op(x), KILN_ERR_DTYPE, uc->name, line);
    }
    kiln_set_call_site(__FILE__, line = __LINE__);
    EW_EXPECT_ERROR(uc->op(KILN_NONE), KILN_ERR_NULL, uc->name, line);
    kiln_tensor stale = ew_stale();
    kiln_set_call_site(__FILE__, line = __LINE__);
    EW_EXPECT_ERROR(uc->op(stale), KILN_ERR_STALE_HANDLE, "kiln_neg", line);
    kiln_tensor bad = EW_POISONED(); line = __LINE__;
    EW_EXPECT_ERROR(uc->op(bad), KILN_ERR_SHAPE, "kiln_reshape", line);
    kiln_clear_error();
    EW_NO_LEAKS(m);
}

/* ---- gradients ---------------------------------------------------------------------------- */
/* fn(a x + b) on a transposed input, so the backward runs on a non-contiguous view too. */
typedef struct {
    oc_op1 op;
    double a, b;
} oc_grad_ctx;

static inline kiln_tensor oc_grad_fn(kiln_tensor *in, void *ctx) {
    const oc_grad_ctx *g = ctx;
    return g->op(kiln_add_scalar(kiln_mul_scalar(kiln_transpose(in[0], 0, 1), g->a), g->b));
}

static inline void oc_gradcheck(const char *name, oc_op1 op, double a, double b) {
    oc_grad_ctx g = {op, a, b};
    kiln_shape shapes[1] = {KILN_SHAPE(3, 4)};
    GC_CHECK(name, oc_grad_fn, &g, 1, shapes, 1e-6);
}

#endif
