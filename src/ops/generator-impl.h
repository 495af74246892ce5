/* The generator's draw, for the layers above that take a kiln_generator (dropout). */
#ifndef KILN_GENERATOR_IMPL_H
#define KILN_GENERATOR_IMPL_H

#include "kiln/tensor.h"

/* The next seed from g (NULL: the global generator); every call draws one. */
uint64_t kiln__generator_draw(kiln_generator *g);

#endif
