/* kiln's own substitutions (engine/substitute.h): its fused layer norm and attention kernels
 * registered as the replacements of the compositions they compute, once per process, by the
 * first op that can start one (a mean, a matmul), so that the pattern is there before that op
 * is queued; a program that never reduces or multiplies matrices registers none.
 *
 * Attention's is on unless KILN_SUBSTITUTE_ATTENTION=0 (all of substitution: KILN_SUBSTITUTE=0). */
#include <pthread.h>

#include "ops/ops-impl.h"

static void register_all(void) {
    kiln__layer_norm_patterns_register();
    if (kiln__env_flag("KILN_SUBSTITUTE_ATTENTION", true)) kiln__attention_patterns_register();
}

void kiln__builtin_patterns_ensure(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    static _Thread_local bool ready; /* (pthread_once's own check is a call per op) */
    if (!ready) pthread_once(&once, register_all), ready = true;
}
