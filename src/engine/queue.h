/* The bounded queue, below fusion and the streams: what the layers above hand it and how they
 * wait on it. Three files, top down (queue-impl.h between them): queue.c admits ops, within the
 * stream's bounds, or runs one at dispatch; queue_workers.c runs them and keeps a stream's
 * errors; queue_epochs.c counts them for kiln_sync_all. Nothing here calls up: the streams
 * (stream.c) start it and give it the drain it uses when out of memory. */
#ifndef KILN_ENGINE_QUEUE_H
#define KILN_ENGINE_QUEUE_H

#include "engine/engine-async.h"
#include "engine/handoff.h"
#include "ir/expr.h"

/* At the engine's start (also in synchronous mode): the bounds from the environment
 * (KILN_MAX_INFLIGHT, KILN_MAX_PENDING_MB), and the wait for the whole engine (the streams'
 * kiln__engine_drain_all) that a node with no memory to queue on uses. */
void kiln__queue_init(void (*drain_all)(void));
/* Measures the hand-off (handoff.c), sets the rules made of it and starts the workers (at most
 * KILN_ENGINE_THREADS): false when no thread started (ops then run at dispatch). */
bool kiln__queue_start_workers(void);
/* fork() in an asynchronous engine (queue_workers.c): the queue's locks taken before, given back
 * in the parent; the child's queue is emptied and has no workers. */
void kiln__queue_fork_lock(void);
void kiln__queue_fork_unlock(void);
void kiln__queue_fork_child(void);

/* Whether op, queued alone now, would run on s's own thread before its dispatch returns (small
 * enough, s idle, every worker asleep). */
bool kiln__async_runs_here(kiln__stream *s, const kiln__op *op);
/* Queues op as one node. g: op is the FUSED op of group g (its storages become the node's);
 * owner: called by s's own thread (may reuse its nodes); may_block: may wait for room in the
 * bounded queue (never under a window's lock: waiting helps run kernels). */
void kiln__async_enqueue(kiln__stream *s, const kiln__op *op, kiln__event *ev, kiln__storage *free_target,
                         const kiln__fused *g, bool owner, bool may_block);
/* kiln__async_enqueue(s, op, NULL, NULL, NULL, true, true) for an op that s's own thread has
 * just found kiln__async_runs_here: it runs now, without the test made again. */
void kiln__async_run_checked_here(kiln__stream *s, const kiln__op *op);
/* A group record of KILN__FUSED_SIZE(n_ops) bytes or more, called with s's window locked (by
 * s's thread, or by another flushing s's window: the lock is what guards the spares): one its
 * engine workers gave back after running it when there is one that large, else a new one
 * (NULL when out of memory). A window builds its group in a whole record that it keeps (a
 * fresh one per flush meant writing every op into memory that was not in the cache, a
 * quarter of the dispatch thread's time: perf) and queues a copy sized by what it holds. */
kiln__fused *kiln__stream_group_alloc(kiln__stream *s, int n_ops);
/* Waits (helping) until s is within its bounds with `bytes` more pending: after a flush that
 * could not wait (0), or for the outputs a window holds before it is queued. */
void kiln__stream_throttle(kiln__stream *s, int64_t bytes);

/* Waits, helping with s's ready ops, until ev->pending is 0 / until s has nothing queued
 * (queue_workers.c). What a window holds is not queued yet: the streams flush it first
 * (kiln__event_wait, kiln__stream_drain). */
void kiln__queue_wait_event(kiln__stream *s, kiln__event *ev);
void kiln__queue_wait_idle(kiln__stream *s);
/* Between kiln__queue_flush_for_wait(s) and the wait that follows it, the thread's flush of its
 * window hands s's ops to itself: the first that is ready wakes no worker, since this thread runs
 * it as it waits (a wake-up call costs the caller 5-9 us here, the worker's core a poll, and the
 * waiter took the op first anyway: a 256 product's loop ran 287 of 300 on its caller). The wait
 * wakes a worker at its end if it left such an op behind. */
void kiln__queue_flush_for_wait(kiln__stream *s);
/* Waits for every op queued before the call, on any stream (kiln_sync_all's epochs,
 * queue_epochs.c). */
void kiln__queue_wait_all(void);
/* Drops a reference to s (its thread's, or a queued op's); the last one frees it
 * (queue_workers.c, as the next one). */
void kiln__stream_unref(kiln__stream *s);
/* Keeps e, made at dispatch, as s's error if it is the earliest undelivered one (ordered after
 * the ops queued so far when it has no order yet). */
void kiln__stream_record_error_now(kiln__stream *s, kiln__error *e);

/* The settings behind kiln__engine_handoff_rules, kiln__engine_set_inline_max_bytes and
 * kiln_engine_set_limits (stream.c: they start the engine first). */
kiln__handoff_rules kiln__queue_handoff_rules(void);
int64_t kiln__queue_set_inline_max_bytes(int64_t bytes);
void kiln__queue_set_limits(int64_t max_inflight_ops, int64_t max_pending_bytes);

#endif
