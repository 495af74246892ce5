/* kiln's views, joins, splits, indexing, masks, scans and sorts: generated from
 * src/ir/shape_table.h by scripts/gen_optable.py (scripts/optable_shape.py); do not edit (edit
 * the table's row, then run the script). Included by kiln/tensor.h, after the enums kiln_pad_mode
 * and kiln_meshgrid_indexing. Every op consumes its tensor arguments (pass kiln_ref(t) to keep
 * t) and runs in every dtype; views share their input's storage.
 *
 *   kiln_tensor a = kiln_arange(KILN_CPU, KILN_F32, 0, 60, 1);
 *   kiln_tensor v = kiln_transpose(kiln_reshape(a, KILN_SHAPE(3, 4, 5)), 0, 2);   // [5, 4, 3], a view
 *   kiln_tensor c = kiln_cumsum(v, 0);                                            // running sum along dim 0
 */
#ifndef KILN_SHAPE_OPS_H
#define KILN_SHAPE_OPS_H

#include "kiln/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* t's elements in another shape. One dim may be -1 (inferred). A view: copies only when the
 * layout cannot be viewed. */
KILN_API kiln_tensor kiln_reshape(kiln_tensor t, kiln_shape shape);
/* t's dims in another order (a view): dim i of the result is dim order[i] of t. */
KILN_API kiln_tensor kiln_permute(kiln_tensor t, kiln_dims order);
KILN_API kiln_tensor kiln_transpose(kiln_tensor t, int dim0, int dim1); /* dims dim0 and dim1 swapped (a view). */
/* elements start .. start + length - 1 along dim (a view). */
KILN_API kiln_tensor kiln_narrow(kiln_tensor t, int dim, int64_t start, int64_t length);
/* t[..., start:end:step, ...] along dim (a view). Python-style: start and end may be negative
 * (from the end), end is clamped to the size, step > 0. */
KILN_API kiln_tensor kiln_slice(kiln_tensor t, int dim, int64_t start, int64_t end, int64_t step);
/* size-1 dims broadcast to shape (a view); -1 keeps a dim, new dims go in front. */
KILN_API kiln_tensor kiln_expand(kiln_tensor t, kiln_shape shape);
KILN_API kiln_tensor kiln_squeeze(kiln_tensor t, int dim); /* dim removed; it must have size 1 (a view). */
KILN_API kiln_tensor kiln_unsqueeze(kiln_tensor t, int dim); /* a dim of size 1 inserted at dim (a view). */
/* dims start_dim .. end_dim merged into one (a view when the layout allows). */
KILN_API kiln_tensor kiln_flatten(kiln_tensor t, int start_dim, int end_dim);
KILN_API kiln_tensor kiln_contiguous(kiln_tensor t); /* a dense copy of t, or t itself when already dense. */
/* the n tensors joined along dim (consumes all n). They have one dtype and device and equal
 * sizes but along dim. */
KILN_API kiln_tensor kiln_cat(const kiln_tensor *ts, int n, int dim);
/* the n tensors of one shape joined along a new dim (consumes all n). */
KILN_API kiln_tensor kiln_stack(const kiln_tensor *ts, int n, int dim);
/* t's slices at index along dim (torch.index_select); index: 1-d i32/i64. */
KILN_API kiln_tensor kiln_index_select(kiln_tensor t, int dim, kiln_tensor index);
/* out[i][j][k] = t[i][j][index[i][j][k]] for dim 2 (torch.gather). */
KILN_API kiln_tensor kiln_gather(kiln_tensor t, int dim, kiln_tensor index);
/* out = t; out[index[i][j]][j] += src[i][j] for dim 0 (torch.scatter_add). */
KILN_API kiln_tensor kiln_scatter_add(kiln_tensor t, int dim, kiln_tensor index, kiln_tensor src);
/* a where the bool mask is true, else b; all three broadcast. */
KILN_API kiln_tensor kiln_where(kiln_tensor mask, kiln_tensor a, kiln_tensor b);
/* x with value wherever the bool mask is true (torch.Tensor.masked_fill). The mask broadcasts to
 * x's shape (it never grows it); the result has x's shape and dtype, and the value must fit that
 * dtype (an integer x refuses NaN or an out-of-range value). The gradient is zero where filled;
 * the mask gets none. */
KILN_API kiln_tensor kiln_masked_fill(kiln_tensor x, kiln_tensor mask, double value);
/* x's lower triangle of the last two dims (torch.tril), zero above. Any batch dims in front:
 * element (i, j) is kept when j - i <= diagonal, zero otherwise; diagonal 0 is the main
 * diagonal, > 0 above it, < 0 below. Any dtype; x needs at least 2 dims. */
KILN_API kiln_tensor kiln_tril(kiln_tensor x, int64_t diagonal);
/* x's upper triangle of the last two dims (torch.triu): j - i >= diagonal kept, zero elsewhere. */
KILN_API kiln_tensor kiln_triu(kiln_tensor x, int64_t diagonal);
/* torch.flip: the order of the elements along each of dims reversed (a copy). */
KILN_API kiln_tensor kiln_flip(kiln_tensor t, kiln_dims dims);
/* torch.roll along one dim: element i moves to (i + shift) mod size; shift may be negative. */
KILN_API kiln_tensor kiln_roll(kiln_tensor t, int64_t shift, int dim);
/* torch.Tensor.repeat: dim i of t repeated repeats[i] times. repeats has at least t's ndim
 * entries (t's shape is padded with leading 1s); at most 7 dims where a count is not 1. */
KILN_API kiln_tensor kiln_repeat(kiln_tensor t, kiln_shape repeats);
/* torch.tile: kiln_repeat with reps padded with leading 1s when shorter than t's dims. */
KILN_API kiln_tensor kiln_tile(kiln_tensor t, kiln_shape reps);
/* running sum along dim (torch.cumsum); integers and bools accumulate in i64. */
KILN_API kiln_tensor kiln_cumsum(kiln_tensor t, int dim);
/* running product along dim (torch.cumprod); integers and bools accumulate in i64. */
KILN_API kiln_tensor kiln_cumprod(kiln_tensor t, int dim);
/* torch.clone: a dense copy in its own storage (t consumed). Later in-place updates of t's
 * storage (an optimizer step on a parameter) do not show in it. Differentiable (the identity). */
KILN_API kiln_tensor kiln_clone(kiln_tensor t);
/* torch.split: views of pieces of split_size along dim (the last may be smaller) written to
 * out[0 .. ret). Returns the number of pieces; on error writes one poisoned tensor to out[0] and
 * returns 1 (0 when out is NULL or cap < 1). cap must hold every piece. */
KILN_API int kiln_split(kiln_tensor t, int64_t split_size, int dim, kiln_tensor *out, int cap);
/* torch.chunk: t cut along dim into at most chunks views of ceil(size / chunks) (the last may be
 * smaller). Returns and writes as kiln_split; an empty dim gives chunks empty pieces, as torch. */
KILN_API int kiln_chunk(kiln_tensor t, int chunks, int dim, kiln_tensor *out, int cap);
/* torch.meshgrid of n 1-d (or 0-d, as size 1) tensors of one dtype and device, all consumed.
 * Writes n tensors of shape [s0, s1, ...] (IJ) or [s1, s0, s2, ...] (XY: the first two swapped,
 * as numpy) to out, where out[i] repeats input i along the other dims (expanded views). Returns
 * n; on error every out[i] (i < min(n, cap)) is poisoned with it and that count is returned (0
 * when out is NULL or cap < 1). Differentiable. */
KILN_API int kiln_meshgrid(const kiln_tensor *ts, int n, kiln_meshgrid_indexing indexing, kiln_tensor *out, int cap);
/* torch.nn.functional.pad: pads holds (left, right) pairs, the last dim's first.
 * KILN_PAD_CONSTANT fills with value (negative pads crop); KILN_PAD_REFLECT mirrors without
 * repeating the edge (pads < size); KILN_PAD_REPLICATE repeats the edge. Differentiable in t. */
KILN_API kiln_tensor kiln_pad(kiln_tensor t, kiln_shape pads, kiln_pad_mode mode, double value);
/* torch.nn.functional.one_hot: out[..., i] = 1 where i == index[...], else 0, in dtype. index is
 * integer, each value in [0, num_classes); the result has index's shape and a last dim of
 * num_classes. Not differentiable. */
KILN_API kiln_tensor kiln_one_hot(kiln_tensor index, int64_t num_classes, kiln_dtype dtype);
/* torch.sort along dim: the values, and the i64 indices in *indices when it is not NULL. NaN
 * sorts as the largest value; equal values keep their order (stable). On failure *indices is
 * another handle to the same error. The values are differentiable. */
KILN_API kiln_tensor kiln_sort(kiln_tensor t, int dim, bool descending, kiln_tensor *indices);
/* torch.argsort: the i64 indices kiln_sort gives (stable; NaN largest). */
KILN_API kiln_tensor kiln_argsort(kiln_tensor t, int dim, bool descending);
/* torch.topk: the k largest (or smallest) values along dim, in order, and their i64 indices in
 * *indices. As kiln_sort: NaN largest, ties in their order, *indices the error on failure, the
 * values differentiable. */
KILN_API kiln_tensor kiln_topk(kiln_tensor t, int64_t k, int dim, bool largest, kiln_tensor *indices);
/* torch.Tensor.unfold: every window of size elements along dim, step apart. dim becomes the
 * (size(dim) - size) / step + 1 windows and a last dim of size is added. A copy (not a view as
 * in PyTorch, since windows may overlap); differentiable (overlaps add up). size from 0 to
 * size(dim), step >= 1. */
KILN_API kiln_tensor kiln_unfold(kiln_tensor t, int dim, int64_t size, int64_t step);
/* t's values in dtype (torch.Tensor.to(dtype)). t itself when it has that dtype already.
 * Differentiable into a float dtype (the gradient cast back); into an integer or bool one, no
 * gradient. */
KILN_API kiln_tensor kiln_cast(kiln_tensor t, kiln_dtype dtype);

/* The calls that record the caller's file:line, as in core.h's list (kiln/tensor.h's
 * KILN_TENSOR_API includes it). */
#define KILN_SHAPE_OPS_API(X) \
    X(kiln_tensor, reshape, (kiln_tensor t, kiln_shape shape), (t, shape)) \
    X(kiln_tensor, permute, (kiln_tensor t, kiln_dims order), (t, order)) \
    X(kiln_tensor, transpose, (kiln_tensor t, int dim0, int dim1), (t, dim0, dim1)) \
    X(kiln_tensor, narrow, (kiln_tensor t, int dim, int64_t start, int64_t length), (t, dim, start, length)) \
    X(kiln_tensor, slice, (kiln_tensor t, int dim, int64_t start, int64_t end, int64_t step), (t, dim, start, end, step)) \
    X(kiln_tensor, expand, (kiln_tensor t, kiln_shape shape), (t, shape)) \
    X(kiln_tensor, squeeze, (kiln_tensor t, int dim), (t, dim)) \
    X(kiln_tensor, unsqueeze, (kiln_tensor t, int dim), (t, dim)) \
    X(kiln_tensor, flatten, (kiln_tensor t, int start_dim, int end_dim), (t, start_dim, end_dim)) \
    X(kiln_tensor, contiguous, (kiln_tensor t), (t)) \
    X(kiln_tensor, cat, (const kiln_tensor *ts, int n, int dim), (ts, n, dim)) \
    X(kiln_tensor, stack, (const kiln_tensor *ts, int n, int dim), (ts, n, dim)) \
    X(kiln_tensor, index_select, (kiln_tensor t, int dim, kiln_tensor index), (t, dim, index)) \
    X(kiln_tensor, gather, (kiln_tensor t, int dim, kiln_tensor index), (t, dim, index)) \
    X(kiln_tensor, scatter_add, (kiln_tensor t, int dim, kiln_tensor index, kiln_tensor src), (t, dim, index, src)) \
    X(kiln_tensor, where, (kiln_tensor mask, kiln_tensor a, kiln_tensor b), (mask, a, b)) \
    X(kiln_tensor, masked_fill, (kiln_tensor x, kiln_tensor mask, double value), (x, mask, value)) \
    X(kiln_tensor, tril, (kiln_tensor x, int64_t diagonal), (x, diagonal)) \
    X(kiln_tensor, triu, (kiln_tensor x, int64_t diagonal), (x, diagonal)) \
    X(kiln_tensor, flip, (kiln_tensor t, kiln_dims dims), (t, dims)) \
    X(kiln_tensor, roll, (kiln_tensor t, int64_t shift, int dim), (t, shift, dim)) \
    X(kiln_tensor, repeat, (kiln_tensor t, kiln_shape repeats), (t, repeats)) \
    X(kiln_tensor, tile, (kiln_tensor t, kiln_shape reps), (t, reps)) \
    X(kiln_tensor, cumsum, (kiln_tensor t, int dim), (t, dim)) \
    X(kiln_tensor, cumprod, (kiln_tensor t, int dim), (t, dim)) \
    X(kiln_tensor, clone, (kiln_tensor t), (t)) \
    X(int, split, (kiln_tensor t, int64_t split_size, int dim, kiln_tensor *out, int cap), (t, split_size, dim, out, cap)) \
    X(int, chunk, (kiln_tensor t, int chunks, int dim, kiln_tensor *out, int cap), (t, chunks, dim, out, cap)) \
    X(int, meshgrid, (const kiln_tensor *ts, int n, kiln_meshgrid_indexing indexing, kiln_tensor *out, int cap), (ts, n, indexing, out, cap)) \
    X(kiln_tensor, pad, (kiln_tensor t, kiln_shape pads, kiln_pad_mode mode, double value), (t, pads, mode, value)) \
    X(kiln_tensor, one_hot, (kiln_tensor index, int64_t num_classes, kiln_dtype dtype), (index, num_classes, dtype)) \
    X(kiln_tensor, sort, (kiln_tensor t, int dim, bool descending, kiln_tensor *indices), (t, dim, descending, indices)) \
    X(kiln_tensor, argsort, (kiln_tensor t, int dim, bool descending), (t, dim, descending)) \
    X(kiln_tensor, topk, (kiln_tensor t, int64_t k, int dim, bool largest, kiln_tensor *indices), (t, k, dim, largest, indices)) \
    X(kiln_tensor, unfold, (kiln_tensor t, int dim, int64_t size, int64_t step), (t, dim, size, step)) \
    X(kiln_tensor, cast, (kiln_tensor t, kiln_dtype dtype), (t, dtype))
KILN_SHAPE_OPS_API(KILN__AT_DECLARE)

#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#pragma GCC system_header /* see core.h: errors in these calls name the caller's line */
#define kiln_reshape(...) KILN__AT(reshape, __VA_ARGS__)
#define kiln_permute(...) KILN__AT(permute, __VA_ARGS__)
#define kiln_transpose(...) KILN__AT(transpose, __VA_ARGS__)
#define kiln_narrow(...) KILN__AT(narrow, __VA_ARGS__)
#define kiln_slice(...) KILN__AT(slice, __VA_ARGS__)
#define kiln_expand(...) KILN__AT(expand, __VA_ARGS__)
#define kiln_squeeze(...) KILN__AT(squeeze, __VA_ARGS__)
#define kiln_unsqueeze(...) KILN__AT(unsqueeze, __VA_ARGS__)
#define kiln_flatten(...) KILN__AT(flatten, __VA_ARGS__)
#define kiln_contiguous(...) KILN__AT(contiguous, __VA_ARGS__)
#define kiln_cat(...) KILN__AT(cat, __VA_ARGS__)
#define kiln_stack(...) KILN__AT(stack, __VA_ARGS__)
#define kiln_index_select(...) KILN__AT(index_select, __VA_ARGS__)
#define kiln_gather(...) KILN__AT(gather, __VA_ARGS__)
#define kiln_scatter_add(...) KILN__AT(scatter_add, __VA_ARGS__)
#define kiln_where(...) KILN__AT(where, __VA_ARGS__)
#define kiln_masked_fill(...) KILN__AT(masked_fill, __VA_ARGS__)
#define kiln_tril(...) KILN__AT(tril, __VA_ARGS__)
#define kiln_triu(...) KILN__AT(triu, __VA_ARGS__)
#define kiln_flip(...) KILN__AT(flip, __VA_ARGS__)
#define kiln_roll(...) KILN__AT(roll, __VA_ARGS__)
#define kiln_repeat(...) KILN__AT(repeat, __VA_ARGS__)
#define kiln_tile(...) KILN__AT(tile, __VA_ARGS__)
#define kiln_cumsum(...) KILN__AT(cumsum, __VA_ARGS__)
#define kiln_cumprod(...) KILN__AT(cumprod, __VA_ARGS__)
#define kiln_clone(...) KILN__AT(clone, __VA_ARGS__)
#define kiln_split(...) KILN__AT(split, __VA_ARGS__)
#define kiln_chunk(...) KILN__AT(chunk, __VA_ARGS__)
#define kiln_meshgrid(...) KILN__AT(meshgrid, __VA_ARGS__)
#define kiln_pad(...) KILN__AT(pad, __VA_ARGS__)
#define kiln_one_hot(...) KILN__AT(one_hot, __VA_ARGS__)
#define kiln_sort(...) KILN__AT(sort, __VA_ARGS__)
#define kiln_argsort(...) KILN__AT(argsort, __VA_ARGS__)
#define kiln_topk(...) KILN__AT(topk, __VA_ARGS__)
#define kiln_unfold(...) KILN__AT(unfold, __VA_ARGS__)
#define kiln_cast(...) KILN__AT(cast, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif
#endif
