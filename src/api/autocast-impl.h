/* The autocast hook the public ops on autocast's list call on their float inputs (autocast.c). */
#ifndef KILN_API_AUTOCAST_IMPL_H
#define KILN_API_AUTOCAST_IMPL_H

#include "kiln/autocast.h"

/* t cast as op's rule on the list says (a tracked kiln_cast, errors naming op), or t itself
 * when autocast is off on this thread, op is unlisted, or t is not an f32/f16/bf16 tensor.
 * Consumes t, as the op would. */
kiln_tensor kiln__autocast_arg(const char *op, kiln_tensor t);

/* kiln_cast(t, dtype), or, for a parameter (an f32 leaf alone in its buffer), a tracked cast
 * over the copy made by an earlier call while nothing has written the parameter since
 * (autocast_cache.c). Consumes t. */
kiln_tensor kiln__autocast_cast(kiln_tensor t, kiln_dtype dtype);
/* How many casts the cache has answered in this process (tests). */
int64_t kiln__autocast_cache_hits(void);

#endif
