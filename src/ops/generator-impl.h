/* The generator's draw, for the layers above that take a kiln_generator (dropout). */
#ifndef KILN_GENERATOR_IMPL_H
#define KILN_GENERATOR_IMPL_H

#include "kiln/tensor.h"

/* The next seed from g (NULL: the global generator); every call draws one. */
uint64_t kiln__generator_draw(kiln_generator *g);

/* The seeds a checkpointed region drew in its forward pass, so that its recomputation in
 * backward draws the same ones (dropout masks equal) without advancing any generator again,
 * as PyTorch restores the RNG state around a recomputation. Per thread: while a log records,
 * every draw (a generator's, or a module's own seed counter through kiln__draw_replay and
 * kiln__draw_record) is appended; while one replays, draws come from it in order (and from
 * the generators again once it runs out). */
typedef struct kiln__draw_log {
    uint64_t *v;
    size_t n, cap, next;
    bool lost; /* a seed could not be recorded (out of memory) */
} kiln__draw_log;
/* Make log the recording (NULL: none) / replaying one (from log->next on); each returns the
 * one it replaces. */
kiln__draw_log *kiln__draw_log_record(kiln__draw_log *log);
kiln__draw_log *kiln__draw_log_replay(kiln__draw_log *log);
void kiln__draw_log_clear(kiln__draw_log *log); /* frees what it holds */
/* For a seed made outside a generator: true and *seed the next replayed seed, or false. */
bool kiln__draw_replay(uint64_t *seed);
/* Appends seed to the recording log, if any. */
void kiln__draw_record(uint64_t seed);

/* A call with a generator that is not live (freed, not a generator): the error as op's poisoned
 * result; consumed (if a live handle) is released. */
kiln_tensor kiln__generator_refused(const char *op, const kiln_generator *g, kiln_tensor consumed);

#endif
