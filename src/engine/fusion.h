/* Fusion of queued ops: each stream holds its newest elementwise ops in a window (not yet
 * queued on any storage) and hands them to the engine as one fused op (ir/expr.h) when the
 * group ends: at an op that cannot join, a read, a sync, a full window, or when another
 * thread's op touches a storage the window holds (each such storage carries the window's
 * mark, so the data loader's hand-over of a fresh tensor to another thread stays ordered). */
#ifndef KILN_ENGINE_FUSION_H
#define KILN_ENGINE_FUSION_H

#include "engine/queue.h"

/* Counters since the last reset: groups run fused, ops they held, stores left out (an
 * intermediate no handle kept), windows flushed because another thread touched them, groups
 * that held a reduction. */
typedef struct kiln__fusion_stats {
    int64_t groups, ops_fused, stores_elided, foreign_flushes, reductions;
    int64_t epilogues; /* groups with elementwise ops after their reduction */
} kiln__fusion_stats;
kiln__fusion_stats kiln__fusion_stats_get(void);
void kiln__fusion_stats_reset(void);
/* The smallest product output (bytes) that starts a matmul-epilogue group (fusion_matmul.c):
 * bytes < 0 restores the default (KILN_FUSION_MATMUL_MIN_BYTES, else one CPU panel); 0 lets
 * every product start one (tests of small epilogues). */
void kiln__fusion_set_matmul_min_bytes(int64_t bytes);
/* Whether an op small enough to run at once on an idle stream still joins the window (1), or
 * runs at once (0, the default); < 0 restores the default (KILN_FUSE_TINY=1 sets it). For tests
 * of fusion on small tensors. */
void kiln__fusion_set_fuse_tiny(int on);

/* Submission through the window of s: true when op joined it (the caller queues nothing);
 * false when the caller must queue op now (the window was flushed first if needed), with
 * *runs_here set when op skipped the window because kiln__async_runs_here said it runs at once
 * (the caller need not ask again). */
bool kiln__fusion_submit(kiln__stream *s, const kiln__op *op, kiln__event *ev, kiln__storage *free_target,
                         bool *runs_here);
/* The release hook of a storage a window holds: true when it joined the calling thread's
 * window as a deferred free (after the group; its value need not be stored then). */
bool kiln__fusion_defer_free(kiln__storage *st, kiln__stream *cur);
/* Flushes the window that holds st, if any (cur: the calling thread's stream or NULL). */
void kiln__fusion_flush_storage(kiln__storage *st, kiln__stream *cur);
/* Flushes s's own window (called by s's thread). */
void kiln__fusion_flush_stream(kiln__stream *s);
/* Flushes every window (kiln_sync_all, fork, stats). */
void kiln__fusion_flush_all(kiln__stream *cur);
/* s's thread exits: flush its window and give the window back. */
void kiln__fusion_stream_exit(kiln__stream *s);

/* fork(): lock every window before; unlock in the parent; empty them in the child. */
void kiln__fusion_fork_prepare(void);
void kiln__fusion_fork_parent(void);
void kiln__fusion_fork_child(void);

#endif
