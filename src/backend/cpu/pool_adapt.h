/* How long a pool worker that finished a job polls for the next one: a window that follows the
 * gaps the worker actually sees between jobs (pool_adapt.c; issue #29), between the measured
 * floor (pool_poll.c) and KILN__POOL_POLL_MAX_NS. */
#ifndef KILN_BACKEND_CPU_POOL_ADAPT_H
#define KILN_BACKEND_CPU_POOL_ADAPT_H

#include <stdbool.h>
#include <stdint.h>

/* The next poll window after one gap between jobs, in ns. window: the current one; gap: from
 * the start of the worker's poll to the next job (a job that came while it polled: polled, else
 * the worker slept and gap also holds its wake-up); floor: the poll from the machine's wake-up
 * cost (kiln__pool_poll_ns). Never below floor nor above KILN__POOL_POLL_MAX_NS (nor floor, if
 * floor is larger: KILN_POOL_POLL_NS's fixed poll). */
int64_t kiln__pool_adapt_window(int64_t window, int64_t gap, bool polled, int64_t floor);

#endif
