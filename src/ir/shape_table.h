/* The shape op table: one row per public view, join, indexing, masking and scan op of
 * kiln/tensor.h (reshape ... tile, cumsum, cumprod): ops that move, pick or accumulate elements
 * without arithmetic between them, so every dtype runs them and their values are exact. From
 * it come, through scripts/gen_optable.py (its module scripts/optable_shape.py), their public
 * prototypes with their docs, call-site list KILN_SHAPE_OPS_API and macros
 * (include/kiln/shape_ops.h, which kiln/tensor.h includes), the Python binding's rows of those
 * with a generated caller (python/src/shape_table_generated.h), and the table-driven device,
 * gradient and bad-input test (tests/test_backend_ops_shape.c). Their kernels keep the opcodes
 * listed in ir/opcodes.h (views have none: they are layouts). DESIGN.md, section 7.
 *
 * X(NAME, name, sig, args, arity, dtype, shape, grad, tol, py, ex, out, bad, bad_status, doc):
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
 *   args    the parameters' names, in order
 *   arity   the differentiable tensor arguments (x, and y where the example takes it)
 *   dtype   SAME: the input's dtype, any dtype; PROMOTE: torch.result_type of the two value
 *           tensors (where); SCAN: integers and bools accumulate in i64, floats keep theirs
 *   shape   the result's shape: GIVEN (the shape argument, one -1 inferred), PERMUTED, NARROWED
 *           (dim cut to length), SLICED, EXPANDED (size-1 dims broadcast; more dims in front),
 *           SQUEEZED, UNSQUEEZED, FLATTENED, SAME, JOINED (cat: dim summed), STACKED (a new dim of
 *           n), INDEXED (dim becomes the index's length), INDEX (the index's shape), BROADCAST
 *           (the operands broadcast together), REPEATED (each dim times its count)
 *   grad    the gradient rule: VIEW (autodiff/rules_view.c: the inverse view, a slice scattered
 *           into zeros, a broadcast summed back), JOIN (rules_index.c: the gradient cut into the
 *           inputs' pieces), INDEX (rules_index.c: scatter-added into zeros at the index; src's
 *           gathered back), SELECT (rules_elementwise.c: each operand's gradient where it was
 *           picked), MASK (rules_mask.c: the same mask applied to the gradient), SCAN
 *           (rules_scan.c), OPS (a composition of differentiable ops in api/shape.c)
 *   tol     the f32 result's largest normalized squared error against the f64 run (0: exact)
 *   py      the Python name (torch's) where python/src/shape_table_generated.h makes the binding
 *           (sig DIM: t.name(dim) and kiln.name(t, dim); OFFSET: t.name(diagonal=0)), HAND where the binding is hand-written
 *           (methods.c, module.c: varargs shapes, tuples of tensors, torch's optional dims),
 *           NONE where Python has no such function yet
 *   ex      an example call's arguments, which the test runs: over x and y (two [3, 4, 5]
 *           tensors of one dtype; x seen through a view), PAIR(a, b) (an array of both),
 *           MASK ([4, 5] bool, broadcast), and the index tensors SELECT_INDEX ([3], in [0, 4)),
 *           GATHER_INDEX ([3, 4, 2], in [0, 5)) and SCATTER_INDEX ([3, 4, 5], in [0, 3)), i64
 *   out     the example's result shape
 *   bad     a bad call's arguments (MASK_F32: a float mask; STALE: a released handle) and
 *   bad_status  the status it must fail with, naming kiln_name
 *   doc     its documentation: one line, then (adjacent string literals on the lines below the
 *           row) the details, which the generated header wraps above the prototype
 *
 * A row starts on a line of its own and ends with its doc: the generator reads them. */
#ifndef KILN_IR_SHAPE_TABLE_H
#define KILN_IR_SHAPE_TABLE_H

/* clang-format off */
#define KILN__SHAPE_TABLE(X) \
    X(RESHAPE,      reshape,      SHAPE,   (t, shape),                   1, SAME,    GIVEN,      VIEW,   0,     HAND,      (x, KILN_SHAPE(4, -1)),                       (4, 15),       (x, KILN_SHAPE(7, 9)),              SHAPE, \
      "t's elements in another shape. " \
      "One dim may be -1 (inferred). A view: copies only when the layout cannot be viewed.") \
    X(PERMUTE,      permute,      DIMS,    (t, order),                   1, SAME,    PERMUTED,   VIEW,   0,     HAND,      (x, KILN_DIMS(2, 0, 1)),                      (5, 3, 4),     (x, KILN_DIMS(0, 0, 1)),            INVALID_ARGUMENT, \
      "t's dims in another order (a view): dim i of the result is dim order[i] of t.") \
    X(TRANSPOSE,    transpose,    DIM2,    (t, dim0, dim1),              1, SAME,    PERMUTED,   VIEW,   0,     HAND,      (x, 0, 2),                                    (5, 4, 3),     (x, 0, 3),                          INVALID_ARGUMENT, \
      "dims dim0 and dim1 swapped (a view).") \
    X(NARROW,       narrow,       NARROW,  (t, dim, start, length),      1, SAME,    NARROWED,   VIEW,   0,     NONE,      (x, 1, 1, 2),                                 (3, 2, 5),     (x, 1, 3, 2),                       INDEX,  \
      "elements start .. start + length - 1 along dim (a view).") \
    X(SLICE,        slice,        SLICE,   (t, dim, start, end, step),   1, SAME,    SLICED,     VIEW,   0,     NONE,      (x, 2, -4, 5, 2),                             (3, 4, 2),     (x, 2, 0, 5, 0),                    INVALID_ARGUMENT, \
      "t[..., start:end:step, ...] along dim (a view). " \
      "Python-style: start and end may be negative (from the end), end is clamped to the size, step > 0.") \
    X(EXPAND,       expand,       SHAPE,   (t, shape),                   1, SAME,    EXPANDED,   VIEW,   0,     HAND,      (x, KILN_SHAPE(2, -1, -1, -1)),               (2, 3, 4, 5),  (x, KILN_SHAPE(3, 2, 5)),           SHAPE, \
      "size-1 dims broadcast to shape (a view); -1 keeps a dim, new dims go in front.") \
    X(SQUEEZE,      squeeze,      DIM,     (t, dim),                     1, SAME,    SQUEEZED,   VIEW,   0,     HAND,      (kiln_narrow(x, 1, 2, 1), 1),                 (3, 5),        (x, 0),                             SHAPE, \
      "dim removed; it must have size 1 (a view).") \
    X(UNSQUEEZE,    unsqueeze,    DIM,     (t, dim),                     1, SAME,    UNSQUEEZED, VIEW,   0,     unsqueeze, (x, -1),                                      (3, 4, 5, 1),  (x, 4),                             INVALID_ARGUMENT, \
      "a dim of size 1 inserted at dim (a view).") \
    X(FLATTEN,      flatten,      DIM2,    (t, start_dim, end_dim),      1, SAME,    FLATTENED,  VIEW,   0,     HAND,      (x, 1, 2),                                    (3, 20),       (x, 2, 1),                          INVALID_ARGUMENT, \
      "dims start_dim .. end_dim merged into one (a view when the layout allows).") \
    X(CONTIGUOUS,   contiguous,   T,       (t),                          1, SAME,    SAME,       VIEW,   0,     HAND,      (x),                                          (3, 4, 5),     (STALE),                            STALE_HANDLE, \
      "a dense copy of t, or t itself when already dense.") \
    X(CAT,          cat,          LIST,    (ts, n, dim),                 2, SAME,    JOINED,     JOIN,   0,     HAND,      (PAIR(x, y), 2, 1),                           (3, 8, 5),     (PAIR(x, kiln_narrow(y, 0, 0, 2)), 2, 1), SHAPE, \
      "the n tensors joined along dim (consumes all n). " \
      "They have one dtype and device and equal sizes but along dim.") \
    X(STACK,        stack,        LIST,    (ts, n, dim),                 2, SAME,    STACKED,    JOIN,   0,     HAND,      (PAIR(x, y), 2, 0),                           (2, 3, 4, 5),  (PAIR(x, kiln_narrow(y, 0, 0, 2)), 2, 0), SHAPE, \
      "the n tensors of one shape joined along a new dim (consumes all n).") \
    X(INDEX_SELECT, index_select, INDEX,   (t, dim, index),              1, SAME,    INDEXED,    INDEX,  0,     NONE,      (x, 1, SELECT_INDEX),                         (3, 3, 5),     (x, 3, SELECT_INDEX),               INVALID_ARGUMENT, \
      "t's slices at index along dim (torch.index_select); index: 1-d i32/i64.") \
    X(GATHER,       gather,       INDEX,   (t, dim, index),              1, SAME,    INDEX,      INDEX,  0,     NONE,      (x, 2, GATHER_INDEX),                         (3, 4, 2),     (x, 3, GATHER_INDEX),               INVALID_ARGUMENT, \
      "out[i][j][k] = t[i][j][index[i][j][k]] for dim 2 (torch.gather).") \
    X(SCATTER_ADD,  scatter_add,  SCATTER, (t, dim, index, src),         2, SAME,    SAME,       INDEX,  1e-13, NONE,      (x, 0, SCATTER_INDEX, y),                     (3, 4, 5),     (x, 0, SCATTER_INDEX, kiln_narrow(y, 0, 0, 2)), SHAPE, \
      "out = t; out[index[i][j]][j] += src[i][j] for dim 0 (torch.scatter_add).") \
    X(WHERE,        where,        SELECT,  (mask, a, b),                 2, PROMOTE, BROADCAST,  SELECT, 0,     HAND,      (MASK, x, y),                                 (3, 4, 5),     (MASK_F32, x, y),                   DTYPE, \
      "a where the bool mask is true, else b; all three broadcast.") \
    X(MASKED_FILL,  masked_fill,  MASK,    (x, mask, value),             1, SAME,    SAME,       MASK,   0,     HAND,      (x, MASK, 7),                                 (3, 4, 5),     (x, MASK_F32, 7),                   DTYPE, \
      "x with value wherever the bool mask is true (torch.Tensor.masked_fill). " \
      "The mask broadcasts to x's shape (it never grows it); the result has x's shape and dtype, and the value must " \
      "fit that dtype (an integer x refuses NaN or an out-of-range value). The gradient is zero where filled; the " \
      "mask gets none.") \
    X(TRIL,         tril,         OFFSET,  (x, diagonal),                1, SAME,    SAME,       MASK,   0,     tril,      (x, 1),                                       (3, 4, 5),     (kiln_reshape(x, KILN_SHAPE(60)), 0), SHAPE, \
      "x's lower triangle of the last two dims (torch.tril), zero above. " \
      "Any batch dims in front: element (i, j) is kept when j - i <= diagonal, zero otherwise; diagonal 0 is the " \
      "main diagonal, > 0 above it, < 0 below. Any dtype; x needs at least 2 dims.") \
    X(TRIU,         triu,         OFFSET,  (x, diagonal),                1, SAME,    SAME,       MASK,   0,     triu,      (x, -1),                                      (3, 4, 5),     (kiln_reshape(x, KILN_SHAPE(60)), 0), SHAPE, \
      "x's upper triangle of the last two dims (torch.triu): j - i >= diagonal kept, zero elsewhere.") \
    X(FLIP,         flip,         DIMS,    (t, dims),                    1, SAME,    SAME,       OPS,    0,     NONE,      (x, KILN_DIMS(0, 2)),                         (3, 4, 5),     (x, KILN_DIMS(3)),                  INVALID_ARGUMENT, \
      "torch.flip: the order of the elements along each of dims reversed (a copy).") \
    X(ROLL,         roll,         ROLL,    (t, shift, dim),              1, SAME,    SAME,       OPS,    0,     NONE,      (x, -2, 2),                                   (3, 4, 5),     (x, 1, 3),                          INVALID_ARGUMENT, \
      "torch.roll along one dim: element i moves to (i + shift) mod size; shift may be negative.") \
    X(REPEAT,       repeat,       SHAPE,   (t, repeats),                 1, SAME,    REPEATED,   OPS,    0,     NONE,      (x, KILN_SHAPE(2, 1, 1, 2)),                  (2, 3, 4, 10), (x, KILN_SHAPE(2, 2)),              INVALID_ARGUMENT, \
      "torch.Tensor.repeat: dim i of t repeated repeats[i] times. " \
      "repeats has at least t's ndim entries (t's shape is padded with leading 1s); at most 7 dims where a count " \
      "is not 1.") \
    X(TILE,         tile,         SHAPE,   (t, reps),                    1, SAME,    REPEATED,   OPS,    0,     NONE,      (x, KILN_SHAPE(2, 1)),                        (3, 8, 5),     (x, KILN_SHAPE(-1)),                INVALID_ARGUMENT, \
      "torch.tile: kiln_repeat with reps padded with leading 1s when shorter than t's dims.") \
    X(CUMSUM,       cumsum,       DIM,     (t, dim),                     1, SCAN,    SAME,       SCAN,   1e-13, cumsum,    (x, 1),                                       (3, 4, 5),     (x, 3),                             INVALID_ARGUMENT, \
      "running sum along dim (torch.cumsum); integers and bools accumulate in i64.") \
    X(CUMPROD,      cumprod,      DIM,     (t, dim),                     1, SCAN,    SAME,       SCAN,   1e-13, cumprod,   (x, 2),                                       (3, 4, 5),     (x, -4),                            INVALID_ARGUMENT, \
      "running product along dim (torch.cumprod); integers and bools accumulate in i64.")
/* clang-format on */

typedef enum {
#define KILN__SHAPE_ENUM(NAME, ...) KILN__SHAPE_##NAME,
    KILN__SHAPE_TABLE(KILN__SHAPE_ENUM)
#undef KILN__SHAPE_ENUM
    KILN__SHAPE_COUNT
} kiln__shape_op;

#endif
