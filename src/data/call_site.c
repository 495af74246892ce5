/* Call-site wrappers of kiln/data.h's public calls, defined in this layer (api/call_site.h). */
#include "api/call_site.h"
#include "kiln/data.h"

KILN_DATA_API(KILN__AT_DEFINE)
KILN__FREE_AT_DEFINE(kiln_dataset, dataset_free)
KILN__FREE_AT_DEFINE(kiln_loader, loader_free)
