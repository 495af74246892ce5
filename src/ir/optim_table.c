/* The optimizer-update table's rows as data (ir/optim_table.h): each row's opcode, tensor
 * counts, parameter fields and their slots, for the submit's checks and the device test. */
#include "ir/optim_table.h"

#include <stddef.h>

#include "ir/opcodes.h"

#define FIELD(field, enc, at) {#field, KILN__OPTIM_ENC_##enc, KILN__OPTIM_AT_##enc(at)},
#define KILN__OPTIM_AT_F(at) at
#define KILN__OPTIM_AT_BITS(at) at
#define KILN__OPTIM_AT_FLAG(at) KILN__OPTIM_FLAG_##at
#define COUNT(field, enc, at) +1
#define ROW(NAME, name_, out_min_, out_max_, in_min_, in_max_, tensors_, formula_)                                  \
    [KILN__OPTIM_ROW_##NAME] = {.name = #NAME, .code = KILN__OP_##NAME, .out_min = out_min_, .out_max = out_max_,  \
                                .in_min = in_min_, .in_max = in_max_, .tensors = tensors_, .formula = formula_,    \
                                .n_fields = 0 KILN__OPTIM_FIELDS_##NAME(COUNT),                                   \
                                .field = {KILN__OPTIM_FIELDS_##NAME(FIELD)}},
const kiln__optim_row kiln__optim_rows[KILN__OPTIM_ROW_COUNT] = {KILN__OPTIM_TABLE(ROW)};
#undef ROW

/* Each row's field list fits the struct the rows are kept in. */
#define FITS(NAME, ...) _Static_assert(0 KILN__OPTIM_FIELDS_##NAME(COUNT) <= KILN__OPTIM_MAX_FIELDS, #NAME " has too many fields");
KILN__OPTIM_TABLE(FITS)
#undef FITS

const kiln__optim_row *kiln__optim_row_of(int code) {
    switch (code) {
#define CASE(NAME, ...) \
    case KILN__OP_##NAME: return &kiln__optim_rows[KILN__OPTIM_ROW_##NAME];
        KILN__OPTIM_TABLE(CASE)
#undef CASE
    default: return NULL;
    }
}
