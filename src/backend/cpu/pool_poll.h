/* How long the intra-op pool's caller and workers poll before they sleep (pool_poll.c; issue
 * #29): a rule from what a wake-up costs on this machine, measured once and cached with the
 * other speed decisions (tune.c), or the constant rule under KILN_TUNE=0. */
#ifndef KILN_BACKEND_CPU_POOL_POLL_H
#define KILN_BACKEND_CPU_POOL_POLL_H

#include <stdint.h>

/* The rule without a measurement (KILN_TUNE=0, not measured yet, or a machine too loaded to
 * measure): 50 us, from the workload (see pool_poll.c). */
#define KILN__POOL_POLL_RULE_NS 50000
/* Bounds of a measured poll: below, the clock reads between polls are most of it; above, a
 * measurement made on a loaded machine would keep idle workers off the cores for good. */
#define KILN__POOL_POLL_MIN_NS 5000
#define KILN__POOL_POLL_MAX_NS 200000

/* What one wake-up costs here, against a hand-off to a thread that spins: half the difference
 * of the median round trips (ping-pong through a condition variable, then through an atomic
 * both threads spin on), in ns. 0 when it could not be measured (no thread, or the spinning
 * rounds could not finish in time, or were not clearly faster: a machine too loaded). About
 * 1-3 ms; starts one thread. */
int64_t kiln__pool_measure_wake_ns(void);
/* The poll derived from a wake-up's cost, within the bounds above (wake_ns 0: the rule). */
int64_t kiln__pool_poll_from_wake(int64_t wake_ns);

#endif
