/* The summary writer: adds queue events without waiting; one writer thread per writer takes
 * everything queued, reads the pending tensors of the batch in one transaction (a step's loss,
 * accuracy and histograms: one wait), encodes the events and appends them to the event file.
 * All kiln ops (casts, the histogram's reductions) are queued by the adding thread, on its own
 * stream and the tensor's device; the writer thread only reads. An event that cannot be
 * written is dropped and its error kept for the writer's next call (training goes on). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* pthread_setname_np */
#endif
#include <errno.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kiln/autodiff.h"
#include "kiln/dist.h"
#include "kiln/engine.h"
#include "kiln/summary.h"
#include "kiln/tensor.h"
#include "ops/ops-impl.h"
#include "train/summary-impl.h"

/* The longest an event waits for the writer thread to take it (see writer_main). */
#define BATCH_SECS 0.5

typedef enum { SCALAR, SCALAR_TENSOR, HISTOGRAM, TEXT } item_kind;

typedef struct item {
    struct item *next;
    item_kind kind;
    int64_t step, numel;
    double wall_time, value;
    kiln_tensor t;  /* SCALAR_TENSOR: one element (f32, f64, i32, i64 or bool); HISTOGRAM: kiln__histogram_compute's */
    double *read;   /* where the writer thread reads t: read_inline for a scalar, else malloc'd */
    double read_inline;
    kiln_dtype dtype; /* SCALAR_TENSOR: t's */
    char *text;
    const char *op, *file; /* the add that queued it, for an error found later */
    int line;
    char tag[];
} item;

struct kiln_summary_writer {
    pthread_mutex_t mu;
    pthread_cond_t wake, written;
    item *head, *tail;
    int queued;                    /* items in the list */
    uint64_t added, done;          /* items ever queued / taken by the thread and finished */
    uint64_t flush_asked, flush_done; /* flush requests made / served (file flushed) */
    bool stop, thread_started, inactive;
    kiln_summary_writer_options o;
    FILE *f;
    char path[4096];
    /* the first error the thread met and nobody has returned yet */
    kiln_status error;
    char error_message[512];
    /* where it was closed (file NULL while open) */
    const char *closed_file;
    int closed_line;
    pthread_t thread;
};

kiln_summary_writer_options kiln_summary_writer_defaults(void) {
    return (kiln_summary_writer_options){.flush_secs = 120, .max_queue = 10000, .filename_suffix = NULL};
}

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- the writer thread -------------------------------------------------------------------- */
static void keep_error(kiln_summary_writer *w, kiln_status st, const item *it, const char *detail) {
    pthread_mutex_lock(&w->mu);
    if (w->error == KILN_OK) {
        w->error = st;
        snprintf(w->error_message, sizeof w->error_message, "%s at %s:%d ('%s', step %lld): %s", it->op,
                 it->file ? it->file : "?", it->line, it->tag, (long long)it->step, detail);
    }
    pthread_mutex_unlock(&w->mu);
}

static size_t read_bytes(const item *it) {
    const double *e;
    if (it->kind == HISTOGRAM) return (size_t)(kiln__histogram_edges(&e) + 3) * sizeof(double);
    return kiln_dtype_size(it->dtype);
}

/* A scalar read in its own dtype (no cast queued per step on the training thread). */
static double scalar_value(const void *p, kiln_dtype dt) {
    switch (dt) {
    case KILN_F32: { float v; memcpy(&v, p, sizeof v); return v; }
    case KILN_I32: { int32_t v; memcpy(&v, p, sizeof v); return v; }
    case KILN_I64: { int64_t v; memcpy(&v, p, sizeof v); return (double)v; }
    case KILN_BOOL: return *(const uint8_t *)p ? 1.0 : 0.0;
    default: { double v; memcpy(&v, p, sizeof v); return v; }
    }
}

static void drop_read(item *it) {
    if (it->read != &it->read_inline) free(it->read);
    it->read = NULL;
}

/* One transaction for every tensor of the batch; if it fails, each is read alone so that one
 * poisoned tensor loses only its own event. Items whose read failed get read == NULL. */
static void read_tensors(kiln_summary_writer *w, item *batch) {
    kiln_transaction *tx = kiln_transaction_new();
    int n = 0;
    for (item *it = batch; it; it = it->next) {
        if (!it->t.id) continue;
        it->read = read_bytes(it) <= sizeof it->read_inline ? &it->read_inline : malloc(read_bytes(it));
        if (it->read && tx) kiln_transaction_read(tx, kiln_ref(it->t), it->read, read_bytes(it));
        n++;
    }
    kiln_status st = n && tx ? kiln_transaction_execute(tx) : KILN_ERR_OUT_OF_MEMORY;
    kiln_transaction_free(tx);
    for (item *it = batch; it; it = it->next) {
        if (!it->t.id) continue;
        if (st == KILN_OK && it->read) {
            kiln_release(it->t);
        } else if (!it->read) {
            kiln_release(it->t);
            keep_error(w, KILN_ERR_OUT_OF_MEMORY, it, "out of memory");
        } else if (kiln_into_data(it->t, it->read, read_bytes(it)) != KILN_OK) {
            keep_error(w, kiln_last_status(), it, kiln_last_error());
            drop_read(it);
        }
        it->t = KILN_NONE;
    }
}

static void encode(kiln_summary_writer *w, const item *it, kiln__text *b) {
    switch (it->kind) {
    case SCALAR: kiln__event_scalar(b, it->wall_time, it->step, it->tag, (float)it->value); break;
    case SCALAR_TENSOR:
        if (it->read) kiln__event_scalar(b, it->wall_time, it->step, it->tag, (float)scalar_value(it->read, it->dtype));
        break;
    case TEXT: kiln__event_text(b, it->wall_time, it->step, it->tag, it->text); break;
    case HISTOGRAM: {
        if (!it->read) break;
        const double *e;
        size_t cap = (size_t)kiln__histogram_edges(&e) + 1;
        double *limits = malloc(cap * sizeof *limits), *counts = malloc(cap * sizeof *counts);
        kiln__histogram_proto h;
        if (!limits || !counts)
            keep_error(w, KILN_ERR_OUT_OF_MEMORY, it, "out of memory");
        else if (!kiln__histogram_trim(it->read, it->numel, limits, counts, &h))
            keep_error(w, KILN_ERR_INVALID_ARGUMENT, it, "no value is finite and within +-1e20: nothing to count");
        else
            kiln__event_histogram(b, it->wall_time, it->step, it->tag, &h);
        free(limits);
        free(counts);
        break;
    }
    }
}

static void item_free(item *it) {
    kiln_release(it->t);
    drop_read(it);
    free(it->text);
    free(it);
}

/* The records of the batch are framed into out and written in one fwrite every OUT_BYTES (ev
 * and out are the thread's, reused: a step's event allocates nothing). A failed write loses
 * those records; the error names the first of them. */
#define OUT_BYTES (256 * 1024)

static void write_out(kiln_summary_writer *w, kiln__text *out, const item *first) {
    if (out->len && fwrite(out->s, 1, out->len, w->f) != out->len) keep_error(w, KILN_ERR_IO, first, strerror(errno));
    kiln__text_clear(out);
}

static void write_batch(kiln_summary_writer *w, item *batch, kiln__text *ev, kiln__text *out) {
    read_tensors(w, batch);
    const item *first = NULL; /* the first event in out */
    for (item *it = batch; it; it = it->next) {
        kiln__text_clear(ev);
        encode(w, it, ev);
        if (ev->oom) {
            keep_error(w, KILN_ERR_OUT_OF_MEMORY, it, "out of memory");
            continue;
        }
        if (!ev->len) continue;
        size_t before = out->len;
        kiln__record_append(out, ev->s, ev->len);
        if (out->oom) { /* this event is lost, not the whole records before it */
            keep_error(w, KILN_ERR_OUT_OF_MEMORY, it, "out of memory");
            out->len = before;
            out->oom = false;
            continue;
        }
        if (!first) first = it;
        if (out->len >= OUT_BYTES) write_out(w, out, first), first = NULL;
    }
    if (first) write_out(w, out, first);
}

/* How many events from the head the thread takes: all of them, or those BATCH_SECS old. */
static int take_batch(const kiln_summary_writer *w, bool all) {
    if (all) return w->queued;
    double cutoff = wall_now() - BATCH_SECS;
    int n = 0;
    for (const item *it = w->head; it && it->wall_time <= cutoff; it = it->next) n++;
    return n;
}

/* Unlinks the first n events (they stay linked to each other, from the old head). */
static void detach_batch(kiln_summary_writer *w, int n) {
    item *last = w->head;
    for (int i = 1; i < n; i++) last = last->next;
    w->head = last->next;
    last->next = NULL;
    if (!w->head) w->tail = NULL;
    w->queued -= n;
}

static void *writer_main(void *arg) {
    kiln_summary_writer *w = arg;
    double last_flush = wall_now();
    kiln__text ev = {0}, out = {0};
    pthread_mutex_lock(&w->mu);
    for (;;) {
        /* The thread wakes when the oldest event is 2 * BATCH_SECS old and takes those at least
         * BATCH_SECS old: one read of many steps whose tensors were computed long ago. Reading
         * the step being computed would wait on it, and a waiting thread polls for a while (on a
         * small machine, a core's time taken from training). A flush, a close or a half-full
         * queue takes everything. */
        while (!w->stop && w->flush_asked == w->flush_done) {
            double at = last_flush + w->o.flush_secs;
            if (w->head) {
                if (w->queued * 2 >= w->o.max_queue || wall_now() >= w->head->wall_time + 2 * BATCH_SECS) break;
                if (w->head->wall_time + 2 * BATCH_SECS < at) at = w->head->wall_time + 2 * BATCH_SECS;
            }
            struct timespec until;
            until.tv_sec = (time_t)at;
            until.tv_nsec = (long)((at - (double)until.tv_sec) * 1e9);
            if (pthread_cond_timedwait(&w->wake, &w->mu, &until) == ETIMEDOUT && wall_now() >= last_flush + w->o.flush_secs)
                break;
        }
        uint64_t asked = w->flush_asked;
        bool flush = asked != w->flush_done || w->stop;
        int n = take_batch(w, flush || w->queued * 2 >= w->o.max_queue);
        item *batch = n ? w->head : NULL;
        if (n) detach_batch(w, n);
        pthread_cond_broadcast(&w->written); /* room in the queue */
        pthread_mutex_unlock(&w->mu);
        write_batch(w, batch, &ev, &out);
        while (batch) {
            item *next = batch->next;
            item_free(batch);
            batch = next;
        }
        if (flush || wall_now() - last_flush >= w->o.flush_secs) {
            if (fflush(w->f) != 0) {
                item none = {.op = "kiln_summary_writer_flush"};
                keep_error(w, KILN_ERR_IO, &none, strerror(errno));
            }
            last_flush = wall_now();
        }
        pthread_mutex_lock(&w->mu);
        w->done += (uint64_t)n;
        if (flush) w->flush_done = asked;
        pthread_cond_broadcast(&w->written);
        if (w->stop && !w->head) break;
    }
    pthread_mutex_unlock(&w->mu);
    kiln__text_free(&ev);
    kiln__text_free(&out);
    return NULL;
}

/* ---- opening ------------------------------------------------------------------------------ */
static bool make_dirs(const char *dir) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) return errno = ENAMETOOLONG, false;
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST) return false;
        *s = '/';
    }
    return mkdir(p, 0777) == 0 || errno == EEXIST;
}

static kiln_summary_writer *open_file(kiln_summary_writer *w, const char *logdir) {
    const char *op = "kiln_summary_writer_open";
    char host[256] = "localhost", dir[1024];
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    double now = wall_now();
    if (!logdir) { /* torch's default: runs/Nov29_03-12-45_host */
        time_t t = (time_t)now;
        struct tm tm;
        char stamp[64];
        strftime(stamp, sizeof stamp, "%b%d_%H-%M-%S", localtime_r(&t, &tm));
        snprintf(dir, sizeof dir, "runs/%s_%s", stamp, host);
        logdir = dir;
    }
    if (!make_dirs(logdir)) {
        kiln__report(KILN_ERR_IO, op, "cannot create the log directory '%s': %s", logdir, strerror(errno));
        return NULL;
    }
    static atomic_int counter;
    int n = snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%010lld.%s.%d.%d%s", logdir, (long long)now, host,
                     (int)getpid(), atomic_fetch_add(&counter, 1), w->o.filename_suffix ? w->o.filename_suffix : "");
    if (n >= (int)sizeof w->path) {
        kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "the log directory's path is too long");
        return NULL;
    }
    w->f = fopen(w->path, "wbx");
    kiln__text b = {0};
    kiln__event_file_version(&b, now);
    if (!w->f || b.oom || !kiln__record_write(w->f, b.s, b.len) || fflush(w->f) != 0) {
        kiln__report(b.oom ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_IO, op, "cannot write the event file '%s': %s", w->path,
                     b.oom ? "out of memory" : strerror(errno));
        kiln__text_free(&b);
        if (w->f) fclose(w->f), unlink(w->path);
        w->f = NULL;
        return NULL;
    }
    kiln__text_free(&b);
    return w;
}

kiln_summary_writer *kiln_summary_writer_open_ex(const char *logdir, kiln_summary_writer_options o) {
    const char *op = "kiln_summary_writer_open";
    if (logdir && !*logdir) {
        kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "the log directory is an empty string");
        return NULL;
    }
    if (!(o.flush_secs > 0) || o.max_queue < 1) {
        kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "flush_secs must be > 0 and max_queue >= 1 (got %g, %d)", o.flush_secs,
                     o.max_queue);
        return NULL;
    }
    if (o.filename_suffix && strchr(o.filename_suffix, '/')) {
        kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "filename_suffix may not contain '/'");
        return NULL;
    }
    kiln_summary_writer *w = calloc(1, sizeof *w);
    if (w && !kiln__object_register(w, KILN__SUMMARY_WRITER_KIND)) free(w), w = NULL;
    if (!w) {
        kiln__report(KILN_ERR_OUT_OF_MEMORY, op, "cannot allocate the writer");
        return NULL;
    }
    w->o = o;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->wake, NULL);
    pthread_cond_init(&w->written, NULL);
    w->inactive = kiln_dist_rank() != 0; /* under MPI, rank 0 writes */
    if (w->inactive) return w;
    if (!open_file(w, logdir)) {
        kiln_summary_writer_free(w);
        return NULL;
    }
    if (pthread_create(&w->thread, NULL, writer_main, w) != 0) {
        kiln__report(KILN_ERR_OUT_OF_MEMORY, op, "cannot start the writer thread");
        kiln_summary_writer_free(w);
        return NULL;
    }
    pthread_setname_np(w->thread, "kiln-summary"); /* for top -H, perf and the benchmark */
    w->thread_started = true;
    return w;
}

kiln_summary_writer *kiln_summary_writer_open(const char *logdir) {
    return kiln_summary_writer_open_ex(logdir, kiln_summary_writer_defaults());
}

const char *kiln_summary_writer_path(const kiln_summary_writer *w) {
    if (!w) return NULL;
    KILN__OBJECT_OR_RETURN(w, KILN__SUMMARY_WRITER_KIND, "kiln_summary_writer_path", NULL);
    return w->path;
}

/* ---- adding ------------------------------------------------------------------------------- */
/* The error the thread kept for w (returned once), or KILN_OK. */
static kiln_status kept_error(kiln_summary_writer *w, const char *op) {
    kiln_status st = KILN_OK;
    pthread_mutex_lock(&w->mu);
    if (w->error != KILN_OK) {
        st = kiln__report(w->error, op, "an earlier event was not written: %s", w->error_message);
        w->error = KILN_OK;
    }
    pthread_mutex_unlock(&w->mu);
    return st;
}

/* w cannot take events at all: NULL, freed or not a writer (then never read), or closed. */
static bool gone(const kiln_summary_writer *w) {
    return !w || !kiln__object_live(w, KILN__SUMMARY_WRITER_KIND) || w->closed_file;
}

/* KILN_OK when w may take an event; else the error (a NULL, freed or closed writer, or an
 * error the thread kept, which is returned once). */
static kiln_status usable(kiln_summary_writer *w, const char *op) {
    if (!w) return kiln__report(KILN_ERR_NULL, op, "the summary writer is NULL");
    KILN__OBJECT_OR_RETURN(w, KILN__SUMMARY_WRITER_KIND, op, kiln_last_status());
    if (w->closed_file)
        return kiln__report(KILN_ERR_INVALID_ARGUMENT, op, "the summary writer was closed at %s:%d", w->closed_file,
                            w->closed_line);
    return kept_error(w, op);
}

/* Queues it (waiting while max_queue events are pending) and returns st. */
static kiln_status enqueue(kiln_summary_writer *w, item *it, kiln_status st) {
    pthread_mutex_lock(&w->mu);
    while (w->queued >= w->o.max_queue) pthread_cond_wait(&w->written, &w->mu);
    if (w->tail) w->tail->next = it;
    else w->head = it;
    w->tail = it;
    w->queued++;
    w->added++;
    if (w->queued == 1 || w->queued * 2 >= w->o.max_queue) pthread_cond_signal(&w->wake); /* its timer, or a batch */
    pthread_mutex_unlock(&w->mu);
    return st;
}

/* A new item for tag, or NULL with the error reported (tag checked, memory). */
static item *item_new(const char *op, const char *tag, item_kind kind, int64_t step) {
    if (!tag || !*tag) {
        kiln__report(tag ? KILN_ERR_INVALID_ARGUMENT : KILN_ERR_NULL, op, "the tag is %s", tag ? "empty" : "NULL");
        return NULL;
    }
    size_t n = strlen(tag);
    item *it = calloc(1, sizeof *it + n + 1);
    if (!it) {
        kiln__report(KILN_ERR_OUT_OF_MEMORY, op, "cannot allocate an event");
        return NULL;
    }
    memcpy(it->tag, tag, n + 1);
    it->kind = kind;
    it->step = step;
    it->wall_time = wall_now();
    kiln__site site = kiln__call_site();
    it->op = op;
    it->file = site.file;
    it->line = site.line;
    return it;
}

kiln_status kiln_summary_writer_add_scalar(kiln_summary_writer *w, const char *tag, double value, int64_t step) {
    const char *op = "kiln_summary_writer_add_scalar";
    kiln_status st = usable(w, op);
    if (st != KILN_OK && gone(w)) return st;
    if (w->inactive) return st;
    item *it = item_new(op, tag, SCALAR, step);
    if (!it) return kiln_last_status();
    it->value = value;
    return enqueue(w, it, st);
}

kiln_status kiln_summary_writer_add_text(kiln_summary_writer *w, const char *tag, const char *text, int64_t step) {
    const char *op = "kiln_summary_writer_add_text";
    kiln_status st = usable(w, op);
    if (st != KILN_OK && gone(w)) return st;
    if (w->inactive) return st;
    if (!text) return kiln__report(KILN_ERR_NULL, op, "the text is NULL");
    item *it = item_new(op, tag, TEXT, step);
    if (!it) return kiln_last_status();
    it->text = strdup(text);
    if (!it->text) {
        free(it);
        return kiln__report(KILN_ERR_OUT_OF_MEMORY, op, "cannot allocate the text");
    }
    return enqueue(w, it, st);
}

/* The shared part of the two tensor adds: checks, then queues make(t) (consumed). */
static kiln_status add_tensor(kiln_summary_writer *w, const char *op, const char *tag, kiln_tensor t, int64_t step,
                              item_kind kind) {
    kiln_status st = usable(w, op);
    if ((st != KILN_OK && gone(w)) || w->inactive) {
        kiln_release(t);
        return st;
    }
    if (!kiln_is_valid(t))
        return kiln__report(KILN_ERR_STALE_HANDLE, op, "the tensor handle was already consumed or released");
    /* a poisoned tensor is queued as it is: its read reports the op that failed, and where */
    bool poisoned = kiln_tensor_status(t) != KILN_OK;
    int64_t numel = kiln_tensor_numel(t);
    if (!poisoned && kind == SCALAR_TENSOR && numel != 1) {
        kiln_release(t);
        return kiln__report(KILN_ERR_SHAPE, op, "a scalar needs a tensor of one element (got %lld)", (long long)numel);
    }
    if (!poisoned && kind == HISTOGRAM && numel == 0) {
        kiln_release(t);
        return kiln__report(KILN_ERR_SHAPE, op, "a histogram needs at least one value (the tensor is empty)");
    }
    item *it = item_new(op, tag, kind, step);
    if (!it) {
        kiln_release(t);
        return kiln_last_status();
    }
    it->numel = numel;
    const char *outer = kiln__op_scope_enter(op); /* errors of the ops below name this call */
    if (kind == HISTOGRAM) {
        it->t = kiln__histogram_compute(t);
    } else {
        kiln_dtype dt = kiln_tensor_dtype(t);
        kiln_no_grad_begin(); /* detached: the handle kept until the read holds no graph */
        it->t = kiln_detach(t);
        if (dt == KILN_F16 || dt == KILN_BF16) it->t = kiln_cast(it->t, KILN_F32); /* read on the host as f32 */
        kiln_no_grad_end();
        it->dtype = kiln_tensor_dtype(it->t);
    }
    kiln__op_scope_leave(outer);
    return enqueue(w, it, st);
}

kiln_status kiln_summary_writer_add_scalar_tensor(kiln_summary_writer *w, const char *tag, kiln_tensor value, int64_t step) {
    return add_tensor(w, "kiln_summary_writer_add_scalar_tensor", tag, value, step, SCALAR_TENSOR);
}

kiln_status kiln_summary_writer_add_histogram(kiln_summary_writer *w, const char *tag, kiln_tensor values, int64_t step) {
    return add_tensor(w, "kiln_summary_writer_add_histogram", tag, values, step, HISTOGRAM);
}

/* ---- flushing and closing ----------------------------------------------------------------- */
/* Waits until the thread has written (and flushed) everything queued before the call. */
static void wait_written(kiln_summary_writer *w) {
    pthread_mutex_lock(&w->mu);
    uint64_t mine = ++w->flush_asked; /* the thread takes everything queued so far with it */
    pthread_cond_signal(&w->wake);
    while (w->flush_done < mine) pthread_cond_wait(&w->written, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

kiln_status kiln_summary_writer_flush(kiln_summary_writer *w) {
    const char *op = "kiln_summary_writer_flush";
    if (!w) return kiln__report(KILN_ERR_NULL, op, "the summary writer is NULL");
    KILN__OBJECT_OR_RETURN(w, KILN__SUMMARY_WRITER_KIND, op, kiln_last_status());
    if (!w->closed_file && !w->inactive) wait_written(w); /* also when an error is waiting to be returned */
    return usable(w, op);
}

/* Stops the thread once everything queued is written, and closes the file (w is live). */
static kiln_status close_writer(kiln_summary_writer *w, const char *op) {
    if (w->closed_file) return KILN_OK;
    if (w->thread_started) {
        pthread_mutex_lock(&w->mu);
        w->stop = true;
        pthread_cond_signal(&w->wake);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
        w->thread_started = false;
    }
    kiln_status st = kept_error(w, op);
    if (w->f && fclose(w->f) != 0 && st == KILN_OK)
        st = kiln__report(KILN_ERR_IO, op, "cannot close the event file '%s': %s", w->path, strerror(errno));
    w->f = NULL;
    kiln__site site = kiln__call_site();
    w->closed_file = site.file ? site.file : "?";
    w->closed_line = site.line;
    return st;
}

kiln_status kiln_summary_writer_close(kiln_summary_writer *w) {
    const char *op = "kiln_summary_writer_close";
    if (!w) return kiln__report(KILN_ERR_NULL, op, "the summary writer is NULL");
    KILN__OBJECT_OR_RETURN(w, KILN__SUMMARY_WRITER_KIND, op, kiln_last_status());
    return close_writer(w, op);
}

void kiln_summary_writer_free(kiln_summary_writer *w) {
    static const char op[] = "kiln_summary_writer_free";
    if (!w || kiln__object_retire(w, KILN__SUMMARY_WRITER_KIND, op) != KILN_OK) return;
    close_writer(w, op);
    pthread_cond_destroy(&w->wake);
    pthread_cond_destroy(&w->written);
    pthread_mutex_destroy(&w->mu);
    kiln__object_dispose(w, KILN__SUMMARY_WRITER_KIND, op);
}
