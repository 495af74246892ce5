/* The asynchronous engine's internals: the stream, per-storage dependency state, completion
 * events, and what the layers of engine/ call across files: the streams (stream.c), the kernel
 * gate (execute.c, exit_guard.c), the queue's errors and waits (queue_workers.c, queue.h). */
#ifndef KILN_ENGINE_ASYNC_H
#define KILN_ENGINE_ASYNC_H

#include <pthread.h>

#include "engine/engine-impl.h"

struct kiln__node;
struct kiln__window;
typedef struct kiln__window kiln__window;

/* MXNet-style dependency state of one storage: granted readers run together; a writer runs
 * alone, after every earlier reader and writer; blocked ops wait in FIFO order. */
typedef struct kiln__var {
    atomic_bool lock; /* a spinlock (engine/spinlock.h): a few stores under it */
    int active_reads;
    bool active_write;
    struct kiln__var_wait *head, *tail;
} kiln__var;

/* A completion counter a caller can wait on (reads and transactions). */
typedef struct kiln__event {
    int pending;                /* guarded by the owning stream's lock */
    kiln__error *first_error;   /* first runtime error seen by the awaited ops */
} kiln__event;

typedef struct kiln__stream {
    pthread_mutex_t lock;
    pthread_cond_t cond;  /* signalled when an op of this stream completes */
    _Atomic int64_t pending_ops; /* written under lock; read without it by the stream's thread (stream_idle_now) */
    int64_t pending_bytes;
    int64_t waiting_for_room; /* frontend blocked by the bounds */
    kiln__error *first_error; /* unreported runtime error */
    uint64_t seq;
    int id;
    atomic_int refs;          /* the thread + each queued op */
    /* Node recycling: workers push finished nodes on `returned` (lock-free); the stream's own
     * thread takes the whole list when its private `spare` list runs dry. */
    struct kiln__node *_Atomic returned;
    struct kiln__node *spare;
    /* Fused groups recycled the same way (kiln__stream_group_alloc), each list linked through
     * the groups' first bytes. */
    void *_Atomic returned_groups;
    void *spare_groups;
    struct kiln__window *window; /* fusion: ops held back to run as one group */
} kiln__stream;

/* The calling thread's stream (created on first use; stream.c). */
kiln__stream *kiln__stream_current(void);
bool kiln__engine_is_async(void);
/* Runs op's kernel (or skips it if an input is poisoned); poisons outputs on failure.
 * Returns the new error (a reference the caller owns) or NULL. */
kiln__error *kiln__execute(const kiln__op *op);
/* The kernel gate every kiln__execute passes: hold waits for the kernels running on any thread
 * and keeps new ones from starting (a fork is being prepared); release opens it again (in a
 * forked child, also forgetting the parent's kernels). */
void kiln__kernels_hold(void);
void kiln__kernels_release(bool in_child);
/* At exit(): no kernel starts any more, and one still running gets a few seconds to finish,
 * so that no kernel runs while exit tears down the libraries kernels call (oneDNN's and
 * OpenBLAS's static state). Queued work is dropped: nothing can read its results. The exit
 * hold is taken by the exiting thread (exit_guard.c first, the atexit handler as a fallback);
 * that thread's own later kernels still run. A thread that was only ending releases its hold
 * (kiln__kernels_release_thread_exit), exit() never does. */
void kiln__kernels_stop_at_exit(void);
void kiln__kernels_hold_for_exit(void);
void kiln__kernels_release_thread_exit(void);
bool kiln__kernels_held_by_this_thread(void);
/* Makes the calling thread's end (or its exit()) take the exit hold before any exit handler
 * runs (exit_guard.c); once per thread. */
void kiln__exit_guard_thread(void);
/* Asynchronous submission (stream.c): op goes to the stream's substitution hold and fusion
 * window, else to the queue; if ev is not NULL, it is counted there. */
void kiln__async_submit(kiln__stream *s, const kiln__op *op, kiln__event *ev, kiln__storage *free_target);
/* Submits op counted on ev (runs it at once in synchronous mode). */
void kiln__submit_event(kiln__op *op, kiln__event *ev);
/* Blocks until ev->pending is 0 (flushing the stream's window first; stream.c). */
void kiln__event_wait(kiln__stream *s, kiln__event *ev);
/* Blocks until the stream has nothing queued (likewise); the whole engine (kiln_sync_all). */
void kiln__stream_drain(kiln__stream *s);
void kiln__engine_drain_all(void);
/* A stream's errors (queue_workers.c). e was reported by a read: marks it delivered (no stream reports it again) and clears it
 * from s if s holds it. */
void kiln__stream_forget_error(kiln__stream *s, kiln__error *e);
/* Keeps e as s's error if it is the earliest undelivered one. */
void kiln__stream_record_error(kiln__stream *s, kiln__error *e);
/* Takes the stream's unreported error (the caller owns the reference), or NULL. */
kiln__error *kiln__stream_take_error(kiln__stream *s);

#endif
