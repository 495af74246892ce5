/* Profiler hooks used by the engine. */
#ifndef KILN_PROFILER_H
#define KILN_PROFILER_H

#include "backend/backend-impl.h"
#include "engine/engine-impl.h"

uint64_t kiln__now_ns(void);
bool kiln__profiler_on(void);
/* Records op's run from start_ns to end_ns on this thread; a probe with a token (a device
 * kernel's queued work) is kept, and gives the event its device times when events are read. */
void kiln__profiler_record(const kiln__op *op, uint64_t start_ns, uint64_t end_ns, const kiln__device_probe *probe);
void kiln__profiler_set_worker(int id);
/* kiln_profiler_stop (and the KILN_PROFILE trace written at exit) waits for the queued ops
 * through drain, which the engine registers when it starts. */
void kiln__profiler_set_drain_hook(void (*drain)(void));
/* A stable copy of a name made at run time (a fused group's), kept for the process's life:
 * one copy per distinct name, so events may point at it. */
const char *kiln__profiler_intern(const char *name);

#endif
