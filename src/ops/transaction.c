/* Transactions: register many tensor reads (handles checked and made dense here), then the
 * engine copies them all out with one wait. */
#include <stdlib.h>

#include "kiln/engine.h"
#include "ops/ops-impl.h"

struct kiln_transaction {
    kiln__host_read *reads; /* reads[i] copies from owned[i] */
    kiln__tensor **owned;   /* dense, owned until execute or free */
    int n, cap;
    kiln__error *first_error; /* from registration */
};

kiln_transaction *kiln_transaction_new(void) {
    kiln_transaction *tx = calloc(1, sizeof *tx);
    if (tx && !kiln__object_register(tx, KILN__TRANSACTION_KIND)) free(tx), tx = NULL;
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

static bool grow(kiln_transaction *tx) {
    int cap = tx->cap ? tx->cap * 2 : 8;
    kiln__host_read *reads = realloc(tx->reads, sizeof *reads * (size_t)cap);
    if (reads) tx->reads = reads;
    kiln__tensor **owned = reads ? realloc(tx->owned, sizeof *owned * (size_t)cap) : NULL;
    if (owned) tx->owned = owned;
    if (!owned) return false; /* (a grown reads array is kept: it is only larger than cap) */
    tx->cap = cap;
    return true;
}

kiln_status kiln_transaction_read(kiln_transaction *tx, kiln_tensor h, void *dst, size_t dst_bytes) {
    KILN__OP_BEGIN("kiln_transaction_read");
    kiln__tensor *t = kiln__arg(&c, h);
    if (!tx) {
        kiln__tensor_release(t);
        return kiln__report(KILN_ERR_NULL, c.name, "transaction is NULL");
    }
    if (!kiln__object_live(tx, KILN__TRANSACTION_KIND)) {
        kiln__tensor_release(t);
        return kiln__object_check(tx, KILN__TRANSACTION_KIND, c.name);
    }
    if (kiln__ok(&c, t)) {
        size_t need = (size_t)kiln__tensor_numel(t) * kiln__elsize(t->dtype);
        if (!dst && need)
            kiln__fail(&c, KILN_ERR_NULL, "destination is NULL");
        else if (dst_bytes != need)
            kiln__fail(&c, KILN_ERR_BUFFER_SIZE, "destination has %zu bytes, tensor needs %zu", dst_bytes, need);
    }
    if (!c.err && tx->n == tx->cap && !grow(tx)) kiln__fail(&c, KILN_ERR_OUT_OF_MEMORY, "cannot grow the transaction");
    if (!c.err) t = kiln__t_contiguous(&c, t); /* consumes t; NULL on failure */
    else kiln__tensor_release(t), t = NULL;
    if (!t) {
        kiln_status st = kiln__error_report(c.err);
        keep_error(tx, &c);
        return st;
    }
    tx->owned[tx->n] = t;
    tx->reads[tx->n++] = (kiln__host_read){kiln__view_of(t), dst, dst_bytes};
    return KILN_OK;
}

kiln_status kiln_transaction_execute(kiln_transaction *tx) {
    if (!tx) return kiln__report(KILN_ERR_NULL, "kiln_transaction_execute", "transaction is NULL");
    KILN__OBJECT_OR_RETURN(tx, KILN__TRANSACTION_KIND, "kiln_transaction_execute", kiln_last_status());
    kiln__error *found = kiln__read_batch(tx->reads, tx->n, "kiln_transaction_execute");
    for (int i = 0; i < tx->n; i++) kiln__tensor_release(tx->owned[i]);
    tx->n = 0;
    kiln__error *err = tx->first_error; /* a registration error comes first */
    tx->first_error = NULL;
    if (err)
        kiln__error_unref(found);
    else
        err = found;
    if (!err) return KILN_OK;
    kiln_status st = kiln__error_report(err);
    kiln__error_unref(err);
    return st;
}

void kiln_transaction_free(kiln_transaction *tx) {
    if (!tx || kiln__object_retire(tx, KILN__TRANSACTION_KIND, "kiln_transaction_free") != KILN_OK) return;
    for (int i = 0; i < tx->n; i++) kiln__tensor_release(tx->owned[i]);
    kiln__error_unref(tx->first_error);
    free(tx->reads);
    free(tx->owned);
    kiln__object_dispose(tx, KILN__TRANSACTION_KIND, "kiln_transaction_free");
}
