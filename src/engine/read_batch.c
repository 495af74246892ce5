/* Batched reads to host memory: every copy queued first, then one wait for all of them (the
 * mechanism under transactions). */
#include "engine/engine-async.h"

kiln__error *kiln__read_batch(const kiln__host_read *reads, int n, const char *name) {
    kiln__event ev = {0};
    for (int i = 0; i < n; i++) {
        if (!reads[i].bytes) continue;
        kiln__op op;
        kiln__op_init(&op, KILN__OP_TO_HOST, name);
        op.in[0] = reads[i].src;
        op.n_in = 1;
        op.pi[0] = (int64_t)(intptr_t)reads[i].dst;
        op.pi[1] = (int64_t)reads[i].bytes;
        kiln__submit_event(&op, &ev);
    }
    kiln__stream *s = kiln__stream_current();
    if (s) kiln__event_wait(s, &ev);
    kiln__error *err = NULL;
    for (int i = 0; i < n; i++) {
        kiln__storage *st = reads[i].src.storage;
        kiln__error *e = st ? atomic_load(&st->err) : NULL; /* a source was poisoned while running */
        if (e && !err) err = kiln__error_ref(e);
        if (e && s) kiln__stream_forget_error(s, e);
    }
    if (!err && ev.first_error) err = kiln__error_ref(ev.first_error);
    if (ev.first_error && s) kiln__stream_forget_error(s, ev.first_error);
    kiln__error_unref(ev.first_error);
    return err;
}
