/* The backend registry: one registration per device kind, expanded from the one list of kinds
 * (KILN_DEVICE_KINDS in kiln/core.h). Each backend defines `const kiln__backend_reg
 * kiln__<id>_backend_reg` in its own folder, so adding a backend touches that list and the
 * build, and no file here. */
#include "backend/backend-impl.h"

#define DECLARE_REG(NAME, kind, id, index0) extern const kiln__backend_reg kiln__##id##_backend_reg;
KILN_DEVICE_KINDS(DECLARE_REG)
#undef DECLARE_REG

const kiln__backend_reg *const kiln__backend_regs[KILN_KIND_COUNT] = {
#define REG_ENTRY(NAME, kind, id, index0) [kind] = &kiln__##id##_backend_reg,
    KILN_DEVICE_KINDS(REG_ENTRY)
#undef REG_ENTRY
};
