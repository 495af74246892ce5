/* The op table: one row per elementwise op, the single place its facts are written. From it
 * come the opcodes (ir/opcodes.h), their names, the fusion classes (ir/expr.c, OpenCL's vector
 * rows), the dtype rules (ops/elementwise.c), what autodiff saves (autodiff/rules_elementwise.c),
 * the public wrappers (api/elementwise.c), the CPU math kernels' op list (backend/cpu/vmath.h),
 * the OpenCL C text of each row (KILN__OPTABLE_DEVICE_C below, backend/opencl/codegen.c), the
 * table-driven device and gradient test (tests/test_backend_ops.c), and, through
 * scripts/gen_optable.py, the public prototypes, call-site list and macros
 * (include/kiln/ops.h) and a JSON form for other generators (the Python method table).
 * DESIGN.md, sections 7 and 9, says how to add an op.
 *
 * X(NAME, name, arity, dtype, shape, fuse, grad, sig, cpu, domain, doc), one row per line:
 *   NAME    opcode KILN__OP_NAME
 *   name    the public kiln_name (and the Python method name)
 *   arity   tensor inputs
 *   dtype   the dtype rule (kiln__dtype_rule below)
 *   shape   BCAST: inputs broadcast to the output's shape; SAME: one input, same shape
 *   fuse    NONE, EW (joins elementwise fusion groups), EW_VEC (and its OpenCL form is the same
 *           expression on floatN, so rows fuse vectorised)
 *   grad    NONE (not differentiable: bool results, no node recorded), ZERO (the gradient is
 *           zero), SAVE_NONE / SAVE_IN / SAVE_OUT (its rule reads nothing, the input, the
 *           output: autodiff saves only that), BINARY (binary_backward's rule), EXPR (the
 *           gradient expression of its KILN__OPEXPR row below; it saves what that reads)
 *   sig     the public signature: T (kiln_tensor t), AB (kiln_tensor a, kiln_tensor b), or a
 *           kind with parameters, T_D, T_DD, T_DDD (t and one to three doubles), ABC (three
 *           tensors), whose names and doc are the row's entry in KILN__OPTABLE_PARAMS below;
 *           NONE: internal, no public function
 *   cpu     VMATH: the CPU runs it with the vectorised math kernel KILN_VMATH_NAME
 *           (backend/cpu/vmath*.{c,h}); TYPED: a typed loop in backend/cpu/elementwise_*.c;
 *           EXPR: a vmath kernel too, built from its KILN__OPEXPR row's expression
 *   domain  test inputs: ANY [-2.5, 2.5], POS [0.25, 2.5], AWAY (|x| in [0.25, 2.5]),
 *           BOOL (true/false), WIDE [-6, 6] (a clamp's flat parts too)
 *   doc     one line for the header and the Python docstring
 *
 * The rows' order is the opcodes' order. Keep one row per line: the generator reads them. */
#ifndef KILN_IR_OPTABLE_H
#define KILN_IR_OPTABLE_H

/* clang-format off */
#define KILN__OPTABLE(X) \
    X(COPY,          copy,          1, CAST,       SAME,  EW_VEC, NONE,      NONE, TYPED, ANY,  "out = in converted to out's dtype; any strides, same shape") \
    X(NEG,           neg,           1, SAME,       BCAST, EW_VEC, SAVE_NONE, T,    TYPED, ANY,  "-t") \
    X(ABS,           abs,           1, SAME,       BCAST, EW_VEC, SAVE_IN,   T,    TYPED, ANY,  "|t|") \
    X(SIGN,          sign,          1, SAME,       BCAST, EW,     ZERO,      T,    TYPED, ANY,  "-1, 0 or 1 by the sign of t") \
    X(EXP,           exp,           1, FLOAT,      BCAST, EW_VEC, SAVE_OUT,  T,    VMATH, ANY,  "e^t") \
    X(LOG,           log,           1, FLOAT,      BCAST, EW_VEC, SAVE_IN,   T,    VMATH, POS,  "natural logarithm") \
    X(LOG1P,         log1p,         1, FLOAT,      BCAST, EW_VEC, SAVE_IN,   T,    VMATH, POS,  "log(1 + t), accurate near 0") \
    X(EXPM1,         expm1,         1, FLOAT,      BCAST, EW_VEC, SAVE_OUT,  T,    VMATH, ANY,  "e^t - 1, accurate near 0") \
    X(SQRT,          sqrt,          1, FLOAT,      BCAST, EW_VEC, SAVE_OUT,  T,    VMATH, POS,  "square root") \
    X(RSQRT,         rsqrt,         1, FLOAT,      BCAST, EW_VEC, SAVE_OUT,  T,    VMATH, POS,  "1 / sqrt(t)") \
    X(SIN,           sin,           1, FLOAT,      BCAST, EW_VEC, SAVE_IN,   T,    VMATH, ANY,  "sine") \
    X(COS,           cos,           1, FLOAT,      BCAST, EW_VEC, SAVE_IN,   T,    VMATH, ANY,  "cosine") \
    X(TANH,          tanh,          1, FLOAT,      BCAST, EW_VEC, EXPR,      T,    EXPR,  ANY,  "hyperbolic tangent") \
    X(SIGMOID,       sigmoid,       1, FLOAT,      BCAST, EW_VEC, EXPR,      T,    EXPR,  ANY,  "1 / (1 + e^-t)") \
    X(RELU,          relu,          1, SAME,       BCAST, EW,     SAVE_OUT,  T,    TYPED, ANY,  "max(t, 0)") \
    X(GELU,          gelu,          1, FLOAT,      BCAST, EW_VEC, SAVE_IN,   T,    VMATH, ANY,  "t Phi(t), the erf form") \
    X(GELU_TANH,     gelu_tanh,     1, FLOAT,      BCAST, EW,     SAVE_IN,   T,    VMATH, ANY,  "gelu's tanh approximation") \
    X(SILU,          silu,          1, FLOAT,      BCAST, EW_VEC, SAVE_IN,   T,    VMATH, ANY,  "t sigmoid(t)") \
    X(SOFTPLUS,      softplus,      1, FLOAT,      BCAST, EW,     SAVE_IN,   T,    VMATH, ANY,  "log(1 + e^t); t itself above 20") \
    X(ERF,           erf,           1, FLOAT,      BCAST, EW_VEC, SAVE_IN,   T,    VMATH, ANY,  "error function") \
    X(LOGICAL_NOT,   logical_not,   1, LOGICAL,    BCAST, EW,     NONE,      T,    TYPED, BOOL, "not t (bool out)") \
    X(CLAMP,         clamp,         1, SAME,       BCAST, EW,     SAVE_IN,   T_DD, TYPED, ANY,  "lo p.f[0], hi p.f[1]; NaN = no bound") \
    X(FLOOR,         floor,         1, ROUNDING,   BCAST, EW_VEC, ZERO,      T,    VMATH, ANY,  "round down; integers unchanged, bool refused; gradient zero") \
    X(CEIL,          ceil,          1, ROUNDING,   BCAST, EW_VEC, ZERO,      T,    VMATH, ANY,  "round up; integers unchanged") \
    X(ROUND,         round,         1, ROUNDING,   BCAST, EW_VEC, ZERO,      T,    VMATH, ANY,  "round half to even; integers unchanged") \
    X(TRUNC,         trunc,         1, ROUNDING,   BCAST, EW_VEC, ZERO,      T,    VMATH, ANY,  "round toward zero; integers unchanged") \
    X(ATAN,          atan,          1, FLOAT,      BCAST, EW_VEC, EXPR,      T,    EXPR,  ANY,  "arctangent") \
    X(LOG2,          log2,          1, FLOAT,      BCAST, EW_VEC, EXPR,      T,    EXPR,  POS,  "base-2 logarithm") \
    X(LOG10,         log10,         1, FLOAT,      BCAST, EW_VEC, EXPR,      T,    EXPR,  POS,  "base-10 logarithm") \
    X(EXP2,          exp2,          1, FLOAT,      BCAST, EW_VEC, EXPR,      T,    EXPR,  ANY,  "2^t") \
    X(ISNAN,         isnan,         1, CLASSIFY,   BCAST, EW,     NONE,      T,    TYPED, ANY,  "t is NaN (bool out; false for integers)") \
    X(ISINF,         isinf,         1, CLASSIFY,   BCAST, EW,     NONE,      T,    TYPED, ANY,  "t is +-inf (bool out; false for integers)") \
    X(ISFINITE,      isfinite,      1, CLASSIFY,   BCAST, EW,     NONE,      T,    TYPED, ANY,  "t is neither NaN nor infinite (bool out)") \
    X(NAN_TO_NUM,    nan_to_num,    1, ROUNDING,   BCAST, EW,     SAVE_IN,   T_DDD, TYPED, ANY,  "NaN -> p.f[0], +inf -> p.f[1], -inf -> p.f[2]") \
    X(LOG_SIGMOID,   log_sigmoid,   1, FLOAT_ONLY, BCAST, EW,     SAVE_IN,   T,    VMATH, ANY,  "log(sigmoid(t))") \
    X(MISH,          mish,          1, FLOAT_ONLY, BCAST, EW,     SAVE_IN,   T,    VMATH, ANY,  "t tanh(softplus(t))") \
    X(SOFTSIGN,      softsign,      1, FLOAT_ONLY, BCAST, EW_VEC, SAVE_IN,   T,    VMATH, ANY,  "t / (1 + |t|)") \
    X(HARDSWISH,     hardswish,     1, FLOAT_ONLY, BCAST, EW,     EXPR,      T,    EXPR,  WIDE, "t min(max(t + 3, 0), 6) / 6") \
    X(HARDSIGMOID,   hardsigmoid,   1, FLOAT_ONLY, BCAST, EW,     EXPR,      T,    EXPR,  WIDE, "min(max(t + 3, 0), 6) / 6 (torch.nn.functional.hardsigmoid)") \
    X(RECIPROCAL,    reciprocal,    1, FLOAT,      BCAST, EW,     EXPR,      T,    EXPR,  AWAY, "1 / t (torch.reciprocal: integers give f32)") \
    X(LEAKY_RELU,    leaky_relu,    1, FLOAT_ONLY, BCAST, EW,     SAVE_IN,   T_D, TYPED, ANY,  "t < 0: t p.f[0]") \
    X(ELU,           elu,           1, FLOAT_ONLY, BCAST, EW,     SAVE_IN,   T_D, TYPED, ANY,  "alpha p.f[0], scale p.f[1], input scale p.f[2] (torch.nn.ELU/SELU)") \
    X(ADD,           add,           2, SAME,       BCAST, EW_VEC, BINARY,    AB,   TYPED, ANY,  "a + b") \
    X(SUB,           sub,           2, SAME,       BCAST, EW_VEC, BINARY,    AB,   TYPED, ANY,  "a - b") \
    X(MUL,           mul,           2, SAME,       BCAST, EW_VEC, BINARY,    AB,   TYPED, ANY,  "a * b") \
    X(DIV,           div,           2, FLOAT,      BCAST, EW_VEC, BINARY,    AB,   TYPED, AWAY, "a / b (true division: integers give f32)") \
    X(POW,           pow,           2, FLOAT,      BCAST, EW,     BINARY,    AB,   TYPED, POS,  "a^b") \
    X(MAXIMUM,       maximum,       2, SAME,       BCAST, EW,     BINARY,    AB,   TYPED, ANY,  "the larger of a and b (NaN wins)") \
    X(MINIMUM,       minimum,       2, SAME,       BCAST, EW,     BINARY,    AB,   TYPED, ANY,  "the smaller of a and b (NaN wins)") \
    X(EQ,            eq,            2, COMPARE,    BCAST, EW,     BINARY,    AB,   TYPED, ANY,  "a == b (bool out)") \
    X(NE,            ne,            2, COMPARE,    BCAST, EW,     BINARY,    AB,   TYPED, ANY,  "a != b (bool out)") \
    X(LT,            lt,            2, COMPARE,    BCAST, EW,     BINARY,    AB,   TYPED, ANY,  "a < b (bool out)") \
    X(LE,            le,            2, COMPARE,    BCAST, EW,     BINARY,    AB,   TYPED, ANY,  "a <= b (bool out)") \
    X(GT,            gt,            2, COMPARE,    BCAST, EW,     BINARY,    AB,   TYPED, ANY,  "a > b (bool out)") \
    X(GE,            ge,            2, COMPARE,    BCAST, EW,     BINARY,    AB,   TYPED, ANY,  "a >= b (bool out)") \
    X(LOGICAL_AND,   logical_and,   2, LOGICAL,    BCAST, EW,     BINARY,    AB,   TYPED, BOOL, "a and b (bool out)") \
    X(LOGICAL_OR,    logical_or,    2, LOGICAL,    BCAST, EW,     BINARY,    AB,   TYPED, BOOL, "a or b (bool out)") \
    X(FMOD,          fmod,          2, SAME,       BCAST, EW,     BINARY,    AB,   TYPED, AWAY, "C fmod: the sign of a; integer division by zero fails the op (KILN_ERR_INVALID_ARGUMENT)") \
    X(REMAINDER,     remainder,     2, SAME,       BCAST, EW,     BINARY,    AB,   TYPED, AWAY, "the sign of b (torch.remainder); integer b == 0 fails") \
    X(ATAN2,         atan2,         2, FLOAT,      BCAST, EW,     BINARY,    AB,   TYPED, AWAY, "atan2(a, b): a is y") \
    X(WHERE,         where,         3, WHERE,      BCAST, EW,     NONE,      NONE, TYPED, ANY,  "in[0] (bool) ? in[1] : in[2]") \
    X(LERP,          lerp,          3, FLOAT_ONLY, BCAST, NONE,   NONE,      ABC, TYPED, ANY,  "in[0] + in[2] (in[1] - in[0]), torch.lerp's two-sided form") \
    X(RELU_BACKWARD, relu_backward, 2, SAME,       BCAST, EW,     NONE,      NONE, TYPED, ANY,  "in[1] > 0 ? in[0] : 0 (in[0] grad, in[1] x or y)")
/* clang-format on */

/* The scalar variants of the binary rows: X(NAME, name, order, doc), one per line: kiln_name(t, s)
 * runs the row NAME's op (its opcode, dtype rule, gradient rule, fusion class and test domain)
 * with the double s as the other operand; order TS is t op s, ST is s op t (rsub, rdiv). The
 * scalar takes the tensor's dtype: a float scalar promotes an integer or bool tensor to f32, a
 * whole one a bool tensor to i64 (as PyTorch). From the rows come the public wrappers
 * (api/elementwise.c), through scripts/gen_optable.py the prototypes, call-site list
 * (KILN_OPS_SCALAR_API) and macros (include/kiln/ops.h), and the device and gradient test
 * (tests/test_backend_ops.c). */
/* clang-format off */
#define KILN__OPTABLE_SCALAR(X) \
    X(ADD,           add_scalar,       TS, "t + s") \
    X(SUB,           sub_scalar,       TS, "t - s") \
    X(SUB,           rsub_scalar,      ST, "s - t") \
    X(MUL,           mul_scalar,       TS, "t * s") \
    X(DIV,           div_scalar,       TS, "t / s (true division: integers give f32)") \
    X(DIV,           rdiv_scalar,      ST, "s / t") \
    X(POW,           pow_scalar,       TS, "t^s") \
    X(MAXIMUM,       maximum_scalar,   TS, "the larger of t and s (NaN wins)") \
    X(MINIMUM,       minimum_scalar,   TS, "the smaller of t and s (NaN wins)") \
    X(EQ,            eq_scalar,        TS, "t == s (bool out)") \
    X(NE,            ne_scalar,        TS, "t != s (bool out)") \
    X(LT,            lt_scalar,        TS, "t < s (bool out)") \
    X(LE,            le_scalar,        TS, "t <= s (bool out)") \
    X(GT,            gt_scalar,        TS, "t > s (bool out)") \
    X(GE,            ge_scalar,        TS, "t >= s (bool out)") \
    X(FMOD,          fmod_scalar,      TS, "C fmod(t, s): the sign of t") \
    X(REMAINDER,     remainder_scalar, TS, "the sign of s (torch.remainder)")
/* clang-format on */

/* The public functions with parameters: X(NAME, name, sig, args, doc), one per line (the doc's
 * details may continue on string literals below it): kiln_name runs the row NAME's op, its
 * parameters the sig kind's types (T: a tensor; T_D, T_DD, T_DDD: a tensor and one to three
 * doubles; ABC: three tensors; AB_D: two tensors and a double) named by args. A row whose sig
 * column is such a kind has the entry of its own name, of the same sig; the other entries are
 * compositions of a row with fixed or changed parameters (selu is ELU with SELU's constants,
 * hardtanh CLAMP with PyTorch's gradient at the bounds, lerp_scalar LERP with a double weight).
 * Through scripts/gen_optable.py come their prototypes with the docs, call-site list
 * (KILN_OPS_PARAMS_API) and macros (include/kiln/ops.h); tests/test_backend_ops.c checks each
 * function's type against its sig. Their wrappers are written in api/elementwise.c: each maps
 * its arguments to the op's parameters its own way (elu's p.f[1] and p.f[2], clamp's integer
 * bounds, nan_to_num's dtype-dependent defaults, lerp's optional tensor). */
/* clang-format off */
#define KILN__OPTABLE_PARAMS(X) \
    X(CLAMP,      clamp,       T_DD,  (t, lo, hi), "t limited to [lo, hi] (torch.clamp); a NAN bound is no bound") \
    X(NAN_TO_NUM, nan_to_num,  T_DDD, (t, nan, posinf, neginf), "torch.nan_to_num: NaN -> nan, +inf -> posinf, -inf -> neginf; " \
      "posinf / neginf NAN mean torch's None: the largest / lowest finite value of t's dtype. Integer tensors unchanged.") \
    X(LEAKY_RELU, leaky_relu,  T_D,   (t, negative_slope), "torch.nn.functional.leaky_relu: t < 0 gives t negative_slope " \
      "(torch's default 0.01); floating-point tensors only") \
    X(ELU,        elu,         T_D,   (t, alpha), "torch.nn.functional.elu: t > 0 gives t, else alpha (e^t - 1) " \
      "(torch's default alpha 1.0); floating-point tensors only") \
    X(ELU,        selu,        T,     (t), "torch.nn.functional.selu: elu with SELU's alpha and scale; floating-point tensors only") \
    X(CLAMP,      hardtanh,    T_DD,  (t, min_val, max_val), "torch.nn.functional.hardtanh: t clamped to [min_val, max_val] " \
      "(torch's -1, 1) with PyTorch's gradient at the bounds; floating-point tensors only") \
    X(LERP,       lerp,        ABC,   (start, end, weight), "torch.lerp: start + weight (end - start); all three broadcast; " \
      "floating-point tensors only") \
    X(LERP,       lerp_scalar, AB_D,  (start, end, weight), "torch.lerp with a double weight: start + weight (end - start)")
/* clang-format on */

/* Ops written as expressions: X(NAME, name, forward, gradient), one per unary row whose cpu (and
 * usually grad) column is EXPR. The forward expression is expanded into the CPU's vector kernel
 * (AVX2 and AVX-512, backend/cpu/vmath_simd.h), its scalar and f64 kernels (vmath.c) and the
 * OpenCL C text of single ops and fused groups (opencl/codegen_expr.c); the gradient expression
 * into autodiff's rule (autodiff/rules_expr.c). So such an op is one row here plus one here, its
 * accuracy reference in tests/test_vmath.c, and the regenerated include/kiln/ops.h.
 *
 * The vocabulary (each consumer defines these names, expands the list, and undefines them):
 *   E_X            the op's input             E_K(c)        the constant c (a double expression)
 *   E_ADD E_SUB E_MUL E_DIV (a, b)            E_NEG E_ABS E_EXP E_TANH E_SIGMOID (a)
 *   E_MIN E_MAX (a, b)   a < b ? a : b, a > b ? a : b: b when either is NaN (x86's rule, the
 *                        same on every device), so write the constant first to keep NaN; in
 *                        gradients (tensor ops) torch's minimum and maximum: NaN wins
 *   E_LT E_GT (a, b)     ordered comparisons (false with NaN), only as E_WHERE's condition
 *   E_WHERE(m, a, b)     m ? a : b
 *   E_CALL(f, a)         the primitive f: vm_f on vectors (a kernel of its own in
 *                        backend/cpu/vmath_simd.h), libm's f in double, OpenCL's built-in f
 *                        (forward only: a gradient is written in table ops)
 * and in gradients also
 *   E_G            the incoming gradient      E_Y           the op's output
 *   E_LE E_GE (a, b), E_AND(m1, m2)
 * A gradient expression gives the input's gradient (so it multiplies by E_G itself, which lets a
 * zero branch stay a constant). Forward expressions compute in the input's float type: f32 on
 * the CPU's vector path (as a hand-written kernel would), double for the scalar reference. */
/* clang-format off */
#define KILN__OPEXPR(X) \
    X(TANH, tanh, E_TANH(E_X), E_MUL(E_G, E_SUB(E_K(1.0), E_MUL(E_Y, E_Y)))) \
    X(SIGMOID, sigmoid, E_SIGMOID(E_X), E_MUL(E_G, E_MUL(E_Y, E_SUB(E_K(1.0), E_Y)))) \
    X(ATAN, atan, E_CALL(atan, E_X), E_DIV(E_G, E_ADD(E_K(1.0), E_MUL(E_X, E_X)))) \
    X(LOG2, log2, E_CALL(log2, E_X), E_DIV(E_G, E_MUL(E_X, E_K(0.69314718055994530942)))) \
    X(LOG10, log10, E_CALL(log10, E_X), E_DIV(E_G, E_MUL(E_X, E_K(2.30258509299404568402)))) \
    X(EXP2, exp2, E_CALL(exp2, E_X), E_MUL(E_G, E_MUL(E_Y, E_K(0.69314718055994530942)))) \
    X(HARDSWISH, hardswish, \
      E_MUL(E_X, E_DIV(E_MIN(E_MAX(E_ADD(E_X, E_K(3.0)), E_K(0.0)), E_K(6.0)), E_K(6.0))), \
      /* PyTorch's: 0 below -3, x/3 + 1/2 up to 3, 1 above */ \
      E_WHERE(E_LT(E_X, E_K(-3.0)), E_K(0.0), \
              E_MUL(E_G, E_WHERE(E_LE(E_X, E_K(3.0)), E_ADD(E_MUL(E_X, E_K(1.0 / 3.0)), E_K(0.5)), E_K(1.0))))) \
    X(HARDSIGMOID, hardsigmoid, \
      E_DIV(E_MIN(E_K(6.0), E_MAX(E_K(0.0), E_ADD(E_X, E_K(3.0)))), E_K(6.0)), \
      /* PyTorch's: 1/6 strictly inside (-3, 3), 0 elsewhere */ \
      E_WHERE(E_AND(E_GT(E_X, E_K(-3.0)), E_LT(E_X, E_K(3.0))), E_MUL(E_G, E_K(1.0 / 6.0)), E_K(0.0))) \
    X(RECIPROCAL, reciprocal, \
      E_DIV(E_K(1.0), E_X), \
      /* -g / x^2, from the output as PyTorch's: -g y^2 */ \
      E_MUL(E_NEG(E_G), E_MUL(E_Y, E_Y)))
/* clang-format on */

/* The device C form of each row whose cpu column is not EXPR (an EXPR row's form is printed from
 * its KILN__OPEXPR expression): the text a device compiler takes (OpenCL C now; the words are
 * plain C, so CUDA C can share it), X(NAME, on, float_form, int_form), one per row, printed for
 * one node of a kernel or fused group (backend/opencl/codegen.c). Named for no backend: ir/ sits
 * below the registry (scripts/check_layers.py). The forms follow the CPU kernels
 * (backend/cpu/elementwise*.c) line by line, so exact ops give the CPU's bits.
 *   on          the dtypes with a form: FLOAT (a float result), ANY, NOT_BOOL (no bool result),
 *               FLOAT_IN (a float input)
 *   float_form  printed when the result is a float; int_form otherwise (integers and bool)
 * Their words: $x $y $z the operands; $T the result's OpenCL type, $U the unsigned type of an
 * integer result's width (wrapping arithmetic, as the CPU's); $0 $1 $2 the op's parameters
 * p.f[0..2] as exact literals; $L $H clamp's bounds (a float's NaN is no bound: -inf and +inf;
 * an integer's saturates to the dtype's range); $C the operand converted to the result's dtype
 * as the CPU's COPY does (through double, integers saturating). */
/* clang-format off */
#define KILN__OPTABLE_DEVICE_C(X) \
    X(COPY,          ANY,      "$C", "$C") \
    X(NEG,           ANY,      "-$x", "($T)(($U)0 - ($U)$x)") \
    X(ABS,           ANY,      "fabs($x)", "($x < 0 ? ($T)(($U)0 - ($U)$x) : $x)") \
    X(SIGN,          ANY,      "($x > 0 ? ($T)1 : ($x < 0 ? ($T)-1 : $x))", "($T)(($x > 0) - ($x < 0))") \
    X(EXP,           FLOAT,    "exp($x)", "") \
    X(LOG,           FLOAT,    "log($x)", "") \
    X(LOG1P,         FLOAT,    "log1p($x)", "") \
    X(EXPM1,         FLOAT,    "expm1($x)", "") \
    X(SQRT,          FLOAT,    "sqrt($x)", "") \
    X(RSQRT,         FLOAT,    "(($T)1 / sqrt($x))", "") \
    X(SIN,           FLOAT,    "sin($x)", "") \
    X(COS,           FLOAT,    "cos($x)", "") \
    X(RELU,          ANY,      "($x < 0 ? ($T)0 : $x)", "($x < 0 ? ($T)0 : $x)") \
    X(GELU,          FLOAT,    "(($T)0.5 * $x * (($T)1 + erf($x * ($T)0.70710678118654752440)))", "") \
    X(GELU_TANH,     FLOAT,    "(($T)0.5 * $x * (($T)1 + tanh(($T)0.79788456080286535588 * ($x + ($T)0.044715 * $x * $x * $x))))", "") \
    X(SILU,          FLOAT,    "($x / (($T)1 + exp(-$x)))", "") \
    X(SOFTPLUS,      FLOAT,    "($x > ($T)20 ? $x : log1p(exp($x)))", "") \
    X(ERF,           FLOAT,    "erf($x)", "") \
    X(LOGICAL_NOT,   ANY,      "(uchar)($x == 0)", "(uchar)($x == 0)") \
    X(CLAMP,         ANY,      "($x < ($T)$L ? ($T)$L : ($x > ($T)$H ? ($T)$H : $x))", "($x < ($T)$L ? ($T)$L : ($x > ($T)$H ? ($T)$H : $x))") \
    X(FLOOR,         FLOAT,    "floor($x)", "") \
    X(CEIL,          FLOAT,    "ceil($x)", "") \
    X(ROUND,         FLOAT,    "rint($x)", "") \
    X(TRUNC,         FLOAT,    "trunc($x)", "") \
    X(ISNAN,         FLOAT_IN, "(uchar)(isnan($x) != 0)", "(uchar)(isnan($x) != 0)") \
    X(ISINF,         FLOAT_IN, "(uchar)(isinf($x) != 0)", "(uchar)(isinf($x) != 0)") \
    X(ISFINITE,      FLOAT_IN, "(uchar)(isfinite($x) != 0)", "(uchar)(isfinite($x) != 0)") \
    X(NAN_TO_NUM,    FLOAT,    "($x != $x ? ($T)$0 : $x == ($T)INFINITY ? ($T)$1 : $x == ($T)(-INFINITY) ? ($T)$2 : $x)", "") \
    X(LOG_SIGMOID,   FLOAT,    "(fmin($x, ($T)0) - log1p(exp(-fabs($x))))", "") \
    X(MISH,          FLOAT,    "($x * tanh($x > ($T)20 ? $x : log1p(exp($x))))", "") \
    X(SOFTSIGN,      FLOAT,    "($x / (($T)1 + fabs($x)))", "") \
    X(LEAKY_RELU,    FLOAT,    "($x < 0 ? $x * ($T)$0 : $x)", "") \
    X(ELU,           FLOAT,    "(($T)$1 * ($x > 0 ? $x : ($T)$0 * expm1(($T)$2 * $x)))", "") \
    X(ADD,           NOT_BOOL, "($x + $y)", "($T)(($U)$x + ($U)$y)") \
    X(SUB,           NOT_BOOL, "($x - $y)", "($T)(($U)$x - ($U)$y)") \
    X(MUL,           NOT_BOOL, "($x * $y)", "($T)(($U)$x * ($U)$y)") \
    X(DIV,           FLOAT,    "($x / $y)", "") \
    X(POW,           FLOAT,    "($y == ($T)2 ? $x * $x : pow($x, $y))", "") \
    X(MAXIMUM,       NOT_BOOL, "(($x > $y || $x != $x) ? $x : $y)", "($x > $y ? $x : $y)") \
    X(MINIMUM,       NOT_BOOL, "(($x < $y || $x != $x) ? $x : $y)", "($x < $y ? $x : $y)") \
    X(EQ,            ANY,      "(uchar)($x == $y)", "(uchar)($x == $y)") \
    X(NE,            ANY,      "(uchar)($x != $y)", "(uchar)($x != $y)") \
    X(LT,            ANY,      "(uchar)($x < $y)", "(uchar)($x < $y)") \
    X(LE,            ANY,      "(uchar)($x <= $y)", "(uchar)($x <= $y)") \
    X(GT,            ANY,      "(uchar)($x > $y)", "(uchar)($x > $y)") \
    X(GE,            ANY,      "(uchar)($x >= $y)", "(uchar)($x >= $y)") \
    X(LOGICAL_AND,   ANY,      "(uchar)(($x != 0) & ($y != 0))", "(uchar)(($x != 0) & ($y != 0))") \
    X(LOGICAL_OR,    ANY,      "(uchar)(($x != 0) | ($y != 0))", "(uchar)(($x != 0) | ($y != 0))") \
    X(FMOD,          FLOAT,    "fmod($x, $y)", "") \
    X(REMAINDER,     FLOAT,    "(fmod($x, $y) != 0 && ((fmod($x, $y) < 0) != ($y < 0)) ? fmod($x, $y) + $y : fmod($x, $y))", "") \
    X(ATAN2,         FLOAT,    "atan2($x, $y)", "") \
    X(WHERE,         ANY,      "($x ? $y : $z)", "($x ? $y : $z)") \
    X(LERP,          FLOAT,    "($z < ($T)0.5 ? $x + $z * ($y - $x) : $y - ($y - $x) * (($T)1 - $z))", "") \
    X(RELU_BACKWARD, FLOAT,    "($y > 0 ? $x : ($T)0)", "")
/* clang-format on */

/* Dtype rules: what the kernel computes in and what the caller gets (ops/elementwise.c). */
typedef enum {
    KILN__DT_NONE,       /* not an elementwise op of the table */
    KILN__DT_SAME,       /* the (promoted) input dtype; bool arithmetic counts in i32 */
    KILN__DT_FLOAT,      /* math: integers and bools compute in f32 */
    KILN__DT_FLOAT_ONLY, /* floating-point inputs only (torch's activations) */
    KILN__DT_ROUNDING,   /* integers come back unchanged, bool is refused */
    KILN__DT_CLASSIFY,   /* bool out; a constant for integers */
    KILN__DT_COMPARE,    /* inputs promoted together, bool out */
    KILN__DT_LOGICAL,    /* bool in, bool out */
    KILN__DT_WHERE,      /* bool condition, the branches promoted together */
    KILN__DT_CAST        /* the output's dtype */
} kiln__dtype_rule;

typedef enum { KILN__SHAPE_NONE, KILN__SHAPE_BCAST, KILN__SHAPE_SAME } kiln__shape_rule;
typedef enum { KILN__FUSE_NONE, KILN__FUSE_EW, KILN__FUSE_EW_VEC } kiln__fusion_class;
typedef enum {
    KILN__GRAD_NONE,
    KILN__GRAD_ZERO,
    KILN__GRAD_SAVE_NONE,
    KILN__GRAD_SAVE_IN,
    KILN__GRAD_SAVE_OUT,
    KILN__GRAD_BINARY,
    KILN__GRAD_EXPR
} kiln__grad_rule;
typedef enum {
    KILN__SIG_NONE,
    KILN__SIG_T,
    KILN__SIG_AB,
    KILN__SIG_T_D,
    KILN__SIG_T_DD,
    KILN__SIG_T_DDD,
    KILN__SIG_ABC,
    KILN__SIG_AB_D
} kiln__signature;
typedef enum { KILN__CPU_TYPED, KILN__CPU_VMATH, KILN__CPU_EXPR } kiln__cpu_kernel;
typedef enum { KILN__DOMAIN_ANY, KILN__DOMAIN_POS, KILN__DOMAIN_AWAY, KILN__DOMAIN_BOOL, KILN__DOMAIN_WIDE } kiln__test_domain;

/* One row, as data (ir/optable.c); opcodes outside the table read as all zeros (DT_NONE,
 * FUSE_NONE, GRAD_NONE, SIG_NONE, arity 0). */
typedef struct kiln__op_info {
    const char *name; /* "softsign"; NULL outside the table */
    int arity;
    kiln__dtype_rule dtype;
    kiln__shape_rule shape;
    kiln__fusion_class fuse;
    kiln__grad_rule grad;
    kiln__signature sig;
    kiln__cpu_kernel cpu;
    kiln__test_domain domain;
    const char *doc;
} kiln__op_info;

#endif
