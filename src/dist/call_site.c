/* Call-site wrappers of kiln/dist.h's public calls, defined in this layer (api/call_site.h). */
#include "api/call_site.h"
#include "kiln/dist.h"

KILN_DIST_API(KILN__AT_DEFINE)
KILN__FREE_AT_DEFINE(kiln_ddp, ddp_free)
