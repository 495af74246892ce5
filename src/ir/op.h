/* The op record: what every backend reads. One op (an opcode from ir/opcodes.h, inline
 * params, the views it reads and writes, its public name and call site) is the unit the engine
 * queues and a kernel runs; it knows nothing of streams or submission. */
#ifndef KILN_IR_OP_H
#define KILN_IR_OP_H

#include <string.h>

#include "core/core-impl.h"
#include "ir/opcodes.h"

/* What a kernel sees of one operand: a strided window on a storage. A view whose storage is
 * NULL is a scalar broadcast to any shape: its value is `scalar` (converted to dtype). */
typedef struct kiln__view {
    kiln__storage *storage;
    kiln_dtype dtype;
    int32_t ndim;
    int64_t offset; /* elements */
    double scalar;
    int64_t shape[KILN_MAX_DIMS];
    int64_t strides[KILN_MAX_DIMS]; /* elements */
} kiln__view;

#define KILN__OP_MAX_IN 3
#define KILN__OP_MAX_OUT 3 /* an Adam update writes param, exp_avg, exp_avg_sq */

/* An op that updates long-lived state in place (a parameter and its optimizer state): when
 * it cannot run (a poisoned input) or its kernel fails, its outputs keep their old values and
 * stay readable; the failure is reported through the stream instead of poisoning them. */
#define KILN__OP_FLAG_KEEP_OUTPUTS_ON_ERROR 1

/* One queued unit of work. Params are inline so no allocation is needed per op. */
typedef struct kiln__op {
    kiln__opcode code;
    int8_t n_in, n_out;
    uint8_t flags; /* KILN__OP_FLAG_* */
    kiln__view in[KILN__OP_MAX_IN];
    kiln__view out[KILN__OP_MAX_OUT];
    union {
        double f[4];
        int64_t i[4];
    } p;
    int64_t pi[4];     /* more integer params when p.f is used too */
    const char *name;  /* public op name, for errors and the profiler */
    const char *file;
    int line;
    int stream_id;
    uint64_t seq;
    uint64_t t_dispatch_ns; /* for the profiler: when the op was queued */
} kiln__op;

/* *dst = *src for what an op uses: every field but the views past its n_in inputs and n_out
 * outputs, which keep whatever dst held (nothing reads them). A whole record is about 1 KiB,
 * mostly unused views: copying only the used part is what keeps queuing a small op cheap. */
static inline void kiln__op_copy(kiln__op *dst, const kiln__op *src) {
    dst->code = src->code;
    dst->n_in = src->n_in;
    dst->n_out = src->n_out;
    dst->flags = src->flags;
    for (int i = 0; i < src->n_in; i++) dst->in[i] = src->in[i];
    for (int i = 0; i < src->n_out; i++) dst->out[i] = src->out[i];
    dst->p = src->p;
    memcpy(dst->pi, src->pi, sizeof dst->pi);
    dst->name = src->name;
    dst->file = src->file;
    dst->line = src->line;
    dst->stream_id = src->stream_id;
    dst->seq = src->seq;
    dst->t_dispatch_ns = src->t_dispatch_ns;
}

/* Base address of a view's first element. */
static inline char *kiln__view_ptr(const kiln__view *v) {
    return (char *)v->storage->data + v->offset * (int64_t)kiln__elsize(v->dtype);
}
kiln__view kiln__view_of(const kiln__tensor *t);
/* The same, written into *v (an op's operand is set where it lives, not returned and copied). */
static inline void kiln__view_set(kiln__view *v, const kiln__tensor *t) {
    v->storage = t->storage;
    v->dtype = t->dtype;
    v->ndim = t->ndim;
    v->offset = t->offset;
    v->scalar = 0;
    memcpy(v->shape, t->shape, sizeof v->shape);
    memcpy(v->strides, t->strides, sizeof v->strides);
}
kiln__view kiln__view_scalar(kiln_dtype dtype, int ndim, const int64_t *shape, double value);
int64_t kiln__view_numel(const kiln__view *v);
bool kiln__view_is_contiguous(const kiln__view *v);

#endif
