/* kiln data internals: the dataset record, per-sample randomness, shared helpers. */
#ifndef KILN_DATA_IMPL_H
#define KILN_DATA_IMPL_H

#include "core/core-impl.h"
#include "kiln/data.h"

struct kiln_dataset {
    kiln_dataset_desc desc;
    void *ctx;
    int64_t input_numel, target_numel;
    size_t input_bytes, target_bytes; /* of one sample */
};

#define KILN__DATA_MSG 400 /* room for one sample's error message */

/* Calls ds's get() for a sample (index in range) on a cleared last error. On failure the
 * thread's last error describes it (get's own message, or the status it returned) and the
 * result is a negative status. */
kiln_status kiln__fetch_checked(const kiln_dataset *ds, int64_t index, void *input, void *target, uint64_t seed);
/* Copies the thread's last error into buf: the detail of a failed kiln__fetch_checked. */
void kiln__fetch_error(char *buf, size_t size);

/* ---- counter-based randomness: pure functions of their arguments, so any thread can draw
 * the number of any sample of any epoch without shared generator state ------------------- */
static inline uint64_t kiln__mix64(uint64_t x) { /* SplitMix64's finaliser */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static inline uint64_t kiln__hash3(uint64_t a, uint64_t b, uint64_t c) {
    return kiln__mix64(kiln__mix64(kiln__mix64(a) ^ b) ^ c);
}

/* Uniform integer in [0, n) from 64 random bits (bias below n / 2^64). */
static inline uint64_t kiln__below(uint64_t bits, uint64_t n) {
    return (uint64_t)(((unsigned __int128)bits * n) >> 64);
}

/* The seed get() receives for sample `index` in `epoch` of a loader seeded with `seed`. */
static inline uint64_t kiln__sample_seed(uint64_t seed, int64_t epoch, int64_t index) {
    return kiln__hash3(seed ^ 0x5a4d504c45ull /* "SMPLE" */, (uint64_t)epoch, (uint64_t)index);
}

/* Fills order[0..n) with a permutation of 0..n-1: Fisher-Yates driven by (seed, epoch), so the
 * same seed and epoch always give the same order. */
void kiln__shuffle_order(int64_t *order, int64_t n, uint64_t seed, int64_t epoch);

/* A dataset around ctx for the data layer's own kinds; `op` names the constructor in errors.
 * On failure frees ctx through desc.free and returns NULL with the last error set. */
kiln_dataset *kiln__dataset_make(const char *op, kiln_dataset_desc desc, void *ctx);

#endif
