/* Random generators: a seed and a count of draws. Each call that takes a generator draws one
 * 64-bit seed from it (a hash of the generator's seed and the draw's number) and runs the
 * seeded Philox op with it, so a generator replays the same values for the same seed and the
 * same sequence of calls, whatever the thread count. The global generator serves NULL. */
#include <stdlib.h>

#include "kiln/tensor.h"
#include "ops/generator-impl.h"
#include "ops/ops-impl.h"

struct kiln_generator {
    _Atomic uint64_t seed;
    _Atomic uint64_t draws;
};

static kiln_generator global_gen; /* seed 0 until kiln_manual_seed */

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static _Thread_local kiln__draw_log *recording, *replaying;

kiln__draw_log *kiln__draw_log_record(kiln__draw_log *log) {
    kiln__draw_log *prev = recording;
    recording = log;
    return prev;
}

kiln__draw_log *kiln__draw_log_replay(kiln__draw_log *log) {
    kiln__draw_log *prev = replaying;
    replaying = log;
    return prev;
}

void kiln__draw_log_clear(kiln__draw_log *log) {
    if (!log) return;
    free(log->v);
    *log = (kiln__draw_log){0};
}

bool kiln__draw_replay(uint64_t *seed) {
    if (!replaying || replaying->next >= replaying->n) return false;
    *seed = replaying->v[replaying->next++];
    return true;
}

/* A log that cannot grow is marked lost: its owner reports that rather than replay other
 * seeds silently (autodiff/checkpoint.c). */
void kiln__draw_record(uint64_t seed) {
    kiln__draw_log *log = recording;
    if (!log || log->lost) return;
    if (log->n == log->cap) {
        size_t cap = log->cap ? log->cap * 2 : 8;
        uint64_t *grown = kiln__alloc_should_fail() ? NULL : realloc(log->v, sizeof *grown * cap);
        if (!grown) {
            log->lost = true;
            return;
        }
        log->v = grown;
        log->cap = cap;
    }
    log->v[log->n++] = seed;
}

uint64_t kiln__generator_draw(kiln_generator *g) {
    uint64_t seed;
    if (!kiln__draw_replay(&seed)) {
        if (!g) g = &global_gen;
        uint64_t k = atomic_fetch_add(&g->draws, 1);
        seed = splitmix64(splitmix64(atomic_load(&g->seed)) ^ splitmix64(~k));
    }
    kiln__draw_record(seed);
    return seed;
}

kiln_generator *kiln_generator_new(uint64_t seed) {
    kiln_generator *g = calloc(1, sizeof *g);
    if (g && !kiln__object_register(g, KILN__GENERATOR_KIND)) free(g), g = NULL;
    if (!g) {
        kiln__report(KILN_ERR_OUT_OF_MEMORY, "kiln_generator_new", "cannot allocate a generator");
        return NULL;
    }
    atomic_store(&g->seed, seed);
    return g;
}

void kiln_generator_free(kiln_generator *g) {
    if (!g || g == &global_gen || kiln__object_retire(g, KILN__GENERATOR_KIND, "kiln_generator_free") != KILN_OK) return;
    kiln__object_dispose(g, KILN__GENERATOR_KIND, "kiln_generator_free");
}

kiln_tensor kiln__generator_refused(const char *op, const kiln_generator *g, kiln_tensor consumed) {
    kiln_status st;
    const char *why = kiln__object_problem(g, KILN__GENERATOR_KIND, &st);
    if (kiln_is_valid(consumed)) kiln_release(consumed);
    KILN__OP_BEGIN(op);
    return kiln__result(&c, kiln__fail(&c, why ? st : KILN_ERR_INTERNAL, "%s", why ? why : "generator refused"));
}

void kiln_generator_manual_seed(kiln_generator *g, uint64_t seed) {
    if (g) KILN__OBJECT_OR_RETURN(g, KILN__GENERATOR_KIND, "kiln_generator_manual_seed");
    if (!g) g = &global_gen;
    atomic_store(&g->seed, seed);
    atomic_store(&g->draws, 0);
}

void kiln_manual_seed(uint64_t seed) { kiln_generator_manual_seed(NULL, seed); }

kiln_tensor kiln_rand_gen(kiln_generator *g, kiln_device dev, kiln_dtype dtype, kiln_shape shape) {
    if (g && !kiln__object_live(g, KILN__GENERATOR_KIND)) return kiln__generator_refused("kiln_rand_gen", g, KILN_NONE);
    const char *outer = kiln__op_scope_enter("kiln_rand_gen");
    kiln_tensor t = kiln_rand(dev, dtype, shape, kiln__generator_draw(g));
    kiln__op_scope_leave(outer);
    return t;
}

kiln_tensor kiln_randn_gen(kiln_generator *g, kiln_device dev, kiln_dtype dtype, kiln_shape shape) {
    if (g && !kiln__object_live(g, KILN__GENERATOR_KIND)) return kiln__generator_refused("kiln_randn_gen", g, KILN_NONE);
    const char *outer = kiln__op_scope_enter("kiln_randn_gen");
    kiln_tensor t = kiln_randn(dev, dtype, shape, kiln__generator_draw(g));
    kiln__op_scope_leave(outer);
    return t;
}
