/* Profiler hooks used by the engine. */
#ifndef KILN_PROFILER_H
#define KILN_PROFILER_H

#include "engine/engine-impl.h"

uint64_t kiln__now_ns(void);
bool kiln__profiler_on(void);
void kiln__profiler_record(const kiln__op *op, uint64_t start_ns, uint64_t end_ns);
void kiln__profiler_set_worker(int id);
/* A stable copy of a name made at run time (a fused group's), kept for the process's life:
 * one copy per distinct name, so events may point at it. */
const char *kiln__profiler_intern(const char *name);

#endif
