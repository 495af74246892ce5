/* The row-op table: one row per op that normalises or reduces along rows of its input and is
 * neither elementwise (ir/optable.h) nor a plain reduction (ir/reduce_table.h): softmax,
 * log_softmax, the norms and the losses. From it come the KERNEL rows' opcodes (ir/opcodes.h),
 * the rows as data (kiln__row_rows, ir/opcodes.c), the public wrappers of the KERNEL rows
 * (api/reduce.c), through scripts/gen_optable.py their prototypes, call-site entries and macros
 * (include/kiln/ops.h) and the JSON form, and the table-driven device and gradient test
 * (tests/test_backend_ops_rows.c). DESIGN.md, section 7.
 *
 * X(NAME, name, arity, dims, dtype, shape, grad, domain, tol, doc), one row per line:
 *   NAME    KERNEL rows: the opcode KILN__OP_NAME, a kernel of every backend; COMPOSED rows: the
 *           row's id only (the public function is made of other ops, in nn/)
 *   name    the public kiln_name
 *   arity   tensor arguments: the input, then the target (losses) or weight and bias (norms,
 *           each of them optional: KILN_NONE)
 *   dims    the dims argument after the first tensor, which is the public signature:
 *           DIM         kiln_name(t, int dim): along one dim
 *           NORMALIZED  kiln_name(x, kiln_shape normalized_shape, weight[, bias], double eps):
 *                       over the trailing dims normalized_shape names
 *           GROUPS      kiln_name(x, int64_t num_groups, weight, bias, double eps): x [N, C, ...],
 *                       over each group of C / num_groups channels
 *           NONE        kiln_name(input, target): over every element, to a 0-d mean
 *           NONE_K      kiln_name(input, target, double k): the same with the loss's parameter
 *           NONE_FLAG   kiln_name(input, target, bool flag): the same with the loss's switch
 *           CLASSES     kiln_name(scores, targets): scores [N, C, d...], targets [N, d...] i32/i64
 *           CLASSES_OPT kiln_name(scores, targets, kiln_cross_entropy_options o)
 *   dtype   FLOAT       integers and bools compute in f32 (as torch.softmax with a dtype)
 *           FLOAT_ONLY  floating-point inputs only (torch's norms and losses): KILN_ERR_DTYPE
 *   shape   SAME (the input's shape) or SCALAR (0-d: the mean over every element or sample)
 *   grad    the gradient rule: SOFTMAX (autodiff/rules_reduce.c: one node that keeps the
 *           output), LAYER_NORM (autodiff/rules_layer_norm.c: one node that keeps the
 *           normalised input and 1/std), OPS (the composition's own ops record their nodes)
 *   domain  test inputs: ANY [-2.5, 2.5], PROB (0.05, 0.95): probabilities and targets
 *   tol     the f32 result's largest normalized squared error against the f64 run
 *   doc     one line for the header
 *
 * The KERNEL rows' order is their opcodes' order. Keep one row per line: the generator reads
 * them. */
#ifndef KILN_IR_ROW_TABLE_H
#define KILN_IR_ROW_TABLE_H

/* clang-format off */
#define KILN__ROW_KERNELS(X) \
    X(SOFTMAX,     softmax,     1, DIM, FLOAT, SAME, SOFTMAX, ANY, 1e-12, "exp(t) / sum(exp(t)) along dim; integers and bools give f32") \
    X(LOG_SOFTMAX, log_softmax, 1, DIM, FLOAT, SAME, SOFTMAX, ANY, 1e-12, "t - logsumexp(t) along dim, without overflow")

#define KILN__ROW_COMPOSED(X) \
    X(LAYER_NORM,   layer_norm,   3, NORMALIZED,  FLOAT_ONLY, SAME,   LAYER_NORM, ANY,  1e-11, "(x - mean) / sqrt(var + eps) * weight + bias over the trailing dims") \
    X(RMS_NORM,     rms_norm,     2, NORMALIZED,  FLOAT_ONLY, SAME,   OPS,        ANY,  1e-11, "x / sqrt(mean(x^2) + eps) * weight over the trailing dims") \
    X(GROUP_NORM,   group_norm,   3, GROUPS,      FLOAT_ONLY, SAME,   OPS,        ANY,  1e-11, "each group of channels normalised, then * weight + bias per channel") \
    X(MSE_LOSS,     mse_loss,     2, NONE,        FLOAT_ONLY, SCALAR, OPS,        ANY,  1e-12, "mean((input - target)^2)") \
    X(L1_LOSS,      l1_loss,      2, NONE,        FLOAT_ONLY, SCALAR, OPS,        ANY,  1e-12, "mean(|input - target|)") \
    X(SMOOTH_L1_LOSS, smooth_l1_loss, 2, NONE_K,  FLOAT_ONLY, SCALAR, OPS,        ANY,  1e-12, "0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta; averaged") \
    X(HUBER_LOSS,   huber_loss,   2, NONE_K,      FLOAT_ONLY, SCALAR, OPS,        ANY,  1e-12, "0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta); averaged") \
    X(BCE_WITH_LOGITS, bce_with_logits, 2, NONE,  FLOAT_ONLY, SCALAR, OPS,        ANY,  1e-12, "mean(softplus(x) - x y): binary cross-entropy of logits") \
    X(BINARY_CROSS_ENTROPY, binary_cross_entropy, 2, NONE, FLOAT_ONLY, SCALAR, OPS, PROB, 1e-12, "-mean(y log p + (1 - y) log(1 - p)), each log clamped at -100") \
    X(KL_DIV,       kl_div,       2, NONE_FLAG,   FLOAT_ONLY, SCALAR, OPS,        PROB, 1e-12, "mean(target (log target - input)); the flag: target holds log-probabilities") \
    X(CROSS_ENTROPY, cross_entropy, 2, CLASSES_OPT, FLOAT_ONLY, SCALAR, OPS,      ANY,  1e-12, "-mean(log_softmax(scores)[target]) over the samples") \
    X(NLL_LOSS,     nll_loss,     2, CLASSES,     FLOAT_ONLY, SCALAR, OPS,        ANY,  1e-12, "-mean(log_probs[target]) over the samples")
/* clang-format on */

/* Every row: the kernels first, so a row's index is its KILN__ROW_ id. */
#define KILN__ROW_TABLE(X) KILN__ROW_KERNELS(X) KILN__ROW_COMPOSED(X)

typedef enum {
    KILN__RDIMS_DIM,
    KILN__RDIMS_NORMALIZED,
    KILN__RDIMS_GROUPS,
    KILN__RDIMS_NONE,
    KILN__RDIMS_NONE_K,
    KILN__RDIMS_NONE_FLAG,
    KILN__RDIMS_CLASSES,
    KILN__RDIMS_CLASSES_OPT
} kiln__row_dims;
typedef enum { KILN__ROWDT_FLOAT, KILN__ROWDT_FLOAT_ONLY } kiln__row_dtype;
typedef enum { KILN__ROWSHAPE_SAME, KILN__ROWSHAPE_SCALAR } kiln__row_shape;
typedef enum { KILN__ROWGRAD_SOFTMAX, KILN__ROWGRAD_LAYER_NORM, KILN__ROWGRAD_OPS } kiln__row_grad;
typedef enum { KILN__ROWDOM_ANY, KILN__ROWDOM_PROB } kiln__row_domain;

typedef enum {
#define KILN__ROW_ENUM(NAME, ...) KILN__ROW_##NAME,
    KILN__ROW_TABLE(KILN__ROW_ENUM)
#undef KILN__ROW_ENUM
    KILN__ROW_COUNT
} kiln__row_op;

/* One row, as data (ir/opcodes.c). */
typedef struct kiln__row_info {
    const char *name; /* "softmax" */
    int code;         /* its opcode (a kiln__opcode), or -1 for a COMPOSED row */
    int arity;
    kiln__row_dims dims;
    kiln__row_dtype dtype;
    kiln__row_shape shape;
    kiln__row_grad grad;
    kiln__row_domain domain;
    double tol;
    const char *doc;
} kiln__row_info;

#endif
