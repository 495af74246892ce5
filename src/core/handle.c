/* Generational handles. A handle is (generation << 32 | slot+1). Consuming or releasing a
 * handle bumps its slot's generation, so any later use is detected; the slot remembers who
 * consumed it so the error can say so. Free slots are reused first-in first-out, which keeps
 * a stale handle's history readable for as long as possible. A live slot also remembers the
 * public call and file:line that made it, for the leak check (KILN_LEAK_CHECK=1 at exit, or
 * kiln_leak_check()). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core-impl.h"

#define CHUNK_BITS 12
#define CHUNK_SIZE (1u << CHUNK_BITS)
#define MAX_CHUNKS 16384 /* 64M live handles */

typedef struct {
    _Atomic uint32_t gen;              /* odd: live; even: free */
    kiln__tensor *_Atomic tensor;
    _Atomic(const char *) consumed_by; /* op that took it last */
    _Atomic(const char *) consumed_file;
    atomic_int consumed_line;
    _Atomic(const char *) created_by; /* public call that made the handle (may be NULL) */
    _Atomic(const char *) created_file;
    atomic_int created_line;
    uint32_t next_free;                /* index+1 of the next free slot; 0 = none */
} slot;

static slot *_Atomic chunks[MAX_CHUNKS];
static struct {
    pthread_mutex_t lock;
    uint32_t head, tail; /* FIFO of free slots, index+1 */
    uint32_t used;       /* slots ever handed out */
    uint32_t n_free;
} freelist = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0};

/* Freed slots wait in the queue until this many are behind them, so the last few thousand
 * consumed handles can still name the op that consumed them. */
#define REUSE_DELAY 4096

static slot *slot_at(uint32_t index) {
    slot *c = atomic_load_explicit(&chunks[index >> CHUNK_BITS], memory_order_acquire);
    return c ? &c[index & (CHUNK_SIZE - 1)] : NULL;
}

static bool slot_alloc(uint32_t *out) {
    pthread_mutex_lock(&freelist.lock);
    if (freelist.n_free > REUSE_DELAY) {
        freelist.n_free--;
        uint32_t idx = freelist.head - 1;
        slot *s = slot_at(idx);
        freelist.head = s->next_free;
        if (!freelist.head) freelist.tail = 0;
        pthread_mutex_unlock(&freelist.lock);
        *out = idx;
        return true;
    }
    uint32_t idx = freelist.used;
    if ((idx >> CHUNK_BITS) >= MAX_CHUNKS) {
        pthread_mutex_unlock(&freelist.lock);
        return false;
    }
    if (!atomic_load_explicit(&chunks[idx >> CHUNK_BITS], memory_order_relaxed)) {
        slot *c = calloc(CHUNK_SIZE, sizeof(slot));
        if (!c) {
            pthread_mutex_unlock(&freelist.lock);
            return false;
        }
        atomic_store_explicit(&chunks[idx >> CHUNK_BITS], c, memory_order_release);
    }
    freelist.used++;
    pthread_mutex_unlock(&freelist.lock);
    *out = idx;
    return true;
}

static void slot_free(uint32_t idx) {
    slot *s = slot_at(idx);
    pthread_mutex_lock(&freelist.lock);
    s->next_free = 0;
    if (freelist.tail)
        slot_at(freelist.tail - 1)->next_free = idx + 1;
    else
        freelist.head = idx + 1;
    freelist.tail = idx + 1;
    freelist.n_free++;
    pthread_mutex_unlock(&freelist.lock);
}



void kiln__handle_fork_lock(bool lock) {
    if (lock)
        pthread_mutex_lock(&freelist.lock);
    else
        pthread_mutex_unlock(&freelist.lock);
}

static void fork_prepare(void) {
    kiln__alloc_fork_lock(true);
    kiln__handle_fork_lock(true);
}

static void fork_done(void) { /* parent and child alike: the forking thread holds both */
    kiln__handle_fork_lock(false);
    kiln__alloc_fork_lock(false);
}

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void fork_register(void) { pthread_atfork(fork_prepare, fork_done, fork_done); }
void kiln__core_fork_guard(void) { pthread_once(&fork_once, fork_register); }

static pthread_once_t leak_once = PTHREAD_ONCE_INIT;
static void leak_setup(void);

kiln_tensor kiln__handle_new(kiln__tensor *t) {
    pthread_once(&leak_once, leak_setup);
    uint32_t idx;
    if (kiln__alloc_should_fail() || !slot_alloc(&idx)) {
        kiln__report(KILN_ERR_OUT_OF_MEMORY, "kiln", "no tensor handle available");
        kiln__tensor_release(t);
        return (kiln_tensor){KILN__OOM_HANDLE_ID};
    }
    slot *s = slot_at(idx);
    atomic_store_explicit(&s->tensor, t, memory_order_relaxed);
    kiln__site site = kiln__call_site();
    atomic_store_explicit(&s->created_by, site.op, memory_order_relaxed);
    atomic_store_explicit(&s->created_file, site.file, memory_order_relaxed);
    atomic_store_explicit(&s->created_line, site.line, memory_order_relaxed);
    uint32_t gen = atomic_load_explicit(&s->gen, memory_order_relaxed) + 1; /* even -> odd */
    atomic_store_explicit(&s->gen, gen, memory_order_release);
    return (kiln_tensor){((uint64_t)gen << 32) | (idx + 1)};
}

static kiln__error *stale_error(kiln_tensor h, const slot *s, const char *op) {
    kiln__site site = kiln__call_site();
    if (h.id == 0)
        return kiln__error_new(KILN_ERR_NULL, op, site.file, site.line, 0, "tensor argument is KILN_NONE");
    if (h.id == KILN__OOM_HANDLE_ID)
        return kiln__error_new(KILN_ERR_OUT_OF_MEMORY, op, site.file, site.line, 0,
                               "tensor was never created: out of memory for its handle");
    uint32_t gen = (uint32_t)(h.id >> 32);
    if (!s || !(gen & 1))
        return kiln__error_new(KILN_ERR_STALE_HANDLE, op, site.file, site.line, 0,
                               "not a kiln tensor handle (0x%llx)", (unsigned long long)h.id);
    uint32_t now = atomic_load_explicit(&s->gen, memory_order_acquire);
    const char *by = atomic_load_explicit(&s->consumed_by, memory_order_relaxed);
    if (now == gen + 1 && by) {
        const char *file = atomic_load_explicit(&s->consumed_file, memory_order_relaxed);
        int line = atomic_load_explicit(&s->consumed_line, memory_order_relaxed);
        return kiln__error_new(KILN_ERR_STALE_HANDLE, op, site.file, site.line, 0,
                               "tensor handle was already consumed by %s at %s:%d (pass kiln_ref(t) to keep using it)",
                               by, file ? file : "?", line);
    }
    return kiln__error_new(KILN_ERR_STALE_HANDLE, op, site.file, site.line, 0,
                           "tensor handle was consumed or released earlier (its slot has been reused since)");
}

static slot *slot_of(kiln_tensor h) {
    uint32_t low = (uint32_t)h.id;
    if (low == 0 || ((low - 1) >> CHUNK_BITS) >= MAX_CHUNKS) return NULL;
    return slot_at(low - 1);
}

kiln__tensor *kiln__handle_peek(kiln_tensor h, const char *op, kiln__error **err) {
    slot *s = slot_of(h);
    uint32_t gen = (uint32_t)(h.id >> 32);
    if (s && (gen & 1) && atomic_load_explicit(&s->gen, memory_order_acquire) == gen)
        return atomic_load_explicit(&s->tensor, memory_order_relaxed);
    if (err) *err = stale_error(h, s, op);
    return NULL;
}

kiln__tensor *kiln__handle_take(kiln_tensor h, const char *op, kiln__error **err) {
    slot *s = slot_of(h);
    uint32_t gen = (uint32_t)(h.id >> 32);
    if (s && (gen & 1)) {
        kiln__tensor *t = atomic_load_explicit(&s->tensor, memory_order_acquire);
        uint32_t expect = gen;
        /* only one consumer can win the generation bump */
        if (atomic_compare_exchange_strong_explicit(&s->gen, &expect, gen + 1, memory_order_acq_rel,
                                                    memory_order_acquire)) {
            kiln__site site = kiln__call_site();
            atomic_store_explicit(&s->consumed_by, op, memory_order_relaxed);
            atomic_store_explicit(&s->consumed_file, site.file, memory_order_relaxed);
            atomic_store_explicit(&s->consumed_line, site.line, memory_order_relaxed);
            slot_free((uint32_t)h.id - 1);
            return t;
        }
    }
    if (err) *err = stale_error(h, s, op);
    return NULL;
}

/* ---- public handle API ----------------------------------------------------------------- */

kiln_tensor kiln_ref(kiln_tensor h) {
    kiln__error *err = NULL;
    kiln__tensor *t = kiln__handle_peek(h, "kiln_ref", &err);
    if (!t) {
        kiln__error_set_last(err);
        kiln__tensor *p = kiln__tensor_poisoned(err);
        kiln__error_unref(err);
        return p ? kiln__handle_new(p) : (kiln_tensor){KILN__OOM_HANDLE_ID};
    }
    kiln__tensor_retain(t);
    return kiln__handle_new(t);
}

kiln_status kiln_release(kiln_tensor h) {
    if (h.id == 0 || h.id == KILN__OOM_HANDLE_ID) return KILN_OK; /* like free(NULL) */
    kiln__error *err = NULL;
    kiln__tensor *t = kiln__handle_take(h, "kiln_release", &err);
    if (!t) {
        kiln_status st = kiln__error_report(err);
        kiln__error_unref(err);
        return st;
    }
    kiln__tensor_release(t);
    return KILN_OK;
}

bool kiln_is_valid(kiln_tensor h) { return kiln__handle_peek(h, "kiln_is_valid", NULL) != NULL; }

/* ---- leak check --------------------------------------------------------------------------- */

#define LEAK_LINES 32 /* objects listed per kind; the rest are counted */
#define MAX_REPORTERS 4

static kiln__leak_reporter reporters[MAX_REPORTERS];
static atomic_int n_reporters;

void kiln__leak_add_reporter(kiln__leak_reporter fn) {
    int i = atomic_fetch_add(&n_reporters, 1);
    if (ALWAYS(i < MAX_REPORTERS)) reporters[i] = fn;
}

/* Live handles, one line each (up to LEAK_LINES) to f when f is not NULL. */
static int64_t live_handles(FILE *f) {
    pthread_mutex_lock(&freelist.lock);
    uint32_t used = freelist.used;
    pthread_mutex_unlock(&freelist.lock);
    int64_t n = 0;
    for (uint32_t i = 0; i < used; i++) {
        slot *s = slot_at(i);
        if (!s || !(atomic_load_explicit(&s->gen, memory_order_acquire) & 1)) continue;
        if (f && n < LEAK_LINES) {
            const char *by = atomic_load_explicit(&s->created_by, memory_order_relaxed);
            const char *file = atomic_load_explicit(&s->created_file, memory_order_relaxed);
            const kiln__tensor *t = atomic_load_explicit(&s->tensor, memory_order_relaxed);
            fprintf(f, "  tensor %s", t ? kiln_dtype_name(t->dtype) : "?");
            if (t) {
                fputc('[', f);
                for (int d = 0; d < t->ndim; d++) fprintf(f, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
                fputc(']', f);
            }
            fprintf(f, " made by %s at %s:%d\n", by ? by : "a kiln call", file ? file : "?",
                    atomic_load_explicit(&s->created_line, memory_order_relaxed));
        }
        n++;
    }
    if (f && n > LEAK_LINES) fprintf(f, "  ... and %lld more tensors\n", (long long)(n - LEAK_LINES));
    return n;
}

static int64_t leak_count(FILE *f) {
    int64_t n = live_handles(f);
    int k = atomic_load(&n_reporters);
    for (int i = 0; i < k && i < MAX_REPORTERS; i++) n += reporters[i](f);
    return n;
}

int64_t kiln_leak_check(void) {
    int64_t n = leak_count(NULL);
    if (n > 0) {
        fprintf(stderr, "kiln: %lld live tensor handles and gradient containers:\n", (long long)n);
        leak_count(stderr);
    }
    return n;
}

/* KILN_LEAK_CHECK=1: at exit, what is still alive is reported and the process exits with
 * status 1, so a test that leaks fails. */
static void leak_at_exit(void) {
    if (leak_count(NULL) == 0) return;
    fflush(stdout);
    fprintf(stderr, "kiln: leak check (KILN_LEAK_CHECK=1) at exit:\n");
    kiln_leak_check();
    fflush(NULL);
    _exit(1);
}

static void leak_setup(void) {
    const char *v = getenv("KILN_LEAK_CHECK");
    if (v && *v && strcmp(v, "0") != 0) atexit(leak_at_exit);
}
