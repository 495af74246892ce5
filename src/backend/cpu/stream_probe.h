/* Which outputs the fused kernel writes with streaming stores (fused_vec.c; issue #29): those of
 * at least kiln__stream_bytes() bytes in all. A value written with plain stores stays in cache
 * for its reader only if the cache this core really gets holds it; sysfs and cpuid say what the
 * chip has, not what this core gets of it (a 2-vCPU guest of an Intel Xeon family 6 model 207
 * is told 300 MiB of L3 "shared by 2", and measures its write-then-read crossover at 5-10 MiB).
 * So the threshold is measured once per machine, as the tuner's decisions are (tune.h), and kept
 * in "stream-<hash of the key>.txt" beside them:  kiln-stream 1 / key <...> / stream_bytes <n> / end
 *
 * The rule without a measurement (KILN_TUNE=0, a machine without SSE2, a file and a measurement
 * that both failed): half the last-level cache from core/machine.h, as before this file. */
#ifndef KILN_BACKEND_CPU_STREAM_PROBE_H
#define KILN_BACKEND_CPU_STREAM_PROBE_H

#include <stdbool.h>
#include <stdint.h>

/* The threshold in bytes (> 0): read from the file, else measured (and written unless the load
 * average was above the core count), else the rule. Measures at most once per process (about
 * 0.1-0.4 s, one thread); thread-safe. */
int64_t kiln__stream_bytes(void);

/* The sizes measured: from the rule's threshold (half the L3) down by halves to one L2 per core
 * (never above the top); a file's value outside them is refused. */
int64_t kiln__stream_probe_top(void);
int64_t kiln__stream_probe_bottom(void);

/* One timed pass over bytes of buf (64-byte aligned, a multiple of 64): write it (streaming
 * stores, or plain ones) then read it back; the thread's CPU time in ns (a preemption is not
 * counted). */
typedef double (*kiln__stream_pass)(float *buf, int64_t bytes, bool stream);

/* The measurement: at the sizes top, top / 2, ... down to bottom, smallest first, the best of a
 * few alternated rounds of each kind of pass; the first size at which streaming was not slower
 * (the cache no longer holds it). 0: plain stores won at every size, or no memory (the rule).
 * pass NULL: the real one. */
int64_t kiln__stream_measure(int64_t top, int64_t bottom, kiln__stream_pass pass);

/* Tests: the pass the next measurements use (NULL: the real one), and forget the decision so the
 * next kiln__stream_bytes() decides again. */
void kiln__stream_use_pass(kiln__stream_pass pass);
void kiln__stream_forget(void);

#endif
