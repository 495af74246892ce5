/* The linear-algebra and structural op table: one row per public op that is neither elementwise
 * (ir/optable.h), a reduction (ir/reduce_table.h) nor a row op (ir/row_table.h): the products
 * (matmul, bmm, dot, outer, addmm, linear), the convolution, attention, batch norm and the pools. The kernels they run
 * (their kernel column: MATMUL, CONV2D, ATTENTION, MAX_POOL2D, AVG_POOL2D; several rows share one) are
 * KILN__LINALG_KERNELS below, with the backward kernels of the convolution and the pools; ir/opcodes.h expands that list into the opcodes.
 * From the rows come the
 * rows as data (kiln__linalg_rows, ir/opcodes.c), through scripts/gen_optable.py (its module
 * scripts/optable_linalg.py) the public prototypes, docs, call-site lists and macros
 * (include/kiln/linalg_ops.h, included by kiln/tensor.h), the Python binding's functions
 * (python/src/linalg_table_generated.h) and the JSON form, and the table-driven test
 * (tests/test_backend_ops_linalg.c), which holds each row's public function to the row's
 * signature (a compile error where they differ) and runs it against its f64 run, on every
 * device against the CPU (forward and backward), its gradient against finite differences, and
 * its bad input. DESIGN.md, section 7.
 *
 * X(NAME, name, arity, sig, args, dtype, shape, kernel, grad, tol, layer, py, doc):
 *   NAME    the row's id
 *   name    the public kiln_name
 *   arity   tensor arguments (the optional ones, KILN_NONE allowed, included)
 *   sig     the public signature, with args's names:
 *           AB          kiln_name(kiln_tensor a, kiln_tensor b)
 *           LINEAR      kiln_name(x, w, bias)
 *           CONV2D      kiln_name(x, w, bias, int stride_h, stride_w, pad_h, pad_w, dilation_h,
 *                       dilation_w, groups)
 *           ATTENTION   kiln_name(q, k, v, attn_mask, bool is_causal, double scale)
 *           ADDMM       kiln_name(input, m1, m2, double beta, double alpha)
 *           BATCH_NORM  kiln_name(x, kiln_tensor *running_mean, *running_var, weight, bias,
 *                       bool training, double momentum, double eps)
 *           POOL2D      kiln_name(x, int kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w)
 *           ADAPTIVE_POOL2D  kiln_name(x, int out_h, int out_w)
 *           POOL2D_OPTS kiln_name(x, kiln_pool2d_options o) (the type is kiln/tensor.h's, which
 *                       includes kiln/linalg_ops.h after it)
 *   args    the parameters' names, in order
 *   dtype   FLOAT_SAME: floating-point tensors of one dtype (f32 with f64, or integers, are
 *           KILN_ERR_DTYPE, as PyTorch)
 *   shape   the result's shape: MATMUL ([.., M, K] @ [.., K, N], batch dims broadcast), BMM
 *           ([B, M, K] @ [B, K, N]), DOT ([n] . [n] -> 0-d), OUTER ([n], [m] -> [n, m]), ADDMM
 *           ([n, k] @ [k, m] -> [n, m]), LINEAR ([.., in] -> [.., out]), CONV2D ([N, O, OH, OW]),
 *           ATTENTION ([.., L, Ev]), SAME (the first tensor's), POOL2D ([N, C, OH, OW] by the
 *           window), ADAPTIVE_POOL2D ([N, C, out_h, out_w])
 *   kernel  the opcode of the kernel it runs as (each backend's kernel table), or OPS: a
 *           composition of other ops, so every device that runs those runs it
 *   grad    the gradient rule: MATMUL, LINEAR (autodiff/rules_linalg.c: one node keeping the
 *           operands), CONV2D (autodiff/rules_nn.c: one node keeping x and w), ATTENTION
 *           (autodiff/rules_attention.c: q, k and v kept, the weights recomputed; with a mask
 *           the composition's own nodes), POOL2D (autodiff/rules_nn.c: one node keeping the
 *           window, and max's indices), OPS (the composition's own nodes)
 *   tol     the f32 result's largest normalized squared error against the f64 run
 *   layer   where the function is defined, and so its call-site wrapper: API (src/api/) or NN
 *           (src/nn/); the generated kiln/linalg_ops.h lists them as KILN_LINALG_API and
 *           KILN_NN_LINALG_API
 *   py      the Python binding's form (python/src/linalg_table_generated.h): METHOD, a kiln
 *           function and Tensor method with an operator's operand (kiln.matmul(a, b),
 *           a.matmul(b)); FUNCTIONAL, kiln.nn.functional.name with torch's keywords, one
 *           caller per sig (python/src/functional_linalg.c); NONE, no Python form yet
 *   doc     one line, then the details (more string pieces on the lines below the row) for the
 *           header's comment
 *
 * A row starts on its own line; its doc's detail pieces may follow on the next lines. */
#ifndef KILN_IR_LINALG_TABLE_H
#define KILN_IR_LINALG_TABLE_H

/* clang-format off */
#define KILN__LINALG_TABLE(X) \
    X(MATMUL,     matmul,                       2, AB,         (a, b),                                                                      FLOAT_SAME, MATMUL,    MATMUL,    MATMUL,    1e-10, API, METHOD,     "torch.matmul: 1-d operands promoted, batch dims broadcast" \
        " The products and the convolution take" \
        " floating-point operands of one dtype (as PyTorch's: f32 @ f64 is KILN_ERR_DTYPE; kiln_cast one of them).") \
    X(BMM,        bmm,                          2, AB,         (a, b),                                                                      FLOAT_SAME, BMM,       MATMUL,    MATMUL,    1e-10, API, METHOD,     "torch.bmm: [B, n, k] @ [B, k, m], no broadcasting") \
    X(DOT,        dot,                          2, AB,         (a, b),                                                                      FLOAT_SAME, DOT,       MATMUL,    MATMUL,    1e-10, API, METHOD,     "torch.dot: 1-d a and b of one length -> 0-d") \
    X(OUTER,      outer,                        2, AB,         (a, b),                                                                      FLOAT_SAME, OUTER,     OPS,       OPS,       1e-10, API, METHOD,     "torch.outer: 1-d [n] and [m] -> [n, m]") \
    X(ADDMM,      addmm,                        3, ADDMM,      (input, m1, m2, beta, alpha),                                                FLOAT_SAME, ADDMM,     MATMUL,    OPS,       1e-10, API, NONE,       "torch.addmm: beta * input + alpha * (m1 @ m2)" \
        " For 2-d m1 [n, k], m2 [k, m] and input broadcastable to [n, m], of the matrices' dtype; beta 0 ignores input's" \
        " values, NaN included (as PyTorch); beta and alpha finite.") \
    X(LINEAR,     linear,                       3, LINEAR,     (x, w, bias),                                                                FLOAT_SAME, LINEAR,    MATMUL,    LINEAR,    1e-10, API, FUNCTIONAL, "x @ w^T + bias; w [out, in], bias [out] or KILN_NONE") \
    X(CONV2D,     conv2d,                       3, CONV2D,     (x, w, bias, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups), FLOAT_SAME, CONV2D, CONV2D, CONV2D, 1e-10, API, FUNCTIONAL, "x [N, C, H, W], w [O, C/groups, KH, KW], bias [O] or KILN_NONE") \
    X(ATTENTION,  scaled_dot_product_attention, 4, ATTENTION,  (q, k, v, attn_mask, is_causal, scale),                                      FLOAT_SAME, ATTENTION, ATTENTION, ATTENTION, 1e-10, NN,  FUNCTIONAL, "softmax(q k^T * scale + mask) v (torch.nn.functional.scaled_dot_product_attention)" \
        " For q [..., L, E], k [..., S, E], v [..., S, Ev] (batch dims broadcast; one float dtype) giving [..., L, Ev]." \
        " attn_mask: KILN_NONE, bool (true = attend, as PyTorch) or q's dtype (added to the scores), broadcastable to" \
        " [..., L, S]. is_causal: query i attends keys 0..i (top-left aligned, also when L != S); it cannot be combined" \
        " with attn_mask (as PyTorch). scale <= 0 or NaN means the default 1/sqrt(E). A row whose keys are all masked" \
        " gives zeros with zero gradients (PyTorch >= 2.5), not NaN. All tensors are consumed; a float mask gets a" \
        " gradient. When no input is tracked (inference) on the CPU, f32/f64, it runs as one fused kernel (the scores" \
        " never a tensor; with a mask, k and v must be views of one storage, as a joint QKV projection gives) and" \
        " returns a view laid out [..., L, heads, Ev]; otherwise composed ops.") \
    X(BATCH_NORM, batch_norm,                   5, BATCH_NORM, (x, running_mean, running_var, weight, bias, training, momentum, eps),       FLOAT_SAME, SAME,      OPS,       OPS,       1e-10, NN,  FUNCTIONAL, "x [N, C, ...] normalised per channel (torch.nn.functional.batch_norm)" \
        " y = (x - mean) / sqrt(var + eps) * weight + bias, with weight and bias [C] or KILN_NONE (consumed). training: the" \
        " batch's mean and biased variance are used, and when running_mean and running_var are not NULL they are" \
        " updated, running = (1 - momentum) * running + momentum * batch (the unbiased variance, as PyTorch), in their" \
        " own dtype; otherwise (eval) the running statistics are used and must be given. The running statistics are" \
        " float [C] handles passed by pointer and not consumed: an update replaces *running_mean and *running_var with" \
        " new handles (the old ones released), as kiln_init does; on error they are left as they were. Training needs" \
        " more than one value per channel. Differentiable in x, weight and bias.") \
    X(MAX_POOL2D, max_pool2d,                   1, POOL2D,     (x, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w),                   FLOAT_SAME, POOL2D,    MAX_POOL2D, POOL2D,   1e-10, API, NONE,       "torch.nn.functional.max_pool2d: x [N, C, H, W], the largest value of each kernel_h x kernel_w window" \
        " The pools' windows move by stride (0: the kernel's size, PyTorch's stride=None) over x padded by pad_h, pad_w" \
        " (at most half the kernel; -inf for max, zeros counted in the average's divisor): out = (in + 2 pad - kernel) /" \
        " stride + 1, rounded down. Differentiable in x.") \
    X(AVG_POOL2D, avg_pool2d,                   1, POOL2D,     (x, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w),                   FLOAT_SAME, POOL2D,    AVG_POOL2D, POOL2D,   1e-10, API, NONE,       "torch.nn.functional.avg_pool2d: x [N, C, H, W], the mean of each window (as max_pool2d's)") \
    X(ADAPTIVE_AVG_POOL2D, adaptive_avg_pool2d, 1, ADAPTIVE_POOL2D, (x, out_h, out_w),                                                       FLOAT_SAME, ADAPTIVE_POOL2D, AVG_POOL2D, POOL2D, 1e-10, API, NONE, "torch.nn.functional.adaptive_avg_pool2d: x [N, C, H, W] -> [N, C, out_h, out_w], PyTorch's windows") \
    X(MAX_POOL2D_OPTS, max_pool2d_opts,         1, POOL2D_OPTS, (x, o),                                                                     FLOAT_SAME, POOL2D,    MAX_POOL2D, POOL2D,   1e-10, API, NONE,       "max_pool2d with the options of PyTorch's MaxPool2d beyond the window (kiln_pool2d_options, kiln/tensor.h)" \
        " ceil_mode rounds the output size up (a last window may hang past the input, but never starts in the trailing" \
        " padding alone; the part past the padding is never counted); exclude_pad is refused (average pooling only).") \
    X(AVG_POOL2D_OPTS, avg_pool2d_opts,         1, POOL2D_OPTS, (x, o),                                                                     FLOAT_SAME, POOL2D,    AVG_POOL2D, POOL2D,   1e-10, API, NONE,       "avg_pool2d with ceil_mode and exclude_pad (kiln_pool2d_options, kiln/tensor.h)" \
        " exclude_pad (PyTorch's count_include_pad=False) divides each window by its count of input elements instead of" \
        " its size in the padded input.")
/* clang-format on */

/* The kernels of the rows (their kernel column) and of the convolution layers, as each
 * backend's kernel table knows them: ir/opcodes.h expands this list into KILN__OPCODES.
 * X(NAME, params): the op record's layout. CONV2D's backward kernels run its gradient
 * (autodiff/rules_nn.c), the pools' backward kernels their gradients (the pools are rows:
 * max_pool2d ... avg_pool2d_opts). A row whose kernel is not
 * one of them does not compile (ir/opcodes.c). Conv params: p.i[0..3] = stride_h, stride_w,
 * pad_h, pad_w; pi[0..2] = dilation_h, dilation_w, groups. Pool params: p.i[0..3] = kernel_h,
 * kernel_w, stride_h, stride_w; pi[0..1] = pad_h, pad_w; max indices are i64 into each input
 * plane's flattened H * W. In[0] of a convolution or pool is [N, C, H, W] (any strides); outputs
 * are dense. */
#define KILN__LINALG_KERNELS(X)                                                                   \
    X(MATMUL, "in[0] [..,M,K] in[1] [..,K,N] (batch dims broadcast), out dense [..,M,N]")         \
    X(CONV2D, "in[0] x, in[1] w [O, C/g, KH, KW] dense, opt. in[2] bias [O]; out y")             \
    X(CONV2D_BACKWARD_INPUT, "in[0] dy dense, in[1] w dense; out[0] dx")                         \
    X(CONV2D_BACKWARD_WEIGHT, "in[0] dy dense, in[1] x; out[0] dw")                              \
    X(MAX_POOL2D, "out[0] values; out[1] i64 indices when n_out == 2")                           \
    X(MAX_POOL2D_BACKWARD, "in[0] dy, in[1] indices; out[0] dx (zeroed, then scattered)")         \
    X(AVG_POOL2D, "pi[2] = 1: adaptive windows (the params are unused)")                         \
    X(AVG_POOL2D_BACKWARD, "in[0] dy; out[0] dx; params as AVG_POOL2D")                          \
    X(ATTENTION, "softmax(q k^T * p.f[0] + mask) v for inference (src/backend/cpu/attention.c): " \
                 "in[0] q [.., L, E]; no mask (pi[1] 0): in[1] k, in[2] v; a mask: in[1] k and v " \
                 "as one [2, .., S, E] view (pi[1] 1: k first, 2: v first), in[2] the mask "       \
                 "[.., L, S] (bool, or q's dtype: added); pi[0] causal; out dense")

typedef enum {
    KILN__LSIG_AB,
    KILN__LSIG_LINEAR,
    KILN__LSIG_CONV2D,
    KILN__LSIG_ATTENTION,
    KILN__LSIG_BATCH_NORM,
    KILN__LSIG_ADDMM,
    KILN__LSIG_POOL2D,
    KILN__LSIG_ADAPTIVE_POOL2D,
    KILN__LSIG_POOL2D_OPTS
} kiln__linalg_sig;
typedef enum { KILN__LDT_FLOAT_SAME } kiln__linalg_dtype;
typedef enum { KILN__LLAYER_API, KILN__LLAYER_NN } kiln__linalg_layer;
typedef enum { KILN__LPY_METHOD, KILN__LPY_FUNCTIONAL, KILN__LPY_NONE } kiln__linalg_py;
typedef enum {
    KILN__LSHAPE_MATMUL,
    KILN__LSHAPE_BMM,
    KILN__LSHAPE_DOT,
    KILN__LSHAPE_OUTER,
    KILN__LSHAPE_ADDMM,
    KILN__LSHAPE_LINEAR,
    KILN__LSHAPE_CONV2D,
    KILN__LSHAPE_ATTENTION,
    KILN__LSHAPE_SAME,
    KILN__LSHAPE_POOL2D,
    KILN__LSHAPE_ADAPTIVE_POOL2D
} kiln__linalg_shape;
typedef enum {
    KILN__LGRAD_MATMUL,
    KILN__LGRAD_LINEAR,
    KILN__LGRAD_CONV2D,
    KILN__LGRAD_ATTENTION,
    KILN__LGRAD_POOL2D,
    KILN__LGRAD_OPS
} kiln__linalg_grad;

typedef enum {
#define KILN__LINALG_ENUM(NAME, ...) KILN__LINALG_##NAME,
    KILN__LINALG_TABLE(KILN__LINALG_ENUM)
#undef KILN__LINALG_ENUM
    KILN__LINALG_COUNT
} kiln__linalg_op;

/* One row, as data (ir/opcodes.c). */
typedef struct kiln__linalg_info {
    const char *name; /* "matmul" */
    int arity;
    kiln__linalg_sig sig;
    const char *args; /* "(a, b)" */
    kiln__linalg_dtype dtype;
    kiln__linalg_shape shape;
    int kernel; /* the opcode (a kiln__opcode) it runs as, or -1 for a composition */
    kiln__linalg_grad grad;
    double tol;
    kiln__linalg_layer layer;
    kiln__linalg_py py;
    const char *doc; /* the one line and its details */
} kiln__linalg_info;

#endif
