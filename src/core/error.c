/* Error records, the thread's last error, and the caller's location. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core-impl.h"

_Thread_local kiln__site kiln__site_now;
static _Thread_local kiln_status last_status;
static _Thread_local char last_message[512];

const char *kiln_status_str(kiln_status status) {
    switch (status) {
#define KILN__STATUS_CASE(name, code, text) \
    case KILN_##name:                        \
        return text;
        KILN_STATUS_MAP(KILN__STATUS_CASE)
#undef KILN__STATUS_CASE
    }
    return "unknown status";
}

void kiln_set_call_site(const char *file, int line) { kiln__site_set(file, line); }

static kiln__error *error_vnew(kiln_status status, const char *op, const char *file, int line,
                               uint64_t seq, const char *fmt, va_list ap) {
    char detail[384];
    vsnprintf(detail, sizeof detail, fmt, ap);
    char head[160];
    if (file)
        snprintf(head, sizeof head, "%s at %s:%d", op ? op : "kiln", file, line);
    else
        snprintf(head, sizeof head, "%s", op ? op : "kiln");
    size_t need = strlen(head) + strlen(detail) + 64;
    kiln__error *e = malloc(sizeof *e + need);
    if (!e) return NULL; /* kiln__error_new then gives the static oom_error() below */
    atomic_init(&e->refs, 1);
    e->status = status;
    e->op = op;
    e->file = file;
    e->line = line;
    e->seq = seq;
    e->order = 2 * seq;
    atomic_init(&e->delivered, false);
    if (seq)
        snprintf(e->message, need, "%s (op #%llu): %s", head, (unsigned long long)seq, detail);
    else
        snprintf(e->message, need, "%s: %s", head, detail);
    return e;
}

/* When even the error record cannot be allocated, fall back to one static record (its
 * reference count is pinned so it is never freed). */
static _Alignas(kiln__error) unsigned char oom_storage[sizeof(kiln__error) + 64];
static pthread_once_t oom_once = PTHREAD_ONCE_INIT;

static void oom_init(void) {
    kiln__error *e = (kiln__error *)oom_storage;
    e->status = KILN_ERR_OUT_OF_MEMORY;
    e->op = "kiln";
    snprintf(e->message, 64, "kiln: out of memory (while reporting an error)");
    atomic_store(&e->refs, 1 << 30);
}

static kiln__error *oom_error(void) {
    pthread_once(&oom_once, oom_init);
    kiln__error *e = (kiln__error *)oom_storage;
    atomic_fetch_add(&e->refs, 1);
    return e;
}

kiln__error *kiln__error_new(kiln_status status, const char *op, const char *file, int line,
                             uint64_t seq, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    kiln__error *e = error_vnew(status, op, file, line, seq, fmt, ap);
    va_end(ap);
    return e ? e : oom_error();
}

kiln__error *kiln__error_ref(kiln__error *e) {
    if (e) atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
    return e;
}

void kiln__error_unref(kiln__error *e) {
    if (e && atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) == 1) free(e);
}

void kiln__error_set_last(const kiln__error *e) {
    last_status = e->status;
    snprintf(last_message, sizeof last_message, "%s", e->message);
}

void kiln__error_mark_delivered(kiln__error *e) {
    if (e != (kiln__error *)oom_storage) atomic_store(&e->delivered, true); /* the shared record stays reportable */
}

kiln_status kiln__error_report(kiln__error *e) {
    kiln__error_mark_delivered(e);
    kiln__error_set_last(e);
    return e->status;
}

kiln_status kiln__report(kiln_status status, const char *op, const char *fmt, ...) {
    char detail[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    last_status = status;
    if (kiln__site_now.file)
        snprintf(last_message, sizeof last_message, "%s at %s:%d: %s", op, kiln__site_now.file,
                 kiln__site_now.line, detail);
    else
        snprintf(last_message, sizeof last_message, "%s: %s", op, detail);
    return status;
}

const char *kiln_last_error(void) { return last_message; }
kiln_status kiln_last_status(void) { return last_status; }
void kiln_clear_error(void) {
    last_status = KILN_OK;
    last_message[0] = '\0';
}
