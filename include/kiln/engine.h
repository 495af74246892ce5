/* kiln engine: sync points, transactions, limits, profiler. Ops return at once and run on
 * the engine's threads; these are the calls that wait.
 *
 *   // loss (0-d f32) and correct (0-d i64): tensors computed earlier
 *   float l; int64_t n;
 *   kiln_transaction *tx = kiln_transaction_new();
 *   kiln_transaction_read(tx, loss, &l, sizeof l);       // consumes loss
 *   kiln_transaction_read(tx, correct, &n, sizeof n);
 *   if (kiln_transaction_execute(tx) != KILN_OK)         // one wait for both
 *       puts(kiln_last_error());
 *   kiln_transaction_free(tx);
 */
#ifndef KILN_ENGINE_H
#define KILN_ENGINE_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Waits for every op this thread queued. Returns the earliest error of this thread's ops that
 * no read has reported yet: one found while an op ran, or a poisoned result made at dispatch
 * and released unread. Each error is reported once, by whichever read or sync meets it first. */
KILN_API kiln_status kiln_sync(void);
/* Waits for every op queued, by any thread, before the call (work queued meanwhile by other
 * threads is not waited for, so busy threads cannot hold it), then does kiln_sync. */
KILN_API kiln_status kiln_sync_all(void);

/* ---- transactions: many reads, one wait ------------------------------------------------- */
typedef struct kiln_transaction kiln_transaction;
KILN_API kiln_transaction *kiln_transaction_new(void); /* NULL on out of memory */
/* Registers t (consumed) to be copied, dense and in its dtype, into dst (exactly
 * numel * dtype size bytes) when the transaction executes. Errors are kept for execute. */
KILN_API kiln_status kiln_transaction_read(kiln_transaction *tx, kiln_tensor t, void *dst, size_t dst_bytes);
/* Waits once for every registered read; returns the first error (KILN_OK if none). The
 * transaction is empty afterwards and may be reused. */
KILN_API kiln_status kiln_transaction_execute(kiln_transaction *tx);
KILN_API void kiln_transaction_free(kiln_transaction *tx);

/* ---- bounds of this thread's stream ------------------------------------------------------ */
/* Ops in flight, and bytes pending (outputs not yet computed plus buffers released but not
 * yet freed), per stream before dispatch blocks (defaults 4096 ops and 64 MiB;
 * KILN_MAX_INFLIGHT and KILN_MAX_PENDING_MB set them too). Releases never block.
 * Values < 1 keep the current setting. */
KILN_API void kiln_engine_set_limits(int64_t max_inflight_ops, int64_t max_pending_bytes);
/* true when ops run on engine threads; false in KILN_SYNC=1 mode (ops run at dispatch). */
KILN_API bool kiln_engine_is_async(void);

/* ---- fusion ------------------------------------------------------------------------------- */
/* Chains of elementwise ops waiting on a stream run as one pass over memory (default on;
 * KILN_FUSION=0 turns it off; no effect in KILN_SYNC=1 mode). Results are bit-identical
 * either way. Turning it off hands every op held for fusion to the engine. */
KILN_API void kiln_fusion_set_enabled(bool on);
KILN_API bool kiln_fusion_enabled(void);

/* ---- profiler ------------------------------------------------------------------------------ */
typedef struct {
    const char *op;     /* public op name */
    const char *kernel; /* kernel id, e.g. "MATMUL" */
    int stream;         /* dispatching thread's stream id */
    int worker;         /* engine thread that ran it (-1: the dispatching thread) */
    uint64_t seq;       /* sequence number on its stream */
    double dispatch_us, start_us, end_us; /* since the profiler started */
    bool on_device;     /* start and end are the device's (its queue's profiling events) */
} kiln_profile_event;

/* Starts recording (clears earlier events). KILN_PROFILE=path starts it at the first op
 * and writes the trace to path and a summary to stderr at exit. */
KILN_API void kiln_profiler_start(void);
KILN_API void kiln_profiler_stop(void); /* waits for queued ops, then stops recording */
/* Copies up to cap events (in completion order) to out; returns how many were recorded. */
KILN_API size_t kiln_profiler_events(kiln_profile_event *out, size_t cap);
/* A Chrome trace-event JSON file (opens in Perfetto / chrome://tracing). */
KILN_API kiln_status kiln_profiler_write_trace(const char *path);
/* A table per op: calls, total and mean time, share. path NULL writes to stderr. */
KILN_API kiln_status kiln_profiler_write_summary(const char *path);

/* ---- call sites ------------------------------------------------------------------------- */
/* The calls that record the caller's file:line, as in core.h's list (X0: no parameters). */
#define KILN_ENGINE_API(X, X0) \
    X(kiln_status, transaction_read, (kiln_transaction *tx, kiln_tensor t, void *dst, size_t dst_bytes), (tx, t, dst, dst_bytes)) \
    X(kiln_status, transaction_execute, (kiln_transaction *tx), (tx)) \
    X0(kiln_status, sync) \
    X0(kiln_status, sync_all)
KILN_ENGINE_API(KILN__AT_DECLARE, KILN__AT_DECLARE0)

#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#pragma GCC system_header /* see core.h: errors in these calls name the caller's line */
#define kiln_transaction_read(...) KILN__AT(transaction_read, __VA_ARGS__)
#define kiln_transaction_execute(...) KILN__AT(transaction_execute, __VA_ARGS__)
#define kiln_sync() KILN__AT0(sync)
#define kiln_sync_all() KILN__AT0(sync_all)
#endif

#ifdef __cplusplus
}
#endif
/* The free calls record their file:line too: a later use of the freed object names it. */
KILN__FREE_AT_DECLARE(kiln_transaction, transaction_free)
#if !defined(KILN_BUILDING) && !defined(KILN_NO_CALL_SITE_MACROS)
#define kiln_transaction_free(...) KILN__AT(transaction_free, __VA_ARGS__)
#endif

#endif
