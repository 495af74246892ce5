/* The engine: turns op records into kernel runs and tracks runtime errors.
 * This is the synchronous executor (every op runs at submission); the asynchronous one
 * keeps the same contract: kiln__submit never fails, errors poison outputs and are
 * returned once by the next sync. */
#include <stdlib.h>
#include <string.h>

#include "backend/backend-impl.h"
#include "engine/engine-impl.h"
#include "kiln/engine.h"

typedef struct {
    uint64_t seq;
    kiln__error *first_error; /* unreported runtime error of this thread's ops */
} stream_state;

static _Thread_local stream_state stream;

const char *kiln__opcode_name(kiln__opcode code) {
    static const char *const names[] = {
#define KILN__OPCODE_NAME(name) #name,
        KILN__OPCODES(KILN__OPCODE_NAME)
#undef KILN__OPCODE_NAME
    };
    return (unsigned)code < KILN__OP_COUNT ? names[code] : "?";
}

uint64_t kiln__next_seq(void) { return ++stream.seq; }

void kiln__op_init(kiln__op *op, kiln__opcode code, const char *name) {
    kiln__site site = kiln__call_site();
    op->code = code;
    op->n_in = 0;
    op->n_out = 0;
    op->name = name;
    op->file = site.file;
    op->line = site.line;
    op->seq = 0;
    memset(&op->p, 0, sizeof op->p);
    memset(op->pi, 0, sizeof op->pi);
}

static void poison_outputs(const kiln__op *op, kiln__error *e) {
    for (int i = 0; i < op->n_out; i++) {
        kiln__storage *s = op->out[i].storage;
        kiln__error *expect = NULL;
        if (s && atomic_compare_exchange_strong(&s->err, &expect, e)) kiln__error_ref(e);
    }
}

static void record_stream_error(kiln__error *e) {
    if (!stream.first_error) stream.first_error = kiln__error_ref(e);
}

void kiln__submit(kiln__op *op) {
    op->seq = kiln__next_seq();
    for (int i = 0; i < op->n_in; i++) {
        kiln__storage *s = op->in[i].storage;
        kiln__error *e = s ? atomic_load(&s->err) : NULL;
        if (e) { /* skip the work, still complete: the outputs carry the error */
            poison_outputs(op, e);
            return;
        }
    }
    kiln_device dev = op->n_out ? op->out[0].storage->device : KILN_CPU;
    const kiln__backend *be = kiln__backend_get(dev);
    kiln__kernel_fn fn = be ? be->kernels[op->code] : NULL;
    kiln_status st;
    if (!fn) {
        kiln__kernel_error("no %s kernel for %s on %s", kiln__opcode_name(op->code), op->name,
                           kiln_device_name(dev));
        st = KILN_ERR_UNSUPPORTED;
    } else {
        st = fn(op);
    }
    if (st != KILN_OK) {
        const char *detail = kiln__kernel_error_detail();
        kiln__error *e = kiln__error_new(st, op->name, op->file, op->line, op->seq, "%s",
                                         detail[0] ? detail : kiln_status_str(st));
        kiln__kernel_error("%s", "");
        poison_outputs(op, e);
        record_stream_error(e);
        kiln__error_unref(e);
    }
}

kiln_status kiln__wait_storage(kiln__storage *s) {
    kiln__error *e = atomic_load(&s->err);
    return e ? e->status : KILN_OK;
}

void kiln__engine_free_storage(kiln__storage *s) { kiln__storage_destroy(s); }

kiln_status kiln_sync(void) {
    kiln__error *e = stream.first_error;
    if (!e) return KILN_OK;
    stream.first_error = NULL;
    kiln_status st = kiln__error_report(e);
    kiln__error_unref(e);
    return st;
}

kiln_status kiln_sync_all(void) { return kiln_sync(); }
