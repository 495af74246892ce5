/* The fused optimizer updates' parameters and how they travel in an op record: the one
 * definition that ops/optim_ops.c encodes and every backend's update kernels decode.
 *
 *   kiln__op op;                                   // ops/: after kiln__op_init
 *   kiln__adam_update_encode(&op, &u);
 *   kiln__adam_update d = kiln__adam_update_decode(&op);   // a kernel: d equals u
 *
 * Doubles go in p.f[] at the named indices; doubles that do not fit there ride in pi[] as
 * their bit patterns; pi[0] holds the flag bits. `tentative` is the op's own flag (a tentative
 * update does not keep its outputs on error; see KILN__OP_FLAG_KEEP_OUTPUTS_ON_ERROR). A
 * decoded struct round-trips exactly: kernels read the caller's doubles bit for bit. */
#ifndef KILN_IR_OPTIM_PARAMS_H
#define KILN_IR_OPTIM_PARAMS_H

#include <string.h>

#include "ir/op.h"

/* SGD_UPDATE: p -= lr * g with momentum, dampening, Nesterov and L2 weight decay (torch.optim.SGD). */
typedef struct {
    double lr, momentum, dampening, weight_decay;
    bool first; /* the first update: the momentum buffer starts as g */
    bool nesterov;
    bool tentative;
} kiln__sgd_update;

/* ADAM_UPDATE: Adam / AdamW with the bias corrections already folded in by the caller. */
typedef struct {
    double step_size; /* lr / (1 - beta1^t) */
    double beta1, beta2, eps;
    double sqrt_bias_correction2; /* sqrt(1 - beta2^t) */
    double weight_decay_term;     /* decoupled: 1 - lr * wd (p is scaled by it); else wd (added to g) */
    bool first, decoupled;
    bool tentative;
} kiln__adam_update;

/* RMSPROP_GRAD_AVG (alpha, weight_decay, first) and RMSPROP_UPDATE (all but centered, which is
 * whether the op reads a grad_avg): torch.optim.RMSprop. */
typedef struct {
    double lr, alpha, eps, weight_decay, momentum;
    bool first, centered;
    bool tentative;
} kiln__rmsprop_update;

/* ADAGRAD_UPDATE: torch.optim.Adagrad with the decayed rate lr / (1 + (t - 1) * lr_decay) folded in. */
typedef struct {
    double clr, eps, weight_decay, initial_accumulator_value;
    bool first; /* the sum is read as initial_accumulator_value */
    bool tentative;
} kiln__adagrad_update;

/* Where each double sits: p.f[] indices (F_), and pi[] slots holding a double's bits (PI_). */
enum {
    KILN__OPTIM_PI_FLAGS = 0,
    KILN__SGD_F_LR = 0, KILN__SGD_F_MOMENTUM, KILN__SGD_F_DAMPENING, KILN__SGD_F_WEIGHT_DECAY,
    KILN__ADAM_F_STEP_SIZE = 0, KILN__ADAM_F_BETA1, KILN__ADAM_F_BETA2, KILN__ADAM_F_EPS,
    KILN__ADAM_PI_SQRT_BIAS_CORRECTION2 = 1, KILN__ADAM_PI_WEIGHT_DECAY_TERM = 2,
    KILN__GRAD_AVG_F_ALPHA = 0, KILN__GRAD_AVG_F_WEIGHT_DECAY,
    KILN__RMSPROP_F_LR = 0, KILN__RMSPROP_F_ALPHA, KILN__RMSPROP_F_EPS, KILN__RMSPROP_F_WEIGHT_DECAY,
    KILN__RMSPROP_PI_MOMENTUM = 1,
    KILN__ADAGRAD_F_CLR = 0, KILN__ADAGRAD_F_EPS, KILN__ADAGRAD_F_WEIGHT_DECAY, KILN__ADAGRAD_F_INITIAL_ACCUMULATOR,
};

/* The flag bits in pi[KILN__OPTIM_PI_FLAGS]. */
enum {
    KILN__OPTIM_FLAG_FIRST = 1,
    KILN__OPTIM_FLAG_NESTEROV = 2,
    KILN__OPTIM_FLAG_DECOUPLED = 4,
    KILN__OPTIM_FLAG_CENTERED = 8,
    /* SGD_UPDATE on f32: the op's last output is the parameter's bf16 copy (autocast's cast
     * cache), rewritten as the parameter is, in the same pass. The CPU's kernel reads it. */
    KILN__OPTIM_FLAG_BF16_COPY = 16,
};

static inline int64_t kiln__optim_f64_bits(double v) {
    int64_t bits;
    memcpy(&bits, &v, sizeof bits);
    return bits;
}

static inline double kiln__optim_f64_of_bits(int64_t bits) {
    double v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

static inline void kiln__optim_encode_common(kiln__op *op, bool tentative, int64_t flags) {
    if (!tentative) op->flags |= KILN__OP_FLAG_KEEP_OUTPUTS_ON_ERROR;
    op->pi[KILN__OPTIM_PI_FLAGS] = flags;
}

static inline bool kiln__optim_flag(const kiln__op *op, int64_t flag) { return (op->pi[KILN__OPTIM_PI_FLAGS] & flag) != 0; }

static inline bool kiln__optim_decode_tentative(const kiln__op *op) {
    return !(op->flags & KILN__OP_FLAG_KEEP_OUTPUTS_ON_ERROR);
}

/* ---- SGD_UPDATE ---- */

static inline void kiln__sgd_update_encode(kiln__op *op, const kiln__sgd_update *u) {
    op->p.f[KILN__SGD_F_LR] = u->lr;
    op->p.f[KILN__SGD_F_MOMENTUM] = u->momentum;
    op->p.f[KILN__SGD_F_DAMPENING] = u->dampening;
    op->p.f[KILN__SGD_F_WEIGHT_DECAY] = u->weight_decay;
    kiln__optim_encode_common(op, u->tentative, (u->first ? KILN__OPTIM_FLAG_FIRST : 0) |
                                                    (u->nesterov ? KILN__OPTIM_FLAG_NESTEROV : 0));
}

static inline kiln__sgd_update kiln__sgd_update_decode(const kiln__op *op) {
    return (kiln__sgd_update){.lr = op->p.f[KILN__SGD_F_LR], .momentum = op->p.f[KILN__SGD_F_MOMENTUM],
                              .dampening = op->p.f[KILN__SGD_F_DAMPENING],
                              .weight_decay = op->p.f[KILN__SGD_F_WEIGHT_DECAY],
                              .first = kiln__optim_flag(op, KILN__OPTIM_FLAG_FIRST),
                              .nesterov = kiln__optim_flag(op, KILN__OPTIM_FLAG_NESTEROV),
                              .tentative = kiln__optim_decode_tentative(op)};
}

/* ---- ADAM_UPDATE ---- */

static inline void kiln__adam_update_encode(kiln__op *op, const kiln__adam_update *u) {
    op->p.f[KILN__ADAM_F_STEP_SIZE] = u->step_size;
    op->p.f[KILN__ADAM_F_BETA1] = u->beta1;
    op->p.f[KILN__ADAM_F_BETA2] = u->beta2;
    op->p.f[KILN__ADAM_F_EPS] = u->eps;
    op->pi[KILN__ADAM_PI_SQRT_BIAS_CORRECTION2] = kiln__optim_f64_bits(u->sqrt_bias_correction2);
    op->pi[KILN__ADAM_PI_WEIGHT_DECAY_TERM] = kiln__optim_f64_bits(u->weight_decay_term);
    kiln__optim_encode_common(op, u->tentative, (u->first ? KILN__OPTIM_FLAG_FIRST : 0) |
                                                    (u->decoupled ? KILN__OPTIM_FLAG_DECOUPLED : 0));
}

static inline kiln__adam_update kiln__adam_update_decode(const kiln__op *op) {
    return (kiln__adam_update){
        .step_size = op->p.f[KILN__ADAM_F_STEP_SIZE], .beta1 = op->p.f[KILN__ADAM_F_BETA1],
        .beta2 = op->p.f[KILN__ADAM_F_BETA2], .eps = op->p.f[KILN__ADAM_F_EPS],
        .sqrt_bias_correction2 = kiln__optim_f64_of_bits(op->pi[KILN__ADAM_PI_SQRT_BIAS_CORRECTION2]),
        .weight_decay_term = kiln__optim_f64_of_bits(op->pi[KILN__ADAM_PI_WEIGHT_DECAY_TERM]),
        .first = kiln__optim_flag(op, KILN__OPTIM_FLAG_FIRST),
        .decoupled = kiln__optim_flag(op, KILN__OPTIM_FLAG_DECOUPLED),
        .tentative = kiln__optim_decode_tentative(op)};
}

/* ---- RMSPROP_GRAD_AVG ---- */

static inline void kiln__rmsprop_grad_avg_encode(kiln__op *op, const kiln__rmsprop_update *u) {
    op->p.f[KILN__GRAD_AVG_F_ALPHA] = u->alpha;
    op->p.f[KILN__GRAD_AVG_F_WEIGHT_DECAY] = u->weight_decay;
    kiln__optim_encode_common(op, u->tentative, u->first ? KILN__OPTIM_FLAG_FIRST : 0);
}

static inline kiln__rmsprop_update kiln__rmsprop_grad_avg_decode(const kiln__op *op) {
    return (kiln__rmsprop_update){.alpha = op->p.f[KILN__GRAD_AVG_F_ALPHA],
                                  .weight_decay = op->p.f[KILN__GRAD_AVG_F_WEIGHT_DECAY],
                                  .first = kiln__optim_flag(op, KILN__OPTIM_FLAG_FIRST), .centered = true,
                                  .tentative = kiln__optim_decode_tentative(op)};
}

/* ---- RMSPROP_UPDATE ---- */

static inline void kiln__rmsprop_update_encode(kiln__op *op, const kiln__rmsprop_update *u) {
    op->p.f[KILN__RMSPROP_F_LR] = u->lr;
    op->p.f[KILN__RMSPROP_F_ALPHA] = u->alpha;
    op->p.f[KILN__RMSPROP_F_EPS] = u->eps;
    op->p.f[KILN__RMSPROP_F_WEIGHT_DECAY] = u->weight_decay;
    op->pi[KILN__RMSPROP_PI_MOMENTUM] = kiln__optim_f64_bits(u->momentum);
    kiln__optim_encode_common(op, u->tentative, (u->first ? KILN__OPTIM_FLAG_FIRST : 0) |
                                                    (u->centered ? KILN__OPTIM_FLAG_CENTERED : 0));
}

static inline kiln__rmsprop_update kiln__rmsprop_update_decode(const kiln__op *op) {
    return (kiln__rmsprop_update){.lr = op->p.f[KILN__RMSPROP_F_LR], .alpha = op->p.f[KILN__RMSPROP_F_ALPHA],
                                  .eps = op->p.f[KILN__RMSPROP_F_EPS],
                                  .weight_decay = op->p.f[KILN__RMSPROP_F_WEIGHT_DECAY],
                                  .momentum = kiln__optim_f64_of_bits(op->pi[KILN__RMSPROP_PI_MOMENTUM]),
                                  .first = kiln__optim_flag(op, KILN__OPTIM_FLAG_FIRST),
                                  .centered = kiln__optim_flag(op, KILN__OPTIM_FLAG_CENTERED),
                                  .tentative = kiln__optim_decode_tentative(op)};
}

/* ---- ADAGRAD_UPDATE ---- */

static inline void kiln__adagrad_update_encode(kiln__op *op, const kiln__adagrad_update *u) {
    op->p.f[KILN__ADAGRAD_F_CLR] = u->clr;
    op->p.f[KILN__ADAGRAD_F_EPS] = u->eps;
    op->p.f[KILN__ADAGRAD_F_WEIGHT_DECAY] = u->weight_decay;
    op->p.f[KILN__ADAGRAD_F_INITIAL_ACCUMULATOR] = u->initial_accumulator_value;
    kiln__optim_encode_common(op, u->tentative, u->first ? KILN__OPTIM_FLAG_FIRST : 0);
}

static inline kiln__adagrad_update kiln__adagrad_update_decode(const kiln__op *op) {
    return (kiln__adagrad_update){.clr = op->p.f[KILN__ADAGRAD_F_CLR], .eps = op->p.f[KILN__ADAGRAD_F_EPS],
                                  .weight_decay = op->p.f[KILN__ADAGRAD_F_WEIGHT_DECAY],
                                  .initial_accumulator_value = op->p.f[KILN__ADAGRAD_F_INITIAL_ACCUMULATOR],
                                  .first = kiln__optim_flag(op, KILN__OPTIM_FLAG_FIRST),
                                  .tentative = kiln__optim_decode_tentative(op)};
}

#endif
