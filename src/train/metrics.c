/* Training metrics that never sync per batch: sums live on the device and are read through
 * one transaction when the caller logs. Under data parallelism (kiln/dist.h, a world of more
 * than one) a read first sums them over the ranks, so every rank reports the whole job's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kiln/autodiff.h"
#include "kiln/dist.h"
#include "kiln/engine.h"
#include "kiln/summary.h"
#include "kiln/tensor.h"
#include "kiln/train.h"
#include "ops/ops-impl.h"

struct kiln_metrics {
    kiln_tensor loss_sum; /* f64 0-d: sum of batch loss * batch size */
    kiln_tensor correct;  /* i64 0-d */
    int64_t samples, classified;
};

kiln_metrics *kiln_metrics_new(void) {
    kiln_metrics *m = calloc(1, sizeof *m);
    if (m && !kiln__object_register(m, KILN__METRICS_KIND)) free(m), m = NULL;
    if (!m) kiln__report(KILN_ERR_OUT_OF_MEMORY, "kiln_metrics_new", "cannot allocate metrics");
    return m;
}

static void reset(kiln_metrics *m) {
    kiln_release(m->loss_sum);
    kiln_release(m->correct);
    m->loss_sum = m->correct = KILN_NONE;
    m->samples = m->classified = 0;
}

kiln_status kiln_metrics_add(kiln_metrics *m, kiln_tensor loss, kiln_tensor logits, kiln_tensor targets) {
    const char *op = "kiln_metrics_add";
    kiln_status st = KILN_OK;
    if (!m) st = kiln__report(KILN_ERR_NULL, op, "metrics is NULL");
    else if (kiln__object_check(m, KILN__METRICS_KIND, op) != KILN_OK) st = kiln_last_status();
    else if (kiln_tensor_numel(loss) != 1) st = kiln__report(KILN_ERR_SHAPE, op, "loss must have one element");
    int64_t n = kiln_tensor_dim(targets, 0);
    if (st == KILN_OK && n < 0) st = kiln__report(KILN_ERR_SHAPE, op, "targets must be [N]");
    bool with_logits = logits.id != 0;
    if (st == KILN_OK && with_logits && (kiln_tensor_ndim(logits) != 2 || kiln_tensor_dim(logits, 0) != n))
        st = kiln__report(KILN_ERR_SHAPE, op, "logits must be [N, C] with N = %lld", (long long)n);
    if (st != KILN_OK) {
        kiln_release(loss);
        kiln_release(logits);
        kiln_release(targets);
        return st;
    }
    kiln_no_grad_begin(); /* metrics never join a graph */
    kiln_tensor weighted = kiln_mul_scalar(kiln_cast(kiln_detach(loss), KILN_F64), (double)n);
    m->loss_sum = m->loss_sum.id ? kiln_add(m->loss_sum, weighted) : weighted;
    m->samples += n;
    if (with_logits) {
        kiln_tensor hits = kiln_sum(kiln_eq(kiln_argmax(kiln_detach(logits), 1, false), kiln_cast(targets, KILN_I64)));
        m->correct = m->correct.id ? kiln_add(m->correct, hits) : hits;
        m->classified += n;
    } else {
        kiln_release(targets);
    }
    kiln_no_grad_end();
    return KILN_OK;
}

/* The sums of every rank, queued as one all-reduce of [loss sum, correct, samples, classified]
 * (f64 [4] on the CPU). Takes m's accumulators. */
static kiln_tensor sum_all_ranks(kiln_metrics *m) {
    kiln_tensor parts[4] = {
        m->loss_sum.id ? kiln_to_device(m->loss_sum, KILN_CPU) : kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE()),
        m->correct.id ? kiln_cast(kiln_to_device(m->correct, KILN_CPU), KILN_F64) : kiln_zeros(KILN_CPU, KILN_F64, KILN_SHAPE()),
        kiln_full(KILN_CPU, KILN_F64, KILN_SHAPE(), (double)m->samples),
        kiln_full(KILN_CPU, KILN_F64, KILN_SHAPE(), (double)m->classified)};
    m->loss_sum = m->correct = KILN_NONE; /* consumed */
    return kiln_dist_all_reduce(kiln_stack(parts, 4, 0), KILN_DIST_SUM);
}

static kiln_status read_all_ranks(kiln_metrics *m, double *loss, int64_t *correct) {
    double sums[4];
    kiln_status st = kiln_into_data(sum_all_ranks(m), sums, sizeof sums);
    if (st != KILN_OK) return st;
    *loss = sums[0];
    *correct = (int64_t)sums[1];
    m->samples = (int64_t)sums[2];
    m->classified = (int64_t)sums[3];
    return KILN_OK;
}

kiln_status kiln_metrics_read(kiln_metrics *m, double *mean_loss, double *accuracy, int64_t *count) {
    if (!m) return kiln__report(KILN_ERR_NULL, "kiln_metrics_read", "metrics is NULL");
    KILN__OBJECT_OR_RETURN(m, KILN__METRICS_KIND, "kiln_metrics_read", kiln_last_status());
    double loss = 0;
    int64_t correct = 0;
    kiln_status st = KILN_OK;
    if (kiln_dist_world_size() > 1) {
        st = read_all_ranks(m, &loss, &correct);
    } else if (m->loss_sum.id || m->correct.id) {
        kiln_transaction *tx = kiln_transaction_new();
        if (!tx) return KILN_ERR_OUT_OF_MEMORY;
        if (m->loss_sum.id) kiln_transaction_read(tx, m->loss_sum, &loss, sizeof loss);
        if (m->correct.id) kiln_transaction_read(tx, m->correct, &correct, sizeof correct);
        m->loss_sum = m->correct = KILN_NONE; /* consumed by the reads */
        st = kiln_transaction_execute(tx);
        kiln_transaction_free(tx);
    }
    if (mean_loss) *mean_loss = m->samples ? loss / (double)m->samples : NAN;
    if (accuracy) *accuracy = m->classified ? (double)correct / (double)m->classified : NAN;
    if (count) *count = m->samples;
    reset(m);
    return st;
}

/* Element i of a 1-d tensor (consumed) as a 0-d one. */
static kiln_tensor element(kiln_tensor t, int64_t i) { return kiln_reshape(kiln_narrow(t, 0, i, 1), KILN_SCALAR_SHAPE); }

kiln_status kiln_metrics_log(kiln_metrics *m, kiln_summary_writer *w, const char *prefix, int64_t step) {
    const char *op = "kiln_metrics_log";
    if (!m) return kiln__report(KILN_ERR_NULL, op, "metrics is NULL");
    char loss_tag[256], acc_tag[256];
    snprintf(loss_tag, sizeof loss_tag, "%s%sloss", prefix ? prefix : "", prefix ? "/" : "");
    snprintf(acc_tag, sizeof acc_tag, "%s%saccuracy", prefix ? prefix : "", prefix ? "/" : "");
    kiln_tensor loss = KILN_NONE, accuracy = KILN_NONE;
    const char *outer = kiln__op_scope_enter(op);
    kiln_no_grad_begin();
    if (kiln_dist_world_size() > 1) { /* every rank joins the all-reduce, even one that logged nothing */
        bool classified = m->classified > 0;
        kiln_tensor sums = sum_all_ranks(m);
        /* the counts are known only after the reduction: both divisions stay on the device */
        kiln_tensor samples = element(kiln_ref(sums), 2);
        loss = kiln_div(element(kiln_ref(sums), 0), samples);
        if (classified) {
            kiln_tensor count = element(kiln_ref(sums), 3);
            accuracy = kiln_div(element(kiln_ref(sums), 1), count);
        }
        kiln_release(sums);
    } else {
        if (m->loss_sum.id) loss = kiln_div_scalar(m->loss_sum, (double)m->samples);
        if (m->correct.id) accuracy = kiln_div_scalar(kiln_cast(m->correct, KILN_F64), (double)m->classified);
        m->loss_sum = m->correct = KILN_NONE;
    }
    kiln_no_grad_end();
    kiln__op_scope_leave(outer);
    reset(m);
    kiln_status st = KILN_OK;
    if (loss.id) st = kiln_summary_writer_add_scalar_tensor(w, loss_tag, loss, step);
    if (accuracy.id) {
        kiln_status st2 = kiln_summary_writer_add_scalar_tensor(w, acc_tag, accuracy, step);
        if (st == KILN_OK) st = st2;
    }
    return st;
}

void kiln_metrics_free(kiln_metrics *m) {
    if (!m || kiln__object_retire(m, KILN__METRICS_KIND, "kiln_metrics_free") != KILN_OK) return;
    reset(m);
    kiln__object_dispose(m, KILN__METRICS_KIND, "kiln_metrics_free");
}
