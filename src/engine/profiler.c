/* The profiler: per-op timestamps (queued, started, finished, on which thread), a summary
 * table and a Chrome trace-event file. Costs one relaxed load per op when off. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine-async.h"
#include "engine/profiler.h"
#include "kiln/engine.h"

static struct {
    pthread_mutex_t lock;
    atomic_bool on;
    uint64_t t0;
    kiln_profile_event *events;
    kiln__device_probe *probes; /* beside events: device work not yet resolved */
    size_t n, cap, n_probes;
    pthread_once_t env_once;
} prof = {.lock = PTHREAD_MUTEX_INITIALIZER, .env_once = PTHREAD_ONCE_INIT};

static _Thread_local int worker_id = -1;

/* Trace track ids: a stream's dispatches at its id, engine workers from 1000, the device
 * queues of streams from 2000. */
#define DEVICE_TRACK 2000

typedef struct name_node {
    struct name_node *next;
    char s[];
} name_node;
static name_node *names; /* guarded by prof.lock */

const char *kiln__profiler_intern(const char *name) {
    pthread_mutex_lock(&prof.lock);
    name_node *n = names;
    while (n && strcmp(n->s, name) != 0) n = n->next;
    if (!n && (n = malloc(sizeof *n + strlen(name) + 1))) {
        strcpy(n->s, name);
        n->next = names;
        names = n;
    }
    pthread_mutex_unlock(&prof.lock);
    return n ? n->s : "fused";
}

uint64_t kiln__now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void kiln__profiler_set_worker(int id) { worker_id = id; }

static const char *env_path;

static void write_at_exit(void) {
    kiln_profiler_stop();
    if (kiln_profiler_write_trace(env_path) == KILN_OK) fprintf(stderr, "kiln: profile trace written to %s\n", env_path);
    kiln_profiler_write_summary(NULL);
}

static void env_start(void) {
    env_path = getenv("KILN_PROFILE");
    if (!env_path || !*env_path) return;
    kiln_profiler_start();
    atexit(write_at_exit);
}

bool kiln__profiler_on(void) {
    pthread_once(&prof.env_once, env_start);
    return atomic_load_explicit(&prof.on, memory_order_relaxed);
}

void kiln__profiler_record(const kiln__op *op, uint64_t start, uint64_t end, const kiln__device_probe *probe) {
    bool kept = false;
    pthread_mutex_lock(&prof.lock);
    if (atomic_load(&prof.on)) {
        if (prof.n == prof.cap) {
            size_t cap = prof.cap ? prof.cap * 2 : 4096;
            kiln_profile_event *grown = realloc(prof.events, cap * sizeof *grown);
            if (grown) prof.events = grown;
            kiln__device_probe *pgrown = grown ? realloc(prof.probes, cap * sizeof *pgrown) : NULL;
            if (pgrown) prof.probes = pgrown, prof.cap = cap;
        }
        if (prof.n < prof.cap) {
            double t0 = (double)prof.t0;
            prof.probes[prof.n] = probe && probe->token ? *probe : (kiln__device_probe){0};
            kept = probe && probe->token;
            prof.n_probes += kept;
            prof.events[prof.n++] = (kiln_profile_event){
                .op = op->name,
                .kernel = kiln__opcode_name(op->code),
                .stream = op->stream_id,
                .worker = worker_id,
                .seq = op->seq,
                .dispatch_us = ((double)op->t_dispatch_ns - t0) / 1e3,
                .start_us = ((double)start - t0) / 1e3,
                .end_us = ((double)end - t0) / 1e3,
            };
        }
    }
    pthread_mutex_unlock(&prof.lock);
    if (!kept && probe && probe->token) probe->release(probe->token);
}

/* The device times of the events whose probes are pending (prof.lock held): each waits for its
 * device work, which a read of the events may do (they are a sync point); twice, so all are
 * put on the host's clock by the best match any of them gave. */
static void resolve_probes_locked(void) {
    uint64_t ignored;
    for (size_t i = 0; prof.n_probes && i < prof.n; i++) /* first each one's clock match */
        if (prof.probes[i].token) prof.probes[i].resolve(prof.probes[i].token, &ignored, &ignored);
    for (size_t i = 0; prof.n_probes && i < prof.n; i++) {
        kiln__device_probe *p = &prof.probes[i];
        if (!p->token) continue;
        uint64_t start = 0, end = 0;
        if (p->resolve(p->token, &start, &end) && end >= start) {
            double t0 = (double)prof.t0;
            prof.events[i].start_us = ((double)start - t0) / 1e3;
            prof.events[i].end_us = ((double)end - t0) / 1e3;
            prof.events[i].on_device = true;
        }
        p->release(p->token);
        p->token = NULL;
        prof.n_probes--;
    }
}

void kiln_profiler_start(void) {
    pthread_mutex_lock(&prof.lock);
    for (size_t i = 0; prof.n_probes && i < prof.n; i++)
        if (prof.probes[i].token) prof.probes[i].release(prof.probes[i].token), prof.probes[i].token = NULL, prof.n_probes--;
    prof.n = 0;
    prof.t0 = kiln__now_ns();
    atomic_store(&prof.on, true);
    pthread_mutex_unlock(&prof.lock);
}

/* The engine's drain, registered when it starts (before that nothing is queued): the profiler
 * lies below the queue, so it reaches it through this hook, never by name. */
static _Atomic(void (*)(void)) drain_hook;

void kiln__profiler_set_drain_hook(void (*drain)(void)) { atomic_store(&drain_hook, drain); }

void kiln_profiler_stop(void) {
    void (*drain)(void) = atomic_load(&drain_hook);
    if (drain) drain();
    atomic_store(&prof.on, false);
}

size_t kiln_profiler_events(kiln_profile_event *out, size_t cap) {
    pthread_mutex_lock(&prof.lock);
    resolve_probes_locked();
    size_t n = prof.n;
    if (out) memcpy(out, prof.events, (n < cap ? n : cap) * sizeof *out);
    pthread_mutex_unlock(&prof.lock);
    return n;
}

static FILE *open_out(const char *path, const char *op) {
    FILE *f = path ? fopen(path, "w") : stderr;
    if (!f) kiln__report(KILN_ERR_IO, op, "cannot open %s for writing", path);
    return f;
}

static kiln_status close_out(FILE *f, const char *path, const char *op) {
    bool bad = ferror(f) != 0;
    if (path && fclose(f) != 0) bad = true;
    return bad ? kiln__report(KILN_ERR_IO, op, "cannot write %s", path ? path : "stderr") : KILN_OK;
}

kiln_status kiln_profiler_write_trace(const char *path) {
    if (!path) return kiln__report(KILN_ERR_NULL, "kiln_profiler_write_trace", "path is NULL");
    FILE *f = open_out(path, "kiln_profiler_write_trace");
    if (!f) return KILN_ERR_IO;
    pthread_mutex_lock(&prof.lock);
    resolve_probes_locked();
    fprintf(f, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
    bool first = true;
    for (size_t i = 0; i < prof.n; i++) {
        const kiln_profile_event *e = &prof.events[i];
        /* dispatch as an instant on the stream's track; execution on the thread that ran it */
        fprintf(f, "%s{\"name\":\"%s\",\"ph\":\"i\",\"s\":\"t\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,\"args\":{\"seq\":%llu}}",
                first ? "" : ",\n", e->op, e->stream, e->dispatch_us, (unsigned long long)e->seq);
        first = false;
        /* a device op's times are the device's, on its stream's device queue track */
        int tid = e->on_device ? DEVICE_TRACK + e->stream : e->worker >= 0 ? 1000 + e->worker : e->stream;
        fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                   "\"args\":{\"stream\":%d,\"seq\":%llu,\"queued_us\":%.3f,\"device\":%s}}",
                e->op, e->kernel, tid, e->start_us, e->end_us - e->start_us, e->stream, (unsigned long long)e->seq,
                e->start_us - e->dispatch_us, e->on_device ? "true" : "false");
    }
    /* name the tracks */
    int seen_streams[64] = {0}, seen_workers[64] = {0}, seen_queues[64] = {0};
    for (size_t i = 0; i < prof.n; i++) {
        const kiln_profile_event *e = &prof.events[i];
        if (e->on_device && e->stream >= 0 && e->stream < 64 && !seen_queues[e->stream]++)
            fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{\"name\":\"stream %d (device queue)\"}}",
                    DEVICE_TRACK + e->stream, e->stream);
        if (e->stream >= 0 && e->stream < 64 && !seen_streams[e->stream]++)
            fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{\"name\":\"stream %d (dispatch)\"}}",
                    e->stream, e->stream);
        if (e->worker >= 0 && e->worker < 64 && !seen_workers[e->worker]++)
            fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{\"name\":\"%s %d\"}}",
                    1000 + e->worker, e->worker == 63 ? "communication" : "engine worker", e->worker);
    }
    fprintf(f, "\n]}\n");
    pthread_mutex_unlock(&prof.lock);
    return close_out(f, path, "kiln_profiler_write_trace");
}

typedef struct {
    const char *op;
    long calls;
    double total_us;
} op_total;

static int by_total_desc(const void *a, const void *b) {
    double x = ((const op_total *)a)->total_us, y = ((const op_total *)b)->total_us;
    return (x < y) - (x > y);
}

kiln_status kiln_profiler_write_summary(const char *path) {
    FILE *f = open_out(path, "kiln_profiler_write_summary");
    if (!f) return KILN_ERR_IO;
    pthread_mutex_lock(&prof.lock);
    resolve_probes_locked();
    op_total *totals = calloc(prof.n ? prof.n : 1, sizeof *totals);
    size_t n_ops = 0;
    double all = 0;
    for (size_t i = 0; totals && i < prof.n; i++) {
        const kiln_profile_event *e = &prof.events[i];
        size_t k = 0;
        while (k < n_ops && strcmp(totals[k].op, e->op) != 0) k++;
        if (k == n_ops) totals[n_ops++] = (op_total){e->op, 0, 0};
        totals[k].calls++;
        totals[k].total_us += e->end_us - e->start_us;
        all += e->end_us - e->start_us;
    }
    pthread_mutex_unlock(&prof.lock);
    if (totals) {
        qsort(totals, n_ops, sizeof *totals, by_total_desc);
        fprintf(f, "%-32s %10s %14s %12s %7s\n", "op", "calls", "total ms", "mean us", "share");
        for (size_t k = 0; k < n_ops; k++)
            fprintf(f, "%-32s %10ld %14.3f %12.2f %6.1f%%\n", totals[k].op, totals[k].calls, totals[k].total_us / 1e3,
                    totals[k].total_us / (double)totals[k].calls, all > 0 ? 100.0 * totals[k].total_us / all : 0.0);
        free(totals);
    }
    return close_out(f, path, "kiln_profiler_write_summary");
}
