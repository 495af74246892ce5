/* dist internals shared by the collectives (dist.c) and the data-parallel wrapper (ddp.c). */
#ifndef KILN_DIST_IMPL_H
#define KILN_DIST_IMPL_H

#include "kiln/dist.h"
#include "ops/ops-impl.h"

/* Initialises dist on first use; false (and c's error) if it cannot or was finalized. */
bool kiln__dist_ready(kiln__opctx *c);
int kiln__dist_rank(void);
int kiln__dist_size(void);
/* Queues one collective (ALL_REDUCE, BROADCAST, ALL_GATHER) of t (consumed; param: the
 * reduction or the root) and returns its result, or NULL with c's error. Whatever fails, the
 * collective is still queued, so the peers are told rather than left waiting. */
kiln__tensor *kiln__dist_collective(kiln__opctx *c, kiln__opcode code, kiln__tensor *t, int64_t param);
/* The all-reduce (mean) of t (consumed; NULL when this rank failed) where every rank knows the
 * element count n and the dtype even when its own t failed (a data-parallel bucket): the failure
 * agreement then travels beside the data, one round trip instead of two. */
kiln__tensor *kiln__dist_all_reduce_sized(kiln__opctx *c, kiln__tensor *t, int64_t n, kiln_dtype dtype);

/* Sets the tag of the collectives this thread queues from now on (0 by default; data
 * parallelism tags each step's with the step's number) and returns the one before. The ranks
 * check that paired collectives have the same kind, size, dtype and tag, and fail them on every
 * rank if not. */
int64_t kiln__dist_tag(int64_t tag);

/* Test hooks on this rank's collectives, counted in the order they run from the call on: the
 * one after `skip` more sleeps ms before it communicates (a slow all-reduce, to make an
 * overlap test deterministic); the one after `skip` more fails here, as an injected error,
 * and its peers learn of it as of any failed rank. */
void kiln__dist_debug_delay(int skip, int ms);
void kiln__dist_debug_fail(int skip);

#endif
