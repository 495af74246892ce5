/* Call-site wrappers of the public calls at or below the API layer: core, engine, tensor ops
 * and autodiff. nn, optim, data and train define theirs in their own folders. */
#include "api/call_site.h"
#include "kiln/autocast.h"
#include "kiln/autodiff.h"
#include "kiln/engine.h"
#include "kiln/tensor.h"

KILN_CORE_API(KILN__AT_DEFINE)
KILN_ENGINE_API(KILN__AT_DEFINE, KILN__AT_DEFINE0)
KILN_TENSOR_API(KILN__AT_DEFINE)
KILN_OPS_API(KILN__AT_DEFINE)
KILN_TENSOR_MORE_API(KILN__AT_DEFINE)
KILN_LINALG_API(KILN__AT_DEFINE) /* matmul ... conv2d (kiln/linalg_ops.h, from ir/linalg_table.h) */
KILN_RANDOM_API(KILN__AT_DEFINE)
KILN_AUTODIFF_API(KILN__AT_DEFINE)
KILN_AUTOCAST_API(KILN__AT_DEFINE, KILN__AT_DEFINE0)
KILN__FREE_AT_DEFINE(kiln_grads, grads_free)
KILN__FREE_AT_DEFINE(kiln_transaction, transaction_free)
KILN__FREE_AT_DEFINE(kiln_generator, generator_free)
