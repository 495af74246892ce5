/* Call-site wrappers of kiln/nn.h's public calls, defined in this layer (api/call_site.h). */
#include "api/call_site.h"
#include "kiln/nn.h"

KILN_NN_API(KILN__AT_DEFINE)
KILN__FREE_AT_DEFINE(kiln_module, module_free)
