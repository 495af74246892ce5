/* The reduction table: one row per public reduction, the single place its facts are written, as
 * ir/optable.h is for the elementwise ops. From it come the reduction opcodes (ir/opcodes.h),
 * the rows as data (kiln__reduce_rows, ir/opcodes.c), the dtype rule the op layer applies
 * (ops/reduce.c), the public wrappers (api/reduce.c), the kernels' fold and finish (backend/cpu/
 * reduce.c, backend/opencl/reduce.c), the gradient rule (autodiff/rules_reduce.c), the
 * table-driven device, dtype and gradient test (tests/test_backend_ops_reduce.c) and, through scripts/gen_optable.py, the public
 * prototypes, call-site list and macros (include/kiln/ops.h) and the Python binding's reduction
 * methods (python/src/op_table_generated.h). DESIGN.md, sections 7 and 9, says how to add one.
 *
 * X(NAME, name, dtype, sig, grad, fold, finish, fuse, py, doc), one row per line:
 *   NAME   KERNEL rows: the opcode KILN__OP_NAME, a kernel of every backend; COMPOSED rows: the
 *          row's id only (its wrapper in api/reduce.c is made of other ops)
 *   name   the public kiln_name (kiln_name_dims for the dims form)
 *   dtype  what the caller gets from integer and bool inputs (floats keep their dtype; f16 and
 *          bf16 compute in f32), as PyTorch:
 *          ACCUM  i64 (torch.sum, torch.prod: integers accumulate in i64)
 *          SAME   the input's dtype (torch.amax: integers compare in i64)
 *          FLOAT  f32 (torch refuses integers for mean and var; kiln computes in f32, as
 *                 torch.logsumexp does)
 *          I64    i64, whatever the input: indices (torch.argmax), counts
 *          BOOL   bool, whatever the input (torch.any)
 *   sig    the public signature (t is consumed; dims: KILN_ALL_DIMS for all, an empty list
 *          reduces nothing; keepdim keeps the reduced dims as size 1):
 *          ALL_DIMS    kiln_name(t), over every dim to a 0-d tensor, and
 *                      kiln_name_dims(t, dims, keepdim)
 *          DIMS        kiln_name_dims(t, dims, keepdim) only
 *          CORRECTION  kiln_name_dims(t, dims, correction, keepdim): 1 unbiased, 0 population
 *          DIM         kiln_name(t, dim, keepdim): one dim
 *   grad   the gradient rule's kind (autodiff/rules_reduce.c, one backward per kind) and what
 *          it saves: NONE (not differentiable: no node is recorded), SPREAD (g broadcast back;
 *          saves nothing), MEAN (g / N broadcast back; nothing), WINNERS (g scattered to where
 *          each max/min is, the first of ties; saves those indices), PROD (the product of the
 *          others; saves the input), VAR (2 (x - mean) / (N - correction), std's over 2 std;
 *          saves the input, std its output too), SOFTMAX (g times exp(x - y); saves the input
 *          and the output)
 *   fold   the kernel's combine step and identity (each backend's reduce kernel, one case per
 *          fold): SUM (+, 0), PROD (*, 1), MAX and MIN (NaN wins, -inf and +inf; a dim of size
 *          0 fails), SQDEV (sum of (x - mean)^2: a first pass sums for the mean), EXPSUM (sum
 *          of exp(x - max): a first pass takes the max); NONE for a COMPOSED row
 *   finish what the kernel writes from the accumulator: VALUE (it, in the input's dtype: the
 *          only finishes with an i64 kernel), MEAN (over N), VAR (over N - correction; its
 *          square root for std), LSE (max + log), INDEX (the winner's i64 index: ties keep the
 *          first); NONE for a COMPOSED row
 *   fuse   whether the engine fuses it (engine/fusion_join.c, engine/substitute.c): LAST, over
 *          the last dim it ends an elementwise fusion group (its prologue computed per row in
 *          cache; the CPU interpreter and OpenCL's fused rows fold it) and a substitution
 *          pattern may end in it; NONE, it runs as its own op
 *   py     the Python method t.py(dim=None, keepdim=False) and function kiln.py(t, ...) made
 *          from the row (ALL_DIMS and DIMS rows), or HAND: torch's own signature, written in
 *          python/src/methods.c (max's (values, indices), var's unbiased, argmax's flattening)
 *   doc    one line for the header and the Python docstring
 *
 * The KERNEL rows' order is their opcodes' order. Keep one row per line: the generator reads
 * them. */
#ifndef KILN_IR_REDUCE_TABLE_H
#define KILN_IR_REDUCE_TABLE_H

/* clang-format off */
#define KILN__REDUCE_KERNELS(X) \
    X(SUM,           sum,           ACCUM, ALL_DIMS,   SPREAD,  SUM,    VALUE, LAST, sum,           "the sum; integers and bools accumulate in i64") \
    X(MEAN,          mean,          FLOAT, ALL_DIMS,   MEAN,    SUM,    MEAN,  LAST, mean,          "the mean; integers and bools give f32; NaN when empty") \
    X(PROD,          prod,          ACCUM, ALL_DIMS,   PROD,    PROD,   VALUE, NONE, prod,          "the product; integers and bools accumulate in i64") \
    X(MAX,           max,           SAME,  ALL_DIMS,   WINNERS, MAX,    VALUE, LAST, amax,          "the largest value (NaN wins); a dim of size 0 fails") \
    X(MIN,           min,           SAME,  ALL_DIMS,   WINNERS, MIN,    VALUE, LAST, amin,          "the smallest value (NaN wins); a dim of size 0 fails") \
    X(VAR,           var,           FLOAT, CORRECTION, VAR,     SQDEV,  VAR,   NONE, HAND,          "the variance: sum((t - mean)^2) / (N - correction)") \
    X(LOGSUMEXP,     logsumexp,     FLOAT, DIMS,       SOFTMAX, EXPSUM, LSE,   LAST, logsumexp,     "log(sum(exp(t))), without overflow") \
    X(ARGMAX,        argmax,        I64,   DIM,        NONE,    MAX,    INDEX, NONE, HAND,          "the i64 index of the largest value along dim; the first of ties") \
    X(ARGMIN,        argmin,        I64,   DIM,        NONE,    MIN,    INDEX, NONE, HAND,          "the i64 index of the smallest value along dim; the first of ties")

#define KILN__REDUCE_COMPOSED(X) \
    X(STD,           std,           FLOAT, CORRECTION, VAR,     NONE,   NONE,  NONE, HAND,          "the standard deviation: sqrt of var, in var's kernel") \
    X(ANY,           any,           BOOL,  ALL_DIMS,   NONE,    NONE,   NONE,  NONE, any,           "whether any element is nonzero (NaN is); false when empty") \
    X(ALL,           all,           BOOL,  ALL_DIMS,   NONE,    NONE,   NONE,  NONE, all,           "whether every element is nonzero (NaN is); true when empty") \
    X(COUNT_NONZERO, count_nonzero, I64,   ALL_DIMS,   NONE,    NONE,   NONE,  NONE, count_nonzero, "the number of nonzero elements (NaN is one), in i64")
/* clang-format on */

/* Every row: the kernels first, so a row's index is its KILN__RED_ id. */
#define KILN__REDUCE_TABLE(X) KILN__REDUCE_KERNELS(X) KILN__REDUCE_COMPOSED(X)

typedef enum {
    KILN__RDT_NONE, /* not a reduction of the table (softmax, the scans): f32 for integers */
    KILN__RDT_ACCUM,
    KILN__RDT_SAME,
    KILN__RDT_FLOAT,
    KILN__RDT_I64,
    KILN__RDT_BOOL
} kiln__reduce_dtype;
typedef enum { KILN__RSIG_ALL_DIMS, KILN__RSIG_DIMS, KILN__RSIG_CORRECTION, KILN__RSIG_DIM } kiln__reduce_signature;
typedef enum {
    KILN__RGRAD_NONE,
    KILN__RGRAD_SPREAD,
    KILN__RGRAD_MEAN,
    KILN__RGRAD_WINNERS,
    KILN__RGRAD_PROD,
    KILN__RGRAD_VAR,
    KILN__RGRAD_SOFTMAX
} kiln__reduce_grad;
typedef enum {
    KILN__RFOLD_NONE,
    KILN__RFOLD_SUM,
    KILN__RFOLD_PROD,
    KILN__RFOLD_MAX,
    KILN__RFOLD_MIN,
    KILN__RFOLD_SQDEV,
    KILN__RFOLD_EXPSUM
} kiln__reduce_fold;
typedef enum { KILN__RFUSE_NONE, KILN__RFUSE_LAST } kiln__reduce_fuse;
typedef enum {
    KILN__RFIN_NONE,
    KILN__RFIN_VALUE,
    KILN__RFIN_MEAN,
    KILN__RFIN_VAR,
    KILN__RFIN_LSE,
    KILN__RFIN_INDEX
} kiln__reduce_finish;

typedef enum {
#define KILN__RED_ENUM(NAME, ...) KILN__RED_##NAME,
    KILN__REDUCE_TABLE(KILN__RED_ENUM)
#undef KILN__RED_ENUM
    KILN__RED_COUNT
} kiln__reduction;

/* One row, as data (ir/opcodes.c; the py column is only the generator's). */
typedef struct kiln__reduce_info {
    const char *name;  /* "sum"; NULL for an opcode outside the table */
    int code;          /* its opcode (a kiln__opcode), or -1 for a COMPOSED row */
    kiln__reduce_dtype dtype;
    kiln__reduce_signature sig;
    kiln__reduce_grad grad;
    kiln__reduce_fold fold;
    kiln__reduce_finish finish;
    kiln__reduce_fuse fuse;
    const char *doc;
} kiln__reduce_info;

#endif
