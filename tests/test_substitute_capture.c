/* A user's pattern that captures a number and one with a matrix product (kiln/custom_op.h's
 * KILN_PATTERN_NUMBER and KILN_PATTERN_MATMUL): exp(x * s) runs the user's kernel with s for
 * whatever s the composition was given (and x / s does not), relu(a @ b^T) runs the user's
 * kernel reading the transposed operand strided, exp(a) + exp(b) its kernel though exp(b) reads
 * nothing held; values against double references, and the
 * kernel's runs counted. Called directly, the op takes the number as a 0-d f64 tensor. A
 * number where a tensor is read, in a first operand or a unary op, or past the inputs is
 * refused at registration. With KILN_SYNC=1 nothing is queued, so nothing is replaced: the
 * values stay, the counts are 0. ctest runs it as is and with KILN_SYNC=1. */
#include <kiln.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "engine/substitute.h"
#include "kiln_test.h"

/* 1 when ops are queued (so a complete pattern is replaced), 0 with KILN_SYNC=1 */
static int64_t expect_one(void) { return kiln_engine_is_async() ? 1 : 0; }

static int64_t numel_of(const kiln_custom_operand *v) {
    int64_t n = 1;
    for (int d = 0; d < v->ndim; d++) n *= v->shape[d];
    return n;
}

/* The element offset of v's i-th element in row-major order. */
static int64_t offset_of(const kiln_custom_operand *v, int64_t i) {
    int64_t off = 0;
    for (int d = v->ndim - 1; d >= 0; d--) {
        off += (i % v->shape[d]) * v->strides[d];
        i /= v->shape[d];
    }
    return off;
}

/* ---- exp(x * s), s captured ------------------------------------------------------------------- */

static atomic_int scaled_exp_runs;

static kiln_status scaled_exp_shape(int n, const kiln_custom_meta *in, kiln_custom_meta *out, void *user) {
    (void)n, (void)user;
    if (in[0].dtype != KILN_F32) return kiln_custom_op_error("x: f32 only");
    if (in[1].dtype != KILN_F64 || in[1].ndim != 0) return kiln_custom_op_error("s: a 0-d f64");
    *out = in[0];
    return KILN_OK;
}

static kiln_status scaled_exp_cpu(int n, const kiln_custom_operand *in, const kiln_custom_operand *out, int threads,
                                  void *user) {
    (void)n, (void)threads, (void)user;
    atomic_fetch_add(&scaled_exp_runs, 1);
    double s = *(const double *)in[1].data;
    const float *x = in[0].data;
    float *y = out->data;
    for (int64_t i = 0; i < numel_of(out); i++) y[i] = (float)exp(x[offset_of(&in[0], i)] * s);
    return KILN_OK;
}

static kiln_custom_op *scaled_exp_op(void) {
    static kiln_custom_op *op;
    if (op) return op;
    static const kiln_pattern_node pattern[] = {
        {KILN_PATTERN_MUL, {KILN_PATTERN_INPUT(0), KILN_PATTERN_NUMBER(1)}, 0},
        {KILN_PATTERN_EXP, {0}, 0},
    };
    /* in_place: the product and exp each write over their only input (x's memory) */
    kiln_custom_op_def def = {.name = "scaled_exp", .n_inputs = 2, .shape = scaled_exp_shape, .cpu_kernel = scaled_exp_cpu,
                              .in_place = true, .pattern = pattern, .pattern_len = 2};
    KT_CHECK(kiln_custom_op_register(&def, &op) == KILN_OK);
    return op;
}

KT_TEST(pattern_captures_a_number) {
    kt_mem_begin();
    kiln_custom_op *op = scaled_exp_op();
    enum { N = 30 };
    float x[N], got[N];
    for (int i = 0; i < N; i++) x[i] = (float)(i - 15) / 4.0f;
    const double numbers[] = {0.125, 0.5, -3.0};
    for (int k = 0; k < 4; k++) { /* each number, then x / 8 (a division: no match) */
        double s = k < 3 ? numbers[k] : 1.0 / 8;
        kiln__subst_stats_reset();
        int runs = atomic_load(&scaled_exp_runs);
        kiln_tensor t = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(3, 10), x);
        kiln_tensor y = kiln_exp(k < 3 ? kiln_mul_scalar(t, s) : kiln_div_scalar(t, 8.0));
        KT_CHECK(kiln_into_data(y, got, sizeof got) == KILN_OK);
        for (int i = 0; i < N; i++) KT_NEAR(got[i], exp((double)x[i] * s), 1e-5 * exp((double)x[i] * s) + 1e-6);
        int64_t want = k < 3 ? expect_one() : 0;
        KT_CHECK_MSG(kiln__subst_stats_get().substituted == want, "k %d", k);
        KT_CHECK_MSG(atomic_load(&scaled_exp_runs) - runs == want, "k %d", k);
    }
    /* called directly: the number is a 0-d f64 tensor; a 0-d f32 one fails the shape rule */
    kiln_tensor args[2] = {kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(N), x), kiln_full(KILN_CPU, KILN_F64, KILN_SCALAR_SHAPE, 0.25)};
    KT_CHECK(kiln_into_data(kiln_custom_op_call(op, 2, args), got, sizeof got) == KILN_OK);
    for (int i = 0; i < N; i++) KT_NEAR(got[i], exp((double)x[i] * 0.25), 1e-5 * exp((double)x[i] * 0.25));
    kiln_tensor bad[2] = {kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(N), x), kiln_full(KILN_CPU, KILN_F32, KILN_SCALAR_SHAPE, 0.25)};
    KT_CHECK(kiln_into_data(kiln_custom_op_call(op, 2, bad), got, sizeof got) != KILN_OK);
    KT_CHECK(strstr(kiln_last_error(), "a 0-d f64") != NULL);
    kiln_sync();
    KT_MEM_CHECK();
}

/* ---- relu(a @ b) ----------------------------------------------------------------------------- */

static atomic_int relu_matmul_runs;

static kiln_status relu_matmul_shape(int n, const kiln_custom_meta *in, kiln_custom_meta *out, void *user) {
    (void)n, (void)user;
    if (in[0].dtype != KILN_F32 || in[1].dtype != KILN_F32) return kiln_custom_op_error("f32 only");
    if (in[0].ndim != 2 || in[1].ndim != 2 || in[0].shape[1] != in[1].shape[0])
        return kiln_custom_op_error("a [m, k] and b [k, n] only");
    *out = (kiln_custom_meta){.dtype = KILN_F32, .ndim = 2, .shape = {in[0].shape[0], in[1].shape[1]}};
    return KILN_OK;
}

static kiln_status relu_matmul_cpu(int n, const kiln_custom_operand *in, const kiln_custom_operand *out, int threads,
                                   void *user) {
    (void)n, (void)threads, (void)user;
    atomic_fetch_add(&relu_matmul_runs, 1);
    const kiln_custom_operand *a = &in[0], *b = &in[1];
    const float *av = a->data, *bv = b->data;
    float *y = out->data;
    for (int64_t i = 0; i < out->shape[0]; i++)
        for (int64_t j = 0; j < out->shape[1]; j++) {
            double acc = 0;
            for (int64_t k = 0; k < a->shape[1]; k++)
                acc += (double)av[i * a->strides[0] + k * a->strides[1]] * bv[k * b->strides[0] + j * b->strides[1]];
            y[i * out->shape[1] + j] = acc > 0 ? (float)acc : 0.0f;
        }
    return KILN_OK;
}

KT_TEST(pattern_with_a_matrix_product) {
    kt_mem_begin();
    static const kiln_pattern_node pattern[] = {
        {KILN_PATTERN_MATMUL, {KILN_PATTERN_INPUT(0), KILN_PATTERN_INPUT(1)}, 0},
        {KILN_PATTERN_RELU, {0}, 0},
    };
    kiln_custom_op_def def = {.name = "relu_matmul", .n_inputs = 2, .shape = relu_matmul_shape, .cpu_kernel = relu_matmul_cpu,
                              .pattern = pattern, .pattern_len = 2};
    kiln_custom_op *op;
    KT_CHECK(kiln_custom_op_register(&def, &op) == KILN_OK);
    enum { M = 5, K = 7, N = 4 };
    float a[M * K], b[N * K], got[M * N]; /* b as b^T's rows: the product reads it transposed */
    for (int i = 0; i < M * K; i++) a[i] = (float)((i * 7) % 11 - 5) / 3.0f;
    for (int i = 0; i < N * K; i++) b[i] = (float)((i * 5) % 13 - 6) / 4.0f;
    kiln__subst_stats_reset();
    int runs = atomic_load(&relu_matmul_runs);
    kiln_tensor ta = kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(M, K), a);
    kiln_tensor tb = kiln_transpose(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(N, K), b), 0, 1);
    KT_CHECK(kiln_into_data(kiln_relu(kiln_matmul(ta, tb)), got, sizeof got) == KILN_OK);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = 0;
            for (int k = 0; k < K; k++) acc += (double)a[i * K + k] * b[j * K + k];
            KT_NEAR(got[i * N + j], acc > 0 ? acc : 0, 1e-5);
        }
    KT_CHECK(kiln__subst_stats_get().substituted == expect_one());
    KT_CHECK(atomic_load(&relu_matmul_runs) - runs == expect_one());
    KT_MEM_CHECK();
}

/* ---- exp(a) + exp(b): two input-only nodes ------------------------------------------------- */

static atomic_int exp_sum_runs;

static kiln_status exp_sum_shape(int n, const kiln_custom_meta *in, kiln_custom_meta *out, void *user) {
    (void)n, (void)user;
    if (in[0].dtype != KILN_F32 || in[1].dtype != KILN_F32 || in[0].ndim != 1 || in[1].ndim != 1 ||
        in[0].shape[0] != in[1].shape[0])
        return kiln_custom_op_error("two f32 vectors of one length only");
    *out = in[0];
    return KILN_OK;
}

static kiln_status exp_sum_cpu(int n, const kiln_custom_operand *in, const kiln_custom_operand *out, int threads, void *user) {
    (void)n, (void)threads, (void)user;
    atomic_fetch_add(&exp_sum_runs, 1);
    const float *a = in[0].data, *b = in[1].data;
    float *y = out->data;
    for (int64_t i = 0; i < out->shape[0]; i++) y[i] = expf(a[i * in[0].strides[0]]) + expf(b[i * in[1].strides[0]]);
    return KILN_OK;
}

/* The hold lets go at an op that continues nothing held, except at an input-only node of a
 * pattern that has several: exp(b) does not read exp(a), yet the sum of both is replaced. */
KT_TEST(pattern_with_two_input_only_nodes) {
    kt_mem_begin();
    static const kiln_pattern_node pattern[] = {
        {KILN_PATTERN_EXP, {KILN_PATTERN_INPUT(0)}, 0},
        {KILN_PATTERN_EXP, {KILN_PATTERN_INPUT(1)}, 0},
        {KILN_PATTERN_ADD, {0, 1}, 0},
    };
    /* in_place: exp(a) and the sum write over a's memory */
    kiln_custom_op_def def = {.name = "exp_sum", .n_inputs = 2, .shape = exp_sum_shape, .cpu_kernel = exp_sum_cpu,
                              .in_place = true, .pattern = pattern, .pattern_len = 3};
    kiln_custom_op *op;
    KT_CHECK(kiln_custom_op_register(&def, &op) == KILN_OK);
    enum { N = 12 };
    float a[N], b[N], got[N];
    for (int i = 0; i < N; i++) a[i] = (float)(i - 6) / 3.0f, b[i] = (float)(5 - i) / 4.0f;
    kiln__subst_stats_reset();
    int runs = atomic_load(&exp_sum_runs);
    kiln_tensor ea = kiln_exp(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(N), a));
    kiln_tensor eb = kiln_exp(kiln_from_data(KILN_CPU, KILN_F32, KILN_SHAPE(N), b));
    KT_CHECK(kiln_into_data(kiln_add(ea, eb), got, sizeof got) == KILN_OK);
    for (int i = 0; i < N; i++) KT_NEAR(got[i], exp((double)a[i]) + exp((double)b[i]), 1e-5 * (exp(a[i]) + exp(b[i])));
    KT_CHECK(kiln__subst_stats_get().substituted == expect_one());
    KT_CHECK(atomic_load(&exp_sum_runs) - runs == expect_one());
    KT_MEM_CHECK();
}

/* ---- bad numbers ----------------------------------------------------------------------------- */

static void expect_refused(const kiln_pattern_node *nodes, int len, int n_inputs, const char *what) {
    kiln_custom_op_def def = {.name = "bad_number_op", .n_inputs = n_inputs, .shape = scaled_exp_shape,
                              .cpu_kernel = scaled_exp_cpu, .pattern = nodes, .pattern_len = len};
    kiln_custom_op *op = (kiln_custom_op *)1;
    KT_CHECK(kiln_custom_op_register(&def, &op) == KILN_ERR_INVALID_ARGUMENT);
    KT_CHECK(op == NULL);
    KT_CHECK_MSG(strstr(kiln_last_error(), what) != NULL, "'%s' lacks '%s'", kiln_last_error(), what);
    KT_CHECK(kiln_custom_op_find("bad_number_op") == NULL);
}

KT_TEST(bad_numbers_are_refused) {
    const int IN0 = KILN_PATTERN_INPUT(0), NUM0 = KILN_PATTERN_NUMBER(0), NUM1 = KILN_PATTERN_NUMBER(1);
    expect_refused((kiln_pattern_node[]){{KILN_PATTERN_MUL, {NUM1, IN0}, 0}}, 1, 2, "node 0's input 0 is -201");
    expect_refused((kiln_pattern_node[]){{KILN_PATTERN_EXP, {NUM0}, 0}}, 1, 1, "node 0's input 0 is -200");
    expect_refused((kiln_pattern_node[]){{KILN_PATTERN_MUL, {IN0, NUM0}, 0}}, 1, 1, "input 0 is a number in one node");
    expect_refused((kiln_pattern_node[]){{KILN_PATTERN_MUL, {IN0, KILN_PATTERN_NUMBER(3)}, 0}}, 1, 2,
                   "past the pattern's inputs");
}

int main(void) {
    KT_RUN(pattern_captures_a_number);
    KT_RUN(pattern_with_a_matrix_product);
    KT_RUN(pattern_with_two_input_only_nodes);
    KT_RUN(bad_numbers_are_refused);
    return kt_finish();
}
