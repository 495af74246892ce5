/* Settings read from the environment (KILN_ENGINE_THREADS, KILN_FUSION_MATMUL_MIN_BYTES, ...),
 * parsed one way: a value that is not a whole number in range is ignored, not half-read. */
#include <stdlib.h>

#include "core/core-impl.h"

int64_t kiln__env_int(const char *name, int64_t min, int64_t fallback) {
    const char *v = getenv(name);
    if (!v || !*v) return fallback;
    char *end;
    long long x = strtoll(v, &end, 10);
    return *end == '\0' && x >= min ? (int64_t)x : fallback;
}
