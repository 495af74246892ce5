/* Device streams: each kiln stream gets its own in-order command queue on a device (made at the
 * stream's first op there, released when the engine ends the stream), and the buffers an op
 * touches give the device events it must wait for. Every kernel of the device's table runs
 * inside run_on_stream: the events of other queues that the op's buffers wait on become one
 * barrier on the op's queue (clEnqueueBarrierWithWaitList), the op's kernels enqueue behind it
 * and return, and the op's last event becomes its buffers' new state: the last write, or one
 * more read. Buffers of another device in the same context (a copy between devices) take
 * part the same way, their events guarded by their own device's lock: the copy waits for the
 * source's last write as a device event and becomes one of its reads. The host never waits
 * for a device event to dispatch; only reads to the host (and kernels whose result the host
 * checks) wait, each for its own command. The engine runs independent ops of one stream on
 * several workers at once: each queue's `order` lock keeps the order in which they record
 * their events the order in which they enqueued (a buffer's read of a queue is replaced by
 * the one recorded last, so a copy from the host into a reused buffer once waited for an
 * earlier read than the last and overwrote what a kernel was still reading). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend-impl.h"
#include "ir/expr.h"

#if KILN_HAVE_OPENCL
#include "backend/opencl/opencl-impl.h"

/* Buffers one op touches, at most (a fused group's inputs and outputs, an optimizer's state). */
#define MAX_BUFS (2 * (KILN__EXPR_MAX_INPUTS + KILN__EXPR_MAX_OUTPUTS) + KILN__OP_MAX_IN + KILN__OP_MAX_OUT)
/* Events waited for by one barrier; more make several barriers. */
#define MAX_WAIT 64

static atomic_uint_fast64_t next_qid = 1;

/* The op being run on this thread: its queue and the last event its kernels enqueued. */
static _Thread_local struct {
    kiln__opencl_device *d;
    cl_command_queue queue;
    uint64_t qid;
    cl_event first, last; /* (first: only while the profiler records) */
    uint64_t first_host_ns; /* when first's enqueue returned */
    const cl_event *wait;
    int n_wait;
} cur;

void kiln__opencl_note_event(cl_event ev) {
    if (!cur.d || !ev) return;
    if (kiln__kernel_timing && !cur.first) clRetainEvent(cur.first = ev), cur.first_host_ns = kiln__opencl_host_ns();
    clRetainEvent(ev);
    if (cur.last) clReleaseEvent(cur.last);
    cur.last = ev;
}

int kiln__opencl_wait_list(const cl_event **events) {
    *events = cur.wait;
    return cur.n_wait;
}

static cl_command_queue new_queue(kiln__opencl_device *d, cl_command_queue_properties extra, cl_int *err) {
    return clCreateCommandQueue(d->context, d->id, CL_QUEUE_PROFILING_ENABLE | extra, err); /* device times */
}

bool kiln__opencl_streams_init(kiln__opencl_device *d) {
    pthread_mutex_init(&d->queue_lock, NULL);
    pthread_mutex_init(&d->dep_lock, NULL);
    pthread_mutex_init(&d->staging_lock, NULL);
    cl_int err = CL_SUCCESS;
    d->transfer = new_queue(d, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
    if (err != CL_SUCCESS) { /* a driver without out-of-order queues: reads wait in turn */
        d->transfer = new_queue(d, 0, &err);
        d->transfer_in_order = true;
    }
    d->transfer_qid = atomic_fetch_add(&next_qid, 1);
    atomic_init(&d->clock_offset, INT64_MAX);
    return err == CL_SUCCESS;
}

static void queue_free(kiln__opencl_stream_queue *sq) {
    clReleaseCommandQueue(sq->queue);
    pthread_mutex_destroy(sq->order);
    free(sq->order);
}

void kiln__opencl_streams_free(kiln__opencl_device *d) {
    for (int i = 0; i < d->n_queues; i++) queue_free(&d->queues[i]);
    free(d->queues);
    for (int i = 0; i < d->n_ended_marks; i++) clReleaseEvent(d->ended_marks[i]);
    free(d->ended_marks);
    if (d->transfer) clReleaseCommandQueue(d->transfer);
}

/* A new queue for stream_id in d's list (queue_lock held); false with *err set. */
static bool queue_add(kiln__opencl_device *d, int stream_id, kiln__opencl_stream_queue *out, cl_int *err) {
    if (d->n_queues == d->cap_queues) {
        int cap = d->cap_queues ? 2 * d->cap_queues : 8;
        kiln__opencl_stream_queue *grown = realloc(d->queues, (size_t)cap * sizeof *grown);
        if (grown) d->queues = grown, d->cap_queues = cap;
    }
    pthread_mutex_t *order = d->n_queues < d->cap_queues ? malloc(sizeof *order) : NULL;
    cl_command_queue q = order ? new_queue(d, 0, err) : NULL;
    if (!q) {
        free(order);
        if (*err == CL_SUCCESS) *err = CL_OUT_OF_HOST_MEMORY;
        return false;
    }
    pthread_mutex_init(order, NULL);
    *out = (kiln__opencl_stream_queue){.stream_id = stream_id, .queue = q, .qid = atomic_fetch_add(&next_qid, 1), .order = order};
    d->queues[d->n_queues++] = *out;
    return true;
}

/* The stream's queue on d, made on first use (false with *err set when the driver refuses). */
static bool stream_queue(kiln__opencl_device *d, int stream_id, kiln__opencl_stream_queue *out, cl_int *err) {
    /* a one-entry cache per thread: stream ids are never reused, so an entry cannot go stale
     * while an op of its stream can still run */
    static _Thread_local struct {
        kiln__opencl_device *d;
        kiln__opencl_stream_queue sq;
    } last;
    if (last.d == d && last.sq.stream_id == stream_id && last.sq.queue) {
        *out = last.sq;
        return true;
    }
    bool found = false;
    pthread_mutex_lock(&d->queue_lock);
    for (int i = 0; i < d->n_queues && !found; i++)
        if (d->queues[i].stream_id == stream_id) *out = d->queues[i], found = true;
    if (!found) found = queue_add(d, stream_id, out, err);
    pthread_mutex_unlock(&d->queue_lock);
    if (found) last.d = d, last.sq = *out;
    return found;
}

static bool event_done(cl_event ev) {
    cl_int status = CL_QUEUED;
    return clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL) != CL_SUCCESS ||
           status <= CL_COMPLETE;
}

/* Keeps an ended stream's last marker for the exit hold, dropping those already done. */
static void ended_mark_keep(kiln__opencl_device *d, cl_event mark) {
    pthread_mutex_lock(&d->queue_lock);
    int k = 0;
    for (int i = 0; i < d->n_ended_marks; i++)
        if (event_done(d->ended_marks[i])) clReleaseEvent(d->ended_marks[i]);
        else d->ended_marks[k++] = d->ended_marks[i];
    d->n_ended_marks = k;
    if (k == d->cap_ended_marks) {
        int cap = k ? 2 * k : 8;
        cl_event *grown = realloc(d->ended_marks, (size_t)cap * sizeof *grown);
        if (grown) d->ended_marks = grown, d->cap_ended_marks = cap;
    }
    if (d->n_ended_marks < d->cap_ended_marks) d->ended_marks[d->n_ended_marks++] = mark, mark = NULL;
    pthread_mutex_unlock(&d->queue_lock);
    if (mark) clReleaseEvent(mark); /* (no memory to keep it: the exit hold cannot wait for it) */
}

void kiln__opencl_stream_end(kiln__opencl_device *d, int stream_id) {
    kiln__opencl_stream_queue ended = {0};
    pthread_mutex_lock(&d->queue_lock);
    for (int i = 0; i < d->n_queues && !ended.queue; i++)
        if (d->queues[i].stream_id == stream_id) {
            ended = d->queues[i];
            d->queues[i] = d->queues[--d->n_queues];
        }
    pthread_mutex_unlock(&d->queue_lock);
    if (ended.queue) { /* its commands still run: the driver keeps the queue until they are done */
        cl_event mark = NULL;
        if (clEnqueueMarkerWithWaitList(ended.queue, 0, NULL, &mark) != CL_SUCCESS) mark = NULL;
        clFlush(ended.queue);
        queue_free(&ended);
        if (mark) ended_mark_keep(d, mark);
    }
}

/* d's stream queues and its transfer queue, each retained (NULL when out of memory; *n: count). */
static cl_command_queue *queues_retained(kiln__opencl_device *d, int *n) {
    pthread_mutex_lock(&d->queue_lock);
    int k = d->n_queues;
    cl_command_queue *qs = malloc((size_t)(k + 1) * sizeof *qs);
    if (qs) {
        for (int i = 0; i < k; i++) clRetainCommandQueue(qs[i] = d->queues[i].queue);
        clRetainCommandQueue(qs[k] = d->transfer);
    }
    pthread_mutex_unlock(&d->queue_lock);
    *n = k + 1;
    return qs;
}

static void queues_release(cl_command_queue *qs, int n) {
    for (int i = 0; i < n; i++) clReleaseCommandQueue(qs[i]);
    free(qs);
}

kiln_status kiln__opencl_streams_finish(kiln__opencl_device *d) {
    int n = 0;
    cl_command_queue *qs = queues_retained(d, &n);
    kiln_status st = KILN_OK;
    if (!qs) { /* no memory for the list: a marker per queue waited for under the lock instead */
        pthread_mutex_lock(&d->queue_lock);
        for (int i = 0; i < d->n_queues; i++)
            if (clFinish(d->queues[i].queue) != CL_SUCCESS) st = KILN_ERR_DEVICE;
        pthread_mutex_unlock(&d->queue_lock);
        return clFinish(d->transfer) == CL_SUCCESS ? st : KILN_ERR_DEVICE;
    }
    for (int i = 0; i < n; i++)
        if (clFinish(qs[i]) != CL_SUCCESS) st = KILN_ERR_DEVICE;
    queues_release(qs, n);
    return st;
}

/* A marker on each queue, then its status polled until every one is done or the deadline has
 * passed (clFinish has no time limit, and a device that hangs must not hang the exit). */
void kiln__opencl_streams_quiesce(kiln__opencl_device *d, uint64_t deadline_ns) {
    int n = 0;
    cl_command_queue *qs = queues_retained(d, &n);
    pthread_mutex_lock(&d->queue_lock);
    int n_ended = d->n_ended_marks;
    cl_event *marks = qs ? calloc((size_t)(n + n_ended), sizeof *marks) : NULL;
    for (int i = 0; marks && i < n_ended; i++) clRetainEvent(marks[n + i] = d->ended_marks[i]);
    pthread_mutex_unlock(&d->queue_lock);
    if (!marks) {
        if (qs) queues_release(qs, n);
        return;
    }
    for (int i = 0; i < n; i++)
        if (clEnqueueMarkerWithWaitList(qs[i], 0, NULL, &marks[i]) != CL_SUCCESS) marks[i] = NULL;
        else clFlush(qs[i]);
    for (int i = 0; i < n + n_ended; i++) {
        while (marks[i] && !event_done(marks[i]) && kiln__opencl_host_ns() < deadline_ns)
            nanosleep(&(struct timespec){.tv_nsec = 100000}, NULL);
        if (marks[i]) clReleaseEvent(marks[i]);
    }
    free(marks);
    queues_release(qs, n);
}

/* ---- buffers' events ---------------------------------------------------------------------- */

static void dep_set(kiln__opencl_dep *dep, cl_event ev, uint64_t qid) {
    if (ev) clRetainEvent(ev);
    if (dep->ev) clReleaseEvent(dep->ev);
    *dep = (kiln__opencl_dep){.ev = ev, .qid = ev ? qid : 0};
}

static int buf_deps_locked(kiln__opencl_buf *b, bool write, uint64_t qid, cl_event *deps) {
    int n = 0;
    if (b->write.ev && b->write.qid != qid) clRetainEvent(deps[n++] = b->write.ev);
    if (write)
        for (int i = 0; i < b->n_reads; i++)
            if (b->reads[i].qid != qid) clRetainEvent(deps[n++] = b->reads[i].ev);
    return n;
}

int kiln__opencl_buf_deps(kiln__opencl_device *d, kiln__opencl_buf *b, bool write, uint64_t qid, cl_event *deps) {
    pthread_mutex_lock(&d->dep_lock);
    int n = buf_deps_locked(b, write, qid, deps);
    pthread_mutex_unlock(&d->dep_lock);
    return n;
}

static void forget_locked(kiln__opencl_buf *b) {
    dep_set(&b->write, NULL, 0);
    for (int i = 0; i < b->n_reads; i++) dep_set(&b->reads[i], NULL, 0);
    b->n_reads = 0;
}

void kiln__opencl_buf_forget(kiln__opencl_device *d, kiln__opencl_buf *b) {
    pthread_mutex_lock(&d->dep_lock);
    forget_locked(b);
    pthread_mutex_unlock(&d->dep_lock);
}

/* ev (on queue q, id qid) read b: it joins b's reads, replacing the read of its own queue
 * (which the in-order queue orders before it); with every slot taken by other queues, all the
 * reads and ev merge into one marker on q. */
static void add_read_locked(kiln__opencl_buf *b, cl_command_queue q, uint64_t qid, cl_event ev) {
    for (int i = 0; i < b->n_reads; i++)
        if (b->reads[i].qid == qid) {
            dep_set(&b->reads[i], ev, qid);
            return;
        }
    if (b->n_reads < KILN__OPENCL_READERS) {
        b->reads[b->n_reads] = (kiln__opencl_dep){0};
        dep_set(&b->reads[b->n_reads++], ev, qid);
        return;
    }
    cl_event all[KILN__OPENCL_READERS + 1], marker = NULL;
    for (int i = 0; i < b->n_reads; i++) all[i] = b->reads[i].ev;
    all[b->n_reads] = ev;
    if (clEnqueueMarkerWithWaitList(q, (cl_uint)b->n_reads + 1, all, &marker) != CL_SUCCESS) {
        clWaitForEvents((cl_uint)b->n_reads, all); /* (the driver refused: wait, rarely, here) */
        marker = ev, clRetainEvent(ev);
    }
    for (int i = 0; i < b->n_reads; i++) dep_set(&b->reads[i], NULL, 0);
    b->n_reads = 0;
    b->reads[b->n_reads++] = (kiln__opencl_dep){.ev = marker, .qid = qid}; /* (takes the reference) */
}

/* ---- device times for the profiler ------------------------------------------------------ */

uint64_t kiln__opencl_host_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* the profiler's clock */
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* An op's device work: from its first command's start to its last one's end. The device's
 * clock is put on the host's by the offset host time - QUEUED time of first commands: each op
 * gives one (its first command's QUEUED, taken during the enqueue, against the host time just
 * after it), late by as long as the enqueue took; the device keeps the smallest seen, the
 * closest to the true offset, so ops resolved again later line up on one offset. */
typedef struct {
    kiln__opencl_device *d;
    cl_event first, last;
    uint64_t host_ns;
    bool have_times;
    cl_ulong start, end;
} probe_token;

static bool probe_resolve(void *token, uint64_t *start_ns, uint64_t *end_ns) {
    probe_token *p = token;
    if (!p->have_times) {
        cl_ulong queued = 0;
        if (clWaitForEvents(1, &p->last) != CL_SUCCESS ||
            clGetEventProfilingInfo(p->first, CL_PROFILING_COMMAND_QUEUED, sizeof queued, &queued, NULL) != CL_SUCCESS ||
            clGetEventProfilingInfo(p->first, CL_PROFILING_COMMAND_START, sizeof p->start, &p->start, NULL) != CL_SUCCESS ||
            clGetEventProfilingInfo(p->last, CL_PROFILING_COMMAND_END, sizeof p->end, &p->end, NULL) != CL_SUCCESS ||
            p->end < p->start)
            return false;
        p->have_times = true;
        int64_t gap = (int64_t)p->host_ns - (int64_t)queued, best = atomic_load(&p->d->clock_offset);
        while (gap < best && !atomic_compare_exchange_weak(&p->d->clock_offset, &best, gap)) {}
    }
    int64_t offset = atomic_load(&p->d->clock_offset);
    *start_ns = (uint64_t)((int64_t)p->start + offset);
    *end_ns = (uint64_t)((int64_t)p->end + offset);
    return true;
}

static void probe_release(void *token) {
    probe_token *p = token;
    clReleaseEvent(p->first);
    clReleaseEvent(p->last);
    free(p);
}

/* Leaves the op's probe for the engine's profiler (takes first's reference). */
static void probe_leave(kiln__opencl_device *d, cl_event first, cl_event last, uint64_t host_ns) {
    probe_token *p = last ? malloc(sizeof *p) : NULL;
    if (!p) {
        clReleaseEvent(first);
        return;
    }
    clRetainEvent(last);
    *p = (probe_token){.d = d, .first = first, .last = last, .host_ns = host_ns};
    kiln__kernel_probe = (kiln__device_probe){.resolve = probe_resolve, .release = probe_release, .token = p};
}

/* ---- the wrapper ------------------------------------------------------------------------- */

typedef struct {
    kiln__opencl_buf *buf;
    kiln__opencl_device *owner; /* whose dep_lock guards buf's events */
    bool write;
} access;

static void add_access(access *a, int *n, const kiln__storage *s, kiln__opencl_device *d, bool write) {
    if (!s || !s->data || kiln_device_kind(s->device) != KILN_KIND_OPENCL) return;
    kiln__opencl_device *owner = s->device == d->device ? d : kiln__opencl_device_of(s->device);
    if (!owner || owner->context != d->context) return; /* (another context's: never an op's) */
    kiln__opencl_buf *b = s->data;
    for (int i = 0; i < *n; i++)
        if (a[i].buf == b) {
            a[i].write |= write;
            return;
        }
    if (*n < MAX_BUFS) a[(*n)++] = (access){b, owner, write};
}

/* Holds the dep_lock of `want` (NULL: none), giving up the one held before: one lock at a time,
 * so two devices' locks are never nested. */
static void hold_deps(kiln__opencl_device **held, kiln__opencl_device *want) {
    if (*held == want) return;
    if (*held) pthread_mutex_unlock(&(*held)->dep_lock);
    if (want) pthread_mutex_lock(&want->dep_lock);
    *held = want;
}

static kiln__opencl_device *device_of(const kiln__op *op, const kiln__fused *g) {
    if (g) {
        for (int w = 0; w < g->expr.n_outputs; w++)
            if (g->output[w].storage->device != KILN_CPU) return kiln__opencl_device_of(g->output[w].storage->device);
        for (int k = 0; k < g->expr.n_inputs; k++)
            if (g->input[k].storage && g->input[k].storage->device != KILN_CPU) return kiln__opencl_device_of(g->input[k].storage->device);
    }
    for (int i = 0; i < op->n_out; i++)
        if (op->out[i].storage && op->out[i].storage->device != KILN_CPU) return kiln__opencl_device_of(op->out[i].storage->device);
    for (int i = 0; i < op->n_in; i++)
        if (op->in[i].storage && op->in[i].storage->device != KILN_CPU) return kiln__opencl_device_of(op->in[i].storage->device);
    return NULL;
}

/* The buffers of d's context that op reads and writes. */
static int accesses(const kiln__op *op, const kiln__fused *g, kiln__opencl_device *d, access *a) {
    int n = 0;
    if (g) {
        for (int k = 0; k < g->expr.n_inputs; k++) add_access(a, &n, g->input[k].storage, d, false);
        for (int w = 0; w < g->expr.n_outputs; w++) add_access(a, &n, g->output[w].storage, d, true);
    }
    for (int i = 0; i < op->n_in; i++) add_access(a, &n, op->in[i].storage, d, false);
    for (int i = 0; i < op->n_out; i++) add_access(a, &n, op->out[i].storage, d, true);
    return n;
}

/* A read to the host waits on the transfer queue for the tensor it reads, not for the rest of
 * its stream. */
static bool reads_to_host(const kiln__op *op) {
    return op->code == KILN__OP_TO_HOST ||
           (op->code == KILN__OP_COPY && op->out[0].storage && op->out[0].storage->device == KILN_CPU);
}

static kiln_status run_on_stream(const kiln__op *op) {
    const kiln__fused *g = op->code == KILN__OP_FUSED ? (const kiln__fused *)(intptr_t)op->p.i[0] : NULL;
    kiln__opencl_device *d = device_of(op, g);
    if (NEVER(!d)) return KILN_ERR_INTERNAL;
    kiln__kernel_fn inner = d->inner[op->code];
    if (NEVER(!inner)) return KILN_ERR_INTERNAL;
    if (cur.d == d) return inner(op); /* a kernel running another (matmul's bias copy): one op */
    /* (a kernel of one device running another device's would nest two queues' order locks
     * and overwrite `cur`, losing the outer op's events: no kernel does) */
    if (NEVER(cur.d)) return KILN_ERR_INTERNAL;
    bool transfer = reads_to_host(op);
    cl_int err = CL_SUCCESS;
    /* (the transfer queue needs no order: each read on it is waited for before it returns) */
    kiln__opencl_stream_queue sq = {.queue = d->transfer, .qid = d->transfer_qid};
    if (!transfer && !stream_queue(d, op->stream_id, &sq, &err)) return kiln__opencl_fail(err, "clCreateCommandQueue");
    cl_command_queue q = sq.queue;
    uint64_t qid = sq.qid;
    if (sq.order) pthread_mutex_lock(sq.order);
    access a[MAX_BUFS];
    int n_bufs = accesses(op, g, d, a);
    cl_event wait[MAX_WAIT + 1 + KILN__OPENCL_READERS];
    int n_wait = 0;
    kiln_status st = KILN_OK;
    kiln__opencl_device *held = NULL;
    for (int i = 0; i < n_bufs && st == KILN_OK; i++) {
        hold_deps(&held, a[i].owner);
        n_wait += buf_deps_locked(a[i].buf, a[i].write, qid, wait + n_wait);
        if (n_wait >= MAX_WAIT && !transfer) { /* many: one barrier now, more after it */
            err = clEnqueueBarrierWithWaitList(q, (cl_uint)n_wait, wait, NULL);
            for (int k = 0; k < n_wait; k++) clReleaseEvent(wait[k]);
            n_wait = 0;
            if (err != CL_SUCCESS) st = kiln__opencl_fail(err, "clEnqueueBarrierWithWaitList");
        }
    }
    hold_deps(&held, NULL);
    if (st == KILN_OK && n_wait && !transfer) {
        err = clEnqueueBarrierWithWaitList(q, (cl_uint)n_wait, wait, NULL);
        for (int k = 0; k < n_wait; k++) clReleaseEvent(wait[k]);
        n_wait = 0;
        if (err != CL_SUCCESS) st = kiln__opencl_fail(err, "clEnqueueBarrierWithWaitList");
    }
    if (st == KILN_OK) {
        cur.d = d, cur.queue = q, cur.qid = qid, cur.first = cur.last = NULL, cur.wait = wait, cur.n_wait = n_wait;
        st = inner(op);
        cl_event ev = cur.last;
        if (cur.first) probe_leave(d, cur.first, ev, cur.first_host_ns);
        cur.d = NULL, cur.first = cur.last = NULL, cur.wait = NULL, cur.n_wait = 0;
        if (ev) { /* the op's last command stands for all of it (its queue is in order) */
            for (int i = 0; i < n_bufs; i++) {
                hold_deps(&held, a[i].owner);
                if (a[i].write) {
                    forget_locked(a[i].buf);
                    dep_set(&a[i].buf->write, ev, qid);
                } else {
                    add_read_locked(a[i].buf, q, qid, ev);
                }
            }
            hold_deps(&held, NULL);
            clReleaseEvent(ev);
        }
    }
    if (sq.order) pthread_mutex_unlock(sq.order);
    for (int k = 0; k < n_wait; k++) clReleaseEvent(wait[k]);
    return st;
}

kiln_status kiln__opencl_scratch_begin(kiln__opencl_device *d, kiln__opencl_buf *b, cl_command_queue q) {
    cl_event deps[1 + KILN__OPENCL_READERS];
    int n = kiln__opencl_buf_deps(d, b, true, cur.d == d ? cur.qid : 0, deps);
    if (!n) return KILN_OK;
    cl_int err = clEnqueueBarrierWithWaitList(q, (cl_uint)n, deps, NULL);
    for (int k = 0; k < n; k++) clReleaseEvent(deps[k]);
    return err == CL_SUCCESS ? KILN_OK : kiln__opencl_fail(err, "clEnqueueBarrierWithWaitList (scratch buffer)");
}

void kiln__opencl_scratch_end(kiln__opencl_device *d, kiln__opencl_buf *b) {
    if (cur.d != d || !cur.last) return;
    pthread_mutex_lock(&d->dep_lock);
    forget_locked(b);
    dep_set(&b->write, cur.last, cur.qid);
    pthread_mutex_unlock(&d->dep_lock);
}

cl_command_queue kiln__opencl_queue(kiln__opencl_device *d, const kiln__op *op) {
    if (cur.d == d) return cur.queue;
    kiln__opencl_stream_queue sq = {0}; /* (a kernel run outside the wrapper: tests) */
    cl_int err = CL_SUCCESS;
    return stream_queue(d, op->stream_id, &sq, &err) ? sq.queue : NULL;
}

void kiln__opencl_streams_wrap(kiln__opencl_device *d) {
    for (int code = 0; code < KILN__OP_COUNT; code++) {
        d->inner[code] = d->backend.kernels[code];
        if (d->inner[code]) d->backend.kernels[code] = run_on_stream;
    }
}

#endif
