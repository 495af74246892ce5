/* CUSTOM: runs a user's registered CPU kernel through its definition's trampoline (ir/custom.h),
 * telling it how many threads kiln's pool would use, so it may use as many of its own. */
#include "backend/cpu/cpu-impl.h"
#include "backend/cpu/threadpool.h"
#include "ir/custom.h"

static kiln_status kernel_custom(const kiln__op *op) {
    const kiln__custom_head *head = kiln__custom_of(op);
    if (!head || !head->run_cpu) {
        kiln__kernel_error("custom op record without a definition");
        return KILN_ERR_INTERNAL;
    }
    return head->run_cpu(op, kiln__pool_threads());
}

void kiln__cpu_register_custom(kiln__kernel_fn *table) { table[KILN__OP_CUSTOM] = kernel_custom; }
