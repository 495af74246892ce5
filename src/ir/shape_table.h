/* The shape op table: one row per public view, join, split, indexing, masking, scan, sort and
 * conversion op of kiln/tensor.h (reshape ... cumprod, clone, split, chunk, meshgrid, pad,
 * one_hot, sort, argsort, topk, unfold, cast): ops that move, pick, order, convert or accumulate
 * elements without arithmetic between them, so every dtype runs them and their values are
 * exact. From
 * it come, through scripts/gen_optable.py (its module scripts/optable_shape.py), their public
 * prototypes with their docs, call-site list KILN_SHAPE_OPS_API and macros
 * (include/kiln/shape_ops.h, which kiln/tensor.h includes), the Python binding's rows of those
 * with a generated caller (python/src/shape_table_generated.h), and the table-driven device,
 * gradient and bad-input test (tests/test_backend_ops_shape.c), and the opcodes of the kernels
 * they run (KILN__SHAPE_KERNELS below, which ir/opcodes.h expands). DESIGN.md, section 7.
 *
 * X(NAME, name, sig, args, arity, dtype, shape, kernel, grad, tol, py, ex, out, bad, bad_status,
 *   doc):
 *   NAME    the row's id (KILN__SHAPE_NAME)
 *   name    the public kiln_name
 *   sig     the public signature's parameter types, args naming them in order:
 *           T        (kiln_tensor)                          SHAPE  (kiln_tensor, kiln_shape)
 *           DIMS     (kiln_tensor, kiln_dims)               DIM    (kiln_tensor, int)
 *           DIM2     (kiln_tensor, int, int)                NARROW (kiln_tensor, int, int64_t, int64_t)
 *           SLICE    (kiln_tensor, int, int64_t, int64_t, int64_t)
 *           LIST     (const kiln_tensor *, int n, int dim)  INDEX  (kiln_tensor, int, kiln_tensor)
 *           SCATTER  (kiln_tensor, int, kiln_tensor, kiln_tensor)
 *           SELECT   (kiln_tensor, kiln_tensor, kiln_tensor)
 *           MASK     (kiln_tensor, kiln_tensor, double)     OFFSET (kiln_tensor, int64_t)
 *           ROLL     (kiln_tensor, int64_t, int)
 *           SPLIT    (kiln_tensor, int64_t, int, kiln_tensor *out, int cap) -> int
 *           CHUNK    (kiln_tensor, int, int, kiln_tensor *out, int cap) -> int
 *           MESHGRID (const kiln_tensor *, int n, kiln_meshgrid_indexing, kiln_tensor *out, int cap) -> int
 *           PAD      (kiln_tensor, kiln_shape, kiln_pad_mode, double)
 *           ONE_HOT  (kiln_tensor, int64_t, kiln_dtype)     ARGSORT (kiln_tensor, int, bool)
 *           SORT     (kiln_tensor, int, bool, kiln_tensor *indices)
 *           TOPK     (kiln_tensor, int64_t, int, bool, kiln_tensor *indices)
 *           UNFOLD   (kiln_tensor, int, int64_t, int64_t)   CAST (kiln_tensor, kiln_dtype)
 *           the -> int ones return the count of tensors written to out (an array of outputs);
 *           SORT and TOPK a second output, the indices, through their last parameter
 *   args    the parameters' names, in order
 *   arity   the differentiable tensor arguments (x, and y where the example takes it; 0: no
 *           gradient, the result is indices or classes)
 *   dtype   SAME: the input's dtype, any dtype; PROMOTE: torch.result_type of the two value
 *           tensors (where); SCAN: integers and bools accumulate in i64, floats keep theirs;
 *           I64: i64 indices; GIVEN: the dtype argument
 *   shape   the result's shape: GIVEN (the shape argument, one -1 inferred), PERMUTED, NARROWED
 *           (dim cut to length), SLICED, EXPANDED (size-1 dims broadcast; more dims in front),
 *           SQUEEZED, UNSQUEEZED, FLATTENED, SAME, JOINED (cat: dim summed), STACKED (a new dim of
 *           n), INDEXED (dim becomes the index's length), INDEX (the index's shape), BROADCAST
 *           (the operands broadcast together), REPEATED (each dim times its count), PIECES (the
 *           pieces of dim), GRID (the n sizes), PADDED (each dim plus its pads), CLASSES (the
 *           index's, then num_classes), KEPT (dim becomes k), WINDOWS (dim becomes the windows,
 *           a last dim of the window's size)
 *   kernel  the kernel the row runs (a row of KILN__SHAPE_KERNELS below: its opcode), NONE (a
 *           view: a layout, no kernel) or OPS (other tables' ops: copies, elementwise, index)
 *   grad    the gradient rule: VIEW (autodiff/rules_view.c: the inverse view, a slice scattered
 *           into zeros, a broadcast summed back), JOIN (rules_index.c: the gradient cut into the
 *           inputs' pieces), INDEX (rules_index.c: scatter-added into zeros at the index; src's
 *           gathered back), SELECT (rules_elementwise.c: each operand's gradient where it was
 *           picked), MASK (rules_mask.c: the same mask applied to the gradient), SCAN
 *           (rules_scan.c), SORT (rules_scan.c: scattered back to where each value came from),
 *           CAST (rules_elementwise.c: the gradient cast back to the input's dtype),
 *           OPS (a composition of differentiable ops in api/), NONE (not differentiable)
 *   tol     the f32 result's largest normalized squared error against the f64 run (0: exact)
 *   py      the Python name (torch's) where python/src/shape_table_generated.h makes the binding
 *           (sig DIM: t.name(dim) and kiln.name(t, dim); OFFSET: t.name(diagonal=0); the sigs of
 *           python/src/shape_ops.c's callers, with torch's keywords), HAND where the binding is hand-written
 *           (methods.c, module.c: varargs shapes, tuples of tensors, torch's optional dims),
 *           NONE where Python has no such function yet (or binds it under another name: cast is t.to)
 *   ex      an example call's arguments, which the test runs: over x and y (two [3, 4, 5]
 *           tensors of one dtype; x seen through a view), PAIR(a, b) (an array of both),
 *           MASK ([4, 5] bool, broadcast), and the index tensors SELECT_INDEX ([3], in [0, 4)),
 *           GATHER_INDEX ([3, 4, 2], in [0, 5)) and SCATTER_INDEX ([3, 4, 5], in [0, 3)), i64;
 *           OUT (a second output's address) and OUTS, OUTS_CAP (an array of outputs, its size)
 *   out     the example's result shape; a row with more than one output: the count of their
 *           elements (the test joins them, flattened, the indices cast to the values' dtype)
 *   bad     a bad call's arguments (MASK_F32: a float mask; STALE: a released handle; BAD_DTYPE: no
 *           dtype) and
 *   bad_status  the status it must fail with, naming kiln_name
 *   doc     its documentation: one line, then (adjacent string literals on the lines below the
 *           row) the details, which the generated header wraps above the prototype
 *
 * A row starts on a line of its own and ends with its doc: the generator reads them. */
#ifndef KILN_IR_SHAPE_TABLE_H
#define KILN_IR_SHAPE_TABLE_H

/* clang-format off */
#define KILN__SHAPE_TABLE(X) \
    X(RESHAPE,      reshape,      SHAPE,   (t, shape),                   1, SAME,    GIVEN,      NONE,         VIEW,   0,     HAND,      (x, KILN_SHAPE(4, -1)),                       (4, 15),       (x, KILN_SHAPE(7, 9)),              SHAPE, \
      "t's elements in another shape. " \
      "One dim may be -1 (inferred). A view: copies only when the layout cannot be viewed.") \
    X(PERMUTE,      permute,      DIMS,    (t, order),                   1, SAME,    PERMUTED,   NONE,         VIEW,   0,     HAND,      (x, KILN_DIMS(2, 0, 1)),                      (5, 3, 4),     (x, KILN_DIMS(0, 0, 1)),            INVALID_ARGUMENT, \
      "t's dims in another order (a view): dim i of the result is dim order[i] of t.") \
    X(TRANSPOSE,    transpose,    DIM2,    (t, dim0, dim1),              1, SAME,    PERMUTED,   NONE,         VIEW,   0,     HAND,      (x, 0, 2),                                    (5, 4, 3),     (x, 0, 3),                          INVALID_ARGUMENT, \
      "dims dim0 and dim1 swapped (a view).") \
    X(NARROW,       narrow,       NARROW,  (t, dim, start, length),      1, SAME,    NARROWED,   NONE,         VIEW,   0,     NONE,      (x, 1, 1, 2),                                 (3, 2, 5),     (x, 1, 3, 2),                       INDEX,  \
      "elements start .. start + length - 1 along dim (a view).") \
    X(SLICE,        slice,        SLICE,   (t, dim, start, end, step),   1, SAME,    SLICED,     NONE,         VIEW,   0,     NONE,      (x, 2, -4, 5, 2),                             (3, 4, 2),     (x, 2, 0, 5, 0),                    INVALID_ARGUMENT, \
      "t[..., start:end:step, ...] along dim (a view). " \
      "Python-style: start and end may be negative (from the end), end is clamped to the size, step > 0.") \
    X(EXPAND,       expand,       SHAPE,   (t, shape),                   1, SAME,    EXPANDED,   NONE,         VIEW,   0,     HAND,      (x, KILN_SHAPE(2, -1, -1, -1)),               (2, 3, 4, 5),  (x, KILN_SHAPE(3, 2, 5)),           SHAPE, \
      "size-1 dims broadcast to shape (a view); -1 keeps a dim, new dims go in front.") \
    X(SQUEEZE,      squeeze,      DIM,     (t, dim),                     1, SAME,    SQUEEZED,   NONE,         VIEW,   0,     HAND,      (kiln_narrow(x, 1, 2, 1), 1),                 (3, 5),        (x, 0),                             SHAPE, \
      "dim removed; it must have size 1 (a view).") \
    X(UNSQUEEZE,    unsqueeze,    DIM,     (t, dim),                     1, SAME,    UNSQUEEZED, NONE,         VIEW,   0,     unsqueeze, (x, -1),                                      (3, 4, 5, 1),  (x, 4),                             INVALID_ARGUMENT, \
      "a dim of size 1 inserted at dim (a view).") \
    X(FLATTEN,      flatten,      DIM2,    (t, start_dim, end_dim),      1, SAME,    FLATTENED,  NONE,         VIEW,   0,     HAND,      (x, 1, 2),                                    (3, 20),       (x, 2, 1),                          INVALID_ARGUMENT, \
      "dims start_dim .. end_dim merged into one (a view when the layout allows).") \
    X(CONTIGUOUS,   contiguous,   T,       (t),                          1, SAME,    SAME,       OPS,          VIEW,   0,     HAND,      (x),                                          (3, 4, 5),     (STALE),                            STALE_HANDLE, \
      "a dense copy of t, or t itself when already dense.") \
    X(CAT,          cat,          LIST,    (ts, n, dim),                 2, SAME,    JOINED,     OPS,          JOIN,   0,     HAND,      (PAIR(x, y), 2, 1),                           (3, 8, 5),     (PAIR(x, kiln_narrow(y, 0, 0, 2)), 2, 1), SHAPE, \
      "the n tensors joined along dim (consumes all n). " \
      "They have one dtype and device and equal sizes but along dim.") \
    X(STACK,        stack,        LIST,    (ts, n, dim),                 2, SAME,    STACKED,    OPS,          JOIN,   0,     HAND,      (PAIR(x, y), 2, 0),                           (2, 3, 4, 5),  (PAIR(x, kiln_narrow(y, 0, 0, 2)), 2, 0), SHAPE, \
      "the n tensors of one shape joined along a new dim (consumes all n).") \
    X(INDEX_SELECT, index_select, INDEX,   (t, dim, index),              1, SAME,    INDEXED,    INDEX_SELECT, INDEX,  0,     NONE,      (x, 1, SELECT_INDEX),                         (3, 3, 5),     (x, 3, SELECT_INDEX),               INVALID_ARGUMENT, \
      "t's slices at index along dim (torch.index_select); index: 1-d i32/i64.") \
    X(GATHER,       gather,       INDEX,   (t, dim, index),              1, SAME,    INDEX,      GATHER,       INDEX,  0,     NONE,      (x, 2, GATHER_INDEX),                         (3, 4, 2),     (x, 3, GATHER_INDEX),               INVALID_ARGUMENT, \
      "out[i][j][k] = t[i][j][index[i][j][k]] for dim 2 (torch.gather).") \
    X(SCATTER_ADD,  scatter_add,  SCATTER, (t, dim, index, src),         2, SAME,    SAME,       SCATTER_ADD,  INDEX,  1e-13, NONE,      (x, 0, SCATTER_INDEX, y),                     (3, 4, 5),     (x, 0, SCATTER_INDEX, kiln_narrow(y, 0, 0, 2)), SHAPE, \
      "out = t; out[index[i][j]][j] += src[i][j] for dim 0 (torch.scatter_add).") \
    X(WHERE,        where,        SELECT,  (mask, a, b),                 2, PROMOTE, BROADCAST,  OPS,          SELECT, 0,     HAND,      (MASK, x, y),                                 (3, 4, 5),     (MASK_F32, x, y),                   DTYPE, \
      "a where the bool mask is true, else b; all three broadcast.") \
    X(MASKED_FILL,  masked_fill,  MASK,    (x, mask, value),             1, SAME,    SAME,       OPS,          MASK,   0,     HAND,      (x, MASK, 7),                                 (3, 4, 5),     (x, MASK_F32, 7),                   DTYPE, \
      "x with value wherever the bool mask is true (torch.Tensor.masked_fill). " \
      "The mask broadcasts to x's shape (it never grows it); the result has x's shape and dtype, and the value must " \
      "fit that dtype (an integer x refuses NaN or an out-of-range value). The gradient is zero where filled; the " \
      "mask gets none.") \
    X(TRIL,         tril,         OFFSET,  (x, diagonal),                1, SAME,    SAME,       OPS,          MASK,   0,     tril,      (x, 1),                                       (3, 4, 5),     (kiln_reshape(x, KILN_SHAPE(60)), 0), SHAPE, \
      "x's lower triangle of the last two dims (torch.tril), zero above. " \
      "Any batch dims in front: element (i, j) is kept when j - i <= diagonal, zero otherwise; diagonal 0 is the " \
      "main diagonal, > 0 above it, < 0 below. Any dtype; x needs at least 2 dims.") \
    X(TRIU,         triu,         OFFSET,  (x, diagonal),                1, SAME,    SAME,       OPS,          MASK,   0,     triu,      (x, -1),                                      (3, 4, 5),     (kiln_reshape(x, KILN_SHAPE(60)), 0), SHAPE, \
      "x's upper triangle of the last two dims (torch.triu): j - i >= diagonal kept, zero elsewhere.") \
    X(FLIP,         flip,         DIMS,    (t, dims),                    1, SAME,    SAME,       OPS,          OPS,    0,     NONE,      (x, KILN_DIMS(0, 2)),                         (3, 4, 5),     (x, KILN_DIMS(3)),                  INVALID_ARGUMENT, \
      "torch.flip: the order of the elements along each of dims reversed (a copy).") \
    X(ROLL,         roll,         ROLL,    (t, shift, dim),              1, SAME,    SAME,       OPS,          OPS,    0,     NONE,      (x, -2, 2),                                   (3, 4, 5),     (x, 1, 3),                          INVALID_ARGUMENT, \
      "torch.roll along one dim: element i moves to (i + shift) mod size; shift may be negative.") \
    X(REPEAT,       repeat,       SHAPE,   (t, repeats),                 1, SAME,    REPEATED,   OPS,          OPS,    0,     NONE,      (x, KILN_SHAPE(2, 1, 1, 2)),                  (2, 3, 4, 10), (x, KILN_SHAPE(2, 2)),              INVALID_ARGUMENT, \
      "torch.Tensor.repeat: dim i of t repeated repeats[i] times. " \
      "repeats has at least t's ndim entries (t's shape is padded with leading 1s); at most 7 dims where a count " \
      "is not 1.") \
    X(TILE,         tile,         SHAPE,   (t, reps),                    1, SAME,    REPEATED,   OPS,          OPS,    0,     NONE,      (x, KILN_SHAPE(2, 1)),                        (3, 8, 5),     (x, KILN_SHAPE(-1)),                INVALID_ARGUMENT, \
      "torch.tile: kiln_repeat with reps padded with leading 1s when shorter than t's dims.") \
    X(CUMSUM,       cumsum,       DIM,     (t, dim),                     1, SCAN,    SAME,       CUMSUM,       SCAN,   1e-13, cumsum,    (x, 1),                                       (3, 4, 5),     (x, 3),                             INVALID_ARGUMENT, \
      "running sum along dim (torch.cumsum); integers and bools accumulate in i64.") \
    X(CUMPROD,      cumprod,      DIM,     (t, dim),                     1, SCAN,    SAME,       CUMPROD,      SCAN,   1e-13, cumprod,   (x, 2),                                       (3, 4, 5),     (x, -4),                            INVALID_ARGUMENT, \
      "running product along dim (torch.cumprod); integers and bools accumulate in i64.") \
    X(CLONE,        clone,        T,       (t),                          1, SAME,    SAME,       OPS,          OPS,    0,     HAND,      (x),                                          (3, 4, 5),     (STALE),                            STALE_HANDLE, \
      "torch.clone: a dense copy in its own storage (t consumed). " \
      "Later in-place updates of t's storage (an optimizer step on a parameter) do not show in it. Differentiable " \
      "(the identity).") \
    X(SPLIT,        split,        SPLIT,   (t, split_size, dim, out, cap), 1, SAME,  PIECES,     NONE,         VIEW,   0,     split,     (x, 2, 2, OUTS, OUTS_CAP),                    (60),          (x, 2, 2, OUTS, 2),                 INVALID_ARGUMENT, \
      "torch.split: views of pieces of split_size along dim (the last may be smaller) written to out[0 .. ret). " \
      "Returns the number of pieces; on error writes one poisoned tensor to out[0] and returns 1 (0 when out is " \
      "NULL or cap < 1). cap must hold every piece.") \
    X(CHUNK,        chunk,        CHUNK,   (t, chunks, dim, out, cap),   1, SAME,    PIECES,     NONE,         VIEW,   0,     chunk,     (x, 2, 1, OUTS, OUTS_CAP),                    (60),          (x, 0, 1, OUTS, OUTS_CAP),          INVALID_ARGUMENT, \
      "torch.chunk: t cut along dim into at most chunks views of ceil(size / chunks) (the last may be smaller). " \
      "Returns and writes as kiln_split; an empty dim gives chunks empty pieces, as torch.") \
    X(MESHGRID,     meshgrid,     MESHGRID, (ts, n, indexing, out, cap), 2, SAME,    GRID,       NONE,         OPS,    0,     meshgrid,  (PAIR(kiln_narrow(kiln_flatten(x, 0, 2), 0, 0, 4), kiln_narrow(kiln_flatten(y, 0, 2), 0, 0, 3)), 2, KILN_MESHGRID_XY, OUTS, OUTS_CAP), (24), (PAIR(x, y), 2, KILN_MESHGRID_IJ, OUTS, OUTS_CAP), SHAPE, \
      "torch.meshgrid of n 1-d (or 0-d, as size 1) tensors of one dtype and device, all consumed. " \
      "Writes n tensors of shape [s0, s1, ...] (IJ) or [s1, s0, s2, ...] (XY: the first two swapped, as numpy) to " \
      "out, where out[i] repeats input i along the other dims (expanded views). Returns n; on error every out[i] " \
      "(i < min(n, cap)) is poisoned with it and that count is returned (0 when out is NULL or cap < 1). " \
      "Differentiable.") \
    X(PAD,          pad,          PAD,     (t, pads, mode, value),       1, SAME,    PADDED,     OPS,          OPS,    0,     pad,       (x, KILN_SHAPE(1, 2, 0, 1), KILN_PAD_REFLECT, 0), (3, 5, 8),  (x, KILN_SHAPE(1), KILN_PAD_CONSTANT, 0), INVALID_ARGUMENT, \
      "torch.nn.functional.pad: pads holds (left, right) pairs, the last dim's first. " \
      "KILN_PAD_CONSTANT fills with value (negative pads crop); KILN_PAD_REFLECT mirrors without repeating the " \
      "edge (pads < size); KILN_PAD_REPLICATE repeats the edge. Differentiable in t.") \
    X(ONE_HOT,      one_hot,      ONE_HOT, (index, num_classes, dtype),  0, GIVEN,   CLASSES,    ONE_HOT,      NONE,   0,     one_hot,   (kiln_remainder_scalar(kiln_cast(x, KILN_I64), 3), 3, KILN_I64), (3, 4, 5, 3), (kiln_cast(x, KILN_I64), 0, KILN_I64), INVALID_ARGUMENT, \
      "torch.nn.functional.one_hot: out[..., i] = 1 where i == index[...], else 0, in dtype. " \
      "index is integer, each value in [0, num_classes); the result has index's shape and a last dim of " \
      "num_classes. Not differentiable.") \
    X(SORT,         sort,         SORT,    (t, dim, descending, indices), 1, SAME,   SAME,       SORT,         SORT,   0,     sort,      (x, 1, true, OUT),                            (120),         (x, 3, false, OUT),                 INVALID_ARGUMENT, \
      "torch.sort along dim: the values, and the i64 indices in *indices when it is not NULL. " \
      "NaN sorts as the largest value; equal values keep their order (stable). On failure *indices is another " \
      "handle to the same error. The values are differentiable.") \
    X(ARGSORT,      argsort,      ARGSORT, (t, dim, descending),         0, I64,     SAME,       SORT,         NONE,   0,     argsort,   (x, 2, false),                                (3, 4, 5),     (x, -4, false),                     INVALID_ARGUMENT, \
      "torch.argsort: the i64 indices kiln_sort gives (stable; NaN largest).") \
    X(TOPK,         topk,         TOPK,    (t, k, dim, largest, indices), 1, SAME,   KEPT,       SORT,         SORT,   0,     topk,      (x, 3, 2, true, OUT),                         (72),          (x, 6, 2, true, OUT),               INVALID_ARGUMENT, \
      "torch.topk: the k largest (or smallest) values along dim, in order, and their i64 indices in *indices. " \
      "As kiln_sort: NaN largest, ties in their order, *indices the error on failure, the values differentiable.") \
    X(UNFOLD,       unfold,       UNFOLD,  (t, dim, size, step),         1, SAME,    WINDOWS,    OPS,          OPS,    0,     unfold,    (x, 2, 2, 1),                                 (3, 4, 4, 2),  (x, 2, 6, 1),                       INVALID_ARGUMENT, \
      "torch.Tensor.unfold: every window of size elements along dim, step apart. " \
      "dim becomes the (size(dim) - size) / step + 1 windows and a last dim of size is added. A copy (not a view " \
      "as in PyTorch, since windows may overlap); differentiable (overlaps add up). size from 0 to size(dim), step " \
      ">= 1.") \
    X(CAST,         cast,         CAST,    (t, dtype),                   1, GIVEN,   SAME,       OPS,          CAST,   0,     NONE,      (x, KILN_F64),                                (3, 4, 5),     (x, BAD_DTYPE),                    DTYPE, \
      "t's values in dtype (torch.Tensor.to(dtype)). " \
      "t itself when it has that dtype already. Differentiable into a float dtype (the gradient cast back); into " \
      "an integer or bool one, no gradient.")
/* clang-format on */

/* The kernels the rows run (their kernel column), as each backend's kernel table knows them:
 * ir/opcodes.h expands this list into KILN__OPCODES, so these opcodes come from here. X(NAME,
 * params): the op record's layout. A kernel no row names runs a row's gradient (its row in the
 * comment); scripts/optable_shape.py checks both ways. */
#define KILN__SHAPE_KERNELS(X)                                                                   \
    X(INDEX_SELECT, "in[0] src, in[1] index (1-d), dim p.i[0]")                                   \
    X(GATHER, "in[0] src, in[1] index, dim p.i[0]")                                               \
    X(SCATTER_ADD, "out += scatter(in[1] src at in[0] index), dim p.i[0]")                        \
    X(ONE_HOT, "in[0] index, classes p.i[0]")                                                     \
    X(SORT, "in[0] x; out[0] values, out[1] i64 indices: the first p.i[2] of each line along "    \
            "dim p.i[0], descending if p.i[1] (NaN largest), stable")                             \
    X(CUMSUM, "dim p.i[0], reverse p.i[1] (from the end); out same shape")                        \
    X(CUMPROD, "dim p.i[0], reverse p.i[1] (from the end); out same shape")                       \
    X(CUMPROD_BACKWARD, "CUMPROD's gradient: in[0] grad, in[1] x, dim p.i[0]; out dx (exact "     \
                        "where x has zeros)")

typedef enum {
#define KILN__SHAPE_ENUM(NAME, ...) KILN__SHAPE_##NAME,
    KILN__SHAPE_TABLE(KILN__SHAPE_ENUM)
#undef KILN__SHAPE_ENUM
    KILN__SHAPE_COUNT
} kiln__shape_op;

#endif
