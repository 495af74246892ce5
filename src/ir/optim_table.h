/* The optimizer-update table: one row per fused update op, the single place its tensors, its
 * parameters' encoding in an op record and its formula are written, as ir/optable.h is for the
 * elementwise ops. From it come the update opcodes (ir/opcodes.h), the parameter structs and
 * their packing into an op record and back (ir/optim_params.h: what ops/optim_ops.c encodes and
 * every backend's update kernels decode), the generic submit that checks an op's tensor counts
 * (ops/optim_ops.c), the rows as data (kiln__optim_rows, ir/optim_table.c), and the table-driven
 * device test (tests/test_backend_ops_optim.c). DESIGN.md, "How to add an optimizer", says what
 * else a new one touches (its kernels and its optim/ kind).
 *
 * X(NAME, name, out_min, out_max, in_min, in_max, tensors, formula), one row per line:
 *   NAME      the opcode KILN__OP_NAME
 *   name      the parameter struct kiln__name and its kiln__name_encode / _decode
 *   out_*     how many outputs (written in place: the parameter and its state) the op takes
 *   in_*      how many inputs
 *   tensors   the outputs and inputs in order, [optional] ones bracketed
 *   formula   the update, as the kernels compute it (PyTorch's single-tensor step) in the
 *             parameter's own precision; the test's double-precision reference is this line
 *
 * Its parameters: KILN__OPTIM_FIELDS_NAME(FIELD), FIELD(field, enc, at) one per field, in the struct's
 * order:
 *   F     a double in p.f[at]
 *   BITS  a double riding in pi[at] as its bit pattern (p.f holds four)
 *   FLAG  a bool: the bit KILN__OPTIM_FLAG_at of pi[0]
 * Every struct also carries `tentative`, the op's own flag (a tentative update does not keep its
 * outputs on error; see KILN__OP_FLAG_KEEP_OUTPUTS_ON_ERROR). Keep one row per line. */
#ifndef KILN_IR_OPTIM_TABLE_H
#define KILN_IR_OPTIM_TABLE_H

/* clang-format off */
#define KILN__OPTIM_TABLE(X) \
    X(SGD_UPDATE,       sgd_update,       1, 3, 1, 1, "out param, [momentum_buffer], [bf16 copy (BF16_COPY)]; in grad", \
      "d = g + weight_decay p; buf = first ? d : momentum buf + (1 - dampening) d; d = nesterov ? d + momentum buf : buf (with a buffer); p -= lr d") \
    X(ADAM_UPDATE,      adam_update,      3, 3, 1, 1, "out param, exp_avg, exp_avg_sq; in grad", \
      "decoupled ? p *= wd_term : g += wd_term p; m = lerp(m, g, 1 - beta1); v = beta2 v + (1 - beta2) g^2 (m, v read as 0 when first); p -= step_size m / (sqrt(v) / sqrt_bc2 + eps)") \
    X(RMSPROP_GRAD_AVG, rmsprop_grad_avg, 1, 1, 2, 2, "out grad_avg; in grad, param", \
      "ga = lerp(ga, g + weight_decay p, 1 - alpha) (ga read as 0 when first): centered RMSprop's first op") \
    X(RMSPROP_UPDATE,   rmsprop_update,   2, 3, 1, 2, "out param, square_avg, [momentum_buffer]; in grad, [grad_avg (centered)]", \
      "g += weight_decay p; sq = alpha sq + (1 - alpha) g^2; avg = sqrt(centered ? sq - ga^2 : sq) + eps; buf = momentum buf + g / avg, p -= lr buf (with a buffer) else p -= lr g / avg (state read as 0 when first)") \
    X(ADAGRAD_UPDATE,   adagrad_update,   2, 2, 1, 1, "out param, sum; in grad", \
      "g += weight_decay p; sum = (first ? initial_accumulator_value : sum) + g^2; p -= clr g / (sqrt(sum) + eps)")

#define KILN__OPTIM_FIELDS_SGD_UPDATE(FIELD) \
    FIELD(lr, F, 0) FIELD(momentum, F, 1) FIELD(dampening, F, 2) FIELD(weight_decay, F, 3) \
    FIELD(first, FLAG, FIRST) FIELD(nesterov, FLAG, NESTEROV)
/* step_size: lr / (1 - beta1^t); sqrt_bias_correction2: sqrt(1 - beta2^t); weight_decay_term:
 * decoupled (AdamW) 1 - lr * wd, the factor p is scaled by; else wd, added to g */
#define KILN__OPTIM_FIELDS_ADAM_UPDATE(FIELD) \
    FIELD(step_size, F, 0) FIELD(beta1, F, 1) FIELD(beta2, F, 2) FIELD(eps, F, 3) \
    FIELD(sqrt_bias_correction2, BITS, 1) FIELD(weight_decay_term, BITS, 2) \
    FIELD(first, FLAG, FIRST) FIELD(decoupled, FLAG, DECOUPLED)
#define KILN__OPTIM_FIELDS_RMSPROP_GRAD_AVG(FIELD) \
    FIELD(alpha, F, 0) FIELD(weight_decay, F, 1) FIELD(first, FLAG, FIRST)
/* centered: whether the op reads a grad_avg (its second input) */
#define KILN__OPTIM_FIELDS_RMSPROP_UPDATE(FIELD) \
    FIELD(lr, F, 0) FIELD(alpha, F, 1) FIELD(eps, F, 2) FIELD(weight_decay, F, 3) FIELD(momentum, BITS, 1) \
    FIELD(first, FLAG, FIRST) FIELD(centered, FLAG, CENTERED)
/* clr: lr / (1 + (t - 1) * lr_decay), the decayed rate */
#define KILN__OPTIM_FIELDS_ADAGRAD_UPDATE(FIELD) \
    FIELD(clr, F, 0) FIELD(eps, F, 1) FIELD(weight_decay, F, 2) FIELD(initial_accumulator_value, F, 3) \
    FIELD(first, FLAG, FIRST)

/* The flag bits of pi[0]: X(NAME, bit, doc). */
#define KILN__OPTIM_FLAG_LIST(X) \
    X(FIRST,     1,  "the first step: state read as its initial value (SGD: the buffer starts as d)") \
    X(NESTEROV,  2,  "SGD: Nesterov momentum") \
    X(DECOUPLED, 4,  "Adam: decoupled weight decay (AdamW)") \
    X(CENTERED,  8,  "RMSprop: centered (reads grad_avg)") \
    X(BF16_COPY, 16, "SGD on f32: the op's last output is the parameter's bf16 copy (autocast's cast cache), rewritten in the same pass; set by the submit, not a field")
/* clang-format on */

enum {
#define KILN__OPTIM_FLAG_ENUM(NAME, bit, doc) KILN__OPTIM_FLAG_##NAME = bit,
    KILN__OPTIM_FLAG_LIST(KILN__OPTIM_FLAG_ENUM)
#undef KILN__OPTIM_FLAG_ENUM
};

enum { KILN__OPTIM_PI_FLAGS = 0, KILN__OPTIM_MAX_FIELDS = 8 };

typedef enum { KILN__OPTIM_ENC_F, KILN__OPTIM_ENC_BITS, KILN__OPTIM_ENC_FLAG } kiln__optim_enc;

/* One row, as data (ir/optim_table.c), for the test and the submit's checks. */
typedef struct {
    const char *name; /* "SGD_UPDATE" */
    int code;         /* its opcode (a kiln__opcode) */
    int out_min, out_max, in_min, in_max;
    const char *tensors, *formula;
    int n_fields;
    struct {
        const char *name;
        kiln__optim_enc enc;
        int at; /* p.f or pi index; a FLAG's bit */
    } field[KILN__OPTIM_MAX_FIELDS];
} kiln__optim_row;

typedef enum {
#define KILN__OPTIM_ROW_ENUM(NAME, ...) KILN__OPTIM_ROW_##NAME,
    KILN__OPTIM_TABLE(KILN__OPTIM_ROW_ENUM)
#undef KILN__OPTIM_ROW_ENUM
    KILN__OPTIM_ROW_COUNT
} kiln__optim_row_id;

extern const kiln__optim_row kiln__optim_rows[KILN__OPTIM_ROW_COUNT];
/* The row of an update opcode, or NULL. */
const kiln__optim_row *kiln__optim_row_of(int code);

#endif
