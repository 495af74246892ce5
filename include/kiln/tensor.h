/* kiln tensor ops. Every op CONSUMES its tensor arguments: pass kiln_ref(t) to keep t.
 * Ops never abort on bad input: they return a poisoned tensor that carries the error to
 * the first read (kiln_into_data, kiln_into_scalar, kiln_sync), which returns the status.
 *
 *   kiln_tensor a = kiln_arange(KILN_CPU, KILN_F32, 0, 6, 1);
 *   kiln_tensor m = kiln_reshape(a, KILN_SHAPE(2, 3));        // a view: no copy
 *   kiln_tensor t = kiln_transpose(m, 0, 1);                   // [3,2] view
 *   kiln_tensor y = kiln_mul(kiln_ref(t), kiln_full(KILN_CPU, KILN_F32, KILN_SHAPE(2), 2.0));
 *   kiln_tensor s = kiln_sum_dims(y, KILN_DIMS(0), false);     // broadcasting, reduction
 *   float out[2];
 *   kiln_status st = kiln_into_data(s, out, sizeof out);       // blocks; consumes s
 *   kiln_release(t);
 */
#ifndef KILN_TENSOR_H
#define KILN_TENSOR_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- creation --------------------------------------------------------------------------- */
KILN_API kiln_tensor kiln_zeros(kiln_device dev, kiln_dtype dtype, kiln_shape shape);
KILN_API kiln_tensor kiln_ones(kiln_device dev, kiln_dtype dtype, kiln_shape shape);
KILN_API kiln_tensor kiln_full(kiln_device dev, kiln_dtype dtype, kiln_shape shape, double value);
KILN_API kiln_tensor kiln_arange(kiln_device dev, kiln_dtype dtype, double start, double end, double step);
KILN_API kiln_tensor kiln_linspace(kiln_device dev, kiln_dtype dtype, double start, double end, int64_t steps);
KILN_API kiln_tensor kiln_eye(kiln_device dev, kiln_dtype dtype, int64_t rows, int64_t cols);
/* Copies `data` (dense, row-major, in `dtype`). */
KILN_API kiln_tensor kiln_from_data(kiln_device dev, kiln_dtype dtype, kiln_shape shape, const void *data);
/* Wraps CPU memory without copying. kiln never writes it (ops never reuse it in place) and
 * calls on_release(ctx) (if not NULL) once no tensor or queued op uses it. */
KILN_API kiln_tensor kiln_from_borrowed(kiln_dtype dtype, kiln_shape shape, const void *data,
                                        void (*on_release)(void *ctx), void *ctx);
/* Counter-based (Philox) random numbers: the same seed gives the same tensor whatever
 * the thread count. Float dtypes only. */
KILN_API kiln_tensor kiln_rand(kiln_device dev, kiln_dtype dtype, kiln_shape shape, uint64_t seed);
KILN_API kiln_tensor kiln_randn(kiln_device dev, kiln_dtype dtype, kiln_shape shape, uint64_t seed);
KILN_API kiln_tensor kiln_uniform(kiln_device dev, kiln_dtype dtype, kiln_shape shape, double lo, double hi, uint64_t seed);
KILN_API kiln_tensor kiln_normal(kiln_device dev, kiln_dtype dtype, kiln_shape shape, double mean, double std, uint64_t seed);
KILN_API kiln_tensor kiln_bernoulli(kiln_device dev, kiln_dtype dtype, kiln_shape shape, double p, uint64_t seed);

/* ---- views (share storage; consume the input) -------------------------------------------- */
/* One dim may be -1. Copies only when the layout cannot be viewed. */
KILN_API kiln_tensor kiln_reshape(kiln_tensor t, kiln_shape shape);
KILN_API kiln_tensor kiln_permute(kiln_tensor t, kiln_dims order);
KILN_API kiln_tensor kiln_transpose(kiln_tensor t, int dim0, int dim1);
KILN_API kiln_tensor kiln_narrow(kiln_tensor t, int dim, int64_t start, int64_t length);
/* Python-style slice along one dim: start/end may be negative, end is clamped, step > 0. */
KILN_API kiln_tensor kiln_slice(kiln_tensor t, int dim, int64_t start, int64_t end, int64_t step);
KILN_API kiln_tensor kiln_expand(kiln_tensor t, kiln_shape shape); /* broadcast; -1 keeps a dim */
KILN_API kiln_tensor kiln_squeeze(kiln_tensor t, int dim);        /* dim must have size 1 */
KILN_API kiln_tensor kiln_unsqueeze(kiln_tensor t, int dim);
KILN_API kiln_tensor kiln_flatten(kiln_tensor t, int start_dim, int end_dim);
KILN_API kiln_tensor kiln_contiguous(kiln_tensor t); /* returns t itself when already dense */

/* ---- joining, splitting, indexing -------------------------------------------------------- */
/* Consume all n inputs. */
KILN_API kiln_tensor kiln_cat(const kiln_tensor *ts, int n, int dim);
KILN_API kiln_tensor kiln_stack(const kiln_tensor *ts, int n, int dim);
/* Views of pieces of `split_size` (the last may be smaller) written to out[0..ret).
 * Returns the number of pieces; on error writes one poisoned tensor to out[0] and returns 1
 * (0 when out is NULL or cap < 1). cap must hold every piece. */
KILN_API int kiln_split(kiln_tensor t, int64_t split_size, int dim, kiln_tensor *out, int cap);
KILN_API int kiln_chunk(kiln_tensor t, int chunks, int dim, kiln_tensor *out, int cap);
KILN_API kiln_tensor kiln_index_select(kiln_tensor t, int dim, kiln_tensor index);   /* index: 1-d i32/i64 */
KILN_API kiln_tensor kiln_gather(kiln_tensor t, int dim, kiln_tensor index);         /* torch.gather */
/* out = t; out[index[i][j]][j] += src[i][j] (dim 0), like torch.scatter_add. */
KILN_API kiln_tensor kiln_scatter_add(kiln_tensor t, int dim, kiln_tensor index, kiln_tensor src);
KILN_API kiln_tensor kiln_where(kiln_tensor mask, kiln_tensor a, kiln_tensor b);     /* mask: bool */
KILN_API kiln_tensor kiln_one_hot(kiln_tensor index, int64_t num_classes, kiln_dtype dtype);
KILN_API kiln_tensor kiln_cast(kiln_tensor t, kiln_dtype dtype);
KILN_API kiln_tensor kiln_to_device(kiln_tensor t, kiln_device dev);

/* ---- elementwise (NumPy broadcasting; ints/bools promote to f32 for float math) ---------- */
KILN_API kiln_tensor kiln_neg(kiln_tensor t);
KILN_API kiln_tensor kiln_abs(kiln_tensor t);
KILN_API kiln_tensor kiln_sign(kiln_tensor t);
KILN_API kiln_tensor kiln_exp(kiln_tensor t);
KILN_API kiln_tensor kiln_log(kiln_tensor t);
KILN_API kiln_tensor kiln_log1p(kiln_tensor t);
KILN_API kiln_tensor kiln_expm1(kiln_tensor t);
KILN_API kiln_tensor kiln_sqrt(kiln_tensor t);
KILN_API kiln_tensor kiln_rsqrt(kiln_tensor t);
KILN_API kiln_tensor kiln_sin(kiln_tensor t);
KILN_API kiln_tensor kiln_cos(kiln_tensor t);
KILN_API kiln_tensor kiln_tanh(kiln_tensor t);
KILN_API kiln_tensor kiln_sigmoid(kiln_tensor t);
KILN_API kiln_tensor kiln_relu(kiln_tensor t);
KILN_API kiln_tensor kiln_gelu(kiln_tensor t);      /* erf form */
KILN_API kiln_tensor kiln_gelu_tanh(kiln_tensor t); /* tanh approximation */
KILN_API kiln_tensor kiln_silu(kiln_tensor t);
KILN_API kiln_tensor kiln_softplus(kiln_tensor t);
KILN_API kiln_tensor kiln_erf(kiln_tensor t);
KILN_API kiln_tensor kiln_logical_not(kiln_tensor t);
KILN_API kiln_tensor kiln_clamp(kiln_tensor t, double lo, double hi); /* NAN: no bound */

KILN_API kiln_tensor kiln_add(kiln_tensor a, kiln_tensor b);
KILN_API kiln_tensor kiln_sub(kiln_tensor a, kiln_tensor b);
KILN_API kiln_tensor kiln_mul(kiln_tensor a, kiln_tensor b);
KILN_API kiln_tensor kiln_div(kiln_tensor a, kiln_tensor b);
KILN_API kiln_tensor kiln_pow(kiln_tensor a, kiln_tensor b);
KILN_API kiln_tensor kiln_maximum(kiln_tensor a, kiln_tensor b);
KILN_API kiln_tensor kiln_minimum(kiln_tensor a, kiln_tensor b);
KILN_API kiln_tensor kiln_eq(kiln_tensor a, kiln_tensor b);
KILN_API kiln_tensor kiln_ne(kiln_tensor a, kiln_tensor b);
KILN_API kiln_tensor kiln_lt(kiln_tensor a, kiln_tensor b);
KILN_API kiln_tensor kiln_le(kiln_tensor a, kiln_tensor b);
KILN_API kiln_tensor kiln_gt(kiln_tensor a, kiln_tensor b);
KILN_API kiln_tensor kiln_ge(kiln_tensor a, kiln_tensor b);
KILN_API kiln_tensor kiln_logical_and(kiln_tensor a, kiln_tensor b);
KILN_API kiln_tensor kiln_logical_or(kiln_tensor a, kiln_tensor b);

/* Scalar variants: the scalar takes the tensor's dtype (a float scalar promotes an int tensor). */
KILN_API kiln_tensor kiln_add_scalar(kiln_tensor t, double s);
KILN_API kiln_tensor kiln_sub_scalar(kiln_tensor t, double s);
KILN_API kiln_tensor kiln_rsub_scalar(kiln_tensor t, double s); /* s - t */
KILN_API kiln_tensor kiln_mul_scalar(kiln_tensor t, double s);
KILN_API kiln_tensor kiln_div_scalar(kiln_tensor t, double s);
KILN_API kiln_tensor kiln_rdiv_scalar(kiln_tensor t, double s); /* s / t */
KILN_API kiln_tensor kiln_pow_scalar(kiln_tensor t, double s);
KILN_API kiln_tensor kiln_maximum_scalar(kiln_tensor t, double s);
KILN_API kiln_tensor kiln_minimum_scalar(kiln_tensor t, double s);
KILN_API kiln_tensor kiln_eq_scalar(kiln_tensor t, double s);
KILN_API kiln_tensor kiln_ne_scalar(kiln_tensor t, double s);
KILN_API kiln_tensor kiln_lt_scalar(kiln_tensor t, double s);
KILN_API kiln_tensor kiln_le_scalar(kiln_tensor t, double s);
KILN_API kiln_tensor kiln_gt_scalar(kiln_tensor t, double s);
KILN_API kiln_tensor kiln_ge_scalar(kiln_tensor t, double s);

/* ---- reductions ------------------------------------------------------------------------- */
/* Whole tensor to a 0-d tensor. */
KILN_API kiln_tensor kiln_sum(kiln_tensor t);
KILN_API kiln_tensor kiln_mean(kiln_tensor t);
KILN_API kiln_tensor kiln_max(kiln_tensor t);
KILN_API kiln_tensor kiln_min(kiln_tensor t);
KILN_API kiln_tensor kiln_prod(kiln_tensor t);
/* Over a list of dims (KILN_ALL_DIMS for all). Integer sums accumulate in i64. */
KILN_API kiln_tensor kiln_sum_dims(kiln_tensor t, kiln_dims dims, bool keepdim);
KILN_API kiln_tensor kiln_mean_dims(kiln_tensor t, kiln_dims dims, bool keepdim);
KILN_API kiln_tensor kiln_max_dims(kiln_tensor t, kiln_dims dims, bool keepdim);
KILN_API kiln_tensor kiln_min_dims(kiln_tensor t, kiln_dims dims, bool keepdim);
KILN_API kiln_tensor kiln_prod_dims(kiln_tensor t, kiln_dims dims, bool keepdim);
/* correction: 1 = unbiased (Bessel), 0 = population. */
KILN_API kiln_tensor kiln_var_dims(kiln_tensor t, kiln_dims dims, int correction, bool keepdim);
KILN_API kiln_tensor kiln_std_dims(kiln_tensor t, kiln_dims dims, int correction, bool keepdim);
KILN_API kiln_tensor kiln_logsumexp_dims(kiln_tensor t, kiln_dims dims, bool keepdim);
KILN_API kiln_tensor kiln_argmax(kiln_tensor t, int dim, bool keepdim); /* i64; first index of ties */
KILN_API kiln_tensor kiln_argmin(kiln_tensor t, int dim, bool keepdim);
KILN_API kiln_tensor kiln_softmax(kiln_tensor t, int dim);
KILN_API kiln_tensor kiln_log_softmax(kiln_tensor t, int dim);

/* ---- linear algebra --------------------------------------------------------------------- */
/* torch.matmul semantics: 1-d operands are promoted and the added dim removed; batch dims
 * broadcast. */
KILN_API kiln_tensor kiln_matmul(kiln_tensor a, kiln_tensor b);
/* x @ w^T + bias; w: [out, in]; bias: [out] or KILN_NONE. */
KILN_API kiln_tensor kiln_linear(kiln_tensor x, kiln_tensor w, kiln_tensor bias);

/* ---- reads (the only blocking calls) ------------------------------------------------------ */
/* Copies t (dense, row-major, in t's dtype) into dst; dst_bytes must equal numel*dtype size.
 * Consumes t. Returns the first error t carries, if any. */
KILN_API kiln_status kiln_into_data(kiln_tensor t, void *dst, size_t dst_bytes);
/* t must have one element; converted to float / double. Consumes t. */
KILN_API kiln_status kiln_into_scalar(kiln_tensor t, float *out);
KILN_API kiln_status kiln_into_scalar_f64(kiln_tensor t, double *out);

#ifndef KILN_BUILDING
#define kiln_zeros(...) KILN__AT(kiln_zeros, __VA_ARGS__)
#define kiln_ones(...) KILN__AT(kiln_ones, __VA_ARGS__)
#define kiln_full(...) KILN__AT(kiln_full, __VA_ARGS__)
#define kiln_arange(...) KILN__AT(kiln_arange, __VA_ARGS__)
#define kiln_linspace(...) KILN__AT(kiln_linspace, __VA_ARGS__)
#define kiln_eye(...) KILN__AT(kiln_eye, __VA_ARGS__)
#define kiln_from_data(...) KILN__AT(kiln_from_data, __VA_ARGS__)
#define kiln_from_borrowed(...) KILN__AT(kiln_from_borrowed, __VA_ARGS__)
#define kiln_rand(...) KILN__AT(kiln_rand, __VA_ARGS__)
#define kiln_randn(...) KILN__AT(kiln_randn, __VA_ARGS__)
#define kiln_uniform(...) KILN__AT(kiln_uniform, __VA_ARGS__)
#define kiln_normal(...) KILN__AT(kiln_normal, __VA_ARGS__)
#define kiln_bernoulli(...) KILN__AT(kiln_bernoulli, __VA_ARGS__)
#define kiln_reshape(...) KILN__AT(kiln_reshape, __VA_ARGS__)
#define kiln_permute(...) KILN__AT(kiln_permute, __VA_ARGS__)
#define kiln_transpose(...) KILN__AT(kiln_transpose, __VA_ARGS__)
#define kiln_narrow(...) KILN__AT(kiln_narrow, __VA_ARGS__)
#define kiln_slice(...) KILN__AT(kiln_slice, __VA_ARGS__)
#define kiln_expand(...) KILN__AT(kiln_expand, __VA_ARGS__)
#define kiln_squeeze(...) KILN__AT(kiln_squeeze, __VA_ARGS__)
#define kiln_unsqueeze(...) KILN__AT(kiln_unsqueeze, __VA_ARGS__)
#define kiln_flatten(...) KILN__AT(kiln_flatten, __VA_ARGS__)
#define kiln_contiguous(...) KILN__AT(kiln_contiguous, __VA_ARGS__)
#define kiln_cat(...) KILN__AT(kiln_cat, __VA_ARGS__)
#define kiln_stack(...) KILN__AT(kiln_stack, __VA_ARGS__)
#define kiln_split(...) KILN__AT(kiln_split, __VA_ARGS__)
#define kiln_chunk(...) KILN__AT(kiln_chunk, __VA_ARGS__)
#define kiln_index_select(...) KILN__AT(kiln_index_select, __VA_ARGS__)
#define kiln_gather(...) KILN__AT(kiln_gather, __VA_ARGS__)
#define kiln_scatter_add(...) KILN__AT(kiln_scatter_add, __VA_ARGS__)
#define kiln_where(...) KILN__AT(kiln_where, __VA_ARGS__)
#define kiln_one_hot(...) KILN__AT(kiln_one_hot, __VA_ARGS__)
#define kiln_cast(...) KILN__AT(kiln_cast, __VA_ARGS__)
#define kiln_to_device(...) KILN__AT(kiln_to_device, __VA_ARGS__)
#define kiln_neg(...) KILN__AT(kiln_neg, __VA_ARGS__)
#define kiln_abs(...) KILN__AT(kiln_abs, __VA_ARGS__)
#define kiln_sign(...) KILN__AT(kiln_sign, __VA_ARGS__)
#define kiln_exp(...) KILN__AT(kiln_exp, __VA_ARGS__)
#define kiln_log(...) KILN__AT(kiln_log, __VA_ARGS__)
#define kiln_log1p(...) KILN__AT(kiln_log1p, __VA_ARGS__)
#define kiln_expm1(...) KILN__AT(kiln_expm1, __VA_ARGS__)
#define kiln_sqrt(...) KILN__AT(kiln_sqrt, __VA_ARGS__)
#define kiln_rsqrt(...) KILN__AT(kiln_rsqrt, __VA_ARGS__)
#define kiln_sin(...) KILN__AT(kiln_sin, __VA_ARGS__)
#define kiln_cos(...) KILN__AT(kiln_cos, __VA_ARGS__)
#define kiln_tanh(...) KILN__AT(kiln_tanh, __VA_ARGS__)
#define kiln_sigmoid(...) KILN__AT(kiln_sigmoid, __VA_ARGS__)
#define kiln_relu(...) KILN__AT(kiln_relu, __VA_ARGS__)
#define kiln_gelu(...) KILN__AT(kiln_gelu, __VA_ARGS__)
#define kiln_gelu_tanh(...) KILN__AT(kiln_gelu_tanh, __VA_ARGS__)
#define kiln_silu(...) KILN__AT(kiln_silu, __VA_ARGS__)
#define kiln_softplus(...) KILN__AT(kiln_softplus, __VA_ARGS__)
#define kiln_erf(...) KILN__AT(kiln_erf, __VA_ARGS__)
#define kiln_logical_not(...) KILN__AT(kiln_logical_not, __VA_ARGS__)
#define kiln_clamp(...) KILN__AT(kiln_clamp, __VA_ARGS__)
#define kiln_add(...) KILN__AT(kiln_add, __VA_ARGS__)
#define kiln_sub(...) KILN__AT(kiln_sub, __VA_ARGS__)
#define kiln_mul(...) KILN__AT(kiln_mul, __VA_ARGS__)
#define kiln_div(...) KILN__AT(kiln_div, __VA_ARGS__)
#define kiln_pow(...) KILN__AT(kiln_pow, __VA_ARGS__)
#define kiln_maximum(...) KILN__AT(kiln_maximum, __VA_ARGS__)
#define kiln_minimum(...) KILN__AT(kiln_minimum, __VA_ARGS__)
#define kiln_eq(...) KILN__AT(kiln_eq, __VA_ARGS__)
#define kiln_ne(...) KILN__AT(kiln_ne, __VA_ARGS__)
#define kiln_lt(...) KILN__AT(kiln_lt, __VA_ARGS__)
#define kiln_le(...) KILN__AT(kiln_le, __VA_ARGS__)
#define kiln_gt(...) KILN__AT(kiln_gt, __VA_ARGS__)
#define kiln_ge(...) KILN__AT(kiln_ge, __VA_ARGS__)
#define kiln_logical_and(...) KILN__AT(kiln_logical_and, __VA_ARGS__)
#define kiln_logical_or(...) KILN__AT(kiln_logical_or, __VA_ARGS__)
#define kiln_add_scalar(...) KILN__AT(kiln_add_scalar, __VA_ARGS__)
#define kiln_sub_scalar(...) KILN__AT(kiln_sub_scalar, __VA_ARGS__)
#define kiln_rsub_scalar(...) KILN__AT(kiln_rsub_scalar, __VA_ARGS__)
#define kiln_mul_scalar(...) KILN__AT(kiln_mul_scalar, __VA_ARGS__)
#define kiln_div_scalar(...) KILN__AT(kiln_div_scalar, __VA_ARGS__)
#define kiln_rdiv_scalar(...) KILN__AT(kiln_rdiv_scalar, __VA_ARGS__)
#define kiln_pow_scalar(...) KILN__AT(kiln_pow_scalar, __VA_ARGS__)
#define kiln_maximum_scalar(...) KILN__AT(kiln_maximum_scalar, __VA_ARGS__)
#define kiln_minimum_scalar(...) KILN__AT(kiln_minimum_scalar, __VA_ARGS__)
#define kiln_eq_scalar(...) KILN__AT(kiln_eq_scalar, __VA_ARGS__)
#define kiln_ne_scalar(...) KILN__AT(kiln_ne_scalar, __VA_ARGS__)
#define kiln_lt_scalar(...) KILN__AT(kiln_lt_scalar, __VA_ARGS__)
#define kiln_le_scalar(...) KILN__AT(kiln_le_scalar, __VA_ARGS__)
#define kiln_gt_scalar(...) KILN__AT(kiln_gt_scalar, __VA_ARGS__)
#define kiln_ge_scalar(...) KILN__AT(kiln_ge_scalar, __VA_ARGS__)
#define kiln_sum(...) KILN__AT(kiln_sum, __VA_ARGS__)
#define kiln_mean(...) KILN__AT(kiln_mean, __VA_ARGS__)
#define kiln_max(...) KILN__AT(kiln_max, __VA_ARGS__)
#define kiln_min(...) KILN__AT(kiln_min, __VA_ARGS__)
#define kiln_prod(...) KILN__AT(kiln_prod, __VA_ARGS__)
#define kiln_sum_dims(...) KILN__AT(kiln_sum_dims, __VA_ARGS__)
#define kiln_mean_dims(...) KILN__AT(kiln_mean_dims, __VA_ARGS__)
#define kiln_max_dims(...) KILN__AT(kiln_max_dims, __VA_ARGS__)
#define kiln_min_dims(...) KILN__AT(kiln_min_dims, __VA_ARGS__)
#define kiln_prod_dims(...) KILN__AT(kiln_prod_dims, __VA_ARGS__)
#define kiln_var_dims(...) KILN__AT(kiln_var_dims, __VA_ARGS__)
#define kiln_std_dims(...) KILN__AT(kiln_std_dims, __VA_ARGS__)
#define kiln_logsumexp_dims(...) KILN__AT(kiln_logsumexp_dims, __VA_ARGS__)
#define kiln_argmax(...) KILN__AT(kiln_argmax, __VA_ARGS__)
#define kiln_argmin(...) KILN__AT(kiln_argmin, __VA_ARGS__)
#define kiln_softmax(...) KILN__AT(kiln_softmax, __VA_ARGS__)
#define kiln_log_softmax(...) KILN__AT(kiln_log_softmax, __VA_ARGS__)
#define kiln_matmul(...) KILN__AT(kiln_matmul, __VA_ARGS__)
#define kiln_linear(...) KILN__AT(kiln_linear, __VA_ARGS__)
#define kiln_into_data(...) KILN__AT(kiln_into_data, __VA_ARGS__)
#define kiln_into_scalar(...) KILN__AT(kiln_into_scalar, __VA_ARGS__)
#define kiln_into_scalar_f64(...) KILN__AT(kiln_into_scalar_f64, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif
#endif
