/* The engine's front: stamps op records, hands them to the asynchronous engine (or runs
 * them at once in KILN_SYNC=1 mode, through execute.c), and turns the stream's first failure
 * into the status the next sync or read returns once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend-impl.h"
#include "engine/engine-async.h"
#include "engine/fusion.h"
#include "ir/expr.h"
#include "engine/node.h"
#include "engine/profiler.h"
#include "kiln/engine.h"

/* Sequence number, stream and (when profiling) dispatch time of an op being queued, and the
 * write clock of the storages it writes. */
static kiln__stream *stamp(kiln__op *op) {
    for (int i = 0; i < op->n_out; i++) kiln__storage_note_write(op->out[i].storage);
    kiln__stream *s = kiln__stream_current();
    op->seq = s ? ++s->seq : 0;
    op->stream_id = s ? s->id : -1;
    op->t_dispatch_ns = kiln__profiler_on() ? kiln__now_ns() : 0;
    return s;
}

void kiln__submit(kiln__op *op) {
    kiln__stream *s = stamp(op);
    if (s && kiln__engine_is_async()) {
        kiln__async_submit(s, op, NULL, NULL);
        return;
    }
    kiln__error *e = kiln__execute(op);
    if (e && s) kiln__stream_record_error(s, e);
    kiln__error_unref(e);
}

void kiln__submit_event(kiln__op *op, kiln__event *ev) {
    kiln__stream *s = stamp(op);
    if (s && kiln__engine_is_async()) {
        kiln__async_submit(s, op, ev, NULL);
        return;
    }
    kiln__error *e = kiln__execute(op);
    if (e && !ev->first_error) ev->first_error = kiln__error_ref(e);
    if (e && s) kiln__stream_record_error(s, e);
    kiln__error_unref(e);
}

kiln_status kiln__wait_storage(kiln__storage *st) {
    kiln__stream *s = kiln__stream_current();
    if (kiln__engine_is_async()) kiln__fusion_flush_storage(st, s);
    kiln__var *v = atomic_load_explicit((kiln__var *_Atomic *)&st->var, memory_order_acquire);
    if (v && s && kiln__engine_is_async() && !kiln__var_idle(v)) {
        /* a no-op that reads the storage: granted once every earlier write is done */
        kiln__op op;
        kiln__op_init(&op, KILN__OP_NOOP, "read");
        op.in[0] = (kiln__view){.storage = st, .dtype = KILN_BOOL};
        op.n_in = 1;
        kiln__event ev = {0};
        kiln__async_submit(s, &op, &ev, NULL);
        kiln__event_wait(s, &ev);
        kiln__error_unref(ev.first_error);
    }
    kiln__error *e = atomic_load(&st->err);
    if (e && s) kiln__stream_forget_error(s, e); /* reported by this read: not again by sync */
    return e ? e->status : KILN_OK;
}

kiln__error *kiln__earliest_error(kiln__error *e) {
    kiln__stream *s = kiln__stream_current();
    if (!s) return kiln__error_ref(e);
    kiln__stream_drain(s);
    kiln__error *first = kiln__stream_take_error(s);
    if (first && !atomic_load(&first->delivered) && first->order < e->order) return first;
    if (first) kiln__stream_record_error(s, first); /* not this one: it stays for sync */
    kiln__error_unref(first);
    return kiln__error_ref(e);
}

kiln_status kiln_sync(void) {
    kiln__stream *s = kiln__stream_current();
    if (!s) return kiln__report(KILN_ERR_OUT_OF_MEMORY, "kiln_sync", "cannot create this thread's stream");
    kiln__stream_drain(s);
    if (kiln__backends_synchronize() != KILN_OK) /* device kernels enqueued by the drained ops */
        return kiln__report(KILN_ERR_DEVICE, "kiln_sync", "a device failed while finishing its queued kernels");
    kiln__error *e = kiln__stream_take_error(s);
    if (!e || atomic_load(&e->delivered)) { /* a read on another thread reported it already */
        kiln__error_unref(e);
        return KILN_OK;
    }
    kiln_status st = kiln__error_report(e);
    kiln__error_unref(e);
    return st;
}

kiln_status kiln_sync_all(void) {
    kiln__engine_drain_all();
    return kiln_sync();
}
