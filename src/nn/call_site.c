/* Call-site wrappers of kiln/nn.h's public calls, defined in this layer (api/call_site.h). */
#include "api/call_site.h"
#include "kiln/nn.h"

KILN_NN_API(KILN__AT_DEFINE)
KILN_NN_ROW_API(KILN__AT_DEFINE) /* the norms and losses (kiln/nn_ops.h, from ir/row_table.h) */
KILN_NN_LINALG_API(KILN__AT_DEFINE) /* attention, batch norm (kiln/linalg_ops.h, from ir/linalg_table.h) */
KILN__FREE_AT_DEFINE(kiln_module, module_free)
