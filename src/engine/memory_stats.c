/* The public memory statistics (kiln/core.h: kiln_memory_stats_get, _reset_peak,
 * kiln_memory_empty_cache). The counts live with the allocator (core/alloc.c); here they are
 * read as the program wrote it: each call first waits for the queued ops and the frees they
 * hold back. */
#include "core/core-impl.h"
#include "engine/engine-async.h"

/* Stats are a read: they wait for queued ops (and the frees they hold back), so the numbers
 * are those of the program as written, whatever the engine still has in flight. */
kiln_memory_stats kiln_memory_stats_get(kiln_device dev) {
    if (kiln__device_slot(dev) < 0) {
        kiln__report(KILN_ERR_DEVICE, "kiln_memory_stats_get", "invalid device %d", (int)dev);
        return (kiln_memory_stats){0};
    }
    kiln__engine_drain_all();
    return kiln__memory_stats_snapshot(dev);
}

void kiln_memory_reset_peak(kiln_device dev) {
    if (kiln__device_slot(dev) < 0) return;
    kiln__engine_drain_all();
    kiln__memory_reset_peak(dev);
}

void kiln_memory_empty_cache(kiln_device dev) {
    if (kiln__device_slot(dev) < 0) return;
    kiln__engine_drain_all(); /* deferred frees first, so they reach the cache and leave with it */
    kiln__storage_empty_cache(dev);
}
