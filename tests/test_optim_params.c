/* The fused optimizer updates' encoding (src/ir/optim_params.h): every update struct written
 * into an op record by ops/ and read back by a kernel comes back bit for bit, each flag alone
 * and all together, with `tentative` as the op's keep-outputs flag, and no slot of one value
 * overwrites another's (distinct doubles, including -0.0 and a subnormal, in every field). */
#include <string.h>

#include "ir/optim_params.h"
#include "kiln_test.h"

static bool same(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

static kiln__op fresh(kiln__opcode code) {
    kiln__op op;
    memset(&op, 0, sizeof op); /* as kiln__op_init leaves it: no flags */
    op.code = code;
    return op;
}

KT_TEST(sgd_round_trip) {
    for (int bits = 0; bits < 8; bits++) {
        kiln__sgd_update u = {.lr = 0.1, .momentum = -0.0, .dampening = 4.9e-324, .weight_decay = 1e300,
                              .first = bits & 1, .nesterov = bits & 2, .tentative = bits & 4};
        kiln__op op = fresh(KILN__OP_SGD_UPDATE);
        kiln__sgd_update_encode(&op, &u);
        kiln__sgd_update d = kiln__sgd_update_decode(&op);
        KT_CHECK(same(d.lr, u.lr) && same(d.momentum, u.momentum) && same(d.dampening, u.dampening) &&
                 same(d.weight_decay, u.weight_decay));
        KT_CHECK(d.first == u.first && d.nesterov == u.nesterov && d.tentative == u.tentative);
        KT_CHECK(((op.flags & KILN__OP_FLAG_KEEP_OUTPUTS_ON_ERROR) != 0) == !u.tentative);
    }
}

KT_TEST(adam_round_trip) {
    for (int bits = 0; bits < 8; bits++) {
        kiln__adam_update u = {.step_size = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = -0.0,
                               .sqrt_bias_correction2 = 0.0316, .weight_decay_term = 4.9e-324,
                               .first = bits & 1, .decoupled = bits & 2, .tentative = bits & 4};
        kiln__op op = fresh(KILN__OP_ADAM_UPDATE);
        kiln__adam_update_encode(&op, &u);
        kiln__adam_update d = kiln__adam_update_decode(&op);
        KT_CHECK(same(d.step_size, u.step_size) && same(d.beta1, u.beta1) && same(d.beta2, u.beta2) &&
                 same(d.eps, u.eps) && same(d.sqrt_bias_correction2, u.sqrt_bias_correction2) &&
                 same(d.weight_decay_term, u.weight_decay_term));
        KT_CHECK(d.first == u.first && d.decoupled == u.decoupled && d.tentative == u.tentative);
    }
}

KT_TEST(rmsprop_round_trip) {
    for (int bits = 0; bits < 8; bits++) {
        kiln__rmsprop_update u = {.lr = 0.01, .alpha = 0.99, .eps = 1e-8, .weight_decay = -0.0, .momentum = 4.9e-324,
                                  .first = bits & 1, .centered = bits & 2, .tentative = bits & 4};
        kiln__op op = fresh(KILN__OP_RMSPROP_UPDATE);
        kiln__rmsprop_update_encode(&op, &u);
        kiln__rmsprop_update d = kiln__rmsprop_update_decode(&op);
        KT_CHECK(same(d.lr, u.lr) && same(d.alpha, u.alpha) && same(d.eps, u.eps) &&
                 same(d.weight_decay, u.weight_decay) && same(d.momentum, u.momentum));
        KT_CHECK(d.first == u.first && d.centered == u.centered && d.tentative == u.tentative);
        /* the centered pass carries alpha, the decay and first only */
        kiln__op avg = fresh(KILN__OP_RMSPROP_GRAD_AVG);
        kiln__rmsprop_grad_avg g = {.alpha = u.alpha, .weight_decay = u.weight_decay, .first = u.first,
                                    .tentative = u.tentative};
        kiln__rmsprop_grad_avg_encode(&avg, &g);
        kiln__rmsprop_grad_avg a = kiln__rmsprop_grad_avg_decode(&avg);
        KT_CHECK(same(a.alpha, u.alpha) && same(a.weight_decay, u.weight_decay) && a.first == u.first &&
                 a.tentative == u.tentative);
    }
}

KT_TEST(adagrad_round_trip) {
    for (int bits = 0; bits < 4; bits++) {
        kiln__adagrad_update u = {.clr = 0.01, .eps = 1e-10, .weight_decay = 4.9e-324,
                                  .initial_accumulator_value = -0.0, .first = bits & 1, .tentative = bits & 2};
        kiln__op op = fresh(KILN__OP_ADAGRAD_UPDATE);
        kiln__adagrad_update_encode(&op, &u);
        kiln__adagrad_update d = kiln__adagrad_update_decode(&op);
        KT_CHECK(same(d.clr, u.clr) && same(d.eps, u.eps) && same(d.weight_decay, u.weight_decay) &&
                 same(d.initial_accumulator_value, u.initial_accumulator_value));
        KT_CHECK(d.first == u.first && d.tentative == u.tentative);
    }
}

/* The table's slots (ir/optim_table.h): in range, and no two fields of a row share a p.f index,
 * a pi slot (pi[0] holds the flags) or a flag bit; every row's opcode maps back to it. */
KT_TEST(the_table_slots_do_not_overlap) {
    for (int r = 0; r < KILN__OPTIM_ROW_COUNT; r++) {
        const kiln__optim_row *row = &kiln__optim_rows[r];
        KT_CHECK_MSG(kiln__optim_row_of(row->code) == row, "%s", row->name);
        KT_CHECK_MSG(strcmp(kiln__opcode_name((kiln__opcode)row->code), row->name) == 0, "%s", row->name);
        KT_CHECK_MSG(row->out_min >= 1 && row->out_min <= row->out_max && row->out_max <= KILN__OP_MAX_OUT &&
                         row->in_min >= 1 && row->in_min <= row->in_max && row->in_max <= KILN__OP_MAX_IN,
                     "%s: tensor counts", row->name);
        int used_f = 0, used_pi = 1, used_flags = 0;
        for (int i = 0; i < row->n_fields; i++) {
            int at = row->field[i].at;
            int *used = row->field[i].enc == KILN__OPTIM_ENC_F ? &used_f : row->field[i].enc == KILN__OPTIM_ENC_BITS ? &used_pi : &used_flags;
            int bit = row->field[i].enc == KILN__OPTIM_ENC_FLAG ? at : 1 << at;
            bool in_range = row->field[i].enc == KILN__OPTIM_ENC_F ? at >= 0 && at < 4
                          : row->field[i].enc == KILN__OPTIM_ENC_BITS ? at >= 1 && at < 4 : at > 0 && (at & (at - 1)) == 0;
            KT_CHECK_MSG(in_range && !(*used & bit), "%s.%s: slot %d out of range or taken", row->name, row->field[i].name, at);
            *used |= bit;
        }
    }
    KT_CHECK(kiln__optim_row_of(KILN__OP_ADD) == NULL);
}

int main(void) {
    KT_RUN(sgd_round_trip);
    KT_RUN(adam_round_trip);
    KT_RUN(rmsprop_round_trip);
    KT_RUN(adagrad_round_trip);
    KT_RUN(the_table_slots_do_not_overlap);
    return kt_finish();
}
