/* Opcode names, for error messages and the profiler, and the op table's rows as data: both
 * generated from the one opcode list (ir/opcodes.h, ir/optable.h). */
#include "ir/opcodes.h"

const char *kiln__opcode_name(kiln__opcode code) {
    static const char *const names[] = {
#define KILN__OPCODE_NAME(name, ...) #name,
        KILN__OPCODES(KILN__OPCODE_NAME)
#undef KILN__OPCODE_NAME
    };
    return (unsigned)code < KILN__OP_COUNT ? names[code] : "?";
}

const kiln__op_info kiln__op_infos[KILN__OP_COUNT] = {
#define KILN__OP_INFO_ROW(NAME, name_, arity_, dtype_, shape_, fuse_, grad_, sig_, cpu_, domain_, doc_) \
    [KILN__OP_##NAME] = {.name = #name_,                                                              \
                         .arity = arity_,                                                             \
                         .dtype = KILN__DT_##dtype_,                                                  \
                         .shape = KILN__SHAPE_##shape_,                                               \
                         .fuse = KILN__FUSE_##fuse_,                                                  \
                         .grad = KILN__GRAD_##grad_,                                                  \
                         .sig = KILN__SIG_##sig_,                                                     \
                         .cpu = KILN__CPU_##cpu_,                                                     \
                         .domain = KILN__DOMAIN_##domain_,                                            \
                         .doc = doc_},
    KILN__OPTABLE(KILN__OP_INFO_ROW)
#undef KILN__OP_INFO_ROW
};
