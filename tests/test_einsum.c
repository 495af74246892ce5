/* kiln_einsum against a direct double-precision evaluation of the equation (a loop over every
 * letter's values, as torch.einsum defines it): permutations, sums, traces and diagonals,
 * outer products, contractions, batched products, three operands, implicit outputs; finite-
 * difference gradients; ellipses (broadcast, summed, implicit) against the same equation
 * with explicit letters on expanded operands; bad equations naming the problem, the op and
 * this file's line. */
#include "gradcheck.h"
#include "nn_util.h"

#define MAXN 3

/* ---- the reference: sum over all letters' values of the product of the operands ---------- */

typedef struct {
    char in[MAXN][9], out[9];
    int n;
    int64_t size[128];
} ref_eq;

static void ref_parse(const char *eq, ref_eq *r, int n) {
    memset(r, 0, sizeof *r);
    r->n = n;
    const char *arrow = strstr(eq, "->");
    int k = 0, len = 0;
    for (const char *p = eq; *p && p != arrow; p++) {
        if (*p == ' ') continue;
        if (*p == ',') r->in[k][len] = 0, k++, len = 0;
        else r->in[k][len++] = *p;
    }
    r->in[k][len] = 0;
    if (arrow) {
        int m = 0;
        for (const char *p = arrow + 2; *p; p++)
            if (*p != ' ') r->out[m++] = *p;
        r->out[m] = 0;
    } else { /* letters seen once, sorted */
        int count[128] = {0}, m = 0;
        for (int i = 0; i < n; i++)
            for (const char *p = r->in[i]; *p; p++) count[(int)*p]++;
        for (int ch = 0; ch < 128; ch++)
            if (count[ch] == 1) r->out[m++] = (char)ch;
        r->out[m] = 0;
    }
}

/* out[] (row-major over r->out) = sum over the other letters of prod_i x_i[...] */
static void ref_eval(const ref_eq *r, double *const *x, double *out, int64_t out_n) {
    char all[64];
    int na = 0;
    for (const char *p = r->out; *p; p++) all[na++] = *p;
    for (int i = 0; i < r->n; i++)
        for (const char *p = r->in[i]; *p; p++)
            if (!memchr(all, *p, (size_t)na)) all[na++] = *p;
    for (int64_t i = 0; i < out_n; i++) out[i] = 0;
    int64_t val[128] = {0}, total = 1;
    for (int a = 0; a < na; a++) total *= r->size[(int)all[a]];
    for (int64_t t = 0; t < total; t++) {
        int64_t rem = t;
        for (int a = na - 1; a >= 0; a--) val[(int)all[a]] = rem % r->size[(int)all[a]], rem /= r->size[(int)all[a]];
        double prod = 1;
        for (int i = 0; i < r->n; i++) {
            int64_t off = 0;
            for (const char *p = r->in[i]; *p; p++) off = off * r->size[(int)*p] + val[(int)*p];
            prod *= x[i][off];
        }
        int64_t o = 0;
        for (const char *p = r->out; *p; p++) o = o * r->size[(int)*p] + val[(int)*p];
        out[o] += prod;
    }
}

/* Runs eq on operands of the given shapes (random values) in f64 and f32 against the reference. */
static void einsum_case(const char *eq, int n, const kiln_shape *shapes) {
    ref_eq r;
    ref_parse(eq, &r, n);
    double *x[MAXN];
    for (int i = 0; i < n; i++) {
        int64_t m = kiln_shape_numel(shapes[i]);
        x[i] = malloc(sizeof(double) * (size_t)(m ? m : 1));
        fill(x[i], m, -1, 1);
        for (int d = 0; d < shapes[i].ndim; d++) r.size[(int)r.in[i][d]] = shapes[i].dims[d];
    }
    kiln_shape os = {(int32_t)strlen(r.out), {0}};
    int64_t on = 1;
    for (int d = 0; d < os.ndim; d++) on *= os.dims[d] = r.size[(int)r.out[d]];
    double *want = malloc(sizeof(double) * (size_t)(on ? on : 1)), *got = malloc(sizeof(double) * (size_t)(on ? on : 1));
    ref_eval(&r, x, want, on);
    for (int f32 = 0; f32 < 2; f32++) {
        kiln_tensor ts[MAXN];
        for (int i = 0; i < n; i++) ts[i] = tensor_of(f32 ? KILN_F32 : KILN_F64, shapes[i], x[i]);
        kiln_tensor y = kiln_einsum(eq, n, ts);
        KT_CHECK_MSG(has_shape(y, os), "%s: output shape", eq);
        if (!read_f64(y, got, on)) {
            fprintf(stderr, "  (%s)\n", eq);
            continue;
        }
        for (int64_t i = 0; i < on; i++)
            KT_CHECK_MSG(fabs(got[i] - want[i]) <= (f32 ? 1e-5 : 1e-12) * fmax(1, fabs(want[i])), "%s [%lld]: %.12g vs %.12g",
                         eq, (long long)i, got[i], want[i]);
    }
    for (int i = 0; i < n; i++) free(x[i]);
    free(want);
    free(got);
}

#define CASE(eq, ...)                                                                                 \
    do {                                                                                              \
        const kiln_shape shapes_[] = {__VA_ARGS__};                                                   \
        einsum_case(eq, (int)(sizeof shapes_ / sizeof shapes_[0]), shapes_);                          \
    } while (0)

KT_TEST(einsum_matches_reference) {
    kt_mem_begin();
    CASE("ij->ji", KILN_SHAPE(3, 4));
    CASE("ijk->kij", KILN_SHAPE(2, 3, 4));
    CASE("ij->", KILN_SHAPE(3, 4));
    CASE("ij->j", KILN_SHAPE(3, 4));
    CASE("ii->", KILN_SHAPE(4, 4));
    CASE("ii->i", KILN_SHAPE(4, 4));
    CASE("iij->j", KILN_SHAPE(3, 3, 2));
    CASE("i,j->ij", KILN_SHAPE(3), KILN_SHAPE(4));
    CASE("i,i->", KILN_SHAPE(5), KILN_SHAPE(5));
    CASE("i,i->i", KILN_SHAPE(5), KILN_SHAPE(5));
    CASE("ij,jk->ik", KILN_SHAPE(3, 4), KILN_SHAPE(4, 5));
    CASE("ij,kj->ik", KILN_SHAPE(3, 4), KILN_SHAPE(5, 4));
    CASE("ij,jk", KILN_SHAPE(3, 4), KILN_SHAPE(4, 2)); /* implicit: ik */
    CASE("ba,ac", KILN_SHAPE(3, 4), KILN_SHAPE(4, 2)); /* implicit: bc */
    CASE("bij,bjk->bik", KILN_SHAPE(2, 3, 4), KILN_SHAPE(2, 4, 5));
    CASE("bhqd,bhkd->bhqk", KILN_SHAPE(2, 2, 3, 4), KILN_SHAPE(2, 2, 5, 4));
    CASE("bij,bjk->kib", KILN_SHAPE(2, 3, 4), KILN_SHAPE(2, 4, 5));
    CASE("ij,ij->ij", KILN_SHAPE(3, 4), KILN_SHAPE(3, 4));
    CASE("ij,j->i", KILN_SHAPE(3, 4), KILN_SHAPE(4));
    CASE("ijk,jl->il", KILN_SHAPE(2, 3, 4), KILN_SHAPE(3, 5)); /* k summed before the product */
    CASE("ij,jk,kl->il", KILN_SHAPE(2, 3), KILN_SHAPE(3, 4), KILN_SHAPE(4, 5));
    CASE("ai,bi,ci->abc", KILN_SHAPE(2, 3), KILN_SHAPE(4, 3), KILN_SHAPE(2, 3));
    CASE("iI,Ij -> ij", KILN_SHAPE(2, 3), KILN_SHAPE(3, 2)); /* spaces, upper case */
    CASE("ij,jk->ik", KILN_SHAPE(0, 4), KILN_SHAPE(4, 5));    /* empty */
    CASE("ij,jk->ik", KILN_SHAPE(3, 0), KILN_SHAPE(0, 5));    /* empty contraction: zeros */
    KT_MEM_CHECK();
}

/* eq with ellipses against an explicit equation on the operands expanded to their broadcast shapes. */
static void ellipsis_case(const char *eq, const char *explicit_eq, int n, const kiln_shape *shapes, const kiln_shape *expanded) {
    kiln_tensor a[MAXN], b[MAXN];
    for (int i = 0; i < n; i++) {
        a[i] = kiln_randn(KILN_CPU, KILN_F64, shapes[i], (uint64_t)i + 11);
        b[i] = kiln_contiguous(kiln_expand(kiln_ref(a[i]), expanded[i]));
    }
    kiln_tensor got = kiln_einsum(eq, n, a), want = kiln_einsum(explicit_eq, n, b);
    kiln_shape gs = kiln_tensor_shape(got), ws = kiln_tensor_shape(want);
    KT_CHECK_MSG(gs.ndim == ws.ndim && gs.ndim >= 0 && memcmp(gs.dims, ws.dims, sizeof(int64_t) * (size_t)gs.ndim) == 0,
                 "%s: %d-d vs %d-d (%s)", eq, gs.ndim, ws.ndim, kiln_last_error());
    int64_t m = kiln_tensor_numel(want);
    double *x = malloc(sizeof(double) * (size_t)(m + 1)), *y = malloc(sizeof(double) * (size_t)(m + 1));
    bool ok_got = read_f64(got, x, m), ok_want = read_f64(want, y, m);
    for (int64_t i = 0; ok_got && ok_want && i < m; i++) KT_CHECK_MSG(fabs(x[i] - y[i]) < 1e-12, "%s [%lld]", eq, (long long)i);
    free(x);
    free(y);
}

#define SHAPES(...) ((const kiln_shape[]){__VA_ARGS__})

KT_TEST(einsum_ellipsis) {
    kt_mem_begin();
    ellipsis_case("...ij,...jk->...ik", "bij,bjk->bik", 2, SHAPES(KILN_SHAPE(2, 3, 4), KILN_SHAPE(2, 4, 5)),
                  SHAPES(KILN_SHAPE(2, 3, 4), KILN_SHAPE(2, 4, 5)));
    /* torch.einsum('...ij,...jk', [5,1,2,3], [4,3,2]) is [5, 4, 2, 2] */
    ellipsis_case("...ij,...jk", "abij,abjk->abik", 2, SHAPES(KILN_SHAPE(5, 1, 2, 3), KILN_SHAPE(4, 3, 2)),
                  SHAPES(KILN_SHAPE(5, 4, 2, 3), KILN_SHAPE(5, 4, 3, 2)));
    ellipsis_case("...ij->ij", "aij->ij", 1, SHAPES(KILN_SHAPE(2, 3, 4)), SHAPES(KILN_SHAPE(2, 3, 4)));
    ellipsis_case("i...->...", "ia->a", 1, SHAPES(KILN_SHAPE(2, 3)), SHAPES(KILN_SHAPE(2, 3)));
    ellipsis_case("...,...", "ab,ab->ab", 2, SHAPES(KILN_SHAPE(2, 3), KILN_SHAPE(3)), SHAPES(KILN_SHAPE(2, 3), KILN_SHAPE(2, 3)));
    ellipsis_case("...ii->...i", "aii->ai", 1, SHAPES(KILN_SHAPE(2, 3, 3)), SHAPES(KILN_SHAPE(2, 3, 3)));
    ellipsis_case("b...,b->...", "bxy,b->xy", 2, SHAPES(KILN_SHAPE(3, 2, 4), KILN_SHAPE(3)), SHAPES(KILN_SHAPE(3, 2, 4), KILN_SHAPE(3)));
    ellipsis_case("ij...,jk->ik...", "ij,jk->ik", 2, SHAPES(KILN_SHAPE(2, 3), KILN_SHAPE(3, 4)), SHAPES(KILN_SHAPE(2, 3), KILN_SHAPE(3, 4)));
    KT_MEM_CHECK();
}

typedef struct {
    const char *eq;
    int n;
} gc_eq;

static kiln_tensor run_einsum(kiln_tensor *in, void *ctx) {
    const gc_eq *g = ctx;
    return kiln_einsum(g->eq, g->n, in);
}

KT_TEST(einsum_gradients) {
    kt_mem_begin();
    gc_eq cases[] = {{"ij,jk->ik", 2}, {"bij,bjk->bik", 2}, {"ii->i", 1}, {"i,j->ij", 2}, {"ijk,jl->lik", 2}};
    const kiln_shape shapes[][2] = {{KILN_SHAPE(3, 4), KILN_SHAPE(4, 2)},
                                    {KILN_SHAPE(2, 3, 4), KILN_SHAPE(2, 4, 2)},
                                    {KILN_SHAPE(3, 3)},
                                    {KILN_SHAPE(3), KILN_SHAPE(2)},
                                    {KILN_SHAPE(2, 3, 2), KILN_SHAPE(3, 2)}};
    for (int i = 0; i < 5; i++) GC_CHECK(cases[i].eq, run_einsum, &cases[i], cases[i].n, shapes[i], 1e-7);
    gc_eq bcast = {"...ij,...jk->...ik", 2};
    GC_CHECK("...ij,...jk->...ik", run_einsum, &bcast, 2, ((kiln_shape[]){KILN_SHAPE(1, 2, 3), KILN_SHAPE(3, 3, 2)}), 1e-7);
    gc_eq three = {"ij,jk,kl->il", 3};
    GC_CHECK("ij,jk,kl->il", run_einsum, &three, 3, ((kiln_shape[]){KILN_SHAPE(2, 3), KILN_SHAPE(3, 2), KILN_SHAPE(2, 2)}), 1e-7);
    KT_MEM_CHECK();
}

static void bad_eq(const char *eq, int n, kiln_status st, const char *says) {
    kiln_tensor ts[2] = {kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2, 3)), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3, 2))};
    if (n < 2) kiln_release(ts[1]);
    kiln_tensor y = kiln_einsum(eq, n, ts);
    KT_CHECK(kiln_into_data(y, NULL, 0) == st);
    KT_CHECK_MSG(strstr(kiln_last_error(), says) != NULL && strstr(kiln_last_error(), "kiln_einsum") != NULL &&
                     strstr(kiln_last_error(), "test_einsum.c") != NULL,
                 "'%s': %s", eq, kiln_last_error());
}

KT_TEST(einsum_bad_input) {
    kt_mem_begin();
    bad_eq("ij,jk,kl->il", 2, KILN_ERR_INVALID_ARGUMENT, "more operand terms");
    bad_eq("ij->ij", 2, KILN_ERR_INVALID_ARGUMENT, "1 operand terms");
    bad_eq("ijk,jk->i", 2, KILN_ERR_INVALID_ARGUMENT, "3 subscripts for a 2-d");
    bad_eq("ij,ik->jk", 2, KILN_ERR_SHAPE, "sizes 2 and 3");
    bad_eq("ij,jk->iz", 2, KILN_ERR_INVALID_ARGUMENT, "'z' is in no operand");
    bad_eq("ij,jk->ii", 2, KILN_ERR_INVALID_ARGUMENT, "appears twice");
    bad_eq("..j,jk->k", 2, KILN_ERR_INVALID_ARGUMENT, "not part of '...'");
    bad_eq("...i...,jk->k", 2, KILN_ERR_INVALID_ARGUMENT, "two ellipses");
    bad_eq("ij,jk->...ik...", 2, KILN_ERR_INVALID_ARGUMENT, "two ellipses");
    bad_eq("...i,...i", 2, KILN_ERR_SHAPE, "do not broadcast");
    bad_eq("i1,jk->ik", 2, KILN_ERR_INVALID_ARGUMENT, "'1'");
    bad_eq("ij,jk-ik", 2, KILN_ERR_INVALID_ARGUMENT, "'-' not followed");
    bad_eq("ij,jk->ik,", 2, KILN_ERR_INVALID_ARGUMENT, "after the output");
    kiln_tensor mixed[2] = {kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2)), kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE(2))};
    KT_READ_ERROR(kiln_einsum("i,i->", 2, mixed), KILN_ERR_DTYPE, "kiln_einsum");
    kiln_tensor one[1] = {kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2))};
    KT_READ_ERROR(kiln_einsum(NULL, 1, one), KILN_ERR_NULL, "kiln_einsum");
    KT_READ_ERROR(kiln_einsum("i", 1, NULL), KILN_ERR_NULL, "kiln_einsum");
    KT_READ_ERROR(kiln_einsum("i", 0, one), KILN_ERR_INVALID_ARGUMENT, "kiln_einsum");
    kiln_tensor t = kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2)), stale = kiln_ref(t);
    kiln_release(stale);
    kiln_tensor st2[2] = {t, stale};
    KT_READ_ERROR(kiln_einsum("i,i->", 2, st2), KILN_ERR_STALE_HANDLE, "kiln_einsum");
    /* a poisoned operand's own error comes through */
    kiln_tensor po[2] = {kiln_reshape(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(2)), KILN_SHAPE(3)), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(3))};
    KT_READ_ERROR(kiln_einsum("i,i->", 2, po), KILN_ERR_SHAPE, "kiln_reshape");
    /* nine output letters, and an intermediate of ten dims: refused, not overflowed */
    kiln_tensor big[2] = {kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(1, 1, 1, 1, 1)), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(1, 1, 1, 1))};
    KT_READ_ERROR(kiln_einsum("abcde,fghi->abcdefghi", 2, big), KILN_ERR_INVALID_ARGUMENT, "kiln_einsum");
    kiln_tensor seven[7] = {kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1, 1, 1, 1, 1)), kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1, 1, 1, 1, 1))};
    for (int i = 2; i < 7; i++) seven[i] = kiln_ones(KILN_CPU, KILN_F32, KILN_SHAPE(1, 1));
    KT_READ_ERROR(kiln_einsum("abcde,fghij,af,bg,ch,di,ej->", 7, seven), KILN_ERR_UNSUPPORTED, "kiln_einsum");
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(einsum_matches_reference);
    KT_RUN(einsum_ellipsis);
    KT_RUN(einsum_gradients);
    KT_RUN(einsum_bad_input);
    return kt_finish();
}
