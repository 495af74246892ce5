/* kiln engine: sync points. Ops return at once; these are the calls that wait.
 *
 *   kiln_tensor y = kiln_exp(kiln_randn(KILN_CPU, KILN_F32, KILN_SHAPE(1000), 1));
 *   kiln_status st = kiln_sync();          // waits for this thread's queued ops
 *   if (st != KILN_OK) puts(kiln_last_error());
 *   kiln_release(y);
 */
#ifndef KILN_ENGINE_H
#define KILN_ENGINE_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Waits for every op this thread queued; returns (once) the first error they hit. */
KILN_API kiln_status kiln_sync(void);
/* Waits for every op queued by any thread. */
KILN_API kiln_status kiln_sync_all(void);

#ifndef KILN_BUILDING
#define kiln_sync(...) KILN__AT(kiln_sync, __VA_ARGS__)
#define kiln_sync_all(...) KILN__AT(kiln_sync_all, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif
#endif
