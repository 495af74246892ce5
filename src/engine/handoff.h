/* The cost of handing an op to an engine worker on this machine, measured once (handoff.c). */
#ifndef KILN_ENGINE_HANDOFF_H
#define KILN_ENGINE_HANDOFF_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct kiln__handoff_costs {
    int64_t signal_ns;   /* the waking side's time to wake a sleeping thread (0: not measured) */
    int64_t wake_ns;     /* from that call until the woken thread runs */
    double bytes_per_ns; /* what one thread copies per ns within the L1 data cache */
    int64_t l1_bytes;    /* the L1 data cache of one core */
} kiln__handoff_costs;

/* Measures them (about 3 ms; starts and joins one thread). */
kiln__handoff_costs kiln__handoff_measure(void);
/* The largest op (bytes of its storages) that runs in less time than signal_ns, at most l1_bytes. */
int64_t kiln__handoff_inline_max_bytes(const kiln__handoff_costs *c);

/* The asynchronous engine's rules made of them (queue.c; zeros in synchronous mode): how long a
 * worker polls for ops before it sleeps, and the largest op its caller runs itself. */
typedef struct kiln__handoff_rules {
    kiln__handoff_costs measured;
    int64_t poll_ns, inline_max_bytes;
} kiln__handoff_rules;
kiln__handoff_rules kiln__engine_handoff_rules(void);
/* For tests: the largest op run by its caller (0: none; < 0: what was measured, or
 * KILN_INLINE_MAX_BYTES). Returns the previous value. */
int64_t kiln__engine_set_inline_max_bytes(int64_t bytes);

#endif
