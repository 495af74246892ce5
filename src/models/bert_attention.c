/* BERT's attention over sentences with no padding (a single sentence, or a batch of equal
 * lengths), straight from the joint projection: qkv [b, s, 3, heads, hd] (q pre-scaled by
 * 1/sqrt(hd) in the weights) gives the context [b, s, heads, hd], softmax(q k^T) v per sentence
 * and head, as one registered custom op ("bert_attention": queued, poisoned and profiled like
 * any op). Why not kiln_scaled_dot_product_attention: at 16 tokens a head's two products are 8k
 * multiply-adds each, and the general kernel spent ~10x that in two BLAS calls per head and five
 * vector-function calls per row of 16 scores (15 us a layer against ~2 here, one thread). Here a
 * head's keys are transposed once into a scratch block so each query row's scores are 16 keys to a
 * register (hd broadcast multiply-adds), the softmax runs on those registers, and the context is
 * the probabilities broadcast over v's rows. AVX-512 only: kiln__bert_attention_supported says
 * whether to call it (KILN_ISA and the CPU); the encoder runs the general path otherwise. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/vmath.h"
#include "kiln/custom_op.h"
#include "kiln/tensor.h"
#include "models/bert-impl.h"
#include "nn/layers-impl.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "backend/cpu/vexp_avx512.h"
#define HAVE_AVX512 1
#else
#define HAVE_AVX512 0
#endif

#define LANES 16

bool kiln__bert_attention_supported(void) {
#if HAVE_AVX512
    return strcmp(kiln__vmath_isa(), "avx512") == 0 && __builtin_cpu_supports("avx512f");
#else
    return false;
#endif
}

static int64_t round_up(int64_t n) { return (n + LANES - 1) / LANES * LANES; }

typedef struct {
    const float *qkv;
    const int64_t *st; /* qkv's strides [b, s, 3, heads, hd] */
    int64_t s, heads, hd;
    float *out; /* [b, s, heads, hd], dense */
    atomic_bool oom; /* set by any chunk's thread */
} att_job;

#if HAVE_AVX512
/* Sentence and head pairs [begin, end): scratch kt [hd][s16] (the keys transposed, zero past s),
 * vb [s][hd16] (the values, zero past hd) and one row of s16 scores. */
KILN__AVX512_TARGET static void att_heads(void *ctx, int64_t begin, int64_t end) {
    att_job *j = ctx;
    const int64_t s = j->s, hd = j->hd, s16 = round_up(s), hd16 = round_up(hd), *st = j->st;
    float *kt = malloc(sizeof(float) * (size_t)(hd * s16 + s * hd16 + s16) + 64);
    if (!kt) {
        atomic_store(&j->oom, true);
        return;
    }
    float *vb = kt + hd * s16, *p = vb + s * hd16;
    for (int64_t bh = begin; bh < end; bh++) {
        int64_t b = bh / j->heads, h = bh % j->heads;
        const float *base = j->qkv + b * st[0] + h * st[3];
        memset(kt, 0, sizeof(float) * (size_t)(hd * s16 + s * hd16));
        for (int64_t t = 0; t < s; t++)
            for (int64_t e = 0; e < hd; e++) {
                kt[e * s16 + t] = base[t * st[1] + st[2] + e * st[4]];
                vb[t * hd16 + e] = base[t * st[1] + 2 * st[2] + e * st[4]];
            }
        for (int64_t i = 0; i < s; i++) {
            const float *q = base + i * st[1];
            __m512 top = _mm512_set1_ps(-INFINITY);
            for (int64_t c = 0; c < s16; c += LANES) {
                __m512 acc = _mm512_setzero_ps();
                for (int64_t e = 0; e < hd; e++) acc = _mm512_fmadd_ps(_mm512_set1_ps(q[e * st[4]]), _mm512_loadu_ps(kt + e * s16 + c), acc);
                __mmask16 live = (__mmask16)(s - c >= LANES ? 0xFFFF : (1u << (s - c)) - 1);
                acc = _mm512_mask_blend_ps(live, _mm512_set1_ps(-INFINITY), acc);
                top = _mm512_max_ps(top, acc);
                _mm512_storeu_ps(p + c, acc);
            }
            /* (a NaN score: max_ps skips it, and e^NaN keeps it: the row's context is NaN, as
             * the general path's) */
            __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(top)), sum = _mm512_setzero_ps();
            for (int64_t c = 0; c < s16; c += LANES) {
                __m512 e = kiln__vexp_neg_avx512(_mm512_sub_ps(_mm512_loadu_ps(p + c), mx));
                __mmask16 live = (__mmask16)(s - c >= LANES ? 0xFFFF : (1u << (s - c)) - 1);
                e = _mm512_maskz_mov_ps(live, e);
                sum = _mm512_add_ps(sum, e);
                _mm512_storeu_ps(p + c, e);
            }
            __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
            float *o = j->out + ((b * s + i) * j->heads + h) * hd;
            for (int64_t c = 0; c < hd16; c += LANES) {
                __m512 acc = _mm512_setzero_ps();
                for (int64_t t = 0; t < s; t++) acc = _mm512_fmadd_ps(_mm512_set1_ps(p[t]), _mm512_loadu_ps(vb + t * hd16 + c), acc);
                __mmask16 live = (__mmask16)(hd - c >= LANES ? 0xFFFF : (1u << (hd - c)) - 1);
                _mm512_mask_storeu_ps(o + c, live, _mm512_mul_ps(acc, inv));
            }
        }
    }
    free(kt);
}
#endif

static kiln_status att_shape(int n, const kiln_custom_meta *in, kiln_custom_meta *out, void *user) {
    (void)n, (void)user;
    const kiln_custom_meta *x = &in[0];
    if (x->dtype != KILN_F32) return kiln_custom_op_error("qkv must be f32, not %s", kiln_dtype_name(x->dtype));
    if (x->ndim != 5 || x->shape[2] != 3)
        return kiln_custom_op_error("qkv must be [batch, seq, 3, heads, head size] (%d dims given)", x->ndim);
    *out = *x;
    out->ndim = 4;
    out->shape[2] = x->shape[3], out->shape[3] = x->shape[4];
    return KILN_OK;
}

static kiln_status att_cpu(int n, const kiln_custom_operand *in, const kiln_custom_operand *out, int threads, void *user) {
    (void)n, (void)threads, (void)user;
    if (!kiln__bert_attention_supported()) return kiln_custom_op_error("needs AVX-512 (KILN_ISA=avx512)"), KILN_ERR_UNSUPPORTED;
    att_job j = {.qkv = in[0].data, .st = in[0].strides, .s = in[0].shape[1], .heads = in[0].shape[3], .hd = in[0].shape[4],
                 .out = out->data};
    atomic_init(&j.oom, false);
    int64_t pairs = in[0].shape[0] * j.heads;
    if (pairs == 0 || j.s == 0 || j.hd == 0) return KILN_OK;
#if HAVE_AVX512
    /* a pair is ~2 s^2 hd multiply-adds: below ~64k a chunk, a hand-off costs more than it saves */
    int64_t work = 2 * j.s * j.s * j.hd, grain = ((int64_t)1 << 16) / (work > 0 ? work : 1);
    kiln_parallel_for(pairs, grain > 0 ? grain : 1, att_heads, &j);
#endif
    return atomic_load(&j.oom) ? (kiln_custom_op_error("out of memory for the attention scratch"), KILN_ERR_OUT_OF_MEMORY) : KILN_OK;
}

static kiln_custom_op *att_op;
static pthread_once_t att_once = PTHREAD_ONCE_INIT;

static void att_register(void) {
    kiln_custom_op_def def = {.name = "bert_attention", .n_inputs = 1, .shape = att_shape, .cpu_kernel = att_cpu};
    if (kiln_custom_op_register(&def, &att_op) != KILN_OK) att_op = NULL;
}

kiln_tensor kiln__bert_attention(kiln_tensor qkv) {
    pthread_once(&att_once, att_register);
    if (!att_op) return kiln__nn_fail("bert_attention", 1, &qkv, KILN_ERR_INTERNAL, "the attention op is not registered");
    return kiln_custom_op_call(att_op, 1, &qkv);
}
