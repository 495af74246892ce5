/* Opcode names, for error messages and the profiler: generated from the one opcode list. */
#include "ir/opcodes.h"

const char *kiln__opcode_name(kiln__opcode code) {
    static const char *const names[] = {
#define KILN__OPCODE_NAME(name) #name,
        KILN__OPCODES(KILN__OPCODE_NAME)
#undef KILN__OPCODE_NAME
    };
    return (unsigned)code < KILN__OP_COUNT ? names[code] : "?";
}
