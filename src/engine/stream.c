/* The streams: the asynchronous engine's layer above fusion. Each user thread has its own stream
 * (made at its first op, ended with the thread), and a stream that belongs to no thread can be
 * entered for a while (engine/stream.h). An op a thread dispatches goes to its stream's
 * substitution hold and fusion window (fusion.c) and, when it does not join them, to the
 * bounded queue (queue.c). A wait on a stream flushes what its window holds first, then waits in
 * the queue. Also here: starting the engine (KILN_SYNC, the queue's workers, core's release
 * hook), the fork handlers, and the public settings of the engine. */
#include <stdlib.h>

#include "backend/backend-impl.h"
#include "engine/fusion.h"
#include "engine/handoff.h"
#include "engine/node.h"
#include "engine/profiler.h"
#include "kiln/engine.h"

static struct {
    pthread_once_t once;
    bool async;
    atomic_int next_stream_id;
} engine = {.once = PTHREAD_ONCE_INIT};

static pthread_key_t stream_key;
static _Thread_local kiln__stream *current_stream;

static void stream_thread_exit(void *arg) {
    kiln__fusion_stream_exit(arg);
    kiln__stream_unref(arg);
}

/* fork() copies only the forking thread. Before it, the work queued so far finishes and the
 * engine's locks are taken, so the child inherits an idle engine and no lock held by a thread
 * it lacks; the child then runs every op at dispatch (as KILN_SYNC=1 does), with the intra-op
 * pool restarting its own threads. Work another thread queues while the fork happens stays
 * with the parent. */
static void engine_before_fork(void) {
    if (engine.async) kiln__engine_drain_all(); /* (before the gate closes: it needs kernels to run) */
    kiln__fusion_fork_prepare(); /* (before the gate too: a window's flush may wait for room) */
    /* no kernel may be running either, on any thread: OpenBLAS shuts its threads down in its own
     * fork handler, and a GEMM still running then leaves a thread it waits for forever */
    kiln__kernels_hold();
    kiln__var_spares_fork_lock(true);
    if (!engine.async) return;
    kiln__queue_fork_lock();
}

static void engine_after_fork_parent(void) {
    kiln__var_spares_fork_lock(false);
    kiln__fusion_fork_parent();
    if (engine.async) kiln__queue_fork_unlock();
    kiln__kernels_release(false);
}

static void engine_after_fork_child(void) {
    kiln__var_spares_fork_lock(false);
    kiln__fusion_fork_child();
    kiln__kernels_release(true);
    if (!engine.async) return;
    engine.async = false;
    kiln__queue_fork_child();
}

static void free_storage_after_users(kiln__storage *s);

static void engine_init(void) {
    /* before any op is queued, so before any storage has a var for core to see */
    kiln__storage_set_release_hook(free_storage_after_users);
    kiln__profiler_set_drain_hook(kiln__engine_drain_all);
    engine.async = !kiln__env_flag("KILN_SYNC", false);
    kiln__queue_init(kiln__engine_drain_all);
    pthread_key_create(&stream_key, stream_thread_exit);
    kiln__core_fork_guard(); /* (first: its locks are taken after the engine has drained) */
    pthread_atfork(engine_before_fork, engine_after_fork_parent, engine_after_fork_child);
    /* (synchronous too: another thread may call exit() while this one runs a kernel) */
    kiln__backend_set_exit_hold(kiln__kernels_stop_at_exit);
    kiln__backend_exit_hold_register();
    if (!engine.async) return;
    engine.async = kiln__queue_start_workers(); /* no threads: run ops at dispatch */
}

bool kiln__engine_is_async(void) {
    static _Thread_local bool ready; /* (pthread_once's own check is a call per op) */
    if (KILN__UNLIKELY(!ready)) pthread_once(&engine.once, engine_init), ready = true;
    return engine.async;
}

static kiln__stream *stream_new(void) {
    pthread_once(&engine.once, engine_init);
    kiln__stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    atomic_init(&s->refs, 1);
    s->id = atomic_fetch_add(&engine.next_stream_id, 1);
    return s;
}

kiln__stream *kiln__stream_current(void) {
    kiln__stream *s = current_stream;
    if (KILN__LIKELY(s)) return s;
    if (!(s = stream_new())) return NULL;
    kiln__exit_guard_thread();
    pthread_setspecific(stream_key, s);
    current_stream = s;
    return s;
}

kiln__stream *kiln__stream_new(void) { return stream_new(); }

kiln__stream *kiln__stream_enter(kiln__stream *s) {
    kiln__stream *own = kiln__stream_current(); /* (made now if the thread had none: it ends with the thread) */
    if (s) current_stream = s;
    return own;
}

void kiln__stream_leave(kiln__stream *s, kiln__stream *prev) {
    if (!s || current_stream != s) return;
    kiln__fusion_flush_stream(s); /* nothing of it waits for this thread any more */
    current_stream = prev;
}

void kiln__stream_free(kiln__stream *s) {
    if (!s) return;
    kiln__fusion_stream_exit(s);
    kiln__stream_unref(s); /* (its queued ops hold it until they have run) */
}

void kiln__stream_record_dispatch_error(kiln__error *e) {
    kiln__stream *s = kiln__stream_current();
    if (s) kiln__stream_record_error_now(s, e);
}

/* ---- submission and waits: the window first, then the queue ------------------------------- */

void kiln__async_submit(kiln__stream *s, const kiln__op *op, kiln__event *ev, kiln__storage *free_target) {
    bool runs_here;
    if (kiln__fusion_submit(s, op, ev, free_target, &runs_here)) return;
    if (runs_here) kiln__async_run_checked_here(s, op);
    else kiln__async_enqueue(s, op, ev, free_target, NULL, true, true);
}

void kiln__event_wait(kiln__stream *s, kiln__event *ev) {
    kiln__queue_flush_for_wait(s);
    kiln__fusion_flush_stream(s);
    kiln__queue_wait_event(s, ev);
}

void kiln__stream_drain(kiln__stream *s) {
    if (kiln__kernels_held_by_this_thread()) return; /* exiting: queued work is dropped */
    kiln__queue_flush_for_wait(s);
    kiln__fusion_flush_stream(s);
    kiln__queue_wait_idle(s);
}

void kiln__engine_drain_all(void) {
    /* exiting (an exit handler, such as the profiler's, drains): the work still queued is
     * dropped, since the kernels it waits for never start */
    if (kiln__kernels_held_by_this_thread()) return;
    kiln__fusion_flush_all(current_stream);
    kiln__queue_wait_all();
}

/* Core's release hook: frees the storage now if no queued op uses it, else after the last one
 * (a write access that waits for every earlier reader and writer). Never blocks the caller. */
static void free_storage_after_users(kiln__storage *s) {
    if (kiln__fusion_defer_free(s, current_stream)) return; /* after the group that holds it */
    kiln__var *v = atomic_load_explicit((kiln__var *_Atomic *)&s->var, memory_order_acquire);
    /* (a synchronous engine queues nothing: a var there is a forked parent's, idle or stale) */
    if (!v || !kiln__engine_is_async() || kiln__var_idle(v)) {
        s->var = NULL;
        kiln__var_free(v);
        kiln__storage_destroy(s);
        return;
    }
    kiln__stream *st = kiln__stream_current();
    if (!st) { /* no stream to queue on: wait for the engine instead */
        kiln__engine_drain_all();
        s->var = NULL;
        kiln__var_free(v);
        kiln__storage_destroy(s);
        return;
    }
    kiln__op op;
    kiln__op_init(&op, KILN__OP_NOOP, "free");
    kiln__async_submit(st, &op, NULL, s);
}

/* ---- settings ------------------------------------------------------------------------------ */

bool kiln_engine_is_async(void) { return kiln__engine_is_async(); }

kiln__handoff_rules kiln__engine_handoff_rules(void) {
    if (!kiln__engine_is_async()) return (kiln__handoff_rules){0};
    return kiln__queue_handoff_rules();
}

int64_t kiln__engine_set_inline_max_bytes(int64_t bytes) {
    pthread_once(&engine.once, engine_init);
    return kiln__queue_set_inline_max_bytes(bytes);
}

void kiln_engine_set_limits(int64_t max_inflight_ops, int64_t max_pending_bytes) {
    pthread_once(&engine.once, engine_init);
    kiln__queue_set_limits(max_inflight_ops, max_pending_bytes);
}
