/* The fused CPU kernel's register-level fast path (src/backend/cpu/fused_vec.c): f32 chains of
 * the simple ops over dense and one-value inputs equal KILN_FUSION=0 bit for bit, with NaN
 * (on either side and both), infinities and signed zeros among the values, at sizes around the
 * chunk (64 or 128 floats) and past the size where groups split over threads, with outputs
 * written with streaming stores and without; with an intermediate kept (two outputs) and run in place over an
 * input; each op with its operands in each of the evaluator's forms (loaded, the accumulator,
 * spilled); a group of 16 ops keeping half its values; on AVX-512 and on AVX2 (KILN_ISA). */
#include <kiln.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/fused-impl.h"
#include "backend/cpu/vmath.h"
#include "engine/fusion.h"
#include "kiln_test.h"

#define BIG ((int64_t)3 << 20) /* 12 MiB of f32: several tasks; streamed below 12 MiB */

static const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.5f, -3.25f, INFINITY, -INFINITY, NAN, -NAN, 1e-40f, 7.0f};
#define N_SPECIAL ((int)(sizeof special / sizeof special[0]))

static void fill(float *v, int64_t n, unsigned seed) {
    srand(seed);
    for (int64_t i = 0; i < n; i++)
        v[i] = rand() % 4 == 0 ? special[rand() % N_SPECIAL] : (float)(rand() % 2001 - 1000) / 64.0f;
}

/* Every op of the fast path; kept: the intermediate the caller also reads (a second output). */
static kiln_tensor chain(kiln_tensor a, kiln_tensor b, kiln_tensor one, kiln_tensor *kept) {
    kiln_tensor t = kiln_add_scalar(kiln_mul_scalar(kiln_ref(a), 0.5), 1.0);
    t = kiln_mul(kiln_sqrt(kiln_abs(t)), kiln_ref(b));
    t = kiln_add(t, kiln_ref(a)); /* both NaN: the NaN of the left operand */
    t = kiln_sub(kiln_div(t, kiln_ref(b)), kiln_ref(one));
    if (kept) *kept = kiln_ref(t);
    t = kiln_maximum(t, kiln_mul(kiln_ref(b), kiln_ref(one)));
    t = kiln_minimum(t, kiln_ref(a));
    t = kiln_clamp(kiln_neg(kiln_relu(t)), -4.0, NAN);
    return kiln_clamp(kiln_mul(t, kiln_ref(a)), -100.0, 100.0);
}

/* Runs chain over n elements, fused or not, into out (and the kept value into mid). */
static void run(const float *a, const float *b, int64_t n, bool fused, float *out, float *mid) {
    kiln_fusion_set_enabled(fused);
    kiln_tensor x = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(n), a);
    kiln_tensor y = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(n), b);
    kiln_tensor one = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(1), &b[n / 2]); /* stride 0 */
    KT_CHECK(kiln_sync() == KILN_OK);
    kiln_tensor kept = {0};
    kiln_tensor r = chain(x, y, one, mid ? &kept : NULL);
    KT_CHECK(kiln_into_data(r, out, sizeof(float) * (size_t)n) == KILN_OK);
    if (mid) KT_CHECK(kiln_into_data(kept, mid, sizeof(float) * (size_t)n) == KILN_OK);
    kiln_release(x), kiln_release(y), kiln_release(one);
}

static void compare_sizes(const char *isa) {
    static const int64_t sizes[] = {1, 63, 64, 65, 127, 128, 129, 1000, 4096 + 77, BIG + 5};
    float *a = malloc(sizeof(float) * (size_t)(BIG + 8) * 6);
    KT_CHECK(a != NULL);
    if (!a) return;
    float *b = a + BIG + 8, *on = b + BIG + 8, *off = on + BIG + 8, *mid_on = off + BIG + 8, *mid_off = mid_on + BIG + 8;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int64_t n = sizes[k];
        size_t bytes = sizeof(float) * (size_t)n;
        fill(a, n, (unsigned)k + 1);
        fill(b, n, (unsigned)k + 101);
        bool keep = k % 2 == 1;
        run(a, b, n, false, off, keep ? mid_off : NULL);
        run(a, b, n, true, on, keep ? mid_on : NULL);
        KT_CHECK_MSG(memcmp(on, off, bytes) == 0, "%s n %lld differs", isa, (long long)n);
        if (keep) KT_CHECK_MSG(memcmp(mid_on, mid_off, bytes) == 0, "%s n %lld: kept value differs", isa, (long long)n);
    }
    free(a);
}

/* Not under KILN_ISA=scalar (no fast path then): the portable loops' vector body and scalar
 * tail disagree on which of two NaNs x + y returns (gcc swaps the operands of one of them), so
 * a NaN-signed sum there depends on where a block or thread range ends. */
KT_TEST(vec_chains_equal_unfused) {
    if (strcmp(kiln__vmath_isa(), "scalar") == 0) return;
    bool was = kiln_fusion_enabled();
    int64_t stream = atomic_load(&kiln__fused_stream_bytes);
    atomic_store(&kiln__fused_stream_bytes, (int64_t)4 << 20); /* BIG's outputs are streamed */
    compare_sizes(kiln__vmath_isa());
    if (strcmp(kiln__vmath_isa(), "avx512") == 0) { /* the AVX2 version too */
        KT_CHECK(kiln__vmath_force_isa("avx2") == 0);
        compare_sizes("avx2");
        KT_CHECK(kiln__vmath_force_isa(NULL) == 0);
    }
    atomic_store(&kiln__fused_stream_bytes, (int64_t)1 << 40); /* and written with plain stores */
    compare_sizes(kiln__vmath_isa());
    atomic_store(&kiln__fused_stream_bytes, stream);
    kiln_fusion_set_enabled(was);
}

/* x * 2 + 1 written over x itself (no other handle to x): the chunk reads each input element
 * before the store over it. */
KT_TEST(vec_chain_in_place) {
    const int64_t n = BIG + 3;
    float *v = malloc(sizeof(float) * (size_t)n * 2);
    KT_CHECK(v != NULL);
    if (!v) return;
    fill(v, n, 7);
    kiln_tensor x = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(n), v);
    kiln_tensor y = kiln_neg(kiln_add_scalar(kiln_mul_scalar(x, 2.0), 1.0));
    KT_CHECK(kiln_into_data(y, v + n, sizeof(float) * (size_t)n) == KILN_OK);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        float want = -(v[i] * 2.0f + 1.0f);
        bad += memcmp(&want, &v[n + i], sizeof want) != 0 && !(isnan(want) && isnan(v[n + i]));
    }
    KT_CHECK_MSG(bad == 0, "%d elements differ", bad);
    free(v);
}

/* Binary op k of the fast path (x first: which NaN comes out of x + y, x * y depends on it). */
static kiln_tensor binary(int k, kiln_tensor x, kiln_tensor y) {
    switch (k) {
    case 0: return kiln_add(x, y);
    case 1: return kiln_sub(x, y);
    case 2: return kiln_mul(x, y);
    case 3: return kiln_div(x, y);
    case 4: return kiln_maximum(x, y);
    default: return kiln_minimum(x, y);
    }
}
#define N_BINARY 6

static kiln_tensor unary(int k, kiln_tensor x) {
    switch (k) {
    case 0: return kiln_neg(x);
    case 1: return kiln_abs(x);
    case 2: return kiln_relu(x);
    case 3: return kiln_sqrt(x);
    default: return kiln_clamp(x, -2.0, 3.5);
    }
}
#define N_UNARY 5

/* Op k (binary first, then unary) with its operands in one of the evaluator's forms: loaded
 * from the inputs, the accumulator (the previous op's result, in registers), both operands the
 * accumulator, a value spilled to the register file against the accumulator, and a result read
 * again after later ops (kept in its register as well). */
static kiln_tensor apply(int k, kiln_tensor x, kiln_tensor y) {
    if (k < N_BINARY) return binary(k, x, y);
    kiln_release(y);
    return unary(k - N_BINARY, x);
}

static kiln_tensor op_form(int k, int form, kiln_tensor a, kiln_tensor b) {
#define OP(x, y) apply(k, x, y)
    kiln_tensor t;
    switch (form) {
    case 0: return kiln_neg(OP(kiln_ref(a), kiln_ref(b)));        /* both loaded (a group of two) */
    case 1: return OP(kiln_neg(kiln_ref(a)), kiln_ref(b));        /* x the accumulator */
    case 2: return OP(kiln_ref(b), kiln_neg(kiln_ref(a)));        /* y the accumulator */
    case 3: t = kiln_neg(kiln_ref(a)); return OP(kiln_ref(t), t); /* both the accumulator */
    case 4: t = kiln_neg(kiln_ref(a)); return OP(t, kiln_abs(kiln_ref(b))); /* x spilled, y the accumulator */
    default: /* x's result read again two ops later */
        t = OP(kiln_neg(kiln_ref(a)), kiln_ref(b));
        return kiln_sub(kiln_mul(kiln_ref(t), kiln_ref(b)), t);
    }
#undef OP
}
#define N_FORMS 6

static void compare_forms(const char *isa) {
    static const int64_t sizes[] = {129, 4096 + 77};
    const int64_t most = 4096 + 77;
    float *a = malloc(sizeof(float) * (size_t)most * 4);
    KT_CHECK(a != NULL);
    if (!a) return;
    float *b = a + most, *on = b + most, *off = on + most;
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
        int64_t n = sizes[z];
        fill(a, n, 11 + (unsigned)z);
        fill(b, n, 23 + (unsigned)z);
        for (int k = 0; k < N_BINARY + N_UNARY; k++)
            for (int form = 0; form < N_FORMS; form++) {
                for (int fused = 0; fused < 2; fused++) {
                    kiln_fusion_set_enabled(fused);
                    kiln_tensor x = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(n), a);
                    kiln_tensor y = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(n), b);
                    KT_CHECK(kiln_sync() == KILN_OK);
                    int64_t before = kiln__fusion_stats_get().ops_fused;
                    kiln_tensor r = op_form(k, form, x, y);
                    KT_CHECK(kiln_into_data(r, fused ? on : off, sizeof(float) * (size_t)n) == KILN_OK);
                    if (fused && kiln_engine_is_async()) /* the group ran fused (tiny ops let in) */
                        KT_CHECK_MSG(kiln__fusion_stats_get().ops_fused > before, "op %d form %d not fused", k, form);
                    kiln_release(x), kiln_release(y);
                }
                KT_CHECK_MSG(memcmp(on, off, sizeof(float) * (size_t)n) == 0, "%s n %lld op %d form %d differs", isa,
                             (long long)n, k, form);
            }
    }
    free(a);
}

/* Each op with its operands in each form (accumulator, loaded, spilled) equals the op unfused,
 * bit for bit. */
KT_TEST(vec_forms_equal_unfused) {
    if (strcmp(kiln__vmath_isa(), "scalar") == 0) return; /* (see vec_chains_equal_unfused) */
    bool was = kiln_fusion_enabled();
    kiln__fusion_set_fuse_tiny(1); /* groups of a few KiB fuse too */
    compare_forms(kiln__vmath_isa());
    if (strcmp(kiln__vmath_isa(), "avx512") == 0) {
        KT_CHECK(kiln__vmath_force_isa("avx2") == 0);
        compare_forms("avx2");
        KT_CHECK(kiln__vmath_force_isa(NULL) == 0);
    }
    kiln__fusion_set_fuse_tiny(-1);
    kiln_fusion_set_enabled(was);
}

/* A group as long as fusion makes them (16 ops), every other value kept by the caller too: each
 * kept value is spilled to its register and stored from there, the last one stored from the
 * accumulator, and one input is read by several steps. Returns the ops fused. */
#define LONG_OPS 16
#define LONG_KEPT (LONG_OPS / 2)
static int64_t long_group(const float *a, const float *b, int64_t n, bool fused, float *out) {
    kiln_fusion_set_enabled(fused);
    kiln_tensor x = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(n), a);
    kiln_tensor y = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(n), b);
    KT_CHECK(kiln_sync() == KILN_OK);
    int64_t before = kiln__fusion_stats_get().ops_fused;
    kiln_tensor kept[LONG_KEPT], t = kiln_ref(x);
    for (int i = 0; i < LONG_OPS; i++) {
        switch (i % 4) {
        case 0: t = kiln_mul(t, kiln_ref(y)); break;
        case 1: t = kiln_add_scalar(t, 0.25); break;
        case 2: t = kiln_maximum(kiln_ref(x), t); break;
        default: t = kiln_neg(t);
        }
        if (i % 2 == 1) kept[i / 2] = kiln_ref(t);
    }
    size_t bytes = sizeof(float) * (size_t)n;
    KT_CHECK(kiln_into_data(t, out, bytes) == KILN_OK);
    for (int k = 0; k < LONG_KEPT; k++) KT_CHECK(kiln_into_data(kept[k], out + (k + 1) * n, bytes) == KILN_OK);
    kiln_release(x), kiln_release(y);
    return kiln__fusion_stats_get().ops_fused - before;
}

static void compare_long(const char *isa, int64_t n) {
    float *a = malloc(sizeof(float) * (size_t)n * (2 + 2 * (LONG_KEPT + 1)));
    KT_CHECK(a != NULL);
    if (!a) return;
    float *b = a + n, *on = b + n, *off = on + n * (LONG_KEPT + 1);
    fill(a, n, 31);
    fill(b, n, 37);
    long_group(a, b, n, false, off);
    int64_t fused = long_group(a, b, n, true, on);
    if (kiln_engine_is_async()) KT_CHECK_MSG(fused == LONG_OPS, "%s: %lld ops fused", isa, (long long)fused);
    for (int k = 0; k <= LONG_KEPT; k++)
        KT_CHECK_MSG(memcmp(on + k * n, off + k * n, sizeof(float) * (size_t)n) == 0, "%s n %lld value %d differs", isa,
                     (long long)n, k);
    free(a);
}

KT_TEST(vec_long_group_equals_unfused) {
    if (strcmp(kiln__vmath_isa(), "scalar") == 0) return; /* (see vec_chains_equal_unfused) */
    bool was = kiln_fusion_enabled();
    kiln__fusion_set_fuse_tiny(1); /* the first op of 4173 floats joins the group too */
    int64_t stream = atomic_load(&kiln__fused_stream_bytes);
    for (int isa = 0; isa < 2; isa++) {
        if (isa == 1 && (strcmp(kiln__vmath_isa(), "avx512") != 0 || kiln__vmath_force_isa("avx2") != 0)) break;
        atomic_store(&kiln__fused_stream_bytes, (int64_t)1 << 40); /* plain stores */
        compare_long(kiln__vmath_isa(), 4096 + 77);
        atomic_store(&kiln__fused_stream_bytes, (int64_t)1 << 20); /* streamed: 9 outputs of 1 MiB */
        compare_long(kiln__vmath_isa(), ((int64_t)1 << 18) + 77);
    }
    KT_CHECK(kiln__vmath_force_isa(NULL) == 0);
    atomic_store(&kiln__fused_stream_bytes, stream);
    kiln__fusion_set_fuse_tiny(-1);
    kiln_fusion_set_enabled(was);
}

int main(void) {
    kt_mem_begin();
    KT_RUN(vec_chains_equal_unfused);
    KT_RUN(vec_chain_in_place);
    KT_RUN(vec_forms_equal_unfused);
    KT_RUN(vec_long_group_equals_unfused);
    return kt_finish();
}
