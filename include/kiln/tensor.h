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
 * calls on_release(ctx) (if not NULL) once no tensor or queued op uses it. When it fails (a
 * poisoned result, out of memory) on_release is never called: `data` is still the caller's. */
KILN_API kiln_tensor kiln_from_borrowed(kiln_dtype dtype, kiln_shape shape, const void *data,
                                        void (*on_release)(void *ctx), void *ctx);
/* Counter-based (Philox) random numbers: the same seed gives the same tensor whatever
 * the thread count. Float dtypes only. */
KILN_API kiln_tensor kiln_rand(kiln_device dev, kiln_dtype dtype, kiln_shape shape, uint64_t seed);
KILN_API kiln_tensor kiln_randn(kiln_device dev, kiln_dtype dtype, kiln_shape shape, uint64_t seed);
KILN_API kiln_tensor kiln_uniform(kiln_device dev, kiln_dtype dtype, kiln_shape shape, double lo, double hi, uint64_t seed);
KILN_API kiln_tensor kiln_normal(kiln_device dev, kiln_dtype dtype, kiln_shape shape, double mean, double std, uint64_t seed);
KILN_API kiln_tensor kiln_bernoulli(kiln_device dev, kiln_dtype dtype, kiln_shape shape, double p, uint64_t seed);
/* Integers uniform in [low, high) (torch.randint) in an integer or float dtype that holds low
 * and high - 1 exactly; KILN_ERR_INVALID_ARGUMENT when low >= high or they do not fit. */
KILN_API kiln_tensor kiln_randint(kiln_device dev, kiln_dtype dtype, kiln_shape shape, int64_t low, int64_t high,
                                  uint64_t seed);
/* Generators (PyTorch's torch.Generator / torch.manual_seed), for code that wants one seed
 * for a whole program rather than one per call. Each call taking a generator draws the next
 * seed from it and runs the seeded op above: the same generator seed and the same sequence
 * of calls give the same values, whatever the thread count. NULL means the global generator
 * (seed 0 until kiln_manual_seed). A generator may be shared by threads (draws are atomic;
 * their order is then the threads'). Every call draws, also one that fails.
 *
 *   kiln_generator *g = kiln_generator_new(42);
 *   kiln_tensor a = kiln_randn_gen(g, KILN_CPU, KILN_F32, KILN_SHAPE(2, 3));
 *   kiln_generator_manual_seed(g, 42);                 // replay: b equals a
 *   kiln_tensor b = kiln_randn_gen(g, KILN_CPU, KILN_F32, KILN_SHAPE(2, 3));
 *   kiln_generator_free(g);
 */
typedef struct kiln_generator kiln_generator;
KILN_API kiln_generator *kiln_generator_new(uint64_t seed); /* NULL on out of memory */
KILN_API void kiln_generator_free(kiln_generator *g);
KILN_API void kiln_generator_manual_seed(kiln_generator *g, uint64_t seed); /* restarts its sequence */
KILN_API void kiln_manual_seed(uint64_t seed); /* the global generator's */
KILN_API kiln_tensor kiln_rand_gen(kiln_generator *g, kiln_device dev, kiln_dtype dtype, kiln_shape shape);
KILN_API kiln_tensor kiln_randn_gen(kiln_generator *g, kiln_device dev, kiln_dtype dtype, kiln_shape shape);
KILN_API kiln_tensor kiln_randint_gen(kiln_generator *g, kiln_device dev, kiln_dtype dtype, kiln_shape shape, int64_t low,
                                      int64_t high);
#define KILN_RANDOM_API(X) \
    X(kiln_tensor, rand_gen, (kiln_generator *g, kiln_device dev, kiln_dtype dtype, kiln_shape shape), (g, dev, dtype, shape)) \
    X(kiln_tensor, randn_gen, (kiln_generator *g, kiln_device dev, kiln_dtype dtype, kiln_shape shape), (g, dev, dtype, shape)) \
    X(kiln_tensor, randint_gen, (kiln_generator *g, kiln_device dev, kiln_dtype dtype, kiln_shape shape, int64_t low, int64_t high), (g, dev, dtype, shape, low, high))
KILN_RANDOM_API(KILN__AT_DECLARE)
#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#define kiln_rand_gen(...) KILN__AT(rand_gen, __VA_ARGS__)
#define kiln_randn_gen(...) KILN__AT(randn_gen, __VA_ARGS__)
#define kiln_randint_gen(...) KILN__AT(randint_gen, __VA_ARGS__)
#endif

/* ---- views, joins, splits, indexing, masks, scans, sorts (consume their tensor inputs) ---- */
/* reshape, permute, transpose, narrow, slice, expand, squeeze, unsqueeze, flatten, contiguous,
 * cat, stack, index_select, gather, scatter_add, where, masked_fill, tril, triu, flip, roll,
 * repeat, tile, cumsum, cumprod, clone, split, chunk, meshgrid, pad, one_hot, sort, argsort,
 * topk, unfold, cast: kiln/shape_ops.h, from the shape op table (src/ir/shape_table.h). Views share
 * their input's storage. Two of them take an enum: */
/* kiln_pad's mode (torch's 'constant', 'reflect', 'replicate') */
typedef enum { KILN_PAD_CONSTANT, KILN_PAD_REFLECT, KILN_PAD_REPLICATE } kiln_pad_mode;
/* kiln_meshgrid's indexing: IJ (matrix, torch's default) or XY (the first two dims swapped) */
typedef enum { KILN_MESHGRID_IJ, KILN_MESHGRID_XY } kiln_meshgrid_indexing;
#include "kiln/shape_ops.h"

/* ---- devices ---------------------------------------------------------------------------- */
/* t on dev (a copy; t itself when already there). Not recorded by autodiff: a tracked t's
 * gradient does not flow back across devices. */
KILN_API kiln_tensor kiln_to_device(kiln_tensor t, kiln_device dev);

/* ---- convolution and pooling ------------------------------------------------------------- */
/* kiln_conv2d and the pools (max_pool2d, avg_pool2d, adaptive_avg_pool2d, max_pool2d_opts,
 * avg_pool2d_opts): kiln/linalg_ops.h, from the linear-algebra table (src/ir/linalg_table.h).
 * The _opts pools take every option PyTorch's MaxPool2d / AvgPool2d take beyond the window:
 * ceil_mode rounds the output size up (a last window may hang past the input, but never starts
 * in the trailing padding alone; the part past the padding is never counted); exclude_pad
 * (average only: PyTorch's count_include_pad=False) divides each window by its count of input
 * elements instead of its size in the padded input.
 *   kiln_pool2d_options o = kiln_pool2d_defaults(3);    // 3 x 3, stride 3, no padding
 *   o.stride_h = o.stride_w = 2, o.ceil_mode = true;
 *   kiln_tensor y = kiln_max_pool2d_opts(x, o);         // x [N, C, 8, 8] -> [N, C, 4, 4] */
typedef struct {
    int kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w; /* a stride of 0: the kernel's size */
    bool ceil_mode, exclude_pad;
} kiln_pool2d_options;
KILN_API kiln_pool2d_options kiln_pool2d_defaults(int kernel); /* k x k, stride k, no padding, floor, padding counted */

/* ---- elementwise (NumPy broadcasting; ints/bools promote to f32 for float math) ---------- */
/* Two or three tensors of different dtypes compute in torch.result_type's dtype (README
 * "Dtypes"): a 0-d tensor promotes a dimensioned one only from a lower category. */
/* neg ... atan2, and those with parameters: clamp, nan_to_num, leaky_relu, elu, selu, hardtanh,
 * lerp, lerp_scalar; reductions sum ... all: from the op tables (src/ir/). */
#include "kiln/ops.h"

/* Scalar variants (kiln_add_scalar(t, s), kiln_rsub_scalar: s - t, ...): kiln/ops.h, from the op
 * table's KILN__OPTABLE_SCALAR rows. The scalar takes the tensor's dtype (a float scalar promotes
 * an int or bool tensor to f32; a whole one a bool tensor to i64, as PyTorch). */

/* ---- reductions ------------------------------------------------------------------------- */
/* sum, mean, prod, max, min (and their _dims forms), var_dims, std_dims, logsumexp_dims, argmax,
 * argmin, any, all: kiln/ops.h, from the reduction table (src/ir/reduce_table.h). cumsum,
 * cumprod: kiln/shape_ops.h, from the shape op table. */
/* sort, argsort, topk: kiln/shape_ops.h, from the shape op table. */
/* kiln_softmax(t, dim), kiln_log_softmax(t, dim): kiln/ops.h, from the row-op table
 * (src/ir/row_table.h), with the norms and losses of kiln/nn.h. */

/* ---- linear algebra --------------------------------------------------------------------- */
/* matmul, bmm, dot, outer, linear, conv2d, scaled_dot_product_attention and batch_norm, with
 * their docs and call-site macros, from the linear-algebra table (src/ir/linalg_table.h); einsum
 * is below. */
#include "kiln/linalg_ops.h"

/* ---- reads (the only blocking calls) ------------------------------------------------------ */
/* Copies t (dense, row-major, in t's dtype) into dst; dst_bytes must equal numel*dtype size.
 * Consumes t. Returns the first error t carries, if any. */
KILN_API kiln_status kiln_into_data(kiln_tensor t, void *dst, size_t dst_bytes);
/* t must have one element; converted to float / double. Consumes t. */
KILN_API kiln_status kiln_into_scalar(kiln_tensor t, float *out);
KILN_API kiln_status kiln_into_scalar_f64(kiln_tensor t, double *out);
/* Read-only access to a CPU tensor's values without a copy (a dense copy only when t is not
 * contiguous): waits for t, then v->data holds v->numel values of v->dtype, row-major, of
 * shape v->shape, valid until kiln_data_view_release(v). Does not consume t. The view holds
 * its own reference, so no op writes the buffer in place meanwhile (an optimizer's step on a
 * parameter still updates it, as a NumPy view of a torch tensor would show). KILN_ERR_DEVICE
 * for a device tensor (use kiln_into_data); on any failure *v is empty (data NULL).
 *
 *   kiln_data_view v;
 *   if (kiln_data_view_get(y, &v) == KILN_OK) printf("%f\n", ((const float *)v.data)[0]);
 *   kiln_data_view_release(&v);
 */
typedef struct {
    const void *data;
    int64_t numel;
    kiln_dtype dtype;
    kiln_shape shape;
    kiln_tensor keep; /* the view's own handle (kiln_data_view_release drops it) */
} kiln_data_view;
KILN_API kiln_status kiln_data_view_get(kiln_tensor t, kiln_data_view *v);
KILN_API void kiln_data_view_release(kiln_data_view *v); /* an empty view: nothing to do */
/* PyTorch-style text of t, e.g. "tensor([[ 1.0000, -2.5000],\n        [ 3.0000,  4.0000]])":
 * 4 decimals (scientific for a wide range), more than 1000 elements summarised to the first
 * and last 3 per dim, dtype named unless f32, i64 or bool, device unless cpu. Neither call
 * consumes t: like the metadata queries they take a borrowed handle, but they wait for t's
 * data (a read). Errors (stale handle, poisoned t) are returned as by kiln_into_data. */
/* Writes the text NUL-terminated into buf (cap bytes; buf may be NULL when cap is 0, to
 * measure). *needed (if not NULL) gets the full length + 1; when cap is smaller, buf holds
 * the truncated text and KILN_ERR_BUFFER_SIZE is returned. On any other error buf[0] = 0. */
KILN_API kiln_status kiln_to_string(kiln_tensor t, char *buf, size_t cap, size_t *needed);
/* Writes the text and a newline to stdout. */
KILN_API kiln_status kiln_print(kiln_tensor t);

/* ---- call sites ------------------------------------------------------------------------- */
/* The calls that record the caller's file:line, as in core.h's list. */
#define KILN_TENSOR_API(X) \
    KILN_SHAPE_OPS_API(X) \
    X(kiln_tensor, zeros, (kiln_device dev, kiln_dtype dtype, kiln_shape shape), (dev, dtype, shape)) \
    X(kiln_tensor, ones, (kiln_device dev, kiln_dtype dtype, kiln_shape shape), (dev, dtype, shape)) \
    X(kiln_tensor, full, (kiln_device dev, kiln_dtype dtype, kiln_shape shape, double value), (dev, dtype, shape, value)) \
    X(kiln_tensor, arange, (kiln_device dev, kiln_dtype dtype, double start, double end, double step), (dev, dtype, start, end, step)) \
    X(kiln_tensor, linspace, (kiln_device dev, kiln_dtype dtype, double start, double end, int64_t steps), (dev, dtype, start, end, steps)) \
    X(kiln_tensor, eye, (kiln_device dev, kiln_dtype dtype, int64_t rows, int64_t cols), (dev, dtype, rows, cols)) \
    X(kiln_tensor, from_data, (kiln_device dev, kiln_dtype dtype, kiln_shape shape, const void *data), (dev, dtype, shape, data)) \
    X(kiln_tensor, from_borrowed, (kiln_dtype dtype, kiln_shape shape, const void *data, void (*on_release)(void *ctx), void *ctx), (dtype, shape, data, on_release, ctx)) \
    X(kiln_tensor, rand, (kiln_device dev, kiln_dtype dtype, kiln_shape shape, uint64_t seed), (dev, dtype, shape, seed)) \
    X(kiln_tensor, randn, (kiln_device dev, kiln_dtype dtype, kiln_shape shape, uint64_t seed), (dev, dtype, shape, seed)) \
    X(kiln_tensor, uniform, (kiln_device dev, kiln_dtype dtype, kiln_shape shape, double lo, double hi, uint64_t seed), (dev, dtype, shape, lo, hi, seed)) \
    X(kiln_tensor, normal, (kiln_device dev, kiln_dtype dtype, kiln_shape shape, double mean, double std, uint64_t seed), (dev, dtype, shape, mean, std, seed)) \
    X(kiln_tensor, bernoulli, (kiln_device dev, kiln_dtype dtype, kiln_shape shape, double p, uint64_t seed), (dev, dtype, shape, p, seed)) \
    X(kiln_tensor, randint, (kiln_device dev, kiln_dtype dtype, kiln_shape shape, int64_t low, int64_t high, uint64_t seed), (dev, dtype, shape, low, high, seed)) \
    X(kiln_tensor, to_device, (kiln_tensor t, kiln_device dev), (t, dev)) \
    X(kiln_status, into_data, (kiln_tensor t, void *dst, size_t dst_bytes), (t, dst, dst_bytes)) \
    X(kiln_status, into_scalar, (kiln_tensor t, float *out), (t, out)) \
    X(kiln_status, into_scalar_f64, (kiln_tensor t, double *out), (t, out)) \
    X(kiln_status, data_view_get, (kiln_tensor t, kiln_data_view *v), (t, v)) \
    X(kiln_status, to_string, (kiln_tensor t, char *buf, size_t cap, size_t *needed), (t, buf, cap, needed)) \
    X(kiln_status, print, (kiln_tensor t), (t))
KILN_TENSOR_API(KILN__AT_DECLARE)

#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#pragma GCC system_header /* see core.h: errors in these calls name the caller's line */
#define kiln_zeros(...) KILN__AT(zeros, __VA_ARGS__)
#define kiln_ones(...) KILN__AT(ones, __VA_ARGS__)
#define kiln_full(...) KILN__AT(full, __VA_ARGS__)
#define kiln_arange(...) KILN__AT(arange, __VA_ARGS__)
#define kiln_linspace(...) KILN__AT(linspace, __VA_ARGS__)
#define kiln_eye(...) KILN__AT(eye, __VA_ARGS__)
#define kiln_from_data(...) KILN__AT(from_data, __VA_ARGS__)
#define kiln_from_borrowed(...) KILN__AT(from_borrowed, __VA_ARGS__)
#define kiln_rand(...) KILN__AT(rand, __VA_ARGS__)
#define kiln_randn(...) KILN__AT(randn, __VA_ARGS__)
#define kiln_uniform(...) KILN__AT(uniform, __VA_ARGS__)
#define kiln_normal(...) KILN__AT(normal, __VA_ARGS__)
#define kiln_bernoulli(...) KILN__AT(bernoulli, __VA_ARGS__)
#define kiln_randint(...) KILN__AT(randint, __VA_ARGS__)
#define kiln_to_device(...) KILN__AT(to_device, __VA_ARGS__)
#define kiln_into_data(...) KILN__AT(into_data, __VA_ARGS__)
#define kiln_to_string(...) KILN__AT(to_string, __VA_ARGS__)
#define kiln_print(...) KILN__AT(print, __VA_ARGS__)
#define kiln_into_scalar(...) KILN__AT(into_scalar, __VA_ARGS__)
#define kiln_into_scalar_f64(...) KILN__AT(into_scalar_f64, __VA_ARGS__)
#define kiln_data_view_get(...) KILN__AT(data_view_get, __VA_ARGS__)
#endif

/* ---- creation from a tensor, copies, grids, windows, products (PyTorch's names) ----------- */
/* torch.empty: a dense tensor whose contents are unspecified (not zeroed: write it before
 * reading it). Checked as kiln_zeros is. */
KILN_API kiln_tensor kiln_empty(kiln_device dev, kiln_dtype dtype, kiln_shape shape);
/* torch.*_like: a new tensor of t's shape, dtype and device (t consumed: pass kiln_ref(t) to
 * keep it; only its metadata is used, and its error if poisoned). The result never tracks a
 * gradient. rand_like and randn_like need a float t (see kiln_rand). */
KILN_API kiln_tensor kiln_empty_like(kiln_tensor t);
KILN_API kiln_tensor kiln_zeros_like(kiln_tensor t);
KILN_API kiln_tensor kiln_ones_like(kiln_tensor t);
KILN_API kiln_tensor kiln_full_like(kiln_tensor t, double value);
KILN_API kiln_tensor kiln_rand_like(kiln_tensor t, uint64_t seed);
KILN_API kiln_tensor kiln_randn_like(kiln_tensor t, uint64_t seed);
/* clone, meshgrid and unfold: kiln/shape_ops.h, from the shape op table. */
/* dot, outer and addmm: kiln/linalg_ops.h, from the linear-algebra table. */
/* torch.einsum on n tensors (consumed) of one dtype and device, subscripts a-z and A-Z:
 *
 *   kiln_tensor ab[2] = {kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(8, 4, 5), 1),
 *                        kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(8, 5, 6), 2)};
 *   kiln_tensor c = kiln_einsum("bij,bjk->bik", 2, ab);       // batched matmul [8, 4, 6]
 *
 * Permutations ("ij->ji"), sums ("ij->"), traces and diagonals ("ii->", "ii->i"), outer
 * products ("i,j->ij"), contractions, batched products and ellipses ("...ij,...jk->...ik":
 * the ellipsis dims broadcast, right-aligned, as PyTorch's; an output without "..." sums
 * them); without "->" the output is the ellipsis dims, then the letters seen once in ASCII
 * order (as PyTorch). Operands are contracted left to right, each pair as one batched matmul
 * between permutes and reshapes. A letter's sizes must agree (only ellipsis dims broadcast):
 * a bad equation gives KILN_ERR_INVALID_ARGUMENT (KILN_ERR_SHAPE for sizes) naming the
 * problem; an intermediate of more than 8 dims, KILN_ERR_UNSUPPORTED. Differentiable. */
KILN_API kiln_tensor kiln_einsum(const char *equation, int n, const kiln_tensor *ts);
#define KILN_TENSOR_MORE_API(X) \
    X(kiln_tensor, empty, (kiln_device dev, kiln_dtype dtype, kiln_shape shape), (dev, dtype, shape)) \
    X(kiln_tensor, empty_like, (kiln_tensor t), (t)) \
    X(kiln_tensor, zeros_like, (kiln_tensor t), (t)) \
    X(kiln_tensor, ones_like, (kiln_tensor t), (t)) \
    X(kiln_tensor, full_like, (kiln_tensor t, double value), (t, value)) \
    X(kiln_tensor, rand_like, (kiln_tensor t, uint64_t seed), (t, seed)) \
    X(kiln_tensor, randn_like, (kiln_tensor t, uint64_t seed), (t, seed)) \
    X(kiln_tensor, einsum, (const char *equation, int n, const kiln_tensor *ts), (equation, n, ts))
KILN_TENSOR_MORE_API(KILN__AT_DECLARE)
#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#define kiln_empty(...) KILN__AT(empty, __VA_ARGS__)
#define kiln_empty_like(...) KILN__AT(empty_like, __VA_ARGS__)
#define kiln_zeros_like(...) KILN__AT(zeros_like, __VA_ARGS__)
#define kiln_ones_like(...) KILN__AT(ones_like, __VA_ARGS__)
#define kiln_full_like(...) KILN__AT(full_like, __VA_ARGS__)
#define kiln_rand_like(...) KILN__AT(rand_like, __VA_ARGS__)
#define kiln_randn_like(...) KILN__AT(randn_like, __VA_ARGS__)
#define kiln_einsum(...) KILN__AT(einsum, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif
/* The free calls record their file:line too: a later use of the freed object names it. */
KILN__FREE_AT_DECLARE(kiln_generator, generator_free)
#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#define kiln_generator_free(...) KILN__AT(generator_free, __VA_ARGS__)
#endif

#endif
