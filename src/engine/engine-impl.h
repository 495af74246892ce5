/* kiln engine internals: submission, waiting. The op records it queues are the IR's (ir/op.h). */
#ifndef KILN_ENGINE_IMPL_H
#define KILN_ENGINE_IMPL_H

#include "core/core-impl.h"
#include "engine/stream.h"
#include "ir/op.h"

/* Prepares an op record (code, name, call site). */
void kiln__op_init(kiln__op *op, kiln__opcode code, const char *name);
/* Queues op for execution; the engine owns nothing in it (views only borrow storages whose
 * lifetime the engine extends until the op has run). Never fails: an error while running
 * poisons the op's outputs and is reported by the next sync or read. */
void kiln__submit(kiln__op *op);
/* The kernel of every collective (ir/opcodes.h's kiln__opcode_is_comm), registered by the
 * dist layer at its initialisation; such ops run on the engine's one communication thread,
 * in the order their dependencies release them. */
typedef kiln_status (*kiln__comm_kernel_fn)(const kiln__op *op);
void kiln__engine_set_comm_kernel(kiln__comm_kernel_fn fn);
/* Test hook: the next op named op_name to run fails with KILN_ERR_KERNEL. */
void kiln__debug_fail_next_kernel(const char *op_name);
/* Waits until every queued op writing s is done; returns s's runtime error status. */
kiln_status kiln__wait_storage(kiln__storage *s);
/* One copy to host memory in a batch of reads: src dense, bytes its size. */
typedef struct kiln__host_read {
    kiln__view src;
    void *dst;
    size_t bytes;
} kiln__host_read;
/* Queues a copy of each of the n reads (ops named name), waits once for all of them, and
 * returns the first error found (a new reference), or NULL: a source poisoned while running,
 * in the order of reads, else one raised by a copy. Every error found counts as reported by
 * this read, so no sync reports it again. */
kiln__error *kiln__read_batch(const kiln__host_read *reads, int n, const char *name);
/* e surfaced in a read; waits for this thread's queued work and returns (a new reference)
 * whichever came first of e and the stream's unreported error, so the caller can name the op
 * that failed first (a later op may fail on the same bad input without reading the first). */
kiln__error *kiln__earliest_error(kiln__error *e);
/* A poisoned result made at dispatch: the calling thread's stream keeps its error, so a sync
 * reports it even if the tensor is released unread (unless a read delivered it first). */
void kiln__stream_record_dispatch_error(kiln__error *e);

#endif
