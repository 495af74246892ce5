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

/* Takes up to cap free slots under the lock (oldest freed first, else never used ones, within
 * one chunk); returns how many, 0 when the table is full or out of memory. */
static uint32_t slots_take(uint32_t *out, uint32_t cap) {
    uint32_t n = 0;
    pthread_mutex_lock(&freelist.lock);
    while (n < cap && freelist.n_free > REUSE_DELAY) {
        freelist.n_free--;
        uint32_t idx = freelist.head - 1;
        freelist.head = slot_at(idx)->next_free;
        if (!freelist.head) freelist.tail = 0;
        out[n++] = idx;
    }
    uint32_t idx = freelist.used;
    if (n == 0 && (idx >> CHUNK_BITS) < MAX_CHUNKS) {
        bool have = atomic_load_explicit(&chunks[idx >> CHUNK_BITS], memory_order_relaxed) != NULL;
        if (!have) {
            slot *c = calloc(CHUNK_SIZE, sizeof(slot));
            if (c) atomic_store_explicit(&chunks[idx >> CHUNK_BITS], c, memory_order_release);
            have = c != NULL;
        }
        uint32_t left = CHUNK_SIZE - (idx & (CHUNK_SIZE - 1)); /* (the chunk's rest) */
        for (; have && n < cap && n < left; n++) out[n] = idx + n;
        freelist.used += n;
    }
    pthread_mutex_unlock(&freelist.lock);
    return n;
}

/* Appends n freed slots to the FIFO under one lock. */
static void slots_give(const uint32_t *idx, uint32_t n) {
    if (n == 0) return;
    pthread_mutex_lock(&freelist.lock);
    for (uint32_t i = 0; i < n; i++) {
        slot_at(idx[i])->next_free = 0;
        if (freelist.tail)
            slot_at(freelist.tail - 1)->next_free = idx[i] + 1;
        else
            freelist.head = idx[i] + 1;
        freelist.tail = idx[i] + 1;
    }
    freelist.n_free += n;
    pthread_mutex_unlock(&freelist.lock);
}

/* Each thread takes free slots and gives back freed ones a batch at a time, so making and
 * consuming a handle takes no lock (two per op before: a tenth of the dispatch time). A freed
 * slot waits in its thread's batch before it joins the FIFO, which only lengthens its reuse
 * delay. The batches go back to the FIFO when the thread exits. */
#define LOCAL_SLOTS 64

typedef struct {
    uint32_t n_taken, next_taken, n_freed;
    bool registered;
    bool leak_ready; /* leak_setup has run (here rather than in a thread-local of its own: in a
                      * shared library each thread-local is a call to find it) */
    uint32_t taken[LOCAL_SLOTS], freed[LOCAL_SLOTS];
} local_slots;

static _Thread_local local_slots local;
static pthread_key_t local_key;
static pthread_once_t local_once = PTHREAD_ONCE_INIT;

static void local_exit(void *arg) {
    local_slots *l = arg;
    slots_give(l->taken + l->next_taken, l->n_taken - l->next_taken);
    slots_give(l->freed, l->n_freed);
    l->n_taken = l->next_taken = l->n_freed = 0;
    /* a later thread-exit destructor that frees a handle registers again (POSIX runs the
     * destructors again for a key set during exit), rather than batching into a dead list */
    l->registered = false;
}

static void local_key_create(void) { pthread_key_create(&local_key, local_exit); }

static void local_register(void) {
    pthread_once(&local_once, local_key_create);
    local.registered = pthread_setspecific(local_key, &local) == 0;
}

/* This thread's `local`, found once: in a shared library (the Python extension) each access of a
 * thread-local after a call is another call of __tls_get_addr, which the compiler repeats rather
 * than keep the address (four per handle made: callgrind); the empty asm hides where the pointer
 * came from, so it is kept in a register. */
static inline local_slots *local_get(void) {
    local_slots *l = &local;
    __asm__("" : "+r"(l));
    return l;
}


static bool slot_alloc(local_slots *l, uint32_t *out) {
    if (KILN__UNLIKELY(l->next_taken == l->n_taken)) {
        /* (unregistered, a thread would take one slot at a time: none is left behind at exit) */
        if (!l->registered) local_register();
        l->next_taken = 0;
        l->n_taken = slots_take(l->taken, l->registered ? LOCAL_SLOTS : 1);
        if (l->n_taken == 0) return false;
    }
    *out = l->taken[l->next_taken++];
    return true;
}

static void slot_free(local_slots *l, uint32_t idx) {
    if (KILN__UNLIKELY(!l->registered)) local_register();
    if (KILN__UNLIKELY(!l->registered)) {
        slots_give(&idx, 1);
        return;
    }
    l->freed[l->n_freed++] = idx;
    if (l->n_freed == LOCAL_SLOTS) {
        slots_give(l->freed, l->n_freed);
        l->n_freed = 0;
    }
}

uint32_t kiln__handle_slots_outstanding(void) {
    pthread_mutex_lock(&freelist.lock);
    uint32_t n = freelist.used - freelist.n_free;
    pthread_mutex_unlock(&freelist.lock);
    return n;
}

void kiln__handle_fork_lock(bool lock) {
    if (lock)
        pthread_mutex_lock(&freelist.lock);
    else
        pthread_mutex_unlock(&freelist.lock);
}

static void fork_prepare(void) {
    kiln__alloc_fork_lock(true);
    kiln__counts_fork_lock(true);
    kiln__handle_fork_lock(true);
}

static void fork_done(void) { /* parent and child alike: the forking thread holds them all */
    kiln__handle_fork_lock(false);
    kiln__counts_fork_lock(false);
    kiln__alloc_fork_lock(false);
}

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void fork_register(void) { pthread_atfork(fork_prepare, fork_done, fork_done); }
void kiln__core_fork_guard(void) { pthread_once(&fork_once, fork_register); }

static pthread_once_t leak_once = PTHREAD_ONCE_INIT;
static void leak_setup(void);

kiln_tensor kiln__handle_new(kiln__tensor *t) {
    local_slots *l = local_get();
    /* (pthread_once's own check is a call per handle) */
    if (KILN__UNLIKELY(!l->leak_ready)) pthread_once(&leak_once, leak_setup), l->leak_ready = true;
    uint32_t idx;
    if (kiln__alloc_should_fail() || !slot_alloc(l, &idx)) {
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
        bool same_line = file && site.file && line == site.line && strcmp(file, site.file) == 0;
        if (same_line && strcmp(by, op) == 0) /* a call that remembers no more handles (a long list) */
            return kiln__error_new(KILN_ERR_STALE_HANDLE, op, site.file, site.line, 0,
                                   "the same tensor handle is passed twice to %s, which consumed it at the first "
                                   "(pass kiln_ref(t) for all uses but one)", op);
        if (same_line) /* kiln_add(kiln_ref(x), f(x)): the arguments ran in another order than written */
            return kiln__error_new(KILN_ERR_STALE_HANDLE, op, site.file, site.line, 0,
                                   "tensor handle was consumed by %s in the same statement (%s:%d) before %s could "
                                   "use it: C evaluates a call's arguments in no fixed order, so take kiln_ref(t) "
                                   "in a statement of its own before the call",
                                   by, file, line, op);
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
            slot_free(local_get(), (uint32_t)h.id - 1);
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
    if (kiln__env_flag("KILN_LEAK_CHECK", false)) atexit(leak_at_exit);
}
