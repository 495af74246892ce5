/* The generator's draw, for the layers above that take a kiln_generator (dropout). */
#ifndef KILN_GENERATOR_IMPL_H
#define KILN_GENERATOR_IMPL_H

#include "kiln/tensor.h"

/* The next seed from g (NULL: the global generator); every call draws one. */
uint64_t kiln__generator_draw(kiln_generator *g);

/* A call with a generator that is not live (freed, not a generator): the error as op's poisoned
 * result; consumed (if a live handle) is released. */
kiln_tensor kiln__generator_refused(const char *op, const kiln_generator *g, kiln_tensor consumed);

#endif
