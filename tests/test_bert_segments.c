/* Attention within segments of a packed sequence (kiln__attention_segments, src/nn/attention.c
 * and src/ops/attention_segments.c), which kiln_bert_embed runs on a padded batch's tokens:
 * each row attends to its own sequence's rows only, against a double-precision reference, in
 * f32 and f64, with q, k and v as strided views of one joint projection (as BERT's) and as
 * separate tensors; bad input (lengths that do not add up, a length of 0, no lengths, wrong
 * ranks and dtypes, a tracked input, a poisoned one) is an error naming the op, never a crash.
 * Also kiln__bert_attention (src/models/bert_attention.c), the kernel of a sentence with no
 * padding, straight from the projection [b, s, 3, heads, hd], against the same reference. */
#include <kiln.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_test.h"
#include "models/bert-impl.h"
#include "nn/layers-impl.h"

enum { HEADS = 3, E = 5, EV = 4 };

/* Deterministic values in [-2, 2). */
static void fill(double *x, int64_t n, uint64_t seed) {
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (double)(seed >> 11) / (double)(1ull << 53) * 4.0 - 2.0;
    }
}

/* out[h][t][ev] for q, k [T, heads, E] and v [T, heads, Ev] (row-major), in double. */
static void reference(const double *q, const double *k, const double *v, int64_t T, int n, const int64_t *len,
                      double scale, double *out) {
    double *p = malloc(sizeof(double) * (size_t)T);
    for (int h = 0; h < HEADS; h++)
        for (int64_t s = 0, at = 0; s < n; at += len[s++])
            for (int64_t i = at; i < at + len[s]; i++) {
                double top = -INFINITY, sum = 0;
                for (int64_t j = at; j < at + len[s]; j++) {
                    double dot = 0;
                    for (int e = 0; e < E; e++) dot += q[(i * HEADS + h) * E + e] * k[(j * HEADS + h) * E + e];
                    p[j] = dot * scale;
                    top = fmax(top, p[j]);
                }
                for (int64_t j = at; j < at + len[s]; j++) sum += p[j] = exp(p[j] - top);
                for (int c = 0; c < EV; c++) {
                    double acc = 0;
                    for (int64_t j = at; j < at + len[s]; j++) acc += p[j] / sum * v[(j * HEADS + h) * EV + c];
                    out[(h * T + i) * EV + c] = acc;
                }
            }
    free(p);
}

/* [T, heads, d] data as a tensor of dtype seen as [heads, T, d] (a strided view). */
static kiln_tensor heads_first(kiln_dtype dtype, const double *x, int64_t T, int64_t d) {
    kiln_tensor t = kiln_cast(kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(T, HEADS, d), x), dtype);
    return kiln_permute(t, KILN_DIMS(1, 0, 2));
}

static void check_against_reference(kiln_dtype dtype, bool joint) {
    const int64_t len[4] = {1, 4, 7, 2};
    const int n = 4;
    int64_t T = 14;
    double *q = malloc(sizeof(double) * (size_t)(T * HEADS * E)), *k = malloc(sizeof(double) * (size_t)(T * HEADS * E));
    double *v = malloc(sizeof(double) * (size_t)(T * HEADS * EV)), *want = malloc(sizeof(double) * (size_t)(HEADS * T * EV));
    double *got = malloc(sizeof(double) * (size_t)(HEADS * T * EV));
    fill(q, T * HEADS * E, 1), fill(k, T * HEADS * E, 2), fill(v, T * HEADS * EV, 3);
    double scale = 0.7;
    reference(q, k, v, T, n, len, scale, want);
    kiln_tensor tq, tk, tv;
    if (joint) { /* one [T, 3, heads, E] projection, as BERT's (v's width E here) */
        double *qkv = malloc(sizeof(double) * (size_t)(T * 3 * HEADS * E));
        for (int64_t t = 0; t < T; t++)
            for (int i = 0; i < HEADS * E; i++) {
                qkv[(t * 3 + 0) * HEADS * E + i] = q[t * HEADS * E + i];
                qkv[(t * 3 + 1) * HEADS * E + i] = k[t * HEADS * E + i];
                qkv[(t * 3 + 2) * HEADS * E + i] = i % E < EV ? v[(t * HEADS + i / E) * EV + i % E] : 0;
            }
        kiln_tensor all = kiln_cast(kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(T, 3, HEADS, E), qkv), dtype);
        free(qkv);
        kiln_tensor part[3];
        for (int i = 0; i < 3; i++)
            part[i] = kiln_permute(kiln_squeeze(kiln_narrow(kiln_ref(all), 1, i, 1), 1), KILN_DIMS(1, 0, 2));
        kiln_release(all);
        tq = part[0], tk = part[1], tv = kiln_narrow(part[2], 2, 0, EV);
    } else {
        tq = heads_first(dtype, q, T, E), tk = heads_first(dtype, k, T, E), tv = heads_first(dtype, v, T, EV);
    }
    kiln_tensor out = kiln__attention_segments(tq, tk, tv, n, len, scale);
    kiln_shape s = kiln_tensor_shape(out);
    KT_CHECK(s.ndim == 3 && s.dims[0] == HEADS && s.dims[1] == T && s.dims[2] == EV);
    /* laid out [T, heads, Ev]: merging the heads is a view */
    kiln_tensor merged = kiln_reshape(kiln_permute(kiln_ref(out), KILN_DIMS(1, 0, 2)), KILN_SHAPE(T, HEADS * EV));
    KT_CHECK_MSG(kiln_tensor_status(merged) == KILN_OK, "%s", kiln_last_error());
    kiln_release(merged);
    KT_CHECK_MSG(kiln_into_data(kiln_cast(out, KILN_F64), got, sizeof(double) * (size_t)(HEADS * T * EV)) == KILN_OK, "%s",
                 kiln_last_error());
    double tol = dtype == KILN_F32 ? 2e-6 : 1e-13;
    for (int64_t i = 0; i < HEADS * T * EV; i++) KT_NEAR(got[i], want[i], tol);
    free(q), free(k), free(v), free(want), free(got);
}

KT_TEST(segments_match_reference) {
    kt_mem_begin();
    check_against_reference(KILN_F32, false);
    check_against_reference(KILN_F64, false);
    check_against_reference(KILN_F32, true);
    check_against_reference(KILN_F64, true);
    KT_MEM_CHECK();
}

/* An error of status st naming the op: out (consumed) must fail its read. */
static void expect_fails(kiln_tensor out, kiln_status st, const char *what) {
    float buf[HEADS * 6 * EV];
    kiln_status got = kiln_into_data(out, buf, sizeof buf);
    KT_CHECK_MSG(got == st, "status %s, expected %s (%s)", kiln_status_str(got), kiln_status_str(st), kiln_last_error());
    KT_CHECK_MSG(strstr(kiln_last_error(), "attention_segments") && strstr(kiln_last_error(), what), "%s lacks '%s'",
                 kiln_last_error(), what);
}

static kiln_tensor rnd(kiln_dtype dtype, int64_t a, int64_t b, int64_t c, uint64_t seed) {
    return kiln_randn(KILN_CPU, dtype, KILN_SHAPE(a, b, c), seed);
}

/* Over q [HEADS, 6, E], k [HEADS, 6, e_k] and v [HEADS, t_v, EV] of random values. */
static kiln_tensor segments(int64_t e_k, int64_t t_v, int64_t n, const int64_t *len) {
    return kiln__attention_segments(rnd(KILN_F32, HEADS, 6, E, 1), rnd(KILN_F32, HEADS, 6, e_k, 2), rnd(KILN_F32, HEADS, t_v, EV, 3),
                                    n, len, 1.0);
}

KT_TEST(segments_bad_input) {
    kt_mem_begin();
    const int64_t good[2] = {2, 4}, short_[2] = {2, 3}, zero[3] = {2, 0, 4}, over[2] = {INT64_MAX, 4};
    expect_fails(segments(E, 6, 2, short_), KILN_ERR_SHAPE, "add up to the 6 rows");
    expect_fails(segments(E, 6, 3, zero), KILN_ERR_SHAPE, "positive");
    expect_fails(segments(E, 6, 2, over), KILN_ERR_SHAPE, "positive");
    expect_fails(segments(E, 6, 2, NULL), KILN_ERR_SHAPE, "segment lengths");
    expect_fails(segments(E, 6, 0, good), KILN_ERR_SHAPE, "segment lengths");
    expect_fails(segments(E + 1, 6, 2, good), KILN_ERR_SHAPE, "[heads, T, E]");
    expect_fails(segments(E, 5, 2, good), KILN_ERR_SHAPE, "[heads, T, E]");
    /* a 2-d q, an integer dtype, mixed dtypes */
    expect_fails(kiln__attention_segments(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(6, E), 1), rnd(KILN_F32, HEADS, 6, E, 2),
                                          rnd(KILN_F32, HEADS, 6, EV, 3), 2, good, 1.0),
                 KILN_ERR_SHAPE, "[heads, T, E]");
    expect_fails(kiln__attention_segments(kiln_zeros(KILN_CPU, KILN_I32, KILN_SHAPE(HEADS, 6, E)),
                                          kiln_zeros(KILN_CPU, KILN_I32, KILN_SHAPE(HEADS, 6, E)),
                                          kiln_zeros(KILN_CPU, KILN_I32, KILN_SHAPE(HEADS, 6, EV)), 2, good, 1.0),
                 KILN_ERR_DTYPE, "f32 or f64");
    expect_fails(kiln__attention_segments(rnd(KILN_F32, HEADS, 6, E, 1), rnd(KILN_F64, HEADS, 6, E, 2),
                                          rnd(KILN_F32, HEADS, 6, EV, 3), 2, good, 1.0),
                 KILN_ERR_DTYPE, "f32 or f64");
    /* tracked: no gradient here */
    kiln_tensor w = rnd(KILN_F32, HEADS, 6, E, 1);
    KT_CHECK(kiln_require_grad(w) == KILN_OK);
    expect_fails(kiln__attention_segments(w, rnd(KILN_F32, HEADS, 6, E, 2), rnd(KILN_F32, HEADS, 6, EV, 3), 2, good, 1.0),
                 KILN_ERR_UNSUPPORTED, "no gradient");
    /* a poisoned input: its own error comes through */
    kiln_tensor bad = kiln_add(rnd(KILN_F32, HEADS, 6, E, 1), rnd(KILN_F32, 2, 2, 2, 4));
    kiln_tensor out = kiln__attention_segments(bad, rnd(KILN_F32, HEADS, 6, E, 2), rnd(KILN_F32, HEADS, 6, EV, 3), 2, good, 1.0);
    float buf[HEADS * 6 * EV];
    KT_CHECK(kiln_into_data(out, buf, sizeof buf) == KILN_ERR_SHAPE);
    KT_CHECK_MSG(strstr(kiln_last_error(), "kiln_add") != NULL, "%s", kiln_last_error());
    KT_MEM_CHECK();
}

/* kiln__bert_attention over qkv [b, s, 3, HEADS, d] against the double-precision reference of
 * each sentence (scale 1: BERT's q is pre-scaled): s = 16 (one register of scores), 21 and 37
 * (a partial one), d = 5 and 32 (context rows of one and two registers). */
static void check_bert_attention(int64_t b, int64_t s, int64_t d) {
    int64_t T = b * s, n = T * 3 * HEADS * d;
    double *qkv = malloc(sizeof(double) * (size_t)n), *got = malloc(sizeof(double) * (size_t)(T * HEADS * d));
    fill(qkv, n, (uint64_t)(s * 31 + d));
    kiln_tensor out = kiln__bert_attention(kiln_cast(kiln_from_data(KILN_CPU, KILN_F64, KILN_SHAPE(b, s, 3, HEADS, d), qkv), KILN_F32));
    kiln_shape sh = kiln_tensor_shape(out);
    KT_CHECK(sh.ndim == 4 && sh.dims[0] == b && sh.dims[1] == s && sh.dims[2] == HEADS && sh.dims[3] == d);
    KT_CHECK_MSG(kiln_into_data(kiln_cast(out, KILN_F64), got, sizeof(double) * (size_t)(T * HEADS * d)) == KILN_OK, "%s",
                 kiln_last_error());
    double *p = malloc(sizeof(double) * (size_t)s), worst = 0;
    for (int64_t t0 = 0; t0 < T; t0 += s)
        for (int h = 0; h < HEADS; h++)
            for (int64_t i = t0; i < t0 + s; i++) {
                double top = -INFINITY, sum = 0;
                for (int64_t j = 0; j < s; j++) {
                    double dot = 0;
                    for (int64_t e = 0; e < d; e++) /* q, k, v of row r at (r * 3 + part) * HEADS + h */
                        dot += (double)(float)qkv[((i * 3 + 0) * HEADS + h) * d + e] * (double)(float)qkv[(((t0 + j) * 3 + 1) * HEADS + h) * d + e];
                    top = fmax(top, p[j] = dot);
                }
                for (int64_t j = 0; j < s; j++) sum += p[j] = exp(p[j] - top);
                for (int64_t e = 0; e < d; e++) {
                    double want = 0;
                    for (int64_t j = 0; j < s; j++) want += p[j] / sum * (double)(float)qkv[(((t0 + j) * 3 + 2) * HEADS + h) * d + e];
                    worst = fmax(worst, fabs(got[(i * HEADS + h) * d + e] - want));
                }
            }
    /* scores up to ~d * 4 in size: their f32 rounding, times a slope of at most 2 * |v| */
    KT_CHECK_MSG(worst <= 4e-6 * (double)d, "b %lld s %lld d %lld: off by %g", (long long)b, (long long)s, (long long)d, worst);
    free(qkv), free(got), free(p);
}

KT_TEST(bert_attention_matches_reference) {
    if (!kiln__bert_attention_supported()) {
        fprintf(stderr, "  no AVX-512 here (or KILN_ISA): kiln__bert_attention is not used, not tested\n");
        return;
    }
    kt_mem_begin();
    check_bert_attention(1, 16, 32);
    check_bert_attention(2, 21, 5);
    check_bert_attention(3, 37, 32);
    check_bert_attention(1, 1, 5);
    KT_MEM_CHECK();
}

/* A NaN score (one k element of head 0) makes head 0's context NaN for every query, as the
 * general path's softmax does, and leaves the other heads finite. */
KT_TEST(bert_attention_nan_score_gives_nan_row) {
    if (!kiln__bert_attention_supported()) return;
    kt_mem_begin();
    enum { S = 4, D = 8 };
    float qkv[S * 3 * HEADS * D], got[S * HEADS * D];
    for (int i = 0; i < S * 3 * HEADS * D; i++) qkv[i] = 0.25f * (float)(i % 7) - 0.5f;
    qkv[((2 * 3 + 1) * HEADS + 0) * D + 3] = NAN; /* token 2's k, head 0 */
    kiln_tensor out = kiln__bert_attention(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(1, S, 3, HEADS, D), qkv));
    KT_CHECK_MSG(kiln_into_data(out, got, sizeof got) == KILN_OK, "%s", kiln_last_error());
    for (int i = 0; i < S; i++)
        for (int h = 0; h < HEADS; h++)
            for (int e = 0; e < D; e++) {
                float v = got[(i * HEADS + h) * D + e];
                KT_CHECK_MSG(h == 0 ? isnan(v) : isfinite(v), "token %d head %d: %g", i, h, (double)v);
            }
    KT_MEM_CHECK();
}

/* Wrong input, queued and read later: an error naming the op and this file. */
KT_TEST(bert_attention_bad_input) {
    kt_mem_begin();
    KT_READ_ERROR(kiln__bert_attention(kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE(1, 4, 3, 2, 8))), KILN_ERR_INVALID_ARGUMENT,
                  "bert_attention");
    KT_READ_ERROR(kiln__bert_attention(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(4, 3, 2, 8))), KILN_ERR_INVALID_ARGUMENT,
                  "bert_attention");
    KT_READ_ERROR(kiln__bert_attention(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(1, 4, 2, 2, 8))), KILN_ERR_INVALID_ARGUMENT,
                  "bert_attention");
    /* a poisoned input: its own error comes through */
    kiln_tensor bad = kiln_add(kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(1, 4, 3, 2, 8)), kiln_zeros(KILN_CPU, KILN_F32, KILN_SHAPE(5)));
    float buf[64];
    KT_CHECK(kiln_into_data(kiln__bert_attention(bad), buf, sizeof buf) == KILN_ERR_SHAPE);
    KT_CHECK_MSG(strstr(kiln_last_error(), "kiln_add") != NULL, "%s", kiln_last_error());
    KT_MEM_CHECK();
}

int main(void) {
    KT_RUN(segments_match_reference);
    KT_RUN(segments_bad_input);
    KT_RUN(bert_attention_matches_reference);
    KT_RUN(bert_attention_nan_score_gives_nan_row);
    KT_RUN(bert_attention_bad_input);
    return kt_finish();
}
