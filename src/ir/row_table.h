/* The row-op table: one row per op that normalises or reduces along rows of its input and is
 * neither elementwise (ir/optable.h) nor a plain reduction (ir/reduce_table.h): softmax,
 * log_softmax, the norms and the losses. From it come the KERNEL rows' opcodes (ir/opcodes.h),
 * the rows as data (kiln__row_rows, ir/opcodes.c), the public wrappers of the KERNEL rows
 * (api/reduce.c), through scripts/gen_optable.py every row's prototypes, call-site entries and
 * macros (the KERNEL rows' in include/kiln/ops.h, the COMPOSED rows' in include/kiln/nn_ops.h,
 * which kiln/nn.h includes), the Python binding's functions (python/src/op_table_generated.h)
 * and the JSON form, and the table-driven device and gradient test
 * (tests/test_backend_ops_rows.c). DESIGN.md, section 7.
 *
 * X(NAME, name, arity, dims, args, ex, dtype, shape, grad, domain, tol, py, doc):
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
 *   args    the parameters' names in the public signature, in order (the dims column gives
 *           their types), each with its Python default after '=' where it has one
 *           (Python's None: C's NaN for a double)
 *   ex      a second public form: REDUCTION kiln_name_ex(..., kiln_reduction reduction)
 *           (PyTorch's reduction argument); OPTIONS kiln_name_ex(..., kiln_cross_entropy_options
 *           o); NO none
 *   dtype   FLOAT       integers and bools compute in f32 (as torch.softmax with a dtype)
 *           FLOAT_ONLY  floating-point inputs only (torch's norms and losses): KILN_ERR_DTYPE
 *   shape   SAME (the input's shape) or SCALAR (0-d: the mean over every element or sample)
 *   grad    the gradient rule: SOFTMAX (autodiff/rules_reduce.c: one node that keeps the
 *           output), LAYER_NORM (autodiff/rules_layer_norm.c: one node that keeps the
 *           normalised input and 1/std), OPS (the composition's own ops record their nodes)
 *   domain  test inputs: ANY [-2.5, 2.5], PROB (0.05, 0.95): probabilities and targets
 *   tol     the f32 result's largest normalized squared error against the f64 run
 *   py      the Python name (torch's): a DIM row's Tensor method and kiln function, another
 *           row's kiln.nn.functional function
 *   doc     its documentation: one line, then (adjacent string literals on the lines below the
 *           row) the details, which the generated header wraps above the prototype
 *
 * The KERNEL rows' order is their opcodes' order. A row starts on a line of its own and ends
 * with its doc: the generator reads them. */
#ifndef KILN_IR_ROW_TABLE_H
#define KILN_IR_ROW_TABLE_H

/* clang-format off */
#define KILN__ROW_KERNELS(X) \
    X(SOFTMAX,     softmax,     1, DIM, (t, dim), NO, FLOAT, SAME, SOFTMAX, ANY, 1e-12, softmax, "exp(t) / sum(exp(t)) along dim; integers and bools give f32") \
    X(LOG_SOFTMAX, log_softmax, 1, DIM, (t, dim), NO, FLOAT, SAME, SOFTMAX, ANY, 1e-12, log_softmax, "t - logsumexp(t) along dim, without overflow")

#define KILN__ROW_COMPOSED(X) \
    X(LAYER_NORM, layer_norm, 3, NORMALIZED, (x, normalized_shape, weight=None, bias=None, eps=1e-5), NO, FLOAT_ONLY, SAME, LAYER_NORM, ANY, 1e-11, layer_norm, \
      "(x - mean) / sqrt(var + eps) * weight + bias over the trailing dims. " \
      "torch.nn.functional.layer_norm: normalises over the trailing dims normalized_shape names (x's last dims " \
      "must equal it) with the biased variance; weight and bias are float tensors of normalized_shape or " \
      "KILN_NONE (consumed).") \
    X(RMS_NORM, rms_norm, 2, NORMALIZED, (x, normalized_shape, weight=None, eps=None), NO, FLOAT_ONLY, SAME, OPS, ANY, 1e-11, rms_norm, \
      "x / sqrt(mean(x^2) + eps) * weight over the trailing dims. " \
      "torch.nn.functional.rms_norm: the mean over the trailing normalized_shape dims; weight of " \
      "normalized_shape or KILN_NONE (consumed). eps NaN means the dtype's epsilon (PyTorch's eps=None). " \
      "Differentiable in x and weight.") \
    X(GROUP_NORM, group_norm, 3, GROUPS, (x, num_groups, weight=None, bias=None, eps=1e-5), NO, FLOAT_ONLY, SAME, OPS, ANY, 1e-11, group_norm, \
      "each group of channels normalised, then * weight + bias per channel. " \
      "torch.nn.functional.group_norm: x [N, C, ...] with C split into num_groups groups, each (sample, group) " \
      "normalised over its channels and positions with the biased variance, then * weight + bias per channel " \
      "([C] or KILN_NONE; consumed). Differentiable.") \
    X(MSE_LOSS, mse_loss, 2, NONE, (prediction, target), REDUCTION, FLOAT_ONLY, SCALAR, OPS, ANY, 1e-12, mse_loss, \
      "mean((input - target)^2); float inputs of one shape (no broadcasting).") \
    X(L1_LOSS, l1_loss, 2, NONE, (prediction, target), REDUCTION, FLOAT_ONLY, SCALAR, OPS, ANY, 1e-12, l1_loss, \
      "mean(|input - target|) (torch's l1_loss); float inputs of one shape.") \
    X(SMOOTH_L1_LOSS, smooth_l1_loss, 2, NONE_K, (prediction, target, beta=1.0), REDUCTION, FLOAT_ONLY, SCALAR, OPS, ANY, 1e-12, smooth_l1_loss, \
      "0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta; averaged. " \
      "torch's smooth_l1_loss: beta >= 0 (0 is L1); a bad beta gives KILN_ERR_INVALID_ARGUMENT.") \
    X(HUBER_LOSS, huber_loss, 2, NONE_K, (prediction, target, delta=1.0), REDUCTION, FLOAT_ONLY, SCALAR, OPS, ANY, 1e-12, huber_loss, \
      "0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta); averaged. " \
      "torch's huber_loss: delta > 0; a bad delta gives KILN_ERR_INVALID_ARGUMENT.") \
    X(BCE_WITH_LOGITS, bce_with_logits, 2, NONE, (logits, target), REDUCTION, FLOAT_ONLY, SCALAR, OPS, ANY, 1e-12, binary_cross_entropy_with_logits, \
      "mean(softplus(x) - x y): binary cross-entropy of logits, stable for large |x|.") \
    X(BINARY_CROSS_ENTROPY, binary_cross_entropy, 2, NONE, (probabilities, target), REDUCTION, FLOAT_ONLY, SCALAR, OPS, PROB, 1e-12, binary_cross_entropy, \
      "-mean(y log p + (1 - y) log(1 - p)), each log clamped at -100. " \
      "torch's binary_cross_entropy on probabilities in [0, 1] (values outside give NaN rather than torch's " \
      "error, as they are only seen when computed). Prefer kiln_bce_with_logits, which is stable.") \
    X(KL_DIV, kl_div, 2, NONE_FLAG, (input, target, log_target=False), REDUCTION, FLOAT_ONLY, SCALAR, OPS, PROB, 1e-12, kl_div, \
      "mean(target (log target - input)); the flag: target holds log-probabilities. " \
      "torch's kl_div(input, target, reduction='mean'): input holds log-probabilities, target probabilities " \
      "(log-probabilities with log_target); 0 where target is 0. The _ex form also takes BATCHMEAN.") \
    X(CROSS_ENTROPY, cross_entropy, 2, CLASSES_OPT, (logits, targets, o), NO, FLOAT_ONLY, SCALAR, OPS, ANY, 1e-12, cross_entropy, \
      "-mean(log_softmax(scores)[target]) over the samples. " \
      "logits [N, C] (consumed), targets [N] i32/i64 class indices (consumed); as PyTorch, also logits " \
      "[N, C, d1, ...] with targets [N, d1, ...] (a class per position; NONE gives [N, d1, ...]) and " \
      "unbatched logits [C] with a 0-d target.") \
    X(NLL_LOSS, nll_loss, 2, CLASSES, (log_probs, targets), OPTIONS, FLOAT_ONLY, SCALAR, OPS, ANY, 1e-12, nll_loss, \
      "-mean(log_probs[target]) over the samples; the other shapes as kiln_cross_entropy's. " \
      "The _ex form is torch's nll_loss(log_probs, targets, weight, ignore_index, reduction) with o's " \
      "class_weights (not consumed), ignore_index and reduction; o.label_smoothing must be 0.")
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
typedef enum { KILN__ROWEX_NO, KILN__ROWEX_REDUCTION, KILN__ROWEX_OPTIONS } kiln__row_ex;

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
    const char *args; /* "(t, dim)": the parameters' names, with their Python defaults */
    kiln__row_ex ex;
    kiln__row_dtype dtype;
    kiln__row_shape shape;
    kiln__row_grad grad;
    kiln__row_domain domain;
    double tol;
    const char *py;
    const char *doc;
} kiln__row_info;

#endif
