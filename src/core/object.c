/* The registry of the objects a user frees (modules, optimizers, loaders, datasets, gradient
 * sets, generators, metrics, tokenizers, transactions, BERT models, DDP wrappers): what makes a
 * use after free or a double free a reported error, never undefined behaviour.
 *
 * Design. The public types stay C pointers (an API that returns `kiln_module *`); what changes
 * is that kiln never dereferences one it was handed before checking it:
 * - every object, when made, enters a set of live pointers with its kind ("kiln_module");
 * - every public entry point asks the set first (kiln__object_problem): a pointer that is not
 *   live, or is live with another kind, is refused with a status and a message naming the
 *   public call, its file:line, the object's kind and, when known, where it was freed
 *   ("kiln_module_forward at app.c:20: this kiln_module was freed by kiln_module_free at
 *   app.c:18");
 * - the free functions leave the set first (kiln__object_retire): a second free finds nothing
 *   live and is refused the same way. The freed struct's memory is not given back to malloc at
 *   once: it waits in a ring of the last QUARANTINE frees, which also keeps where each was
 *   freed. While it waits, malloc cannot hand the same address to a new object, so a stale
 *   pointer names its free exactly; afterwards it is still refused ("not a live kiln_module")
 *   unless a new object of the same kind got the same address, when it names that object (a
 *   defined result, never a wild read). Tensor handles avoid even that with a generation in
 *   the handle's value; these are pointers in the public API, so a generation would mean
 *   changing every type.
 * Cost: 16 bytes per live object in an open-addressed table (at most half full), and the
 * ring: QUARANTINE entries of 40 bytes plus the struct memory of the objects in it (the structs
 * only: their tensors and buffers are freed at once), together well under 1 MB. One mutex
 * round trip per checked call (tens of ns; these are calls such as a module's forward or an
 * optimizer's step, each far costlier). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core-impl.h"

#define QUARANTINE 256

typedef struct {
    const void *obj; /* NULL: empty */
    const char *kind;
} live_slot;

typedef struct {
    void *obj;
    const char *kind, *freed_by, *file;
    int line;
} freed_entry;

static struct {
    pthread_mutex_t lock;
    live_slot *slots;
    size_t cap, n; /* cap: a power of two, or 0 */
    freed_entry ring[QUARANTINE];
    size_t ring_next;
} reg = {.lock = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local char problem[256];

static size_t slot_of(const void *obj, size_t cap) {
    uint64_t h = (uint64_t)(uintptr_t)obj * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (cap - 1);
}

/* The slot holding obj, or the empty slot where it would go (reg.lock held, cap > 0). */
static size_t find_slot(const void *obj) {
    size_t i = slot_of(obj, reg.cap);
    while (reg.slots[i].obj && reg.slots[i].obj != obj) i = (i + 1) & (reg.cap - 1);
    return i;
}

static bool grow_locked(void) {
    size_t cap = reg.cap ? reg.cap * 2 : 64;
    live_slot *slots = calloc(cap, sizeof *slots);
    if (!slots) return false;
    live_slot *old = reg.slots;
    size_t old_cap = reg.cap;
    reg.slots = slots;
    reg.cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].obj) reg.slots[find_slot(old[i].obj)] = old[i];
    free(old);
    return true;
}

bool kiln__object_register(const void *obj, const char *kind) {
    if (!obj) return false;
    pthread_mutex_lock(&reg.lock);
    bool ok = (reg.n + 1) * 2 <= reg.cap || grow_locked();
    if (ok) {
        size_t i = find_slot(obj);
        if (!reg.slots[i].obj) reg.n++;
        reg.slots[i] = (live_slot){obj, kind};
    }
    pthread_mutex_unlock(&reg.lock);
    return ok;
}

/* Removes slot i, moving later members of its probe run back so lookups stay unbroken. */
static void remove_slot_locked(size_t i) {
    size_t mask = reg.cap - 1, j = i;
    reg.slots[i].obj = NULL;
    for (;;) {
        j = (j + 1) & mask;
        if (!reg.slots[j].obj) break;
        size_t home = slot_of(reg.slots[j].obj, reg.cap);
        /* j's entry may move to i when its home is not in the (cyclic) range (i, j] */
        if ((i < j) ? (home <= i || home > j) : (home <= i && home > j)) {
            reg.slots[i] = reg.slots[j];
            reg.slots[j].obj = NULL;
            i = j;
        }
    }
    reg.n--;
}

static const freed_entry *freed_locked(const void *obj) {
    for (size_t k = 0; k < QUARANTINE; k++) {
        const freed_entry *e = &reg.ring[(reg.ring_next + QUARANTINE - 1 - k) % QUARANTINE];
        if (e->obj == obj) return e; /* (the newest first) */
    }
    return NULL;
}

/* Writes why obj is not a live `kind` into problem (reg.lock held); NULL when it is. */
static const char *problem_locked(const void *obj, const char *kind, const char *misuse, kiln_status *status) {
    *status = KILN_ERR_STALE_HANDLE;
    if (!obj) {
        *status = KILN_ERR_NULL;
        snprintf(problem, sizeof problem, "the %s is NULL", kind);
        return problem;
    }
    if (reg.cap) {
        const live_slot *s = &reg.slots[find_slot(obj)];
        if (s->obj && strcmp(s->kind, kind) == 0) return NULL;
        if (s->obj) {
            *status = KILN_ERR_INVALID_ARGUMENT;
            snprintf(problem, sizeof problem, "the pointer passed as a %s is a %s", kind, s->kind);
            return problem;
        }
    }
    const freed_entry *e = freed_locked(obj);
    if (e && e->file)
        snprintf(problem, sizeof problem, "this %s was freed by %s at %s:%d (%s)", e->kind, e->freed_by, e->file,
                 e->line, misuse);
    else if (e)
        snprintf(problem, sizeof problem, "this %s was freed by %s (%s)", e->kind, e->freed_by, misuse);
    else
        snprintf(problem, sizeof problem, "not a live %s: freed earlier, or not made by kiln (%s?)", kind, misuse);
    return problem;
}

const char *kiln__object_problem(const void *obj, const char *kind, kiln_status *status) {
    pthread_mutex_lock(&reg.lock);
    const char *why = problem_locked(obj, kind, "use after free", status);
    pthread_mutex_unlock(&reg.lock);
    return why;
}

/* Reports why for op: at the caller's file:line when that is op's own (a call without a
 * call-site wrapper would otherwise show the line of an earlier call). */
static kiln_status report_for(kiln_status st, const char *op, const char *why) {
    kiln__site saved = kiln__call_site();
    if (saved.op && strcmp(saved.op, op) != 0) kiln__site_now.file = NULL;
    kiln_status r = kiln__report(st, op, "%s", why);
    kiln__site_now = saved;
    return r;
}

kiln_status kiln__object_check(const void *obj, const char *kind, const char *op) {
    kiln_status st;
    const char *why = kiln__object_problem(obj, kind, &st);
    return why ? report_for(st, op, why) : KILN_OK;
}

bool kiln__object_live(const void *obj, const char *kind) {
    kiln_status st;
    return obj && !kiln__object_problem(obj, kind, &st);
}

kiln_status kiln__object_retire(const void *obj, const char *kind, const char *op) {
    pthread_mutex_lock(&reg.lock);
    kiln_status st;
    const char *why = problem_locked(obj, kind, "double free", &st);
    if (!why) remove_slot_locked(find_slot(obj));
    pthread_mutex_unlock(&reg.lock);
    return why ? report_for(st, op, why) : KILN_OK;
}

void kiln__object_dispose(void *obj, const char *kind, const char *op) {
    if (!obj) return;
    kiln__site site = kiln__call_site();
    if (site.op && strcmp(site.op, op) != 0) site.file = NULL; /* (an earlier call's line: not where it was freed) */
    pthread_mutex_lock(&reg.lock);
    freed_entry *e = &reg.ring[reg.ring_next];
    void *evicted = e->obj;
    *e = (freed_entry){obj, kind, op, site.file, site.line};
    reg.ring_next = (reg.ring_next + 1) % QUARANTINE;
    pthread_mutex_unlock(&reg.lock);
    free(evicted);
}
