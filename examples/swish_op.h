/* A user's own swish (x * sigmoid(x)) registered as a kiln op: an AVX2 CPU kernel (picked at run
 * time, with a portable loop where the CPU lacks AVX2 or the input is strided), an OpenCL kernel,
 * and a backward that is a second registered op (swish_grad) with kernels of the same two kinds.
 * What examples/custom_swish.c registers and shows, and bench/bench_custom_swish.c measures
 * against kiln's composition and its built-in silu.
 *
 *   kiln_custom_op *swish = swish_register();   // once; NULL (kiln_last_error says why) on failure
 *   kiln_tensor y = kiln_custom_op_call(swish, 1, &x);
 */
#ifndef SWISH_OP_H
#define SWISH_OP_H

#include <kiln.h>
#include <math.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SWISH_HAVE_AVX2_KERNEL 1
#else
#define SWISH_HAVE_AVX2_KERNEL 0
#endif

static kiln_status swish_shape(int n, const kiln_custom_meta *in, kiln_custom_meta *out, void *user) {
    (void)n, (void)user;
    if (in[0].dtype != KILN_F32) return kiln_custom_op_error("swish takes f32 tensors"), KILN_ERR_DTYPE;
    *out = in[0];
    return KILN_OK;
}

#if SWISH_HAVE_AVX2_KERNEL
/* e^x for 8 floats: x = k ln2 + r with |r| <= ln2/2, e^r by its Taylor series to r^6 (relative
 * error under 2e-7 there), 2^k put into the exponent bits. x is clamped to where e^x is a
 * normal float. */
__attribute__((target("avx2,fma"))) static __m256 swish_exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693145752f), x); /* ln2 in two parts: r exact */
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(1.42860677e-6f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* What one call computes: swish(x), or (grad set) its gradient grad * s (1 + x (1 - s)) with
 * s = sigmoid(x). grad_step is 1 for a dense grad, 0 for one value broadcast (the gradient of a
 * sum arrives so). */
typedef struct {
    const float *x, *grad;
    int64_t grad_step;
    float *y;
} swish_job;

__attribute__((target("avx2,fma"))) static void swish_avx2_range(void *ctx, int64_t begin, int64_t end) {
    const swish_job *job = ctx;
    const __m256 one = _mm256_set1_ps(1.0f);
    int64_t i = begin;
    for (; i + 8 <= end; i += 8) {
        __m256 x = _mm256_loadu_ps(job->x + i);
        __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, swish_exp8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
        __m256 y;
        if (!job->grad) {
            y = _mm256_mul_ps(x, s);
        } else {
            __m256 g = job->grad_step ? _mm256_loadu_ps(job->grad + i) : _mm256_set1_ps(job->grad[0]);
            y = _mm256_mul_ps(_mm256_mul_ps(g, s), _mm256_fmadd_ps(x, _mm256_sub_ps(one, s), one));
        }
        _mm256_storeu_ps(job->y + i, y);
    }
    for (; i < end; i++) {
        float x = job->x[i], s = 1.0f / (1.0f + expf(-x));
        job->y[i] = job->grad ? job->grad[i * job->grad_step] * s * (1.0f + x * (1.0f - s)) : x * s;
    }
}
#endif

/* The step between o's elements in row-major order when one step serves them all: 1 (dense),
 * 0 (one value broadcast); -1 otherwise. */
static int64_t swish_step(const kiln_custom_operand *o) {
    int64_t expect = 1;
    bool dense = true, broadcast = true;
    for (int d = o->ndim - 1; d >= 0; d--) {
        if (o->shape[d] != 1 && o->strides[d] != expect) dense = false;
        if (o->shape[d] != 1 && o->strides[d] != 0) broadcast = false;
        expect *= o->shape[d];
    }
    return dense ? 1 : broadcast ? 0 : -1;
}

static float swish_at(const kiln_custom_operand *o, int64_t i) {
    int64_t off = 0;
    for (int d = o->ndim - 1; d >= 0; d--) off += (i % o->shape[d]) * o->strides[d], i /= o->shape[d];
    return ((const float *)o->data)[off];
}

/* swish (n = 1: x) or its gradient (n = 2: x, grad). */
static kiln_status swish_cpu(int n, const kiln_custom_operand *in, const kiln_custom_operand *out, int threads,
                             void *user) {
    (void)threads, (void)user; /* kiln_parallel_for uses kiln's `threads` threads */
    int64_t count = 1;
    for (int d = 0; d < out->ndim; d++) count *= out->shape[d];
    float *y = out->data;
#if SWISH_HAVE_AVX2_KERNEL
    int64_t grad_step = n > 1 ? swish_step(&in[1]) : 0;
    if (swish_step(&in[0]) == 1 && grad_step >= 0 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        swish_job job = {in[0].data, n > 1 ? in[1].data : NULL, grad_step, y};
        kiln_parallel_for(count, 1 << 15, swish_avx2_range, &job);
        return KILN_OK;
    }
#endif
    for (int64_t i = 0; i < count; i++) { /* strided (or no AVX2): element by element */
        float x = swish_at(&in[0], i), s = 1.0f / (1.0f + expf(-x));
        y[i] = n > 1 ? swish_at(&in[1], i) * s * (1.0f + x * (1.0f - s)) : x * s;
    }
    return KILN_OK;
}

static const char swish_opencl[] =
    "kernel void swish(global const float *x, global float *y, long n) {\n"
    "    long i = get_global_id(0);\n"
    "    if (i < n) y[i] = x[i] / (1.0f + exp(-x[i]));\n"
    "}\n"
    "kernel void swish_grad(global const float *x, global const float *g, global float *y, long n) {\n"
    "    long i = get_global_id(0);\n"
    "    if (i >= n) return;\n"
    "    float s = 1.0f / (1.0f + exp(-x[i]));\n"
    "    y[i] = g[i] * s * (1.0f + x[i] * (1.0f - s));\n"
    "}\n";

static kiln_status swish_grad_shape(int n, const kiln_custom_meta *in, kiln_custom_meta *out, void *user) {
    bool same = in[1].dtype == KILN_F32 && in[1].ndim == in[0].ndim;
    for (int d = 0; same && d < in[0].ndim; d++) same = in[1].shape[d] == in[0].shape[d];
    if (!same) return kiln_custom_op_error("swish_grad takes x and a gradient of x's shape, f32");
    return swish_shape(n, in, out, user);
}

/* d/dx x s(x) = s (1 + x (1 - s)), s = sigmoid(x): the registered op swish_grad (user_data),
 * itself not differentiable (no second derivatives through swish). */
static kiln_status swish_backward(int n, const kiln_tensor *in, kiln_tensor out, kiln_tensor grad, kiln_tensor *grad_in,
                                  void *user) {
    (void)n, (void)out;
    grad_in[0] = kiln_custom_op_call((kiln_custom_op *)user, 2, (kiln_tensor[]){kiln_ref(in[0]), kiln_ref(grad)});
    return KILN_OK;
}

static kiln_custom_op *swish_register(void) {
    kiln_custom_op *op = kiln_custom_op_find("example_swish"), *grad = NULL;
    if (op) return op;
    kiln_custom_op_def grad_def = {.name = "example_swish_grad", .n_inputs = 2, .shape = swish_grad_shape,
                                   .cpu_kernel = swish_cpu, .opencl_source = swish_opencl, .opencl_kernel = "swish_grad"};
    if (kiln_custom_op_register(&grad_def, &grad) != KILN_OK) return NULL;
    kiln_custom_op_def def = {.name = "example_swish", .n_inputs = 1, .shape = swish_shape, .cpu_kernel = swish_cpu,
                              .in_place = true, .backward = swish_backward, .user_data = grad,
                              .opencl_source = swish_opencl, .opencl_kernel = "swish"};
    return kiln_custom_op_register(&def, &op) == KILN_OK ? op : NULL;
}

#endif
