/* Running op records: making one (kiln__op_init), the kernel gate that fork() and exit() close,
 * and kiln__execute, which runs an op's or a fused group's kernel and turns a failure into
 * poisoned outputs and an error. The bottom of the engine above the profiler: the front
 * (engine.c) runs records here in KILN_SYNC=1 mode, the workers (queue_workers.c) in the
 * default one, and every layer of the engine makes records (the front's reads, the queue's
 * frees, batched reads), so kiln__op_init lives here, below them all. */
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

void kiln__op_init(kiln__op *op, kiln__opcode code, const char *name) {
    kiln__site site = kiln__call_site();
    op->code = code;
    op->n_in = 0;
    op->n_out = 0;
    op->flags = 0;
    op->name = name;
    op->file = site.file;
    op->line = site.line;
    op->seq = 0;
    op->stream_id = -1; /* (set when queued: kiln__submit's stamp, or the stream it is queued on) */
    op->t_dispatch_ns = 0;
    memset(&op->p, 0, sizeof op->p);
    memset(op->pi, 0, sizeof op->pi);
}

static void poison_outputs(const kiln__op *op, kiln__error *e) {
    if (op->flags & KILN__OP_FLAG_KEEP_OUTPUTS_ON_ERROR) return;
    for (int i = 0; i < op->n_out; i++) {
        kiln__storage *s = op->out[i].storage;
        kiln__error *expect = NULL;
        if (s && atomic_compare_exchange_strong(&s->err, &expect, e)) kiln__error_ref(e);
    }
}

static _Atomic(const char *) fail_next_named;

void kiln__debug_fail_next_kernel(const char *op_name) { atomic_store(&fail_next_named, op_name); }

static bool injected_failure(const kiln__op *op) {
    const char *name = atomic_load_explicit(&fail_next_named, memory_order_relaxed);
    if (KILN__LIKELY(!name) || strcmp(name, op->name) != 0) return false;
    return atomic_compare_exchange_strong(&fail_next_named, &name, NULL);
}

/* The kernel gate. Each hold keeps new kernels from starting: a fork being prepared, a thread
 * on its way out (exit_guard.c: released if it was only the thread ending), exit() (never
 * released). The thread that closed it at its exit still runs kernels itself: whatever its
 * exit handlers ask of kiln is theirs to ask. */
static atomic_int kernel_holds;
static atomic_int kernels_running;
static _Thread_local bool thread_holds_for_exit;

/* Waits for the running kernels, polling every 50 us, at most max_polls times (-1: until they
 * are done). */
static void wait_kernels(long max_polls) {
    for (long i = 0; (max_polls < 0 || i < max_polls) && atomic_load(&kernels_running) > 0; i++) usleep(50);
}

void kiln__kernels_hold(void) {
    atomic_fetch_add(&kernel_holds, 1);
    wait_kernels(-1);
}

void kiln__kernels_release(bool in_child) {
    if (in_child) atomic_store(&kernels_running, 0);
    atomic_fetch_sub(&kernel_holds, 1);
}

/* About 5 s at most: a kernel stuck for longer (a device that hangs) does not hang the exit. */
#define EXIT_WAIT_POLLS 100000

void kiln__kernels_hold_for_exit(void) {
    if (thread_holds_for_exit) return;
    thread_holds_for_exit = true;
    atomic_fetch_add(&kernel_holds, 1);
    wait_kernels(EXIT_WAIT_POLLS);
}

void kiln__kernels_release_thread_exit(void) {
    if (!thread_holds_for_exit) return;
    thread_holds_for_exit = false;
    atomic_fetch_sub(&kernel_holds, 1);
}

bool kiln__kernels_held_by_this_thread(void) { return thread_holds_for_exit; }

/* (registered more than once, see kiln__backend_exit_hold_register: all run on the exiting
 * thread, the first holds). Kernels held, what they already queued on a device still runs on
 * its driver's threads (PoCL compiles a kernel there, in LLVM, when it first launches): the
 * backends quiesce, within the same few seconds, before any library's destructors run. */
void kiln__kernels_stop_at_exit(void) {
    static atomic_bool quiesced;
    kiln__kernels_hold_for_exit();
    if (!atomic_exchange(&quiesced, true)) kiln__backends_quiesce(kiln__now_ns() + (uint64_t)EXIT_WAIT_POLLS * 50000);
}

static void kernel_enter(void) {
    for (;;) {
        while (atomic_load(&kernel_holds) > 0 && !thread_holds_for_exit) usleep(50);
        atomic_fetch_add(&kernels_running, 1);
        if (atomic_load(&kernel_holds) == 0 || thread_holds_for_exit) return;
        atomic_fetch_sub(&kernels_running, 1); /* a hold started meanwhile: it goes first */
    }
}

static kiln__error *execute_op(const kiln__op *op);

/* "fused[kiln_exp@a.c:3 kiln_add@a.c:4]": the profiler's name of a group. */
static const char *fused_name(const kiln__fused *g) {
    char buf[1024];
    size_t len = (size_t)snprintf(buf, sizeof buf, "fused[");
    for (int k = 0; k < g->n_ops && len < sizeof buf; k++) {
        const kiln__op *o = &g->ops[k];
        const char *base = o->file ? strrchr(o->file, '/') : NULL;
        base = base ? base + 1 : o->file ? o->file : "?";
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s@%s:%d", k ? " " : "", o->name, base, o->line);
    }
    if (len < sizeof buf - 1) buf[len++] = ']', buf[len] = '\0';
    return kiln__profiler_intern(buf);
}

/* Whether an input of one of g's ops is poisoned. A storage the group reads before it writes
 * it is one of its loads, and one it writes first is fresh or the in-place input of the op
 * writing it (so read first): the loads and the leading product's operands are all there is
 * to check. The op records are left alone, so their cache lines stay with the thread that
 * queues the next group (reading them here made writing the next group's records wait). */
static bool reads_poison(const kiln__fused *g) {
    for (int k = 0; k < g->expr.n_inputs; k++)
        if (g->input[k].storage && atomic_load(&g->input[k].storage->err)) return true;
    for (int i = 0; g->matmul && i < g->ops[0].n_in; i++)
        if (g->ops[0].in[i].storage && atomic_load(&g->ops[0].in[i].storage->err)) return true;
    return false;
}

/* A fused group runs as one kernel unless one of its ops must be seen on its own: a poisoned
 * input, an injected failure, or a kernel that refuses the group (it checks before writing).
 * Then its ops run one by one, so poisoning and errors name the op and line that failed. */
static kiln__error *execute_fused(const kiln__op *op) {
    const kiln__fused *g = (const kiln__fused *)(intptr_t)op->p.i[0];
    kiln__op named;
    if (kiln__profiler_on()) {
        named = *op;
        named.name = fused_name(g);
        op = &named;
    }
    bool one_by_one = atomic_load_explicit(&fail_next_named, memory_order_relaxed) != NULL || reads_poison(g);
    if (!one_by_one) {
        kiln__error *e = execute_op(op);
        if (!e) return NULL;
        kiln__error_unref(e);
    }
    kiln__error *first = NULL;
    for (int k = 0; k < g->n_ops; k++) {
        kiln__error *e = execute_op(&g->ops[k]);
        if (e && !first) first = e;
        else kiln__error_unref(e);
    }
    return first;
}

static _Atomic(kiln__comm_kernel_fn) comm_kernel;

void kiln__engine_set_comm_kernel(kiln__comm_kernel_fn fn) { atomic_store(&comm_kernel, fn); }

kiln__error *kiln__execute(const kiln__op *op) {
    /* a collective may block on its peers for long: it stays outside the fork gate */
    if (KILN__UNLIKELY(kiln__opcode_is_comm(op->code))) return execute_op(op);
    kernel_enter();
    kiln__error *e = op->code == KILN__OP_FUSED ? execute_fused(op) : execute_op(op);
    atomic_fetch_sub(&kernels_running, 1);
    return e;
}

/* The device whose kernel runs op: its first storage on a device other than the CPU (a copy
 * between the host and a device runs on the device), else the CPU. */
static kiln_device op_device(const kiln__op *op) {
    if (op->code == KILN__OP_FUSED) { /* a group's ops share one device (fusion_join.c) */
        const kiln__fused *g = (const kiln__fused *)(intptr_t)op->p.i[0];
        return g->n_ops ? g->ops[0].out[0].storage->device : KILN_CPU;
    }
    for (int i = 0; i < op->n_out; i++)
        if (op->out[i].storage && op->out[i].storage->device != KILN_CPU) return op->out[i].storage->device;
    for (int i = 0; i < op->n_in; i++)
        if (op->in[i].storage && op->in[i].storage->device != KILN_CPU) return op->in[i].storage->device;
    return KILN_CPU;
}

/* An intermediate that fusion gave back the memory of (fusion.c) gets it again when its
 * group runs op by op after all (execute_fused). */
static bool outputs_have_memory(const kiln__op *op) {
    for (int i = 0; i < op->n_out; i++)
        if (KILN__UNLIKELY(!op->out[i].storage->data) && !kiln__storage_ensure_data(op->out[i].storage)) return false;
    return true;
}

static kiln__error *execute_op(const kiln__op *op) {
    bool comm = kiln__opcode_is_comm(op->code);
    kiln__error *poisoned_in = NULL;
    for (int i = 0; i < op->n_in; i++) {
        kiln__storage *s = op->in[i].storage;
        kiln__error *e = s ? atomic_load(&s->err) : NULL;
        if (e && comm) { /* a collective still runs (its peers wait for it), then passes e on */
            if (!poisoned_in) poisoned_in = e;
        } else if (e) { /* skip the work, still complete: the outputs carry the error */
            if (op->flags & KILN__OP_FLAG_KEEP_OUTPUTS_ON_ERROR) return kiln__error_ref(e); /* a skipped update is reported */
            poison_outputs(op, e);
            return NULL;
        }
    }
    kiln_device dev = op_device(op);
    const kiln__backend *be = kiln__backend_get(dev);
    kiln__kernel_fn fn = comm ? atomic_load(&comm_kernel) : be ? be->kernels[op->code] : NULL;
    kiln_status st;
    uint64_t t_start = kiln__profiler_on() ? kiln__now_ns() : 0;
    if (KILN__UNLIKELY(injected_failure(op))) {
        kiln__kernel_error("injected failure");
        st = KILN_ERR_KERNEL;
    } else if (!fn) {
        kiln__kernel_error("no %s kernel for %s on %s", kiln__opcode_name(op->code), op->name,
                           kiln_device_name(dev));
        st = KILN_ERR_UNSUPPORTED;
    } else if (!outputs_have_memory(op)) {
        kiln__kernel_error("out of memory for the output");
        st = KILN_ERR_OUT_OF_MEMORY;
    } else {
        kiln__kernel_timing = t_start != 0, kiln__kernel_probe.token = NULL;
        st = fn(op);
        kiln__kernel_timing = false;
    }
    if (t_start) { /* a device kernel's probe gives its device times when the events are read */
        kiln__profiler_record(op, t_start, kiln__now_ns(), &kiln__kernel_probe);
        kiln__kernel_probe.token = NULL;
    }
    if (poisoned_in) { /* the collective took part; its outputs carry the input's error */
        kiln__kernel_error("%s", "");
        poison_outputs(op, poisoned_in);
        return NULL;
    }
    if (st == KILN_OK) return NULL;
    const char *detail = kiln__kernel_error_detail();
    kiln__error *e = kiln__error_new(st, op->name, op->file, op->line, op->seq, "%s",
                                     detail[0] ? detail : kiln_status_str(st));
    kiln__kernel_error("%s", "");
    poison_outputs(op, e);
    return e;
}
