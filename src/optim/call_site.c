/* Call-site wrappers of kiln/optim.h's public calls, defined in this layer (api/call_site.h). */
#include "api/call_site.h"
#include "kiln/amp.h"
#include "kiln/optim.h"

KILN_OPTIM_API(KILN__AT_DEFINE)
KILN_AMP_API(KILN__AT_DEFINE)
KILN__FREE_AT_DEFINE(kiln_optimizer, optimizer_free)
