/* Transactions: register many reads, submit them together, wait once. */
#include <stdlib.h>

#include "engine/engine-async.h"
#include "kiln/engine.h"
#include "ops/ops-impl.h"

typedef struct {
    kiln__tensor *t; /* dense, owned; NULL when the registration failed */
    void *dst;
    size_t bytes;
} tx_read;

struct kiln_transaction {
    tx_read *reads;
    int n, cap;
    kiln__error *first_error; /* from registration */
};

kiln_transaction *kiln_transaction_new(void) {
    kiln_transaction *tx = calloc(1, sizeof *tx);
    if (!tx) kiln__report(KILN_ERR_OUT_OF_MEMORY, "kiln_transaction_new", "cannot allocate a transaction");
    return tx;
}

static void keep_error(kiln_transaction *tx, kiln__opctx *c) {
    if (!tx->first_error)
        tx->first_error = c->err;
    else
        kiln__error_unref(c->err);
    c->err = NULL;
}

kiln_status kiln_transaction_read(kiln_transaction *tx, kiln_tensor h, void *dst, size_t dst_bytes) {
    KILN__OP_BEGIN("kiln_transaction_read");
    kiln__tensor *t = kiln__arg(&c, h);
    if (!tx) {
        kiln__tensor_release(t);
        return kiln__report(KILN_ERR_NULL, c.name, "transaction is NULL");
    }
    if (kiln__ok(&c, t)) {
        size_t need = (size_t)kiln__tensor_numel(t) * kiln__elsize(t->dtype);
        if (!dst && need)
            kiln__fail(&c, KILN_ERR_NULL, "destination is NULL");
        else if (dst_bytes != need)
            kiln__fail(&c, KILN_ERR_BUFFER_SIZE, "destination has %zu bytes, tensor needs %zu", dst_bytes, need);
    }
    if (!c.err && tx->n == tx->cap) {
        int cap = tx->cap ? tx->cap * 2 : 8;
        tx_read *grown = realloc(tx->reads, sizeof *grown * (size_t)cap);
        if (!grown)
            kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot grow the transaction");
        else
            tx->reads = grown, tx->cap = cap;
    }
    if (!c.err) t = kiln__t_contiguous(&c, t); /* consumes t; NULL on failure */
    else kiln__tensor_release(t), t = NULL;
    if (!t) {
        kiln_status st = kiln__error_report(c.err);
        keep_error(tx, &c);
        return st;
    }
    tx->reads[tx->n++] = (tx_read){t, dst, dst_bytes};
    return KILN_OK;
}

kiln_status kiln_transaction_execute(kiln_transaction *tx) {
    if (!tx) return kiln__report(KILN_ERR_NULL, "kiln_transaction_execute", "transaction is NULL");
    kiln__event ev = {0};
    for (int i = 0; i < tx->n; i++) {
        tx_read *r = &tx->reads[i];
        if (!r->bytes) continue;
        kiln__op op;
        kiln__op_init(&op, KILN__OP_TO_HOST, "kiln_transaction_execute");
        op.in[0] = kiln__view_of(r->t);
        op.n_in = 1;
        op.pi[0] = (int64_t)(intptr_t)r->dst;
        op.pi[1] = (int64_t)r->bytes;
        kiln__submit_event(&op, &ev);
    }
    kiln__stream *s = kiln__stream_current();
    if (s) kiln__event_wait(s, &ev);
    kiln__error *err = tx->first_error;
    tx->first_error = NULL;
    for (int i = 0; i < tx->n; i++) {
        kiln__storage *st = tx->reads[i].t->storage;
        kiln__error *e = atomic_load(&st->err); /* an input was poisoned while running */
        if (e && !err) err = kiln__error_ref(e);
        if (e && s) kiln__stream_forget_error(s, e);
        kiln__tensor_release(tx->reads[i].t);
    }
    tx->n = 0;
    if (!err && ev.first_error) err = kiln__error_ref(ev.first_error);
    if (ev.first_error && s) kiln__stream_forget_error(s, ev.first_error);
    kiln__error_unref(ev.first_error);
    if (!err) return KILN_OK;
    kiln_status st = kiln__error_report(err);
    kiln__error_unref(err);
    return st;
}

void kiln_transaction_free(kiln_transaction *tx) {
    if (!tx) return;
    for (int i = 0; i < tx->n; i++) kiln__tensor_release(tx->reads[i].t);
    kiln__error_unref(tx->first_error);
    free(tx->reads);
    free(tx);
}
