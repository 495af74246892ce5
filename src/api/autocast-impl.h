/* The autocast hook the public ops on autocast's list call on their float inputs (autocast.c). */
#ifndef KILN_API_AUTOCAST_IMPL_H
#define KILN_API_AUTOCAST_IMPL_H

#include "core/core-impl.h"
#include "kiln/autocast.h"

/* t cast as op's rule on the list says (a tracked kiln_cast, errors naming op), or t itself
 * when autocast is off on this thread, op is unlisted, or t is not an f32/f16/bf16 tensor.
 * Consumes t, as the op would. */
kiln_tensor kiln__autocast_arg(const char *op, kiln_tensor t);

/* Whether a conv2d of input x (borrowed) with `groups` groups stays f32 under the autocast in
 * force: x f32 with fewer than 8 channels per group (see autocast.c). False when autocast is
 * off or x is not usable (the op reports it). */
bool kiln__autocast_conv_stays_f32(kiln_tensor x, int groups);

/* kiln_cast(t, dtype), or, for a parameter (an f32 leaf alone in its buffer), a tracked cast
 * over the copy made by an earlier call while nothing has written the parameter since
 * (autocast_cache.c). Consumes t. */
kiln_tensor kiln__autocast_cast(kiln_tensor t, kiln_dtype dtype);
/* How many casts the cache has answered in this process (tests). */
int64_t kiln__autocast_cache_hits(void);

/* For an optimizer about to update parameter p in place: p's bf16 copy as a bf16 tensor of p's
 * shape (owned), when the copy is current, nothing but the cache holds it, and p is an f32 CPU
 * parameter whose update kernels can rewrite it (KILN__OPTIM_FLAG_BF16_COPY); else NULL. From
 * then until kiln__autocast_copy_updated the copy is not p's cast for anyone. */
kiln__tensor *kiln__autocast_copy_for_update(kiln__tensor *p);
/* After p's update that was to rewrite copy (NULL: none): queued, the copy is p's cast at p's
 * new write stamp; not queued, it stays out of use (the next cast makes a new one). Releases copy. */
void kiln__autocast_copy_updated(kiln__tensor *p, kiln__tensor *copy, bool queued);

#endif
